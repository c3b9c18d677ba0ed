"""Gradient-boosted trees on neighbourhood-aggregated features: the model that leads GADBench's
fully supervised ranking, with the same fit / decision_function / predict as the other detectors."""
from __future__ import annotations

import numpy as np
import torch
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score
from torch import Tensor
from torch_geometric.data import Data

from ..baselines.node import mean_neighbours
from .base import BaseDetector
from .config import GBTDetectorConfig

TREE_FEATURES = ("x", "x_mean", "x_mean_mean2")


def neighbourhood_features(x: Tensor, edge_index: Tensor, kind: str = "x_mean_mean2"
                           ) -> np.ndarray:
    """``x``, ``[x, mean(x)]`` or ``[x, mean(x), mean(mean(x))]`` over in-neighbours, float32."""
    if kind not in TREE_FEATURES:
        raise ValueError(f"features must be one of {TREE_FEATURES}, got {kind!r}")
    parts = [x]
    if kind != "x":
        parts.append(mean_neighbours(x, edge_index))
    if kind == "x_mean_mean2":
        parts.append(mean_neighbours(parts[1], edge_index))
    return torch.cat(parts, dim=-1).cpu().numpy().astype(np.float32)


class GBTDetector(BaseDetector):
    """scikit-learn ``HistGradientBoostingClassifier`` on :func:`neighbourhood_features`, with
    class-balanced sample weights (the analogue of ET's weighted loss). It trains on the training
    nodes only; the validation nodes give the threshold and ``fit_info_["val_auroc"]``."""

    config_class = GBTDetectorConfig

    def _fit(self, data: Data, y: Tensor, train: Tensor, val: Tensor) -> None:
        m = self.config.model
        features = neighbourhood_features(data.x, data.edge_index, m.features)
        y_np = y.numpy()
        y_train = y_np[train.numpy()]
        positives = int(y_train.sum())
        weight = np.where(y_train == 1, (y_train.size - positives) / positives, 1.0)
        self.model_ = HistGradientBoostingClassifier(
            max_iter=m.max_iter, learning_rate=m.learning_rate, max_depth=m.max_depth,
            max_leaf_nodes=m.max_leaf_nodes, min_samples_leaf=m.min_samples_leaf,
            l2_regularization=m.l2_regularization, max_features=m.max_features,
            random_state=self.seed,
        )
        self.model_.fit(features[train.numpy()], y_train, sample_weight=weight)
        prob_val = self.model_.predict_proba(features[val.numpy()])[:, 1]
        self.fit_info_ = {"val_auroc": float(roc_auc_score(y_np[val.numpy()], prob_val))}
        self.history_ = []

    def _score(self, data: Data) -> Tensor:
        features = neighbourhood_features(data.x, data.edge_index, self.config.model.features)
        return torch.from_numpy(self.model_.predict_proba(features)[:, 1])
