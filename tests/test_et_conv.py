"""ETConv: exactness of the closed form, descent, equivariance, sparse parity and bad input."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import ExplainedModel, awkward_graph, node_explainer, relative_error
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

from et_graph.nn import ETConv

torch.set_default_dtype(torch.float32)


def make_conv(channels=8, heads=3, head_dim=4, hopfield="relu", **kwargs) -> ETConv:
    torch.manual_seed(0)
    return ETConv(channels, heads=heads, head_dim=head_dim, hopfield=hopfield, **kwargs).double()


def autograd_reference(conv: ETConv, x, edge_index, edge_weight=None) -> torch.Tensor:
    """``torch.autograd.grad`` of the energy itself, through the public ``ETEnergy``."""
    energy = conv.energy_fn
    g = energy.norm(x).detach().requires_grad_(True)
    edges = energy.edges(x, edge_index, edge_weight)
    total = energy.node_energy_of_g(g, edges).sum()
    return torch.autograd.grad(total, g)[0]


# --------------------------------------------------------------------------------------------
# 1. The closed form equals autograd of the energy (float64, 1e-8)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
@pytest.mark.parametrize("weight_kind", ["none", "per_edge", "per_head"])
@pytest.mark.parametrize("fused", [True, False])
def test_closed_form_matches_autograd(hopfield, weight_kind, fused):
    conv = make_conv(hopfield=hopfield)
    conv.fused = fused
    x, edge_index = awkward_graph()
    num_edges = edge_index.size(1)
    edge_weight = {
        "none": None,
        "per_edge": torch.rand(num_edges, dtype=torch.float64) + 0.5,
        "per_head": torch.randn(num_edges, 3, dtype=torch.float64),
    }[weight_kind]
    analytic = conv.energy_grad(x, edge_index, edge_weight)
    reference = autograd_reference(conv, x, edge_index, edge_weight)
    assert relative_error(analytic, reference) < 1e-8
    conv.grad = "autograd"
    assert relative_error(conv.energy_grad(x, edge_index, edge_weight), reference) < 1e-8


def test_closed_form_matches_autograd_on_a_batch_of_graphs():
    conv = make_conv()
    x1, e1 = awkward_graph(10, 30, seed=2)
    x2, e2 = awkward_graph(7, 20, seed=3)
    x = torch.cat([x1, x2])
    edge_index = torch.cat([e1, e2 + 10], dim=1)
    batch = torch.cat([torch.zeros(10, dtype=torch.long), torch.ones(7, dtype=torch.long)])
    analytic = conv.energy_grad(x, edge_index)
    assert relative_error(analytic, autograd_reference(conv, x, edge_index)) < 1e-8
    # Graphs do not interact: each graph's gradient equals the gradient computed alone.
    assert relative_error(analytic[:10], conv.energy_grad(x1, e1)) < 1e-12
    per_graph = conv.energy(x, edge_index, batch=batch)
    assert per_graph.shape == (2,)
    assert torch.allclose(per_graph, torch.stack([conv.energy(x1, e1), conv.energy(x2, e2)]))


def test_a_wrong_closed_form_would_be_caught():
    """The parity check can fail: dropping the source-side aggregation breaks it."""
    conv = make_conv()
    x, edge_index = awkward_graph()
    reference = autograd_reference(conv, x, edge_index)
    energy = conv.energy_fn
    g = energy.norm(x)
    k, q = energy.keys_queries(g)
    edges = energy.edges(x, edge_index)
    from et_graph.energy import attention_grad, hopfield_grad

    _, grad_q = attention_grad(k, q, edges.src, edges.dst, energy.beta, None, x.size(0))
    partial = grad_q.reshape(x.size(0), -1) @ energy.w_q.reshape(-1, 8) + hopfield_grad(
        g, energy.xi, "relu"
    )
    assert relative_error(partial, reference) > 1e-3


# --------------------------------------------------------------------------------------------
# Defined behaviour
# --------------------------------------------------------------------------------------------
def test_isolated_nodes_contribute_no_attention_energy():
    conv = make_conv()
    x = torch.randn(5, 8, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1], [1, 0]])  # nodes 2, 3, 4 have no in-neighbours
    per_node = conv.node_energy(x, edge_index)
    assert torch.isfinite(per_node).all()
    g = conv.norm(x)
    from et_graph.energy import hopfield_energy

    assert torch.allclose(per_node[2:], hopfield_energy(g, conv.xi, "relu")[2:])
    assert torch.isfinite(conv(x, edge_index)).all()


def test_self_loops_are_ignored_and_duplicates_count_twice():
    conv = make_conv()
    x = torch.randn(4, 8, dtype=torch.float64)
    edge_index = torch.tensor([[1, 2, 3], [0, 0, 0]])
    with_loops = torch.cat([edge_index, torch.tensor([[0, 1], [0, 1]])], dim=1)
    assert torch.allclose(conv.energy(x, edge_index), conv.energy(x, with_loops))
    assert torch.allclose(conv(x, edge_index), conv(x, with_loops))
    duplicated = torch.cat([edge_index, torch.tensor([[1], [0]])], dim=1)
    assert not torch.allclose(conv.energy(x, edge_index), conv.energy(x, duplicated))
    # A duplicate is the same as doubling that edge's weight inside the log-sum-exp sum:
    # log(2 e^a + e^b + e^c) with the edge listed twice.
    k, q = conv.energy_fn.keys_queries(conv.norm(x))
    logits = conv.beta * (k[[1, 1, 2, 3]] * q[[0, 0, 0, 0]]).sum(-1)
    expected_att = -(torch.logsumexp(logits, dim=0) / conv.beta).sum()
    edges = conv.energy_fn.edges(x, duplicated)
    from et_graph.energy import attention_energy

    got = attention_energy(k, q, edges.src, edges.dst, conv.beta, None, 4).sum()
    assert torch.allclose(got, expected_att)


def test_empty_graph_returns_empty_tensor():
    conv = make_conv()
    x = torch.empty(0, 8, dtype=torch.float64)
    edge_index = torch.empty(2, 0, dtype=torch.long)
    out = conv(x, edge_index)
    assert out.shape == (0, 8)
    out, energies = conv(x, edge_index, return_energy=True)
    assert energies.shape == (conv.steps + 1,) and torch.all(energies == 0)
    assert conv.node_energy(x, edge_index).shape == (0,)


def test_nodes_without_edges_at_all():
    conv = make_conv()
    x = torch.randn(6, 8, dtype=torch.float64)
    edge_index = torch.empty(2, 0, dtype=torch.long)
    out = conv(x, edge_index)
    assert torch.isfinite(out).all()
    # Only the Hopfield term drives them.
    conv.grad = "autograd"
    assert (
        relative_error(conv.energy_grad(x, edge_index), autograd_reference(conv, x, edge_index))
        < 1e-8
    )


def test_node_energy_sums_to_total():
    conv = make_conv(hopfield="softmax")
    x, edge_index = awkward_graph()
    assert torch.allclose(conv.node_energy(x, edge_index).sum(), conv.energy(x, edge_index))


# --------------------------------------------------------------------------------------------
# 2. The energy never increases along the dynamics for small alpha (property-based)
# --------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(
    num_nodes=st.integers(1, 15),
    density=st.floats(0.0, 4.0),
    heads=st.integers(1, 3),
    hopfield=st.sampled_from(["relu", "softmax"]),
    weighted=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_energy_never_increases(num_nodes, density, heads, hopfield, weighted, seed):
    gen = torch.Generator().manual_seed(seed)
    num_edges = int(density * num_nodes)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    edge_weight = (
        torch.rand(num_edges, heads, generator=gen, dtype=torch.float64) if weighted else None
    )
    torch.manual_seed(seed)
    conv = ETConv(6, heads=heads, head_dim=3, steps=12, alpha=0.01, hopfield=hopfield).double()
    x = torch.randn(num_nodes, 6, generator=gen, dtype=torch.float64)
    _, energies = conv(x, edge_index, edge_weight, return_energy=True)
    scale = energies.abs().max().clamp_min(1.0)
    assert (energies.diff() <= 1e-10 * scale).all(), energies


def test_ascent_increases_the_energy():
    """The descent check is not vacuous: stepping up the gradient raises the energy."""
    torch.manual_seed(0)
    conv = ETConv(6, heads=2, head_dim=3).double()
    x = torch.randn(20, 6, dtype=torch.float64)
    edge_index = torch.randint(0, 20, (2, 80))
    energies = [conv.energy(x, edge_index)]
    for _ in range(5):  # alpha must be positive, so the ascent is written out here
        x = x + 0.01 * conv.energy_grad(x, edge_index)
        energies.append(conv.energy(x, edge_index))
    assert (torch.stack(energies).diff() > 0).any()


# --------------------------------------------------------------------------------------------
# 3. Permutation equivariance; 4. dense == sparse on a complete graph
# --------------------------------------------------------------------------------------------
def test_permuting_nodes_permutes_the_output():
    conv = make_conv()
    x, edge_index = awkward_graph()
    perm = torch.randperm(x.size(0), generator=torch.Generator().manual_seed(5))
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel())
    out = conv(x, edge_index)
    out_perm = conv(x[perm], inverse[edge_index])
    assert torch.allclose(out_perm, out[perm], atol=1e-12)
    assert torch.allclose(conv.energy(x[perm], inverse[edge_index]), conv.energy(x, edge_index))


def complete_graph(num_nodes: int) -> torch.Tensor:
    index = torch.arange(num_nodes)
    src, dst = torch.meshgrid(index, index, indexing="ij")
    keep = src != dst
    return torch.stack([src[keep], dst[keep]])


@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
def test_dense_equals_sparse_on_complete_graph(hopfield):
    conv = make_conv(hopfield=hopfield, steps=3)
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    edge_index = complete_graph(7)
    dense, dense_energy = conv.forward_dense(x, return_energy=True)
    for b in range(2):
        sparse, sparse_energy = conv(x[b], edge_index, return_energy=True)
        assert torch.allclose(dense[b], sparse, atol=1e-12)
        assert torch.allclose(dense_energy[b], sparse_energy, atol=1e-10)


def test_dense_edge_weight_and_mask_match_sparse():
    conv = make_conv()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    mask = torch.rand(1, 6, 6, generator=torch.Generator().manual_seed(0)) > 0.4
    weight = torch.randn(1, 3, 6, 6, dtype=torch.float64)
    dst, src = mask[0].nonzero().t()  # mask[b, C, B]: C attends to B
    keep = src != dst
    src, dst = src[keep], dst[keep]
    sparse_weight = weight[0][:, dst, src].t()
    dense = conv.forward_dense(x, mask=mask, edge_weight=weight)
    sparse = conv(x[0], torch.stack([src, dst]), sparse_weight)
    assert torch.allclose(dense[0], sparse, atol=1e-12)


# --------------------------------------------------------------------------------------------
# edge_index vs torch sparse (CSR/CSC/COO) vs SparseTensor
# --------------------------------------------------------------------------------------------
def test_sparse_adjacency_inputs_give_the_same_result():
    """A sparse matrix cannot hold duplicate edges (they coalesce into a value of 2, which is
    then an edge weight), so parity is checked on a coalesced graph, as PyG's tests do."""
    from torch_geometric.utils import coalesce

    conv = make_conv()
    x, edge_index = awkward_graph()
    edge_index = coalesce(edge_index)
    n = x.size(0)
    expected = conv(x, edge_index)
    # PyG convention: the sparse input is the transposed adjacency (rows are destinations).
    for to_sparse in (to_torch_csr_tensor, to_torch_csc_tensor, to_torch_coo_tensor):
        adj = to_sparse(edge_index, size=(n, n))
        assert torch.allclose(conv(x, adj.t()), expected, atol=1e-12)
    assert torch.allclose(
        conv.energy(x, to_torch_csr_tensor(edge_index, size=(n, n)).t()),
        conv.energy(x, edge_index),
    )


