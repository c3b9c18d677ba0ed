"""Figures of a node anomaly run: ROC/PR curves, training curves, energy per ET step."""
from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path
from typing import Any, Optional

import numpy as np
from torch_geometric.data import Data

from ..paths import write_text_whole
from ..protocols.anomaly import ENERGY_ROW, Split, evaluate
from ..reporting import json_text
from .colours import model_colour

#: Rows in the order they are plotted.
MODEL_ORDER = ("et", "et_stacked", "et_energy_trained", "mlp", "gcn", "gat", "gbt")
#: The rows that hold their names' fixed colours: a registered detector named lof (or any
#: other colour's name) is drawn in a spare one.
BUILTIN_ROWS = MODEL_ORDER


def training_curve(history: list[dict[str, float]], best_epoch: Optional[int]
                   ) -> dict[str, Any]:
    """One training's entry of ``curves["history"]`` for :func:`plot_curves`: its training
    losses, its validation AUROCs (NaN at epochs that ran no validation pass, with
    ``train.validate_every > 1``) and the epoch it kept."""
    return {"loss": [row["train_loss"] for row in history],
            "val_auroc": [row.get("val_auroc", float("nan")) for row in history],
            "best_epoch": best_epoch}


def plot_curves(out: Path, curves: dict[str, Any], data: Data, split: Split,
                scored: str = "test") -> None:
    """ROC/PR curves of seed 0 on the ``scored`` nodes (``"test"``, or ``"validation"`` for a
    validation-only run, which reads no test label) and the training curves."""
    from .figures import own_figures

    plt = own_figures()

    y = data.y.cpu().numpy()
    nodes = split.scored(scored).numpy()
    # Single-seed rows are seed 0's; a NAME_ensemble row is the mean score over the seeds.
    plotted = plotted_models(curves["prob"])
    ensembles = any(name.endswith("_ensemble") for name in plotted)
    plot_roc_pr(out / "roc_pr.png", y[nodes],
                {name: curves["prob"][name][nodes] for name in plotted},
                f"{scored}; seed 0" + (", ensembles over the seeds" if ensembles else ""),
                BUILTIN_ROWS)

    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(11, 4))
    drawn = tuple(curves["history"])
    for name, histories in curves["history"].items():
        for i, hist in enumerate(histories):
            # one colour per model, one line per seed (the legend counts them)
            label = f"{name} ({len(histories)} seed{'s' if len(histories) > 1 else ''})" \
                if i == 0 else None
            # every model at full strength: faded baselines read as less important ones
            colour = model_colour(name, drawn, BUILTIN_ROWS)
            # Epochs drawn from 1, as in the other figures (the stored best_epoch counts
            # from 0). One epoch: a dot, where a line of one point drew nothing.
            ax_loss.plot(range(1, len(hist["loss"]) + 1), hist["loss"], color=colour,
                         label=label,
                         marker="o" if len(hist["loss"]) == 1 else None)
            # only the validated epochs (with train.validate_every > 1 the others are NaN,
            # and a line through NaN gaps draws nothing)
            validated = [(e, v) for e, v in enumerate(hist["val_auroc"], start=1)
                         if not math.isnan(v)]
            ax_val.plot(*zip(*validated) if validated else ([], []), color=colour,
                        label=label)
            kept = hist.get("best_epoch")
            if kept is not None and 0 <= kept < len(hist["val_auroc"]):
                # The epoch the checkpoint kept, which the selection metric chose (it may not
                # be the best AUROC drawn here).
                ax_val.plot([kept + 1], [hist["val_auroc"][kept]], "*", color=colour,
                            markersize=11, markeredgecolor="black")
    if any(h.get("best_epoch") is not None for hs in curves["history"].values() for h in hs):
        # one neutral legend entry: it took the first model's colour
        ax_val.plot([], [], "*", color="white", markeredgecolor="black", markersize=11,
                    label="kept epoch")
    # The training loss is class-weighted BCE, unweighted under class-balanced sampling or
    # class_balance none; under data-parallel training it is rank 0's share.
    ax_loss.set(xlabel="epoch", ylabel="training loss\n(BCE, class-weighted by default)",
                title="Training loss (a line per seed)")
    losses = [value for histories in curves["history"].values() for hist in histories
              for value in hist["loss"] if math.isfinite(value)]
    if losses and min(losses) > 0 and max(losses) > 100 * min(losses):
        # one exploding loss flattened every other line (a plots audit)
        ax_loss.set_yscale("log")
    select = curves.get("select_metric")
    # two lines: on one, the right panel's title was cut at "kept on validation f1_ma"
    ax_val.set(xlabel="epoch", ylabel="validation AUROC",
               title="Validation AUROC (a line per seed)" + (
                   f"\n★ kept on validation {select}" if select else ""))
    if not curves["history"]:
        for ax in (ax_loss, ax_val):  # trees only: no epochs to draw, said rather than blank
            ax.text(0.5, 0.5, "no neural model in this run", ha="center", va="center",
                    transform=ax.transAxes)
    untrained = [name for name in plotted if name not in curves["history"]
                 and not name.endswith("_ensemble") and name != ENERGY_ROW]
    if curves["history"] and untrained:  # GBT was left out without a word
        fig.text(0.5, 0.01, f"not drawn (no epochs): {', '.join(untrained)}", ha="center",
                 fontsize=8)
    for ax in (ax_loss, ax_val):
        ax.xaxis.get_major_locator().set_params(integer=True)  # no epoch 2.5
    for ax in (ax_loss, ax_val):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "training_curves.png", dpi=120)
    plt.close(fig)

    energy = curves.get("energy")
    if energy:
        trained = int(energy["trained_steps"][0])
        fig, (ax_all, ax_cls) = plt.subplots(1, 2, figsize=(11, 4))
        steps = np.arange(len(energy["all"]))
        ax_all.plot(steps, energy["all"], "o-")
        ax_all.axvline(trained, ls=":", color="grey", label=f"trained T = {trained}")
        ax_all.set(xlabel="ET step", ylabel="mean node energy",
                   title="Energy vs ET step (seed 0, all nodes)")
        ax_all.legend(fontsize=8)
        ax_cls.plot(steps, energy["normal"], "o-", label="normal (validation)")
        ax_cls.plot(steps, energy["anomalous"], "s-", label="anomalous (validation)")
        ax_cls.axvline(trained, ls=":", color="grey")
        ax_cls.set(xlabel="ET step", ylabel="mean node energy",
                   title="By class (validation nodes only)")
        ax_cls.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "energy_steps.png", dpi=120)
        plt.close(fig)
        write_text_whole(out / "energy_steps.json", json_text(energy))


