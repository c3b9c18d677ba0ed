"""Errica et al.'s protocol in full: every model tuned inside every outer fold.

The cheaper variant (:mod:`et_graph.tuning.tudataset`) tunes one preset on the inner splits
of the first outer folds and cross-validates it on all ten; those inner splits hold other
folds' test graphs, so its table is mildly optimistic. Here, for each outer fold ``k`` and
each model, one Optuna study with the same budget (:class:`~et_graph.tuning.study.TuneBudget`)
searches the model's space on fold ``k``'s inner split alone (:class:`TUObjective` with
``folds=[k]``: a trial trains on the inner training part and scores the inner validation
part). The best trial's configuration is then trained once more on that split by
:func:`~et_graph.protocols.graph_cv.cross_validate` (``run_folds=[k]``), which selects the
epoch on the same validation part and scores fold ``k``'s test graphs once. No choice made
for a fold reads that fold's test graphs, and no graph that scores a fold served its
selection.

    et-graph tune tudataset --nested --dataset MUTAG --trials 16 --storage sqlite:///runs/n.db

The cost is ``folds × models × trials`` trainings (plus one final training per fold and
model), ``folds`` times the cheaper variant's per fold tuned.
"""
from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from ..config import run_metadata
from ..exceptions import FitWarning
from ..experiments.tudataset import PARTIAL_FOLDS
from ..progress import progress_bar, tqdm
from ..protocols.graph_cv import (
    check_fold_indices,
    check_splits,
    cross_validate,
    graph_labels,
    stratified_folds,
    summarize_fold_rows,
)
from ..protocols.significance import cv_difference_entries, difference_sections
from ..protocols.tudataset_config import TUDatasetConfig, load_graphs, model_factories
from ..reporting import counted, json_text, output_folder, provenance_note, write_results
from ..training import keeps_caller_rng
from ..training.checkpoint import graph_tensors
from .cli import check_stored_study, fixed_settings, study_settings, tuned_values
from .study import (
    TuneBudget,
    best_within_budget,
    run_study,
    study_summary,
    tuned_fields,
)
from .tudataset import TUObjective


def nested_study_name(prefix: str, dataset: str, model: str, fold: int, bonds: bool) -> str:
    """The study of one model in one outer fold (``-bonds``: the space with its bond switch,
    as the cheaper variant names its studies)."""
    return f"{prefix}nested-{dataset}-{model}-fold{fold}" + ("-bonds" if bonds else "")


