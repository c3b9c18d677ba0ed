"""Gradient-boosted trees on neighbourhood-aggregated features: the model that leads GADBench's
fully supervised ranking, with the same fit / decision_function / predict as the other detectors."""
from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score
from torch import Tensor
from torch_geometric.data import Data

from ..baselines.node import mean_neighbours
from .base import BaseDetector
from .config import GBT_FEATURES, GBTDetectorConfig
from .label_trick import FittedGraphLabels, known_labels


def neighbourhood_features(x: Tensor, edge_index: Tensor, kind: str = "x_mean_mean2",
                           self_loops: bool = False) -> np.ndarray:
    """``x``, ``[x, mean(x)]`` or ``[x, mean(x), mean(mean(x))]`` over in-neighbours, float32.
    Self-loops are ignored unless ``self_loops`` (how detectors saved before they were
    ignored computed them: a loaded one scores the features it was trained on).

    Args:
        x: the node features ``[N, F]``.
        edge_index: the edges ``[2, E]``, from ``edge_index[0]`` to ``edge_index[1]`` (a node's
            in-neighbours are the sources of its in-edges; repeated edges count again).
        kind: ``"x"``, ``"x_mean"`` or ``"x_mean_mean2"`` (anything else raises
            ``ValueError``).
        self_loops: count a self-loop as a neighbour.

    Returns:
        A NumPy float32 array ``[N, F]``, ``[N, 2F]`` or ``[N, 3F]``.
    """
    if kind not in GBT_FEATURES:
        raise ValueError(f"features must be one of {GBT_FEATURES}, got {kind!r}")
    x = x.detach()  # trees take no gradient; a tensor that requires one cannot be .numpy()
    parts = [x]
    if kind != "x":
        parts.append(mean_neighbours(x, edge_index, self_loops))
    if kind == "x_mean_mean2":
        parts.append(mean_neighbours(parts[1], edge_index, self_loops))
    return torch.cat(parts, dim=-1).cpu().numpy().astype(np.float32)


def sklearn_percentile_method() -> Literal["averaged_inverted_cdf", "midpoint"]:
    """The interpolation of scikit-learn's unweighted histogram binning: ``"averaged_inverted_cdf"``
    from scikit-learn 1.9, ``"midpoint"`` before (a minimum-version audit read 1.4.2 to 1.8.0:
    with 1.9's method there, the binner's trees differed from scikit-learn's own, probabilities
    up to 0.22 apart)."""
    import sklearn

    major, minor = (int(part) for part in sklearn.__version__.split(".")[:2])
    return "averaged_inverted_cdf" if (major, minor) >= (1, 9) else "midpoint"


class QuantileBinner:
    """Scikit-learn's *unweighted* HistGradientBoosting binning, for all columns at once.

    A column with at most ``max_bins`` distinct training values is left as it is (scikit-learn
    cuts it between the values). Any other column is replaced by its bin index among the
    training quantiles that scikit-learn would use without sample weights (254 percentiles by
    :func:`sklearn_percentile_method`, duplicates merged; a value equal to an edge falls in the
    lower bin, as in scikit-learn). Each transformed column then has at most ``max_bins`` distinct
    values, so scikit-learn keeps one bin per value and grows the same trees as on the raw
    features without weights, but never calls its weighted percentile.

    Args:
        max_bins: the most bins per column, in ``[2, 255]`` (scikit-learn's own default: 255).
    """

    def __init__(self, max_bins: int = 255) -> None:
        if not 2 <= max_bins <= 255:
            raise ValueError(f"max_bins must lie in [2, 255], got {max_bins}")
        self.max_bins = max_bins

    def fit(self, features: np.ndarray) -> QuantileBinner:
        """Find the bin edges of the columns with more than ``max_bins`` distinct values.

        Args:
            features: the training rows ``[n, F]``, finite (``ValueError`` otherwise).

        Returns:
            The binner itself.
        """
        if features.ndim != 2 or not np.isfinite(features).all():
            raise ValueError("QuantileBinner needs a finite 2-D feature matrix")
        ordered = np.sort(features, axis=0)
        distinct = 1 + (np.diff(ordered, axis=0) != 0).sum(axis=0)
        self.wide_ = np.flatnonzero(distinct > self.max_bins)
        percentiles = np.linspace(0, 100, self.max_bins + 1)[1:-1]
        edges = (np.percentile(ordered[:, self.wide_], percentiles, axis=0,
                               method=sklearn_percentile_method())
                 if self.wide_.size else np.empty((percentiles.size, 0)))
        self.edges_ = [np.unique(edges[:, i]) for i in range(self.wide_.size)]
        return self

    def transform(self, features: np.ndarray) -> np.ndarray:
        """Each binned column replaced by its bin indices; the other columns as they are.

        Args:
            features: rows ``[n, F]`` with the fitted columns.

        Returns:
            A float32 copy of ``features``.
        """
        out = np.array(features, dtype=np.float32, copy=True)
        for column, edges in zip(self.wide_, self.edges_):
            out[:, column] = np.searchsorted(edges, features[:, column], side="left")
        return out


