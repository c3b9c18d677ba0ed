"""``et-graph tune TASK``: the same Optuna budget for every model, on validation data only.

    et-graph tune anomaly --config configs/anomaly/tolokers.toml --trials 20 \\
        --timeout-minutes 30 --storage sqlite:///runs/tolokers.db --models et,gbt --out runs/tune
    et-graph tune tudataset --dataset NCI1 --models et,gin --trials 10 --tune-folds 3 \\
        --storage sqlite:///runs/nci1.db --out runs/tune-nci1
    et-graph tune gnnbenchmark --config configs/gnnbenchmark/zinc_proxy_long_rwpe.toml \\
        --models et,gin,gatedgcn --trials 16 --storage sqlite:///runs/zinc.db --out runs/tune-zinc

``--models`` names the models to tune; the task's other flags (``--epochs 50``,
``--dataset reddit``) override ``--config``. Per model, the best trial is written as a preset
(``OUT/best_<model>.toml``) that ``et-graph TASK --config`` runs; ``OUT/study_report.md`` and
``OUT/optimization_history.png`` summarise the studies.
"""
from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ..config import (
    FlagParser,
    add_config_arguments,
    code_identity,
    merge,
    reading_models,
    resolve,
    to_dict,
    utc_now,
)
from ..exceptions import ConfigWarning
from ..reporting import output_folder
from ..training import keeps_caller_rng
from .anomaly import CLASS_BALANCE_CHOICES, TUNE_METRICS, AnomalyObjective
from .study import (
    TuneBudget,
    apply_space,
    best_within_budget,
    check_replayable,
    check_resumable,
    run_study,
    save_best_preset,
    shown_storage,
    study_or_none,
    study_summary,
    tuned_fields,
    warn_tuned_flags,
    write_report,
)

TASKS = ("anomaly", "tudataset", "gnnbenchmark")
#: The tasks whose ``--models`` take registered names (``--plugin``), and what registers them.
PLUGIN_TASKS = {"anomaly": "et_graph.detectors.register_detector",
                "tudataset": "et_graph.protocols.graph_models.register_graph_model",
                "gnnbenchmark": "et_graph.protocols.benchmark_models.register_benchmark_model"}


def task_config(task: str) -> type:
    if task == "anomaly":
        from ..protocols.anomaly_config import AnomalyConfig

        return AnomalyConfig
    if task == "gnnbenchmark":
        from ..protocols.gnnbenchmark_config import GNNBenchmarkConfig

        return GNNBenchmarkConfig
    from ..protocols.tudataset_config import TUDatasetConfig

    return TUDatasetConfig


def bond_switches_text() -> str:
    """``--tune-bonds``' list of switches, read from :data:`~et_graph.tuning.tudataset.
    BOND_SWITCHES` so that the help names what the tuner adds."""
    from .tudataset import BOND_SWITCHES

    return "; ".join(f"{model}: {'.'.join(switch)}" for model, switch in BOND_SWITCHES.items())


