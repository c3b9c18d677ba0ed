"""Same-run message-passing baselines for the GNNBenchmark runner: GIN and GatedGCN (PyG layers).

Both follow the benchmark's conventions (Dwivedi et al.): an input embedding, ``num_layers``
residual blocks of convolution + BatchNorm + ReLU + dropout, then a readout: sum (GIN) or mean
(GatedGCN) pooling and an MLP for graph tasks, a per-node MLP for node tasks. Edge features are
used when present (``GINEConv``, ``ResGatedGraphConv(edge_dim=...)``). ``readout="jk"`` feeds
the head the states at the input and after every layer, concatenated (pooled for graph tasks):
the jumping-knowledge readout of Xu et al. (2018), the counterpart of ET's ``readout="jk"``.

Inputs follow one convention so ET and the baselines see identical data: ``x`` is either long
ids ``[N]``/``[N, 1]`` (``num_node_types`` given) or float features ``[N, F]`` (``node_dim``
given); ``edge_attr`` likewise with ``num_edge_types`` / ``edge_dim`` (or absent). With
``rw_pe_dim > 0`` a random-walk encoding ``rw_pe`` ``[N, rw_pe_dim]`` is embedded linearly and
added to the node embedding, as ET adds it to its tokens.
"""
from __future__ import annotations

from typing import Any, Optional, cast

import torch
from torch import Tensor, nn
from torch_geometric.nn import GINEConv, ResGatedGraphConv, global_add_pool, global_mean_pool

from ..nn.validation import (
    all_finite,
    check_batch,
    check_edge_index,
    check_positive_int,
    check_rw_pe,
)

TASKS = ("classification", "regression", "node")
#: What the head reads: the last layer's states ("last") or the states at the input and after
#: every layer, concatenated ("jk", jumping knowledge).
READOUTS = ("last", "jk")


class InputEncoder(nn.Module):
    """Embedding for categorical ids, linear map for continuous features."""

    def __init__(self, out_dim: int, num_types: Optional[int] = None,
                 in_dim: Optional[int] = None) -> None:
        super().__init__()
        if (num_types is None) == (in_dim is None):
            raise ValueError("give exactly one of num_types (categorical) or in_dim (continuous)")
        self.num_types = None if num_types is None else check_positive_int(num_types, "num_types")
        self.in_dim = None if in_dim is None else check_positive_int(in_dim, "in_dim")
        # (num_types=0 is not "continuous": it built nn.Linear(None, ...) and failed in torch)
        # (exactly one of them is given: checked above)
        self.embed = (nn.Embedding(self.num_types, out_dim) if self.num_types is not None
                      else nn.Linear(cast(int, self.in_dim), out_dim))

    def forward(self, values: Tensor) -> Tensor:
        if self.num_types is not None:
            if values.is_floating_point():
                raise ValueError("categorical input must hold integer ids, got a float tensor")
            ids = values.view(values.size(0), -1)[:, 0] if values.dim() > 1 else values
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_types):
                raise ValueError(
                    f"category ids must lie in 0..{self.num_types - 1}, got "
                    f"[{int(ids.min())}, {int(ids.max())}]"
                )
            return self.embed(ids.long())
        values = values.float().view(values.size(0), -1)
        if values.size(1) != self.in_dim:
            raise ValueError(f"expected {self.in_dim} input features, got {values.size(1)}")
        if not all_finite(values):
            raise ValueError("input features contain NaN or inf")
        return self.embed(values)


def _mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))


