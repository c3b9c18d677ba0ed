r"""A plugin: a GraphSAGE graph classifier as a baseline row beside ET and GIN, on the same folds.

Importing this module registers the graph model ``sage_graph``; ``--plugin`` imports it first:

    et-graph tudataset --plugin examples/graph_plugin.py --dataset MUTAG \
        --models et,gin,sage_graph --quick
    et-graph tune tudataset --plugin examples/graph_plugin.py --dataset MUTAG \
        --models gin,sage_graph --trials 4 --tune-folds 2 --epochs 20 \
        --storage sqlite:///runs/tune/sage_graph.db --out runs/tune/sage_graph

It reads GIN's settings (``--gin-hidden``, ``--gin-layers``, ``--baseline-dropout``) and is
trained with the run's ``train`` section, as GIN is; its search space tunes the width, dropout
and learning rate (not the depth).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv, global_add_pool

from et_graph.protocols.graph_models import register_graph_model
from et_graph.protocols.tudataset_config import TUDatasetConfig


class SAGEGraphClassifier(nn.Module):
    """GraphSAGE layers (mean aggregation), a sum over each graph's nodes, an MLP head."""

    def __init__(self, in_channels: int, classes: int, hidden: int, layers: int,
                 dropout: float) -> None:
        super().__init__()
        self.convs = nn.ModuleList(SAGEConv(in_channels if i == 0 else hidden, hidden)
                                   for i in range(layers))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(hidden, classes))
        self.out_channels = classes  # the engine checks it against the labels' classes

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        for conv in self.convs:
            x = self.dropout(torch.relu(conv(x, edge_index)))
        return self.head(global_add_pool(x, batch))  # class logits [num_graphs, classes]


def make_sage_graph(config: TUDatasetConfig, info: dict[str, Any]) -> SAGEGraphClassifier:
    """One new, untrained model for the data ``info`` describes, with GIN's settings."""
    base = config.baselines
    return SAGEGraphClassifier(info["node_feature_width"], info["classes"], base.gin_hidden,
                               base.gin_layers, base.baseline_dropout)


def sage_graph_space(trial: Any) -> dict[str, dict[str, Any]]:
    """Overrides of the run config's sections: width and dropout, and the learning rate."""
    return {
        "baselines": {
            "gin_hidden": trial.suggest_categorical("hidden", [32, 64, 128]),
            "baseline_dropout": trial.suggest_float("dropout", 0.0, 0.5),
        },
        "train": {"lr": trial.suggest_float("lr", 5e-4, 1e-2, log=True)},
    }


register_graph_model("sage_graph", make_sage_graph, search_space=sage_graph_space)
