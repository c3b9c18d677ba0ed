"""``et-graph`` console command: one sub-command per experiment module, plus ``tune``.

Each experiment module exposes ``CONFIG`` (its typed config dataclass) and ``run(config)``. The
flags of a sub-command are generated from ``CONFIG`` (:mod:`et_graph.config`), so the CLI, the
presets in ``configs/`` and the library share one set of defaults; the scripts in ``examples/``
call the same modules, so they cannot drift apart.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Optional

from .config import add_config_arguments, resolve

SUBCOMMANDS = {
    "anomaly": ("et_graph.experiments.anomaly", "graph anomaly detection (node level)"),
    "unsupervised": ("et_graph.experiments.unsupervised_anomaly",
                     "unsupervised node anomaly detection (no labels until scoring)"),
    "tudataset": ("et_graph.experiments.tudataset", "TUDataset graph classification, k-fold CV"),
    "gnnbenchmark": ("et_graph.experiments.gnnbenchmark", "GNNBenchmark runner"),
    "image": ("et_graph.experiments.image_completion", "masked image completion (dense ET)"),
    "tune": ("et_graph.tuning.cli", "hyperparameter search with Optuna (validation data only)"),
}


def build_parser(command: str) -> argparse.ArgumentParser:
    module_name, help_text = SUBCOMMANDS[command]
    module = importlib.import_module(module_name)
    if not hasattr(module, "CONFIG"):
        return module.build_parser()
    parser = argparse.ArgumentParser(prog=f"et-graph {command}", description=help_text)
    add_config_arguments(parser, module.CONFIG)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        lines = [f"  {name:<14}{help_text}" for name, (_, help_text) in SUBCOMMANDS.items()]
        print("usage: et-graph COMMAND [options]\n\ncommands:\n" + "\n".join(lines))
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command = argv[0]
    module = importlib.import_module(SUBCOMMANDS[command][0])
    if not hasattr(module, "CONFIG"):  # e.g. tune: its own parser around a task's config
        module.main(argv[1:])
        return 0
    args = build_parser(command).parse_args(argv[1:])
    module.run(resolve(module.CONFIG, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
