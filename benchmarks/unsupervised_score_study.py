r"""Choose the unsupervised ET's anomaly score on anomalies we planted ourselves.

The labels of the reported graphs (reddit, inj_amazon) must never choose a score. This script
loads a graph exactly as ``et-graph unsupervised`` does (its own labels sealed by ``load_graph``
and never opened), plants *new* PyGOD-style anomalies in it
(:class:`~et_graph.transforms.InjectAnomalies`: cliques, and copies of far-away features), fits
:class:`~et_graph.detectors.UnsupervisedETDetector` with the edge decoder on the planted graph,
and measures each candidate score against the planted labels only. The graph's own anomalies,
unknown here, simply count as normal nodes. This is the usual label-free way to validate an
outlier detector: synthetic anomalies on the real data.

Candidates (each computed exactly as the fitted detector gives it for that configuration):

- ``reconstruction``: the masked completion error (the default score);
- ``energy``: the node energy at the final tokens;
- ``structure_{mean,sum,max}``: a node's edge-reconstruction loss ``-log sigmoid(z_A . z_B)``
  over its in-edges, pooled by ``structure_reduce``;
- ``{mean,max}_rank(reconstruction, structure_R)`` and ``{max_z,sum_z}(reconstruction,
  structure_R)``: ``combined`` with that ``combine`` rule (ranks, or robust z-scores).

It prints AUROC over all nodes and per planted kind (contextual only, structural only, each
kind's nodes against the normal nodes, a node of both kinds left out of both), and AUPRC and
Rec@K over all nodes, per seed as JSON lines and as a table of
means over seeds. Only the planted labels are read. ``--criterion`` names the best candidate:
``auroc`` (the mean AUROC over all nodes; the default, and the earlier sessions' criterion) or
``all_metrics`` (the mean of AUROC, AUPRC and Rec@K over all nodes: the three figures the
reported tables show); both winners are printed. The rule chosen here is fixed before the
reported graphs are scored.

``--models et,iforest,lof`` gives the scikit-learn baselines the same selection on the same
planted graphs (same seeds, same criterion): each has its own grid of 18 settings
(:data:`BASELINE_CANDIDATES`: LOF's neighbour count, IsolationForest's sample size and feature
share, each on the node features alone or with neighbour statistics appended), against ET's 17
score rules, and its best setting is printed as a ``[baselines]`` preset section. Without it the
baselines would run at their defaults against an ET whose score was chosen, an unequal budget.

    OMP_NUM_THREADS=1 python benchmarks/unsupervised_score_study.py --dataset inj_amazon \
        --num-cliques 10 --num-contextual 150 --seeds 2 --threads 1
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from dataclasses import replace
from typing import Any, Optional

import torch
from sklearn.metrics import roc_auc_score
from torch import Tensor
from torch_geometric.data import Data

from et_graph.config import parse_model_list
from et_graph.detectors import UnsupervisedETDetector
from et_graph.detectors.unsupervised import COMBINE_RULES, combine_scores
from et_graph.experiments.unsupervised_anomaly import UnsupervisedAnomalyConfig, load_graph
from et_graph.nn.models.masked_reconstruction import STRUCTURE_REDUCES
from et_graph.protocols.unsupervised import (
    UnsupervisedBaselineConfig,
    evaluate_all_nodes,
    normalise_features,
)
from et_graph.transforms import InjectAnomalies
from et_graph.transforms.injection import CONTEXTUAL, STRUCTURAL


def candidate_scores(det: UnsupervisedETDetector, data: Data) -> dict[str, Tensor]:
    """Every candidate score ``[N]``, each exactly as the fitted detector gives it when its
    score section says that ``structure_reduce`` and ``combine`` (same network, same masked
    passes: the detector's own scoring generator). The passes depend on the pooling only, so
    they run once per pooling and both ``combine`` rules are joined from them."""
    scores: dict[str, Tensor] = {}
    for reduce in STRUCTURE_REDUCES:
        variant = copy.copy(det)
        variant.config = replace(det.config, score=replace(det.config.score,
                                                           structure_reduce=reduce))
        found = variant.score_components(data)
        scores.setdefault("reconstruction", found["reconstruction"])
        scores.setdefault("energy", found["energy"])
        scores[f"structure_{reduce}"] = found["structure"]
        for combine in COMBINE_RULES:
            rule = f"{combine}_rank" if combine in ("mean", "max") else combine
            scores[f"{rule}(reconstruction, structure_{reduce})"] = combine_scores(
                found["reconstruction"], found["structure"], combine)
    return scores


#: The neighbour statistics a baseline may see beside ``x`` (``none``: the features alone).
BASELINE_FEATURE_SETS = ("none", "mean", "mean,std,degree")
#: Each scikit-learn baseline's grid: name -> its ``[baselines]`` preset keys (18 each).
BASELINE_CANDIDATES: dict[str, dict[str, dict[str, Any]]] = {
    "lof": {f"lof(n_neighbors={k}, stats={stats})":
            {"lof_neighbors": k, "lof_neighbour_stats": stats}
            for stats in BASELINE_FEATURE_SETS for k in (5, 10, 20, 50, 100, 200)},
    "iforest": {f"iforest(max_samples={n}, max_features={f}, stats={stats})":
                {"iforest_trees": 100, "iforest_max_samples": n, "iforest_max_features": f,
                 "iforest_neighbour_stats": stats}
                for stats in BASELINE_FEATURE_SETS for n in (256, 1024, 4096)
                for f in (1.0, 0.5)},
}


def baseline_candidate_scores(model: str, data: Data, seed: int) -> dict[str, Tensor]:
    """Every setting of :data:`BASELINE_CANDIDATES` ``[model]`` scored on the label-free
    ``data``, exactly as ``et-graph unsupervised`` scores with that ``[baselines]`` section."""
    return {name: torch.from_numpy(UnsupervisedBaselineConfig(**settings).scorer(model, seed)(data))
            for name, settings in BASELINE_CANDIDATES[model].items()}


#: The columns of the table: AUROC over all nodes and per planted kind, AUPRC and Rec@K.
METRICS = ("all", "contextual", "structural", "auprc", "rec_at_k")
CRITERIA = {
    "auroc": lambda means: means["all"],
    "all_metrics": lambda means: (means["all"] + means["auprc"] + means["rec_at_k"]) / 3,
}


def planted_metrics(score: Tensor, kind: Tensor) -> dict[str, float]:
    """AUROC over all nodes (``all``) and per planted kind against the normal nodes, and
    AUPRC and Rec@K over all nodes, against the planted labels ``kind`` only."""
    normal = kind == 0
    overall = evaluate_all_nodes((kind > 0).numpy().astype(int), score.numpy())
    result = {"all": overall["auroc"]}
    for label, bit in (("contextual", CONTEXTUAL), ("structural", STRUCTURAL)):
        chosen = normal | (kind == bit)
        result[label] = roc_auc_score((kind[chosen] > 0).numpy(), score[chosen].numpy())
    return {**result, "auprc": overall["auprc"], "rec_at_k": overall["rec_at_k"]}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--dataset", default="reddit", help="the graph to plant anomalies in")
    parser.add_argument("--data", default=None,
                        help="a graph file instead (as et-graph unsupervised --data)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=None, help="default: the preset's")
    parser.add_argument("--structure-weight", type=float, default=1.0)
    parser.add_argument("--num-cliques", type=int, default=15)
    parser.add_argument("--clique-size", type=int, default=15)
    parser.add_argument("--num-contextual", type=int, default=225)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--criterion", choices=sorted(CRITERIA), default="auroc",
                        help="which planted-anomaly figure names the best candidate")
    parser.add_argument("--models", default="et",
                        help="comma list of et, iforest, lof: whose candidates to score (each "
                             "model's best is chosen among its own candidates)")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    models = parse_model_list(args.models, ("et", *BASELINE_CANDIDATES))
    torch.set_num_threads(args.threads)
    config = UnsupervisedAnomalyConfig()
    # The graph's own labels are sealed by load_graph and never opened here.
    graph, _sealed = load_graph(replace(config.data, dataset=args.dataset, data=args.data))
    det_config = config.detector_config()
    det_config = replace(det_config,
                         model=replace(det_config.model, structure_weight=args.structure_weight))
    if args.epochs:
        det_config = replace(det_config, train=replace(det_config.train, epochs=args.epochs))
    rows: list[dict[str, Any]] = []
    for seed in range(args.seeds):
        planted = InjectAnomalies(args.num_cliques, args.clique_size, args.num_contextual,
                                  args.candidates, seed=seed)(graph)
        # Transform the planted features again, as the runner does with any graph it loads.
        data = planted.clone()
        data.x = normalise_features(planted.x, config.data.feature_norm)
        del data.y
        kind = data.anomaly_type
        del data.anomaly_type
        for model in models:
            start = time.perf_counter()
            if model == "et":
                det = UnsupervisedETDetector(det_config, seed=seed).fit(data)
                scores = candidate_scores(det, data)
            else:
                scores = baseline_candidate_scores(model, data, seed)
            seconds = time.perf_counter() - start
            for name, score in scores.items():
                row = {"seed": seed, "model": model, "score": name,
                       **planted_metrics(score, kind), "seconds": seconds}
                rows.append(row)
                print(json.dumps(row), flush=True)
    names = list(dict.fromkeys(row["score"] for row in rows))
    model_of = {row["score"]: row["model"] for row in rows}
    means = {name: {key: statistics.mean(row[key] for row in rows if row["score"] == name)
                    for key in METRICS} for name in names}
    print(f"\n{graph.name} + planted anomalies, {args.seeds} seed(s), mean over seeds")
    print("| score | AUROC: all | contextual | structural | AUPRC | Rec@K |")
    print("|---|---|---|---|---|---|")
    for name in names:
        print(f"| {name} | " + " | ".join(f"{means[name][key]:.4f}" for key in METRICS) + " |")
    # Each model is chosen among its own candidates only.
    model_winners = {
        model: {criterion: max((n for n in names if model_of[n] == model),
                               key=lambda name: rank(means[name]))
                for criterion, rank in CRITERIA.items()}
        for model in models}
    for model, chosen in model_winners.items():
        print(f"\n{model}: best on the planted anomalies by mean AUROC over all nodes: "
              f"{chosen['auroc']}")
        print(f"{model}: best by the mean of AUROC, AUPRC and Rec@K over all nodes: "
              f"{chosen['all_metrics']}")
        print(f"{model}: chosen (--criterion {args.criterion}): {chosen[args.criterion]}")
    result = {"args": vars(args), "graph": graph.name, "rows": rows, "means": means,
              "criterion": args.criterion, "model_winners": model_winners}
    if "et" in models:  # the keys of the earlier, ET-only files
        result["winners"] = model_winners["et"]
        result["best"] = model_winners["et"][args.criterion]
    chosen_baselines = {model: BASELINE_CANDIDATES[model][winner[args.criterion]]
                        for model, winner in model_winners.items() if model != "et"}
    if chosen_baselines:
        result["baseline_settings"] = chosen_baselines
        print("\n[baselines]  # chosen on the planted anomalies")
        for settings in chosen_baselines.values():
            for key, value in settings.items():
                print(f"{key} = {json.dumps(value)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return result


if __name__ == "__main__":
    main()
