"""GNNBenchmark data (Dwivedi et al., "Benchmarking Graph Neural Networks"), offline-first.

Three sources, all returning lists (or PyG datasets) of :class:`~torch_geometric.data.Data`:

* :func:`load_zinc_partial` reads the ZINC-12k ``val``/``test`` files that survive in
  ``datasets/ZINC_subset_partial`` (PyG-1.x ``(Data, slices)`` pickles that PyG 2.x refuses to
  load through ``InMemoryDataset``). The train split is not there.
* :func:`load_zinc` / :func:`load_gnn_benchmark` wrap PyG's ``ZINC`` and
  ``GNNBenchmarkDataset`` when their files are present under a root, and never download: a
  missing file raises :class:`FileNotFoundError` that names the file and where it must go.
* :func:`generate_sbm_pattern` / :func:`generate_sbm_cluster` regenerate PATTERN and CLUSTER from
  the stochastic-block-model recipe published with the benchmark (the parameters are in
  :class:`SBMPatternRecipe` and :class:`SBMClusterRecipe`). The graphs are *generated*, not the
  official files: same distribution, different samples.

Layout expected under a user root ``ROOT`` (PyG's own layout)::

    ROOT/ZINC/raw/{train,val,test}.pickle and {train,val,test}.index    -> load_zinc
    ROOT/ZINC_subset_partial/processed/{val,test}.pt                    -> load_zinc_partial
    ROOT/<NAME>/raw/<NAME>_v2.pt   (NAME in PATTERN, CLUSTER, MNIST, CIFAR10)
                                                                        -> load_gnn_benchmark
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

PathLike = Union[str, "os.PathLike[str]"]

#: Atom types of ZINC-12k (``atom_dict.pickle``: C, O, N, F, C H1, ... 28 entries).
ZINC_NUM_ATOM_TYPES = 28
#: Bond types are 1 (single), 2 (double), 3 (triple); 0 is unused, so an embedding needs 4 rows.
ZINC_NUM_BOND_TYPES = 4
ZINC_PARTIAL_SPLITS = ("val", "test")
ZINC_SPLIT_SIZES = {"train": 10000, "val": 1000, "test": 1000}
GNN_BENCHMARK_NAMES = ("PATTERN", "CLUSTER", "MNIST", "CIFAR10")
_PARTIAL_KEYS = ("x", "edge_index", "edge_attr", "y")


# --------------------------------------------------------------------------------------------
# ZINC from the partial PyG-1.x processed files
# --------------------------------------------------------------------------------------------
def zinc_partial_file(root: PathLike, split: str) -> Path:
    """Path of ``split``'s processed file; ``root`` may be the dataset folder or its processed/."""
    root = Path(root)
    if root.name != "processed" and (root / "processed").is_dir():
        root = root / "processed"
    return root / f"{split}.pt"


def load_zinc_partial(root: PathLike, split: str) -> list[Data]:
    """Rebuild ZINC-12k ``split`` (``"val"`` or ``"test"``) from the PyG-1.x processed file.

    Each graph becomes ``Data(x=[n, 1] long atom type, edge_index=[2, e] long (local ids,
    both directions), edge_attr=[e] long bond type, y=[1] float)``, the layout of PyG's
    ``ZINC(subset=True)``. Keys added by a foreign pre-transform (``node_id``, ``degrees``...) are
    ignored.
    """
    if split not in ZINC_PARTIAL_SPLITS:
        raise FileNotFoundError(
            f"the partial ZINC copy has only the splits {ZINC_PARTIAL_SPLITS}; the {split!r} split "
            "is missing. For the official benchmark put PyG's ZINC raw files "
            "({train,val,test}.pickle and {train,val,test}.index) in ROOT/ZINC/raw/ and use "
            "load_zinc(ROOT/ZINC, split)."
        )
    path = zinc_partial_file(root, split)
    if not path.is_file():
        raise FileNotFoundError(
            f"missing {path}: copy ZINC_subset_partial/processed/{split}.pt (provenance in "
            f"datasets/SOURCES.md) to {path}"
        )
    from torch_geometric.io import fs

    loaded = fs.torch_load(str(path))
    if not (isinstance(loaded, (tuple, list)) and len(loaded) == 2):
        raise ValueError(f"{path} is not a PyG (Data, slices) pickle")
    collated, slices = loaded
    # PyG-1.x Data objects keep their tensors in ``__dict__`` (PyG 2 would use ``_store``).
    store = collated.__dict__
    for key in _PARTIAL_KEYS:
        if key not in slices or store.get(key) is None:
            raise ValueError(f"{path} has no {key!r} entry; is it a ZINC processed file?")
    num_graphs = len(slices["y"]) - 1
    graphs: list[Data] = []
    for i in range(num_graphs):
        parts = {
            key: _slice(store[key], slices[key], i, dim=1 if key == "edge_index" else 0)
            for key in _PARTIAL_KEYS
        }
        num_nodes = parts["x"].size(0)
        edge_index = parts["edge_index"].long()
        if num_nodes == 0:
            raise ValueError(f"{path}: graph {i} has no nodes")
        if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
            raise ValueError(f"{path}: graph {i} has edge ids outside 0..{num_nodes - 1}")
        graphs.append(
            Data(
                x=parts["x"].long().view(num_nodes, -1),
                edge_index=edge_index,
                edge_attr=parts["edge_attr"].long().view(-1),
                y=parts["y"].float().view(-1),
                num_nodes=num_nodes,
            )
        )
    return graphs