@keeps_caller_rng
def nested_cross_validate(
    config: TUDatasetConfig,
    budget: TuneBudget,
    storage: Optional[str] = None,
    prefix: str = "",
    bonds: bool = False,
    graphs: Optional[list] = None,
    info: Optional[dict[str, Any]] = None,
    on_fold_end: Optional[Callable[[dict[str, Any]], None]] = None,
    splits: Optional[Sequence[tuple[np.ndarray, np.ndarray]]] = None,
    outer_folds: Optional[Sequence[int]] = None,
) -> dict[str, Any]:
    """Tune every model of ``config.protocol.models`` inside every outer fold (the module's
    protocol) and score each fold with its own tuned configuration.

    Args:
        config: the task's config. The tuned fields come from each model's search space
            (:func:`~et_graph.tuning.tudataset.search_space`); every other field is fixed as
            given. ``protocol.max_folds`` runs the first folds only, ``protocol.runs_per_fold``
            sets the final trainings per fold (each trial trains once).
        budget: each study's budget (one study per fold and model: the same for every model).
        storage: Optuna storage URL; ``None`` keeps the studies in memory. A stored study
            resumes where it stopped.
        prefix: prefix of the study names (:func:`nested_study_name`).
        bonds: add each model's switch for reading edge features to its space.
        graphs, info: the dataset as :func:`~et_graph.protocols.tudataset_config.load_graphs`
            returns it (default: loaded from ``config.data``).
        on_fold_end: called with each fold's record once its models are scored.
        splits: the outer folds as ``(train_index, test_index)`` pairs (default: the
            stratified folds of ``config.protocol``, as every TU run draws them).
        outer_folds: tune and score only the outer folds of these indices (refused beside
            ``protocol.max_folds``): processes sharing one storage can each take a share of
            the folds; a later call without it finds their studies finished and trains and
            scores every fold (each fold's record the same as in its share's run).

    Returns:
        ``{"folds": [fold records], "models": {model: summary}}``: a fold record holds, per
        model, what :func:`~et_graph.protocols.graph_cv.cross_validate` records plus
        ``settings`` (the tuned fields' values), ``tuning_validation`` (the best trial's inner
        validation accuracy), ``tied_at_best`` (the trials sharing that accuracy, among which
        the tie rule chose) and ``trials`` (the study's finished trials); a summary holds the
        accuracy and inner-validation accuracy over the folds, the settings chosen per fold
        and the ties per fold.
    """
    check_nested(config, outer_folds, None if splits is None else len(splits))
    protocol = config.protocol
    models = list(protocol.model_names)
    if (graphs is None) != (info is None):
        raise ValueError("pass graphs and info together (as load_graphs returns them), "
                         "or neither to load them from config.data")
    if graphs is None or info is None:
        graphs, info = load_graphs(config.data, config.run.progress)
    labels = graph_labels(graphs)
    splits = (check_splits(splits, len(graphs)) if splits is not None
              else stratified_folds(labels, protocol.folds, protocol.seed))
    folds = (check_fold_indices(outer_folds, len(splits)) if outer_folds is not None
             else range(len(splits) if protocol.max_folds is None
                        else min(protocol.max_folds, len(splits))))
    dataset = config.data.dataset
    defaults = fixed_settings(type(config)(), "tudataset")
    # Every study is planned and checked before any trial runs: a stored study refused at
    # fold 5 came after folds 0-4 had run (a review), and so did a model its bond switch
    # could not act on.
    plan = []
    for fold in folds:
        for model in models:
            objective = TUObjective(config, model, graphs=graphs, info=info, splits=splits,
                                    bonds=bonds, folds=[fold])
            name = nested_study_name(prefix, dataset, model, fold, bonds)
            label = f"inner-validation accuracy of outer fold {fold}"
            tuned = frozenset(tuned_fields(objective.trial_config))
            # a stored study resumes only under the fixed settings its trials ran with
            settings = study_settings("tudataset", config, model, models, objective, tuned)
            check_stored_study(name, storage, objective, label, settings, defaults, budget,
                               config)
            plan.append((fold, model, objective, name, label, settings, tuned))
    records: list[dict[str, Any]] = []
    bar = progress_bar(plan, desc="fold × model studies", disable=not config.run.progress)
    record: dict[str, Any] = {}
    for fold, model, objective, name, label, settings, tuned in bar:
        start = time.perf_counter()
        study = run_study(name, objective, budget, storage, progress=False,
                          objective_label=label, settings=settings, setting_defaults=defaults)
        summary = study_summary(study, time.perf_counter() - start, budget.trials)
        best = best_within_budget(study, budget.trials)
        if best is None:
            counts = summary["trials"]
            raise RuntimeError(
                f"study {name!r} has no complete trial within its budget ({counts}): fold "
                f"{fold} cannot be scored for {model}. Failed trials diverged or ran out of "
                "memory; pruned ones were stopped by the pruner or the time limit "
                "(--timeout-minutes)"
                + (". The stored studies keep the folds done so far: the same command resumes "
                   "them" if storage is not None else ""))
        chosen = objective.trial_config(best)
        chosen_graphs, chosen_info = objective.graphs_for(chosen)
        factory = model_factories(chosen, chosen_info, objective.registry)[model]
        cv = cross_validate(
            chosen_graphs, {model: factory}, {model: chosen.train}, folds=protocol.folds,
            seed=protocol.seed, val_fraction=protocol.val_fraction,
            continuous_channels=chosen_info["node_attributes"], splits=splits,
            run_folds=[fold], progress=False, device=config.run.device,
            runs_per_fold=protocol.runs_per_fold,
            identities={m: entry.identity for m, entry in objective.registry.items()})
        fold_record = cv["folds"][0]
        if not record:
            record = {key: value for key, value in fold_record.items() if key != "models"}
            record["models"] = {}
        record["models"][model] = {**fold_record["models"][model],
                                   "settings": tuned_values(chosen, tuned),
                                   "tuning_validation": float(best.value),
                                   "tied_at_best": summary["tied_at_best"],
                                   "trials": summary["trials"]}
        if len(record["models"]) == len(models):
            records.append(record)
            if on_fold_end is not None:
                on_fold_end(record)
            record = {}
    summaries = {}
    for model in models:
        rows = [r["models"][model] for r in records]
        summaries[model] = {**summarize_fold_rows(rows),
                            "settings": [r["settings"] for r in rows],
                            "tuning_validation": [r["tuning_validation"] for r in rows],
                            "tied_at_best": [r["tied_at_best"] for r in rows]}
    return {"folds": records, "models": summaries}


