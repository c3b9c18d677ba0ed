"""Label-free node-feature transforms for anomaly detection (the same input for every model)."""
from __future__ import annotations

import os
import pickle
import zipfile
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from ..nn.validation import check_positive_int
from ..precision import float64_on_host_if_needed, quantile
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
            f"{what} reaches {largest:.3g}, {beyond}: transform the features first, in Python "
            "with et_graph.transforms.FeatureTransform('quantile') (or 'standard') fitted on "
            "the training graph and applied to every graph scored, on the command line with "
            "--feature-norm quantile or standard")


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
    if x.device.type == "meta":  # (failed on Tensor.item(), a deployment audit)
        raise ValueError("data.x is on the meta device, which holds no values: give the "
                         "graph's features on the CPU or a GPU")
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        # (where, so that a service's log names the record: a deployment audit)
        bad = ~finite
        # (the first by argmax: nonzero() listed every bad entry, a copy of x's size in int64)
        node, column = divmod(int(bad.reshape(-1).to(torch.uint8).argmax()), x.size(1))
        raise ValueError(f"data.x contains NaN or inf values ({int(bad.sum())} entries, in "
                         f"{int(bad.any(1).sum())} nodes; the first at node {node}, "
                         f"column {column})")
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


#: The tag :meth:`FeatureTransform.save` writes, so that :meth:`FeatureTransform.load` can refuse
#: other files with a clear error.
TRANSFORM_FORMAT = "et_graph.feature_transform/1"


#: The precisions a transform is fitted in, by the names its file records.
FIT_DTYPES = {"float32": torch.float32, "float64": torch.float64}


