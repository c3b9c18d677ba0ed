"""Per-model selection between GNNBenchmark runs, on the validation (holdout) metric only.

Each run folder holds the ``results.json`` of one ``et-graph gnnbenchmark`` run (one variant:
its preset). Each model keeps, among the runs that hold it, the variant with the best mean
validation metric over its seeds (for the ZINC proxy the holdout MAE of the 200 held-out
official-val graphs). The test metric of the kept variant is read from the same file; the test
metrics of the other variants are shown too, but never used to choose. A run may hold one model
only (a tuned preset per model, from ``et-graph tune gnnbenchmark``); the table then shows "–"
where a model did not run, and the number of variants each model had.

``et-graph tudataset`` runs (``OUT/DATASET/results.json``) are selected the same way: the metric
is the mean inner-validation accuracy over the folds (each fold's selected epoch), the test
column the mean test-fold accuracy, and only runs on the same folds are compared. Each fold's
inner-validation graphs include other folds' test graphs, so that mean reads every fold's test
labels a little: a choice made here and scored on the same folds is mildly optimistic (a
leakage audit; docs/graph_classification.md, "Benchmark protocol"). tu_fold_select.py chooses
per fold instead.

    python benchmarks/gnnbenchmark_select.py runs/zinc_long runs/zinc_long_rwpe \\
        --names base,rwpe --json docs/measured/graph/zinc_selection.json

Prints a Markdown table (and writes it beside the JSON as ``.md``).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from et_graph.reporting import format_stat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _probe import results_json  # noqa: E402


def load_run(folder: Path) -> dict[str, Any]:
    path = results_json(folder, "et-graph gnnbenchmark or et-graph tudataset")
    run = json.loads(path.read_text(encoding="utf-8"))
    return tu_run(run) if "folds" in run else run


def tu_run(run: dict[str, Any]) -> dict[str, Any]:
    """A TU cross-validation's results in the shape :func:`select` reads: the metric is the
    accuracy, and the folds (their test sizes, in order) stand for the split."""
    folds = [[f["fold"], f["train"], f["val"], f["test"]] for f in run["folds"]]
    protocol = run["meta"]["config"]["protocol"]
    split = {"folds": folds, "seed": protocol["seed"], "val_fraction": protocol["val_fraction"]}
    return {"dataset": run["dataset"], "metric": "accuracy", "lower_is_better": False,
            "split_sizes": split,
            "models": {name: {**m, "seeds": len(folds)} for name, m in run["models"].items()}}


def select(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"metric", "lower_is_better", "models": {model: {"selected", "variants"}}}``."""
    first = next(iter(runs.values()))
    metric, lower = first["metric"], bool(first["lower_is_better"])
    for name, run in runs.items():
        if (run["metric"], run["dataset"], run["split_sizes"]) != (
                metric, first["dataset"], first["split_sizes"]):
            raise SystemExit(f"run {name!r} has another dataset, split or metric than the first "
                             "run; only variants on the same splits can be selected between")
    models = list(dict.fromkeys(m for run in runs.values() for m in run["models"]))
    out: dict[str, Any] = {}
    for model in models:
        variants = {
            name: {"val": run["models"][model][f"val_{metric}"],
                   "test": run["models"][model][metric],
                   "params": run["models"][model].get("params"),
                   "seeds": run["models"][model]["seeds"]}
            for name, run in runs.items() if model in run["models"]
        }
        val = {name: v["val"]["mean"] for name, v in variants.items()}
        selected = (min if lower else max)(val, key=val.get)
        out[model] = {"selected": selected, "variants": variants}
    return {"dataset": first["dataset"], "metric": metric, "lower_is_better": lower,
            "models": out}


def markdown(selection: dict[str, Any]) -> str:
    metric = selection["metric"]
    names = list(dict.fromkeys(n for entry in selection["models"].values()
                               for n in entry["variants"]))
    header = (["model", "variants", "selected variant", f"test {metric} (selected)",
               f"val {metric} (selected)"]
              + [f"val / test {metric}: {n}" for n in names])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for model, entry in selection["models"].items():
        variants = entry["variants"]
        chosen = variants[entry["selected"]]
        cells = [model, str(len(variants)), entry["selected"], format_stat(chosen["test"], 4),
                 format_stat(chosen["val"], 4)]
        cells += [f"{format_stat(variants[n]['val'], 4)} / {format_stat(variants[n]['test'], 4)}"
                  if n in variants else "–" for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    direction = "lowest" if selection["lower_is_better"] else "highest"
    lines.append("")
    lines.append(f"Each model keeps the variant with the {direction} mean validation {metric}; "
                 "the test column of the other variants is shown, never used to choose.")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("runs", nargs="+", type=Path, help="folders with results.json")
    parser.add_argument("--names", default=None,
                        help="comma list naming the variants (default: the folder names)")
    parser.add_argument("--json", type=Path, default=None, help="write the selection here")
    args = parser.parse_args(argv)
    names = (args.names.split(",") if args.names else [p.name for p in args.runs])
    if len(names) != len(args.runs) or len(set(names)) != len(names):
        raise SystemExit("--names must give one distinct name per run folder")
    selection = select({n: load_run(p) for n, p in zip(names, args.runs)})
    selection["runs"] = {n: str(p) for n, p in zip(names, args.runs)}
    table = markdown(selection)
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(selection, indent=2) + "\n", encoding="utf-8")
        args.json.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
    return selection


if __name__ == "__main__":
    main()
