"""The optional edge coupling energy E_GC: exact closed form, descent, counting, clear limits."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import awkward_graph, relative_error

from et_graph import energy as E
from et_graph.nn import ETConv
from et_graph.nn.models.graph_model import ETGraphModel


def coupled_conv(**kwargs) -> ETConv:
    torch.manual_seed(0)
    conv = ETConv(8, heads=3, head_dim=4, coupling=True, **kwargs).double()
    with torch.no_grad():  # the coupling starts at zero; give it a value the tests can see
        conv.energy_fn.coupling_raw.normal_(std=0.3)
    return conv


def test_pure_closed_form_matches_autograd_float64():
    gen = torch.Generator().manual_seed(3)
    g = torch.randn(9, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    src, dst = torch.randint(0, 9, (2, 30), generator=gen)
    raw = torch.randn(5, 5, generator=gen, dtype=torch.float64)
    coupling = (raw + raw.t()) / 2
    total = E.coupling_energy(g, src, dst, coupling).sum()
    reference = torch.autograd.grad(total, g)[0]
    assert relative_error(E.coupling_grad(g, src, dst, coupling), reference) < 1e-12
    # The check can fail: an asymmetric W breaks the symmetric closed form.
    reference = torch.autograd.grad(E.coupling_energy(g, src, dst, raw).sum(), g)[0]
    assert relative_error(E.coupling_grad(g, src, dst, raw), reference) > 1e-3


@pytest.mark.parametrize("fused", [True, False])
def test_layer_closed_form_matches_autograd_of_the_whole_energy(fused):
    conv = coupled_conv()
    conv.fused = fused
    x, edge_index = awkward_graph()
    energy = conv.energy_fn
    g = energy.norm(x).detach().requires_grad_(True)
    edges = energy.edges(x, edge_index)
    reference = torch.autograd.grad(energy.node_energy_of_g(g, edges).sum(), g)[0]
    assert relative_error(conv.energy_grad(x, edge_index), reference) < 1e-8
    conv.grad = "autograd"
    assert relative_error(conv.energy_grad(x, edge_index), reference) < 1e-8
    # The coupling is part of that gradient: without it the two differ.
    plain = copy.deepcopy(conv)
    plain.energy_fn.coupling_raw = None  # the plain layer: the coupling is off without it
    plain.grad = "analytic"
    assert relative_error(plain.energy_grad(x, edge_index), reference) > 1e-3


def test_training_gradients_agree_with_autograd_and_reach_the_coupling():
    conv = coupled_conv(steps=2)
    reference = copy.deepcopy(conv)
    reference.grad = "autograd"
    x, edge_index = awkward_graph()
    for module in (conv, reference):
        module(x, edge_index).sin().sum().backward()
    for (name, p), (_, r) in zip(conv.named_parameters(), reference.named_parameters()):
        assert relative_error(p.grad, r.grad) < 1e-8, name
    assert conv.energy_fn.coupling_raw.grad.abs().sum() > 0


def test_energy_never_increases_with_coupling():
    conv = coupled_conv(steps=15, alpha=0.01)
    x, edge_index = awkward_graph(seed=4)
    _, energies = conv(x, edge_index, return_energy=True)
    assert (energies.diff() <= 1e-10 * energies.abs().max()).all(), energies


def test_zero_coupling_is_the_plain_layer():
    torch.manual_seed(0)
    plain = ETConv(8, heads=3, head_dim=4).double()
    torch.manual_seed(0)
    coupled = ETConv(8, heads=3, head_dim=4, coupling=True).double()
    x, edge_index = awkward_graph()
    assert torch.equal(plain(x, edge_index), coupled(x, edge_index))
    assert "coupling=True" in repr(coupled.energy_fn)


def test_the_coupling_step_counts_neighbours():
    """Identical neighbours, different numbers of them: the attention step (a softmax average)
    is the same for both centres, the coupling step grows with the count."""
    x = torch.tensor([[1.0, 0.0, -1.0, 0.5]] * 6 + [[0.2, 0.1, 0.0, -0.3]] * 2,
                     dtype=torch.float64)
    # centre 6 has 2 neighbours (0, 1), centre 7 has 4 (2..5), all with the same token
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [6, 6, 7, 7, 7, 7]])
    torch.manual_seed(0)
    plain = ETConv(4, heads=2, head_dim=2, hopfield_dim=0).double()
    att = plain.energy_grad(x, edge_index)
    assert torch.allclose(att[6], att[7])
    coupled = copy.deepcopy(plain)
    coupled.energy_fn.coupling_raw = torch.nn.Parameter(torch.eye(4, dtype=torch.float64))
    extra = coupled.energy_grad(x, edge_index) - att
    assert torch.allclose(extra[7], 2 * extra[6]) and extra[6].abs().sum() > 0


def test_dense_and_chunked_paths_refuse_the_coupling():
    conv = coupled_conv().eval()
    with pytest.raises(NotImplementedError, match="sparse"):
        conv.forward_dense(torch.randn(2, 5, 8, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match="sparse"):  # its dense split of dE/dg
        conv.dense_attention_and_hopfield_grads(torch.randn(1, 3, 8, dtype=torch.float64))
    x, edge_index = awkward_graph()
    with pytest.raises(NotImplementedError, match="sparse"):
        conv.forward_chunked(x, edge_index)
    with pytest.raises(ValueError, match="coupling"):
        ETConv(8, coupling="yes")
    # Gradients assembled from attention gradients must not drop the coupling silently.
    energy = conv.energy_fn
    g = energy.norm(x)
    grad_k, grad_q = energy.attention_grads(*energy.keys_queries(g), energy.edges(x, edge_index))
    with pytest.raises(ValueError, match="needs the edges"):
        energy.grad_from_attention_grads(g, grad_k, grad_q)


def test_graph_model_passes_the_coupling_to_every_block():
    model = ETGraphModel(3, 2, hidden_channels=8, blocks=2, steps=1, heads=2, head_dim=4,
                         pe_dim=0, coupling=True)
    assert all(conv.energy_fn.coupling for conv in model.convs)
    x = torch.randn(7, 3)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 0, 4, 5, 3]])
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    model(x, edge_index, batch).sum().backward()
    assert all(conv.energy_fn.coupling_raw.grad is not None for conv in model.convs)
