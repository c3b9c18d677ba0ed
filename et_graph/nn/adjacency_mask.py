r"""The parameterised adjacency of the graph-classification ET (paper eq. 24).

:math:`\hat A = \mathrm{Conv2D}(X X^\top) \odot A'`: a 2-D convolution with ``heads`` filters,
"SAME" padding and stride 1 over each graph's Gram matrix of initial tokens (CLS included), times
:math:`A'`, a linear projection of the edge features to ``heads`` channels (or the padded adjacency
when edges have no features). Only edges are read out, so non-edges are excluded exactly: they do
not enter the attention sum at all. (Eq. 25 multiplies the score by the mask inside the
exponential, so a mask value of :math:`-\infty` would not do this: it gives :math:`+\infty` wherever
:math:`K\cdot Q < 0`. Leaving the pair out of the sum is the meaning the paper intends.)

Order dependence: with ``kernel_size > 1`` the value at ``(C, B)`` mixes Gram entries of the nodes
stored next to ``C`` and ``B``, so it depends on the node order of the data set (as in the paper).
``kernel_size=1`` makes the mask permutation-equivariant: it then depends on ``x_C . x_B`` only.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Module, Parameter
from torch_geometric.utils import cumsum, to_dense_batch

from ..fused import functorch_active
from ..native import gram_entries as native_gram_entries
from ..native import native_applies
from ..precision import backward_without_autocast
from .pool.cls_pool import CLSGraph
from .validation import all_finite, check_batch, check_edge_index, check_within_graphs

METHODS = ("sparse", "dense")


class _GramEntries(torch.autograd.Function):
    """Entries ``index`` of the Gram matrices ``X_c X_c^T`` of the groups ``X_c [B_c, M_c, D]``
    stored one after another in ``x`` (rows, ``[sum B_c M_c, D]``; ``groups`` lists the
    ``(B_c, M_c)``), the matrices flattened and concatenated in the same order; ``index_t`` are
    the same entries transposed (row and column swapped).

    Backward, with ``G`` the gradient scattered to the looked-up entries, is one batched matmul
    per group, ``(G + G^T) X``, as the product is symmetric; ``G + G^T`` is scattered from the
    entries directly, so no dense transpose is formed."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, groups: list[tuple[int, int]], index: Tensor,
                index_t: Tensor) -> Tensor:
        ctx.save_for_backward(x, index, index_t)
        ctx.groups = groups
        grams, row = [], 0
        for count, size in groups:
            block = x[row:row + count * size].view(count, size, -1)
            grams.append(torch.bmm(block, block.transpose(1, 2)).view(-1))
            row += count * size
        return torch.cat(grams).index_select(0, index)

    @staticmethod
    @backward_without_autocast
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        x, index, index_t = ctx.saved_tensors
        both = grad.new_zeros(sum(count * size * size for count, size in ctx.groups))
        both.index_add_(0, index, grad).index_add_(0, index_t, grad)
        parts, row, entry = [], 0, 0
        for count, size in ctx.groups:
            rows = count * size
            parts.append(torch.bmm(both[entry:entry + rows * size].view(count, size, size),
                                   x[row:row + rows].view(count, size, -1)).view(rows, -1))
            row, entry = row + rows, entry + rows * size
        return torch.cat(parts), None, None, None


