"""The tuning objective of node anomaly detection: fit one detector on the training nodes of the
configured split and score it on the *validation* nodes. No test label is read (a test scrambles
them and checks that every trial's objective stays the same)."""
from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any, cast

import numpy as np
import torch
from torch_geometric.data import Data

from ..config import merge
from ..detectors import SEARCH_SPACES, registered_detectors
from ..detectors.registry import DETECTOR_REGISTRY
from ..exceptions import ConfigWarning
from ..protocols.anomaly import make_splits, sealed_labels, validation_score
from ..protocols.anomaly_config import (
    UNKNOWN_MODEL_HINT,
    AnomalyConfig,
    detector_config,
    known_models,
    load_data,
    new_detector,
    with_detector_config,
)
from ..training import keeps_caller_rng
from ..training.checkpoint import data_digest
from .study import apply_space, pruning_callback, space_overrides, with_switch

TUNE_METRICS = ("auroc", "auprc", "f1_macro")

#: Where each detector's class weighting lives (``--tune-class-balance`` adds it to every
#: model's space, the same two choices each): the neural models' training loss, weighted or
#: not, and the trees' sample weights.
CLASS_BALANCE_SWITCHES: dict[str, tuple[str, str]] = {
    "et": ("train", "class_balance"), "mlp": ("train", "class_balance"),
    "gcn": ("train", "class_balance"), "gat": ("train", "class_balance"),
    "gbt": ("model", "class_balance"), "et_stacked": ("train", "class_balance"),
}
CLASS_BALANCE_CHOICES = ("weight", "none")


def search_space(model: str, class_balance: bool = False) -> Any:
    """``model``'s search space, with ``class_balance`` plus its weighting switch
    (:data:`CLASS_BALANCE_SWITCHES`). A registered detector's space is the one it was
    registered with; one without a space, or with ``class_balance``, is refused."""
    registered_space = DETECTOR_REGISTRY.tuning_space(model)
    if registered_space is not None:
        if class_balance:
            # Its class weighting lives wherever its factory reads it: only its own space can
            # add that one choice.
            raise ValueError(f"--tune-class-balance adds each built-in model's class weighting "
                             f"to its space; registered detector {model!r} has none known: add "
                             "the choice to its own search space, or drop the flag")
        return registered_space
    space = SEARCH_SPACES[model]
    if not class_balance:
        return space
    section, name = CLASS_BALANCE_SWITCHES[model]
    return with_switch(space, section, name, CLASS_BALANCE_CHOICES)


def trial_config(config: AnomalyConfig, model: str, space: Any, trial: Any) -> AnomalyConfig:
    """``config`` with ``trial``'s suggestions from ``space`` applied to ``model``'s settings
    (``trial=None``: ``config`` itself). A registered detector's space overrides the run
    config's own sections."""
    if trial is None:
        return config
    if model in registered_detectors():
        return apply_space(config, space, trial)
    base = detector_config(config, model)
    return with_detector_config(config, model, merge(base, space_overrides(space, trial)))


def validation_metric(y_val: np.ndarray, score_val: np.ndarray, metric: str) -> float:
    """The tuned metric on the validation nodes: the detectors' own checkpoint selection
    (:func:`~et_graph.protocols.anomaly.validation_score`), so a trial is read as it trains."""
    if metric not in TUNE_METRICS:
        raise ValueError(f"metric must be one of {TUNE_METRICS}, got {metric!r}")
    return validation_score(y_val, score_val, metric)[0]


