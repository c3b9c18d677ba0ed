"""Detectors of your own under a model name, run beside the built-in ones.

A registered name joins ``--models`` (``et-graph anomaly`` and ``et-graph tune anomaly``, or
``protocol.models`` in Python): the detector is fitted on the same splits and seeds, its
threshold chosen on validation, and it is a baseline row of the tables, plots, scores and ET's
differences like MLP or GBT. With a search space, the tuner gives it the same budget.

.. code-block:: python

    from et_graph.detectors import register_detector
    register_detector("sage", make_sage, search_space=sage_space)

``factory(config, seed, progress)`` returns a new, unfitted, supervised
:class:`~et_graph.detectors.base.BaseDetector` for one seed of the run whose
:class:`~et_graph.protocols.anomaly_config.AnomalyConfig` is ``config`` (its device is
``config.run.device``). ``search_space(trial)`` returns overrides of that config's sections
(``{"baselines": {"baseline_hidden": ...}}``), which the factory reads.

A module that registers detectors when imported is a plugin: ``--plugin MODULE`` (a module
name or a ``.py`` file; repeatable, or a comma list) and the environment variable
``ET_GRAPH_PLUGINS`` (a comma list) import it before ``--models`` is read. Every results file
records the plugins loaded and the detectors registered (``meta.plugins``). The plugin loader and
the name checks are the ones every task shares (:mod:`et_graph.plugins`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..plugins import (
    NAME_PATTERN,
    PLUGINS_ENV,
    ModelRegistry,
    PluginError,
    Registration,
    SearchSpace,
    load_plugins,
    plugin_flags,
    plugin_record,
)
from ..plugins import add_plugin_argument as _add_plugin_argument
from ..protocols.anomaly import ENERGY_ROW
from .base import BaseDetector

if TYPE_CHECKING:
    import argparse

    from ..protocols.anomaly_config import AnomalyConfig

#: ``factory(config, seed, progress) -> BaseDetector``: one unfitted detector per seed.
DetectorFactory = Callable[["AnomalyConfig", int, bool], BaseDetector]


class RegisteredDetector(Registration):
    """A registered detector: its name, factory and optional search space."""

    def build(self, config: AnomalyConfig, seed: int, progress: bool = False) -> BaseDetector:
        """The factory's detector for ``seed``, checked to be one the runner can fit."""
        return checked_detector(self.factory(config, seed, progress),
                                f"registered detector {self.name!r}")


def builtin_names() -> tuple[str, ...]:
    """The built-in model names (:data:`et_graph.detectors.DETECTORS`)."""
    from . import DETECTORS  # (this module is imported by the package itself)

    return tuple(DETECTORS)


#: The names of the results files' own entries beside the rows: a detector so named wrote
#: its scores over the labels in scores.npz (``labels__seed0``) or its metrics over a seed's
#: number in results.json (an output audit); ``ROW__seed{s}`` is scores.npz's key scheme.
RESULTS_FIELDS = ("seed", "split_sizes", "nodes", "labels", "run_id")

#: The registered detectors (the rows a run derives are refused as names: the energy row and
#: each model's seed ensemble; so are the tuner's names of another model's study: MODEL's
#: --tune-class-balance study is MODEL-class-balance; and the results files' own entries).
DETECTOR_REGISTRY: ModelRegistry[RegisteredDetector] = ModelRegistry(
    "detector", "detectors", RegisteredDetector, ("config", "seed", "progress"), builtin_names,
    derived={repr(ENERGY_ROW): ENERGY_ROW, "*_ensemble": r".*_ensemble",
             "*-class-balance": r".*-class-balance",
             ", ".join(RESULTS_FIELDS): "|".join(RESULTS_FIELDS), "*__seed*": r".*__seed.*"})


def reserved_name(name: str) -> bool:
    """Whether ``name`` (in any case) is taken by a built-in model, a registered one, or one of
    the rows a run derives (the energy row, ``*_ensemble``): the figures colour by the
    lower-cased name, so ``ET`` would be drawn as ET."""
    return DETECTOR_REGISTRY.reserved(name)