class FeatureTransform(BaseTransform):
    r"""The label-free feature transform of node anomaly detection, fitted on one graph and
    applied unchanged to every graph scored later.

    .. code-block:: python

        from et_graph.transforms import FeatureTransform
        transform = FeatureTransform("quantile", degree_feature=True)
        det = ETDetector().fit(transform.fit_transform(data))  # statistics of data's nodes
        transform.save("transform.pt")                         # beside det.save("det.pt")
        score = det.decision_function(transform.transform(new_graph))

    ``fit`` keeps each column's statistics over the fitted graph's nodes and ``transform`` maps
    any graph's features with them, so a node's transformed row depends on its own features
    only, not on the nodes transformed with it (a single new node, a batch, the fitted graph
    again). :func:`prepare_detection_data` is ``fit_transform`` on the graph it is given, with
    the statistics dropped. Per ``feature_norm``, for a column of the fitted graph's ``N`` nodes:

    - ``none``: the features as they are;
    - ``standard``: :math:`(v - \mu) / \sigma`, the fitted mean and (unbiased) standard
      deviation (:math:`\sigma = 1` for a constant column);
    - ``quantile``: the normal score of the value's place among the fitted values. The fitted
      distinct values :math:`u_1 < \dots < u_K`, of average ranks :math:`r_k`, score
      :math:`s_k = \Phi^{-1}(r_k / (N + 1))` (as :func:`quantile_normal`); a value between
      :math:`u_k` and :math:`u_{k+1}` scores
      :math:`s_k + (s_{k+1} - s_k)\,(v - u_k) / (u_{k+1} - u_k)`, and a value outside the fitted
      range the score of the nearer end (:math:`s_1` below :math:`u_1`, :math:`s_K` above
      :math:`u_K`);
    - ``ple``: the piecewise-linear encoding on the fitted graph's ``ple_bins`` quantile bin
      edges (:func:`piecewise_linear_encoding`: 0 below a bin, 1 above it).

    With ``degree_feature``, ``log(1 + in-degree)`` (self-loops not counted) is appended before
    the per-column transform. The degree is a property of the node in the graph being
    transformed (a node transformed without its edges has degree 0); the statistics that
    transform it are the fitted graph's.

    Labels are never read: a graph without ``y`` is transformed the same way; a given ``y``
    must be binary and becomes ``long``. Features are fitted in float64 when they are float64
    and in float32 otherwise, later graphs are read in that precision (``fit_dtype_``), and all
    are returned as float32, refused when beyond its range.

    The fitted statistics (``mean_`` and ``scale_``, ``quantile_values_`` and
    ``quantile_scores_``, or ``bin_edges_``) are CPU tensors, so the transform pickles, and
    :meth:`save` writes a file that :meth:`load` reads with ``torch.load(weights_only=True)``.
    ``quantile`` keeps every distinct fitted value of each column (which is what returns the
    fitted graph bit for bit): at most two numbers per node and column, in the features'
    precision.

    Args:
        feature_norm: one of :data:`FEATURE_NORMS`.
        degree_feature: append ``log(1 + in-degree)`` before the transform.
        ple_bins: the number of quantile bins of ``ple`` (read by that norm only).
    """

    #: The fitted statistics of each norm: what :meth:`save` writes.
    STATISTICS = {"none": (), "standard": ("mean_", "scale_"),
                  "quantile": ("quantile_values_", "quantile_scores_"), "ple": ("bin_edges_",)}

    def __init__(self, feature_norm: str = "none", degree_feature: bool = False,
                 ple_bins: int = 16) -> None:
        if feature_norm not in FEATURE_NORMS:
            raise ValueError(f"feature_norm must be one of {FEATURE_NORMS}, got {feature_norm!r}")
        self.feature_norm = feature_norm
        self.degree_feature = bool(degree_feature)
        # (read by ple alone, and checked for it alone: the other norms always ignored it)
        self.ple_bins = (check_positive_int(ple_bins, "ple_bins") if feature_norm == "ple"
                         else ple_bins)
        #: The fitted graph's feature width (``None`` until fitted).
        self.n_features_in_: Optional[int] = None
        self.mean_: Optional[Tensor] = None
        self.scale_: Optional[Tensor] = None
        self.quantile_values_: Optional[list[Tensor]] = None
        self.quantile_scores_: Optional[list[Tensor]] = None
        self.bin_edges_: Optional[list[Tensor]] = None
        #: The precision the fitted graph's columns were read in (float64 for float64
        #: features, else float32): later graphs are read in it (``None`` until fitted, and in
        #: files saved before it).
        self.fit_dtype_: Optional[torch.dtype] = None

    def fit(self, data: Data) -> FeatureTransform:
        """Keep the statistics of ``data``'s columns over all its nodes (no label read)."""
        check_transform_input(data)
        x = self._columns(data, fitting=True)
        self._fit_columns(x)
        self.n_features_in_, self.fit_dtype_ = data.x.size(1), x.dtype
        return self

    def fit_transform(self, data: Data) -> Data:
        """:meth:`fit` on ``data``, then ``data`` transformed (what
        :func:`prepare_detection_data` returns), the graph validated and copied once."""
        data = validated_copy(data)
        x = self._columns(data, fitting=True)
        self._fit_columns(x)
        self.n_features_in_, self.fit_dtype_ = data.x.size(1), x.dtype
        return self._with_features(data, self._transform_columns(x))

    def transform(self, data: Data) -> Data:
        """A validated copy of ``data`` with its features transformed by the fitted statistics
        (``data`` may be any graph with the fitted graph's feature columns)."""
        if self.n_features_in_ is None:
            raise RuntimeError("FeatureTransform is not fitted yet: call fit(data) first, on "
                               "the graph the detector is fitted on")
        data = validated_copy(data)
        if data.x.size(1) != self.n_features_in_:
            raise ValueError(f"data.x has {data.x.size(1)} features but the FeatureTransform "
                             f"was fitted on {self.n_features_in_}: transform graphs with the "
                             "fitted graph's feature columns")
        return self._with_features(data, self._transform_columns(self._columns(data)))

    def forward(self, data: Data) -> Data:
        """``transform(data)``: a fitted transform is also a PyG transform."""
        return self.transform(data)

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write the fitted transform to ``path`` as tensors and plain values, which
        :meth:`load` reads back without unpickling any object."""
        if self.n_features_in_ is None:
            raise RuntimeError("FeatureTransform is not fitted yet: fit it before save()")
        from ..training.checkpoint import torch_save_whole

        torch_save_whole(path, {"format": TRANSFORM_FORMAT, "feature_norm": self.feature_norm,
                                "degree_feature": self.degree_feature,
                                "ple_bins": self.ple_bins, "n_features_in_": self.n_features_in_,
                                "fit_dtype": str(self.fit_dtype_).removeprefix("torch."),
                                "statistics": {name: getattr(self, name)
                                               for name in self.STATISTICS[self.feature_norm]}})

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> FeatureTransform:
        """A transform written by :meth:`save` (its statistics on the CPU)."""
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no feature transform file at {path}")
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError,
                zipfile.BadZipFile) as error:
            raise ValueError(f"{path} is not a FeatureTransform written by save() ("
                             f"{type(error).__name__})") from error
        if not isinstance(payload, dict) or payload.get("format") != TRANSFORM_FORMAT:
            raise ValueError(f"{path} is not a FeatureTransform written by save()")
        try:
            transform = cls(payload["feature_norm"], payload["degree_feature"],
                            payload["ple_bins"])
            for name in cls.STATISTICS[transform.feature_norm]:
                setattr(transform, name, payload["statistics"][name])
            transform.n_features_in_ = int(payload["n_features_in_"])
            fit_dtype = payload.get("fit_dtype")  # (absent in files saved before it)
            transform.fit_dtype_ = (None if fit_dtype in (None, "None")
                                    else FIT_DTYPES[fit_dtype])
        except (KeyError, TypeError) as error:  # the tag, but not all that save() writes
            raise ValueError(f"{path} is an incomplete FeatureTransform file (no "
                             f"{error})") from error
        return transform

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(feature_norm={self.feature_norm!r}, "
                f"degree_feature={self.degree_feature}, ple_bins={self.ple_bins})")

    # ------------------------------------------------------------------------------------------
    def _columns(self, data: Data, fitting: bool = False) -> Tensor:
        """The columns to transform of a validated graph: its features as floats (when
        ``fitting``, float64 stays float64 and any other dtype becomes float32; later graphs in
        the fitted precision), with the degree column where asked. The same features as float64
        through a transform fitted on float32 gave other degree and quantile columns in their
        last bits, which moved a tree detector's scores (a deployment audit)."""
        dtype = None if fitting else getattr(self, "fit_dtype_", None)
        if dtype is None:  # float64 stays float64; anything else is read as float32
            dtype = torch.float64 if data.x.dtype == torch.float64 else torch.float32
        if data.x.dtype == torch.float64 and dtype != torch.float64:
            largest = float(data.x.abs().max()) if data.x.numel() else 0.0
            if largest > FLOAT32_LIMIT:  # (cast, it became inf)
                raise ValueError(
                    f"data.x reaches {largest:.3g}, beyond float32's range, in which this "
                    "FeatureTransform was fitted (on float32 features): fit it on the float64 "
                    "features to read such values")
        x = data.x.to(dtype)
        if self.degree_feature:  # the neighbourhood statistics' degree (self-loops not counted)
            degree = neighbourhood_statistics(x, data.edge_index, ("degree",))
            x = torch.cat([x, degree], dim=-1)
        return x

    def _with_features(self, data: Data, x: Tensor) -> Data:
        check_float32_range(x, f"data.x after the {self.feature_norm!r} transform")
        data.x = x.float()
        return data

    def _fit_columns(self, x: Tensor) -> FeatureTransform:
        """Keep the statistics of the columns of ``x`` ``[N, F]``: the fit without the graph."""
        # unfitted until the caller sets the width: a refit that fails leaves no half state
        self.n_features_in_ = None
        self.mean_ = self.scale_ = self.quantile_values_ = self.quantile_scores_ = None
        self.bin_edges_ = None
        if self.feature_norm == "standard":
            mean, scale = standard_statistics(x)
            self.mean_, self.scale_ = mean.cpu(), scale.cpu()
        elif self.feature_norm == "quantile":
            self.quantile_values_, self.quantile_scores_ = quantile_knots(x)
        elif self.feature_norm == "ple":
            self.bin_edges_ = quantile_bin_edges(x, self.ple_bins)
        return self

    def _transform_columns(self, x: Tensor) -> Tensor:
        """The columns of ``x`` mapped by the fitted statistics (set by :meth:`_fit_columns`)."""
        if self.feature_norm == "standard":
            assert self.mean_ is not None and self.scale_ is not None
            return standardise(x, self.mean_, self.scale_)
        if self.feature_norm == "quantile":
            assert self.quantile_values_ is not None and self.quantile_scores_ is not None
            return interpolate_normal_scores(x, self.quantile_values_, self.quantile_scores_)
        if self.feature_norm == "ple":
            assert self.bin_edges_ is not None
            return encode_piecewise_linear(x, self.bin_edges_)
        return x


