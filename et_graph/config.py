"""Typed configs: dataclasses, TOML/YAML preset files, and a CLI generated from the dataclasses.

A task's configuration is a dataclass whose fields are *sections*, each itself a dataclass of
plain fields (``int``, ``float``, ``str``, ``bool``, ``Optional`` of those). The one source of
defaults is the dataclasses: library objects, preset files and the command line all start from
them. Values are resolved in this order, later winning:

1. the dataclass defaults;
2. ``--config FILE`` (TOML or YAML, one table per section, e.g. ``[train]\\nepochs = 50``);
3. ``--quick``: the task's smoke preset. It has one meaning for every task: *the smallest run
   that exercises the whole pipeline* (at most 10 epochs, 2 seeds or folds, the task's smallest
   data option); see each config's ``QUICK``;
4. flags given on the command line.

Why argparse built from :func:`dataclasses.fields` rather than ``tyro`` or ``jsonargparse``:
the configs only use flat scalar fields, argparse is in the standard library, and the generated
flags keep the names our documented commands already use (``--epochs``, ``--hidden``). The help
text of every flag is read from the ``Attributes:`` section of the section's docstring, so the
API docs and ``--help`` cannot disagree.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import typing
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional, TypeVar, Union, cast

from .exceptions import ConfigWarning, OutputWarning, ReproducibilityWarning
from .paths import write_text_whole

if TYPE_CHECKING:
    import torch
    from _typeshed import DataclassInstance

    from .training import CheckpointConfig

#: A config: a dataclass (of section dataclasses, for a task's).
T = TypeVar("T", bound="DataclassInstance")

#: Written into TOML for ``None`` values of optional fields (TOML has no null).
NONE_TOKEN = "none"


@dataclass
class RunConfig:
    """How and where a run executes (shared by every task's config as its ``run`` section).

    Attributes:
        out: output folder for results.json, results.md and plots (none = do not write;
            et-graph tudataset writes into a subfolder per dataset, OUT/NAME/).
        threads: torch CPU threads (none = torch's default, OMP_NUM_THREADS or the
            machine's cores, at most the cores this process may use: its affinity and its
            cgroup's CPU quota, as a container's). The count moves the numbers in their last
            digits (a sum split over more threads is taken in another order), and over a long
            training that can move the kept epoch: a rerun that must repeat a result uses the
            recorded count.
        device: cpu, cuda, cuda:1, ..., or auto (cuda where a GPU is visible, else cpu;
            resolved at construction, so results record the device used).
        progress: show progress bars and per-fold/per-seed lines (the final table is printed
            either way).
        quiet: print nothing on standard output (the tables, per-fold lines and "Written
            to"): for a notebook or a script that reads the returned results dict. Warnings and
            progress bars go to standard error and keep their own switches (progress).
        checkpoint_dir: save resumable training checkpoints below this folder (none = off).
        checkpoint_every: save a checkpoint every this many epochs.
        resume: continue interrupted trainings from checkpoint_dir.
        native_attention: use the compiled CPU kernels for the attention gradient and the
            Conv2D mask's Gram entries (et_graph.native: opt-in, built on first use; for
            mini-batches of small graphs).
            ET_GRAPH_NATIVE_ATTENTION=1 in the environment (or set_native_attention(True)
            earlier in the process) turns it on for every run; the value in force is what
            results record.
    """

    out: Optional[str] = None
    threads: Optional[int] = None
    device: str = "cpu"
    progress: bool = True
    quiet: bool = False
    checkpoint_dir: Optional[str] = None
    checkpoint_every: int = 1
    resume: bool = False
    native_attention: bool = False

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads <= 0:
            raise ValueError(f"threads must be positive, got {self.threads}")
        if self.resume and not self.checkpoint_dir:
            raise ValueError("--resume needs --checkpoint-dir (the folder of the interrupted run)")
        for name in ("out", "checkpoint_dir"):
            folder = getattr(self, name)
            # Found before the run trains, not when it writes its results at the end.
            if folder and Path(folder).exists() and not Path(folder).is_dir():
                raise ValueError(f"{name} {folder!r} is a file, not a folder")
        self.device = resolve_device(self.device)
        check_device(self.device)
        if not isinstance(self.native_attention, bool):
            raise ValueError(f"native_attention must be true or false, got "
                             f"{self.native_attention!r}")
        if not self.native_attention and os.environ.get("ET_GRAPH_NATIVE_ATTENTION"):
            from .native import env_requests_native

            self.native_attention = bool(env_requests_native())

    def apply_threads(self) -> None:
        """Apply the process-wide settings of this run: the torch CPU threads and, when asked
        for, the compiled kernels (built here, so a missing compiler stops the run
        before it trains). A kernel already switched on for the process (by
        ``set_native_attention`` or the environment) stays on, and this config then records
        it, so that results say which path ran."""
        import torch

        if self.threads:
            torch.set_num_threads(self.threads)
        elif not os.environ.get("OMP_NUM_THREADS", "").strip():
            # torch's default counts the host's cores: in a container with a CPU quota (2 of
            # a 64-core host) it runs 64 threads on 2 CPUs, oversubscribed; the default stops
            # at the quota, and results record the count taken (machine.threads)
            cores = available_cores()
            if torch.get_num_threads() > cores:
                torch.set_num_threads(cores)
        from .native import native_attention_enabled, set_native_attention

        if self.native_attention:
            set_native_attention(True)
        elif native_attention_enabled():
            self.native_attention = True
        if self.native_attention and not str(self.device).startswith("cpu"):
            # The kernels are CPU code: on a GPU nothing calls them, and the results would
            # record a path that never ran.
            warnings.warn(f"native_attention: the compiled kernels run on the CPU only; on "
                          f"device {self.device!r} the layers use their own GPU path (recorded "
                          "as native_attention = false)", ConfigWarning, stacklevel=2)
            self.native_attention = False

    def checkpoint(self, *parts: str) -> Optional[CheckpointConfig]:
        """A :class:`~et_graph.training.CheckpointConfig` for one training of this run
        (``checkpoint_dir/part/part/...``, the first part the dataset's name so that runs on two
        datasets sharing a folder never overwrite each other's; characters other than letters,
        digits, ``.``, ``-`` and ``_`` become ``_``), or ``None`` without a checkpoint folder."""
        if not self.checkpoint_dir:
            return None
        from .training import CheckpointConfig

        # (an empty part, and "." or "..": no folder of their own; a file "...npz" is dataset
        # "..", whose checkpoints went one folder up, out of checkpoint_dir: a security audit)
        folders = [folder if folder.strip(".") else "_"
                   for folder in (re.sub(r"[^\w.-]", "_", str(part)) for part in parts)]
        folder = Path(self.checkpoint_dir, *folders)
        before = Path(self.checkpoint_dir, *folders[1:])
        if (self.resume and len(folders) > 1 and not (folder / "last.pt").is_file()
                and (before / "last.pt").is_file()):
            # the layout before session 56 (no dataset folder): --resume started over without
            # a word (a compat audit)
            import shlex

            # (the folder may not exist yet, or exist already: move the file, not the folder,
            # whose move nested it one level too deep: a review)
            move = (f"mkdir -p {shlex.quote(str(folder))} && mv "
                    f"{shlex.quote(str(before / 'last.pt'))} {shlex.quote(str(folder))}/")
            warnings.warn(f"--resume found no checkpoint at {folder} but one at {before}, "
                          "where et-graph before session 56 wrote it: this run starts over; to "
                          f"resume that one, move it first ({move})", OutputWarning, stacklevel=2)
        return CheckpointConfig(str(folder), self.checkpoint_every, self.resume)


# ----------------------------------------------------------------------------------------------
# Introspection
# ----------------------------------------------------------------------------------------------
def resolve_device(device: Any) -> Any:
    """``"auto"`` becomes ``"cuda"`` where torch sees a CUDA GPU and ``"cpu"`` elsewhere; any
    other value is returned as it is. Configs and detectors resolve it at construction, so the
    device a run used is the one its results record."""
    if isinstance(device, str) and device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def check_device(device: Union[str, torch.device]) -> None:
    """``ValueError`` for a device string torch cannot parse, or one this machine lacks (a CUDA
    device without a CUDA build or GPU, an index past the last GPU), before any work starts."""
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device must be auto, cpu, cuda, cuda:N, mps, ...; got {device!r}"
                         ) from error
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: no CUDA GPU is available here (torch "
                             f"{torch.__version__}); use the CPU (device='cpu', --device cpu)")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")
    elif parsed.type == "mps":  # (torch.mps.is_available exists from torch 2.5 only)
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError(f"device {device!r}: MPS is not available here; use the CPU "
                             "(device='cpu', --device cpu)")
    elif parsed.type == "meta":  # failed at the first Tensor.item()
        raise ValueError(f"device {device!r} holds no values: training and scoring need a real "
                         "device (cpu, cuda, mps)")
    elif parsed.type != "cpu":  # xpu and the rest: torch's bare AssertionError came later
        backend = getattr(torch, parsed.type, None)
        available = getattr(backend, "is_available", None)
        if available is None or not available():
            raise ValueError(f"device {device!r}: {parsed.type} is not available here; use "
                             "--device cpu")


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _scalar_type(annotation: Any) -> tuple[type, bool]:
    """``(base type, optional)`` of a field annotation such as ``Optional[int]``."""
    origin = typing.get_origin(annotation)
    if origin is Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported config annotation {annotation!r}")
        return args[0], True
    return annotation, False


def sections(config: Any) -> dict[str, Any]:
    """``{section name: section dataclass instance}`` of a task config."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
            if dataclasses.is_dataclass(getattr(config, f.name))}


