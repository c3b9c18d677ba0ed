"""Does a last-bit change of the floating-point rounding move a model's cross-validated result?

Runs one ``et-graph tudataset --config PRESET`` cross-validation several times in fresh
processes, each under its own environment (``--setting NAME=ENV``), and compares every fold's
test accuracy, selected epoch and best validation loss with the first setting's. The settings
change nothing but the rounding of the same arithmetic:

* ``repeat`` (no change): the control. A deterministic run must reproduce itself exactly.
* ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility mode, which selects other
  kernels for the same BLAS calls (and the sparse products that go through MKL).
* ``ATEN_CPU_CAPABILITY=default``: PyTorch's own CPU kernels without vector instructions.

A different processor changes the rounding in the same way (other vector widths, other kernel
choices), so what moves here can move across machines. Example (the MUTAG presets of the
doubled-budget table)::

    OMP_NUM_THREADS=1 python benchmarks/numerics_sensitivity.py \\
        --config configs/tudataset/tuned16/MUTAG-et.toml \\
        --config configs/tudataset/tuned16/MUTAG-gin.toml --out runs/numerics

``--runs-per-fold 3`` asks whether averaging three trainings per fold (Errica et al.'s
assessment) damps what a rounding change moves. Writes ``OUT/sensitivity.json`` and
``OUT/sensitivity.md`` (one row per preset and setting: the mean test accuracy, how many folds
changed their test accuracy, their selected epoch, and the largest change of the best
validation loss against the first setting).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

#: name -> environment changes (``None`` removes the variable)
DEFAULT_SETTINGS: dict[str, dict[str, Optional[str]]] = {
    "baseline": {},
    "repeat": {},
    "mkl_cbwr_compatible": {"MKL_CBWR": "COMPATIBLE"},
    "aten_default": {"ATEN_CPU_CAPABILITY": "default"},
}


def parse_setting(text: str) -> tuple[str, dict[str, Optional[str]]]:
    """``NAME=VAR=VALUE,VAR2=VALUE2`` (or ``NAME=`` for the unchanged environment)."""
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VAR=VALUE[,VAR=VALUE], got {text!r}")
    changes: dict[str, Optional[str]] = {}
    for item in filter(None, rest.split(",")):
        var, sep, value = item.partition("=")
        if not sep or not var:
            raise argparse.ArgumentTypeError(f"expected VAR=VALUE in {text!r}, got {item!r}")
        changes[var] = value
    return name, changes


def run_preset(config: Path, out: Path, changes: dict[str, Optional[str]],
               extra: list[str]) -> dict[str, Any]:
    """One cross-validation of ``config`` in a fresh process with the environment changed."""
    env = dict(os.environ)
    for var, value in changes.items():
        if value is None:
            env.pop(var, None)
        else:
            env[var] = value
    command = [sys.executable, "-m", "et_graph.cli", "tudataset", "--config", str(config),
               "--out", str(out), "--no-progress", *extra]
    started = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    # the CLI writes OUT/<dataset>/results.json
    (path,) = out.glob("*/results.json")
    results = json.loads(path.read_text(encoding="utf-8"))
    results["wall_seconds"] = round(time.time() - started, 1)
    return results


def fold_records(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per fold: the (only) model's test accuracy, selected epoch and best validation loss."""
    rows = []
    for fold in results["folds"]:
        ((model, record),) = fold["models"].items()
        rows.append({"model": model, "test_accuracy": record["test_accuracy"],
                     "best_epoch": record["best_epoch"], "val_loss": record["val_loss"]})
    return rows


def compare(reference: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    """How many folds differ from ``reference`` in accuracy or epoch, and the largest
    difference of the best validation loss."""
    pairs = list(zip(reference, other))
    return {
        "folds": len(pairs),
        "accuracy_changed": sum(a["test_accuracy"] != b["test_accuracy"] for a, b in pairs),
        "epoch_changed": sum(a["best_epoch"] != b["best_epoch"] for a, b in pairs),
        "max_val_loss_change": max(abs(a["val_loss"] - b["val_loss"]) for a, b in pairs),
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "| preset | setting | mean test accuracy | folds with another accuracy | "
        "folds with another epoch | largest change of best validation loss |",
        "|---|---|---|---|---|---|",
    ]
    for preset, rows in report["presets"].items():
        for row in rows:
            diff = row["against_first"]
            lines.append(
                f"| {preset} | {row['setting']} | {100 * row['mean_accuracy']:.2f} | "
                f"{diff['accuracy_changed']} / {diff['folds']} | "
                f"{diff['epoch_changed']} / {diff['folds']} | {diff['max_val_loss_change']:.2e} |"
            )
    machine = report["machine"]
    lines += ["", f"machine: {machine['processor']}, PyTorch CPU capability "
              f"{machine['cpu_capability']}, {machine['threads']} thread(s); settings: "
              + "; ".join(f"{k} = {v or 'unchanged'}" for k, v in report["settings"].items())]
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--config", type=Path, action="append", required=True,
                        help="a tudataset preset (repeat for several)")
    parser.add_argument("--setting", type=parse_setting, action="append",
                        help="NAME=VAR=VALUE[,VAR=VALUE] (default: baseline, repeat, "
                             "MKL_CBWR=COMPATIBLE, ATEN_CPU_CAPABILITY=default); the first is "
                             "the reference")
    parser.add_argument("--max-folds", type=int, default=None, help="only the first folds")
    parser.add_argument("--runs-per-fold", type=int, default=None,
                        help="trainings per fold, averaged (default: the preset's)")
    parser.add_argument("--out", type=Path, default=Path("runs/numerics_sensitivity"))
    args = parser.parse_args(argv)
    settings = dict(args.setting) if args.setting else DEFAULT_SETTINGS
    if len(settings) < 2:
        parser.error("give at least two settings to compare")
    for config in args.config:
        if not config.is_file():
            parser.error(f"no preset at {config}")
    extra = ["--max-folds", str(args.max_folds)] if args.max_folds else []
    if args.runs_per_fold:
        extra += ["--runs-per-fold", str(args.runs_per_fold)]

    from et_graph.config import machine_metadata

    report: dict[str, Any] = {"settings": {k: ",".join(f"{a}={b}" for a, b in v.items())
                                           for k, v in settings.items()},
                              "machine": machine_metadata(), "presets": {}}
    for config in args.config:
        rows, reference = [], None
        for name, changes in settings.items():
            out = args.out / config.stem / name
            results = run_preset(config, out, changes, extra)
            folds = fold_records(results)
            reference = reference if reference is not None else folds
            ((model, stats),) = results["models"].items()
            rows.append({"setting": name, "model": model,
                         "mean_accuracy": stats["accuracy"]["mean"],
                         "std_accuracy": stats["accuracy"]["std"],
                         "folds": folds, "against_first": compare(reference, folds),
                         "wall_seconds": results["wall_seconds"],
                         "machine": results["meta"].get("machine")})
            print(f"{config.stem} {name}: {100 * stats['accuracy']['mean']:.2f} "
                  f"({rows[-1]['against_first']['accuracy_changed']} folds changed)", flush=True)
        report["presets"][config.stem] = rows
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sensitivity.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (args.out / "sensitivity.md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
