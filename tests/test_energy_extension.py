"""A researcher's new energy term, kernel or Hopfield energy (an audit, session 61).

The layer descends ``energy_fn`` (an ``ETEnergy``); each test below is a way a subclass was
descended with something other than its own energy, without a word, before its fix.
"""
import re
import types
import warnings
from pathlib import Path

import pytest
import torch

import et_graph.energy as E
from et_graph.nn import ETConv, ETEnergy

DOCS = Path(__file__).resolve().parents[1] / "docs" / "derivation.md"


def graph(nodes: int = 10, edges: int = 30, width: int = 6):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(nodes, width, generator=generator, dtype=torch.float64)
    return x, torch.randint(0, nodes, (2, edges), generator=generator)


def layer(energy_cls=ETEnergy, **settings) -> ETConv:
    torch.manual_seed(1)
    options = {"heads": 2, "head_dim": 3, "hopfield_dim": 4, "steps": 3, "alpha": 0.05}
    return ETConv(6, energy_cls=energy_cls, **{**options, **settings}).double()


def test_the_documented_example_runs():
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Adding an energy term"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, str(DOCS), "exec"), {"__name__": "docs_example"})


def distance_logits(k, q, src, dst, beta):
    return -0.5 * (k.index_select(0, src) - q.index_select(0, dst)).pow(2).sum(-1) * beta


class DistanceKernel(ETEnergy):
    """Attention on ``-beta/2 |k_B - q_C|^2`` instead of the dot product, closed form included."""

    def node_energy_of_g(self, g, edges):
        k, q = self.keys_queries(g)
        logits = distance_logits(k, q, edges.src, edges.dst, self.beta)
        lse = E.segment_logsumexp(logits, edges.dst, g.size(0))
        return -(lse / self.beta).sum(-1) + self.hopfield_energy_of_g(g)

    def attention_grads(self, k, q, edges, fused=True):
        src, dst = edges.src, edges.dst
        p = E.segment_softmax(distance_logits(k, q, src, dst, self.beta), dst, k.size(0))
        diff = (k.index_select(0, src) - q.index_select(0, dst)) * p.unsqueeze(-1)
        return (torch.zeros_like(k).index_add(0, src, diff),
                torch.zeros_like(q).index_add(0, dst, -diff))


def test_a_new_attention_is_descended_on_the_fused_path_and_refused_on_the_message_path():
    """The message path computes the dot-product coefficients itself: it stepped 0.5 away from
    autograd of the new kernel's energy, silently."""
    x, edge_index = graph()
    reference = layer(DistanceKernel, grad="autograd")(x, edge_index)
    torch.testing.assert_close(layer(DistanceKernel)(x, edge_index), reference)
    unfused = layer(DistanceKernel)
    unfused.fused = False
    with pytest.raises(ValueError, match="attention_grads .a new attention., which the message"):
        unfused(x, edge_index)
    hooked = layer(DistanceKernel)
    hooked.register_message_forward_hook(lambda module, inputs, output: None)
    with pytest.raises(ValueError, match="message path"):
        hooked(x, edge_index)


class SoftplusHopfield(ETEnergy):
    """A new Hopfield energy ``-sum softplus(g xi^T)^2 / 2`` with its own closed form."""

    def hopfield_energy_of_g(self, g):
        return -0.5 * torch.nn.functional.softplus(g @ self.xi.t()).pow(2).sum(-1)

    def hopfield_grad_of_g(self, g):
        hidden = g @ self.xi.t()
        return -(torch.nn.functional.softplus(hidden) * torch.sigmoid(hidden)) @ self.xi


def test_a_new_hopfield_energy_is_descended_through_its_own_gradient():
    """grad_from_attention_grads used the built-in activation, so hopfield_grad_of_g was not
    a closed form any path read, and the attention/Hopfield split did not sum to the step."""
    x, edge_index = graph()
    conv = layer(SoftplusHopfield)
    reference = layer(SoftplusHopfield, grad="autograd")(x, edge_index)
    torch.testing.assert_close(conv(x, edge_index), reference)
    fn = conv.energy_fn
    edges, g = fn.edges(x, edge_index), fn.norm(x)
    attention, hopfield = fn.attention_and_hopfield_grads(g, edges)
    torch.testing.assert_close(attention + hopfield, fn.grad_of_g(g, edges))


