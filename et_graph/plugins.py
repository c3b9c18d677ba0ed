"""Models of your own under a model name, and the plugins that register them.

One implementation serves every task whose ``--models`` takes names of your own: each kind of
model has a :class:`ModelRegistry` (the anomaly detectors: :mod:`et_graph.detectors.registry`;
the TU graph classifiers: :mod:`et_graph.protocols.graph_models`; the GNNBenchmark models:
:mod:`et_graph.protocols.benchmark_models`), which checks a name and its factory's signature;
a :class:`TorchModelRegistry` also refuses a model given as its factory. A module that
registers models when imported is a plugin: ``--plugin MODULE`` (a module name or a ``.py``
file; repeatable, or a comma list) and the environment variable ``ET_GRAPH_PLUGINS`` (a comma
list) import it before ``--models`` is read.
A plugin that fails leaves nothing registered; every results file records the plugins loaded
and the models registered (``meta.plugins``, :func:`plugin_record`).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import re
import sys
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, TypeVar

if TYPE_CHECKING:
    from torch import nn

class PluginError(TypeError):
    """A registered model's factory or search space of the wrong kind: the user's plugin, not
    the library, is at fault, so the command line reports it in one line (as bad input)."""


#: ``space(trial) -> {section: {field: value}}``: overrides of the run config per trial.
SearchSpace = Callable[[Any], Mapping[str, Any]]

#: The environment variable whose comma list of plugins the command line loads first.
PLUGINS_ENV = "ET_GRAPH_PLUGINS"

#: A name that can stand in a comma list such as ``--models et,NAME`` (the list is read
#: lower-cased) and in a table cell ("|" added a column to results.md).
NAME_PATTERN = r"[a-z0-9_][a-z0-9_.\-]*"


@dataclass(frozen=True)
class Registration:
    """A registered model: its name, factory and optional search space, and ``source_digest``:
    the SHA-256 of its factory's module file as it was when registered (else of the factory's
    source; ``""`` where neither can be read)."""

    name: str
    factory: Callable[..., Any]
    search_space: Optional[SearchSpace] = None
    source_digest: str = ""

    @property
    def identity(self) -> str:
        """The factory's ``module.qualname`` and its source digest: what a checkpoint of its
        model is fingerprinted with, so that another factory, or the same one edited, cannot
        resume it."""
        return f"{self.record()['factory']}@{self.source_digest}"

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

    @property
    def preset_meta(self) -> dict[str, str]:
        """What a tuned preset of this model notes in its ``[meta]``: the plugin it runs with
        (``--plugin`` and that value)."""
        return {"plugin": self.plugin}

    def record(self) -> dict[str, Optional[str]]:
        """Where its factory comes from, for a results file: ``module.qualname`` and the
        module's file."""
        name = getattr(self.factory, "__qualname__", type(self.factory).__qualname__)
        return {"factory": f"{self.module}.{name}", "path": _module_path(self.module),
                "source_sha256": self.source_digest or None}


def source_digest(factory: Callable[..., Any]) -> str:
    """SHA-256 of the file of ``factory``'s module (the whole plugin: its model classes too),
    else of the factory's own source, else ``""``."""
    import hashlib

    path = _module_path(getattr(factory, "__module__", None) or "")
    try:
        if path is not None:
            return hashlib.sha256(Path(path).read_bytes()).hexdigest()
        return hashlib.sha256(inspect.getsource(factory).encode("utf-8")).hexdigest()
    except (OSError, TypeError):  # a built-in or a function typed at a prompt
        return ""


Entry = TypeVar("Entry", bound=Registration)