def check_transform_input(data: Data) -> bool:
    """``ValueError`` for a graph the feature transform cannot read; whether it has labels
    (which must then be binary; they are checked, never read)."""
    labelled = getattr(data, "y", None) is not None
    # A transform can bring features beyond float32's range back into it: they are checked
    # after it (FeatureTransform refuses what is still beyond).
    if labelled:
        check_detection_graph(data, float32_range=False)
    else:
        check_node_graph(data, float32_range=False)
    return labelled


def validated_copy(data: Data) -> Data:
    """A copy of ``data`` checked by :func:`check_transform_input`, its labels ``long``."""
    labelled = check_transform_input(data)
    data = data.clone()
    if labelled:
        data.y = data.y.long()
    return data


def prepare_detection_data(data: Data, feature_norm: str = "none",
                           degree_feature: bool = False, ple_bins: int = 16) -> Data:
    """``FeatureTransform(feature_norm, degree_feature, ple_bins).fit_transform(data)``: a
    validated copy of ``data`` with float features, optionally ``log(1 + in-degree)`` appended,
    and each column transformed by its statistics over the nodes of ``data`` itself.

    Those statistics are dropped. That suits a graph that is fitted and scored whole; to score
    other graphs later (tomorrow's graph, a batch of new nodes), keep the fitted
    :class:`FeatureTransform` and ``transform`` each of them: transformed here, each would be
    scaled by its own nodes, and the same raw node would get other inputs (a lone node, zeros)."""
    return FeatureTransform(feature_norm, degree_feature, ple_bins).fit_transform(data)


