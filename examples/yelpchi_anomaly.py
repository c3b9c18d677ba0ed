"""Graph anomaly detection with ET against same-run baselines (MLP, GCN, GAT, trees).

    python examples/yelpchi_anomaly.py --data-root DIR --dataset yelpchi --train-ratio 0.4 \
        --seeds 5 --epochs 100 --out runs/yelpchi

``DIR`` holds ``YelpChi.mat`` / ``Amazon.mat`` (CARE-GNN format; see docs/datasets.md). Any
loader name works for ``--dataset`` (``tolokers`` is embedded), and ``--data PATH`` reads a
``.mat``/``.npz``/``.pt`` file. Same options and code as ``et-graph anomaly``; ``--help`` lists
them all. With ``torchrun --nproc_per_node=2 examples/yelpchi_anomaly.py ... --ddp`` the neural
models train data-parallel (gloo on CPU).
"""
import argparse

from et_graph.experiments import anomaly


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    anomaly.add_arguments(parser)
    parser.set_defaults(dataset="yelpchi")
    anomaly.run(parser.parse_args())


if __name__ == "__main__":
    main()
