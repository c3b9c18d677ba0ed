"""The opt-in compiled attention kernel (et_graph.native): exact against the reference closed
form, the same training step as the sparse path, and never on unless asked for."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from helpers import benchmark_module, record_calls, relative_error, torch_threads
from test_fused import (
    HEADS,
    NUM_NODES,
    awkward_edges,
    keys_queries,
    make_weight,
    reference_weight,
)

import et_graph.native as native
from et_graph import energy as E
from et_graph.config import RunConfig
from et_graph.fused import fused_attention_grad
from et_graph.nn import ETConv
from et_graph.nn.models import ETGraphModel

# Every test starts with the switch off (conftest.py's native_switch_off).
pytestmark = pytest.mark.usefixtures("native_switch_off")


@pytest.mark.parametrize("kind", ["none", "flat", "per_edge", "per_head"])
def test_values_and_first_order_gradients_equal_the_reference(built, kind):
    src, dst = awkward_edges()
    k, q, beta = keys_queries()
    weight = make_weight(kind, src.numel())
    inputs = [t for t in (k, q, beta, weight) if t is not None]
    with native.native_attention():
        grad_k, grad_q = fused_attention_grad(k, q, src, dst, beta, weight)
    ref_k, ref_q = E.attention_grad(k, q, src, dst, beta, reference_weight(weight), NUM_NODES)
    assert relative_error(grad_k, ref_k) < 1e-12 and relative_error(grad_q, ref_q) < 1e-12
    # Node 8 has no edge at all, node 7 no in-edge: exact zeros where the sums are empty.
    assert torch.all(grad_k[8] == 0) and torch.all(grad_q[7] == 0)
    up_k, up_q = torch.randn_like(grad_k), torch.randn_like(grad_q)
    got = torch.autograd.grad((grad_k, grad_q), inputs, (up_k, up_q))
    want = torch.autograd.grad((ref_k, ref_q), inputs, (up_k, up_q))
    for g, w in zip(got, want):
        assert g.shape == w.shape and relative_error(g, w) < 1e-10


@pytest.mark.parametrize("order", [1, 2])
def test_gradcheck_to_second_order(built, order):
    """Second order (create_graph=True) takes the sparse path's reference route."""
    src, dst = awkward_edges()
    k, q, beta = keys_queries()
    weight = make_weight("per_head", src.numel())

    def function(k, q, beta, weight):
        return fused_attention_grad(k, q, src, dst, beta, weight)

    check = torch.autograd.gradcheck if order == 1 else torch.autograd.gradgradcheck
    with native.native_attention():
        assert check(function, (k, q, beta, weight), atol=1e-8, rtol=1e-6)


def test_the_switch_routes_the_kernel(built, monkeypatch):
    calls = record_calls(monkeypatch, native.NativeAttentionGrad, "apply")
    src, dst = awkward_edges()
    k, q, beta = keys_queries()
    fused_attention_grad(k, q, src, dst, beta, None)
    assert not calls  # off by default
    with native.native_attention():
        fused_attention_grad(k, q, src, dst, beta, None)
        # Other dtypes keep the reference closed form.
        fused_attention_grad(k.float().half(), q.float().half(), src, dst, beta.half(), None)
    assert len(calls) == 1
    assert not native.native_attention_enabled()  # the context manager restores it


def test_repeated_edges_between_two_nodes(built):
    """The sparse path needs a special case for more edges than matrix entries; the loop not."""
    src, dst = torch.tensor([0, 1, 0, 1, 0, 1]), torch.tensor([1, 0, 1, 0, 1, 0])
    gen = torch.Generator().manual_seed(3)
    k, q = (torch.randn(2, 1, 3, generator=gen, dtype=torch.float64, requires_grad=True)
            for _ in range(2))
    beta = torch.tensor([0.7], dtype=torch.float64, requires_grad=True)
    with native.native_attention():
        grad_k, grad_q = fused_attention_grad(k, q, src, dst, beta, None)
    ref_k, ref_q = E.attention_grad(k, q, src, dst, beta, None, 2)
    assert relative_error(grad_k, ref_k) < 1e-12 and relative_error(grad_q, ref_q) < 1e-12
    got = torch.autograd.grad(grad_k.sum() + grad_q.pow(2).sum(), (k, q, beta))
    want = torch.autograd.grad(ref_k.sum() + ref_q.pow(2).sum(), (k, q, beta))
    assert all(relative_error(g, w) < 1e-10 for g, w in zip(got, want))


