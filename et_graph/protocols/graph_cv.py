"""Stratified k-fold cross-validation for graph classification with an inner validation split.

Protocol (Errica et al., 2020; a single configuration per model, or, with
:func:`cross_validate_selected`, the candidate of a declared grid that wins each fold's inner
validation):
for each of ``folds`` stratified outer folds, the training part is split again (stratified) into
an inner training set and a validation set; the model is trained on the inner training set by
the one engine, :class:`~et_graph.training.Trainer`, with :class:`GraphClassificationTask`
(cross-entropy; validation score = accuracy, ties broken by the lower validation loss, then the
earlier epoch), and only the kept checkpoint is evaluated, once, on the test fold. Every model sees
the same folds and splits. Continuous node attributes are standardised with statistics of the
inner training graphs only. The test fold's labels are read once, after selection; they take no
part in training, selection or standardisation (``tests/test_tudataset_cv.py`` scrambles them).
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.model_selection import StratifiedKFold, train_test_split
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from ..nn.models.graph_model import ETGraphModel
from ..progress import progress_bar
from ..reporting import summarize
from ..training import (
    CheckpointConfig,
    FitResult,
    TrainConfig,
    Trainer,
    Validation,
    evaluates_model,
    keeps_caller_rng,
    seed_everything,
)
from ..training.checkpoint import fingerprint_with_graphs

ModelFactory = Callable[[], nn.Module]
#: ``checkpoint(fold, model_name)``: where one training of the CV checkpoints (or ``None``).
CheckpointFactory = Callable[[int, str], Optional[CheckpointConfig]]
#: ``on_model_fit(fold, model_name, model, fit)``: called after selection, before the test fold.
FitCallback = Callable[[int, str, nn.Module, FitResult], None]


@dataclass
class GraphTrainConfig(TrainConfig):
    """Training of a graph classifier: the engine's settings (inherited from
    :class:`TrainConfig`, with their docs) plus the batch size; the defaults
    are the protocol's (Adam, cosine decay to 5% of the LR, gradient norm clipped at 5).

    Attributes:
        batch_size: graphs per training batch.
        label_smoothing: the training loss is the cross-entropy against targets smoothed by
            this share (``F.cross_entropy(..., label_smoothing=)``: ``1 - s`` on the class,
            ``s`` spread evenly over all classes); 0 = plain cross-entropy. Validation
            accuracy and the validation loss (the tie-break) stay unsmoothed.
    """

    lr_schedule: str = "cosine"
    lr_floor: float = 0.05
    grad_clip: float = 5.0
    batch_size: int = 32
    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")
        smoothing = self.label_smoothing
        if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not (
            0.0 <= smoothing < 1.0
        ):
            raise ValueError(f"label_smoothing must lie in [0, 1), got {smoothing!r}")


def check_graph_labels(labels: Sequence[int] | Tensor | np.ndarray) -> np.ndarray:
    """Integer class labels ``[G]``; ``ValueError`` for other shapes and a single class."""
    labels = np.asarray(labels.cpu() if isinstance(labels, Tensor) else labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"labels must be one integer class per graph, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integer classes, got dtype {labels.dtype}")
    classes = np.unique(labels)
    if classes.size < 2:
        raise ValueError(
            f"the label set has a single class ({classes.tolist()}); classification needs at "
            "least two classes"
        )
    if not np.array_equal(classes, np.arange(classes.size)):
        # The models' outputs are indexed by class: {1, 2} or {-1, 1} fail deep in the loss.
        raise ValueError(
            f"labels must be the classes 0..C-1, got {classes.tolist()[:10]}; remap them, e.g. "
            "with np.unique(labels, return_inverse=True)"
        )
    return labels


def check_splits(splits: Sequence[tuple[np.ndarray, np.ndarray]], num_graphs: int
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Given ``(train_index, test_index)`` folds, validated: indices in range, a non-empty test
    fold, and no test graph among the training graphs (its label would enter training)."""
    checked = []
    for fold, (train_index, test_index) in enumerate(splits):
        train_index, test_index = np.asarray(train_index), np.asarray(test_index)
        for name, index in (("train", train_index), ("test", test_index)):
            if index.size and (not np.issubdtype(index.dtype, np.integer)
                               or index.min() < 0 or index.max() >= num_graphs):
                raise ValueError(f"fold {fold}: {name} indices must be integers in "
                                 f"[0, {num_graphs})")
        if train_index.size == 0 or test_index.size == 0:
            raise ValueError(f"fold {fold}: the train and test indices must both be non-empty")
        shared = np.intersect1d(train_index, test_index)
        if shared.size:
            raise ValueError(f"fold {fold}: {shared.size} graphs are in both train and test "
                             f"(e.g. {shared[:5].tolist()}); a test graph must not be trained on")
        checked.append((train_index, test_index))
    if not checked:
        raise ValueError("splits is empty")
    return checked


