"""Fused closed-form attention gradient with a hand-written backward.

:func:`fused_attention_grad` returns the same ``(dE/dk, dE/dq)`` as
:func:`et_graph.energy.attention_grad`, but as one :class:`torch.autograd.Function` that saves only
the per-edge, per-head probabilities ``p [E, H]`` between forward and backward. The per-edge
gathers ``k[src]`` and ``q[dst]`` (``[E, H, Y]`` each) are recomputed in backward, so activation
memory grows as ``O(E * H)`` instead of ``O(E * H * Y)``.

Backward derivation (``c = w p``, ``s = <k_B, q_C>``, ``a = beta w s``, ``G_k``, ``G_q`` the
incoming gradients of the outputs ``dk = -sum c q_C`` and ``dq = -sum c k_B``)::

    dL/dc_e  = -(<G_k[B], q_C> + <G_q[C], k_B>)
    dL/dp_e  = w_e dL/dc_e                          dL/dw_e += p_e dL/dc_e
    dL/da_e  = p_e (dL/dp_e - sum_{e' -> C} p_e' dL/dp_e')       (softmax over edges into C)
    dL/dbeta = sum_e w_e s_e dL/da_e                dL/dw_e += beta s_e dL/da_e
    dL/ds_e  = beta w_e dL/da_e
    dL/dk_B  = sum_{e: src=B} (dL/ds_e q_C - c_e G_q[C])
    dL/dq_C  = sum_{e: dst=C} (dL/ds_e k_B - c_e G_k[B])
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .energy import segment_softmax


class _FusedAttentionGrad(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        k: Tensor,
        q: Tensor,
        beta: Tensor,
        edge_weight: Optional[Tensor],
        src: Tensor,
        dst: Tensor,
    ) -> tuple[Tensor, Tensor]:
        num_nodes = k.size(0)
        k_src = k.index_select(0, src)
        q_dst = q.index_select(0, dst)
        scores = (k_src * q_dst).sum(dim=-1)
        if edge_weight is not None:
            scores = scores * edge_weight
        probs = segment_softmax(scores * beta, dst, num_nodes)
        coef = probs if edge_weight is None else probs * edge_weight
        coef3 = coef.unsqueeze(-1)
        grad_q = torch.zeros_like(q).index_add_(0, dst, coef3 * k_src, alpha=-1)
        grad_k = torch.zeros_like(k).index_add_(0, src, coef3 * q_dst, alpha=-1)
        ctx.save_for_backward(k, q, beta, edge_weight, src, dst, probs)
        return grad_k, grad_q

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, up_k: Optional[Tensor], up_q: Optional[Tensor]):
        k, q, beta, edge_weight, src, dst, probs = ctx.saved_tensors
        num_nodes = k.size(0)
        up_k = torch.zeros_like(k) if up_k is None else up_k
        up_q = torch.zeros_like(q) if up_q is None else up_q

        k_src = k.index_select(0, src)
        q_dst = q.index_select(0, dst)
        up_k_src = up_k.index_select(0, src)
        up_q_dst = up_q.index_select(0, dst)

        d_coef = -((up_k_src * q_dst).sum(-1) + (up_q_dst * k_src).sum(-1))
        d_probs = d_coef if edge_weight is None else d_coef * edge_weight
        weighted = probs * d_probs
        per_dst = probs.new_zeros(num_nodes, probs.size(1)).index_add_(0, dst, weighted)
        d_logits = weighted - probs * per_dst.index_select(0, dst)

        scores = (k_src * q_dst).sum(-1)
        d_beta = d_w = None
        if edge_weight is None:
            if ctx.needs_input_grad[2]:
                d_beta = (d_logits * scores).sum(0)
            d_scores = d_logits * beta
            coef = probs
        else:
            if ctx.needs_input_grad[2]:
                d_beta = (d_logits * scores * edge_weight).sum(0)
            if ctx.needs_input_grad[3]:
                d_w = probs * d_coef + d_logits * beta * scores
                if d_w.size(1) != edge_weight.size(1):
                    d_w = d_w.sum(1, keepdim=True)
            d_scores = d_logits * beta * edge_weight
            coef = probs * edge_weight

        d_scores3 = d_scores.unsqueeze(-1)
        coef3 = coef.unsqueeze(-1)
        d_k = torch.zeros_like(k).index_add_(0, src, d_scores3 * q_dst - coef3 * up_q_dst)
        d_q = torch.zeros_like(q).index_add_(0, dst, d_scores3 * k_src - coef3 * up_k_src)
        return d_k, d_q, d_beta, d_w, None, None


def fused_attention_grad(
    k: Tensor,
    q: Tensor,
    src: Tensor,
    dst: Tensor,
    beta: Tensor,
    edge_weight: Optional[Tensor],
) -> tuple[Tensor, Tensor]:
    """``(dE_ATT/dk, dE_ATT/dq)`` for ``k, q [N, H, Y]``; ``edge_weight`` is ``[E, H]``,
    ``[E, 1]`` or ``None``; self-loops must already be removed."""
    return _FusedAttentionGrad.apply(k, q, beta, edge_weight, src, dst)
