"""Figures of graph classification: test accuracy per fold."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_fold_accuracies(results: dict[str, Any], path: Path) -> Path:
    """Test accuracy of every fold (dots) and the mean ± std (bar) per model."""
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
        ax.plot([i] * len(stats["values"]), stats["values"], "o", color=colour, ms=3)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("test accuracy (dots: folds;\nbar: mean, whisker: population std)",
                  fontsize=8)
    ax.set_ylim(0, 1)
    folds = len(results["folds"])
    ax.set_title(f"{results['dataset']}: {folds} test fold{'' if folds == 1 else 's'}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
