"""The fused closed-form attention gradient: exact forward, exact hand-written backward."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import relative_error

import et_graph.fused as fused
from et_graph import energy as E
from et_graph.fused import build_edge_plan, fused_attention_grad
from et_graph.nn import ETConv

NUM_NODES, HEADS, HEAD_DIM = 9, 3, 4


def awkward_edges(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-loop-free edges among nodes 0..6 with duplicates; node 7 only sends, 8 is isolated."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, 7, (30,), generator=gen)
    dst = torch.randint(0, 7, (30,), generator=gen)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    src = torch.cat([src, src[:4], torch.tensor([7, 7])])  # duplicates, and 7 -> others
    dst = torch.cat([dst, dst[:4], torch.tensor([0, 2])])
    return src, dst


def keys_queries(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shape = (NUM_NODES, HEADS, HEAD_DIM)
    k = torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
    q = torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
    beta = (torch.rand(HEADS, generator=gen, dtype=torch.float64) + 0.5).requires_grad_(True)
    return k, q, beta


def make_weight(kind: str, num_edges: int) -> torch.Tensor | None:
    gen = torch.Generator().manual_seed(2)
    if kind == "none":
        return None
    shape = {"flat": (num_edges,), "per_edge": (num_edges, 1), "per_head": (num_edges, HEADS)}
    # Mixed signs and an exact zero: weights need not be positive.
    weight = torch.randn(shape[kind], generator=gen, dtype=torch.float64)
    weight[0] = 0.0
    return weight.requires_grad_(True)


def reference_weight(weight: torch.Tensor | None) -> torch.Tensor | None:
    """The reference energy functions take ``[E, 1 or H]``."""
    return weight.unsqueeze(-1) if weight is not None and weight.dim() == 1 else weight


@pytest.mark.parametrize("kind", ["none", "flat", "per_edge", "per_head"])
def test_forward_equals_reference_closed_form(kind):
    src, dst = awkward_edges()
    k, q, beta = keys_queries()
    weight = make_weight(kind, src.numel())
    grad_k, grad_q = fused_attention_grad(k, q, src, dst, beta, weight)
    ref_k, ref_q = E.attention_grad(k, q, src, dst, beta, reference_weight(weight), NUM_NODES)
    assert relative_error(grad_k, ref_k) < 1e-12
    assert relative_error(grad_q, ref_q) < 1e-12
    # Node 8 has no edge at all, node 7 no in-edge: exact zeros where the sums are empty.
    assert torch.all(grad_k[8] == 0) and torch.all(grad_q[8] == 0)
    assert torch.all(grad_q[7] == 0) and grad_k[7].abs().sum() > 0


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("kind", ["none", "flat", "per_edge", "per_head"])
def test_backward_passes_gradcheck(kind, order):
    """Order 2 (create_graph=True: gradient penalties, Hessian-vector products) must not
    silently drop the second-order terms: the hand-written backward is first-order only."""
    src, dst = awkward_edges()
    k, q, beta = keys_queries()
    weight = make_weight(kind, src.numel())
    inputs = (k, q, beta) if weight is None else (k, q, beta, weight)

    def function(*tensors):
        w = tensors[3] if len(tensors) == 4 else None
        return fused_attention_grad(tensors[0], tensors[1], src, dst, tensors[2], w)

    check = torch.autograd.gradcheck if order == 1 else torch.autograd.gradgradcheck
    assert check(function, inputs, atol=1e-8, rtol=1e-6)


def test_layer_hessian_vector_product_matches_autograd():
    torch.manual_seed(0)
    analytic = ETConv(8, heads=HEADS, head_dim=HEAD_DIM, steps=2, alpha=0.2).double()
    reference = copy.deepcopy(analytic)
    reference.grad = "autograd"
    x, edge_index = layer_graph()
    direction = torch.randn_like(x)
    products = {}
    for name, conv in (("analytic", analytic), ("reference", reference)):
        x_in = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(conv(x_in, edge_index).pow(2).sum(), x_in,
                                      create_graph=True)
        (products[name],) = torch.autograd.grad((grad * direction).sum(), x_in)
    assert products["reference"].abs().sum() > 0
    assert relative_error(products["analytic"], products["reference"]) < 1e-8


def test_backward_with_only_one_output_used():
    src, dst = awkward_edges()
    k, q, beta = keys_queries()
    grad_k, _ = fused_attention_grad(k, q, src, dst, beta, None)
    fused_grads = torch.autograd.grad(grad_k.pow(2).sum(), (k, q, beta))
    ref_k, _ = E.attention_grad(k, q, src, dst, beta, None, NUM_NODES)
    ref_grads = torch.autograd.grad(ref_k.pow(2).sum(), (k, q, beta))
    for got, want in zip(fused_grads, ref_grads):
        assert relative_error(got, want) < 1e-10


def test_more_repeated_edges_than_matrix_entries():
    """Two nodes joined by 6 copies of their 2 edges: the sparse pattern stores more entries
    than the [H*N, H*N] matrix has, which the sampled-matmul kernel re-packs (found by the
    property test). Forward and gradients still equal the reference closed form."""
    src = torch.tensor([0, 1, 0, 1, 0, 1])
    dst = torch.tensor([1, 0, 1, 0, 1, 0])
    gen = torch.Generator().manual_seed(3)
    k, q = (torch.randn(2, 1, 3, generator=gen, dtype=torch.float64, requires_grad=True)
            for _ in range(2))
    beta = torch.tensor([0.7], dtype=torch.float64, requires_grad=True)
    plan = build_edge_plan(src, dst, 2, 1)
    col = plan.col.clone()
    assert plan.overfull
    plan.sddmm(k.detach().view(2, 3), q.detach().view(2, 3))
    assert torch.equal(plan.col, col)  # the kernel never re-packs the plan's index arrays
    grad_k, grad_q = fused_attention_grad(k, q, src, dst, beta, None)
    ref_k, ref_q = E.attention_grad(k, q, src, dst, beta, None, 2)
    assert relative_error(grad_k, ref_k) < 1e-12 and relative_error(grad_q, ref_q) < 1e-12
    got = torch.autograd.grad((grad_k.sum() + grad_q.pow(2).sum()), (k, q, beta))
    want = torch.autograd.grad((ref_k.sum() + ref_q.pow(2).sum()), (k, q, beta))
    for g, w in zip(got, want):
        assert relative_error(g, w) < 1e-10


def test_shared_plan_and_edge_order_do_not_matter():
    src, dst = awkward_edges()
    k, q, beta = keys_queries()
    weight = make_weight("per_head", src.numel())
    plan = build_edge_plan(src, dst, NUM_NODES, HEADS)
    with_plan = fused_attention_grad(k, q, src, dst, beta, weight, plan)
    without = fused_attention_grad(k, q, src, dst, beta, weight)
    perm = torch.randperm(src.numel(), generator=torch.Generator().manual_seed(3))
    shuffled = fused_attention_grad(k, q, src[perm], dst[perm], beta, weight[perm])
    for a, b, c in zip(with_plan, without, shuffled):
        assert relative_error(a, b) == 0.0
        assert relative_error(c, b) < 1e-12
    # The edge-weight gradient comes back in the caller's edge order.
    (d_w,) = torch.autograd.grad(without[1].sum(), weight)
    weight_perm = weight.detach()[perm].requires_grad_(True)
    shuffled = fused_attention_grad(k, q, src[perm], dst[perm], beta, weight_perm)
    (d_w_perm,) = torch.autograd.grad(shuffled[1].sum(), weight_perm)
    assert relative_error(d_w_perm, d_w[perm]) < 1e-12


def test_64_bit_index_fallback(monkeypatch):
    src, dst = awkward_edges()
    k, q, beta = keys_queries()
    expected = fused_attention_grad(k, q, src, dst, beta, None)
    monkeypatch.setattr(fused, "_INT32_MAX", 0)
    plan = build_edge_plan(src, dst, NUM_NODES, HEADS)
    assert plan.col.dtype == torch.int64
    got = fused_attention_grad(k, q, src, dst, beta, None, plan)
    for a, b in zip(got, expected):
        assert relative_error(a, b) < 1e-14


def test_no_edges_gives_zero_gradient_and_keeps_the_graph():
    k, q, beta = keys_queries()
    empty = torch.empty(0, dtype=torch.long)
    grad_k, grad_q = fused_attention_grad(k, q, empty, empty, beta, None)
    assert torch.all(grad_k == 0) and torch.all(grad_q == 0)
    grads = torch.autograd.grad((grad_k.sum() + grad_q.sum()), (k, q))
    assert all(torch.all(g == 0) for g in grads)


# --------------------------------------------------------------------------------------------
# Whole layer: fused closed form vs grad="autograd", forward and parameter gradients
# --------------------------------------------------------------------------------------------
def layer_graph(seed: int = 4):
    """12 nodes; a self-loop, duplicate edges and two isolated nodes (10, 11)."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, 10, (2, 45), generator=gen)
    edge_index = torch.cat([edge_index, torch.tensor([[1, 4, 4], [1, 6, 6]])], dim=1)
    x = torch.randn(12, 8, generator=gen, dtype=torch.float64)
    return x, edge_index


