"""The one training engine of et-graph.

Every task (node anomaly detection, graph classification, GNNBenchmark, image completion) trains
through :class:`Trainer`. A task supplies only what is its own, through the :class:`TrainingTask`
protocol:

- ``batches(epoch)``: what one epoch iterates over (one item for full-batch training);
- ``loss(model, batch)``: the training loss of one batch;
- ``validate(model)``: a :class:`Validation` (higher ``score`` is better) computed on
  validation data only.

The engine owns the rest: Adam(W), an optional LR schedule, gradient clipping, an optional
exponential moving average of the weights (validated and kept in place of the raw weights),
early stopping with patience, keeping the best validation epoch and restoring its weights,
history and timing, a tqdm progress bar, ``torch.distributed`` awareness (DDP-wrapped training,
rank-0 output) and atomic, resumable checkpoints.

**Tie rule.** Epoch ``e`` replaces the best epoch when its validation score is strictly higher, or
when the scores are equal and its validation loss is strictly lower (a NaN loss never wins a tie).
Otherwise the earlier epoch stays: among equals, the earliest epoch is kept.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional, Protocol, TypedDict, TypeVar, Union

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..config import code_identity
from ..exceptions import ConfigWarning, FitWarning, OutputWarning, ReproducibilityWarning
from ..nn.validation import is_integral, is_real
from ..progress import interactive, progress_bar
from .checkpoint import (
    CheckpointError,
    changed_settings,
    load_checkpoint,
    mps_generator_ready,
    rng_state,
    save_checkpoint,
    set_rng_state,
)

LR_SCHEDULES = ("none", "cosine", "plateau")
OPTIMIZERS = ("adam", "adamw")


@dataclass
class TrainConfig:
    """How to optimise; shared by every task.

    Attributes:
        epochs: the most epochs to train.
        lr: learning rate.
        weight_decay: L2 penalty (Adam) or decoupled weight decay (AdamW).
        optimizer: ``"adam"`` or ``"adamw"``.
        patience: stop after this many epochs without a new best validation epoch (0 = never).
        lr_schedule: ``"none"``, ``"cosine"`` (cosine decay to ``lr_floor * lr`` over ``epochs``)
            or ``"plateau"`` (halve the LR once more than ``lr_patience`` epochs in a row bring
            no validation gain, PyTorch's ``ReduceLROnPlateau`` rule: with ``lr_patience=1``
            the second such epoch halves it; a gain is a rise of the score by more than 1e-4,
            PyTorch's default threshold, so that rounding noise is no gain).
        lr_floor: the LR the cosine schedule decays towards, as a fraction of ``lr`` (0 to 1):
            epoch ``e`` of ``E`` trains at ``floor + (lr - floor) (1 + cos(pi e / E)) / 2``, so
            the last epoch is still above it (with one epoch the LR stays ``lr``).
        lr_patience: the plateau schedule's patience: the epochs without a gain that it
            tolerates (the next one halves the LR).
        grad_clip: clip the gradient norm to this value (0 = no clipping).
        ema_decay: keep an exponential moving average of the weights, updated after every
            optimiser step with this decay (0 = off). Validation, the best-epoch checkpoint and
            the returned model use the averaged weights; training continues on the raw ones.
            Early steps use ``min(ema_decay, (1 + n) / (10 + n))`` after ``n`` updates, so that
            the average does not start out dominated by the initial weights. Buffers (e.g.
            BatchNorm statistics) are the live ones, not averaged.
        validate_every: run the validation pass every this many epochs and at the last one
            (1 = every epoch): on a large graph a full validation pass can cost as much as an
            epoch of mini-batch training. Only a validated epoch can be the selected one; the
            epochs between two passes have NaN validation entries in the history (their
            metrics are left out), and ``on_epoch`` is called at validated epochs only.
            ``patience`` still counts epochs, and a stop is decided at a validated epoch (so
            it is rounded up to the next pass); the plateau schedule steps at validated
            epochs, so its ``lr_patience`` counts validation passes.
    """

    epochs: int = 100
    lr: float = 1e-3
    weight_decay: float = 0.0
    optimizer: str = "adam"
    patience: int = 0
    lr_schedule: str = "none"
    lr_floor: float = 0.05
    lr_patience: int = 10
    grad_clip: float = 0.0
    ema_decay: float = 0.0
    validate_every: int = 1

    def __post_init__(self) -> None:
        # Types first: epochs=2.5 would train a fraction of nothing, lr="0.1" fail mid-run.
        for name in ("epochs", "patience", "lr_patience", "validate_every"):
            value = getattr(self, name)
            if not is_integral(value):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        for name in ("lr", "weight_decay", "lr_floor", "grad_clip", "ema_decay"):
            value = getattr(self, name)
            if not is_real(value):
                raise ValueError(f"{name} must be a number, got {value!r}")
        if self.epochs <= 0:
            raise ValueError(f"epochs must be positive, got {self.epochs}")
        if self.validate_every <= 0:  # 0 would never validate, so no epoch could be selected
            raise ValueError(f"validate_every must be a positive number of epochs (1 = every "
                             f"epoch), got {self.validate_every}")
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        # ``not value >= 0`` rather than ``value < 0``: NaN compares False either way, and a NaN
        # clip norm or an infinite decay ended as a "non-finite training loss" instead.
        for name in ("weight_decay", "grad_clip"):
            value = getattr(self, name)
            if not value >= 0 or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number >= 0 (0 = off), got {value}")
        if not 0.0 <= self.lr_floor <= 1.0:  # -1 ran gradient ascent, 5 raised the LR
            raise ValueError(f"lr_floor must be in [0, 1] (a fraction of lr), got "
                             f"{self.lr_floor}")
        if self.lr_patience < 0:  # -1 halved the LR every epoch
            raise ValueError(f"lr_patience must be >= 0, got {self.lr_patience}")
        if self.patience < 0:
            raise ValueError(f"patience must be >= 0 (0 = no early stopping), got {self.patience}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1) (0 = off), got {self.ema_decay}")


@dataclass
class CheckpointConfig:
    """Where and how often to checkpoint, and whether to resume.

    Attributes:
        checkpoint_dir: folder of ``last.pt`` (model, optimiser, scheduler, RNG states, epoch,
            best epoch and history); ``None`` = no checkpoints.
        checkpoint_every: save every this many epochs (and always after the last one).
        resume: continue from ``checkpoint_dir/last.pt`` when it exists.
    """

    checkpoint_dir: Optional[str] = None
    checkpoint_every: int = 1
    resume: bool = False

    def __post_init__(self) -> None:
        if not is_integral(self.checkpoint_every):
            # 1.5 saved only at epochs 3, 6, ... ((epoch + 1) % 1.5 == 0)
            raise ValueError(f"checkpoint_every must be an integer, got "
                             f"{self.checkpoint_every!r}")
        if self.checkpoint_every <= 0:
            raise ValueError(f"checkpoint_every must be positive, got {self.checkpoint_every}")
        if self.resume and not self.checkpoint_dir:
            raise ValueError("resume needs checkpoint_dir (the folder of the interrupted run)")


@dataclass
class Validation:
    """One epoch's validation result. ``score``: higher is better (negate an error); ``loss``
    breaks ties (lower wins); ``metrics`` go into the history (as ``val_<name>``; ``score`` and
    ``loss`` are taken); ``extra`` (numbers, booleans or strings, e.g. a threshold) is kept with
    the best epoch. A ``FloatingPointError`` raised by ``validate`` (a model that overflows on
    the validation data) counts as a NaN score, which never wins an epoch."""

    score: float
    loss: float = float("nan")
    metrics: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Plain Python numbers: a NumPy scalar (what scikit-learn's metrics return) was saved
        # into the checkpoint as a pickled object, which the safe loader then refused, blaming
        # the file. Wrong types are named here, not in the engine.
        self.score = _plain_number(self.score, "Validation.score")
        self.loss = _plain_number(self.loss, "Validation.loss")
        self.metrics = {str(k): _plain_number(v, f"Validation.metrics[{k!r}]")
                        for k, v in self.metrics.items()}
        # The history's val_score / val_loss would hold such a metric instead of the score and
        # loss (a metric equal to them, e.g. metrics=every validation figure, changes nothing).
        clashing = sorted(name for name, own in (("score", self.score), ("loss", self.loss))
                          if name in self.metrics and not _same(self.metrics[name], own))
        if clashing:
            raise ValueError(f"Validation.metrics {clashing} differ from the Validation's own "
                             f"{' and '.join(clashing)}: the history records those as "
                             f"val_{clashing[0]}; rename the metric")
        self.extra = {str(k): v if isinstance(v, (str, bool)) or v is None
                      else _plain_number(v, f"Validation.extra[{k!r}] (a number or a string)",
                                         keep_int=True)
                      for k, v in self.extra.items()}

    def beats(self, other: Optional[Validation]) -> bool:
        """The tie rule: strictly higher score, or equal score and strictly lower loss."""
        if other is None:
            return not math.isnan(self.score)
        if self.score > other.score:
            return True
        if self.score == other.score and not math.isnan(self.loss):
            return math.isnan(other.loss) or self.loss < other.loss
        return False


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _plain_number(value: Any, name: str, keep_int: bool = False) -> Union[float, int]:
    """``value`` as a Python float (an int stays an int with ``keep_int``), or a ``ValueError``
    naming ``name``."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a single number, got a tensor of shape "
                             f"{tuple(value.shape)}")
        value = value.item()
    if is_integral(value) and keep_int:
        return int(value)
    if is_real(value):
        return float(value)
    raise ValueError(f"{name} must be a number, got {value!r}")


