"""Label-free node-feature transforms for anomaly detection (the same input for every model)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

FEATURE_NORMS = ("none", "standard", "quantile")


def check_node_graph(data: Data) -> tuple[Tensor, Tensor]:
    """``(x, edge_index)`` of a node-level graph, or a ``ValueError`` that says what is wrong:
    features ``[N, F]`` with ``N > 0``, finite, and an integer ``edge_index [2, E]`` of ids in
    ``[0, N)``."""
    x = getattr(data, "x", None)
    if x is None or x.dim() != 2 or x.size(0) == 0:
        raise ValueError("data.x must hold node features of shape [N, F] with N > 0")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("data.x contains NaN or inf values")
    edge_index = getattr(data, "edge_index", None)
    if edge_index is None:
        raise ValueError("data.edge_index is missing (a [2, E] tensor of node ids is needed)")
    if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.is_floating_point():
        raise ValueError(
            f"data.edge_index must be an integer tensor [2, E], got {tuple(edge_index.shape)} "
            f"{edge_index.dtype}"
        )
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= x.size(0)):
        raise ValueError(
            f"data.edge_index holds node ids outside [0, {x.size(0)}) "
            f"(min {int(edge_index.min())}, max {int(edge_index.max())})"
        )
    return x, edge_index


def check_detection_graph(data: Data) -> None:
    """``ValueError`` for a graph that node anomaly detection cannot use."""
    check_node_graph(data)
    y = getattr(data, "y", None)
    if y is None or y.dim() != 1 or y.numel() != data.num_nodes:
        raise ValueError("the graph needs a binary node label y of shape [N]")
    if not bool(torch.isin(y, torch.tensor([0, 1])).all()):
        raise ValueError("labels y must be binary (0 = normal, 1 = anomalous)")


def prepare_detection_data(data: Data, feature_norm: str = "none",
                           degree_feature: bool = False) -> Data:
    """A validated copy of ``data`` with float features, optionally ``log(1 + in-degree)``
    appended and each column transformed over all nodes (``standard`` z-scores, ``quantile``
    normal scores of the ranks). Labels are never read by the transform."""
    if feature_norm not in FEATURE_NORMS:
        raise ValueError(f"feature_norm must be one of {FEATURE_NORMS}, got {feature_norm!r}")
    check_detection_graph(data)
    data = data.clone()
    data.x = data.x.float()
    data.y = data.y.long()
    if degree_feature:
        degree = torch.zeros(data.num_nodes).index_add_(
            0, data.edge_index[1], torch.ones(data.edge_index.size(1))
        )
        data.x = torch.cat([data.x, degree.log1p().unsqueeze(-1)], dim=-1)
    if feature_norm == "standard":
        std = data.x.std(dim=0)
        data.x = (data.x - data.x.mean(dim=0)) / torch.where(std > 0, std, torch.ones_like(std))
    elif feature_norm == "quantile":
        data.x = quantile_normal(data.x)
    return data


def quantile_normal(x: Tensor) -> Tensor:
    """Each column's average rank mapped to standard-normal scores (ties share a score)."""
    from scipy.stats import norm, rankdata

    ranks = rankdata(x.double().numpy(), axis=0, method="average")
    scores = norm.ppf(ranks / (x.size(0) + 1))
    return torch.from_numpy(scores).to(x.dtype)
