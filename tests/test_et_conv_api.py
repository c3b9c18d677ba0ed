"""ETConv's public surface: the shared ETEnergy, per-call steps, MessagePassing kwargs, dtypes
and bad arguments."""

from __future__ import annotations

import math
import sys
import typing

import pytest
import torch
from helpers import relative_error
from torch_geometric.nn.aggr import SumAggregation

from et_graph.nn import CLSPool, Conv2DAdjacencyMask, ETConv, ETGraphModel
from et_graph.nn.conv import EdgeSet, ETEnergy
from et_graph.nn.pool import graph_sizes

CHANNELS, HEADS = 8, 3


def make_conv(**kwargs) -> ETConv:
    torch.manual_seed(0)
    options = dict(heads=HEADS, head_dim=4, steps=3)
    options.update(kwargs)
    conv = ETConv(CHANNELS, **options)
    with torch.no_grad():  # off the zero-bias initialisation so every parameter matters
        conv.norm.delta.normal_(std=0.3)
        conv.norm.log_gamma.fill_(0.2)
    return conv.double()


def graph(num_nodes: int = 10, num_edges: int = 36, seed: int = 1):
    """Random graph with a self-loop and a duplicate edge; the last node is isolated."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes - 1, (2, num_edges), generator=gen)
    edge_index = torch.cat([edge_index, torch.tensor([[0, 2, 2], [0, 4, 4]])], dim=1)
    x = torch.randn(num_nodes, CHANNELS, generator=gen, dtype=torch.float64)
    return x, edge_index


# --------------------------------------------------------------------------------------------
# ETEnergy: one energy object for both paths, closed forms checked against autograd
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
@pytest.mark.parametrize("fused", [True, False])
def test_energy_closed_form_matches_autograd_sparse(hopfield, fused):
    energy = make_conv(hopfield=hopfield).energy_fn
    x, edge_index = graph()
    weight = torch.randn(edge_index.size(1), HEADS, dtype=torch.float64)
    edges = energy.edges(x, edge_index, weight, plan=fused)
    loops = int((edge_index[0] == edge_index[1]).sum())
    assert isinstance(edges, EdgeSet) and edges.num_edges == edge_index.size(1) - loops
    assert (edges.plan is not None) == fused
    g = energy.norm(x).detach().requires_grad_(True)
    (reference,) = torch.autograd.grad(energy.node_energy_of_g(g, edges).sum(), g)
    g = g.detach()
    assert relative_error(energy.grad_of_g(g, edges, fused=fused), reference) < 1e-8
    assert relative_error(energy.autograd_grad_of_g(g, edges), reference) < 1e-12
    attention, hopfield_part = energy.attention_and_hopfield_grads(g, edges, fused=fused)
    assert relative_error(attention + hopfield_part, reference) < 1e-8
    torch.testing.assert_close(energy(g, edges), energy.node_energy_of_g(g, edges))


@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
def test_energy_closed_form_matches_autograd_dense(hopfield):
    energy = make_conv(hopfield=hopfield).energy_fn
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 6, CHANNELS, generator=gen, dtype=torch.float64)
    mask = torch.rand(2, 6, 6, generator=gen) < 0.6
    weight = torch.randn(2, HEADS, 6, 6, generator=gen, dtype=torch.float64)
    mask, weight = energy.dense_edges(x, mask, weight)
    assert not bool(mask.diagonal(dim1=1, dim2=2).any())  # the diagonal is always removed
    g = energy.norm(x).detach().requires_grad_(True)
    (reference,) = torch.autograd.grad(energy.dense_node_energy_of_g(g, mask, weight).sum(), g)
    g = g.detach()
    assert relative_error(energy.dense_grad_of_g(g, mask, weight), reference) < 1e-8
    assert relative_error(energy.dense_autograd_grad_of_g(g, mask, weight), reference) < 1e-12
    attention, hopfield_part = energy.dense_attention_and_hopfield_grads(g, mask, weight)
    assert relative_error(attention + hopfield_part, reference) < 1e-8


def test_sparse_and_dense_paths_share_one_energy():
    conv = make_conv()
    energy = conv.energy_fn
    assert isinstance(energy, ETEnergy)
    for name in ("w_k", "w_q", "xi", "log_beta"):
        assert getattr(conv, name) is getattr(energy, name)
    assert conv.norm is energy.norm
    torch.testing.assert_close(conv.beta, energy.beta)
    # The dense energy of a complete graph is the sparse energy of that graph.
    x = torch.randn(1, 5, CHANNELS, dtype=torch.float64)
    src, dst = (~torch.eye(5, dtype=torch.bool)).nonzero().t()
    edges = energy.edges(x[0], torch.stack([src, dst]))
    mask, _ = energy.dense_edges(x)
    g = energy.norm(x)
    torch.testing.assert_close(
        energy.dense_node_energy_of_g(g, mask)[0], energy.node_energy_of_g(g[0], edges)
    )
    torch.testing.assert_close(conv.node_energy(x[0], edges.edge_index), energy(g[0], edges))


def test_energy_module_on_its_own():
    torch.manual_seed(0)
    energy = ETEnergy(CHANNELS, heads=2, head_dim=4, hopfield_dim=5)
    names = {name for name, _ in energy.named_parameters()}
    assert names == {"norm.log_gamma", "norm.delta", "w_k", "w_q", "xi", "log_beta"}
    assert energy.xi.shape == (5, CHANNELS) and energy.dtype == torch.float32
    k, q = energy.keys_queries(torch.randn(3, 7, CHANNELS))
    assert k.shape == q.shape == (3, 7, 2, 4)
    x = torch.randn(4, CHANNELS)
    torch.testing.assert_close(energy.layer_norm(x), energy.norm(x))
    assert "hopfield_dim=5" in repr(energy)


def test_legacy_state_dict_keys_still_load(monkeypatch):
    # torch < 2.5 has no public register_load_state_dict_pre_hook: ETConv() failed there
    monkeypatch.delattr(torch.nn.Module, "register_load_state_dict_pre_hook")
    conv = make_conv()
    x, edge_index = graph()
    legacy = {key.replace("energy_fn.", ""): value for key, value in conv.state_dict().items()}
    assert "w_k" in legacy and "norm.log_gamma" in legacy
    fresh = ETConv(CHANNELS, heads=HEADS, head_dim=4, steps=3).double()
    fresh.load_state_dict(legacy)
    torch.testing.assert_close(fresh(x, edge_index), conv(x, edge_index))
    # ... and the new keys load too, also nested inside a model.
    model = torch.nn.Sequential(ETConv(CHANNELS, heads=HEADS, head_dim=4, steps=3).double())
    model.load_state_dict({f"0.{key}": value for key, value in legacy.items()})
    torch.testing.assert_close(model[0](x, edge_index), conv(x, edge_index))


# --------------------------------------------------------------------------------------------
# steps=: one call, one override
# --------------------------------------------------------------------------------------------
def test_steps_override_equals_a_layer_with_that_many_steps():
    conv = make_conv(steps=3).eval()
    x, edge_index = graph()
    five = make_conv(steps=5).eval()
    out, energies = conv(x, edge_index, return_energy=True, steps=5)
    assert conv.steps == 3 and energies.shape == (6,)
    torch.testing.assert_close(out, five(x, edge_index))
    # Five calls of one step follow the same trajectory.
    state = x
    for step in range(5):
        state, trace = conv(state, edge_index, return_energy=True, steps=1)
        torch.testing.assert_close(trace[0], energies[step])
    torch.testing.assert_close(state, out)
    # steps=0 is the identity; None means self.steps.
    out0, energies0 = conv(x, edge_index, return_energy=True, steps=0)
    assert torch.equal(out0, x) and energies0.shape == (1,)
    torch.testing.assert_close(conv(x, edge_index, steps=None), conv(x, edge_index))


def test_steps_override_on_the_dense_path():
    conv = make_conv(steps=3).eval()
    x = torch.randn(2, 5, CHANNELS, dtype=torch.float64)
    out, energies = conv.forward_dense(x, return_energy=True, steps=4)
    assert energies.shape == (2, 5) and conv.steps == 3
    torch.testing.assert_close(out, make_conv(steps=4).forward_dense(x))
    state = x
    for _ in range(4):
        state = conv.forward_dense(state, steps=1)
    torch.testing.assert_close(state, out)
    assert torch.equal(conv.forward_dense(x, steps=0), x)


@pytest.mark.parametrize("steps", [-1, 1.5, True, "2"])
def test_bad_steps_raise(steps):
    conv = make_conv()
    x, edge_index = graph()
    with pytest.raises(ValueError, match="steps"):
        conv(x, edge_index, steps=steps)
    with pytest.raises(ValueError, match="steps"):
        conv.forward_dense(x[None], steps=steps)
    with pytest.raises(ValueError, match="steps"):
        ETConv(CHANNELS, steps=steps)
    with pytest.raises(ValueError, match="steps"):
        conv.steps = steps
    assert conv.steps == 3


@pytest.mark.skipif(sys.version_info < (3, 11), reason="typing.get_overloads needs 3.11")
def test_forward_has_typed_overloads():
    for method in (ETConv.forward, ETConv.forward_dense):
        overloads = typing.get_overloads(method)
        returns = [o.__annotations__["return"] for o in overloads]
        assert "Tensor" in returns and "tuple[Tensor, Tensor]" in returns
        assert any("Literal[True]" in str(o.__annotations__["return_energy"]) for o in overloads)


# --------------------------------------------------------------------------------------------
# MessagePassing kwargs: the energy fixes the aggregation and the direction
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("aggr", ["mean", "max", ["add", "mean"], None])
def test_other_aggregations_are_rejected(aggr):
    with pytest.raises(ValueError, match="aggr='add'"):
        ETConv(CHANNELS, aggr=aggr)


def test_other_flow_and_node_dim_are_rejected():
    with pytest.raises(ValueError, match="flow='source_to_target'"):
        ETConv(CHANNELS, flow="target_to_source")
    with pytest.raises(ValueError, match="node_dim"):
        ETConv(CHANNELS, node_dim=-2)


def test_bipartite_input_is_refused_with_a_reason():
    conv = ETConv(CHANNELS)
    pair = (torch.randn(3, CHANNELS), torch.randn(2, CHANNELS))
    with pytest.raises(ValueError, match="no bipartite input"):
        conv(pair, torch.tensor([[0], [1]]))


@pytest.mark.parametrize("aggr", ["add", "sum", SumAggregation()])
def test_sum_aggregation_is_accepted(aggr):
    conv = ETConv(CHANNELS, heads=2, head_dim=4, aggr=aggr, flow="source_to_target")
    x, edge_index = graph()
    assert conv(x.float(), edge_index).shape == (x.size(0), CHANNELS)


# --------------------------------------------------------------------------------------------
# Dtypes: lower precision is upcast and returned as given, higher precision is an error
# --------------------------------------------------------------------------------------------
DTYPE_MESSAGE = r"x is float64 but the layer's parameters are float32; call conv.double\(\) or x"


def test_float64_features_on_a_float32_layer_raise_the_same_error_on_both_paths():
    conv = make_conv().float()
    x, edge_index = graph()
    for call in (conv, conv.energy, conv.node_energy, conv.energy_grad):
        with pytest.raises(ValueError, match=DTYPE_MESSAGE):
            call(x, edge_index)
    for call in (conv.forward_dense, conv.dense_energy, conv.dense_attention_and_hopfield_grads):
        with pytest.raises(ValueError, match=DTYPE_MESSAGE):
            call(x[None])
    with pytest.raises(ValueError, match=r"x.float\(\)"):
        conv(x, edge_index)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_features_are_upcast_on_both_paths(dtype):
    conv = make_conv().float()
    x, edge_index = graph()
    low = x.to(dtype)
    out, energies = conv(low, edge_index, return_energy=True)
    assert out.dtype == dtype and energies.dtype == torch.float32
    torch.testing.assert_close(out.float(), conv(low.float(), edge_index), atol=2e-2, rtol=2e-2)
    assert conv.energy(low, edge_index).dtype == torch.float32  # as the traces
    dense = conv.forward_dense(low[None])
    assert dense.dtype == dtype
    reference = conv.forward_dense(low[None].float())
    torch.testing.assert_close(dense.float(), reference, atol=2e-2, rtol=2e-2)


def test_float32_features_on_a_float64_layer_are_computed_in_float64():
    conv = make_conv()
    x, edge_index = graph()
    out = conv(x.float(), edge_index)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, conv(x.float().double(), edge_index).float())
    assert conv.forward_dense(x.float()[None]).dtype == torch.float32


# --------------------------------------------------------------------------------------------
# Bad constructor arguments
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.0, -0.1, float("nan"), float("inf"), "0.1"])
def test_bad_alpha_raises(alpha):
    with pytest.raises(ValueError, match="alpha"):
        ETConv(CHANNELS, alpha=alpha)
    conv = ETConv(CHANNELS)
    with pytest.raises(ValueError, match="alpha"):
        conv.alpha = alpha
    assert conv.alpha == 0.1


@pytest.mark.parametrize("beta_init", [0.0, -1.0, float("nan")])
def test_bad_beta_init_raises(beta_init):
    with pytest.raises(ValueError, match="beta_init"):
        ETConv(CHANNELS, beta_init=beta_init)
    with pytest.raises(ValueError, match="beta_init"):
        ETEnergy(CHANNELS, beta_init=beta_init)


def test_bad_hopfield_dim_raises_and_zero_memories_work():
    with pytest.raises(ValueError, match="hopfield_dim"):
        ETConv(CHANNELS, hopfield_dim=-1)
    with pytest.raises(ValueError, match="hopfield_dim"):
        ETConv(CHANNELS, hopfield_dim=2.5)
    with pytest.raises(ValueError, match="hopfield_dim >= 1"):
        ETConv(CHANNELS, hopfield="softmax", hopfield_dim=0)
    conv = ETConv(CHANNELS, heads=2, head_dim=4, hopfield_dim=0).double()
    x, edge_index = graph()
    out, energies = conv(x, edge_index, return_energy=True)
    assert bool(torch.isfinite(out).all()) and bool(torch.isfinite(energies).all())


def test_other_bad_constructor_arguments():
    for kwargs, match in (
        (dict(hopfield_beta=0.0), "hopfield_beta"),
        (dict(noise_std=-1.0), "noise_std"),
        (dict(noise_std=float("nan")), "noise_std"),
        (dict(heads=0), "heads"),
        (dict(head_dim=-2), "head_dim"),
    ):
        with pytest.raises(ValueError, match=match):
            ETConv(CHANNELS, **kwargs)
    with pytest.raises(ValueError, match="channels"):
        ETConv(0)
    conv = ETConv(CHANNELS)
    with pytest.raises(ValueError, match="grad"):
        conv.grad = "numeric"


# --------------------------------------------------------------------------------------------
# batch must hold integer graph ids, everywhere it is accepted
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool])
def test_non_integer_batch_raises(dtype):
    x, edge_index = graph()
    batch = (torch.arange(x.size(0)) >= 5).to(dtype)
    conv = make_conv()
    with pytest.raises(ValueError, match="batch must hold integer graph ids"):
        conv.energy(x, edge_index, batch=batch)
    with pytest.raises(ValueError, match="batch must hold integer graph ids"):
        graph_sizes(batch, x.size(0))
    with pytest.raises(ValueError, match="batch must hold integer graph ids"):
        CLSPool(CHANNELS).attach(x.float(), edge_index, batch)
    with pytest.raises(ValueError, match="batch must hold integer graph ids"):
        Conv2DAdjacencyMask(HEADS)(x.float(), edge_index, batch)
    model = ETGraphModel(CHANNELS, 2, hidden_channels=8, heads=2, head_dim=4, pe_dim=0)
    with pytest.raises(ValueError, match="batch must hold integer graph ids"):
        model(x.float(), edge_index, batch)
    # Integer batches (long or int32) are fine.
    long_batch = (torch.arange(x.size(0)) >= 5).long()
    per_graph = conv.energy(x, edge_index, batch=long_batch)
    torch.testing.assert_close(per_graph, conv.energy(x, edge_index, batch=long_batch.int()))
    total = float(conv.energy(x, edge_index).detach())
    assert math.isclose(float(per_graph.detach().sum()), total, rel_tol=1e-9)


# --- cached=True: the edges of a graph passed again are validated and sorted once ---------------
def _cached_pair(**kwargs):
    torch.manual_seed(0)
    plain = ETConv(8, heads=2, head_dim=4, steps=2, **kwargs).double()
    cached = ETConv(8, heads=2, head_dim=4, steps=2, cached=True, **kwargs).double()
    cached.load_state_dict(plain.state_dict())
    return plain, cached


@pytest.mark.parametrize("weighted", [False, True])
def test_cached_edges_give_the_uncached_values_and_gradients(monkeypatch, weighted):
    import et_graph.nn.conv.et_energy as et_energy

    builds = []
    real_build = et_energy.build_edge_plan
    monkeypatch.setattr(et_energy, "build_edge_plan",
                        lambda *args: builds.append(1) or real_build(*args))
    plain, cached = _cached_pair()
    torch.manual_seed(1)
    edge_index = torch.randint(0, 12, (2, 50))
    edge_index[:, :3] = torch.tensor([[0, 4, 7], [0, 4, 7]])  # self-loops are dropped
    for _ in range(3):
        x = torch.randn(12, 8, dtype=torch.float64)
        weight = torch.rand(50, 2, dtype=torch.float64) if weighted else None
        outs = []
        for conv in (plain, cached):
            xr = x.clone().requires_grad_(True)
            wr = None if weight is None else weight.clone().requires_grad_(True)
            out = conv(xr, edge_index, wr)
            grads = torch.autograd.grad(out.pow(2).sum(), [xr, *conv.parameters()]
                                        + ([wr] if weighted else []))
            outs.append((out, grads))
        assert torch.equal(outs[0][0], outs[1][0])
        for a, b in zip(outs[0][1], outs[1][1]):
            assert torch.equal(a, b)
    assert len(builds) == 3 + 1  # the plain layer sorts every call, the cached one once


def test_cached_edges_follow_in_place_changes_and_new_tensors():
    plain, cached = _cached_pair()
    torch.manual_seed(2)
    x = torch.randn(10, 8, dtype=torch.float64)
    edge_index = torch.randint(0, 10, (2, 40))
    assert torch.equal(cached(x, edge_index), plain(x, edge_index))
    first = cached._edge_cache._entry[2]
    edge_index[0, :5] = (edge_index[0, :5] + 3) % 10  # in place: the version counter moves
    assert torch.equal(cached(x, edge_index), plain(x, edge_index))
    assert cached._edge_cache._entry[2] is not first
    again = edge_index.clone()  # same edges, another tensor: rebuilt (identity, not content)
    assert torch.equal(cached(x, again), plain(x, again))
    assert cached._edge_cache._entry[0][0]() is again
    more = torch.randn(14, 8, dtype=torch.float64)  # more nodes: the id check must run again
    with pytest.raises(ValueError, match="node ids"):
        cached(x[:5], again)
    assert torch.equal(cached(more, again), plain(more, again))


def test_cached_edges_are_not_copied_pickled_or_kept_for_inference_tensors():
    import copy
    import io

    _, cached = _cached_pair()
    x = torch.randn(10, 8, dtype=torch.float64)
    edge_index = torch.randint(0, 10, (2, 30))
    cached(x, edge_index)
    assert copy.deepcopy(cached)._edge_cache._entry is None
    buffer = io.BytesIO()
    torch.save(cached, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=False)._edge_cache._entry is None
    assert cached._edge_cache._entry is not None
    cached.clear_edge_cache()
    with torch.inference_mode():
        frozen = edge_index.clone()
        cached(x, frozen)
    assert cached._edge_cache._entry is None
    with pytest.raises(ValueError, match="cached"):
        ETConv(8, cached=1)


def test_autograd_path_under_inference_mode_says_why():
    """grad='autograd' cannot run inside torch.inference_mode(); it used to fail with
    'element 0 of tensors does not require grad'. no_grad works, and so does the default."""
    x = torch.randn(12, 8)
    edge_index = torch.randint(0, 12, (2, 40))
    conv = ETConv(8, heads=2, head_dim=4, grad="autograd")
    with torch.no_grad():
        expected = conv(x, edge_index)
    with torch.inference_mode(), pytest.raises(ValueError, match="no_grad"):
        conv(x, edge_index)
    conv.grad = "analytic"
    with torch.inference_mode():
        assert torch.allclose(conv(x, edge_index), expected, atol=1e-5)


def test_a_sparse_adjacency_is_the_transposed_matrix_as_the_readme_says():
    """README: entry [C, B] of a sparse adjacency is the edge B -> C (PyG's adj_t), so the
    flipped edge_index gives the same result and the unflipped one reverses a directed graph."""
    from torch_geometric.utils import to_torch_coo_tensor

    torch.manual_seed(0)
    x = torch.randn(10, 8, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]])  # a directed path
    weight = torch.rand(7, dtype=torch.float64)
    conv = ETConv(8, heads=2, head_dim=4, steps=2).double()
    expected = conv(x, edge_index, weight)
    flipped = to_torch_coo_tensor(edge_index.flip(0), weight, size=10)
    torch.testing.assert_close(conv(x, flipped), expected)
    torch.testing.assert_close(conv(x, flipped.to_sparse_csr()), expected)
    assert not torch.allclose(conv(x, to_torch_coo_tensor(edge_index, weight, size=10)),
                              expected)


def test_descend_edges_is_forward_over_prebuilt_edges():
    """The public form of what ETGraphModel did through private methods."""
    torch.manual_seed(0)
    x = torch.randn(12, 8, dtype=torch.float64)
    edge_index = torch.randint(0, 12, (2, 40))
    weight = torch.rand(40, 2, dtype=torch.float64)
    conv = ETConv(8, heads=2, head_dim=4, steps=3).double()
    edges = conv.energy_fn.edges(x, edge_index, weight, plan=True)
    torch.testing.assert_close(conv.descend_edges(x, edges), conv(x, edge_index, weight))
    out, trace = conv.descend_edges(x, edges, steps=1, return_energy=True)
    torch.testing.assert_close(out, conv(x, edge_index, weight, steps=1))
    assert trace.shape == (2,)


def test_energy_layer_norm_names_a_wrong_width_and_gain():
    """From a layer audit: a width-1 input broadcast to [N, channels] of delta alone, another
    width gave a raw broadcasting error, and set_gamma(0) a 'math domain error'."""
    from et_graph.nn.energy_layer_norm import EnergyLayerNorm

    norm = EnergyLayerNorm(4)
    for bad in (torch.randn(3, 1), torch.randn(3, 8)):
        with pytest.raises(ValueError, match=r"EnergyLayerNorm\(4\) normalises the last"):
            norm(bad)
        with pytest.raises(ValueError, match="must be 4 wide"):
            norm.lagrangian(bad)
    for gamma in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="gamma must be a positive finite number"):
            norm.set_gamma(gamma)
    with pytest.raises(ValueError, match="channels must be a positive int"):
        EnergyLayerNorm(0)
    norm.set_gamma(2.0)
    assert norm(torch.randn(2, 5, 4)).shape == (2, 5, 4) and float(norm.gamma) == pytest.approx(2)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "0.1", True])
def test_noise_std_is_checked_when_set_later_too(bad):
    """From a layer audit: ``conv.noise_std = -1`` (or NaN) was accepted, and the constructor
    took infinity."""
    from et_graph.nn import RelationalETConv

    for layer in (ETConv(4, heads=1, head_dim=2), RelationalETConv(4, 2, heads=1, head_dim=2)):
        with pytest.raises(ValueError, match="noise_std must be a finite number >= 0"):
            layer.noise_std = bad
        with pytest.raises(ValueError, match="noise_std must be a finite number >= 0"):
            type(layer)(*((4,) if isinstance(layer, ETConv) else (4, 2)), heads=1, head_dim=2,
                        noise_std=bad)
        layer.noise_std = 0.1
        assert layer.noise_std == 0.1


@pytest.mark.parametrize("log_beta", [-800.0, 800.0])
def test_energy_at_a_zero_or_infinite_beta_is_refused_not_nan(log_beta):
    # The attention energy divides by beta: 0/0 at beta = 0, inf/inf at beta = inf.
    from et_graph.nn import RelationalETConv

    torch.manual_seed(0)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x = torch.randn(3, 4, dtype=torch.float64)
    conv = ETConv(4, heads=2, head_dim=3).double()
    with torch.no_grad():
        conv.energy_fn.log_beta.fill_(log_beta)
    for call in [lambda: conv.energy(x, edge_index), lambda: conv.node_energy(x, edge_index),
                 lambda: conv.dense_energy(x[None])]:
        with pytest.raises(FloatingPointError, match="inverse temperatures"):
            call()
    # (at beta = inf the dense descent's tokens fail first, with their own message)
    with pytest.raises(FloatingPointError, match="inverse temperatures|NaN or inf tokens"):
        conv.forward_dense(x[None], return_energy=True)
    relational = RelationalETConv(4, 2, heads=1, head_dim=3).double()
    with torch.no_grad():
        relational.energy_fn.log_beta.fill_(log_beta)
    with pytest.raises(FloatingPointError, match="inverse temperatures"):
        relational.energy(x, edge_index, torch.tensor([0, 1, 0]))
    if log_beta < 0:  # the descent itself runs at beta = 0 (uniform attention); its trace not
        assert torch.isfinite(conv(x, edge_index)).all()
        with pytest.raises(FloatingPointError, match="inverse temperatures"):
            conv(x, edge_index, return_energy=True)


def test_pyg_wrappers_that_would_misread_the_layer_are_refused():
    from torch_geometric.data import HeteroData
    from torch_geometric.explain.algorithm.utils import set_masks
    from torch_geometric.nn import to_hetero_with_bases

    data = HeteroData()
    data["a"].x, data["b"].x = torch.randn(5, 8), torch.randn(4, 8)
    data["a", "to", "b"].edge_index = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]])
    data["b", "rev", "a"].edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = ETConv(8, heads=2, head_dim=4, steps=1)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    # it summed num_bases copies of the tokens, its relation weights never read
    model = to_hetero_with_bases(Model(), data.metadata(), num_bases=3, in_channels={"x": 8})
    with pytest.raises(ValueError, match="to_hetero_with_bases"):
        model(data.x_dict, data.edge_index_dict)
    # an explainer's edge mask on the autograd reference path changed nothing
    conv = ETConv(8, heads=2, head_dim=4, grad="autograd")
    x, edge_index = torch.randn(6, 8), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    set_masks(conv, torch.nn.Parameter(torch.zeros(5)), edge_index, apply_sigmoid=False)
    with pytest.raises(ValueError, match="grad='autograd'"):
        conv(x, edge_index)


def _one_node_type_three_relations():
    from torch_geometric.data import HeteroData

    data = HeteroData()
    data["review"].x = torch.randn(12, 8)
    for relation in ("rur", "rtr", "rsr"):
        data["review", relation, "review"].edge_index = torch.randint(0, 12, (2, 30))
    return data


class _OneLayer(torch.nn.Module):
    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.conv = layer

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


def test_a_sum_of_per_relation_descents_is_named():
    """HeteroConv and to_hetero add up one output per relation; an ET layer's output is its
    token state (steps=0: 3 * x), and this ran without a word."""
    import warnings

    from torch_geometric.nn import HeteroConv, to_hetero

    torch.manual_seed(0)
    data = _one_node_type_three_relations()
    wrapped = HeteroConv({edge_type: ETConv(8, heads=2, head_dim=4, steps=0)
                          for edge_type in data.edge_types}, aggr="sum")
    with pytest.warns(UserWarning, match=r"HeteroConv runs one ETConv per relation into node "
                                         r"type 'review' \(3 relations") as caught:
        out = wrapped(data.x_dict, data.edge_index_dict)["review"]
    assert torch.allclose(out, 3 * data["review"].x)  # what the warning is about
    assert caught[0].filename == __file__  # it names the caller's line
    model = to_hetero(_OneLayer(ETConv(8, heads=2, head_dim=4, steps=1)), data.metadata())
    with pytest.warns(UserWarning, match="to_hetero runs one ETConv per relation"):
        model(data.x_dict, data.edge_index_dict)
    # one relation per node type, a plain call, and a layer inside a model stay quiet
    single = HeteroConv({("review", "rur", "review"): ETConv(8, heads=2, head_dim=4)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        single(data.x_dict, {("review", "rur", "review"): data["review", "rur", "review"]
                             .edge_index})
        _OneLayer(ETConv(8, heads=2, head_dim=4))(data["review"].x,
                                                  data["review", "rur", "review"].edge_index)
    nested = HeteroConv({edge_type: _OneLayer(ETConv(8, heads=2, head_dim=4))
                         for edge_type in data.edge_types})
    with pytest.warns(UserWarning, match="HeteroConv runs one ETConv per relation"):
        nested(data.x_dict, data.edge_index_dict)
    # deeper inside the relation's model (the guard once looked eight frames up only)
    deep = HeteroConv({edge_type: _OneLayer(_OneLayer(_OneLayer(ETConv(8, heads=2, head_dim=4))))
                       for edge_type in data.edge_types})
    with pytest.warns(UserWarning, match="HeteroConv runs one ETConv per relation") as caught:
        deep(data.x_dict, data.edge_index_dict)
    assert caught[0].filename == __file__
    deep_fx = to_hetero(_OneLayer(_OneLayer(_OneLayer(ETConv(8, heads=2, head_dim=4)))),
                        data.metadata())
    with pytest.warns(UserWarning, match="to_hetero runs one ETConv per relation"):
        deep_fx(data.x_dict, data.edge_index_dict)


class _TypedModel(torch.nn.Module):
    """A model of one RelationalETConv over ``relations`` relations."""

    def __init__(self, relations: int) -> None:
        super().__init__()
        from et_graph.nn import RelationalETConv

        self.conv = RelationalETConv(8, relations, heads=2, head_dim=4)

    def forward(self, x, edge_index, edge_type):
        return self.conv(x, edge_index, edge_type)


def test_a_relational_layer_per_relation_is_refused():
    from torch_geometric.nn import to_hetero

    data = _one_node_type_three_relations()
    model = to_hetero(_TypedModel(3), data.metadata())
    types = {key: torch.zeros(30, dtype=torch.long) for key in data.edge_types}
    with pytest.raises(ValueError, match="to_homogeneous"):
        model(data.x_dict, data.edge_index_dict, types)


def test_an_inference_mode_call_does_not_poison_the_edge_cache_for_training():
    x, edge_index = torch.randn(10, 8), torch.randint(0, 10, (2, 30))
    weight = torch.rand(30)
    conv = ETConv(8, heads=2, head_dim=4, cached=True)
    with torch.inference_mode():  # e.g. a trainer's validation sanity check
        conv(x, edge_index)
    learnable = weight.clone().requires_grad_()
    conv(x, edge_index, learnable).sum().backward()  # failed: inference tensors saved
    assert learnable.grad is not None and torch.isfinite(learnable.grad).all()


def test_per_graph_energies_keep_trailing_empty_graphs_given_num_graphs():
    from torch_geometric.data import Batch, Data

    from et_graph.nn import RelationalETConv

    torch.manual_seed(0)
    batch = Batch.from_data_list([
        Data(x=torch.randn(5, 8), edge_index=torch.randint(0, 5, (2, 10))),
        Data(x=torch.randn(0, 8), edge_index=torch.zeros(2, 0, dtype=torch.long))])
    conv = ETConv(8, heads=2, head_dim=4)
    energies = conv.energy(batch.x, batch.edge_index, batch=batch.batch,
                           num_graphs=batch.num_graphs)
    assert energies.shape == (2,) and energies[1] == 0
    assert torch.allclose(energies.sum(), conv.energy(batch.x, batch.edge_index))
    assert conv.energy(batch.x, batch.edge_index, batch=batch.batch).shape == (1,)
    with pytest.raises(ValueError, match="num_graphs"):
        conv.energy(batch.x, batch.edge_index, batch=batch.batch, num_graphs=0)
    relational = RelationalETConv(8, 2, heads=1, head_dim=4)
    edge_type = torch.randint(0, 2, (batch.edge_index.size(1),))
    assert relational.energy(batch.x, batch.edge_index, edge_type, batch=batch.batch,
                             num_graphs=3).shape == (3,)


def test_meta_inputs_and_tracing_are_refused_with_their_reason():
    from et_graph.nn import RelationalETConv

    with pytest.raises(NotImplementedError, match="meta device"):
        ETConv(8, heads=2, head_dim=4).to("meta")(torch.randn(10, 8, device="meta"),
                                                  torch.randint(0, 10, (2, 30), device="meta"))
    x, edge_index = torch.randn(6, 8), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    relational = RelationalETConv(8, 2, heads=1, head_dim=4)
    with pytest.raises(NotImplementedError, match="torch.jit.trace"):  # unordered_map::at
        torch.jit.trace(relational, (x, edge_index, torch.tensor([0, 1, 0, 1, 0])))
    model = ETGraphModel(8, 2, hidden_channels=16, heads=2, head_dim=4, pe_dim=0)
    with pytest.raises(NotImplementedError, match="torch.jit.trace"):  # __round__ on a Tensor
        torch.jit.trace(model, (x, edge_index, torch.zeros(6, dtype=torch.long)))


def test_backward_inside_an_autocast_block_runs():
    # The sparse products of the fused backward were cast to bfloat16, which the CPU's CSR
    # addmm lacks ("addmm_out_sparse_csr_impl_mkl" not implemented for 'BFloat16').
    torch.manual_seed(0)
    linear, conv = torch.nn.Linear(8, 8), ETConv(8, heads=2, head_dim=4)
    x, edge_index = torch.randn(10, 8), torch.randint(0, 10, (2, 30))
    with torch.autocast("cpu", torch.bfloat16):
        conv(linear(x), edge_index).float().sum().backward()
    inside = [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad()
    with torch.autocast("cpu", torch.bfloat16):
        out = conv(linear(x), edge_index).float().sum()
    out.backward()  # the pattern PyTorch recommends: the layer's own precision
    for a, p in zip(inside, conv.parameters()):
        # autograd's own backward ops follow autocast inside the block: bfloat16 rounding
        assert a.dtype == torch.float32 and torch.allclose(a, p.grad, rtol=0.05, atol=0.05)


def test_edges_on_another_device_than_the_tokens_are_named():
    # the compiled CPU kernels would have read a GPU edge list's memory on the host
    conv = ETConv(8, heads=2, head_dim=4)
    x = torch.randn(5, 8)
    with pytest.raises(ValueError, match="edge_index is on meta but x is on cpu"):
        conv(x, torch.randint(0, 5, (2, 8), device="meta"))
    with pytest.raises(ValueError, match="edge_weight is on meta"):
        conv(x, torch.randint(0, 5, (2, 8)), torch.rand(8, device="meta"))


# --------------------------------------------------------------------------------------------
# From a PyG/PyGOD API review
# --------------------------------------------------------------------------------------------
def test_the_anomaly_network_refuses_a_third_argument_it_would_ignore():
    # PyG's third argument is an edge weight: model(x, edge_index, w) ran and ignored w
    from et_graph.nn.models import ETAnomalyNet

    model = ETAnomalyNet(4, hidden_channels=8)
    x, edge_index = torch.randn(5, 4), torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match="read only with positional=True"):
        model(x, edge_index, torch.rand(3))
    assert model(x, edge_index).shape == (5,)


def test_graph_model_errors_name_the_argument_order_and_sparse_input():
    from et_graph.nn import ETGraphModel

    model = ETGraphModel(3, 2, pe_dim=0, hidden_channels=8, edge_dim=2)
    x, edge_index = torch.ones(3, 3), torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"pass them by name \(edge_attr=\.\.\.\)"):
        model(x, edge_index, torch.ones(2, 2))  # said only "batch must hold integer ids"
    adj = torch.sparse_coo_tensor(edge_index, torch.ones(2), (3, 3))
    with pytest.raises(ValueError, match="sparse adjacency .*to_edge_index"):
        model(x, adj)  # said "edge_index must have dtype torch.long, got torch.float32"


def test_relational_layer_shows_its_changed_settings_and_shares_the_properties():
    from et_graph.nn import RelationalETConv

    conv = RelationalETConv(8, 2, noise_std=0.1, grad="autograd", cached=True,
                            hopfield="softmax", hopfield_beta=2.0)
    text = repr(conv)  # printed as a default layer before
    for part in ("hopfield_beta=2.0", "noise_std=0.1", "grad='autograd'", "cached=True"):
        assert part in text
    assert conv.hopfield_beta == 2.0 and conv.beta_init == pytest.approx(16 ** -0.5)
    assert "noise_std" not in repr(RelationalETConv(8, 2))


def test_cls_pool_is_callable_and_transforms_show_their_attribute_names():
    from et_graph.nn import CLSPool
    from et_graph.transforms import CLSLaplacianPE, RandomWalkPE

    pool = CLSPool(4)
    seen = []
    pool.register_forward_hook(lambda module, args, out: seen.append(out))
    graph = pool(torch.randn(3, 4), torch.tensor([[0, 1], [1, 2]]),
                 torch.zeros(3, dtype=torch.long))  # raised NotImplementedError
    assert seen and graph.x.shape == (4, 4)
    assert repr(RandomWalkPE(4, attr_name="walk")) == "RandomWalkPE(k=4, attr_name='walk')"
    assert repr(CLSLaplacianPE(3)) == "CLSLaplacianPE(k=3)"
    assert "cls_attr_name='c'" in repr(CLSLaplacianPE(3, cls_attr_name="c"))


def test_energy_module_exports_its_functions_only():
    import et_graph.energy as energy

    assert "torch" not in energy.__all__ and "Tensor" not in energy.__all__
    assert {"attention_energy", "hopfield_energy", "layer_norm"} <= set(energy.__all__)


def test_the_layer_leaves_the_warning_filters_alone_and_shows_no_sparse_notice(tmp_path):
    # (from an audit of global state) a filter around every pass reset Python's once-per-
    # location warning memory, and, not thread-safe, dropped filters other threads added
    import subprocess
    import sys

    code = (
        "import warnings, torch\n"
        "from et_graph.nn import ETConv\n"
        "conv = ETConv(8)\n"
        "x, ei = torch.randn(5, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])\n"
        "before = list(warnings.filters)\n"
        "for _ in range(2):\n"
        "    conv(x, ei).sum().backward()\n"
        "    assert warnings.filters == before\n"
        "    warnings.warn('shown once')\n"
    )
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("shown once") == 1  # Python's "default": once per location
    assert "parse" not in done.stderr.replace("torch.jit", "")  # no sparse notice either


def test_half_precision_features_energy_does_not_overflow():
    """A float16 total past 65504 was cast to -inf without an error (float32: finite)."""
    torch.manual_seed(0)
    conv = ETConv(8, heads=2, head_dim=4)
    with torch.no_grad():
        conv.energy_fn.xi.mul_(20)  # large memories: a float16-sized graph passes 65504
    x = torch.randn(600, 8)
    edge_index = torch.randint(0, 600, (2, 2400))
    reference = conv.energy(x, edge_index)
    assert reference.abs() > 65504  # beyond float16's range
    low = conv.energy(x.half(), edge_index)
    assert torch.isfinite(low) and torch.isclose(low, reference, rtol=1e-2)
    dense = conv.dense_energy(x.reshape(1, 600, 8).half())
    assert dense.abs().item() > 65504 and torch.isfinite(dense).all()


def test_an_energy_subclass_without_a_closed_form_is_not_descended_silently():
    """A new term in node_energy_of_g changed the reported energies, while the default
    analytic descent (and forward_chunked) went on descending the built-in energy."""
    class Smooth(ETEnergy):  # + 1/2 sum over edges |g_B - g_C|^2
        def node_energy_of_g(self, g, edges):
            extra = 0.5 * (g[edges.src] - g[edges.dst]).pow(2).sum(-1)
            return super().node_energy_of_g(g, edges) + torch.zeros(
                g.size(0), dtype=g.dtype).index_add(0, edges.dst, extra)

    torch.manual_seed(0)
    conv = ETConv(8, heads=2, head_dim=4, steps=2).double()
    conv.energy_fn = Smooth(8, heads=2, head_dim=4).double()
    x, edge_index = graph()
    with pytest.raises(ValueError, match="overrides node_energy_of_g but not the closed form"):
        conv(x, edge_index)
    with pytest.raises(ValueError, match="forward_chunked descends the built-in energy"):
        conv.eval().forward_chunked(x, edge_index)
    conv.grad = "autograd"  # descends autograd of the new energy, which then falls
    _, energies = conv(x, edge_index, return_energy=True)
    assert bool((energies[1:] <= energies[:-1]).all())

    class WithClosedForm(Smooth):  # the subclass takes responsibility for its gradient
        def grad_of_g(self, g, edges, fused=True):
            return self.autograd_grad_of_g(g, edges)

    # the public check a closed form should pass: the built-in one does, and a closed form
    # that ignores the new term does not
    edges = conv.energy_fn.edges(x, edge_index)
    g = conv.energy_fn.norm(x)
    assert ETEnergy(8, heads=2, head_dim=4).double().closed_form_error(g, edges) < 1e-10
    assert conv.energy_fn.closed_form_error(g, edges) > 1e-3
    assert WithClosedForm(8, heads=2, head_dim=4).double().closed_form_error(g, edges) < 1e-10
    conv.grad = "analytic"
    conv.energy_fn = WithClosedForm(8, heads=2, head_dim=4).double()
    assert conv(x, edge_index).shape == x.shape
    conv.fused = False  # the unfused (and explainer) path steps with grad_from_attention_grads
    with pytest.raises(ValueError, match="unfused descent"):
        conv(x, edge_index)

    class OwnHopfield(ETEnergy):  # the relational layer reports the Hopfield term too
        def hopfield_energy_of_g(self, g):
            return 2 * super().hopfield_energy_of_g(g)

    from et_graph.nn import RelationalETConv

    relational = RelationalETConv(8, 2, heads=2, head_dim=4).double()
    relational.energy_fn = OwnHopfield(8, heads=2, head_dim=4).double()
    with pytest.raises(ValueError, match="relational descent"):
        relational(x, edge_index, torch.zeros(edge_index.size(1), dtype=torch.long))
    relational.energy_fn = Smooth(8, heads=2, head_dim=4).double()  # ignored, any grad
    relational.grad = "autograd"
    with pytest.raises(ValueError, match="RelationalETConv descends the built-in energy"):
        relational(x, edge_index, torch.zeros(edge_index.size(1), dtype=torch.long))

    class TanhKeys(ETEnergy):  # a non-linear key map: attention_grad_to_g's chain rule is off
        def keys_queries(self, g):
            k, q = super().keys_queries(g)
            return torch.tanh(k), q

    conv = ETConv(8, heads=2, head_dim=4, steps=2).double()
    conv.energy_fn = TanhKeys(8, heads=2, head_dim=4).double()
    assert conv.energy_fn.closed_form_error(g, edges) > 1e-3
    with pytest.raises(ValueError, match="TanhKeys overrides keys_queries"):
        conv(x, edge_index)


def test_a_pyg_edge_index_is_read_as_the_plain_tensor_it_wraps():
    """PyG's EdgeIndex went through the layer wrapped (every index op through the subclass:
    1.4x slower), its sparse_size was not checked (the unfused path then failed inside PyG),
    and int16 ids were refused where PyG accepts them."""
    from torch_geometric import EdgeIndex

    from et_graph.nn.validation import check_edge_index

    torch.manual_seed(0)
    x, edge_index = torch.randn(30, 8), torch.randint(0, 30, (2, 120))
    conv = ETConv(8, heads=2, head_dim=4, steps=2)
    wrapped = EdgeIndex(edge_index, sparse_size=(30, 30))
    assert type(check_edge_index(wrapped, 30)) is torch.Tensor
    assert torch.equal(conv(x, wrapped), conv(x, edge_index))
    assert torch.equal(conv.eval().forward_chunked(x, wrapped, chunk_size=7),
                       conv.forward_chunked(x, edge_index, chunk_size=7))
    for size in ((35, 35), (30, 33)):
        with pytest.raises(ValueError, match="sparse_size"):
            conv(x, EdgeIndex(edge_index, sparse_size=size))
    assert torch.equal(conv(x, edge_index.to(torch.int16)), conv(x, edge_index))


def test_return_energy_must_be_a_flag():
    """RelationalETConv(x, edge_index, edge_type, w) put w into return_energy: a tuple came
    back (one edge) or "Boolean value of Tensor is ambiguous"."""
    from et_graph.nn import RelationalETConv

    x, edge_index = torch.randn(6, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])
    weight = torch.tensor([0.5])
    with pytest.raises(TypeError, match="return_energy must be True or False, got Tensor"):
        ETConv(8, heads=2, head_dim=4)(x, edge_index[:, :1], None, weight)
    relational = RelationalETConv(8, 2, heads=2, head_dim=4)
    with pytest.raises(TypeError, match="return_energy must be True or False"):
        relational(x, edge_index[:, :1], torch.zeros(1, dtype=torch.long), weight)
    with pytest.raises(TypeError, match="return_energy"):
        ETConv(8, heads=2, head_dim=4).forward_dense(x[None], None, None, weight)
    assert isinstance(ETConv(8, heads=2, head_dim=4)(x, edge_index, None, True), tuple)


def test_a_relational_layer_in_other_fx_code_runs():
    """Any torch.fx GraphModule counted as to_hetero: a RelationalETConv kept as a leaf by a
    custom tracer was refused."""
    import torch.fx

    from et_graph.nn import RelationalETConv

    class KeepLayers(torch.fx.Tracer):
        def is_leaf_module(self, module, name):
            return isinstance(module, RelationalETConv) or super().is_leaf_module(module, name)

    model = _TypedModel(2)
    traced = torch.fx.GraphModule(model, KeepLayers().trace(model))
    x, edge_index = torch.randn(6, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])
    edge_type = torch.tensor([0, 1, 0])
    assert torch.equal(traced(x, edge_index, edge_type), model(x, edge_index, edge_type))


def test_every_integer_edge_index_dtype_is_read():
    """uint16/32/64 ids were let in, then failed in torch.aminmax (no CPU kernel)."""
    from et_graph.nn.validation import check_edge_index

    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.uint16, torch.uint32,
                  torch.uint64, torch.int32):
        assert torch.equal(check_edge_index(edge_index.to(dtype), 4), edge_index)
    with pytest.raises(ValueError, match="integer node ids"):
        check_edge_index(edge_index.float(), 4)


def test_a_kept_edge_plan_does_not_hold_a_calls_edge_weights_after_it():
    # (memory audit) ETConv(cached=True) kept the last edge weights and, without a backward,
    # the autograd graph that made them (an edge encoder's activations) until the next call
    import weakref

    torch.manual_seed(0)
    x, edge_index = torch.randn(10, 8), torch.randint(0, 10, (2, 30))
    encoder = torch.nn.Linear(3, 1)
    conv = ETConv(8, heads=2, head_dim=4, cached=True)
    features = torch.randn(30, 3)
    weight = encoder(features).sigmoid().squeeze(-1)
    first = conv(x, edge_index, weight)
    watched = weakref.ref(weight)
    del weight, first
    assert watched() is None
    plan = conv._edge_cache._entry[2].plan
    assert plan is not None and plan._values is None
    # the same values, and the gradient still reaches the weights
    weight = encoder(features).sigmoid().squeeze(-1)
    again = conv(x, edge_index, weight)
    reference = ETConv(8, heads=2, head_dim=4)
    reference.load_state_dict(conv.state_dict())
    torch.testing.assert_close(again, reference(x, edge_index, weight), rtol=0, atol=0)
    again.sum().backward()
    assert encoder.weight.grad is not None and torch.isfinite(encoder.weight.grad).all()


def test_pyg_conv_habits_are_refused_with_the_reason():
    """ETConv(16, 32), PyG's (in, out) habit, built a 32-head layer without a word, and
    TransformerConv's settings were refused by MessagePassing.__init__ in its own name."""
    from et_graph.nn import RelationalETConv

    with pytest.raises(TypeError, match="positional"):
        ETConv(16, 32)
    with pytest.raises(TypeError, match="positional"):
        RelationalETConv(16, 32, 3)  # RGCNConv(in, out, num_relations)
    for name, value in (("dropout", 0.1), ("bias", False), ("out_channels", 32),
                        ("concat", True), ("root_weight", False),
                        ("beta", True)):
        with pytest.raises(TypeError, match=f"ETConv has no '{name}' \\(TransformerConv's\\)"):
            ETConv(16, **{name: value})
    assert ETConv(16, heads=2, head_dim=4, aggr="add").heads == 2  # MessagePassing's own pass