#: The model a task trains: a task may type its methods with its own module class.
ModelT = TypeVar("ModelT", bound=nn.Module)
ModelT_contra = TypeVar("ModelT_contra", bound=nn.Module, contravariant=True)


class TrainingTask(Protocol[ModelT_contra]):
    """What a task supplies to :class:`Trainer`. Generic in the model it reads, so that a
    task typed ``loss(self, model: MyNet, ...)`` fits ``Trainer.fit(MyNet(...), task)`` in
    checked code (with ``nn.Module`` only, parameters being contravariant, a type checker
    refused such a task: a typing audit)."""

    def batches(self, epoch: int) -> Iterable[Any]:
        """The batches of one training epoch."""

    def loss(self, model: ModelT_contra, batch: Any) -> Optional[Tensor]:
        """The training loss of one batch (a scalar with a graph to ``model``'s parameters), or
        ``None`` for a batch without a training target (no optimiser step is taken)."""

    def validate(self, model: ModelT_contra) -> Validation:
        """Validation of ``model`` (in eval mode) on validation data only."""


@dataclass
class FitResult:
    """What :meth:`Trainer.fit` returns; the model already holds the best epoch's weights.
    Epochs count from 0 here and in ``history`` (``best_epoch=0``: the first epoch's weights).
    ``epoch_seconds`` is the median epoch time of the epochs this call ran (a resumed run's
    earlier epochs, which may have run on another machine or under another load, are in
    ``history`` but not in it; where nothing was left to run, all of them)."""

    best_epoch: int
    best: Validation
    history: list[dict[str, float]]
    epochs_run: int
    epoch_seconds: float
    stopped_early: bool
    resumed_from_epoch: Optional[int] = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "best_epoch": self.best_epoch,
            "best_score": self.best.score,
            "best_loss": self.best.loss,
            "best_metrics": dict(self.best.metrics),
            "epochs_run": self.epochs_run,
            "epoch_seconds": self.epoch_seconds,
            "stopped_early": self.stopped_early,
            "resumed_from_epoch": self.resumed_from_epoch,
        }