class AnomalyObjective:
    """``objective(trial) -> validation metric`` for one detector of an :class:`AnomalyConfig`.

    The split is the config's first split (split seed, train ratio); the model seed is 0. With
    ``trial=None`` the objective evaluates the config as it is (used to check that a written
    preset reproduces its trial). ``class_balance=True`` adds the model's class weighting to
    its space (:func:`search_space`).
    """

    def __init__(self, config: AnomalyConfig, model: str, metric: str = "auroc",
                 data: Data | None = None, class_balance: bool = False) -> None:
        if model not in known_models():
            raise ValueError(f"unknown model {model!r}; choose from {list(known_models())} "
                             f"({UNKNOWN_MODEL_HINT})")
        if metric not in TUNE_METRICS:
            raise ValueError(f"metric must be one of {TUNE_METRICS}, got {metric!r}")
        self.config, self.model, self.metric = config, model, metric
        self.space = search_space(model, class_balance)
        self.data = load_data(config.data, data)
        p = config.protocol
        split = make_splits(self.data, p.protocol, 1, p.train_ratio, p.split_seed)[0]
        self.train_mask, self.val_mask, _ = split.masks(self.data.num_nodes)
        masks = getattr(self.data, "train_mask", None)
        several = (p.vary_split and p.protocol == "paper") or (
            p.protocol == "gadbench" and masks is not None and masks.dim() == 2
            and masks.size(1) > 1)
        if several:
            warnings.warn(
                "the tuner selects on the first split's validation nodes, but this protocol "
                "gives later seeds other splits (" + ("--vary-split" if p.vary_split else
                "the dataset's masks") + "), whose test nodes include them: a tuned preset "
                "scored over those seeds has seen part of its test nodes. Score it on the "
                "first split only (no --vary-split; under gadbench, one mask), or state it.",
                ConfigWarning, stacklevel=2)
        self.y_val = self.data.y.cpu()[self.val_mask.cpu()].numpy()
        # The models that train epochs keep one by their config's select_metric (the trees
        # have none); built here, a registered factory's wrong kind is found before any trial.
        settings = new_detector(config, model, 0).config
        selected = getattr(getattr(settings, "train", None), "select_metric", metric)
        if selected != metric:
            # (an engine audit) a GCN trial kept its epoch 13 (validation AUROC 0.797) for
            # the best F1, where epoch 10 had 0.861: the study looked worse than it was
            warnings.warn(
                f"tuning {model} for validation {metric}, but each trial keeps the epoch of "
                f"its best validation {selected} (train.select_metric) and is scored there, "
                f"and the pruner reads {metric} curves: pass --select-metric {metric} to tune "
                "what the epochs are chosen on", ConfigWarning, stacklevel=2)

    @property
    def preset_meta(self) -> dict[str, str]:
        """What this model's preset notes beside its settings: for a registered detector, the
        plugin that registers it (the preset runs with ``--plugin`` and that value)."""
        registered = registered_detectors().get(self.model)
        return {} if registered is None else registered.preset_meta

    def data_digest(self) -> str:
        """A digest of what the trials read: the graph, the split, and the training and
        validation labels (no test label), stored with the study so that it is never resumed
        on other data under the same name."""
        read = self.train_mask | self.val_mask
        return data_digest(self.data.x, self.data.edge_index,
                           getattr(self.data, "edge_type", None), self.train_mask,
                           self.val_mask, self.data.y[read])

    def trial_config(self, trial: Any) -> AnomalyConfig:
        """The run config with the trial's suggestions applied to this model's settings."""
        config = trial_config(self.config, self.model, self.space, trial)
        return replace(config, protocol=replace(config.protocol, models=self.model))

    @keeps_caller_rng  # it seeds the process's generator; a Python caller keeps its stream
    def __call__(self, trial: Any = None) -> float:
        config = self.trial_config(trial)
        torch.manual_seed(0)
        detector = new_detector(config, self.model, 0)
        if trial is not None and hasattr(detector, "on_epoch"):
            detector.on_epoch = pruning_callback(trial, self.metric)
        detector.fit(sealed_labels(self.data, self.train_mask, self.val_mask), self.train_mask,
                     self.val_mask)
        # (set by fit)
        score = cast(torch.Tensor, detector.decision_score_)[self.val_mask].double().numpy()
        value = validation_metric(self.y_val, score, self.metric)
        if trial is not None:
            trial.set_user_attr("fit", {k: v for k, v in detector.fit_info_.items()
                                        if isinstance(v, (int, float, str))})
        return value
