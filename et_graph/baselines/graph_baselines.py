"""Same-run baselines for graph classification: GIN (PyG) and the structure-agnostic MLP."""
from __future__ import annotations

from typing import Any, Optional

from torch import Tensor, nn
from torch_geometric.nn import GINEConv, global_add_pool
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.models import GIN, MLP

from ..nn.validation import check_edge_features, check_features


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


class _GINE(GIN):
    r"""PyG's :class:`~torch_geometric.nn.models.GIN` with :class:`~torch_geometric.nn.GINEConv`
    layers (Hu et al., 2020): each message is :math:`\mathrm{ReLU}(h_j + W e_{ji})`, the rest
    (MLP updates, batch norm, jumping knowledge) unchanged."""

    supports_edge_attr = True

    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> MessagePassing:
        mlp = MLP([in_channels, out_channels, out_channels], act=self.act,
                  act_first=self.act_first, norm=self.norm, norm_kwargs=self.norm_kwargs)
        return GINEConv(mlp, **kwargs)


class GINClassifier(nn.Module):
    r"""PyG's :class:`~torch_geometric.nn.models.GIN` (sum aggregation, MLP updates, batch norm),
    jumping-knowledge concatenation of every layer, sum readout and an MLP head, as in Xu et al.
    (2019) and the GIN of Errica et al. (2020).

    Edge features are not used unless ``edge_channels > 0``: then every layer is a
    :class:`~torch_geometric.nn.GINEConv` (Hu et al., 2020) whose messages read the edge's
    features, :math:`\mathrm{ReLU}(h_j + W_l e_{ji})`, and ``forward`` requires ``edge_attr``
    ``[E, edge_channels]``. That is the fair partner of an ET whose message-passing tokens read
    the edges (``ETGraphModel(message_passing_edges=True)``)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 64,
        num_layers: int = 3,
        dropout: float = 0.5,
        edge_channels: int = 0,
    ) -> None:
        super().__init__()
        if isinstance(edge_channels, bool) or not isinstance(edge_channels, int) \
                or edge_channels < 0:
            raise ValueError(f"edge_channels must be an int >= 0, got {edge_channels!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.edge_channels = edge_channels
        self.gnn = (
            _GINE(in_channels, hidden_channels, num_layers, norm="batch_norm", jk="cat",
                  edge_dim=edge_channels)
            if edge_channels
            else GIN(in_channels, hidden_channels, num_layers, norm="batch_norm", jk="cat")
        )
        self.head = _mlp(hidden_channels, hidden_channels, out_channels, dropout)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                num_graphs: Optional[int] = None, edge_attr: Optional[Tensor] = None) -> Tensor:
        check_features(x, self.in_channels)
        check_edge_features(edge_attr, edge_index.size(1), self.edge_channels, "edge_attr",
                            "this GIN")
        if edge_attr is None:  # (exactly when edge_channels == 0: checked above)
            h = self.gnn(x, edge_index)
        else:
            h = self.gnn(x, edge_index, edge_attr=edge_attr.to(x.dtype))
        return self.head(global_add_pool(h, batch, _num_graphs(batch, num_graphs)))

    def forward_data(self, data: Any) -> Tensor:
        edge_attr = getattr(data, "edge_attr", None) if self.edge_channels else None
        return self(data.x, data.edge_index, data.batch, getattr(data, "num_graphs", None),
                    edge_attr)


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
