"""Collect a validation-only probe from several ``et-graph tudataset`` runs of one model.

Each run is one variant (one flag changed, e.g. ``--hopfield-dim 32``) on the first outer folds
(``--max-folds``). The probe keeps each fold's inner-validation accuracy at the epoch the run
selected, and **no test-fold number**: a probe decides whether a variant replaces a preset, so
nothing in it may come from the test folds. The runs must share the dataset, the fold seed and
the folds; the script refuses otherwise.

    python benchmarks/tu_validation_probe.py --run "128 (preset)=runs/hop/NCI1-et-hnone" \\
        --run "32=runs/hop/NCI1-et-h32" --what "NCI1, hopfield_dim" \\
        --machine "1 thread, one other single-thread job beside" \\
        --out docs/measured/graph/probes/hopfield_dim_nci1.json

A run folder is what ``--out`` named (holding ``DATASET/results.json``), that dataset folder,
or the ``results.json`` itself. Prints a Markdown table and writes it beside the JSON (``.md``).
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from et_graph.reporting import add_probe_arguments, probe_variant, results_json, write_probe


def fold_signature(run: dict[str, Any]) -> tuple[Any, ...]:
    """What must agree between variants for their validation accuracies to be comparable."""
    protocol = run["meta"]["config"]["protocol"]
    folds = tuple((fold["fold"], fold["train"], fold["val"]) for fold in run["folds"])
    return (run["dataset"], protocol["folds"], protocol["seed"], protocol["val_fraction"], folds)


def probe_row(label: str, path: Path, run: dict[str, Any], model: str) -> dict[str, Any]:
    folds = run["folds"]
    if any(model not in fold["models"] for fold in folds):
        raise SystemExit(f"{path}: model {model!r} did not run on every fold there")
    accuracy = [float(fold["models"][model]["val_accuracy"]) for fold in folds]
    return {
        "variant": label,
        "results": str(path),
        "git_commit": run["meta"].get("git_commit"),
        "folds": [fold["fold"] for fold in folds],
        "best_epochs": [fold["models"][model]["best_epoch"] for fold in folds],
        "val_accuracy": accuracy,
        "mean_val_accuracy": statistics.fmean(accuracy),
        "epoch_seconds": statistics.median(
            fold["models"][model]["epoch_seconds"] for fold in folds),
        "config": run["meta"]["config"],
    }


def table(rows: list[dict[str, Any]]) -> str:
    # Means of the same counts can differ in the last bit (83 + 84 against 82 + 85 correct
    # graphs of 101): those are ties, and both are marked.
    best = round(max(row["mean_val_accuracy"] for row in rows), 9)
    folds = ", ".join(map(str, rows[0]["folds"]))
    lines = [f"| variant | inner-validation accuracy, folds {folds} | mean | selected epochs "
             "| epoch (s) |", "|---|---|---|---|---|"]
    for row in rows:
        mean = f"{100 * row['mean_val_accuracy']:.2f}"
        lines.append(
            f"| {row['variant']} | {' / '.join(f'{100 * v:.2f}' for v in row['val_accuracy'])} "
            f"| {f'**{mean}**' if round(row['mean_val_accuracy'], 9) == best else mean} "
            f"| {', '.join(map(str, row['best_epochs']))} | {row['epoch_seconds']:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_probe_arguments(parser, "one variant: its label and its et-graph tudataset run")
    args = parser.parse_args(argv)

    rows, signatures = [], set()
    for spec in args.run:
        label, location = probe_variant(spec)
        path = results_json(location, "et-graph tudataset")
        run = json.loads(path.read_text())
        signatures.add(fold_signature(run))
        rows.append(probe_row(label, path, run, args.model))
    if len(signatures) != 1:
        raise SystemExit("the runs differ in dataset, folds or validation splits; their "
                         "validation accuracies are not comparable")
    text = table(rows)
    payload = write_probe(
        args.out, args.what + "; inner-validation accuracy at each fold's selected epoch (test "
        "folds are not recorded here: nothing may be chosen on them)", args.machine, args.model,
        rows, text)
    print(text)
    return payload


if __name__ == "__main__":
    main()
