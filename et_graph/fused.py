r"""Fused closed-form attention gradient with a hand-written backward.

:func:`fused_attention_grad` returns the same ``(dE/dk, dE/dq)`` as
:func:`et_graph.energy.attention_grad`, but as one :class:`torch.autograd.Function` that saves only
per-edge, per-head quantities between forward and backward (the probabilities ``p``, the raw
scores ``s`` and the coefficients ``c = w p`` in source order, each ``[E, H]``) besides the keys
and queries ``[N, H, Y]`` (as given; their head-major copies are redone in backward), so
activation memory grows as ``O(E * H)`` rather than ``O(E * H * Y)``.

How it is computed. All heads are laid out as one block-diagonal sparse matrix of size
``[H*N, H*N]`` in CSR form: row ``h*N + C`` holds the edges into ``C`` for head ``h``, its columns
are ``h*N + B``. The edge structure (an :class:`EdgePlan`: edges sorted by destination, the
transposed layout sorted by source) is built once per :meth:`ETConv.forward` and reused by every
step and by backward. Then

* the scores ``s_eh = <k_hB, q_hC>`` are one sampled dense-dense product (SDDMM,
  :func:`torch.sparse.sampled_addmm`);
* the softmax over the edges into each ``C`` is a pair of segment reductions over CSR rows;
* ``dE/dq = -A(c) k`` and ``dE/dk = -A(c)^T q`` are two sparse-dense products (SpMM), with the
  transpose stored explicitly.

None of these materialises an ``[E, H, Y]`` tensor; the per-edge gathers are done inside the
sparse kernels.

Backward derivation (``c = w p``, ``s = <k_B, q_C>``, ``a = beta w s``, ``G_k``, ``G_q`` the
incoming gradients of the outputs ``dk = -sum c q_C`` and ``dq = -sum c k_B``)::

    dL/dc_e  = -(<G_k[B], q_C> + <G_q[C], k_B>)
    dL/dp_e  = w_e dL/dc_e                          dL/dw_e += p_e dL/dc_e
    dL/da_e  = p_e (dL/dp_e - sum_{e' -> C} p_e' dL/dp_e')       (softmax over edges into C)
    dL/dbeta = sum_e w_e s_e dL/da_e                dL/dw_e += beta s_e dL/da_e
    dL/ds_e  = beta w_e dL/da_e
    dL/dk_B  = sum_{e: src=B} (dL/ds_e q_C - c_e G_q[C])
    dL/dq_C  = sum_{e: dst=C} (dL/ds_e k_B - c_e G_k[B])

``dL/dc`` is again one SDDMM (of the concatenations ``[q | G_q]`` and ``[G_k | k]``), and the two
node sums are two sparse-dense products each.

:func:`fused_offset_attention_grad` does the same with edge features, whose key offsets
``W^E f_e`` enter through ``[H, N, F]``-sized products and SDDMMs over an edge-indexed pattern
(its class docstring derives the backward); it also saves the features ``[E, F]``, ``W^E``
and two ``[H, N, F]`` arrays.

Higher derivatives (``create_graph=True``: gradient penalties, Hessian-vector products) take a
different route: backward then differentiates the reference closed form
:func:`et_graph.energy.attention_grad` on the plan's edges with autograd, so every order of
derivative is exact; the hand-written backward serves the usual first-order training step.

:func:`fused_relu_hopfield_grad` does the same for the ReLU Hopfield term ``-relu(g xi^T) xi``:
row blocks and a backward that recomputes the activations, so that no ``[N, K]`` tensor is kept
(less memory; measured slower on small-graph mini-batches, so the layers keep autograd's form).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from ._sparse_warnings import quiet_sparse
from .energy import attention_grad, edge_key_offsets, hopfield_grad
from .native import NativeAttentionGrad, native_applies
from .precision import backward_without_autocast

_INT32_MAX = 2**31 - 1
#: Devices with the sparse kernels the fused path runs on (CSR tensors, ``sampled_addmm``,
#: ``segment_reduce``). Elsewhere (Apple's ``mps``, where PyTorch has none of them) the layers
#: take the reference closed form instead; they failed there on their first call (a portability
#: audit; not run on a Mac).
SPARSE_KERNEL_DEVICES = ("cpu", "cuda")


def sparse_kernels_on(device: torch.device) -> bool:
    """Whether the fused path's sparse kernels run on ``device``."""
    return device.type in SPARSE_KERNEL_DEVICES


#: dtypes the CSR kernels (``sampled_addmm``, CSR ``@``) support on every device.
SPARSE_KERNEL_DTYPES = (torch.float32, torch.float64)


def functorch_active() -> bool:
    """Whether a ``torch.func`` transform (``grad``, ``vmap``, ``jacrev``, ...) is running. Under
    one the layers skip data-dependent checks and this kernel (a transform can trace neither)
    and use the reference closed form, which gives the same values."""
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    return bool(active is not None and active())


def values_unreadable() -> bool:
    """Whether the tokens' values cannot be read: under a ``torch.func`` transform
    (:func:`functorch_active`) or while ``torch.export`` traces the model. The input checks
    that read values (NaN/inf, magnitude) are skipped then; an exported model does not check
    its inputs."""
    if functorch_active():
        return True
    exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(exporting is not None and exporting())


#: Keys below this bound are sorted by NumPy's radix sort (16-bit keys) on the CPU.
_RADIX_KEYS = 2**16


