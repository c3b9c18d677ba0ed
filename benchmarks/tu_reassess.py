"""Re-assess tuned TU presets with several trainings per fold (Errica et al.'s assessment).

The selection is left as it was: each model's preset (``PRESETS/<DATASET>-<model>.toml``, as
:mod:`benchmarks.tu_tuned_cv` wrote them) is cross-validated again on the same 10 folds, but
every fold now trains the model ``--runs-per-fold`` times from its own seeds (each run picks its
epoch on the fold's inner validation split) and scores the mean of their test accuracies.
Errica et al. do this with three runs "to mitigate bad random initialisations"; the spread
between those runs is the noise a single-run row carries in every fold, and it is reported.
Run 0 of every fold is the single-run protocol bit for bit, so the one-run accuracy of the same
processes is reported beside the mean.

    OMP_NUM_THREADS=1 python benchmarks/tu_reassess.py --datasets MUTAG,PROTEINS \\
        --presets configs/tudataset/tuned16 --runs-per-fold 3 --out runs/tu_reassess
    python benchmarks/tu_reassess.py --summarize runs/tu_reassess/*/reassess.json \\
        --plot ensembles.png
    python benchmarks/tu_reassess.py --summarize A.json@gin,structure_agnostic B.json@et
    python benchmarks/tu_reassess.py --summarize docs/measured/tudataset/fold_select/NCI1.json

Writes ``OUT/DATASET/reassess.json`` and ``reassess.md``, and prints one table over the
datasets: each model's mean ± std over folds of the R-run fold accuracy (the winner in bold),
run 0's accuracy alone, and the spread between runs (mean over folds of the runs' std). With
more than one run it also reports each model's ensemble of its runs: per fold, the accuracy of
their averaged class probabilities (the same trainings; no training is added). ``--plot FILE``
draws the same table as a figure: per dataset, a bar per model for the mean of its runs (± the
std over folds) and a diamond for its ensemble. ``--summarize`` also reads the per-fold
selection results of ``tu_fold_select.py --json`` (the table then names each row's grid).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tu_tuned_cv import MODELS, cross_validate_preset  # noqa: E402

from et_graph.compare_cli import read_models  # noqa: E402
from et_graph.config import run_metadata  # noqa: E402
from et_graph.plots.colours import model_colour  # noqa: E402
from et_graph.protocols.significance import (  # noqa: E402
    compare_to,
    cv_test_train_ratio,
    format_p_near,
    holm,
    interval_text,
    signed,
)
from et_graph.reporting import json_text, summarize  # noqa: E402

NAMES = {"et": "ET", "gin": "GIN", "structure_agnostic": "structure-agnostic"}


def fold_runs(results: dict[str, Any], model: str) -> list[list[float]]:
    """Per fold, the test accuracy of every run (one run: a one-element list)."""
    folds = []
    for fold in results["folds"]:
        record = fold["models"][model]
        runs = record.get("runs", [record])
        folds.append([run["test_accuracy"] for run in runs])
    return folds


def reassess_dataset(dataset: str, presets: Path, models: list[str], runs_per_fold: int,
                     out: Path, threads: int,
                     label_smoothing: Optional[float] = None) -> dict[str, Any]:
    """Each model's preset cross-validated with ``runs_per_fold`` trainings per fold;
    ``label_smoothing`` (if given) replaces the presets' ``train.label_smoothing``."""
    rows: dict[str, Any] = {}
    for model in models:
        preset = presets / f"{dataset}-{model}.toml"
        if not preset.is_file():
            raise SystemExit(f"no preset {preset}")
        started = time.time()
        overrides: dict[str, Any] = {"protocol": {"runs_per_fold": runs_per_fold},
                                     "run": {"threads": threads, "progress": False}}
        if label_smoothing is not None:
            overrides["train"] = {"label_smoothing": label_smoothing}
        results = cross_validate_preset(preset, model, out, overrides)
        per_fold = fold_runs(results, model)
        stats = results["models"][model]
        rows[model] = {
            "preset": str(preset),
            **({"label_smoothing": label_smoothing} if label_smoothing is not None else {}),
            "test_accuracy": stats["accuracy"],
            "run0_accuracy": summarize(runs[0] for runs in per_fold),
            "run_spread": float(np.mean([np.std(runs) for runs in per_fold])),
            "fold_runs": per_fold,
            "val_accuracy": stats["val_accuracy"],
            **{key: stats[key] for key in ("ensemble_accuracy", "ensemble_val_accuracy")
               if key in stats},
            "cv_seconds": round(time.time() - started, 1),
            "protocol": results["protocol"],
        }
        print(f"{dataset} {model}: {100 * stats['accuracy']['mean']:.1f} "
              f"({time.time() - started:.0f} s)", flush=True)
    return {"dataset": dataset, "runs_per_fold": runs_per_fold, "presets": str(presets),
            "models": rows, "meta": run_metadata()}