EpochCallback = Callable[[int, Validation], None]


def _check_checkpoint_folder(path: Path) -> None:
    """Before the first epoch, not at the first save after it: a checkpoint folder that is a
    file, a ``last.pt`` that is a folder (resume then started from scratch, silently), or a
    folder this process cannot write."""
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"checkpoint_dir {folder} is a file, not a folder")
    if path.exists() and not path.is_file():
        raise ValueError(f"{path} is not a file; the checkpoint cannot be read or written there")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"checkpoint_dir {folder} cannot be created ({error})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"checkpoint_dir {folder} is not writable by this process")


def _check_loss(loss: Any, task: Any) -> None:
    """A ``TypeError``/``ValueError`` naming the task's ``loss`` for what torch reports as
    "Boolean value of Tensor with more than one value is ambiguous" or "element 0 of tensors
    does not require grad"."""
    where = f"{type(task).__name__}.loss"
    if not isinstance(loss, Tensor):
        raise TypeError(f"{where} must return a scalar tensor, got {type(loss).__name__}")
    if loss.numel() != 1:
        raise ValueError(f"{where} must return a scalar (reduce it, e.g. .mean()), got shape "
                         f"{tuple(loss.shape)}")
    if not loss.requires_grad:
        raise ValueError(f"{where} returned a tensor without a graph to the model's parameters "
                         "(computed under torch.no_grad(), detached, or from no parameter)")


#: Messages of allocation failures on CPU and CUDA.
_OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory")


class _FusedStep(TypedDict, total=False):
    """The optimiser keywords of :func:`_fused_step`."""

    fused: bool


def _fused_step(params: Sequence[Tensor]) -> _FusedStep:
    """``fused=True`` where PyTorch has the fused Adam kernel for every parameter (dense floating
    point tensors on CPU or CUDA): the same update in one kernel call instead of a dozen small ops
    per parameter tensor, which dominate the step of small models (PyTorch's default on CPU is
    the per-tensor loop)."""
    devices = _fused_adam_devices()
    fused = bool(params) and all(
        p.is_floating_point() and p.layout == torch.strided and p.device.type in devices
        for p in params
    )
    return {"fused": True} if fused else {}