def stable_argsort(keys: Tensor, num_keys: int) -> Tensor:
    """``torch.argsort(keys, stable=True)`` (int64) for integer ``keys`` in ``[0, num_keys)``.

    On the CPU, with fewer than 65,536 distinct keys (node ids of a mini-batch), NumPy's radix
    sort of 16-bit keys gives the same permutation (a stable sort has only one) about five times
    faster than PyTorch's comparison sort, which dominates building an :class:`EdgePlan` for a
    batch of small graphs."""
    # NumPy cannot read a tensor wrapped by a torch.func transform.
    if (keys.device.type == "cpu" and num_keys <= _RADIX_KEYS and keys.numel()
            and not functorch_active()):
        order = np.argsort(keys.numpy().astype(np.uint16), kind="stable")
        return torch.from_numpy(order.astype(np.int64, copy=False))
    # PyTorch's stable sort is twice as fast on 32-bit keys.
    key_dtype = torch.int32 if num_keys < _INT32_MAX else torch.int64
    return torch.argsort(keys.to(key_dtype), stable=True)


class EdgePlan:
    """The edge structure of one graph in the block-diagonal CSR layout used by the fused kernels.

    Built once per forward call from self-loop-free ``src, dst`` (``B -> C``) and reused by every
    descent step and by backward. ``order`` sorts the caller's edges by ``(dst, src)``;
    ``transpose`` reorders those sorted edges by ``(src, dst)``.
    """

    def __init__(self, src: Tensor, dst: Tensor, num_nodes: int, heads: int) -> None:
        self.num_nodes = num_nodes
        self.heads = heads
        self.num_edges = src.numel()
        # Sorting the destination-sorted sources stably gives (src, dst) order.
        self.order = stable_argsort(dst, num_nodes)
        self.src = src.index_select(0, self.order)
        self.dst = dst.index_select(0, self.order)
        self.in_degree = torch.bincount(self.dst, minlength=num_nodes)
        self._values: Optional[tuple[Tensor, tuple, Tensor]] = None
        self._rows: Optional[tuple[Tensor, tuple, Tensor]] = None
        # More stored entries than the [H*N, H*N] matrix has (only repeated edges in a tiny
        # graph, e.g. 6 copies of the 2 edges between 2 nodes): sampled_addmm would re-pack
        # such a pattern and resize this plan's index arrays, so sddmm goes edge by edge.
        self.overfull = heads * self.num_edges > (heads * num_nodes) ** 2

    # The CSR layout below is built on first use: the sparse kernels read it, the compiled
    # kernel of et_graph.native needs only the sorted edges and the in-degrees above.
    @cached_property
    def _index_dtype(self) -> torch.dtype:
        # 32-bit sparse indices are markedly faster in the CPU sparse kernels.
        big = self.heads * max(self.num_nodes, self.num_edges) >= _INT32_MAX
        return torch.int64 if big else torch.int32

    @cached_property
    def _head_nodes(self) -> Tensor:
        return torch.arange(self.heads, device=self.src.device).unsqueeze(1) * self.num_nodes

    @cached_property
    def transpose(self) -> Tensor:
        """Reorders the sorted edges by ``(src, dst)``."""
        return stable_argsort(self.src, self.num_nodes)

    @cached_property
    def dst_per_head(self) -> Tensor:
        """The destination of every (head, edge) slot, for gathering per-node values to edges."""
        return self.dst.expand(self.heads, self.num_edges)

    @cached_property
    def row_lengths(self) -> Tensor:
        """Lengths of the CSR rows (head-major): used by the per-destination softmax."""
        return self.in_degree.repeat(self.heads)

    @cached_property
    def crow(self) -> Tensor:
        return self._compressed(self.in_degree, self.heads).to(self._index_dtype)

    @cached_property
    def col(self) -> Tensor:
        return (self.src.unsqueeze(0) + self._head_nodes).reshape(-1).to(self._index_dtype)

    @cached_property
    def crow_t(self) -> Tensor:
        out_degree = torch.bincount(self.src, minlength=self.num_nodes)
        return self._compressed(out_degree, self.heads).to(self._index_dtype)

    @cached_property
    def col_t(self) -> Tensor:
        col_t = self.dst.index_select(0, self.transpose).unsqueeze(0) + self._head_nodes
        return col_t.reshape(-1).to(self._index_dtype)

    @staticmethod
    def _compressed(degree: Tensor, heads: int) -> Tensor:
        counts = degree.repeat(heads)
        crow = counts.new_zeros(counts.numel() + 1)
        torch.cumsum(counts, 0, out=crow[1:])
        return crow

    def matrix(self, values: Tensor) -> Tensor:
        """``[H*N, H*N]`` CSR matrix with ``values [H, E]`` (head-major, sorted edge order)."""
        size = self.heads * self.num_nodes
        return torch.sparse_csr_tensor(
            self.crow, self.col, values.reshape(-1), (size, size), check_invariants=False
        )

    def transposed(self, values: Tensor) -> Tensor:
        """``values [H, E]`` reordered for :meth:`matrix_t`."""
        return values.index_select(1, self.transpose)

    def matrix_t(self, values_t: Tensor) -> Tensor:
        """The transpose of :meth:`matrix`, given ``values_t = transposed(values)``."""
        size = self.heads * self.num_nodes
        return torch.sparse_csr_tensor(
            self.crow_t, self.col_t, values_t.reshape(-1), (size, size), check_invariants=False
        )

    def sddmm(self, rows: Tensor, cols: Tensor) -> Tensor:
        """``<rows[h*N + C], cols[h*N + B]>`` for every edge ``B -> C`` and head: ``[H, E]``."""
        if self.overfull:
            # self.col holds each slot's source row h*N + B; its destination row is h*N + C.
            offsets = self.num_nodes * torch.arange(self.heads, device=rows.device).unsqueeze(1)
            at_dst = rows.index_select(0, (self.dst_per_head + offsets).reshape(-1))
            at_src = cols.index_select(0, self.col)
            return (at_dst * at_src).sum(-1).view(self.heads, self.num_edges)
        # Writing into the pattern itself (out=) spares a copy of the index arrays. Zeros, not
        # empty: the kernel scales the old values by beta, and 0 * (NaN garbage) is NaN.
        pattern = self.matrix(rows.new_zeros(self.heads, self.num_edges))
        torch.sparse.sampled_addmm(pattern, rows, cols.t(), beta=0.0, out=pattern)
        return pattern.values().view(self.heads, self.num_edges)

    @cached_property
    def edge_col(self) -> Tensor:
        """Each (head, edge) slot's edge in the sorted order, the columns of
        :meth:`edge_matrix`."""
        edges = torch.arange(self.num_edges, device=self.src.device)
        return edges.repeat(self.heads).to(self._index_dtype)

    def edge_matrix(self, values: Tensor) -> Tensor:
        """``[H*N, E]`` CSR matrix with ``values [H, E]`` at row ``h*N + C``, column ``e`` for
        every edge ``e`` into ``C``: times per-edge rows ``[E, F]`` it sums ``values[h, e] *
        row_e`` over the edges into each node, per head (``[H*N, F]``)."""
        return torch.sparse_csr_tensor(
            self.crow, self.edge_col, values.reshape(-1),
            (self.heads * self.num_nodes, self.num_edges), check_invariants=False)

    @cached_property
    def edge_row_crow(self) -> Tensor:
        """Row pointers of :meth:`edge_rows_matrix`: ``H`` entries per edge."""
        return torch.arange(0, self.heads * self.num_edges + 1, self.heads,
                            device=self.src.device).to(self._index_dtype)

    @cached_property
    def edge_row_col(self) -> Tensor:
        """Columns of :meth:`edge_rows_matrix`: edge ``e``'s row ``h*N + dst_e`` per head."""
        return (self.dst.unsqueeze(1) + self._head_nodes.t()).reshape(-1).to(self._index_dtype)

    def edge_rows_matrix(self, values: Tensor) -> Tensor:
        """``[E, H*N]`` CSR matrix with ``values [H, E]`` at row ``e``, column ``h*N + dst_e``
        (the transpose of :meth:`edge_matrix`): times head-major per-node rows ``[H*N, F]`` it
        gives ``sum_h values[h, e] * row[h*N + dst_e]`` per edge (``[E, F]``)."""
        return torch.sparse_csr_tensor(
            self.edge_row_crow, self.edge_row_col, values.t().reshape(-1),
            (self.num_edges, self.heads * self.num_nodes), check_invariants=False)

    def edge_sddmm(self, rows: Tensor, per_edge: Tensor) -> Tensor:
        """``<rows[h*N + C], per_edge[e]>`` for every edge ``e`` into ``C`` and head:
        ``[H, E]`` (``rows [H*N, F]``, ``per_edge [E, F]``), without an ``[H, E, F]`` tensor."""
        pattern = self.edge_matrix(rows.new_zeros(self.heads, self.num_edges))
        torch.sparse.sampled_addmm(pattern, rows, per_edge.t(), beta=0.0, out=pattern)
        return pattern.values().view(self.heads, self.num_edges)

    def segment_sum(self, values: Tensor) -> Tensor:
        """Sum of ``values [H, E]`` over the edges into each node: ``[H, N]``."""
        out = torch.segment_reduce(
            values.reshape(-1), "sum", lengths=self.row_lengths, unsafe=True
        )
        return out.view(self.heads, self.num_nodes)

    def segment_max(self, values: Tensor) -> Tensor:
        out = torch.segment_reduce(
            values.reshape(-1), "max", lengths=self.row_lengths, unsafe=True
        )
        return out.view(self.heads, self.num_nodes)

    def at_dst(self, per_node: Tensor) -> Tensor:
        """Gather ``[H, N]`` to the (sorted) edges by destination: ``[H, E]``."""
        return per_node.gather(1, self.dst_per_head)

    def softmax(self, logits: Tensor) -> Tensor:
        """Softmax of ``logits [H, E]`` over the edges into each destination."""
        probs = (logits - self.at_dst(self.segment_max(logits))).exp_()
        return probs.div_(self.at_dst(self.segment_sum(probs)))

    def edge_values(self, edge_weight: Tensor) -> Tensor:
        """Caller's ``[E, 1 or H]`` per-edge values in the plan layout ``[1 or H, E]``.

        The result for the last ``edge_weight`` is kept, so that the descent steps of one
        forward call, which pass the same weights, reorder them once (and backward scatters
        their gradient back once). It is reused only for the same tensor object at the same
        version (an in-place change bumps the version) and while autograd is in the same mode."""
        return self._kept("_values", edge_weight,
                          lambda: edge_weight.index_select(0, self.order).t().contiguous())

    def edge_rows(self, per_edge: Tensor, rows: Optional[Tensor] = None) -> Tensor:
        """Caller's per-edge rows ``[E, F]`` (edge features) in the sorted edge order, kept
        as :meth:`edge_values` keeps weights: the descent steps of one forward call then share
        one copy (saved once for backward, not once per step). ``rows`` (increasing) names
        the rows of a larger ``per_edge [R, F]`` that the plan's edges read (the caller's
        edges less their self-loops): the one copy is then made from those rows directly.
        (Reading the caller's rows in place through the order, with no copy at all, took
        about 1.5 times as long per step at F = 64: the sparse products' gathers lost their
        sequential access.)"""
        order = self.order if rows is None else rows.index_select(0, self.order)
        return self._kept("_rows", per_edge, lambda: per_edge.index_select(0, order))

    def _kept(self, slot: str, given: Tensor, make: Any) -> Tensor:
        """``make()``, kept in ``slot`` for the same tensor ``given`` at the same version,
        dtype and autograd mode."""
        if given.is_inference():  # inference tensors have no version counter
            return make()
        key = (given._version, torch.is_grad_enabled(), given.dtype)
        cached = getattr(self, slot)
        if cached is not None and cached[0] is given and cached[1] == key:
            return cached[2]
        made = make()
        setattr(self, slot, (given, key, made))
        return made

    def forget_values(self) -> None:
        """Drop the kept :meth:`edge_values` and :meth:`edge_rows` (at the end of a forward
        call): a plan kept across calls (``ETConv(cached=True)``) held the last weights and,
        without a backward, the autograd graph that made them (a memory audit: 74 MB of an
        edge encoder's activations on a 300k-edge graph)."""
        self._values = None
        self._rows = None