def _section_types(cls: type) -> dict[str, type]:
    hints = _hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)
            if dataclasses.is_dataclass(hints[f.name])}


def field_docs(cls: type) -> dict[str, str]:
    """Field descriptions from the ``Attributes:`` sections of a dataclass's docstring and its
    base classes' (a subclass documents only the fields it adds or redefines)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if "__doc__" in vars(klass) and dataclasses.is_dataclass(klass):
            docs.update(_attribute_docs(klass.__doc__ or ""))
    return docs


def _attribute_docs(doc: str) -> dict[str, str]:
    match = re.search(r"Attributes:\n(.*?)(?:\n\s*\n(?=\S)|\Z)", doc, flags=re.S)
    if not match:
        return {}
    docs: dict[str, str] = {}
    current = None
    for line in match.group(1).splitlines():
        head = re.match(r"\s+(\w+):\s*(.*)", line)
        if head and len(line) - len(line.lstrip()) <= 8:
            current = head.group(1)
            docs[current] = head.group(2).strip()
        elif current and line.strip():
            docs[current] += " " + line.strip()
    return {name: plain_text(text) for name, text in docs.items()}


def plain_text(text: str) -> str:
    """A docstring fragment as ``--help`` shows it: Sphinx roles (``:class:`~a.b.C```) become
    their last name (``C``), and double backquotes single words."""
    text = re.sub(r":\w+:`~?(?:[\w.]*\.)?([\w]+)`", r"\1", text)
    return text.replace("``", "")


# ----------------------------------------------------------------------------------------------
# Dict <-> dataclass
# ----------------------------------------------------------------------------------------------
def _coerce(value: Any, annotation: Any, where: str) -> Any:
    base, optional = _scalar_type(annotation)
    if value is None or (optional and isinstance(value, str) and value.lower() == NONE_TOKEN):
        if not optional:
            raise ValueError(f"{where} may not be empty")
        return None
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ValueError(f"{where} must be true or false, got {value!r}")
    if base is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"{where} must be an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):  # e.g. epochs = "three" in a TOML file
            raise ValueError(f"{where} must be an integer, got {value!r}") from None
    if base is float:
        if isinstance(value, bool):
            raise ValueError(f"{where} must be a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where} must be a number, got {value!r}") from None
    if base is str:
        if isinstance(value, (list, tuple)):  # a list field written as a TOML array
            return ",".join(str(item) for item in value)
        if isinstance(value, Mapping):  # an inline table became the text "{'a': 1}"
            raise ValueError(f"{where} must be text, got a table {value!r}")
        return str(value)
    raise TypeError(f"unsupported config type {annotation!r} at {where}")


def check_ranges(section: Any, name: str, positive_ints: Sequence[str] = (),
                 dropouts: Sequence[str] = (), positive: Sequence[str] = (),
                 non_negative: Sequence[str] = ()) -> None:
    """``ValueError`` naming ``name.field`` for a section's widths and counts that are not
    positive ints, dropouts outside [0, 1), rates that are not finite and positive (or >= 0).
    ``None`` (an optional field's "use the other setting") passes. Without these a bad
    baseline width or dropout failed inside torch after the data had loaded, or under another
    setting's name."""
    import math

    rules = (
        (positive_ints, "be a positive integer",
         lambda v: not isinstance(v, bool) and isinstance(v, int) and v > 0),
        (dropouts, "lie in [0, 1)", lambda v: math.isfinite(v) and 0.0 <= v < 1.0),
        (positive, "be a finite number > 0", lambda v: math.isfinite(v) and v > 0),
        (non_negative, "be a finite number >= 0", lambda v: math.isfinite(v) and v >= 0),
    )
    for fields, requirement, holds in rules:
        for field in fields:
            value = getattr(section, field)
            if value is not None and not holds(value):
                raise ValueError(f"{name}.{field} must {requirement}, got {value!r}")


def _coerced(section_type: type, values: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``values`` checked against the fields of the section dataclass ``section_type`` (an
    unknown key raises, naming the closest known one) and coerced to their types."""
    hints = _hints(section_type)
    names = {f.name for f in dataclasses.fields(section_type)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(
            f"unknown key(s) {unknown} in [{where or section_type.__name__}]"
            f"{_did_you_mean(unknown, names)}; known: {sorted(names)}"
        )
    return {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in values.items()}


def replace_fields(section: T, values: Mapping[str, Any], where: str = "") -> T:
    """A copy of the section dataclass with ``values`` (checked and coerced) replaced."""
    return dataclasses.replace(section, **_coerced(type(section), values, where))


def _check_sections(nested: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    unknown = sorted(set(nested) - set(current))
    if unknown:
        raise ValueError(f"unknown section(s) {unknown}{_did_you_mean(unknown, current)}; "
                         f"known: {sorted(current)} (a preset of another task?)")


def _did_you_mean(unknown: Sequence[str], known: Any) -> str:
    """``" (did you mean 'epochs'?)"`` for the closest known names of mistyped ones."""
    import difflib

    close = {name: difflib.get_close_matches(name, list(known), n=1) for name in unknown}
    hints = [f"{name!r} -> {match[0]!r}" for name, match in close.items() if match]
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


def nested_overrides(overrides: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{section: {field: value}}`` from nested tables or dotted ``"section.field"`` keys."""
    nested: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        if isinstance(value, Mapping):
            nested.setdefault(key, {}).update(value)
        elif value is None and "." not in key:  # a YAML section whose keys are all commented
            nested.setdefault(key, {})
        elif "." in key:
            section, name = key.split(".", 1)
            nested.setdefault(section, {})[name] = value
        else:
            raise ValueError(f"top-level key {key!r} must be a [section] table")
    return nested


def merge(config: T, overrides: Mapping[str, Any]) -> T:
    """Apply ``{section: {field: value}}`` (or dotted ``{"section.field": value}``) to a task
    config and return the new config; unknown sections or keys raise ``ValueError``."""
    nested = nested_overrides(overrides)
    current = sections(config)
    _check_sections(nested, current)
    changes = {name: replace_fields(current[name], values, name)
               for name, values in nested.items()}
    return dataclasses.replace(config, **changes)


#: PyGOD's detector arguments (and the layers' and scikit-learn's names) and the names the
#: detectors give the same settings.
PYGOD_NAMES = {"epoch": "epochs", "hid_dim": "hidden", "gpu": "device", "verbose": "progress",
               "hidden_channels": "hidden", "random_state": "seed"}


def apply_keywords(config: T, **keywords: Any) -> T:
    """Apply flat keywords (``epochs=50, hidden=32``) to the unique section holding each name."""
    owners: dict[str, str] = {}
    for section_name, section in sections(config).items():
        for f in dataclasses.fields(section):
            owners.setdefault(f.name, section_name)
    nested: dict[str, dict[str, Any]] = {}
    for key, value in keywords.items():
        if key not in owners:
            import difflib

            # PyGOD's names are the usual slip (hid_dim is closest to head_dim by spelling)
            alias = PYGOD_NAMES.get(key)
            # (device, progress and seed are the detectors' own arguments, beside their config)
            close = [alias] if alias in owners or alias in ("device", "progress", "seed") else \
                difflib.get_close_matches(key, list(owners), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"unknown keyword {key!r} for {type(config).__name__}{hint}; "
                            f"known: {sorted(owners)}")
        nested.setdefault(owners[key], {})[key] = value
    return merge(config, nested)


#: The name of the unchanged config, always the first candidate of a grid.
PRESET_CANDIDATE = "preset"


def parse_grid(text: str, allowed_sections: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    """A declared grid of configs, ``"NAME: section.field=value, ...; NAME: ..."``, as
    ``[(NAME, {"section.field": value})]``. Values stay strings (:func:`merge` checks and
    converts them); only ``allowed_sections`` may change, and ``"preset"`` is reserved for the
    unchanged config."""
    candidates: list[tuple[str, dict[str, str]]] = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, sep, body = part.partition(":")
        name = name.strip()
        if not sep or not name or not body.strip():
            raise ValueError(f"grid candidate {part!r}: write NAME: section.field=value, ...")
        if name == PRESET_CANDIDATE or name in {c for c, _ in candidates}:
            raise ValueError(f"grid candidate name {name!r} is reserved or given twice")
        overrides: dict[str, str] = {}
        for item in (i.strip() for i in body.split(",")):
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or "." not in key or not value.strip():
                raise ValueError(f"grid candidate {name!r}: {item!r} is not section.field=value")
            if key.split(".", 1)[0] not in allowed_sections:
                raise ValueError(f"grid candidate {name!r}: {key!r} is not in a section a "
                                 f"candidate may change {tuple(allowed_sections)}")
            overrides[key] = value.strip()
        candidates.append((name, overrides))
    if not candidates:
        raise ValueError(f"the grid {text!r} names no candidate")
    return candidates


def grid_configs(config: T, grid: Optional[str], allowed_sections: Sequence[str]) -> dict[str, T]:
    """``{candidate: the full config it runs}``: ``"preset"`` (``config`` itself) first, then
    each candidate of ``grid`` (:func:`parse_grid`) merged into it; unknown fields and bad
    values raise here, naming the candidate."""
    out = {PRESET_CANDIDATE: config}
    for name, overrides in parse_grid(grid, allowed_sections) if grid else []:
        try:
            out[name] = merge(config, overrides)
        except ValueError as error:
            raise ValueError(f"grid candidate {name!r}: {error}") from None
    return out


def to_dict(config: Any) -> dict[str, Any]:
    """The fully resolved config as plain data (JSON-serialisable)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def parse_model_list(text: str, allowed: Sequence[str], hint: str = "") -> list[str]:
    """The model names of a comma-separated list, lower-cased, each once, in the given order
    (``mlp,MLP`` trains the MLP once); ``ValueError`` naming the unknown ones (and ``hint``:
    where other names come from). Every task's ``models`` field is read by it."""
    names = list(dict.fromkeys(n.strip().lower() for n in str(text).split(",") if n.strip()))
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise ValueError(f"unknown models {unknown or text!r}; choose from {list(allowed)}"
                         + (f" ({hint})" if hint else ""))
    return names


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------
def load_file(path: Union[str, Path]) -> dict[str, Any]:
    """Read a TOML (``.toml``) or YAML (``.yaml``/``.yml``) preset into nested dicts (its
    free-form ``[meta]`` table left out), or the settings a run's ``results.json`` records
    (:func:`results_settings`)."""
    data = read_file(path)
    data.pop("meta", None)  # free-form description of a preset (its origin, its table)
    return data


def read_file(path: Union[str, Path]) -> dict[str, Any]:
    """A preset file as nested dicts, its ``[meta]`` table included."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} " + (
            "is a folder, not a file" if path.is_dir() else "does not exist")
            + _preset_hint(path))
    suffix = path.suffix.lower()
    if suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python < 3.11
            import tomli as tomllib
        with open(path, "rb") as handle:
            try:
                data = tomllib.load(handle)
            except tomllib.TOMLDecodeError as error:  # named the line but not the file
                raise ValueError(f"{path}: {error}") from None
    elif suffix == ".json":
        data = results_settings(path)
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as error:  # pragma: no cover
            raise ImportError("YAML presets need PyYAML: pip install pyyaml") from error
        try:
            data = yaml.load(path.read_text(encoding="utf-8"), Loader=_yaml_loader()) or {}
        except yaml.YAMLError as error:  # a raw traceback "in <unicode string>"
            text = " ".join(str(error).replace('in "<unicode string>", ', "at ").split())
            raise ValueError(f"{path}: {text}") from None
    else:
        raise ValueError(f"config files are .toml, .yaml or .yml (or a run's results.json), "
                         f"got {path.name}")
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold tables of settings, got {type(data).__name__}")
    return data


#: The settings of a results file that say where that run wrote, or what it printed, not what
#: it computed (``{section: fields}``): a rerun from the file writes where its own flags (or
#: the task's defaults) say, never over the results it reruns, and a file from someone else
#: cannot choose the folders this machine's run writes into (the TU cache: a security audit);
#: a rerun of a --quiet run prints as usual (it printed nothing: a CLI audit).
RESULTS_OWN_SETTINGS = {"run": ("out", "checkpoint_dir", "resume", "quiet", "progress"),
                        "data": ("cache",)}


def results_settings(path: Union[str, Path]) -> dict[str, Any]:
    """The settings a run's ``results.json`` records (``meta.config``, every field of its task's
    config) as a preset, so that ``--config OUT/results.json`` reruns a stored result. Its
    :data:`RESULTS_OWN_SETTINGS` are left out. A run that left the thread count to torch's
    default gets the count it ran on (``meta.machine.threads``): the count moves the last digits,
    and through them a kept epoch (not beyond this machine's cores, nor over an
    ``OMP_NUM_THREADS`` set for the rerun: a warning then says so). A file written by another
    commit than the running code, or with other torch, PyG, NumPy or scikit-learn versions or
    another CPU instruction set, is named in a warning: where those changed since, the figures
    may too."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    meta = data.get("meta") if isinstance(data, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise ValueError(f"{path} is not a results file of et-graph (it holds no meta.config); "
                         "presets are .toml or .yaml files")
    settings = json.loads(json.dumps(meta["config"]))  # a copy
    for section, names in RESULTS_OWN_SETTINGS.items():
        for name in names:
            if isinstance(settings.get(section), dict):
                settings[section].pop(name, None)
    machine: dict[str, Any] = (meta["machine"] if isinstance(meta.get("machine"), dict)
                               else {})
    run = settings.get("run")
    recorded = machine.get("threads")
    if (isinstance(run, dict) and "threads" in run and run["threads"] is None
            and type(recorded) is int and recorded > 0):
        # (a rerun on another core count summed in other orders: a determinism audit)
        run["threads"] = _rerun_threads(path, recorded)
    stored, running = meta.get("git_commit"), _COMMIT_AT_IMPORT or git_commit()
    if stored and "unknown" not in (stored, running) and stored != running:
        warnings.warn(f"{path} was written at commit {stored}, this code is {running}: the "
                      "rerun takes its settings, but where the code changed since, the "
                      "figures may differ", ReproducibilityWarning, stacklevel=3)
    changed = [f"{name} {meta[name]} (now {now})" for name, now in _running_versions().items()
               if isinstance(meta.get(name), str) and meta[name] != now]
    capability = machine.get("cpu_capability")
    if isinstance(capability, str) and capability != "unknown":
        now = machine_metadata()["cpu_capability"]
        if now not in (capability, "unknown"):
            changed.append(f"cpu_capability {capability} (now {now})")
    if changed:
        warnings.warn(f"{path} was written with {', '.join(changed)}: the rerun takes its "
                      "settings, but the last digits, and through them a kept epoch or "
                      "threshold, may differ", ReproducibilityWarning, stacklevel=3)
    return settings


def _rerun_threads(path: Path, recorded: int) -> Optional[int]:
    """The thread count a rerun of a run recorded on ``recorded`` threads takes: that count,
    unless the user set ``OMP_NUM_THREADS`` to another for the rerun (then ``None``, torch's
    default, which follows it) or this machine has fewer cores (then its cores: 64 threads
    forced on 2 ran many times slower, a review); either is said in a warning."""
    cores, omp = available_cores(), os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp == str(recorded) or (not omp and recorded <= cores):
        return recorded
    taken = f"OMP_NUM_THREADS={omp}" if omp else f"this machine's {cores} cores"
    warnings.warn(f"{path} ran on {recorded} threads; this rerun takes {taken}, so its last "
                  "digits may differ (--threads sets the count)", ReproducibilityWarning,
                  stacklevel=4)
    return None if omp else cores


def available_cores(cgroup_root: Union[str, Path] = "/sys/fs/cgroup",
                    proc_cgroup: Union[str, Path] = "/proc/self/cgroup") -> int:
    """The cores this process may run on: its affinity where the system says (else all), and
    no more than its cgroup's CPU quota, rounded up (a container given 2 CPUs of a 64-core
    host sees 64 cores, and its affinity says 64)."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


def cgroup_cpu_quota(cgroup_root: Union[str, Path] = "/sys/fs/cgroup",
                     proc_cgroup: Union[str, Path] = "/proc/self/cgroup") -> Optional[float]:
    """The CPUs this process's cgroup may use (quota / period), the smallest over its
    cgroup and their parents, from cgroup v2's ``cpu.max`` or v1's ``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us``; ``None`` without a quota or where none can be read (not Linux)."""
    root = Path(cgroup_root)
    try:
        lines = Path(proc_cgroup).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one unified hierarchy
            folder, read = root / path.lstrip("/"), _cgroup_v2_quota
        elif "cpu" in controllers.split(","):
            base = next((root / name for name in (controllers, "cpu,cpuacct", "cpu")
                         if (root / name).is_dir()), None)
            if base is None:
                continue
            folder, read = base / path.lstrip("/"), _cgroup_v1_quota
        else:
            continue
        while True:  # the cgroup and its parents, up to the mount
            quota = read(folder)
            if quota is not None:
                found.append(quota)
            if folder == root or root not in folder.parents:
                break
            folder = folder.parent
    return min(found) if found else None


def _cgroup_v2_quota(folder: Path) -> Optional[float]:
    try:
        quota, period = (folder / "cpu.max").read_text(encoding="utf-8").split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _cgroup_v1_quota(folder: Path) -> Optional[float]:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text(encoding="utf-8"))
        period = int((folder / "cpu.cfs_period_us").read_text(encoding="utf-8"))
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def _running_versions() -> dict[str, str]:
    """The versions :func:`run_metadata` records of the libraries that round the numbers."""
    import numpy
    import sklearn
    import torch
    import torch_geometric

    return {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "numpy": numpy.__version__, "scikit_learn": sklearn.__version__}


def _toml_value(value: Any) -> str:
    if value is None:
        return json.dumps(NONE_TOKEN)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    # TOML's basic strings take JSON's escapes, but not its surrogate pairs (ensure_ascii wrote
    # an emoji as two, which TOML refuses) nor a raw DEL
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_key(key: Any) -> str:
    """A bare TOML key where it may be one, else a quoted one ("my key" was written bare)."""
    key = str(key)
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_value(key)


def dumps_toml(config: Any, meta: Optional[Mapping[str, Any]] = None) -> str:
    """A TOML preset of every field of ``config`` (``None`` as ``"none"``)."""
    lines: list[str] = []
    if meta:
        lines.append("[meta]")
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in meta.items()]
        lines.append("")
    for name, section in sections(config).items():
        lines.append(f"[{name}]")
        for f in dataclasses.fields(section):
            lines.append(f"{f.name} = {_toml_value(getattr(section, f.name))}")
        lines.append("")
    return "\n".join(lines)


def write_preset(config: Any, path: Union[str, Path], meta: Optional[Mapping[str, Any]] = None
                 ) -> Path:
    """Write ``config`` (and a ``[meta]`` table of ``meta``) as a TOML preset at ``path``, which
    ``--config`` reads back; returns the path. Written whole or not at all: a tuning run killed
    while writing left a cut preset that the next ``--config`` read as a shorter one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text_whole(path, dumps_toml(config, meta))


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------
def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


#: Other flag names a field's flag also answers to, where tasks spell one setting two ways:
#: the dataset folder is ``--data-root`` in the anomaly tasks and ``--root`` in the graph
#: tasks, and each task takes the other's spelling too (its own stays first in the help).
FLAG_ALIASES: dict[str, tuple[str, ...]] = {"data_root": ("root",), "root": ("data_root",)}


def add_config_arguments(parser: argparse.ArgumentParser, cls: type,
                         base: Optional[Any] = None) -> None:
    """One flag per field of every section of ``cls`` (flag names must be unique), plus
    ``--config FILE`` and ``--quick``. Defaults are suppressed so that only given flags
    override; the help shows the default of ``base`` (a ``cls`` instance; the dataclass
    defaults when ``None``)."""
    parser.add_argument("--config", default=None, metavar="FILE", action="append",
                        help="TOML/YAML preset (one table per section); given again, the "
                             "presets apply in order (a later one overrides an earlier "
                             "one's settings); flags override them all")
    quick = getattr(cls, "QUICK", None)
    parser.add_argument("--quick", action="store_true",
                        help="smoke preset: the smallest run that exercises the whole pipeline"
                             + (f" ({_describe(quick)})" if quick else ""))
    defaults = cls() if base is None else base
    seen: dict[str, str] = {}
    own_flags = {f.metadata.get("flag", f.name) for section_cls in _section_types(cls).values()
                 for f in dataclasses.fields(section_cls)}
    for section_name, section_cls in _section_types(cls).items():
        group = parser.add_argument_group(section_name)
        docs = field_docs(section_cls)
        section_default = getattr(defaults, section_name)
        hints = _hints(section_cls)
        for f in dataclasses.fields(section_cls):
            # A field may name its own flag (metadata "flag") where two sections share a name.
            flag_name = f.metadata.get("flag", f.name)
            if flag_name in seen:
                raise TypeError(
                    f"field {flag_name!r} is in sections {seen[flag_name]!r} and "
                    f"{section_name!r}: flag names must be unique"
                )
            seen[flag_name] = section_name
            default = getattr(section_default, f.name)
            base, optional = _scalar_type(hints[f.name])
            text = docs.get(f.name, "")
            text = f"{text} (default: {default})" if text else f"default: {default}"
            text = text.replace("%", "%%")
            dest = f"{section_name}.{f.name}"
            # (an alias that is another field's own flag stays that field's)
            flags = [_flag(name) for name in (flag_name, *FLAG_ALIASES.get(flag_name, ()))
                     if name == flag_name or name not in own_flags]
            if base is bool:
                group.add_argument(*flags, dest=dest, action=argparse.BooleanOptionalAction,
                                   default=argparse.SUPPRESS, help=text)
            else:
                metavar = {int: "INT", float: "FLOAT", str: "TEXT"}[base]
                parse = _optional_parser(base) if optional else base
                group.add_argument(*flags, dest=dest, type=parse, metavar=metavar,
                                   default=argparse.SUPPRESS, help=text)


def _optional_parser(base: type):
    def parse(text: str):
        return None if text.lower() == NONE_TOKEN else base(text)

    parse.__name__ = base.__name__
    return parse


def _describe(overrides: Mapping[str, Any]) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in overrides.items())