def _fused_adam_devices() -> tuple[str, ...]:
    """The devices with a fused Adam kernel in this torch: the CPU's came in torch 2.4 (on 2.3
    ``fused=True`` refused CPU parameters, failing every CPU training)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices as supported
    except ImportError:  # pragma: no cover - a torch without the helper
        return ("cuda",)
    return tuple(device for device in ("cpu", "cuda") if device in supported())


class WeightAverage:
    """An exponential moving average of a model's floating-point parameters
    (:attr:`TrainConfig.ema_decay`). :meth:`update` follows each optimiser step;
    :meth:`swapped` puts the averaged weights into the model for a ``with`` block and the raw
    ones back afterwards."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        # Detached views share the parameters' storage, so they follow the optimiser's in-place
        # steps: made once here rather than on every update.
        self.params = [p.detach() for p in model.parameters() if p.is_floating_point()]
        self.average = [p.clone() for p in self.params]
        self.updates = 0

    @torch.no_grad()
    def update(self) -> None:
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        torch._foreach_lerp_(self.average, self.params, 1.0 - decay)
        self.updates += 1

    @contextmanager
    def swapped(self) -> Iterator[None]:
        with torch.no_grad():
            raw = [p.clone() for p in self.params]
            torch._foreach_copy_(self.params, self.average)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(self.params, raw)

    def state_dict(self) -> dict[str, Any]:
        return {"average": [t.clone() for t in self.average], "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for mine, saved in zip(self.average, state["average"]):
            mine.copy_(saved)
        self.updates = int(state["updates"])


class Trainer:
    """Train a model for a :class:`TrainingTask` and keep its best validation epoch.

    Args:
        config: optimisation settings.
        checkpoint: checkpoint folder / resume settings (``None`` = none).
        description: the progress bar's label.
        progress: show a tqdm bar (rank 0 only).
        generators: extra ``torch.Generator`` objects the task draws from (e.g. its batch
            shuffler); their states go into checkpoints so that a resumed run draws the same
            batches as an uninterrupted one.
        on_epoch: called as ``on_epoch(epoch, validation)`` after each epoch on every rank (a
            tuner reports to its pruner here and may raise to stop the run).
        fingerprint: a string that identifies the run's configuration; resuming from a
            checkpoint with another fingerprint raises ``ValueError``.
        aliases: ``(config, fingerprint)`` pairs of the same run spelt another way (a setting
            that names the same code another way, e.g. ``neighbor_sampler="builtin"`` where
            ``"auto"`` picks the built-in sampler): a checkpoint written under one of them
            resumes.
        setting_defaults: ``(name, default)`` of the model and data settings the fingerprint
            spells (:func:`dataclass_defaults` of its configs): a checkpoint whose fingerprint
            lacks a setting added since, which holds its default here, resumes, as one lacking
            a training setting does (the default is what the older code ran).
        oom_hint: appended to the message of an out-of-memory error raised in a training step.
        validation_oom_hint: the same for the validation pass (default: ``oom_hint``).
        find_unused_parameters: under DDP, let ``DistributedDataParallel`` allow parameters
            that a step leaves without a gradient (its ``find_unused_parameters``; slower, so
            off by default). Without it such a model fails with torch's advice to set it.
    """

    def __init__(
        self,
        config: TrainConfig,
        checkpoint: Optional[CheckpointConfig] = None,
        description: str = "train",
        progress: bool = True,
        generators: Sequence[torch.Generator] = (),
        on_epoch: Optional[EpochCallback] = None,
        fingerprint: str = "",
        oom_hint: str = "",
        validation_oom_hint: Optional[str] = None,
        find_unused_parameters: bool = False,
        aliases: Sequence[tuple[TrainConfig, str]] = (),
        setting_defaults: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self.config = config
        self.find_unused_parameters = bool(find_unused_parameters)
        self.checkpoint = checkpoint or CheckpointConfig()
        self.description = description
        self.progress = progress
        self.generators = list(generators)
        for generator in self.generators:  # a NumPy Generator failed at the first save
            if not isinstance(generator, torch.Generator):
                raise TypeError(f"generators must be torch.Generator objects (their states are "
                                f"checkpointed), got {type(generator).__name__}")
        self.on_epoch = on_epoch
        self.fingerprint = fingerprint
        self.aliases = list(aliases)
        self.setting_defaults = list(setting_defaults)
        self.oom_hint = oom_hint
        self.validation_oom_hint = oom_hint if validation_oom_hint is None else validation_oom_hint

    # ------------------------------------------------------------------------------------------
    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:  # torch: "optimizer got an empty parameter list"
            raise ValueError(f"{type(model).__name__} has no trainable parameter (none, or "
                             "all with requires_grad=False): there is nothing to train")
        kind = torch.optim.AdamW if self.config.optimizer == "adamw" else torch.optim.Adam
        return kind(params, lr=self.config.lr, weight_decay=self.config.weight_decay,
                    **_fused_step(params))

    def make_scheduler(self, optimizer: torch.optim.Optimizer) -> Optional[Any]:
        cfg = self.config
        if cfg.lr_schedule == "cosine":
            return torch.optim.lr_scheduler.CosineAnnealingLR(
                optimizer, cfg.epochs, eta_min=cfg.lr_floor * cfg.lr
            )
        if cfg.lr_schedule == "plateau":
            return torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="max", factor=0.5, patience=cfg.lr_patience,
                threshold_mode="abs",
            )
        return None

    @property
    def checkpoint_path(self) -> Optional[Path]:
        folder = self.checkpoint.checkpoint_dir
        return Path(folder) / "last.pt" if folder else None

    # ------------------------------------------------------------------------------------------
    def fit(self, model: ModelT, task: TrainingTask[ModelT]) -> FitResult:
        """Train ``model`` on ``task``; on return the model holds the best epoch's weights and
        is in eval mode. Gradients are on for the training whatever the caller's
        ``torch.no_grad()``; inside ``torch.inference_mode()`` it refuses to start."""
        if torch.is_inference_mode_enabled():
            raise RuntimeError(
                "training cannot run inside torch.inference_mode() (tensors made there never "
                "take part in autograd): call fit outside it (torch.no_grad() is fine: "
                "training turns gradients on for itself)")
        # A service that turned gradients off at start-up (torch.set_grad_enabled(False))
        # could not retrain: every fit failed on "loss returned a tensor without a graph",
        # naming a task class the user never wrote (a long-run audit).
        with torch.enable_grad():
            return self._fit(model, task)

    def _fit(self, model: nn.Module, task: TrainingTask) -> FitResult:
        missing = [name for name in ("batches", "loss", "validate")
                   if not callable(getattr(task, name, None))]
        if missing:  # (a missing validate failed with a bare AttributeError after an epoch)
            raise TypeError(f"{type(task).__name__} lacks {', '.join(missing)}: a training task "
                            "provides batches(epoch), loss(model, batch) and validate(model)")
        cfg = self.config
        rank, world = rank_world()
        launched = launched_world_size()
        if world == 1 and launched > 1:
            # (a DDP audit: under torchrun without a process group each process trained the
            # whole model alone and wrote the same checkpoints, without a word)
            warnings.warn(f"{self.description}: WORLD_SIZE is {launched} but no process group "
                          "is initialised, so this process trains alone on all the data; call "
                          "torch.distributed.init_process_group first for data-parallel "
                          "training", ConfigWarning, stacklevel=3)
        train_model: nn.Module = model
        if world > 1:
            train_model = nn.parallel.DistributedDataParallel(
                model, find_unused_parameters=self.find_unused_parameters)
        optimizer = self.make_optimizer(model)
        scheduler = self.make_scheduler(optimizer)
        average = WeightAverage(model, cfg.ema_decay) if cfg.ema_decay else None

        history: list[dict[str, float]] = []
        best: Optional[Validation] = None
        best_epoch = -1
        best_state = _clone_state(model)
        stale = 0
        steps_since_pass = 0
        start_epoch = 0
        resumed_from: Optional[int] = None
        stopped_early = False
        validation_error: Optional[FloatingPointError] = None
        path = self.checkpoint_path
        if path is not None:
            _check_checkpoint_folder(path)
        if path is not None and not self.checkpoint.resume and rank == 0 and path.is_file():
            _warn_overwriting(path, self._same_runs)  # (the writer)
        if path is not None and self.checkpoint.resume and path.is_file():
            state = load_checkpoint(path)
            # The training settings first, by name (a caller who passes no fingerprint cannot
            # resume under another lr, schedule or epoch count either); then the caller's
            # fingerprint of the model and data settings.
            stored, current = state.get("config"), asdict(self.config)
            runs = self._same_runs(stored, str(state.get("fingerprint", "")))
            if stored is not None and all(stored != config for config, _ in runs):
                changed = changed_settings(stored, current)
                raise ValueError(
                    f"{path} was written under other training settings ({', '.join(changed)} "
                    f"differ){_written_by(state, set(current) - set(stored))}; use another "
                    "checkpoint_dir or drop resume"
                )
            if all(state.get("fingerprint", "") != fingerprint for config, fingerprint in runs
                   if stored is None or stored == config):
                # (the run as older code would spell it: a setting added since at its default
                # is not what changed, and was listed as if it were: a compat audit)
                spelt = [fingerprint for config, fingerprint in runs
                         if stored is None or stored == config] or [self.fingerprint]
                now = _new_settings(str(state.get("fingerprint", "")), min(spelt, key=len))
                raise ValueError(
                    f"{path} was written by a run with another configuration"
                    + (f" (now: {', '.join(now)})" if now else "")
                    + f"{_written_by(state)}; use another checkpoint_dir or drop resume"
                )
            try:
                model.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
            except (RuntimeError, ValueError, KeyError) as error:
                # Same fingerprint, other shapes: the caller's fingerprint missed a setting.
                # torch's first line is only "Error(s) in loading state_dict for Linear:"; the
                # mismatches (missing keys, shapes) follow it.
                detail = "; ".join(line.strip() for line in str(error).splitlines()
                                   if line.strip())[:600]
                raise CheckpointError(
                    f"{path} does not fit this model ({detail}); use another checkpoint_dir or "
                    "drop resume") from error
            if scheduler is not None and state.get("scheduler") is not None:
                scheduler.load_state_dict(state["scheduler"])
            if average is not None:
                if state.get("average") is None:
                    raise ValueError(f"{path} holds no weight average; resume it without "
                                     "ema_decay or use another checkpoint_dir")
                average.load_state_dict(state["average"])
            own = _own_random_states(state, rank, world, path)
            set_rng_state(own["rng"])
            if len(own["generators"]) != len(self.generators):  # zip dropped the rest
                raise ValueError(f"{path} holds {len(own['generators'])} generator states and "
                                 f"this run has {len(self.generators)}; use another "
                                 "checkpoint_dir or drop resume")
            for generator, gen_state in zip(self.generators, own["generators"]):
                generator.set_state(gen_state)
            history = list(state["history"])
            best_state = state["best_state"]
            best_epoch = int(state["best_epoch"])
            if best_epoch >= 0:
                best = Validation(**state["best"])
            stale = int(state["stale"])
            # (0 in checkpoints written before validate_every: they passed every epoch)
            steps_since_pass = int(state.get("steps_since_pass", 0))
            start_epoch = resumed_from = int(state["epoch"]) + 1
            if state.get("stopped"):
                start_epoch = cfg.epochs
                stopped_early = True  # as the uninterrupted run reported

        bar = progress_bar(
            range(start_epoch, cfg.epochs),
            desc=self.description,
            leave=False,
            disable=not self.progress or rank != 0,
        )
        validation: Optional[Validation] = None  # the last pass's (the bar shows it)
        ran_from = len(history)  # the rows before it came from a checkpoint
        for epoch in bar:
            begin = time.perf_counter()
            train_model.train()
            total, count, batches = 0.0, 0, 0
            try:
                for batch in self._batch_bar(task.batches(epoch), epoch, rank):
                    batches += 1
                    optimizer.zero_grad(set_to_none=True)
                    loss = task.loss(train_model, batch)
                    if loss is None:
                        # A batch without a training target (a random part of a large graph):
                        # no step, since Adam's momentum and weight decay would still move the
                        # weights, and no zero averaged into the epoch's loss.
                        continue
                    _check_loss(loss, task)
                    # One read of the loss per step, before the step it could spoil (it was
                    # read twice: on a GPU each read is a host sync, a device audit)
                    value = float(loss.detach())
                    if not math.isfinite(value):
                        raise FloatingPointError(
                            f"{self.description}: non-finite training loss at epoch {epoch}"
                        )
                    loss.backward()
                    if cfg.grad_clip:
                        nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                    optimizer.step()
                    if average is not None:
                        average.update()
                    total += value
                    count += 1
            except RuntimeError as error:
                raise_explained(error, self.oom_hint, "training")
            if batches == 0:  # nothing trained: an epoch would be "best" on untouched weights
                raise ValueError(f"{self.description}: the task gave no training batch in epoch "
                                 f"{epoch} (an empty training set?)")
            validated = (epoch + 1) % cfg.validate_every == 0 or epoch + 1 == cfg.epochs
            # (the steps since the last validation pass: with validate_every > 1 a pass sees
            # the weights of every epoch since the one before; a review)
            steps_since_pass += count
            if not count:
                # Every batch lacked a training target (a tiny subgraph_ratio): the weights did
                # not move, and epoch 0 so could return the initial weights as the "best".
                warnings.warn(f"{self.description}: epoch {epoch} took no optimiser step (no "
                              "batch held a training node)"
                              + (", so it cannot be the selected epoch" if not steps_since_pass
                                 else ""), FitWarning, stacklevel=2)
            model.eval()
            improved = False
            if validated:
                # With weight averaging, validation and the best-epoch copy see the averaged
                # weights.
                with average.swapped() if average is not None else nullcontext():
                    with torch.no_grad():
                        try:
                            validation = task.validate(model)
                        except FloatingPointError as error:
                            # A model that overflows on the validation data (ET layers raise
                            # rather than return NaN) scores NaN there, which never wins.
                            validation = Validation(score=float("nan"), loss=float("nan"))
                            validation_error = error
                        except RuntimeError as error:  # the validation pass can run out too
                            raise_explained(error, self.validation_oom_hint,
                                            "the validation pass")
                    if not isinstance(validation, Validation):
                        raise TypeError(
                            f"{type(task).__name__}.validate must return a "
                            f"et_graph.training.Validation(score=..., loss=...), got "
                            f"{type(validation).__name__}")
                    if world > 1:
                        # Every rank follows rank 0's validation: decided apart, the ranks kept
                        # other epochs (other weights, exit 0) or one stopped early alone and
                        # left the others waiting in a collective (a DDP audit: a validation
                        # that differs across ranks, a sampled one, or one summed in another
                        # order on a GPU).
                        shared = [validation]
                        dist.broadcast_object_list(shared, src=0)
                        validation = shared[0]
                    improved = steps_since_pass > 0 and validation.beats(best)
                    if improved:
                        best_state = _clone_state(model)
            seconds = time.perf_counter() - begin
            lr = optimizer.param_groups[0]["lr"]
            # This epoch's validation (None where it skipped the pass): validate ran above
            # exactly when validated, and its result is a Validation.
            this_epoch = validation if validated else None
            if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                if this_epoch is not None:  # (a skipped pass is no epoch without a gain)
                    scheduler.step(this_epoch.score)
            elif scheduler is not None:
                scheduler.step()
            history.append({
                "epoch": epoch,
                "train_loss": total / count if count else float("nan"),
                "val_score": this_epoch.score if this_epoch is not None else float("nan"),
                "val_loss": this_epoch.loss if this_epoch is not None else float("nan"),
                "lr": lr,
                "seconds": seconds,
                **({f"val_{k}": float(v) for k, v in this_epoch.metrics.items()}
                   if this_epoch is not None else {}),
            })
            if validated:
                steps_since_pass = 0
            if improved:
                best, best_epoch, stale = validation, epoch, 0
            else:
                stale += 1
            stop = bool(cfg.patience) and validated and stale >= cfg.patience
            if path is not None and (
                stop or epoch + 1 == cfg.epochs or (epoch + 1) % self.checkpoint.checkpoint_every
                == 0
            ):
                # every rank's random states (a collective: all ranks reach it together)
                ranks = _gather_random_states(self.generators) if world > 1 else None
                if rank == 0:
                    self._save(path, epoch, model, optimizer, scheduler, history, best,
                               best_epoch, best_state, stale, stop, average, ranks,
                               steps_since_pass=steps_since_pass)
            # refresh=False: a redraw per epoch skipped the bar's delay and minimum interval
            # (a line per epoch in a log, where et_graph.progress promises one per 30 s)
            bar.set_postfix(loss=f"{history[-1]['train_loss']:.4f}",
                            val=f"{validation.score:.4f}" if validation is not None else "n/a",
                            best=f"{best.score:.4f}" if best is not None else "n/a",
                            refresh=False)
            if self.on_epoch is not None and this_epoch is not None:
                self.on_epoch(epoch, this_epoch)
            if stop:
                stopped_early = True
                break
        if best is None:
            if all(math.isnan(row["train_loss"]) for row in history):
                raise ValueError(f"{self.description}: no epoch took an optimiser step (every "
                                 f"{type(task).__name__}.loss returned None; for the node "
                                 "detectors: no batch held a training node, raise "
                                 "subgraph_ratio or batch_size)")
            raise FloatingPointError(f"{self.description}: no epoch gave a finite validation "
                                     "score" + (" (the last validate raised the error below)"
                                                if validation_error is not None else "")
                                     ) from validation_error
        model.load_state_dict(best_state)
        model.eval()
        # this call's epochs (a scale audit: a resumed run's median mixed the killed run's)
        epoch_times = [row["seconds"] for row in history[ran_from:]] or [
            row["seconds"] for row in history]
        return FitResult(
            best_epoch=best_epoch,
            best=best,
            history=history,
            epochs_run=len(history),
            epoch_seconds=float(np.median(epoch_times)) if epoch_times else float("nan"),
            stopped_early=stopped_early,
            resumed_from_epoch=resumed_from,
        )

    def _same_runs(self, stored: Optional[dict[str, Any]] = None, stored_fingerprint: str = ""
                   ) -> list[tuple[dict[str, Any], str]]:
        """This run's training settings and fingerprint, then its aliases'. Against a
        checkpoint's ``stored`` settings, each also as older code wrote it: without the settings
        added since that hold their defaults here (the default is what older code did), in the
        settings and in the fingerprint, so that a run killed across an upgrade resumes (a
        review: adding validate_every refused every earlier checkpoint); and without the model
        and data settings of ``setting_defaults`` that ``stored_fingerprint`` does not name at
        all and that hold their defaults here (a compat audit: label_trick_share and noise_std
        refused the anomaly and image checkpoints written before them)."""
        runs = []
        for config, fingerprint in ((self.config, self.fingerprint), *self.aliases):
            settings = asdict(config)
            runs.append((settings, fingerprint))
            if stored is None:
                continue
            defaults = {f.name: f.default for f in fields(config) if f.default is not MISSING}
            added = {name: value for name, value in settings.items()
                     if name not in stored and name in defaults and value == defaults[name]}
            older = _without_settings(fingerprint, added)
            for name, default in self.setting_defaults:
                if not _names_setting(stored_fingerprint, name):
                    older = _without_settings(older, {name: default})
            if added or older != fingerprint:
                runs.append(({k: v for k, v in settings.items() if k not in added}, older))
        return runs

    def _batch_bar(self, batches: Iterable[Any], epoch: int, rank: int) -> Iterable[Any]:
        """A bar over one epoch's batches, for epochs long enough to want one (a large graph
        in mini-batches): on a terminal it appears after 2 s, in a log as the epoch bar's lines
        do (after 30 s, then one line per 30 s)."""
        try:
            total: Optional[int] = len(batches)  # type: ignore[arg-type]
        except TypeError:  # a generator: the bar counts without a total
            total = None
        return progress_bar(batches, desc=f"{self.description}, epoch {epoch}", leave=False,
                            disable=not self.progress or rank != 0, total=total, unit="batch",
                            **({"delay": 2.0} if interactive(sys.stderr) else {}))

    def _save(self, path, epoch, model, optimizer, scheduler, history, best, best_epoch,
              best_state, stale, stopped, average, ranks=None, steps_since_pass=0) -> None:
        save_checkpoint(path, {
            "fingerprint": self.fingerprint,
            "epoch": epoch,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "average": average.state_dict() if average is not None else None,
            "rng": rng_state(),
            "generators": [g.get_state() for g in self.generators],
            "history": history,
            "best": asdict(best) if best is not None else None,
            "best_epoch": best_epoch,
            "best_state": best_state,
            "stale": stale,
            "steps_since_pass": steps_since_pass,
            "stopped": stopped,
            "config": asdict(self.config),
            "written_by": code_identity(),
            # under DDP each rank's own states (rank 0's are "rng" and "generators" above)
            **({"ranks": ranks} if ranks is not None else {}),
        })


def _gather_random_states(generators: Sequence[torch.Generator]) -> list[dict[str, Any]]:
    """Every rank's global random states and task generators, gathered (rank order)."""
    own = {"rng": rng_state(), "generators": [g.get_state() for g in generators]}
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, own)
    return gathered