def build_parser(task: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of ``et-graph tune TASK``: the tuning options and the task's own flags."""
    parser = FlagParser(prog="et-graph tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage=f"%(prog)s {{{','.join(TASKS)}}} [options]",
                                     allow_abbrev=False)  # as the task parsers (config.py)
    parser.add_argument("task", choices=TASKS)
    tune = parser.add_argument_group("tuning")
    # Placeholders and defaults written as the task's own flags write them (INT, FLOAT, TEXT).
    tune.add_argument("--trials", type=int, default=TuneBudget.trials, metavar="INT",
                      help="finished trials per model, counting earlier runs of the study "
                           f"(default: {TuneBudget.trials})")
    tune.add_argument("--timeout-minutes", type=float, default=TuneBudget.timeout_minutes,
                      metavar="FLOAT", help="wall-clock limit per model (with --nested: per "
                                            "model and outer fold), over every run of "
                                            "its study: a resumed study gets what is left "
                                            f"(default: {TuneBudget.timeout_minutes})")
    tune.add_argument("--storage", default="sqlite:///runs/tune.db", metavar="URL",
                      help="Optuna storage URL; the record that a restarted run continues "
                           "(default: sqlite:///runs/tune.db)")
    tune.add_argument("--metric", choices=TUNE_METRICS, default=None,
                      help="anomaly: validation metric to maximise (default auroc); the other "
                           "tasks have their own (accuracy, the benchmark's metric)")
    tune.add_argument("--sampler-seed", type=int, default=0, metavar="INT",
                      help="seed of Optuna's sampler (default: 0)")
    tune.add_argument("--prune-warmup", type=int, default=TuneBudget.prune_warmup,
                      metavar="INT", help="epochs (tudataset: folds) a trial runs before the "
                                          "median pruner may stop it; a tudataset trial is "
                                          "never stopped after its last fold, so with "
                                          "--nested (one fold) nothing is pruned "
                                          f"(default: {TuneBudget.prune_warmup})")
    tune.add_argument("--study-prefix", default="", metavar="TEXT",
                      help="prefix of the study names (default: none)")
    tune.add_argument("--tune-folds", type=int, default=None, metavar="INT",
                      help="tudataset: outer folds whose inner validation splits score a trial "
                           "(default: 3)")
    tune.add_argument("--nested", action="store_true",
                      help="tudataset: Errica et al.'s protocol in full: tune every model "
                           "inside every outer fold on that fold's inner split (the budget "
                           "per model and fold), score the fold's test graphs with its own "
                           "choice, and write OUT/DATASET/results.{json,md} as a run does; "
                           "costs folds x the tuning (et_graph.tuning.nested)")
    tune.add_argument("--outer-folds", default=None, metavar="LIST",
                      help="with --nested: tune and score these outer folds only (comma list "
                           "of 0-based indices), so that processes on a machine with many "
                           "cores can share the folds, each with its own --out and the same "
                           "--storage; the same command without it then resumes their "
                           "finished studies and writes the whole table")
    tune.add_argument("--tune-seeds", type=int, default=None, metavar="INT",
                      help="gnnbenchmark: model seeds 0..N-1 whose mean validation metric "
                           "scores a trial (a small validation split makes one seed noisy; "
                           "default: 1)")
    tune.add_argument("--tune-class-balance", action="store_true",
                      help="anomaly: add to every model's space its class weighting (the "
                           "neural models' train.class_balance, the trees' "
                           f"gbt.class_balance), {' or '.join(CLASS_BALANCE_CHOICES)}, the "
                           "same one extra choice each; its studies are named ...-class-balance")
    tune.add_argument("--tune-bonds", action="store_true",
                      help="tudataset: add to every model's space its one switch for reading "
                           f"edge features ({bond_switches_text()}), the same one extra "
                           "choice each; needs edge labels (MUTAG, Mutagenicity)")
    if task in PLUGIN_TASKS:
        from ..plugins import add_plugin_argument

        add_plugin_argument(parser, PLUGIN_TASKS[task])
    if task is not None:
        add_config_arguments(parser, task_config(task))
        for action in parser._actions:
            if "--out" in action.option_strings:
                # the task's --out help described its results.json and its own default
                action.help = (f"folder of the study's outputs: best_<model>.toml, "
                               f"study_report.{{md,json}}, optimization_history.png "
                               f"(default: runs/tune/{task})")
    else:
        parser.epilog = ("The task's own flags (--models, --config, --out, ...) are listed by "
                         "et-graph tune TASK --help.")
    return parser


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    task = argv[0] if argv and argv[0] in TASKS else None
    if task is None and any(token in TASKS for token in argv) and not (
            {"-h", "--help"} & set(argv)):
        # the task's flags are only known once it is named (after options, the task ran
        # without them: an AttributeError, or its flags "unrecognized": a CLI audit)
        raise ValueError(f"name the task first: et-graph tune {{{','.join(TASKS)}}} [options]")
    args = build_parser(task).parse_args(argv)
    if args.task in PLUGIN_TASKS:  # before --models is read: it may name what they register
        from ..plugins import load_plugins

        load_plugins(args.plugin, environment=True)
    config: Any = resolve(task_config(args.task), args)  # (the task's own config class)
    given = {key for key in vars(args) if "." in key}
    budget = TuneBudget(args.trials, args.timeout_minutes, args.sampler_seed,
                        args.prune_warmup)
    if args.metric is not None and args.task != "anomaly":
        raise ValueError(f"--metric applies to `tune anomaly`; `tune {args.task}` selects on "
                         "its task's own validation metric")
    if args.nested and args.task != "tudataset":
        raise ValueError(f"--nested applies to `tune tudataset`, not `tune {args.task}`")
    if args.nested and args.tune_folds is not None:
        raise ValueError("--nested tunes inside every outer fold on that fold alone; "
                         "--tune-folds belongs to the cheaper variant (one preset tuned on "
                         "the first folds): give one of them")
    outer_folds = None
    if args.outer_folds is not None:
        if not args.nested:
            raise ValueError("--outer-folds applies to a nested run (--nested)")
        try:
            outer_folds = [int(part) for part in args.outer_folds.split(",") if part.strip()]
        except ValueError:
            raise ValueError("--outer-folds takes a comma list of 0-based fold indices, "
                             f"got {args.outer_folds!r}") from None
    if args.nested:
        from .nested import check_nested

        check_nested(config, outer_folds)  # (before the warnings about unread flags)
    if args.tune_bonds and args.task != "tudataset":
        raise ValueError(f"--tune-bonds applies to `tune tudataset`, not `tune {args.task}`")
    if args.tune_class_balance and args.task != "anomaly":
        raise ValueError("--tune-class-balance applies to `tune anomaly`, not "
                         f"`tune {args.task}`")
    # Their defaults are None so that a flag given to another task is refused, not ignored.
    for flag, value, owner in (("--tune-folds", args.tune_folds, "tudataset"),
                               ("--tune-seeds", args.tune_seeds, "gnnbenchmark")):
        if value is not None and args.task != owner:
            raise ValueError(f"{flag} applies to `tune {owner}`, not `tune {args.task}`")
    warn_flags_of_tuning(args.task, config, given, class_balance=args.tune_class_balance,
                         bonds=args.tune_bonds, nested=args.nested)
    # The task's own results folder is not where a study's presets belong, nor a preset's
    # (--config's run.out): only --out on this command line moves the study's outputs.
    out = Path(config.run.out if "run.out" in given and config.run.out
               else f"runs/tune/{args.task}")
    if args.nested:
        from .nested import run_nested

        _ensure_sqlite_folder(args.storage)
        return run_nested(config, budget, args.storage, out, args.study_prefix,
                          bonds=args.tune_bonds, outer_folds=outer_folds)
    if args.task == "tudataset":
        models = config.protocol.model_names  # --models: the models to tune, same budget each
        folds = 3 if args.tune_folds is None else args.tune_folds
        return tune_tudataset(config, list(models), budget, args.storage, out,
                              args.study_prefix, folds, bonds=args.tune_bonds)
    if args.task == "gnnbenchmark":
        seeds = 1 if args.tune_seeds is None else args.tune_seeds
        return tune_gnnbenchmark(config, config.protocol.model_names, budget, args.storage, out,
                                 args.study_prefix, tune_seeds=seeds)
    models = config.protocol.model_names()
    return tune_anomaly(config, models, budget, args.storage, args.metric or "auroc", out,
                        args.study_prefix, class_balance=args.tune_class_balance)


def flag_readers(task: str) -> dict[str, tuple[str, ...]]:
    """The task's map of which models read a config section or field (the rest: every model)."""
    if task == "anomaly":
        from ..protocols.anomaly_config import section_readers

        return section_readers()
    if task == "tudataset":
        from ..protocols.tudataset_config import flag_readers as tudataset_readers

        return tudataset_readers()
    from ..protocols.gnnbenchmark_config import flag_readers as gnnbenchmark_readers

    return gnnbenchmark_readers()


#: The tudataset flags no trial reads but a nested run's final trainings do.
READ_BY_NESTED = ("protocol.max_folds", "protocol.runs_per_fold")


def warn_flags_of_tuning(task: str, config: Any, given: set[str], class_balance: bool = False,
                         bonds: bool = False, nested: bool = False) -> list[str]:
    """Warn about the flags that change nothing in this tuning run: those no trial reads (the
    task's seeds, reports and checkpoints: :data:`UNREAD_BY_TRIALS`), those no chosen model
    reads (:func:`et_graph.config.warn_unread_flags`), and those the chosen models' studies
    set in every trial (:func:`~et_graph.tuning.study.warn_tuned_flags`). Returns them.
    ``nested``: a nested run (:mod:`~et_graph.tuning.nested`), whose final trainings read
    :data:`READ_BY_NESTED`."""
    import warnings

    from ..config import warn_unread_flags

    readers = flag_readers(task)
    # (--models is read by the tuner itself: it names the models to tune)
    ignored = sorted(given & ({*UNREAD_BY_TRIALS[task], *UNUSED_RUN_FIELDS}
                              - {"protocol.models", *(READ_BY_NESTED if nested else ())}))
    if ignored:  # --inference-chunk-size or --checkpoint-dir were dropped without a word
        warnings.warn(f"flags for {', '.join(ignored)}: the tuner's trials never read them "
                      "(each trial fits one model once, on the validation split, without "
                      "checkpoints); "
                      + ("nor does a nested run's final training of each fold, and a nested "
                         "run writes no preset" if nested else
                         "they apply when the task runs a written preset"),
                      ConfigWarning, stacklevel=2)
    given = given - set(ignored)
    if task == "anomaly":
        from .anomaly import search_space as anomaly_space
        from .anomaly import trial_config

        def anomaly_trial(trial: Any, model: str) -> Any:
            return trial_config(config, model, anomaly_space(model, class_balance), trial)

        models = config.protocol.model_names()
        tuned = {m: tuned_fields(functools.partial(anomaly_trial, model=m)) for m in models}
    else:
        if task == "tudataset":
            from .tudataset import search_space as tudataset_space

            def space(model: str) -> Any:
                return tudataset_space(model, bonds)
        else:
            from .gnnbenchmark import search_space as space

        def graph_trial(trial: Any, model: str) -> Any:
            return apply_space(config, space(model), trial)

        models = config.protocol.model_names
        tuned = {m: tuned_fields(functools.partial(graph_trial, model=m)) for m in models}
    return ignored + warn_unread_flags(given, models, readers) + warn_tuned_flags(given, tuned)


def tune_anomaly(config: Any, models: list[str], budget: TuneBudget, storage: str,
                 metric: str = "auroc", out: Path = Path("runs/tune"), prefix: str = "",
                 data: Any = None, class_balance: bool = False) -> dict[str, Any]:
    """Tune every model in ``models`` with the same budget; write presets and the report.
    ``class_balance`` adds each model's class weighting to its space
    (:func:`~et_graph.tuning.anomaly.search_space`); its studies are named
    ``...-class-balance``, apart from the studies without it."""
    return _tune_models(
        "anomaly", models,
        lambda model: AnomalyObjective(config, model, metric, data=data,
                                       class_balance=class_balance),
        lambda objective: str(getattr(objective.data, "name", None) or config.data.dataset),
        budget, storage, out, prefix, config, metric, f"validation {metric}",
        in_memory=_in_memory_name(data),
        study_suffix="-class-balance" if class_balance else "")


#: Settings of each task that no trial reads (which models run, how many seeds or folds the
#: task itself would run, what it reports): they never refuse a resume, and given as flags to
#: `tune` they change nothing (a warning says so), nor do the ``run`` section's checkpoints.
UNREAD_BY_TRIALS = {
    "anomaly": ("protocol.models", "protocol.seeds", "protocol.energy_row", "protocol.ddp",
                "protocol.inference_chunk_size", "protocol.inference_chunk_edges",
                "protocol.seed_ensemble", "protocol.validation_only",
                "protocol.bootstrap_rounds"),
    "tudataset": ("protocol.models", "protocol.max_folds", "protocol.runs_per_fold",
                  "protocol.validation_only", "protocol.grid"),
    "gnnbenchmark": ("protocol.models", "protocol.seeds", "data.test_limit"),
}
#: The ``run`` fields that tuning never uses (a trial trains without checkpoints).
UNUSED_RUN_FIELDS = ("run.checkpoint_dir", "run.checkpoint_every", "run.resume")


def fixed_settings(config: Any, task: Optional[str] = None,
                   tuned: frozenset = frozenset()) -> dict[str, Any]:
    """The config's fields as flat ``section.name: value`` pairs, without the ``run`` section
    (where and how the study runs, not what its trials measure), the ``task``'s settings no
    trial reads, and the ``tuned`` ones (a trial sets them)."""
    skip = set(UNREAD_BY_TRIALS.get(task, ()) if task is not None else ()) | set(tuned)
    return {key: value for section, fields in to_dict(config).items()
            if section != "run" and isinstance(fields, dict)
            for name, value in fields.items() if (key := f"{section}.{name}") not in skip}


def study_settings(task: str, config: Any, model: str, models: list[str],
                   objective: Any, tuned: frozenset) -> dict[str, Any]:
    """The fixed settings ``model``'s study is stored with, and resumed only under
    (:func:`~et_graph.tuning.study.run_study`'s ``settings``); ``tuned``: the fields its
    space sets (:func:`~et_graph.tuning.study.tuned_fields`)."""
    # Neither a tuned setting's base value nor a setting only other models read changes what
    # this model's trials measure.
    readers = flag_readers(task)
    settings = {key: value for key, value in fixed_settings(config, task, tuned).items()
                if model in reading_models(key, models, readers)}
    if hasattr(objective, "data_digest"):
        # The study's name and settings do not tell two datasets at one relative path apart:
        # the digest of what its trials read does.
        settings["data.digest"] = objective.data_digest()
    return settings


def check_stored_study(name: str, storage: Optional[str], objective: Any, label: str,
                       settings: dict[str, Any], defaults: dict[str, Any],
                       budget: TuneBudget, config: Any) -> None:
    """Refuse to continue a stored study ``name`` that this run could not resume
    (:func:`~et_graph.tuning.study.check_resumable`) or whose trials it could not replay
    (:func:`~et_graph.tuning.study.check_replayable`); nothing to check for a new one or an
    in-memory storage. Called for every study before any runs."""
    existing = study_or_none(name, storage) if storage is not None else None
    if existing is not None:
        check_resumable(existing, storage, getattr(objective, "direction", "maximize"), label,
                        settings, defaults, budget.prune_warmup, budget.seed)
        check_replayable(existing, storage, objective.trial_config, config, defaults)


def tuned_values(config: Any, tuned: frozenset) -> dict[str, Any]:
    """The ``tuned`` fields' values in ``config``, as flat ``section.name`` pairs under the
    config's own names (the MLP's space calls its width gin_hidden, which the config holds as
    baselines.mlp_hidden)."""
    flat = fixed_settings(config)
    return {key: flat[key] for key in sorted(tuned) if key in flat}


@keeps_caller_rng
def _tune_models(task: str, models: list[str], make_objective: Callable[[str], Any],
                 dataset_of: Callable[[Any], str], budget: TuneBudget, storage: str, out: Path,
                 prefix: str, config: Any, report_metric: str, preset_metric: str,
                 study_suffix: str = "", report_dataset: Optional[str] = None,
                 pruning: Optional[str] = None, in_memory: Optional[str] = None,
                 labels_read: str = "test labels are never read") -> dict[str, Any]:
    """The loop every task shares: one study ``{prefix}{task}-{dataset}-{model}{suffix}`` per
    model with the same budget (in the objective's ``direction``, default maximise), each best
    trial written as ``OUT/best_<model>.toml``, then the report."""
    if not models:
        raise ValueError(f"no model to tune for {task}: name at least one (--models)")
    config.run.apply_threads()
    _ensure_sqlite_folder(storage)
    summaries, presets, dataset = {}, {}, ""
    plans = {}
    for model in models:
        objective = make_objective(model)
        tuned = frozenset(tuned_fields(objective.trial_config))
        settings = study_settings(task, config, model, models, objective, tuned)
        plans[model] = (objective, f"{prefix}{task}-{dataset_of(objective)}-{model}"
                        f"{study_suffix}", settings, tuned)
    defaults = fixed_settings(type(config)(), task)
    for objective, name, settings, _ in plans.values():
        # Every study is checked before any trial runs: a refusal of the second model's came
        # after the first model's whole study, with no report written.
        check_stored_study(name, storage, objective, preset_metric, settings, defaults, budget,
                           config)
    # as every task's runs: locked while it writes (two tunes into one --out mixed their
    # presets and reports), and earlier presets it did not rewrite are named at the end
    with output_folder(out):
        for model, (objective, name, settings, tuned) in plans.items():
            dataset = dataset_of(objective)
            start = time.perf_counter()
            study = run_study(name, objective, budget, storage, progress=config.run.progress,
                              direction=getattr(objective, "direction", "maximize"),
                              objective_label=preset_metric, settings=settings,
                              setting_defaults=defaults)
            summary = study_summary(study, time.perf_counter() - start, budget.trials)
            summaries[model] = summary
            if summary["best_trial"] is not None:
                best = objective.trial_config(best_within_budget(study, budget.trials))
                summary["best_settings"] = tuned_values(best, tuned)
                # A preset runs the task: its results go to the task's own folder, not next to
                # the study report (the tuner resolved run.out to its own output folder).
                # Nor its display (a --quiet tuning wrote quiet = true into every preset, whose
                # runs then printed nothing: a CLI audit).
                fresh = type(best)().run
                best = merge(best, {"run.out": fresh.out, "run.quiet": fresh.quiet,
                                    "run.progress": fresh.progress})
                meta = {"source": f"et-graph tune {task}, study {study.study_name}",
                        "best_trial": summary["best_trial"],
                        "best_validation": summary["best_value"],
                        "metric": preset_metric,
                        # where the study is and what bound it, so that the preset alone
                        # says how it was found (they were in study_report.json only)
                        "storage": shown_storage(storage),
                        "budget_trials": budget.trials,
                        "budget_timeout_minutes": budget.timeout_minutes,
                        # what the study holds when the preset is written (a rerun that ran
                        # no trial writes its own budget flags above: a docs check)
                        "finished_trials": summary["trials"]["complete"]
                        + summary["trials"]["pruned"],
                        **({"seconds_all_runs": round(summary["seconds_all_runs"], 1)}
                           if summary.get("seconds_all_runs") is not None else {}),
                        "sampler_seed": budget.seed,
                        "written_at": utc_now(),
                        **code_identity(),
                        # a registered detector's preset runs with its plugin loaded
                        **getattr(objective, "preset_meta", {})}
                if in_memory is not None:
                    best = merge(best, in_memory_placeholder(task, in_memory))
                    meta["data_note"] = (f"tuned on an in-memory graph ({in_memory}); the [data] "
                                         "section does not name it: set --data/--dataset to run")
                presets[model] = save_best_preset(out / f"best_{model}.toml", best, meta)
        write_report(out, task, report_dataset or dataset, report_metric, budget, summaries,
                     presets, config, pruning, labels_read)
    if not config.run.quiet:
        print((out / "study_report.md").read_text(encoding="utf-8"))
        # as every task says where its results went (the defaults are relative to the
        # working directory, so a user could not find them)
        kept = f"; the studies in {shown_storage(storage)}" if storage is not None else ""
        print(f"\nWritten to {out.resolve()} (study_report.md, study_report.json and the "
              f"best presets){kept}", flush=True)
    return {"models": summaries, "presets": {k: str(v) for k, v in presets.items()}}


def _in_memory_name(data: Any) -> Optional[str]:
    """The name a preset gives a dataset passed in memory (``None``: loaded from the config)."""
    return None if data is None else str(getattr(data, "name", None) or "unnamed")


def in_memory_placeholder(task: str, name: str) -> dict[str, Any]:
    """Overrides that make a preset tuned on an in-memory graph fail loudly if run as it is,
    instead of running on the config's default dataset (Tolokers, for anomaly)."""
    if task == "anomaly":
        return {"data.data": f"IN-MEMORY GRAPH {name}: replace with its file"}
    return {"data.source": "official",
            "data.root": f"IN-MEMORY GRAPHS {name}: replace with their folder"}


def _ensure_sqlite_folder(storage: Optional[str]) -> None:
    """Create the folder of a sqlite database; ``None`` (in memory) needs none, and a string
    that is no database URL is refused here rather than deep inside SQLAlchemy."""
    if storage is None:
        return
    if "://" not in storage:
        raise ValueError(f"storage must be a database URL such as sqlite:///runs/tune.db (in "
                         f"Python, storage=None keeps a study in memory), got {storage!r}")
    where = shown_storage(storage)  # (a password masked in every message)
    prefix = "sqlite:///"
    if storage.startswith(prefix):
        path = storage[len(prefix):]
        if path.startswith("file:"):
            # an SQLite URI (file:PATH?mode=ro&uri=true): opened as it says; its folder is not
            # made (a tuning audit found a folder "./file:runs" made for a read-only URI)
            return
        if not path or path == ":memory:":
            # SQLite's in-memory database: accepted by Optuna, but no restart continues it.
            raise ValueError(f"storage {where!r} names no file, so nothing would persist for a "
                             "restart to continue: give one, e.g. sqlite:///runs/tune.db")
        if path.startswith("~"):  # SQLAlchemy opens the literal "~": a bare OperationalError
            raise ValueError(f"storage {where!r}: SQLite URLs do not expand ~; write the path "
                             f"out, e.g. sqlite:///{Path(path).expanduser()}")
        file = Path(path)
        if file.is_dir():  # (SQLAlchemy: "unable to open database file", in a traceback)
            raise ValueError(f"storage {where!r} names a folder: give a database file in it, "
                             f"e.g. sqlite:///{file / 'tune.db'}")
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ValueError(f"storage {where!r}: a file stands where its folder "
                             f"{file.parent} would be") from None
        except OSError as error:  # (a relative default under an unwritable working folder)
            raise ValueError(f"storage {where!r}: its folder {file.parent} cannot be made "
                             f"({error.strerror or error}); give --storage an absolute path "
                             "(sqlite:////abs/path/tune.db)") from None
        if file.is_file() and file.stat().st_size:
            with file.open("rb") as handle:
                if handle.read(16) != b"SQLite format 3\x00":
                    raise ValueError(f"storage {where!r} is a file that is not an SQLite "
                                     "database (a results or preset file?): give another "
                                     "file name")
        return
    try:  # another database: its driver must be installed (else a raw ImportError, late)
        import sqlalchemy

        sqlalchemy.create_engine(storage)
    except (ImportError, sqlalchemy.exc.ArgumentError,
            sqlalchemy.exc.NoSuchModuleError) as error:
        raise ValueError(f"storage {where!r} cannot be opened here ({type(error).__name__}: "
                         f"{error}); install its database driver or use sqlite:///FILE") from None


def tune_tudataset(config: Any, models: list[str], budget: TuneBudget, storage: str,
                   out: Path = Path("runs/tune"), prefix: str = "", tune_folds: int = 3,
                   graphs: Any = None, info: Any = None, splits: Any = None,
                   bonds: bool = False) -> dict[str, Any]:
    """Tune each TU model with the same budget on inner-validation accuracy (the cheaper
    variant of :mod:`et_graph.tuning.tudataset`); write presets and the report. ``bonds``
    adds each model's switch for reading edge features to its space
    (:data:`~et_graph.tuning.tudataset.BOND_SWITCHES`); its studies are named ``...-bonds``,
    so that a study of the plain space is never resumed with another space."""
    from .tudataset import TUObjective

    if config.protocol.grid:
        # Two ways of selecting at once would leave one of them silently unused.
        raise ValueError("the config declares a per-fold grid (protocol.grid); the tuner "
                         "selects one configuration itself: drop the grid to tune, or run "
                         "the grid with et-graph tudataset")

    # A trial reports one pruner step per outer fold, not per epoch.
    pruning = (f"median pruning after {budget.prune_warmup} outer folds"
               if budget.prune_warmup < tune_folds else
               f"no pruning (a trial reports once per outer fold, and the warmup of "
               f"{budget.prune_warmup} steps is not shorter than the {tune_folds} tuned folds)")
    return _tune_models(
        "tudataset", models,
        lambda model: TUObjective(config, model, tune_folds, graphs, info, splits, bonds),
        lambda objective: config.data.dataset, budget, storage, out, prefix, config,
        "accuracy on the inner splits",
        f"mean inner-validation accuracy over the first {tune_folds} outer folds (one "
        "selection for all folds: a cheaper variant of Errica et al.; those validation graphs "
        "are test graphs of the other outer folds, so a 10-fold CV of the chosen preset is "
        "mildly optimistic for every tuned model alike; `et-graph tudataset --grid` selects "
        "inside each fold instead)", pruning=pruning, study_suffix="-bonds" if bonds else "",
        labels_read=("a trial reads the training and validation graphs of the first outer "
                     "fold, never its test graphs" if tune_folds == 1 else
                     f"a trial reads the training and validation graphs of the first "
                     f"{tune_folds} outer folds, never a fold's own test graphs; but one "
                     "fold's test graphs are another's training and validation graphs, so the "
                     f"labels of the first {tune_folds} test folds enter the selection, and a "
                     "10-fold CV of the chosen preset is mildly optimistic for every tuned "
                     "model alike"))


def tune_gnnbenchmark(config: Any, models: list[str], budget: TuneBudget, storage: str,
                      out: Path = Path("runs/tune"), prefix: str = "", data: Any = None,
                      tune_seeds: int = 1) -> dict[str, Any]:
    """Tune each GNNBenchmark model with the same budget on the validation split (the mean over
    model seeds ``0 .. tune_seeds - 1``; the test split is dropped); write presets and the
    report."""
    from ..datasets.gnnbenchmark import load_benchmark
    from ..datasets.locking import quiet_processing
    from .gnnbenchmark import GNNBenchmarkObjective

    in_memory = _in_memory_name(data)
    if data is None:
        with quiet_processing(not config.run.progress):
            data = load_benchmark(config.data)
    seeds = "model seed 0" if tune_seeds == 1 else f"the mean of model seeds 0-{tune_seeds - 1}"
    direction = "minimized" if data.lower_is_better else "maximized"
    return _tune_models(
        "gnnbenchmark", models,
        lambda model: GNNBenchmarkObjective(config, model, data, tune_seeds),
        lambda objective: config.data.dataset, budget, storage, out, prefix, config,
        f"{data.metric} ({data.better})",
        f"validation {data.metric} of {seeds} ({direction})",
        # Another seed count is another objective: it gets a study of its own, never resumes
        # (and mixes with) the trials of a one-seed study.
        study_suffix=f"-seeds{tune_seeds}" if tune_seeds > 1 else "",
        report_dataset=data.name, in_memory=in_memory,
        labels_read="the test split is dropped before any trial")
