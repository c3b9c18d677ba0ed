"""Validation-only probe, step 1: a graph whose nodes also carry a cross-fitted tree score.

(Session 61's two-step version of ET stacked on the trees; the detector is now
``StackedETDetector``, model ``et_stacked``, which cross-fits inside ``fit``. The script stays
to rebuild the stored probe's file.)

Stacking a tree under a graph network (as BGNN, Ivanov and Prokhorenkova, ICLR 2021, does
jointly) gives every node one more input column: the preset's gradient-boosted trees'
log-odds. The training nodes are cut into ``--folds`` stratified folds; a training node's
column comes from the trees fitted on the other folds (it never reads its own label), and
every other node's column is the mean over the folds' trees. Only training labels are read.

The file is a copy of the preset's graph with the column appended to ``x``; step 2 is an
ordinary validation-only run on it, read beside the preset's own run:

    python benchmarks/anomaly_tree_score_probe.py \\
        --config configs/anomaly/tolokers-tuned-v5.toml --out runs/tree_score.pt
    et-graph anomaly --config configs/anomaly/tolokers-tuned-v5.toml --data runs/tree_score.pt \\
        --models et --seeds 2 --validation-only --threads 1 --out runs/tree_score_et

The run's own feature transform (quantile normalisation, degree) then treats the column as
any other feature.
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Data

from et_graph.config import parse
from et_graph.detectors.stacked import cross_fit_trees, stacked_column
from et_graph.detectors.stacked import tree_log_odds as stacked_tree_log_odds
from et_graph.protocols.anomaly import make_splits
from et_graph.protocols.anomaly_config import AnomalyConfig, load_data, load_graph


def tree_log_odds(config: AnomalyConfig, folds: int, trees: AnomalyConfig | None = None,
                  graph: Data | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The cross-fitted column ``[N]`` and its training (out-of-fold) and validation AUROC:
    ``config``'s graph (or ``graph``, as loaded) and split, the trees of ``trees`` (default
    ``config``). The cross-fit is StackedETDetector's, with seed 0 (one cut for every ET seed,
    as session 61 measured it)."""
    trees = trees or config
    data = load_data(config.data, graph)
    p = config.protocol
    split = make_splits(data, p.protocol, 1, p.train_ratio, p.split_seed)[0]
    train = split.masks(data.num_nodes)[0]
    y = data.y.long()
    fitted, fold_of = cross_fit_trees(data, y, train, trees.gbt, folds, seed=0)
    column = stacked_column(stacked_tree_log_odds(fitted, data), fold_of).numpy()
    y_np, val = y.numpy(), split.val.numpy()
    quality = {"train_auroc_out_of_fold": float(roc_auc_score(y_np[train.numpy()],
                                                              column[train.numpy()])),
               "val_auroc": float(roc_auc_score(y_np[val], column[val]))}
    return torch.from_numpy(column).float(), quality


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("--config", required=True, help="anomaly preset (its data, split, trees)")
    parser.add_argument("--trees-config", help="the preset whose [gbt] section the trees use "
                        "(default: --config; a per-model preset's [gbt] may be the defaults)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", required=True, help="the .pt graph to write")
    args = parser.parse_args(argv)
    config = parse(AnomalyConfig, ["--config", args.config, "--threads", "1", "--no-progress"])
    trees = (parse(AnomalyConfig, ["--config", args.trees_config, "--threads", "1",
                                   "--no-progress"]) if args.trees_config else None)
    if trees is not None and trees.data != config.data:
        raise SystemExit("--trees-config must name the same data as --config")
    raw = load_graph(config.data)  # (load_data transforms a copy: raw keeps its features)
    column, quality = tree_log_odds(config, args.folds, trees, raw)
    graph = copy.copy(raw)
    graph.x = torch.cat([raw.x, column[:, None]], dim=1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    torch.save(graph, args.out)
    print("tree log-odds column: out-of-fold training AUROC "
          f"{quality['train_auroc_out_of_fold']:.4f}, validation AUROC "
          f"{quality['val_auroc']:.4f}; written to {args.out}")


if __name__ == "__main__":
    main()
