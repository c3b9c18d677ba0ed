r"""Neighbour sampling for mini-batch training on graphs that do not fit one full pass.

A mini-batch is a set of *seed* nodes (the nodes that carry the loss) and a sampled
neighbourhood around them: hop 1 draws up to ``num_neighbors[0]`` in-neighbours ``B -> C`` of
every seed ``C``, hop 2 up to ``num_neighbors[1]`` in-neighbours of every node that hop 1 added,
and so on (GraphSAGE; PyG's ``NeighborLoader`` with ``directed=True``). The batch graph holds
the sampled edges only; its nodes are numbered seeds first.

Two samplers give batches of that form:

* :class:`NeighbourSampler`, pure torch (vectorised CSR gathers, no per-node Python loop), always
  available and bit-reproducible from a ``torch.Generator``;
* PyG's ``NeighborLoader`` (:class:`PygNeighbourSampler`), which needs ``pyg-lib`` or
  ``torch-sparse`` (optional extras; ``pip install -e .[sampling]``).

What it approximates for ET. One descent step at node :math:`C` reads the softmax over
:math:`C`'s in-neighbours (the *query* side of :math:`E_{ATT}`) *and* over the in-neighbours of
every node :math:`C` sends to (the *key* side: :math:`C` is a key of its out-neighbours'
softmaxes). So one ET step reads two hops, one of them along out-edges. A sampled batch keeps
only sampled in-edges towards the seeds: the query side of a seed is exact when its fanout is at
least its in-degree, and the key side is present only for the edges the sampler happened to
include. ``T`` steps read ``2T`` hops: on a symmetric graph, fanouts of ``-1`` over ``2T`` hops
(plus the readout's, and one per message-passing layer) give the seeds exactly their
full-graph outputs, and fewer do not (a test checks both); on a directed graph the key side
lies along out-edges, which this sampler never follows. Scoring (``decision_function``) is
never sampled: it is the exact full-graph pass, chunked when the graph is large
(:meth:`et_graph.nn.ETConv.forward_chunked`).
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional

import torch
from torch import Tensor
from torch_geometric.utils import cumsum

from ..exceptions import ConfigWarning

SAMPLERS = ("auto", "builtin", "pyg")


class SampledBatch(NamedTuple):
    """One sampled mini-batch: ``nodes [n]`` (global ids, the ``num_seeds`` seeds first) and
    ``edge_index [2, e]`` over local ids ``0 .. n - 1`` (``edge_index[0]`` the sampled
    in-neighbour, ``edge_index[1]`` the node it was sampled for)."""

    nodes: Tensor
    edge_index: Tensor
    num_seeds: int


def parse_fanouts(value: object) -> tuple[int, ...]:
    """``num_neighbors`` as a tuple of positive fanouts per hop, from ``"10,5"``, ``[10, 5]``
    or ``""``/``None`` (no sampling: the empty tuple). ``-1`` takes every neighbour."""
    if value is None or value == "" or value == ():
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Sequence):
        raise ValueError(f"num_neighbors must be like '10,5' or [10, 5], got {value!r}")
    fanouts = []
    for item in items:
        try:
            fanout = int(str(item).strip())
        except ValueError:
            raise ValueError(
                f"num_neighbors must be comma-separated integers like '10,5', got {value!r}"
            ) from None
        if fanout == 0 or fanout < -1:
            raise ValueError(f"each fanout must be positive (or -1 = all), got {value!r}")
        fanouts.append(fanout)
    return tuple(fanouts)


def pyg_sampler_available() -> bool:
    """Whether PyG's ``NeighborLoader`` can sample here (it needs pyg-lib or torch-sparse)."""
    import torch_geometric.typing as pyg_typing

    return bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)


def resolve_sampler(name: str) -> str:
    """``"builtin"`` or ``"pyg"`` for the config value ``name`` (``"auto"`` = PyG's when it
    is installed). Asking for ``"pyg"`` without pyg-lib/torch-sparse is an error."""
    if name not in SAMPLERS:
        raise ValueError(f"neighbour sampler must be one of {SAMPLERS}, got {name!r}")
    available = pyg_sampler_available()
    if name == "pyg" and not available:
        raise ValueError("neighbor_sampler='pyg' needs pyg-lib or torch-sparse (pip install "
                         "-e .[sampling]); use 'builtin' or 'auto'")
    if name == "auto":
        return "pyg" if available else "builtin"
    return name