def _own_random_states(state: dict[str, Any], rank: int, world: int,
                       path: Path) -> dict[str, Any]:
    """The random states this rank resumes from: its own under DDP when the checkpoint holds
    every rank's (each rank had restored rank 0's: their dropout and sampling streams became
    one), else the saved ones, with a warning where ranks must then share them."""
    ranks = state.get("ranks")
    if world > 1 and ranks is not None and len(ranks) == world:
        return ranks[rank]
    if world > 1:
        warnings.warn(f"{path} holds the random states of "
                      f"{'1 process' if ranks is None else f'{len(ranks)} ranks'}, and this run "
                      f"has {world}: every rank resumes from rank 0's, so their random draws "
                      "differ from an uninterrupted run's", ReproducibilityWarning, stacklevel=3)
    return {"rng": state["rng"], "generators": state["generators"]}


def _written_by(state: dict[str, Any], unknown: Iterable[str] = ()) -> str:
    """Where a refused checkpoint came from, when other code wrote it: a setting the stored
    run lacks (``unknown``) was added since, so the user changed nothing but the version."""
    here, there = code_identity(), state.get("written_by")
    if there == here:
        return ""
    origin = ("an older et-graph, which recorded no version" if there is None else
              f"et-graph {there.get('et_graph_version')} at {there.get('git_commit')}")
    lacks = f"; it has no {', '.join(sorted(unknown))}, added since" if unknown else ""
    return (f" (written by {origin}, this is et-graph {here['et_graph_version']} at "
            f"{here['git_commit']}{lacks})")