def stratified_folds(
    labels: Sequence[int] | np.ndarray, folds: int = 10, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``folds`` stratified ``(train_index, test_index)`` pairs; test folds partition the data."""
    labels = check_graph_labels(labels)
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    smallest = int(np.unique(labels, return_counts=True)[1].min())
    if smallest < folds:
        raise ValueError(
            f"the rarest class has {smallest} graphs, fewer than folds={folds}; use fewer folds"
        )
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return [(tr, te) for tr, te in splitter.split(np.zeros(labels.size), labels)]


def inner_split(
    train_index: np.ndarray, labels: Sequence[int] | np.ndarray, val_fraction: float = 0.1,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Stratified ``(inner_train_index, val_index)`` inside an outer training fold."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    labels = np.asarray(labels)
    try:
        inner, val = train_test_split(
            np.asarray(train_index), test_size=val_fraction, random_state=seed,
            stratify=labels[train_index],
        )
    except ValueError as error:  # sklearn's message names neither setting to change
        counts = np.bincount(labels[train_index])
        raise ValueError(
            f"cannot draw a stratified validation split of {val_fraction:g} from a training "
            f"fold of {len(train_index)} graphs (class counts {counts.tolist()}): use fewer "
            f"folds or a larger val_fraction (--folds, --val-fraction) ({error})") from None
    return np.sort(inner), np.sort(val)


def graph_labels(dataset: Sequence[Data]) -> np.ndarray:
    """One integer class per graph; ``ValueError`` for a graph without ``y`` or with float
    labels (``int()`` would truncate them, and the loss needs integer targets)."""
    for index, graph in enumerate(dataset):
        y = getattr(graph, "y", None)
        if y is None or y.numel() == 0:
            raise ValueError(f"graph {index} has no label y")
        if y.is_floating_point() or y.is_complex():
            raise ValueError(f"graph labels must be integer classes, got {y.dtype} (graph "
                             f"{index}); convert with y.long() after checking the values")
        if y.numel() != 1:
            # Only the first entry was read: a one-hot y inverted the classes, and a
            # per-node y gave the first node's label.
            raise ValueError(f"graph {index} has a y of shape {tuple(y.shape)}; graph "
                             "classification needs one integer class per graph (a one-hot "
                             "y: y.argmax())")
    return np.array([int(d.y.view(-1)[0]) for d in dataset])


def standardized_copies(
    dataset: Sequence[Data], fit_index: np.ndarray, continuous_channels: int
) -> list[Data]:
    """Copies whose first ``continuous_channels`` node-feature columns are standardised with the
    mean/std of the graphs in ``fit_index`` (no statistics from validation or test graphs)."""
    if continuous_channels <= 0:
        return list(dataset)
    stacked = torch.cat([dataset[i].x[:, :continuous_channels] for i in fit_index], dim=0)
    mean, std = stacked.mean(0), stacked.std(0, unbiased=False).clamp_min(1e-6)
    out = []
    for data in dataset:
        data = copy.copy(data)
        x = data.x.clone()
        x[:, :continuous_channels] = (x[:, :continuous_channels] - mean) / std
        data.x = x
        out.append(data)
    return out


def model_outputs(model: nn.Module, batch: Any) -> Tensor:
    """Logits of a graph model on a PyG batch (``forward_data`` if the model has it; the
    preset, not the data, chooses the fields ET reads)."""
    if isinstance(model, ETGraphModel):
        return model.forward_data(batch, unused="ignore")
    forward_data = getattr(model, "forward_data", None)
    if forward_data is not None:
        return forward_data(batch)
    return model(batch.x, batch.edge_index, batch.batch)


@torch.no_grad()
@evaluates_model
def evaluate(model: nn.Module, loader: DataLoader, device: str | torch.device = "cpu"
             ) -> dict[str, float]:
    """Accuracy and mean cross-entropy of ``model`` (eval mode, its mode given back) on
    ``loader``."""
    correct, total, loss = 0, 0, 0.0
    for batch in loader:
        batch = batch.to(device)
        logits = model_outputs(model, batch)
        target = class_targets(batch, logits)
        loss += float(F.cross_entropy(logits, target, reduction="sum"))
        correct += int((logits.argmax(-1) == target).sum())
        total += target.numel()
    return {"accuracy": correct / max(total, 1), "loss": loss / max(total, 1)}


@torch.no_grad()
@evaluates_model
def predict_logits(model: nn.Module, loader: DataLoader, device: str | torch.device = "cpu"
                   ) -> tuple[Tensor, Tensor]:
    """Logits ``[N, C]`` of ``model`` (eval mode) on every graph of ``loader``, in its order,
    and the targets ``[N]``. Argmax over them gives :func:`evaluate`'s accuracy exactly (the
    same forward passes on the same batches). The model's mode is given back."""
    logits, targets = [], []
    for batch in loader:
        batch = batch.to(device)
        out = model_outputs(model, batch)
        targets.append(class_targets(batch, out).cpu())
        logits.append(out.detach().cpu())
    return torch.cat(logits), torch.cat(targets)


