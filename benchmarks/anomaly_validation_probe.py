"""Collect a validation-only probe from several ``et-graph anomaly`` runs of one model.

Each run folder holds the ``results.json`` of one ``et-graph anomaly --out DIR`` run (one
variant: one flag changed). The probe keeps, per seed, the validation metric of the model's
kept checkpoint (``best_score``: the metric the run selected its epoch on), and **no test
number**: a probe decides whether a variant deserves a full run, so nothing in it may come
from test labels. Runs must share the dataset, split and seeds; the script refuses otherwise.

    python benchmarks/anomaly_validation_probe.py \\
        --run "ego_neighbour (preset)=runs/tolokers_v3" --run "ego_two_hop=runs/tolokers_two_hop" \\
        --what "Tolokers, the v3 preset with only --readout changed" \\
        --machine "1 thread each, the two runs side by side" \\
        --out docs/measured/anomaly/probes/tolokers_two_hop_validation.json

Prints a Markdown table (and writes it beside the JSON as ``.md``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _probe import add_probe_arguments, probe_variant, results_json, write_probe  # noqa: E402


def load_results(folder: Path) -> dict[str, Any]:
    """The ``results.json`` of ``et-graph anomaly --out FOLDER``, or such a file itself (a copy
    kept under ``docs/measured``)."""
    return json.loads(results_json(folder, "et-graph anomaly").read_text(encoding="utf-8"))


def first_seeds(run: dict[str, Any], count: int | None, where: Path) -> dict[str, Any]:
    """The run with only its first ``count`` seeds (all when ``None``): a 5-seed run serves as
    the reference of a 2-seed probe."""
    if count is None:
        return run
    if len(run["per_seed"]) < count:
        raise SystemExit(f"{where}: holds {len(run['per_seed'])} seeds, fewer than --seeds {count}")
    return {**run, "per_seed": run["per_seed"][:count]}


def split_signature(run: dict[str, Any]) -> tuple[Any, ...]:
    """What must agree between variants for their validation numbers to be comparable."""
    protocol = run["meta"]["config"]["protocol"]
    seeds = tuple(seed["seed"] for seed in run["per_seed"])
    sizes = tuple(tuple(seed["split_sizes"]) for seed in run["per_seed"])
    return (run["dataset"], protocol["protocol"], protocol["train_ratio"],
            protocol["split_seed"], protocol["vary_split"], seeds, sizes)


def probe_row(label: str, folder: Path, run: dict[str, Any], model: str) -> dict[str, Any]:
    per_seed = run["per_seed"]
    if any(model not in seed for seed in per_seed):
        raise SystemExit(f"{folder}: model {model!r} did not run there")
    # The trees keep no checkpoint: their one fit's validation AUROC is what they are read on.
    trees = all("best_score" not in seed[model] for seed in per_seed)
    key = "val_auroc" if trees else "best_score"
    scores = [float(seed[model][key]) for seed in per_seed]
    return {
        "variant": label,
        "results": str(folder),
        "git_commit": run["meta"].get("git_commit"),
        "select_metric": "auroc" if trees else run["meta"]["config"]["train"]["select_metric"],
        "seeds": [seed["seed"] for seed in per_seed],
        "best_epochs": [seed[model].get("best_epoch") for seed in per_seed],
        "validation": scores,
        "mean_validation": statistics.fmean(scores),
        "epoch_seconds_median": run.get("epoch_seconds_median", {}).get(model),
        "config": run["meta"]["config"],
    }


def markdown(rows: list[dict[str, Any]], metric: str) -> str:
    best = max(row["mean_validation"] for row in rows)
    lines = [f"| variant | validation {metric}, seeds {' / '.join(map(str, rows[0]['seeds']))} "
             "| mean |", "|---|---|---|"]
    for row in rows:
        mean = f"{row['mean_validation']:.4f}"
        if row["mean_validation"] == best:
            mean = f"**{mean}**"
        values = " / ".join(f"{value:.4f}" for value in row["validation"])
        lines.append(f"| {row['variant']} | {values} | {mean} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    add_probe_arguments(parser, "one variant: its label and its et-graph anomaly --out folder "
                                "(or that run's results.json)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="compare only each run's first K seeds (default: all)")
    args = parser.parse_args(argv)

    rows, signatures = [], set()
    for spec in args.run:
        label, folder = probe_variant(spec)
        run = first_seeds(load_results(folder), args.seeds, folder)
        signatures.add(split_signature(run))
        rows.append(probe_row(label, folder, run, args.model))
    if len(signatures) != 1:
        raise SystemExit("the runs differ in dataset, split or seeds; their validation "
                         "numbers are not comparable")
    metrics = {row["select_metric"] for row in rows}
    if len(metrics) != 1:
        raise SystemExit(f"the runs selected on different metrics: {sorted(metrics)}")
    metric = metrics.pop()
    table = markdown(rows, metric)
    payload = write_probe(
        args.out, args.what + f"; validation {metric} of the kept checkpoint (test numbers are "
        "not recorded here: nothing may be chosen on them)", args.machine, args.model, rows,
        table)
    print(table)
    return payload


if __name__ == "__main__":
    main()
