"""Stratified k-fold cross-validation for graph classification with an inner validation split.

Protocol (Errica et al., 2020, without the inner grid when a single configuration is given):
for each of ``folds`` stratified outer folds, the training part is split again (stratified) into
an inner training set and a validation set; the model is trained on the inner training set, the
epoch with the best validation accuracy is kept (ties: lower validation loss), and only that
checkpoint is evaluated, once, on the test fold. Every model sees the same folds and splits.
Continuous node attributes are standardised with statistics of the inner training graphs only.
"""
from __future__ import annotations

import copy
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.model_selection import StratifiedKFold, train_test_split
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

from ..reporting import summarize

ModelFactory = Callable[[], nn.Module]


@dataclass
class TrainConfig:
    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 32
    patience: Optional[int] = None  # stop after this many epochs without a validation gain
    grad_clip: Optional[float] = 5.0
    lr_decay: bool = True  # cosine decay to 5% of lr over the epochs


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
    return labels


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
    inner, val = train_test_split(
        np.asarray(train_index), test_size=val_fraction, random_state=seed,
        stratify=labels[train_index],
    )
    return np.sort(inner), np.sort(val)


def graph_labels(dataset: Sequence[Data]) -> np.ndarray:
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
    """Logits of a graph model on a PyG batch (``forward_data`` if the model has it)."""
    if hasattr(model, "forward_data"):
        return model.forward_data(batch)
    return model(batch.x, batch.edge_index, batch.batch)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> dict[str, float]:
    """Accuracy and mean cross-entropy of ``model`` (eval mode) on ``loader``."""
    model.eval()
    correct, total, loss = 0, 0, 0.0
    for batch in loader:
        logits = model_outputs(model, batch)
        target = batch.y.view(-1)
        loss += float(F.cross_entropy(logits, target, reduction="sum"))
        correct += int((logits.argmax(-1) == target).sum())
        total += target.numel()
    return {"accuracy": correct / max(total, 1), "loss": loss / max(total, 1)}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_with_validation(
    model: nn.Module,
    train_data: Sequence[Data],
    val_data: Sequence[Data],
    config: TrainConfig,
    seed: int = 0,
    desc: str = "train",
    progress: bool = True,
) -> dict[str, Any]:
    """Train with Adam on ``train_data``; keep the weights of the epoch with the best validation
    accuracy (ties: lower validation loss) and load them into ``model`` before returning."""
    seed_everything(seed)
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(list(train_data), batch_size=config.batch_size, shuffle=True,
                        generator=generator)
    val_loader = DataLoader(list(val_data), batch_size=max(config.batch_size, 64))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr,
                                 weight_decay=config.weight_decay)
    scheduler = (
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(config.epochs, 1),
                                                   eta_min=0.05 * config.lr)
        if config.lr_decay else None
    )
    best = {"epoch": -1, "accuracy": -1.0, "loss": math.inf}
    best_state = copy.deepcopy(model.state_dict())
    history = []
    stale = 0
    bar = tqdm(range(config.epochs), desc=desc, leave=False, disable=not progress)
    for epoch in bar:
        model.train()
        total_loss, count = 0.0, 0
        for batch in loader:
            optimizer.zero_grad()
            logits = model_outputs(model, batch)
            loss = F.cross_entropy(logits, batch.y.view(-1))
            loss.backward()
            if config.grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            total_loss += loss.item() * batch.num_graphs
            count += batch.num_graphs
        if scheduler is not None:
            scheduler.step()
        val = evaluate(model, val_loader)
        history.append({"epoch": epoch, "train_loss": total_loss / max(count, 1), **{
            f"val_{k}": v for k, v in val.items()}})
        improved = val["accuracy"] > best["accuracy"] or (
            val["accuracy"] == best["accuracy"] and val["loss"] < best["loss"]
        )
        if improved:
            best = {"epoch": epoch, **val}
            best_state = copy.deepcopy(model.state_dict())
            stale = 0
        else:
            stale += 1
        bar.set_postfix(val_acc=f"{val['accuracy']:.3f}", best=f"{best['accuracy']:.3f}")
        if config.patience is not None and stale >= config.patience:
            break
    model.load_state_dict(best_state)
    return {"best_epoch": best["epoch"], "val_accuracy": best["accuracy"],
            "val_loss": best["loss"], "epochs_run": len(history), "history": history}


def cross_validate(
    dataset: Sequence[Data],
    models: Mapping[str, ModelFactory],
    configs: Mapping[str, TrainConfig],
    folds: int = 10,
    seed: int = 0,
    val_fraction: float = 0.1,
    continuous_channels: int = 0,
    max_folds: Optional[int] = None,
    progress: bool = True,
    on_fold_end: Optional[Callable[[dict[str, Any]], None]] = None,
) -> dict[str, Any]:
    """Stratified k-fold CV of every model on the same folds and inner splits.

    Returns ``{"folds": [...], "models": {name: {"accuracy": summarize(test accuracies),
    "val_accuracy": ..., "best_epoch": [...]}}}``. ``max_folds`` runs only the first folds (the
    quick mode); the summary then covers those folds only.
    """
    if not dataset:
        raise ValueError("the dataset is empty")
    empty = [i for i, d in enumerate(dataset) if not d.num_nodes]
    if empty:
        raise ValueError(f"graphs without nodes at indices {empty[:10]}; drop them first")
    labels = check_graph_labels(graph_labels(dataset))
    splits = stratified_folds(labels, folds, seed)
    if max_folds is not None:
        splits = splits[:max_folds]
    per_fold = []
    for fold, (train_index, test_index) in enumerate(
        tqdm(splits, desc="folds", disable=not progress)
    ):
        inner, val = inner_split(train_index, labels, val_fraction, seed + fold)
        data = standardized_copies(dataset, inner, continuous_channels)
        record: dict[str, Any] = {"fold": fold, "train": len(inner), "val": len(val),
                                  "test": len(test_index), "models": {}}
        test_loader = DataLoader([data[i] for i in test_index], batch_size=64)
        for name, factory in models.items():
            seed_everything(seed + fold)
            model = factory()
            fit = train_with_validation(
                model, [data[i] for i in inner], [data[i] for i in val], configs[name],
                seed=seed + fold, desc=f"fold {fold} {name}", progress=progress,
            )
            test = evaluate(model, test_loader)  # the test fold is touched once, here
            fit.pop("history")
            record["models"][name] = {"test_accuracy": test["accuracy"], **fit}
        per_fold.append(record)
        if on_fold_end is not None:
            on_fold_end(record)
    summary = {}
    for name in models:
        rows = [r["models"][name] for r in per_fold]
        summary[name] = {
            "accuracy": summarize(r["test_accuracy"] for r in rows),
            "val_accuracy": summarize(r["val_accuracy"] for r in rows),
            "best_epoch": [r["best_epoch"] for r in rows],
            "config": asdict(configs[name]),
        }
    return {"folds": per_fold, "models": summary}