def class_targets(batch: Any, logits: Tensor) -> Tensor:
    """``batch.y`` as one integer class per graph ``[B]``, or a ``ValueError``: the helpers
    here score single-label classification. Multi-task labels ``[B, T]`` came back flattened
    beside ``[B, T]`` logits, NaN included, or failed in torch on a batch size mismatch, and
    regression targets on a dtype (a graph-level audit)."""
    y = getattr(batch, "y", None)
    if y is None:
        raise ValueError("the graphs have no labels (y): graph_cv scores single-label "
                         "classification, one integer class per graph")
    if y.is_floating_point() or y.dtype == torch.bool or y.numel() != logits.size(0):
        raise ValueError(
            f"graph_cv scores single-label classification (one integer class per graph), "
            f"and the batch's y has shape {tuple(y.shape)} and dtype {y.dtype} for "
            f"{logits.size(0)} graphs: for multi-task or regression targets, write the loss "
            "and the metric of your own loop over the model's [B, out_channels] outputs")
    return y.view(-1)


def argmax_accuracy(scores: Tensor, target: Tensor) -> float:
    """Share of rows of ``scores [N, C]`` whose argmax is the target, counted as
    :func:`evaluate` counts it (correct / total)."""
    return int((scores.argmax(-1) == target).sum()) / max(target.numel(), 1)


def ensemble_accuracy(logits: Sequence[Tensor], target: Tensor) -> float:
    """Accuracy of the ensemble that averages the members' class probabilities
    (``softmax(logits)``, one ``[N, C]`` tensor per member) and predicts their argmax."""
    if not logits:
        raise ValueError("an ensemble needs at least one member")
    probabilities = torch.stack([torch.softmax(x.double(), dim=-1) for x in logits]).mean(0)
    return argmax_accuracy(probabilities, target)


def select_per_fold(validation: Mapping[str, Sequence[float]]) -> list[str]:
    """Errica et al.'s model selection inside each outer fold, over a declared grid.

    ``validation[candidate][fold]`` is a candidate configuration's inner-validation accuracy in
    that outer fold (with several trainings per fold, their mean). Returns, per fold, the
    candidate with the highest; a tie (equal to 12 decimals, so that rounding in the
    summation is no win) goes to the candidate given first, so list the default
    configuration first. Only validation figures are an input: no test fold can move the
    choice. The caller then reports, per fold, the chosen candidate's test accuracy.
    """
    if not validation:
        raise ValueError("select_per_fold needs at least one candidate")
    lengths = {name: len(values) for name, values in validation.items()}
    if len(set(lengths.values())) != 1 or 0 in lengths.values():
        raise ValueError(f"every candidate needs one score per fold (>= 1 fold), got {lengths}")
    chosen = []
    for fold in range(next(iter(lengths.values()))):
        scores = {name: float(values[fold]) for name, values in validation.items()}
        bad = [name for name, score in scores.items() if not np.isfinite(score)]
        if bad:
            raise ValueError(f"fold {fold}: non-finite validation score for {bad}")
        # Rounded first: a mean of the same correct counts summed in another order differs in
        # the last bit (ENZYMES GIN fold 0: 119/162 as ...679 and ...677), and the later
        # candidate won against the tie rule. max keeps the first of equal scores.
        rounded = {name: round(score, 12) for name, score in scores.items()}
        chosen.append(max(rounded, key=rounded.__getitem__))
    return chosen