class _BenchmarkGNN(nn.Module):
    pooling = staticmethod(global_mean_pool)

    def __init__(
        self,
        out_channels: int,
        task: str,
        hidden: int = 64,
        num_layers: int = 4,
        dropout: float = 0.0,
        num_node_types: Optional[int] = None,
        node_dim: Optional[int] = None,
        num_edge_types: Optional[int] = None,
        edge_dim: Optional[int] = None,
        rw_pe_dim: int = 0,
        incident_edges: bool = False,
        readout: str = "last",
    ) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
        if num_layers < 1 or hidden < 1 or out_channels < 1:
            raise ValueError("num_layers, hidden and out_channels must be positive")
        if rw_pe_dim < 0:
            raise ValueError(f"rw_pe_dim must be >= 0, got {rw_pe_dim}")
        self.task = task
        self.out_channels = out_channels
        self.dropout = dropout
        self.readout = readout
        self.node_encoder = InputEncoder(hidden, num_node_types, node_dim)
        self.rw_encoder = nn.Linear(rw_pe_dim, hidden) if rw_pe_dim else None
        self.uses_edges = num_edge_types is not None or edge_dim is not None
        self.edge_encoder = (
            InputEncoder(hidden, num_edge_types, edge_dim) if self.uses_edges else None
        )
        if incident_edges and not self.uses_edges:
            raise ValueError("incident_edges sums encoded edge features: give num_edge_types "
                             "or edge_dim")
        # The same input ET's incident_edges adds: each node's sum of incoming encoded edges.
        self.incident_encoder = nn.Linear(hidden, hidden) if incident_edges else None
        self.convs = nn.ModuleList(self._conv(hidden) for _ in range(num_layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(num_layers))
        states = num_layers + 1 if readout == "jk" else 1
        self.head = _mlp(states * hidden, hidden, out_channels)

    def _conv(self, hidden: int) -> nn.Module:
        raise NotImplementedError

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                edge_attr: Optional[Tensor] = None, rw_pe: Optional[Tensor] = None) -> Tensor:
        """Outputs of the graphs (``batch`` assigns nodes to graphs) or of the nodes
        (``task="node"``). The argument order is ETGraphModel's and GINClassifier's."""
        if x.size(0) == 0:
            raise ValueError("the batch has no nodes")
        edge_index = check_edge_index(edge_index, x.size(0))
        check_batch(batch, x.size(0))
        h = self.node_encoder(x)
        if self.rw_encoder is not None:
            rw_pe = check_rw_pe(rw_pe, x.size(0), self.rw_encoder.in_features)
            h = h + self.rw_encoder(rw_pe.to(self.rw_encoder.weight.dtype))
        elif rw_pe is not None:
            raise ValueError("got rw_pe, but the model was built with rw_pe_dim=0")
        e = None
        if edge_attr is not None and not self.uses_edges:
            raise ValueError("edge_attr was given but the model was built without edge "
                             "features (num_edge_types / edge_dim)")
        if self.edge_encoder is not None:  # (built exactly when uses_edges)
            if edge_attr is None or edge_attr.size(0) != edge_index.size(1):
                got = None if edge_attr is None else edge_attr.size(0)
                raise ValueError(
                    f"the model uses edge features: edge_attr must have one row per edge "
                    f"({edge_index.size(1)}), got {got}"
                )
            e = self.edge_encoder(edge_attr)
            if self.incident_encoder is not None:
                incident = e.new_zeros(h.size(0), e.size(1)).index_add_(0, edge_index[1], e)
                h = h + self.incident_encoder(incident)
        states = [h]
        for conv, norm in zip(self.convs, self.norms):
            update = conv(h, edge_index, e) if e is not None else conv(h, edge_index)
            update = torch.relu(norm(update))
            h = h + nn.functional.dropout(update, self.dropout, self.training)
            states.append(h)
        if self.readout == "jk":
            h = torch.cat(states, dim=1)
        if self.task != "node":
            if batch is None:
                batch = torch.zeros(h.size(0), dtype=torch.long, device=h.device)
            # pooling is per column, so pooling the concatenation pools every state
            h = self.pooling(h, batch)
        out = self.head(h)
        return out.squeeze(-1) if self.task == "regression" else out

    def forward_data(self, data: Any) -> Tensor:
        """``forward`` on a PyG ``Data``/``Batch`` (``edge_attr`` only if the model uses edge
        features, ``rw_pe`` only if it was built for it)."""
        return self(data.x, data.edge_index, getattr(data, "batch", None),
                    edge_attr=data.edge_attr if self.uses_edges else None,
                    rw_pe=getattr(data, "rw_pe", None) if self.rw_encoder is not None else None)


class GINBaseline(_BenchmarkGNN):
    """GIN (Xu et al., 2019) with edge features through ``GINEConv``; sum pooling."""

    pooling = staticmethod(global_add_pool)

    def _conv(self, hidden: int) -> nn.Module:
        mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                            nn.Linear(hidden, hidden))
        if self.uses_edges:
            return GINEConv(mlp, train_eps=True)
        return _GINNoEdge(mlp)


class _GINNoEdge(nn.Module):
    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        from torch_geometric.nn import GINConv

        self.conv = GINConv(mlp, train_eps=True)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv(x, edge_index)


class GatedGCNBaseline(_BenchmarkGNN):
    """GatedGCN (Bresson & Laurent, 2017) as PyG's ``ResGatedGraphConv``; mean pooling."""

    def _conv(self, hidden: int) -> nn.Module:
        return ResGatedGraphConv(hidden, hidden, edge_dim=hidden if self.uses_edges else None)


BASELINES = {"gin": GINBaseline, "gatedgcn": GatedGCNBaseline}

__all__ = ["BASELINES", "READOUTS", "GINBaseline", "GatedGCNBaseline", "InputEncoder"]
