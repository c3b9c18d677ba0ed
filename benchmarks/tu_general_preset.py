"""The best *general* graph-level ET preset: one configuration for every TU dataset, chosen on
inner-validation accuracy only.

``benchmarks/tu_tuned_cv.py`` tunes each dataset in its own study with a seeded TPE sampler. Its
first trials are TPE's random start-up phase, so the same trial number holds the same
configuration on every dataset. This script reads those studies
(``RUNS/DATASET/studies.db``), keeps the configurations that finished on every dataset, and ranks
them by their mean rank over datasets (ties: mean validation accuracy). No test fold is read:
the studies only hold inner-validation accuracies.

    python benchmarks/tu_general_preset.py --runs runs/tu_tuned --model et \\
        --datasets ENZYMES,IMDB-BINARY,PROTEINS --json docs/measured/tudataset/tuned/general_et.json

``--nested DATASET=STORAGE`` (repeatable) reads the studies of ``et-graph tune tudataset
--nested`` instead: one per outer fold (``nested-DATASET-MODEL-foldK``), every fold's study
ranked on its own (its inner validation split), then the mean rank over every fold of every
dataset. Nested studies of up to ten trials are TPE's seeded random draws, the same
configurations in every fold and dataset, so the ranking is a grid of inner-validation results.
It also counts, per configuration, the folds whose study chose it (``best_within_budget``, the
tie rule of the tuner) and, per dataset, how many trials tied for the best accuracy in each
fold (on small validation splits the choice among them is the tie rule's, not the data's):

    python benchmarks/tu_general_preset.py --model et --trials 8 \\
        --nested MUTAG=sqlite:///runs/nested_mutag.db --nested IMDB-BINARY=sqlite:///runs/nested.db
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from et_graph.reporting import rank_across_datasets
from et_graph.tuning.nested import nested_study_name
from et_graph.tuning.study import (
    best_within_budget,
    complete_within_budget,
    study_or_none,
    tied_at_best,
)


def _study(storage: str, study_name: str) -> Any:
    study = study_or_none(study_name, storage)
    if study is None:
        raise SystemExit(f"no study {study_name!r} in {storage}")
    return study


def completed_trials(storage: str, study_name: str, budget_trials: Optional[int] = None
                     ) -> dict[str, tuple[int, float]]:
    """``{canonical params: (trial number, validation accuracy)}`` of the complete trials (of
    the first ``budget_trials`` finished ones)."""
    return {json.dumps(trial.params, sort_keys=True): (trial.number, float(trial.value))
            for trial in complete_within_budget(_study(storage, study_name), budget_trials)}


def nested_choices(storage: str, prefix: str, dataset: str, model: str, folds: int,
                   budget_trials: Optional[int]) -> dict[str, dict[str, Any]]:
    """Per outer fold (``"DATASET/foldK"``): its study's complete trials
    (:func:`completed_trials`), the configuration its study chose, and how many trials tied
    for its best value."""
    out = {}
    for fold in range(folds):
        name = nested_study_name(prefix, dataset, model, fold, bonds=False)
        study = _study(storage, name)
        counted = complete_within_budget(study, budget_trials)
        best = best_within_budget(study, budget_trials)
        if best is None:
            raise SystemExit(f"study {name!r} in {storage} holds no complete trial")
        out[f"{dataset}/fold{fold}"] = {
            "trials": {json.dumps(t.params, sort_keys=True): (t.number, float(t.value))
                       for t in counted},
            "chosen": json.dumps(best.params, sort_keys=True),
            "tied_at_best": tied_at_best(study, budget_trials),
        }
    return out


def rank_configurations(per_dataset: dict[str, dict[str, tuple[int, float]]]
                        ) -> list[dict[str, Any]]:
    """Configurations complete on every dataset, best first (mean rank, then mean accuracy)."""
    if not per_dataset:
        raise ValueError("no studies given")
    common = set.intersection(*(set(trials) for trials in per_dataset.values()))
    if not common:
        raise ValueError("no configuration finished on every dataset; were the studies run "
                         "with the same sampler seed?")
    keys = sorted(common)
    ranked = rank_across_datasets({name: {key: trials[key][1] for key in keys}
                                   for name, trials in per_dataset.items()})
    rows = []
    for key in keys:
        values = {name: trials[key][1] for name, trials in per_dataset.items()}
        rows.append({"params": json.loads(key), "mean_rank": ranked[key]["mean_rank"],
                     "mean_validation": float(np.mean(list(values.values()))),
                     "validation": values,
                     "trial": {name: trials[key][0] for name, trials in per_dataset.items()}})
    return sorted(rows, key=lambda r: (r["mean_rank"], -r["mean_validation"]))


def summarize_nested(per_fold: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """:func:`rank_configurations` over every fold of every dataset, each row with its mean
    rank and validation per dataset and the folds whose study chose it; per dataset the ties
    at the best."""
    rows = rank_configurations({key: fold["trials"] for key, fold in per_fold.items()})
    datasets = sorted({key.rsplit("/", 1)[0] for key in per_fold})
    common = {json.dumps(row["params"], sort_keys=True) for row in rows}
    ranked = rank_across_datasets({name: {k: v[1] for k, v in fold["trials"].items()
                                          if k in common}
                                   for name, fold in per_fold.items()})
    for row in rows:
        key = json.dumps(row["params"], sort_keys=True)
        row["chosen_folds"] = sorted(name for name, fold in per_fold.items()
                                     if fold["chosen"] == key)
        ranks = ranked[key]["rank"]
        row["by_dataset"] = {
            dataset: {"mean_rank": float(np.mean([rank for name, rank in ranks.items()
                                                  if name.rsplit("/", 1)[0] == dataset])),
                      "mean_validation": float(np.mean([
                          value for name, value in row["validation"].items()
                          if name.rsplit("/", 1)[0] == dataset]))}
            for dataset in datasets}
    ties = {dataset: [fold["tied_at_best"] for name, fold in per_fold.items()
                      if name.rsplit("/", 1)[0] == dataset] for dataset in datasets}
    return {"datasets": datasets, "ranking": rows, "tied_at_best": ties}


def _params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={round(v, 4) if isinstance(v, float) else v}"
                     for k, v in params.items())


def _print_nested(summary: dict[str, Any]) -> None:
    names = summary["datasets"]
    print("| mean rank | chosen (folds) | " + " | ".join(f"{n}: rank / val %" for n in names)
          + " | configuration |")
    print("|---|---|" + "---|" * len(names) + "---|")
    for row in summary["ranking"]:
        cells = " | ".join(f"{row['by_dataset'][n]['mean_rank']:.2f} / "
                           f"{100 * row['by_dataset'][n]['mean_validation']:.1f}" for n in names)
        print(f"| {row['mean_rank']:.2f} | {len(row['chosen_folds'])} | {cells} "
              f"| {_params_text(row['params'])} |")
    for name in names:
        ties = summary["tied_at_best"][name]
        print(f"{name}: trials tied for the best validation accuracy per fold: {ties}")


def main(argv: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--runs", default="runs/tu_tuned")
    parser.add_argument("--model", default="et")
    parser.add_argument("--datasets", help="comma list (the studies of tu_tuned_cv.py)")
    parser.add_argument("--nested", action="append", default=[], metavar="DATASET=STORAGE",
                        help="the nested studies of one dataset (repeat per dataset)")
    parser.add_argument("--folds", type=int, default=10, help="outer folds (--nested)")
    parser.add_argument("--prefix", default="", help="the studies' --study-prefix (--nested)")
    parser.add_argument("--trials", type=int, default=None,
                        help="count each study's first N finished trials (its budget)")
    parser.add_argument("--exclude", action="append", default=[], metavar="DATASET/foldK",
                        help="leave out one fold's study (--nested; repeatable): a study "
                             "resumed after an interruption drew other configurations, and "
                             "only those finished in every study are ranked")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if bool(args.datasets) == bool(args.nested):
        parser.error("give --datasets or --nested, one of the two")
    if args.nested:
        per_fold: dict[str, dict[str, Any]] = {}
        for item in args.nested:
            dataset, _, storage = item.partition("=")
            if not dataset or not storage:
                parser.error(f"--nested takes DATASET=STORAGE, got {item!r}")
            per_fold.update(nested_choices(storage, args.prefix, dataset, args.model,
                                           args.folds, args.trials))
        unknown = sorted(set(args.exclude) - set(per_fold))
        if unknown:
            parser.error(f"--exclude names no study read: {unknown} (DATASET/foldK)")
        for key in args.exclude:
            del per_fold[key]
        summary = summarize_nested(per_fold)
        _print_nested(summary)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({"model": args.model, "trials": args.trials,
                                                   "nested": True, "excluded": args.exclude,
                                                   **summary}, indent=2),
                                       encoding="utf-8")
        return summary["ranking"]
    per_dataset = {}
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        db = Path(args.runs) / name / "studies.db"
        if not db.exists():
            raise SystemExit(f"{db} not found: run benchmarks/tu_tuned_cv.py --dataset {name}")
        per_dataset[name] = completed_trials(f"sqlite:///{db}", f"tudataset-{name}-{args.model}",
                                             args.trials)
    rows = rank_configurations(per_dataset)
    names = list(per_dataset)
    print("| mean rank | mean val acc | " + " | ".join(names) + " | configuration |")
    print("|---|---|" + "---|" * len(names) + "---|")
    for row in rows:
        cells = " | ".join(f"{100 * row['validation'][n]:.1f}" for n in names)
        print(f"| {row['mean_rank']:.2f} | {100 * row['mean_validation']:.1f} | {cells} "
              f"| {_params_text(row['params'])} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"model": args.model, "datasets": names,
                                               "ranking": rows}, indent=2), encoding="utf-8")
    return rows


if __name__ == "__main__":
    main()
