"""Optuna studies with the same budget for every model, stored in a database (the real record).

Each model gets its own study ``{task}-{dataset}-{model}`` in the storage, the same number of
finished trials (complete or pruned; a resumed study counts the trials it already holds) and the
same time limit, a seeded TPE sampler and a median pruner on the validation curves. Killing a
run and starting it again with the same storage continues the same studies.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
import math
import re
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..config import merge, run_metadata, to_dict, write_preset
from ..exceptions import ConfigWarning, FitWarning, OutputWarning
from ..paths import write_text_whole
from ..progress import interactive
from ..reporting import counted, json_text
from ..training.checkpoint import changed_settings


@dataclass
class TuneBudget:
    """The budget every model gets.

    Attributes:
        trials: finished trials per model (complete or pruned), counting earlier runs.
        timeout_minutes: wall-clock limit per model, over every run of its study (a resumed
            study gets what its earlier runs left; studies stored before session 69 count
            from their resume). A trial running when it passes is stopped at its next epoch
            (pruned; a model without epochs, the trees, finishes the trial).
        seed: seed of the TPE sampler.
        prune_warmup: epochs (pruner steps) a trial runs before the median pruner may stop it.
            5 suits 60-epoch runs; a 100-epoch plateau schedule (GNNBenchmark) ranks its trials
            poorly that early.
    """

    trials: int = 20
    timeout_minutes: float = 30.0
    seed: int = 0
    prune_warmup: int = 5

    def __post_init__(self) -> None:
        for name in ("trials", "seed", "prune_warmup"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if self.trials <= 0:
            raise ValueError(f"trials must be positive, got {self.trials}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be in [0, 2**32), got {self.seed}")
        if self.prune_warmup < 0:
            raise ValueError(f"prune_warmup must be >= 0, got {self.prune_warmup}")
        if not 0 < self.timeout_minutes < float("inf"):
            raise ValueError(f"timeout_minutes must be positive and finite, got "
                             f"{self.timeout_minutes}")


#: What a replayed trial returns for a parameter it did not record (see :func:`space_overrides`).
_NOT_RECORDED = object()


class _RecordedTrial:
    """A finished trial replayed through a search space: each ``suggest_*`` returns the value
    the trial recorded, or ``_NOT_RECORDED`` for a parameter it has no value for."""

    def __init__(self, params: dict[str, Any]) -> None:
        self._params = params

    def _recorded(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._params.get(name, _NOT_RECORDED)

    suggest_categorical = suggest_int = suggest_float = _recorded


class _ProbeTrial:
    """A trial that takes every first choice and lowest value (``last=False``), or every last
    choice and highest value: two of them tell which settings a search space sets."""

    def __init__(self, last: bool) -> None:
        self.last = last

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return list(choices)[-1 if self.last else 0]

    def suggest_int(self, name: str, low: int, high: int, **kwargs: Any) -> int:
        return high if self.last else low

    def suggest_float(self, name: str, low: float, high: float, **kwargs: Any) -> float:
        return high if self.last else low


def tuned_fields(trial_config: Callable[[Any], Any]) -> set[str]:
    """The ``section.field`` names of a run config that a study's trials set, where
    ``trial_config(trial)`` is the config a trial runs with: those that differ between a trial
    at every first choice and lowest value and one at every last and highest (none where a
    probe's extreme combination is refused: the check must never stop a study)."""
    try:
        low, high = (_flat(trial_config(_ProbeTrial(last))) for last in (False, True))
    except ValueError:
        return set()
    return {key for key, value in low.items() if high.get(key) != value}


class _OneParameterProbe(_ProbeTrial):
    """Every first choice and lowest value, except parameter ``flipped``'s last choice and
    highest value; it records the names it is asked for."""

    def __init__(self, flipped: Optional[str] = None) -> None:
        super().__init__(last=False)
        self.flipped = flipped
        self.names: list[str] = []

    def _pick(self, name: str, first: Any, last: Any) -> Any:
        self.names.append(name)
        return last if name == self.flipped else first

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._pick(name, list(choices)[0], list(choices)[-1])

    def suggest_int(self, name: str, low: int, high: int, **kwargs: Any) -> int:
        return self._pick(name, low, high)

    def suggest_float(self, name: str, low: float, high: float, **kwargs: Any) -> float:
        return self._pick(name, low, high)


def _flat(config: Any) -> dict[str, Any]:
    return {f"{section}.{name}": value for section, fields in to_dict(config).items()
            if isinstance(fields, dict) for name, value in fields.items()}


def parameter_fields(trial_config: Callable[[Any], Any]) -> dict[str, set[str]]:
    """Each search-space parameter's config fields (``section.field``), where
    ``trial_config(trial)`` is the config a trial runs with: those that move when that
    parameter alone goes from its first choice or lowest value to its last or highest (empty
    where a probe's combination is refused: the check must never stop a study)."""
    first = _OneParameterProbe()
    try:
        base = _flat(trial_config(first))
        fields = {}
        for name in dict.fromkeys(first.names):
            moved = _flat(trial_config(_OneParameterProbe(name)))
            fields[name] = {key for key, value in base.items() if moved.get(key) != value}
    except ValueError:
        return {}
    return fields


def check_replayable(study: Any, storage: Optional[str], trial_config: Callable[[Any], Any],
                     config: Any, setting_defaults: Optional[dict[str, Any]] = None) -> None:
    """``ValueError`` when finished trials of the stored ``study`` predate a parameter of
    today's search space and this run's ``config`` sets that parameter's field to another
    value than they ran with (the study's stored setting, else the field's default in
    ``setting_defaults``). Replayed for the best trial and its preset, such a trial takes the
    run's value (:func:`space_overrides`): an audit resumed a study from before the baselines'
    ``layers`` with ``--baseline-layers 3``, and its preset said 3 layers beside a score of
    two."""
    fields = parameter_fields(trial_config)
    finished = _finished(study)
    missing = sorted(name for name in fields if any(name not in t.params for t in finished))
    if not missing:
        return
    ran_with = {**(setting_defaults or {}), **study.user_attrs.get("settings", {})}
    now = _flat(config)
    wrong = [(key, ran_with[key], now[key]) for name in missing for key in sorted(fields[name])
             if key in ran_with and key in now
             and changed_settings({key: ran_with[key]}, {key: now[key]})]
    if wrong:
        shown = ", ".join(f"{key} = {new!r} (they ran with {old!r})" for key, old, new in wrong)
        where = shown_storage(storage)
        raise ValueError(
            f"study {study.study_name!r} in {where} holds trials from before its search "
            f"space gained {', '.join(repr(name) for name in missing)}; replayed for its best "
            f"trial and preset, they would take this run's {shown}: set it back (or drop the "
            "flag), or use another storage or study prefix")


def warn_tuned_flags(given: set[str], tuned: dict[str, set[str]]) -> list[str]:
    """Warn about command-line flags that a model's study sets in every trial (``tune anomaly
    --models et --hidden 32`` tuned the width anyway, without a word). ``tuned`` maps each
    model to its :func:`tuned_fields`. Returns the warned ``section.field`` names."""
    named = sorted(key for key in given if any(key in fields for fields in tuned.values()))
    if named:
        which = "; ".join(f"{key} (tuned for {', '.join(m for m in tuned if key in tuned[m])})"
                          for key in named)
        warnings.warn(f"flags that a study sets in every trial: {which}; that study's trials "
                      "never use the flag's value", ConfigWarning, stacklevel=2)
    return named


def _without_unrecorded(overrides: dict[str, Any]) -> dict[str, Any]:
    return {key: _without_unrecorded(value) if isinstance(value, dict) else value
            for key, value in overrides.items() if value is not _NOT_RECORDED}


def space_overrides(space: Callable[[Any], dict[str, Any]], trial: Any) -> dict[str, Any]:
    """The config overrides ``space(trial)`` of a live trial or of a finished one.

    A finished (frozen) trial gives back the values it recorded. A parameter that the search
    space gained after the trial ran (``max_features`` joined GBT's space after studies had
    run; resuming such a study used to fail at its best trial) is left out, so the config keeps
    its base value: the value that trial ran with. Re-suggesting through the space would
    instead raise, and a recorded value outside a later range is still what the trial used.
    """
    from optuna.trial import FrozenTrial

    if isinstance(trial, FrozenTrial):
        return _without_unrecorded(space(_RecordedTrial(dict(trial.params))))
    return space(trial)


def apply_space(config: Any, space: Callable[[Any], dict[str, Any]], trial: Any) -> Any:
    """``config`` with ``trial``'s suggestions from ``space`` (whose overrides name the config's
    own sections) merged in; ``trial=None``: ``config`` itself."""
    return config if trial is None else merge(config, space_overrides(space, trial))


def with_switch(space: Callable[[Any], dict[str, dict[str, Any]]], section: str, name: str,
                choices: Sequence[Any]) -> Callable[[Any], dict[str, dict[str, Any]]]:
    """``space`` plus one categorical: the trial parameter ``name``, drawn from ``choices``, set
    at ``section.name`` of the overrides (a switch every model of a study gets, one each, so
    that the budgets stay equal)."""
    options = list(choices)

    def switched(trial: Any) -> dict[str, dict[str, Any]]:
        overrides = space(trial)
        overrides.setdefault(section, {})[name] = trial.suggest_categorical(name, options)
        return overrides

    return switched


#: The monotonic time at which the running study's time limit passes (set by
#: :func:`run_study` around its trials; ``None`` outside one).
_DEADLINE: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar(
    "et_graph_tuning_deadline", default=None)

#: The user attribute of a trial stopped because the study's time limit passed.
STOPPED_BY_TIME = "stopped_by_time_limit"


def pruning_callback(trial: Any, metric: str) -> Callable[[int, Any], None]:
    """An engine ``on_epoch`` hook: report each epoch's validation ``metric`` (its score when
    the metrics lack it) to Optuna's pruner, and stop a hopeless trial, or one still running
    when the study's time limit passes (Optuna checks its limit only between trials: a
    tuning audit saw a 3 s limit overrun by an 18 s trial). That one is pruned and marked
    with the user attribute :data:`STOPPED_BY_TIME`."""
    optuna = _optuna()

    def report(epoch: int, validation: Any) -> None:
        value = validation.metrics.get(metric, validation.score)
        trial.report(float(value), epoch)
        stop_at_deadline(trial, f"epoch {epoch}")
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned at epoch {epoch}")

    return report


def stop_at_deadline(trial: Any, where: str) -> None:
    """Stop ``trial`` (pruned, marked :data:`STOPPED_BY_TIME`) when the running study's time
    limit has passed; nothing outside :func:`run_study`. For objectives that call it at their
    own steps (a fold, a seed's epochs), as :func:`pruning_callback` does at each epoch."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline:
        trial.set_user_attr(STOPPED_BY_TIME, True)
        raise _optuna().TrialPruned(f"stopped at {where}: the time limit passed")


def deadline_callback(trial: Any) -> Callable[[int, Any], None]:
    """An engine ``on_epoch`` hook that only stops ``trial`` at the time limit (for the runs of
    a trial the pruner does not read: a later model seed)."""
    def check(epoch: int, validation: Any) -> None:
        stop_at_deadline(trial, f"epoch {epoch}")

    return check


def _optuna():
    try:
        import optuna
    except ImportError as error:  # pragma: no cover - optuna is a declared dependency
        raise ImportError("et-graph tune needs optuna: pip install optuna") from error
    return optuna


class _NoInterruptedTrial(logging.Filter):
    """Drops Optuna's records of a trial ended by Ctrl-C ("Trial N failed ...
    KeyboardInterrupt()" with a torch traceback, then "Trial N failed with value None."),
    printed before the command's one line "interrupted" (a CLI audit)."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        message = record.getMessage()
        trial = message.split(" failed", 1)[0] if message.startswith("Trial ") else None
        if isinstance(error, KeyboardInterrupt):
            if trial is not None:
                self.interrupted.add(trial)
            return False
        return trial is None or trial not in self.interrupted


#: Where Optuna logs a failed trial.
_TRIAL_LOGGER = "optuna.study._optimize"


def _quiet_optuna(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with Optuna's INFO lines (one per trial) silenced, and the caller's Optuna log
    level given back afterwards (it was left at WARNING for the whole process); a trial ended
    by Ctrl-C is not logged (the command says "interrupted")."""
    @functools.wraps(fn)
    def quiet(*args: Any, **kwargs: Any) -> Any:
        optuna = _optuna()
        level = optuna.logging.get_verbosity()
        # quieter, never louder than the caller set it (ERROR printed WARNING's tracebacks: a
        # logging audit)
        optuna.logging.set_verbosity(max(level, optuna.logging.WARNING))
        interrupted = _NoInterruptedTrial()
        logging.getLogger(_TRIAL_LOGGER).addFilter(interrupted)
        try:
            return fn(*args, **kwargs)
        finally:
            logging.getLogger(_TRIAL_LOGGER).removeFilter(interrupted)
            optuna.logging.set_verbosity(level)
    return quiet


@_quiet_optuna
def run_study(name: str, objective: Callable[[Any], float], budget: TuneBudget,
              storage: Optional[str], progress: bool = True, direction: str = "maximize",
              objective_label: str = "", settings: Optional[dict[str, Any]] = None,
              setting_defaults: Optional[dict[str, Any]] = None) -> Any:
    """Create or load study ``name`` and run trials until it holds ``budget.trials`` finished
    trials or ``budget.timeout_minutes`` have passed. ``direction``: ``"maximize"`` or
    ``"minimize"`` (an error such as MAE). ``storage=None`` keeps the study in memory.

    ``objective_label`` names what the trials measure (e.g. ``"validation auprc"``); it is
    stored with the study, and resuming a study under another label or direction raises, since
    its old values would be reported as the new objective's; so does resuming it under another
    ``budget.prune_warmup`` (its trials were pruned under the stored one). ``settings`` (the
    fixed, untuned config as a flat ``{name: value}``) is stored the same way: resuming under
    other fixed settings raises, naming them, since the old trials were scored under the old
    ones; a setting the stored study lacks (added to the library after it ran) counts as its
    value in ``setting_defaults``, the one the older code ran with. If as many trials fail in
    a row (a diverging loss) as the budget has trials, the run stops with a warning rather
    than starting failing trials until the time limit."""
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    optuna = _optuna()
    # A resumed study gets a sampler seeded past its finished trials, so that its random
    # start-up trials do not repeat the ones it already holds: a search stopped and resumed
    # is another search than one run straight through, and each trial records the seed its
    # sampler had (user attribute "sampler_seed"; a determinism audit found it unrecorded).
    existing = study_or_none(name, storage)
    if existing is not None:
        check_resumable(existing, storage, direction, objective_label, settings,
                        setting_defaults, budget.prune_warmup, budget.seed)
        _warn_running_trials(existing, storage)
    sampler_seed = budget.seed + len(_finished(existing))
    with _storage_errors(storage):
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            load_if_exists=True,
            direction=direction,
            sampler=optuna.samplers.TPESampler(seed=sampler_seed,
                                               n_startup_trials=TPE_STARTUP_TRIALS),
            pruner=optuna.pruners.MedianPruner(n_startup_trials=3,
                                               n_warmup_steps=budget.prune_warmup),
        )
        _record_study_attributes(study, existing, budget, objective_label, settings)
    remaining = budget.trials - len(_finished(study))
    spent = float(study.user_attrs.get(SECONDS_SPENT, 0.0))
    left = budget.timeout_minutes * 60 - spent

    def recorded(trial: Any) -> Any:
        trial.set_user_attr("sampler_seed", sampler_seed)
        try:
            return objective(trial)
        except KeyboardInterrupt:
            # Optuna stores an interrupted trial as FAIL, as a diverged one: the report counts
            # it as unfinished (a tuning audit); a storage that fails here must not turn the
            # Ctrl-C into its own error (a review)
            with contextlib.suppress(Exception):
                trial.set_user_attr(INTERRUPTED, True)
            raise

    if remaining > 0 and left <= 0:
        warnings.warn(f"study {name!r}: its earlier runs spent its time limit ({spent:.0f} s "
                      f"of {budget.timeout_minutes * 60:.0f} s), so no trial runs; raise "
                      "--timeout-minutes to continue it", ConfigWarning, stacklevel=3)
    elif remaining > 0:
        failures = _FailureLimit(budget.trials)
        deadline = _DEADLINE.set(time.monotonic() + left)
        start = time.perf_counter()
        stopped: Optional[BaseException] = None
        try:
            study.optimize(
                recorded,
                timeout=left,
                # (Optuna's MaxTrialsCallback counted a trial the time limit cut, which no
                # budget counts: a resumed study stopped one trial short, a review)
                callbacks=[_BudgetReached(budget.trials), failures],
                # Optuna's own tqdm bar redraws in place: on a terminal only, not in a log
                show_progress_bar=progress and interactive(sys.stderr),
                # a diverged trial, or one too large for the memory (a trial's size is a
                # setting like any other), fails alone; other errors stop the study
                catch=(FloatingPointError, MemoryError),
            )
        except BaseException as error:
            stopped = error
            raise
        finally:
            _DEADLINE.reset(deadline)
            # every run's time counts, an interrupted one's too: a study stopped and resumed
            # got a fresh limit each time (a tuning audit)
            try:
                with _storage_errors(storage):
                    study.set_user_attr(SECONDS_SPENT, spent + time.perf_counter() - start)
            except ValueError as error:
                if stopped is None:
                    raise
                # (the error in flight, a Ctrl-C say, is the one to report: a review)
                warnings.warn(f"study {name!r}: this run's seconds were not recorded "
                              f"({error})", OutputWarning, stacklevel=3)
        if failures.stopped:
            warnings.warn(f"study {name!r}: {failures.limit} trials in a row failed (non-finite "
                          "loss or objective, or out of memory); stopped instead of running "
                          "to the time limit", FitWarning, stacklevel=2)
    return study


#: Optuna's TPE draws its first trials at random (its ``n_startup_trials``): a 12-trial study
#: is mostly random search, which the report says.
TPE_STARTUP_TRIALS = 10

#: The study's user attribute of the seconds its runs spent (the time limit binds their sum).
SECONDS_SPENT = "seconds_spent"
#: A trial's user attribute when Ctrl-C ended it.
INTERRUPTED = "interrupted"


def _record_study_attributes(study: Any, existing: Optional[Any], budget: TuneBudget,
                             objective_label: str, settings: Optional[dict[str, Any]]) -> None:
    """What a later resume of ``study`` is checked against (:func:`check_resumable`)."""
    # (a study that existed was checked above; one created now holds nothing to compare)
    if objective_label and study.user_attrs.get("objective") is None:
        study.set_user_attr("objective", objective_label)
    if existing is None or (study.user_attrs.get("prune_warmup") is not None
                            and not judged_by_pruner(existing)):
        # Recorded at creation, and again where no stored trial ever reported to the pruner
        # (the trees' never do): the warm-up its trials are judged under starts now. A study
        # from before this record keeps none: its trials may have been pruned under another
        # warm-up, which resuming it must not claim to know.
        study.set_user_attr("prune_warmup", budget.prune_warmup)
    if settings is not None:
        # Recorded with what this run adds (a data digest a study from an older version
        # lacks), so that a later resume compares those too.
        study.set_user_attr("settings", {**study.user_attrs.get("settings", {}), **settings})
    if study.user_attrs.get(SAMPLER_SEED) is None and not _finished(existing):
        # (a study stored before this record, with trials, keeps none: its seed is unknown)
        study.set_user_attr(SAMPLER_SEED, budget.seed)


#: The study's user attribute of its sampler's base seed (``--sampler-seed``).
SAMPLER_SEED = "sampler_base_seed"


def shown_storage(storage: Optional[str]) -> str:
    """``storage`` as a preset records it: a database password masked (``***``), an SQLite
    file's relative path written out from the working folder (the default
    ``sqlite:///runs/tune.db`` named no folder: a preset or report read later, from elsewhere,
    did not say where its study is)."""
    if storage is None:
        return "in memory"
    sqlite = re.match(r"sqlite(\+\w+)?:///", storage)
    if sqlite:  # (no password to mask; SQLAlchemy's rendering wrote a path's ":" as %3A)
        prefix = sqlite.group(0)
        path, separator, options = storage[len(prefix):].partition("?")
        # (a "~" is left as given: SQLAlchemy does not expand it, and the tuner refuses it)
        if path and not path.startswith(("file:", ":memory:", "~")) \
                and not Path(path).is_absolute():
            return f"{prefix}{Path.cwd() / path}{separator}{options}"
        return storage
    try:
        from sqlalchemy.engine import make_url

        return make_url(storage).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: nothing in it to mask
        return storage


def _warn_running_trials(study: Any, storage: Optional[str]) -> None:
    """A ``ConfigWarning`` when ``study`` holds trials still marked running: another process
    tuning it now (whose sampler, seeded by the finished trials as this one's, draws the same
    trials: a tuning audit saw identical pairs and one trial over the budget), or a run killed
    without Ctrl-C, whose trials stay marked running and count toward no budget."""
    running = [t.number for t in study.get_trials(deepcopy=False)
               if t.state == _optuna().trial.TrialState.RUNNING]
    if running:
        warnings.warn(f"study {study.study_name!r} in {shown_storage(storage)} holds "
                      f"{len(running)} trial(s) marked running "
                      f"({', '.join(map(str, running[:5]))}): if another "
                      "process is tuning it now, its trials and this run's repeat each other "
                      "(run one process per study); if a killed run left them, they count "
                      "toward no budget", ConfigWarning, stacklevel=4)


@contextlib.contextmanager
def _storage_errors(storage: Optional[str], doing: str = "written") -> Iterator[None]:
    """SQLAlchemy's errors of a storage as one ``ValueError`` naming it, which cannot be
    ``doing`` (``"opened"``: a folder, a file that is no database or a locked one, a CLI
    audit; ``"written"``: one that opens but cannot be written, read-only or full, whose
    traceback of a hundred lines ended in Optuna's "exceeding max length", a tuning audit).
    The line says SQLAlchemy's own message, or, under Optuna's wrapper, its cause's."""
    try:
        yield
    except Exception as error:
        own = type(error).__module__.startswith("sqlalchemy")
        if not (own or type(error).__module__.startswith("optuna.exceptions")):
            raise
        cause = error if own else (error.__cause__ or error.__context__ or error)
        text = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        raise ValueError(f"storage {shown_storage(storage)!r} cannot be {doing} as an Optuna "
                         f"database: {text}") from None


def judged_by_pruner(study: Any) -> bool:
    """Whether any stored trial of ``study`` reported an intermediate value, so that the pruner
    judged it under the study's warm-up (trials of the trees report none)."""
    return any(trial.intermediate_values for trial in study.get_trials(deepcopy=False))


def check_resumable(study: Any, storage: Optional[str], direction: str, objective_label: str,
                    settings: Optional[dict[str, Any]],
                    setting_defaults: Optional[dict[str, Any]] = None,
                    prune_warmup: Optional[int] = None,
                    sampler_seed: Optional[int] = None) -> None:
    """``ValueError`` when the stored ``study`` cannot be continued by this run: another
    direction or objective, another pruner warm-up (``prune_warmup``), or other fixed
    ``settings`` than its trials were scored under.
    Only settings both record are compared: one the study lacks (added to the library since)
    counts as its value in ``setting_defaults`` or, without one, is not compared; one this run
    no longer records (no trial reads it) is not compared either. A study stored before the
    warm-up was recorded resumes under any warm-up (its own is unknown); under another
    ``sampler_seed`` (``--sampler-seed``) than it recorded, it is refused: its report would
    name the new seed for trials drawn under the old one (a tuning audit)."""
    name, where = study.study_name, shown_storage(storage)
    stored_seed = study.user_attrs.get(SAMPLER_SEED)
    if sampler_seed is not None and stored_seed is not None and stored_seed != sampler_seed:
        raise ValueError(f"study {name!r} in {where} was drawn with --sampler-seed "
                         f"{stored_seed}, not {sampler_seed}: resume with --sampler-seed "
                         f"{stored_seed}, or use another storage or study prefix")
    if study.direction.name.lower() != direction:
        raise ValueError(f"study {name!r} in {where} was created to "
                         f"{study.direction.name.lower()}, not to {direction}: use another "
                         "storage or study prefix")
    stored = study.user_attrs.get("objective")
    if objective_label and stored is not None and stored != objective_label:
        raise ValueError(f"study {name!r} in {where} holds trials of another objective "
                         f"({stored!r}, not {objective_label!r}); its values would be reported "
                         "as this one's: use another storage or study prefix")
    stored_warmup = study.user_attrs.get("prune_warmup")
    # (a study none of whose trials reported to the pruner, as the trees', was judged under no
    # warm-up: it resumes under any; it was refused under another)
    if (prune_warmup is not None and stored_warmup is not None and stored_warmup != prune_warmup
            and judged_by_pruner(study)):
        raise ValueError(f"study {name!r} in {where} was pruned with --prune-warmup "
                         f"{stored_warmup}, not {prune_warmup}; its trials would mix two pruning "
                         f"rules: resume with --prune-warmup {stored_warmup}, or use another "
                         "storage or study prefix")
    before = study.user_attrs.get("settings")
    if settings is None or before is None:
        return
    before = {**{k: v for k, v in (setting_defaults or {}).items() if k not in before}, **before}
    shared = [key for key in settings if key in before]
    changed = changed_settings({k: before[k] for k in shared}, {k: settings[k] for k in shared})
    if changed:
        shown = ", ".join(f"{k}: {before.get(k)!r} -> {settings.get(k)!r}" for k in changed[:5])
        raise ValueError(f"study {name!r} in {where} was run under other fixed settings "
                         f"({shown}); its trials were scored under those: use another "
                         "storage or study prefix")


class _BudgetReached:
    """Stops a study once it holds ``trials`` finished trials, counted as :func:`_finished`
    counts them (without the trials the time limit cut)."""

    def __init__(self, trials: int) -> None:
        self.trials = trials

    def __call__(self, study: Any, trial: Any) -> None:
        if len(_finished(study)) >= self.trials:
            study.stop()


class _FailureLimit:
    """Stops a study after ``limit`` failed trials in a row (optuna's trial-count callback
    counts only finished trials, so a diverging model would otherwise fail until the time
    limit, thousands of trials in a minute)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_a_row = 0
        self.stopped = False

    def __call__(self, study: Any, trial: Any) -> None:
        # optuna records an exception caught by `catch` and a NaN objective alike as FAIL
        failed = trial.state == _optuna().trial.TrialState.FAIL
        self.in_a_row = self.in_a_row + 1 if failed else 0
        if self.in_a_row >= self.limit:
            self.stopped = True
            study.stop()


@_quiet_optuna
def study_or_none(name: str, storage: Optional[str]) -> Optional[Any]:
    optuna = _optuna()
    with _storage_errors(storage, "opened"):
        try:
            return optuna.load_study(study_name=name, storage=storage)
        except KeyError:
            return None


def _finished(study: Optional[Any]) -> list[Any]:
    """The trials that count toward the budget: complete, or pruned by the pruner. One cut by
    the time limit never finished (the limit ended the run, not the pruner): it counts toward
    no budget, so a study resumed with more time runs a trial in its place (a review)."""
    if study is None:
        return []
    optuna = _optuna()
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return [t for t in study.get_trials(deepcopy=False, states=states)
            if not t.user_attrs.get(STOPPED_BY_TIME)]


def best_within_budget(study: Any, budget_trials: Optional[int] = None) -> Any:
    """The best complete trial among the study's first ``budget_trials`` finished ones (complete
    or pruned, by trial number; every one without a budget), or ``None``. A study resumed with
    a smaller ``--trials`` kept its later trials, and the best of all of them went into the
    table beside models held to the budget (a tuning audit: ET's best was its 7th trial of a
    6-trial budget). Ties go to the trial with the lower validation loss where the objective
    records one (the user attribute :data:`VALIDATION_LOSS`, as graph classification's does:
    the rule that breaks an epoch's tie), then to the earlier trial."""
    return _best_among(study, complete_within_budget(study, budget_trials))


def _best_among(study: Any, complete: list[Any]) -> Any:
    """:func:`best_within_budget`'s choice among the ``complete`` trials of ``study``."""
    optuna = _optuna()
    if not complete:
        return None
    sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0

    def rank(trial: Any) -> tuple[float, float, int]:
        loss = trial.user_attrs.get(VALIDATION_LOSS)
        # (a trial without a finite recorded loss, one from before say, ranks after an equal
        # one with it)
        known = isinstance(loss, (int, float)) and math.isfinite(loss)
        return (sign * trial.value, -float(loss) if known else -math.inf, -trial.number)

    return max(complete, key=rank)


def complete_within_budget(study: Any, budget_trials: Optional[int]) -> list[Any]:
    """The complete trials among the study's first ``budget_trials`` finished ones (complete
    or pruned, by trial number; a trial the time limit cut never finished): the trials
    :func:`best_within_budget` chooses among."""
    optuna = _optuna()
    counted = sorted(_finished(study), key=lambda t: t.number)[:budget_trials]
    return [t for t in counted if t.state == optuna.trial.TrialState.COMPLETE]


def tied_at_best(study: Any, budget_trials: Optional[int] = None) -> int:
    """How many of the trials :func:`best_within_budget` chose among share the best value (1:
    no tie; 0: no complete trial). Above 1, the tie rule chose, not the objective: on small
    validation splits, often."""
    return _best_and_ties(study, budget_trials)[1]


def _best_and_ties(study: Any, budget_trials: Optional[int]) -> tuple[Any, int]:
    """``(best_within_budget, tied_at_best)`` from one read of the study's trials."""
    complete = complete_within_budget(study, budget_trials)
    best = _best_among(study, complete)
    return best, 0 if best is None else sum(t.value == best.value for t in complete)


#: A trial's user attribute of its validation loss, which breaks ties of the objective
#: (:func:`best_within_budget`): on small validation splits accuracies tie (on MUTAG's 17
#: inner validation graphs, 4 to 16 of 16 ET trials per fold shared the best accuracy, and
#: the first trial won every fold).
VALIDATION_LOSS = "validation_loss"


def _all_runs(study: Any, seconds: float) -> Optional[float]:
    """The seconds every run of ``study`` spent, never less than this run's ``seconds`` (the
    caller's clock starts before the study's own, so a first run showed less in all runs than
    in itself: an output audit); ``None`` for a study stored before they were recorded."""
    spent = study.user_attrs.get(SECONDS_SPENT)
    return None if spent is None else max(float(spent), seconds)


def study_summary(study: Any, seconds: float,
                  budget_trials: Optional[int] = None) -> dict[str, Any]:
    """The study's trial counts, its best trial within the budget
    (:func:`best_within_budget`) and its history, for the report."""
    optuna = _optuna()
    trials = study.get_trials(deepcopy=False)
    count = {state.name.lower(): sum(t.state == state for t in trials)
             for state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
                           optuna.trial.TrialState.FAIL, optuna.trial.TrialState.RUNNING)}
    # A trial Ctrl-C ended is stored as failed: counted as unfinished, as a killed run's
    interrupted = sum(t.state == optuna.trial.TrialState.FAIL and t.user_attrs.get(INTERRUPTED)
                      for t in trials)
    count["fail"] -= interrupted
    count["interrupted"] = interrupted
    # A trial the time limit cut is stored as pruned: counted as unfinished (no budget)
    # (only a pruned one: a Ctrl-C between the mark and the prune left a failed trial
    # marked, counted twice: a review)
    count["stopped_by_time_limit"] = sum(t.state == optuna.trial.TrialState.PRUNED
                                         and bool(t.user_attrs.get(STOPPED_BY_TIME))
                                         for t in trials)
    count["pruned"] -= count["stopped_by_time_limit"]
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    best, tied = _best_and_ties(study, budget_trials)
    return {
        "study": study.study_name,
        "trials": count,
        "trial_numbers": [t.number for t in trials],
        "direction": study.direction.name.lower(),
        "best_value": best.value if best else None,
        "best_trial": best.number if best else None,
        "best_params": best.params if best else {},
        # trials sharing the best value: above 1, the tie rule chose among them
        "tied_at_best": tied,
        "seconds_this_run": seconds,
        # every run's, which the time limit binds (None: a study stored before session 69
        # that this run did not continue)
        "seconds_all_runs": _all_runs(study, seconds),
        # the warm-up its trials were pruned under (None: stored before it was recorded)
        "prune_warmup": study.user_attrs.get("prune_warmup"),
        "history": [(t.number, t.value) for t in complete],
        # a pruned trial's last reported validation value, drawn beside the finished ones
        "pruned_history": [(t.number, t.intermediate_values[max(t.intermediate_values)])
                           for t in trials if t.state == optuna.trial.TrialState.PRUNED
                           and t.intermediate_values],
    }


def write_report(out: Path, task: str, dataset: str, metric: str, budget: TuneBudget,
                 summaries: dict[str, dict[str, Any]], presets: dict[str, Path],
                 config: Any, pruning: Optional[str] = None,
                 labels_read: str = "test labels are never read") -> None:
    """``study_report.{json,md}`` and ``optimization_history.png`` under ``out``; ``pruning``
    says how the pruner acts when a task's steps are not epochs, ``labels_read`` which labels
    the trials read."""
    pruning = pruning or f"median pruning after {budget.prune_warmup} epochs"
    out.mkdir(parents=True, exist_ok=True)
    report = {"task": task, "dataset": dataset, "metric": f"validation {metric}",
              "labels_read": labels_read, "budget": to_dict_budget(budget),
              "models": summaries, "presets": {k: str(v) for k, v in presets.items()},
              # (the task's results name the task; a study report names itself so)
              "meta": {**run_metadata(config), "task": f"tune {task}"}}
    # strict, as every results file: a diverged trial's inf was written as Infinity
    write_text_whole(out / "study_report.json", json_text(report, default=str))
    trees = ("; a model without epochs (the trees) is never pruned, so it completes every "
             "trial" if "gbt" in summaries else "")
    held = {s["trials"]["complete"] + s["trials"]["pruned"] for s in summaries.values()}
    resumed = ""
    if any(count > budget.trials for count in held):
        resumed += (" Some studies hold more finished trials than the budget (a study resumed "
                    "with a smaller --trials keeps its later trials): the best is chosen among "
                    "each study's first trials up to the budget, and the later ones are not "
                    "chosen.")
    if any(count < budget.trials for count in held):
        resumed += (" Some studies hold fewer finished trials than the budget: the time limit "
                    "(or failures) stopped them first; the table counts them.")
    unknown = sorted(model for model, s in summaries.items()
                     if "prune_warmup" in s and s["prune_warmup"] is None)
    if unknown:
        resumed += (f" The studies of {', '.join(unknown)} were stored before the pruner's "
                    "warm-up was recorded: their earlier trials may have been pruned under "
                    "another warm-up.")
    lines = [f"# Tuning: {task} on {dataset}", "",
             f"Objective: validation {metric} ({labels_read}). Budget per model: "
             f"{counted(budget.trials, 'finished trial')}, {budget.timeout_minutes:g} min "
             "over every run of its study, TPE "
             f"(seed {budget.seed}; its first {min(budget.trials, TPE_STARTUP_TRIALS)} trials "
             f"are drawn at random, Optuna's start-up), {pruning}. Pruned trials count toward "
             f"the trial budget{trees}; the time limit binds each model alone, over every run "
             "of its study, so a slower model may finish fewer (the table counts them); a "
             "trial still running when it passes is stopped at its next epoch (a model "
             f"without epochs finishes it).{resumed} \"unfinished\" counts trials that never "
             "ended (cut by the time limit, in brackets, or a run killed or interrupted during "
             "them); they count toward no budget.", "",
             "| model | complete | pruned | failed | unfinished (at the limit) | best "
             "validation | best trial (trials tied at the best) | time this run / all runs "
             "recorded (s) | preset |",
             "|---|---|---|---|---|---|---|---|---|"]
    for model, s in summaries.items():
        best = "n/a" if s["best_value"] is None else f"{s['best_value']:.4f}"
        trials = s["trials"]
        at_limit = trials.get("stopped_by_time_limit", 0)
        unfinished = trials.get("running", 0) + trials.get("interrupted", 0) + at_limit
        total = s.get("seconds_all_runs")
        tied = s.get("tied_at_best", 1)
        lines.append(f"| {model} | {trials['complete']} | {trials['pruned']} | "
                     f"{trials['fail']} | {unfinished}{f' ({at_limit})' if at_limit else ''} | "
                     f"{best} | {'n/a' if s['best_trial'] is None else s['best_trial']}"
                     f"{f' ({tied} tied)' if tied > 1 else ''} | "
                     f"{s['seconds_this_run']:.0f} / "
                     f"{'n/a' if total is None else f'{total:.0f}'} | "
                     f"{presets.get(model, '')} |")
    if any(s.get("tied_at_best", 1) > 1 for s in summaries.values()):
        lines += ["", "Where trials tied at the best validation value, the one with the lower "
                  "validation loss was chosen where the objective records one, else the "
                  "earlier trial: the validation split did not tell them apart."]
    lines += ["", "Best settings (the config's names, as the presets write them):", ""]
    lines += [f"- {model}: `{json.dumps(s.get('best_settings', s['best_params']))}`"
              for model, s in summaries.items()]
    write_text_whole(out / "study_report.md", "\n".join(lines) + "\n")
    plot_history(out / "optimization_history.png", summaries, metric, f"{task} on {dataset}",
                 builtin_models(task))


def builtin_models(task: str) -> Optional[tuple[str, ...]]:
    """The built-in model names of tuner ``task`` (``None`` for another task): only they hold
    their names' fixed colours in the figures."""
    if task == "anomaly":
        from ..detectors.registry import builtin_names

        return builtin_names()
    if task == "tudataset":
        from ..protocols.graph_models import builtin_graph_models

        return builtin_graph_models()
    if task == "gnnbenchmark":
        from ..protocols.benchmark_models import builtin_benchmark_models

        return builtin_benchmark_models()
    return None


def to_dict_budget(budget: TuneBudget) -> dict[str, Any]:
    return {"trials": budget.trials, "timeout_minutes": budget.timeout_minutes,
            "seed": budget.seed, "prune_warmup": budget.prune_warmup}


def plot_history(path: Path, summaries: dict[str, dict[str, Any]], metric: str,
                 title: str = "", builtin: Optional[tuple[str, ...]] = None) -> None:
    """Each model's finished trials (dots), its best so far (steps) and its pruned trials at
    their last reported value (crosses): leaving those out showed a model with half its
    trials pruned as one that had half the budget. Only the ``builtin`` models (all, when
    ``None``) hold their names' fixed colours."""
    from ..plots.colours import model_colour
    from ..plots.figures import own_figures

    plt = own_figures()

    fig, ax = plt.subplots(figsize=(7, 4))
    names = tuple(summaries)
    directions = set()
    for model, s in summaries.items():
        colour = model_colour(model, names, builtin)
        directions.add(s.get("direction", "maximize"))
        pruned = s.get("pruned_history") or []
        if pruned:
            numbers, values = zip(*pruned)
            ax.plot(numbers, values, "x", color=colour, alpha=0.6, ms=5,
                    label=f"{model}: {len(pruned)} pruned (last value)")
        if not s["history"]:
            continue
        numbers, values = zip(*s["history"])
        better = min if s.get("direction") == "minimize" else max
        best = [better(values[: k + 1]) for k in range(len(values))]
        ax.plot(numbers, values, "o", color=colour, alpha=0.4, ms=4)
        ax.step(numbers, best, where="post", color=colour,
                label=f"{model}: {len(values)} complete, best so far")
    better_word = ({"minimize": "lower", "maximize": "higher"}.get(directions.pop())
                   if len(directions) == 1 else None)
    ax.set(xlabel="trial", ylabel=f"validation {metric}" + (
        f" ({better_word} is better)" if better_word else ""),
           title="Optimisation history" + (f": {title}" if title else ""))
    ax.xaxis.get_major_locator().set_params(integer=True)  # no trial 2.5
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: Fields of a config's ``data`` section that name files or folders.
DATA_PATH_FIELDS = ("data", "data_root", "root", "cache")


def absolute_data_paths(config: Any) -> Any:
    """``config`` with relative data paths that exist made absolute: a preset written by a study
    is run later from anywhere, where ``files/graph.npz`` would name nothing."""
    section = getattr(config, "data", None)
    changes = {}
    for name in DATA_PATH_FIELDS:
        value = getattr(section, name, None)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            if Path(value).expanduser().exists():
                changes[f"data.{name}"] = str(Path(value).expanduser().resolve())
    return merge(config, changes) if changes else config


def save_best_preset(path: Path, config: Any, meta: dict[str, Any]) -> Path:
    return write_preset(absolute_data_paths(config), path,
                        meta={k: v for k, v in meta.items()
                              if isinstance(v, (str, int, float, bool))})