def test_integer_labels_without_categories_name_the_models_own_argument():
    """ETGraphModel's user was told to pass num_categories, an argument it does not have."""
    from et_graph.nn import EdgeEncoder, NodeEncoder

    model = ETGraphModel(5, 2, pe_dim=0)
    labels = torch.randint(0, 5, (6, 5))
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ValueError, match="num_node_categories to ETGraphModel"):
        model(labels, edge_index, torch.zeros(6, dtype=torch.long))
    with pytest.raises(ValueError, match="num_categories to NodeEncoder"):
        NodeEncoder(8, in_channels=5)(labels)
    with pytest.raises(ValueError, match="edge_categories to ETGraphModel"):
        EdgeEncoder(8, in_channels=2)(torch.randint(0, 3, (4, 2)))


def test_cls_pool_refuses_a_width_that_is_no_positive_int():
    for channels in (16.5, 0, -2, True):
        with pytest.raises(ValueError, match="channels must be a positive int"):
            CLSPool(channels)


def test_a_nan_feature_is_named_by_its_row():
    """The message said how many rows held NaN or inf, not which (a fraud-data audit)."""
    x = torch.randn(6, 8)
    x[4, 1], x[5, 0] = float("nan"), float("inf")
    with pytest.raises(ValueError, match=r"NaN or inf values \(in 2 rows, the first row 4\)"):
        ETConv(8, heads=2, head_dim=4)(x, torch.tensor([[0, 1], [1, 2]]))


