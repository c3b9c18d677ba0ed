r"""Unsupervised node anomaly detection: ET fitted without labels, beside IsolationForest, LOF and
(with ``pip install -e .[pygod]``) PyGOD's detectors, on the same graph and seeds.

    python examples/unsupervised_anomaly.py --quick --out runs/unsup-quick     # reddit, minutes
    python examples/unsupervised_anomaly.py --config configs/anomaly/unsupervised.toml \
        --dataset inj_amazon --out runs/unsupervised-inj_amazon
    python examples/unsupervised_anomaly.py --data inj_cora.pt --out runs/inj_cora  # PyGOD .pt

No label is read before every node has its score; AUROC, AUPRC and Rec@K are computed after.
Same options and code as ``et-graph unsupervised``; see docs/unsupervised.md.
"""
from pathlib import Path

from et_graph.cli import run_example
from et_graph.experiments.unsupervised_anomaly import main

if __name__ == "__main__":
    run_example(lambda: main(prog=Path(__file__).name), __file__)
