#!/usr/bin/env python
"""Convert BWGNN's DGL binary graphs (T-Finance, T-Social) into et-graph's open ``.npz`` layout.

T-Finance and T-Social (Tang et al., "Rethinking Graph Neural Networks for Anomaly Detection",
ICML 2022) are distributed as DGL binary graph files (``tfinance``, ``tsocial``) saved with
``dgl.save_graphs``. Their node data are ``feature`` [N, 10] and ``label`` ([N], or one-hot
[N, 2] for T-Finance). This script needs DGL and et-graph in one environment (DGL's last
builds are for torch 2.4, which et-graph's range allows; docs/datasets.md gives the commands;
et-graph itself never needs DGL):

    python datasets/tools/dgl_to_npz.py --input PATH/tfinance --output datasets/tfinance.npz
    python datasets/tools/dgl_to_npz.py --input PATH/tsocial  --output datasets/tsocial.npz

then copy the ``.npz`` to the machine running et-graph, into its data folder (``datasets/`` or
``$ET_GRAPH_DATA``) or any folder passed as ``root=``. The output holds ``x``, ``edge_index``
[2, E] (as stored, the loader symmetrises), ``y`` and, if the graph carries them, the three split
masks (GADBench's ``*_masks`` [N, 20]: columns 0-9, its fully supervised splits, or with
``--gadbench-splits semi_supervised`` columns 10-19) and ``label_mask`` (GADBench's ``mark``);
it is read back and validated once before the script reports success.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def load_dgl_graph(path: Path):
    try:
        import dgl
    except (ImportError, OSError) as error:
        # OSError: DGL installed beside a torch it was not built for fails to load its C++
        # libraries ("Cannot find DGL C++ ... library")
        raise SystemExit(
            "dgl_to_npz.py needs DGL to read DGL binary graphs, and DGL does not import here "
            f"({error}). DGL's last builds are for torch 2.4: in a separate environment, "
            "pip install torch==2.4.0, then pip install dgl -f "
            "https://data.dgl.ai/wheels/torch-2.4/repo.html and this repository (pip install "
            "-e .), convert there (docs/datasets.md gives the commands), and copy the .npz "
            "file back."
        ) from error
    graphs, _ = dgl.load_graphs(str(path))
    if len(graphs) != 1:
        raise SystemExit(f"{path}: expected one graph, found {len(graphs)}")
    return graphs[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--input", type=Path, required=True, help="DGL binary graph file")
    parser.add_argument("--output", type=Path, required=True, help="target .npz file")
    parser.add_argument("--name", default=None, help="dataset name (default: input file name)")
    parser.add_argument("--gadbench-splits", default="supervised",
                        choices=("supervised", "semi_supervised"),
                        help="which of GADBench's 20 split columns to keep: 0-9 (default) or "
                             "10-19; graphs without them are unaffected")
    args = parser.parse_args(argv)

    from et_graph.datasets import describe_anomaly_data, dgl_graph_to_data, save_anomaly_npz
    from et_graph.datasets.npz import load_anomaly_npz

    name = args.name or args.input.name.split(".")[0]
    data = dgl_graph_to_data(load_dgl_graph(args.input), name=name,
                             gadbench_splits=args.gadbench_splits)
    # One validating read (T-Social's 73M edges are symmetrised on every read).
    save_anomaly_npz(data, args.output, validate=False)
    print(f"wrote {args.output}: {describe_anomaly_data(load_anomaly_npz(args.output, name))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
