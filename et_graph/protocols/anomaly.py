"""Node anomaly detection protocol (BWGNN / ET paper, and a GADBench mode).

Everything that decides *what is measured* lives here, apart from the models:

- :func:`stratified_split`: train ratio (1% or 40%), the rest split 1:2 into validation/test,
  stratified on the label, with a fixed split seed;
- :func:`mask_splits`: the dataset's own masks (GADBench mode; Tolokers carries 10);
- :func:`choose_threshold`: the grid 0.05..0.95 (19 values) maximising *validation* macro-F1;
- :func:`evaluate`: test AUROC, AUPRC, macro-F1 at that threshold, Rec@K (K = #true anomalies);
- :func:`train_node_model`: Adam for up to ``epochs`` epochs, the threshold re-chosen on
  validation each epoch, the checkpoint with the best validation metric restored at the end,
  evaluated in eval mode. Full batch, or the paper's subgraph mode (each epoch one induced
  subgraph of a random fraction of the nodes), optionally data-parallel over
  ``torch.distributed`` (gloo on CPU).

Test nodes never influence a choice: thresholds, checkpoints and the energy score's sign all come
from validation nodes.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.distributed as dist
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.model_selection import train_test_split
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import subgraph
from tqdm.auto import tqdm

from ..nn.models.anomaly import weighted_bce_loss

THRESHOLD_GRID = np.round(np.linspace(0.05, 0.95, 19), 2)
METRICS = ("auroc", "auprc", "f1_macro", "rec_at_k")
SELECT_METRICS = ("f1_macro", "auroc", "auprc")


@dataclass
class Split:
    """Node indices of one split (``int64`` tensors, disjoint)."""

    train: Tensor
    val: Tensor
    test: Tensor

    def sizes(self) -> tuple[int, int, int]:
        return self.train.numel(), self.val.numel(), self.test.numel()


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------
def _check_labels(y: Tensor) -> np.ndarray:
    labels = np.asarray(y.detach().cpu().numpy() if isinstance(y, Tensor) else y)
    if labels.ndim != 1:
        raise ValueError(f"labels must be a vector [N], got shape {labels.shape}")
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
    labels = _check_labels(y)
    if not 0.0 < train_ratio < 1.0:
        raise ValueError(f"train_ratio must be in (0, 1), got {train_ratio}")
    if eligible is None:
        index = np.arange(labels.size)
    else:
        mask = eligible.detach().cpu().numpy().astype(bool)
        if mask.shape != labels.shape:
            raise ValueError(f"eligible must be a bool mask [N]={labels.size}, got {mask.shape}")
        index = np.flatnonzero(mask)
    sub = labels[index]
    if np.bincount(sub, minlength=2).min() < 3:
        raise ValueError("need at least 3 normal and 3 anomalous eligible nodes to split")
    # Tiny train ratios on small graphs could leave a class absent: keep at least one of each.
    train_size = max(int(round(train_ratio * index.size)), 2)
    train, rest, _, rest_y = train_test_split(
        index, sub, train_size=train_size, stratify=sub, random_state=seed
    )
    val, test = train_test_split(
        rest, train_size=val_fraction_of_rest, stratify=rest_y, random_state=seed
    )
    return Split(*(torch.from_numpy(np.sort(part)).long() for part in (train, val, test)))


def mask_splits(data: Data) -> list[Split]:
    """The dataset's own ``train_mask``/``val_mask``/``test_mask`` (``[N]`` or ``[N, S]``)."""
    masks = [getattr(data, name, None) for name in ("train_mask", "val_mask", "test_mask")]
    if any(m is None for m in masks):
        raise ValueError(
            f"dataset {getattr(data, 'name', '')!r} carries no train/val/test masks; "
            "use the 'paper' protocol (stratified splits) instead"
        )
    masks = [m.view(-1, 1) if m.dim() == 1 else m for m in masks]
    return [
        Split(*(m[:, s].nonzero().view(-1) for m in masks)) for s in range(masks[0].size(1))
    ]


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
    dataset's masks, seed ``i`` using mask ``i mod S``."""
    if protocol == "paper":
        eligible = getattr(data, "label_mask", None)
        seeds = [split_seed + s if vary_split else split_seed for s in range(num_seeds)]
        cache: dict[int, Split] = {}
        for s in set(seeds):
            cache[s] = stratified_split(data.y, train_ratio, s, eligible)
        return [cache[s] for s in seeds]
    if protocol == "gadbench":
        splits = mask_splits(data)
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