def graph_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three small graphs with edge labels, as a mini-batch."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [5, 7, 4]
    x = torch.randn(sum(sizes), 3, generator=gen, dtype=torch.float64)
    edges, offset = [], 0
    for n in sizes:
        ring = torch.arange(n)
        edges.append(torch.stack([ring, (ring + 1) % n]) + offset)
        edges.append(torch.stack([(ring + 1) % n, ring]) + offset)
        offset += n
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return x, torch.cat(edges, dim=1), batch


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
def test_a_graph_model_training_step_equals_the_sparse_path(built, dtype, tolerance):
    torch.manual_seed(0)
    model = ETGraphModel(3, 2, hidden_channels=8, blocks=2, steps=2, heads=HEADS, head_dim=4,
                         pe_dim=0, message_passing_layers=1).to(dtype)
    x, edge_index, batch = graph_batch()
    grads = {}
    for name in ("sparse", "native"):
        net = copy.deepcopy(model)
        with native.native_attention(name == "native"):
            loss = net(x.to(dtype), edge_index, batch).square().sum()
            loss.backward()
        grads[name] = (loss.detach(), [p.grad for p in net.parameters()])
    assert relative_error(grads["native"][0], grads["sparse"][0]) < tolerance
    # Some true gradients are zero up to rounding (1e-18): compared at the largest one's scale.
    scale = max(b.abs().max() for b in grads["sparse"][1] if b is not None)
    for a, b in zip(grads["native"][1], grads["sparse"][1]):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, rtol=tolerance, atol=tolerance * scale)


def test_layer_with_edge_weights_matches_the_sparse_path(built):
    torch.manual_seed(0)
    conv = ETConv(8, heads=HEADS, head_dim=4, steps=2, alpha=0.2).double()
    x = torch.randn(12, 8, dtype=torch.float64)
    edge_index = torch.randint(0, 12, (2, 50))
    weight = torch.rand(50, dtype=torch.float64, requires_grad=True)
    results = {}
    for name in ("sparse", "native"):
        conv.zero_grad()
        x_in = x.clone().requires_grad_(True)
        with native.native_attention(name == "native"):
            out = conv(x_in, edge_index, weight)
            grads = torch.autograd.grad(out.pow(2).sum(), [x_in, weight, *conv.parameters()],
                                        allow_unused=True)
        results[name] = (out.detach(), grads)
    assert relative_error(results["native"][0], results["sparse"][0]) < 1e-12
    for a, b in zip(results["native"][1], results["sparse"][1]):
        if b is not None:
            assert relative_error(a, b) < 1e-10


def test_a_kernel_that_cannot_be_built_is_reported_and_stays_off(monkeypatch):
    import torch.utils.cpp_extension as cpp_extension

    def no_compiler(*args, **kwargs):
        raise OSError("no C++ compiler found")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    monkeypatch.setitem(native._state, "module", None)
    with pytest.raises(RuntimeError, match="could not be built.*no C\\+\\+ compiler"):
        native.set_native_attention(True)
    assert not native.native_attention_enabled()
    with pytest.raises(TypeError, match="must be a bool"):
        native.set_native_attention(1)


@pytest.mark.parametrize("value, expected", [("1", True), ("on", True), ("0", False),
                                             ("false", False), ("", None)])
def test_environment_variable(monkeypatch, value, expected):
    monkeypatch.setenv(native.ENV_VARIABLE, value)
    assert native.env_requests_native() is expected


def test_environment_variable_refuses_other_values(monkeypatch):
    monkeypatch.setenv(native.ENV_VARIABLE, "fast")
    with pytest.raises(ValueError, match="ET_GRAPH_NATIVE_ATTENTION must be 1/0"):
        native.env_requests_native()


def test_run_config_records_and_applies_the_setting(monkeypatch):
    applied = []
    monkeypatch.setattr(native, "set_native_attention", applied.append)
    monkeypatch.delenv(native.ENV_VARIABLE, raising=False)
    assert RunConfig().native_attention is False
    RunConfig().apply_threads()
    RunConfig(native_attention=True).apply_threads()
    assert applied == [True]
    # Switched on for the process beforehand: a run does not turn it off, and records it.
    native._state["enabled"] = True
    config = RunConfig()
    config.apply_threads()
    assert config.native_attention is True and applied == [True]
    # The environment turns it on, and the resolved config (what results record) says so.
    monkeypatch.setenv(native.ENV_VARIABLE, "1")
    assert RunConfig().native_attention is True
    with pytest.raises(ValueError, match="native_attention must be true or false"):
        RunConfig(native_attention="yes")


