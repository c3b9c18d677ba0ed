"""Generated graphs, seeded, never downloaded.

* :func:`planted_anomaly_graph`: a small graph with planted contextual anomalies, for tests,
  smoke runs and examples.
* :func:`generate_sbm_pattern` / :func:`generate_sbm_cluster`: PATTERN and CLUSTER of
  GNNBenchmark (Dwivedi et al.) regenerated from the published stochastic-block-model recipe
  (:class:`SBMPatternRecipe`, :class:`SBMClusterRecipe`). The graphs are *generated*, not the
  official files: same distribution, different samples.

``python -m et_graph.datasets.synthetic PATTERN 1000`` prints the statistics of 1000 generated
graphs (seed 0).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional, Union

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from ..nn.validation import is_integral


def planted_anomaly_graph(
    num_nodes: int = 600,
    num_features: int = 8,
    communities: int = 4,
    anomaly_rate: float = 0.1,
    degree: int = 8,
    seed: int = 0,
) -> Data:
    """A small synthetic graph with planted *contextual* anomalies, for tests and smoke runs.

    Nodes form ``communities`` dense clusters; a normal node's features are drawn around its own
    cluster's centre, an anomalous node's around *another* cluster's centre. Every node's
    features alone look normal, so the anomalies are only visible against the neighbours.
    """
    for name, value, low in (("num_nodes", num_nodes, 1), ("num_features", num_features, 1),
                             ("communities", communities, 2), ("degree", degree, 1)):
        if not is_integral(value) or value < low:
            # one community leaves an anomaly no other centre to come from
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if not 0.0 <= anomaly_rate < 1.0:
        raise ValueError(f"anomaly_rate must lie in [0, 1), got {anomaly_rate}")
    if not is_integral(seed):
        raise ValueError(f"seed must be an int, got {seed!r}")
    gen = torch.Generator().manual_seed(int(seed))  # (a NumPy int was a TypeError here)
    community = torch.randint(communities, (num_nodes,), generator=gen)
    centres = 2.0 * torch.randn(communities, num_features, generator=gen)
    y = (torch.rand(num_nodes, generator=gen) < anomaly_rate).long()
    shift = torch.randint(1, communities, (num_nodes,), generator=gen)
    source = torch.where(y.bool(), (community + shift) % communities, community)
    x = centres[source] + 0.7 * torch.randn(num_nodes, num_features, generator=gen)
    src, dst = [], []
    for c in range(communities):
        members = (community == c).nonzero().view(-1)
        if members.numel() == 0:  # a small graph can leave a community empty
            continue
        picks = torch.randint(members.numel(), (members.numel(), degree), generator=gen)
        src.append(members.repeat_interleave(degree))
        dst.append(members[picks].view(-1))
    edge_index = torch.stack([torch.cat(src), torch.cat(dst)])

    edge_index, _ = remove_self_loops(to_undirected(edge_index, num_nodes=num_nodes))
    edge_index = coalesce(edge_index, num_nodes=num_nodes)
    return Data(x=x, edge_index=edge_index, y=y, name="planted")


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


def sbm_statistics(graphs: list[Data]) -> dict[str, Any]:
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