def macro_f1(y_true: np.ndarray, prob: np.ndarray, threshold: float) -> float:
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
    """Share of the true anomalies among the ``k`` highest scores (``k`` = #anomalies)."""
    y_true = np.asarray(y_true)
    k = int(y_true.sum()) if k is None else k
    if k == 0:
        return float("nan")
    top = np.argsort(-np.asarray(score), kind="stable")[:k]
    return float(y_true[top].sum() / y_true.sum())


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
    of validation quantiles. Monotone, so AUROC/AUPRC/Rec@K are unchanged."""
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
    return evaluate(y[test], prob[test], threshold), threshold, prob


# --------------------------------------------------------------------------------------------
# Training loop
# --------------------------------------------------------------------------------------------
@dataclass
class TrainConfig:
    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 0.0
    select_metric: str = "f1_macro"
    subgraph_ratio: float = 0.0
    patience: int = 0
    progress: bool = True
    description: str = "train"


@dataclass
class RunResult:
    """One trained model on one split: test metrics (at the validation-chosen threshold of the
    best validation epoch), the restored model, per-epoch history and timings."""

    metrics: dict[str, float]
    threshold: float
    best_epoch: int
    prob: np.ndarray
    model: torch.nn.Module
    history: dict[str, list[float]] = field(default_factory=dict)
    epoch_seconds: float = float("nan")


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def class_weight(y_train: Tensor) -> float:
    """``#normal / #anomalous`` among the training nodes (paper eq. 12)."""
    positives = int(y_train.sum())
    if positives == 0:
        raise ValueError("the training split holds no anomalous node")
    return (y_train.numel() - positives) / positives


def _node_ids_arg(model: torch.nn.Module) -> bool:
    inner = model.module if hasattr(model, "module") else model
    return getattr(inner, "positional", None) is not None


def _train_batch(
    data: Data, split: Split, ratio: float, generator: torch.Generator, rank: int, world: int
) -> tuple[Tensor, Tensor, Optional[Tensor], Tensor]:
    """``(x, edge_index, node_ids or None, local indices of the training nodes to score)``.

    Full batch: the whole graph, each rank scoring its own shard of the training nodes.
    Subgraph mode: an induced subgraph on a random ``ratio`` of all nodes (other ranks draw other
    subgraphs); only training nodes in it carry a loss, the others are context (no labels).
    """
    num_nodes = data.num_nodes
    if ratio <= 0:
        train = split.train
        if world > 1:
            train = train[torch.randperm(train.numel(), generator=generator)][rank::world]
        return data.x, data.edge_index, None, train
    count = max(int(round(ratio * num_nodes)), 2)
    perm = torch.randperm(num_nodes, generator=generator)
    nodes = perm[rank * count : (rank + 1) * count] if (rank + 1) * count <= num_nodes else (
        perm[:count]
    )
    nodes = nodes.sort().values
    edge_index, _ = subgraph(nodes, data.edge_index, relabel_nodes=True, num_nodes=num_nodes)
    is_train = torch.zeros(num_nodes, dtype=torch.bool)
    is_train[split.train] = True
    local_train = is_train[nodes].nonzero().view(-1)
    return data.x[nodes], edge_index, nodes, local_train


@torch.no_grad()
def predict(model: torch.nn.Module, data: Data) -> np.ndarray:
    """Anomaly probability of every node, full graph, eval mode."""
    was_training = model.training
    model.eval()
    logits = model(data.x, data.edge_index)
    model.train(was_training)
    return torch.sigmoid(logits).double().cpu().numpy()


