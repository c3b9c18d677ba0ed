"""Label-free choice of the unsupervised ET's settings: held-out masked reconstruction error.

For each candidate setting, fit :class:`~et_graph.detectors.UnsupervisedETDetector` on the
label-free graph of ``et-graph unsupervised`` (labels sealed by ``load_graph`` and never opened
here) and print the best epoch's masked MSE on the held-out validation nodes (lower = better).
The mask ratio, val_fraction and feature transform are the same for every candidate, so the
errors are comparable. No anomaly label is read, so the choice is not selection on test.

    python benchmarks/unsupervised_selection.py --dataset reddit --threads 1
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Optional

import torch

from et_graph.detectors import UnsupervisedETDetector
from et_graph.experiments.unsupervised_anomaly import UnsupervisedAnomalyConfig, load_graph

#: Candidates: overrides of (model, train) relative to the defaults.
CANDIDATES = {
    "steps2": ({"steps": 2}, {}),
    "steps4": ({"steps": 4}, {}),
}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--dataset", default="reddit")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--patience", type=int, default=30)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = UnsupervisedAnomalyConfig()
    graph, _sealed = load_graph(replace(config.data, dataset=args.dataset))  # never opened
    for name, (model, train) in CANDIDATES.items():
        det_config = config.detector_config()
        det_config = replace(det_config, model=replace(det_config.model, **model),
                             train=replace(det_config.train, epochs=args.epochs,
                                           patience=args.patience, **train))
        start = time.perf_counter()
        det = UnsupervisedETDetector(det_config, seed=args.seed).fit(graph)
        info = det.fit_info_
        print(json.dumps({"dataset": args.dataset, "candidate": name,
                          "val_masked_mse": info["best_loss"], "best_epoch": info["best_epoch"],
                          "epochs_run": info["epochs_run"],
                          "epoch_seconds": info["epoch_seconds"],
                          "seconds": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