def _head_major(t: Tensor) -> Tensor:
    """``[N, H, Y]`` -> ``[H*N, Y]`` (rows ``h*N + node``)."""
    return t.transpose(0, 1).reshape(-1, t.size(-1))


def _node_major(t: Tensor, heads: int) -> Tensor:
    """Inverse of :func:`_head_major`: ``[H*N, Y]`` -> ``[N, H, Y]``."""
    return t.view(heads, -1, t.size(-1)).transpose(0, 1)


def _paired_rows(
    rows: Tensor, incoming: Optional[Tensor], heads: int, incoming_first: bool
) -> Tensor:
    """``[H*N, 2Y]`` buffer holding ``rows [H*N, Y]`` and the head-major ``incoming [N, H, Y]``
    (zeros when None) side by side; ``incoming_first`` puts the incoming gradient on the left."""
    width = rows.size(1)
    pair = rows.new_empty(heads, rows.size(0) // heads, 2 * width)
    own, other = (pair[..., width:], pair[..., :width]) if incoming_first else (
        pair[..., :width], pair[..., width:]
    )
    own.copy_(rows.view(heads, -1, width))
    if incoming is None:
        other.zero_()
    else:
        other.copy_(incoming.transpose(0, 1))
    return pair.view(rows.size(0), 2 * width)


def wants_differentiable_backward(saved: tuple, up_k: Optional[Tensor],
                                  up_q: Optional[Tensor]) -> bool:
    """Whether an attention-gradient backward runs under ``create_graph=True`` (its result must
    itself be differentiable), read off what it saved and what it received."""
    return torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (*saved, up_k, up_q)
    )