def test_epoch_benchmark_times_the_kernel_beside_the_default(built, tmp_path, capsys):
    bench = benchmark_module("bench_graph_epoch")
    with torch_threads():
        result = bench.main(["--dataset", "MUTAG", "--repeats", "1", "--warmup", "0",
                             "--limit", "40", "--cache", str(tmp_path / "cache"),
                             "--native-compare", "--no-preset"])
    assert set(result["ratio_to_gin"]) == {"et", "gin", "et_native", "et_native_torch_random"}
    assert result["params"]["et_native"] == result["params"]["et"]
    assert result["native_attention"] is False
    assert "| et_native |" in capsys.readouterr().out
    assert not native.native_attention_enabled()  # on for et_native's epochs only


def test_descent_parts_benchmark_times_the_kernel(built, tmp_path):
    bench = benchmark_module("bench_descent_parts")
    with torch_threads():
        result = bench.main(["--dataset", "MUTAG", "--batch-size", "8", "--repeats", "1",
                             "--inner", "1", "--native"])
    assert result["milliseconds"]["native_attention"] > 0
    assert result["milliseconds"]["native_mask_gram"] > 0
    assert not native.native_attention_enabled()


@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernel_leaves_the_sparse_layout_unbuilt(built, threads):
    """The edge plan builds its CSR arrays (a second sort among them) only for the sparse
    kernels; a training step on the compiled kernel never asks for them. With more than one
    thread (and more than one block of destinations) it sorts the edges by source (the
    threaded passes' layout), and nothing else."""
    from et_graph.fused import build_edge_plan

    generator = torch.Generator().manual_seed(0)
    nodes = 2 * native.KERNEL_GRAIN
    src = torch.randint(0, nodes, (4 * nodes,), generator=generator)
    dst = (src + torch.randint(1, nodes, (4 * nodes,), generator=generator)) % nodes
    k, q = (torch.randn(nodes, HEADS, 4, dtype=torch.float64, requires_grad=True)
            for _ in range(2))
    beta = torch.ones(HEADS, dtype=torch.float64, requires_grad=True)
    plan = build_edge_plan(src, dst, nodes, HEADS)
    with torch_threads(threads), native.native_attention():
        grad_k, grad_q = fused_attention_grad(k, q, src, dst, beta, None, plan)
        (grad_k.sum() + grad_q.pow(2).sum()).backward()
    lazy = {"transpose", "crow", "col", "crow_t", "col_t", "row_lengths", "dst_per_head"}
    assert lazy & set(vars(plan)) == ({"transpose"} if threads > 1 else set())
    fused_attention_grad(k, q, src, dst, beta, None, plan)  # the sparse path builds them
    assert {"crow", "col", "row_lengths"} <= set(vars(plan))


def test_relational_layer_matches_the_sparse_path(built):
    """RelationalETConv hands the kernel each relation's heads as strided slices."""
    from et_graph.nn import RelationalETConv

    torch.manual_seed(0)
    conv = RelationalETConv(8, num_relations=2, heads=2, head_dim=4, steps=2).double()
    x = torch.randn(15, 8, dtype=torch.float64)
    edge_index = torch.randint(0, 15, (2, 60))
    edge_type = torch.randint(0, 2, (60,))
    results = {}
    for name in ("sparse", "native"):
        conv.zero_grad()
        with native.native_attention(name == "native"):
            out = conv(x, edge_index, edge_type)
            out.pow(2).sum().backward()
        results[name] = (out.detach(), [p.grad.clone() for p in conv.parameters()])
    assert relative_error(results["native"][0], results["sparse"][0]) < 1e-12
    for a, b in zip(results["native"][1], results["sparse"][1]):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("heads, head_dim", [(4, 8), (4, 16), (1, 16), (2, 8), (3, 16), (2, 5)])
