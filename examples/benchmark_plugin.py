r"""A plugin: a GraphSAGE model as a row of the GNNBenchmark tables beside ET and GIN.

Importing this module registers the benchmark model ``sage_bench``; ``--plugin`` imports it first:

    et-graph gnnbenchmark --plugin examples/benchmark_plugin.py --models et,gin,sage_bench \
        --quick
    et-graph tune gnnbenchmark --plugin examples/benchmark_plugin.py --quick \
        --models gin,sage_bench --trials 4 \
        --storage sqlite:///runs/tune/sage_bench.db --out runs/tune/sage_bench

It serves every task of the benchmark: ZINC's regression and the graph classifications (a mean
over each graph's nodes, then the head) and PATTERN's and CLUSTER's node classification (the
head on every node). It reads the baselines' settings (``--baseline-hidden``,
``--baseline-layers``, ``--baseline-dropout``) and is trained with the run's ``train`` section.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv, global_mean_pool

from et_graph.baselines.gnnbenchmark_baselines import InputEncoder
from et_graph.datasets.gnnbenchmark_common import BenchmarkData
from et_graph.protocols.benchmark_models import register_benchmark_model
from et_graph.protocols.gnnbenchmark_config import GNNBenchmarkConfig
from et_graph.tuning.gnnbenchmark import LR_RANGE


class SAGEBenchmarkModel(nn.Module):
    """Node inputs encoded (ids embedded, features mapped; the walk encoding added), residual
    GraphSAGE layers, then a per-graph mean (graph tasks) and an MLP head."""

    def __init__(self, data: BenchmarkData, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.encode = InputEncoder(hidden, num_types=data.num_node_types, in_dim=data.node_dim)
        self.walk = nn.Linear(data.rw_pe_dim, hidden) if data.rw_pe_dim else None
        self.convs = nn.ModuleList(SAGEConv(hidden, hidden) for _ in range(layers))
        self.dropout = nn.Dropout(dropout)
        self.per_node = data.task == "node"
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, data.num_outputs))

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor,
                edge_attr: Optional[Tensor] = None, rw_pe: Optional[Tensor] = None) -> Tensor:
        h = self.encode(x)
        if self.walk is not None:
            h = h + self.walk(rw_pe)
        for conv in self.convs:
            h = h + self.dropout(torch.relu(conv(h, edge_index)))
        # logits per node, or per graph: class logits, or ZINC's value [num_graphs, 1]
        return self.head(h if self.per_node else global_mean_pool(h, batch))


def make_sage_bench(config: GNNBenchmarkConfig, data: BenchmarkData) -> SAGEBenchmarkModel:
    """One new, untrained model for ``data``, with the baselines' settings."""
    base = config.baselines
    return SAGEBenchmarkModel(data, base.baseline_hidden, base.baseline_layers,
                              base.baseline_dropout)


def sage_bench_space(trial: Any) -> dict[str, dict[str, Any]]:
    """Overrides of the run config's sections: width, depth, dropout and the learning rate."""
    return {
        "baselines": {
            "baseline_hidden": trial.suggest_categorical("hidden", [32, 64, 128]),
            "baseline_layers": trial.suggest_int("layers", 2, 6),
            "baseline_dropout": trial.suggest_float("dropout", 0.0, 0.2),
        },
        "train": {"lr": trial.suggest_float("lr", *LR_RANGE, log=True)},
    }


register_benchmark_model("sage_bench", make_sage_bench, search_space=sage_bench_space)
