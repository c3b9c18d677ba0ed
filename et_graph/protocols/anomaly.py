"""Node anomaly detection protocol (BWGNN / ET paper, and a GADBench mode).

Everything that decides *what is measured* lives here, apart from the models:

- :func:`stratified_split`: train ratio (1% or 40%), the rest split 1:2 into validation/test,
  stratified on the label, with a fixed split seed;
- :func:`mask_splits`: the dataset's own masks (GADBench mode; Tolokers carries 10);
- :func:`choose_threshold`: the grid 0.05..0.95 (19 values) maximising *validation* macro-F1;
- :func:`evaluate`: test AUROC, AUPRC, macro-F1 at that threshold, Rec@K (K = #true anomalies);
- :meth:`Split.masks`: a split as the bool masks a detector's ``fit`` takes;
- :func:`seed_ensemble`: one model's seeds averaged into one detector (same split).

Training lives in :mod:`et_graph.training` and the models in :mod:`et_graph.detectors`. Test
nodes never influence a choice: thresholds, checkpoints and the energy score's sign all come from
validation nodes.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.model_selection import train_test_split
from torch import Tensor
from torch_geometric.data import Data

from ..nn.models.anomaly import relation_inputs
from .significance import Difference, compare_nodes, compare_to, describe_design

if TYPE_CHECKING:
    from ..detectors import ETDetector

#: What validation may select the checkpoint by (the detectors' ``select_metric``).
SELECT_METRICS = ("f1_macro", "auroc", "auprc")
THRESHOLD_GRID = np.round(np.linspace(0.05, 0.95, 19), 2)
METRICS = ("auroc", "auprc", "f1_macro", "rec_at_k")


#: What a run's tables can score: the test nodes, or the validation nodes of a probe.
SCORED_PARTS = ("test", "validation")


@dataclass
class Split:
    """Node indices of one split (``int64`` tensors, disjoint); ``num_nodes``, when known, is
    the size of the graph they index."""

    train: Tensor
    val: Tensor
    test: Tensor
    num_nodes: Optional[int] = None

    def sizes(self) -> tuple[int, int, int]:
        return self.train.numel(), self.val.numel(), self.test.numel()

    def scored(self, part: str = "test") -> Tensor:
        """The nodes a run's tables score: ``"test"``, or ``"validation"`` for a
        validation-only probe (which scores no test node)."""
        if part not in SCORED_PARTS:
            raise ValueError(f"the scored part must be one of {SCORED_PARTS}, got {part!r}")
        return self.test if part == "test" else self.val

    def same_as(self, other: Split) -> bool:
        """Whether ``other`` holds the same train, validation and test nodes, in order."""
        return all(torch.equal(getattr(self, part), getattr(other, part))
                   for part in ("train", "val", "test"))

    def masks(self, num_nodes: Optional[int] = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(train_mask, val_mask, test_mask)`` as bool tensors ``[num_nodes]`` (default: the
        split's own graph size)."""
        if num_nodes is None:
            if self.num_nodes is None:
                raise ValueError("masks() needs num_nodes: this split does not know its graph")
            num_nodes = self.num_nodes
        if self.num_nodes is not None and num_nodes != self.num_nodes:
            raise ValueError(f"this split was drawn on a graph of {self.num_nodes} nodes, not "
                             f"{num_nodes}")
        largest = max((int(part.max()) for part in (self.train, self.val, self.test)
                       if part.numel()), default=-1)
        if largest >= num_nodes:
            raise ValueError(f"the split indexes node {largest}, outside a graph of "
                             f"{num_nodes} nodes")
        out = []
        for index in (self.train, self.val, self.test):
            mask = torch.zeros(num_nodes, dtype=torch.bool)
            mask[index] = True
            out.append(mask)
        return out[0], out[1], out[2]


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------
def _label_vector(y: Union[Tensor, np.ndarray]) -> np.ndarray:
    """``y`` (a tensor or array-like) as a NumPy vector, as given (not yet checked binary)."""
    labels = np.asarray(y.detach().cpu().numpy() if isinstance(y, Tensor) else y)
    if labels.ndim != 1:
        raise ValueError(f"labels must be a vector [N], got shape {labels.shape}")
    return labels


def _check_labels(y: Union[Tensor, np.ndarray]) -> np.ndarray:
    labels = _label_vector(y)
    if labels.size == 0:
        raise ValueError("no labelled nodes")
    if not np.isin(labels, (0, 1)).all():
        raise ValueError("labels must be binary (0 = normal, 1 = anomalous)")
    return labels.astype(np.int64)


