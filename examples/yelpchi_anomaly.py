r"""Graph anomaly detection with ET against same-run baselines (MLP, GCN, GAT, trees).

    python examples/yelpchi_anomaly.py --data-root DIR --dataset yelpchi --train-ratio 0.4 \
        --seeds 5 --epochs 100 --out runs/yelpchi

``DIR`` holds ``YelpChi.mat`` / ``Amazon.mat`` (CARE-GNN format; see docs/datasets.md). Any
loader name works for ``--dataset`` (``tolokers`` is embedded), and ``--data PATH`` reads a
``.mat``/``.npz``/``.pt`` file. Same options and code as ``et-graph anomaly``; ``--help`` lists
them all, ``--config configs/anomaly/NAME.toml`` starts from a preset, and ``--models
et,et_stacked,gbt`` adds ET stacked on the trees (``StackedETDetector``: it helped on Tolokers,
where the tuned trees are close to ET, and lowered validation on reddit and inj_amazon, where
they are not; check it on validation first). With
``torchrun --nproc_per_node=2 examples/yelpchi_anomaly.py ... --ddp`` the neural models train
data-parallel (gloo on CPU).
"""
from pathlib import Path

from et_graph.cli import run_example
from et_graph.experiments import anomaly

if __name__ == "__main__":
    # YelpChi is this script's default dataset (--help shows it); --dataset, --data or a
    # preset's data.dataset replace it.
    run_example(lambda: anomaly.main(prog=Path(__file__).name,
                                     defaults={"data.dataset": "yelpchi"}), __file__)
