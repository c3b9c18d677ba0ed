"""``et-graph anomaly`` / ``examples/yelpchi_anomaly.py``: ET against same-run baselines.

One run = one dataset, one protocol, ``seeds`` seeds. Per seed, every detector in ``models``
(:mod:`et_graph.detectors`) is fitted on the same split; its checkpoint and threshold come from
validation nodes, and the test nodes are scored once. Results: ``results.json`` (with the
resolved config, version and commit), ``results.md`` and PNG plots under ``run.out``.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, cast

import numpy as np
import torch
from torch_geometric.data import Data

from ..config import check_results_kept, parse_given, run_metadata, warn_unread_flags
from ..detectors.base import BaseDetector, unused_edge_data_said
from ..detectors.registry import (
    DETECTOR_REGISTRY,
    RegisteredDetector,
    add_plugin_argument,
    load_plugins,
    plugin_flags,
)
from ..exceptions import ConfigWarning, SmallSampleWarning
from ..plots import anomaly as anomaly_plots  # (module attributes: tests patch plot_curves)
from ..progress import progress_bar
from ..protocols.anomaly import (
    ENERGY_ROW,
    METRICS,
    Split,
    energy_row,
    energy_trajectory,
    et_differences,
    et_node_differences,
    evaluate,
    make_splits,
    same_split,
    sealed_labels,
    seed_ensemble,
    summarize_runs,
)
from ..protocols.anomaly_config import (
    AnomalyConfig,
    check_own_detectors,
    check_stack_folds,
    load_data,
    make_detector,
    new_detector,
    own_detector,
    section_readers,
)
from ..protocols.anomaly_description import describe_protocol
from ..protocols.significance import describe_design, difference_sections, results_entries
from ..reporting import (
    SCORES_FILE,
    checks_output_folder,
    markdown_table,
    provenance_note,
    write_plot_data,
    write_results,
    write_scores,
)
from ..training.engine import join_process_group
from ..transforms.features import FEATURE_NORMS

if TYPE_CHECKING:
    from ..detectors.neural import ETDetector

CONFIG = AnomalyConfig


# ----------------------------------------------------------------------------------------------
# Run
# ----------------------------------------------------------------------------------------------
@checks_output_folder()
def run(config: AnomalyConfig, data: Optional[Data] = None,
        detectors: Optional[Mapping[str, Callable[[int], BaseDetector]]] = None
        ) -> dict[str, Any]:
    """Run the experiment; ``data`` (a PyG ``Data`` with binary ``y``) replaces loading.

    ``detectors`` adds your own rows beside ``config.protocol.models``: ``name -> factory``,
    where ``factory(seed)`` returns an unfitted detector (any
    :class:`~et_graph.detectors.base.BaseDetector`). Each is fitted on the same splits, its
    threshold chosen on validation, and it enters the tables, plots, scores and ET's
    differences like the built-in rows. So do the detectors registered under a name of
    ``config.protocol.models`` (:func:`~et_graph.detectors.register_detector`)."""
    own = check_own_detectors(detectors or {})
    names = [*config.protocol.model_names(), *own]
    # The registrations this run started with, used for every seed: a name registered again
    # (replace=True) while the run goes on would otherwise mix two detectors in one row.
    registry = DETECTOR_REGISTRY.snapshot(names)
    for name in registry:  # a wrong kind found now, not after seed 0's trainings
        new_detector(config, name, 0, registry=registry)
    if config.data.feature_norm not in FEATURE_NORMS:
        raise ValueError(f"feature_norm must be one of {FEATURE_NORMS}")
    config.run.apply_threads()
    # (torchrun without --ddp is refused by checks_output_folder, before this)
    rank, created = join_process_group(config.protocol.ddp)
    try:
        return _run(config, names, load_data(config.data, data), rank, own, registry)
    finally:
        # only the group this run made: the caller's own was destroyed under it, and a second
        # run in one process could not start (a DDP audit)
        if created and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


#: Fewer anomalous test nodes than this draw a warning: the metrics move in steps of 1/k.
MIN_TEST_ANOMALIES = 5

#: Printed above a validation-only run's table, so that nobody reads it as a test result.
VALIDATION_ONLY_NOTE = ("Validation only (--validation-only): every figure below is measured "
                        "on the validation nodes; no test node was scored.")


def _run(config: AnomalyConfig, names: list[str], data: Data, rank: int,
         own: Mapping[str, Callable[[int], BaseDetector]],
         registry: Mapping[str, RegisteredDetector]) -> dict[str, Any]:
    start = time.perf_counter()
    p = config.protocol
    dataset = str(getattr(data, "name", None) or config.data.dataset)
    if (p.protocol == "paper" and config.data.data and rank == 0
            and getattr(data, "train_mask", None) is not None):
        # A user's file with masks (the named datasets document their protocol instead)
        warnings.warn(f"{config.data.data} carries its own train/val/test masks; the paper "
                      "protocol draws stratified splits instead (--protocol gadbench uses the "
                      "file's masks)", ConfigWarning, stacklevel=2)
    if p.energy_row and p.chunked and "et" in names and not p.validation_only and rank == 0:
        warnings.warn("the energy row and its trajectory are full-graph passes, which the "
                      "inference chunks avoid: they are left out (--no-energy-row says so "
                      "without this warning)", ConfigWarning, stacklevel=2)
    splits = make_splits(data, p.protocol, p.seeds, p.train_ratio, p.split_seed, p.vary_split)
    one_split = same_split(splits)
    if p.seed_ensemble and not one_split:
        raise ValueError("seed_ensemble averages the seeds of one split, but these seeds have "
                         "different splits (vary_split, or several dataset masks)")
    progress = config.run.progress and rank == 0
    y = data.y.cpu().numpy()
    check_stack_folds(config, names, [y[split.train.numpy()] for split in splits])
    # The nodes every table scores: test, or validation alone for a probe (no test node is
    # scored and no test label read from here on).
    scored_part = "validation" if p.validation_only else "test"
    fewest = min(int(y[split.scored(scored_part).numpy()].sum()) for split in splits)
    if fewest < MIN_TEST_ANOMALIES and rank == 0:
        warnings.warn(f"a {scored_part} split holds only {fewest} anomalous node(s): its "
                      "AUROC, AUPRC and Rec@K rest on so few that one node moves them by "
                      f"1/{max(fewest, 1)} of their range; read them as anecdotes (a larger "
                      "graph gives more)",
                      SmallSampleWarning, stacklevel=2)
    rows: dict[str, list[dict[str, float]]] = {}
    curves: dict[str, Any] = {"prob": {}, "history": {}, "energy": None,
                              "select_metric": config.train.select_metric}
    per_seed: list[dict[str, Any]] = []
    epoch_seconds: dict[str, list[float]] = {}
    seed_scores: dict[str, list[np.ndarray]] = {}
    # Every row's scores of the scored nodes, per seed: scores.npz, for tests over the nodes
    # (DeLong) and for joining runs made apart.
    kept_scores: dict[str, list[np.ndarray]] = {}
    scored_nodes: list[np.ndarray] = []
    # The class of each row the caller brought (own or registered): the protocol line names it.
    own_kinds: dict[str, str] = {}
    registered_kinds: dict[str, str] = {}
    bar = progress_bar(splits, desc=f"{dataset} seeds", disable=not progress)
    for seed, split in enumerate(bar):
        train_mask, val_mask, _ = split.masks(data.num_nodes)
        nodes = split.scored(scored_part).numpy()
        detail: dict[str, Any] = {"seed": seed, "split_sizes": list(split.sizes())}
        scored_nodes.append(nodes)
        for name in names:
            torch.manual_seed(seed)
            det = (own_detector(own, name, seed) if name in own
                   else make_detector(config, name, seed, progress, dataset, registry))
            if name in own:
                own_kinds[name] = type(det).__name__
            elif name in registry:
                registered_kinds[name] = type(det).__name__
            with unused_edge_data_said(seed > 0):  # said at the first seed
                det.fit(sealed_labels(data, train_mask, val_mask), train_mask, val_mask)
            # (fit sets both)
            score = cast(torch.Tensor, det.decision_score_).double().numpy()
            metrics = evaluate(y[nodes], score[nodes], cast(float, det.threshold_))
            rows.setdefault(name, []).append(metrics)
            kept_scores.setdefault(name, []).append(score[nodes])
            detail[name] = {**metrics, "threshold": det.threshold_, **det.fit_info_}
            if p.seed_ensemble:
                seed_scores.setdefault(name, []).append(score)
            if det.history_:
                curves["history"].setdefault(name, []).append(
                    anomaly_plots.training_curve(det.history_, det.fit_info_.get("best_epoch")))
                epoch_seconds.setdefault(name, []).append(det.fit_info_["epoch_seconds"])
            if seed == 0:
                curves["prob"][name] = score
            if name == "et" and p.reports_energy:
                # (the name "et" is the built-in ETDetector's: own detectors cannot take it)
                et = cast("ETDetector", det)
                metrics, signed_energy, info = energy_row(et, data, split)
                rows.setdefault(ENERGY_ROW, []).append(metrics)
                kept_scores.setdefault(ENERGY_ROW, []).append(signed_energy[nodes])
                detail[ENERGY_ROW] = {**metrics, **info}
                if seed == 0:
                    curves["prob"][ENERGY_ROW] = signed_energy
                    curves["energy"] = energy_trajectory(et, data, split)
        per_seed.append(detail)

    ensembles = {}
    for name, scores in seed_scores.items():
        metrics, threshold, val_auroc = seed_ensemble(y, scores, splits[0])
        rows[f"{name}_ensemble"] = [metrics]
        curves["prob"][f"{name}_ensemble"] = np.mean(np.stack(scores), axis=0)
        ensembles[f"{name}_ensemble"] = {**metrics, "threshold": threshold,
                                         "val_auroc": val_auroc, "seeds": len(scores)}
    models = {name: summarize_runs(runs) for name, runs in rows.items()}
    differences, design_note = et_differences(models, splits, scored_part, one_split)
    node_differences = (et_node_differences(kept_scores, y[scored_nodes[0]], p.bootstrap_rounds)
                        if one_split else [])
    results = {
        "dataset": dataset,
        "scored": scored_part,
        "protocol": describe_protocol(config, splits, names, y, own_kinds, registered_kinds),
        "models": models,
        "epoch_seconds_median": {k: float(np.median(v)) for k, v in epoch_seconds.items()},
        "seconds_total": time.perf_counter() - start,
        "per_seed": per_seed,
        **({"seed_ensembles": ensembles} if ensembles else {}),
        **results_entries(differences, design_note),
        **results_entries(node_differences, describe_design(
            "nodes", len(splits), bootstrap_rounds=p.bootstrap_rounds), "node_"),
        "meta": run_metadata(config, (data.x, data.edge_index, getattr(data, "edge_type", None),
                                      data.y)),
    }
    if getattr(data, "relation_names", None) is not None:
        # the relations of edge_type's ids, in their order (a fraud-data audit: not recorded)
        results["relation_names"] = [str(name) for name in data.relation_names]
    if rank == 0 and config.run.out:
        write_outputs(Path(config.run.out), results, curves, data, splits[0])
        write_scores(Path(config.run.out) / SCORES_FILE, kept_scores, range(len(splits)),
                     scored_nodes, [y[n] for n in scored_nodes], results["meta"]["run_id"])
    if rank == 0:  # the result is printed with or without progress bars
        # with the protocol, as results.md and the other tasks' printouts give it
        print(f"Anomaly detection: {dataset}\n\n{results['protocol']}\n")
        if p.validation_only:
            print(VALIDATION_ONLY_NOTE)
        print(markdown_table(models, METRICS))
        for section in difference_sections(results):
            print("\n" + section)
    return results


def write_outputs(out: Path, results: dict[str, Any], curves: dict[str, Any], data: Data,
                  split: Split) -> None:
    notes = [f"wall time of the trainings and scoring: {results['seconds_total']:.1f} s (data "
             "loading and feature transforms excluded)"]
    every = results["meta"].get("config", {}).get("train", {}).get("validate_every", 1)
    passes = f" every {every} epochs and at the last" if every > 1 else ""
    notes += [f"{name} epoch (train + validation pass{passes}), median: {seconds:.2f} s"
              for name, seconds in results["epoch_seconds_median"].items()]
    part = results.get("scored", "test")
    if part == "validation":
        notes.insert(0, VALIDATION_ONLY_NOTE)
    notes.append(f"Rec@K: share of the {part} anomalies among the K top-scored {part} nodes, "
                 "K = #anomalies")
    notes.append(provenance_note(results["meta"]))
    write_results(out, results, METRICS, title=f"Anomaly detection: {results['dataset']}",
                  notes=notes, sections=difference_sections(results))
    anomaly_plots.plot_curves(out, curves, data, split, scored=results.get("scored", "test"))
    if curves["history"]:
        write_plot_data(out / "training_curves.json", {
            "select_metric": curves["select_metric"],
            # per model, per seed: its training losses and validation AUROCs by epoch (the
            # figure draws epoch i + 1), and the epoch it kept, counted from 0
            "models": curves["history"]}, results["meta"].get("run_id"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``et-graph anomaly`` beside its config's: ``--plugin``."""
    add_plugin_argument(parser)


def main(argv: Optional[list[str]] = None, prog: str = "et-graph anomaly",
         defaults: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``et-graph anomaly``; an example script passes its own ``prog`` and ``defaults``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # before the flags are resolved: --models may name the detectors the plugins register
    load_plugins(plugin_flags(argv), environment=True)
    config, given = parse_given(CONFIG, argv, prog=prog, description=__doc__, defaults=defaults,
                                arguments=add_arguments)
    # (--no-energy-row is never a flag without effect: only asking for the row without ET is)
    off = set() if config.protocol.energy_row else {"protocol.energy_row"}
    warn_unread_flags(given - off, config.protocol.model_names(), section_readers())
    check_results_kept(config)
    return run(config)