def _reference_backward(ctx: Any, inputs: tuple, slots: int, up_k: Optional[Tensor],
                        up_q: Optional[Tensor], reference: Callable[..., tuple[Tensor, Tensor]]
                        ) -> tuple[Optional[Tensor], ...]:
    """The vector-Jacobian product of ``reference(*inputs)`` (the reference closed form on the
    plan's sorted edges; a weight ``[1 or H, E]`` is passed as ``[E, 1 or H]``) by autograd
    with ``create_graph=True``: a backward differentiable to any order. ``slots`` is the
    number of the Function's inputs (the trailing ones get ``None``)."""
    wanted = [i for i, need in enumerate(ctx.needs_input_grad[:len(inputs)]) if need]
    with torch.enable_grad():
        # Leaves stand in for inputs that do not require grad, so autograd.grad accepts them.
        leaves = [t if t is None or t.requires_grad else t.detach().requires_grad_()
                  for t in inputs]
        weight = leaves[3]
        outputs = reference(*leaves[:3], None if weight is None else weight.t(), *leaves[4:])
        ups = [torch.zeros_like(out) if up is None else up
               for out, up in zip(outputs, (up_k, up_q))]
        grads = torch.autograd.grad(
            outputs, [leaves[i] for i in wanted], ups, create_graph=True, allow_unused=True
        )
    result: list[Optional[Tensor]] = [None] * slots
    for i, grad in zip(wanted, grads):
        result[i] = grad if grad is not None else torch.zeros_like(inputs[i])
    return tuple(result)


def _through_softmax(ctx: Any, plan: EdgePlan, d_coef: Tensor, probs: Tensor, scores: Tensor,
                     beta: Tensor, weight: Optional[Tensor]
                     ) -> tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
    """The backward of ``c = w softmax(beta w s)`` from ``dL/dc`` (``[H, E]``, plan order):
    ``(dL/ds, c, dL/dbeta, dL/dw)``, the last two ``None`` unless the inputs at positions 2
    and 3 of ``ctx`` (``beta``, ``weight``) need them."""
    d_probs = d_coef if weight is None else d_coef * weight
    weighted = probs * d_probs
    d_logits = weighted.sub_(probs * plan.at_dst(plan.segment_sum(weighted)))
    beta_col = beta.unsqueeze(1)
    d_beta = d_w = None
    if weight is None:
        if ctx.needs_input_grad[2]:
            d_beta = (d_logits * scores).sum(1)
        return d_logits * beta_col, probs, d_beta, d_w
    if ctx.needs_input_grad[2]:
        d_beta = (d_logits * scores * weight).sum(1)
    if ctx.needs_input_grad[3]:
        d_w = probs * d_coef + d_logits * beta_col * scores
        if d_w.size(0) != weight.size(0):
            d_w = d_w.sum(0, keepdim=True)
    return d_logits * beta_col * weight, probs * weight, d_beta, d_w


