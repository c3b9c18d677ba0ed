"""GNNBenchmark: ET beside same-run GIN and GatedGCN (same data, splits and seeds).

    python examples/gnnbenchmark.py --quick --out /tmp/gnnb            # seconds: smoke run
    python examples/gnnbenchmark.py --config configs/gnnbenchmark/zinc_proxy.toml
    python examples/gnnbenchmark.py --dataset PATTERN --generated-sizes 500,100,100 --out out/
    python examples/gnnbenchmark.py --dataset MNIST --root /data/gnnbenchmark --source official

Offline, ZINC runs as the "ZINC proxy" (trained on the official val split, tested on the
official test split; the train split is missing) and PATTERN/CLUSTER are generated with the
published SBM recipe. Official files under --root are used when present; nothing is downloaded.
Same options as ``et-graph gnnbenchmark``; see docs/gnnbenchmark.md.
"""
from __future__ import annotations

from pathlib import Path

from et_graph.cli import run_example
from et_graph.experiments.gnnbenchmark import main

if __name__ == "__main__":
    run_example(lambda: main(prog=Path(__file__).name), __file__)
