r"""A plugin: GraphSAGE as a baseline row beside ET, under the same protocol and tuning budget.

Importing this module registers the detector ``sage``; ``--plugin`` imports it first:

    et-graph anomaly --plugin examples/sage_plugin.py --models et,gcn,sage --quick
    et-graph tune anomaly --plugin examples/sage_plugin.py --models et,sage --trials 4 \
        --timeout-minutes 5 --epochs 20 --storage sqlite:///runs/tune/sage.db --out runs/tune/sage

It reads the neural baselines' settings (``--baseline-hidden``, ``--baseline-lr``, ...), and its
search space tunes them as GCN's does.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from et_graph.detectors import NeuralDetector, register_detector
from et_graph.detectors.config import GNNDetectorConfig
from et_graph.protocols.anomaly_config import AnomalyConfig, baseline_config


class SAGENet(nn.Module):
    """Two GraphSAGE layers (mean aggregation) and a linear head: one logit per node."""

    def __init__(self, in_channels: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.conv1 = SAGEConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = self.dropout(torch.relu(self.conv1(x, edge_index)))
        h = self.dropout(torch.relu(self.conv2(h, edge_index)))
        return self.head(h).squeeze(-1)


class SAGEDetector(NeuralDetector):
    """GraphSAGE trained and thresholded as the built-in neural baselines are."""

    config_class = GNNDetectorConfig
    unused_settings = ("gat_heads",)

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        model = self.config.model
        return SAGENet(in_channels, model.hidden, model.dropout)


def make_sage(config: AnomalyConfig, seed: int, progress: bool) -> SAGEDetector:
    """One unfitted detector per seed, with the run's baseline settings and device."""
    return SAGEDetector(baseline_config(config), seed=seed, progress=progress,
                        device=config.run.device)


def sage_space(trial: Any) -> dict[str, dict[str, Any]]:
    """Overrides of the run config's ``baselines`` section: GCN's space, under its names."""
    return {"baselines": {
        "baseline_hidden": trial.suggest_categorical("hidden", [32, 64, 128]),
        "baseline_dropout": trial.suggest_float("dropout", 0.0, 0.5),
        "baseline_lr": trial.suggest_float("lr", 1e-3, 5e-2, log=True),
        "baseline_weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-3, log=True),
    }}


register_detector("sage", make_sage, search_space=sage_space)
