"""``et-graph`` console command: one sub-command per experiment module.

Each experiment module exposes ``add_arguments(parser)`` and ``run(args) -> dict``; the examples in
``examples/`` call the same two functions, so the CLI and the scripts cannot drift apart.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Optional

SUBCOMMANDS = {
    "anomaly": ("et_graph.experiments.anomaly", "graph anomaly detection (node level)"),
    "tudataset": ("et_graph.experiments.tudataset", "TUDataset graph classification, k-fold CV"),
    "gnnbenchmark": ("et_graph.experiments.gnnbenchmark", "GNNBenchmark runner"),
    "image": ("et_graph.experiments.image_completion", "masked image completion (dense ET)"),
}


def build_parser(command: str) -> argparse.ArgumentParser:
    module_name, help_text = SUBCOMMANDS[command]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"et-graph {command}", description=help_text)
    module.add_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        lines = [f"  {name:<14}{help_text}" for name, (_, help_text) in SUBCOMMANDS.items()]
        print("usage: et-graph COMMAND [options]\n\ncommands:\n" + "\n".join(lines))
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command = argv[0]
    module = importlib.import_module(SUBCOMMANDS[command][0])
    args = build_parser(command).parse_args(argv[1:])
    module.run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