def test_sparse_tensor_input_when_torch_sparse_is_installed():
    torch_sparse = pytest.importorskip("torch_sparse")
    conv = make_conv()
    x, edge_index = awkward_graph()
    n = x.size(0)
    adj = torch_sparse.SparseTensor.from_edge_index(edge_index, sparse_sizes=(n, n))
    assert torch.allclose(conv(x, adj.t()), conv(x, edge_index), atol=1e-12)


def test_sparse_values_act_as_edge_weights():
    from torch_geometric.utils import coalesce

    conv = make_conv()
    x, edge_index = awkward_graph()
    edge_index = coalesce(edge_index)
    n = x.size(0)
    weight = torch.rand(edge_index.size(1), dtype=torch.float64) + 0.5
    adj = torch.sparse_coo_tensor(edge_index.flip(0), weight, (n, n))
    assert torch.allclose(conv(x, adj), conv(x, edge_index, weight), atol=1e-12)
    # Learnable weights that start at 1 keep their gradient (a layer audit: all-ones values were
    # read as a plain adjacency and dropped, gradient and all).
    ones = torch.ones(edge_index.size(1), dtype=torch.float64, requires_grad=True)
    conv(x, torch.sparse_coo_tensor(edge_index.flip(0), ones, (n, n))).square().sum().backward()
    as_weights = ones.detach().clone().requires_grad_(True)
    conv(x, edge_index, as_weights).square().sum().backward()
    assert ones.grad is not None and torch.allclose(ones.grad, as_weights.grad, atol=1e-12)