def check_nested(config: TUDatasetConfig, outer_folds: Optional[Sequence[int]] = None,
                 num_folds: Optional[int] = None) -> None:
    """Refuse what a nested run cannot honour: a declared grid (a second selection), a
    validation-only probe (a nested run exists to score the test folds), no model, a share
    of the folds beside ``max_folds`` (two ways of choosing the folds) or outside the
    ``num_folds`` outer folds (default: ``protocol.folds``)."""
    protocol = config.protocol
    if outer_folds is not None:
        if protocol.max_folds is not None:
            raise ValueError("outer_folds (--outer-folds) names the folds to run; "
                             "max_folds (--max-folds) too: give one of them")
        check_fold_indices(outer_folds, protocol.folds if num_folds is None else num_folds)
    if protocol.grid:
        raise ValueError("the config declares a per-fold grid (protocol.grid); nested tuning "
                         "selects inside each fold itself: drop the grid")
    if protocol.validation_only:
        raise ValueError("nested tuning scores each fold's test graphs with the configuration "
                         "its inner split chose; for a probe without test scores run "
                         "et-graph tune tudataset (the cheaper variant)")
    if not protocol.model_names:
        raise ValueError("no model to tune: name at least one (--models)")


def run_nested(config: TUDatasetConfig, budget: TuneBudget, storage: Optional[str],
               out: Path, prefix: str = "", bonds: bool = False,
               outer_folds: Optional[Sequence[int]] = None) -> dict[str, Any]:
    """:func:`nested_cross_validate` on ``config``'s dataset, written to ``OUT/DATASET/``
    as every TU run writes (``results.{json,md}``, ``accuracy.png``), with ET's difference to
    each baseline paired over the folds."""
    check_nested(config, outer_folds)  # before the folder is locked and the data loaded
    out_dir = Path(out) / config.data.dataset
    with output_folder(out_dir):
        return _run_nested(config, budget, storage, out_dir, prefix, bonds, outer_folds)


