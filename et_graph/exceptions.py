"""The warning categories et-graph issues, one class per kind of concern.

Every warning the library issues is an :class:`ETGraphWarning`, a ``UserWarning`` as
scikit-learn's are, so one filter reaches them all, and each kind can be filtered alone::

    import warnings
    from et_graph.exceptions import DataWarning, ETGraphWarning

    warnings.simplefilter("error", DataWarning)       # a service: refuse data read oddly
    warnings.simplefilter("ignore", ETGraphWarning)   # a notebook: hear nothing from et-graph

The kinds that flag dubious behaviour at run time (a fit, a file, a figure on few nodes, a
skipped or unsafe step) are ``RuntimeWarning`` too, as their warnings were before these
classes existed; the renamed-API warning is a ``FutureWarning``. The ``et-graph`` command
prints a warning as ``et-graph TASK: CATEGORY: message``. From the shell, ``python -W
error::et_graph.exceptions.DataWarning`` works only where the package is importable before
site-packages load (``PYTHONPATH``): Python resolves ``-W`` categories then.

This module imports nothing but the standard library, so that ``-W`` can name its classes
without loading torch.
"""
from __future__ import annotations

__all__ = [
    "ConfigWarning",
    "DataWarning",
    "ETGraphDeprecationWarning",
    "ETGraphWarning",
    "FitWarning",
    "OutputWarning",
    "ReproducibilityWarning",
    "SkippedBaselineWarning",
    "SmallSampleWarning",
    "UnsafeLoadWarning",
]


class ETGraphWarning(UserWarning):
    """The base of every warning et-graph issues."""


class DataWarning(ETGraphWarning):
    """The input data is read otherwise than it may be meant: an entry dropped or not read,
    values rounded or reinterpreted (labels binarised, weights read as 1), the graph changed
    on reading (self-loops removed), or data too uniform to rank anything."""


class ConfigWarning(ETGraphWarning):
    """A setting, flag or use of the API changes nothing, is overridden, or does not do what
    its name suggests (a flag no model of the run reads, an environment variable that wins
    over a flag, a subclass method the descent never calls)."""


class ReproducibilityWarning(ETGraphWarning):
    """A rerun, resume or load may not repeat the recorded figures: another commit, library
    version, thread count or kernel switch, or random states that cannot be restored."""


class FitWarning(ETGraphWarning, RuntimeWarning):
    """A fit or its scores went somewhere dubious: an epoch without an optimiser step,
    constant scores that rank nothing, weights left untrained, trials that keep failing,
    ties at a threshold."""


class OutputWarning(ETGraphWarning, RuntimeWarning):
    """Files of a run: an output folder that holds an earlier run's results, a folder that
    cannot be locked, a checkpoint replaced or left where an older version wrote it."""


class SmallSampleWarning(ETGraphWarning, RuntimeWarning):
    """A reported figure or interval rests on so few scored nodes that it says little."""


class SkippedBaselineWarning(ETGraphWarning, RuntimeWarning):
    """A baseline was left out of a run (an optional dependency is missing, say); the run
    records why and goes on."""


class UnsafeLoadWarning(ETGraphWarning, RuntimeWarning):
    """A file is unpickled without restriction (the installed torch cannot restrict it):
    load only files you trust."""


class ETGraphDeprecationWarning(ETGraphWarning, FutureWarning):
    """A name of the API is renamed or going away; the message names its replacement."""