def test_a_method_replaced_on_the_object_is_checked_as_a_subclass_is():
    x, edge_index = graph()
    conv = layer()
    fn = conv.energy_fn
    fn.hopfield_energy_of_g = types.MethodType(
        lambda self, g: ETEnergy.hopfield_energy_of_g(self, g) + g.pow(2).sum(-1), fn)
    with pytest.raises(ValueError, match="overrides hopfield_energy_of_g but not the closed"):
        conv(x, edge_index)


class Anchored(ETEnergy):
    def node_energy_of_g(self, g, edges):
        return super().node_energy_of_g(g, edges) + 0.5 * g.pow(2).sum(-1)

    def grad_from_attention_grads(self, g, grad_k, grad_q, edges=None):
        return super().grad_from_attention_grads(g, grad_k, grad_q, edges) + g


@pytest.mark.parametrize("grad", ["analytic", "autograd"])
def test_the_dense_path_refuses_a_term_it_would_drop(grad):
    """On a complete graph the sparse and dense paths gave tokens 0.7 apart."""
    conv = layer(Anchored, grad=grad)
    with pytest.raises(ValueError, match="not dense_node_energy_of_g"):
        conv.forward_dense(torch.randn(1, 5, 6, dtype=torch.float64))


def test_overriding_the_reported_energy_of_the_layer_warns():
    with pytest.warns(UserWarning, match="which the descent does not read"):
        class Reported(ETConv):  # noqa: F841 (defining it is the test)
            def node_energy(self, x, edge_index, edge_weight=None):
                return super().node_energy(x, edge_index, edge_weight) + 1.0


def test_energy_cls_must_be_an_energy_and_closed_form_error_is_quiet():
    with pytest.raises(TypeError, match="energy_cls must be ETEnergy"):
        ETConv(6, energy_cls=torch.nn.Linear)
    x, edge_index = graph()
    fn = layer(Anchored).energy_fn
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # it warned about converting a tensor that needs grad
        assert fn.closed_form_error(fn.norm(x), fn.edges(x, edge_index)) < 1e-12


class HopfieldAndAnchor(SoftplusHopfield):
    """A new Hopfield energy with its gradient, and a term in node_energy_of_g without one."""

    def node_energy_of_g(self, g, edges):
        return super().node_energy_of_g(g, edges) + 0.5 * g.pow(2).sum(-1)


def test_a_hopfield_gradient_does_not_cover_another_new_term():
    """From the review: any closed-form override counted as covering every energy override,
    so this class was descended 0.3 away from its energy."""
    x, edge_index = graph()
    with pytest.raises(ValueError, match="overrides node_energy_of_g but not the closed form"
                                         r".*add the term's gradient in grad_from_attention_grads"):
        layer(HopfieldAndAnchor)(x, edge_index)  # (it said "override grad_of_g too", which
        # counts a term twice beside grad_from_attention_grads: a contributor audit)


class Ridge(ETEnergy):
    """A quadratic term lam/2 |g|^2 with its closed form where docs/derivation.md puts it."""

    factor = 1.0  # the closed form's factor: 1 is right, 2 a slip of the kind an audit made

    def node_energy_of_g(self, g, edges):
        return super().node_energy_of_g(g, edges) + 0.15 * (g * g).sum(-1)

    def dense_node_energy_of_g(self, g, mask, weight=None):
        return super().dense_node_energy_of_g(g, mask, weight) + 0.15 * (g * g).sum(-1)

    def grad_from_attention_grads(self, g, grad_k, grad_q, edges=None):
        return (super().grad_from_attention_grads(g, grad_k, grad_q, edges)
                + self.factor * 0.3 * g)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_closed_form_that_differs_from_autograd_of_the_energy_is_refused(dtype):
    # A factor 2 in a new term's gradient passed every check (the override ones look only at
    # which methods are overridden) and was descended on every path without a word (an audit)
    class Slipped(Ridge):
        factor = 2.0

    x, edge_index = graph()
    torch.manual_seed(3)
    layer(Ridge).to(dtype)(x.to(dtype), edge_index)  # the right one passes
    for run in ("fused", "unfused", "dense"):
        conv = layer(Slipped).to(dtype)
        conv.fused = run != "unfused"
        with pytest.raises(ValueError, match=rf"Slipped's closed form of dE/dg on the {run} path "
                                             "differs from autograd of the energy it reports"):
            if run == "dense":
                conv.forward_dense(x.to(dtype).view(2, 5, 6))
            else:
                conv(x.to(dtype), edge_index)
    # grad="autograd" descends the energy itself, so it is not refused
    layer(Slipped, grad="autograd").to(dtype)(x.to(dtype), edge_index)