def resolve(cls: type[T], args: argparse.Namespace, base: Optional[T] = None) -> T:
    """The task config from parsed arguments: defaults (``base``, or the dataclass defaults),
    then each ``--config`` file in order, then ``--quick``, then the flags given."""
    config = cls() if base is None else base
    files = getattr(args, "config", None) or []
    paths = [files] if isinstance(files, (str, Path)) else list(files)  # a script may set one
    given = {k: v for k, v in vars(args).items() if "." in k}
    # Every layer's settings first, validated together: a preset with resume = true whose
    # --checkpoint-dir comes as a flag (or from a later preset) was refused on its own.
    layered: dict[str, dict[str, Any]] = {}
    for path in paths:
        try:
            settings = nested_overrides(load_file(path))
            check_names_and_types(config, settings)
        except ValueError as error:  # say which preset is wrong (once: load_file may have)
            message = str(error)
            raise ValueError(message if message.startswith(f"{Path(path)}:")
                             else f"{path}: {message}") from None
        for name, values in settings.items():
            layered.setdefault(name, {}).update(values)
    for key, value in given.items():
        section, name = key.split(".", 1)
        layered.setdefault(section, {})[name] = value
    try:
        config = merge(config, layered)
    except ValueError as error:
        # A tuned preset of a registered model names its plugin in [meta]; run without it,
        # the model is unknown, and the message said only "--plugin MODULE".
        plugins = [(path, meta.get("plugin")) for path in paths
                   for meta in [read_file(path).get("meta") or {}] if meta.get("plugin")]
        if "unknown models" not in str(error) or not plugins:
            raise
        raise ValueError(f"{error}; " + "; ".join(
            f"{path} was tuned with the plugin {plugin}: add --plugin {plugin}"
            for path, plugin in plugins)) from None
    if getattr(args, "quick", False):
        config = merge(config, quick_overrides(config, getattr(cls, "QUICK", {})))
        config = merge(config, given)  # flags win over --quick
    return config


