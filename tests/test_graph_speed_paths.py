"""The speed paths of the graph-level ET (issue 10, part 2) give the reference results."""
import pytest
import torch
from helpers import benchmark_module, torch_threads
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.utils import to_undirected

from et_graph.fused import EdgePlan, build_edge_plan, fused_attention_grad, stable_argsort
from et_graph.nn.adjacency_mask import Conv2DAdjacencyMask, _GramEntries
from et_graph.nn.pool import CLSPool
from et_graph.training import TrainConfig, Trainer


def cls_graph(sizes, channels=5, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    graphs = []
    for n in sizes:
        edges = torch.randint(0, n, (2, 2 * n)) if n > 1 else torch.empty(2, 0, dtype=torch.long)
        graphs.append(Data(x=torch.randn(n, channels, dtype=dtype),
                           edge_index=to_undirected(edges, num_nodes=n)))
    batch = Batch.from_data_list(graphs)
    return CLSPool(channels).to(dtype).attach(batch.x, batch.edge_index, batch.batch)


@pytest.mark.parametrize("num_keys", [1, 7, 300, 2**16, 2**16 + 1, 10**6])
def test_stable_argsort_equals_torch(num_keys):
    keys = torch.randint(0, num_keys, (5000,))
    assert torch.equal(stable_argsort(keys, num_keys), torch.argsort(keys, stable=True))
    view = torch.stack([keys, keys.flip(0)])[1]  # a strided view, as edge_index[1] is
    assert torch.equal(stable_argsort(view, num_keys), torch.argsort(view, stable=True))
    assert stable_argsort(keys[:0], num_keys).numel() == 0


def test_plan_equals_a_plan_from_torch_sorts():
    src, dst = torch.randint(0, 50, (2, 400))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    plan = build_edge_plan(src, dst, 50, 3)
    order = torch.argsort(dst, stable=True)
    assert torch.equal(plan.order, order)
    assert torch.equal(plan.transpose, torch.argsort(src[order], stable=True))


def test_edge_values_are_reordered_once_per_weight_tensor_and_version():
    src, dst = torch.tensor([[0, 1, 2, 2], [1, 0, 0, 1]])
    plan = EdgePlan(src, dst, 3, 2)
    weight = torch.rand(4, 2)
    first = plan.edge_values(weight)
    assert plan.edge_values(weight) is first  # same tensor, same version: reused
    assert torch.equal(first, weight[plan.order].t())
    weight.mul_(2)  # in place: a new version, so a fresh reordering
    second = plan.edge_values(weight)
    assert second is not first and torch.equal(second, weight[plan.order].t())
    other = weight.clone()  # equal values, another tensor: not taken from the cache
    third = plan.edge_values(other)
    assert third is not second
    with torch.no_grad():  # the grad mode is part of the key
        assert plan.edge_values(other) is not third
    with torch.inference_mode():
        frozen = torch.rand(4, 2)
        assert torch.equal(plan.edge_values(frozen), frozen[plan.order].t())


def test_shared_plan_across_steps_keeps_weight_gradients():
    torch.manual_seed(0)
    src, dst = torch.randint(0, 20, (2, 120))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    k, q = torch.randn(2, 20, 2, 3, dtype=torch.float64)
    beta = torch.rand(2, dtype=torch.float64) + 0.5
    weight = torch.rand(src.numel(), 2, dtype=torch.float64, requires_grad=True)
    plan = build_edge_plan(src, dst, 20, 2)
    # two calls on one plan (as the descent steps make) against two fresh plans
    shared = sum(g.sum() for i in range(2) for g in
                 fused_attention_grad(k * (i + 1), q, src, dst, beta, weight, plan))
    (grad_shared,) = torch.autograd.grad(shared, weight)
    fresh = sum(g.sum() for i in range(2) for g in
                fused_attention_grad(k * (i + 1), q, src, dst, beta, weight))
    (grad_fresh,) = torch.autograd.grad(fresh, weight)
    assert torch.allclose(shared, fresh) and torch.allclose(grad_shared, grad_fresh)


@pytest.mark.parametrize("kernel_size", [1, 3, 5])
@pytest.mark.parametrize("edge_dim", [None, 2])
def test_gram_mask_path_equals_the_per_edge_path(kernel_size, edge_dim):
    graph = cls_graph([3, 1, 9, 4, 2, 6], seed=kernel_size)
    mask = Conv2DAdjacencyMask(heads=3, kernel_size=kernel_size, edge_dim=edge_dim).double()
    torch.nn.init.normal_(mask.weight)
    torch.nn.init.normal_(mask.bias)
    x = graph.x.detach().clone().requires_grad_(True)
    graph = graph._replace(x=x)
    assert mask._conv_at_edges_gram(x, graph.edge_index, graph.batch, graph.cls_index) is not None
    attr = (torch.randn(graph.edge_index.size(1), edge_dim, dtype=torch.float64)
            if edge_dim else None)
    probe = torch.randn(graph.edge_index.size(1), 3, dtype=torch.float64)
    results = []
    for budget in (mask.gram_budget, 0.0):  # 0: the Gram matrices never fit, per-edge path
        mask.gram_budget = budget
        out = mask.forward_cls_graph(graph, attr)
        results.append((out, *torch.autograd.grad((out * probe).sum(),
                                                  [x, mask.weight, mask.bias])))
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-10)
    generic = mask(x, graph.edge_index, graph.batch, attr)
    assert torch.allclose(results[0][0], generic, atol=1e-10)