def register_detector(name: str, factory: DetectorFactory, *,
                      search_space: Optional[SearchSpace] = None,
                      replace: bool = False) -> RegisteredDetector:
    """Make ``name`` a model of ``et-graph anomaly`` and its tuner (see the module docstring).

    Args:
        name: lower-case letters, digits, ``_``, ``.``, ``-``; not a built-in model's name nor
            one a run derives (``et_energy_trained``, ``*_ensemble``).
        factory: ``factory(config, seed, progress)`` -> a new, unfitted, supervised detector.
        search_space: ``space(trial)`` -> overrides of the run config's sections for one
            Optuna trial; without it, tuning ``name`` is refused.
        replace: replace a detector registered under ``name`` (never a built-in).

    Returns the registration. Raises ``ValueError`` for a name that is invalid or taken,
    ``TypeError`` for a factory or space that is not callable with those arguments.
    """
    return DETECTOR_REGISTRY.register(name, factory, search_space=search_space,
                                      replace=replace)


def unregister_detector(name: str) -> None:
    """Remove the detector registered under ``name`` (``KeyError`` if there is none)."""
    DETECTOR_REGISTRY.unregister(name)


def registered_detectors() -> Mapping[str, RegisteredDetector]:
    """The registered detectors by name, in registration order (a read-only view)."""
    return DETECTOR_REGISTRY.entries()


def checked_detector(detector: Any, origin: str) -> BaseDetector:
    """``detector`` if the runner can fit it: a :class:`BaseDetector`, supervised, unfitted;
    else an error naming ``origin`` (what built it)."""
    from .unsupervised import UnsupervisedETDetector

    if not isinstance(detector, BaseDetector):
        raise PluginError(f"{origin} returned {type(detector).__name__}, not a detector "
                        "(et_graph.detectors.base.BaseDetector)")
    if isinstance(detector, UnsupervisedETDetector):  # it refuses the split's masks in fit
        raise PluginError(f"{origin} returned an unsupervised detector: this runner fits on "
                        "training labels; compare unsupervised detectors with et-graph "
                        "unsupervised")
    fit = type(detector).fit
    if fit is not BaseDetector.fit and not _takes_the_split(fit):
        # a PyGOD-style fit(data) passed registration and failed inside the run on "takes
        # from 2 to 3 positional arguments but 4 were given" (an audit)
        raise PluginError(f"{origin} returned a {type(detector).__name__}, whose fit cannot "
                          "take the runner's call fit(data, train_mask, val_mask): this runner "
                          "fits on the split's training labels (a detector of your own "
                          "implements _fit(data, y, train, val) and _score(data), which "
                          "BaseDetector.fit and decision_function call); et-graph unsupervised "
                          "runs only its built-in detectors")
    if detector.fitted_:  # the caller's object would be refitted on this run's split
        raise ValueError(f"{origin} returned a fitted detector: return a new, unfitted one "
                         "per seed")
    return detector


def _takes_the_split(fit: Any) -> bool:
    """Whether ``fit`` (unbound) accepts ``(self, data, train_mask, val_mask)``."""
    import inspect

    try:
        inspect.signature(fit).bind(None, None, None, None)
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): let the call decide
        return True
    return True


def add_plugin_argument(parser: argparse.ArgumentParser) -> None:
    """``--plugin MODULE`` (repeatable) on a command that runs the anomaly detectors."""
    _add_plugin_argument(parser, "et_graph.detectors.register_detector")


__all__ = [
    "DETECTOR_REGISTRY",
    "NAME_PATTERN",
    "PLUGINS_ENV",
    "DetectorFactory",
    "RegisteredDetector",
    "SearchSpace",
    "add_plugin_argument",
    "builtin_names",
    "checked_detector",
    "load_plugins",
    "plugin_flags",
    "plugin_record",
    "register_detector",
    "registered_detectors",
    "reserved_name",
    "unregister_detector",
]