@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
@pytest.mark.parametrize("kind", ["none", "per_edge_1d", "per_head"])
def test_layer_forward_backward_matches_autograd(hopfield, kind):
    torch.manual_seed(0)
    analytic = ETConv(8, heads=HEADS, head_dim=HEAD_DIM, hopfield=hopfield, steps=2, alpha=0.2)
    analytic = analytic.double()
    with torch.no_grad():  # move off the initial values so every parameter matters
        analytic.norm.log_gamma.fill_(0.3)
        analytic.norm.delta.normal_(0, 0.1)
    reference = copy.deepcopy(analytic)
    reference.grad = "autograd"

    x, edge_index = layer_graph()
    gen = torch.Generator().manual_seed(5)
    weight = {
        "none": None,
        "per_edge_1d": torch.rand(edge_index.size(1), generator=gen, dtype=torch.float64) + 0.5,
        "per_head": torch.randn(edge_index.size(1), HEADS, generator=gen, dtype=torch.float64),
    }[kind]
    projection = torch.randn(12, 8, generator=gen, dtype=torch.float64)

    grads = {}
    for name, conv in (("analytic", analytic), ("reference", reference)):
        x_in = x.clone().requires_grad_(True)
        w_in = None if weight is None else weight.clone().requires_grad_(True)
        out = conv(x_in, edge_index, w_in)
        (out * projection).sum().backward()
        grads[name] = {"out": out.detach(), "x": x_in.grad}
        grads[name].update({p: t.grad for p, t in conv.named_parameters()})
        if w_in is not None:
            grads[name]["edge_weight"] = w_in.grad

    expected_keys = {"out", "x"} | {
        f"energy_fn.{name}"
        for name in ("norm.log_gamma", "norm.delta", "w_k", "w_q", "xi", "log_beta")
    }
    assert expected_keys <= set(grads["analytic"])
    for key, want in grads["reference"].items():
        got = grads["analytic"][key]
        assert got is not None and want is not None, key
        assert want.abs().sum() > 0, key  # the comparison is not vacuous
        assert relative_error(got, want) < 1e-8, key