def stratified_split(
    y: Tensor,
    train_ratio: float,
    seed: int,
    eligible: Optional[Tensor] = None,
    val_fraction_of_rest: float = 1.0 / 3.0,
) -> Split:
    """Stratified train / validation / test split of the ``eligible`` nodes.

    ``train_ratio`` of the eligible nodes train; the rest is split 1:2 into validation and test
    (``val_fraction_of_rest = 1/3``), each part keeping the anomaly rate.
    """
    if not 0.0 < train_ratio < 1.0:
        raise ValueError(f"train_ratio must be in (0, 1), got {train_ratio}")
    if eligible is None:
        labels = _check_labels(y)
        index = np.arange(labels.size)
    else:
        # Only the eligible nodes' labels are read: the others may be anything (-1 unlabelled).
        labels = _label_vector(y)
        mask = np.asarray(eligible.detach().cpu().numpy() if isinstance(eligible, Tensor)
                          else eligible).astype(bool)
        if mask.shape != labels.shape:
            raise ValueError(f"eligible must be a bool mask [N]={labels.size}, got {mask.shape}")
        index = np.flatnonzero(mask)
        labels = np.where(mask, labels, 0)
        _check_labels(labels[index])
        labels = labels.astype(np.int64)
    sub = labels[index]
    counts = np.bincount(sub, minlength=2)
    if counts.min() < 3:
        raise ValueError(f"need at least 3 normal and 3 anomalous eligible nodes to split, found "
                         f"{counts[0]} normal and {counts[1]} anomalous (label 1) of "
                         f"{index.size}: are the labels coded 0 = normal, 1 = anomalous?")
    train_size = max(int(round(train_ratio * index.size)), 2)
    try:
        train, rest, _, rest_y = train_test_split(
            index, sub, train_size=train_size, stratify=sub, random_state=seed
        )
        val, test = train_test_split(
            rest, train_size=val_fraction_of_rest, stratify=rest_y, random_state=seed
        )
    except ValueError as error:  # scikit-learn: a class too small to stratify a part
        counts = np.bincount(sub, minlength=2)
        raise ValueError(
            f"train_ratio {train_ratio} leaves too few nodes to stratify validation and test "
            f"({counts[1]} anomalous of {index.size} eligible nodes): lower train_ratio "
            f"(--train-ratio) or use a larger graph ({error})") from error
    train_nodes, val_nodes, test_nodes = (torch.from_numpy(np.sort(part)).long()
                                          for part in (train, val, test))
    split = Split(train_nodes, val_nodes, test_nodes, num_nodes=int(labels.size))
    check_split(split, labels, f"train_ratio {train_ratio}: {{direction}} train_ratio "
                               "(--train-ratio)")
    return split


def check_split(split: Split, labels: np.ndarray, hint: str) -> None:
    """Every part of ``split`` must hold both classes: training needs anomalies to learn from,
    validation chooses the threshold, and test AUROC/AUPRC are undefined on one class (a run
    used to report them as n/a, with a macro-F1 of a single class)."""
    for part, nodes in (("training", split.train), ("validation", split.val),
                        ("test", split.test)):
        counts = np.bincount(labels[nodes.numpy()], minlength=2)
        if counts.min() == 0:
            # training short of a class needs a larger share; validation or test a smaller one
            direction = "raise" if part == "training" else "lower"
            raise ValueError(f"the {part} split holds {counts[0]} normal and {counts[1]} "
                             f"anomalous nodes; it needs both classes "
                             f"({hint.format(direction=direction)})")


def labelled_nodes(data: Data) -> Optional[Tensor]:
    """``data.label_mask`` (the labelled nodes: Amazon's and YelpChi's loaders keep one) as a
    bool ``[N]`` on the CPU, or ``None`` without one. Also taken: 0/1 numbers and an ``[N, 1]``
    column, as the loaders read them; anything else is a ``ValueError`` (a 0.5 was rounded to
    labelled by one check and refused by another: the twin checks are this one now)."""
    labelled = getattr(data, "label_mask", None)
    if labelled is None:
        return None
    labelled = torch.as_tensor(labelled).detach().cpu()
    if labelled.dim() == 2 and labelled.size(1) == 1:
        labelled = labelled[:, 0]
    if labelled.dtype != torch.bool and bool(((labelled == 0) | (labelled == 1)).all()):
        labelled = labelled.bool()
    if labelled.dtype != torch.bool or labelled.shape != (data.num_nodes,):
        raise ValueError(f"data.label_mask must be a bool (or 0/1) tensor of shape "
                         f"[{data.num_nodes}] (the labelled nodes), got "
                         f"{tuple(labelled.shape)} {labelled.dtype}")
    return labelled


