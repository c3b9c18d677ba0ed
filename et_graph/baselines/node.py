"""Node-level anomaly baseline networks (MLP, GCN, GAT).

Each returns one anomaly logit per node from ``forward(x, edge_index)``, so that the detectors
of :mod:`et_graph.detectors` train them exactly like ET (same loss, same engine, same threshold
selection, same checkpoint rule). The tree baseline is :class:`et_graph.detectors.GBTDetector`.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import scatter

from ..nn.edge_cache import EdgeCache
from ..transforms.neighbourhood import in_edges_without_self_loops


class MLPNet(nn.Module):
    """Two-layer perceptron on the node features alone (ignores the graph)."""

    def __init__(self, in_channels: int, hidden_channels: int = 64, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_channels, hidden_channels),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_channels, hidden_channels),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_channels, 1),
        )

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.net(x).squeeze(-1)


class _TwoLayerGNN(nn.Module):
    """Two message-passing layers ``conv1``, ``conv2`` (set by subclasses) with ReLU and dropout,
    then a linear head to one logit per node."""

    conv1: nn.Module
    conv2: nn.Module

    def __init__(self, hidden_channels: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_channels, 1)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = self.dropout(torch.relu(self.conv1(x, edge_index)))
        h = self.dropout(torch.relu(self.conv2(h, edge_index)))
        return self.head(h).squeeze(-1)


class GCNNet(nn.Module):
    """Two GCN layers (symmetric normalisation with self-loops) and a linear head.

    The normalised adjacency is computed once per graph and reused while the same
    ``edge_index`` tensor comes back (the same object at the same version counter, and the
    same node count: :class:`~et_graph.nn.edge_cache.EdgeCache`), so full-batch training does
    not renormalise a million edges every epoch, and another graph (inductive scoring, a
    subgraph, a new mini-batch in a freed batch's memory) is never scored with a stale
    adjacency.
    """

    def __init__(self, in_channels: int, hidden_channels: int = 64, dropout: float = 0.0
                 ) -> None:
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels, normalize=False)
        self.conv2 = GCNConv(hidden_channels, hidden_channels, normalize=False)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_channels, 1)
        self._cache = EdgeCache()

    def normalized_adjacency(self, edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
        return self._cache.fetch((edge_index,), num_nodes,
                                 lambda: gcn_norm(edge_index, None, num_nodes, add_self_loops=True))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        index, weight = self.normalized_adjacency(edge_index, x.size(0))
        # (gcn_norm makes its weights in the default dtype, which a process may have changed
        # since the fit: float64 weights failed against float32 features)
        weight = weight.to(x.dtype)
        h = self.dropout(torch.relu(self.conv1(x, index, weight)))
        h = self.dropout(torch.relu(self.conv2(h, index, weight)))
        return self.head(h).squeeze(-1)


class GATNet(_TwoLayerGNN):
    """Two GAT layers (PyG ``GATConv``, concatenated heads) and a linear head."""

    def __init__(
        self, in_channels: int, hidden_channels: int = 64, heads: int = 4, dropout: float = 0.0
    ) -> None:
        if hidden_channels % heads:
            raise ValueError("hidden_channels must be divisible by heads")
        super().__init__(hidden_channels, dropout)
        width = hidden_channels // heads
        self.conv1 = GATConv(in_channels, width, heads=heads)
        self.conv2 = GATConv(hidden_channels, width, heads=heads)


def mean_neighbours(x: Tensor, edge_index: Tensor, self_loops: bool = False) -> Tensor:
    """Mean of the in-neighbours' features (zero for isolated nodes). Self-loops are ignored
    (a node is not its own neighbour, as in ET's attention) unless ``self_loops``; duplicates
    are counted."""
    src, dst = ((edge_index[0], edge_index[1]) if self_loops
                else in_edges_without_self_loops(edge_index))
    return scatter(x[src], dst, dim=0, dim_size=x.size(0), reduce="mean")
