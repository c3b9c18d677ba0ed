"""How much of the unsupervised ET's node-energy score is the in-degree (no label is read).

A node's attention share of the energy is ``-sum_h (1/beta_h) log sum_{B in N(C)} exp(beta_h
k_B . q_C)``, which is ``-sum_h (1/beta_h) (log d_C + the log-mean-exp of its logits)``: other
things equal it falls with the in-degree ``d_C`` (a node without in-edges has a share of 0), so
``et_energy`` (high energy = anomalous) can read as "few in-edges = anomalous" (a
math-against-code audit); how much depends on the trained model. This script fits ``et-graph
unsupervised``'s ET on the label-free graph (its labels sealed by ``load_graph`` and never
opened), scores it as the runner does, and prints each score's Spearman rank correlation with
the in-degree, and with the in-degree's logarithm taken out of the energy (``et_energy + sum_h
(1/beta_h) log max(d_C, 1)``, the log-mean-exp form of the share), as JSON and a table.

    python benchmarks/energy_degree.py --config configs/anomaly/unsupervised.toml \\
        --dataset reddit --seeds 1 --threads 1 --json runs/energy_degree_reddit.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np
from scipy.stats import spearmanr

from et_graph.baselines.unsupervised import degree_scores
from et_graph.config import parse_given, run_metadata
from et_graph.detectors import UnsupervisedETDetector
from et_graph.experiments.unsupervised_anomaly import UnsupervisedAnomalyConfig, load_graph
from et_graph.progress import tqdm


def seed_rows(det: UnsupervisedETDetector, seed: int, degree: np.ndarray
              ) -> list[dict[str, Any]]:
    """The Spearman correlation of each of the fitted detector's scores (as the runner keeps
    them) with the in-degree; for the energy also with ``sum_h (1/beta_h) log max(d, 1)`` added
    back, the fitted layer's learned temperatures ``beta_h`` (the share's log-mean-exp form)."""
    betas = det.model_.conv.energy_fn.beta.detach().double().cpu().numpy()
    removed = np.log(np.maximum(degree, 1.0)) * float((1.0 / betas).sum())
    rows = []
    for name, values in sorted(det.scores_.items()):
        values = values.double().numpy()
        row = {"score": f"et_{name}", "seed": seed,
               "spearman_with_in_degree": float(spearmanr(values, degree).statistic)}
        if name == "energy":
            row["spearman_after_log_degree_removed"] = float(
                spearmanr(values + removed, degree).statistic)
        rows.append(row)
    return rows


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)

    def json_flag(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                            help="also write the rows to this file")

    first = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    json_flag(first)
    known, rest = first.parse_known_args(argv)
    config, _given = parse_given(UnsupervisedAnomalyConfig, [*rest, "--models", "et"],
                                 prog="energy_degree.py",
                                 description=__doc__.splitlines()[0], arguments=json_flag)
    json_path = known.json
    config.run.apply_threads()
    graph, _sealed = load_graph(config.data)  # the labels stay sealed: never opened here
    degree = degree_scores(graph)
    rows = []
    for seed in tqdm(config.seed_list, desc="seeds", disable=not config.run.progress):
        # fitted and scored as the runner's compute_scores does
        det = UnsupervisedETDetector(config.detector_config(), seed=seed,
                                     progress=config.run.progress, device=config.run.device)
        rows += seed_rows(det.fit(graph), seed, degree)
    result = {"dataset": config.data.dataset, "nodes": int(graph.num_nodes),
              "nodes_without_in_edges": int((degree == 0).sum()), "rows": rows,
              "meta": run_metadata(config, (graph.x, graph.edge_index))}
    print(f"{result['dataset']}: {result['nodes']:,} nodes, "
          f"{result['nodes_without_in_edges']:,} without in-edges\n")
    print("| score | seed | Spearman with in-degree | with log-degree removed |")
    print("|---|---|---|---|")
    for row in rows:
        removed = row.get("spearman_after_log_degree_removed")
        print(f"| {row['score']} | {row['seed']} | {row['spearman_with_in_degree']:+.3f} | "
              + (f"{removed:+.3f} |" if removed is not None else "- |"))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