class NeighbourSampler:
    """Pure-torch neighbour sampler over a fixed graph (see the module docstring).

    The in-edge CSR (edges sorted by destination) is built once; each hop gathers the frontier's
    in-edges by CSR ranges and keeps a uniform random subset of at most ``fanout`` per node
    (without replacement: random keys, sorted within each node's range). Memory per batch is
    that of the frontier's in-edges (all of them, before the subset is kept: a hub in the
    frontier costs its whole degree in that batch) and of the sampled edges; the only ``[N]``
    state is one id map, reset after each batch.

    Args:
        edge_index: ``[2, E]`` edges ``B -> C`` of the full graph.
        num_nodes: number of nodes.
        num_neighbors: fanout per hop (``-1`` = all in-neighbours).
    """

    def __init__(self, edge_index: Tensor, num_nodes: int, num_neighbors: Sequence[int]) -> None:
        fanouts = parse_fanouts(list(num_neighbors))
        if not fanouts:
            raise ValueError("num_neighbors needs at least one hop")
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must be [2, E], got {tuple(edge_index.shape)}")
        edge_index = edge_index.cpu()
        if edge_index.numel() and (int(edge_index.min()) < 0
                                   or int(edge_index.max()) >= num_nodes):
            raise ValueError(f"edge_index has node ids outside [0, {num_nodes})")
        self.num_nodes = int(num_nodes)
        self.fanouts = fanouts
        order = torch.argsort(edge_index[1], stable=True)
        self.in_src = edge_index[0, order].contiguous()
        counts = torch.bincount(edge_index[1], minlength=num_nodes)
        self.in_ptr = cumsum(counts)
        self._local = torch.full((num_nodes,), -1, dtype=torch.long)

    def sample(self, seeds: Tensor, generator: Optional[torch.Generator] = None) -> SampledBatch:
        """The batch around ``seeds`` (distinct global ids, kept in their order)."""
        seeds = seeds.cpu().long()
        local = self._local
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= self.num_nodes):
            raise ValueError("seed ids out of range")
        local[seeds] = torch.arange(seeds.numel())
        if int((local[seeds] != torch.arange(seeds.numel())).sum()):
            local[seeds] = -1
            raise ValueError("seed nodes must be distinct (for the two ends of edges, as in "
                             "link prediction: seeds, place = torch.unique(edge_label_index."
                             "reshape(-1), return_inverse=True); the pair i is then "
                             "place.view(2, -1)[:, i] among the batch's first nodes)")
        nodes, srcs, dsts = [seeds], [], []
        frontier, count = seeds, seeds.numel()
        try:
            for fanout in self.fanouts:
                positions, targets = self._pick(frontier, fanout, generator)
                sources = self.in_src[positions]
                new = torch.unique(sources[local[sources] < 0])
                local[new] = torch.arange(count, count + new.numel())
                count += new.numel()
                nodes.append(new)
                srcs.append(local[sources])
                dsts.append(local[targets])
                frontier = new
                if frontier.numel() == 0:
                    break
            all_nodes = torch.cat(nodes)
        finally:
            local[torch.cat(nodes)] = -1
        edge_index = torch.stack([torch.cat(srcs), torch.cat(dsts)]) if srcs else (
            torch.zeros(2, 0, dtype=torch.long))
        return SampledBatch(all_nodes, edge_index, seeds.numel())

    def _pick(self, frontier: Tensor, fanout: int, generator: Optional[torch.Generator]
              ) -> tuple[Tensor, Tensor]:
        """Positions (into the in-edge CSR) of the sampled in-edges of ``frontier``, and the
        frontier node each one was sampled for."""
        starts = self.in_ptr[frontier]
        degree = self.in_ptr[frontier + 1] - starts
        total = int(degree.sum())
        if total == 0:
            empty = frontier.new_zeros(0)
            return empty, empty
        owner = torch.repeat_interleave(torch.arange(frontier.numel()), degree)
        offset = torch.arange(total) - torch.repeat_interleave(degree.cumsum(0) - degree, degree)
        positions = starts[owner] + offset
        if fanout < 0 or int(degree.max()) <= fanout:
            return positions, frontier[owner]
        # Uniform subset without replacement: order each node's edges by a random key and keep
        # the first `fanout` (a stable sort by owner after a sort by key keeps that order).
        keys = torch.rand(total, generator=generator)
        by_key = torch.argsort(keys)
        by_owner = by_key[torch.argsort(owner[by_key], stable=True)]
        rank = torch.arange(total) - (degree.cumsum(0) - degree)[owner[by_owner]]
        keep = by_owner[rank < fanout]
        return positions[keep], frontier[owner[keep]]

    def batches(self, seeds: Tensor, batch_size: int, generator: Optional[torch.Generator] = None
                ) -> Iterator[SampledBatch]:
        """Batches of ``batch_size`` consecutive seeds each (shuffle ``seeds`` beforehand)."""
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        for start in range(0, seeds.numel(), batch_size):
            yield self.sample(seeds[start:start + batch_size], generator)


