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


def write_probe(out: str | Path, what: str, machine: str, model: str,
                rows: Sequence[Mapping[str, Any]], table: str,
                extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write a validation-only probe (``benchmarks/*_validation_probe.py``): the JSON at ``out``
    with ``what``, ``machine``, ``model``, one row per variant and the ``extra`` keys, and its
    Markdown ``table`` beside it (``.md``). Returns the JSON payload."""
    payload = {"what": what, "machine": machine, "model": model, "runs": list(rows),
               **(extra or {})}
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")
    path.with_suffix(".md").write_text(table + "\n")
    return payload


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


def add_probe_arguments(parser: Any, run_help: str) -> None:
    """The command-line arguments every validation probe shares: ``--run LABEL=PATH`` (one per
    variant), ``--model``, ``--what``, ``--machine`` and ``--out``."""
    parser.add_argument("--run", action="append", required=True, metavar="LABEL=PATH",
                        help=run_help)
    parser.add_argument("--model", default="et")
    parser.add_argument("--what", required=True, help="what the probe compares")
    parser.add_argument("--machine", required=True, help="threads, and what ran beside the runs")
    parser.add_argument("--out", required=True, help="probe JSON (a .md table is written beside)")


def probe_variant(spec: str) -> tuple[str, Path]:
    """``LABEL=PATH`` of ``--run`` as ``(label, path)``; the label may itself hold ``=``."""
    label, sep, location = spec.rpartition("=")
    if not sep or not label or not location:
        raise SystemExit(f"--run {spec!r}: expected LABEL=PATH")
    return label, Path(location)


def results_json(path: Path, writers: str) -> Path:
    """A run's ``results.json``: ``path`` itself (a copy kept under ``docs/measured``),
    ``path/results.json``, or the one ``path/*/results.json`` (``et-graph tudataset --out OUT``
    writes ``OUT/DATASET/``). ``writers`` names the commands whose ``--out`` folders fit."""
    if path.suffix == ".json" and path.is_file():
        return path
    if (path / "results.json").is_file():
        return path / "results.json"
    nested = sorted(path.glob("*/results.json"))
    if len(nested) != 1:
        raise SystemExit(f"{path}: expected its results.json or one */results.json, found "
                         f"{len(nested)}: give folders written by {writers} --out (one dataset "
                         "each)")
    return nested[0]
