"""Validation-only probe of GNNBenchmark configurations: the holdout metric over a few seeds,
without reading the test split.

Each configuration is an ``et-graph gnnbenchmark`` flag list (a preset and overrides). Every model
it names trains with model seeds ``0 .. --seeds - 1`` exactly as a tuning trial does
(:class:`et_graph.tuning.gnnbenchmark.GNNBenchmarkObjective`: the test split is dropped before
any training), and the probe prints each seed's validation metric and their mean. It is for
diagnosis (does an ingredient help on the holdout?); a comparison between models still needs
the same budget for each and a test run of the chosen presets.

    python benchmarks/gnnbenchmark_holdout_probe.py --seeds 3 --json runs/probe.json \\
        --variant "rwpe=--config configs/gnnbenchmark/zinc_proxy_long_rwpe.toml --models et" \\
        --variant "rwpe+bonds=--config configs/gnnbenchmark/zinc_proxy_long_rwpe.toml \\
                   --models et --incident-edges"
"""
from __future__ import annotations

import argparse
import json
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from et_graph.config import parse, run_metadata
from et_graph.datasets.gnnbenchmark import load_benchmark
from et_graph.experiments.gnnbenchmark import GNNBenchmarkConfig
from et_graph.tuning.gnnbenchmark import GNNBenchmarkObjective


def probe(config: GNNBenchmarkConfig, seeds: int) -> dict[str, Any]:
    """``{model: {"values": [...], "mean", "std", "seconds"}}`` on the validation split."""
    config.run.apply_threads()
    data = load_benchmark(config.data)  # once for every model; each objective drops its test
    out = {}
    for model in config.protocol.model_names:
        start = time.perf_counter()
        values = GNNBenchmarkObjective(config, model, data, tune_seeds=seeds).seed_values()
        out[model] = {"values": values, "mean": float(np.mean(values)),
                      "std": float(np.std(values)), "seconds": time.perf_counter() - start}
    return out


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--variant", action="append", required=True,
                        help='NAME=FLAGS: a name and the et-graph gnnbenchmark flags it runs')
    parser.add_argument("--seeds", type=int, default=3, help="model seeds 0..N-1")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.seeds <= 0:
        raise SystemExit("--seeds must be positive")
    report: dict[str, Any] = {"seeds": list(range(args.seeds)), "variants": {}}
    lines = ["| variant | model | validation metric per seed | mean ± std | seconds |",
             "|---|---|---|---|---|"]
    for spec in args.variant:
        name, sep, flags = spec.partition("=")
        if not sep or not name:
            raise SystemExit(f"--variant must be NAME=FLAGS, got {spec!r}")
        if name in report["variants"]:
            raise SystemExit(f"variant name {name!r} is given twice")
        config = parse(GNNBenchmarkConfig, shlex.split(flags) + ["--no-progress"])
        result = probe(config, args.seeds)
        report["variants"][name] = {"flags": flags, "models": result,
                                    "meta": run_metadata(config)}
        for model, r in result.items():
            lines.append(f"| {name} | {model} | {', '.join(f'{v:.4f}' for v in r['values'])} "
                         f"| {r['mean']:.4f} ± {r['std']:.4f} | {r['seconds']:.0f} |")
            print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        args.json.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
