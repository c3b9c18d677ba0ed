"""GNNBenchmark protocol: metrics, losses, models and one training run through the engine.

Each model trains on the training split with :class:`~et_graph.training.Trainer`; the epoch
with the best validation metric is kept (MAE enters the engine as ``score = -MAE``; ties go to
the lower validation loss) and the test split is evaluated once with those weights.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Optional, cast

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from ..baselines.gnnbenchmark_baselines import BASELINES, READOUTS
from ..config import check_ranges
from ..datasets.gnnbenchmark_common import BenchmarkData
from ..nn.models.graph_model import ETGraphModel
from ..training import (
    CheckpointConfig,
    TrainConfig,
    Trainer,
    Validation,
    evaluates_model,
    keeps_caller_rng,
    seed_everything,
)
from ..training.checkpoint import fingerprint_with_graphs

MODEL_NAMES = ("et", "gin", "gatedgcn")
METRIC_LABELS = {"mae": "MAE", "weighted_accuracy": "weighted accuracy (%)",
                 "accuracy": "accuracy (%)"}


# --------------------------------------------------------------------------------------------
# Metrics and losses
# --------------------------------------------------------------------------------------------
def _check_pair(pred: Tensor, target: Tensor) -> None:
    if pred.shape != target.shape or pred.numel() == 0:
        raise ValueError("pred and target must be non-empty and of equal shape")


def weighted_accuracy(pred: Tensor, target: Tensor) -> float:
    """Dwivedi et al.'s SBM accuracy: the mean over classes of per-class recall, in percent.

    Classes are those seen in ``target`` or ``pred``; a class that is only predicted counts with
    recall 0 (as in the benchmark's ``accuracy_SBM``). Computed here over a whole split, whereas
    the reference code averages it over test batches.
    """
    _check_pair(pred, target)
    classes = torch.unique(torch.cat([pred, target]))
    recalls = []
    for cls in classes:
        members = target == cls
        count = int(members.sum())
        recalls.append(float((pred[members] == cls).sum()) / count if count else 0.0)
    return 100.0 * sum(recalls) / len(classes)


def accuracy(pred: Tensor, target: Tensor) -> float:
    _check_pair(pred, target)
    return 100.0 * float((pred == target).float().mean())


def mean_absolute_error(pred: Tensor, target: Tensor) -> float:
    _check_pair(pred, target)
    return float((pred - target).abs().mean())


def metric_value(data: BenchmarkData, outputs: Tensor, targets: Tensor) -> float:
    """``data.metric`` of model outputs (regression values or class logits)."""
    if data.metric == "mae":
        return mean_absolute_error(outputs, targets)
    pred = outputs.argmax(dim=-1)
    if data.metric == "weighted_accuracy":
        return weighted_accuracy(pred, targets)
    return accuracy(pred, targets)


def loss_function(data: BenchmarkData) -> Callable[[Tensor, Tensor], Tensor]:
    """L1 for regression; cross-entropy weighted by inverse training-class frequency for node
    tasks (as in the benchmark: PATTERN has about 1 pattern node in 6); cross-entropy else."""
    if data.task == "regression":
        return lambda out, y: (out - y).abs().mean()
    if data.task == "node":
        labels = torch.cat([g.y for g in data.splits["train"]])
        counts = torch.bincount(labels, minlength=data.num_outputs).float()
        weight = counts.sum() / (counts.clamp_min(1.0) * data.num_outputs)
        return lambda out, y: nn.functional.cross_entropy(out, y, weight=weight.to(out.device))
    return lambda out, y: nn.functional.cross_entropy(out, y)


# --------------------------------------------------------------------------------------------
# Configs and models
# --------------------------------------------------------------------------------------------
@dataclass
class ETGraphModelConfig:
    """ET for GNNBenchmark (:class:`~et_graph.nn.models.ETGraphModel`).

    Attributes:
        hidden: ET token width.
        blocks: stacked ET blocks (S).
        steps: descent steps per block (T).
        heads: attention heads.
        head_dim: key/query width per head.
        alpha: descent step size.
        noise_std: noise added to the tokens at each step in training.
        pe_dim: CLS-Laplacian eigenvectors (0 = none).
        kernel_size: Conv2D mask kernel: 3 = paper (node-order dependent), 1 =
            permutation-equivariant.
        dropout: ET dropout.
        readout: graph readout: cls (the CLS token), cls_sum_mean (CLS, sum and mean of the
            node tokens) or jk (CLS and the sums of the node tokens at the input and after every
            block); node tasks need cls.
        incident_edges: add each node's sum of incoming encoded edge features (bond types) to
            its token, so that ET can count them; needs a dataset with edge features.
        message_passing_layers: residual GIN layers (sum aggregation) before the descent.
        message_passing_edges: those layers' messages also read the encoded edge features
            (GINE's form), as the GIN and GatedGCN baselines' layers do; needs edge features.
        attention_edges: the blocks' attention reads the encoded edge features as key offsets
            (ETConv's edge_dim); needs edge features.
    """

    hidden: int = 64
    blocks: int = 2
    steps: int = 3
    heads: int = 4
    head_dim: int = 16
    alpha: float = 0.1
    noise_std: float = 0.0
    pe_dim: int = 8
    kernel_size: int = 3
    dropout: float = 0.0
    readout: str = "cls"
    incident_edges: bool = False
    message_passing_layers: int = 0
    message_passing_edges: bool = False
    attention_edges: bool = False


@dataclass
class BaselineConfig:
    """The GIN / GatedGCN baselines (:mod:`et_graph.baselines.gnnbenchmark_baselines`).

    Attributes:
        baseline_hidden: hidden width of the baselines.
        baseline_layers: residual message-passing layers of the baselines.
        baseline_dropout: dropout after each baseline layer.
        baseline_incident_edges: add each node's sum of incoming encoded edge features to its
            input (the input ET's ``incident_edges`` adds); needs edge features.
        baseline_readout: what the head reads: last (the last layer's states, pooled for
            graph tasks) or jk (the states at the input and after every layer, concatenated:
            jumping knowledge, the counterpart of ET's jk readout).
    """

    baseline_hidden: int = 64
    baseline_layers: int = 4
    baseline_dropout: float = 0.0
    baseline_incident_edges: bool = False
    baseline_readout: str = "last"

    def __post_init__(self) -> None:
        check_ranges(self, "baselines", positive_ints=("baseline_hidden", "baseline_layers"),
                     dropouts=("baseline_dropout",))
        if self.baseline_readout not in READOUTS:
            raise ValueError(f"baseline_readout must be one of {READOUTS}, "
                             f"got {self.baseline_readout!r}")


@dataclass
class GNNBenchmarkTrainConfig(TrainConfig):
    """Training of every GNNBenchmark model: the engine's settings (inherited from
    :class:`TrainConfig`, here with the plateau schedule and clipping at 1.0) plus batch sizes.

    Attributes:
        batch_size: training graphs per batch.
        eval_batch_size: graphs per batch when evaluating.
    """

    lr_schedule: str = "plateau"
    grad_clip: float = 1.0
    batch_size: int = 64
    eval_batch_size: int = 256

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size <= 0 or self.eval_batch_size <= 0:
            raise ValueError("batch_size and eval_batch_size must be positive")


def build_model(name: str, data: BenchmarkData, et: Optional[ETGraphModelConfig] = None,
                baselines: Optional[BaselineConfig] = None) -> nn.Module:
    """``"et"``, ``"gin"`` or ``"gatedgcn"`` sized for ``data``."""
    if name == "et":
        et = et or ETGraphModelConfig()
        return ETGraphModel(
            data.node_dim, data.num_outputs, task=data.task, hidden_channels=et.hidden,
            blocks=et.blocks, steps=et.steps, heads=et.heads, head_dim=et.head_dim,
            alpha=et.alpha, noise_std=et.noise_std, pe_dim=et.pe_dim,
            kernel_size=et.kernel_size, edge_dim=data.edge_dim,
            edge_categories=data.num_edge_types,
            # (the classification data, superpixels, has float node features: node_dim)
            continuous_channels=cast(int, data.node_dim) if data.task == "classification" else 0,
            num_node_categories=data.num_node_types, dropout=et.dropout, readout=et.readout,
            rw_pe_dim=data.rw_pe_dim, incident_edges=et.incident_edges,
            message_passing_layers=et.message_passing_layers,
            message_passing_edges=et.message_passing_edges, attention_edges=et.attention_edges,
        )
    if name in BASELINES:
        baselines = baselines or BaselineConfig()
        return BASELINES[name](
            data.num_outputs, data.task, hidden=baselines.baseline_hidden,
            num_layers=baselines.baseline_layers, dropout=baselines.baseline_dropout,
            num_node_types=data.num_node_types, node_dim=data.node_dim,
            num_edge_types=data.num_edge_types, edge_dim=data.edge_dim,
            rw_pe_dim=data.rw_pe_dim, incident_edges=baselines.baseline_incident_edges,
            readout=baselines.baseline_readout,
        )
    raise ValueError(f"unknown model {name!r}; choose from {MODEL_NAMES}")


# --------------------------------------------------------------------------------------------
# Training and evaluation
# --------------------------------------------------------------------------------------------
#: ET's own inputs (the CLS Laplacian PE), on the graphs only when ET runs: no other model is
#: given them, so that a model's input never depends on which other models run.
ET_ONLY_FIELDS = ("lap_pe", "cls_lap_pe")


def without_et_fields(batch: Data) -> Data:
    """``batch`` without :data:`ET_ONLY_FIELDS` (a shallow copy, the tensors shared; ``batch``
    itself where it has none of them)."""
    present = [key for key in ET_ONLY_FIELDS if key in batch]
    if not present:
        return batch
    view = copy.copy(batch)
    for key in present:
        del view[key]
    return view


def predict(model: nn.Module, batch: Data) -> Tensor:
    if isinstance(model, ETGraphModel):  # the preset, not the data, chooses what ET reads
        out = model.forward_data(batch, unused="ignore")
    elif (forward_data := getattr(model, "forward_data", None)) is not None:
        # A registered model read the PE only in runs with ET, unchecked (an audit)
        out = forward_data(without_et_fields(batch))
    else:
        out = model(batch.x, batch.edge_index, batch.batch,
                    edge_attr=getattr(batch, "edge_attr", None),
                    rw_pe=getattr(batch, "rw_pe", None))
    return out.view(-1) if out.dim() == 2 and out.size(1) == 1 else out


@torch.no_grad()
@evaluates_model
def outputs_and_targets(model: nn.Module, loader: DataLoader, device: str
                        ) -> tuple[Tensor, Tensor]:
    """``model``'s outputs and the targets over ``loader`` (eval mode, its mode given back)."""
    outputs, targets = [], []
    for batch in loader:
        batch = batch.to(device)
        outputs.append(predict(model, batch).cpu())
        targets.append(batch.y.cpu())
    return torch.cat(outputs), torch.cat(targets)


def evaluate(model: nn.Module, loader: DataLoader, data: BenchmarkData, device: str) -> float:
    """``data.metric`` of ``model`` over ``loader``."""
    return metric_value(data, *outputs_and_targets(model, loader, device))


class GraphBenchmarkTask:
    """The :class:`~et_graph.training.TrainingTask` of one GNNBenchmark dataset: shuffled
    mini-batches of graphs (or of graphs' nodes), validation on the whole val split."""

    def __init__(self, data: BenchmarkData, train: GNNBenchmarkTrainConfig,
                 generator: torch.Generator, device: str = "cpu") -> None:
        self.data, self.device = data, device
        self.loss_fn = loss_function(data)
        self.train_loader = DataLoader(data.splits["train"], batch_size=train.batch_size,
                                       shuffle=True, generator=generator)
        self.val_loader = DataLoader(data.splits["val"], batch_size=train.eval_batch_size)

    def batches(self, epoch: int) -> DataLoader:
        return self.train_loader

    def loss(self, model: nn.Module, batch: Data) -> Tensor:
        batch = batch.to(self.device)
        return self.loss_fn(predict(model, batch), batch.y)

    def validate(self, model: nn.Module) -> Validation:
        outputs, targets = outputs_and_targets(model, self.val_loader, self.device)
        value = metric_value(self.data, outputs, targets)
        return Validation(score=-value if self.data.lower_is_better else value,
                          loss=float(self.loss_fn(outputs, targets)),
                          metrics={self.data.metric: value})


@keeps_caller_rng
def train_one(name: str, data: BenchmarkData, seed: int, train: GNNBenchmarkTrainConfig,
              et: Optional[ETGraphModelConfig] = None, baselines: Optional[BaselineConfig] = None,
              device: str = "cpu", progress: bool = True,
              checkpoint: Optional[CheckpointConfig] = None, fingerprint: str = "",
              on_epoch: Optional[Callable[[int, Validation], None]] = None,
              evaluate_test: bool = True,
              build: Optional[Callable[[BenchmarkData], nn.Module]] = None) -> dict[str, Any]:
    """Train ``name`` with ``seed`` (initialisation and batch order); select the epoch on val;
    evaluate test once. ``epoch`` in the result counts from 1.

    ``on_epoch`` is the engine's per-epoch hook (a tuner's pruner). With
    ``evaluate_test=False`` the test split is not touched (``"test"`` is ``None``): a tuning
    trial needs only the validation score. ``build(data)``, when given, makes the model
    instead of :func:`build_model` (a registered model's factory:
    :func:`~et_graph.protocols.gnnbenchmark_config.model_builder`); it is called after the seed
    is set, and ``name`` then only names the training."""
    seed_everything(seed)
    generator = torch.Generator().manual_seed(seed)
    task = GraphBenchmarkTask(data, train, generator, device)
    model = (build_model(name, data, et, baselines) if build is None else build(data)).to(device)
    fit_feature_scaling = getattr(model, "fit_feature_scaling", None)
    if fit_feature_scaling is not None and data.node_dim and data.task == "classification":
        fit_feature_scaling(torch.cat([g.x for g in data.splits["train"]]).to(device))
    # the graphs' digest too: a checkpoint trained on other files under the same path is
    # refused, not resumed
    fingerprint = fingerprint_with_graphs(fingerprint, checkpoint, data.splits["train"],
                                          data.splits["val"])
    trainer = Trainer(train, checkpoint=checkpoint, description=f"{name} seed {seed}",
                      progress=progress, generators=[generator], fingerprint=fingerprint,
                      on_epoch=on_epoch)
    fit = trainer.fit(model, task)
    test = None
    if evaluate_test:
        test_loader = DataLoader(data.splits["test"], batch_size=train.eval_batch_size)
        test = evaluate(model, test_loader, data, device)
    return {
        "test": test,
        "val": fit.best.metrics[data.metric],
        "epoch": fit.best_epoch + 1,
        "best_epoch": fit.best_epoch,  # counted from 0, as every other task's
        "epochs_run": fit.epochs_run,
        # NaN at epochs that ran no validation pass (train.validate_every > 1)
        "curve": [row.get(f"val_{data.metric}", float("nan")) for row in fit.history],
        "seconds": sum(row["seconds"] for row in fit.history),
        "params": sum(p.numel() for p in model.parameters()),
        "stopped_early": fit.stopped_early,
    }


__all__ = [
    "METRIC_LABELS",
    "MODEL_NAMES",
    "BaselineConfig",
    "ETGraphModelConfig",
    "GNNBenchmarkTrainConfig",
    "GraphBenchmarkTask",
    "accuracy",
    "build_model",
    "evaluate",
    "loss_function",
    "mean_absolute_error",
    "metric_value",
    "predict",
    "train_one",
    "weighted_accuracy",
]
