"""Training, evaluation, baselines and dynamics analysis for masked image completion.

Protocol: the model is trained on the training images only, with a fresh random patch mask per
batch. Training goes through the one engine, :class:`~et_graph.training.Trainer`, which needs a
validation score: a seeded ``val_fraction`` (default 10%) of the *training* images is held out
with one fixed, seeded patch mask, the score is minus the masked-patch MSE on it, and the best
epoch's weights are kept (ties: the earlier epoch). The model trains on the other 90%; the
held-out test images play no part in training or selection. Held-out images get one fixed,
seeded patch mask, and the model and both baselines are scored on exactly those masked patches:
the MSE over the pixels of the masked patches.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union, cast

import torch
from torch import Tensor

from ..datasets.images import split_images

# (where the image task and its tests have always imported them)
from ..energy import ENERGY_TOLERANCE, energy_is_monotone  # noqa: F401
from ..exceptions import DataWarning
from ..nn.models.image_completion import ETImageCompletion, check_images, patchify
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
from ..training.checkpoint import fingerprint_with_data

#: Seed offset of the validation split of the training images and of its fixed mask.
VALIDATION_SEED = 20_000


def warn_outside_unit_range(images: Tensor, what: str) -> None:
    """A warning where pixels exceed 1: the path, its MSE and its figures are stated for
    pixels in ``[0, 1]``, and images in 0..255 were trained on without a word (an audit)."""
    largest = float(images.max()) if images.numel() else 0.0
    if largest > 1.0 + 1e-6:
        warnings.warn(f"{what} reach {largest:g}: the image path works with pixels in [0, 1] "
                      "(as the loaders give them; divide 8-bit values by 255), and its MSE is "
                      "stated for that range", DataWarning, stacklevel=3)


def masked_mse(prediction: Tensor, target: Tensor, patch_mask: Tensor) -> float:
    """Mean squared error over the pixels of the masked patches (``patch_mask`` True)."""
    if prediction.shape != target.shape or prediction.dim() != 3:
        raise ValueError(
            f"prediction and target must both be [B, M, P], got {tuple(prediction.shape)} "
            f"and {tuple(target.shape)}"
        )
    if tuple(patch_mask.shape) != tuple(target.shape[:2]):
        raise ValueError(f"patch_mask must be [B, M]={list(target.shape[:2])}")
    if patch_mask.dtype != torch.bool:  # an integer mask indexed images instead (an audit)
        raise ValueError(f"patch_mask must be a bool tensor (True = masked), got "
                         f"{patch_mask.dtype}")
    if not bool(patch_mask.any()):
        raise ValueError("patch_mask masks no patch; there is nothing to score")
    error = (prediction.float() - target.float()).pow(2)[patch_mask]
    return float(error.mean())


@dataclass
class ImageTrainConfig(TrainConfig):
    """Training of :class:`ETImageCompletion`: the engine's settings (inherited from
    :class:`TrainConfig`, with their docs) plus the batch size.

    Attributes:
        batch_size: training images per batch.
    """

    epochs: int = 30
    lr: float = 2e-3
    grad_clip: float = 1.0
    batch_size: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")


def validation_split(
    train_images: Tensor, val_fraction: float = 0.1, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """A seeded random ``(fit, validation)`` split of the training images; both non-empty."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie strictly between 0 and 1, got {val_fraction}")
    if train_images.size(0) < 2:
        raise ValueError(f"{train_images.size(0)} training image: the epoch is chosen on a "
                         "validation part of the training images, so at least 2 are needed "
                         "(raise --train-limit, or give more images)")
    return split_images(train_images, val_fraction, VALIDATION_SEED + seed)


class ImageCompletionTask:
    """The :class:`~et_graph.training.TrainingTask` of masked image completion: shuffled batches
    of the fit images with a fresh random mask per batch; validation on the validation images
    with one fixed mask (score = -masked MSE, ties broken by the MSE itself)."""

    def __init__(self, model: ETImageCompletion, fit_images: Tensor, val_images: Tensor,
                 batch_size: int, seed: int = 0) -> None:
        self.fit_images, self.val_images = fit_images, val_images
        self.batch_size = batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.val_mask = model.random_mask(
            val_images.size(0), generator=torch.Generator().manual_seed(VALIDATION_SEED + seed)
        ).cpu()
        self.val_target = patchify(val_images, model.patch_size).float()

    def batches(self, epoch: int) -> Iterator[Tensor]:
        order = torch.randperm(self.fit_images.size(0), generator=self.generator)
        for start in range(0, order.numel(), self.batch_size):
            yield self.fit_images[order[start : start + self.batch_size]]

    def loss(self, model: ETImageCompletion, images: Tensor) -> Tensor:
        device = model.position.device
        mask = model.random_mask(images.size(0), generator=self.generator)
        return model.loss(images.to(device), mask)

    def validate(self, model: ETImageCompletion) -> Validation:
        mse = masked_mse(predict_patches(model, self.val_images, self.val_mask),
                         self.val_target, self.val_mask)
        return Validation(score=-mse, loss=mse, metrics={"mse": mse})