def fold_selection(
    candidates: Mapping[str, Mapping[str, Sequence[float]]], by: str = "val_accuracy"
) -> dict[str, Any]:
    """Per-fold selection over a grid whose per-fold figures are already known.

    ``candidates[name][metric]`` is a candidate's figure in every outer fold (``"val_accuracy"``,
    ``"test_accuracy"``, ...). :func:`select_per_fold` chooses on ``by`` alone; every other
    metric is then read at the chosen candidate of each fold. Returns ``{"chosen": [name per
    fold], "times_chosen": {name: count}, "per_fold": {metric: [value per fold]}, metric:
    summarize(...)}`` for each metric that every candidate has.
    """
    if not candidates:
        raise ValueError("fold_selection needs at least one candidate")
    missing = [name for name, figures in candidates.items() if by not in figures]
    if missing:
        raise ValueError(f"candidates {missing} have no {by!r} figures to choose on")
    chosen = select_per_fold({name: figures[by] for name, figures in candidates.items()})
    metrics = [m for m in next(iter(candidates.values()))
               if all(m in figures for figures in candidates.values())]
    per_fold = {}
    for metric in metrics:
        lengths = {len(figures[metric]) for figures in candidates.values()}
        if lengths != {len(chosen)}:
            raise ValueError(f"{metric!r} needs one figure per fold ({len(chosen)}) for every "
                             f"candidate, got lengths {sorted(lengths)}")
        per_fold[metric] = [float(candidates[name][metric][fold])
                            for fold, name in enumerate(chosen)]
    return {
        "chosen": chosen,
        "times_chosen": {name: chosen.count(name) for name in candidates},
        "per_fold": per_fold,
        **{metric: summarize(values) for metric, values in per_fold.items()},
    }


def grid_model_name(model: str, candidate: str) -> str:
    """The name one grid point of one model trains under inside :func:`cross_validate_selected`
    (and in its fold records and checkpoints)."""
    return f"{model}@{candidate}"