def test_every_compiled_head_layout_equals_the_reference(built, heads, head_dim):
    """The kernel has code fixed at compile time for common (heads, head width) pairs and a
    general one for the rest; each is checked."""
    src, dst = awkward_edges()
    gen = torch.Generator().manual_seed(heads * 100 + head_dim)
    k, q = (torch.randn(NUM_NODES, heads, head_dim, generator=gen, dtype=torch.float64,
                        requires_grad=True) for _ in range(2))
    beta = (torch.rand(heads, generator=gen, dtype=torch.float64) + 0.5).requires_grad_()
    weight = torch.rand(src.numel(), heads, generator=gen, dtype=torch.float64).requires_grad_()
    with native.native_attention():
        got = fused_attention_grad(k, q, src, dst, beta, weight)
    want = E.attention_grad(k, q, src, dst, beta, weight, NUM_NODES)
    for g, w in zip(got, want):
        assert relative_error(g, w) < 1e-12
    ups = [torch.randn_like(t) for t in want]
    for g, w in zip(torch.autograd.grad(got, (k, q, beta, weight), ups),
                    torch.autograd.grad(want, (k, q, beta, weight), ups)):
        assert relative_error(g, w) < 1e-10


def test_large_graph_benchmark_times_both_paths(built, tmp_path):
    bench = benchmark_module("bench_native_attention")
    with torch_threads():
        result = bench.main(["--nodes", "60", "--edges", "400", "--rounds", "1", "--repeats", "1",
                             "--json", str(tmp_path / "n.json")])
    assert result["rounds"][0]["ratio"] > 0 and (tmp_path / "n.json").stat().st_size > 0
    assert not native.native_attention_enabled()


def test_the_environment_switches_it_on_at_import_without_building(tmp_path):
    """Importing the package with ET_GRAPH_NATIVE_ATTENTION=1 must neither compile nor fail
    for want of a compiler: a fresh process with no compiler on PATH imports it, finds the switch
    on, and the kernel's absence is reported only when it is first needed."""
    import os
    import subprocess
    import sys

    code = (
        "import et_graph.fused, et_graph.native as n\n"
        "assert n.native_attention_enabled() and n._state['module'] is None\n"
        "print('imported')\n"
    )
    env = {**os.environ, native.ENV_VARIABLE: "1", "PATH": str(tmp_path), "CXX": "missing-cxx",
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-1500:]


@pytest.mark.parametrize("layout", ["projection_halves", "heads_transposed"])
def test_strided_keys_and_queries(built, layout, monkeypatch):
    """Keys and queries as the layer makes them, halves of one [N, 2HY] projection, are read in
    place (no copy); a layout whose rows are not contiguous is copied first. Both exact."""
    src, dst = awkward_edges()
    gen = torch.Generator().manual_seed(5)
    heads, head_dim = 4, 8
    if layout == "projection_halves":
        kq = torch.randn(NUM_NODES, 2 * heads * head_dim, generator=gen, dtype=torch.float64,
                         requires_grad=True)
        k, q = (t.reshape(NUM_NODES, heads, head_dim) for t in kq.split(heads * head_dim, 1))
        leaves = (kq,)
    else:
        base = torch.randn(2, NUM_NODES, head_dim, heads, generator=gen, dtype=torch.float64,
                           requires_grad=True)
        k, q = base[0].transpose(1, 2), base[1].transpose(1, 2)
        leaves = (base,)
    beta = torch.full((heads,), 0.7, dtype=torch.float64)
    copies = []
    real_contiguous = torch.Tensor.contiguous

    def counting(t, *args, **kwargs):
        if not t.is_contiguous():
            copies.append(tuple(t.shape))
        return real_contiguous(t, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "contiguous", counting)
    assert (native.rows_contiguous(k) is k) == (layout == "projection_halves")
    with native.native_attention():
        got = fused_attention_grad(k, q, src, dst, beta, None)
    key_copies = [s for s in copies if s == (NUM_NODES, heads, head_dim)]
    assert (len(key_copies) == 0) == (layout == "projection_halves")
    monkeypatch.setattr(torch.Tensor, "contiguous", real_contiguous)
    want = E.attention_grad(k, q, src, dst, beta, None, NUM_NODES)
    for g, w in zip(got, want):
        assert relative_error(g, w) < 1e-12
    ups = [torch.randn_like(t) for t in want]
    for g, w in zip(torch.autograd.grad(got, leaves, ups), torch.autograd.grad(want, leaves, ups)):
        assert relative_error(g, w) < 1e-10