def test_the_probe_draws_no_random_number_of_the_run_and_a_patched_class_is_checked_again():
    class Fresh(Ridge):
        pass

    x, edge_index = graph()
    conv = layer(Fresh)
    torch.manual_seed(5)
    conv(x, edge_index)  # Fresh's first check: the probe runs
    after = torch.rand(4)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(4))
    # a class patched after its first check was descended unchecked (an audit)
    Fresh.factor = 1.0
    Fresh.grad_from_attention_grads = lambda self, g, gk, gq, edges=None: (
        ETEnergy.grad_from_attention_grads(self, g, gk, gq, edges) + 0.6 * g)
    with pytest.raises(ValueError, match="Fresh's closed form of dE/dg on the fused path"):
        conv(x, edge_index)


def test_the_attention_and_hopfield_split_keeps_a_new_terms_share_on_both_paths():
    # The dense split returned the built-in Hopfield gradient, so its parts summed to a step
    # 0.7 away from the layer's; a closed form in grad_of_g was dropped on the sparse one (an
    # audit)
    class InGradOfG(ETEnergy):
        def node_energy_of_g(self, g, edges):
            return super().node_energy_of_g(g, edges) + 0.15 * (g * g).sum(-1)

        def grad_of_g(self, g, edges, fused=True):
            return super().grad_of_g(g, edges, fused) + 0.3 * g

    class HopfieldAndRidge(SoftplusHopfield):  # both: the split dropped the ridge (a review)
        def node_energy_of_g(self, g, edges):
            return super().node_energy_of_g(g, edges) + 0.15 * (g * g).sum(-1)

        def grad_from_attention_grads(self, g, grad_k, grad_q, edges=None):
            return super().grad_from_attention_grads(g, grad_k, grad_q, edges) + 0.3 * g

    x, edge_index = graph()
    for cls in (Ridge, InGradOfG, HopfieldAndRidge):
        fn = layer(cls).energy_fn
        g = fn.norm(x)
        edges = fn.edges(x, edge_index)
        attention, rest = fn.attention_and_hopfield_grads(g, edges)
        assert torch.allclose(attention + rest, fn.grad_of_g(g, edges), atol=1e-12)
    fn = layer(Ridge).energy_fn
    tokens = fn.norm(x).view(2, 5, 6)
    mask = ~torch.eye(5, dtype=torch.bool).expand(2, 5, 5)
    attention, rest = fn.dense_attention_and_hopfield_grads(tokens, mask)
    assert torch.allclose(attention + rest, fn.dense_grad_of_g(tokens, mask), atol=1e-12)


def test_a_terms_own_settings_go_in_energy_kwargs():
    # a term could not carry a setting: energy_cls=partial(...) was refused and the setting
    # given to the layer failed in MessagePassing.__init__ (an audit)
    class Strength(Ridge):
        def __init__(self, channels, *, strength, **settings):
            super().__init__(channels, **settings)
            self.strength = strength

    conv = layer(Strength, energy_kwargs={"strength": 0.4})
    assert conv.energy_fn.strength == 0.4 and conv.energy_fn.heads == 2
    x, edge_index = graph()
    conv(x, edge_index)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['strength'\]; a "
                                        r"setting of Strength's own goes in energy_kwargs="):
        layer(Strength, strength=0.4)
    with pytest.raises(TypeError, match=r"energy_kwargs sets \['heads'\], which are ETConv's"):
        layer(Strength, energy_kwargs={"strength": 0.4, "heads": 3})


