"""``et-graph image``: masked image completion with the dense Energy Transformer.

Trains :class:`ETImageCompletion` on scikit-learn's digits (default) or on a folder of images,
selects the epoch on a validation part of the training images, scores it on held-out images
against two same-run baselines (mean patch, nearest open patch), and writes ``results.json``,
``results.md`` and PNG figures to ``--out``.
"""
from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any, Optional, cast

import torch
from torch import Tensor

from ..config import check_results_kept, parse_given, run_metadata, to_dict, warn_unread_flags
from ..datasets.images import load_digits_images, load_image_folder, split_images
from ..exceptions import ConfigWarning
from ..nn.models.image_completion import ETImageCompletion
from ..protocols.image_completion import (
    ENERGY_TOLERANCE,
    energy_is_monotone,
    evaluate_image_completion,
    trace_dynamics,
    train_image_completion,
    validation_split,
)
from ..protocols.image_config import (  # noqa: F401  (the task's config, re-exported)
    COLORS,
    ImageCompletionConfig,
    ImageDataConfig,
    ImageModelConfig,
    ImageProtocolConfig,
)
from ..protocols.significance import (
    compare_to,
    describe_design,
    difference_sections,
    results_entries,
)
from ..reporting import (
    checks_output_folder,
    markdown_table,
    provenance_note,
    summarize,
    write_plot_data,
    write_results,
)
from ..reporting_images import FIGURES, write_figures
from ..training import dataclass_defaults

BASELINES = ("mean_patch", "mean_patch_global", "nearest_open")


CONFIG = ImageCompletionConfig


def load_images(config: ImageDataConfig) -> Tensor:
    """The images ``config`` names, ``[N, C, H, W]``: scikit-learn's 8x8 digits, or a folder of
    images resized to ``image_size`` (by ``image_width``) with ``color``'s channels."""
    if config.data == "digits":
        default = ImageDataConfig()
        ignored = [f"{name}={getattr(config, name)}"
                   for name in ("image_size", "image_width", "color")
                   if getattr(config, name) != getattr(default, name)]
        if ignored:  # the results recorded them as if they had shaped the images
            warnings.warn(f"{', '.join(ignored)}: the digits are 8x8 grayscale as they ship; "
                          "image_size, image_width and color apply to a folder of images",
                          ConfigWarning, stacklevel=2)
        return load_digits_images()
    return load_image_folder(config.data, size=config.size, color=config.color)


def build_model(config: ImageModelConfig, images: Tensor) -> ETImageCompletion:
    """A new :class:`ETImageCompletion` for ``images``' size and channels, with ``config``'s
    settings."""
    return ETImageCompletion(
        image_size=cast("tuple[int, int]", tuple(images.shape[2:])),  # (images: [B, C, H, W])
        patch_size=config.patch_size,
        channels=images.size(1), dim=config.dim, heads=config.heads, head_dim=config.head_dim,
        hopfield_dim=config.hopfield_dim, steps=config.steps, alpha=config.alpha,
        hopfield=config.hopfield, mask_ratio=config.mask_ratio, noise_std=config.noise_std,
    )