@keeps_caller_rng
def train_image_completion(
    model: ETImageCompletion,
    train_images: Tensor,
    config: Optional[ImageTrainConfig] = None,
    val_fraction: float = 0.1,
    seed: int = 0,
    progress: bool = True,
    checkpoint: Optional[CheckpointConfig] = None,
    fingerprint: str = "",
    setting_defaults: Sequence[tuple[str, Any]] = (),
) -> FitResult:
    """Train with :class:`~et_graph.training.Trainer` on the masked-patch MSE of a seeded
    ``1 - val_fraction`` part of ``train_images`` (a fresh random mask per batch), keep the epoch
    with the lowest masked MSE on the other part (one fixed seeded mask) and return the
    :class:`~et_graph.training.FitResult`; the model holds that epoch's weights.

    ``seed`` seeds the process's generators too (the descent noise, ``noise_std``), and the
    caller gets its own generator states back, as the other tasks' trainings do.
    ``setting_defaults`` are the defaults of the settings ``fingerprint`` spells (the
    :class:`~et_graph.training.Trainer`'s: a checkpoint from before one was added resumes)."""
    config = config or ImageTrainConfig()
    seed_everything(seed)
    check_images(train_images, model.channels)
    warn_outside_unit_range(train_images, "the training images")
    fit_images, val_images = validation_split(train_images, val_fraction, seed)
    task = ImageCompletionTask(model, fit_images, val_images, config.batch_size, seed)
    trainer = Trainer(config, checkpoint=checkpoint, description="train ET", progress=progress,
                      generators=[task.generator],
                      # other images under the same folder are refused, not resumed
                      fingerprint=fingerprint_with_data(fingerprint, checkpoint, train_images),
                      setting_defaults=setting_defaults)
    return trainer.fit(model, task)


@torch.no_grad()
@evaluates_model
def predict_patches(
    model: ETImageCompletion, images: Tensor, patch_mask: Tensor, batch_size: int = 256
) -> Tensor:
    """The model's patches ``[B, M, P]`` in evaluation mode (no noise), on the CPU; the model's
    mode is given back."""
    device = model.position.device
    parts = [
        model(images[i : i + batch_size].to(device), patch_mask[i : i + batch_size].to(device))
        for i in range(0, images.size(0), batch_size)
    ]
    return torch.cat(parts).float().cpu()


def mean_patch_baseline(
    train_images: Tensor,
    images: Tensor,
    patch_size: Union[int, tuple[int, int]],
    per_position: bool = True,
) -> Tensor:
    """Fill every patch with the training mean patch ``[B, M, P]``: the mean at that grid
    position (``per_position=True``, the stronger variant) or over all positions."""
    train_patches = patchify(train_images, patch_size).float()
    mean = train_patches.mean(dim=0) if per_position else train_patches.mean(dim=(0, 1))
    target = patchify(images, patch_size)
    return mean.expand_as(target).clone()


def nearest_open_baseline(
    images: Tensor,
    patch_mask: Tensor,
    patch_size: Union[int, tuple[int, int]],
    grid_size: tuple[int, int],
) -> Tensor:
    """Fill each masked patch with its nearest open patch on the patch grid (Euclidean distance
    between grid positions; ties are averaged). Open patches are returned unchanged."""
    patches = patchify(images, patch_size).float()
    rows, cols = grid_size
    if patches.size(1) != rows * cols:
        raise ValueError(f"grid_size {grid_size} does not match {patches.size(1)} patches")
    coords = torch.stack(
        torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), dim=-1
    ).reshape(-1, 2).float()
    if bool(patch_mask.all(dim=1).any()):
        # every distance infinite, every patch "nearest": the fill averaged the hidden patches
        # themselves (an audit)
        raise ValueError(f"image {int(patch_mask.all(dim=1).nonzero()[0])} has every patch "
                         "masked: the nearest open patch does not exist")
    distance = torch.cdist(coords, coords)  # [M, M]
    # Only open patches may be copied from; masked ones are pushed to infinity.
    distance = distance.unsqueeze(0).expand(patches.size(0), -1, -1)
    distance = distance.masked_fill(patch_mask.unsqueeze(1), float("inf"))
    nearest = distance == distance.amin(dim=-1, keepdim=True)
    weights = nearest.float() / nearest.float().sum(dim=-1, keepdim=True)
    filled = weights @ patches
    return torch.where(patch_mask.unsqueeze(-1), filled, patches)