class _FusedAttentionGrad(torch.autograd.Function):
    @staticmethod
    @quiet_sparse
    def forward(
        ctx: Any,
        k: Tensor,
        q: Tensor,
        beta: Tensor,
        weight: Optional[Tensor],
        plan: EdgePlan,
    ) -> tuple[Tensor, Tensor]:
        heads = k.size(1)
        k_rows, q_rows = _head_major(k), _head_major(q)
        scores = plan.sddmm(q_rows, k_rows)
        scale = beta.unsqueeze(1) if weight is None else beta.unsqueeze(1) * weight
        probs = plan.softmax(scores * scale)
        coef = probs if weight is None else probs * weight
        coef_t = plan.transposed(coef)  # kept for backward: one permutation fewer there
        grad_q = plan.matrix(coef) @ k_rows
        grad_k = plan.matrix_t(coef_t) @ q_rows
        ctx.plan = plan
        # k and q as given rather than their head-major copies: a create_graph backward
        # differentiates through them (and the copies are cheap to redo).
        ctx.save_for_backward(k, q, beta, weight, probs, scores, coef_t)
        grad_q.neg_()
        grad_k.neg_()
        return _node_major(grad_k, heads), _node_major(grad_q, heads)

    @staticmethod
    @backward_without_autocast
    def backward(ctx: Any, up_k: Optional[Tensor], up_q: Optional[Tensor]):
        saved = ctx.saved_tensors
        if wants_differentiable_backward(saved, up_k, up_q):
            return _FusedAttentionGrad._differentiable_backward(ctx, saved, up_k, up_q)
        with torch.no_grad():
            return _FusedAttentionGrad._fast_backward(ctx, saved, up_k, up_q)

    @staticmethod
    def _differentiable_backward(
        ctx: Any, saved: tuple, up_k: Optional[Tensor], up_q: Optional[Tensor]
    ) -> tuple[Optional[Tensor], ...]:
        """The vector-Jacobian product of the reference closed form on the plan's (sorted)
        edges, by autograd with ``create_graph=True``: slower, differentiable to any order."""
        plan: EdgePlan = ctx.plan
        return _reference_backward(ctx, saved[:4], 5, up_k, up_q, lambda k, q, beta, weight:
                                   attention_grad(k, q, plan.src, plan.dst, beta, weight,
                                                  plan.num_nodes))

    @staticmethod
    @quiet_sparse
    def _fast_backward(
        ctx: Any, saved: tuple, up_k: Optional[Tensor], up_q: Optional[Tensor]
    ) -> tuple[Optional[Tensor], ...]:
        k, q, beta, weight, probs, scores, coef_t = saved
        k_rows, q_rows = _head_major(k), _head_major(q)
        plan: EdgePlan = ctx.plan
        heads = plan.heads
        # dL/dc_e = -(<G_k[B], q_C> + <G_q[C], k_B>) as one SDDMM of the row pairs [q | G_q] and
        # [G_k | k]. The incoming gradients are written head-major straight into those buffers,
        # and the SpMMs below read them there (strided views) instead of from separate copies.
        rows = _paired_rows(q_rows, up_q, heads, incoming_first=False)
        cols = _paired_rows(k_rows, up_k, heads, incoming_first=True)
        width = k_rows.size(1)
        up_q_rows, up_k_rows = rows[:, width:], cols[:, :width]
        d_coef = plan.sddmm(rows, cols).neg_()
        d_scores, coef, d_beta, d_w = _through_softmax(ctx, plan, d_coef, probs, scores, beta,
                                                       weight)

        # dL/dq_C = sum_{dst=C} (ds k_B - c G_k[B]);  dL/dk_B = sum_{src=B} (ds q_C - c G_q[C]).
        d_q = torch.addmm(
            plan.matrix(d_scores) @ k_rows, plan.matrix(coef), up_k_rows, alpha=-1
        )
        d_k = torch.addmm(
            plan.matrix_t(plan.transposed(d_scores)) @ q_rows,
            plan.matrix_t(coef_t),
            up_q_rows,
            alpha=-1,
        )
        return _node_major(d_k, heads), _node_major(d_q, heads), d_beta, d_w, None


