"""TUDataset graph classification with ET, GIN and the structure-agnostic baseline (same folds).

    python examples/tudataset_classification.py --dataset MUTAG --quick      # a smoke run
    python examples/tudataset_classification.py --config configs/tudataset/PROTEINS.toml

The data default to the shipped ``datasets/TUDataset`` (``--root`` reads another folder). Same
options as ``et-graph tudataset`` (the same ``main``); see docs/graph_classification.md.
"""
from pathlib import Path

from et_graph.cli import run_example
from et_graph.experiments.tudataset import main

if __name__ == "__main__":
    run_example(lambda: main(prog=Path(__file__).name), __file__)