def transform_features(x: Tensor, feature_norm: str, ple_bins: int = 16) -> Tensor:
    """``x`` ``[N, F]`` with each column transformed over all ``N`` rows (no label involved):
    ``none``; ``standard`` z-scores; ``quantile`` normal scores of the ranks
    (:func:`quantile_normal`); ``ple`` the piecewise-linear encoding of ``ple_bins`` quantile
    bins (:func:`piecewise_linear_encoding`, which widens ``x``). :class:`FeatureTransform`
    fitted and applied on ``x`` alone."""
    if feature_norm in ("standard", "quantile") and not x.is_floating_point():
        x = x.float()  # integer counts: z-scores and normal scores are fractions
    return FeatureTransform(feature_norm, ple_bins=ple_bins)._fit_columns(x)._transform_columns(x)


def standard_statistics(x: Tensor) -> tuple[Tensor, Tensor]:
    """``(mean, scale)`` of each column of ``x``: the mean and the (unbiased) standard
    deviation, 1 where that is 0 (a constant column is centred, not divided by 0)."""
    if not x.is_floating_point():
        x = x.float()
    std = x.std(dim=0)
    return x.mean(dim=0), torch.where(std > 0, std, torch.ones_like(std))


def standardise(x: Tensor, mean: Tensor, scale: Tensor) -> Tensor:
    """``(x - mean) / scale`` column by column (:func:`standard_statistics`)."""
    if not x.is_floating_point():
        x = x.float()
    return (x - mean.to(x.device)) / scale.to(x.device)


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
    return encode_piecewise_linear(x, quantile_bin_edges(x, bins))


def quantile_bin_edges(x: Tensor, bins: int = 16) -> list[Tensor]:
    """Each column's bin edges :math:`b_0 < \\dots < b_T` of
    :func:`piecewise_linear_encoding`, float64 on the CPU."""
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
    # sorted, repeated edges merged
    return [torch.unique(quantile(column, levels)).cpu() for column in work.unbind(dim=1)]


