"""RelationalETConv: the closed form of the summed per-relation energy against autograd, parity
with ETConv, descent, training gradients and bad edge types."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import relative_error
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.utils import to_torch_csr_tensor

from et_graph import energy as E
from et_graph.nn import ETConv, RelationalETConv

RELATIONS = 3


def make_conv(num_relations=RELATIONS, heads=2, hopfield="relu", **kwargs) -> RelationalETConv:
    torch.manual_seed(0)
    conv = RelationalETConv(8, num_relations, heads=heads, head_dim=4, hopfield=hopfield,
                            **kwargs)
    return conv.double()


def typed_graph(num_nodes=14, num_edges=60, num_relations=RELATIONS, seed=1):
    """Random typed graph with self-loops, duplicate edges (also across relations), two isolated
    nodes, and the last relation left without any edge when there are 3 or more relations."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes - 2, (2, num_edges), generator=gen)
    used = max(num_relations - 1, 1) if num_relations >= 3 else num_relations
    edge_type = torch.randint(0, used, (num_edges,), generator=gen)
    # A self-loop, a duplicate within relation 0 and the same pair in relations 0 and 1.
    edge_index = torch.cat([edge_index, torch.tensor([[0, 3, 3, 3], [0, 5, 5, 5]])], dim=1)
    edge_type = torch.cat([edge_type, torch.tensor([0, 0, 0, min(1, num_relations - 1)])])
    x = torch.randn(num_nodes, 8, generator=gen, dtype=torch.float64)
    return x, edge_index, edge_type


def autograd_reference(conv: RelationalETConv, x, edge_index, edge_type) -> torch.Tensor:
    """``torch.autograd.grad`` of the energy itself (:meth:`node_energy_of_g`)."""
    g = conv.norm(x).detach().requires_grad_(True)
    edges = conv.edges(x, edge_index, edge_type)
    return torch.autograd.grad(conv.node_energy_of_g(g, edges).sum(), g)[0]


# --------------------------------------------------------------------------------------------
# 1. The closed form equals autograd of the energy (float64)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
@pytest.mark.parametrize("fused", [True, False])
def test_closed_form_matches_autograd(hopfield, fused):
    conv = make_conv(hopfield=hopfield)
    conv.fused = fused
    x, edge_index, edge_type = typed_graph()
    reference = autograd_reference(conv, x, edge_index, edge_type)
    assert relative_error(conv.energy_grad(x, edge_index, edge_type), reference) < 1e-8
    conv.grad = "autograd"
    assert relative_error(conv.energy_grad(x, edge_index, edge_type), reference) < 1e-8


def test_a_wrong_closed_form_would_be_caught():
    """The parity check can fail: giving every relation the keys and queries of relation 0
    (a shared attention instead of per-relation ones) breaks it."""
    conv = make_conv()
    x, edge_index, edge_type = typed_graph()
    reference = autograd_reference(conv, x, edge_index, edge_type)
    shared = copy.deepcopy(conv)
    with torch.no_grad():
        for name in ("w_k", "w_q"):
            weight = getattr(shared.energy_fn, name)
            weight.copy_(weight[: conv.heads].repeat(RELATIONS, 1, 1))
    g = shared.norm(x)
    edges = shared.edges(x, edge_index, edge_type)
    assert relative_error(shared.grad_of_g(g, edges), reference) > 1e-3


def test_energy_is_the_sum_of_the_per_relation_energies():
    """E = sum_r E_ATT^r + E_HN: each relation's attention energy is an ETConv (no memories)
    with that relation's maps on that relation's edges."""
    conv = make_conv()
    x, edge_index, edge_type = typed_graph()
    hopfield = E.hopfield_energy(conv.norm(x), conv.xi, "relu")
    total = hopfield.clone()
    for r in range(RELATIONS):
        single = ETConv(8, heads=conv.heads, head_dim=4, hopfield_dim=0).double()
        with torch.no_grad():
            single.energy_fn.w_k.copy_(conv.w_k[r])
            single.energy_fn.w_q.copy_(conv.w_q[r])
            single.energy_fn.log_beta.copy_(conv.beta[r].log())
            single.energy_fn.norm.load_state_dict(conv.norm.state_dict())
        total = total + single.node_energy(x, edge_index[:, edge_type == r])
    assert torch.allclose(conv.node_energy(x, edge_index, edge_type), total, atol=1e-12)
    # The relation without edges contributes nothing; the relations with edges do.
    assert (conv.node_energy(x, edge_index, edge_type) - hopfield).abs().max() > 1e-3


