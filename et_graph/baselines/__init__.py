"""Same-run node anomaly baselines: MLP, GCN, GAT and gradient-boosted trees on graph features."""
from .node import (
    GATDetector,
    GCNDetector,
    MLPDetector,
    fit_tree_on_graph_features,
    graph_features,
)

__all__ = [
    "GATDetector",
    "GCNDetector",
    "MLPDetector",
    "fit_tree_on_graph_features",
    "graph_features",
]
