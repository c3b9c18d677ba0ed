"""Where a library warning should point: the user's line, not the library's.

A fixed ``stacklevel`` is right for one call path only: ``decision_function`` and ``predict``
reach a check through different numbers of frames, and decorators such as ``torch.no_grad``
add their own, so a warning named ``torch/utils/_contextlib.py`` instead of the caller.
"""
from __future__ import annotations

import sys
from types import FrameType
from typing import Optional

__all__ = ["user_stacklevel"]

# (contextlib and functools: the frames of a context manager or a wrapper inside them)
_LIBRARIES = ("et_graph", "torch", "torch_geometric", "contextlib", "functools")


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the calling function that names the first
    frame outside et-graph, torch and PyG (1 when there is none)."""
    frame: Optional[FrameType] = sys._getframe(1)  # the function calling warnings.warn: 1
    level = 1
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if level > 1 and module.split(".")[0] not in _LIBRARIES:
            return level
        frame = frame.f_back
        level += 1
    return 1