def test_uncoalesced_coo_input_is_read_as_its_matrix_and_left_as_it_was():
    """PyG's to_edge_index flags an uncoalesced COO tensor coalesced in place; the caller's
    tensor would then convert to a wrong CSR matrix afterwards. The layer reads it as torch
    does, as its coalesced sum, and the values keep their gradient."""
    conv = make_conv()
    x, edge_index = awkward_graph()  # with repeated edges, in no sorted order
    n = x.size(0)
    weight = (torch.rand(edge_index.size(1), dtype=torch.float64) + 0.5).requires_grad_(True)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), weight, (n, n))
    assert not adj.is_coalesced()
    csr_before = adj.detach().to_sparse_csr()
    out = conv(x, adj)
    assert not adj.is_coalesced()
    csr_after = adj.detach().to_sparse_csr()
    assert torch.equal(csr_before.crow_indices(), csr_after.crow_indices())
    assert torch.equal(csr_before.values(), csr_after.values())
    matrix = adj.detach().coalesce()
    expected = conv(x, matrix.indices().flip(0), matrix.values())
    assert torch.allclose(out, expected, atol=1e-12)
    out.pow(2).sum().backward()
    assert weight.grad is not None and weight.grad.abs().sum() > 0


# --------------------------------------------------------------------------------------------
# 5. Gradients reach every parameter
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("grad", ["analytic", "autograd"])
def test_gradients_reach_every_parameter(grad):
    conv = make_conv(grad=grad, hopfield="softmax")
    x, edge_index = awkward_graph()
    weight = torch.rand(edge_index.size(1), 3, dtype=torch.float64, requires_grad=True)
    conv(x.requires_grad_(True), edge_index, weight).pow(2).sum().backward()
    names = {
        f"energy_fn.{name}"
        for name in ("norm.log_gamma", "norm.delta", "w_k", "w_q", "xi", "log_beta")
    }
    params = dict(conv.named_parameters())
    assert set(params) == names
    for name in names:
        assert params[name].grad is not None and params[name].grad.abs().sum() > 0, name
    assert weight.grad is not None and weight.grad.abs().sum() > 0
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_analytic_and_autograd_training_gradients_agree():
    conv = make_conv(hopfield="softmax", steps=2)
    reference = copy.deepcopy(conv)
    reference.grad = "autograd"
    x, edge_index = awkward_graph()
    weight = torch.rand(edge_index.size(1), 3, dtype=torch.float64)
    for module in (conv, reference):
        module(x, edge_index, weight).sin().sum().backward()
    for (name, p), (_, r) in zip(conv.named_parameters(), reference.named_parameters()):
        assert relative_error(p.grad, r.grad) < 1e-8, name