# --------------------------------------------------------------------------------------------
# 2. One relation is ETConv with the same weights
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
def test_one_relation_equals_etconv(hopfield):
    torch.manual_seed(3)
    reference = ETConv(8, heads=2, head_dim=4, steps=3, alpha=0.2, hopfield=hopfield).double()
    conv = RelationalETConv(8, 1, heads=2, head_dim=4, steps=3, alpha=0.2,
                            hopfield=hopfield).double()
    conv.energy_fn.load_state_dict(reference.energy_fn.state_dict())
    x, edge_index, _ = typed_graph(num_relations=1)
    edge_type = torch.zeros(edge_index.size(1), dtype=torch.long)
    out, energies = conv(x, edge_index, edge_type, return_energy=True)
    expected, expected_energies = reference(x, edge_index, return_energy=True)
    assert torch.allclose(out, expected, atol=1e-12)
    assert torch.allclose(energies, expected_energies, atol=1e-12)
    assert torch.allclose(conv.energy_grad(x, edge_index, edge_type),
                          reference.energy_grad(x, edge_index), atol=1e-12)


# --------------------------------------------------------------------------------------------
# 3. Descent
# --------------------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(
    num_nodes=st.integers(1, 12),
    density=st.floats(0.0, 4.0),
    num_relations=st.integers(1, 3),
    hopfield=st.sampled_from(["relu", "softmax"]),
    seed=st.integers(0, 10_000),
)
def test_energy_never_increases(num_nodes, density, num_relations, hopfield, seed):
    gen = torch.Generator().manual_seed(seed)
    num_edges = int(density * num_nodes)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    edge_type = torch.randint(0, num_relations, (num_edges,), generator=gen)
    torch.manual_seed(seed)
    conv = RelationalETConv(6, num_relations, heads=2, head_dim=3, steps=10, alpha=0.01,
                            hopfield=hopfield).double()
    x = torch.randn(num_nodes, 6, generator=gen, dtype=torch.float64)
    _, energies = conv(x, edge_index, edge_type, return_energy=True)
    scale = energies.abs().max().clamp_min(1.0)
    assert (energies.diff() <= 1e-10 * scale).all(), energies


def test_ascent_increases_the_energy():
    """The descent check is not vacuous: stepping up the gradient raises the energy."""
    conv = make_conv()
    x, edge_index, edge_type = typed_graph()
    energies = [conv.energy(x, edge_index, edge_type)]
    for _ in range(5):
        x = x + 0.01 * conv.energy_grad(x, edge_index, edge_type)
        energies.append(conv.energy(x, edge_index, edge_type))
    assert (torch.stack(energies).diff() > 0).all()


# --------------------------------------------------------------------------------------------
# 4. Training gradients, defined behaviour
# --------------------------------------------------------------------------------------------
def test_analytic_and_autograd_training_gradients_agree():
    conv = make_conv(hopfield="softmax", steps=2)
    reference = copy.deepcopy(conv)
    reference.grad = "autograd"
    x, edge_index, edge_type = typed_graph()
    for module in (conv, reference):
        module(x, edge_index, edge_type).sin().sum().backward()
    for (name, p), (_, r) in zip(conv.named_parameters(), reference.named_parameters()):
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        assert relative_error(p.grad, r.grad) < 1e-8, name