def plot_roc_pr(path: Path, y: np.ndarray, scores: dict[str, np.ndarray], scope: str,
                builtin: Optional[Collection[str]] = None) -> None:
    """ROC and precision-recall curves of each score against binary ``y`` (same nodes), one
    line per score in the given order, its AUROC / AUPRC in the legend; ``scope`` says which
    nodes and seeds (the titles). ET rows solid, baselines dashed, a baseline at its defaults
    (``NAME_defaults``) dash-dotted, ensembles dotted. Only the
    ``builtin`` rows (all, when ``None``) may hold their names' fixed colours."""
    from .figures import own_figures

    plt = own_figures()
    from sklearn.metrics import precision_recall_curve, roc_curve

    names = tuple(scores)
    # the legends sit beside the panels, not over the curves, with many rows or a long name
    many = len(names) > 5 or max((len(name) for name in names), default=0) > 30
    fig, (ax_roc, ax_pr) = plt.subplots(1, 2, figsize=(14 if many else 11, 4.5))
    highest = 0.0
    for name, score in scores.items():
        metrics = evaluate(y, score, 0.5)  # AUROC and AUPRC do not read the threshold
        fpr, tpr, _ = roc_curve(y, score)
        precision, recall, _ = precision_recall_curve(y, score)
        # scikit-learn ends the curve at (recall 0, precision 1), which is no node: every
        # curve spiked to 1 and squashed curves of AUPRC 0.04 into the panel's bottom tenth
        # (a plots audit). The last step keeps the top-ranked nodes' precision down to recall
        # 0 instead, which leaves the drawn area the AUPRC.
        if precision.size > 1:
            precision = precision.copy()
            precision[-1] = precision[-2]
        highest = max(highest, float(precision.max()))
        style = (":" if name.endswith("_ensemble") else "-." if name.endswith("_defaults")
                 else "-" if name.startswith("et") else "--")
        colour = model_colour(name, names, builtin)
        ax_roc.plot(fpr, tpr, style, color=colour, label=f"{name} (AUROC {metrics['auroc']:.3f})")
        # Steps, as average precision sums them: a straight line between the points would
        # enclose another area than the legend's AUPRC.
        ax_pr.plot(recall, precision, style, color=colour, drawstyle="steps-post",
                   label=f"{name} (AUPRC {metrics['auprc']:.3f})")
    # chance in thin black, named: in grey it matched the degree row's colour (a plots audit)
    ax_roc.plot([0, 1], [0, 1], ":", color="black", lw=0.8, label="chance")
    ax_roc.set(xlabel="false positive rate", ylabel="true positive rate", title=f"ROC ({scope})")
    ax_pr.axhline(y.mean(), ls=":", color="black", lw=0.8, label="chance")
    ax_pr.set_ylim(0, min(1.02, max(highest, float(y.mean())) * 1.05 + 0.01))
    ax_pr.set(xlabel="recall", ylabel="precision", title=f"Precision-recall ({scope})")
    for ax in (ax_roc, ax_pr):
        if ax.get_legend_handles_labels()[0]:
            if many:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            else:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plotted_models(scores: dict[str, Any]) -> list[str]:
    """The rows with scores, in :data:`MODEL_ORDER` first, each followed by its seed ensemble;
    rows outside that order (other model names) after them, so that no row is left out."""
    known = [n for base in MODEL_ORDER for n in (base, f"{base}_ensemble") if n in scores]
    return known + sorted(n for n in scores if n not in known)
