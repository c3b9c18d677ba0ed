"""Forest plots of differences: each a point at its mean and a bar over its confidence interval."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..protocols.significance import Difference, holm


def plot_differences(panels: Mapping[str, Sequence[tuple[str, Difference]]], path: Path,
                     title: str = "") -> Path:
    """One panel per entry of ``panels`` (its name: the panel's unit), one row per
    ``(label, difference)``, drawn so that **right is better for the difference's first model**
    (an error metric's difference is mirrored). A row is filled when it stays significant
    after Holm's adjustment over its panel, half filled when only its own interval excludes 0
    (many such intervals hold some by chance), hollow otherwise; the zero line is drawn."""
    from .figures import own_figures

    plt = own_figures()

    panels = {name: list(rows) for name, rows in panels.items() if rows}
    if not panels:
        raise ValueError("nothing to plot: every panel is empty")
    heights = [len(rows) for rows in panels.values()]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.5, 0.32 * sum(heights) + 1.1 * len(panels)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (unit, rows) in zip(axes[:, 0], panels.items()):
        adjusted = holm([d.p_value for _, d in rows])
        unbounded = []
        for y, ((_, d), p_family) in enumerate(zip(reversed(rows), reversed(adjusted))):
            sign = 1.0 if d.higher_is_better else -1.0
            if not math.isfinite(d.mean):  # (a blank row said nothing: a plots audit)
                ax.text(0.0, y, "  no value", va="center", fontsize=7, color="0.3")
                continue
            low, high = sorted((sign * d.low, sign * d.high))
            colour = "#3182bd" if sign * d.mean > 0 else "#e6550d"
            if math.isfinite(low) and math.isfinite(high):
                ax.plot([low, high], [y, y], color=colour, lw=2)
            else:  # one run: no bar looked like no uncertainty (a plots audit)
                unbounded.append((y, colour))
            family = d.significant and p_family < 1 - d.confidence
            ax.plot(sign * d.mean, y, "o", color=colour, ms=7, markerfacecolor=colour,
                    markerfacecoloralt="white", markeredgecolor=colour,
                    fillstyle="full" if family else "left" if d.significant else "none")
        ax.axvline(0.0, color="0.3", lw=0.8)
        for y, colour in unbounded:
            left, right = ax.get_xlim()
            ax.plot([left, right], [y, y], ls=":", color=colour, lw=1.5)
            ax.text(right, y, " interval unbounded", va="center", fontsize=7, color=colour)
        ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)], fontsize=8)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(unit, fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
    # (two lines: in one the default title was cut at both ends: a plots audit)
    fig.suptitle(title or "difference with its 95% interval (right: the first model better)\n"
                 "filled: significant after Holm over the panel; half: the interval alone "
                 "excludes 0", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