def _slice(values: Tensor, bounds: Tensor, i: int, dim: int) -> Tensor:
    start, stop = int(bounds[i]), int(bounds[i + 1])
    return values.narrow(dim, start, stop - start)


# --------------------------------------------------------------------------------------------
# PyG wrappers that never download
# --------------------------------------------------------------------------------------------
def _missing(paths: list[Path]) -> list[Path]:
    return [p for p in paths if not p.is_file()]


def zinc_required_files(root: PathLike) -> list[Path]:
    """Raw files PyG's ``ZINC`` needs under ``root`` (the folder that holds ``raw/``)."""
    raw = Path(root) / "raw"
    names = [f"{s}.pickle" for s in ("train", "val", "test")]
    names += [f"{s}.index" for s in ("train", "val", "test")]
    return [raw / n for n in names]


def load_zinc(root: PathLike, split: str, subset: bool = True):
    """PyG's ``ZINC`` (12k subset by default) from local files; raises instead of downloading.

    ``root`` is PyG's root for ZINC (it holds ``raw/``; PyG writes ``subset/processed/`` there, so
    it must be writable). Either the six raw files or PyG-2 processed files must exist.
    """
    from torch_geometric.datasets import ZINC

    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    root = Path(root)
    processed = root / ("subset" if subset else "full") / "processed"
    processed_files = [processed / f"{s}.pt" for s in ("train", "val", "test")]
    missing_raw = _missing(zinc_required_files(root))
    if missing_raw and _missing(processed_files):
        listing = "\n  ".join(str(p) for p in missing_raw)
        raise FileNotFoundError(
            "PyG ZINC files not found (downloads are disabled). Put the files of "
            "molecules.zip (Dwivedi et al.) and the split indices here:\n  " + listing
        )

    class _OfflineZINC(ZINC):
        def download(self) -> None:  # processed files exist: nothing to fetch
            return None

    return _OfflineZINC(str(root), subset=subset, split=split)


def gnn_benchmark_required_file(root: PathLike, name: str) -> Path:
    return Path(root) / name / "raw" / f"{name}_v2.pt"


def load_gnn_benchmark(root: PathLike, name: str, split: str):
    """PyG's ``GNNBenchmarkDataset`` (PATTERN, CLUSTER, MNIST, CIFAR10) from local files only."""
    from torch_geometric.datasets import GNNBenchmarkDataset

    if name not in GNN_BENCHMARK_NAMES:
        raise ValueError(f"name must be one of {GNN_BENCHMARK_NAMES}, got {name!r}")
    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    raw_file = gnn_benchmark_required_file(root, name)
    processed = Path(root) / name / "processed"
    processed_files = [processed / f"{s}_data.pt" for s in ("train", "val", "test")]
    if not raw_file.is_file() and _missing(processed_files):
        raise FileNotFoundError(
            f"{name} not found (downloads are disabled): put {name}_v2.pt (the file inside "
            f"PyG's {name}_v2.zip) at {raw_file}"
        )

    class _OfflineGNNBenchmark(GNNBenchmarkDataset):
        def download(self) -> None:  # processed files exist: nothing to fetch
            return None

    return _OfflineGNNBenchmark(str(root), name=name, split=split)


# --------------------------------------------------------------------------------------------
# Stochastic block models: PATTERN and CLUSTER
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SBMPatternRecipe:
    """PATTERN (Dwivedi et al., sec. "PATTERN"): find a planted pattern in an SBM graph.

    ``num_communities`` communities with sizes drawn uniformly from
    ``[size_min, size_max)``, edge probability ``p`` inside and ``q`` across communities, node
    features uniform over ``vocab_size`` values. Each of the ``num_patterns`` patterns has
    ``pattern_size`` nodes, internal edge probability ``p_pattern``, fixed random features, and is
    joined to each background node with probability ``q_pattern``. Label 1 = pattern node.
    Official split: 100 train / 20 val / 20 test graphs per pattern (10k / 2k / 2k).
    """

    num_communities: int = 5
    size_min: int = 5
    size_max: int = 35  # exclusive, as numpy's randint
    p: float = 0.5
    q: float = 0.35
    vocab_size: int = 3
    pattern_size: int = 20
    p_pattern: float = 0.5
    q_pattern: float = 0.5
    num_patterns: int = 100