def check_inside_label_mask(data: Data, train: Tensor, val: Tensor) -> None:
    """``ValueError`` when ``data.label_mask`` marks nodes of ``train`` or ``val`` (bool masks)
    unlabelled: their placeholder label 0 trained them as normal without a word in Python (the
    command line's splits refused it: an input audit)."""
    labelled = labelled_nodes(data)
    if labelled is None:
        return
    for name, mask in (("train_mask", train), ("val_mask", val)):
        outside = int((mask.cpu() & ~labelled).sum())
        if outside:
            raise ValueError(
                f"{name} holds {outside} nodes that data.label_mask marks unlabelled; their "
                "placeholder labels would count as normal: keep the masks inside label_mask "
                "(stratified_split(data.y, 0.4, seed, eligible=data.label_mask) draws such a "
                "split)")


def mask_splits(data: Data) -> list[Split]:
    """The dataset's own ``train_mask``/``val_mask``/``test_mask`` (``[N]`` or ``[N, S]``)."""
    found = [getattr(data, name, None) for name in ("train_mask", "val_mask", "test_mask")]
    given: list[Tensor] = [m for m in found if m is not None]
    if len(given) < len(found):
        raise ValueError(
            f"dataset {getattr(data, 'name', '')!r} carries no train/val/test masks; "
            "use the 'paper' protocol (stratified splits) instead"
        )
    masks = [m.view(-1, 1) if m.dim() == 1 else m for m in given]
    splits = []
    for s in range(masks[0].size(1)):
        train_nodes, val_nodes, test_nodes = (m[:, s].nonzero().view(-1) for m in masks)
        splits.append(Split(train_nodes, val_nodes, test_nodes, num_nodes=int(masks[0].size(0))))
    labels = _check_labels(data.y)
    labelled = labelled_nodes(data)
    for column, split in enumerate(splits):
        check_split(split, labels, f"the dataset's mask column {column}")
        if labelled is not None:
            # Unlabelled nodes carry a placeholder 0: they trained and scored as normal nodes.
            for part in ("train", "val", "test"):
                nodes = getattr(split, part)
                outside = int((~labelled[nodes]).sum())
                if outside:
                    raise ValueError(
                        f"the dataset's {part}_mask (column {column}) holds {outside} nodes that "
                        "its label_mask marks unlabelled; their placeholder labels would count "
                        "as normal: keep the masks inside label_mask")
    return splits


def make_splits(
    data: Data,
    protocol: str,
    num_seeds: int,
    train_ratio: float = 0.4,
    split_seed: int = 2,
    vary_split: bool = False,
) -> list[Split]:
    """One split per seed: ``paper`` = stratified with the fixed ``split_seed`` (the same split
    for every seed unless ``vary_split``, then ``split_seed + seed``); ``gadbench`` = the
    dataset's masks, seed ``i`` using mask column ``i`` (or the only one; more seeds than
    ``S > 1`` columns are refused)."""
    if protocol == "paper":
        eligible = labelled_nodes(data)
        seeds = [split_seed + s if vary_split else split_seed for s in range(num_seeds)]
        cache: dict[int, Split] = {}
        for s in set(seeds):
            cache[s] = stratified_split(data.y, train_ratio, s, eligible)
        return [cache[s] for s in seeds]
    if protocol == "gadbench":
        splits = mask_splits(data)
        if 1 < len(splits) < num_seeds:
            # The paired differences would count a split scored twice as two independent ones.
            raise ValueError(
                f"the dataset has {len(splits)} split columns, and {num_seeds} seeds would score "
                f"some of them twice: use at most {len(splits)} seeds (one per split), or the "
                "paper protocol")
        return [splits[s % len(splits)] for s in range(num_seeds)]
    raise ValueError(f"protocol must be 'paper' or 'gadbench', got {protocol!r}")