class _FusedOffsetAttentionGrad(torch.autograd.Function):
    """:class:`_FusedAttentionGrad` with edge features: edge ``e``'s key is ``k_B + o_e`` with
    ``o_e = W^E f_e`` (per head). No ``[E, H, Y]`` tensor is made: with ``r = q W^E``
    (``[H, N, F]``) the offset's score is ``<f_e, r_C>``, and the query gradient's offset part
    ``-sum_e c_e o_e`` is ``-W^E u_C`` with ``u_C = sum_{e -> C} c_e f_e`` (one sparse product
    with the per-edge features); the offset's scores are one SDDMM of ``r`` with the features
    (:meth:`EdgePlan.edge_sddmm`), so no ``[H, E, F]`` tensor is made either. Backward,
    besides the terms of the plain kernel (``s`` now includes the offset's score,
    ``G_r = G_q W^E``)::

        dL/dc_e   -= <G_r[C], f_e>
        dL/dq_C   += (dL/dr_C) W^E^T,  dL/dr_C = sum_{e -> C} dL/ds_e f_e
        dL/dW^E    = sum_C q_C (dL/dr_C)^T - G_q[C] u_C^T
        dL/df_e    = sum_h dL/ds_e r_C - c_e G_r[C]
    """

    @staticmethod
    @quiet_sparse
    def forward(ctx: Any, k: Tensor, q: Tensor, beta: Tensor, weight: Optional[Tensor],
                attr: Tensor, w_edge: Tensor, plan: EdgePlan) -> tuple[Tensor, Tensor]:
        heads, features = k.size(1), attr.size(1)
        k_rows, q_rows = _head_major(k), _head_major(q)
        key_map = w_edge.to(k.dtype)
        offset_query = torch.bmm(q.transpose(0, 1), key_map)  # r = q W^E: [H, N, F]
        offset_score = plan.edge_sddmm(offset_query.reshape(-1, features), attr)
        scores = plan.sddmm(q_rows, k_rows).add_(offset_score)
        scale = beta.unsqueeze(1) if weight is None else beta.unsqueeze(1) * weight
        probs = plan.softmax(scores * scale)
        coef = probs if weight is None else probs * weight
        coef_t = plan.transposed(coef)
        features_in = (plan.edge_matrix(coef) @ attr).view(heads, -1, features)  # u: [H, N, F]
        grad_q = torch.baddbmm((plan.matrix(coef) @ k_rows).view(heads, -1, k.size(-1)),
                               features_in, key_map.transpose(1, 2))
        grad_k = plan.matrix_t(coef_t) @ q_rows
        ctx.plan = plan
        # r = q W^E is not saved: backward redoes it (one small batched product) where the
        # features' gradient needs it, rather than keeping an [H, N, F] array per step
        ctx.save_for_backward(k, q, beta, weight, attr, w_edge, probs, scores, coef_t,
                              features_in)
        grad_q.neg_()
        grad_k.neg_()
        return _node_major(grad_k, heads), grad_q.transpose(0, 1)

    @staticmethod
    @backward_without_autocast
    def backward(ctx: Any, up_k: Optional[Tensor], up_q: Optional[Tensor]):
        saved = ctx.saved_tensors
        if wants_differentiable_backward(saved, up_k, up_q):
            return _FusedOffsetAttentionGrad._differentiable_backward(ctx, saved, up_k, up_q)
        with torch.no_grad():
            return _FusedOffsetAttentionGrad._fast_backward(ctx, saved, up_k, up_q)

    @staticmethod
    def _differentiable_backward(
        ctx: Any, saved: tuple, up_k: Optional[Tensor], up_q: Optional[Tensor]
    ) -> tuple[Optional[Tensor], ...]:
        """The reference closed form's vector-Jacobian product by autograd (any order)."""
        plan: EdgePlan = ctx.plan
        return _reference_backward(
            ctx, saved[:6], 7, up_k, up_q, lambda k, q, beta, weight, attr, w_edge:
            attention_grad(k, q, plan.src, plan.dst, beta, weight, plan.num_nodes,
                           edge_key_offsets(attr, w_edge.to(k.dtype))))

    @staticmethod
    @quiet_sparse
    def _fast_backward(
        ctx: Any, saved: tuple, up_k: Optional[Tensor], up_q: Optional[Tensor]
    ) -> tuple[Optional[Tensor], ...]:
        (k, q, beta, weight, attr, w_edge, probs, scores, coef_t, features_in) = saved
        plan: EdgePlan = ctx.plan
        heads, width, features = plan.heads, k.size(-1), attr.size(1)
        key_map = w_edge.to(k.dtype)
        k_rows, q_rows = _head_major(k), _head_major(q)
        rows = _paired_rows(q_rows, up_q, heads, incoming_first=False)
        cols = _paired_rows(k_rows, up_k, heads, incoming_first=True)
        up_q_rows, up_k_rows = rows[:, width:], cols[:, :width]
        d_coef = plan.sddmm(rows, cols).neg_()
        up_offset = None  # G_r = G_q W^E: [H, N, F]
        if up_q is not None:
            up_offset = torch.bmm(up_q.transpose(0, 1), key_map)
            d_coef.sub_(plan.edge_sddmm(up_offset.reshape(-1, features), attr))
            if not ctx.needs_input_grad[4]:
                up_offset = None  # (freed before the next [H, N, F] array: a lower peak)
        d_scores, coef, d_beta, d_w = _through_softmax(ctx, plan, d_coef, probs, scores, beta,
                                                       weight)

        d_q = torch.addmm(plan.matrix(d_scores) @ k_rows, plan.matrix(coef), up_k_rows,
                          alpha=-1).view(heads, -1, width)
        d_k = torch.addmm(plan.matrix_t(plan.transposed(d_scores)) @ q_rows,
                          plan.matrix_t(coef_t), up_q_rows, alpha=-1)
        # the offset's score <f_e, r_C>, r = q W^E
        d_offset_query = (plan.edge_matrix(d_scores) @ attr).view(heads, -1, features)
        d_q.baddbmm_(d_offset_query, key_map.transpose(1, 2))
        d_w_edge = d_attr = None
        if ctx.needs_input_grad[5]:
            d_w_edge = torch.bmm(q.transpose(0, 1).transpose(1, 2), d_offset_query)
            if up_q is not None:  # the query gradient's -W^E u
                d_w_edge.baddbmm_(up_q.transpose(0, 1).transpose(1, 2), features_in, alpha=-1)
            d_w_edge = d_w_edge.to(w_edge.dtype)
        if ctx.needs_input_grad[4]:
            offset_query = torch.bmm(q.transpose(0, 1), key_map)  # r = q W^E: [H, N, F]
            d_attr = plan.edge_rows_matrix(d_scores) @ offset_query.reshape(-1, features)
            if up_offset is not None:
                d_attr = torch.addmm(d_attr, plan.edge_rows_matrix(coef),
                                     up_offset.reshape(-1, features), alpha=-1)
        return (_node_major(d_k, heads), d_q.transpose(0, 1), d_beta, d_w, d_attr, d_w_edge,
                None)