@torch.no_grad()
def evaluate_image_completion(
    model: ETImageCompletion,
    train_images: Tensor,
    test_images: Tensor,
    patch_mask: Tensor,
) -> dict[str, float]:
    """Held-out masked-patch MSE of the model and of the baselines, on the same masks."""
    warn_outside_unit_range(test_images, "the held-out images")
    patch = model.patch_size
    target = patchify(test_images, patch).float()
    predictions = {
        "et": predict_patches(model, test_images, patch_mask),
        "mean_patch": mean_patch_baseline(train_images, test_images, patch, per_position=True),
        "mean_patch_global": mean_patch_baseline(
            train_images, test_images, patch, per_position=False
        ),
        "nearest_open": nearest_open_baseline(test_images, patch_mask, patch, model.grid_size),
    }
    return {name: masked_mse(pred, target, patch_mask) for name, pred in predictions.items()}


@torch.no_grad()
@evaluates_model
def trace_dynamics(model: ETImageCompletion, images: Tensor, patch_mask: Tensor,
                   chunk_size: int = 64) -> dict:
    """Follow the descent step by step (evaluation mode, so no noise; the model's mode is given
    back).

    Returns ``energies [B, T + 1]`` (per image), ``tokens [T + 1, B, M, D]``, and for each step
    the mean norm over tokens of the attention and Hopfield parts of the update
    ``alpha * dE/dg``, separately for masked and open patches (``[T]`` each), plus
    ``memory_usage [K]``: the mean ``relu(xi_mu . g)`` over all final tokens.
    Each step is one call of :meth:`ETConv.forward_dense`, so the trajectory is the model's own.
    The images go through ``chunk_size`` at a time (the dense attention of all held-out images
    at once took 1.6 GB for 200 images of 256 patches: an audit); the figures are the same.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    conv = model.conv
    mask_all = patch_mask.to(model.position.device)
    keys = ("att_masked", "att_open", "hn_masked", "hn_open")
    # sums and counts over every chunk, so that the means are those of all tokens at once
    sums = {key: [0.0] * conv.steps for key in keys}
    counts = {key: [0] * conv.steps for key in keys}
    energy_chunks, token_chunks = [], []
    usage_sum: Optional[Tensor] = None
    usage_count = 0
    for start in range(0, images.size(0), chunk_size):
        mask = mask_all[start:start + chunk_size]
        x = model.encode(images[start:start + chunk_size].to(model.position.device), mask)
        tokens, energies = [x], []
        for step in range(conv.steps):
            attention, hopfield = conv.dense_attention_and_hopfield_grads(x)
            for name, part in (("att", attention), ("hn", hopfield)):
                size = (conv.alpha * part).norm(dim=-1)  # [B, M]
                for where, chosen in (("masked", mask), ("open", ~mask)):
                    sums[f"{name}_{where}"][step] += float(size[chosen].sum())
                    counts[f"{name}_{where}"][step] += int(chosen.sum())
            x, step_energy = conv.forward_dense(x, return_energy=True, steps=1)
            energies.append(step_energy[:, 0])
            tokens.append(x)
        energies.append(conv.dense_energy(x))
        energy_chunks.append(torch.stack(energies, dim=-1).cpu())
        token_chunks.append(torch.stack(tokens).cpu())
        usage = torch.relu(conv.norm(x) @ conv.xi.t()).sum(dim=(0, 1))
        usage_sum = usage if usage_sum is None else usage_sum + usage
        usage_count += x.size(0) * x.size(1)
    return {
        "energies": torch.cat(energy_chunks),
        "tokens": torch.cat(token_chunks, dim=1),
        "norms": {key: torch.tensor([total / max(count, 1) if count else float("nan")
                                     for total, count in zip(sums[key], counts[key])])
                  for key in keys},
        # (set by the first chunk: without one, torch.cat above has raised)
        "memory_usage": (cast(Tensor, usage_sum) / usage_count).cpu(),
    }

