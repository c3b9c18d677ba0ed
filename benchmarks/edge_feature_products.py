"""Why the fused kernel sorts the edge features once per forward (docs/benchmarks.md, "Edge
features without the copies").

The kernel's two products with the per-edge features ``[E, F]`` are a score product (SDDMM:
``<r[h*N + C], f_e>`` for every edge ``e`` into ``C``) and an aggregation (SpMM: ``sum_e v_e f_e``
over the edges into each node). Both walk the edges in destination order. This script times
each product reading (a) a copy of the features sorted into that order, and (b) the caller's
features in place, through the sorted order's indices, and (c) the score product over an
edge-major pattern (the caller's order, the per-node rows gathered instead), besides the cost
of making the sorted copy once. The random graph and features of ``bench_etconv.py``
(``make_inputs``, self-loops dropped), 1 thread by default; prints a table and writes
``--json``.

    OMP_NUM_THREADS=1 python benchmarks/edge_feature_products.py --json products.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

from et_graph.fused import EdgePlan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_descent_parts import time_ms  # noqa: E402
from bench_etconv import make_inputs  # noqa: E402


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
    _, edge_index, _, attr = make_inputs(args.nodes, args.edges, edge_dim=features)
    keep = edge_index[0] != edge_index[1]
    (src, dst), attr = edge_index[:, keep], attr[keep]
    edges = src.numel()
    plan = EdgePlan(src, dst, args.nodes, heads)
    gen = torch.Generator().manual_seed(1)
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
    products = {
        "sorted copy, made once": lambda: attr.index_select(0, plan.order),
        "score product, sorted copy": lambda: scores(sorted_columns, sorted_attr),
        "score product, caller's rows in place": lambda: scores(caller_columns, attr),
        "score product, edge-major pattern": scores_edge_major,
        "aggregation, sorted copy": lambda: matrix(sorted_columns, values) @ sorted_attr,
        "aggregation, caller's rows in place": lambda: matrix(caller_columns, values) @ attr,
    }
    # every layout gives the sorted copy's values
    for kind in ("score product", "aggregation"):
        reference = products[f"{kind}, sorted copy"]()
        for name, product in products.items():
            if name.startswith(kind) and name != f"{kind}, sorted copy":
                torch.testing.assert_close(product(), reference)
    rows = {name: time_ms(product, args.repeats, 1) for name, product in products.items()}

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
