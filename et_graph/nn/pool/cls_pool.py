"""CLS pooling: one learnable token per graph, realised as a virtual node linked to its graph."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, cast

import torch
from torch import Tensor
from torch.nn import Module, Parameter
from torch_geometric.utils import cumsum

from ..validation import (
    check_batch,
    check_edge_index,
    check_features,
    check_positive_int,
    check_within_graphs,
)


class CLSGraph(NamedTuple):
    """A batch with one CLS node placed in front of each graph's nodes.

    ``x`` ``[N + G, D]`` and ``batch`` ``[N + G]`` (still sorted, so ``to_dense_batch`` puts each
    CLS node at position 0 of its graph); ``edge_index`` holds the original edges (renumbered)
    followed by the CLS edges, node -> CLS for every node and then CLS -> node for every node;
    ``is_cls_edge`` ``[E + 2N]`` marks the latter; ``cls_index`` ``[G]`` and ``node_index`` ``[N]``
    give where the CLS nodes and the original nodes went.
    """

    x: Tensor
    edge_index: Tensor
    batch: Tensor
    is_cls_edge: Tensor
    cls_index: Tensor
    node_index: Tensor

    def token_ptr(self) -> Tensor:
        """``[G + 1]``: the first token of each graph (its CLS token, which comes first) and
        then the number of tokens, so graph ``g`` holds tokens ``ptr[g] .. ptr[g + 1] - 1``."""
        return torch.cat([self.cls_index, self.cls_index.new_full((1,), self.x.size(0))])


def graph_sizes(
    batch: Optional[Tensor], num_nodes: int, num_graphs: Optional[int] = None
) -> Tensor:
    """Nodes per graph ``[G]``; raises ``ValueError`` for unsorted batches and empty graphs.

    Args:
        batch: each node's graph ``[N]``, sorted (``None``: one graph).
        num_nodes: the number of nodes ``N``.
        num_graphs: the number of graphs ``G`` (default: the largest graph id plus one; with
            ``batch=None`` only 1 is accepted).
    """
    if num_graphs is not None:  # 2.7 was truncated to 2 without a word
        if isinstance(num_graphs, Tensor) and num_graphs.numel() == 1 and not (
                num_graphs.is_floating_point() or num_graphs.dtype == torch.bool):
            num_graphs = int(num_graphs)
        if isinstance(num_graphs, bool) or not isinstance(num_graphs, int) or num_graphs < 0:
            raise ValueError(f"num_graphs must be an int >= 0, got {num_graphs!r}")
    if batch is None:
        if num_nodes == 0:
            raise ValueError("got a graph without nodes; every graph needs at least one node")
        if num_graphs is not None and int(num_graphs) != 1:
            raise ValueError(f"num_graphs={num_graphs} but no batch vector was given (one "
                             "graph); pass batch to say which graph each node belongs to")
        return torch.tensor([num_nodes])
    check_batch(batch, num_nodes)
    if num_nodes and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("batch must be sorted (PyG's DataLoader produces sorted batches)")
    inferred = int(batch.max()) + 1 if num_nodes else 0
    num_graphs = inferred if num_graphs is None else int(num_graphs)
    if num_graphs < inferred:
        raise ValueError(f"batch holds graph id {inferred - 1} but num_graphs={num_graphs}")
    sizes = torch.bincount(batch, minlength=num_graphs) if num_nodes else batch.new_zeros(
        num_graphs
    )
    if num_graphs == 0 or bool((sizes == 0).any()):
        empty = (sizes == 0).nonzero().flatten().tolist() if num_graphs else []
        raise ValueError(
            f"got graphs without nodes (graph ids {empty[:10]}); every graph needs at least one "
            "node for its CLS readout; drop empty graphs"
        )
    return sizes


def add_cls_nodes(
    x: Tensor,
    edge_index: Tensor,
    cls_tokens: Tensor,
    batch: Optional[Tensor] = None,
    num_graphs: Optional[int] = None,
) -> CLSGraph:
    """Insert ``cls_tokens`` ``[G, D]`` in front of each graph and link it both ways to every node
    of its graph (``2N`` extra edges in all, O(N) per graph).

    Args:
        x: the node tokens ``[N, D]``.
        edge_index: the edges ``[2, E]``, each inside one graph.
        cls_tokens: one token per graph, ``[G, D]``.
        batch, num_graphs: as for :func:`graph_sizes`.
    """
    num_nodes = x.size(0)
    sizes = graph_sizes(batch, num_nodes, num_graphs)
    batch = (torch.zeros(num_nodes, dtype=torch.long, device=x.device) if batch is None
             else batch.long())
    num_graphs = sizes.numel()
    if cls_tokens.shape != (num_graphs, x.size(1)):
        raise ValueError(
            f"cls_tokens must have shape [num_graphs, D]={[num_graphs, x.size(1)]}, "
            f"got {list(cls_tokens.shape)}"
        )
    edge_index = check_edge_index(edge_index, num_nodes)
    check_within_graphs(edge_index, batch)
    return _insert_cls_nodes(x, edge_index, cls_tokens, batch, sizes)


def _insert_cls_nodes(
    x: Tensor, edge_index: Tensor, cls_tokens: Tensor, batch: Tensor, sizes: Tensor
) -> CLSGraph:
    """:func:`add_cls_nodes` on inputs that are already validated (``sizes`` from
    :func:`graph_sizes`, ``batch`` a tensor, ``edge_index`` int64)."""
    num_nodes = x.size(0)
    sizes = sizes.to(x.device)
    num_graphs = sizes.numel()
    graph_ids = torch.arange(num_graphs, device=x.device)
    ptr = cumsum(sizes)[:-1]
    cls_index = ptr + graph_ids
    node_index = torch.arange(num_nodes, device=x.device) + batch + 1
    total = num_nodes + num_graphs
    # index_copy rather than indexed assignment: its backward is a plain index_select.
    out_x = x.new_empty(total, x.size(1)).index_copy_(0, cls_index, cls_tokens.to(x.dtype))
    out_x = out_x.index_copy_(0, node_index, x)
    out_batch = torch.empty(total, dtype=torch.long, device=x.device)
    out_batch.index_copy_(0, cls_index, graph_ids).index_copy_(0, node_index, batch)
    own_cls = cls_index.index_select(0, batch)
    out_edges = torch.cat(
        [
            node_index.index_select(0, edge_index.reshape(-1)).view(2, -1),
            torch.stack([node_index, own_cls]),
            torch.stack([own_cls, node_index]),
        ],
        dim=1,
    )
    is_cls_edge = torch.zeros(out_edges.size(1), dtype=torch.bool, device=x.device)
    is_cls_edge[edge_index.size(1) :] = True
    return CLSGraph(out_x, out_edges, out_batch, is_cls_edge, cls_index, node_index)


def _in_layout(x: Tensor, graph: CLSGraph) -> Tensor:
    """``x`` if it has a row per node of ``graph`` (its nodes and CLS nodes): the tokens from
    before :meth:`CLSPool.attach` gave ordinary nodes' rows as CLS tokens without a word
    (a user audit)."""
    if not isinstance(x, Tensor) or x.dim() < 1 or x.size(0) != graph.x.size(0):
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(
            f"tokens must have one row per node of the CLS graph ({graph.x.size(0)}: "
            f"{graph.node_index.numel()} nodes and {graph.cls_index.numel()} CLS nodes), got "
            f"{shape}: read out the tokens computed on the graph that attach() returned")
    return x


class CLSPool(Module):
    r"""A learnable CLS token per graph as a virtual node with edges both ways to every node of its
    graph; the graph readout is that node's token after the last block.

    Usable with any message-passing stack::

        pool = CLSPool(channels)
        g = pool.attach(x, edge_index, batch)           # CLSGraph
        h = conv(g.x, g.edge_index)                     # any layers on the augmented graph
        out = pool.readout(h, g)                        # [num_graphs, channels]

    Because CLS edges stay inside their graph, each graph's readout depends on that graph only.

    Args:
        channels: the token width ``D``.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        channels = check_positive_int(channels, "channels")
        self.channels = channels
        self.cls_token = Parameter(torch.empty(channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        torch.nn.init.normal_(self.cls_token, std=1.0 / self.channels**0.5)

    def forward(self, *args: Any, **kwargs: Any) -> CLSGraph:
        """``pool(x, edge_index, batch)`` is :meth:`attach` (a module call has none of its own:
        it raised NotImplementedError, and module hooks saw nothing)."""
        return self.attach(*args, **kwargs)

    def attach(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
        cls_offset: Optional[Tensor] = None,
        sizes: Optional[Tensor] = None,
    ) -> CLSGraph:
        """Insert the CLS nodes; ``cls_offset`` ``[G, D]`` (e.g. the CLS positional encoding) is
        added to the shared CLS token. ``sizes``: the graph sizes from :func:`graph_sizes` when
        the caller has already validated ``x``, ``edge_index`` (int64) and ``batch`` (a model
        that built ``x`` itself); the checks are then skipped.

        Args:
            x: the node tokens ``[N, channels]``.
            edge_index: the edges ``[2, E]``, each inside one graph.
            batch, num_graphs: as for :func:`graph_sizes` (with ``sizes``, ``batch`` is
                required and ``num_graphs`` unread).
            cls_offset: ``[G, channels]`` added to the CLS token of each graph, or ``None``.
            sizes: the graph sizes ``[G]``, or ``None`` to validate and count here.

        Returns:
            The :class:`CLSGraph`, whose ``x`` and ``edge_index`` the layers then read.
        """
        validated = sizes is not None
        if sizes is None:
            check_features(x, self.channels)
            sizes = graph_sizes(batch, x.size(0), num_graphs)
        elif batch is None or x.dim() != 2 or x.size(1) != self.channels:
            raise ValueError("attach(sizes=...) needs a batch vector and x of shape [N, channels]")
        tokens = self.cls_token.unsqueeze(0).expand(sizes.numel(), -1)
        if cls_offset is not None:
            if cls_offset.shape != tokens.shape:
                raise ValueError(
                    f"cls_offset must have shape {list(tokens.shape)}, got {list(cls_offset.shape)}"
                )
            tokens = tokens + cls_offset
        if not validated:
            return add_cls_nodes(x, edge_index, tokens, batch, sizes.numel())
        # (a batch vector comes with sizes: checked above)
        return _insert_cls_nodes(x, edge_index.long(), tokens, cast(Tensor, batch), sizes)

    @staticmethod
    def readout(x: Tensor, graph: CLSGraph) -> Tensor:
        """The CLS tokens ``[G, D]``.

        Args:
            x: the tokens ``[N + G, D]`` computed on ``graph``.
            graph: what :meth:`attach` returned.
        """
        return _in_layout(x, graph).index_select(0, graph.cls_index)

    @staticmethod
    def readout_sum_mean(x: Tensor, graph: CLSGraph) -> Tensor:
        """The CLS token, the sum and the mean of the node tokens of each graph, concatenated:
        ``[G, 3D]``. Unlike the CLS token (an attention average), the sum grows with the number
        of nodes; sum and mean do not depend on the order of the nodes.

        Args:
            x, graph: as for :meth:`readout`.
        """
        sums = CLSPool.readout_sums([_in_layout(x, graph)], graph)
        # graph.batch counts every graph's one CLS node as well
        counts = (torch.bincount(graph.batch, minlength=sums.size(0)) - 1).clamp_min(1)
        return torch.cat([x.index_select(0, graph.cls_index), sums,
                          sums / counts.to(x.dtype).unsqueeze(1)], dim=1)

    @staticmethod
    def readout_sums(states: list[Tensor], graph: CLSGraph) -> Tensor:
        """The sum of the node tokens (CLS nodes excluded) of each graph, for each of
        ``states`` (tensors ``[N + G, D_i]`` in ``graph``'s layout), concatenated:
        ``[G, sum_i D_i]``.

        Args:
            states: the token tensors, at least one.
            graph: what :meth:`attach` returned.
        """
        for state in states:
            _in_layout(state, graph)
        num_graphs = graph.cls_index.numel()
        node_batch = graph.batch.index_select(0, graph.node_index)
        joined = states[0] if len(states) == 1 else torch.cat(states, dim=1)
        stacked = joined.index_select(0, graph.node_index)
        return stacked.new_zeros(num_graphs, stacked.size(1)).index_add_(0, node_batch, stacked)

    @staticmethod
    def node_states(x: Tensor, graph: CLSGraph) -> Tensor:
        """The original nodes' tokens ``[N, D]`` in their original order.

        Args:
            x, graph: as for :meth:`readout`.
        """
        return _in_layout(x, graph).index_select(0, graph.node_index)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels})"