class ModelRegistry(Generic[Entry]):
    """The registered models of one kind, by name, in registration order.

    Args:
        kind: what its entries are, in messages ("detector", "graph model").
        record_key: the key of its entries in :func:`plugin_record` ("detectors").
        entry_type: the :class:`Registration` subclass it stores.
        factory_arguments: the arguments its factories are called with.
        builtin_names: the task's built-in model names (called when needed: they may be
            defined after the registry).
        derived: the names a run derives from other rows, refused as the built-ins are: ``{how
            a message names them: regular expression}``, e.g. ``{"*_ensemble": r".*_ensemble"}``.
    """

    def __init__(self, kind: str, record_key: str, entry_type: type[Entry],
                 factory_arguments: Sequence[str], builtin_names: Callable[[], Iterable[str]],
                 derived: Optional[Mapping[str, str]] = None) -> None:
        self.kind, self.record_key, self.entry_type = kind, record_key, entry_type
        self.factory_arguments = tuple(factory_arguments)
        self.builtin_names = builtin_names
        self.derived = dict(derived or {})
        self._entries: dict[str, Entry] = {}
        _REGISTRIES.append(self)

    def reserved(self, name: str) -> bool:
        """Whether ``name`` (in any case, ``-`` read as ``_``) is taken by a built-in model, a
        registered one, or a row a run derives: the figures colour by that normalised name, so
        ``ET`` or ``structure-agnostic`` would be drawn as the built-in model."""
        key = name.lower()
        colour_key = key.replace("-", "_")
        taken = {*self.builtin_names(), *self._entries}
        return (key in taken or colour_key in taken
                or any(re.fullmatch(pattern, key) for pattern in self.derived.values()))

    def register(self, name: str, factory: Callable[..., Any], *,
                 search_space: Optional[SearchSpace] = None, replace: bool = False) -> Entry:
        """Register ``factory`` under ``name`` (see the task's ``register_*`` function);
        ``ValueError`` for a name that is invalid or taken, ``TypeError`` for a factory or
        space that cannot be called with the arguments the task passes."""
        if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
            raise ValueError(f"{self.kind} name {name!r}: use lower-case letters, digits, '_', "
                             "'.', '-' (it is written in comma lists such as --models et,NAME)")
        if self.reserved(name) and not (name in self._entries and replace):
            owner = ("registered already (replace=True replaces it)" if name in self._entries
                     else f"taken (built-in models {list(self.builtin_names())}"
                     + "".join(f", {derived}" for derived in self.derived) + ")")
            raise ValueError(f"{self.kind} name {name!r} is {owner}")
        check_callable(factory, "factory", self.factory_arguments)
        if search_space is not None:
            check_callable(search_space, "search_space", ("trial",))
        entry = self.entry_type(name, factory, search_space, source_digest(factory))
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove the entry registered under ``name`` (``KeyError`` if there is none)."""
        if name not in self._entries:
            raise KeyError(f"no {self.kind} is registered under {name!r}; registered: "
                           f"{sorted(self._entries)}")
        del self._entries[name]

    def entries(self) -> Mapping[str, Entry]:
        """The registered entries by name, in registration order (a read-only view)."""
        return MappingProxyType(self._entries)

    def record(self) -> dict[str, dict[str, Optional[str]]]:
        """Each entry's factory and file (:meth:`Registration.record`)."""
        return {name: entry.record() for name, entry in self._entries.items()}

    def snapshot(self, names: Iterable[str]) -> dict[str, Entry]:
        """The entries of those of ``names`` registered now: what a run keeps for all its
        trainings, so that a name registered again while it goes on (``replace=True``) cannot
        mix two models in one row."""
        return {name: self._entries[name] for name in names if name in self._entries}

    def readers(self, readers: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
        """A task's map of which models read a config section or field, with every registered
        model added to each entry: its factory is given the whole config, and which of it it
        reads cannot be told, so no setting is called unread (nor left out of a study's resume
        check) on its account."""
        return {key: (*models, *self._entries) for key, models in readers.items()}

    def tuning_space(self, name: str, example: str = "") -> Optional[SearchSpace]:
        """The search space ``name`` was registered with; ``None`` if no model is registered
        under it. ``ValueError`` for one registered without a space (it cannot be tuned);
        ``example`` shows what a space returns."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        if entry.search_space is None:
            raise ValueError(f"registered {self.kind} {name!r} has no search space, so it "
                             "cannot be tuned: register it with search_space=space, where "
                             "space(trial) returns overrides of the run config's sections"
                             + (f", e.g. {example}" if example else ""))
        return entry.search_space


class TorchModelRegistry(ModelRegistry[Entry]):
    """A registry whose factories return one new, untrained ``torch.nn.Module`` each call: a
    model given as the factory is refused (it is callable, but one model would be trained
    again for every fold or seed)."""

    def register(self, name: str, factory: Callable[..., Any], *,
                 search_space: Optional[SearchSpace] = None, replace: bool = False) -> Entry:
        from torch import nn

        if isinstance(factory, nn.Module):
            raise PluginError(f"factory of {self.kind} {name!r} is a model "
                            f"({type(factory).__name__}), not a factory: pass a function "
                            f"({', '.join(self.factory_arguments)}) -> a new, untrained model")
        return super().register(name, factory, search_space=search_space, replace=replace)


def describe_registered(kinds: Mapping[str, str], kind: str, how: str) -> str:
    """A run's protocol clause on its registered models (``""`` without any): ``kinds`` maps
    each name to its class, ``kind`` names the registry ("graph model"), ``how`` says how
    they are trained."""
    if not kinds:
        return ""
    listed = ", ".join(f"{name} = {cls}" for name, cls in kinds.items())
    return (f"; registered {kind}s (by register_{kind.replace(' ', '_')}: {listed}) are "
            f"{how}")


def outputs_on_two_graphs(model: nn.Module, graphs: Sequence[Any],
                          forward: Callable[[nn.Module, Any], Any], device: Any = "cpu",
                          origin: str = "the model") -> tuple[Any, tuple[int, ...]]:
    """The batch of ``graphs``' first two (on ``device``) and the shape of ``forward(model,
    batch)`` there, in eval mode without gradients (the model's mode restored): what a run
    checks of a registered model before any training. Outputs that are not a floating-point
    tensor, or not finite, and a forward that cannot take the call, are refused here, naming
    ``origin``: integer logits and NaN failed only after the other models' first fold, and a
    forward without the keywords raised a bare ``TypeError`` (an audit)."""
    import torch
    from torch_geometric.loader import DataLoader

    batch = next(iter(DataLoader(list(graphs[:2]), batch_size=2))).to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = forward(model, batch)
    except TypeError as error:
        if _raised_inside(error, model):
            raise  # a fault inside its forward: its own traceback (a review)
        raise PluginError(f"{origin}: calling it on two training graphs failed: {error} (see "
                          "what its forward takes in its task's contract)") from error
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor):
        raise PluginError(f"{origin} returned {type(out).__name__} on two training graphs, not "
                          "a tensor")
    if not out.is_floating_point():
        raise PluginError(f"{origin}: its outputs on two training graphs are "
                          f"{str(out.dtype).replace('torch.', '')}, not floating point (the "
                          "loss reads float logits or values)")
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"{origin}: its outputs on two training graphs are not finite (NaN or "
                         "inf) before any training")
    return batch, tuple(out.shape)


def _raised_inside(error: BaseException, model: Any) -> bool:
    """Whether ``error`` came from inside ``model``'s ``forward`` or ``forward_data`` (one of
    their frames is on its traceback), rather than from a call those could not take."""
    # unwrapped: a decorated forward's wrapper frame is on every traceback (a review)
    codes = {getattr(inspect.unwrap(method), "__code__", None)
             for method in (getattr(type(model), name, None) for name in ("forward",
                                                                          "forward_data"))
             if method is not None} - {None}
    frame = error.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code in codes:
            return True
        frame = frame.tb_next
    return False


#: Every module a factory has returned, and their trainable parameters, by ``id`` (weakly
#: held: a module dropped cannot come back, and its id may then be another's).
_RETURNED_MODULES: dict[int, weakref.ref] = {}
_RETURNED_PARAMETERS: dict[int, weakref.ref] = {}


def _remember(table: dict[int, weakref.ref], item: Any) -> None:
    key = id(item)

    def forget(_ref: weakref.ref) -> None:
        table.pop(key, None)

    table[key] = weakref.ref(item, forget)


def _returned_before(table: dict[int, weakref.ref], item: Any) -> bool:
    ref = table.get(id(item))
    return ref is not None and ref() is item


def checked_module(model: Any, origin: str, returns: str) -> nn.Module:
    """``model`` if it is a ``torch.nn.Module`` (what the training engines train) that no
    factory has returned before, nor shares a trainable parameter with one, else a
    ``TypeError`` naming ``origin`` (what built it) and what its forward must return. A
    factory returning one module every time passed: each fold, seed or trial started from the
    last one's trained weights, and a fold trained on the next fold's test graphs (an audit);
    so did a new module around a shared trained submodule (a review)."""
    from torch import nn

    if not isinstance(model, nn.Module):
        raise PluginError(f"{origin} returned {type(model).__name__}, not a torch.nn.Module: its "
                        f"factory must return a new, untrained model whose forward returns "
                        f"{returns}")
    if _returned_before(_RETURNED_MODULES, model):
        raise PluginError(f"{origin} returned a {type(model).__name__} it had returned before: "
                          "its factory must build a new, untrained model on every call (each "
                          "fold, seed and trial trains its own), not return one kept aside")
    trainable = [(name, parameter) for name, parameter in model.named_parameters()
                 if parameter.requires_grad]
    shared = [name for name, parameter in trainable
              if _returned_before(_RETURNED_PARAMETERS, parameter)]
    if shared:
        raise PluginError(f"{origin} returned a {type(model).__name__} that shares trainable "
                          f"parameters with a model it returned before ({', '.join(shared[:3])}"
                          f"{', ...' if len(shared) > 3 else ''}): a shared submodule carries "
                          "its trained weights into the next fold, seed or trial; build it "
                          "anew, or freeze it (requires_grad=False)")
    _remember(_RETURNED_MODULES, model)
    for _, parameter in trainable:
        _remember(_RETURNED_PARAMETERS, parameter)
    return model


#: Every registry made, in order (a plugin's rollback and the results' record cover them all).
_REGISTRIES: list[ModelRegistry[Any]] = []
#: The plugins :func:`load_plugins` imported, in order: ``{"module", "path"}`` (the path of a
#: plugin given as a file, else ``None``).
_LOADED: list[dict[str, Optional[str]]] = []


def check_callable(function: Any, role: str, arguments: Sequence[str]) -> None:
    """``TypeError`` unless ``function`` can be called with ``arguments`` (by position)."""
    if not callable(function):
        raise PluginError(f"{role} must be callable, got {type(function).__name__}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # some built-in callables have none: found at first call
        return
    try:
        signature.bind(*arguments)
    except TypeError:
        raise PluginError(f"{role} must take ({', '.join(arguments)}); its signature is "
                        f"{signature}") from None


# ----------------------------------------------------------------------------------------------
# Plugins: modules that register models when imported
# ----------------------------------------------------------------------------------------------
def add_plugin_argument(parser: argparse.ArgumentParser,
                        registers: str = "et_graph.detectors.register_detector") -> None:
    """``--plugin MODULE`` (repeatable) on a command whose ``--models`` takes the names that
    ``registers`` (the task's register function, for the help) gives."""
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="MODULE",
        help="import MODULE first, a module name or a .py file, so that the models it "
             f"registers ({registers}) can be named in --models; repeatable, or a comma list; "
             f"{PLUGINS_ENV} (a comma list) is loaded before it")


