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
records the plugins loaded and the detectors registered (``meta.plugins``).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..protocols.anomaly import ENERGY_ROW
from .base import BaseDetector

if TYPE_CHECKING:
    from ..protocols.anomaly_config import AnomalyConfig

#: ``factory(config, seed, progress) -> BaseDetector``: one unfitted detector per seed.
DetectorFactory = Callable[["AnomalyConfig", int, bool], BaseDetector]
#: ``space(trial) -> {section: {field: value}}``: overrides of the run config per trial.
SearchSpace = Callable[[Any], Mapping[str, Any]]

#: The environment variable whose comma list of plugins the command line loads first.
PLUGINS_ENV = "ET_GRAPH_PLUGINS"

#: A name that can stand in a comma list such as ``--models et,NAME`` (the list is read
#: lower-cased) and in a table cell ("|" added a column to results.md).
NAME_PATTERN = r"[a-z0-9_][a-z0-9_.\-]*"


@dataclass(frozen=True)
class RegisteredDetector:
    """A registered detector: its name, factory and optional search space."""

    name: str
    factory: DetectorFactory
    search_space: Optional[SearchSpace] = None

    def build(self, config: AnomalyConfig, seed: int, progress: bool = False) -> BaseDetector:
        """The factory's detector for ``seed``, checked to be one the runner can fit."""
        return checked_detector(self.factory(config, seed, progress),
                                f"registered detector {self.name!r}")

    @property
    def module(self) -> str:
        """The module of its factory."""
        return getattr(self.factory, "__module__", None) or "?"

    @property
    def plugin(self) -> str:
        """What ``--plugin`` loads it by: the file or module name its plugin was loaded from,
        else (registered from Python) its factory's module."""
        for entry in _LOADED:
            if entry["module"] == self.module:
                return entry["path"] or self.module
        if self.module == "__main__":  # registered by a script: --plugin takes its file
            return _module_path("__main__") or self.module
        return self.module

    def record(self) -> dict[str, Optional[str]]:
        """Where its factory comes from, for a results file: ``module.qualname`` and the
        module's file."""
        name = getattr(self.factory, "__qualname__", type(self.factory).__qualname__)
        return {"factory": f"{self.module}.{name}", "path": _module_path(self.module)}


_REGISTERED: dict[str, RegisteredDetector] = {}
#: The plugins :func:`load_plugins` imported, in order: ``{"module", "path"}`` (the path of a
#: plugin given as a file, else ``None``).
_LOADED: list[dict[str, Optional[str]]] = []


def builtin_names() -> tuple[str, ...]:
    """The built-in model names (:data:`et_graph.detectors.DETECTORS`)."""
    from . import DETECTORS  # (this module is imported by the package itself)

    return tuple(DETECTORS)


def reserved_name(name: str) -> bool:
    """Whether ``name`` (in any case) is taken by a built-in model, a registered one, or one of
    the rows a run derives (the energy row, ``*_ensemble``): the figures colour by the
    lower-cased name, so ``ET`` would be drawn as ET."""
    key = name.lower()
    return (key in {*builtin_names(), *_REGISTERED, ENERGY_ROW}
            or key.endswith("_ensemble"))


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
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        raise ValueError(f"detector name {name!r}: use lower-case letters, digits, '_', '.', "
                         "'-' (it is written in comma lists such as --models et,NAME)")
    taken_by_registration = name in _REGISTERED and replace
    if reserved_name(name) and not taken_by_registration:
        owner = ("registered already (replace=True replaces it)" if name in _REGISTERED else
                 f"taken (built-in models {list(builtin_names())}, {ENERGY_ROW!r}, *_ensemble)")
        raise ValueError(f"detector name {name!r} is {owner}")
    _check_callable(factory, "factory", ("config", "seed", "progress"))
    if search_space is not None:
        _check_callable(search_space, "search_space", ("trial",))
    entry = RegisteredDetector(name, factory, search_space)
    _REGISTERED[name] = entry
    return entry


def unregister_detector(name: str) -> None:
    """Remove the detector registered under ``name`` (``KeyError`` if there is none)."""
    if name not in _REGISTERED:
        raise KeyError(f"no detector is registered under {name!r}; registered: "
                       f"{sorted(_REGISTERED)}")
    del _REGISTERED[name]


def registered_detectors() -> Mapping[str, RegisteredDetector]:
    """The registered detectors by name, in registration order (a read-only view)."""
    return MappingProxyType(_REGISTERED)


def _check_callable(function: Any, role: str, arguments: Sequence[str]) -> None:
    if not callable(function):
        raise TypeError(f"{role} must be callable, got {type(function).__name__}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # some built-in callables have none: found at first call
        return
    try:
        signature.bind(*arguments)
    except TypeError:
        raise TypeError(f"{role} must take ({', '.join(arguments)}); its signature is "
                        f"{signature}") from None


def checked_detector(detector: Any, origin: str) -> BaseDetector:
    """``detector`` if the runner can fit it: a :class:`BaseDetector`, supervised, unfitted;
    else an error naming ``origin`` (what built it)."""
    from .unsupervised import UnsupervisedETDetector

    if not isinstance(detector, BaseDetector):
        raise TypeError(f"{origin} returned {type(detector).__name__}, not a detector "
                        "(et_graph.detectors.base.BaseDetector)")
    if isinstance(detector, UnsupervisedETDetector):  # it refuses the split's masks in fit
        raise TypeError(f"{origin} returned an unsupervised detector: this runner fits on "
                        "training labels; compare unsupervised detectors with et-graph "
                        "unsupervised")
    if detector.fitted_:  # the caller's object would be refitted on this run's split
        raise ValueError(f"{origin} returned a fitted detector: return a new, unfitted one "
                         "per seed")
    return detector


# ----------------------------------------------------------------------------------------------
# Plugins: modules that register detectors when imported
# ----------------------------------------------------------------------------------------------
def add_plugin_argument(parser: argparse.ArgumentParser) -> None:
    """``--plugin MODULE`` (repeatable) on a command that runs the anomaly detectors."""
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="MODULE",
        help="import MODULE first, a module name or a .py file, so that the detectors it "
             "registers (et_graph.detectors.register_detector) can be named in --models; "
             f"repeatable, or a comma list; {PLUGINS_ENV} (a comma list) is loaded before it")