# --------------------------------------------------------------------------------------------
# Noise, repr, reset, explain hooks
# --------------------------------------------------------------------------------------------
def test_noise_only_in_training():
    conv = make_conv(noise_std=0.5)
    x, edge_index = awkward_graph()
    conv.eval()
    assert torch.equal(conv(x, edge_index), conv(x, edge_index))
    conv.train()
    assert not torch.allclose(conv(x, edge_index), conv(x, edge_index))
    quiet = make_conv(noise_std=0.0).train()
    assert torch.equal(quiet(x, edge_index), quiet(x, edge_index))


def test_repr_and_reset_parameters():
    conv = ETConv(16, heads=2, head_dim=8, steps=3)
    assert repr(conv) == (
        "ETConv(16, heads=2, head_dim=8, hopfield_dim=64, steps=3, alpha=0.1, hopfield='relu')"
    )
    # settings away from their defaults are shown too
    assert repr(ETConv(16, noise_std=0.1, coupling=True, grad="autograd", cached=True)).endswith(
        "hopfield='relu', noise_std=0.1, coupling=True, grad='autograd', cached=True)")
    before = conv.w_q.detach().clone()
    conv.reset_parameters()
    assert not torch.equal(before, conv.w_q)
    assert torch.allclose(conv.beta, torch.full((2,), 8**-0.5))


def test_propagate_path_is_seen_by_message_hooks():
    conv = make_conv()
    conv.fused = False
    x, edge_index = awkward_graph()
    seen = []
    conv.register_message_forward_hook(lambda module, inputs, out: seen.append(out.shape))
    conv(x, edge_index)
    # two aggregations (to destinations and to sources) per step
    assert len(seen) == 2 * conv.steps


def test_message_hooks_on_the_default_fused_layer_see_the_attention():
    # (PyG-convention audit) the fused kernel never called propagate, so a message hook on a
    # default layer never fired and AttentionExplainer found no coefficient; with a hook the
    # layer now runs the reference path: the same output, every step's messages seen
    conv = make_conv(steps=2)
    assert conv.fused
    x, edge_index = awkward_graph()
    before = conv(x, edge_index)
    seen = []
    handle = conv.register_message_forward_hook(
        lambda module, inputs, out: seen.append(inputs[0]["alpha"]))
    torch.testing.assert_close(conv(x, edge_index), before, rtol=0, atol=1e-12)
    assert len(seen) == 2 * conv.steps
    # alpha is the softmax over each node's in-neighbours (self-loops carry zero), per head
    loops = edge_index[0] == edge_index[1]
    for alpha in seen:
        assert alpha.shape == (edge_index.size(1), conv.heads)
        assert torch.all(alpha[loops] == 0)
        totals = torch.zeros(x.size(0), conv.heads, dtype=alpha.dtype).index_add_(
            0, edge_index[1], alpha)
        receiving = torch.zeros(x.size(0), dtype=torch.bool)
        receiving[edge_index[1, ~loops]] = True
        torch.testing.assert_close(totals[receiving], torch.ones_like(totals[receiving]))
    handle.remove()
    seen.clear()
    conv(x, edge_index)
    assert not seen


