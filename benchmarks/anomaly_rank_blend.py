"""The equal-weight rank average of two models of a stored anomaly run, per seed.

A reference for a stacked model: what the plainest combination of the same two models gives
without any training or choice (equal weights, fixed before reading; ranks, since the two
models' probabilities are calibrated differently). Reads the run's ``scores.npz`` (the scored
nodes' scores per seed) and prints AUROC and AUPRC, mean ± std over the seeds (no threshold:
macro-F1 and Rec@K need a validation choice the stored scores cannot give).

    python benchmarks/anomaly_rank_blend.py docs/measured/anomaly/tolokers40_v5/scores.npz \\
        --models et,gbt
"""
from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.stats import rankdata
from sklearn.metrics import average_precision_score, roc_auc_score


def rank_blend(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The mean of the two scores' ranks among the scored nodes, scaled to [0, 1]."""
    return (rankdata(first) + rankdata(second)) / (2 * first.size)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("scores", help="a run's scores.npz")
    parser.add_argument("--models", default="et,gbt", help="the two models, comma-separated")
    args = parser.parse_args(argv)
    first, second = args.models.split(",")
    stored = np.load(args.scores, allow_pickle=False)
    seeds = sorted(int(key.split("seed")[1]) for key in stored.files if key.startswith("labels"))
    rows = []
    for seed in seeds:
        labels = stored[f"labels__seed{seed}"]
        blend = rank_blend(stored[f"{first}__seed{seed}"], stored[f"{second}__seed{seed}"])
        rows.append({"seed": seed, "auroc": float(roc_auc_score(labels, blend)),
                     "auprc": float(average_precision_score(labels, blend))})
    summary = {metric: (float(np.mean([r[metric] for r in rows])),
                        float(np.std([r[metric] for r in rows]))) for metric in ("auroc", "auprc")}
    print(json.dumps({"models": [first, second], "per_seed": rows, "mean_std": summary},
                     indent=1))
    print(f"rank average of {first} and {second}, {len(rows)} seeds: "
          + ", ".join(f"{m} {mean:.4f} ± {std:.4f}" for m, (mean, std) in summary.items()))


if __name__ == "__main__":
    main()