def check_names_and_types(config: Any, nested: Mapping[str, Mapping[str, Any]]) -> None:
    """``ValueError`` for an unknown section or key or a value of the wrong type in ``nested``
    (``{section: {field: value}}``), without the checks that read several fields together:
    one preset of several layers is checked alone, the joined settings in full."""
    current = sections(config)
    _check_sections(nested, current)
    for name, values in nested.items():
        _coerced(type(current[name]), values, name)


def quick_overrides(config: Any, quick: Mapping[str, Any]) -> dict[str, Any]:
    """``--quick``'s values as caps on ``config``: a number already smaller (a preset's 3
    epochs against the smoke run's 10) stays, so ``--quick`` never makes a run bigger; a
    comma list of seeds keeps the preset's first seeds, as many as the quick list has; another
    comma list of integers (generated sizes) keeps the shorter list, element-wise smaller for
    lists of one length; anything else (and a ``None`` = no limit) takes the quick value."""
    out = {}
    for key, value in quick.items():
        current: Any = config
        for part in key.split("."):
            current = getattr(current, part, None)
        out[key] = _smaller(current, value, seeds=key.split(".")[-1] == "seeds")
    return out


def _smaller(current: Any, quick: Any, seeds: bool = False) -> Any:
    numbers_ = (int, float)
    if (isinstance(current, numbers_) and isinstance(quick, numbers_)
            and not isinstance(current, bool) and not isinstance(quick, bool)):
        return min(current, quick)
    if isinstance(current, str) and isinstance(quick, str):
        try:
            mine = [int(v) for v in current.split(",")]
            theirs = [int(v) for v in quick.split(",")]
        except ValueError:
            return quick
        if seeds:  # fewer of the preset's own seeds, not other seeds (and never a duplicate)
            return ",".join(str(v) for v in mine[:len(theirs)])
        if len(mine) != len(theirs):
            return current if len(mine) < len(theirs) else quick
        return ",".join(str(min(a, b)) for a, b in zip(mine, theirs))
    return quick


