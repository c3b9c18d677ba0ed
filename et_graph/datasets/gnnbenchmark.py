"""GNNBenchmark data selection (Dwivedi et al., "Benchmarking Graph Neural Networks"): which
splits a run uses, from a typed :class:`GNNBenchmarkDataConfig`. Nothing is ever downloaded.

* ZINC (:mod:`.zinc`): ``ROOT/ZINC/raw`` when present, else the ZINC proxy
  (``ROOT/ZINC_subset_partial``: trained on the official val split, tested on the official test).
* PATTERN / CLUSTER (:mod:`.gnnbenchmark_sbm`): ``ROOT/<NAME>/raw`` when present, else graphs
  generated with the published SBM recipe (:mod:`.synthetic`).
* MNIST / CIFAR10 (:mod:`.superpixels`): ``ROOT/<NAME>/raw`` only.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
from torch_geometric.data import Data

from ..exceptions import ConfigWarning
from ..paths import shipped_path
from ..progress import progress_bar
from .gnnbenchmark_common import BenchmarkData
from .gnnbenchmark_sbm import SBM_NAMES, sbm_benchmark
from .superpixels import SUPERPIXEL_NAMES, superpixel_benchmark
from .zinc import zinc_benchmark

DATASETS = ("ZINC", *SBM_NAMES, *SUPERPIXEL_NAMES)
SOURCES = ("auto", "official", "partial", "generated")


def parse_sizes(text: str) -> tuple[int, int, int]:
    """``"2000,400,400"`` -> ``(2000, 400, 400)``; three positive sizes."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) <= 0:
        raise ValueError(f"expected three positive sizes TRAIN,VAL,TEST, got {text!r}")
    return values  # type: ignore[return-value]


@dataclass
class GNNBenchmarkDataConfig:
    """Which GNNBenchmark data a run uses.

    Attributes:
        dataset: ZINC, PATTERN, CLUSTER, MNIST or CIFAR10.
        root: folder with ZINC/, ZINC_subset_partial/, PATTERN/, ... (PyG layout); a relative
            root missing from the working directory is looked up where the shipped data are
            (``datasets/...`` under ``$ET_GRAPH_DATA`` when set, else the source checkout).
        source: auto (official files when present, else the ZINC proxy or generated SBM graphs;
            a PATTERN/CLUSTER folder under root without its file is refused), official,
            partial (the ZINC proxy) or generated (PATTERN/CLUSTER).
        holdout_fraction: ZINC proxy: share of the official val split held out for selection.
        split_seed: seed of the ZINC proxy split and of the split limits.
        data_seed: seed of the SBM generator.
        generated_sizes: TRAIN,VAL,TEST graphs for generated PATTERN/CLUSTER (the official sizes
            are 10000,2000,2000 and 10000,1000,1000).
        train_limit: use a random subset of this many training graphs (none = all).
        val_limit: use a random subset of this many validation graphs (none = all).
        test_limit: use a random subset of this many test graphs (none = all).
        rw_pe_dim: random-walk return probabilities (1..k steps,
            :class:`~et_graph.transforms.RandomWalkPE`) given to *every* model as extra node
            inputs (0 = off), so that a structural encoding never favours one model.
    """

    dataset: str = "ZINC"
    root: str = "datasets"
    source: str = "auto"
    holdout_fraction: float = 0.2
    split_seed: int = 0
    data_seed: int = 0
    generated_sizes: str = "2000,400,400"
    train_limit: Optional[int] = None
    val_limit: Optional[int] = None
    test_limit: Optional[int] = None
    rw_pe_dim: int = 0

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {DATASETS}, got {self.dataset!r}")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must lie in (0, 1), got {self.holdout_fraction}")
        parse_sizes(self.generated_sizes)
        if self.rw_pe_dim < 0:
            raise ValueError(f"rw_pe_dim must be >= 0 (0 = off), got {self.rw_pe_dim}")
        for split, limit in self.limits.items():
            if limit is not None and limit <= 0:
                raise ValueError(f"{split}_limit must be positive, got {limit}")

    @property
    def sizes(self) -> tuple[int, int, int]:
        return parse_sizes(self.generated_sizes)

    @property
    def limits(self) -> dict[str, Optional[int]]:
        return {"train": self.train_limit, "val": self.val_limit, "test": self.test_limit}


def limit_graphs(graphs: list[Data], limit: Optional[int], seed: int) -> list[Data]:
    """A random subset of ``limit`` graphs in their original order (all for ``None``)."""
    if limit is None or limit >= len(graphs):
        return list(graphs)
    order = np.random.default_rng(seed).permutation(len(graphs))[:limit]
    return [graphs[i] for i in sorted(order)]