def cross_validate_selected(
    dataset: Sequence[Data],
    grid: Mapping[str, Mapping[str, ModelFactory]],
    configs: Mapping[str, Mapping[str, GraphTrainConfig]],
    **cv_options: Any,
) -> dict[str, Any]:
    """Errica et al.'s protocol with its inner model selection: every candidate of a declared
    grid is trained in every outer fold, and each fold is scored by the candidate that wins
    *that fold's* inner validation.

    ``grid[candidate][model]`` builds one model under one candidate configuration and
    ``configs[candidate][model]`` trains it; list the default candidate first (it wins ties).
    Every candidate must hold the same models, so that every model gets the same selection
    budget. ``cv_options`` go to :func:`cross_validate` (folds, seed, ``runs_per_fold``, ...;
    not ``evaluate_test=False``: a selection without a test score is just the CV of the grid).
    All candidates of a model share the folds and inner splits, and the test fold is scored
    once per training after it has selected its epoch; the choice reads validation figures only
    (:func:`fold_selection`), so scrambling the test labels cannot move it.

    Returns ``{"candidates": [...], "folds": [...] (records of every grid point, named by
    :func:`grid_model_name`), "models": {model: {"accuracy", "val_accuracy",
    ["ensemble_accuracy"], "chosen", "times_chosen", "per_fold", "candidates": {candidate: that
    grid point's own CV summary}}}}``.
    """
    if not grid:
        raise ValueError("the grid has no candidate")
    if cv_options.get("evaluate_test") is False:
        raise ValueError("cross_validate_selected scores the selected candidates on the test "
                         "folds; for a validation-only probe call cross_validate on the grid")
    names = list(grid)
    models = list(grid[names[0]])
    clashing = [n for n in [*names, *models] if "@" in n]
    if clashing:
        # grid_model_name joins them with "@": "a" + "x@p" and "a@x" + "p" would collide
        raise ValueError(f"model and candidate names may not contain '@': {clashing}")
    for name in names:
        if set(grid[name]) != set(models):
            raise ValueError(f"candidate {name!r} has models {sorted(grid[name])}, candidate "
                             f"{names[0]!r} {sorted(models)}: every model needs the same "
                             "candidates (the same selection budget)")
        if set(configs.get(name, {})) != set(models):
            raise ValueError(f"configs[{name!r}] must hold a training config for each of "
                             f"{sorted(models)}")
    flat = {grid_model_name(m, c): grid[c][m] for m in models for c in names}
    flat_configs = {grid_model_name(m, c): configs[c][m] for m in models for c in names}
    identities = cv_options.pop("identities", None) or {}
    cv = cross_validate(dataset, flat, flat_configs, **cv_options,
                        identities={grid_model_name(m, c): identities[m]
                                    for m in models for c in names if m in identities})
    selected = {}
    for model in models:
        figures = {}
        for candidate in names:
            rows = [record["models"][grid_model_name(model, candidate)] for record in cv["folds"]]
            figures[candidate] = {
                "val_accuracy": [r["val_accuracy"] for r in rows],
                "accuracy": [r["test_accuracy"] for r in rows],
                **({"ensemble_accuracy": [r["ensemble_test_accuracy"] for r in rows]}
                   if "ensemble_test_accuracy" in rows[0] else {}),
            }
        selected[model] = {
            **fold_selection(figures),
            "candidates": {c: cv["models"][grid_model_name(model, c)] for c in names},
        }
    return {"candidates": names, "folds": cv["folds"], "models": selected}


def describe_selection(candidates: Iterable[str],
                       changes: Optional[Mapping[str, Mapping[str, Any]]] = None) -> str:
    """The protocol sentence of a :func:`cross_validate_selected` run; ``changes`` (``{name:
    {"section.field": value}}``) spells out what each candidate sets, so that a candidate
    changing only one model's settings reads as that, not as a choice for every model."""
    listed = ", ".join(
        name + (" (" + ", ".join(f"{k}={v}" for k, v in changes[name].items()) + ")"
                if changes and changes.get(name) else "")
        for name in candidates)
    return (f"per outer fold, each model's candidate of the declared grid ({listed}) with the "
            "best inner-validation accuracy scores the fold (Errica et al.; ties to the earlier "
            "candidate; every model runs every candidate, and one that changes no setting the "
            "model reads is its preset again, which the tie rule then keeps)")


