"""Same-run baselines, printed beside ET on the same splits and seeds.

Node anomaly detection: MLP, GCN, GAT and gradient-boosted trees on graph features.
Graph classification: GIN and the structure-agnostic MLP of Errica et al.
GNNBenchmark: GIN and GatedGCN.
"""
from .gnnbenchmark_baselines import GatedGCNBaseline, GINBaseline
from .graph_baselines import GINClassifier, StructureAgnosticMLP
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
    "GINBaseline",
    "GINClassifier",
    "GatedGCNBaseline",
    "MLPDetector",
    "StructureAgnosticMLP",
    "fit_tree_on_graph_features",
    "graph_features",
]