def resolve_root(root: str) -> str:
    """``root`` as given when it exists (or is absolute); a relative root that does not exist
    from the working directory (the default ``datasets``) is looked up where the shipped data
    are (``$ET_GRAPH_DATA`` for ``datasets/...``, else the source checkout), so that they are
    found from any folder."""
    path = Path(root).expanduser()
    if path.is_absolute() or path.exists():
        return str(path)
    shipped = shipped_path(path)
    return str(shipped) if shipped is not None else str(path)


#: The settings each data source reads, where they are not read by every source.
SOURCE_SETTINGS = {"holdout_fraction": ("partial",), "generated_sizes": ("generated",),
                   "data_seed": ("generated",)}
#: ``--quick``'s generated sizes (``GNNBenchmarkConfig.QUICK``): a smoke run sets them for every
#: dataset, so they are no user's choice to warn about.
QUICK_GENERATED_SIZES = "16,8,8"


def warn_unused_data_settings(config: GNNBenchmarkDataConfig, source: str) -> list[str]:
    """Warn about settings moved from their defaults that the source a run used never reads
    (``--holdout-fraction`` on PATTERN, ``--generated-sizes`` on official files): the results
    recorded them as if they had shaped the data. Returns their names."""
    default = GNNBenchmarkDataConfig()
    quick = {"generated_sizes": QUICK_GENERATED_SIZES}
    unused = [name for name, readers in SOURCE_SETTINGS.items()
              if source not in readers
              and getattr(config, name) not in (getattr(default, name), quick.get(name))]
    if unused:
        warnings.warn(f"{', '.join(f'{n}={getattr(config, n)!r}' for n in unused)}: not read "
                      f"by this run's {config.dataset} data ({source} source)", ConfigWarning,
                      stacklevel=3)
    return unused


def load_benchmark(config: GNNBenchmarkDataConfig) -> BenchmarkData:
    """The splits ``config`` names (see the module docstring), limited and checked."""
    root = resolve_root(config.root)
    if config.dataset == "ZINC":
        data = zinc_benchmark(root, config.source, config.holdout_fraction, config.split_seed)
    elif config.dataset in SBM_NAMES:
        data = sbm_benchmark(config.dataset, root, config.source, config.sizes,
                             config.data_seed)
    else:
        data = superpixel_benchmark(config.dataset, root, config.source)
    warn_unused_data_settings(config, data.source)
    if data.source != "generated":  # which folder a relative --root resolved to
        data.notes.append(f"data read from {Path(root).resolve()}")
    limited = []
    for split, limit in config.limits.items():
        if limit is not None and limit < len(data.splits[split]):
            data.splits[split] = limit_graphs(data.splits[split], limit, config.split_seed)
            data.notes.append(f"{split} limited to {limit} graphs (random subset, split seed "
                              f"{config.split_seed}).")
            limited.append(f"{split} {limit}")
    if limited:  # the protocol sentence names the full splits; say what this run used
        data.protocol += f"; this run limits the splits to random subsets ({', '.join(limited)})"
    for split, graphs in data.splits.items():
        if not graphs:
            raise ValueError(f"the {split} split is empty")
        if any(g.num_nodes == 0 for g in graphs):
            raise ValueError(f"the {split} split contains a graph without nodes")
    return data


def _transform_splits(data: BenchmarkData, transform: Callable[[Data], Data], desc: str,
                      progress: bool) -> None:
    """Replace every graph of every split by ``transform(graph)``, with a progress bar."""
    for split, graphs in data.splits.items():
        bar = progress_bar(graphs, desc=f"{desc} ({split})", leave=False, disable=not progress)
        data.splits[split] = [transform(g) for g in bar]


def add_random_walk_encoding(data: BenchmarkData, k: int, progress: bool = True) -> None:
    """Attach ``rw_pe`` ``[N, k]`` (:class:`~et_graph.transforms.RandomWalkPE`) to every graph,
    once, and record ``data.rw_pe_dim = k`` so that every model is built to read it."""
    if k <= 0:
        return
    from ..transforms import RandomWalkPE

    _transform_splits(data, RandomWalkPE(k), "random-walk PE", progress)
    data.rw_pe_dim = k


def add_positional_encoding(data: BenchmarkData, k: int, progress: bool = True) -> None:
    """Attach ``lap_pe``/``cls_lap_pe`` (ET's CLS Laplacian PE) to every graph, once."""
    if k <= 0:
        return
    from ..transforms import CLSLaplacianPE

    transform = CLSLaplacianPE(k=k)
    try:  # scikit-learn's dependency; one BLAS thread makes small eigh calls ~50x faster here
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        threadpool_limits = None
    limit = threadpool_limits(limits=1) if threadpool_limits is not None else None
    try:
        _transform_splits(data, transform, "Laplacian PE", progress)
    finally:
        if limit is not None:
            limit.unregister()


__all__ = [
    "DATASETS",
    "SOURCES",
    "BenchmarkData",
    "GNNBenchmarkDataConfig",
    "add_positional_encoding",
    "add_random_walk_encoding",
    "limit_graphs",
    "load_benchmark",
    "parse_sizes",
]