def test_the_layout_test_is_the_kernels_own(built):
    """``native.rows_contiguous`` asks the kernels' own input check: what it passes on is read
    in place, what the kernel would refuse is copied, and the two cannot disagree."""
    base = torch.randn(6, 2 * 3 * 4, dtype=torch.float64)
    one_row = torch.randn(1, 3, 4, dtype=torch.float64).as_strided((1, 3, 4), (999, 4, 1))
    unit_head = torch.randn(5, 1, 4, dtype=torch.float64).as_strided((5, 1, 4), (4, 77, 1))
    layouts = {
        "contiguous": (torch.randn(6, 3, 4, dtype=torch.float64), True),
        "projection half": (base[:, 12:].reshape(6, 3, 4), True),
        "one row, any row stride": (one_row, True),
        "one head, any head stride": (unit_head, True),
        "heads transposed": (torch.randn(6, 4, 3, dtype=torch.float64).transpose(1, 2), False),
        "every other column": (base[:, ::2].reshape(6, 3, 4), False),
    }
    module = built
    for name, (t, in_place) in layouts.items():
        assert bool(module.rows_contiguous(t)) is in_place, name
        out = native.rows_contiguous(t)
        assert (out is t) is in_place, name
        assert module.rows_contiguous(out) and torch.equal(out, t), name
    with pytest.raises(RuntimeError, match=r"\[N, H, Y\]"):
        module.rows_contiguous(base)


# ----------------------------------------------------------------------------------------------
# The Conv2D mask's Gram entries
# ----------------------------------------------------------------------------------------------
def three_graphs() -> tuple[torch.Tensor, ...]:
    """Graphs of 4, 1 and 6 tokens; edges inside each (a self-loop, both directions), and one
    edge between two graphs, where each endpoint keeps its own graph's bounds."""
    ptr = torch.tensor([0, 4, 5, 11])
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor([4, 1, 6]))
    src = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 5, 10, 0, 3])
    dst = torch.tensor([1, 0, 3, 2, 4, 6, 5, 8, 7, 10, 9, 10, 5, 3, 7])
    return src, dst, batch, ptr


@pytest.mark.parametrize("radius", [0, 1, 2])
def test_gram_entries_equal_the_reference(built, radius):
    src, dst, batch, ptr = three_graphs()
    x = torch.randn(11, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(radius),
                    requires_grad=True)
    got = native.gram_entries(x, src, dst, batch, ptr, radius)
    want = native.gram_entries_reference(x, src, dst, batch, ptr, radius)
    assert got.shape == (15, (2 * radius + 1) ** 2)
    assert relative_error(got, want) < 1e-14
    # Spot checks of the definition: edge 1 -> 0 (graph 0, tokens 0..3), centre and corners.
    k = 2 * radius + 1
    centre = radius * k + radius
    assert torch.isclose(got[1, centre], x[0] @ x[1])
    if radius:
        assert got[1, 0] == 0  # row 0 - radius leaves the graph
        assert torch.isclose(got[1, k * k - 1], x[radius] @ x[1 + radius])
    # The edge 3 -> 7 joins two graphs: row 7 + a stays in graph 2, column 3 + b in graph 0.
    assert torch.isclose(got[14, centre], x[7] @ x[3])
    function = lambda x: native.gram_entries(x, src, dst, batch, ptr, radius)  # noqa: E731
    assert torch.autograd.gradcheck(function, (x,))
    assert torch.autograd.gradgradcheck(function, (x,))


@pytest.mark.parametrize("kernel_size", [1, 3, 5])
@pytest.mark.parametrize("edge_dim", [None, 3])
def test_mask_equals_the_default_path(built, kernel_size, edge_dim, monkeypatch):
    """With the switch on, the mask (both entry points) gives the default path's values and
    gradients, and routes through the kernel."""
    from test_graph_fast_paths import mask_case

    graph, mask, x, attr, probe = mask_case(kernel_size, edge_dim)
    calls = record_calls(monkeypatch, native.NativeGramEntries, "apply")
    runs = {"forward_cls_graph": lambda: mask.forward_cls_graph(graph, attr),
            "forward": lambda: mask(x, graph.edge_index, graph.batch, attr)}
    for run in runs.values():
        results = {}
        for name in ("default", "native"):
            calls.clear()
            with native.native_attention(name == "native"):
                out = run()
                grads = torch.autograd.grad((out * probe).sum(), [x, mask.weight, mask.bias])
            assert bool(calls) == (name == "native")
            results[name] = (out, grads)
        assert relative_error(results["native"][0], results["default"][0]) < 1e-12
        for a, b in zip(results["native"][1], results["default"][1]):
            assert relative_error(a, b) < 1e-11