def check_results_kept(config: Any) -> None:
    """A task's command line: refuse ``--quiet`` without ``--out``. Nothing reads the results
    a command returns (a script or notebook calling ``run()`` does), so the whole run was done,
    printed nothing, kept nothing, and exited 0."""
    run: Any = getattr(config, "run", None)  # (any task's config)
    if getattr(run, "quiet", False) and hasattr(run, "out") and not run.out:
        raise ValueError("--quiet prints nothing and no --out folder is given, so the results "
                         "would be kept nowhere: add --out DIR (or drop --quiet)")


class FlagParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are short: one usage line and the error, with the
    closest flag for a misspelled one (a task's full usage is about 45 lines, and the error
    came last, with no suggestion). Its description is shown as plain text: the module
    docstrings it comes from write reStructuredText (``--help`` showed ``:func:`` roles and
    double backquotes: a CLI audit)."""

    def format_help(self) -> str:
        return plain_text(super().format_help())

    def error(self, message: str) -> NoReturn:
        import difflib

        hint = ""
        if message.startswith("unrecognized arguments:"):
            options = [flag for action in self._actions for flag in action.option_strings
                       if flag.startswith("--")]
            for token in message.partition(":")[2].split():
                close = (difflib.get_close_matches(token.split("=")[0], options, n=1)
                         if token.startswith("--") else [])
                if close:
                    hint = f" (did you mean {close[0]}?)"
                    break
        # (the package's positionals name one value each: no tuple metavar)
        positionals = "".join(
            " " + (cast(Optional[str], action.metavar)
                   or ("{" + ",".join(map(str, action.choices)) + "}"
                       if action.choices else action.dest))
            for action in self._get_positional_actions())
        self.exit(2, f"usage: {self.prog}{positionals} [options]   ({self.prog} --help: every "
                     f"option)\n{self.prog}: error: {message}{hint}\n")


def parse(cls: type[T], argv: Optional[Sequence[str]] = None, prog: Optional[str] = None,
          description: str = "", defaults: Optional[Mapping[str, Any]] = None) -> T:
    """``cls`` from command-line flags. ``defaults`` (``{"section.field": value}``) replace the
    dataclass defaults of a script built on a task, e.g. an example's own dataset; a preset
    (``--config``) and the flags still override them, and ``--help`` shows them."""
    return parse_given(cls, argv, prog, description, defaults)[0]


def parse_given(cls: type[T], argv: Optional[Sequence[str]] = None, prog: Optional[str] = None,
                description: str = "", defaults: Optional[Mapping[str, Any]] = None,
                arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None
                ) -> tuple[T, set[str]]:
    """:func:`parse`, and the ``section.field`` names of the flags given on the command line
    (a task can then say which of them its chosen models never read). ``arguments`` adds the
    task's flags that are not config fields (the task reads them itself)."""
    base = merge(cls(), defaults) if defaults else None
    # No abbreviations: "--ep 7" set epochs, and would set another field once a flag sharing
    # the prefix is added; a preset's command line must mean the same in every release.
    # (prog: from Python the usage named the interpreter's script, ipykernel_launcher.py in a
    # notebook: a notebook audit)
    parser = FlagParser(prog=prog or f"parse({cls.__name__})", description=description,
                        allow_abbrev=False)
    add_config_arguments(parser, cls, base)
    if arguments is not None:
        arguments(parser)
    args = parser.parse_args(argv)
    given = {key for key in vars(args) if "." in key}
    config = resolve(cls, args, base)
    warn_inactive_dependent_flags(config, given)
    if ("run.native_attention" in given and not getattr(args, "run.native_attention")
            and getattr(getattr(config, "run", None), "native_attention", False)):
        # The environment switches the kernels on for every run (documented), so the flag's
        # "no" could never win, and the results recorded them on without a word.
        warnings.warn("ET_GRAPH_NATIVE_ATTENTION in the environment turns the compiled kernels "
                      "on whatever --no-native-attention says: unset it to run without them",
                      ConfigWarning, stacklevel=3)
    return config, given


