r"""Ablation of the supervised ET ingredients on node anomaly detection.

Each variant is one `et-graph anomaly` run of ET alone (the same split and seeds for every
variant). The table reports the validation AUROC of the kept checkpoint (what a user may select
on) beside the test AUROC (read off once, never used to choose). Run:

    python benchmarks/anomaly_ablation.py --dataset tolokers --seeds 3 --epochs 60 \
        --out runs/ablation/tolokers

Variants: the default ET; + neighbourhood statistics (mean, sq_mean, max, min as inputs);
+ ego/neighbour readout; + label trick; + all three; T = 2 steps; cosine LR with patience;
+ 2 stacked blocks; + class-balanced sampling; + an unweighted loss; + 1 or 2 message-passing
layers (mean aggregation before the descent). Each adds its flags to today's defaults.
GBT on the same inputs is run beside them for reference.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

from et_graph.config import parse
from et_graph.experiments import anomaly
from et_graph.reporting import format_stat, summarize

VARIANTS = {
    "et (default)": [],
    "+ neighbour stats": ["--neighbour-stats", "mean,sq_mean,max,min"],
    "+ ego/neighbour readout": ["--readout", "ego_neighbour"],
    "+ label trick": ["--label-trick"],
    "+ all three": ["--neighbour-stats", "mean,sq_mean,max,min", "--readout", "ego_neighbour",
                    "--label-trick"],
    "T = 2 steps": ["--steps", "2"],
    "cosine LR + patience 20": ["--lr-schedule", "cosine", "--patience", "20"],
    "+ 2 stacked blocks": ["--blocks", "2"],
    "+ class-balanced sampling": ["--class-balance", "sample"],
    "+ unweighted loss": ["--class-balance", "none"],
    "+ 1 message-passing layer": ["--message-passing-layers", "1"],
    "+ 2 message-passing layers": ["--message-passing-layers", "2"],
}


#: The key of the run settings in ablation.json (older files have none).
SETTINGS_KEY = "_settings"


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--dataset", default="tolokers")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", default=";".join(VARIANTS),
                        help="semicolon list of variant names")
    parser.add_argument("--out", default="runs/ablation")
    parser.add_argument("--no-gbt", action="store_true",
                        help="skip the GBT reference rows (slow on wide features: inj_amazon)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = ["--dataset", args.dataset, "--seeds", str(args.seeds), "--epochs", str(args.epochs),
            "--threads", str(args.threads), "--no-progress", "--no-energy-row",
            "--select-metric", "auroc"]
    # Finished variants are kept in ablation.json, so an interrupted run continues.
    saved = out / "ablation.json"
    rows = json.loads(saved.read_text(encoding="utf-8")) if saved.exists() else {}
    # Rows of another dataset, seed count or epoch budget must not join this table.
    settings = {"dataset": args.dataset, "seeds": args.seeds, "epochs": args.epochs}
    stored = rows.pop(SETTINGS_KEY, None)
    if rows and stored is not None and stored != settings:
        raise SystemExit(f"{saved} holds rows of {stored}, not {settings}: use another --out")
    for name in args.variants.split(";"):
        if name in rows:
            continue
        config = parse(anomaly.CONFIG, [*base, "--models", "et", *VARIANTS[name]])
        result = anomaly.run(config)
        val = [seed["et"]["best_metrics"]["auroc"] for seed in result["per_seed"]]
        test = [seed["et"]["auroc"] for seed in result["per_seed"]]
        rows[name] = {"val_auroc": summarize(val), "test_auroc": summarize(test),
                      "test_auprc": summarize(s["et"]["auprc"] for s in result["per_seed"]),
                      "epoch_seconds": result["epoch_seconds_median"].get("et"),
                      "flags": VARIANTS[name]}
        print(name, rows[name]["val_auroc"]["mean"], rows[name]["test_auroc"]["mean"], flush=True)
        saved.write_text(json.dumps({SETTINGS_KEY: settings, **rows}, indent=2, default=float),
                         encoding="utf-8")
    for inputs in () if args.no_gbt else ("plain", "stats"):
        extra = [] if inputs == "plain" else ["--neighbour-stats", "mean,sq_mean,max,min"]
        if f"gbt ({inputs} inputs)" in rows:
            continue
        config = parse(anomaly.CONFIG, [*base, "--models", "gbt", *extra])
        config = replace(config, protocol=replace(config.protocol, seeds=1))  # deterministic
        result = anomaly.run(config)
        seed = result["per_seed"][0]["gbt"]
        rows[f"gbt ({inputs} inputs)"] = {
            "val_auroc": summarize([seed["val_auroc"]]), "test_auroc": summarize([seed["auroc"]]),
            "test_auprc": summarize([seed["auprc"]]), "epoch_seconds": None, "flags": extra}
    lines = [f"# Ablation on {args.dataset} ({args.seeds} seeds, up to {args.epochs} epochs, "
             "checkpoint by validation AUROC)", "",
             "| variant | validation AUROC | test AUROC | test AUPRC | ET epoch (s) |",
             "|---|---|---|---|---|"]
    fmt = format_stat  # one seed reads "(n = 1)", not a measured zero spread
    for name, row in rows.items():
        seconds = "" if row["epoch_seconds"] is None else f"{row['epoch_seconds']:.2f}"
        lines.append(f"| {name} | {fmt(row['val_auroc'])} | {fmt(row['test_auroc'])} | "
                     f"{fmt(row['test_auprc'])} | {seconds} |")
    (out / "ablation.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "ablation.json").write_text(json.dumps({SETTINGS_KEY: settings, **rows}, indent=2,
                                                  default=float), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
