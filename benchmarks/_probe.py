"""What the benchmark scripts that read stored runs share: the ``--run LABEL=PATH`` arguments
of the validation probes, finding a run's ``results.json``, and writing a probe's JSON and
table. Command-line helpers of ``benchmarks/``, kept out of the library."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


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
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    path.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
    return payload


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
