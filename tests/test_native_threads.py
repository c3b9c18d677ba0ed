"""The compiled kernels (et_graph.native) on more than one thread: the same results, bit for bit,
as on one, and the threads really used where the build links OpenMP (Linux)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch
from helpers import relative_error, torch_threads

import et_graph.native as native
from et_graph import energy as E
from et_graph.fused import build_edge_plan, fused_attention_grad

pytestmark = pytest.mark.usefixtures("native_switch_off")

HEADS, WIDTH = 4, 8


def on_one_and_two_threads(run: Callable[[], list[torch.Tensor]]) -> tuple[list, list]:
    with torch_threads(1):
        one = run()
    with torch_threads(2):
        two = run()
    return one, two


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenMP is linked on Linux")
def test_the_build_runs_on_torchs_threads(built):
    for count in (1, 2):
        with torch_threads(count):
            assert built.threads_used() == count


def random_graph(nodes: int, edges: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, nodes, (edges,), generator=generator)
    dst = torch.randint(0, nodes, (edges,), generator=generator)
    keep = src != dst
    return src[keep], dst[keep]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("weight_rows", [None, 1, HEADS])
def test_attention_gradient_is_the_same_on_two_threads(built, dtype, weight_rows):
    """2,000 nodes: several blocks of destinations and sources per thread; the source-sorted
    pass must add each row's terms in the one-pass loop's order to give the same bits."""
    nodes = 2000
    src, dst = random_graph(nodes, 16000, seed=0)

    def run() -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(1)
        k = torch.randn(nodes, HEADS, WIDTH, generator=generator, dtype=dtype,
                        requires_grad=True)
        q = torch.randn(nodes, HEADS, WIDTH, generator=generator, dtype=dtype,
                        requires_grad=True)
        beta = torch.rand(HEADS, generator=generator, dtype=dtype).add(0.5).requires_grad_()
        weight = None if weight_rows is None else torch.rand(
            src.numel(), weight_rows, generator=generator, dtype=dtype).requires_grad_()
        with native.native_attention():
            grad_k, grad_q = fused_attention_grad(k, q, src, dst, beta, weight,
                                                  build_edge_plan(src, dst, nodes, HEADS))
            up_k = torch.randn(grad_k.shape, generator=generator, dtype=dtype)
            up_q = torch.randn(grad_q.shape, generator=generator, dtype=dtype)
            inputs = [t for t in (k, q, beta, weight) if t is not None]
            grads = torch.autograd.grad((grad_k, grad_q), inputs, (up_k, up_q))
        if dtype == torch.float64:  # and both equal the reference closed form
            ref_k, ref_q = E.attention_grad(k, q, src, dst, beta, weight, nodes)
            want = torch.autograd.grad((ref_k, ref_q), inputs, (up_k, up_q))
            assert relative_error(grad_k, ref_k) < 1e-12
            assert relative_error(grad_q, ref_q) < 1e-12
            assert all(relative_error(g, w) < 1e-10 for g, w in zip(grads, want))
        return [grad_k, grad_q, *grads]

    one, two = on_one_and_two_threads(run)
    assert all(torch.equal(a, b) for a, b in zip(one, two))


def test_only_the_upstream_gradient_of_the_keys(built):
    """Backward with dL/d(dE/dq) absent (zero rows inside the kernel), on two threads."""
    nodes = 1200
    src, dst = random_graph(nodes, 9000, seed=3)

    def run() -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(4)
        k = torch.randn(nodes, HEADS, WIDTH, generator=generator, requires_grad=True)
        q = torch.randn(nodes, HEADS, WIDTH, generator=generator, requires_grad=True)
        beta = torch.ones(HEADS, requires_grad=True)
        with native.native_attention():
            grad_k, _ = fused_attention_grad(k, q, src, dst, beta, None)
            return list(torch.autograd.grad(grad_k.pow(2).sum(), (k, q, beta)))

    one, two = on_one_and_two_threads(run)
    assert all(torch.equal(a, b) for a, b in zip(one, two))


def source_layout_is_stable(plan) -> bool:
    t_ptr, t_perm, _ = native.source_layout(plan)
    src = plan.src.index_select(0, t_perm)
    per_source = [t_perm[t_ptr[b]:t_ptr[b + 1]] for b in range(plan.num_nodes)]
    return bool(torch.all(src[1:] >= src[:-1])) and all(
        bool(torch.all(edges[1:] > edges[:-1])) for edges in per_source)


def test_the_source_layout_keeps_each_sources_edges_in_order(built):
    src, dst = random_graph(50, 400, seed=5)
    plan = build_edge_plan(src, dst, 50, HEADS)
    assert source_layout_is_stable(plan)
    t_ptr, t_perm, dst_sorted = native.source_layout(plan)
    assert t_ptr[-1] == src.numel() and torch.equal(dst_sorted, plan.dst)
    assert native.source_layout(plan)[1] is t_perm  # kept on the plan


@pytest.mark.parametrize("nodes", [native.KERNEL_GRAIN, native.KERNEL_GRAIN + 1])
def test_the_layout_only_for_threads_and_more_than_one_block(built, nodes):
    """One thread, or a graph of one block of destinations: one pass, no second sort."""
    src, dst = random_graph(nodes, 8 * nodes, seed=6)
    plan = build_edge_plan(src, dst, nodes, HEADS)
    k = torch.randn(nodes, HEADS, WIDTH)
    with torch_threads(1):
        inputs = native.kernel_inputs(k, k, torch.ones(HEADS), None, plan)
    assert [t.numel() for t in inputs[-3:]] == [0, 0, 0]
    with torch_threads(2):
        inputs = native.kernel_inputs(k, k, torch.ones(HEADS), None, plan)
    if nodes > native.KERNEL_GRAIN:
        assert [t.numel() for t in inputs[-3:]] == [nodes + 1, plan.num_edges, plan.num_edges]
    else:
        assert [t.numel() for t in inputs[-3:]] == [0, 0, 0]
        assert "transpose" not in vars(plan)


def many_graphs(count: int, seed: int) -> tuple[torch.Tensor, ...]:
    """``count`` graphs of 3-14 tokens, edges inside each, graph by graph (a PyG batch)."""
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(3, 15, (count,), generator=generator)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    batch = torch.repeat_interleave(torch.arange(count), sizes)
    src, dst = [], []
    for graph in range(count):
        lo, size = int(ptr[graph]), int(sizes[graph])
        src.append(lo + torch.randint(0, size, (3 * size,), generator=generator))
        dst.append(lo + torch.randint(0, size, (3 * size,), generator=generator))
    return torch.cat(src), torch.cat(dst), batch, ptr


@pytest.mark.parametrize("order", ["by_graph", "cls_runs", "shuffled", "one_cross_edge"])
def test_gram_entries_are_the_same_on_two_threads(built, order):
    """The backward groups the edges by graph (a stable counting sort) and splits the graphs
    between threads: graph by graph, in runs over the graphs (a CLS graph's three), shuffled;
    one edge joining two graphs makes it run one thread. Every order gives the reference's
    values (float64) and the same bits on one and two threads."""
    src, dst, batch, ptr = many_graphs(300, seed=7)
    if order == "cls_runs":
        src, dst = torch.cat([src, src, dst]), torch.cat([dst, dst, src])
    elif order == "shuffled":
        shuffle = torch.randperm(src.numel(), generator=torch.Generator().manual_seed(8))
        src, dst = src[shuffle], dst[shuffle]
    elif order == "one_cross_edge":
        src, dst = torch.cat([src, torch.tensor([0])]), torch.cat([dst, batch.new_tensor(
            [int(ptr[-2])])])
    x = torch.randn(int(ptr[-1]), 16, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(9))
    grad = torch.randn(src.numel(), 9, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(10))

    def run() -> list[torch.Tensor]:
        values = built.gram_entries_forward(x, src, dst, batch, ptr, 1)
        return [values, built.gram_entries_backward(x, src, dst, batch, ptr, 1, grad)]

    one, two = on_one_and_two_threads(run)
    assert all(torch.equal(a, b) for a, b in zip(one, two))
    leaf = x.clone().requires_grad_()
    want = native.gram_entries_reference(leaf, src, dst, batch, ptr, 1)
    (want_grad,) = torch.autograd.grad(want, leaf, grad)
    assert relative_error(two[0], want) < 1e-14 and relative_error(two[1], want_grad) < 1e-12


def test_draws_are_the_same_on_two_threads(built):
    """Enough values for several blocks of counters per thread."""
    def run() -> list[torch.Tensor]:
        return [built.random_normal(300_001, 12345, False),
                built.random_normal(300_001, 12345, True),
                built.dropout_scale(300_001, 0.3, 678, False)]

    one, two = on_one_and_two_threads(run)
    assert all(torch.equal(a, b) for a, b in zip(one, two))

