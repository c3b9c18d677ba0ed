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
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
from optuna.trial import TrialState

from et_graph.reporting import rank_across_datasets
from et_graph.tuning.study import study_or_none


def completed_trials(storage: str, study_name: str) -> dict[str, tuple[int, float]]:
    """``{canonical params: (trial number, validation accuracy)}`` of the complete trials."""
    study = study_or_none(study_name, storage)
    if study is None:
        raise SystemExit(f"no study {study_name!r} in {storage}")
    out = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        out[json.dumps(trial.params, sort_keys=True)] = (trial.number, float(trial.value))
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


def main(argv: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--runs", default="runs/tu_tuned")
    parser.add_argument("--model", default="et")
    parser.add_argument("--datasets", required=True, help="comma list")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    per_dataset = {}
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        db = Path(args.runs) / name / "studies.db"
        if not db.exists():
            raise SystemExit(f"{db} not found: run benchmarks/tu_tuned_cv.py --dataset {name}")
        per_dataset[name] = completed_trials(f"sqlite:///{db}", f"tudataset-{name}-{args.model}")
    rows = rank_configurations(per_dataset)
    names = list(per_dataset)
    print("| mean rank | mean val acc | " + " | ".join(names) + " | configuration |")
    print("|---|---|" + "---|" * len(names) + "---|")
    for row in rows:
        cells = " | ".join(f"{100 * row['validation'][n]:.1f}" for n in names)
        params = ", ".join(f"{k}={round(v, 4) if isinstance(v, float) else v}"
                           for k, v in row["params"].items())
        print(f"| {row['mean_rank']:.2f} | {100 * row['mean_validation']:.1f} | {cells} "
              f"| {params} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"model": args.model, "datasets": names,
                                               "ranking": rows}, indent=2), encoding="utf-8")
    return rows


if __name__ == "__main__":
    main()
