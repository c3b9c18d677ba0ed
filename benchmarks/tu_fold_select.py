"""Errica et al.'s model selection inside each outer fold, over a declared grid of stored runs.

Each candidate of the grid is one configuration cross-validated on the same 10 folds
(``tu_reassess.py``, usually three trainings per fold). In every outer fold this script keeps,
for each model, the candidate with the best inner-validation accuracy (the mean of its runs;
ties to the candidate named first) and reports that candidate's test accuracy in the fold:
:func:`et_graph.protocols.graph_cv.fold_selection`, whose choice never sees a test figure. Every
model must have the same candidates (the same budget).

    python benchmarks/tu_fold_select.py \\
        --candidate preset=docs/measured/tudataset/ensemble3/PROTEINS.json \\
        --candidate ls0.1=runs/ls0.1/et/PROTEINS/reassess.json \\
        --candidate ls0.1=runs/ls0.1/gin/PROTEINS/reassess.json@gin \\
        ... --json selected.json --md selected.md

A candidate may be given several times (``NAME=FILE[@MODELS]``): its models are joined. Prints
and writes one table: per model, the selected figure (mean ± std over folds; run 0 alone; the
ensemble of the chosen candidate's runs), how often each candidate was chosen, and each
candidate's own figure beside it for context.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tu_reassess import NAMES, read_report  # noqa: E402
from tu_tuned_cv import MODELS  # noqa: E402

from et_graph.config import run_metadata  # noqa: E402
from et_graph.protocols.graph_cv import fold_selection  # noqa: E402
from et_graph.reporting import json_text  # noqa: E402


def parse_candidate(text: str) -> tuple[str, str]:
    name, sep, spec = text.partition("=")
    if not sep or not name.strip() or not spec.strip():
        raise ValueError(f"--candidate takes NAME=FILE[@MODELS], got {text!r}")
    return name.strip(), spec.strip()


def _folds_of(row: dict[str, Any]) -> str:
    """The outer folds a row was run on, as its protocol names them."""
    match = re.match(r"stratified \d+-fold CV \(seed \d+\)", row.get("protocol", ""))
    if match is None:
        raise ValueError(f"cannot tell the folds of a row with protocol {row.get('protocol')!r}")
    return match.group(0)


def gather(candidates: list[tuple[str, str]]
           ) -> tuple[str, int, dict[str, dict[str, Any]], Optional[str]]:
    """``(dataset, runs per fold, {candidate: {model: row}}, folds)`` in the order the
    candidates were first named; every row must come from the same dataset, folds and runs per
    fold."""
    grid: dict[str, dict[str, Any]] = {}
    sources: dict[tuple[str, str], str] = {}
    dataset = runs = folds = None
    for name, spec in candidates:
        report = read_report(spec)
        if dataset is None:
            dataset, runs = report["dataset"], report["runs_per_fold"]
        if (report["dataset"], report["runs_per_fold"]) != (dataset, runs):
            raise ValueError(f"{spec}: {report['dataset']} with {report['runs_per_fold']} runs "
                             f"per fold, the others {dataset} with {runs}")
        for model, row in report["models"].items():
            if folds is None:
                folds = _folds_of(row)
            if _folds_of(row) != folds:
                raise ValueError(f"{spec} ({model}) ran on {_folds_of(row)}, the others on {folds}")
            if (name, model) in sources:
                raise ValueError(f"candidate {name!r} has model {model!r} twice: "
                                 f"{sources[name, model]} and {spec}")
            sources[name, model] = spec
            grid.setdefault(name, {})[model] = {**row, "source": spec}
    if dataset is None:
        raise ValueError("give at least one --candidate")
    models = {m for rows in grid.values() for m in rows}
    for name, rows in grid.items():
        missing = sorted(models - set(rows))
        if missing:
            raise ValueError(f"candidate {name!r} lacks {missing}: every model needs the same "
                             "candidates (the same selection budget)")
    return dataset, runs, grid, folds


def select(grid: dict[str, dict[str, Any]], model: str) -> dict[str, Any]:
    """One model's per-fold selection over the grid and the figures it gives
    (:func:`et_graph.protocols.graph_cv.fold_selection` on the stored per-fold figures)."""
    rows = {name: candidate[model] for name, candidate in grid.items()}
    figures = {
        name: {"val_accuracy": row["val_accuracy"]["values"],
               "test_accuracy": row["test_accuracy"]["values"],
               "run0_accuracy": [runs[0] for runs in row["fold_runs"]],
               **({"ensemble_accuracy": row["ensemble_accuracy"]["values"]}
                  if "ensemble_accuracy" in row else {})}
        for name, row in rows.items()
    }
    out = fold_selection(figures)
    del out["per_fold"]  # the stored reports keep the summaries only
    out["candidates"] = {name: {"source": row["source"], "preset": row.get("preset"),
                                "label_smoothing": row.get("label_smoothing"),
                                "test_accuracy": row["test_accuracy"]["mean"],
                                "val_accuracy": row["val_accuracy"]["mean"]}
                         for name, row in rows.items()}
    return out


def _pct(stat: Optional[dict[str, Any]]) -> str:
    return f"{100 * stat['mean']:.1f} ± {100 * stat['std']:.1f}" if stat else "–"


def table(dataset: str, runs: int, grid: dict[str, Any], selected: dict[str, Any]) -> str:
    names = list(grid)
    lines = [f"**{dataset}**, per-fold selection over {len(names)} candidates "
             f"({', '.join(names)}), {runs} trainings per candidate and fold; test accuracy %, "
             "mean ± std over folds",
             "",
             f"| model | selected: mean of {runs} | selected: run 0 alone | selected: ensemble "
             "| times chosen (" + " / ".join(names) + ") | each candidate alone: "
             + " / ".join(names) + " | selected: inner validation |",
             "|---" * 7 + "|"]
    for model in [m for m in MODELS if m in selected]:
        row = selected[model]
        alone = " / ".join(f"{100 * row['candidates'][n]['test_accuracy']:.1f}" for n in names)
        counts = " / ".join(str(row["times_chosen"][n]) for n in names)
        lines.append(f"| {NAMES[model]} | {_pct(row['test_accuracy'])} | "
                     f"{_pct(row['run0_accuracy'])} | {_pct(row.get('ensemble_accuracy'))} | "
                     f"{counts} | {alone} | {_pct(row['val_accuracy'])} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--candidate", action="append", required=True,
                        metavar="NAME=FILE[@MODELS]",
                        help="one stored tu_reassess.py report of a candidate (repeatable; "
                        "the first name given is the one that wins ties)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--md", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        dataset, runs, grid, folds = gather([parse_candidate(c) for c in args.candidate])
    except ValueError as error:
        parser.error(str(error))
    models = [m for m in MODELS if m in next(iter(grid.values()))]
    selected = {model: select(grid, model) for model in models}
    text = table(dataset, runs, grid, selected)
    print(text)
    # the folds too: tu_reassess.py joins reports only where they name the same ones
    report = {"dataset": dataset, "runs_per_fold": runs, "folds": folds, "candidates": list(grid),
              "protocol": "Errica et al.: per outer fold, the candidate with the best "
              "inner-validation accuracy (mean of its runs; ties to the first candidate); the "
              "fold's test accuracy is that candidate's", "models": selected,
              "meta": run_metadata()}
    for path, content in ((args.json, json_text(report)), (args.md, text)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
