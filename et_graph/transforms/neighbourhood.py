"""Label-free neighbourhood statistics as extra node features (a PyG transform).

Anomalous nodes are often told apart less by their own features than by how those features
compare with their neighbours' (the heterophily of fraud graphs). :class:`NeighbourhoodStatistics`
appends, per node, column-wise statistics of its in-neighbours' features, the input that makes
tree models strong on GADBench, so that every model (ET, the GNN baselines, the trees) can be
given the same, richer input.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import scatter

from ..nn.validation import check_edge_index

#: The statistics :class:`NeighbourhoodStatistics` knows; ``degree`` adds one column, the others
#: one column per feature.
NEIGHBOUR_STATS = ("mean", "sq_mean", "max", "min", "std", "degree")
DEFAULT_NEIGHBOUR_STATS = ("mean", "sq_mean", "max", "min")


def parse_neighbour_stats(stats: Union[str, Sequence[str], None]) -> tuple[str, ...]:
    """``("mean", "max", ...)`` from a comma list (``"mean,max"``), a sequence, or ``"none"`` /
    ``""`` / ``None`` (no statistics: ``()``). Unknown or repeated names raise ``ValueError``."""
    if stats is None:
        return ()
    if isinstance(stats, str):
        if stats.strip().lower() in ("", "none"):
            return ()
        stats = stats.split(",")
    names = tuple(str(s).strip().lower() for s in stats if str(s).strip())
    unknown = sorted(set(names) - set(NEIGHBOUR_STATS))
    if unknown:
        raise ValueError(f"unknown neighbour statistics {unknown}; choose from "
                         f"{list(NEIGHBOUR_STATS)} (comma list) or none")
    if len(set(names)) != len(names):
        raise ValueError(f"neighbour statistics repeat a name: {list(names)}")
    return names


def in_edges_without_self_loops(edge_index: Tensor) -> tuple[Tensor, Tensor]:
    """``(src, dst)`` of the edges ``j -> i`` with ``j != i`` (a node is not its own
    neighbour, as in ET's attention); no copy of the edges when there is no self-loop."""
    src, dst = edge_index[0], edge_index[1]
    keep = src != dst
    if bool(keep.all()):
        return src, dst
    return src[keep], dst[keep]


def neighbourhood_statistics(x: Tensor, edge_index: Tensor,
                             stats: Sequence[str] = DEFAULT_NEIGHBOUR_STATS) -> Tensor:
    r"""Statistics of the in-neighbours' features, ``[N, k * F (+ 1 for degree)]``.

    Node ``i``'s in-neighbours are the sources ``j != i`` of the edges ``j -> i``
    (``edge_index[0] -> edge_index[1]``, PyG's ``source_to_target`` flow), with multiplicity;
    self-loops are ignored (a node is not its own neighbour, as in ET's attention).
    The blocks follow the order of ``stats``:

    - ``mean``: :math:`\frac{1}{d_i}\sum_j x_j`;
    - ``sq_mean``: :math:`\frac{1}{d_i}\sum_j x_j^2`;
    - ``max`` / ``min``: column-wise maximum / minimum;
    - ``std``: population standard deviation, :math:`\sqrt{\frac{1}{d_i}\sum_j
      (x_j - \mathrm{mean}_i)^2}`;
    - ``degree``: :math:`\log(1 + d_i)` (one column).

    A node without in-neighbours gets zeros in every block. Nothing but ``x`` and ``edge_index``
    is read.
    """
    stats = parse_neighbour_stats(stats)
    if x.dim() != 2:
        raise ValueError(f"x must have shape [N, F], got {tuple(x.shape)}")
    num_nodes = x.size(0)
    # a raw indexing error for an id past the last node (or a float edge_index) before
    edge_index = check_edge_index(edge_index, num_nodes)
    src, dst = in_edges_without_self_loops(edge_index)
    messages = x[src]
    parts: list[Tensor] = []
    mean: Optional[Tensor] = None  # (computed once, for the first of mean and std)
    for name in stats:
        if name in ("mean", "std"):
            if mean is None:
                mean = scatter(messages, dst, dim=0, dim_size=num_nodes, reduce="mean")
            if name == "mean":
                parts.append(mean)
            else:
                centred = messages - mean[dst]
                var = scatter(centred * centred, dst, dim=0, dim_size=num_nodes, reduce="mean")
                parts.append(var.clamp_min(0.0).sqrt())
        elif name == "sq_mean":
            parts.append(scatter(messages * messages, dst, dim=0, dim_size=num_nodes,
                                 reduce="mean"))
        elif name in ("max", "min"):
            # PyG's scatter max/min leave rows without any edge at 0.
            parts.append(scatter(messages, dst, dim=0, dim_size=num_nodes, reduce=name))
        elif name == "degree":
            degree = torch.zeros(num_nodes, dtype=x.dtype, device=x.device)
            degree.index_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
            parts.append(degree.log1p().unsqueeze(-1))
    if not parts:
        return x.new_zeros(num_nodes, 0)
    return torch.cat(parts, dim=-1)


class NeighbourhoodStatistics(BaseTransform):
    r"""Append statistics of each node's in-neighbours' features to ``data.x``.

    .. code-block:: python

        from et_graph.transforms import NeighbourhoodStatistics
        data = NeighbourhoodStatistics()(data)              # x -> [x, mean, sq_mean, max, min]
        data = NeighbourhoodStatistics(("mean", "std", "degree"))(data)

    The new columns are :func:`neighbourhood_statistics` of the current ``data.x`` (in the order
    of ``stats``; ``degree`` is ``log(1 + in-degree)``), zero for nodes without in-neighbours.
    The transform is label-free: it reads only ``x`` and ``edge_index``. It returns a shallow
    copy (the input ``data`` keeps its ``x``).

    Args:
        stats: any of ``mean``, ``sq_mean`` (mean of squares), ``max``, ``min``, ``std``
            (population), ``degree``; a sequence or a comma list.
        cat: append to ``data.x`` (default) or, with ``False``, replace it by the statistics.
    """

    def __init__(self, stats: Union[str, Sequence[str]] = DEFAULT_NEIGHBOUR_STATS,
                 cat: bool = True) -> None:
        self.stats = parse_neighbour_stats(stats)
        if not self.stats:
            raise ValueError("NeighbourhoodStatistics needs at least one statistic")
        self.cat = cat

    def forward(self, data: Data) -> Data:
        x = getattr(data, "x", None)
        edge_index = getattr(data, "edge_index", None)
        if x is None or edge_index is None:
            raise ValueError("NeighbourhoodStatistics needs data.x and data.edge_index")
        if not x.is_floating_point():
            x = x.float()
        extra = neighbourhood_statistics(x, edge_index, self.stats)
        data.x = torch.cat([x, extra], dim=-1) if self.cat else extra
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(stats={list(self.stats)}, cat={self.cat})"
