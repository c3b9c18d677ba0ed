"""Same-run baselines for graph classification: GIN (PyG) and the structure-agnostic MLP."""
from __future__ import annotations

from typing import Any, Optional

from torch import Tensor, nn
from torch_geometric.nn import global_add_pool
from torch_geometric.nn.models import GIN

from ..nn.validation import check_features


def _mlp(in_channels: int, hidden_channels: int, out_channels: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Linear(in_channels, hidden_channels),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden_channels, out_channels),
    )


def _num_graphs(batch: Optional[Tensor], num_graphs: Optional[int]) -> Optional[int]:
    if num_graphs is not None:
        return int(num_graphs)
    return None if batch is None else (int(batch.max()) + 1 if batch.numel() else 0)


class GINClassifier(nn.Module):
    """PyG's :class:`~torch_geometric.nn.models.GIN` (sum aggregation, MLP updates, batch norm),
    jumping-knowledge concatenation of every layer, sum readout and an MLP head, as in Xu et al.
    (2019) and the GIN of Errica et al. (2020). Edge features are not used."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 64,
        num_layers: int = 3,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.gnn = GIN(in_channels, hidden_channels, num_layers, norm="batch_norm", jk="cat")
        self.head = _mlp(hidden_channels, hidden_channels, out_channels, dropout)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                num_graphs: Optional[int] = None) -> Tensor:
        check_features(x, self.in_channels)
        h = self.gnn(x, edge_index)
        return self.head(global_add_pool(h, batch, _num_graphs(batch, num_graphs)))

    def forward_data(self, data: Any) -> Tensor:
        return self(data.x, data.edge_index, data.batch, getattr(data, "num_graphs", None))


class StructureAgnosticMLP(nn.Module):
    """The structure-agnostic baseline of Errica et al. (2020): the edges are ignored, node
    features are summed per graph (a fingerprint / degree histogram) and an MLP classifies the
    sum. ``node_layer=True`` first maps each node through a linear layer + ReLU (their variant
    for social graphs)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 64,
        dropout: float = 0.5,
        node_layer: bool = False,
    ) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.node = (
            nn.Sequential(nn.Linear(in_channels, hidden_channels), nn.ReLU())
            if node_layer
            else nn.Identity()
        )
        width = hidden_channels if node_layer else in_channels
        self.head = _mlp(width, hidden_channels, out_channels, dropout)

    def forward(self, x: Tensor, edge_index: Optional[Tensor] = None,
                batch: Optional[Tensor] = None, num_graphs: Optional[int] = None) -> Tensor:
        check_features(x, self.in_channels)
        pooled = global_add_pool(self.node(x), batch, _num_graphs(batch, num_graphs))
        return self.head(pooled)

    def forward_data(self, data: Any) -> Tensor:
        return self(data.x, data.edge_index, data.batch, getattr(data, "num_graphs", None))