@torch.compiler.disable
def build_edge_plan(src: Tensor, dst: Tensor, num_nodes: int, heads: int) -> EdgePlan:
    """The reusable CSR layout of self-loop-free edges ``src -> dst`` (for
    :func:`fused_attention_grad`)."""
    return EdgePlan(src, dst, num_nodes, heads)


# torch.compile cannot trace the CSR kernels; they run eagerly and the dense rest is compiled.
@torch.compiler.disable
def fused_attention_grad(
    k: Tensor,
    q: Tensor,
    src: Tensor,
    dst: Tensor,
    beta: Tensor,
    edge_weight: Optional[Tensor],
    plan: Optional[EdgePlan] = None,
) -> tuple[Tensor, Tensor]:
    """``(dE_ATT/dk, dE_ATT/dq)`` for ``k, q [N, H, Y]``; ``edge_weight`` is ``[E, H]``,
    ``[E, 1]``, ``[E]`` (shared by the heads) or ``None``; self-loops must already be removed.

    ``plan`` (from :func:`build_edge_plan` on the same ``src, dst``) lets repeated calls on one
    graph share the sorted edge layout; without it one is built here.
    """
    num_nodes, heads = k.size(0), k.size(1)
    if src.numel() == 0 or num_nodes == 0:
        # No edge: no attention energy. Multiplying keeps the result connected to the graph,
        # beta included: every parameter then gets a (zero) gradient, as TransformerConv's do
        # (DistributedDataParallel without find_unused_parameters needs one on an edgeless batch)
        return k * 0, q * 0 + (beta.sum() * 0).to(q.dtype)
    if edge_weight is not None and edge_weight.dim() == 1:
        edge_weight = edge_weight.unsqueeze(-1)
    if (k.dtype not in SPARSE_KERNEL_DTYPES or functorch_active()
            or not sparse_kernels_on(k.device)):
        # The CPU sparse kernels take float32/float64 only; other dtypes (bfloat16, float16) use
        # the reference closed form, differentiated by autograd: same values, more memory. So
        # do torch.func transforms, which cannot trace the sparse kernels or the hand-written
        # autograd.Function, and devices without the sparse kernels (mps), whatever path
        # reaches here (the public closed-form methods did: a review).
        return attention_grad(k, q, src, dst, beta, edge_weight, num_nodes)
    if plan is None:
        plan = build_edge_plan(src, dst, num_nodes, heads)
    weight = None if edge_weight is None else plan.edge_values(edge_weight.to(k.dtype))
    if native_applies(k):
        # Opt-in compiled kernel (et_graph.native): one loop where the sparse path calls tens of
        # small kernels per step.
        return NativeAttentionGrad.apply(k, q, beta.to(k.dtype), weight, plan)
    return _FusedAttentionGrad.apply(k, q, beta, weight, plan)