class WeightedSmoothness(ETEnergy):
    """A term that reads the edge weights: lam/2 sum_edges w |g_src - g_dst|^2, exact."""

    def smooth(self, g, edges):
        w = edges.weight[:, :1] if edges.weight is not None else 1.0
        diff = (g.index_select(0, edges.src) - g.index_select(0, edges.dst)) * w.sqrt()
        return torch.zeros(g.size(0), dtype=g.dtype).index_add(0, edges.dst,
                                                                0.05 * diff.pow(2).sum(-1))

    def node_energy_of_g(self, g, edges):
        return super().node_energy_of_g(g, edges) + self.smooth(g, edges)

    def grad_from_attention_grads(self, g, grad_k, grad_q, edges=None):
        w = edges.weight[:, :1] if edges.weight is not None else 1.0
        diff = (g.index_select(0, edges.src) - g.index_select(0, edges.dst)) * w * 0.1
        pull = torch.zeros_like(g).index_add(0, edges.src, diff).index_add(0, edges.dst, -diff)
        return super().grad_from_attention_grads(g, grad_k, grad_q, edges) + pull


def test_the_probe_accepts_right_terms_wherever_the_layer_runs_them():
    # (a review) a term reading edge weights met the probe's weightless edges and raised a
    # TypeError; vmap refused the probe's random draws; activation checkpointing counted the
    # probe's saved tensors; a term with dropout drew from the run's random stream
    from torch.func import functional_call, stack_module_state, vmap
    from torch.utils.checkpoint import checkpoint

    x, edge_index = graph()
    weight = torch.rand(edge_index.size(1), dtype=torch.float64) + 0.5
    layer(WeightedSmoothness)(x, edge_index, weight)
    models = [layer(Ridge) for _ in range(2)]
    params, buffers = stack_module_state(models)
    base = layer(Ridge)
    out = vmap(lambda p, b: functional_call(base, (p, b), (x, edge_index)))(params, buffers)
    assert out.shape == (2, *x.shape)
    conv = layer(Ridge)
    checkpoint(conv, x.requires_grad_(), edge_index, use_reentrant=False).sum().backward()

    class Noisy(Ridge):
        def __init__(self, channels, **settings):
            super().__init__(channels, **settings)
            self.drop = torch.nn.Dropout(0.5)

        def node_energy_of_g(self, g, edges):
            return super().node_energy_of_g(self.drop(g), edges)

    noisy = layer(Noisy)  # in training mode: the probe compares in eval mode
    state = torch.get_rng_state()
    noisy(x.detach(), edge_index)  # the analytic descent draws nothing; nor does the probe
    assert torch.equal(state, torch.get_rng_state())


def test_the_probe_is_per_object_and_once():
    # (a review) the verdict was the first object's for its whole class, and a probe that
    # could not be cached ran at every descent step
    class Forgets(ETEnergy):
        def __init__(self, channels, *, strength=1.0, **settings):
            super().__init__(channels, **settings)
            self.strength = strength

        def node_energy_of_g(self, g, edges):
            return super().node_energy_of_g(g, edges) + 0.5 * self.strength * (g * g).sum(-1)

        def grad_from_attention_grads(self, g, grad_k, grad_q, edges=None):  # strength 1 only
            return super().grad_from_attention_grads(g, grad_k, grad_q, edges) + g

    x, edge_index = graph()
    layer(Forgets)(x, edge_index)
    with pytest.raises(ValueError, match="Forgets's closed form"):
        layer(Forgets, energy_kwargs={"strength": 3.0})(x, edge_index)
    conv = layer(Forgets)
    calls = []
    import et_graph.nn.conv.et_energy as module

    probe = module._closed_form_mismatch
    try:
        module._closed_form_mismatch = lambda *args: calls.append(1) or probe(*args)
        for _ in range(3):
            conv(x, edge_index)
    finally:
        module._closed_form_mismatch = probe
    assert calls == [1]  # three forwards of three steps: one probe
    # the verdicts, keyed by method objects, stay out of a pickle: a lambda patched on the
    # class would not pickle
    import pickle

    original = Ridge.grad_from_attention_grads
    Ridge.grad_from_attention_grads = lambda self, g, gk, gq, edges=None: original(
        self, g, gk, gq, edges)
    try:
        ridge = layer(Ridge)
        ridge(x, edge_index)
        copy = pickle.loads(pickle.dumps(ridge))
    finally:
        Ridge.grad_from_attention_grads = original
    assert "_closed_form_verdicts" not in vars(copy.energy_fn)


