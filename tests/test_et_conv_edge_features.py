"""Edge features in the attention energy (``ETConv(edge_dim=F)``): each edge's features offset
the key its source offers. Exact closed form, every descent path, training, clear limits."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from helpers import awkward_graph, relative_error

from et_graph import energy as E
from et_graph.nn import ETConv, ETEnergy

EDGE_DIM = 3


def edge_conv(**kwargs) -> ETConv:
    torch.manual_seed(0)
    return ETConv(8, heads=3, head_dim=4, edge_dim=EDGE_DIM, **kwargs).double()


def graph_with_features(seed: int = 1):
    x, edge_index = awkward_graph(seed=seed)
    gen = torch.Generator().manual_seed(seed + 10)
    edge_attr = torch.randn(edge_index.size(1), EDGE_DIM, generator=gen, dtype=torch.float64)
    return x, edge_index, edge_attr


def test_pure_closed_form_matches_autograd_float64():
    gen = torch.Generator().manual_seed(3)
    nodes, heads, head_dim = 9, 2, 4
    k = torch.randn(nodes, heads, head_dim, generator=gen, dtype=torch.float64,
                    requires_grad=True)
    q = torch.randn(nodes, heads, head_dim, generator=gen, dtype=torch.float64,
                    requires_grad=True)
    src, dst = torch.randint(0, nodes - 1, (2, 30), generator=gen)  # the last node: no edge
    weight = 0.5 + torch.rand(30, heads, generator=gen, dtype=torch.float64)
    beta = torch.tensor([0.7, 1.3], dtype=torch.float64)
    w_edge = torch.randn(heads, head_dim, EDGE_DIM, generator=gen, dtype=torch.float64)
    attr = torch.randn(30, EDGE_DIM, generator=gen, dtype=torch.float64)
    offset = E.edge_key_offsets(attr, w_edge)
    assert torch.allclose(offset, torch.einsum("hyf,ef->ehy", w_edge, attr))
    total = E.attention_energy(k, q, src, dst, beta, weight, nodes, offset).sum()
    grad_k, grad_q = torch.autograd.grad(total, (k, q))
    closed_k, closed_q = E.attention_grad(k, q, src, dst, beta, weight, nodes, offset)
    assert relative_error(closed_k, grad_k) < 1e-12
    assert relative_error(closed_q, grad_q) < 1e-12
    # The check can fail: the closed form without the offsets is another gradient.
    plain_k, plain_q = E.attention_grad(k, q, src, dst, beta, weight, nodes)
    assert relative_error(plain_q, grad_q) > 1e-3
    # The offsets do not depend on the tokens: dE/dk is the same with and without them.
    assert relative_error(plain_k, closed_k) > 1e-3  # (through the softmax it differs)


@pytest.mark.parametrize("path", ["fused", "unfused", "autograd"])
def test_layer_gradient_of_g_matches_autograd_of_the_whole_energy(path):
    conv = edge_conv(grad="autograd" if path == "autograd" else "analytic")
    conv.fused = path == "fused"
    x, edge_index, edge_attr = graph_with_features()
    energy = conv.energy_fn
    g = energy.norm(x).detach().requires_grad_(True)
    edges = energy.edges(x, edge_index, edge_attr=edge_attr)
    reference = torch.autograd.grad(energy.node_energy_of_g(g, edges).sum(), g)[0]
    assert relative_error(conv.energy_grad(x, edge_index, edge_attr=edge_attr), reference) < 1e-10
    assert energy.closed_form_error(g.detach(), edges) < 1e-12
    # The features are part of that gradient: other features, another gradient.
    other = conv.energy_grad(x, edge_index, edge_attr=edge_attr.flip(0))
    assert relative_error(other, reference) > 1e-3


def test_every_path_descends_to_the_same_tokens_and_the_energy_falls():
    x, edge_index, edge_attr = graph_with_features()
    conv = edge_conv(steps=4, alpha=0.05)
    out, energies = conv(x, edge_index, edge_attr=edge_attr, return_energy=True)
    assert bool((energies[1:] < energies[:-1]).all()), energies
    assert E.energy_is_monotone(energies)
    for change in ({"fused": False}, {"grad": "autograd"}):
        other = copy.deepcopy(conv)
        for name, value in change.items():
            setattr(other, name, value)
        assert torch.allclose(other(x, edge_index, edge_attr=edge_attr), out, atol=1e-12)
    # a message hook (the explainers' path) sees the messages and the same result
    seen = []
    hooked = copy.deepcopy(conv)
    hooked.register_message_forward_hook(lambda module, inputs, output: seen.append(output))
    assert torch.allclose(hooked(x, edge_index, edge_attr=edge_attr), out, atol=1e-12)
    assert seen
    # cached edges read each call's features (the cache keeps the graph, not the features)
    cached = copy.deepcopy(conv)
    cached.cached = True
    assert torch.allclose(cached(x, edge_index, edge_attr=edge_attr), out, atol=1e-12)
    moved = cached(x, edge_index, edge_attr=2 * edge_attr)
    assert not torch.allclose(moved, out)
    assert torch.allclose(moved, conv(x, edge_index, edge_attr=2 * edge_attr), atol=1e-12)


def test_zero_features_are_the_plain_layer_and_self_loops_drop_their_rows():
    x, edge_index, edge_attr = graph_with_features()
    conv = edge_conv(steps=2)
    plain = ETConv(8, heads=3, head_dim=4, steps=2).double()
    plain.load_state_dict({k: v for k, v in conv.state_dict().items() if "w_edge" not in k})
    zeros = torch.zeros_like(edge_attr)
    assert torch.allclose(conv(x, edge_index, edge_attr=zeros), plain(x, edge_index),
                          atol=1e-12)
    # the awkward graph holds self-loops: their features count for nothing
    loop = (edge_index[0] == edge_index[1]).nonzero().flatten()
    assert loop.numel() >= 1
    changed = edge_attr.clone()
    changed[loop] = 100.0
    assert torch.equal(conv(x, edge_index, edge_attr=changed),
                       conv(x, edge_index, edge_attr=edge_attr))
    coefficients = conv.attention_coefficients(x, edge_index, edge_attr=edge_attr)
    assert coefficients.shape == (edge_index.size(1), 3)
    assert bool((coefficients[loop] == 0).all())
    # coefficients are a softmax over each destination's in-edges
    sums = torch.zeros(x.size(0), 3, dtype=x.dtype).index_add(0, edge_index[1], coefficients)
    has_in_edge = torch.zeros(x.size(0), dtype=torch.bool)
    has_in_edge[edge_index[1][edge_index[0] != edge_index[1]]] = True
    assert torch.allclose(sums[has_in_edge], torch.ones_like(sums[has_in_edge]))
    plain_coefficients = plain.attention_coefficients(x, edge_index)
    assert not torch.allclose(coefficients, plain_coefficients)


def test_training_reaches_the_edge_map_and_the_features():
    x, edge_index, edge_attr = graph_with_features()
    conv = edge_conv(steps=2)
    attr = edge_attr.clone().requires_grad_(True)
    tokens = x.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda t, a: conv(t, edge_index, edge_attr=a), (tokens, attr), atol=1e-7)
    out = conv(tokens, edge_index, edge_attr=attr)
    out.pow(2).sum().backward()
    assert conv.energy_fn.w_edge.grad is not None
    assert float(conv.energy_fn.w_edge.grad.abs().sum()) > 0
    # the analytic step's parameter gradients are autograd's of the reference descent
    reference = copy.deepcopy(conv)
    reference.grad = "autograd"
    reference.zero_grad()
    reference(x, edge_index, edge_attr=edge_attr).pow(2).sum().backward()
    conv.zero_grad()
    conv(x, edge_index, edge_attr=edge_attr).pow(2).sum().backward()
    for (name, mine), (_, theirs) in zip(conv.named_parameters(), reference.named_parameters()):
        assert relative_error(mine.grad, theirs.grad) < 1e-9, name


@pytest.mark.parametrize("larger_features", [False, True], ids=["own_rows", "kept_rows"])
@pytest.mark.parametrize("weight_columns", [None, 1, 3])
def test_fused_kernel_with_offsets_matches_the_reference_and_its_derivatives(weight_columns,
                                                                            larger_features):
    """The fused kernel's form with key offsets (no [E, H, Y] tensor) against the reference
    closed form, values and every first derivative in float64; its second derivatives by
    gradgradcheck (they run through the reference, differentiated by autograd).
    ``larger_features``: the edges read ``attr_rows`` of a larger feature array (a layer's
    self-loops dropped, session 74), with no copy of them first; the other rows (first,
    middle, last) get a zero gradient."""
    from et_graph.fused import _FusedOffsetAttentionGrad, fused_offset_attention_grad

    gen = torch.Generator().manual_seed(5)
    nodes, heads, head_dim, edges = 7, 3, 4, 25

    def leaf(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_()

    src, dst = torch.randint(0, nodes - 1, (2, edges), generator=gen)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    count = src.numel()
    attr_rows = unread = None
    rows = count
    if larger_features:
        rows = count + 5
        unread = torch.tensor([0, 4, 9, rows - 2, rows - 1])
        read = torch.ones(rows, dtype=torch.bool)
        read[unread] = False
        attr_rows = read.nonzero().view(-1)
    k, q, attr = leaf(nodes, heads, head_dim), leaf(nodes, heads, head_dim), leaf(rows, 2)
    w_edge, beta = leaf(heads, head_dim, 2), (0.5 + torch.rand(heads, generator=gen,
                                                                 dtype=torch.float64))
    beta.requires_grad_()
    weight = None if weight_columns is None else (
        0.5 + torch.rand(count, weight_columns, generator=gen, dtype=torch.float64)
    ).requires_grad_()
    inputs = [t for t in (k, q, beta, weight, attr, w_edge) if t is not None]
    up = (torch.randn(nodes, heads, head_dim, generator=gen, dtype=torch.float64),
          torch.randn(nodes, heads, head_dim, generator=gen, dtype=torch.float64))

    def fused(*t):
        k, q, beta, attr, w_edge = t
        return fused_offset_attention_grad(k, q, src, dst, beta, weight, attr, w_edge,
                                           attr_rows=attr_rows)

    def reference():
        read_attr = attr if attr_rows is None else attr[attr_rows]
        return E.attention_grad(k, q, src, dst, beta, weight, nodes,
                                E.edge_key_offsets(read_attr, w_edge))

    calls = []
    apply = _FusedOffsetAttentionGrad.apply
    _FusedOffsetAttentionGrad.apply = lambda *a: calls.append(1) or apply(*a)
    try:
        got = fused(k, q, beta, attr, w_edge)
    finally:
        _FusedOffsetAttentionGrad.apply = apply
    assert calls  # the fused kernel ran, not a fallback
    expected = reference()
    for mine, theirs in zip(got, expected):
        assert relative_error(mine, theirs) < 1e-12
    mine = torch.autograd.grad(got, inputs, up)
    theirs = torch.autograd.grad(expected, inputs, up)
    for a, b in zip(mine, theirs):
        assert relative_error(a, b) < 1e-11
    if larger_features:
        d_attr = mine[next(i for i, t in enumerate(inputs) if t is attr)]
        assert d_attr.shape == attr.shape and bool((d_attr[unread] == 0).all())
        assert bool((d_attr[attr_rows].abs().sum(1) > 0).all())
    assert torch.autograd.gradgradcheck(fused, (k, q, beta, attr, w_edge))


@pytest.mark.parametrize("chunk_size, chunk_edges", [(1, None), (5, None), (4, 6), (100, None)])
def test_chunked_inference_reads_the_features_as_the_full_pass(chunk_size, chunk_edges):
    x, edge_index, edge_attr = graph_with_features()
    conv = edge_conv(steps=3).eval()
    weight = 0.5 + torch.rand(edge_index.size(1), 3, generator=torch.Generator().manual_seed(4),
                              dtype=torch.float64)
    with torch.no_grad():
        full = conv(x, edge_index, weight, edge_attr=edge_attr)
    chunked = conv.forward_chunked(x, edge_index, weight, chunk_size=chunk_size,
                                   chunk_edges=chunk_edges, edge_attr=edge_attr)
    assert torch.allclose(chunked, full, atol=1e-12)
    other = conv.forward_chunked(x, edge_index, weight, chunk_size=chunk_size,
                                 chunk_edges=chunk_edges, edge_attr=2 * edge_attr)
    assert not torch.allclose(other, full)
    with pytest.raises(ValueError, match="built without edge_dim"):
        ETConv(8).double().eval().forward_chunked(x, edge_index, edge_attr=edge_attr)


def test_a_subclass_closed_form_that_forgets_the_features_is_refused():
    """The layer's first analytic step compares a subclass's closed form with autograd of its
    energy at a random point; that point carries edge features when the energy takes them."""

    class ForgetsFeatures(ETEnergy):
        def attention_grads(self, k, q, edges, fused=True):
            return E.attention_grad(k, q, edges.src, edges.dst, self.beta, edges.weight,
                                    k.size(0))  # (without self.key_offsets(edges))

    x, edge_index, edge_attr = graph_with_features()
    conv = edge_conv(energy_cls=ForgetsFeatures)
    with pytest.raises(ValueError, match="closed form of dE/dg on the fused path differs"):
        conv(x, edge_index, edge_attr=edge_attr)
    # without edge features the same override is the built-in closed form
    plain = ETConv(8, heads=3, head_dim=4, energy_cls=ForgetsFeatures).double()
    plain(x, edge_index)


def test_edges_built_beforehand_must_match_the_layers_edge_dim():
    """descend_edges ran an edge-feature layer on edges without features as the plain layer,
    and a plain layer on featured edges ignored them (a molecular-graph audit)."""
    x, edge_index, edge_attr = graph_with_features()
    conv = edge_conv()
    plain = ETConv(8, heads=3, head_dim=4).double()
    featured = conv.energy_fn.edges(x, edge_index, plan=True, edge_attr=edge_attr)
    assert torch.equal(conv.descend_edges(x, featured), conv(x, edge_index, edge_attr=edge_attr))
    with pytest.raises(ValueError, match="carry no edge features"):
        conv.descend_edges(x, plain.energy_fn.edges(x, edge_index, plan=True))
    with pytest.raises(ValueError, match="carry no edge features"):  # the energy's own methods
        conv.energy_fn.grad_of_g(x, conv.energy_fn.weighted(
            conv.energy_fn.topology(x, edge_index, plan=True), None, x.dtype))
    with pytest.raises(ValueError, match="would ignore them"):
        plain.descend_edges(x, featured)
    # edges built once (on a graph without self-loops, whose removal would index the
    # features in the EdgeSet itself) and reused across training iterations: each backward
    # frees the graph that reordered the features, so the layer must not keep that copy
    no_loops = edge_index[0] != edge_index[1]
    attr = torch.nn.Parameter(edge_attr[no_loops].clone())
    kept = conv.energy_fn.edges(x, edge_index[:, no_loops], plan=True, edge_attr=attr)
    for _ in range(2):
        conv.descend_edges(x, kept).sum().backward()
    wider = ETConv(8, heads=3, head_dim=4, edge_dim=5).double()
    with pytest.raises(ValueError, match=r"edge_dim=5 but the edges carry \[E, 3\]"):
        wider.descend_edges(x, featured)


def test_a_layer_pickled_before_edge_features_existed_still_runs():
    """Its energy's state has no w_edge entry (layers are saved whole in detectors' files); it
    failed on its first forward with an AttributeError (a review)."""
    x, edge_index = awkward_graph()
    conv = ETConv(8, heads=3, head_dim=4).double()
    old = copy.deepcopy(conv)
    del old.energy_fn._parameters["w_edge"]  # the state such a file holds
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.edge_dim is None and loaded.energy_fn.w_edge is None
    assert torch.equal(loaded(x, edge_index), conv(x, edge_index))


def test_only_self_loops_still_connect_the_features_and_a_patched_offset_is_probed():
    x, _, _ = graph_with_features()
    conv = edge_conv()
    loops = torch.arange(4).repeat(2, 1)
    attr = torch.randn(4, EDGE_DIM, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(conv(x, loops, edge_attr=attr).sum(), attr)
    assert torch.equal(grad, torch.zeros_like(attr))
    # a key_offsets replaced on the object: the fused path reads w_edge itself, so the probe
    # must compare it with the energy the object reports
    x, edge_index, edge_attr = graph_with_features()
    patched = edge_conv()
    fn = patched.energy_fn
    original = fn.key_offsets
    fn.key_offsets = lambda edges: None if original(edges) is None else 2 * original(edges)
    with pytest.raises(ValueError, match="differs from autograd"):
        patched(x, edge_index, edge_attr=edge_attr)


def test_an_energy_subclass_without_edge_dim_is_named():
    class Older(ETEnergy):
        def __init__(self, channels, heads=4, head_dim=16, hopfield_dim=None, hopfield="relu",
                     hopfield_beta=1.0, beta_init=None, eps=1e-5, coupling=False):
            super().__init__(channels, heads, head_dim, hopfield_dim, hopfield, hopfield_beta,
                             beta_init, eps, coupling)

    assert ETConv(8, energy_cls=Older).edge_dim is None  # as before, without edge_dim
    with pytest.raises(TypeError, match="Older takes no edge_dim"):
        ETConv(8, edge_dim=2, energy_cls=Older)

    class Swallows(ETEnergy):  # takes **kwargs but drops edge_dim (a review)
        def __init__(self, channels, heads=4, head_dim=16, **kwargs):
            kwargs.pop("edge_dim", None)
            super().__init__(channels, heads, head_dim, **kwargs)

    with pytest.raises(TypeError, match="pass it on to ETEnergy"):
        ETConv(8, edge_dim=2, energy_cls=Swallows)


def test_settings_show_save_and_load():
    conv = edge_conv()
    assert conv.edge_dim == EDGE_DIM and conv.energy_fn.edge_dim == EDGE_DIM
    assert "edge_dim=3" in repr(conv) and "edge_dim=3" in repr(conv.energy_fn)
    assert ETConv(8).edge_dim is None and "edge_dim" not in repr(ETConv(8))
    assert tuple(conv.energy_fn.w_edge.shape) == (3, 4, EDGE_DIM)
    assert conv.w_edge is conv.energy_fn.w_edge and ETConv(8).w_edge is None
    x, edge_index, edge_attr = graph_with_features()
    copy_ = pickle.loads(pickle.dumps(conv))
    assert torch.equal(copy_(x, edge_index, edge_attr=edge_attr),
                       conv(x, edge_index, edge_attr=edge_attr))
    fresh = edge_conv()
    with torch.no_grad():
        fresh.energy_fn.w_edge.zero_()
    fresh.load_state_dict(conv.state_dict())
    assert torch.equal(fresh.energy_fn.w_edge, conv.energy_fn.w_edge)
    with pytest.raises(RuntimeError, match="w_edge"):
        ETConv(8, heads=3, head_dim=4).double().load_state_dict(conv.state_dict())


def test_bad_inputs_are_refused_by_name():
    x, edge_index, edge_attr = graph_with_features()
    conv = edge_conv()
    with pytest.raises(ValueError, match=r"built with edge_dim=3: pass edge_attr \[E, 3\]"):
        conv(x, edge_index)
    with pytest.raises(ValueError, match="built without edge_dim"):
        ETConv(8).double()(x, edge_index, edge_attr=edge_attr)
    with pytest.raises(ValueError, match=r"shape \[E, edge_dim\]=\[43, 3\]"):
        conv(x, edge_index, edge_attr=edge_attr[:, :2])
    with pytest.raises(ValueError, match=r"shape \[E, edge_dim\]=\[43, 3\]"):
        conv(x, edge_index, edge_attr=edge_attr[:-1])
    with pytest.raises(ValueError, match="one_hot"):
        conv(x, edge_index, edge_attr=torch.zeros(43, 3, dtype=torch.long))
    nan = edge_attr.clone()
    nan[4, 1] = float("nan")
    with pytest.raises(ValueError, match="edge_attr contains NaN"):
        conv(x, edge_index, edge_attr=nan)
    with pytest.raises(ValueError, match="edge_attr"):  # float64 features, float32 layer
        edge_conv().float()(x.float(), edge_index, edge_attr=edge_attr)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(43), (12, 12))
    with pytest.raises(ValueError, match="sparse adjacency has no edge order"):
        conv(x, adj, edge_attr=edge_attr)
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="edge_dim must be a positive int"):
            ETConv(8, edge_dim=bad)
    with pytest.raises(ValueError, match=r"built with edge_dim=3: pass edge_attr"):
        conv.eval().forward_chunked(x, edge_index)
    with pytest.raises(NotImplementedError, match="sparse paths only"):
        conv.forward_dense(x.unsqueeze(0))
    # PyG's habit, edge_attr third positional, lands on edge_weight: named
    with pytest.raises(ValueError, match="pass the edge features by name"):
        conv(x, edge_index, edge_attr)
    with pytest.raises(ValueError, match="keyword edge_attr="):
        ETConv(8, heads=4).double()(x, edge_index, edge_attr)  # [E, 3] read as weights
    with pytest.raises(ValueError, match=r"one_hot\(ids, num_classes=K\)"):
        conv(x, edge_index, edge_attr=torch.ones(43, 3, dtype=torch.long))
    one = ETConv(8, heads=3, head_dim=4, edge_dim=1).double()
    assert torch.equal(one(x, edge_index, edge_attr=edge_attr[:, 0]),
                       one(x, edge_index, edge_attr=edge_attr[:, :1]))


def test_a_forward_keeps_one_copy_of_the_edge_features():
    """Memory (session 74): the layer copied the caller's non-loop rows, the fused kernel
    sorted that copy, and each step saved ``r = q W^E`` ``[H, N, F]`` for backward. Now the
    layer hands the caller's features over with the kept rows' indices (no copy), the kernel
    makes its one sorted copy from them (shared by the steps and saved once), and ``r`` is
    redone in backward: one ``[H, N, F]`` array saved per step."""
    x, edge_index, edge_attr = graph_with_features()
    assert bool((edge_index[0] == edge_index[1]).any())  # self-loops: rows to drop
    steps = 3
    conv = edge_conv(steps=steps)
    nodes, heads = x.size(0), conv.energy_fn.heads
    edges = conv.energy_fn.edges(x, edge_index, plan=True, edge_attr=edge_attr)
    assert edges.attr is edge_attr and edges.attr_rows is not None
    assert torch.equal(edges.kept_attr(), edge_attr[edge_index[0] != edge_index[1]])
    saved = []

    def pack(tensor):
        saved.append((tuple(tensor.shape), tensor.data_ptr()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        conv(x.clone().requires_grad_(True), edge_index, edge_attr=edge_attr).sum().backward()
    feature_shaped = {ptr for shape, ptr in saved
                      if len(shape) == 2 and shape[1] == EDGE_DIM and shape[0] > nodes}
    assert len(feature_shaped) == 1 and edge_attr.data_ptr() not in feature_shaped
    per_node_features = [shape for shape, _ in saved if shape == (heads, nodes, EDGE_DIM)]
    assert len(per_node_features) == steps
