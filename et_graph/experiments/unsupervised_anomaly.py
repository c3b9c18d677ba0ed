"""``et-graph unsupervised``: unsupervised node anomaly detection, BOND/PyGOD protocol.

One run = one graph, ``seeds`` seeds, in three phases that the code keeps apart (the protocol
itself lives in :mod:`et_graph.protocols.unsupervised`; this module is the run loop, the report
and the CLI):

1. :func:`load_graph` loads the graph and *seals* its labels (:class:`SealedLabels`): what the
   detectors get is a new ``Data`` with ``x`` and ``edge_index`` only.
2. :func:`compute_scores` fits every detector on that label-free graph and scores every node:
   the unsupervised ET (:class:`~et_graph.detectors.UnsupervisedETDetector`, two rows: masked
   reconstruction error and node energy, from one fit), IsolationForest, LOF and, when installed,
   PyGOD's DOMINANT, AnomalyDAE, CoLA and CONAD. Baselines that cannot run here are listed with
   the reason, printed and written to the results; they are never dropped silently.
3. Only then are the labels opened, and each score is evaluated over *all* nodes: AUROC, AUPRC
   and Rec@K (K = number of anomalies), mean ± std over the seeds.

Results: ``results.json`` (with the resolved config, version, commit and the skipped baselines),
``results.md`` and ``roc_pr.png`` (ROC and precision-recall curves of every score over all
nodes, first seed) under ``run.out``.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch_geometric.data import Data

from ..config import check_results_kept, parse_given, run_metadata, warn_unread_flags
from ..detectors.unsupervised import COMBINE_DESCRIPTIONS
from ..plots.anomaly import plot_roc_pr
from ..protocols.significance import (
    compare_nodes,
    compare_to,
    describe_design,
    difference_sections,
    results_entries,
)
from ..protocols.unsupervised import (
    FLAG_READERS,
    METRICS,
    UnsupervisedAnomalyConfig,
    compute_scores,
    evaluate_all_nodes,
    load_graph,
)
from ..reporting import (
    SCORES_FILE,
    checks_output_folder,
    counted,
    markdown_table,
    provenance_note,
    summarize,
    write_results,
    write_scores,
)

CONFIG = UnsupervisedAnomalyConfig


@checks_output_folder()
def run(config: UnsupervisedAnomalyConfig, data: Optional[Data] = None) -> dict[str, Any]:
    """Run the experiment; ``data`` (a PyG ``Data`` with binary ``y``) replaces loading."""
    config.run.apply_threads()
    start = time.perf_counter()
    graph, labels = load_graph(config.data, data)                 # phase 1: labels sealed
    scores, skipped, details = compute_scores(graph, config)       # phase 2: no labels
    if not scores:  # exit 0 with an empty table said nothing had failed
        raise ValueError("every chosen detector was skipped (" + "; ".join(
            f"{name}: {why}" for name, why in skipped.items()) + "): nothing was scored")
    y = labels.open()                                                  # phase 3: first label read
    evaluated = labels.evaluated()  # the labelled nodes (label_mask), or None for all
    if evaluated is not None:
        y = y[evaluated]
        scores = {row: [s[evaluated] for s in per_seed] for row, per_seed in scores.items()}
    rows = {row: [evaluate_all_nodes(y, s) for s in per_seed] for row, per_seed in scores.items()}
    for detail in details:
        index = config.seed_list.index(detail["seed"])
        detail["metrics"] = {row: runs[index] for row, runs in rows.items()}
    models = {row: {m: summarize(r[m] for r in runs) for m in METRICS}
              for row, runs in rows.items()}
    # ET's headline row, its configured anomaly score (its decision_function's: an energy or
    # reconstruction score chosen beside an edge decoder was compared as et_combined), minus
    # each baseline: Welch over the seeds, since every seed scores the same nodes.
    reference = next((row for row in (f"et_{config.score.anomaly_score}", "et_combined",
                                      "et_reconstruction") if row in models), None)
    baselines = [name for name in models if not name.startswith("et_")]
    differences = (compare_to(models, reference, ("auroc", "auprc"), "seeds", others=baselines)
                   if reference else [])
    # and AUROC over the scored nodes too (DeLong), which the seeds' spread does not cover
    rounds = config.protocol.bootstrap_rounds
    node_differences = (compare_nodes(y, scores, reference, baselines, bootstrap_rounds=rounds)
                        if reference else [])
    et_seconds = [d["et"]["epoch_seconds"] for d in details if "et" in d]
    results = {
        "dataset": graph.name,
        "protocol": describe_protocol(config, graph, int(y.sum()), len(y)),
        "models": models,
        "skipped": skipped,
        "et_epoch_seconds_median": float(np.median(et_seconds)) if et_seconds else None,
        "seconds_total": time.perf_counter() - start,
        "per_seed": details,
        **results_entries(differences, describe_design("seeds", len(config.seed_list),
                                                       scored="all")),
        **results_entries(node_differences, describe_design(
            "nodes", len(config.seed_list), bootstrap_rounds=rounds), "node_"),
        "meta": run_metadata(config, (graph.x, graph.edge_index, torch.as_tensor(y))),
    }
    if config.run.out:
        write_outputs(Path(config.run.out), results)
        # every node, or the labelled ones
        nodes = np.arange(graph.num_nodes)[evaluated if evaluated is not None else slice(None)]
        seeds = config.seed_list
        write_scores(Path(config.run.out) / SCORES_FILE, scores, seeds, [nodes] * len(seeds),
                     [y] * len(seeds), results["meta"]["run_id"])
        first_seed = {row: per_seed[0] for row, per_seed in scores.items() if per_seed}
        plot_roc_pr(Path(config.run.out) / "roc_pr.png", y, first_seed,
                    f"{'all ' if len(y) == graph.num_nodes else 'the labelled '}{len(y):,} "
                    f"nodes, seed {config.seed_list[0]}")
    # The protocol, the table, and which baselines were skipped and why, with or without
    # progress bars (as results.md and the other tasks' printouts give them).
    print(f"Unsupervised anomaly detection: {results['dataset']}\n\n{results['protocol']}\n")
    print(markdown_table(models, METRICS))
    for section in difference_sections(results):
        print("\n" + section)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    return results


def describe_protocol(config: UnsupervisedAnomalyConfig, graph: Data, anomalies: int,
                      evaluated: Optional[int] = None) -> str:
    m, t, s = config.model, config.train, config.score
    evaluated = graph.num_nodes if evaluated is None else evaluated
    where = (f"all {graph.num_nodes} nodes scored and evaluated" if evaluated == graph.num_nodes
             else f"all {graph.num_nodes} nodes scored, the {evaluated} labelled ones "
                  f"(label_mask) evaluated")
    names = config.protocol.model_names()
    et = (
        f" ET: masked-node completion, mask ratio "
        f"{m.mask_ratio}, {counted(m.steps, 'descent step')}, up to {counted(t.epochs, 'epoch')}, "
        f"checkpoint = lowest "
        f"masked reconstruction error on a random {t.val_fraction:.0%} of the nodes (never "
        f"training targets, no labels); scores averaged over "
        f"{counted(s.score_rounds, 'round')} that mask "
        "every node once: et_reconstruction = completion error while masked, et_energy = node "
        "energy at the final tokens while open (high = anomalous)"
        + (f"; edge decoder with loss weight {m.structure_weight}: et_structure = "
           f"{s.structure_reduce} edge reconstruction loss over a node's in-edges while open, "
           "et_combined = " + COMBINE_DESCRIPTIONS[s.combine]
           if m.structure_weight else "")
    ) if "et" in names else ""
    baselines = config.baselines.describe(names)
    return (
        f"unsupervised (BOND/PyGOD): every detector fitted on x and edge_index only, labels "
        f"sealed until every score existed; {where} "
        f"({anomalies} {'anomaly' if anomalies == 1 else 'anomalies'}, K = {anomalies}); "
        f"features: {config.data.feature_norm}; "
        f"{counted(config.protocol.seeds, 'seed')}." + et
        + (f"{';' if et else ''} baselines: {baselines}" if baselines else "")
    )


def write_outputs(out: Path, results: dict[str, Any]) -> None:
    notes = [f"total wall time: {results['seconds_total']:.1f} s"]
    if results["et_epoch_seconds_median"] is not None:
        notes.append(f"ET epoch (train + validation pass), median: "
                     f"{results['et_epoch_seconds_median']:.2f} s")
    notes.append("Rec@K: share of the anomalies among the K top-scored nodes, K = #anomalies")
    notes += [f"skipped {name}: {reason}" for name, reason in results["skipped"].items()]
    notes.append(provenance_note(results["meta"]))
    write_results(out, results, METRICS,
                  title=f"Unsupervised anomaly detection: {results['dataset']}", notes=notes,
                  sections=difference_sections(results))


def main(argv: Optional[list[str]] = None, prog: str = "et-graph unsupervised",
         defaults: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``et-graph unsupervised``; an example script passes its own ``prog`` and ``defaults``."""
    config, given = parse_given(CONFIG, argv, prog=prog, description=__doc__, defaults=defaults)
    warn_unread_flags(given, config.protocol.model_names(), FLAG_READERS)
    check_results_kept(config)
    return run(config)