def test_attention_explainer_reads_etconv_attention():
    from torch_geometric.explain import Explainer
    from torch_geometric.explain.algorithm import AttentionExplainer

    x, edge_index = awkward_graph()
    explainer = Explainer(
        model=ExplainedModel(), algorithm=AttentionExplainer(), explanation_type="model",
        edge_mask_type="object",
        model_config=dict(mode="multiclass_classification", return_type="raw",
                          task_level="node"))
    explanation = explainer(x.float(), edge_index, index=0)
    assert explanation.edge_mask.shape == (edge_index.size(1),)
    assert explanation.edge_mask.sum() > 0


def test_message_hooks_are_refused_on_the_autograd_path():
    conv = make_conv(grad="autograd")
    x, edge_index = awkward_graph()
    conv.register_message_forward_hook(lambda module, inputs, out: None)
    with pytest.raises(ValueError, match="message-level hooks"):
        conv(x, edge_index)


def test_explainer_runs_on_etconv():
    x, edge_index = awkward_graph()
    explainer = node_explainer(ExplainedModel())
    explanation = explainer(x.float(), edge_index, index=0)
    assert explanation.edge_mask.shape == (edge_index.size(1),)
    assert explanation.edge_mask.abs().sum() > 0


def test_an_explainer_mask_refuses_an_uncoalesced_adjacency():
    # (from an audit) the messages run over the coalesced entries: a mask in the caller's
    # order was misaligned, or failed PyG's bare size assertion when duplicates merged
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    conv = make_conv()
    x, edge_index = awkward_graph()
    n = x.size(0)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1),
                                  dtype=torch.float64), (n, n))
    set_masks(conv, torch.nn.Parameter(torch.ones(edge_index.size(1))), edge_index,
              apply_sigmoid=True)
    with pytest.raises(ValueError, match=r"adj\.coalesce\(\)"):
        conv(x, adj)
    clear_masks(conv)
    assert conv(x, adj).shape == x.shape  # outside an explanation it is read as its matrix


def test_a_stored_zero_in_a_sparse_adjacency_is_an_edge_of_weight_zero():
    # as documented: the stored entries are the edges, a 0 one stays in the softmax with
    # logit 0 (as edge_weight=0 does); dropping it (to_dense().to_sparse()) is another graph
    conv = make_conv()
    x, _ = awkward_graph()
    n = x.size(0)
    ei = torch.tensor([[0, 1, 0, 3], [2, 2, 3, 0]])
    w = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    adj = torch.sparse_coo_tensor(ei.flip(0), w, (n, n))
    torch.testing.assert_close(conv(x, adj), conv(x, ei, w), rtol=0, atol=1e-12)
    dropped = adj.to_dense().to_sparse()
    assert not torch.allclose(conv(x, dropped), conv(x, adj))


# --------------------------------------------------------------------------------------------
# 6. Bad input: clear ValueError naming the problem
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda x, e, w: (x.index_fill(0, torch.tensor([2]), float("nan")), e, w), "NaN or inf"),
        (lambda x, e, w: (x.index_fill(0, torch.tensor([2]), float("inf")), e, w), "NaN or inf"),
        (lambda x, e, w: (x, e.clone().index_fill_(1, torch.tensor([0]), 99), w), "node ids"),
        (lambda x, e, w: (x, e.clone().index_fill_(1, torch.tensor([0]), -1), w), "node ids"),
        (lambda x, e, w: (x, e.float(), w), "dtype"),
        (lambda x, e, w: (x, e.t(), w), "shape \\[2, E\\]"),
        (lambda x, e, w: (x, e[0], w), "shape \\[2, E\\]"),
        (lambda x, e, w: (x[:, :5], e, w), "channels=8"),
        (lambda x, e, w: (x[None], e, w), "2 dimensions"),
        (lambda x, e, w: (x, e, w[:-1]), "edge_weight"),
        (lambda x, e, w: (x, e, torch.ones(e.size(1), 2, dtype=torch.float64)), "heads=3"),
        (lambda x, e, w: (x, e, w.index_fill(0, torch.tensor([0]), float("nan"))), "edge_weight"),
    ],
)
def test_bad_input_raises_clear_errors(mutate, message):
    conv = make_conv()
    x, edge_index = awkward_graph()
    weight = torch.rand(edge_index.size(1), dtype=torch.float64)
    bad_x, bad_e, bad_w = mutate(x, edge_index, weight)
    for call in (conv, conv.energy, conv.energy_grad, conv.node_energy):
        with pytest.raises(ValueError, match=message):
            call(bad_x, bad_e, bad_w)


