"""Validation-only probe: correct-and-smooth post-processing of the supervised detectors.

Correct and Smooth (Huang et al., ICLR 2021) propagates a detector's training residuals over
the graph (correct), then propagates its scores with the training nodes set to their labels
(smooth). Both steps read training labels only. The probe fits ``--models`` from an anomaly
preset on the preset's split (ET on ``--seeds`` seeds, the deterministic trees once), keeps
every node's score, and reads each setting of a grid declared here on **validation AUROC
alone**: no test label is read, and no test figure is printed.

    python benchmarks/anomaly_correct_smooth_probe.py \\
        --config configs/anomaly/tolokers-tuned-v5.toml --seeds 2 \\
        --machine "1 thread, beside light audits" \\
        --out docs/measured/anomaly/correct_smooth_s57/tolokers.json

``--scores FILE.npz`` keeps (or, when it exists, reuses) the fitted scores, so the grid can be
read again without training. Writes the JSON and a Markdown table beside it (``.md``).
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _probe import write_probe  # noqa: E402

from et_graph.config import parse  # noqa: E402
from et_graph.protocols.anomaly import make_splits  # noqa: E402
from et_graph.protocols.anomaly_config import AnomalyConfig, load_data, make_detector  # noqa: E402

#: The grid of the rule (docs/measured/anomaly/correct_smooth_s57/RULE.md): correct off, or
#: (alpha_c, scale); smooth alpha_s, 0 = off.
CORRECT = [(0.0, 0.0)] + list(itertools.product([0.5, 0.8], [0.5, 1.0]))
SMOOTH = [0.0, 0.2, 0.4, 0.6, 0.8]
PROPAGATION_STEPS = 20
#: Deterministic models: one fit serves every seed.
DETERMINISTIC = {"gbt"}


def normalised_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """``D^-1/2 A D^-1/2`` as a sparse ``[N, N]`` matrix, rows = targets (degree >= 1)."""
    degree = torch.bincount(edge_index[1], minlength=num_nodes).double().clamp(min=1)
    weight = degree[edge_index[0]].rsqrt() * degree[edge_index[1]].rsqrt()
    return torch.sparse_coo_tensor(edge_index.flip(0), weight, (num_nodes, num_nodes),
                                   check_invariants=True).coalesce()


def propagate(adjacency: Tensor, signal: Tensor, alpha: float) -> Tensor:
    """``PROPAGATION_STEPS`` of ``out <- (1 - alpha) signal + alpha A out``."""
    out = signal.clone()
    for _ in range(PROPAGATION_STEPS):
        out = (1 - alpha) * signal + alpha * torch.sparse.mm(adjacency, out[:, None])[:, 0]
    return out


def correct_and_smooth(adjacency: Tensor, score: Tensor, y_train: Tensor, train: Tensor,
                       alpha_c: float, scale: float, alpha_s: float) -> Tensor:
    """The scores after the correct step (skipped at ``alpha_c = 0``) and the smooth step
    (skipped at ``alpha_s = 0``); ``y_train`` holds the training nodes' labels only."""
    if alpha_c > 0:
        residual = torch.zeros_like(score)
        residual[train] = y_train - score[train]
        score = score + scale * propagate(adjacency, residual, alpha_c)
    if alpha_s > 0:
        start = score.clone()
        start[train] = y_train
        score = propagate(adjacency, start, alpha_s)
    return score


def fitted_scores(args: argparse.Namespace) -> dict[str, np.ndarray]:
    config = parse(AnomalyConfig, ["--config", args.config, "--seeds", str(args.seeds),
                                   "--threads", str(args.threads), "--no-progress"])
    config.run.apply_threads()
    data = load_data(config.data)
    p = config.protocol
    splits = make_splits(data, p.protocol, p.seeds, p.train_ratio, p.split_seed, p.vary_split)
    kept: dict[str, np.ndarray] = {}
    for seed, split in enumerate(splits):
        train_mask, val_mask, _ = split.masks(data.num_nodes)
        kept[f"train__seed{seed}"] = train_mask.numpy()
        kept[f"val__seed{seed}"] = val_mask.numpy()
        for name in args.models.split(","):
            if name in DETERMINISTIC and seed > 0:
                continue
            torch.manual_seed(seed)
            detector = make_detector(config, name, seed, False, config.data.dataset)
            detector.fit(data, train_mask, val_mask)
            kept[f"{name}__seed{seed}"] = detector.decision_score_.double().numpy()
            print(f"fitted {name}, seed {seed}", flush=True)
    return kept


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--config", required=True, help="an et-graph anomaly preset")
    parser.add_argument("--models", default="et,gbt")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--scores", help="an .npz of fitted scores to keep, or to reuse")
    parser.add_argument("--machine", required=True, help="threads, and what ran beside")
    parser.add_argument("--out", required=True, help="probe JSON (a .md table is written beside)")
    args = parser.parse_args(argv)
    if args.scores and Path(args.scores).is_file():
        kept = dict(np.load(args.scores))
    else:
        kept = fitted_scores(args)
        if args.scores:
            np.savez(args.scores, **kept)
    data = load_data(parse(AnomalyConfig, ["--config", args.config]).data)
    adjacency = normalised_adjacency(data.edge_index, data.num_nodes)
    y = data.y.double()
    runs = sorted(key for key in kept if not key.startswith(("train__", "val__")))
    rows: list[dict[str, Any]] = []
    for (alpha_c, scale), alpha_s in itertools.product(CORRECT, SMOOTH):
        row: dict[str, Any] = {"alpha_c": alpha_c, "scale": scale, "alpha_s": alpha_s}
        for run in runs:
            seed = run.rpartition("seed")[2]
            train = torch.as_tensor(kept[f"train__seed{seed}"])
            val = kept[f"val__seed{seed}"]
            score = correct_and_smooth(adjacency, torch.as_tensor(kept[run]), y[train], train,
                                       alpha_c, scale, alpha_s)
            # validation labels only: the probe never reads a test label
            row[run] = float(roc_auc_score(y.numpy()[val], score.numpy()[val]))
        rows.append(row)
    models = sorted({run.partition("__")[0] for run in runs})
    for row in rows:
        for model in models:
            row[f"{model}_mean"] = float(np.mean([row[r] for r in runs if r.startswith(model)]))
    header = "| alpha_c | scale | alpha_s | " + " | ".join(f"{m} (mean)" for m in models) + " |"
    lines = [header, "|" + "---|" * (3 + len(models))]
    for row in rows:
        lines.append(f"| {row['alpha_c']} | {row['scale']} | {row['alpha_s']} | "
                     + " | ".join(f"{row[f'{m}_mean']:.4f}" for m in models) + " |")
    best = {m: max(rows, key=lambda r, m=m: r[f"{m}_mean"]) for m in models}
    for model, row in best.items():
        gain = row[f"{model}_mean"] - rows[0][f"{model}_mean"]
        lines.append(f"\n{model}: best alpha_c={row['alpha_c']} scale={row['scale']} "
                     f"alpha_s={row['alpha_s']}, {gain:+.4f} validation AUROC over none")
    table = "\n".join(lines)
    write_probe(args.out, f"correct and smooth over {args.config}, validation AUROC",
                args.machine, args.models, rows, table,
                extra={"propagation_steps": PROPAGATION_STEPS, "seeds": args.seeds})
    print(table)


if __name__ == "__main__":
    main()