#: Fields read only when another field of their section has one of some values (a flag given
#: beside another value changed nothing without a word): ``field: (controlling field, values)``.
DEPENDENT_FIELDS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "lr_patience": ("lr_schedule", ("plateau",)),
    "lr_floor": ("lr_schedule", ("cosine",)),
    "label_trick_share": ("label_trick", (True,)),
    "ple_bins": ("feature_norm", ("ple",)),
    # the anomaly protocol's stratified split ("gadbench" reads the dataset's own masks)
    "train_ratio": ("protocol", ("paper",)),
    "split_seed": ("protocol", ("paper",)),
    "vary_split": ("protocol", ("paper",)),
}


def warn_inactive_dependent_flags(config: Any, given: set[str]) -> list[str]:
    """Warn about flags given beside a value of their section that does not read them
    (:data:`DEPENDENT_FIELDS`: ``--lr-patience 3`` with the cosine schedule, ``--ple-bins``
    without ``--feature-norm ple``, ``--split-seed`` under the gadbench protocol). Returns
    those ``section.field`` names, each with the reason."""
    inactive = []
    for key in sorted(given):
        section, _, name = key.partition(".")
        if name not in DEPENDENT_FIELDS:
            continue
        controller, values = DEPENDENT_FIELDS[name]
        part = getattr(config, section, None)
        if not hasattr(part, controller):  # another config's field of the same name
            continue
        value = getattr(part, controller)
        if value not in values:
            wanted = " or ".join(f"{controller}={v!r}" for v in values)
            inactive.append(f"{key} (read by {wanted}, this run's is {value!r})")
    if inactive:
        warnings.warn(f"flags that change nothing: {'; '.join(inactive)}", ConfigWarning,
                      stacklevel=3)
    return inactive