class GBTDetector(FittedGraphLabels, BaseDetector):
    """scikit-learn ``HistGradientBoostingClassifier`` on :func:`neighbourhood_features`, with
    class-balanced sample weights (the analogue of ET's weighted loss; ``class_balance="none"``
    drops them). It trains on the training
    nodes only; the validation nodes give the threshold and ``fit_info_["val_auroc"]``. With
    ``label_trick`` the features gain ET's label-trick columns (see
    :class:`~et_graph.detectors.config.GBTModelConfig`).

    Args:
        config: the detector's config (:class:`~et_graph.detectors.GBTDetectorConfig`, default:
            its defaults).
        seed: the trees' ``random_state``.
        progress: accepted for the common interface; the trees show no progress bar.
        device: checked as for :class:`~et_graph.detectors.BaseDetector`; scikit-learn fits
            and scores the trees on the CPU.
        chunk_size, chunk_edges: refused (only ``ETDetector`` scores in chunks).
        **keywords: any field of :class:`~et_graph.detectors.GBTModelConfig`, e.g.
            ``max_iter=300`` or ``features="x_mean"``.
    """

    config_class = GBTDetectorConfig
    config: GBTDetectorConfig

    def _fit(self, data: Data, y: Tensor, train: Tensor, val: Tensor) -> None:
        m = self.config.model
        features = neighbourhood_features(data.x, data.edge_index, m.features)
        if m.label_trick:
            features = self._with_label_columns(features, data, y, train)
        y_np = y.numpy()
        y_train = y_np[train.numpy()]
        positives = int(y_train.sum())
        weight = (np.where(y_train == 1, (y_train.size - positives) / positives, 1.0)
                  if m.class_balance == "weight" else None)
        self.model_ = HistGradientBoostingClassifier(
            max_iter=m.max_iter, learning_rate=m.learning_rate, max_depth=m.max_depth,
            max_leaf_nodes=m.max_leaf_nodes, min_samples_leaf=m.min_samples_leaf,
            l2_regularization=m.l2_regularization, max_features=m.max_features,
            random_state=self.seed,
            # scikit-learn's "auto" switches early stopping on above 10,000 samples: it would
            # then hold out 10% of the training nodes and stop on their loss (YelpChi, T-Finance
            # at 40%), unlike the neural models, which train on every training node. Off, as it
            # always was below that size (every stored table).
            early_stopping=False,
        )
        self.binner_ = (QuantileBinner().fit(features[train.numpy()])
                        if m.binning == "unweighted" else None)
        features = self._binned(features)
        self.model_.fit(features[train.numpy()], y_train, sample_weight=weight)
        prob_val = self.model_.predict_proba(features[val.numpy()])[:, 1]
        self.fit_info_ = {"val_auroc": float(roc_auc_score(y_np[val.numpy()], prob_val)),
                          "iterations": int(self.model_.n_iter_)}
        self.history_ = []
        self.ignores_self_loops_ = True

    def _score(self, data: Data) -> Tensor:
        return self._score_features(self._features(data))

    def _features(self, data: Data) -> np.ndarray:
        """The rows the fitted trees read for ``data`` (prepared): its neighbourhood features,
        and the label-trick columns where the trees use them."""
        # A detector saved before self-loops were ignored (no attribute) keeps counting them.
        self_loops = not getattr(self, "ignores_self_loops_", False)
        features = neighbourhood_features(data.x, data.edge_index, self.config.model.features,
                                          self_loops)
        if getattr(self.config.model, "label_trick", False):
            features = self._append_label_columns(features, data)
        return features

    def _score_features(self, features: np.ndarray) -> Tensor:
        """The anomaly probability of each row of :meth:`_features`."""
        return torch.from_numpy(self.model_.predict_proba(self._binned(features))[:, 1])

    def _with_label_columns(self, features: np.ndarray, data: Data, y: Tensor,
                            train: Tensor) -> np.ndarray:
        """``features`` with the label-trick columns from every training label, on every row.

        A tree reads a node's row alone, and the columns are one hop without self-loops, so no
        row holds its own label, directly or through a neighbour: the two-hop return that makes
        ET split its training nodes into label and target halves cannot happen here. Every row
        then sees the labels as a validation or test row will, the full training set known."""
        # The trees fit on the CPU, wherever the graph lies.
        self.train_labels_ = known_labels(y.cpu(), train.cpu())
        self._remember_fitted_graph(data)
        # The columns scoring will give the fitted graph, from the same code path.
        return self._append_label_columns(features, data)

    def _append_label_columns(self, features: np.ndarray, data: Data) -> np.ndarray:
        return np.concatenate([features, self.label_columns(data).numpy()], axis=1)

    def _binned(self, features: np.ndarray) -> np.ndarray:
        return features if self.binner_ is None else self.binner_.transform(features)