@dataclass(frozen=True)
class SBMClusterRecipe:
    """CLUSTER (Dwivedi et al., sec. "CLUSTER"): semi-supervised community detection.

    ``num_communities`` communities with sizes drawn uniformly from ``[size_min, size_max)``,
    edge probability ``p`` inside and ``q`` across. One random node per community carries its
    community id + 1 as feature, every other node 0. The label of every node is its community.
    Official split: 10k / 1k / 1k graphs.
    """

    num_communities: int = 6
    size_min: int = 5
    size_max: int = 35  # exclusive
    p: float = 0.55
    q: float = 0.25

    @property
    def vocab_size(self) -> int:
        return self.num_communities + 1


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value}")


def _check_sizes(size_min: int, size_max: int) -> None:
    if size_min < 1 or size_max <= size_min:
        raise ValueError(f"need 1 <= size_min < size_max, got size_min={size_min}, "
                         f"size_max={size_max}")


def _block_adjacency(
    rng: np.random.Generator, blocks: np.ndarray, p: float, q: float
) -> np.ndarray:
    """Symmetric 0/1 adjacency without self-loops: edge prob ``p`` within a block, ``q`` across."""
    same = blocks[:, None] == blocks[None, :]
    prob = np.where(same, p, q)
    upper = np.triu(rng.random(prob.shape) < prob, k=1)
    return upper | upper.T


def _community_blocks(
    rng: np.random.Generator, count: int, size_min: int, size_max: int
) -> np.ndarray:
    sizes = rng.integers(size_min, size_max, size=count)
    return np.repeat(np.arange(count), sizes)


def _to_data(adjacency: np.ndarray, features: np.ndarray, labels: np.ndarray, blocks: np.ndarray,
             vocab_size: int) -> Data:
    order = np.argwhere(adjacency)  # row-major: sorted by source, both directions present
    edge_index = torch.from_numpy(order.T.copy()).long()
    feature_ids = torch.from_numpy(features).long()
    return Data(
        x=torch.nn.functional.one_hot(feature_ids, vocab_size).float(),
        edge_index=edge_index,
        y=torch.from_numpy(labels).long(),
        community=torch.from_numpy(blocks).long(),
        num_nodes=len(labels),
    )


def sbm_pattern_graph(rng: np.random.Generator, pattern_adjacency: np.ndarray,
                      pattern_features: np.ndarray, recipe: SBMPatternRecipe) -> Data:
    """One PATTERN graph: SBM background plus the given pattern, nodes shuffled."""
    blocks = _community_blocks(rng, recipe.num_communities, recipe.size_min, recipe.size_max)
    background = _block_adjacency(rng, blocks, recipe.p, recipe.q)
    features = rng.integers(0, recipe.vocab_size, size=len(blocks))
    n, m = len(blocks), len(pattern_features)
    links = rng.random((m, n)) < recipe.q_pattern
    adjacency = np.zeros((n + m, n + m), dtype=bool)
    adjacency[:n, :n] = background
    adjacency[n:, n:] = pattern_adjacency
    adjacency[n:, :n] = links
    adjacency[:n, n:] = links.T
    blocks = np.concatenate([blocks, np.full(m, recipe.num_communities)])
    features = np.concatenate([features, pattern_features])
    order = rng.permutation(n + m)
    adjacency = adjacency[order][:, order]
    blocks, features = blocks[order], features[order]
    labels = (blocks == recipe.num_communities).astype(np.int64)
    return _to_data(adjacency, features, labels, blocks, recipe.vocab_size)


def sbm_cluster_graph(rng: np.random.Generator, recipe: SBMClusterRecipe) -> Data:
    """One CLUSTER graph: SBM communities, nodes shuffled, one labelled seed node per community."""
    blocks = _community_blocks(rng, recipe.num_communities, recipe.size_min, recipe.size_max)
    adjacency = _block_adjacency(rng, blocks, recipe.p, recipe.q)
    order = rng.permutation(len(blocks))
    adjacency, blocks = adjacency[order][:, order], blocks[order]
    features = np.zeros(len(blocks), dtype=np.int64)
    for community in range(recipe.num_communities):
        members = np.flatnonzero(blocks == community)
        features[members[rng.integers(len(members))]] = community + 1
    return _to_data(adjacency, features, blocks.astype(np.int64), blocks, recipe.vocab_size)