@pytest.mark.parametrize("groups", [1, 2, 3, 50])
def test_gram_mask_groups_of_graphs(groups):
    graph = cls_graph([5, 1, 12, 3, 3, 8, 2], seed=groups)
    mask = Conv2DAdjacencyMask(heads=2, kernel_size=3).double()
    torch.nn.init.normal_(mask.weight)
    mask.gram_groups = groups
    x = graph.x.detach().clone().requires_grad_(True)
    fast = mask._conv_at_edges_gram(x, graph.edge_index, graph.batch, graph.cls_index)
    slow = mask._conv_at_edges_sparse(x, graph.edge_index, graph.batch)
    probe = torch.randn_like(slow)
    assert torch.allclose(fast, slow, atol=1e-10)
    assert torch.allclose(torch.autograd.grad((fast * probe).sum(), x)[0],
                          torch.autograd.grad((slow * probe).sum(), x)[0], atol=1e-10)


def test_gram_mask_path_falls_back_for_large_graphs():
    graph = cls_graph([200])  # one large sparse graph: the Gram matrix is mostly non-edges
    mask = Conv2DAdjacencyMask(heads=2).double()
    assert mask._conv_at_edges_gram(graph.x, graph.edge_index, graph.batch,
                                    graph.cls_index) is None
    assert torch.allclose(mask.forward_cls_graph(graph),
                          mask(graph.x, graph.edge_index, graph.batch), atol=1e-10)


def test_gram_entries_gradcheck():
    # two groups: 2 matrices of 4 rows (entries 0..31), then 1 of 3 rows (entries 32..40)
    x = torch.randn(11, 3, dtype=torch.float64, requires_grad=True)
    groups = [(2, 4), (1, 3)]
    index = torch.tensor([0, 5, 6, 9, 17, 17, 31, 32, 34, 37, 40])
    first = index < 32
    local = torch.where(first, index % 16, index - 32)
    size = torch.where(first, 4, 3)
    base = torch.where(first, (index // 16) * 16, 32)
    index_t = base + (local % size) * size + local // size
    expected = torch.cat([torch.bmm(x[:8].view(2, 4, 3), x[:8].view(2, 4, 3).transpose(1, 2))
                          .reshape(-1), (x[8:] @ x[8:].t()).reshape(-1)])[index]
    assert torch.allclose(_GramEntries.apply(x, groups, index, index_t), expected)
    assert torch.autograd.gradcheck(
        lambda t: _GramEntries.apply(t, groups, index, index_t), (x,))


def test_trainer_uses_the_fused_adam_step():
    model = nn.Linear(3, 2)
    for kind in ("adam", "adamw"):
        optimizer = Trainer(TrainConfig(optimizer=kind), progress=False).make_optimizer(model)
        assert optimizer.defaults["fused"]
    reference = nn.Linear(3, 2)
    reference.load_state_dict(model.state_dict())
    fused = Trainer(TrainConfig(lr=0.1), progress=False).make_optimizer(model)
    plain = torch.optim.Adam(reference.parameters(), lr=0.1)
    for _ in range(3):
        for m, opt in ((model, fused), (reference, plain)):
            opt.zero_grad()
            m(torch.ones(4, 3)).pow(2).sum().backward()
            opt.step()
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def graph_model_batch():
    torch.manual_seed(3)
    graphs = []
    for n in (4, 7, 3, 6):
        edges = to_undirected(torch.randint(0, n, (2, 2 * n)), num_nodes=n)
        graphs.append(Data(x=torch.randn(n, 5), edge_index=edges))
    return Batch.from_data_list(graphs)


def test_blocks_share_one_edge_plan_with_the_same_result(monkeypatch):
    from et_graph.fused import EdgePlan as Plan
    from et_graph.nn.models import ETGraphModel

    batch = graph_model_batch()
    model = ETGraphModel(5, 3, hidden_channels=8, blocks=3, steps=2, heads=2, head_dim=4,
                         pe_dim=0, noise_std=0.0).double()
    x = batch.x.double()
    built = []
    original = Plan.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Plan, "__init__", counting)
    out, graph, traces = model.tokens(x, batch.edge_index, batch.batch, return_energy=True)
    assert len(built) == 1  # one plan for the three blocks
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()), allow_unused=True)
    # the reference: each block called as a module (a hook disables the shared path)
    seen = []
    handle = model.convs[1].register_forward_hook(lambda *args: seen.append(1))
    built.clear()
    ref, _, ref_traces = model.tokens(x, batch.edge_index, batch.batch, return_energy=True)
    handle.remove()
    assert seen == [1] and len(built) == 3
    ref_grads = torch.autograd.grad(ref.square().sum(), list(model.parameters()),
                                    allow_unused=True)
    assert torch.allclose(out, ref, atol=1e-12)
    assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(traces, ref_traces))
    for a, b in zip(grads, ref_grads):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-10)


