r"""The Energy Transformer energy: small pure functions, the single source of truth.

Notation (shared with the docs page ``docs/derivation.md`` and with :class:`ETConv`):

* ``x``  ``[N, D]`` tokens, ``g = LN(x)`` their energy LayerNorm (scalar ``gamma``, vector
  ``delta``), the gradient of the Lagrangian
  :math:`L(x) = D\gamma\sqrt{\tfrac1D\sum_j (x_j-\bar x)^2+\varepsilon} + \sum_j \delta_j x_j`.
* ``k = g W_K^T`` and ``q = g W_Q^T`` reshaped to ``[N, H, Y]`` (heads ``H``, head width ``Y``).
* An edge ``e = (B -> C)`` (``src = B``, ``dst = C``) lets the destination ``C`` attend to the
  source ``B``. Its logit for head ``h`` is ``a_eh = beta_h * w_eh * <k_hB + o_eh, q_hC>``,
  where ``o_eh = W^E_h f_e`` is the key offset of the edge's features ``f_e`` (``0`` without
  edge features): the edge moves the key its source offers, as ``TransformerConv``'s
  ``edge_dim`` does, and the offset does not depend on the tokens.
* :math:`E_{ATT} = -\sum_h \beta_h^{-1} \sum_C \log\sum_{e: dst(e)=C} \exp(a_{eh})`; a node with
  no in-edge contributes nothing.
* :math:`E_{HN} = -\sum_B \sum_\mu \tfrac12 \mathrm{relu}(\xi_\mu\cdot g_B)^2` (``"relu"``) or
  :math:`-\sum_B b^{-1}\log\sum_\mu \exp(b\,\xi_\mu\cdot g_B)` (``"softmax"``).
* Optional edge coupling :math:`E_{GC} = -\tfrac12 \sum_{e = (B \to C)} g_B^\top W g_C` with a
  symmetric ``W [D, D]``: its gradient is a *sum* over the neighbours, which can count (the
  attention's softmax average cannot).

Every energy function returns a per-node share so that totals, per-graph and per-node energies all
come from the same code. The closed-form gradients beside them are checked against
``torch.autograd.grad`` of these energies in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, overload

import torch
from torch import Tensor

from .precision import accumulation_dtype

HOPFIELD_KINDS = ("relu", "softmax")


# --------------------------------------------------------------------------------------------
# LayerNorm as the gradient of a Lagrangian
# --------------------------------------------------------------------------------------------
def _squares_dtype(t: Tensor) -> Tensor:
    """``t`` in float32 when it is a 16-bit float: its squares (a variance) would overflow
    float16 beyond 256 and lose bfloat16's few digits; PyTorch's layer_norm does the same."""
    return t.to(accumulation_dtype(t.dtype))


def layer_norm(x: Tensor, gamma: Tensor, delta: Tensor, eps: float) -> Tensor:
    """``g = gamma * (x - mean) / sqrt(var + eps) + delta`` over the last dimension.

    Args:
        x: tokens ``[..., D]``.
        gamma: the scalar gain (:class:`~et_graph.nn.EnergyLayerNorm` passes its ``gamma``).
        delta: the bias ``[D]``.
        eps: added to the variance.

    Returns:
        ``g``, of the shape of ``x``.
    """
    centred = x - x.mean(dim=-1, keepdim=True)
    variance = _squares_dtype(centred).pow(2).mean(dim=-1, keepdim=True)
    scale = torch.rsqrt(variance + eps).to(x.dtype)
    return gamma * centred * scale + delta


def layer_norm_lagrangian(x: Tensor, gamma: Tensor, delta: Tensor, eps: float) -> Tensor:
    """Per-token Lagrangian ``L`` whose gradient with respect to ``x`` is :func:`layer_norm`.

    Args:
        x, gamma, delta, eps: as for :func:`layer_norm`.

    Returns:
        ``L`` per token: ``[...]``, the shape of ``x`` without its last dimension.
    """
    dim = x.size(-1)
    centred = x - x.mean(dim=-1, keepdim=True)
    std = torch.sqrt(_squares_dtype(centred).pow(2).mean(dim=-1) + eps).to(x.dtype)
    return dim * gamma * std + (x * delta).sum(dim=-1)


# --------------------------------------------------------------------------------------------
# Sparse attention energy
# --------------------------------------------------------------------------------------------
def edge_key_offsets(edge_attr: Tensor, w_edge: Tensor) -> Tensor:
    """``o_eh = W^E_h f_e``: the key offsets ``[E, H, Y]`` of edge features ``edge_attr
    [E, F]`` under the maps ``w_edge [H, Y, F]`` (one matmul).

    Args:
        edge_attr: the edge features ``[E, F]``.
        w_edge: one map ``[Y, F]`` per head, stacked as ``[H, Y, F]``.
    """
    heads, head_dim, features = w_edge.shape
    return (edge_attr @ w_edge.reshape(heads * head_dim, features).t()).view(-1, heads, head_dim)


def edge_keys(k: Tensor, src: Tensor, key_offset: Optional[Tensor] = None) -> Tensor:
    """The key each edge ``B -> C`` offers, ``k_hB + o_eh``: ``[E, H, Y]``.

    Args:
        k: the keys ``[N, H, Y]``.
        src: each edge's source node ``B``, ``[E]``.
        key_offset: the edges' key offsets ``[E, H, Y]`` (:func:`edge_key_offsets`), or
            ``None`` (no edge features).
    """
    keys = k.index_select(0, src)
    return keys if key_offset is None else keys + key_offset


def edge_scores(k: Tensor, q: Tensor, src: Tensor, dst: Tensor,
                key_offset: Optional[Tensor] = None) -> Tensor:
    """``<k_hB + o_eh, q_hC>`` for every edge ``B -> C``: ``[E, H]`` (``key_offset``
    ``[E, H, Y]`` from :func:`edge_key_offsets`, or ``None``).

    Args:
        k, q: the keys and queries ``[N, H, Y]``.
        src, dst: each edge's source ``B`` and destination ``C``, ``[E]`` each.
        key_offset: the edges' key offsets, or ``None``.
    """
    return (edge_keys(k, src, key_offset) * q.index_select(0, dst)).sum(dim=-1)


@overload
def edge_weight_columns(edge_weight: None) -> None: ...


@overload
def edge_weight_columns(edge_weight: Tensor) -> Tensor: ...


def edge_weight_columns(edge_weight: Optional[Tensor]) -> Optional[Tensor]:
    """``edge_weight`` as ``[E, 1]`` or ``[E, H]``: a 1-D ``[E]`` weight would broadcast against
    the ``[E, H]`` scores along the heads (wrong silently when ``E == H``)."""
    return edge_weight.unsqueeze(-1) if edge_weight is not None and edge_weight.dim() == 1 \
        else edge_weight


def attention_logits(
    k: Tensor, q: Tensor, src: Tensor, dst: Tensor, beta: Tensor, edge_weight: Optional[Tensor],
    key_offset: Optional[Tensor] = None,
) -> Tensor:
    """``a_eh = beta_h * w_eh * <k_hB + o_eh, q_hC>``: ``[E, H]`` (``edge_weight``: ``[E]``,
    ``[E, 1]`` or ``[E, H]``; ``key_offset`` ``[E, H, Y]`` or ``None``).

    Args:
        k, q: the keys and queries ``[N, H, Y]``.
        src, dst: each edge's source ``B`` and destination ``C``, ``[E]`` each.
        beta: the per-head inverse temperatures ``[H]``.
        edge_weight: the edge weights ``w``, or ``None`` (every weight 1).
        key_offset: the edges' key offsets (:func:`edge_key_offsets`), or ``None``.
    """
    scores = edge_scores(k, q, src, dst, key_offset)
    if edge_weight is not None:
        scores = scores * edge_weight_columns(edge_weight)
    return scores * beta


def segment_logsumexp(logits: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """``log sum exp`` of ``logits [E, H]`` grouped by ``index``; empty groups give ``0``.

    Args:
        logits: the values ``[E, H]``.
        index: each row's group ``[E]`` (int64), in ``[0, num_nodes)``.
        num_nodes: the number of groups.

    Returns:
        ``[num_nodes, H]``.
    """
    heads = logits.size(1)
    expanded = index.unsqueeze(1).expand(-1, heads)
    peak = logits.new_zeros(num_nodes, heads).scatter_reduce(
        0, expanded, logits.detach(), reduce="amax", include_self=False
    )
    total = logits.new_zeros(num_nodes, heads).index_add(0, index, (logits - peak[index]).exp())
    # Empty groups get total 1 so that log(total) = 0 and no -inf (or NaN gradient) appears.
    total = total + (total == 0).to(total.dtype)
    return peak + total.log()


def segment_softmax(logits: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Softmax of ``logits [E, H]`` over the edges that share ``index``.

    Args:
        logits, index, num_nodes: as for :func:`segment_logsumexp`.

    Returns:
        ``[E, H]``.
    """
    return (logits - segment_logsumexp(logits, index, num_nodes)[index]).exp()


