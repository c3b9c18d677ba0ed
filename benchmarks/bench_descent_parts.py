"""Forward + backward time of the parts of one ET descent step on a real mini-batch of small
graphs (default: 64 NCI1 graphs), to see where :mod:`benchmarks.bench_graph_epoch`'s descent time
goes.

The batch is the first shuffled batch of ``--batch-size`` graphs, with one CLS node per graph
linked both ways to each of its nodes, laid out by :func:`et_graph.nn.pool.add_cls_nodes` as
in the model. Keys and
queries are ``[N, heads, head_dim]`` and the tokens ``[N, hidden]`` (the general preset's 4 x 8 and
32, with 4 x 32 Hopfield memories). Each part runs forward and backward against a fixed upstream
gradient:

* ``fused_attention``: :func:`et_graph.fused.fused_attention_grad`, with the edge plan built as
  in training (once per batch, included);
* ``native_attention`` (``--native``): the same call with the opt-in compiled kernel of
  :mod:`et_graph.native` switched on (built before the timing);
* ``native_mask_gram`` (``--native``): the Conv2D mask's ``3 x 3`` Gram entries at every edge
  from the compiled kernel (:func:`et_graph.native.gram_entries`, once per batch in the model,
  not per step) and their backward;
* ``reference_attention``: :func:`et_graph.energy.attention_grad` differentiated by autograd;
* ``reference_attention_compiled`` (``--compile``): the same under ``torch.compile``
  (``dynamic=True``; the compile time is printed apart and not counted);
* ``hopfield``: ``relu(g xi^T)`` and its product with ``xi`` (the memories' share of ``dE/dg``),
  differentiated by autograd (which keeps the ``[N, K]`` activations for backward);
* ``fused_hopfield``: the same values from :func:`et_graph.fused.fused_relu_hopfield_grad` (row
  blocks, a hand-written backward that recomputes the activations; not used by the layers:
  slower on NCI1, see docs/benchmarks.md).

Median milliseconds over ``--repeats`` rounds of ``--inner`` calls each; JSON with ``--json``.

    OMP_NUM_THREADS=1 python benchmarks/bench_descent_parts.py --dataset NCI1 --compile
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import Tensor
from torch_geometric.loader import DataLoader

from et_graph import energy as E
from et_graph.datasets.tudataset import load_tudataset
from et_graph.fused import build_edge_plan, fused_attention_grad, fused_relu_hopfield_grad
from et_graph.native import gram_entries, load_native_attention, native_attention
from et_graph.nn.pool import add_cls_nodes


def time_ms(fn: Callable[[], None], repeats: int, inner: int) -> float:
    fn()  # warm-up (allocations, lazy initialisation)
    rounds = []
    for _ in range(repeats):
        begin = time.perf_counter()
        for _ in range(inner):
            fn()
        rounds.append((time.perf_counter() - begin) / inner * 1e3)
    return statistics.median(rounds)


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--dataset", default="NCI1")
    parser.add_argument("--root", default=None, help="TU root (default: the shipped datasets)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--memories", type=int, default=128, help="Hopfield memories")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--inner", type=int, default=20)
    parser.add_argument("--compile", action="store_true",
                        help="also time the reference attention under torch.compile")
    parser.add_argument("--native", action="store_true",
                        help="also time the compiled attention kernel (et_graph.native)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    graphs, _ = load_tudataset(args.root, args.dataset, None, 0, False)
    loader = DataLoader(graphs, batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    batch = next(iter(loader))
    # Only the CLS graph's edges matter here, so the node features are placeholders.
    graph = add_cls_nodes(batch.x.new_zeros(batch.num_nodes, 1), batch.edge_index,
                          batch.x.new_zeros(batch.num_graphs, 1), batch.batch, batch.num_graphs)
    src, dst = graph.edge_index
    num_nodes = graph.x.size(0)
    heads, head_dim = args.heads, args.head_dim
    generator = torch.Generator().manual_seed(0)

    def leaf(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator).requires_grad_()

    k, q = leaf(num_nodes, heads, head_dim), leaf(num_nodes, heads, head_dim)
    beta = torch.ones(heads, requires_grad=True)
    weight = torch.rand(src.numel(), heads, generator=generator).requires_grad_()
    up_k, up_q = torch.randn_like(k), torch.randn_like(q)
    g, xi = leaf(num_nodes, args.hidden), leaf(args.memories, args.hidden)
    up_g = torch.randn_like(g)

    def fused() -> None:
        plan = build_edge_plan(src, dst, num_nodes, heads)
        grad_k, grad_q = fused_attention_grad(k, q, src, dst, beta, weight, plan)
        torch.autograd.backward((grad_k, grad_q), (up_k, up_q))

    def reference(fn: Callable = E.attention_grad) -> Callable[[], None]:
        def run() -> None:
            grad_k, grad_q = fn(k, q, src, dst, beta, weight, num_nodes)
            torch.autograd.backward((grad_k, grad_q), (up_k, up_q))
        return run

    def hopfield() -> None:
        torch.autograd.backward(E.hopfield_grad(g, xi, "relu"), up_g)

    def blocked_hopfield() -> None:
        torch.autograd.backward(fused_relu_hopfield_grad(g, xi), up_g)

    parts: dict[str, Callable[[], None]] = {
        "fused_attention": fused, "reference_attention": reference(), "hopfield": hopfield,
        "fused_hopfield": blocked_hopfield,
    }
    result: dict[str, Any] = {
        "dataset": args.dataset, "graphs": batch.num_graphs, "nodes_with_cls": num_nodes,
        "edges": int(batch.edge_index.size(1)), "edges_with_cls": int(src.numel()),
        "heads": heads, "head_dim": head_dim, "hidden": args.hidden, "memories": args.memories,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
    }
    if args.native:
        load_native_attention()  # built here, not inside the timing

        def native() -> None:
            with native_attention():
                fused()

        parts["native_attention"] = native
        ptr = graph.token_ptr()
        up_gram = torch.randn(src.numel(), 9, generator=generator)

        def native_mask_gram() -> None:
            values = gram_entries(g, src, dst, graph.batch, ptr, 1)
            torch.autograd.backward(values, up_gram)

        parts["native_mask_gram"] = native_mask_gram
    if args.compile:
        compiled = reference(torch.compile(E.attention_grad, dynamic=True))
        begin = time.perf_counter()
        compiled()
        result["compile_seconds"] = time.perf_counter() - begin
        parts["reference_attention_compiled"] = compiled
    result["milliseconds"] = {name: time_ms(fn, args.repeats, args.inner)
                              for name, fn in parts.items()}
    print(f"{args.dataset}: {batch.num_graphs} graphs, {num_nodes} nodes and {src.numel()} edges "
          f"with the CLS links, {torch.get_num_threads()} thread(s)")
    print("| part (forward + backward) | ms |")
    print("|---|---|")
    for name, ms in result["milliseconds"].items():
        print(f"| {name} | {ms:.2f} |")
    if "compile_seconds" in result:
        print(f"(torch.compile took {result['compile_seconds']:.1f} s, not counted)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
