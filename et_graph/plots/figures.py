"""Figures that draw without pyplot's global state.

The plots call ``subplots`` and ``close`` as on pyplot, but on :class:`matplotlib.figure.Figure`
objects of their own, rendered by ``savefig``'s canvas: no backend is chosen or switched. (They
called ``matplotlib.use("Agg")``, which turned a notebook's inline backend off for good.)
"""
from __future__ import annotations

from typing import Any

#: ``plt.subplots``' own arguments; the rest go to the figure, as pyplot passes them.
_SUBPLOTS_ARGS = ("nrows", "ncols", "sharex", "sharey", "squeeze", "width_ratios",
                  "height_ratios", "subplot_kw", "gridspec_kw")


class OwnFigures:
    """The part of ``matplotlib.pyplot`` the plots use, without its global figure manager."""

    @staticmethod
    def subplots(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        from matplotlib.figure import Figure

        grid = {key: kwargs.pop(key) for key in _SUBPLOTS_ARGS if key in kwargs}
        figure = Figure(**kwargs)
        return figure, figure.subplots(*args, **grid)

    @staticmethod
    def close(figure: Any = None) -> None:
        """Nothing to release: the figure belongs to no pyplot manager."""


def own_figures() -> OwnFigures:
    """What the plots use in place of ``matplotlib.pyplot``."""
    return OwnFigures()

