"""Why the fused kernel sorts the edge features once per forward (docs/benchmarks.md, "Edge
features without the copies").

The kernel's two products with the per-edge features ``[E, F]`` are a score product (SDDMM:
``<r[h*N + C], f_e>`` for every edge ``e`` into ``C``) and an aggregation (SpMM: ``sum_e v_e f_e``
over the edges into each node). Both walk the edges in destination order. This script times
each product reading (a) a copy of the features sorted into that order, and (b) the caller's
features in place, through the sorted order's indices, and (c) the score product over an
edge-major pattern (the caller's order, the per-node rows gathered instead), besides the cost
of making the sorted copy once. Same random graph as ``bench_etconv.py`` (self-loops dropped),
1 thread by default; prints a table and writes ``--json``.

    OMP_NUM_THREADS=1 python benchmarks/edge_feature_products.py --json products.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from et_graph.fused import EdgePlan  # noqa: E402


def median_ms(work: Callable[[], torch.Tensor], repeats: int) -> tuple[float, torch.Tensor]:
    out = work()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument("--edges", type=int, default=400000)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--edge-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if min(args.nodes, args.edges, args.heads, args.edge_dim, args.repeats, args.threads) < 1:
        parser.error("every size, --repeats and --threads must be at least 1")
    torch.set_num_threads(args.threads)
    heads, features = args.heads, args.edge_dim
    gen = torch.Generator().manual_seed(0)
    src, dst = torch.randint(0, args.nodes, (2, args.edges), generator=gen)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    edges = src.numel()
    plan = EdgePlan(src, dst, args.nodes, heads)
    attr = torch.randn(edges, features, generator=gen)
    values = torch.rand(heads, edges, generator=gen)
    per_node = torch.randn(heads * args.nodes, features, generator=gen)
    size = (heads * args.nodes, edges)
    index_dtype = plan.crow.dtype
    sorted_columns = torch.arange(edges).repeat(heads).to(index_dtype)
    caller_columns = plan.order.repeat(heads).to(index_dtype)

    def matrix(columns: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
        return torch.sparse_csr_tensor(plan.crow, columns, vals.reshape(-1), size,
                                       check_invariants=False)

    def scores(columns: torch.Tensor, per_edge: torch.Tensor) -> torch.Tensor:
        pattern = matrix(columns, per_node.new_zeros(heads, edges))
        torch.sparse.sampled_addmm(pattern, per_node, per_edge.t(), beta=0.0, out=pattern)
        return pattern.values()

    # edge-major pattern: row e (caller's order) holds its H destinations' rows
    inverse = torch.empty_like(plan.order)
    inverse[plan.order] = torch.arange(edges)
    caller_dst = plan.dst.index_select(0, inverse)
    edge_crow = torch.arange(0, heads * edges + 1, heads).to(index_dtype)
    edge_col = (caller_dst.unsqueeze(1)
                + torch.arange(heads).unsqueeze(0) * args.nodes).reshape(-1).to(index_dtype)

    def scores_edge_major() -> torch.Tensor:
        pattern = torch.sparse_csr_tensor(edge_crow, edge_col, per_node.new_zeros(edges * heads),
                                          (edges, heads * args.nodes), check_invariants=False)
        torch.sparse.sampled_addmm(pattern, attr, per_node.t(), beta=0.0, out=pattern)
        return pattern.values().view(edges, heads).t().index_select(1, plan.order).reshape(-1)

    sorted_attr = attr.index_select(0, plan.order)
    rows = {}
    rows["sorted copy, made once"], _ = median_ms(lambda: attr.index_select(0, plan.order),
                                                  args.repeats)
    rows["score product, sorted copy"], reference = median_ms(
        lambda: scores(sorted_columns, sorted_attr), args.repeats)
    rows["score product, caller's rows in place"], other = median_ms(
        lambda: scores(caller_columns, attr), args.repeats)
    torch.testing.assert_close(other, reference)
    rows["score product, edge-major pattern"], other = median_ms(scores_edge_major, args.repeats)
    torch.testing.assert_close(other, reference)
    rows["aggregation, sorted copy"], reference = median_ms(
        lambda: matrix(sorted_columns, values) @ sorted_attr, args.repeats)
    rows["aggregation, caller's rows in place"], other = median_ms(
        lambda: matrix(caller_columns, values) @ attr, args.repeats)
    torch.testing.assert_close(other, reference)

    print(f"N={args.nodes} E={edges} (self-loops dropped) H={heads} F={features}, "
          f"{args.threads} thread(s), median of {args.repeats}")
    print("| product | ms |\n|---|---|")
    for name, ms in rows.items():
        print(f"| {name} | {ms:.1f} |")
    result = {"command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
              "nodes": args.nodes, "edges": edges, "heads": heads, "edge_dim": features,
              "threads": args.threads, "repeats": args.repeats, "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(), "median_ms": rows}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