def test_bad_dense_input_raises_clear_errors():
    conv = make_conv()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="mask must be a bool"):
        conv.forward_dense(x, mask=torch.ones(2, 5, 5))
    with pytest.raises(ValueError, match="mask must have shape"):
        conv.forward_dense(x, mask=torch.ones(2, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="edge_weight"):
        conv.forward_dense(x, edge_weight=torch.ones(2, 3, 4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="channels=8"):
        conv.forward_dense(torch.randn(2, 5, 7, dtype=torch.float64))


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="hopfield"):
        ETConv(8, hopfield="tanh")
    with pytest.raises(ValueError, match="grad"):
        ETConv(8, grad="numeric")
    with pytest.raises(ValueError, match="steps"):
        ETConv(8, steps=-1)


# --------------------------------------------------------------------------------------------
# The energy LayerNorm is the gradient of a convex Lagrangian (why the dynamics descend)
# --------------------------------------------------------------------------------------------
def test_layer_norm_is_the_gradient_of_its_lagrangian_with_psd_jacobian():
    torch.manual_seed(3)
    norm = make_conv().norm
    norm.set_gamma(1.7)
    with torch.no_grad():
        norm.delta.normal_()
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(norm.lagrangian(x).sum(), x)
    assert torch.allclose(grad, norm(x), atol=1e-12)
    for token in x.detach():
        jacobian = torch.autograd.functional.jacobian(norm, token.unsqueeze(0)).reshape(8, 8)
        assert torch.allclose(jacobian, jacobian.t(), atol=1e-12)
        assert torch.linalg.eigvalsh(jacobian).min() > -1e-12


def test_autocast_leaves_the_descent_in_the_parameters_dtype():
    """Under ``torch.autocast`` the projections would run in bfloat16 and the closed form
    scatter them into float32 sums (an error before); the layers switch autocast off inside and
    compute exactly what they compute without it."""
    from et_graph.nn import RelationalETConv

    torch.manual_seed(0)
    x, edge_index = awkward_graph()
    x = x.float()
    conv = ETConv(8, heads=3, head_dim=4, steps=2)
    relational = RelationalETConv(8, 2, heads=3, head_dim=4, steps=2)
    edge_type = torch.arange(edge_index.size(1)) % 2
    calls = {
        "forward": lambda: conv(x, edge_index),
        "energy_grad": lambda: conv.energy_grad(x, edge_index),
        "energy": lambda: conv.energy(x, edge_index),
        "chunked": lambda: conv.eval().forward_chunked(x, edge_index, chunk_size=3),
        "dense": lambda: conv.forward_dense(x.unsqueeze(0)),
        "relational": lambda: relational(x, edge_index, edge_type),
    }
    for name, call in calls.items():
        expected = call()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = call()
            # bfloat16 tokens (from an autocast layer before) are upcast and returned as such
            low = conv(x.bfloat16(), edge_index) if name == "forward" else None
        assert got.dtype == torch.float32, name
        assert torch.equal(got, expected), name
        if low is not None:
            assert low.dtype == torch.bfloat16


def test_torch_func_grad_and_vmap_match_plain_autograd():
    """Under ``torch.func`` transforms the fused kernel (an autograd.Function over sparse CSR
    kernels, with a NumPy sort) cannot be traced; the layers then use the reference closed
    form, with the same values. The cached edge layout and RelationalETConv too."""
    from torch.func import grad, vmap

    from et_graph.nn import RelationalETConv

    conv = make_conv()
    x, edge_index = awkward_graph()
    loss = lambda t: conv(t, edge_index).pow(2).sum()  # noqa: E731
    x_in = x.clone().requires_grad_(True)
    loss(x_in).backward()
    assert relative_error(grad(loss)(x), x_in.grad) < 1e-12
    conv.cached = True
    conv(x, edge_index)  # the cache now holds a fused layout
    assert relative_error(grad(loss)(x), x_in.grad) < 1e-12
    stacked = torch.stack([x, 2 * x, -x])
    expected = torch.stack([conv(t, edge_index) for t in stacked])
    assert relative_error(vmap(lambda t: conv(t, edge_index))(stacked), expected) < 1e-12
    torch.manual_seed(0)
    relational = RelationalETConv(8, 2, heads=3, head_dim=4).double()
    edge_type = torch.arange(edge_index.size(1)) % 2
    x_in = x.clone().requires_grad_(True)
    relational(x_in, edge_index, edge_type).sum().backward()
    got = grad(lambda t: relational(t, edge_index, edge_type).sum())(x)
    assert relative_error(got, x_in.grad) < 1e-12


def test_overflow_inside_the_descent_is_an_error_not_nan_tokens():
    """Finite inputs whose intermediate values leave float32's range (features near 1e20:
    their variance overflows; weights near 1e30) gave NaN tokens silently; a float64 weight
    beyond float32's range became inf after the check; eps <= 0 or NaN was accepted."""
    torch.manual_seed(0)
    conv = ETConv(8, heads=2, head_dim=4, steps=2)
    x, edge_index = awkward_graph()
    x = x.float()
    for call in (lambda: conv(x * 1e20, edge_index),
                 lambda: conv.eval().forward_chunked(x * 1e20, edge_index, chunk_size=4),
                 lambda: conv.forward_dense(x.unsqueeze(0) * 1e20),  # was g = 0, silently
                 lambda: conv.node_energy(x * 1e20, edge_index)):
        with pytest.raises(ValueError, match="beyond 3.26e\\+18 in magnitude: the LayerNorm"):
            call()
    for call in (lambda: conv(x, edge_index, torch.full((edge_index.size(1),), 1e30)),
                 lambda: conv.forward_chunked(x, edge_index, torch.full(
                     (edge_index.size(1),), 1e30), chunk_size=4)):
        with pytest.raises(FloatingPointError, match="left the float32 range"):
            call()
    huge = torch.full((edge_index.size(1),), 1e39, dtype=torch.float64)
    with pytest.raises(ValueError, match="beyond the range of the layer's float32"):
        conv(x, edge_index, huge)
    assert torch.isfinite(conv.double()(x.double() * 1e20, edge_index)).all()  # float64: fine
    for eps in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="eps must be a positive finite number"):
            ETConv(8, eps=eps)
    import numpy as np

    assert ETConv(8, eps=np.float32(1e-5)).norm.eps == pytest.approx(1e-5)  # NumPy scalars too


