"""Injected anomalies, the way PyGOD and BOND build ``inj_cora`` and ``inj_amazon``.

A real graph with few labelled anomalies (or none) becomes a benchmark by planting two kinds of
outlier (Ding et al., 2019; Liu et al., BOND, 2022):

- **structural:** ``num_cliques`` groups of ``clique_size`` nodes drawn at random are linked into
  cliques (every ordered pair, both directions). Their features stay as they were, so only the
  edges give them away.
- **contextual:** for each of ``num_contextual`` nodes, ``candidates`` other nodes are drawn and
  the node's features are replaced by those of the candidate farthest from it (Euclidean). Its
  edges stay as they were, so only the features, measured against its neighbourhood, give it
  away.

The project uses this to *develop* unsupervised scores on a graph whose anomalies it planted
itself (``benchmarks/unsupervised_score_study.py``), so that no choice is made on the labels
of the graphs it reports.

``y`` of the result is 0 for normal nodes and 1 for injected ones, and ``anomaly_type`` holds
the kind as bits (1 = contextual, 2 = structural; 3 = both, when the two draws overlap).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import coalesce

from ..nn.validation import check_edge_index

CONTEXTUAL, STRUCTURAL = 1, 2


def _check_count(value: int, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def inject_structural_anomalies(
    edge_index: Tensor, num_nodes: int, num_cliques: int, clique_size: int,
    generator: Optional[torch.Generator] = None,
) -> tuple[Tensor, Tensor]:
    """Link ``num_cliques`` disjoint random groups of ``clique_size`` nodes into cliques.

    Returns the new ``edge_index`` (coalesced: an edge the graph already had is not doubled,
    and edges the input stored twice become one, in sorted order; with ``num_cliques=0`` the
    input is returned as it is) and the ``[num_cliques * clique_size]`` chosen nodes, clique by
    clique.
    """
    _check_count(num_cliques, "num_cliques")
    _check_count(clique_size, "clique_size", 2)
    chosen = num_cliques * clique_size
    if chosen > num_nodes:
        raise ValueError(f"{num_cliques} cliques of {clique_size} need {chosen} nodes; the "
                         f"graph has {num_nodes}")
    nodes = torch.randperm(num_nodes, generator=generator)[:chosen]
    if chosen == 0:
        return edge_index, nodes
    groups = nodes.view(num_cliques, clique_size)
    src = groups.unsqueeze(2).expand(-1, -1, clique_size)
    dst = groups.unsqueeze(1).expand(-1, clique_size, -1)
    off_diagonal = ~torch.eye(clique_size, dtype=torch.bool).expand(num_cliques, -1, -1)
    clique_edges = torch.stack([src[off_diagonal], dst[off_diagonal]])
    merged = torch.cat([edge_index, clique_edges.to(edge_index.device)], dim=1)
    return coalesce(merged, num_nodes=num_nodes), nodes


def inject_contextual_anomalies(
    x: Tensor, num_contextual: int, candidates: int,
    generator: Optional[torch.Generator] = None,
) -> tuple[Tensor, Tensor]:
    """Give ``num_contextual`` random nodes the features of the farthest of ``candidates`` random
    other nodes. Returns the new ``x`` (a copy) and the chosen nodes."""
    _check_count(num_contextual, "num_contextual")
    _check_count(candidates, "candidates", 1)
    num_nodes = x.size(0)
    if num_contextual > num_nodes:
        raise ValueError(f"num_contextual={num_contextual} exceeds the {num_nodes} nodes")
    if num_contextual and num_nodes < 2:
        raise ValueError("a contextual anomaly needs at least one other node to copy from")
    nodes = torch.randperm(num_nodes, generator=generator)[:num_contextual]
    out = x.clone()
    for node in nodes.tolist():
        # Drawn with replacement from the *other* nodes, and always copied from the original
        # features. PyGOD draws without replacement from all nodes and copies from features
        # it may already have replaced; with candidates << N the two rarely differ.
        pool = torch.randint(num_nodes - 1, (candidates,), generator=generator)
        pool = pool + (pool >= node).long()
        distance = (x[pool].double() - x[node].double()).pow(2).sum(1)
        out[node] = x[pool[int(distance.argmax())]]
    return out, nodes


class InjectAnomalies(BaseTransform):
    r"""Plant structural and contextual anomalies (a PyG transform; see the module docstring).

    Args:
        num_cliques, clique_size: the structural anomalies (``num_cliques * clique_size``
            nodes).
        num_contextual, candidates: the contextual anomalies and the candidates each one's
            replacement features are drawn from (PyGOD's ``k``, 50 in BOND).
        seed: seed of the draws; the same seed gives the same graph.

    The input's own ``y`` (if any) is replaced: the result's ``y`` marks the injected nodes only,
    and ``anomaly_type`` their kind. Structural nodes are drawn first, then contextual ones
    independently, as PyGOD does, so a node can be both.
    """

    def __init__(self, num_cliques: int = 10, clique_size: int = 15, num_contextual: int = 150,
                 candidates: int = 50, seed: int = 0) -> None:
        self.num_cliques = _check_count(num_cliques, "num_cliques")
        self.clique_size = _check_count(clique_size, "clique_size", 2)
        self.num_contextual = _check_count(num_contextual, "num_contextual")
        self.candidates = _check_count(candidates, "candidates", 1)
        self.seed = int(seed)

    def forward(self, data: Data) -> Data:
        if data.x is None or data.x.dim() != 2 or not data.x.is_floating_point():
            raise ValueError("InjectAnomalies needs float node features x [N, F]")
        per_edge = sorted(key for key in data.keys()
                          if key != "edge_index" and data.is_edge_attr(key))
        if self.num_cliques and per_edge:
            # The clique edges would have no values, and the old per-edge tensors would be
            # left one row per old edge: misaligned without any error.
            raise ValueError(f"InjectAnomalies cannot invent {', '.join(per_edge)} for the "
                             "clique edges; drop them first (or set num_cliques=0)")
        num_nodes = data.x.size(0)
        try:  # an id past the last node passed through into the planted graph
            check_edge_index(data.edge_index, num_nodes)
        except ValueError as error:
            raise ValueError(f"InjectAnomalies: {error}") from None
        generator = torch.Generator().manual_seed(self.seed)
        edge_index, structural = inject_structural_anomalies(
            data.edge_index, num_nodes, self.num_cliques, self.clique_size, generator)
        x, contextual = inject_contextual_anomalies(
            data.x, self.num_contextual, self.candidates, generator)
        kind = torch.zeros(num_nodes, dtype=torch.long)
        kind[structural] |= STRUCTURAL
        kind[contextual] |= CONTEXTUAL
        out = data.clone()
        out.x, out.edge_index = x, edge_index
        out.y = (kind > 0).long()
        out.anomaly_type = kind
        return out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_cliques={self.num_cliques}, "
                f"clique_size={self.clique_size}, num_contextual={self.num_contextual}, "
                f"candidates={self.candidates}, seed={self.seed})")