def test_epoch_benchmark_reports_wall_and_cpu_ratios(tmp_path, capsys):
    bench = benchmark_module("bench_graph_epoch")
    with torch_threads():
        result = bench.main(["--dataset", "MUTAG", "--repeats", "1", "--warmup", "0",
                             "--cache", str(tmp_path / "cache"), "--profile", "2",
                             "--json", str(tmp_path / "e.json")])
    out = capsys.readouterr().out
    assert "| ET / GIN time |" in out and "ncalls" in out
    assert result["graphs"] == 188 and result["ratio_et_gin"] > 0
    assert result["ratio_et_gin_cpu"] > 0 and result["optimizer"] == "Adam (fused)"
    assert (tmp_path / "e.json").stat().st_size > 0
    # the processor by name (an audit: README named one the stored files did not hold)
    assert result["machine_details"]["processor"] and "cpu_capability" in (
        result["machine_details"])


def test_epoch_benchmark_breakdown_times_each_variant_against_gin(tmp_path, capsys):
    bench = benchmark_module("bench_graph_epoch")
    with torch_threads():
        result = bench.main(["--dataset", "MUTAG", "--repeats", "1", "--warmup", "0",
                             "--limit", "40", "--cache", str(tmp_path / "cache"), "--breakdown",
                             "--no-preset", "--preloaded", "--profile", "1", "--profile-shapes"])
    out = capsys.readouterr().out
    # MUTAG's bond types enter through the mask, so the variant without it cannot be built.
    assert "et_no_mask: skipped" in out
    assert set(result["ratio_to_gin"]) == {"et", "gin", "et_no_hopfield", "et_no_descent",
                                           "et_no_message_passing", "et_no_noise_dropout"}
    # the batches were collated once; the profile is torch.profiler's, grouped by shapes
    assert result["preloaded"] is True and "collated once (--preloaded)" in out
    assert "Input Shapes" in out and "aten::mm" in out
    # without noise and dropout the model is the same model: only the random draws go
    assert result["params"]["et_no_noise_dropout"] == result["params"]["et"]
    assert result["ratio_to_gin"]["gin"] == 1.0
    # The variants are the default ET less one part: fewer parameters without the memories.
    assert result["params"]["et_no_hopfield"] < result["params"]["et"]
    assert result["params"]["et_no_descent"] == result["params"]["et"]
    # the defaults' message-passing layers have their own weights
    assert result["params"]["et_no_message_passing"] < result["params"]["et"]
    assert "| et_no_descent |" in out


def test_descent_parts_benchmark_times_every_part(tmp_path, capsys):
    bench = benchmark_module("bench_descent_parts")
    with torch_threads():
        result = bench.main(["--dataset", "MUTAG", "--batch-size", "8", "--repeats", "1",
                             "--inner", "1", "--json", str(tmp_path / "parts.json")])
    assert set(result["milliseconds"]) == {"fused_attention", "reference_attention", "hopfield",
                                           "fused_hopfield"}
    assert all(ms > 0 for ms in result["milliseconds"].values())
    # 8 graphs: one CLS node each, linked both ways to each of the graph's nodes.
    assert result["nodes_with_cls"] - 8 == (result["edges_with_cls"] - result["edges"]) // 2
    assert "| fused_attention |" in capsys.readouterr().out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_all_finite_agrees_with_isfinite(dtype):
    from et_graph.nn.validation import all_finite

    torch.manual_seed(0)
    base = torch.randn(37, 5).to(dtype)
    assert all_finite(base) and all_finite(base[:0]) and all_finite(base.t())
    for bad in (float("nan"), float("inf"), -float("inf")):
        for row, col in ((0, 0), (36, 4), (17, 2)):
            values = base.clone()
            values[row, col] = bad
            assert not all_finite(values)
            assert not all_finite(values.t())  # a strided view
            assert not all_finite(values.requires_grad_(dtype.is_floating_point))
    assert all_finite(torch.tensor([[1, 5], [-2, 3]]))
    assert not all_finite(torch.tensor([1 + 1j, complex(float("nan"), 0)]))