def test_torchscript_is_refused_with_the_reason():
    """torch.jit.script failed on a wrapper's line in another file, and torch.jit.trace with
    'unordered_map::at' from inside the fused kernel."""
    conv = ETConv(8, heads=2, head_dim=4)
    x, edge_index = awkward_graph()
    with pytest.raises(NotImplementedError, match="does not support TorchScript.*torch.compile"):
        torch.jit.script(conv)
    with pytest.raises(NotImplementedError, match="does not support torch.jit.trace"):
        torch.jit.trace(conv, (x.float(), edge_index))
    # the relational layer failed with TorchScript's raw NotSupportedError, naming
    # et_energy.py; torch.export with a guard on an unbacked symbol from the input checks
    from et_graph.nn import RelationalETConv

    with pytest.raises(NotImplementedError, match="RelationalETConv does not support TorchScript"):
        torch.jit.script(RelationalETConv(8, 2, heads=2, head_dim=4))
    if hasattr(torch.compiler, "is_exporting"):  # torch >= 2.6 says it is exporting
        with pytest.raises(NotImplementedError, match="does not support torch.export"):
            torch.export.export(conv, (x.float(), edge_index), strict=False)


def test_sixteen_bit_layers_take_features_up_to_their_range():
    """The magnitude limit of a float16 layer is its range (32,752), not the square root of it:
    the LayerNorm forms the variance in float32 (the formula too, which gave g = 0 beyond 256)."""
    torch.manual_seed(0)
    x, edge_index = awkward_graph()
    x = x.float() * 300
    conv = ETConv(8, heads=2, head_dim=4, steps=1)
    half = copy.deepcopy(conv).half()
    want = conv.norm(x)
    assert relative_error(half.norm(x.half()).float(), want) < 1e-2
    assert relative_error(half(x.half(), edge_index).float(), conv(x, edge_index)) < 1e-2
    dense = half.forward_dense(x_dense=x.half().unsqueeze(0))  # by keyword, too
    assert relative_error(dense.float(), conv.forward_dense(x.unsqueeze(0))) < 1e-2
    with pytest.raises(ValueError, match="beyond 3.28e\\+04 in magnitude"):
        half(torch.full_like(x, 40000.0).half(), edge_index)


def test_each_head_reads_its_own_inverse_temperature():
    # (a mutation audit: every head reading the mean of the betas passed, as they start equal)
    import math

    conv = ETConv(8, heads=2, head_dim=4)
    with torch.no_grad():
        conv.energy_fn.log_beta.copy_(torch.tensor([math.log(0.5), math.log(2.0)]))
    torch.testing.assert_close(conv.energy_fn.beta, torch.tensor([0.5, 2.0]))
    # (two or more in-neighbours each: over one edge the softmax is 1 whatever beta)
    x = torch.randn(6, 8)
    edge_index = torch.tensor([[i, j] for i in range(6) for j in range(6) if i != j]).t()
    swapped = copy.deepcopy(conv)
    with torch.no_grad():
        swapped.energy_fn.log_beta.copy_(conv.energy_fn.log_beta.flip(0))
    assert not torch.allclose(conv(x, edge_index), swapped(x, edge_index))


def test_training_noise_has_the_langevin_scale():
    # x <- x - alpha dE/dg + sqrt(alpha) noise_std eps (a mutation audit: alpha noise_std passed)
    torch.manual_seed(0)
    conv = ETConv(16, heads=2, head_dim=4, steps=1, alpha=0.04, noise_std=1.0)
    x, edge_index = torch.randn(4000, 16), torch.randint(0, 4000, (2, 8000))
    clean = conv.eval()(x, edge_index)
    noisy = conv.train()(x, edge_index)
    assert (noisy - clean).std().item() == pytest.approx(0.2, rel=0.05)


