"""The unsupervised node anomaly protocol (BOND / PyGOD style) behind ``et-graph unsupervised``:
its typed config, the sealing of the labels (:class:`SealedLabels`, :func:`load_graph`), the
label-free scoring of every detector (:func:`compute_scores`) and the all-node metrics
(:func:`evaluate_all_nodes`). The run loop, report and CLI are in
:mod:`et_graph.experiments.unsupervised_anomaly`.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import Tensor
from torch_geometric.data import Data

from ..baselines.unsupervised import (
    PYGOD_MODELS,
    SKLEARN_MODELS,
    STRUCTURE_MODELS,
    BaselineUnavailable,
    baseline_scorer,
)
from ..config import RunConfig, parse_model_list
from ..datasets.anomaly_data import file_dataset_name
from ..datasets.fraud_mat import check_unlabelled_prefix
from ..detectors.unsupervised import (
    MaskedETModelConfig,
    MaskedTrainConfig,
    UnsupervisedETDetector,
    UnsupervisedETDetectorConfig,
    UnsupervisedScoreConfig,
    label_free_graph,
)
from ..exceptions import SkippedBaselineWarning
from ..progress import progress_bar
from ..protocols.anomaly import recall_at_k
from ..transforms.features import FEATURE_NORMS, transform_features
from ..transforms.neighbourhood import parse_neighbour_stats
from .significance import check_bootstrap_rounds

METRICS = ("auroc", "auprc", "rec_at_k")
MODEL_NAMES = ("et", *SKLEARN_MODELS, *STRUCTURE_MODELS, *PYGOD_MODELS)
#: The models that read each model-specific config section or field (the rest read by all).
FLAG_READERS = {
    "model": ("et",), "train": ("et",), "score": ("et",),
    **{f"baselines.iforest_{name}": ("iforest",)
       for name in ("trees", "max_samples", "max_features", "neighbour_stats")},
    "baselines.lof_neighbors": ("lof",), "baselines.lof_neighbour_stats": ("lof",),
    "baselines.pygod_epochs": PYGOD_MODELS, "run.native_attention": ("et",),
}


@dataclass
class UnsupervisedDataConfig:
    """Which graph, and the label-free feature transform every detector gets.

    Attributes:
        dataset: named anomaly dataset: reddit or inj_amazon (embedded PyGOD graphs), or any
            other name et_graph.datasets.load_anomaly_dataset knows.
        data: path to a graph file (a PyGOD .pt / .pt.zip, or .npz / .mat); overrides dataset.
        data_root: folder holding the dataset files (none = the shipped datasets/ folder).
        feature_norm: per-column transform of the features over all nodes: none, standard
            (z-scores), quantile (normal scores of the ranks) or ple (piecewise-linear
            encoding of 16 quantile bins per column).
        unlabelled_prefix: leading nodes of a CARE-GNN .mat file without labels, scored but
            not evaluated (none = 3305 for Amazon, 0 otherwise).
        binarize: read a .npz/.pt file's labels as anomalous where > 0 (multi-type anomaly
            labels); none = only for PyGOD's inj_*/gen_* files.
    """

    dataset: str = "reddit"
    data: Optional[str] = None
    data_root: Optional[str] = None
    feature_norm: str = "standard"
    unlabelled_prefix: Optional[int] = None
    binarize: Optional[bool] = None

    def __post_init__(self) -> None:
        check_unlabelled_prefix(self.unlabelled_prefix)
        if self.feature_norm not in FEATURE_NORMS:
            raise ValueError(f"feature_norm must be one of {FEATURE_NORMS}, "
                             f"got {self.feature_norm!r}")


@dataclass
class UnsupervisedProtocolConfig:
    """Seeds and detectors.

    Attributes:
        seeds: number of runs; run i uses seed seed + i for every detector.
        seed: the first seed.
        models: comma list of et, iforest, lof, degree (each node's in-degree), dominant,
            anomalydae, cola, conad (the last four need pip install -e .[pygod]; missing ones
            are reported as skipped).
        bootstrap_rounds: also AUPRC differences over the scored nodes (ET minus each baseline,
            beside DeLong's for AUROC), their node variance from a paired class-stratified
            bootstrap of this many draws: 0 = off, else at least 100, 2000 a good value (it
            evaluates AUPRC rounds x seeds x baselines times).
    """

    seeds: int = 5
    seed: int = 0
    models: str = "et,iforest,lof,degree,dominant,anomalydae,cola,conad"
    bootstrap_rounds: int = 0

    def __post_init__(self) -> None:
        check_bootstrap_rounds(self.bootstrap_rounds)
        if self.seeds <= 0:
            raise ValueError(f"seeds must be positive, got {self.seeds}")
        self.model_names()

    def model_names(self) -> list[str]:
        return parse_model_list(self.models, MODEL_NAMES)


@dataclass
class UnsupervisedBaselineConfig:
    """The baselines (each at its library's defaults otherwise).

    Attributes:
        iforest_trees: IsolationForest trees.
        iforest_max_samples: nodes each IsolationForest tree draws, capped at the node count
            (256 is scikit-learn's "auto").
        iforest_max_features: share of the feature columns each tree draws, in (0, 1].
        iforest_neighbour_stats: neighbour statistics appended to IsolationForest's features
            (comma list of mean, sq_mean, max, min, std, degree; the columns are then z-scored),
            or none: the node features alone.
        lof_neighbors: LOF neighbours.
        lof_neighbour_stats: the same for LOF.
        pygod_epochs: training epochs of the PyGOD detectors (PyGOD's default is 100).
    """

    iforest_trees: int = 100
    iforest_max_samples: int = 256
    iforest_max_features: float = 1.0
    iforest_neighbour_stats: str = "none"
    lof_neighbors: int = 20
    lof_neighbour_stats: str = "none"
    pygod_epochs: int = 100

    def __post_init__(self) -> None:
        for name in ("iforest_trees", "lof_neighbors", "pygod_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"baselines.{name} must be at least 1, got {getattr(self, name)}")
        if self.iforest_max_samples < 2:
            raise ValueError("baselines.iforest_max_samples must be at least 2, got "
                             f"{self.iforest_max_samples}")
        if not 0.0 < self.iforest_max_features <= 1.0:
            raise ValueError("baselines.iforest_max_features must be in (0, 1], got "
                             f"{self.iforest_max_features}")
        for name in ("iforest_neighbour_stats", "lof_neighbour_stats"):
            try:
                chosen = parse_neighbour_stats(getattr(self, name))
            except ValueError as error:
                raise ValueError(f"baselines.{name}: {error}") from None
            # One spelling ("NONE" and "" are "none"): a default spelled otherwise added a
            # NAME_defaults row identical to the main one, described as other settings.
            setattr(self, name, ",".join(chosen) if chosen else "none")

    def scorer(self, name: str, seed: int, device: str = "cpu") -> Callable[[Data], np.ndarray]:
        """:func:`~et_graph.baselines.unsupervised.baseline_scorer` with these settings."""
        return baseline_scorer(name, seed, self.iforest_trees, self.lof_neighbors,
                               self.pygod_epochs, device,
                               iforest_max_samples=self.iforest_max_samples,
                               iforest_max_features=self.iforest_max_features,
                               iforest_neighbour_stats=self.iforest_neighbour_stats,
                               lof_neighbour_stats=self.lof_neighbour_stats)

    #: Each scikit-learn baseline's own settings.
    FIELDS: ClassVar[dict[str, tuple[str, ...]]] = {
        "iforest": ("iforest_trees", "iforest_max_samples", "iforest_max_features",
                    "iforest_neighbour_stats"),
        "lof": ("lof_neighbors", "lof_neighbour_stats"),
    }

    def changed_from_defaults(self, name: str) -> bool:
        """Whether scikit-learn baseline ``name`` runs with other settings than its defaults
        (the runner then adds a ``NAME_defaults`` row, so both are shown)."""
        defaults = type(self)()
        return any(getattr(self, f) != getattr(defaults, f) for f in self.FIELDS.get(name, ()))

    def describe(self, names: list[str]) -> str:
        """The settings of the scikit-learn baselines among ``names``, for the protocol line."""
        def features(stats: str) -> str:
            chosen = parse_neighbour_stats(stats)
            return ("x" if not chosen else
                    f"[x, in-neighbours' {', '.join(chosen)}], columns z-scored")
        parts = []
        if "iforest" in names:
            parts.append(f"IsolationForest on {features(self.iforest_neighbour_stats)}: "
                         f"{self.iforest_trees} trees, min({self.iforest_max_samples}, N) "
                         f"samples, max_features {self.iforest_max_features:g}")
        if "lof" in names:
            parts.append(f"LOF on {features(self.lof_neighbour_stats)}: "
                         f"min({self.lof_neighbors}, N - 1) neighbours")
        if "degree" in names:
            parts.append("degree = each node's in-degree (no learning, no feature: the floor "
                         "a structural score must clear)")
        d = type(self)()
        at_defaults = {"iforest": f"x, {d.iforest_trees} trees, min({d.iforest_max_samples}, N) "
                                  "samples",
                       "lof": f"x, min({d.lof_neighbors}, N - 1) neighbours"}
        parts += [f"{n}_defaults = the same detector at its defaults ({at_defaults[n]}), in "
                  "the same run" for n in names if self.changed_from_defaults(n)]
        return "; ".join(parts)


@dataclass
class UnsupervisedAnomalyConfig:
    """Everything ``et-graph unsupervised`` needs (preset: ``configs/anomaly/unsupervised.toml``,
    with ``--dataset`` choosing the graph)."""

    data: UnsupervisedDataConfig = field(default_factory=UnsupervisedDataConfig)
    protocol: UnsupervisedProtocolConfig = field(default_factory=UnsupervisedProtocolConfig)
    model: MaskedETModelConfig = field(default_factory=MaskedETModelConfig)
    train: MaskedTrainConfig = field(default_factory=MaskedTrainConfig)
    score: UnsupervisedScoreConfig = field(default_factory=UnsupervisedScoreConfig)
    baselines: UnsupervisedBaselineConfig = field(default_factory=UnsupervisedBaselineConfig)
    run: RunConfig = field(default_factory=RunConfig)

    #: ``--quick``: 2 seeds, 5 epochs, one scoring round, 5 PyGOD epochs.
    QUICK: ClassVar[dict[str, Any]] = {
        "train.epochs": 5, "protocol.seeds": 2, "score.score_rounds": 1,
        "baselines.pygod_epochs": 5,
    }

    @property
    def seed_list(self) -> list[int]:
        return [self.protocol.seed + i for i in range(self.protocol.seeds)]

    def detector_config(self) -> UnsupervisedETDetectorConfig:
        return UnsupervisedETDetectorConfig(model=self.model, train=self.train, score=self.score)


# ----------------------------------------------------------------------------------------------
# Phase 1: the graph, with its labels sealed
# ----------------------------------------------------------------------------------------------
class SealedLabels:
    """A graph's labels, set aside at loading. Nothing in the scoring phase receives this
    object; :meth:`open` is called once every score exists."""

    def __init__(self, y: Tensor, evaluated: Optional[Tensor] = None) -> None:
        self._y = y.detach().cpu().long().clone()
        # The labelled nodes (the graph's label_mask, e.g. Amazon's 3,305 unlabelled ones are
        # out); None = every node. Every node is scored either way.
        self._evaluated = None if evaluated is None else evaluated.detach().cpu().bool().clone()

    def open(self) -> np.ndarray:
        return self._y.numpy().copy()

    def evaluated(self) -> Optional[np.ndarray]:
        """Bool ``[N]`` of the nodes the metrics read, or ``None`` for all of them."""
        return None if self._evaluated is None else self._evaluated.numpy().copy()


def normalise_features(x: Tensor, feature_norm: str) -> Tensor:
    """``x`` with each column transformed over all nodes (no label involved), by
    :func:`et_graph.transforms.transform_features`."""
    return transform_features(x, feature_norm)


def load_graph(config: UnsupervisedDataConfig, data: Optional[Data] = None
               ) -> tuple[Data, SealedLabels]:
    """``(label-free graph, sealed labels)`` of the configured dataset (or of ``data``, a PyG
    ``Data`` with binary ``y``). The graph holds ``x`` (transformed by ``feature_norm``),
    ``edge_index`` and ``name`` only."""
    if data is None:
        from ..datasets import load_anomaly_dataset

        # a file (data) names itself; a named dataset is looked up under data_root
        data = load_anomaly_dataset(None if config.data else config.dataset,
                                    root=config.data_root, path=config.data or None,
                                    unlabelled_prefix=config.unlabelled_prefix,
                                    binarize=config.binarize,
                                    # every node is scored: a file's masks play no part
                                    split_masks=False)
    y = getattr(data, "y", None)
    if y is None:
        raise ValueError("et-graph unsupervised evaluates the scores against labels, so the "
                         "graph needs data.y (read only after scoring); to score a graph "
                         "without labels use et_graph.detectors.UnsupervisedETDetector")
    y = y.view(-1) if y.dim() == 2 and 1 in y.shape else y
    if y.shape != (data.num_nodes,) or not bool(
            torch.isin(y.long().cpu(), torch.tensor([0, 1])).all()):
        raise ValueError(f"data.y must be a binary vector [{data.num_nodes}] "
                         "(0 = normal, 1 = anomalous)")
    name = str(getattr(data, "name", None) or (file_dataset_name(config.data)
                                               if config.data else config.dataset))
    label_mask = getattr(data, "label_mask", None)
    if label_mask is not None:
        label_mask = torch.as_tensor(label_mask).view(-1).bool()
        if label_mask.shape != (data.num_nodes,) or not bool(label_mask.any()):
            raise ValueError(f"data.label_mask must be a bool vector [{data.num_nodes}] "
                             "marking at least one labelled node")
    # Both classes among the evaluated nodes, checked now: found after every fit, a one-class
    # file cost every detector's training (an audit). It says nothing of any score.
    evaluated = y.long().cpu() if label_mask is None else y.long().cpu()[label_mask.cpu()]
    check_both_classes(int(evaluated.sum()), evaluated.numel(),
                       f"the {evaluated.numel()} "
                       f"{'labelled nodes' if label_mask is not None else 'nodes'} hold "
                       f"{int(evaluated.sum())} anomalies; to score a graph without "
                       "evaluating, use et_graph.detectors.UnsupervisedETDetector")
    graph = label_free_graph(data)
    graph.x = normalise_features(graph.x, config.feature_norm)
    graph.name = name
    return graph, SealedLabels(y, label_mask)


# ----------------------------------------------------------------------------------------------
# Phase 2: scores, without labels
# ----------------------------------------------------------------------------------------------
def compute_scores(graph: Data, config: UnsupervisedAnomalyConfig
                   ) -> tuple[dict[str, list[np.ndarray]], dict[str, str], list[dict[str, Any]]]:
    """Fit every configured detector on the label-free ``graph`` for every seed.

    Returns ``(scores, skipped, details)``: ``scores[row]`` one ``[N]`` array per seed (ET gives
    the rows ``et_reconstruction`` and ``et_energy``), ``skipped[name]`` the reason a baseline
    could not run, ``details`` per-seed training facts (no metric: there are no labels here).
    """
    if getattr(graph, "y", None) is not None:
        raise ValueError("compute_scores takes the label-free graph of load_graph (it has a y)")
    names = config.protocol.model_names()
    progress = config.run.progress
    b = config.baselines
    scores: dict[str, list[np.ndarray]] = {}
    skipped: dict[str, str] = {}
    details: list[dict[str, Any]] = []
    for seed in progress_bar(config.seed_list, desc=f"{graph.name} seeds", disable=not progress):
        detail: dict[str, Any] = {"seed": seed}
        for name in names:
            if name in skipped:
                continue
            start = time.perf_counter()
            if name == "et":
                det = UnsupervisedETDetector(config.detector_config(), seed=seed,
                                             progress=progress, device=config.run.device)
                det.checkpoint = config.run.checkpoint(graph.name, "et", f"seed{seed}")
                det.fit(graph)
                for key, value in det.scores_.items():
                    scores.setdefault(f"et_{key}", []).append(value.numpy())
                info = det.fit_info_
                detail["et"] = {"best_epoch": info["best_epoch"],
                                "val_masked_mse": info["best_loss"],
                                "epochs_run": info["epochs_run"],
                                "epoch_seconds": info["epoch_seconds"]}
            else:
                scorer = b.scorer(name, seed, config.run.device)
                try:
                    score = scorer(graph)
                except BaselineUnavailable as reason:
                    if name not in skipped:  # said once, not once per seed
                        # A warning, not a print: library callers may route or silence it; the
                        # runner's table lists the skipped baselines again.
                        warnings.warn(f"skipped baseline {name}: {reason}", SkippedBaselineWarning,
                                      stacklevel=2)
                    # A row that scored earlier seeds is dropped whole, so that every row
                    # averages the same seeds (a shorter row crashed the runner later).
                    skipped[name] = (f"unavailable at seed {seed} ({reason}); its earlier seeds "
                                     "are dropped so that every row has the same seeds"
                                     if scores.pop(name, None) is not None else str(reason))
                    continue
                if score.shape != (graph.num_nodes,) or not np.isfinite(score).all():
                    raise ValueError(f"{name} returned scores of shape {score.shape} with "
                                     "non-finite values or the wrong length")
                scores.setdefault(name, []).append(np.asarray(score, dtype=np.float64))
                if b.changed_from_defaults(name):
                    # Chosen settings are shown beside the defaults, which may do better.
                    default = UnsupervisedBaselineConfig().scorer(name, seed)(graph)
                    scores.setdefault(f"{name}_defaults", []).append(
                        np.asarray(default, dtype=np.float64))
            detail.setdefault("seconds", {})[name] = time.perf_counter() - start
        details.append(detail)
    return scores, skipped, details


# ----------------------------------------------------------------------------------------------
# Phase 3: labels opened, metrics over all nodes
# ----------------------------------------------------------------------------------------------
def check_both_classes(anomalies: int, nodes: int, detail: str = "") -> None:
    """``ValueError`` unless the evaluated ``nodes`` hold both classes (``anomalies`` of them
    anomalous): checked when the labels are sealed, and again where the metrics read them."""
    if not 0 < anomalies < nodes:
        raise ValueError("the labels need both normal and anomalous nodes to evaluate"
                         + (f" ({detail})" if detail else ""))


def evaluate_all_nodes(y: np.ndarray, score: np.ndarray) -> dict[str, float]:
    """AUROC, AUPRC (average precision) and Rec@K (K = number of anomalies) over all nodes."""
    check_both_classes(int(y.sum()), y.size)
    return {"auroc": float(roc_auc_score(y, score)),
            "auprc": float(average_precision_score(y, score)),
            "rec_at_k": recall_at_k(y, score)}
