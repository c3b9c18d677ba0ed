"""Node-level anomaly baseline networks (MLP, GCN, GAT), two hidden layers deep by default.

Each returns one anomaly logit per node from ``forward(x, edge_index)``, so that the detectors
of :mod:`et_graph.detectors` train them exactly like ET (same loss, same engine, same threshold
selection, same checkpoint rule). The tree baseline is :class:`et_graph.detectors.GBTDetector`.
"""
from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import scatter

from ..nn.edge_cache import EdgeCache
from ..transforms.neighbourhood import in_edges_without_self_loops


def check_layers(layers: int) -> int:
    """``layers``, the number of hidden layers before the linear head, if it is an integer
    ``>= 1``."""
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers must be an integer >= 1, got {layers!r}")
    return layers


def _input_widths(in_channels: int, hidden_channels: int, layers: int) -> list[int]:
    """The input width of each of ``layers`` stacked layers of width ``hidden_channels``."""
    return [in_channels] + [hidden_channels] * (check_layers(layers) - 1)


def _rename_two_layer_keys(module: nn.Module, state_dict: dict, prefix: str, *args: Any,
                           **kwargs: Any) -> None:
    """Load state dicts written when the networks had exactly two layers, named ``conv1`` and
    ``conv2`` (now ``convs.0`` and ``convs.1``)."""
    for index, old in enumerate(("conv1.", "conv2.")):
        for key in [k for k in state_dict if k.startswith(prefix + old)]:
            new_key = f"{prefix}convs.{index}.{key[len(prefix + old):]}"
            state_dict.setdefault(new_key, state_dict.pop(key))


class MLPNet(nn.Module):
    """``layers`` (default two) hidden layers on the node features alone (ignores the graph),
    each linear, ReLU and dropout, then a linear head."""

    def __init__(self, in_channels: int, hidden_channels: int = 64, dropout: float = 0.0,
                 layers: int = 2) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        for width in _input_widths(in_channels, hidden_channels, layers):
            blocks += [nn.Linear(width, hidden_channels), nn.ReLU(), nn.Dropout(dropout)]
        self.net = nn.Sequential(*blocks, nn.Linear(hidden_channels, 1))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.net(x).squeeze(-1)


class _StackedGNN(nn.Module):
    """Message-passing layers ``convs`` (set by subclasses) with ReLU and dropout, then a linear
    head to one logit per node. State dicts of the two-layer versions (``conv1``, ``conv2``)
    still load."""

    convs: nn.ModuleList
    # (set by subclasses)
    dropout: nn.Dropout
    head: nn.Linear

    def __init__(self) -> None:
        super().__init__()
        # (the public register_load_state_dict_pre_hook exists from torch 2.5; this form,
        # which it calls, in every torch the package allows)
        self._register_load_state_dict_pre_hook(_rename_two_layer_keys, with_module=True)

    def __setstate__(self, state: dict) -> None:
        # A detector saved (pickled whole) when the networks had exactly two layers holds
        # them as conv1 and conv2, and no key-renaming hook: it scores as before.
        super().__setstate__(state)
        modules = self._modules
        if "convs" not in modules and "conv1" in modules:
            # (a pickled network's layers, never None)
            legacy = cast("list[nn.Module]", [modules.pop("conv1"), modules.pop("conv2")])
            self.convs = nn.ModuleList(legacy)
            self._register_load_state_dict_pre_hook(_rename_two_layer_keys, with_module=True)

    def layer_inputs(self, x: Tensor, edge_index: Tensor) -> tuple[Tensor, ...]:
        """What each layer takes besides its input tokens."""
        return (edge_index,)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        inputs = self.layer_inputs(x, edge_index)
        h = x
        for conv in self.convs:
            h = self.dropout(torch.relu(conv(h, *inputs)))
        return self.head(h).squeeze(-1)


class GCNNet(_StackedGNN):
    """``layers`` (default two) GCN layers (symmetric normalisation with self-loops) and a
    linear head.

    The normalised adjacency is computed once per graph and reused while the same
    ``edge_index`` tensor comes back (the same object at the same version counter, and the
    same node count: :class:`~et_graph.nn.edge_cache.EdgeCache`), so full-batch training does
    not renormalise a million edges every epoch, and another graph (inductive scoring, a
    subgraph, a new mini-batch in a freed batch's memory) is never scored with a stale
    adjacency.
    """

    def __init__(self, in_channels: int, hidden_channels: int = 64, dropout: float = 0.0,
                 layers: int = 2) -> None:
        super().__init__()
        # (the layers are created before the head, as in the two-layer version, so that a
        # seed initialises the same weights)
        self.convs = nn.ModuleList(
            GCNConv(width, hidden_channels, normalize=False)
            for width in _input_widths(in_channels, hidden_channels, layers))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_channels, 1)
        self._cache = EdgeCache()

    def normalized_adjacency(self, edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
        return self._cache.fetch((edge_index,), num_nodes,
                                 lambda: gcn_norm(edge_index, None, num_nodes, add_self_loops=True))

    def layer_inputs(self, x: Tensor, edge_index: Tensor) -> tuple[Tensor, ...]:
        index, weight = self.normalized_adjacency(edge_index, x.size(0))
        # (gcn_norm makes its weights in the default dtype, which a process may have changed
        # since the fit: float64 weights failed against float32 features)
        return index, weight.to(x.dtype)


class GATNet(_StackedGNN):
    """``layers`` (default two) GAT layers (PyG ``GATConv``, concatenated heads) and a linear
    head."""

    def __init__(
        self, in_channels: int, hidden_channels: int = 64, heads: int = 4, dropout: float = 0.0,
        layers: int = 2,
    ) -> None:
        if hidden_channels % heads:
            raise ValueError("hidden_channels must be divisible by heads")
        super().__init__()
        # (the head before the layers, as in the two-layer version: the same weights per seed)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_channels, 1)
        self.convs = nn.ModuleList(
            GATConv(width, hidden_channels // heads, heads=heads)
            for width in _input_widths(in_channels, hidden_channels, layers))


def mean_neighbours(x: Tensor, edge_index: Tensor, self_loops: bool = False) -> Tensor:
    """Mean of the in-neighbours' features (zero for isolated nodes). Self-loops are ignored
    (a node is not its own neighbour, as in ET's attention) unless ``self_loops``; duplicates
    are counted."""
    src, dst = ((edge_index[0], edge_index[1]) if self_loops
                else in_edges_without_self_loops(edge_index))
    return scatter(x[src], dst, dim=0, dim_size=x.size(0), reduce="mean")
