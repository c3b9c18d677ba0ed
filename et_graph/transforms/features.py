"""Label-free node-feature transforms for anomaly detection (the same input for every model)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from ..nn.validation import check_positive_int
from ..precision import float64_on_host_if_needed
from .neighbourhood import neighbourhood_statistics

#: Per-column feature transforms over all nodes: none, z-scores, normal scores of the ranks, or
#: the piecewise-linear encoding of quantile bins (``ple``: one column per bin).
FEATURE_NORMS = ("none", "standard", "quantile", "ple")


#: The largest magnitude float32 holds, the precision the models compute in.
FLOAT32_LIMIT = float(torch.finfo(torch.float32).max)


def check_float32_range(x: Tensor, what: str = "data.x") -> None:
    """``ValueError`` for finite features beyond float32's range: cast for the models, they
    became inf and were reported as "NaN or inf" (or as a non-finite training loss)."""
    if x.is_floating_point() and torch.finfo(x.dtype).max > FLOAT32_LIMIT:
        check_feature_limit(x, FLOAT32_LIMIT, what,
                            "beyond float32's range (about 3.4e38), in which the models compute")


def check_feature_limit(x: Tensor, limit: float, what: str, beyond: str) -> None:
    """``ValueError`` naming ``what`` when a value of ``x`` exceeds ``limit`` in magnitude
    (``beyond`` says what that limit is), with the transform that brings it back."""
    largest = float(x.abs().max()) if x.numel() else 0.0
    if largest > limit:
        raise ValueError(
            f"{what} reaches {largest:.3g}, {beyond}: transform the features first, "
            "et_graph.transforms.prepare_detection_data(data, 'quantile') (or 'standard') in "
            "Python, --feature-norm quantile or standard on the command line")


def check_node_graph(data: Data, float32_range: bool = True) -> tuple[Tensor, Tensor]:
    """``(x, edge_index)`` of a node-level graph, or a ``ValueError`` that says what is wrong:
    features ``[N, F]`` with ``N > 0`` rows (``data.num_nodes``, where set, must agree),
    finite (and, with ``float32_range``, within float32's range), and an integer
    ``edge_index [2, E]`` of ids in ``[0, N)``."""
    for name in ("x", "edge_index"):
        value = getattr(data, name, None)
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"data.{name} is a {type(value).__name__}; PyG Data attributes must "
                            f"be tensors: data.{name} = torch.as_tensor(...)")
    x = getattr(data, "x", None)
    if x is not None and x.layout != torch.strided:
        raise ValueError(f"data.x is a sparse tensor ({x.layout}); the models read dense "
                         "features: data.x = data.x.to_dense() (the file loaders do this)")
    if x is None or x.dim() != 2 or x.size(0) == 0 or x.size(1) == 0:
        # (F = 0 failed later with "in_channels and hidden_channels must be positive", an
        # argument the user never passed)
        raise ValueError("data.x must hold node features of shape [N, F] with N > 0 and F > 0"
                         + ("" if x is None else f", got {tuple(x.shape)}"))
    if not bool(torch.isfinite(x).all()):
        raise ValueError("data.x contains NaN or inf values")
    if float32_range:
        check_float32_range(x)
    if data.num_nodes != x.size(0):
        # The labels and masks of the extra nodes indexed past x (an IndexError deep in the
        # loss), or the scores came back shorter than the graph.
        raise ValueError(f"data.x has {x.size(0)} rows but data.num_nodes is {data.num_nodes}: "
                         "every node needs a feature row")
    edge_index = getattr(data, "edge_index", None)
    if edge_index is None:
        raise ValueError("data.edge_index is missing (a [2, E] tensor of node ids is needed)")
    # (a bool tensor passed this check and failed in indexing: it holds no node ids)
    if (edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.is_floating_point()
            or edge_index.dtype == torch.bool):
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


def check_detection_graph(data: Data, float32_range: bool = True) -> None:
    """``ValueError`` for a graph that node anomaly detection cannot use."""
    check_node_graph(data, float32_range)
    y = getattr(data, "y", None)
    if y is None or y.dim() != 1 or y.numel() != data.num_nodes:
        raise ValueError("the graph needs a binary node label y of shape [N]")
    if not bool(((y == 0) | (y == 1)).all()):  # any dtype, bool included
        raise ValueError("labels y must be binary (0 = normal, 1 = anomalous)")


def prepare_detection_data(data: Data, feature_norm: str = "none",
                           degree_feature: bool = False, ple_bins: int = 16) -> Data:
    """A validated copy of ``data`` with float features, optionally ``log(1 + in-degree)``
    (self-loops not counted) appended, and each column transformed over all nodes by
    :func:`transform_features`. Labels are never read by the transform: a graph without ``y``
    (one to score, or the unsupervised detector's) is transformed the same way; a given ``y``
    must be binary and becomes ``long``."""
    if feature_norm not in FEATURE_NORMS:
        raise ValueError(f"feature_norm must be one of {FEATURE_NORMS}, got {feature_norm!r}")
    labelled = getattr(data, "y", None) is not None
    # A transform can bring features beyond float32's range back into it: they are checked
    # after it, and the transform runs in the features' own precision (float64 stays float64).
    if labelled:
        check_detection_graph(data, float32_range=False)
    else:
        check_node_graph(data, float32_range=False)
    data = data.clone()
    x = data.x if data.x.is_floating_point() else data.x.float()
    if labelled:
        data.y = data.y.long()
    if degree_feature:  # the neighbourhood statistics' degree column (self-loops not counted)
        degree = neighbourhood_statistics(x, data.edge_index, ("degree",))
        x = torch.cat([x, degree], dim=-1)
    x = transform_features(x, feature_norm, ple_bins)
    check_float32_range(x, f"data.x after the {feature_norm!r} transform")
    data.x = x.float()
    return data


def transform_features(x: Tensor, feature_norm: str, ple_bins: int = 16) -> Tensor:
    """``x`` ``[N, F]`` with each column transformed over all ``N`` rows (no label involved):
    ``none``; ``standard`` z-scores; ``quantile`` normal scores of the ranks
    (:func:`quantile_normal`); ``ple`` the piecewise-linear encoding of ``ple_bins`` quantile
    bins (:func:`piecewise_linear_encoding`, which widens ``x``)."""
    if feature_norm in ("standard", "quantile") and not x.is_floating_point():
        x = x.float()  # integer counts: z-scores and normal scores are fractions
    if feature_norm == "standard":
        std = x.std(dim=0)
        return (x - x.mean(dim=0)) / torch.where(std > 0, std, torch.ones_like(std))
    if feature_norm == "quantile":
        return quantile_normal(x)
    if feature_norm == "ple":
        return piecewise_linear_encoding(x, ple_bins)
    if feature_norm == "none":
        return x
    raise ValueError(f"feature_norm must be one of {FEATURE_NORMS}, got {feature_norm!r}")


def piecewise_linear_encoding(x: Tensor, bins: int = 16) -> Tensor:
    r"""The piecewise-linear encoding of numerical features (Gorishniy et al., NeurIPS 2022).

    Each column :math:`v` is cut at its quantiles :math:`b_0 < b_1 < \dots < b_T` over all rows
    (``bins + 1`` evenly spaced levels; repeated edges of a discrete column are merged, so such
    a column gets fewer bins), and each value becomes ``T`` columns

    .. math::
        e_t(v) = \mathrm{clamp}\left(\frac{v - b_{t-1}}{b_t - b_{t-1}}, 0, 1\right),

    i.e. 1 for every bin below the value, its position inside its own bin, and 0 above. A
    linear layer on this encoding is a learned piecewise-linear function of each feature, which
    is what lets neural models read tabular columns the way trees do (thresholds). A constant
    column becomes a single zero column. Returns ``[N, sum_j T_j]`` in ``x``'s dtype."""
    check_positive_int(bins, "bins")
    if x.dim() != 2 or x.size(0) == 0:
        raise ValueError(f"x must be [N, F] with N > 0, got {tuple(x.shape)}")
    if not x.is_floating_point():
        x = x.float()
    elif not bool(torch.isfinite(x).all()):  # one NaN made its whole column NaN
        raise ValueError("piecewise_linear_encoding: x holds NaN or inf")
    work = float64_on_host_if_needed(x)
    # on x's device (the CPU for mps): CPU levels failed torch.quantile on a GPU column
    levels = torch.linspace(0, 1, bins + 1, dtype=torch.float64, device=work.device)
    columns = []
    for column in work.unbind(dim=1):
        edges = torch.unique(torch.quantile(column, levels))  # sorted, repeated edges merged
        if edges.numel() < 2:
            columns.append(column.new_zeros(column.numel(), 1))
            continue
        low, high = edges[:-1], edges[1:]
        columns.append(((column.unsqueeze(1) - low) / (high - low)).clamp_(0.0, 1.0))
    return torch.cat(columns, dim=1).to(x.device, x.dtype)


def quantile_normal(x: Tensor) -> Tensor:
    """Each column's average rank mapped to standard-normal scores (ties share a score), in
    ``x``'s floating dtype and device (float32 for integer columns: cast back to an integer
    dtype the scores were truncated to zeros). NaN is refused (it made its column NaN)."""
    from scipy.stats import norm, rankdata

    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError("quantile_normal: x holds NaN or inf")
    ranks = rankdata(x.detach().cpu().double().numpy(), axis=0, method="average")
    scores = norm.ppf(ranks / (x.size(0) + 1))
    dtype = x.dtype if x.is_floating_point() else torch.float32
    return torch.from_numpy(scores).to(device=x.device, dtype=dtype)