@checks_output_folder()
def run(config: ImageCompletionConfig) -> dict[str, Any]:
    """Train ET to complete masked patches on each seed's training images and score the held-out
    ones against the mean-patch and nearest-open-patch baselines; returns the results and,
    with ``config.run.out``, writes ``results.{json,md}`` and the completion figures."""
    if config.data.data != "digits":
        # The folder is read recursively: a second run read the first one's figures as
        # training and test images, without a word (an audit).
        folder = Path(config.data.data).resolve()
        for name in ("out", "checkpoint_dir"):
            written = getattr(config.run, name)
            if written and folder in (Path(written).resolve(), *Path(written).resolve().parents):
                raise ValueError(f"run.{name} {written!r} lies inside the image folder "
                                 f"{config.data.data!r}, which is read recursively: the next "
                                 "run would read this run's files as images; write elsewhere")
    config.run.apply_threads()
    progress = config.run.progress
    images = load_images(config.data)
    per_seed: list[dict[str, Any]] = []
    shown: Optional[dict[str, Any]] = None
    for seed in config.seed_list:
        train_images, test_images = split_images(images, config.protocol.test_fraction, seed)
        # Whether a limit cut a split (a limit above its size cuts nothing, and the protocol
        # said it did).
        limited = [limit is not None and limit < part.size(0) for part, limit in (
            (train_images, config.data.train_limit), (test_images, config.data.test_limit))]
        train_images = train_images[: config.data.train_limit]
        test_images = test_images[: config.data.test_limit]
        torch.manual_seed(seed)
        model = build_model(config.model, images).to(config.run.device)
        start = time.perf_counter()
        fit = train_image_completion(
            model, train_images, config.train, val_fraction=config.protocol.val_fraction,
            seed=seed, progress=progress, checkpoint=config.run.checkpoint(
                Path(config.data.data).name or config.data.data, f"seed{seed}"),
            fingerprint=_fingerprint(config, seed),
            setting_defaults=dataclass_defaults(config.data, config.model, config.protocol,
                                                config.train),
        )
        seconds = time.perf_counter() - start
        # One fixed mask per held-out image, shared by the model and the baselines.
        test_mask = model.random_mask(
            test_images.size(0), generator=torch.Generator().manual_seed(10_000 + seed)
        ).cpu()
        # scored where it trained (the scoring ran on the CPU after a GPU training: an audit);
        # the figures read the first seed's model on the CPU
        mse = evaluate_image_completion(model, train_images, test_images, test_mask)
        trace = trace_dynamics(model, test_images, test_mask)
        model.cpu()
        monotone = energy_is_monotone(trace["energies"])
        num_val = validation_split(train_images, config.protocol.val_fraction)[1].size(0)
        per_seed.append({
            "seed": seed, "mse": mse, "energy_monotone": monotone, "train_seconds": seconds,
            # (a resumed training's seconds are this process's part: about 0 for a finished
            # one, which read as "0s training" without a word: an audit)
            "resumed_from_epoch": fit.resumed_from_epoch,
            "best_epoch": fit.best_epoch, "val_mse": fit.best.loss, "epochs_run": fit.epochs_run,
            "final_train_loss": fit.history[-1]["train_loss"],
            "num_train": int(train_images.size(0)) - num_val, "num_val": num_val,
            "num_test": int(test_images.size(0)), "limited": limited,
            "masked_patches": int(test_mask[0].sum()), "num_patches": int(test_mask.size(1)),
        })
        if progress:
            line = ", ".join(f"{k}={v:.4f}" for k, v in mse.items())
            print(f"seed {seed}: {line}; best epoch {fit.best_epoch + 1}/{fit.epochs_run}; "
                  f"energy monotone: {monotone}; {seconds:.0f}s training"
                  + (f" (resumed at epoch {fit.resumed_from_epoch + 1})"
                     if fit.resumed_from_epoch is not None else ""))
        if shown is None:
            shown = {"model": model, "test_images": test_images, "test_mask": test_mask,
                     "trace": trace, "history": fit.history, "best_epoch": fit.best_epoch,
                     "train_images": train_images}

    results = _collect(config, per_seed, images)
    assert shown is not None
    trace = shown["trace"]
    results["dynamics_first_seed"] = {
        "mean_energy_per_step": trace["energies"].mean(0).tolist(),
        "update_norms_per_step": {key: value.tolist() for key, value in trace["norms"].items()},
    }
    if config.run.out is None:  # nothing written, the table still printed
        print(f"# Masked image completion\n\n{markdown_table(results['models'], ['mse'])}")
        return results
    out = Path(config.run.out)
    out.mkdir(parents=True, exist_ok=True)
    write_figures(out, **shown)
    write_plot_data(out / "training_loss.json", {
        "seed": results["seeds"][0] if results.get("seeds") else None,
        # the engine's per-epoch rows of the first seed (val_score: minus the masked MSE;
        # NaN, here null, at epochs without a validation pass) and the kept epoch, from 0
        "best_epoch": shown["best_epoch"], "history": shown["history"]},
        results["meta"].get("run_id"))
    notes = [
        "MSE over the pixels of the masked held-out patches (pixel values in [0, 1]; lower is "
        "better).",
        "mean_patch: training mean patch at each grid position; mean_patch_global: one mean "
        "patch for all positions; nearest_open: copy of the nearest open patch on the grid.",
        f"ET: the epoch with the lowest masked MSE on {config.protocol.val_fraction:.0%} of the "
        "training images (one fixed mask) is kept; the baselines use all training images.",
        f"energy non-increasing on every held-out image over the {config.model.steps} steps, in "
        f"every seed: {results['energy_monotone']} (tolerance {ENERGY_TOLERANCE:g} relative: a "
        f"step may raise the energy by at most {ENERGY_TOLERANCE:g} * max(1, |E|)).",
        "Figures (first seed): " + ", ".join(FIGURES) + ".",
        provenance_note(results["meta"]),
    ]
    write_results(out, results, metrics=["mse"], title="Masked image completion", notes=notes,
                  sections=difference_sections(results))
    print((out / "results.md").read_text(encoding="utf-8"))  # with or without progress bars
    return results