def test_a_sixteen_bit_layers_total_energy_is_summed_in_float32():
    """From a numerics audit: a float16 layer's total energy of 2,000 nodes passed 65504 and came
    back as -inf (every node's share finite), and return_energy blamed beta for it. Totals of
    16-bit layers are summed and returned in float32."""
    torch.manual_seed(0)
    conv = ETConv(32, heads=2, head_dim=8, steps=2)
    x, edge_index = torch.randn(2000, 32), torch.randint(0, 2000, (2, 20000))
    want = conv.energy(x, edge_index)
    half = copy.deepcopy(conv).half()
    total = half.energy(x.half(), edge_index)
    assert total.dtype == torch.float32 and abs(want.item()) > 65504
    assert relative_error(total, want) < 1e-3
    _, trace = half(x.half(), edge_index, return_energy=True)
    assert trace.dtype == torch.float32 and bool(torch.isfinite(trace).all())
    per_graph = half.energy(x.half(), edge_index, batch=torch.zeros(2000, dtype=torch.long))
    assert per_graph.dtype == torch.float32 and relative_error(per_graph[0], want) < 1e-3
    # the dense path too (a review: its totals still summed in float16 and blamed beta)
    dense = torch.randn(2, 3000, 32)
    dense_want = conv.dense_energy(dense)
    dense_total = half.dense_energy(dense.half())
    assert dense_total.dtype == torch.float32 and dense_want.abs().min() > 65504
    assert relative_error(dense_total, dense_want) < 1e-2
    _, dense_trace = half.forward_dense(dense.half(), return_energy=True)
    assert dense_trace.dtype == torch.float32 and bool(torch.isfinite(dense_trace).all())


@pytest.mark.parametrize("relational", [False, True])
def test_a_cache_hit_still_checks_the_devices(relational, monkeypatch):
    """From a device audit: a cached layer's cache hit skipped the only device check (a model
    moved to the CPU mixed its tokens with the kept GPU edges; tests/test_cuda.py has the GPU
    case). Every call, cached or not, checks the devices without reading a value."""
    from et_graph.nn import RelationalETConv
    from et_graph.nn.conv import et_conv, relational_et_conv

    module = relational_et_conv if relational else et_conv
    checked = []
    real = module.check_same_device
    monkeypatch.setattr(module, "check_same_device",
                        lambda x, **tensors: checked.append(sorted(tensors)) or real(x, **tensors))
    x, edge_index = awkward_graph()
    x = x.float()
    extra = (torch.arange(edge_index.size(1)) % 2,) if relational else ()
    conv = (RelationalETConv(8, 2, heads=2, head_dim=4, cached=True) if relational
            else ETConv(8, heads=2, head_dim=4, cached=True))
    conv(x, edge_index, *extra)
    conv(x, edge_index, *extra)  # a cache hit
    assert len(checked) == 2


def test_a_device_without_the_sparse_kernels_takes_the_reference_closed_form(monkeypatch):
    """From a portability audit: on Apple's mps, which has no CSR tensors, sampled_addmm or
    segment_reduce, every ET model failed at its first call. There the layers take the
    reference closed form (and the anomaly network PyG's messages). The CPU stands in for such
    a device here: the sparse kernels raise if reached, and the results equal the fused path's."""
    import et_graph.fused as fused_module
    from et_graph.nn import ETGraphModel, RelationalETConv
    from et_graph.nn.models import ETAnomalyNet
    from et_graph.nn.models import anomaly as anomaly_model

    torch.manual_seed(0)
    x, edge_index = awkward_graph()
    edge_type = torch.arange(edge_index.size(1)) % 2
    batch = torch.zeros(x.size(0), dtype=torch.long)
    conv = ETConv(8, heads=2, head_dim=4, steps=2, cached=True).double()
    relational = RelationalETConv(8, 2, heads=2, head_dim=4, steps=2).double()
    net = ETAnomalyNet(8, 16, heads=2, head_dim=4, steps=2, readout="ego_two_hop").double()
    graph_model = ETGraphModel(8, 2, hidden_channels=16, blocks=2, steps=1, heads=2,
                               head_dim=4, pe_dim=0).double().eval()

    def outputs():
        inputs = x.clone().requires_grad_()
        out = [conv(inputs, edge_index), relational(inputs, edge_index, edge_type),
               net(inputs, edge_index), graph_model(inputs, edge_index, batch)]
        sum(o.sum() for o in out).backward()
        g = conv.energy_fn.norm(x)
        split = conv.energy_fn.attention_and_hopfield_grads(g, conv.energy_fn.edges(x, edge_index))
        return [*out, inputs.grad, *split]

    want = outputs()

    def unavailable(*args, **kwargs):
        raise AssertionError("a sparse kernel ran on a device without it")

    monkeypatch.setattr(fused_module, "SPARSE_KERNEL_DEVICES", ("cuda",))
    monkeypatch.setattr(fused_module._FusedAttentionGrad, "apply", unavailable)
    monkeypatch.setattr(anomaly_model, "_sparse_product", unavailable)
    for a, b in zip(outputs(), want):  # (the cached layer's second call: its cache hit)
        assert relative_error(a, b) < 1e-10