def _split_sizes(num_train: int, num_val: int, num_test: int) -> dict[str, int]:
    sizes = {"train": num_train, "val": num_val, "test": num_test}
    for split, size in sizes.items():
        if size < 0:
            raise ValueError(f"num_{split} must be >= 0, got {size}")
    return sizes


def generate_sbm_pattern(
    num_train: int = 10000,
    num_val: int = 2000,
    num_test: int = 2000,
    seed: int = 0,
    recipe: Optional[SBMPatternRecipe] = None,
) -> dict[str, list[Data]]:
    """Generated PATTERN splits. Graph ``i`` of every split uses pattern ``i % num_patterns``, so
    the patterns are shared across splits as in the published recipe (100/20/20 per pattern).
    The same ``seed`` and sizes give the same graphs."""
    recipe = recipe or SBMPatternRecipe()
    for name in ("p", "q", "p_pattern", "q_pattern"):
        _check_probability(name, getattr(recipe, name))
    _check_sizes(recipe.size_min, recipe.size_max)
    if recipe.num_patterns < 1 or recipe.pattern_size < 1 or recipe.vocab_size < 1:
        raise ValueError("num_patterns, pattern_size and vocab_size must be positive")
    sizes = _split_sizes(num_train, num_val, num_test)
    rng = np.random.default_rng(seed)
    patterns = []
    for _ in range(recipe.num_patterns):
        full = rng.random((recipe.pattern_size, recipe.pattern_size)) < recipe.p_pattern
        upper = np.triu(full, k=1)
        patterns.append((upper | upper.T, rng.integers(0, recipe.vocab_size, recipe.pattern_size)))
    return {
        split: [
            sbm_pattern_graph(rng, *patterns[i % recipe.num_patterns], recipe)
            for i in range(size)
        ]
        for split, size in sizes.items()
    }


def generate_sbm_cluster(
    num_train: int = 10000,
    num_val: int = 1000,
    num_test: int = 1000,
    seed: int = 0,
    recipe: Optional[SBMClusterRecipe] = None,
) -> dict[str, list[Data]]:
    """Generated CLUSTER splits; the same ``seed`` and sizes give the same graphs."""
    recipe = recipe or SBMClusterRecipe()
    _check_probability("p", recipe.p)
    _check_probability("q", recipe.q)
    _check_sizes(recipe.size_min, recipe.size_max)
    if recipe.num_communities < 1:
        raise ValueError("num_communities must be positive")
    sizes = _split_sizes(num_train, num_val, num_test)
    rng = np.random.default_rng(seed)
    return {split: [sbm_cluster_graph(rng, recipe) for _ in range(size)]
            for split, size in sizes.items()}


def recipe_dict(recipe: Union[SBMPatternRecipe, SBMClusterRecipe]) -> dict:
    """The recipe's parameters, for results files."""
    return asdict(recipe)


__all__ = [
    "GNN_BENCHMARK_NAMES",
    "SBMClusterRecipe",
    "SBMPatternRecipe",
    "ZINC_NUM_ATOM_TYPES",
    "ZINC_NUM_BOND_TYPES",
    "generate_sbm_cluster",
    "generate_sbm_pattern",
    "load_gnn_benchmark",
    "load_zinc",
    "load_zinc_partial",
    "recipe_dict",
    "sbm_cluster_graph",
    "sbm_pattern_graph",
    "sbm_statistics",
]


def sbm_statistics(graphs: list[Data]) -> dict[str, float]:
    """Average/min/max node count, average directed edge count, label distribution."""
    if not graphs:
        raise ValueError("no graphs")
    nodes = np.array([g.num_nodes for g in graphs])
    edges = np.array([g.edge_index.size(1) for g in graphs])
    labels = torch.cat([g.y for g in graphs])
    counts = torch.bincount(labels).double()
    return {
        "graphs": len(graphs),
        "avg_nodes": float(nodes.mean()),
        "min_nodes": int(nodes.min()),
        "max_nodes": int(nodes.max()),
        "avg_directed_edges": float(edges.mean()),
        "label_fractions": (counts / counts.sum()).tolist(),
    }


if __name__ == "__main__":
    # python -m et_graph.datasets.graph_benchmarks PATTERN 1000 : statistics of generated graphs
    import sys

    name = sys.argv[1] if len(sys.argv) > 1 else "PATTERN"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    generate = generate_sbm_pattern if name == "PATTERN" else generate_sbm_cluster
    print(name, sbm_statistics(generate(count, 0, 0, seed=0)["train"]))