def test_low_precision_falls_back_to_the_reference_closed_form():
    src, dst = awkward_edges()
    k, q, beta = keys_queries()
    expected = fused_attention_grad(k, q, src, dst, beta, None)
    low = [t.detach().to(torch.bfloat16).requires_grad_(True) for t in (k, q, beta)]
    got = fused_attention_grad(low[0], low[1], src, dst, low[2], None)
    assert got[0].dtype == torch.bfloat16
    for a, b in zip(got, expected):
        assert relative_error(a.double(), b) < 0.05
    got[0].float().sum().backward()
    assert all(t.grad is not None for t in low)


def test_pure_energy_functions_read_a_one_dimensional_weight_per_edge():
    """[E] weights broadcast along the heads of the [E, H] scores; with E == H the energy was
    silently wrong (1.914 instead of -0.236 in an audit's example)."""
    torch.manual_seed(0)
    k, q = torch.randn(4, 3, 2, dtype=torch.float64), torch.randn(4, 3, 2, dtype=torch.float64)
    src, dst = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 3])  # E = 3 = H
    beta = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    weight = torch.tensor([0.2, 1.5, -0.7], dtype=torch.float64)
    flat = E.attention_energy(k, q, src, dst, beta, weight, 4)
    column = E.attention_energy(k, q, src, dst, beta, weight[:, None], 4)
    torch.testing.assert_close(flat, column)
    for a, b in zip(E.attention_grad(k, q, src, dst, beta, weight, 4),
                    E.attention_grad(k, q, src, dst, beta, weight[:, None], 4)):
        torch.testing.assert_close(a, b)


# --- the ReLU Hopfield term in row blocks -----------------------------------------------------
def hopfield_inputs(rows: int = 23, width: int = 5, memories: int = 11, seed: int = 3):
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(rows, width, generator=gen, dtype=torch.float64, requires_grad=True)
    xi = torch.randn(memories, width, generator=gen, dtype=torch.float64, requires_grad=True)
    return g, xi


