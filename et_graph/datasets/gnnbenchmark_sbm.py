"""PATTERN and CLUSTER (GNNBenchmark node classification): the official PyG files when present,
else graphs generated with the published SBM recipe (:mod:`et_graph.datasets.synthetic`).

Official layout: ``ROOT/<NAME>/raw/<NAME>_v2.pt`` (PyG's ``GNNBenchmarkDataset``). Node features
are one-hot in both cases (3 columns for PATTERN, 7 for CLUSTER), so a model sees the same input
layout whichever source is used.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Union

from torch import nn

from ..exceptions import DataWarning
from .gnnbenchmark_common import (
    SPLITS,
    BenchmarkData,
    PathLike,
    category_ids,
    check_benchmark_graph,
    gnn_benchmark_present,
    gnn_benchmark_required_file,
    load_gnn_benchmark,
    one_hot_rows,
)
from .synthetic import (
    SBMClusterRecipe,
    SBMPatternRecipe,
    generate_sbm_cluster,
    generate_sbm_pattern,
    recipe_dict,
)

SBM_NAMES = ("PATTERN", "CLUSTER")
#: Official split sizes (train, val, test).
SBM_OFFICIAL_SIZES = {"PATTERN": (10000, 2000, 2000), "CLUSTER": (10000, 1000, 1000)}


def sbm_benchmark(name: str, root: PathLike, source: str = "auto",
                  generated_sizes: tuple[int, int, int] = (2000, 400, 400),
                  data_seed: int = 0) -> BenchmarkData:
    """PATTERN or CLUSTER: the official files under ``root`` when present (``source`` "auto" or
    "official"), else ``generated_sizes`` (train, val, test) graphs generated with ``data_seed``
    (``source`` "auto" or "generated")."""
    if name not in SBM_NAMES:
        raise ValueError(f"name must be one of {SBM_NAMES}, got {name!r}")
    num_classes = 2 if name == "PATTERN" else 6
    vocab = 3 if name == "PATTERN" else 7
    common: dict[str, Any] = dict(task="node", metric="weighted_accuracy",
                                  num_outputs=num_classes)
    if source in ("auto", "official") and gnn_benchmark_present(root, name):
        splits = {s: list(load_gnn_benchmark(root, name, s)) for s in SPLITS}
        raw_file = gnn_benchmark_required_file(root, name)
        for split_name, split in splits.items():
            for index, d in enumerate(split):
                where = f"{raw_file}: {split_name} graph {index}"
                check_benchmark_graph(d, where, node_task=True)
                if d.x.dim() == 2 and d.x.size(1) > 1:
                    # PyG's files: one-hot rows (float; an integer one-hot is read the same)
                    if d.x.size(1) != vocab:
                        raise ValueError(f"{where}: {d.x.size(1)} feature columns; {name}'s "
                                         f"one-hot node features have {vocab}")
                    one_hot = one_hot_rows(d.x)
                    if not bool(one_hot.all()):
                        row = int((~one_hot).nonzero()[0])
                        raise ValueError(f"{where}: node {row}'s features "
                                         f"{d.x[row].tolist()} are not one-hot; {name}'s "
                                         "node features are one-hot rows or one id per node")
                    d.x = d.x.float()
                else:  # one feature id per node (a float id too): one-hot, as generated graphs
                    ids = category_ids(d.x.view(-1), f"{where}: node feature ids", vocab)
                    d.x = nn.functional.one_hot(ids, vocab).float()
                d.y = category_ids(d.y.view(-1), f"{where}: node labels", num_classes)
                d.edge_attr = None
        node_dim = splits["train"][0].x.size(1)
        return BenchmarkData(
            name, "official", splits, node_dim=node_dim, **common,
            protocol=f"{name} (official PyG GNNBenchmarkDataset splits): train on train, select "
                     "the epoch on val, weighted accuracy on test once",
        )
    if source == "official":
        raise FileNotFoundError(
            f"official {name} file missing: put {name}_v2.pt at "
            f"{gnn_benchmark_required_file(root, name)}"
        )
    if source == "partial":
        raise ValueError(f"{name} has no partial copy; use --source generated or official")
    if source == "auto":
        # A mistyped --root, or a file under another name, switched to generated graphs with
        # only "(generated)" in the title to show it.
        folder = Path(root) / name
        if folder.is_dir():
            raise FileNotFoundError(
                f"{folder} holds no {name}_v2.pt in raw/ (nor PyG's processed files): put the "
                f"file at {gnn_benchmark_required_file(root, name)}, or pass --source generated "
                "for graphs generated with the published recipe")
        if not Path(root).is_dir():
            warnings.warn(f"the data root {root} does not exist: {name} is generated with the "
                          "published recipe (--source generated says so without this warning)",
                          DataWarning, stacklevel=3)
    num_train, num_val, num_test = generated_sizes
    recipe: Union[SBMPatternRecipe, SBMClusterRecipe]
    if name == "PATTERN":
        recipe = SBMPatternRecipe()
        splits = generate_sbm_pattern(num_train, num_val, num_test, seed=data_seed)
    else:
        recipe = SBMClusterRecipe()
        splits = generate_sbm_cluster(num_train, num_val, num_test, seed=data_seed)
    params = ", ".join(f"{k}={v}" for k, v in recipe_dict(recipe).items())
    return BenchmarkData(
        f"{name} (generated)", "generated", splits, node_dim=vocab, **common,
        protocol=(
            f"{name} generated with the published SBM recipe ({params}); {num_train} train / "
            f"{num_val} val / {num_test} test graphs (data seed {data_seed}); train on "
            "train, select the epoch on val, weighted accuracy on test once"
        ),
        notes=["Generated graphs, not the official files: same recipe, different samples."],
    )


__all__ = ["SBM_NAMES", "SBM_OFFICIAL_SIZES", "sbm_benchmark"]