def test_cls_readouts_refuse_tokens_from_before_attach():
    """(a user audit) readout took the tokens from before attach() and returned ordinary
    nodes' rows as the CLS tokens, without a word."""
    pool = CLSPool(4)
    x = torch.randn(5, 4)
    edge_index = torch.tensor([[0, 1, 3], [1, 2, 4]])
    batch = torch.tensor([0, 0, 0, 1, 1])
    graph = pool.attach(x, edge_index, batch)
    assert pool.readout(graph.x, graph).shape == (2, 4)
    for read in (lambda t: pool.readout(t, graph), lambda t: pool.readout_sum_mean(t, graph),
                 lambda t: pool.readout_sums([t], graph), lambda t: pool.node_states(t, graph)):
        with pytest.raises(ValueError, match="one row per node of the CLS graph"):
            read(x)


def test_a_boolean_edge_weight_is_refused_as_the_mask_it_is():
    """(a link-prediction audit) a bool mask was read as weights 1.0 / 0.0, and a weight of 0
    keeps its edge in the softmax: the edges a user meant to hide still reached the output."""
    conv = ETConv(4, heads=1, head_dim=2)
    x, edge_index = torch.randn(5, 4), torch.tensor([[0, 1, 4], [2, 2, 2]])
    mask = torch.tensor([True, False, True])
    with pytest.raises(ValueError, match=r"boolean mask.*edge_index\[:, mask\]"):
        conv(x, edge_index, mask)
    conv(x, edge_index, mask.float())  # weights of 0 and 1, said so
    dense = torch.ones(1, 5, 5, dtype=torch.bool)  # (a review: the dense path took it)
    with pytest.raises(ValueError, match="dense edge_weight is a boolean mask"):
        conv.forward_dense(x.unsqueeze(0), edge_weight=dense)