def reading_models(key: str, models: Sequence[str], readers: Mapping[str, Collection[str]]
                   ) -> Collection[str]:
    """The models that read ``section.field`` ``key``: its entry in ``readers``, else its
    section's, else every one of ``models``."""
    return readers.get(key, readers.get(key.split(".")[0], models))


def warn_unread_flags(given: set[str], models: Sequence[str],
                      readers: Mapping[str, Collection[str]]) -> list[str]:
    """Warn about flags given on the command line that no chosen model reads (``--label-trick``
    with ``--models gbt`` ran the trees unchanged without a word). ``readers`` maps a config
    section, or a ``section.field`` where the models of one section differ, to the models that
    read it; what it does not name every model reads. Returns those ``section.field`` names."""
    unread = sorted(key for key in given
                    if not set(reading_models(key, models, readers)) & set(models))
    if unread:
        warnings.warn(f"flags for {', '.join(unread)}: no model of this run reads them "
                      f"(models: {', '.join(models)}); they change nothing, though the config "
                      "records them", ConfigWarning, stacklevel=2)
    return unread


# ----------------------------------------------------------------------------------------------
# Provenance
# ----------------------------------------------------------------------------------------------
def _yaml_loader() -> Any:
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last:
    a second [train] block dropped the first without a word; TOML refuses it too)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is given twice", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def compose_node(self, parent: Any, index: Any) -> Any:
            # An alias repeats its anchor's value: nested ones made a 413-byte preset a 72 MB
            # error message (a security audit), and a preset needs none.
            if self.check_event(yaml.events.AliasEvent):
                raise yaml.composer.ComposerError(
                    None, None, "aliases (*name) are not read in presets: write the value "
                    "itself", self.peek_event().start_mark)
            return super().compose_node(parent, index)

    return UniqueKeyLoader


def _preset_hint(path: Path) -> str:
    """Where a missing ``configs/...`` preset is: the shipped presets live in the repository's
    ``configs/`` folder, which a wheel does not hold, and relative paths start at the working
    directory."""
    if path.is_absolute() or not path.parts or path.parts[0] != "configs":
        return ""
    from .paths import source_checkout

    checkout = source_checkout()
    if checkout is not None and (checkout / path).is_file():
        return f" here; the shipped preset is {checkout / path} (paths start at the working folder)"
    if checkout is None:
        return ("; the shipped presets are in the repository's configs/ folder, which an "
                "installed wheel does not hold: pass the path of a copy")
    return ""


def git_commit(path: Union[str, Path, None] = None) -> str:
    """The git commit of the package's source checkout (or of the repository holding ``path``);
    ``+dirty`` when tracked files differ from it. ``"unknown"`` outside one: an installed wheel
    runs no git at all, since the repository around its ``site-packages`` (a user's project
    with its virtual environment inside) is not the package's."""
    if path is None:
        from .paths import source_checkout

        checkout = source_checkout()
        if checkout is None:
            return "unknown"
        folder = checkout
    else:
        folder = Path(path)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        # (--no-optional-locks: a plain status rewrote .git/index under the user's own git
        # commands' lock: an SRE audit)
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain",
                                "--untracked-files=no"],
                               cwd=folder, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty.strip() else "")


#: The commit of the checkout when et-graph was imported: the code a run executes was loaded
#: then, so a commit made while a long run goes on must not be credited with its results.
_COMMIT_AT_IMPORT: Optional[str] = None