def _cell(stat: Optional[dict[str, Any]]) -> str:
    if not stat:
        return "–"
    return f"{100 * stat['mean']:.1f} ± {100 * stat['std']:.1f}"


FOLDS = re.compile(r"stratified \d+-fold CV \(seed \d+\)")


def folds_of(report: dict[str, Any]) -> set[str]:
    """The outer folds a report's rows ran on, as their protocols name them ("stratified
    10-fold CV (seed 0)"); ``tu_fold_select.py`` records its rows' folds as ``folds`` (empty
    for its reports written before it did)."""
    named = {report["folds"]} if report.get("folds") else set()
    for row in report["models"].values():
        match = FOLDS.match(str(row.get("protocol", "")))
        if match:
            named.add(match.group(0))
    return named


def merge_reports(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One report per (dataset, runs per fold, selection grid): the models of runs made
    separately (e.g. ET and GIN side by side, each with ``--models``) joined; a model given twice
    is an error, and so are reports whose rows name other outer folds (their per-fold values
    would be paired across different test sets)."""
    merged: dict[tuple[str, int, tuple[str, ...]], dict[str, Any]] = {}
    for report in reports:
        key = (report["dataset"], report["runs_per_fold"], tuple(report.get("candidates", ())))
        if len(folds_of(report)) > 1:
            raise ValueError(f"{key[0]}: one report's rows ran on {sorted(folds_of(report))}")
        if key not in merged:
            merged[key] = {**report, "models": dict(report["models"])}
            continue
        twice = set(merged[key]["models"]) & set(report["models"])
        if twice:
            raise ValueError(f"{key[0]}: models {sorted(twice)} appear in two reports")
        named = folds_of(merged[key]) | folds_of(report)
        if len(named) > 1:
            raise ValueError(f"{key[0]}: the reports ran on other outer folds ({sorted(named)})")
        merged[key]["models"].update(report["models"])
        if named:
            merged[key]["folds"] = named.pop()
    return list(merged.values())


def has_ensembles(reports: list[dict[str, Any]]) -> bool:
    """Whether any model row of ``reports`` holds the accuracy of an ensemble of its runs."""
    return any("ensemble_accuracy" in row for report in reports
               for row in report["models"].values())


def _bold_best(rows: dict[str, Any], key: str) -> list[str]:
    """One cell per model of ``rows[model][key]`` (``–`` where absent), the best mean in bold:
    every model whose mean, as printed, equals the best (one of two printed 85.5s in bold
    read as a win the table cannot show)."""
    printed = {m: round(100 * rows[m][key]["mean"], 1) for m in MODELS
               if rows.get(m, {}).get(key)}
    best = max(printed.values()) if printed else None
    return [f"**{_cell(rows[m][key])}**" if m in printed and printed[m] == best
            else _cell(rows.get(m, {}).get(key)) for m in MODELS]


def is_selection(reports: list[dict[str, Any]]) -> bool:
    """Whether any report is a per-fold selection (``tu_fold_select.py``'s JSON, which names
    its ``candidates``) rather than one fixed preset per model."""
    return any("candidates" in report for report in reports)


def summary_table(reports: list[dict[str, Any]]) -> str:
    """One row per dataset: the R-run accuracy of each model (winner in bold), then run 0's
    accuracies and the spread between runs; with reports that hold it, the accuracy of each
    model's ensemble of its R trainings (averaged class probabilities; winner in bold) last.
    Per-fold selection reports (``tu_fold_select.py --json``) also name the grid each fold chose
    from; they store no spread between runs (``–``; no column when no report has one)."""
    reports = merge_reports(reports)
    ensembles = has_ensembles(reports)
    selection = is_selection(reports)
    spreads = any("run_spread" in row for r in reports for row in r["models"].values())
    columns = ["dataset", "runs per fold", *(["selected per fold among"] if selection else []),
               *(NAMES[m] for m in MODELS), *(f"{NAMES[m]}, run 0 alone" for m in MODELS),
               *(["spread between runs, ET / GIN / s.-a. (mean std over folds, points)"]
                 if spreads else []),
               *(f"{NAMES[m]}, ensemble" for m in MODELS if ensembles)]
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for report in reports:
        rows = report["models"]
        cells = [report["dataset"], str(report["runs_per_fold"])]
        if selection:
            candidates = report.get("candidates")
            cells.append(f"{len(candidates)} ({', '.join(candidates)})" if candidates
                         else "– (fixed preset)")
        cells += _bold_best(rows, "test_accuracy")
        cells += [_cell(rows.get(m, {}).get("run0_accuracy")) for m in MODELS]
        if spreads:
            cells.append(" / ".join(f"{100 * rows[m]['run_spread']:.1f}"
                                    if "run_spread" in rows.get(m, {}) else "–" for m in MODELS))
        if ensembles:
            cells += _bold_best(rows, "ensemble_accuracy")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


#: The estimators a difference is reported for, in the summary table's order.
ESTIMATORS = {"test_accuracy": "mean of the runs", "run0_accuracy": "run 0 alone",
              "ensemble_accuracy": "ensemble"}


def differences(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ET minus each baseline per dataset and estimator, paired over the folds, with the
    corrected resampled t-test's 95% interval (``et_graph.protocols.significance``; every stored
    report is a full K-fold CV, K = the number of fold values)."""
    rows = []
    for report in merge_reports(reports):
        models = report["models"]
        if "et" not in models:
            continue
        folds = len(models["et"]["test_accuracy"].get("values") or ())
        if folds < 2:  # a summary without its fold values: nothing to pair
            continue
        estimators = [key for key in ESTIMATORS if key in models["et"]]
        others = [m for m in MODELS if m in models and m != "et"]
        for d in compare_to(models, "et", estimators, "folds", others=others,
                            test_train_ratio=cv_test_train_ratio(folds)):
            rows.append({"dataset": report["dataset"], "runs_per_fold": report["runs_per_fold"],
                         "candidates": len(report.get("candidates", ())) or None, **d.as_dict()})
    # The whole table is one family, as an et-graph compare table is: Holm over its rows.
    for row, adjusted in zip(rows, holm([row["p_value"] for row in rows])):
        row["p_holm"] = adjusted
    return rows


def differences_table(rows: list[dict[str, Any]]) -> str:
    """One line per dataset (and grid) and estimator: ET minus GIN and minus the
    structure-agnostic MLP in points, the 95% interval, p and the folds ET leads / ties /
    trails."""
    if not rows:
        return ""
    others = [m for m in MODELS if m != "et"]
    columns = ["dataset", "estimator", *(f"ET − {NAMES[m]}: points [95% interval], p (Holm over "
                                         "the table), folds "
                                         "ahead/level/behind" for m in others)]
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    keyed = {(r["dataset"], r["candidates"], r["metric"], r["second"]): r for r in rows}
    for dataset, candidates, metric, runs in dict.fromkeys(
            (r["dataset"], r["candidates"], r["metric"], r["runs_per_fold"]) for r in rows):
        cells = [dataset + (f" ({candidates} candidates)" if candidates else ""),
                 "one training" if runs == 1 else ESTIMATORS[metric]]
        for other in others:
            r = keyed.get((dataset, candidates, metric, other))
            if r is None:
                cells.append("–")
                continue
            alpha = 1.0 - r.get("confidence", 0.95)
            text = (f"{signed(100 * r['mean'], 1)} "
                    f"{interval_text(100 * r['low'], 100 * r['high'], 1)}, "
                    f"p {format_p_near(r['p_value'], alpha)} "
                    f"(Holm {format_p_near(r['p_holm'], alpha)}), "
                    + "/".join(map(str, r["wins"])))
            cells.append(f"**{text}**" if r["low"] > 0 or r["high"] < 0 else text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def read_report(spec: str) -> dict[str, Any]:
    """A stored reassessment, ``PATH`` or ``PATH@MODEL[,MODEL...]`` to keep only those models
    (e.g. a dataset's baselines from one run and ET's current preset from another), read as
    ``et-graph compare`` reads its files."""
    results, models, _ = read_models(spec)
    report = {**results, "models": models}
    report.setdefault("runs_per_fold", 1)  # a tu_tuned_cv.py table: one training per fold
    return report


#: One colour per model, the same in every figure of the page.
COLORS = {model: model_colour(model) for model in ("et", "gin", "structure_agnostic")}


def plot_summary(reports: list[dict[str, Any]], path: Path) -> Path:
    """The summary table as a figure: for each dataset and model, a bar at the mean over folds
    of the R-run accuracy with the std over folds as error bar, and a diamond at the accuracy
    of the model's ensemble of its R trainings (when the reports hold one). A model missing
    on a dataset leaves its slot empty."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    reports = merge_reports(reports)
    if not reports:
        raise ValueError("nothing to plot: no reports")
    width = 0.8 / len(MODELS)
    height = 4.3 if is_selection(reports) else 4.0  # room for two-line ticks under selection
    fig, ax = plt.subplots(figsize=(1.5 * len(reports) + 2.5, height))
    for i, report in enumerate(reports):
        for j, model in enumerate(MODELS):
            row = report["models"].get(model)
            if row is None:
                continue
            x = i + (j - (len(MODELS) - 1) / 2) * width
            stat = row["test_accuracy"]
            # Points, not bars: the axis starts near the lowest value, where a bar's length
            # would exaggerate the gaps. The ensemble's diamond sits beside the whisker, which
            # belongs to the mean.
            ax.errorbar(x - width / 6, 100 * stat["mean"], yerr=100 * stat["std"], fmt="o",
                        capsize=2, color=COLORS[model], ms=5, label=NAMES[model])
            if "ensemble_accuracy" in row:
                ax.plot(x + width / 4, 100 * row["ensemble_accuracy"]["mean"], "D",
                        color=COLORS[model], markeredgecolor="black", ms=5, zorder=3)
    # Under selection the same dataset may appear with two grids: the tick names the grid size.
    ax.set_xticks(range(len(reports)), [
        f"{r['dataset']}\n{len(r['candidates'])} candidates" if r.get("candidates")
        else r["dataset"] for r in reports])
    low = min(100 * (row["test_accuracy"]["mean"] - row["test_accuracy"]["std"])
              for r in reports for row in r["models"].values())
    ax.set_ylim(max(0.0, 5 * int(low // 5) - 5), 100)
    ax.set_ylabel("test accuracy % (10 folds)")
    runs = sorted({r["runs_per_fold"] for r in reports})
    chosen = "the candidate chosen per fold: " if is_selection(reports) else ""
    ax.set_title(f"{chosen}mean of {'/'.join(map(str, runs))} trainings per fold (dots, ± std "
                 "over folds) and their ensemble (diamonds)", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))  # one legend entry per model
    if has_ensembles(reports):
        unique["ensemble of the runs"] = Line2D([], [], marker="D", linestyle="None",
                                                color="0.6", markeredgecolor="black")
    ax.legend(unique.values(), unique.keys(), fontsize=8, ncol=4, loc="upper center",
              bbox_to_anchor=(0.5, -0.17 if is_selection(reports) else -0.1), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--datasets", default="", help="comma list, e.g. MUTAG,PROTEINS")
    parser.add_argument("--presets", type=Path, default=Path("configs/tudataset/tuned16"))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs-per-fold", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--label-smoothing", type=float, default=None, metavar="S",
                        help="replace every preset's train.label_smoothing by S")
    parser.add_argument("--out", type=Path, default=Path("runs/tu_reassess"))
    parser.add_argument("--summarize", nargs="+", metavar="REASSESS_JSON[@MODELS]",
                        default=None,
                        help="only print the table over these reassess.json files (or "
                        "tu_fold_select.py --json files); FILE@et,gin keeps only those models")
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG",
                        help="also draw the table (dots: mean of the runs, ± std over folds; "
                             "diamonds: ensembles)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="with --summarize: write the summary and the differences as JSON")
    args = parser.parse_args(argv)
    if args.summarize:
        reports = [read_report(spec) for spec in args.summarize]
        text = summary_table(reports)
        rows = differences(reports)
        print(text)
        if rows:
            print("ET minus each baseline, paired over the folds (corrected resampled t-test; "
                  "bold: the interval excludes 0):\n")
            print(differences_table(rows))
        if args.plot:
            plot_summary(reports, args.plot)
        if args.json:
            args.json.write_text(json_text({"summary": text, "differences": rows}),
                                 encoding="utf-8")
        return {"summary": text, "differences": rows}
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not datasets:
        parser.error("give --datasets (or --summarize)")
    if set(models) - set(MODELS):
        parser.error(f"models must be a subset of {MODELS}")
    if args.runs_per_fold < 1:
        parser.error("--runs-per-fold must be >= 1")
    reports = []
    for dataset in datasets:
        out = args.out / dataset
        out.mkdir(parents=True, exist_ok=True)
        report = reassess_dataset(dataset, args.presets, models, args.runs_per_fold, out,
                                  args.threads, args.label_smoothing)
        (out / "reassess.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
        (out / "reassess.md").write_text(summary_table([report]), encoding="utf-8")
        reports.append(report)
    text = summary_table(reports)
    print(text)
    if args.plot:
        plot_summary(reports, args.plot)
    return {"reports": reports, "summary": text}


if __name__ == "__main__":
    main()