def test_mask_keeps_its_pytorch_route_for_other_dtypes(built):
    """A bfloat16 mask takes the PyTorch path with the switch on (the kernel is float32/64)."""
    from test_graph_fast_paths import mask_case

    graph, mask, x, _, _ = mask_case(3, None)
    tokens = x.detach().to(torch.bfloat16)
    with native.native_attention(), pytest.MonkeyPatch.context() as patch:
        calls = record_calls(patch, native.NativeGramEntries, "apply")
        got = mask.to(torch.bfloat16).forward_cls_graph(graph._replace(x=tokens))
    assert not calls and got.dtype == torch.bfloat16
    want = mask.forward_cls_graph(graph._replace(x=tokens))
    assert torch.equal(got, want)


def test_the_build_is_named_by_its_sources(tmp_path, monkeypatch):
    """The extension's cache name hashes the sources, header and flags: stable for the same files,
    new when one changes, so two versions of the package never rebuild over each other."""
    copies, original_header = [], native.HEADERS[0].read_bytes()
    for path in (*native.SOURCES, *native.HEADERS):
        copy = tmp_path / path.name
        copy.write_bytes(path.read_bytes())
        copies.append(copy)
    name = native.extension_name()
    assert name.startswith("et_graph_native_")
    monkeypatch.setattr(native, "SOURCES", tuple(copies[:len(native.SOURCES)]))
    monkeypatch.setattr(native, "HEADERS", tuple(copies[len(native.SOURCES):]))
    assert native.extension_name() == name  # same contents elsewhere: the same build
    header = copies[-1]
    header.write_text(header.read_text(encoding="utf-8") + "\n// changed\n", encoding="utf-8")
    assert native.extension_name() != name  # a changed header: another build
    header.write_bytes(original_header)
    assert native.extension_name() == name
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "COMPILE_FLAGS", [*native.COMPILE_FLAGS, "-g"])
        assert native.extension_name() != name  # other flags: another build
    copies[1].write_text(copies[1].read_text(encoding="utf-8") + "\n// changed\n", encoding="utf-8")
    assert native.extension_name() != name  # other sources: another build


def test_loading_leaves_the_flags_and_the_name_unchanged(built):
    """torch's load() appends its libraries to the flag lists it is given: it must get copies,
    or the build's name (a hash of the flags) would change once the kernels are loaded."""
    assert native.LINK_FLAGS == (["-fopenmp"] if sys.platform.startswith("linux") else [])
    assert native.COMPILE_FLAGS[0] == "-O3" and len(native.COMPILE_FLAGS) == 4
    assert built.__name__ == native.extension_name()


def test_a_first_build_says_so(tmp_path, monkeypatch, capsys):
    """A build (about a minute) is announced on stderr; a cached one loads silently."""
    import torch.utils.cpp_extension as cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: object())
    monkeypatch.setitem(native._state, "module", None)
    native.load_native_attention()
    name = native.extension_name()
    assert f"building the compiled kernels ({name}" in capsys.readouterr().err
    # torch's layout under $TORCH_EXTENSIONS_DIR: <dir>/<name>/<name>.so (no python tag
    # folder, which only the default root has)
    cached = tmp_path / name
    cached.mkdir(parents=True, exist_ok=True)  # (torch's build folder, made by the lock check)
    (cached / f"{name}.so").write_bytes(b"")
    monkeypatch.setitem(native._state, "module", None)
    native.load_native_attention()
    assert capsys.readouterr().err == ""
    # Without the variable: torch's default root, one folder per python and device tag.
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setattr(cpp_extension, "get_default_build_root", lambda: str(tmp_path / "home"))
    assert not native.is_built(name)
    (tmp_path / "home" / "py311_cpu" / name).mkdir(parents=True, exist_ok=True)
    (tmp_path / "home" / "py311_cpu" / name / f"{name}.so").write_bytes(b"")
    assert native.is_built(name)


