"""TUDataset graph classification with ET, GIN and the structure-agnostic baseline (same folds).

    python examples/tudataset_classification.py --dataset MUTAG --root datasets/TUDataset \
        --folds 10 --epochs 100 --out runs/tudataset

Same options as ``et-graph tudataset``; see docs/graph_classification.md.
"""
from __future__ import annotations

import argparse

from et_graph.experiments import tudataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tudataset.add_arguments(parser)
    tudataset.run(parser.parse_args())


if __name__ == "__main__":
    main()