def encode_piecewise_linear(x: Tensor, bin_edges: list[Tensor]) -> Tensor:
    """The encoding of :func:`piecewise_linear_encoding` on given ``bin_edges`` (one tensor
    per column of ``x``), in float64, returned in ``x``'s dtype (float32 for integers)."""
    check_fitted_width(x, len(bin_edges))
    if not x.is_floating_point():
        x = x.float()
    work = float64_on_host_if_needed(x)
    columns = []
    for column, edges in zip(work.unbind(dim=1), bin_edges):
        if edges.numel() < 2:  # a constant column: a single bin with nothing to encode
            columns.append(column.new_zeros(column.numel(), 1))
            continue
        edges = edges.to(work.device)
        low, high = edges[:-1], edges[1:]
        columns.append(((column.unsqueeze(1) - low) / (high - low)).clamp_(0.0, 1.0))
    return torch.cat(columns, dim=1).to(x.device, x.dtype)


def check_fitted_width(x: Tensor, fitted: int) -> None:
    """``ValueError`` unless ``x`` is ``[N, fitted]``: fitted statistics cover those columns."""
    if x.dim() != 2 or x.size(1) != fitted:
        raise ValueError(f"x must be [N, {fitted}] (the fitted columns), got {tuple(x.shape)}")


def quantile_normal(x: Tensor) -> Tensor:
    """Each column's average rank mapped to standard-normal scores (ties share a score), in
    ``x``'s floating dtype and device (float32 for integer columns: cast back to an integer
    dtype the scores were truncated to zeros). NaN is refused (it made its column NaN)."""
    return interpolate_normal_scores(x, *quantile_knots(x))


def quantile_knots(x: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    r"""``(values, scores)``, per column of ``x`` ``[N, F]``: its distinct values
    :math:`u_1 < \dots < u_K` and their normal scores :math:`\Phi^{-1}(r_k / (N + 1))`,
    :math:`r_k` the average rank of :math:`u_k` among the ``N`` rows. CPU tensors: the values in
    ``x``'s precision (float64 for integers), which holds them exactly, and the scores in the
    dtype :func:`quantile_normal` returns."""
    from scipy.stats import norm

    if x.dim() != 2 or x.size(0) == 0:
        raise ValueError(f"x must be [N, F] with N > 0, got {tuple(x.shape)}")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError("quantile_normal: x holds NaN or inf")
    work = x.detach().cpu().double().numpy()
    value_dtype = x.dtype if x.is_floating_point() else torch.float64
    score_dtype = x.dtype if x.is_floating_point() else torch.float32
    values, value_scores = [], []
    for column in work.T:
        distinct, counts = np.unique(column, return_counts=True)
        # the mean of the ranks a tied group takes, as scipy.stats.rankdata(method="average")
        # computes it (first rank + (count - 1) / 2, exact in float64): the same scores
        average_rank = (np.cumsum(counts) - counts + 1) + (counts - 1) / 2
        values.append(torch.from_numpy(distinct).to(value_dtype))
        value_scores.append(
            torch.from_numpy(norm.ppf(average_rank / (x.size(0) + 1))).to(score_dtype))
    return values, value_scores


def interpolate_normal_scores(x: Tensor, values: list[Tensor], scores: list[Tensor]) -> Tensor:
    """Each column of ``x`` mapped through its ``(values, scores)`` of :func:`quantile_knots`:
    a fitted value gets its own score exactly, a value between two fitted ones the linear
    interpolation of theirs, a value outside the fitted range the nearer end's score. In
    ``x``'s floating dtype and device (float32 for integers)."""
    check_fitted_width(x, len(values))
    work = x.detach().cpu().double().numpy()
    mapped = np.empty_like(work)
    for j, (column_values, column_scores) in enumerate(zip(values, scores)):
        # np.interp holds the end scores outside the range, and returns a knot's own score
        # at the knot (not one rounded through the slope)
        mapped[:, j] = np.interp(work[:, j], column_values.double().numpy(),
                                 column_scores.double().numpy())
    dtype = x.dtype if x.is_floating_point() else torch.float32
    return torch.from_numpy(mapped).to(device=x.device, dtype=dtype)