def test_the_softmax_exponential(built):
    """float32: Cephes' polynomial, vectorised, within about one ulp of exp over the logits'
    range (x <= 0; 8.3e-8 relative at most on this grid), exactly 1 at 0 and 0 below -87 (and
    for -inf); float64: std::exp."""
    x = torch.cat([torch.linspace(-87.0, 0.0, 200_001, dtype=torch.float64),
                   -torch.rand(10_000, dtype=torch.float64, generator=torch.Generator()
                               .manual_seed(0)) * 1e-3])
    got = built.exp_nonpositive(x.float()).double()
    want = torch.exp(x.float().double())
    assert ((got - want).abs() / want).max() < 1.5e-7
    edge = built.exp_nonpositive(torch.tensor([0.0, -0.0, -87.5, -1e30, -float("inf")]))
    assert edge.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert torch.isnan(built.exp_nonpositive(torch.tensor([float("nan")]))).all()
    assert relative_error(built.exp_nonpositive(x), torch.exp(x)) < 1e-15



def test_a_windows_build_counts_as_built(tmp_path, monkeypatch):
    """Windows builds name.pyd; only name*.so was looked for, so every run there said it was
    building the compiled kernels."""
    from et_graph.native import is_built

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert not is_built("et_probe")
    (tmp_path / "et_probe").mkdir()
    (tmp_path / "et_probe" / "et_probe.pyd").write_bytes(b"")
    assert is_built("et_probe")


def test_the_kernels_refuse_any_input_off_the_cpu(built):
    """From a device audit: the kernels checked the device of k (and of x) alone, so a GPU
    edge index among CPU tokens had its pointer read as host memory. Each input is checked
    ("meta" stands in for another device: nothing is read from it)."""
    from et_graph.fused import build_edge_plan

    generator = torch.Generator().manual_seed(0)
    src, dst = torch.tensor([0, 1, 2, 3, 1]), torch.tensor([1, 2, 3, 0, 3])
    plan = build_edge_plan(src, dst, 4, 2)
    k, q = (torch.randn(4, 2, 3, dtype=torch.float64, generator=generator) for _ in range(2))
    inputs = native.kernel_inputs(k, q, torch.ones(2, dtype=torch.float64), None, plan)
    grad_k, grad_q, probs, scores = built.forward(*inputs)  # all on the CPU: runs
    for position in range(len(inputs)):
        moved = [t.to("meta") if i == position else t for i, t in enumerate(inputs)]
        with pytest.raises(RuntimeError, match="every input on the CPU"):
            built.forward(*moved)
    tail = (probs, scores, torch.ones_like(k), torch.ones_like(q))
    built.backward(*inputs, *tail, False)
    for position in range(len(tail)):
        moved = [t.to("meta") if i == position else t for i, t in enumerate(tail)]
        with pytest.raises(RuntimeError, match="every input on the CPU"):
            built.backward(*inputs, *moved, False)
    src, dst, batch, ptr = three_graphs()
    x = torch.randn(11, 5, dtype=torch.float64, generator=generator)
    gram = (x, src, dst, batch, ptr)
    for position in range(len(gram)):
        moved = [t.to("meta") if i == position else t for i, t in enumerate(gram)]
        with pytest.raises(RuntimeError, match="every input on the CPU"):
            built.gram_entries_forward(*moved, 1)
    values = built.gram_entries_forward(*gram, 1)
    built.gram_entries_backward(*gram, 1, torch.ones_like(values))
    with pytest.raises(RuntimeError, match="every input on the CPU"):
        built.gram_entries_backward(*gram, 1, torch.ones_like(values).to("meta"))


def test_an_unwritable_build_folder_is_named_not_the_compiler(monkeypatch):
    """From a locked-down runtime audit: with torch's build folder unwritable (a read-only home,
    or a read-only folder of prebuilt kernels, where torch still takes its lock) the error
    blamed the compiler, or was a raw traceback when the lock check failed first."""
    import errno

    import torch.utils.cpp_extension as cpp_extension

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", "/root/.cache")

    monkeypatch.setitem(native._state, "module", None)
    monkeypatch.setattr(native, "is_built", lambda name: True)
    monkeypatch.setattr(cpp_extension, "load", read_only)
    with pytest.raises(native.NativeBuildError, match="set TORCH_EXTENSIONS_DIR"):
        native.load_native_attention()
    monkeypatch.setattr(native, "check_build_locks", read_only)  # the lock check comes first
    with pytest.raises(native.NativeBuildError, match="build folder is not writable"):
        native.load_native_attention()
