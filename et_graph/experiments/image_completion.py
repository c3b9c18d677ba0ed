"""``et-graph image``: masked image completion with the dense Energy Transformer.

Trains :class:`ETImageCompletion` on scikit-learn's digits (default) or on a folder of images,
scores it on held-out images against two same-run baselines (mean patch, nearest open patch),
and writes ``results.json``, ``results.md`` and PNG figures to ``--out``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from ..datasets.images import load_digits_images, load_image_folder, split_images
from ..nn.models.image_completion import ETImageCompletion
from ..protocols.image_completion import (
    energy_is_monotone,
    evaluate_image_completion,
    nearest_open_baseline,
    trace_dynamics,
    train_image_completion,
)
from ..reporting import summarize, write_results

BASELINES = ("mean_patch", "mean_patch_global", "nearest_open")
FIGURES = ("completion_grid.png", "energy.png", "update_norms.png", "memories.png",
           "position_similarity.png", "training_loss.png")
QUICK = {"epochs": 2, "seeds": [0], "train_limit": 200, "test_limit": 64, "steps": 4}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data")
    data.add_argument("--data", default="digits",
                      help="'digits' (scikit-learn's bundled 8x8 digits) or a folder of images")
    data.add_argument("--image-size", type=int, default=32,
                      help="resize folder images to this size (ignored for digits, which are 8x8)")
    data.add_argument("--color", choices=("grayscale", "rgb"), default="grayscale",
                      help="channels for folder images")
    data.add_argument("--test-fraction", type=float, default=0.2,
                      help="held-out share of the images (re-split for every seed)")
    model = parser.add_argument_group("model")
    model.add_argument("--patch-size", type=int, default=2)
    model.add_argument("--mask-ratio", type=float, default=0.5)
    model.add_argument("--dim", type=int, default=64, help="token width D")
    model.add_argument("--heads", type=int, default=4)
    model.add_argument("--head-dim", type=int, default=16)
    model.add_argument("--hopfield-dim", type=int, default=None, help="memories K (default 4D)")
    model.add_argument("--steps", type=int, default=12, help="ET descent steps T")
    model.add_argument("--alpha", type=float, default=0.1, help="step size")
    model.add_argument("--hopfield", choices=("relu", "softmax"), default="relu")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=int, default=30)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--lr", type=float, default=2e-3)
    train.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    train.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    train.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny run (seconds) that still writes every file")
    parser.add_argument("--out", default="results/image_completion", help="output folder")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _load(args: argparse.Namespace) -> Tensor:
    if args.data == "digits":
        return load_digits_images()
    return load_image_folder(args.data, size=args.image_size, color=args.color)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    settings = {
        "epochs": args.epochs, "seeds": list(args.seeds), "steps": args.steps,
        "train_limit": None, "test_limit": None,
    }
    if args.quick:
        settings.update(QUICK)
    return settings


def _build(args: argparse.Namespace, images: Tensor, steps: int) -> ETImageCompletion:
    return ETImageCompletion(
        image_size=tuple(images.shape[2:]),
        patch_size=args.patch_size,
        channels=images.size(1),
        dim=args.dim,
        heads=args.heads,
        head_dim=args.head_dim,
        hopfield_dim=args.hopfield_dim,
        steps=steps,
        alpha=args.alpha,
        hopfield=args.hopfield,
        mask_ratio=args.mask_ratio,
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(max(1, args.threads))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = _settings(args)
    images = _load(args)
    progress = not args.no_progress
    per_seed: list[dict[str, Any]] = []
    shown: Optional[dict[str, Any]] = None
    for seed in settings["seeds"]:
        train_images, test_images = split_images(images, args.test_fraction, seed)
        train_images = train_images[: settings["train_limit"]]
        test_images = test_images[: settings["test_limit"]]
        torch.manual_seed(seed)
        model = _build(args, images, settings["steps"]).to(args.device)
        start = time.perf_counter()
        history = train_image_completion(
            model, train_images, epochs=settings["epochs"], batch_size=args.batch_size,
            lr=args.lr, seed=seed, progress=progress,
        )
        seconds = time.perf_counter() - start
        # One fixed mask per held-out image, shared by the model and the baselines.
        test_mask = model.random_mask(
            test_images.size(0), generator=torch.Generator().manual_seed(10_000 + seed)
        ).cpu()
        model.cpu()
        mse = evaluate_image_completion(model, train_images, test_images, test_mask)
        trace = trace_dynamics(model, test_images, test_mask)
        monotone = energy_is_monotone(trace["energies"])
        per_seed.append({
            "seed": seed, "mse": mse, "energy_monotone": monotone,
            "train_seconds": seconds, "final_train_loss": history[-1] if history else None,
            "num_train": int(train_images.size(0)), "num_test": int(test_images.size(0)),
        })
        if progress:
            line = ", ".join(f"{k}={v:.4f}" for k, v in mse.items())
            print(f"seed {seed}: {line}; energy monotone: {monotone}; {seconds:.0f}s training")
        if shown is None:
            shown = {"model": model, "test_images": test_images, "test_mask": test_mask,
                     "trace": trace, "history": history}

    results = _collect(args, settings, per_seed)
    assert shown is not None
    trace = shown["trace"]
    results["dynamics_first_seed"] = {
        "mean_energy_per_step": trace["energies"].mean(0).tolist(),
        "update_norms_per_step": {key: value.tolist() for key, value in trace["norms"].items()},
    }
    _write_figures(out, **shown)
    notes = [
        "MSE over the pixels of the masked held-out patches (pixel values in [0, 1]).",
        "mean_patch: training mean patch at each grid position; mean_patch_global: one mean "
        "patch for all positions; nearest_open: copy of the nearest open patch on the grid.",
        f"energy_monotone: every held-out image's energy never rose over the {settings['steps']}"
        " steps, in every seed.",
        "Figures (first seed): " + ", ".join(FIGURES) + ".",
    ]
    write_results(out, results, metrics=["mse"], title="Masked image completion", notes=notes)
    if progress:
        print((out / "results.md").read_text())
    return results


def _collect(args: argparse.Namespace, settings: dict, per_seed: list[dict]) -> dict[str, Any]:
    names = ("et", *BASELINES)
    summaries = {name: summarize(r["mse"][name] for r in per_seed) for name in names}
    return {
        "dataset": "sklearn digits" if args.data == "digits" else str(args.data),
        "protocol": (
            f"seeded random {1 - args.test_fraction:.0%}/{args.test_fraction:.0%} train/test split"
            f" per seed; {args.mask_ratio:.0%} of patches masked at random (fresh masks per "
            "training batch, one fixed mask per held-out image); mean ± std over seeds "
            f"{settings['seeds']}"
        ),
        "mse": {name: summaries[name]["mean"] for name in names},
        "mse_std": {name: summaries[name]["std"] for name in names},
        "energy_monotone": all(r["energy_monotone"] for r in per_seed),
        "models": {name: {"mse": summaries[name]} for name in names},
        "seeds": settings["seeds"],
        "per_seed": per_seed,
        "quick": bool(args.quick),
        "config": {
            "patch_size": args.patch_size, "mask_ratio": args.mask_ratio, "dim": args.dim,
            "heads": args.heads, "head_dim": args.head_dim, "hopfield_dim": args.hopfield_dim,
            "steps": settings["steps"], "alpha": args.alpha, "hopfield": args.hopfield,
            "epochs": settings["epochs"], "batch_size": args.batch_size, "lr": args.lr,
            "train_limit": settings["train_limit"], "test_limit": settings["test_limit"],
        },
    }


# ----------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    patches = model.patchify(images).float()
    grey = torch.full_like(patches, 0.5)
    return model.unpatchify(torch.where(mask.unsqueeze(-1), grey, patches))


def _write_figures(
    out: Path,
    model: ETImageCompletion,
    test_images: Tensor,
    test_mask: Tensor,
    trace: dict[str, Any],
    history: list[float],
) -> None:
    plt = _pyplot()
    cmap = "gray" if model.channels == 1 else None
    height, width = model.image_size
    count = min(8, test_images.size(0))
    images, mask = test_images[:count], test_mask[:count]
    rows = {
        "masked": _masked_view(model, images, mask),
        "ET": model.complete(images, mask),
        "nearest open": model.unpatchify(
            nearest_open_baseline(images, mask, model.patch_size, model.grid_size)
        ),
        "original": images,
    }
    tiles = torch.cat([batch.float().clamp(0, 1) for batch in rows.values()])
    picture = _mosaic(tiles, columns=count, pad=max(1, height // 8))
    fig, ax = plt.subplots(figsize=(1.0 * count + 1.2, 1.0 * len(rows) + 0.5))
    ax.imshow(_as_display(picture), cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    step = picture.size(1) / len(rows)
    ax.set_yticks([step * (i + 0.5) for i in range(len(rows))], list(rows))
    ax.set_xticks([])
    ax.set_title("Held-out images (grey = masked patch)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "completion_grid.png", dpi=80)
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
    fig.savefig(out / "energy.png", dpi=80)
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
    axes[0].legend(fontsize=8)
    fig.suptitle("Size of each energy term's share of the token update", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "update_norms.png", dpi=80)
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
    fig.savefig(out / "memories.png", dpi=80)
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
    fig.savefig(out / "position_similarity.png", dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.plot(range(1, len(history) + 1), history, marker=".")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training MSE (masked patches)")
    fig.tight_layout()
    fig.savefig(out / "training_loss.png", dpi=80)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