class PygNeighbourSampler:
    """The same batches from PyG's neighbour sampler (the engine of ``NeighborLoader``; needs
    pyg-lib or torch-sparse), with :class:`NeighbourSampler`'s interface. Its random draws come
    from the sampling library, not from the ``generator`` argument (ignored): unlike the
    built-in sampler, a resumed run does not redraw bit-identical batches."""

    def __init__(self, edge_index: Tensor, num_nodes: int, num_neighbors: Sequence[int]) -> None:
        from torch_geometric.data import Data
        from torch_geometric.sampler import NeighborSampler as PygSampler

        fanouts = parse_fanouts(list(num_neighbors))
        if not fanouts:
            raise ValueError("num_neighbors needs at least one hop")
        if not pyg_sampler_available():
            raise ValueError("PyG's neighbour sampler needs pyg-lib or torch-sparse")
        self.num_nodes = int(num_nodes)
        self.fanouts = fanouts
        graph = Data(edge_index=edge_index.cpu(), num_nodes=num_nodes)
        self._sampler = PygSampler(graph, num_neighbors=list(fanouts))

    def sample(self, seeds: Tensor, generator: Optional[torch.Generator] = None) -> SampledBatch:
        from torch_geometric.sampler import NodeSamplerInput

        seeds = seeds.cpu().long()
        out = self._sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
        # PyG's (row, col) are the local (source, destination) of each sampled edge.
        return SampledBatch(out.node, torch.stack([out.row, out.col]), seeds.numel())

    batches = NeighbourSampler.batches


def make_sampler(name: str, edge_index: Tensor, num_nodes: int, num_neighbors: Sequence[int]
                 ) -> NeighbourSampler | PygNeighbourSampler:
    """The sampler ``name`` (``auto``/``builtin``/``pyg``, see :func:`resolve_sampler`) over
    the graph's edges without self-loops. On a directed graph a ``ConfigWarning`` says that
    the batches cannot give the full-graph outputs (the key side of an ET step lies along
    out-edges, which no sampler follows). That check sorts the edge list once, which at setup
    takes a few times the ``edge_index``'s memory (about +430 MiB for 8M edges in an audit)."""
    from torch_geometric.utils import is_undirected

    if edge_index.numel() and not is_undirected(edge_index, num_nodes=num_nodes):
        warnings.warn(
            "neighbour sampling on a directed graph: the sampler follows in-edges only, and an "
            "ET step also reads along out-edges, so sampled training never sees the function "
            "that scoring computes over the full graph (not even with fanouts of -1); make the "
            "graph undirected (torch_geometric.transforms.ToUndirected) or train full batch",
            ConfigWarning, stacklevel=3)
    kind = resolve_sampler(name)
    # ET gives a self-loop no weight (its attention skips them), so a drawn self-loop would
    # only take a neighbour's place in the fanout.
    loops = edge_index[0] == edge_index[1]
    if bool(loops.any()):  # a copy of the edge list only when there is something to drop
        edge_index = edge_index[:, ~loops]
    cls = PygNeighbourSampler if kind == "pyg" else NeighbourSampler
    return cls(edge_index, num_nodes, num_neighbors)