def _run_nested(config: TUDatasetConfig, budget: TuneBudget, storage: Optional[str],
                out_dir: Path, prefix: str, bonds: bool,
                outer_folds: Optional[Sequence[int]]) -> dict[str, Any]:
    from ..plots.graph import plot_fold_accuracies

    config.run.apply_threads()
    started = time.time()
    graphs, info = load_graphs(config.data, config.run.progress)

    # Each fold's record is appended as it is scored (a long run shows its finished folds, and
    # one stopped keeps them beside its studies), then renamed folds.jsonl with the results.
    partial = out_dir / PARTIAL_FOLDS
    if partial.exists():
        partial.unlink()

    def log_fold(record: dict[str, Any]) -> None:
        with open(partial, "a", encoding="utf-8") as handle:
            handle.write(json_text(record, indent=None) + "\n")
        if config.run.progress:
            accs = ", ".join(f"{n}={r['test_accuracy']:.3f}"
                             for n, r in record["models"].items())
            tqdm.write(f"[{config.data.dataset}] fold {record['fold']}: {accs}")

    cv = nested_cross_validate(config, budget, storage, prefix, bonds, graphs, info,
                               on_fold_end=log_fold, outer_folds=outer_folds)
    protocol = config.protocol
    folds_run = len(cv["folds"])
    results: dict[str, Any] = {
        "dataset": config.data.dataset,
        "protocol": (
            f"stratified {protocol.folds}-fold CV (seed {protocol.seed})"
            + (f", outer folds {', '.join(map(str, outer_folds))} only (outer_folds)"
               if outer_folds is not None and folds_run < protocol.folds
               else f", first {counted(folds_run, 'fold')} only (max_folds)"
               if folds_run < protocol.folds else "")
            + f"; nested selection (Errica et al.): in each outer fold every model's "
            f"hyperparameters are tuned on that fold's stratified {protocol.val_fraction:.0%} "
            f"inner validation split alone ({budget.trials} trials and at most "
            f"{budget.timeout_minutes:g} min per model and fold; TPE sampler seed "
            f"{budget.seed} in every fold, so its random start-up trials propose the same "
            f"configurations in each; up to {config.train.epochs} epochs a training), the "
            "best trial's configuration is trained on the fold's inner training part with "
            "its epoch chosen on the same validation split, and the fold's test graphs are "
            + ("scored once" if protocol.runs_per_fold == 1 else
               f"scored once by each of {protocol.runs_per_fold} trainings from their own "
               "seeds, the fold's accuracy their mean and ensemble_accuracy that of their "
               "averaged class probabilities")
            + "; no test graph of a fold enters its selection; same folds for every model"
        ),
        "budget": {"trials": budget.trials, "timeout_minutes": budget.timeout_minutes,
                   "sampler_seed": budget.seed, "bonds": bonds},
        "models": cv["models"],
        "folds": cv["folds"],
        "data": info,
        "seconds": round(time.time() - started, 1),
        "meta": run_metadata(config, graph_tensors(graphs)),
    }
    # What meta.config cannot show: the fields it holds at their base values are chosen
    # again in every fold
    results["tuned_fields"] = {model: sorted(rows["settings"][0]) if rows["settings"] else []
                               for model, rows in cv["models"].items()}
    short = _short_studies(cv["folds"], budget.trials)
    if short:
        warnings.warn("; ".join(short) + " (each model's budget is the same, but the time "
                      "limit cut these studies: the table's notes say so)", FitWarning,
                      stacklevel=3)
    ensemble = ["ensemble_accuracy"] if protocol.runs_per_fold > 1 else []
    results.update(cv_difference_entries(results["models"], ["accuracy", *ensemble],
                                         protocol.folds, protocol.val_fraction, folds_run))
    notes = [
        "accuracy: mean ± std (population) over the test folds, each fold scored by the "
        "configuration its own inner validation split chose",
        "meta.config holds the base configuration; the fields in tuned_fields take each "
        "fold's chosen values (the lines below, and models.<name>.settings)",
        *short,
        *(settings_line(model, cv["folds"]) for model in cv["models"]),
        ties_line(cv["models"]),
        f"wall time of this run: {results['seconds']} s (tuning and final trainings; a "
        "resumed run's earlier studies not counted; shared CPU, noisy)",
        provenance_note(results["meta"]),
    ]
    write_results(out_dir, results, ["accuracy", "val_accuracy", *ensemble],
                  title=f"{config.data.dataset}: graph classification, nested tuning",
                  notes=notes, sections=difference_sections(results))
    if partial.exists():
        os.replace(partial, out_dir / "folds.jsonl")
    plot_fold_accuracies(results, out_dir / "accuracy.png",
                         majority=float(np.bincount(graph_labels(graphs)).max()
                                        / len(graphs)))
    if not config.run.quiet:
        tqdm.write((out_dir / "results.md").read_text(encoding="utf-8"))
        print(f"\nWritten to {out_dir.resolve()}", flush=True)
    return results


def settings_line(model: str, records: Sequence[dict[str, Any]]) -> str:
    """``model``'s chosen settings, the folds that chose the same ones named together
    (``folds 0, 2, 3: a=1, b=2; fold 1: ...``), in order of each group's first fold."""
    groups: dict[str, list[int]] = {}
    for record in records:
        settings = record["models"][model]["settings"]
        text = ", ".join(f"{k}={_short(v)}" for k, v in settings.items()) or "(none tuned)"
        groups.setdefault(text, []).append(record["fold"])
    return f"{model}: settings chosen per fold: " + "; ".join(
        ("fold " if len(folds) == 1 else "folds ") + ", ".join(map(str, folds)) + f": {text}"
        for text, folds in groups.items())


def ties_line(summaries: dict[str, dict[str, Any]]) -> str:
    """Per model, the trials tied at the best inner-validation accuracy in each fold."""
    return ("trials tied at the best inner-validation accuracy, per fold (above 1 the tie rule "
            "chose among them: the lower validation loss, then the earlier trial): "
            + "; ".join(f"{model} {s['tied_at_best']}" for model, s in summaries.items()))


def _short_studies(records: Sequence[dict[str, Any]], trials: int) -> list[str]:
    """One line per model whose studies finished fewer than ``trials`` trials in some fold
    (the time limit stopped them), naming the folds and their counts."""
    lines = []
    for model in records[0]["models"] if records else ():
        counts = {r["fold"]: r["models"][model]["trials"]["complete"]
                  + r["models"][model]["trials"]["pruned"] for r in records}
        short = {fold: n for fold, n in counts.items() if n < trials}
        if short:
            lines.append(f"{model}: fewer than {trials} finished trials in "
                         + counted(len(short), "fold") + " ("
                         + ", ".join(f"fold {f}: {n}" for f, n in short.items()) + ")")
    return lines


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


__all__ = ["nested_cross_validate", "nested_study_name", "run_nested"]