# --------------------------------------------------------------------------------------------
# Threshold and metrics
# --------------------------------------------------------------------------------------------
def macro_f1_grid(y_true: np.ndarray, prob: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Macro-F1 (mean of the F1 of both classes, 0 where undefined) of ``prob >= t`` for every
    ``t`` in ``grid``; vectorised because it runs every epoch."""
    y_true = np.asarray(y_true).astype(bool)
    pred = np.asarray(prob)[None, :] >= np.asarray(grid, dtype=np.float64)[:, None]
    tp = (pred & y_true).sum(1)
    fp = pred.sum(1) - tp
    fn = y_true.sum() - tp
    tn = y_true.size - tp - fp - fn
    with np.errstate(divide="ignore", invalid="ignore"):
        f1_pos = np.where(2 * tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), 0.0)
        f1_neg = np.where(2 * tn + fp + fn > 0, 2 * tn / (2 * tn + fp + fn), 0.0)
    return (f1_pos + f1_neg) / 2


def sealed_labels(data: Data, train_mask: Tensor, val_mask: Tensor) -> Data:
    """A shallow copy of ``data`` whose ``y`` is -1 (unknown) outside the training and
    validation nodes: what the runner and the tuner hand a detector's ``fit``. The built-in
    detectors blank those labels in ``fit`` themselves; a registered or own detector that
    overrides ``fit`` could read every test label (a leakage audit's hardening)."""
    sealed = copy.copy(data)
    y = torch.as_tensor(data.y)
    # -1 needs a signed type: uint8 labels came back as 255 (a review)
    y = (y if y.is_floating_point() else y.long()).clone()
    known = (train_mask | val_mask).to(y.device)
    y.view(-1)[~known.view(-1)] = -1
    sealed.y = y
    return sealed


def macro_f1(y_true: np.ndarray, prob: np.ndarray, threshold: float) -> float:
    """Macro-F1 of the predictions ``prob >= threshold`` against binary ``y_true``."""
    return float(macro_f1_grid(y_true, prob, np.array([threshold]))[0])


def choose_threshold(
    y_val: np.ndarray, prob_val: np.ndarray, grid: np.ndarray = THRESHOLD_GRID
) -> tuple[float, float]:
    """``(threshold, validation macro-F1)``: the grid value with the best validation macro-F1
    (the smallest such value on ties)."""
    y_val, prob_val = np.asarray(y_val), np.asarray(prob_val)
    if y_val.size == 0:
        raise ValueError("no validation nodes to choose a threshold on")
    scores = macro_f1_grid(y_val, prob_val, grid)
    best = int(np.argmax(scores))
    return float(grid[best]), float(scores[best])


def recall_at_k(y_true: np.ndarray, score: np.ndarray, k: Optional[int] = None) -> float:
    """Share of the true anomalies among the ``k`` highest scores (``k`` = #anomalies).

    Scores tied across the ``k``-th place share its free places: the tied block counts
    ``free * (its anomalies / its size)``, the expected recall over every order of the ties.
    (A stable sort took tied nodes in node-id order, so a constant score recalled every
    anomaly numbered first and none numbered last: an unsupervised audit.)"""
    y_true = np.asarray(y_true)
    score = np.asarray(score, dtype=np.float64)
    k = int(y_true.sum()) if k is None else min(int(k), score.size)
    if k == 0 or not y_true.sum():
        return float("nan")
    kth = np.sort(score)[::-1][k - 1]
    above, tied = score > kth, score == kth
    hits = y_true[above].sum() + (k - above.sum()) * y_true[tied].sum() / tied.sum()
    return float(hits / y_true.sum())


def evaluate(y_true: np.ndarray, prob: np.ndarray, threshold: float) -> dict[str, float]:
    """AUROC, AUPRC (average precision), macro-F1 at ``threshold`` and Rec@K."""
    y_true, prob = np.asarray(y_true), np.asarray(prob)
    both = 0 < y_true.sum() < y_true.size
    return {
        "auroc": float(roc_auc_score(y_true, prob)) if both else float("nan"),
        "auprc": float(average_precision_score(y_true, prob)) if both else float("nan"),
        "f1_macro": macro_f1(y_true, prob, threshold),
        "rec_at_k": recall_at_k(y_true, prob),
    }


def validation_score(y_val: np.ndarray, prob_val: np.ndarray, metric: str) -> tuple[float, float]:
    """``(selection score, threshold)`` on validation nodes for checkpoint selection."""
    threshold, f1 = choose_threshold(y_val, prob_val)
    if metric == "f1_macro":
        return f1, threshold
    if metric == "auroc":
        return float(roc_auc_score(y_val, prob_val)), threshold
    if metric == "auprc":
        return float(average_precision_score(y_val, prob_val)), threshold
    raise ValueError(f"select metric must be one of {SELECT_METRICS}, got {metric!r}")


def scores_to_unit(score: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Map an unbounded score (e.g. an energy) into ``[0, 1]`` by the empirical CDF of the
    ``reference`` scores (validation nodes), so that the 0.05..0.95 threshold grid becomes a grid
    of validation quantiles. Monotone but not strictly: scores between two validation values
    tie, so rank metrics must be computed on the score itself (:func:`evaluate_scores` does)."""
    ref = np.sort(np.asarray(reference, dtype=np.float64))
    return np.searchsorted(ref, np.asarray(score, dtype=np.float64), side="right") / max(
        ref.size, 1
    )


def evaluate_scores(
    y: np.ndarray, score: np.ndarray, split: Split, calibrate: bool = False
) -> tuple[dict[str, float], float, np.ndarray]:
    """Threshold on validation, metrics on test, for a fixed score of every node.

    Returns ``(test metrics, threshold, unit-interval score of every node)``. ``calibrate`` maps
    non-probability scores through :func:`scores_to_unit` on the validation scores first.
    """
    val, test = split.val.numpy(), split.test.numpy()
    prob = scores_to_unit(score, score[val]) if calibrate else np.asarray(score)
    threshold, _ = choose_threshold(y[val], prob[val])
    metrics = evaluate(y[test], prob[test], threshold)
    if calibrate:
        # The calibrated score ties every test node between two validation values; the rank
        # metrics come from the score itself (macro-F1 stays at the calibrated threshold).
        raw = evaluate(y[test], np.asarray(score, dtype=np.float64)[test], threshold)
        metrics.update(auroc=raw["auroc"], auprc=raw["auprc"], rec_at_k=raw["rec_at_k"])
    return metrics, threshold, prob


def seed_ensemble(y: np.ndarray, scores: list[np.ndarray], split: Split
                  ) -> tuple[dict[str, float], float, float]:
    """The ensemble of one model's seeds on one shared split: the mean of their scores of every
    node (probabilities), thresholded on validation macro-F1 like one model. Returns ``(test
    metrics, threshold, validation AUROC)``; validation nodes alone decide the threshold."""
    if not scores:
        raise ValueError("an ensemble needs at least one seed's scores")
    mean = np.mean(np.stack([np.asarray(s, dtype=np.float64) for s in scores]), axis=0)
    val, test = split.val.numpy(), split.test.numpy()
    threshold, _ = choose_threshold(y[val], mean[val])
    val_auroc = evaluate(y[val], mean[val], threshold)["auroc"]  # NaN with one class
    return evaluate(y[test], mean[test], threshold), threshold, val_auroc


def class_weight(y_train: Tensor) -> float:
    """``#normal / #anomalous`` among the training nodes (paper eq. 12)."""
    positives = int(y_train.sum())
    if positives == 0:
        raise ValueError("the training split holds no anomalous node")
    return (y_train.numel() - positives) / positives


def summarize_runs(per_seed: list[dict[str, float]]) -> dict[str, Any]:
    """``{metric: {"mean", "std", "values"}}`` over seeds."""
    from ..reporting import summarize

    return {m: summarize(run[m] for run in per_seed) for m in METRICS}


# --------------------------------------------------------------------------------------------
# The node energy of a trained ET
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def energy_row(det: ETDetector, data: Data, split: Split
               ) -> tuple[dict[str, float], np.ndarray, dict[str, Any]]:
    """Test metrics of the label-trained ET's node energy. Its sign (does high energy mean
    anomalous?) is chosen on *validation* AUROC, the threshold on validation quantiles.

    Returns ``(test metrics, signed energy of every node, info)``: the signed energy is what
    the rank metrics (AUROC, AUPRC, Rec@K) are computed on, so a ROC curve drawn from it
    matches them (the validation-quantile map used for the threshold ties nodes)."""
    energy = det.node_energy(data).double().numpy()
    y, val = data.y.cpu().numpy(), split.val.numpy()
    sign = 1 if roc_auc_score(y[val], energy[val]) >= 0.5 else -1
    signed = sign * energy
    metrics, threshold, _ = evaluate_scores(y, signed, split, calibrate=True)
    return metrics, signed, {"threshold_quantile": threshold, "sign": sign}


@torch.no_grad()
def energy_trajectory(det: ETDetector, data: Data, split: Split, extra_steps: int = 6
                      ) -> dict[str, list[float]]:
    """Mean node energy per ET step (0..T+extra), over all nodes and over the normal/anomalous
    *validation* nodes, continuing the descent past the trained T to show it settles. With
    stacked blocks this traces the last block, from the tokens the blocks before it hand over."""
    model = det.model_.eval()
    conv = model.last_conv
    from ..detectors.neural import on_device  # (the detectors import this module)

    data = on_device(data, det.device)  # the runner's graph stays on the CPU; the model may not
    # (None but for the multi-relation ET, as the methods' default)
    edge_type = relation_inputs(model, data).get("edge_type")
    y, val = data.y.cpu().numpy(), split.val.numpy()
    groups = {"normal": val[y[val] == 0], "anomalous": val[y[val] == 1]}
    x = model.descend(model.input_tokens(det.network_input(data), data.edge_index),
                      data.edge_index, edge_type, blocks=slice(0, -1))
    out: dict[str, list[float]] = {"all": [], "normal": [], "anomalous": []}
    last = conv.steps + extra_steps
    for step in range(last + 1):
        energy = model.node_energy(x, data.edge_index, edge_type).cpu().double().numpy()
        out["all"].append(float(energy.mean()))
        for group, index in groups.items():
            out[group].append(float(energy[index].mean()))
        if step < last:
            x = model.descend(x, data.edge_index, edge_type, steps=1, blocks=slice(-1, None))
    out["trained_steps"] = [float(conv.steps)]
    return out




def same_split(splits: list[Split]) -> bool:
    """Whether every seed's split is the first one's (a fixed split, or one dataset mask)."""
    return all(splits[0].same_as(split) for split in splits[1:])


#: The metrics whose ET-minus-baseline differences a run reports (the headline two).
DIFFERENCE_METRICS = ("auroc", "auprc")
#: The row of the label-trained ET's node energy (``et-graph anomaly``'s energy row).
ENERGY_ROW = "et_energy_trained"
#: ET's own rows, which the differences leave out as rivals (every other row is one, a row
#: named ``et_...`` by a user's own detector too).
ET_OWN_ROWS = ("et", ENERGY_ROW, "et_ensemble")


def reference_row(names: Any) -> Optional[str]:
    """The row the differences start from: ET, or ET stacked on the trees in a run without
    plain ET (then a rival of ET where both run); ``None`` without either."""
    return next((name for name in ("et", "et_stacked") if name in names), None)


def et_differences(models: dict[str, Any], splits: list[Split], scored_part: str,
                   one_split: bool) -> tuple[list[Difference], str]:
    """ET minus every other row, with a confidence interval: Welch over the seeds of one
    split (``one_split``), or paired over the seeds' own splits (corrected for their
    overlapping training sets) when the splits differ. Nothing where ET or the seeds' spread is
    missing. Returns the differences and the line that describes their design."""
    reference = reference_row(models)
    if reference is None or len(splits) < 2:
        return [], ""
    if one_split:
        design, ratio = "seeds", None
    else:
        train = float(np.mean([split.train.numel() for split in splits]))
        scored = float(np.mean([split.scored(scored_part).numel() for split in splits]))
        design, ratio = "folds", scored / train
    baselines = [name for name in models if name not in (*ET_OWN_ROWS, reference)]
    differences = compare_to(models, reference, DIFFERENCE_METRICS, design, test_train_ratio=ratio,
                             others=baselines)
    note = describe_design(design, len(splits), ratio,
                           paired_over=f"seeds' own splits ({scored_part} nodes)",
                           scored=scored_part)
    return differences, note


def et_node_differences(scores: dict[str, list[np.ndarray]], labels: np.ndarray,
                        bootstrap_rounds: int = 0) -> list[Difference]:
    """ET's AUROC minus every baseline's, paired over the scored nodes (DeLong) and the seeds,
    and AUPRC's by a bootstrap when ``bootstrap_rounds``. ``scores[row]`` holds the row's
    per-seed scores of the nodes whose labels are ``labels``: every seed must have scored the
    same nodes (a fixed split)."""
    reference = reference_row(scores)
    if reference is None:
        return []
    baselines = [name for name in scores if name not in (*ET_OWN_ROWS, reference)]
    return compare_nodes(labels, scores, reference, baselines, bootstrap_rounds=bootstrap_rounds)
