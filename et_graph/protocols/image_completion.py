"""Training, evaluation, baselines and dynamics analysis for masked image completion.

Protocol: the model is trained on the training images only, with a fresh random patch mask per
batch. Held-out images get one fixed, seeded patch mask, and the model and both baselines are
scored on exactly those masked patches: the MSE over the pixels of the masked patches.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional, Union

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..nn.models.image_completion import ETImageCompletion, check_images, patchify

ENERGY_TOLERANCE = 1e-4


def masked_mse(prediction: Tensor, target: Tensor, patch_mask: Tensor) -> float:
    """Mean squared error over the pixels of the masked patches (``patch_mask`` True)."""
    if prediction.shape != target.shape or prediction.dim() != 3:
        raise ValueError(
            f"prediction and target must both be [B, M, P], got {tuple(prediction.shape)} "
            f"and {tuple(target.shape)}"
        )
    if tuple(patch_mask.shape) != tuple(target.shape[:2]):
        raise ValueError(f"patch_mask must be [B, M]={list(target.shape[:2])}")
    if not bool(patch_mask.any()):
        raise ValueError("patch_mask masks no patch; there is nothing to score")
    error = (prediction.float() - target.float()).pow(2)[patch_mask]
    return float(error.mean())


def train_image_completion(
    model: ETImageCompletion,
    train_images: Tensor,
    epochs: int = 30,
    batch_size: int = 64,
    lr: float = 2e-3,
    weight_decay: float = 0.0,
    clip_norm: Optional[float] = 1.0,
    seed: int = 0,
    progress: bool = True,
) -> list[float]:
    """Adam on the masked-patch MSE; a new random mask for every batch. Returns the mean
    training loss of each epoch."""
    check_images(train_images, model.channels)
    if epochs < 0 or batch_size <= 0:
        raise ValueError("epochs must be >= 0 and batch_size > 0")
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    device = model.position.device
    history = []
    bar = tqdm(range(epochs), desc="train ET", disable=not progress, leave=False)
    for _ in bar:
        model.train()
        order = torch.randperm(train_images.size(0), generator=generator)
        total, count = 0.0, 0
        for start in range(0, order.numel(), batch_size):
            images = train_images[order[start : start + batch_size]].to(device)
            mask = model.random_mask(images.size(0), generator=generator)
            loss = model.loss(images, mask)
            optimizer.zero_grad()
            loss.backward()
            if clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()
            total += float(loss.detach()) * images.size(0)
            count += images.size(0)
        history.append(total / max(count, 1))
        bar.set_postfix(loss=f"{history[-1]:.4f}")
    model.eval()
    return history


@torch.no_grad()
def predict_patches(
    model: ETImageCompletion, images: Tensor, patch_mask: Tensor, batch_size: int = 256
) -> Tensor:
    """The model's patches ``[B, M, P]`` in evaluation mode (no noise), on the CPU."""
    model.eval()
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


@contextmanager
def _one_step_at_a_time(model: ETImageCompletion) -> Iterator[int]:
    steps = model.conv.steps
    model.conv.steps = 1
    try:
        yield steps
    finally:
        model.conv.steps = steps


@torch.no_grad()
def trace_dynamics(model: ETImageCompletion, images: Tensor, patch_mask: Tensor) -> dict:
    """Follow the descent step by step (evaluation mode, so no noise).

    Returns ``energies [B, T + 1]`` (per image), ``tokens [T + 1, B, M, D]``, and for each step
    the mean norm over tokens of the attention and Hopfield parts of the update
    ``alpha * dE/dg``, separately for masked and open patches (``[T]`` each), plus
    ``memory_usage [K]``: the mean ``relu(xi_mu . g)`` over all final tokens.
    Each step is one call of :meth:`ETConv.forward_dense`, so the trajectory is the model's own.
    """
    model.eval()
    conv = model.conv
    mask = patch_mask.to(model.position.device)
    x = model.encode(images.to(model.position.device), mask)
    tokens, energies = [x], []
    norms = {key: [] for key in ("att_masked", "att_open", "hn_masked", "hn_open")}
    with _one_step_at_a_time(model) as steps:
        for _ in range(steps):
            attention, hopfield = conv.dense_attention_and_hopfield_grads(x)
            for name, part in (("att", attention), ("hn", hopfield)):
                size = (conv.alpha * part).norm(dim=-1)  # [B, M]
                norms[f"{name}_masked"].append(float(size[mask].mean()))
                norms[f"{name}_open"].append(float(size[~mask].mean()))
            x, step_energy = conv.forward_dense(x, return_energy=True)
            energies.append(step_energy[:, 0])
            tokens.append(x)
    energies.append(conv.dense_energy(x))
    usage = torch.relu(conv.norm(x) @ conv.xi.t()).mean(dim=(0, 1))
    return {
        "energies": torch.stack(energies, dim=-1).cpu(),
        "tokens": torch.stack(tokens).cpu(),
        "norms": {key: torch.tensor(value) for key, value in norms.items()},
        "memory_usage": usage.cpu(),
    }


def energy_is_monotone(energies: Tensor, tolerance: float = ENERGY_TOLERANCE) -> bool:
    """True when no image's energy rises by more than ``tolerance * max(1, |E|)`` in one step
    (the slack absorbs float32 rounding)."""
    rise = energies[..., 1:] - energies[..., :-1]
    slack = tolerance * energies[..., :-1].abs().clamp_min(1.0)
    return bool((rise <= slack).all())
