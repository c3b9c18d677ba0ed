"""MNIST and CIFAR10 superpixel graphs (GNNBenchmark graph classification): official PyG files
only (``ROOT/<NAME>/raw/<NAME>_v2.pt``); nothing is generated or downloaded."""
from __future__ import annotations

import torch

from .gnnbenchmark_common import (
    SPLITS,
    BenchmarkData,
    PathLike,
    category_ids,
    check_benchmark_graph,
    gnn_benchmark_present,
    gnn_benchmark_required_file,
    load_gnn_benchmark,
)

SUPERPIXEL_NAMES = ("MNIST", "CIFAR10")
#: Pixel channels of each dataset's superpixels (grey, RGB).
SUPERPIXEL_CHANNELS = {"MNIST": 1, "CIFAR10": 3}


def superpixel_benchmark(name: str, root: PathLike, source: str = "auto") -> BenchmarkData:
    """MNIST or CIFAR10 from the official files under ``root``; node features are the pixel
    values followed by the superpixel coordinates."""
    if name not in SUPERPIXEL_NAMES:
        raise ValueError(f"name must be one of {SUPERPIXEL_NAMES}, got {name!r}")
    if source in ("partial", "generated"):
        raise ValueError(f"{name} is only available from the official files (--source official)")
    if not gnn_benchmark_present(root, name):
        raise FileNotFoundError(
            f"{name} is not available offline: put {name}_v2.pt (from PyG's {name}_v2.zip) at "
            f"{gnn_benchmark_required_file(root, name)}"
        )
    splits = {s: list(load_gnn_benchmark(root, name, s)) for s in SPLITS}
    raw_file = gnn_benchmark_required_file(root, name)
    channels = SUPERPIXEL_CHANNELS[name]
    for split_name, split in splits.items():
        for index, d in enumerate(split):
            where = f"{raw_file}: {split_name} graph {index}"
            check_benchmark_graph(d, where, node_task=False)
            # The protocol promises pixel values and coordinates: a file of another width (or
            # without coordinates) ran and was described as that.
            x = d.x.float().view(d.num_nodes, -1)
            pos = getattr(d, "pos", None)
            if x.size(1) != channels or pos is None or pos.numel() != 2 * d.num_nodes:
                raise ValueError(
                    f"{where}: {x.size(1)} pixel channels and "
                    + ("no coordinates" if pos is None else f"pos of shape {tuple(pos.shape)}")
                    + f"; {name}'s superpixels have {channels} channel"
                    + ("s" if channels > 1 else "") + " and 2 coordinates (pos [N, 2])")
            d.x = torch.cat([x, pos.float().view(d.num_nodes, 2)], dim=1)
            d.pos = None
            if getattr(d, "edge_attr", None) is not None:
                d.edge_attr = d.edge_attr.float().view(d.edge_index.size(1), -1)
            d.y = category_ids(d.y.view(-1), f"{where}: graph label", 10)
    sample = splits["train"][0]
    edge_dim = None if sample.edge_attr is None else sample.edge_attr.size(1)
    return BenchmarkData(
        name, "official", splits, task="classification", metric="accuracy", num_outputs=10,
        node_dim=sample.x.size(1), edge_dim=edge_dim,
        protocol=f"{name} (official splits; node features = pixel values + coordinates): train "
                 "on train, select the epoch on val, test accuracy once",
    )


__all__ = ["SUPERPIXEL_NAMES", "superpixel_benchmark"]
