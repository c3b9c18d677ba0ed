"""Spot an ET layer run once per relation by PyG's heterogeneous wrappers.

PyG's ``HeteroConv`` and ``to_hetero`` call one copy of a layer per edge type and add up (or
average) the outputs that share a destination node type. For a message-passing layer those
outputs are aggregated messages, and their sum is one layer over all relations. An ET layer's
output is the token state after descent, so the sum counts every token once per relation: with
three relations on YelpChi's one node type, ``3 * x`` before any step. The layer cannot see the
wrapper from its arguments, so it looks at its caller's frame (by code object first, which costs
no more than a few attribute reads per call).
"""
from __future__ import annotations

import functools
import sys
import warnings
from types import FrameType
from typing import Optional

import torch
from torch import nn

from ..exceptions import ConfigWarning

__all__ = ["check_relation_wrappers"]

# How far up the stack the wrapper is looked for. Each module between the wrapper and the
# layer adds three or four frames (Module.__call__'s two, its forward, and the layer's
# precision wrapper); an audit found a layer two modules deep, Block(Wrap(ETConv)), summed
# without a word when this was 8. Walking all 64 frames costs about 10 microseconds per
# call (2 cores, AMD EPYC), against milliseconds for one descent of a small graph.
_FRAMES_UP = 64
# From the wrapper's forward up to the code that called the wrapper (Module.__call__'s two
# frames; a torch.fx GraphModule adds its own __call__ and call_wrapped).
_TO_CALLER = {False: 3, True: 5}


@functools.lru_cache(maxsize=1)
def _hetero_conv_forward() -> Optional[object]:
    try:
        from torch_geometric.nn import HeteroConv
    except ImportError:  # pragma: no cover - PyG is a dependency
        return None
    return HeteroConv.forward.__code__


def _edge_types_beside(owner: nn.Module, module: nn.Module,
                       from_fx: bool) -> Optional[tuple[tuple[str, ...], list[tuple[str, ...]]]]:
    """(this copy's edge type, every edge type of its wrapper) or None when not found."""
    if not from_fx:  # HeteroConv: convs is PyG's ModuleDict, keyed by edge-type tuples
        items = list(getattr(owner, "convs", {}).items())
        types = [tuple(key) if isinstance(key, tuple) else tuple(str(key).split("__"))
                 for key, _ in items]
        mine = [edge_type for edge_type, (_, conv) in zip(types, items) if _holds(conv, module)]
        return (mine[0], types) if mine else None
    # to_hetero: each layer became an nn.ModuleDict of copies keyed "src__rel__dst"
    for child in owner.modules():
        if isinstance(child, nn.ModuleDict) and any(_holds(sub, module)
                                                    for sub in child.values()):
            types = [tuple(key.split("__")) for key in child.keys()]
            if any(len(edge_type) != 3 for edge_type in types):
                return None  # a ModuleDict of the user's own, not to_hetero's copies
            mine = [edge_type for edge_type, sub in zip(types, child.values())
                    if _holds(sub, module)]
            return mine[0], types
    return None


def _holds(container: nn.Module, module: nn.Module) -> bool:
    """``module`` is ``container`` or one of its submodules (a layer inside a wrapped model)."""
    return any(sub is module for sub in container.modules())


def _wrapper_frame(start: Optional[FrameType]) -> Optional[tuple[FrameType, bool, int]]:
    """The wrapper's frame, whether it is torch.fx code, and its distance from ``start``."""
    hetero_conv = _hetero_conv_forward()
    frame = start
    for distance in range(_FRAMES_UP):
        if frame is None:
            return None
        code = frame.f_code
        if code is hetero_conv:
            return frame, False, distance
        if code.co_filename.startswith("<eval_with_key>"):  # torch.fx generated code
            return frame, True, distance
        frame = frame.f_back
    return None


def check_relation_wrappers(module: nn.Module, relational: bool = False) -> None:
    """Warn when ``module`` runs as one of several relations into one node type under
    ``HeteroConv`` or ``to_hetero``; with ``relational`` (a layer that takes every relation
    itself), refuse any such wrapper."""
    if torch.jit.is_scripting() or torch.compiler.is_compiling():
        return
    found = _wrapper_frame(sys._getframe(2))
    if found is None:
        return
    frame, from_fx, distance = found
    owner = frame.f_locals.get("self")
    if not isinstance(owner, nn.Module):
        return
    name = type(module).__name__
    # (torch.fx code that is not to_hetero's holds no per-edge-type copies: placed is None)
    placed = _edge_types_beside(owner, module, from_fx)
    if placed is None:
        return
    if relational:
        raise ValueError(
            f"{name} takes every relation in one call (edge_index with edge_type), but PyG's "
            f"{'to_hetero' if from_fx else 'HeteroConv'} calls one copy of it per edge type. "
            f"Run it on data.to_homogeneous(), whose edge_type numbers the relations")
    if not from_fx and getattr(owner, "aggr", "sum") in (None, "cat"):
        return  # nothing summed: the outputs are stacked or concatenated, as asked
    mine, types = placed
    sharing = [edge_type for edge_type in types if edge_type[-1:] == mine[-1:]]
    if len(sharing) > 1:
        warnings.warn(
            f"{'to_hetero' if from_fx else 'HeteroConv'} runs one {name} per relation into "
            f"node type {mine[-1]!r} ({len(sharing)} relations: "
            f"{', '.join('__'.join(t) for t in sharing)}) and adds up (or averages) their "
            f"outputs. An ET layer's output is the token state after its descent, not "
            f"aggregated messages, so a sum counts every token once per relation and no "
            f"descent sees the other relations. For one energy over all relations use "
            f"RelationalETConv on data.to_homogeneous()", ConfigWarning,
            # stacklevel 1 is this function and 3 the frame _getframe(2) started from
            stacklevel=3 + distance + _TO_CALLER[from_fx])
