"""Figures of graph classification: test accuracy per fold."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Optional


def plot_fold_accuracies(results: dict[str, Any], path: Path,
                         majority: Optional[float] = None) -> Path:
    """Test accuracy of every fold (dots, equal ones side by side) and the mean ± std (bar)
    per model; ``majority``: the share of the dataset's largest class, drawn as the accuracy
    of always guessing it (on MUTAG GIN's 68.4% stood beside a 66.5% guess, unmarked: a plots
    audit)."""
    from ..protocols.tudataset_config import MODEL_NAMES
    from .colours import model_colour
    from .figures import own_figures

    plt = own_figures()

    names = list(results["models"])
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.2))
    for i, name in enumerate(names):
        stats = results["models"][name]["accuracy"]
        colour = model_colour(name, tuple(names), MODEL_NAMES)
        ax.bar(i, stats["mean"], yerr=stats["std"], color=colour, alpha=0.35,
               edgecolor=colour, capsize=4)
        # equal fold figures side by side: one dot hid the other (a plots audit)
        values = stats["values"]
        seen: Counter = Counter()
        counts = Counter(values)
        offsets = []
        for value in values:
            offsets.append(0.07 * (seen[value] - (counts[value] - 1) / 2))
            seen[value] += 1
        ax.plot([i + o for o in offsets], values, "o", color=colour, ms=3)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("test accuracy (dots: folds;\nbar: mean, whisker: population std)",
                  fontsize=8)
    ax.set_ylim(0, 1)
    if majority is not None:
        ax.axhline(majority, ls=":", color="black", lw=0.9,
                   label=f"always the largest class ({majority:.1%})")
        ax.legend(fontsize=7, loc="lower right")
    folds = len(results["folds"])
    ax.set_title(f"{results['dataset']}: {folds} test fold{'' if folds == 1 else 's'}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