def test_the_probe_graph_tells_in_from_out_degrees():
    # (a review) on a ring every in-degree equals its out-degree, so a closed form that used
    # the other passed
    class ByOutDegree(ETEnergy):
        def node_energy_of_g(self, g, edges):
            out = torch.zeros(g.size(0), dtype=g.dtype).index_add(
                0, edges.src, torch.ones_like(edges.src, dtype=g.dtype))
            return super().node_energy_of_g(g, edges) + 0.5 * out * (g * g).sum(-1)

        def grad_from_attention_grads(self, g, grad_k, grad_q, edges=None):
            deg = torch.zeros(g.size(0), dtype=g.dtype).index_add(
                0, edges.dst, torch.ones_like(edges.dst, dtype=g.dtype))
            return super().grad_from_attention_grads(g, grad_k, grad_q, edges) + deg[:, None] * g

    x, edge_index = graph()
    with pytest.raises(ValueError, match="ByOutDegree's closed form"):
        layer(ByOutDegree)(x, edge_index)


def test_the_probe_runs_under_torch_compile():
    # (a review) traced, the probe was skipped: a wrong closed form ran compiled unchecked
    class Slipped(Ridge):
        factor = 2.0

    x, edge_index = graph()
    compiled = torch.compile(layer(Slipped), backend="eager")
    with pytest.raises(ValueError, match="Slipped's closed form"):
        compiled(x, edge_index)


def test_a_term_that_refuses_edge_weights_is_probed_without_them():
    # (a review) the weighted probe raised, and a term it could not evaluate passed: a wrong
    # closed form was descended
    class Unweighted(Ridge):
        factor = 2.0

        def node_energy_of_g(self, g, edges):
            if edges.weight is not None:
                raise NotImplementedError("no edge weights")
            return super().node_energy_of_g(g, edges)

    x, edge_index = graph()
    with pytest.raises(ValueError, match="Unweighted's closed form"):
        layer(Unweighted)(x, edge_index)


def test_a_subclass_defined_again_and_again_is_not_kept_alive():
    """From a long-run audit: the closed-form verdicts lived in a module-level dict keyed by
    class, so each re-run of a notebook cell defining a subclass kept one more class alive for
    good. They live on the class now, and go with it."""
    import gc
    import weakref

    def define_and_use():
        class Scaled(DistanceKernel):
            pass

        x, edge_index = graph()
        layer(Scaled)(x, edge_index)
        return weakref.ref(Scaled)

    refs = [define_and_use() for _ in range(3)]
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_the_derivations_energy_example_runs_and_says_what_it_shows(tmp_path, monkeypatch):
    """The "Watching it fall" block of docs/derivation.md (a teaching audit): it runs, the
    total falls at every step while E_ATT rises, and over more steps |x| grows and the energy
    levels off (no fixed point in x, only in g)."""
    import matplotlib

    matplotlib.use("Agg")
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Watching it fall"):]
    block = section[section.index("```python") + len("```python"):]
    block = block[:block.index("```")]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "derivation.md", "exec"), scope)
    assert (tmp_path / "et_energy.png").exists()
    e_att, trace = scope["e_att"], scope["trace"]
    total = torch.tensor(e_att, dtype=torch.float64) + torch.tensor(scope["e_hn"],
                                                                    dtype=torch.float64)
    assert torch.allclose(total, trace.detach(), atol=1e-9)
    assert e_att[-1] > e_att[0] and trace[-1] < trace[0]
    conv, x, edge_index = scope["conv"], scope["x"], scope["edge_index"]
    far, far_trace = conv(x, edge_index, steps=300, return_energy=True)
    assert far.norm(dim=1).mean() > 10 * x.norm(dim=1).mean()  # |x| keeps growing
    late, early = far_trace[-1] - far_trace[-51], far_trace[50] - far_trace[0]
    assert abs(late) < 0.05 * abs(early)  # while E levels off