def _fingerprint(config: ImageCompletionConfig, seed: int) -> str:
    """What a seed's checkpoint must have been trained with to be resumed."""
    data = to_dict(config.data)
    if data["image_width"] in (None, data["image_size"]):  # square: as checkpoints written
        del data["image_width"]  # before the field read
    return json.dumps([data, to_dict(config.model), to_dict(config.protocol),
                       to_dict(config.train), seed])


def _collect(config: ImageCompletionConfig, per_seed: list[dict], images: Tensor
             ) -> dict[str, Any]:
    names = ("et", *BASELINES)
    summaries = {name: summarize(r["mse"][name] for r in per_seed) for name in names}
    test, val = config.protocol.test_fraction, config.protocol.val_fraction
    # The count the model masks (at least 1, at most all but 1 of the patches), which a ratio
    # near 0 or 1 does not give: 0.01 of 16 patches is 1 patch (6%), and was reported as 1%.
    masked, patches = per_seed[0]["masked_patches"], per_seed[0]["num_patches"]
    ratio = config.model.mask_ratio
    masking = (f"{masked} of {patches} patches masked ({masked / patches:.0%}; --mask-ratio "
               f"{ratio:g} rounds to it)" if abs(masked / patches - ratio) > 0.005 else
               f"{ratio:.0%} of patches masked")
    # --train-limit/--test-limit (and --quick) cut the split: said in the protocol, not only
    # in the per-seed counts.
    first = per_seed[0]
    used = (first["num_train"] + first["num_val"], first["num_test"])
    limits = (f"; this run limits the images to {used[0]} training and {used[1]} test"
              if any(any(r["limited"]) for r in per_seed) else "")
    return {
        "dataset": "sklearn digits" if config.data.data == "digits" else config.data.data,
        "protocol": (
            f"seeded random {1 - test:.0%}/{test:.0%} train/test split per seed; ET trains on "
            f"{1 - val:.0%} of the training images and keeps the epoch with the lowest masked MSE "
            f"on the other {val:.0%} (one fixed mask); {masking} at random (fresh masks per "
            "training batch, one fixed mask per held-out "
            f"image); mean ± std over seeds {config.seed_list}" + limits
        ),
        # said, so that et-graph compare reads the error the right way round (it read higher
        # MSE as better and called every verdict backwards)
        "metric": "mse", "lower_is_better": True,
        "mse": {name: summaries[name]["mean"] for name in names},
        "mse_std": {name: summaries[name]["std"] for name in names},
        "energy_monotone": all(r["energy_monotone"] for r in per_seed),
        "models": {name: {"mse": summaries[name]} for name in names},
        "seeds": config.seed_list,
        "per_seed": per_seed,
        "meta": run_metadata(config, (images,)),
        # Each seed draws its own split, which every model shares: ET minus each baseline is
        # paired over the seeds, corrected for their overlapping training sets (et-graph
        # compare took the seeds as repeats on one test set, the wrong test: an audit).
        "split_per_seed": True,
        **_differences({name: {"mse": summaries[name]} for name in names},
                       len(config.seed_list), test / (1 - test)),
    }


def _differences(models: dict[str, Any], seeds: int, ratio: float) -> dict[str, Any]:
    """ET minus each baseline over the seeds' own splits (the corrected resampled t-test, MSE:
    lower is better), as ``results.json`` keeps them; nothing with fewer than two seeds."""
    differences = compare_to(models, "et", ["mse"], "folds", test_train_ratio=ratio,
                             higher_is_better=False)
    return results_entries(differences, describe_design(
        "folds", seeds, ratio, paired_over="seeds' own train/test splits (held-out images)"))


def main(argv: Optional[list[str]] = None, prog: str = "et-graph image",
         defaults: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``et-graph image``; an example script passes its own ``prog`` and ``defaults``."""
    config, given = parse_given(CONFIG, argv, prog=prog, description=__doc__, defaults=defaults)
    # The dense ET calls no compiled kernel: --native-attention built them for nothing.
    warn_unread_flags(given, ["et (dense)"], {"run.native_attention": ()})
    check_results_kept(config)
    return run(config)