class Conv2DAdjacencyMask(Module):
    r"""Per-edge, per-head attention weights :math:`\hat A_{hCB}` for :class:`ETConv`.

    Args:
        heads: output channels ``H`` (one per attention head).
        kernel_size: odd Conv2D kernel size; 3 reproduces the paper, 1 is permutation-equivariant.
        edge_dim: width of the edge features projected to :math:`A'`; ``None`` uses the
            (padded) adjacency, i.e. :math:`A' = 1` on every edge.
        method: ``"sparse"`` evaluates the convolution only at the edges (``O(E k^2 D)`` time and
            memory, exactly the dense result read at the edges); ``"dense"`` builds each graph's
            ``[H, M, M]`` map with ``to_dense_batch`` and ``conv2d`` and then reads the edges.

    ``forward(x, edge_index, batch=None, edge_attr=None)`` returns ``[E, H]``, the weight of edge
    ``B -> C`` (``edge_index[0] = B``) being entry ``(C, B)`` of the map (row = the attending node),
    which is the ``edge_weight`` layout of :class:`ETConv`. ``batch`` must be sorted (PyG batches
    are); the Gram matrix is scaled by ``1/sqrt(D)`` so that its scale does not grow with the width.
    """

    #: :meth:`forward_cls_graph` reads the convolution from dense per-graph Gram matrices while
    #: they hold at most this many entries per edge and token channel (else per edge, sparse).
    gram_budget: float = 4.0
    #: How many groups of similar-size graphs those Gram matrices are built in (each group
    #: padded to its own largest graph).
    gram_groups: int = 4

    def __init__(
        self,
        heads: int,
        kernel_size: int = 3,
        edge_dim: Optional[int] = None,
        method: str = "sparse",
    ) -> None:
        super().__init__()
        if heads <= 0:
            raise ValueError(f"heads must be positive, got {heads}")
        if kernel_size <= 0 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd number, got {kernel_size}")
        if edge_dim is not None and edge_dim <= 0:
            raise ValueError(f"edge_dim must be positive or None, got {edge_dim}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        self.heads = heads
        self.kernel_size = kernel_size
        self.edge_dim = edge_dim
        self.method = method
        self.weight = Parameter(torch.empty(heads, 1, kernel_size, kernel_size))
        self.bias = Parameter(torch.empty(heads))
        self.edge_proj = torch.nn.Linear(edge_dim, heads) if edge_dim else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        # Start close to A' itself (conv ~ 1), so training begins from plain graph attention.
        torch.nn.init.normal_(self.weight, std=0.1 / self.kernel_size)
        torch.nn.init.ones_(self.bias)
        if self.edge_proj is not None:
            self.edge_proj.reset_parameters()

    # ------------------------------------------------------------------------------------------
    def _prepare(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor]) -> tuple:
        if x.dim() != 2:
            raise ValueError(f"x must be [N, D], got shape {tuple(x.shape)}")
        edge_index = check_edge_index(edge_index, x.size(0))
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        batch = check_batch(batch, x.size(0))
        if x.size(0) and bool((batch[1:] < batch[:-1]).any()):
            raise ValueError("batch must be sorted (PyG's DataLoader produces sorted batches)")
        check_within_graphs(edge_index, batch)
        return edge_index, batch

    @staticmethod
    def _positions(batch: Tensor) -> Tensor:
        """Each node's index inside its graph."""
        num_graphs = int(batch.max()) + 1 if batch.numel() else 0
        sizes = torch.bincount(batch, minlength=num_graphs)
        ptr = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
        return torch.arange(batch.numel(), device=batch.device) - ptr[batch]

    def dense_conv(self, x: Tensor, batch: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        """``Conv2D(X X^T / sqrt(D))`` of every graph, ``[B, H, M, M]``, and the node mask
        ``[B, M]`` from ``to_dense_batch`` (padding rows are zero, which is also the
        convolution's own "SAME" zero padding, so graphs do not see each other)."""
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        dense, node_mask = to_dense_batch(x, batch)
        gram = dense @ dense.transpose(1, 2) / math.sqrt(x.size(1))
        out = F.conv2d(
            gram.unsqueeze(1),
            self.weight.to(x.dtype),
            self.bias.to(x.dtype),
            padding=self.kernel_size // 2,
        )
        return out, node_mask

    def _conv_at_edges_dense(self, x: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        conv, _ = self.dense_conv(x, batch)
        src, dst = edge_index
        pos = self._positions(batch)
        return conv[batch[dst], :, pos[dst], pos[src]]

    def _conv_at_edges_sparse(self, x: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        radius = self.kernel_size // 2
        num_nodes = x.size(0)
        ids = torch.arange(num_nodes, device=x.device)
        shifted = []
        for offset in range(-radius, radius + 1):
            other = ids + offset
            inside = (other >= 0) & (other < num_nodes)
            other = other.clamp(0, max(num_nodes - 1, 0))
            same_graph = inside & (batch[other] == batch)
            shifted.append(x[other] * same_graph.unsqueeze(-1).to(x.dtype))
        src, dst = edge_index
        rows = [s[dst] for s in shifted]
        cols = [s[src] for s in shifted]
        gram = torch.stack([(r * c).sum(-1) for r in rows for c in cols], dim=-1)
        gram = gram / math.sqrt(x.size(1))
        kernel = self.weight.reshape(self.heads, -1).to(x.dtype)
        return gram @ kernel.t() + self.bias.to(x.dtype)

    def _conv_at_edges_gram(
        self, x: Tensor, edge_index: Tensor, batch: Tensor, first: Tensor
    ) -> Optional[Tensor]:
        r"""The convolution at every edge, ``[E, H]``, read from each graph's Gram matrix built
        densely (one batched matmul per :attr:`gram_groups` group of similar-size graphs) with a
        zero border of ``k // 2`` tokens on each side, or ``None`` when those matrices would be
        large (over :attr:`gram_budget` entries per edge and channel: large graphs).

        ``first`` ``[G]`` is the index of each graph's first token (``batch`` sorted). The
        value at edge ``B -> C`` is :math:`\sum_{a,b} w_{hab}\,\langle x_{C+a},
        x_{B+b}\rangle / \sqrt{D}`, a lookup of ``k^2`` Gram entries, so the per-edge work is
        ``O(k^2)`` instead of ``O(k^2 D)``: the same values as :meth:`_conv_at_edges_sparse` (to
        float rounding), several times faster on batches of many small graphs."""
        radius = self.kernel_size // 2
        total, channels = x.shape
        num_graphs = first.numel()
        num_edges = edge_index.size(1)
        device = x.device
        sizes = torch.bincount(batch, minlength=num_graphs)
        # Graphs in groups of similar size (sorted, equal counts), each group padded to its own
        # largest graph: in batches of molecules most padding of one common size is avoided.
        order = torch.argsort(sizes)
        bounds = [round(i * num_graphs / self.gram_groups) for i in range(self.gram_groups + 1)]
        bounds = sorted(set(bounds))
        sorted_sizes = sizes.index_select(0, order).tolist()
        groups = [(hi - lo, sorted_sizes[hi - 1] + 2 * radius)
                  for lo, hi in zip(bounds[:-1], bounds[1:])]
        if sum(c * w * w for c, w in groups) > self.gram_budget * max(num_edges, 1) * channels:
            return None
        # Per graph (in sorted order): its group's width, first dense row, first Gram entry.
        counts = torch.tensor([c for c, _ in groups], device=device)
        widths = torch.tensor([w for _, w in groups], device=device).repeat_interleave(counts)
        rows = torch.cumsum(widths, 0) - widths
        entries = torch.cumsum(widths * widths, 0) - widths * widths
        width = torch.empty_like(widths).index_copy_(0, order, widths)
        row0 = torch.empty_like(rows).index_copy_(0, order, rows)
        entry0 = torch.empty_like(entries).index_copy_(0, order, entries)
        pos = torch.arange(total, device=device) - first.index_select(0, batch) + radius
        dense = x.new_zeros(int(rows[-1] + widths[-1]), channels).index_copy(
            0, row0.index_select(0, batch) + pos, x)
        src, dst = edge_index
        graph = batch.index_select(0, dst)
        w = width.index_select(0, graph).unsqueeze(1)
        start = entry0.index_select(0, graph).unsqueeze(1)
        row, col = pos.index_select(0, dst).unsqueeze(1), pos.index_select(0, src).unsqueeze(1)
        shifts = torch.arange(-radius, radius + 1, device=device)
        a = shifts.repeat_interleave(2 * radius + 1)  # row shift of each kernel entry (a, b)
        b = shifts.repeat(2 * radius + 1)  # column shift
        # entry (row + a, col + b) of the graph's matrix, and the transposed entry
        index = (start + row * w + col) + (a * w + b)
        index_t = (start + col * w + row) + (b * w + a)
        values = _GramEntries.apply(dense, groups, index.view(-1), index_t.view(-1))
        return self._convolve_entries(values.view(num_edges, -1), channels)

    def _convolve_entries(self, values: Tensor, channels: int) -> Tensor:
        """The convolution ``[E, H]`` from each edge's ``k^2`` Gram entries ``values`` (kernel
        offsets row-major, unscaled dot products of width ``channels``)."""
        kernel = self.weight.reshape(self.heads, -1).to(values.dtype) / math.sqrt(channels)
        return torch.addmm(self.bias.to(values.dtype), values, kernel.t())

    def _conv_at_edges_native(self, x: Tensor, edge_index: Tensor, batch: Tensor,
                              ptr: Tensor) -> Tensor:
        """The convolution at every edge from the compiled kernel of :mod:`et_graph.native`
        (opt-in): each edge's ``k^2`` Gram entries in one loop, ``ptr [G + 1]`` the first token
        of each graph and the end. The same values as :meth:`_conv_at_edges_sparse`."""
        src, dst = edge_index
        values = native_gram_entries(x, src, dst, batch, ptr, self.kernel_size // 2)
        return self._convolve_entries(values, x.size(1))

    def _conv_at_cls_edges(self, x: Tensor, batch: Tensor, cls_index: Tensor,
                           node_index: Tensor) -> Tensor:
        r"""The convolution at the ``2N`` CLS edges of a :class:`~et_graph.nn.pool.CLSGraph`
        (node -> CLS for every node, then CLS -> node), ``[2N, H]``, from per-token dot products.

        A CLS node ``c`` is the first token of its graph, so its shifted rows are ``x_{c+t}``,
        ``t = 0..k//2`` (those before it belong to another graph). Every Gram entry of a CLS edge
        at node ``n`` is therefore :math:`a_t[m] = \langle x_{c+t}, x_m\rangle` at a token ``m``
        next to ``n``: ``(k//2 + 1)`` dot products per token instead of ``k^2`` per edge."""
        radius = self.kernel_size // 2
        total, channels = x.shape
        num_graphs = cls_index.numel()
        token_cls = cls_index.index_select(0, batch)
        token_size = torch.bincount(batch, minlength=num_graphs).index_select(0, batch) - 1
        columns = []
        for t in range(radius + 1):
            first = (token_cls + t).clamp_(max=total - 1)
            dots = (x.index_select(0, first) * x).sum(-1)
            columns.append(dots * (token_size >= t).to(x.dtype))
        a = torch.stack(columns, dim=1)  # [T, radius + 1]
        offsets = torch.arange(-radius, radius + 1, device=x.device)
        near = node_index.unsqueeze(1) + offsets  # [N, k]
        inside = (near >= 0) & (near < total)
        near = near.clamp_(0, total - 1)
        same = inside & (batch[near] == batch.index_select(0, node_index).unsqueeze(1))
        pairs = a[near] * same.unsqueeze(-1).to(x.dtype)  # [N, k, radius + 1]: <x_{c+t}, x_{n+s-r}>
        weight = self.weight[:, 0].to(x.dtype) / math.sqrt(channels)  # [H, k, k]
        bias = self.bias.to(x.dtype)
        # node -> CLS: the CLS is the attending row (shift t >= 0), the node the column (shift s)
        to_cls = torch.einsum("nst,hts->nh", pairs, weight[:, radius:, :]) + bias
        # CLS -> node: the node is the row (shift s), the CLS the column (shift t >= 0)
        from_cls = torch.einsum("nst,hst->nh", pairs, weight[:, :, radius:]) + bias
        return torch.cat([to_cls, from_cls], dim=0)

    def forward_cls_graph(self, graph: CLSGraph, edge_attr: Optional[Tensor] = None) -> Tensor:
        """``forward(graph.x, graph.edge_index, graph.batch, edge_attr)`` for a
        :class:`~et_graph.nn.pool.CLSGraph` built by :func:`~et_graph.nn.pool.add_cls_nodes`
        (its edges: the original ones, then node -> CLS and CLS -> node for every node), without
        re-validating what ``add_cls_nodes`` built. With ``method="sparse"`` the CLS edges are
        evaluated from per-token dot products (:meth:`_conv_at_cls_edges`): same values, a
        fraction of the work, as they are half of the edges of a batch of small graphs; when the
        graphs are small enough (:attr:`gram_budget`), every edge is instead read from per-graph
        Gram matrices (:meth:`_conv_at_edges_gram`), same values again."""
        x, edge_index, batch = graph.x, graph.edge_index, graph.batch
        factor = self.edge_factor(edge_attr, edge_index.size(1))
        num_nodes = graph.node_index.numel()
        num_original = edge_index.size(1) - 2 * num_nodes
        conv = None
        if self.method == "sparse" and num_original >= 0 and x.size(0):
            # CLS nodes come first in their graphs, so cls_index is where each graph starts.
            if native_applies(x):
                conv = self._conv_at_edges_native(x, edge_index, batch, graph.token_ptr())
            elif not functorch_active():
                # (A torch.func transform cannot trace _GramEntries' hand-written backward; it
                # takes the per-edge route below, the same values.)
                conv = self._conv_at_edges_gram(x, edge_index, batch, graph.cls_index)
        if conv is None and (self.method == "dense" or num_original < 0 or x.size(0) == 0):
            conv = (self._conv_at_edges_dense(x, edge_index, batch) if self.method == "dense"
                    else self._conv_at_edges_sparse(x, edge_index, batch))
        elif conv is None:
            parts = []
            if num_original:
                parts.append(self._conv_at_edges_sparse(x, edge_index[:, :num_original], batch))
            parts.append(self._conv_at_cls_edges(x, batch, graph.cls_index, graph.node_index))
            conv = torch.cat(parts, dim=0)
        return conv if factor is None else conv * factor.to(conv.dtype)

    def edge_factor(self, edge_attr: Optional[Tensor], num_edges: int) -> Optional[Tensor]:
        """:math:`A'` at the edges, ``[E, H]``, or ``None`` (all ones) without edge features."""
        if self.edge_proj is None:
            if edge_attr is not None:
                raise ValueError(
                    "edge_attr was given but the mask was built with edge_dim=None; pass "
                    "edge_dim to use edge features"
                )
            return None
        if edge_attr is None:
            raise ValueError(f"this mask expects edge_attr of width edge_dim={self.edge_dim}")
        if edge_attr.dim() == 1:
            edge_attr = edge_attr.unsqueeze(-1)
        if edge_attr.dim() != 2 or edge_attr.size(0) != num_edges:
            raise ValueError(
                f"edge_attr must have one row per edge ([E, edge_dim] with E={num_edges}), got "
                f"shape {tuple(edge_attr.shape)}"
            )
        if edge_attr.size(1) != self.edge_dim:
            raise ValueError(
                f"edge_attr has width {edge_attr.size(1)} but edge_dim={self.edge_dim}"
            )
        edge_attr = edge_attr.to(self.edge_proj.weight.dtype)
        if not all_finite(edge_attr):
            raise ValueError("edge_attr contains NaN or inf values")
        return self.edge_proj(edge_attr)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor:
        edge_index, batch = self._prepare(x, edge_index, batch)
        factor = self.edge_factor(edge_attr, edge_index.size(1))
        if edge_index.size(1) == 0:
            return x.new_zeros(0, self.heads)
        if self.method == "dense":
            conv = self._conv_at_edges_dense(x, edge_index, batch)
        elif native_applies(x):
            num_graphs = int(batch[-1]) + 1 if batch.numel() else 0
            ptr = cumsum(torch.bincount(batch, minlength=num_graphs))
            conv = self._conv_at_edges_native(x, edge_index, batch, ptr)
        else:
            conv = self._conv_at_edges_sparse(x, edge_index, batch)
        return conv if factor is None else conv * factor.to(conv.dtype)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(heads={self.heads}, kernel_size={self.kernel_size}, "
            f"edge_dim={self.edge_dim}, method={self.method!r})"
        )
