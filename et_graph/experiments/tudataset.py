"""TUDataset graph classification: ET vs GIN vs the structure-agnostic baseline, stratified CV.

Loads any TU dataset offline from ``ROOT/NAME/raw/NAME_*.txt`` (default: the shipped
``datasets/TUDataset``) through :func:`et_graph.datasets.load_tudataset`, runs
:func:`et_graph.protocols.graph_cv.cross_validate` and writes ``results.json``, ``results.md``,
``folds.jsonl`` and ``accuracy.png`` to ``OUT/NAME/``. Presets: ``configs/tudataset/NAME.toml``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..config import (
    PRESET_CANDIDATE,
    check_results_kept,
    parse_given,
    run_metadata,
    warn_unread_flags,
)
from ..plots.graph import plot_fold_accuracies
from ..plugins import add_plugin_argument, load_plugins, plugin_flags
from ..progress import tqdm
from ..protocols.graph_cv import (
    cross_validate,
    cross_validate_selected,
    describe_selection,
    graph_labels,
    selection_notes,
)
from ..protocols.significance import cv_difference_entries, difference_sections
from ..protocols.tudataset_config import (  # noqa: F401  (the task's config, re-exported here)
    CONFIG,
    FLAG_READERS,
    GRID_SECTIONS,
    MODEL_NAMES,
    TUBaselinesConfig,
    TUDataConfig,
    TUDatasetConfig,
    TUETConfig,
    TUProtocolConfig,
    describe_registered,
    et_model_kwargs,
    flag_readers,
    grid_configs,
    load_graphs,
    model_factories,
    parse_grid,
    registered_models_of,
)
from ..reporting import (
    checks_output_folder,
    counted,
    json_text,
    markdown_table,
    provenance_note,
    write_results,
)
from ..training.checkpoint import graph_tensors

#: Where a running cross-validation appends its folds (``folds.jsonl`` once it has finished).
PARTIAL_FOLDS = "folds.running.jsonl"


@checks_output_folder(lambda config: config.run.out and Path(config.run.out, config.data.dataset))
def run(config: TUDatasetConfig) -> dict[str, Any]:
    """Cross-validate every model of ``config.protocol.models`` on the dataset (stratified
    outer folds; each fold's epoch, and its grid point with ``--grid``, chosen on its inner
    validation split; the test fold scored once); returns the results and, with
    ``config.run.out``, writes ``OUT/DATASET/results.{json,md}`` and the accuracy plot."""
    config.run.apply_threads()
    data, protocol, progress = config.data, config.protocol, config.run.progress
    # every candidate's config is built (and checked) before the data are loaded
    candidates = grid_configs(config)
    graphs, info = load_graphs(data, progress)
    # The registered models as registered now, each built once: a wrong kind is named here
    registry, registered_kinds = registered_models_of(config, info, graphs)
    factories = model_factories(config, info, registry)
    out_dir = Path(config.run.out) / data.dataset if config.run.out else None
    started = time.time()

    def log_fold(record: dict[str, Any]) -> None:
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            with open(out_dir / PARTIAL_FOLDS, "a", encoding="utf-8") as handle:
                handle.write(json_text(record, indent=None) + "\n")
        key = "val_accuracy" if protocol.validation_only else "test_accuracy"
        accs = ", ".join(f"{n}={r[key]:.3f}" for n, r in record["models"].items())
        accs += " (inner validation)" if protocol.validation_only else ""
        if progress:
            tqdm.write(f"[{data.dataset}] fold {record['fold']}: {accs}")

    # The folds of this run go to a file of their own until it has written its results: a
    # failed or stopped run deleted the earlier folds.jsonl and left the earlier results.json
    # beside nothing (an audit), or beside the new run's first folds.
    if out_dir is not None and (out_dir / PARTIAL_FOLDS).exists():
        (out_dir / PARTIAL_FOLDS).unlink()
    options = dict(
        folds=protocol.folds, seed=protocol.seed, val_fraction=protocol.val_fraction,
        continuous_channels=info["node_attributes"], max_folds=protocol.max_folds,
        progress=progress, on_fold_end=log_fold, device=config.run.device,
        checkpoint=lambda fold, name: config.run.checkpoint(data.dataset, f"fold{fold}", name),
        runs_per_fold=protocol.runs_per_fold,
        # a registered model's checkpoint resumes only under the factory (and code) it had
        identities={name: entry.identity for name, entry in registry.items()},
    )
    if len(candidates) > 1:
        cv = cross_validate_selected(
            graphs,
            {name: model_factories(c, info, registry) for name, c in candidates.items()},
            {name: {m: c.train for m in factories} for name, c in candidates.items()},
            **options,
        )
    else:
        cv = cross_validate(graphs, factories, {name: config.train for name in factories},
                            evaluate_test=not protocol.validation_only, **options)
    folds_run = len(cv["folds"])
    partial = folds_run < protocol.folds
    grid = dict(parse_grid(protocol.grid)) if protocol.grid else {}
    results = {
        "dataset": data.dataset,
        "protocol": (
            f"stratified {protocol.folds}-fold CV (seed {protocol.seed})"
            + (f", first {counted(folds_run, 'fold')} only (max_folds)" if partial else "")
            + f"; in each training fold a stratified {protocol.val_fraction:.0%} validation "
            "split selects the epoch (best validation accuracy, ties: lower validation loss, up "
            f"to {config.train.epochs} epochs"
            + ("; a grid candidate may set its own" if len(candidates) > 1 else "") + "); "
            + ("validation only: the test folds are never scored; " if protocol.validation_only
               else "the test fold is evaluated once; " if protocol.runs_per_fold == 1 else
               f"{protocol.runs_per_fold} trainings per fold from their own seeds, each "
               "selecting its epoch, the fold's accuracy their mean (Errica et al.), and "
               "ensemble_accuracy that of their averaged class probabilities; ")
            + (describe_selection(candidates, grid)
               if len(candidates) > 1
               else "fixed hyperparameters, not selected inside the folds (a preset tuned on "
                    "this dataset's folds has seen their graphs, so the estimate is mildly "
                    "optimistic; --grid selects inside each fold)")
            + "; same folds for every model" + describe_registered(registered_kinds)
        ),
        **({"grid": {PRESET_CANDIDATE: {}, **grid}} if protocol.grid else {}),
        "models": cv["models"],
        "folds": cv["folds"],
        "data": info,
        "seconds": round(time.time() - started, 1),
        "meta": run_metadata(config, graph_tensors(graphs)),
    }
    metric = "val_accuracy" if protocol.validation_only else "accuracy"
    ensemble = [f"ensemble_{metric}"] if protocol.runs_per_fold > 1 else []
    # ET against each baseline, paired over the shared folds: is a lead above the noise?
    results.update(cv_difference_entries(results["models"], [metric, *ensemble],
                                         protocol.folds, protocol.val_fraction,
                                         len(cv["folds"]), protocol.validation_only))
    if out_dir is None:  # nothing written, the tables still printed
        tqdm.write(f"# {data.dataset}: graph classification\n\n"
                   + markdown_table(results["models"], [metric, *ensemble])
                   + "".join("\n\n" + section for section in difference_sections(results)))
        return results
    edge_dim = info["edge_features"]
    et_reads_edges = "A'" + (" and in its message-passing layers' messages"
                             if config.et.message_passing_edges else "")
    # (a run without ET described what ET reads: a user audit)
    with_et = "et" in protocol.model_names
    notes = [
        *([f"classes 0..{len(info['class_labels']) - 1} are the graph labels "
           f"{info['class_labels']} of the file, in that order"]
          if "class_labels" in info else []),
        f"node features: {info['node_features']}",
        "edge features: " + ((f"{edge_dim} (used by ET through {et_reads_edges})" if with_et
                              else str(edge_dim)) if edge_dim else "none")
        + ("; GIN reads them in its messages (GINE), the structure-agnostic MLP ignores them"
           if config.baselines.gin_edges
           else "; GIN and the structure-agnostic MLP ignore edge features"),
        *([f"structural encodings read by ET{'' if registered_kinds else ' only'}: "
           + ", ".join(part for part, on in (
               (f"Laplacian PE ({config.data.pe_dim} eigenvectors)", config.data.pe_dim),
               (f"random-walk PE ({config.data.rw_pe_dim} steps)", config.data.rw_pe_dim)) if on)
           + "; GIN and the structure-agnostic MLP see the node features only"
           + ("; a registered model can read them only through forward_data(batch)"
              if registered_kinds else "")]
          if with_et and (config.data.pe_dim or config.data.rw_pe_dim) else []),
        ("val_accuracy: inner-validation accuracy, mean ± std (population) over the folds"
         if protocol.validation_only else "accuracy: mean ± std (population) over the test folds"),
        *selection_notes(results["models"]),
        f"wall time of the cross-validation: {results['seconds']} s (data loading and "
        "encodings excluded; shared CPU, noisy)",
        provenance_note(results["meta"]),
    ]
    write_results(out_dir, results, [metric, *ensemble],
                  title=f"{data.dataset}: graph classification", notes=notes,
                  sections=difference_sections(results))
    if (out_dir / PARTIAL_FOLDS).exists():  # the run's folds, now beside its results
        os.replace(out_dir / PARTIAL_FOLDS, out_dir / "folds.jsonl")
    if not protocol.validation_only:
        labels = graph_labels(graphs)
        plot_fold_accuracies(results, out_dir / "accuracy.png",
                             majority=float(np.bincount(labels).max() / labels.size))
    tqdm.write((out_dir / "results.md").read_text(
        encoding="utf-8"))  # with or without progress bars
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``et-graph tudataset`` beside its config's: ``--plugin``."""
    add_plugin_argument(parser, "et_graph.protocols.graph_models.register_graph_model")


def main(argv: Optional[list[str]] = None, prog: str = "et-graph tudataset",
         defaults: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``et-graph tudataset``; an example script passes its own ``prog`` and ``defaults``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # before the flags are resolved: --models may name the graph models the plugins register
    load_plugins(plugin_flags(argv), environment=True)
    config, given = parse_given(CONFIG, argv, prog=prog, description=__doc__, defaults=defaults,
                                arguments=add_arguments)
    warn_unread_flags(given, config.protocol.model_names, flag_readers())
    check_results_kept(config)
    return run(config)
