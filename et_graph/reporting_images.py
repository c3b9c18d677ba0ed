"""Figures of the masked image completion run (``et-graph image``): completions, energy along
the descent, update norms, decoded memories, position similarity and the training curves."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .nn.models.image_completion import ETImageCompletion
from .plots.colours import BLUE, PURPLE, VERMILLION, YELLOW
from .protocols.image_completion import mean_patch_baseline, nearest_open_baseline

FIGURES = ("completion_grid.png", "energy.png", "update_norms.png", "memories.png",
           "position_similarity.png", "training_loss.png")


def _as_display(image: Tensor):
    """``[C, H, W]`` to something ``imshow`` understands."""
    image = image.detach().float()
    return image[0].numpy() if image.size(0) == 1 else image.permute(1, 2, 0).numpy()


def _mosaic(tiles: Tensor, columns: int, pad: int = 1, pad_value: float = 1.0) -> Tensor:
    """Tiles ``[N, C, h, w]`` laid out row by row into one ``[C, H, W]`` picture, so that a
    figure needs one ``imshow`` instead of one axes per tile (much faster to draw)."""
    count, channels, height, width = tiles.shape
    rows = -(-count // columns)
    canvas = torch.full(
        (channels, rows * (height + pad) + pad, columns * (width + pad) + pad), pad_value
    )
    for index in range(count):
        top = pad + (index // columns) * (height + pad)
        left = pad + (index % columns) * (width + pad)
        canvas[:, top : top + height, left : left + width] = tiles[index].float()
    return canvas


def _masked_view(model: ETImageCompletion, images: Tensor, mask: Tensor) -> Tensor:
    """The images with their masked patches as NaN, which :func:`_marked_rgb` colours (a grey
    fill looked like the digits' own grey pixels)."""
    patches = model.patchify(images).float()
    hidden = torch.full_like(patches, float("nan"))
    return model.unpatchify(torch.where(mask.unsqueeze(-1), hidden, patches))


#: The mask's colour, the first of these that few of the images' pixels are close to.
MASK_COLOURS = (("vermillion", VERMILLION), ("blue", BLUE), ("yellow", YELLOW),
                ("purple", PURPLE))


def _rgb(colour: str) -> Tensor:
    return torch.tensor([int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])


def _mask_colour(images: Tensor, near: float = 0.45, share: float = 0.01
                 ) -> tuple[str, str]:
    """``(name, hex)`` of the first :data:`MASK_COLOURS` entry that fewer than ``share`` of the
    pixels of ``images`` ``[B, C, H, W]`` lie within ``near`` of (RGB distance), else the one
    with the fewest such pixels: a vermillion mask could not be told from red image content
    (an audit). Grey pixels are at least 0.58 from vermillion, so grey images keep it; pure
    and dark red lie within 0.45 of it (a review: 0.2 missed both)."""
    pixels = images.detach().float().clamp(0, 1)
    pixels = (pixels.expand(-1, 3, -1, -1) if pixels.size(1) == 1 else pixels[:, :3])
    pixels = pixels.permute(0, 2, 3, 1).reshape(-1, 3)
    close = [int(((pixels - _rgb(colour)).norm(dim=-1) < near).sum())
             for _, colour in MASK_COLOURS]
    few = [index for index, count in enumerate(close) if count < share * len(pixels)]
    return MASK_COLOURS[few[0] if few else close.index(min(close))]


def _marked_rgb(picture: Tensor, colour: str = VERMILLION) -> Tensor:
    """``[C, H, W]`` as RGB in [0, 1] with the NaN pixels (masked patches) in ``colour``."""
    rgb = picture.expand(3, -1, -1).clone() if picture.size(0) == 1 else picture[:3].clone()
    hidden = torch.isnan(rgb).any(dim=0)
    marker = _rgb(colour)
    rgb[:, hidden] = marker.unsqueeze(1)
    return rgb.clamp(0, 1)


def _filled_patch_outlines(model: ETImageCompletion, mask: Tensor, rows: list[int],
                           columns: int, pad: int) -> list[tuple[float, float, int, int]]:
    """``(x, y, width, height)`` in the mosaic's pixels (``imshow``'s pixel centres at whole
    numbers) of every masked patch of the tiles in the mosaic ``rows``: the fill rows looked
    like whole images, and which patches a model had filled could not be told (an audit)."""
    (height, width), (patch_h, patch_w) = model.image_size, model.patch_size
    boxes = []
    for row in rows:
        for column in range(min(columns, mask.size(0))):
            top, left = pad + row * (height + pad), pad + column * (width + pad)
            for index in mask[column].nonzero().flatten().tolist():
                grid_row, grid_column = divmod(index, model.grid_size[1])
                boxes.append((left + grid_column * patch_w - 0.5,
                              top + grid_row * patch_h - 0.5, patch_w, patch_h))
    return boxes


def _filled_where_masked(model: ETImageCompletion, images: Tensor, mask: Tensor,
                         patches: Tensor) -> Tensor:
    """The images with their masked patches replaced by ``patches`` ``[B, M, P]``."""
    own = model.patchify(images).float()
    return model.unpatchify(torch.where(mask.unsqueeze(-1), patches.float(), own))


def write_figures(
    out: Path,
    model: ETImageCompletion,
    test_images: Tensor,
    test_mask: Tensor,
    trace: dict[str, Any],
    history: list[dict[str, float]],
    best_epoch: int = -1,
    train_images: Tensor | None = None,
) -> None:
    """Write :data:`FIGURES` to ``out``; ``history`` is the engine's per-epoch history;
    ``train_images`` adds the mean-patch baselines (per position, the strongest, and over all
    positions) to the grid."""
    from .plots.figures import own_figures

    plt = own_figures()
    cmap = "gray" if model.channels == 1 else None
    height, width = model.image_size
    count = min(8, test_images.size(0))
    images, mask = test_images[:count], test_mask[:count]
    rows = {"masked": _masked_view(model, images, mask), "ET": model.complete(images, mask)}
    if train_images is not None:  # every baseline the table holds, the strongest first
        rows["mean patch"] = _filled_where_masked(model, images, mask, mean_patch_baseline(
            train_images, images, model.patch_size, per_position=True))
        # the table's mean_patch_global (the grid left it out: a plots audit)
        rows["global mean"] = _filled_where_masked(model, images, mask, mean_patch_baseline(
            train_images, images, model.patch_size, per_position=False))
    rows["nearest open"] = _filled_where_masked(model, images, mask, nearest_open_baseline(
        images, mask, model.patch_size, model.grid_size))
    rows["original"] = images
    tiles = torch.cat([batch.float().clamp(0, 1) for batch in rows.values()])
    pad = max(1, height // 8)
    colour_name, colour = _mask_colour(images)
    picture = _marked_rgb(_mosaic(tiles, columns=count, pad=pad), colour)
    fig, ax = plt.subplots(figsize=(1.0 * count + 1.6, 1.0 * len(rows) + 0.5))
    ax.imshow(_as_display(picture), interpolation="nearest")
    fill_rows = [index for index, name in enumerate(rows) if name not in ("masked", "original")]
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    ax.add_collection(PatchCollection(
        [Rectangle((x, y), w, h) for x, y, w, h in _filled_patch_outlines(
            model, mask, fill_rows, count, pad)],
        facecolor="none", edgecolor=colour, linewidth=0.6))
    step = picture.size(1) / len(rows)
    ax.set_yticks([step * (i + 0.5) for i in range(len(rows))], list(rows))
    ax.set_xticks([])
    ax.set_title(f"Held-out images ({colour_name} = masked patch; rows below: its fills, "
                 "outlined)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "completion_grid.png", dpi=100)
    plt.close(fig)

    energies = trace["energies"]
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for curve in energies[:32]:
        ax.plot(curve.numpy(), color="tab:blue", alpha=0.25, linewidth=0.8)
    ax.plot(energies.mean(0).numpy(), color="black", linewidth=2, label="mean over images")
    ax.set_xlabel("step t")
    ax.set_ylabel("energy E per image")
    ax.set_title("Energy along the ET dynamics (held-out)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "energy.png", dpi=110)
    plt.close(fig)

    norms = trace["norms"]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
    for ax, group in zip(axes, ("masked", "open")):
        steps = range(1, len(norms[f"att_{group}"]) + 1)
        ax.plot(steps, norms[f"att_{group}"].numpy(), marker="o", label="attention (ATT)")
        ax.plot(steps, norms[f"hn_{group}"].numpy(), marker="s", label="Hopfield (HN)")
        ax.set_title(f"{group} patches", fontsize=10)
        ax.set_xlabel("step t")
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel("mean ||alpha * dE/dg|| per token")
    axes[0].set_ylim(bottom=0)  # from 0: near 1.0 a 1.9x ratio looked like 6x (a plots audit)
    axes[0].legend(fontsize=8)
    fig.suptitle("Size of each energy term's share of the token update", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "update_norms.png", dpi=110)
    plt.close(fig)

    memories = model.decoded_memories().float().clamp(0, 1)
    order = trace["memory_usage"].argsort(descending=True)[:64]
    picture = _mosaic(memories[order], columns=8, pad=1, pad_value=0.5)
    fig, ax = plt.subplots(figsize=(4, 4.3))
    ax.imshow(_as_display(picture), cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    ax.axis("off")
    ax.set_title("Hopfield memories decoded as patches\n(most used first, row by row)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "memories.png", dpi=110)
    plt.close(fig)

    position = model.position.detach().float()
    position = position / position.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    similarity = (position @ position.t()).reshape(model.num_patches, 1, *model.grid_size)
    picture = _mosaic(similarity, columns=model.grid_size[1], pad=1, pad_value=float("nan"))
    fig, ax = plt.subplots(figsize=(4, 4.3))
    shown = ax.imshow(picture[0].numpy(), cmap="viridis", vmin=-1, vmax=1,
                      interpolation="nearest")
    ax.axis("off")
    fig.colorbar(shown, ax=ax, fraction=0.046)
    ax.set_title("Cosine similarity of each patch's position\nembedding to all others",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "position_similarity.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    epochs = [row["epoch"] + 1 for row in history]
    ax.plot(epochs, [row["train_loss"] for row in history], marker=".", label="training")
    validated = [(row["epoch"] + 1, -row["val_score"]) for row in history
                 if not math.isnan(row["val_score"])]  # (train.validate_every > 1 skips some)
    ax.plot(*zip(*validated) if validated else ([], []), marker=".", label="validation")
    if best_epoch >= 0:
        ax.axvline(best_epoch + 1, color="grey", linestyle=":", label="kept epoch")
    ax.set_xlabel("epoch")
    ax.xaxis.get_major_locator().set_params(integer=True)  # no epoch 1.2 (an audit)
    ax.set_ylabel("MSE (masked patches)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "training_loss.png", dpi=110)
    plt.close(fig)