def test_node_energy_batch_and_edge_order():
    conv = make_conv()
    x, edge_index, edge_type = typed_graph()
    per_node = conv.node_energy(x, edge_index, edge_type)
    assert torch.allclose(per_node.sum(), conv.energy(x, edge_index, edge_type))
    batch = (torch.arange(x.size(0)) >= 7).long()
    per_graph = conv.energy(x, edge_index, edge_type, batch=batch)
    assert torch.allclose(per_graph, torch.stack([per_node[:7].sum(), per_node[7:].sum()]))
    order = torch.randperm(edge_index.size(1), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(conv(x, edge_index[:, order], edge_type[order]),
                          conv(x, edge_index, edge_type), atol=1e-12)
    # Relation ids matter: moving every edge to relation 0 changes the result.
    assert not torch.allclose(conv(x, edge_index, torch.zeros_like(edge_type)),
                              conv(x, edge_index, edge_type))


def test_float32_and_lower_precision_inputs():
    torch.manual_seed(0)
    conv = RelationalETConv(8, RELATIONS, heads=2, head_dim=4)
    x, edge_index, edge_type = typed_graph()
    out = conv(x.float(), edge_index, edge_type)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert conv(x.bfloat16(), edge_index, edge_type).dtype == torch.bfloat16
    # energies stay in the parameters' dtype (a float16 total overflows past 65504)
    assert conv.energy(x.half(), edge_index, edge_type).dtype == torch.float32
    with pytest.raises(ValueError, match="float64"):
        conv(x, edge_index, edge_type)


# --------------------------------------------------------------------------------------------
# 5. Bad input
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.float(), "integer relation ids"),
        (lambda t: t > 0, "integer relation ids"),
        (lambda t: t[:-1], r"shape \[E\]"),
        (lambda t: t.view(-1, 1), r"shape \[E\]"),
        (lambda t: t + RELATIONS, "num_relations=3"),
        (lambda t: t - 1, "num_relations=3"),
        (lambda t: t.tolist(), "torch.Tensor"),
    ],
)
def test_bad_edge_type_raises(mutate, message):
    conv = make_conv()
    x, edge_index, edge_type = typed_graph()
    with pytest.raises(ValueError, match=message):
        conv(x, edge_index, mutate(edge_type))
    with pytest.raises(ValueError, match=message):
        conv.energy(x, edge_index, mutate(edge_type))


def test_sparse_adjacency_and_bad_arguments_raise():
    conv = make_conv()
    x, edge_index, edge_type = typed_graph()
    adj = to_torch_csr_tensor(edge_index.flip(0), size=(x.size(0), x.size(0)))
    with pytest.raises(ValueError, match="sparse adjacency"):
        conv(x, adj, edge_type)
    with pytest.raises(ValueError, match="node ids"):
        conv(x, edge_index + x.size(0), edge_type)
    for kwargs, message in [({"num_relations": 0}, "num_relations"),
                            ({"num_relations": True}, "num_relations"),
                            ({"heads": 0}, "heads"), ({"alpha": 0.0}, "alpha"),
                            ({"grad": "closed"}, "grad"), ({"noise_std": -1.0}, "noise_std")]:
        arguments = {"num_relations": 2, **kwargs}
        with pytest.raises(ValueError, match=message):
            RelationalETConv(8, **arguments)


def test_cached_relational_edges_give_the_uncached_values_and_follow_changes():
    torch.manual_seed(0)
    plain = RelationalETConv(8, 3, heads=2, head_dim=4, steps=2).double()
    cached = RelationalETConv(8, 3, heads=2, head_dim=4, steps=2, cached=True).double()
    cached.load_state_dict(plain.state_dict())
    edge_index = torch.randint(0, 12, (2, 60))
    edge_type = torch.randint(0, 3, (60,))
    for _ in range(2):
        x = torch.randn(12, 8, dtype=torch.float64)
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        out_a, out_b = plain(xa, edge_index, edge_type), cached(xb, edge_index, edge_type)
        assert torch.equal(out_a, out_b)
        assert torch.equal(torch.autograd.grad(out_a.sum(), xa)[0],
                           torch.autograd.grad(out_b.sum(), xb)[0])
    kept = cached._edge_cache._entry[2]
    cached(x, edge_index, edge_type)
    assert cached._edge_cache._entry[2] is kept  # same tensors: reused
    edge_type[:10] = (edge_type[:10] + 1) % 3  # an in-place change of the relations
    assert torch.equal(cached(x, edge_index, edge_type), plain(x, edge_index, edge_type))
    assert cached._edge_cache._entry[2] is not kept