def train_node_model(
    model: torch.nn.Module,
    data: Data,
    split: Split,
    config: TrainConfig,
    seed: int = 0,
) -> RunResult:
    """Train ``model(x, edge_index[, node_ids]) -> logits [N]`` with the class-weighted BCE.

    Each epoch: one training step (full batch or one subgraph), then an eval-mode pass over the
    full graph; the threshold is re-chosen on validation and the epoch scored by
    ``config.select_metric`` on validation. The best epoch's weights are restored and evaluated
    on test at that epoch's threshold. Under ``torch.distributed`` the model is wrapped in
    ``DistributedDataParallel`` and every rank must call this with the same arguments.
    """
    if config.select_metric not in SELECT_METRICS:
        raise ValueError(f"select_metric must be one of {SELECT_METRICS}")
    if config.epochs <= 0:
        raise ValueError(f"epochs must be positive, got {config.epochs}")
    y = data.y.cpu().numpy()
    val = split.val.numpy()
    pos_weight = class_weight(data.y[split.train])
    rank, world = (dist.get_rank(), dist.get_world_size()) if is_distributed() else (0, 1)
    inner = model
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(inner.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(seed)
    pass_ids = _node_ids_arg(inner)

    history: dict[str, list[float]] = {"loss": [], "val_auroc": [], "val_f1_macro": []}
    best = (-np.inf, 0, 0.5)
    best_state = copy.deepcopy(inner.state_dict())
    seconds = []
    stale = 0
    bar = tqdm(
        range(config.epochs),
        desc=config.description,
        leave=False,
        disable=not config.progress or rank != 0,
    )
    for epoch in bar:
        start = time.perf_counter()
        model.train()
        x, edge_index, node_ids, targets = _train_batch(
            data, split, config.subgraph_ratio, generator, rank, world
        )
        optimizer.zero_grad()
        if pass_ids and node_ids is not None:
            logits = model(x, edge_index, node_ids)
        else:
            logits = model(x, edge_index)
        # A small subgraph may hold no training node: a zero loss keeps DDP ranks in step.
        loss = (
            weighted_bce_loss(logits[targets], data.y[_global(targets, node_ids)], pos_weight)
            if targets.numel()
            else logits.sum() * 0.0
        )
        loss.backward()
        optimizer.step()
        prob = predict(inner, data)
        seconds.append(time.perf_counter() - start)

        score, threshold = validation_score(y[val], prob[val], config.select_metric)
        history["loss"].append(float(loss.detach()))
        history["val_auroc"].append(float(roc_auc_score(y[val], prob[val])))
        history["val_f1_macro"].append(macro_f1(y[val], prob[val], threshold))
        if score > best[0]:
            best = (score, epoch, threshold)
            best_state = copy.deepcopy(inner.state_dict())
            stale = 0
        else:
            stale += 1
        bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", val=f"{score:.3f}")
        if config.patience and stale >= config.patience:
            break

    inner.load_state_dict(best_state)
    inner.eval()
    prob = predict(inner, data)
    test = split.test.numpy()
    metrics = evaluate(y[test], prob[test], best[2])
    return RunResult(
        metrics=metrics,
        threshold=best[2],
        best_epoch=best[1],
        prob=prob,
        model=inner,
        history=history,
        epoch_seconds=float(np.median(seconds)),
    )


def _global(local: Tensor, node_ids: Optional[Tensor]) -> Tensor:
    return local if node_ids is None else node_ids[local]


ModelFactory = Callable[[], torch.nn.Module]


def summarize_runs(per_seed: list[dict[str, float]]) -> dict[str, Any]:
    """``{metric: {"mean", "std", "values"}}`` over seeds."""
    from ..reporting import summarize

    return {m: summarize(run[m] for run in per_seed) for m in METRICS}


def planted_anomaly_graph(
    num_nodes: int = 600,
    num_features: int = 8,
    communities: int = 4,
    anomaly_rate: float = 0.1,
    degree: int = 8,
    seed: int = 0,
) -> Data:
    """A small synthetic graph with planted *contextual* anomalies, for tests and smoke runs.

    Nodes form ``communities`` dense clusters; a normal node's features are drawn around its own
    cluster's centre, an anomalous node's around *another* cluster's centre. Every node's
    features alone look normal, so the anomalies are only visible against the neighbours.
    """
    gen = torch.Generator().manual_seed(seed)
    community = torch.randint(communities, (num_nodes,), generator=gen)
    centres = 2.0 * torch.randn(communities, num_features, generator=gen)
    y = (torch.rand(num_nodes, generator=gen) < anomaly_rate).long()
    shift = torch.randint(1, communities, (num_nodes,), generator=gen)
    source = torch.where(y.bool(), (community + shift) % communities, community)
    x = centres[source] + 0.7 * torch.randn(num_nodes, num_features, generator=gen)
    src, dst = [], []
    for c in range(communities):
        members = (community == c).nonzero().view(-1)
        picks = torch.randint(members.numel(), (members.numel(), degree), generator=gen)
        src.append(members.repeat_interleave(degree))
        dst.append(members[picks].view(-1))
    edge_index = torch.stack([torch.cat(src), torch.cat(dst)])
    from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

    edge_index, _ = remove_self_loops(to_undirected(edge_index, num_nodes=num_nodes))
    edge_index = coalesce(edge_index, num_nodes=num_nodes)
    return Data(x=x, edge_index=edge_index, y=y, name="planted")
