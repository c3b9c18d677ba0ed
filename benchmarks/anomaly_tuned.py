"""Tuned same-run table for node anomaly detection: every model tuned with the same budget, then
5 seeds of each best trial on the same split.

Each model (default ET, GBT, GAT and MLP) gets its own Optuna study with the same number of
finished trials and the same time limit (``et-graph tune anomaly``; objective: validation AUROC
of the configured split, model seed 0, test labels never read). Each best trial is written as a
preset and run for ``--seeds`` model seeds on the same split; the test metrics are read once per
seed. GAT and MLP share the config's ``[baselines]`` section, so each model runs from its own
preset rather than from one combined file.

    OMP_NUM_THREADS=1 python benchmarks/anomaly_tuned.py --dataset reddit --trials 16 \\
        --timeout-minutes 8 --epochs 60 --seeds 5 --out runs/anomaly_tuned

Every ``et-graph anomaly`` flag sets the starting configuration. Writes
``OUT/DATASET/table.md`` and ``table.json`` (the tuning report, presets and each model's 5-seed
results below it). Starting again with the same ``--out`` continues the studies.
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from et_graph.config import add_config_arguments, load_file, merge, resolve, to_dict
from et_graph.experiments import anomaly
from et_graph.tuning.cli import tune_anomaly
from et_graph.tuning.study import TuneBudget

MODELS = ("et", "gbt", "gat", "mlp")
METRICS = ("auroc", "auprc", "f1_macro", "rec_at_k")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--trials", type=int, default=16, help="finished trials per model")
    parser.add_argument("--timeout-minutes", type=float, default=8.0,
                        help="wall-clock tuning limit per model")
    parser.add_argument("--gbt-seeds", type=int, default=None,
                        help="model seeds of GBT (default: --seeds). scikit-learn's boosting "
                             "is deterministic below 10,000 training nodes (no internal "
                             "early-stopping split) when every split sees every column, so 1 "
                             "seed gives the same numbers; a tuned preset with max_features "
                             "< 1 draws columns from the seed and runs --seeds seeds instead")
    parser.add_argument("--tune-models", default=",".join(MODELS),
                        help="comma list of the models to tune and evaluate")
    add_config_arguments(parser, anomaly.CONFIG)
    return parser


def run_preset(preset: Path, model: str, out: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """The seeds of one model's best preset on the configured split (``out/eval_MODEL``)."""
    config = merge(merge(anomaly.CONFIG(), load_file(preset)), overrides)
    config = replace(config, protocol=replace(config.protocol, models=model, energy_row=False),
                     run=replace(config.run, out=str(out / f"eval_{model}")))
    return anomaly.run(config)


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    config = resolve(anomaly.CONFIG, args)
    models = replace(config.protocol, models=args.tune_models).model_names()  # checks names
    out = Path(config.run.out or "runs/anomaly_tuned") / config.data.dataset
    out.mkdir(parents=True, exist_ok=True)
    budget = TuneBudget(args.trials, args.timeout_minutes)
    started = time.time()
    tuned = tune_anomaly(config, models, budget, f"sqlite:///{out / 'studies.db'}", "auroc",
                         out / "tune")
    rows: dict[str, Any] = {}
    # the seeds and run settings of this invocation, not the single-seed tuning runs'
    overrides = {"protocol.seeds": config.protocol.seeds, "run.threads": config.run.threads,
                 "run.progress": config.run.progress}
    for model in models:
        summary = tuned["models"][model]
        row: dict[str, Any] = {
            "trials": summary["trials"],
            "tune_seconds": round(summary["seconds_this_run"], 1),
            "best_validation_auroc": summary["best_value"],
            "best_params": summary["best_params"],
            "preset": tuned["presets"].get(model),
        }
        if row["preset"] is not None:
            model_overrides = dict(overrides)
            if model == "gbt" and args.gbt_seeds:
                # Only a deterministic forest may run fewer seeds: with a column share below 1
                # each split draws its columns from the seed, and one run is one draw.
                share = load_file(row["preset"]).get("gbt", {}).get("max_features", 1.0)
                if float(share) < 1.0:
                    print(f"gbt: max_features = {share} draws columns from the seed; running "
                          f"{config.protocol.seeds} seeds, not --gbt-seeds {args.gbt_seeds}")
                else:
                    model_overrides["protocol.seeds"] = args.gbt_seeds
            result = run_preset(Path(row["preset"]), model, out, model_overrides)
            row["test"] = {metric: result["models"][model][metric] for metric in METRICS}
            row["epoch_seconds_median"] = (result.get("epoch_seconds_median") or {}).get(model)
            row["protocol"] = result["protocol"]
        rows[model] = row
    report = {
        "dataset": config.data.dataset,
        "protocol": (
            f"tuning: {budget.trials} finished trials and at most {budget.timeout_minutes:g} "
            "min per model, validation AUROC of the split (model seed 0, test never read); "
            f"then {config.protocol.seeds} model seeds of each best trial on the same split, "
            "test metrics read once per seed"
        ),
        "split": {"protocol": config.protocol.protocol, "train_ratio": config.protocol.train_ratio,
                  "split_seed": config.protocol.split_seed},
        "start_config": to_dict(config),
        "models": rows,
        "seconds": round(time.time() - started, 1),
    }
    (out / "table.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (out / "table.md").write_text(markdown_table(report), encoding="utf-8")
    print((out / "table.md").read_text(encoding="utf-8"))
    return report


def markdown_table(report: dict[str, Any]) -> str:
    lines = [f"# {report['dataset']}: tuned, same run", "", f"Protocol: {report['protocol']}.",
             "", "| model | trials (complete + pruned) | tuning (s) | best val AUROC | "
             + " | ".join(f"test {m}" for m in METRICS) + " | epoch (s) |",
             "|---|---|---|---|" + "---|" * len(METRICS) + "---|"]
    for model, row in report["models"].items():
        trials, best = row["trials"], row["best_validation_auroc"]
        test = row.get("test", {})
        cells = [f"{test[m]['mean']:.3f} ± {test[m]['std']:.3f}" if m in test else "–"
                 for m in METRICS]
        epoch = row.get("epoch_seconds_median")
        lines.append(f"| {model} | {trials['complete']} + {trials['pruned']} | "
                     f"{row['tune_seconds']} | {'–' if best is None else f'{best:.4f}'} | "
                     + " | ".join(cells) + f" | {'–' if epoch is None else f'{epoch:.2f}'} |")
    lines += ["", "Best trials:"]
    lines += [f"- {model}: {row['best_params']}" for model, row in report["models"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