@pytest.mark.parametrize("block_rows", [1, 4, 23, 256])
def test_blocked_hopfield_term_is_minus_the_energy_gradient(block_rows):
    g, xi = hopfield_inputs()
    got = fused.fused_relu_hopfield_grad(g, xi, rows=block_rows)
    (want,) = torch.autograd.grad(E.hopfield_energy(g, xi, "relu").sum(), g)
    assert want.abs().sum() > 0 and relative_error(got, want) < 1e-12
    # the hand-written backward (several blocks, a last one shorter) against autograd
    up = torch.randn_like(g)
    expected = torch.autograd.grad(E.hopfield_grad(g, xi, "relu"), (g, xi), up)
    for a, b in zip(torch.autograd.grad(got, (g, xi), up), expected):
        assert b.abs().sum() > 0 and relative_error(a, b) < 1e-12


def test_blocked_hopfield_term_passes_gradcheck_to_second_order():
    g, xi = hopfield_inputs(rows=9, memories=6)
    term = lambda g, xi: fused.fused_relu_hopfield_grad(g, xi, rows=4)  # noqa: E731
    assert torch.autograd.gradcheck(term, (g, xi))
    assert torch.autograd.gradgradcheck(term, (g, xi))


def test_blocked_hopfield_term_keeps_no_activations_for_backward():
    g, xi = hopfield_inputs(rows=40, memories=30)
    out = fused.fused_relu_hopfield_grad(g, xi, rows=8)
    saved = [t.shape for t in out.grad_fn.saved_tensors]
    assert saved == [g.shape, xi.shape]  # no [N, K] tensor


def test_blocked_hopfield_term_refuses_bad_shapes_and_falls_back_in_low_precision():
    g, xi = hopfield_inputs()
    with pytest.raises(ValueError, match="rows must be positive"):
        fused.fused_relu_hopfield_grad(g, xi, rows=0)
    with pytest.raises(ValueError, match=r"g must be \[N, D\] and xi \[K, D\]"):
        fused.fused_relu_hopfield_grad(g, xi[:, :3])
    low = fused.fused_relu_hopfield_grad(g.detach().bfloat16(), xi.detach().bfloat16())
    assert low.dtype == torch.bfloat16
    assert relative_error(low.double(), E.hopfield_grad(g, xi, "relu")) < 0.05


# --- the softmax Hopfield energy at an inverse temperature other than 1 -----------------------
def test_softmax_hopfield_energy_and_gradient_read_the_inverse_temperature():
    """E_HN = -(1/b) log sum_mu exp(b xi_mu^T g) per token, and the closed-form gradient
    -softmax(b g xi^T) xi equals autograd of it (float64). At b = 1 (every other test) a
    missing 1/b in the energy or a missing b in the activation goes unseen."""
    from et_graph.nn import ETEnergy

    b = 2.5
    torch.manual_seed(0)
    energy = ETEnergy(8, heads=2, head_dim=4, hopfield_dim=6, hopfield="softmax",
                      hopfield_beta=b).double()
    with torch.no_grad():
        energy.xi.normal_()  # wide enough that the softmax is far from flat
    x, edge_index = layer_graph()
    g = energy.norm(x).detach()
    expected = -torch.logsumexp(b * (g @ energy.xi.t()), dim=-1) / b
    torch.testing.assert_close(energy.hopfield_energy_of_g(g), expected)
    g_in = g.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(energy.hopfield_energy_of_g(g_in).sum(), g_in)
    got = energy.hopfield_grad_of_g(g)
    assert want.abs().sum() > 0 and relative_error(got, want) < 1e-10
    edges = energy.edges(x, edge_index)
    for fused_kernel in (True, False):
        closed = energy.grad_of_g(g, edges, fused=fused_kernel)
        assert relative_error(closed, energy.autograd_grad_of_g(g, edges)) < 1e-10


def test_layer_with_a_softmax_hopfield_temperature_matches_autograd():
    """The whole layer (closed form vs grad="autograd") with hopfield_beta=2.5: output and
    input gradient."""
    torch.manual_seed(0)
    analytic = ETConv(8, heads=HEADS, head_dim=HEAD_DIM, hopfield="softmax", hopfield_beta=2.5,
                      steps=2, alpha=0.2).double()
    with torch.no_grad():
        analytic.energy_fn.xi.normal_()
    reference = copy.deepcopy(analytic)
    reference.grad = "autograd"
    x, edge_index = layer_graph()
    projection = torch.randn(12, 8, generator=torch.Generator().manual_seed(5),
                             dtype=torch.float64)
    results = []
    for conv in (analytic, reference):
        x_in = x.clone().requires_grad_(True)
        out = conv(x_in, edge_index)
        (out * projection).sum().backward()
        results.append((out.detach(), x_in.grad))
    for got, want in zip(*results):
        assert want.abs().sum() > 0 and relative_error(got, want) < 1e-8
