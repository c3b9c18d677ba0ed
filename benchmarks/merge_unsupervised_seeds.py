"""Merge ``et-graph unsupervised`` runs that scored the same graph on disjoint seeds.

A PyGOD fit can take 10-45 minutes here, so five seeds are often run in pieces
(``--seed 0 --seeds 2``, then ``--seed 2 --seeds 3``). This joins the per-seed metrics of the
chosen models (``--models``; default: every model present in all runs) and prints mean ± std
over all seeds (population std, as the runner reports it), as a table and optionally JSON.
It refuses runs on different graphs, with overlapping seeds, or under different settings
(the resolved configs must agree outside the seeds, the model list and the run section).

    python benchmarks/merge_unsupervised_seeds.py RUN_A/results.json RUN_B/results.json \\
        --models dominant,anomalydae --json merged.json
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, Optional

from et_graph.config import to_dict
from et_graph.protocols.unsupervised import UnsupervisedAnomalyConfig
from et_graph.reporting import markdown_table, summarize

METRICS = ("auroc", "auprc", "rec_at_k")


def merge(runs: list[dict[str, Any]], models: Optional[list[str]] = None) -> dict[str, Any]:
    datasets = {run["dataset"] for run in runs}
    if len(datasets) != 1:
        raise SystemExit(f"the runs scored different graphs: {sorted(datasets)}")
    # One name for two graphs (the same relative file name in two folders) was merged into
    # one mean: the protocol lines' node and anomaly counts tell them apart.
    sizes = {_graph_size(run) for run in runs}
    if len(sizes) != 1:
        raise SystemExit(f"the runs scored graphs of different sizes under one name "
                         f"{datasets.pop()!r}: {sorted(sizes, key=str)}")
    # A field a run does not record is newer than that run, whose code ran at its default.
    defaults = _settings({"meta": {"config": to_dict(UnsupervisedAnomalyConfig())}})
    settings = [{**defaults, **_settings(run)} for run in runs]
    for setting in settings[1:]:
        changed = sorted(key for key in set(setting) | set(settings[0])
                         if setting.get(key) != settings[0].get(key))
        if changed:
            raise SystemExit(f"the runs differ in {changed}: their seeds are not one protocol")
    seeds = [entry["seed"] for run in runs for entry in run["per_seed"]]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"the runs share seeds: {sorted(seeds)}")
    common = set.intersection(*(set(run["models"]) for run in runs))
    chosen = models if models is not None else sorted(common)
    missing = sorted(set(chosen) - common)
    if missing:
        raise SystemExit(f"not in every run: {missing}")
    per_seed = {entry["seed"]: entry["metrics"] for run in runs for entry in run["per_seed"]}
    order = sorted(per_seed)
    rows = {model: {"seeds": order, **{metric: summarize(per_seed[seed][model][metric]
                                                         for seed in order)
                                       for metric in METRICS}}
            for model in chosen}
    return {"dataset": datasets.pop(), "seeds": order, "models": rows,
            "commits": [run.get("meta", {}).get("git_commit") for run in runs]}


def _graph_size(run: dict[str, Any]) -> tuple[Optional[str], ...]:
    """``(nodes, anomalies)`` as the run's protocol line states them (``None`` where absent)."""
    protocol = run.get("protocol", "")
    return tuple(match.group(1) if (match := re.search(pattern, protocol)) else None
                 for pattern in (r"(\d+) nodes", r"\((\d+) anomalies"))


#: Config fields that may differ between the pieces of one protocol.
_PIECE_FIELDS = {("protocol", "seed"), ("protocol", "seeds"), ("protocol", "models")}


def _settings(run: dict[str, Any]) -> dict[str, Any]:
    """``{"section.field": value}`` of a run's resolved config, without the fields that
    splitting seeds into pieces changes (and the run section: output folder, threads)."""
    config = run.get("meta", {}).get("config")
    if config is None:
        raise SystemExit(f"a run of {run.get('dataset')} records no config; cannot tell "
                         "whether its seeds belong to the same protocol")
    return {f"{section}.{name}": value for section, fields in config.items()
            if section != "run" for name, value in fields.items()
            if (section, name) not in _PIECE_FIELDS}


def table(merged: dict[str, Any]) -> str:
    return f"{merged['dataset']}, seeds {merged['seeds']}\n" + markdown_table(
        merged["models"], METRICS)


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("results", nargs="+", help="results.json files of the runs")
    parser.add_argument("--models", default=None, help="comma list (default: all in common)")
    parser.add_argument("--json", default=None, help="also write the merged rows here")
    args = parser.parse_args(argv)
    runs = [json.loads(Path(path).read_text(encoding="utf-8")) for path in args.results]
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    merged = merge(runs, models)
    merged["sources"] = args.results
    print(table(merged))
    if args.json:
        Path(args.json).write_text(json.dumps(merged, indent=2), encoding="utf-8")
    return merged


if __name__ == "__main__":
    main()