#: Environment variables that change floating-point rounding on the CPU: MKL's conditional
#: numerical reproducibility mode, the vector instruction set of PyTorch's own kernels, and the
#: thread counts (a reduction split over more threads sums in another order).
NUMERICS_ENVIRONMENT = ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _processor_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_metadata() -> dict[str, Any]:
    """What decides the rounding of a run besides the code: the processor, the instruction set
    PyTorch's CPU kernels use, whether MKL is present, the intra-op threads, the GPU (if any)
    and the environment variables of :data:`NUMERICS_ENVIRONMENT` that are set.

    Training turns a last-bit difference into other selected epochs and fold accuracies, for
    ET and the baselines alike (``docs/graph_classification.md``, "What a rounding change
    moves"), so results from two machines are compared with this record beside them.
    """
    import os

    import torch

    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return {
        "processor": _processor_name(),
        "cpu_capability": capability() if capability is not None else "unknown",
        "mkl": bool(torch.backends.mkl.is_available()),
        "threads": torch.get_num_threads(),
        # the GPU in use, only once a run has started CUDA: asking for a name would start it
        # (a context on GPU 0) in CPU runs, and device 0 need not be the run's
        "cuda_device": (torch.cuda.get_device_name(torch.cuda.current_device())
                        if torch.cuda.is_available() and torch.cuda.is_initialized() else None),
        "environment": {k: os.environ[k] for k in NUMERICS_ENVIRONMENT if k in os.environ},
    }


def peak_memory() -> dict[str, Optional[int]]:
    """The process's peak memory so far, in bytes: ``rss_bytes``, the peak resident set (Linux's
    ``VmHWM``; ``ru_maxrss`` elsewhere; ``None`` where neither exists), and ``gpu_bytes``, the
    highest peak of the memory torch allocated on any GPU (``None`` until a run starts CUDA).
    A run from the command line has the process to itself; called from a notebook or a script
    that did other work first, the figure covers that work too."""
    import torch

    rss: Optional[int] = None
    with contextlib.suppress(OSError):  # not Linux
        with open("/proc/self/status", encoding="utf-8") as status:
            rss = next((int(line.split()[1]) * 1024 for line in status
                        if line.startswith("VmHWM:")), None)
    if rss is None:
        with contextlib.suppress(ImportError):  # Windows has neither
            import resource

            # ru_maxrss: bytes on macOS, kibibytes on the other Unixes
            scale = 1 if sys.platform == "darwin" else 1024
            rss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale
    # every GPU's: a run on cuda:1 allocates nothing on the current device (0)
    gpu = (max(int(torch.cuda.max_memory_allocated(device))
               for device in range(torch.cuda.device_count()))
           if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
    return {"rss_bytes": rss, "gpu_bytes": gpu}


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """Around a task runner called from Python: what it sets for its own run (torch's CPU
    thread count, the compiled-kernel switches, the global random states of torch, NumPy and
    Python, CUDA's once up) is given back when it returns or fails. A run pinned the caller's
    process to one thread, left the kernels on and reseeded its random streams."""
    import torch

    from . import native
    from .training.checkpoint import rng_state, set_rng_state

    threads = torch.get_num_threads()
    switches = {key: value for key, value in native._state.items() if isinstance(value, bool)}
    saved = rng_state()  # torch's, NumPy's, Python's, and CUDA's once it is up
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        native._state.update(switches)
        set_rng_state(saved)


def code_identity() -> dict[str, str]:
    """``{"et_graph_version", "git_commit"}`` of the code running (the commit as of import),
    as results, checkpoints and saved detectors record it: a file read back by other code can
    then say whose it is."""
    from . import __version__

    return {"et_graph_version": __version__, "git_commit": _COMMIT_AT_IMPORT or git_commit()}


def utc_now() -> str:
    """The time now in UTC, ISO 8601 to the second (``2026-12-07T09:46:06+00:00``): what
    results, presets and run statuses record."""
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


#: The layout of the files a run writes (``meta.results_format``): raised when a results
#: file's keys change in a way a reader must know (files before session 69 have none).
RESULTS_FORMAT = 1

#: The task (the ``et-graph`` command) whose config a run's ``meta.task`` names.
TASK_OF_CONFIG = {"AnomalyConfig": "anomaly", "UnsupervisedAnomalyConfig": "unsupervised",
                  "TUDatasetConfig": "tudataset", "GNNBenchmarkConfig": "gnnbenchmark",
                  "ImageCompletionConfig": "image"}


def run_metadata(config: Any = None, data: Sequence[Any] = ()) -> dict[str, Any]:
    """The results layout (:data:`RESULTS_FORMAT`), the task of ``config`` (the ``et-graph``
    command's name), the time of writing (UTC, ISO 8601), package version, git commit (as of
    import), torch / PyG / NumPy / scikit-learn versions
    (the trees' binning follows scikit-learn's version), the machine
    (:func:`machine_metadata`), the resolved config, a random ``run_id`` (which the files
    written beside a results file repeat, so that a reader can tell they belong together) and,
    where any were loaded or registered, the plugins and the models they registered
    (:func:`~et_graph.plugins.plugin_record`), without which the run cannot be repeated; and
    the process's peak memory up to this call (:func:`peak_memory`). ``data``, the tensors the
    run read (``None`` allowed), adds their ``data_digest``
    (:func:`~et_graph.training.checkpoint.data_digest`): a data file or dataset folder changed
    on disk between a run and its rerun shows there (it was not recorded: a determinism
    audit)."""
    import platform
    import uuid

    meta = {
        # what a program reading the file needs first: which layout, of which task, when
        "results_format": RESULTS_FORMAT,
        **({"task": TASK_OF_CONFIG.get(type(config).__name__, type(config).__name__)}
           if config is not None else {}),
        "written_at": utc_now(),
        **code_identity(),
        **_running_versions(),
        "python": platform.python_version(),
        "machine": machine_metadata(),
        "run_id": uuid.uuid4().hex,
        "peak_memory": peak_memory(),
    }
    if config is not None:
        meta["config"] = to_dict(config)
    if data:
        from .training.checkpoint import data_digest

        meta["data_digest"] = data_digest(*data)
    # (not imported, nothing loaded or registered: a task need not import the plugin loader)
    loader = sys.modules.get(f"{__package__}.plugins")
    plugins = loader.plugin_record() if loader is not None else {}
    if plugins:
        meta["plugins"] = plugins
    return meta


_COMMIT_AT_IMPORT = git_commit()
