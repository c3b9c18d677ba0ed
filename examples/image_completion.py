"""Masked image completion with the dense Energy Transformer (paper section 3).

    python examples/image_completion.py --quick            # seconds: a smoke run, every file
    python examples/image_completion.py --config configs/image/digits.toml   # the docs' table
    python examples/image_completion.py --data ./my_images --image-size 32 --patch-size 4

Writes results.json / results.md and PNG figures to --out (default results/image_completion).
The same code runs as ``et-graph image ...``.
"""
from pathlib import Path

from et_graph.cli import run_example
from et_graph.experiments.image_completion import main

if __name__ == "__main__":
    run_example(lambda: main(prog=Path(__file__).name), __file__)