def selection_notes(models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One report line per model of a :func:`cross_validate_selected` result: how often each
    candidate won, and each candidate's own test accuracy as context."""
    return [
        f"{name}: candidate chosen per fold "
        + ", ".join(f"{c} {n}" for c, n in row["times_chosen"].items())
        + "; each candidate alone: "
        + ", ".join(f"{c} {100 * alone['accuracy']['mean']:.1f}"
                    for c, alone in row["candidates"].items())
        + " (context only: choosing among these would be selection on test)"
        for name, row in models.items() if "times_chosen" in row
    ]


class GraphClassificationTask:
    """The :class:`~et_graph.training.TrainingTask` of graph classification: shuffled
    mini-batches of the training graphs (a seeded generator), cross-entropy loss (with
    ``label_smoothing`` on the training batches only), validation accuracy as the score and the
    mean validation cross-entropy (unsmoothed) as the tie-break."""

    def __init__(self, train_data: Sequence[Data], val_data: Sequence[Data], batch_size: int,
                 seed: int = 0, device: str | torch.device = "cpu",
                 label_smoothing: float = 0.0) -> None:
        self.label_smoothing = float(label_smoothing)
        # The classes the labels need: a model with fewer outputs is named at the first batch
        # (cross-entropy would fail with "Target 2 is out of bounds", naming no model).
        self.num_classes = 1 + max((int(d.y.max()) for d in (*train_data, *val_data)
                                    if d.y is not None and d.y.numel()), default=0)
        self.generator = torch.Generator().manual_seed(seed)
        self.loader = DataLoader(list(train_data), batch_size=batch_size, shuffle=True,
                                 generator=self.generator)
        self.val_loader = DataLoader(list(val_data), batch_size=max(batch_size, 64))
        self.device = torch.device(device)

    def batches(self, epoch: int) -> Iterable[Any]:
        return (batch.to(self.device) for batch in self.loader)

    def loss(self, model: nn.Module, batch: Any) -> Tensor:
        logits = model_outputs(model, batch)
        if logits.dim() != 2 or logits.size(1) < self.num_classes:
            raise ValueError(
                f"{type(model).__name__} returned logits of shape {tuple(logits.shape)}, but "
                f"the labels hold {self.num_classes} classes: build it with out_channels >= "
                f"{self.num_classes}"
            )
        return F.cross_entropy(logits, class_targets(batch, logits),
                               label_smoothing=self.label_smoothing)

    def validate(self, model: nn.Module) -> Validation:
        val = evaluate(model, self.val_loader, self.device)
        return Validation(score=val["accuracy"], loss=val["loss"], metrics=val)


@keeps_caller_rng
def fit_graph_classifier(
    model: nn.Module,
    train_data: Sequence[Data],
    val_data: Sequence[Data],
    config: GraphTrainConfig,
    seed: int = 0,
    desc: str = "train",
    progress: bool = True,
    checkpoint: Optional[CheckpointConfig] = None,
    device: str | torch.device = "cpu",
    identity: str = "",
) -> FitResult:
    """Train on ``train_data`` with :class:`~et_graph.training.Trainer`; ``model`` then holds
    the epoch with the best validation accuracy (ties: lower validation loss, then earlier).
    ``identity`` (a registered model's factory and source digest) joins the checkpoint's
    fingerprint: the model's repr does not show its forward's code."""
    seed_everything(seed)
    task = GraphClassificationTask(train_data, val_data, config.batch_size, seed, device,
                                   label_smoothing=config.label_smoothing)
    trainer = Trainer(config, checkpoint=checkpoint, description=desc, progress=progress,
                      generators=[task.generator],
                      # The model's repr names its sizes and ET's step settings (alpha, steps,
                      # heads, ...), and the graphs' digest their contents: a checkpoint of
                      # another model or of other graphs is refused, not resumed.
                      fingerprint=fingerprint_with_graphs(
                          json.dumps([asdict(config), seed, len(train_data), repr(model)]
                                     # (left out when empty: older checkpoints still resume)
                                     + ([identity] if identity else [])),
                          checkpoint, train_data, val_data))
    return trainer.fit(model.to(device), task)


@keeps_caller_rng
def cross_validate(
    dataset: Sequence[Data],
    models: Mapping[str, ModelFactory],
    configs: Mapping[str, GraphTrainConfig],
    folds: int = 10,
    seed: int = 0,
    val_fraction: float = 0.1,
    continuous_channels: int = 0,
    max_folds: Optional[int] = None,
    progress: bool = True,
    on_fold_end: Optional[Callable[[dict[str, Any]], None]] = None,
    splits: Optional[Sequence[tuple[np.ndarray, np.ndarray]]] = None,
    checkpoint: Optional[CheckpointFactory] = None,
    on_model_fit: Optional[FitCallback] = None,
    device: str | torch.device = "cpu",
    runs_per_fold: int = 1,
    evaluate_test: bool = True,
    identities: Optional[Mapping[str, str]] = None,
    run_folds: Optional[Sequence[int]] = None,
) -> dict[str, Any]:
    """Stratified k-fold CV of every model on the same folds and inner splits.

    Returns ``{"folds": [...], "models": {name: {"accuracy": summarize(test accuracies),
    "val_accuracy": ..., "best_epoch": [...]}}}``. ``max_folds`` runs only the first folds (the
    quick mode); the summary then covers those folds only. ``run_folds`` runs only the
    outer folds of those indices (in that order), each with the inner split and seeds it has
    in the whole run, so that a fold can be run alone (nested selection trains each fold under
    its own configuration); not with ``max_folds``. ``splits`` replaces the stratified
    outer folds by given ``(train_index, test_index)`` pairs (fold ``i`` of them is fold ``i``).

    ``runs_per_fold`` final trainings per model and outer fold, each from its own seed (run 0:
    ``seed + fold``, as with one run; run ``r``: ``seed + fold + r * folds``), on the same inner
    split, each selecting its own epoch on it. The fold's test accuracy is their mean, as in
    Errica et al.'s assessment (three runs per fold, "to mitigate bad random
    initialisations"); the mean also varies less under a last-bit change of the rounding
    (another processor), though it can still move. The fold record then keeps every run under
    ``"runs"``; its ``val_accuracy`` and ``val_loss`` are means and its ``best_epoch`` is run
    0's.

    With ``runs_per_fold > 1`` the fold record also holds ``ensemble_test_accuracy`` and
    ``ensemble_val_accuracy`` (and the summary ``ensemble_accuracy`` and
    ``ensemble_val_accuracy``): the accuracy of the ensemble of the same trainings, which
    averages their class probabilities (:func:`ensemble_accuracy`). No training is added and
    each test fold is still scored once per training; the members' logits are kept only for
    this average.

    ``evaluate_test=False`` (a validation probe) never scores the test folds (no loader is
    built for them): the records and the summary then hold no test accuracy, only the
    inner-validation figures. ``identities`` (``{model: text}``, a registered model's factory
    and source digest) join each training's checkpoint fingerprint.
    """
    if not dataset:
        raise ValueError("the dataset is empty")
    if isinstance(runs_per_fold, bool) or not isinstance(runs_per_fold, int) or runs_per_fold < 1:
        raise ValueError(f"runs_per_fold must be a positive int, got {runs_per_fold!r}")
    empty = [i for i, d in enumerate(dataset) if not d.num_nodes]
    if empty:
        raise ValueError(f"graphs without nodes at indices {empty[:10]}; drop them first")
    wide = next((i for i, d in enumerate(dataset) if getattr(d, "x", None) is not None
                 and d.x.is_floating_point() and d.x.dtype != torch.get_default_dtype()), None)
    if wide is not None:  # the baselines' layers would fail mid-fold on them
        raise ValueError(f"graph {wide} has {dataset[wide].x.dtype} node features; the models "
                         f"compute in {torch.get_default_dtype()}: convert with data.x.float()")
    labels = check_graph_labels(graph_labels(dataset))
    num_classes = int(labels.max()) + 1  # labels are 0..C-1 (checked)
    unconfigured = [name for name in models if name not in configs]
    if unconfigured:  # a KeyError after the other models had trained a fold, before
        raise ValueError(f"configs has no GraphTrainConfig for models {unconfigured} "
                         f"(it has {sorted(configs)})")
    if max_folds is not None and (isinstance(max_folds, bool) or max_folds < 1):
        raise ValueError(f"max_folds must be >= 1 (or None for every fold), got {max_folds!r}")
    splits = (check_splits(splits, len(dataset)) if splits is not None
              else stratified_folds(labels, folds, seed))
    # Seeds of runs 1.. are offset by the number of outer folds, so no two trainings share one.
    seed_stride = max(folds, len(splits))
    indices = list(range(len(splits) if max_folds is None else min(max_folds, len(splits))))
    if run_folds is not None:
        if max_folds is not None:
            raise ValueError("give max_folds or run_folds, not both")
        indices = check_fold_indices(run_folds, len(splits))
    per_fold = []
    for fold in progress_bar(indices, desc="folds", disable=not progress):
        train_index, test_index = splits[fold]
        inner, val = inner_split(train_index, labels, val_fraction, seed + fold)
        data = standardized_copies(dataset, inner, continuous_channels)
        record: dict[str, Any] = {"fold": fold, "train": len(inner), "val": len(val),
                                  "test": len(test_index), "models": {}}
        test_loader = (DataLoader([data[i] for i in test_index], batch_size=64)
                       if evaluate_test else None)
        val_loader = (DataLoader([data[i] for i in val], batch_size=64)
                      if runs_per_fold > 1 else None)
        for name, factory in models.items():
            runs: list[dict[str, Any]] = []
            members: dict[str, list[Tensor]] = {"val": [], "test": []}
            targets: dict[str, Tensor] = {}
            for run in range(runs_per_fold):
                run_seed = seed + fold + run * seed_stride
                run_name = name if run == 0 else f"{name}-run{run}"
                seed_everything(run_seed)
                model = factory()
                width = getattr(model, "out_channels", None)
                if isinstance(width, int) and width != num_classes:
                    # fewer failed inside the loss ("Target 2 is out of bounds"); more trained
                    # without a word, predicting classes that do not exist
                    raise ValueError(f"model {name!r} has {width} outputs but the labels hold "
                                     f"{num_classes} classes: a classifier needs one logit "
                                     "per class")
                fit = fit_graph_classifier(
                    model, [data[i] for i in inner], [data[i] for i in val], configs[name],
                    seed=run_seed, progress=progress,
                    desc=f"fold {fold} {name}" + (f" run {run}" if run else ""),
                    checkpoint=checkpoint(fold, run_name) if checkpoint is not None else None,
                    device=device, identity=(identities or {}).get(name, ""),
                )
                if on_model_fit is not None:
                    on_model_fit(fold, name, model, fit)
                # the test fold is touched once per training, here, after its selection
                test = {}
                if test_loader is not None:
                    logits, targets["test"] = predict_logits(model, test_loader, device)
                    test["test_accuracy"] = argmax_accuracy(logits, targets["test"])
                    members["test"].append(logits)
                if val_loader is not None:
                    logits, targets["val"] = predict_logits(model, val_loader, device)
                    members["val"].append(logits)
                runs.append({
                    **test, "best_epoch": fit.best_epoch,
                    "val_accuracy": fit.best.score, "val_loss": fit.best.loss,
                    "epochs_run": fit.epochs_run, "epoch_seconds": fit.epoch_seconds,
                })
            if runs_per_fold == 1:
                record["models"][name] = runs[0]
            else:
                summary: dict[str, Any] = {
                    **{key: float(np.mean([r[key] for r in runs]))
                       for key in ("test_accuracy", "val_accuracy", "val_loss") if key in runs[0]},
                    "best_epoch": runs[0]["best_epoch"],
                    "epochs_run": sum(r["epochs_run"] for r in runs),
                    "epoch_seconds": float(np.mean([r["epoch_seconds"] for r in runs])),
                    **{f"ensemble_{split}_accuracy": ensemble_accuracy(logits, targets[split])
                       for split, logits in members.items() if logits},
                    "runs": runs,
                }
                record["models"][name] = summary
        per_fold.append(record)
        if on_fold_end is not None:
            on_fold_end(record)
    summary = {name: {**summarize_fold_rows([r["models"][name] for r in per_fold]),
                      "config": asdict(configs[name])} for name in models}
    return {"folds": per_fold, "models": summary}


def check_fold_indices(indices: Sequence[int], num_folds: int) -> list[int]:
    """``indices`` as a list of distinct outer-fold indices in ``[0, num_folds)``, or an
    error naming what is wrong."""
    chosen = list(indices)
    bad = [i for i in chosen if isinstance(i, bool) or not isinstance(i, (int, np.integer))
           or not 0 <= i < num_folds]
    if not chosen or bad:
        raise ValueError(f"fold indices must be a non-empty list of ints in [0, {num_folds}), "
                         f"got {chosen!r}")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"fold indices repeat a fold: {chosen!r}")
    return [int(i) for i in chosen]


def summarize_fold_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One model's summary over its fold records (as :func:`cross_validate` writes them):
    the test accuracy where the folds were scored, the inner-validation accuracy, the
    ensembles' where there were several trainings per fold, and the selected epochs."""
    scored = "test_accuracy" in rows[0]
    return {
        **({"accuracy": summarize(r["test_accuracy"] for r in rows)} if scored else {}),
        "val_accuracy": summarize(r["val_accuracy"] for r in rows),
        **{f"ensemble_{key}": summarize(r[f"ensemble_{split}_accuracy"] for r in rows)
           for split, key in (("test", "accuracy"), ("val", "val_accuracy"))
           if f"ensemble_{split}_accuracy" in rows[0]},
        "best_epoch": [r["best_epoch"] for r in rows],
    }