def _warn_overwriting(path: Path,
                      same_runs: Callable[[Any, str], list[tuple[dict[str, Any], str]]]
                      ) -> None:
    """An ``OutputWarning`` before a run without ``resume`` replaces the checkpoint of a run with
    another configuration in the same folder (two --data files with the same name share one)."""
    try:
        state = load_checkpoint(path)
    except Exception:  # noqa: BLE001 - unreadable: nothing to name, it is replaced as before
        return
    stored = (state.get("config"), state.get("fingerprint", ""))
    if stored not in same_runs(stored[0], str(stored[1])):
        warnings.warn(f"{path} holds the checkpoint of a run with another configuration, and "
                      "this run (without resume) replaces it: give each configuration its own "
                      "checkpoint_dir to keep both", OutputWarning, stacklevel=3)


def _without_settings(fingerprint: str, settings: dict[str, Any]) -> str:
    """``fingerprint`` as code without ``settings`` wrote it: each ``name=value`` piece (a
    config's repr), ``'name': value`` (a dict's) or ``"name": value`` (JSON) removed with its
    comma."""
    for name, value in settings.items():
        for piece in (f"{name}={value!r}", f"'{name}': {value!r}",
                      f"{json.dumps(name)}: {json.dumps(value, default=str)}"):
            # whole pieces only: a plain replace cut "noise_std=0.0" out of "noise_std=0.05"
            # and "patience=0" out of "lr_patience=0" (a review)
            escaped = re.escape(piece)
            fingerprint = re.sub(rf", {escaped}(?=[,)}}\]]|$)|(?<![^(\[{{]){escaped}, ", "",
                                 fingerprint)
    return fingerprint


