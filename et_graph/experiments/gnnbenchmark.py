"""``et-graph gnnbenchmark``: ET beside same-run GIN / GatedGCN on the GNNBenchmark datasets.

Datasets and what is run when their official files are absent (downloads are never attempted):

* ``ZINC`` (graph regression, test MAE). Official: PyG ``ZINC(subset=True)`` under
  ``ROOT/ZINC/raw``. Offline: the *ZINC proxy*: the official **val** split (1000 graphs,
  ``ROOT/ZINC_subset_partial``) is split into a training part and a holdout for epoch selection,
  and the official **test** split is evaluated once with the selected weights. The train split is
  missing, so the numbers are not comparable with published ZINC results.
* ``PATTERN`` / ``CLUSTER`` (node classification, weighted accuracy as in Dwivedi et al.).
  Official: PyG ``GNNBenchmarkDataset`` under ``ROOT/<NAME>/raw``. Offline: graphs *generated*
  with the published SBM recipe (:mod:`et_graph.datasets.synthetic`).
* ``MNIST`` / ``CIFAR10`` (graph classification, accuracy): official files only.

Protocol (:mod:`et_graph.protocols.gnnbenchmark`): each model trains on the training split, the
epoch with the best validation/holdout metric is selected, and the test split is evaluated once
with those weights. Every model sees the same data, splits and seeds. Results are mean ± std over
seeds (population std). Presets of the documented runs: ``configs/gnnbenchmark/``.
``--models`` also takes models of your own, registered by ``register_benchmark_model``
(:mod:`et_graph.protocols.benchmark_models`) in a module that ``--plugin`` loads.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..config import check_results_kept, parse_given, run_metadata, to_dict, warn_unread_flags
from ..datasets.gnnbenchmark import (
    BenchmarkData,
    add_positional_encoding,
    add_random_walk_encoding,
    load_benchmark,
)
from ..datasets.locking import quiet_processing
from ..plugins import add_plugin_argument, load_plugins, plugin_flags
from ..progress import progress_bar, tqdm
from ..protocols.gnnbenchmark import (
    METRIC_LABELS,
    MODEL_NAMES,
    train_one,
)
from ..protocols.gnnbenchmark_config import (  # noqa: F401  (the task's config, re-exported)
    FLAG_READERS,
    GNNBenchmarkConfig,
    ProtocolConfig,
    describe_registered,
    flag_readers,
    model_builder,
    registered_models_of,
)
from ..protocols.significance import (
    compare_to,
    describe_design,
    difference_sections,
    results_entries,
)
from ..reporting import (
    checks_output_folder,
    format_stat,
    markdown_table,
    provenance_note,
    summarize,
    write_plot_data,
    write_results,
)
from ..training.checkpoint import graph_tensors

CONFIG = GNNBenchmarkConfig


def _plot_curves(out: Path, per_model: dict[str, list[list[float]]], data: BenchmarkData) -> None:
    from ..plots.colours import model_colour
    from ..plots.figures import own_figures

    plt = own_figures()

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curves in per_model.items():
        # Every epoch any seed ran, averaged over the seeds that ran it: cutting to the
        # shortest seed (one stopped early by --patience) hid the others' later epochs.
        lengths = [len(c) for c in curves]
        values = np.full((len(curves), max(lengths)), np.nan)
        for row, curve in enumerate(curves):
            values[row, :len(curve)] = curve
        # the validated epochs only (train.validate_every > 1 leaves NaN between passes)
        epochs = np.arange(1, values.shape[1] + 1)[np.isfinite(values).any(0)]
        values = values[:, epochs - 1]
        mean, std = np.nanmean(values, 0), np.nanstd(values, 0)
        label = name + ("" if len(set(lengths)) == 1 else
                        f" (seeds end at epochs {', '.join(map(str, lengths))})")
        colour = model_colour(name, tuple(per_model), MODEL_NAMES)
        ax.plot(epochs, mean, label=label, color=colour)
        ax.fill_between(epochs, mean - std, mean + std, alpha=0.2, color=colour)
    ax.set_xlabel("epoch (from 1)")
    ax.xaxis.get_major_locator().set_params(integer=True)  # no epoch 1.2
    ax.set_ylabel(f"val {METRIC_LABELS[data.metric]} ({data.better})")
    ax.set_title(f"{data.name}: selection curve (mean ± std over the seeds at each epoch)",
                 fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "val_curves.png", dpi=120)
    plt.close(fig)


def _summary(results: list[dict[str, Any]], metric: str, seeds: list[int]) -> dict[str, Any]:
    return {
        metric: summarize(r["test"] for r in results),
        f"val_{metric}": summarize(r["val"] for r in results),
        "selected_epoch": [r["epoch"] for r in results],  # counted from 1 (its notes say so)
        # the engine's record, as the other tasks' results give it (an engine audit: only
        # this task counted from 1, and it dropped how many epochs ran and whether patience
        # stopped them)
        "best_epoch": [r["best_epoch"] for r in results],
        "epochs_run": [r["epochs_run"] for r in results],
        "stopped_early": [r["stopped_early"] for r in results],
        "train_seconds": summarize(r["seconds"] for r in results),
        "params": results[0]["params"],
        "seeds": list(seeds),
    }


@checks_output_folder()
def run(config: GNNBenchmarkConfig) -> dict[str, Any]:
    """Load the data, train every model with every seed; write results.json/.md and a plot of the
    validation curves to ``config.run.out`` (when set)."""
    config.run.apply_threads()
    names, seeds = config.protocol.model_names, config.protocol.seed_list
    progress = config.run.progress
    with quiet_processing(not progress):  # PyG's "Processing..." on a first load
        data = load_benchmark(config.data)
    add_random_walk_encoding(data, config.data.rw_pe_dim, progress)  # every model reads it
    if "et" in names:
        add_positional_encoding(data, config.et.pe_dim, progress)
    # The registered models as registered now, each built once on the data with its encodings
    # (its factory reads their widths): a wrong kind or output shape is named here
    registry, registered_kinds = registered_models_of(config, data)
    builders = {name: model_builder(config, name, registry) for name in names}
    metric = data.metric
    settings = {k: v for k, v in to_dict(config).items() if k != "run"}
    fingerprint = json.dumps(settings, sort_keys=True)
    # a registered model's checkpoint is resumed only by the factory that trained it
    factories = {name: entry.identity for name, entry in registry.items()}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    jobs = [(name, seed) for name in names for seed in seeds]
    for name, seed in progress_bar(jobs, desc=f"{data.name}: models x seeds", disable=not progress):
        try:
            result = train_one(
                name, data, seed, config.train, config.et, config.baselines,
                device=config.run.device, progress=progress,
                checkpoint=config.run.checkpoint(config.data.dataset, name, f"seed_{seed}"),
                fingerprint=f"{fingerprint}|{name}|{seed}" + (
                    f"|factory={factories[name]}" if name in factories else ""),
                build=builders[name],
            )
        except FloatingPointError as error:
            # Say which training diverged and what of the run is kept (nothing is written).
            finished = [f"{n} seed {seeds[i]}" for n, rs in runs.items() for i in range(len(rs))]
            raise FloatingPointError(
                f"{name} seed {seed} diverged ({error}); no results were written"
                + (f" (finished before it: {', '.join(finished)})" if finished else "")
                + ". Lower --lr, or pass --checkpoint-dir so that finished trainings are "
                "kept for --resume") from error
        runs[name].append(result)
        if progress:
            tqdm.write(f"{data.name} {name} seed {seed}: test {metric} {result['test']:.4f} "
                       f"(val {result['val']:.4f}, epoch {result['epoch']}, "
                       f"{result['seconds']:.0f}s)")
    models = {name: _summary(results, metric, seeds) for name, results in runs.items()}
    # ET minus each baseline on the test metric: Welch over the seeds (one fixed split)
    differences = (compare_to(models, "et", [metric], "seeds",
                              higher_is_better=not data.lower_is_better)
                   if "et" in models else [])
    sizes = {split: len(graphs) for split, graphs in data.splits.items()}
    results = {
        "dataset": data.name,
        "protocol": (data.protocol + f"; mean ± std over seeds {seeds}"
                     + describe_registered(registered_kinds)),
        "source": data.source,
        "metric": metric,
        "lower_is_better": data.lower_is_better,
        "split_sizes": sizes,
        "models": models,
        **results_entries(differences, describe_design("seeds", len(seeds))),
        "meta": run_metadata(config, graph_tensors(*data.splits.values())),
    }
    notes = list(data.notes)
    if data.rw_pe_dim:
        notes.append(f"Every {'built-in ' if registered_kinds else ''}model adds a random-walk "
                     f"encoding ({data.rw_pe_dim} steps) to its node inputs"
                     + ("; a registered model is given it (rw_pe)" if registered_kinds else "")
                     + ".")
    # What ET alone gets (the baselines' inputs are the node features and the walk encoding).
    only_et = [part for part, on in (
        (f"a Laplacian PE ({config.et.pe_dim} eigenvectors)", config.et.pe_dim),
        ("node features standardised with training-split statistics",
         data.node_dim and data.task == "classification")) if on]
    if "et" in names and only_et:
        notes.append(f"ET alone reads {' and '.join(only_et)}; the baselines do not.")
    notes.append("Split sizes: " + ", ".join(f"{k} {v}" for k, v in sizes.items()) + ".")
    # Epochs counted from 1 here (the anomaly and TU runners' best_epoch counts from 0); the
    # seconds with one decimal, so that a quick run does not print "0 (n = 1) s".
    notes += [f"{name}: {m['params']:,} parameters, selected epochs {m['selected_epoch']} "
              f"(counted from 1), {format_stat(m['train_seconds'], 1)} s training per seed"
              for name, m in models.items()]
    notes.append(provenance_note(results["meta"]))  # (the other runners' tables had it)
    title = f"GNNBenchmark: {data.name} ({METRIC_LABELS[metric]} on test, {data.better})"
    if config.run.out:
        out = Path(config.run.out)
        write_results(out, results, [metric, f"val_{metric}"], title=title, notes=notes,
                      sections=difference_sections(results))
        per_model = {name: [r["curve"] for r in rs] for name, rs in runs.items()}
        _plot_curves(out, per_model, data)
        write_plot_data(out / "val_curves.json", {
            "metric": data.metric, "better": data.better, "seeds": seeds,
            # per model, per seed: the validation metric by epoch (the figure draws epoch
            # i + 1, the mean and std over the seeds at each)
            "models": per_model}, results["meta"].get("run_id"))
        print((out / "results.md").read_text(encoding="utf-8"))
    else:
        print(f"# {title}\n\n{markdown_table(models, [metric, f'val_{metric}'])}"
              + "".join("\n\n" + section for section in difference_sections(results)))
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``et-graph gnnbenchmark`` beside its config's: ``--plugin``."""
    add_plugin_argument(parser, "et_graph.protocols.benchmark_models.register_benchmark_model")


def main(argv: Optional[list[str]] = None, prog: str = "et-graph gnnbenchmark",
         defaults: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``et-graph gnnbenchmark``; an example script passes its own ``prog`` and ``defaults``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # before the flags are resolved: --models may name the models the plugins register
    load_plugins(plugin_flags(argv), environment=True)
    config, given = parse_given(CONFIG, argv, prog=prog, description=__doc__, defaults=defaults,
                                arguments=add_arguments)
    warn_unread_flags(given, config.protocol.model_names, flag_readers())
    check_results_kept(config)
    return run(config)


if __name__ == "__main__":
    main()
