"""Same-run baselines, printed beside ET on the same splits and seeds.

Node anomaly detection: the MLP, GCN and GAT networks (the detectors, trees included, are in
:mod:`et_graph.detectors`).
Graph classification: GIN and the structure-agnostic MLP of Errica et al.
GNNBenchmark: GIN and GatedGCN.
"""
from .gnnbenchmark_baselines import GatedGCNBaseline, GINBaseline
from .graph_baselines import GINClassifier, StructureAgnosticMLP
from .node import (
    GATNet,
    GCNNet,
    MLPNet,
    mean_neighbours,
)

__all__ = [
    "GATNet",
    "GCNNet",
    "GINBaseline",
    "GINClassifier",
    "GatedGCNBaseline",
    "MLPNet",
    "StructureAgnosticMLP",
    "mean_neighbours",
]
