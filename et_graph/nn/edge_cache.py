"""A layer's memory of the last graph it saw, for full-batch training on one fixed graph."""
from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

import torch
from torch import Tensor

__all__ = ["EdgeCache", "clear_graph_caches"]


class EdgeCache:
    """What a layer derived from the last graph it saw (validated and sorted edges, a
    normalised adjacency), kept while the same tensors come again.

    Full-batch training passes one ``edge_index`` every epoch and every evaluation; validating
    it, dropping its self-loops and sorting it for the fused kernel each time is a sizeable
    share of a training step on Tolokers. An entry is reused only for the very same tensor
    objects (held by weak reference) at the same version counters (an in-place change bumps
    them), node count and device. A write the counter does not see (through ``.data`` or a
    shared NumPy buffer) needs :meth:`clear`. Copies and pickles of a layer start empty.
    """

    def __init__(self) -> None:
        self._entry: Optional[tuple[tuple[weakref.ref, ...], tuple, Any]] = None

    @staticmethod
    def _key(tensors: tuple[Tensor, ...], num_nodes: int) -> Optional[tuple]:
        if not all(isinstance(t, Tensor) and t.layout == torch.strided and not t.is_inference()
                   for t in tensors):
            return None  # sparse inputs are converted anew; inference tensors have no version
        return (num_nodes, *((t._version, t.device) for t in tensors))

    def get(self, tensors: tuple[Tensor, ...], num_nodes: int) -> Any:
        """The value stored for these tensors, or ``None``."""
        entry, key = self._entry, self._key(tensors, num_nodes)
        if entry is None or key is None or entry[1] != key:
            return None
        if any(ref() is not t for ref, t in zip(entry[0], tensors)):
            return None
        return entry[2]

    def put(self, tensors: tuple[Tensor, ...], num_nodes: int, value: Any) -> None:
        key = self._key(tensors, num_nodes)
        if torch.is_inference_mode_enabled():
            # What is built under inference mode is made of inference tensors, which a later
            # training call could not save for backward (a validation pass under
            # inference_mode broke the next training step with learnable edge weights).
            key = None
        self._entry = None if key is None else (tuple(map(weakref.ref, tensors)), key, value)

    def fetch(self, tensors: tuple[Tensor, ...], num_nodes: int, build: Callable[[], Any],
              reusable: Optional[Callable[[Any], bool]] = None) -> Any:
        """The value kept for these tensors if there is one and ``reusable(value)`` holds (it
        may need more than was built last time); else ``build()``, kept and returned."""
        value = self.get(tensors, num_nodes)
        if value is None or (reusable is not None and not reusable(value)):
            value = build()
            self.put(tensors, num_nodes, value)
        return value

    def clear(self) -> None:
        self._entry = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_entry": None}


def clear_graph_caches(module: torch.nn.Module) -> None:
    """Empty every :class:`EdgeCache` of ``module``'s layers: what they derived from the last
    graph (sorted edges, the graph itself, a graph-sized sparse operator) would otherwise stay
    in memory as long as the module does, e.g. in a fitted detector after scoring."""
    for layer in module.modules():
        for value in vars(layer).values():
            if isinstance(value, EdgeCache):
                value.clear()