def plugin_flags(argv: Sequence[str]) -> list[str]:
    """The values of ``--plugin`` in ``argv`` (read before the rest, whose ``--models`` may
    name the models they register)."""
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
    return loaded_plugins()


def loaded_plugins() -> list[dict[str, Optional[str]]]:
    """The plugins loaded so far, in order: ``{"module", "path"}`` (copies)."""
    return [dict(entry) for entry in _LOADED]


def _items(texts: Iterable[str]) -> list[str]:
    return [item.strip() for text in texts for item in text.split(",") if item.strip()]


def _is_file_spec(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def _load_plugin(spec: str) -> None:
    """Import one plugin; if it fails, the models it registered before failing, of every kind,
    are removed (a retry then registers them again instead of finding them taken)."""
    before = {id(registry): set(registry._entries) for registry in _REGISTRIES}
    try:
        _import_plugin(spec)
    except BaseException:
        # (a registry the plugin's imports made had nothing before it)
        for registry in _REGISTRIES:
            for name in set(registry._entries) - before.get(id(registry), set()):
                del registry._entries[name]
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
        # Its folder is searched while it runs, as `python FILE` would search it: a plugin
        # importing a module beside it failed (an audit). Last, so that a file there never
        # stands in for an installed module; only while it runs, since a folder left on the
        # path made another folder's plugin of the same name look installed. (A module beside
        # it that a function imports only later needs the folder on PYTHONPATH.)
        _check_imports_beside(path, spec)
        folder = str(path.parent)
        searched = folder not in sys.path
        if searched:
            sys.path.append(folder)
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        finally:
            if searched and folder in sys.path:
                sys.path.remove(folder)
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


def _check_imports_beside(path: Path, spec: str) -> None:
    """``ValueError`` when the plugin file ``path`` imports a module that lies beside it but is
    imported already from elsewhere (another plugin's folder, say): it would get that one, and
    two plugins' ``helpers.py`` were one without a word (a review)."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return  # the import itself reports it
    names = {alias.name.split(".")[0] for node in ast.walk(tree)
             if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    for name in sorted(names):
        beside = path.parent / f"{name}.py"
        if not beside.is_file() or name not in sys.modules:
            continue
        loaded = _module_path(name)  # (resolved)
        if loaded is not None and Path(loaded) != beside.resolve():
            raise ValueError(f"plugin {spec!r} imports {name!r}, which lies beside it "
                             f"({beside}) but is imported already from {loaded}: it would get "
                             "that one; rename one of the two modules")


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
    loaded or registered): the plugins loaded (module and file, in order) and, per kind with
    registrations (``detectors``, ``graph_models``, ``benchmark_models``), each registered
    model's factory."""
    registries = [registry for registry in _REGISTRIES if registry._entries]
    if not _LOADED and not registries:
        return {}
    return {"loaded": loaded_plugins(),
            **{registry.record_key: registry.record() for registry in registries}}


__all__ = [
    "PluginError",
    "NAME_PATTERN",
    "PLUGINS_ENV",
    "ModelRegistry",
    "Registration",
    "SearchSpace",
    "TorchModelRegistry",
    "add_plugin_argument",
    "check_callable",
    "checked_module",
    "describe_registered",
    "load_plugins",
    "loaded_plugins",
    "outputs_on_two_graphs",
    "plugin_flags",
    "plugin_record",
    "source_digest",
]