@torch.compiler.disable
def fused_offset_attention_grad(
    k: Tensor,
    q: Tensor,
    src: Tensor,
    dst: Tensor,
    beta: Tensor,
    edge_weight: Optional[Tensor],
    edge_attr: Tensor,
    w_edge: Tensor,
    plan: Optional[EdgePlan] = None,
    *,
    attr_rows: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    """:func:`fused_attention_grad` with edge features ``edge_attr [E, F]`` whose key offsets
    are ``W^E f_e`` (``w_edge [H, Y, F]``): the same values as :func:`et_graph.energy.
    attention_grad` with ``key_offset=edge_key_offsets(edge_attr, w_edge)``, without an
    ``[E, H, Y]`` tensor. ``attr_rows [E]`` (increasing) names the rows of a larger
    ``edge_attr [R, F]`` that ``src, dst`` read, as when a layer dropped the self-loops of the
    caller's edges (:class:`et_graph.nn.conv.EdgeSet`): the kernel's one sorted copy is made
    from them, with no copy of the kept rows first; the gradient is then ``[R, F]``, zero in
    the other rows. The opt-in compiled kernel has no offsets; this runs the sparse
    kernels."""
    num_nodes, heads = k.size(0), k.size(1)
    if src.numel() == 0 or num_nodes == 0:
        # No edge: no attention energy (kept connected to the graph, as the plain kernel does).
        return k * 0, q * 0 + ((beta.sum() + w_edge.sum() + edge_attr.sum()) * 0).to(q.dtype)
    if edge_weight is not None and edge_weight.dim() == 1:
        edge_weight = edge_weight.unsqueeze(-1)
    if (k.dtype not in SPARSE_KERNEL_DTYPES or functorch_active()
            or not sparse_kernels_on(k.device)):
        kept = edge_attr if attr_rows is None else edge_attr.index_select(0, attr_rows)
        return attention_grad(k, q, src, dst, beta, edge_weight, num_nodes,
                              edge_key_offsets(kept.to(k.dtype), w_edge.to(k.dtype)))
    if plan is None:
        plan = build_edge_plan(src, dst, num_nodes, heads)
    weight = None if edge_weight is None else plan.edge_values(edge_weight.to(k.dtype))
    attr = plan.edge_rows(edge_attr.to(k.dtype), attr_rows)
    return _FusedOffsetAttentionGrad.apply(k, q, beta, weight, attr, w_edge, plan)


#: Rows per block of :func:`fused_relu_hopfield_grad` on the CPU: a ``[rows, K]`` block of
#: activations (K = 4 x the width by default) stays in a core's cache between its two products.
#: On a GPU one block holds every row (many small kernels would cost more than they save). The
#: recomputation in backward still makes it slower than autograd's form on NCI1's mini-batches
#: (docs/benchmarks.md), so the layers do not use it; it saves memory, not time.
HOPFIELD_BLOCK_ROWS = 256


def _relu_hopfield_blocks(g: Tensor, xi: Tensor, rows: int
                          ) -> Iterator[tuple[int, Tensor, Tensor]]:
    """``(start, g block, relu(g block xi^T))`` for consecutive row blocks of ``g [N, D]``."""
    xi_t = xi.t()
    for start in range(0, g.size(0), rows):
        block = g[start:start + rows]
        yield start, block, (block @ xi_t).relu_()


class _FusedReluHopfieldGrad(torch.autograd.Function):
    r"""``dE_HN/dg = -relu(g \xi^T) \xi`` for ``g [N, D]``, computed in row blocks that never
    hold the ``[N, K]`` activations at once, and saving only ``g`` and ``\xi`` for backward
    (the activations are recomputed there, one block at a time).

    With ``A = relu(g \xi^T)``, ``M = [g \xi^T > 0]`` and the incoming gradient ``U`` of the
    output ``-A \xi``: ``D = -(U \xi^T) \odot M``, ``dL/dg = D \xi`` and
    ``dL/d\xi = -A^T U + D^T g``.
    """

    @staticmethod
    def forward(ctx: Any, g: Tensor, xi: Tensor, rows: int) -> Tensor:
        out = g.new_empty(g.shape)
        for start, _, act in _relu_hopfield_blocks(g, xi, rows):
            torch.mm(act, xi, out=out[start:start + act.size(0)])
        ctx.rows = rows
        ctx.save_for_backward(g, xi)
        return out.neg_()

    @staticmethod
    @backward_without_autocast
    def backward(ctx: Any, up: Tensor):
        g, xi = ctx.saved_tensors
        if torch.is_grad_enabled() and any(t.requires_grad for t in (g, xi, up)):
            # create_graph=True: differentiate the reference closed form, to any order.
            with torch.enable_grad():
                leaves = [t if t.requires_grad else t.detach().requires_grad_() for t in (g, xi)]
                out = hopfield_grad(leaves[0], leaves[1], "relu")
                wanted = [i for i in range(2) if ctx.needs_input_grad[i]]
                grads = torch.autograd.grad(out, [leaves[i] for i in wanted], up,
                                            create_graph=True)
            result: list[Optional[Tensor]] = [None, None, None]
            for i, grad in zip(wanted, grads):
                result[i] = grad
            return tuple(result)
        with torch.no_grad():
            d_g = g.new_empty(g.shape) if ctx.needs_input_grad[0] else None
            d_xi = torch.zeros_like(xi) if ctx.needs_input_grad[1] else None
            xi_t = xi.t()
            for start, block, act in _relu_hopfield_blocks(g, xi, ctx.rows):
                stop = start + act.size(0)
                up_block = up[start:stop]
                d_act = (up_block @ xi_t).neg_().masked_fill_(act <= 0, 0.0)
                if d_g is not None:
                    torch.mm(d_act, xi, out=d_g[start:stop])
                if d_xi is not None:
                    d_xi.addmm_(act.t(), up_block, alpha=-1).addmm_(d_act.t(), block)
        return d_g, d_xi, None


def fused_relu_hopfield_grad(g: Tensor, xi: Tensor, rows: Optional[int] = None) -> Tensor:
    r"""``-relu(g \xi^T) \xi`` for ``g [N, D]`` and memories ``xi [K, D]``: the value of
    :func:`et_graph.energy.hopfield_grad` (``kind="relu"``) with a hand-written backward that
    keeps no ``[N, K]`` activations between forward and backward (see
    :class:`_FusedReluHopfieldGrad`), in blocks of ``rows`` rows (default
    :data:`HOPFIELD_BLOCK_ROWS` on the CPU, all rows on other devices). Other dtypes than
    float32/float64 and ``torch.func`` transforms take the reference expression."""
    if rows is None:
        rows = HOPFIELD_BLOCK_ROWS if g.device.type == "cpu" else max(g.size(0), 1)
    if rows <= 0:
        raise ValueError(f"rows must be positive, got {rows}")
    if g.dim() != 2 or xi.dim() != 2 or g.size(1) != xi.size(1):
        raise ValueError(f"g must be [N, D] and xi [K, D], got {tuple(g.shape)} and "
                         f"{tuple(xi.shape)}")
    if g.dtype not in SPARSE_KERNEL_DTYPES or functorch_active() or g.dtype != xi.dtype:
        return hopfield_grad(g, xi, "relu")
    return _FusedReluHopfieldGrad.apply(g, xi, rows)