@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
def test_one_relation_gives_etconv_bit_for_bit_in_float32(hopfield):
    """The docs say one relation gives exactly ETConv; in float32 the tokens differed by about
    5e-7 (the two layers rounded the step x - alpha * grad differently), with noise too."""
    torch.manual_seed(3)
    reference = ETConv(8, heads=2, head_dim=4, steps=3, alpha=0.2, hopfield=hopfield,
                       noise_std=0.1)
    conv = RelationalETConv(8, 1, heads=2, head_dim=4, steps=3, alpha=0.2, hopfield=hopfield,
                            noise_std=0.1)
    conv.energy_fn.load_state_dict(reference.energy_fn.state_dict())
    x, edge_index, _ = typed_graph(num_relations=1)
    x = x.float()
    edge_type = torch.zeros(edge_index.size(1), dtype=torch.long)
    for training in (False, True):
        reference.train(training)
        conv.train(training)
        torch.manual_seed(5)
        got = conv(x, edge_index, edge_type)
        torch.manual_seed(5)
        assert torch.equal(got, reference(x, edge_index))


def test_relations_given_as_a_dict_or_list_name_the_layout():
    """A dict or list of per-relation edge_index got only 'must be a torch.Tensor, got dict'."""
    conv = make_conv()
    x, edge_index, edge_type = typed_graph()
    for wrong in ({"rur": edge_index}, [edge_index, edge_index]):
        with pytest.raises(ValueError, match=r"torch.cat\(list, dim=1\).*edge_type"):
            conv(x.float(), wrong, edge_type)


# --------------------------------------------------------------------------------------------
# Explainers and message hooks (a MessagePassing since session 63)
# --------------------------------------------------------------------------------------------
def test_message_hooks_see_every_relations_attention_and_change_nothing():
    conv = make_conv(steps=2)
    x, edge_index, edge_type = typed_graph()
    fused = conv(x, edge_index, edge_type)
    seen = []
    handle = conv.register_message_forward_hook(
        lambda module, inputs, out: seen.append(inputs[0]["alpha"]))
    torch.testing.assert_close(conv(x, edge_index, edge_type), fused, rtol=0, atol=1e-12)
    assert len(seen) == 2 * conv.steps  # the keys' and the queries' messages, per step
    loops = edge_index[0] == edge_index[1]
    for alpha in seen:
        assert alpha.shape == (edge_index.size(1), RELATIONS * conv.heads)
        assert torch.all(alpha[loops] == 0)
        for relation in range(RELATIONS):
            part = E.relation_heads(relation, conv.heads)
            mine = (edge_type == relation) & ~loops
            # zero in the other relations' heads; a softmax over each node's in-edges of
            # this relation in its own
            assert torch.all(alpha[~mine][:, part] == 0)
            totals = torch.zeros(x.size(0), conv.heads, dtype=alpha.dtype).index_add_(
                0, edge_index[1, mine], alpha[mine][:, part])
            receiving = torch.zeros(x.size(0), dtype=torch.bool)
            receiving[edge_index[1, mine]] = True
            torch.testing.assert_close(totals[receiving], torch.ones_like(totals[receiving]))
    handle.remove()
    seen.clear()
    conv(x, edge_index, edge_type)
    assert not seen


