"""Node-level anomaly baselines, trained by the same protocol as ET.

The neural ones return one anomaly logit per node from ``forward(x, edge_index)`` so that
:func:`et_graph.protocols.anomaly.train_node_model` trains them exactly like ET (same loss, same
threshold selection, same checkpoint rule). The tree baseline is the model that leads GADBench:
gradient-boosted trees on ``[x, mean_neighbours(x), mean_neighbours^2(x)]``.
"""
from __future__ import annotations

import numpy as np
import torch
from sklearn.ensemble import HistGradientBoostingClassifier
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv
from torch_geometric.utils import scatter


class MLPDetector(nn.Module):
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


class GCNDetector(_TwoLayerGNN):
    """Two GCN layers (symmetric normalisation, self-loops) and a linear head. ``cached=True``
    reuses the normalised adjacency of the first graph seen: only for full-batch training."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 64,
        dropout: float = 0.0,
        cached: bool = False,
    ) -> None:
        super().__init__(hidden_channels, dropout)
        self.conv1 = GCNConv(in_channels, hidden_channels, cached=cached)
        self.conv2 = GCNConv(hidden_channels, hidden_channels, cached=cached)


class GATDetector(_TwoLayerGNN):
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


def mean_neighbours(x: Tensor, edge_index: Tensor) -> Tensor:
    """Mean of the in-neighbours' features (zero for isolated nodes)."""
    return scatter(x[edge_index[0]], edge_index[1], dim=0, dim_size=x.size(0), reduce="mean")


def graph_features(x: Tensor, edge_index: Tensor) -> np.ndarray:
    """``[x, mean_neighbours(x), mean_neighbours(mean_neighbours(x))]`` as ``float32 [N, 3F]``."""
    one = mean_neighbours(x, edge_index)
    two = mean_neighbours(one, edge_index)
    return torch.cat([x, one, two], dim=-1).cpu().numpy().astype(np.float32)


def fit_tree_on_graph_features(
    features: np.ndarray,
    y: np.ndarray,
    train: np.ndarray,
    seed: int,
    max_iter: int = 200,
    learning_rate: float = 0.1,
) -> np.ndarray:
    """Fit scikit-learn's HistGradientBoosting on the training nodes (class-balanced sample
    weights, the analogue of ET's weighted loss) and return every node's anomaly probability.
    Its early stopping, when it triggers, holds out part of the *training* nodes only."""
    y_train = y[train]
    positives = max(int(y_train.sum()), 1)
    weight = np.where(y_train == 1, (y_train.size - positives) / positives, 1.0)
    model = HistGradientBoostingClassifier(
        max_iter=max_iter, learning_rate=learning_rate, random_state=seed
    )
    model.fit(features[train], y_train, sample_weight=weight)
    return model.predict_proba(features)[:, 1]
