"""Results as JSON plus a readable Markdown table: mean +- std over seeds or folds."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """``{"mean", "std", "values"}`` with the population std (0 for a single value)."""
    values = [float(v) for v in values]
    if not values:
        return {"mean": float("nan"), "std": float("nan"), "values": []}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {"mean": mean, "std": std, "values": values}


def format_stat(stat: Mapping[str, Any], digits: int = 4) -> str:
    """``mean ± std``; a single value is written as ``value (n = 1)``, since ``± 0`` under a
    mean ± std caption would read as a measured zero spread."""
    if stat is None or stat.get("mean") is None or math.isnan(stat["mean"]):
        return "n/a"
    if len(stat.get("values") or ()) == 1:
        return f"{stat['mean']:.{digits}f} (n = 1)"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def provenance_note(meta: Mapping[str, Any]) -> str:
    """One line for a results table from ``run_metadata()``: the package version and commit, and
    the machine (processor, CPU instruction set, threads) that decided the rounding."""
    note = f"et-graph {meta.get('et_graph_version')}, commit {meta.get('git_commit')}"
    machine = meta.get("machine")
    if machine:
        note += (f"; {machine.get('processor')} ({machine.get('cpu_capability')}), "
                 f"{machine.get('threads')} thread(s)")
        if machine.get("cuda_device"):
            note += f", GPU {machine['cuda_device']}"
        if machine.get("environment"):
            note += ", " + ", ".join(f"{k}={v}" for k, v in machine["environment"].items())
    return note


def markdown_table(
    models: Mapping[str, Mapping[str, Any]], metrics: Sequence[str], digits: int = 4
) -> str:
    """One row per model, one column per metric (each a ``summarize`` dict)."""
    header = "| model | " + " | ".join(metrics) + " |"
    rule = "|---|" + "---|" * len(metrics)
    rows = [
        f"| {name} | " + " | ".join(format_stat(stats.get(m), digits) for m in metrics) + " |"
        for name, stats in models.items()
    ]
    return "\n".join([header, rule, *rows])


def write_results(
    out_dir: str | Path,
    results: Mapping[str, Any],
    metrics: Sequence[str],
    title: str = "",
    notes: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Write ``results.json`` and ``results.md`` (title, protocol, table, notes) to ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "results.json"
    json_path.write_text(json.dumps(results, indent=2, default=float))
    lines = [f"# {title or results.get('dataset', 'results')}", ""]
    if results.get("protocol"):
        lines += [f"Protocol: {results['protocol']}", ""]
    lines += [markdown_table(results["models"], metrics), ""]
    lines += [f"- {note}" for note in notes]
    md_path = out / "results.md"
    md_path.write_text("\n".join(lines).rstrip() + "\n")
    return json_path, md_path


def rank_across_datasets(scores: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, Any]]:
    """Rank the same candidates on several datasets and summarise: how one configuration is
    chosen for every dataset (a default, a general preset).

    ``scores`` is ``{dataset: {candidate: score}}``, higher is better, every dataset scoring the
    same candidates. Returns ``{candidate: {"rank": {dataset: rank}, "mean_rank",
    "mean_score"}}`` in the first dataset's order; rank 1 is the best score on that dataset and
    equal scores share their average rank."""
    from scipy.stats import rankdata

    if not scores:
        raise ValueError("no datasets to rank on")
    candidates = list(next(iter(scores.values())))
    for dataset, values in scores.items():
        if set(values) != set(candidates):
            raise ValueError(f"{dataset} scores other candidates than {candidates}")
    out: dict[str, dict[str, Any]] = {name: {"rank": {}} for name in candidates}
    for dataset, values in scores.items():
        for name, rank in zip(candidates, rankdata([-values[name] for name in candidates])):
            out[name]["rank"][dataset] = float(rank)
    for name, entry in out.items():
        entry["mean_rank"] = math.fsum(entry["rank"].values()) / len(scores)
        entry["mean_score"] = math.fsum(values[name] for values in scores.values()) / len(scores)
    return out