def test_an_edge_mask_lines_up_with_the_callers_edges_and_relations():
    """A mask of zero on every edge of one relation (its messages silenced) gives the layer on
    the other relations' edges alone: misplaced coefficients would not."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    conv = make_conv(steps=2)
    x, edge_index, edge_type = typed_graph()
    dropped = 1
    mask = (edge_type != dropped).double()
    set_masks(conv, mask, edge_index, apply_sigmoid=False)
    masked = conv(x, edge_index, edge_type)
    clear_masks(conv)
    keep = edge_type != dropped
    expected = conv(x, edge_index[:, keep], edge_type[keep])
    torch.testing.assert_close(masked, expected, rtol=0, atol=1e-12)
    assert not torch.allclose(conv(x, edge_index, edge_type), expected)
    conv.grad = "autograd"
    set_masks(conv, mask, edge_index, apply_sigmoid=False)
    with pytest.raises(ValueError, match="grad='autograd'"):
        conv(x, edge_index, edge_type)


class _TypedNodeModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = RelationalETConv(8, RELATIONS, heads=2, head_dim=4, steps=1)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x, edge_index, edge_type):
        return self.head(self.conv(x, edge_index, edge_type))


def test_explainers_run_on_a_relational_model():
    from helpers import node_explainer
    from torch_geometric.explain import Explainer
    from torch_geometric.explain.algorithm import AttentionExplainer

    torch.manual_seed(0)
    x, edge_index, edge_type = typed_graph()
    model = _TypedNodeModel()
    explanation = node_explainer(model)(x.float(), edge_index, edge_type=edge_type, index=3)
    assert explanation.edge_mask.shape == (edge_index.size(1),)
    assert explanation.edge_mask.abs().sum() > 0
    attention = Explainer(
        model=model, algorithm=AttentionExplainer(), explanation_type="model",
        edge_mask_type="object",
        model_config=dict(mode="multiclass_classification", return_type="raw",
                          task_level="node"))
    explained = attention(x.float(), edge_index, edge_type=edge_type, index=3)
    assert explained.edge_mask.shape == (edge_index.size(1),)
    assert explained.edge_mask.sum() > 0


def test_a_layer_pickled_before_it_was_a_message_passing_loads_and_scores_as_before():
    """Saved multi-relation detectors pickle the layer whole; one written when it was a plain
    Module failed to load (MessagePassing.__setstate__ read its 'inspector')."""
    import pickle

    from torch.nn import Module
    from torch_geometric.nn.conv import MessagePassing

    conv = make_conv()
    x, edge_index, edge_type = typed_graph()
    expected = conv(x, edge_index, edge_type)
    # the state a plain Module had: MessagePassing's own attributes and submodule removed
    # (from a throwaway subclass: a bare MessagePassing() makes PyG replace the base class's
    # propagate, and later layers' explain path broke, depending on the tests' order)
    plain = Module()

    class _Template(MessagePassing):
        pass

    template = _Template(aggr="add", node_dim=0)
    state = {key: value for key, value in conv.__dict__.items()
             if key in plain.__dict__ or key not in template.__dict__}
    state["_modules"] = {key: value for key, value in conv._modules.items()
                         if key not in template._modules}
    assert "inspector" not in state and "aggr_module" not in state["_modules"]
    old = RelationalETConv.__new__(RelationalETConv)
    old.__setstate__(state)
    torch.testing.assert_close(old(x, edge_index, edge_type), expected, rtol=0, atol=0)
    assert torch.equal(pickle.loads(pickle.dumps(old))(x, edge_index, edge_type), expected)
    seen = []
    old.register_message_forward_hook(lambda module, inputs, out: seen.append(out))
    torch.testing.assert_close(old(x, edge_index, edge_type), expected, rtol=0, atol=1e-12)
    assert seen  # it is a MessagePassing now, hooks included


def test_watchers_reach_energy_grad_and_a_sparse_input_gets_the_layers_own_error():
    """(a review) energy_grad ignored an explainer's mask here while ETConv's followed it; and
    under a mask a sparse adjacency was told to coalesce, which the layer then refused."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    conv = make_conv()
    x, edge_index, edge_type = typed_graph()
    set_masks(conv, torch.zeros(edge_index.size(1), dtype=torch.float64), edge_index,
              apply_sigmoid=False)
    masked = conv.energy_grad(x, edge_index, edge_type)
    n = x.size(0)
    adjacency = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.size(1)),
                                        (n, n))
    with pytest.raises(ValueError, match=r"takes edge_index as a \[2, E\] tensor"):
        conv(x, adjacency, edge_type)
    clear_masks(conv)
    torch.testing.assert_close(masked, conv.energy_grad(x, edge_index[:, :0], edge_type[:0]),
                               rtol=0, atol=1e-12)
    assert not torch.allclose(masked, conv.energy_grad(x, edge_index, edge_type))