def attention_energy(
    k: Tensor,
    q: Tensor,
    src: Tensor,
    dst: Tensor,
    beta: Tensor,
    edge_weight: Optional[Tensor],
    num_nodes: int,
    key_offset: Optional[Tensor] = None,
) -> Tensor:
    """Per-node attention energy ``[N]``: node ``C`` holds ``-sum_h lse_C / beta_h``.

    Args:
        k, q, src, dst, beta, edge_weight, key_offset: as for :func:`attention_logits`.
        num_nodes: the number of nodes ``N`` (a node without in-edges holds ``0``).
    """
    logits = attention_logits(k, q, src, dst, beta, edge_weight, key_offset)
    return -(segment_logsumexp(logits, dst, num_nodes) / beta).sum(dim=-1)


def attention_grad(
    k: Tensor,
    q: Tensor,
    src: Tensor,
    dst: Tensor,
    beta: Tensor,
    edge_weight: Optional[Tensor],
    num_nodes: int,
    key_offset: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    """Closed form of ``(dE_ATT/dk, dE_ATT/dq)``, each ``[N, H, Y]`` (paper eq. 17).

    With ``p`` the per-destination softmax of the logits and ``c = w * p``:
    ``dE/dk_B = -sum_{e: src=B} c_e q_C`` and ``dE/dq_C = -sum_{e: dst=C} c_e (k_B + o_e)``
    (the key offsets ``o`` of edge features do not depend on the tokens, so they add nothing
    to ``dE/dk``).

    Args:
        k, q, src, dst, beta, edge_weight, num_nodes, key_offset: as for
            :func:`attention_energy`.
    """
    coef = edge_coefficients(k, q, src, dst, beta, edge_weight, num_nodes,
                             key_offset).unsqueeze(-1)
    grad_k = torch.zeros_like(k).index_add(0, src, coef * q.index_select(0, dst))
    grad_q = torch.zeros_like(q).index_add(0, dst, coef * edge_keys(k, src, key_offset))
    return -grad_k, -grad_q


def edge_coefficients(
    k: Tensor,
    q: Tensor,
    src: Tensor,
    dst: Tensor,
    beta: Tensor,
    edge_weight: Optional[Tensor],
    num_nodes: int,
    key_offset: Optional[Tensor] = None,
) -> Tensor:
    """``c_eh = w_eh * softmax_C(a)_eh``: how strongly edge ``e`` couples its two ends.

    Args:
        k, q, src, dst, beta, edge_weight, num_nodes, key_offset: as for
            :func:`attention_energy`.

    Returns:
        ``[E, H]``.
    """
    probs = segment_softmax(attention_logits(k, q, src, dst, beta, edge_weight, key_offset),
                            dst, num_nodes)
    return probs if edge_weight is None else probs * edge_weight_columns(edge_weight)


# --------------------------------------------------------------------------------------------
# Multi-relation attention energy: one sparse attention energy per relation, summed
# --------------------------------------------------------------------------------------------
def relation_heads(relation: int, heads: int) -> slice:
    """The heads ``[r*H, (r+1)*H)`` of relation ``r`` in keys/queries stacked as ``[N, R*H, Y]``.

    Args:
        relation: the relation ``r``.
        heads: the heads per relation ``H``.
    """
    return slice(relation * heads, (relation + 1) * heads)


def relational_attention_energy(
    k: Tensor,
    q: Tensor,
    src: Sequence[Tensor],
    dst: Sequence[Tensor],
    beta: Tensor,
    num_nodes: int,
) -> Tensor:
    r"""Per-node energy ``[N]`` of :math:`E_{ATT} = \sum_r E^r_{ATT}`, each relation's sparse
    attention energy with its own keys, queries and temperatures over its own edges.

    ``k, q`` ``[N, R*H, Y]`` and ``beta`` ``[R*H]`` stack the relations (relation ``r`` owns the
    heads :func:`relation_heads`); ``src[r], dst[r]`` are relation ``r``'s edges ``B -> C``.
    Node ``C`` holds :math:`-\sum_r\sum_h \beta_{rh}^{-1}\log\sum_{B\in\mathcal N_r(C)}
    \exp(\beta_{rh}\,\mathbf k^r_{hB}\cdot\mathbf q^r_{hC})`.

    Args:
        k, q: the keys and queries ``[N, R*H, Y]`` of every relation.
        src, dst: one source and one destination tensor ``[E_r]`` per relation (as many of
            each; ``ValueError`` otherwise, or where ``R*H`` is no multiple of their number).
        beta: the per-head inverse temperatures ``[R*H]``.
        num_nodes: the number of nodes ``N``.
    """
    heads = _heads_per_relation(k, src, dst)
    total = k.new_zeros(num_nodes)
    for r, (s, d) in enumerate(zip(src, dst)):
        part = relation_heads(r, heads)
        total = total + attention_energy(k[:, part], q[:, part], s, d, beta[part], None, num_nodes)
    return total


def relational_attention_grad(
    k: Tensor,
    q: Tensor,
    src: Sequence[Tensor],
    dst: Sequence[Tensor],
    beta: Tensor,
    num_nodes: int,
) -> tuple[Tensor, Tensor]:
    """Closed form of ``(dE_ATT/dk, dE_ATT/dq)`` ``[N, R*H, Y]`` of
    :func:`relational_attention_energy`: the relations share no key or query, so each block of
    heads is :func:`attention_grad` of its own relation.

    Args:
        k, q, src, dst, beta, num_nodes: as for :func:`relational_attention_energy`.
    """
    heads = _heads_per_relation(k, src, dst)
    grad_k, grad_q = [], []
    for r, (s, d) in enumerate(zip(src, dst)):
        part = relation_heads(r, heads)
        gk, gq = attention_grad(k[:, part], q[:, part], s, d, beta[part], None, num_nodes)
        grad_k.append(gk)
        grad_q.append(gq)
    return torch.cat(grad_k, dim=1), torch.cat(grad_q, dim=1)


def _heads_per_relation(k: Tensor, src: Sequence[Tensor], dst: Sequence[Tensor]) -> int:
    relations = len(src)
    if len(dst) != relations:
        raise ValueError(f"{relations} source lists but {len(dst)} destination lists")
    if relations <= 0 or k.size(1) % relations:
        raise ValueError(
            f"keys have {k.size(1)} heads, not a positive multiple of the {relations} relations"
        )
    return k.size(1) // relations


# --------------------------------------------------------------------------------------------
# Dense attention energy (images, complete graphs): tokens [B, M, ...]
# --------------------------------------------------------------------------------------------
def dense_attention_logits(
    k: Tensor, q: Tensor, beta: Tensor, mask: Tensor, edge_weight: Optional[Tensor]
) -> Tensor:
    """Logits ``[B, H, M_query, M_key]`` with ``-inf`` where ``mask`` is False.

    ``k, q``: ``[B, M, H, Y]``; ``mask``: ``[B, M, M]`` bool indexed ``[query C, key B]``;
    ``edge_weight``: ``[B, H, M, M]`` indexed the same way.

    Args:
        k, q: the keys and queries ``[B, M, H, Y]`` (``B`` graphs or images of ``M`` tokens).
        beta: the per-head inverse temperatures ``[H]``.
        mask: which key each query attends to, ``[B, M, M]`` bool.
        edge_weight: the weights ``[B, H, M, M]``, or ``None`` (every weight 1).
    """
    scores = torch.einsum("bchy,bkhy->bhck", q, k)
    if edge_weight is not None:
        scores = scores * edge_weight
    logits = scores * beta.view(1, -1, 1, 1)
    return logits.masked_fill(~mask.unsqueeze(1), float("-inf"))


def _masked_logsumexp(logits: Tensor) -> Tensor:
    """``logsumexp`` over the last dim; rows that are entirely masked give ``0``."""
    empty = torch.isneginf(logits).all(dim=-1, keepdim=True)
    safe = logits.masked_fill(empty, 0.0)
    lse = torch.logsumexp(safe, dim=-1, keepdim=True) - empty.to(logits.dtype) * torch.log(
        torch.tensor(float(logits.size(-1)), dtype=logits.dtype, device=logits.device)
    )
    return lse.squeeze(-1)


def dense_attention_energy(
    k: Tensor, q: Tensor, beta: Tensor, mask: Tensor, edge_weight: Optional[Tensor]
) -> Tensor:
    """Per-token attention energy ``[B, M]`` of the dense path.

    Args:
        k, q, beta, mask, edge_weight: as for :func:`dense_attention_logits` (a token that
            attends to no key holds ``0``).
    """
    lse = _masked_logsumexp(dense_attention_logits(k, q, beta, mask, edge_weight))
    return -(lse / beta.view(1, -1, 1)).sum(dim=1)


def dense_attention_grad(
    k: Tensor, q: Tensor, beta: Tensor, mask: Tensor, edge_weight: Optional[Tensor]
) -> tuple[Tensor, Tensor]:
    """Closed form of ``(dE/dk, dE/dq)``, each ``[B, M, H, Y]``, for the dense path.

    Args:
        k, q, beta, mask, edge_weight: as for :func:`dense_attention_logits`.
    """
    logits = dense_attention_logits(k, q, beta, mask, edge_weight)
    empty = torch.isneginf(logits).all(dim=-1, keepdim=True)
    probs = torch.softmax(logits.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    coef = probs if edge_weight is None else probs * edge_weight
    grad_q = -torch.einsum("bhck,bkhy->bchy", coef, k)
    grad_k = -torch.einsum("bhck,bchy->bkhy", coef, q)
    return grad_k, grad_q


# --------------------------------------------------------------------------------------------
# Edge coupling energy (optional): a sum over neighbours, which the softmax average is not
# --------------------------------------------------------------------------------------------
def coupling_energy(g: Tensor, src: Tensor, dst: Tensor, coupling: Tensor) -> Tensor:
    r"""Per-node share ``[N]`` of :math:`E_{GC} = -\tfrac12 \sum_{e=(B\to C)} g_B^\top W g_C`
    for a symmetric ``coupling`` ``W [D, D]``; each edge counts towards its destination ``C``.

    Args:
        g: the normalised tokens ``[N, D]``.
        src, dst: each edge's source ``B`` and destination ``C``, ``[E]`` each.
        coupling: the symmetric ``W [D, D]`` (not checked for symmetry here).
    """
    # W g per node, then gathered: N rows through the matmul rather than one per edge.
    per_edge = ((g @ coupling).index_select(0, src) * g.index_select(0, dst)).sum(dim=-1)
    return g.new_zeros(g.size(0)).index_add(0, dst, per_edge, alpha=-0.5)


def coupling_grad(g: Tensor, src: Tensor, dst: Tensor, coupling: Tensor) -> Tensor:
    """Closed form of ``dE_GC/dg`` ``[N, D]``: ``-(1/2) W (sum_{e: src=n} g_dst + sum_{e: dst=n}
    g_src)`` (``W`` symmetric). On a symmetric edge set this is ``-W`` times the sum of the
    neighbours' ``g``.

    Args:
        g, src, dst, coupling: as for :func:`coupling_energy`.
    """
    projected = g @ coupling
    out = torch.zeros_like(projected).index_add_(0, src, projected.index_select(0, dst))
    return out.index_add_(0, dst, projected.index_select(0, src)).mul_(-0.5)


# --------------------------------------------------------------------------------------------
# Hopfield network energy
# --------------------------------------------------------------------------------------------
def hopfield_energy(g: Tensor, xi: Tensor, kind: str, hopfield_beta: float = 1.0) -> Tensor:
    """Per-token Hopfield energy ``[...]`` for memories ``xi [K, D]``.

    Args:
        g: the normalised tokens ``[..., D]``.
        xi: the memories ``[K, D]``.
        kind: ``"relu"`` or ``"softmax"`` (anything else raises ``ValueError``).
        hopfield_beta: the inverse temperature of ``"softmax"`` (``"relu"`` ignores it).
    """
    hidden = g @ xi.t()
    if kind == "relu":
        return -0.5 * torch.relu(hidden).pow(2).sum(dim=-1)
    if kind == "softmax":
        return -torch.logsumexp(hopfield_beta * hidden, dim=-1) / hopfield_beta
    raise ValueError(f"hopfield must be one of {HOPFIELD_KINDS}, got {kind!r}")


def hopfield_activation(g: Tensor, xi: Tensor, kind: str, hopfield_beta: float = 1.0) -> Tensor:
    """``r(g xi^T)`` ``[..., K]``: the memories' activations, ``r = G'``.

    Args:
        g, xi, kind, hopfield_beta: as for :func:`hopfield_energy`.
    """
    hidden = g @ xi.t()
    if kind == "relu":
        return hidden.relu_()  # in place is safe: the matmul's backward needs only its inputs
    if kind == "softmax":
        return torch.softmax(hopfield_beta * hidden, dim=-1)
    raise ValueError(f"hopfield must be one of {HOPFIELD_KINDS}, got {kind!r}")


def hopfield_grad(g: Tensor, xi: Tensor, kind: str, hopfield_beta: float = 1.0) -> Tensor:
    """Closed form of ``dE_HN/dg = -r(g xi^T) xi`` (paper eq. 9).

    Args:
        g, xi, kind, hopfield_beta: as for :func:`hopfield_energy`.

    Returns:
        ``dE_HN/dg``, of the shape of ``g``.
    """
    return -hopfield_activation(g, xi, kind, hopfield_beta) @ xi


#: Relative slack of :func:`energy_is_monotone`: a step may raise the energy by at most this
#: times ``max(1, |E|)`` (float32 rounding).
ENERGY_TOLERANCE = 1e-4


def energy_is_monotone(energies: Tensor, tolerance: float = ENERGY_TOLERANCE) -> bool:
    """Whether a descent's energies ``[..., steps + 1]`` (a layer's ``return_energy`` trace,
    one row per graph or image) never rise by more than ``tolerance * max(1, |E|)`` in one
    step: the check that a new energy term, with its closed form, still descends (use a small
    ``alpha``; ``tolerance=0`` in float64). The default slack is loose on purpose: it covers
    float32 rounding many times over, and ``|E|`` includes the attention term's
    ``log(in-degree) / beta`` offsets, which do not move the tokens, so a small real rise can
    hide under it.

    Args:
        energies: the energies ``[..., steps + 1]``, in step order along the last dimension.
        tolerance: the relative slack per step (``0``: no rise at all).
    """
    rise = energies[..., 1:] - energies[..., :-1]
    slack = tolerance * energies[..., :-1].abs().clamp_min(1.0)
    return bool((rise <= slack).all())


# (a star import pulled in torch, Tensor and the typing names)
__all__ = [
    "ENERGY_TOLERANCE",
    "HOPFIELD_KINDS",
    "attention_energy",
    "attention_grad",
    "attention_logits",
    "coupling_energy",
    "coupling_grad",
    "dense_attention_energy",
    "dense_attention_grad",
    "dense_attention_logits",
    "edge_coefficients",
    "edge_key_offsets",
    "edge_keys",
    "edge_scores",
    "edge_weight_columns",
    "energy_is_monotone",
    "hopfield_activation",
    "hopfield_energy",
    "hopfield_grad",
    "layer_norm",
    "layer_norm_lagrangian",
    "relation_heads",
    "relational_attention_energy",
    "relational_attention_grad",
    "segment_logsumexp",
    "segment_softmax",
]