def test_an_explainer_is_told_that_its_mask_misses_the_coupling_term():
    """(a link-prediction audit) the coupling energy reads the edges outside the messages: an
    all-zero edge mask left the output 3.2 from the edgeless one's, without a word."""
    import warnings

    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    from et_graph.exceptions import ConfigWarning

    x, edge_index = torch.randn(6, 6, dtype=torch.float64), torch.tensor([[0, 1, 2], [3, 4, 5]])
    for coupling in (True, False):
        conv = ETConv(6, heads=2, head_dim=3, coupling=coupling).double()
        set_masks(conv, torch.zeros(3, dtype=torch.float64), edge_index, apply_sigmoid=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            conv(x, edge_index)
        clear_masks(conv)
        told = [w for w in caught if issubclass(w.category, ConfigWarning)]
        assert len(told) == coupling, [str(w.message) for w in caught]
        if coupling:
            assert "coupling" in str(told[0].message)


def test_attention_coefficients_are_the_first_steps_messages():
    """(a link-prediction audit) per-edge attention needed a message hook, which switches the
    whole descent to the reference path; ``attention_coefficients`` gives the same ``alpha``,
    aligned with ``edge_index`` (self-loops 0, weights applied)."""
    torch.manual_seed(0)
    conv = ETConv(6, heads=2, head_dim=3, steps=2).double()
    x = torch.randn(5, 6, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 2, 3, 3, 4, 2], [2, 2, 2, 4, 0, 4, 0]])  # (4, 4): a loop
    for weight in (None, torch.rand(7, dtype=torch.float64) + 0.5):
        seen: list = []
        handle = conv.register_message_forward_hook(
            lambda module, inputs, out, seen=seen: seen.append(inputs[0]["alpha"].detach()))
        conv(x, edge_index, weight)
        handle.remove()
        coefficients = conv.attention_coefficients(x, edge_index, weight)
        assert coefficients.shape == (7, 2)
        assert torch.allclose(coefficients, seen[0], atol=1e-12)
        assert bool((coefficients[5] == 0).all())  # the self-loop
        if weight is None:  # each destination's in-edges share one softmax
            sums = torch.zeros(5, 2, dtype=torch.float64).index_add(0, edge_index[1],
                                                                     coefficients)
            assert torch.allclose(sums[[0, 2, 4]], torch.ones(3, 2, dtype=torch.float64))
            assert bool((sums[[1, 3]] == 0).all())  # no in-edges


@pytest.mark.parametrize("options", [{}, {"grad": "autograd"}, {"edge_dim": 3}],
                         ids=["analytic", "autograd", "edge_dim"])
@pytest.mark.parametrize("edges", ["none", "self_loops_only"])
def test_every_parameter_gets_a_gradient_on_an_edgeless_graph(options, edges):
    """A batch without edges (or with self-loops alone) gives every parameter a gradient,
    zero where the attention has nothing to attend, as TransformerConv does: the attention
    temperature got none (an audit), which DistributedDataParallel without
    find_unused_parameters refuses on such a batch."""
    conv = make_conv(**options)
    nodes = 6
    edge_index = (torch.empty(2, 0, dtype=torch.long) if edges == "none"
                  else torch.arange(nodes).repeat(2, 1))
    extra = ({"edge_attr": torch.randn(edge_index.size(1), 3, dtype=torch.float64)}
             if "edge_dim" in options else {})
    conv(torch.randn(nodes, CHANNELS, dtype=torch.float64), edge_index, **extra).sum().backward()
    missing = [name for name, parameter in conv.named_parameters() if parameter.grad is None]
    assert missing == []
    assert float(conv.energy_fn.log_beta.grad.abs().sum()) == 0.0