def _names_setting(fingerprint: str, name: str) -> bool:
    """Whether ``fingerprint`` holds a setting ``name`` in any of :func:`_without_settings`'
    spellings."""
    return bool(re.search(rf"(?<![\w.])(?:{re.escape(name)}=|'{re.escape(name)}': |"
                          rf"{re.escape(json.dumps(name))}: )", fingerprint))


def dataclass_defaults(*configs: Any) -> list[tuple[str, Any]]:
    """``(name, default)`` of every field with a plain default in ``configs`` and the
    dataclasses nested in them (a nested section's defaults are those of the section its
    parent builds: ``NodeTrainConfig(lr=0.01)`` gives ``lr`` 0.01): a :class:`Trainer`'s
    ``setting_defaults``. A name with two different defaults (two sections) is left out: a
    fingerprint's ``name=value`` cannot tell which section it belongs to (a review)."""
    found: dict[str, Any] = {}
    ambiguous: set[str] = set()
    pending: list[tuple[Any, Any]] = [(config, None) for config in configs]
    while pending:
        config, section_default = pending.pop(0)
        for field_ in fields(config):
            value = getattr(config, field_.name, None)
            if is_dataclass(value):
                built = (field_.default_factory() if field_.default_factory is not MISSING
                         else None)
                pending.append((value, built if is_dataclass(built) else None))
                continue
            if section_default is not None:
                default = getattr(section_default, field_.name)
            elif field_.default is not MISSING:
                default = field_.default
            else:
                continue
            if field_.name in found and found[field_.name] != default:
                ambiguous.add(field_.name)
            found.setdefault(field_.name, default)
    return [(name, default) for name, default in found.items() if name not in ambiguous]


def _new_settings(stored: str, current: str, limit: int = 6) -> list[str]:
    """The ``name=value`` pieces of the ``current`` fingerprint (a config's repr or JSON) that
    the ``stored`` one lacks: what a refused resume changed, as far as a text diff can tell."""
    def pieces(text: str) -> list[str]:
        return [p for p in re.split(r"[(),{}\[\]]\s*|,\s*", text) if "=" in p or ":" in p]

    old = set(pieces(stored))
    # once each: a model's repr repeats a layer's out_features=16 per layer (a user audit saw
    # it four times)
    new = list(dict.fromkeys(p.strip() for p in pieces(current) if p not in old))[:limit]
    # the data digest is a hash: say what it covers (a scale audit read only the hash)
    return [f"{p} (the data: another graph, features, split or training labels)"
            if p.startswith("data=") else p for p in new]