def plugin_flags(argv: Sequence[str]) -> list[str]:
    """The values of ``--plugin`` in ``argv`` (read before the rest, whose ``--models`` may
    name the detectors they register)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    add_plugin_argument(parser)
    try:
        return parser.parse_known_args(list(argv))[0].plugin
    except argparse.ArgumentError:  # a --plugin without its value: the command's parser says so
        return []


def load_plugins(specs: Iterable[str], environment: bool = False
                 ) -> list[dict[str, Optional[str]]]:
    """Import each plugin of ``specs`` (module names or ``.py`` paths; an item may be a comma
    list), with those of ``ET_GRAPH_PLUGINS`` first when ``environment``. A plugin already
    loaded is not imported again; a file is imported as a module named by its stem. Returns
    every plugin loaded so far: ``{"module", "path"}`` (``path``: of a file, else ``None``).

    A module that cannot be found raises ``ValueError``, a missing file
    ``FileNotFoundError``; an error inside the plugin's own code comes through as it is."""
    if environment:
        for spec in _items([os.environ.get(PLUGINS_ENV, "")]):
            if _is_file_spec(spec) and not Path(spec).expanduser().is_absolute():
                # a relative path would import a file of whatever folder the command runs in
                raise ValueError(f"{PLUGINS_ENV}: plugin {spec!r} is a relative path; give "
                                 "files there as absolute paths (or module names)")
            _load_plugin(spec)
    for spec in _items(specs):
        _load_plugin(spec)
    return list(_LOADED)


def _items(texts: Iterable[str]) -> list[str]:
    return [item.strip() for text in texts for item in text.split(",") if item.strip()]


def _is_file_spec(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def _load_plugin(spec: str) -> None:
    """Import one plugin; if it fails, the detectors it registered before failing are removed
    (a retry then registers them again instead of finding them taken)."""
    before = set(_REGISTERED)
    try:
        _import_plugin(spec)
    except BaseException:
        for name in set(_REGISTERED) - before:
            del _REGISTERED[name]
        raise


def _import_plugin(spec: str) -> None:
    entry: dict[str, Optional[str]]
    if _is_file_spec(spec):
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"plugin {spec!r}: no such file {path}")
        name = path.stem
        entry = {"module": name, "path": str(path)}
        if any(loaded["module"] == name for loaded in _LOADED) and _module_path(name) == str(
                path):
            return  # loaded already, by its module name or its path
        known = sys.modules.get(name)
        if known is not None and _module_path(name) != str(path):
            raise ValueError(f"plugin {spec!r}: a module named {name!r} is imported already "
                             f"(from {_module_path(name)}); rename the file")
        installed = _installed_elsewhere(name, path)
        if installed:
            # imported under its stem, it would stand in for that module in every later
            # import of it (a plugin file named optuna.py broke the tuner's import optuna)
            raise ValueError(f"plugin {spec!r}: a module named {name!r} is installed (at "
                             f"{installed}), and the plugin would shadow it; rename the file")
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ValueError(f"plugin {spec!r}: {path} cannot be imported as a module")
        module = importlib.util.module_from_spec(module_spec)
        # in sys.modules while it runs, as an import puts it: dataclasses and pickle look
        # their classes' module up there
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    else:
        if any(loaded["module"] == spec for loaded in _LOADED):
            return
        try:
            importlib.import_module(spec)
        except ModuleNotFoundError as error:
            if error.name != spec and not spec.startswith(f"{error.name}."):
                raise  # a module the plugin itself imports is missing: its own traceback
            raise ValueError(f"plugin {spec!r}: no module named {error.name!r} (give a module "
                             "name importable here, e.g. on PYTHONPATH, or a .py file)") from None
        entry = {"module": spec, "path": None}
    _LOADED.append(entry)


def _installed_elsewhere(name: str, path: Path) -> Optional[str]:
    """Where a module ``name`` other than the file ``path`` is importable, else ``None``."""
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None) if found is not None else None
    if found is None or (origin and Path(origin).resolve() == path):
        return None
    return origin or "a namespace package"


def _module_path(module: str) -> Optional[str]:
    path = getattr(sys.modules.get(module), "__file__", None)
    return str(Path(path).resolve()) if path else None


def plugin_record() -> dict[str, Any]:
    """What a results file records so that a run can be repeated (empty when nothing was
    loaded or registered): the plugins loaded (module and file, in order) and each registered
    detector's factory."""
    if not _LOADED and not _REGISTERED:
        return {}
    return {"loaded": [dict(entry) for entry in _LOADED],
            "detectors": {name: entry.record() for name, entry in _REGISTERED.items()}}


__all__ = [
    "PLUGINS_ENV",
    "DetectorFactory",
    "RegisteredDetector",
    "SearchSpace",
    "add_plugin_argument",
    "checked_detector",
    "load_plugins",
    "plugin_flags",
    "plugin_record",
    "register_detector",
    "registered_detectors",
    "reserved_name",
    "unregister_detector",
]