def rank_world() -> tuple[int, int]:
    """``(rank, world size)`` of this process under torch.distributed, ``(0, 1)`` outside it."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def launched_world_size() -> int:
    """The process count a launcher such as ``torchrun`` announces (``WORLD_SIZE``); 1 without
    one (or with a value that is no count)."""
    value = os.environ.get("WORLD_SIZE", "1").strip()
    return int(value) if value.isdigit() else 1


def join_process_group(ddp: bool) -> tuple[int, bool]:
    """``(rank, whether this call made the process group)`` of a run asked to be data-parallel
    (``ddp``; gloo, under ``torchrun``): a group the caller made is joined, not made again,
    and only a group made here is the run's to destroy. Without ``ddp``: ``(0, False)``."""
    if not ddp:
        return 0, False
    if dist.is_initialized():
        return dist.get_rank(), False
    if "RANK" not in os.environ:
        raise ValueError("ddp needs torchrun (RANK/WORLD_SIZE/MASTER_ADDR unset)")
    dist.init_process_group("gloo")
    return dist.get_rank(), True


def is_distributed() -> bool:
    """Whether this process is one of several under torch.distributed."""
    return rank_world()[1] > 1


def _clone_state(model: nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def raise_explained(error: RuntimeError, hint: str, phase: str = "training") -> NoReturn:
    """Re-raise ``error``: as a ``MemoryError`` that names the ``phase`` and gives ``hint`` if
    it is an out-of-memory error, else unchanged (raising it "from" itself would make it its
    own cause)."""
    explained = _explain_oom(error, hint, phase)
    if explained is error:
        raise error
    raise explained from error


def _explain_oom(error: RuntimeError, hint: str, phase: str = "training") -> Exception:
    text = str(error)
    if any(marker in text.lower() for marker in _OOM_MARKERS):
        advice = hint or "train on mini-batches or a smaller model"
        return MemoryError(f"out of memory during {phase}: {advice}. ({text.splitlines()[0]})")
    return error


def seed_everything(seed: int, cuda: bool = True) -> None:
    """Seed Python, NumPy and torch; with ``cuda=False`` torch's CPU generator alone
    (``torch.manual_seed`` would queue a seed for CUDA that outlives a private block)."""
    import random

    random.seed(seed)
    np.random.seed(seed)
    if cuda:
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)
        if mps_generator_ready():  # (torch.manual_seed seeds it; the CPU's alone did not)
            torch.mps.manual_seed(seed)


@contextmanager
def private_rng(seed: int, device: Optional[torch.device] = None) -> Iterator[None]:
    """:func:`seed_everything` for the block, then give the caller back the generator states it
    had: a library call that seeds for reproducibility (a detector's ``fit``) must not reset
    the random stream of the program around it.

    On a machine with CUDA the CUDA generators are forked too when the block runs on a GPU or
    CUDA is up already (seeding them lazily would overwrite a seed the caller set before CUDA
    started); a CPU block on a machine whose CUDA is not up seeds the CPU generator alone.

    The generators are the process's: blocks in several threads take turns (a lock), so that
    two detectors fitted at once in two threads each see their own seed and the caller's
    states come back (they interleaved their draws: other scores, by up to 0.92)."""
    with _PRIVATE_RNG_LOCK:
        on_gpu = device is not None and torch.device(device).type == "cuda"
        if torch.cuda.is_available() and on_gpu:
            torch.cuda.init()
        # the states a checkpoint keeps (CUDA's once it is up), given back as it restores them
        saved = rng_state()
        try:
            seed_everything(seed, cuda=torch.cuda.is_available() and torch.cuda.is_initialized())
            yield
        finally:
            set_rng_state(saved)


#: One :func:`private_rng` block at a time per process (re-entrant: a fit inside a fit).
_PRIVATE_RNG_LOCK = threading.RLock()


def _free_rng_lock_in_child() -> None:
    """In a child forked while another thread fitted, that thread does not exist and its hold
    on the lock never ends: every fit of the child waited for good (a multiprocessing audit:
    a fork Pool or a forking server beside a training thread). Freed there, unless the forking
    thread holds it itself (a DataLoader's workers forked inside a fit), which releases it as
    before."""
    if not _PRIVATE_RNG_LOCK._is_owned():  # type: ignore[attr-defined]
        _PRIVATE_RNG_LOCK._at_fork_reinit()  # type: ignore[attr-defined]


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_free_rng_lock_in_child)

_Function = TypeVar("_Function", bound=Callable[..., Any])


def keeps_caller_rng(function: _Function) -> _Function:
    """Decorate a protocol's training call that seeds the process's generators itself (for
    reproducible folds and seeds) or sets its threads: the caller gets its generator states
    (and threads) back afterwards (:func:`~et_graph.config.process_state_kept`), as with a
    detector's ``fit`` (:func:`private_rng`). An engine audit found the TU and GNNBenchmark
    trainings resetting the random stream of the program around them, a memory audit the
    tuners pinning the caller to their thread count.

    The call holds :func:`private_rng`'s lock throughout (the generators are the process's):
    a detector fitted in another thread meanwhile waits for it to return. CUDA's states are
    given back only when CUDA was up before the call."""
    from ..config import process_state_kept

    @functools.wraps(function)
    def kept(*args: Any, **kwargs: Any) -> Any:
        with _PRIVATE_RNG_LOCK, process_state_kept():
            return function(*args, **kwargs)

    return kept  # type: ignore[return-value]
