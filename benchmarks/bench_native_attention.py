"""One ETConv training step on one random graph, with the sparse kernels (the default) and with
the opt-in compiled attention kernel of :mod:`et_graph.native`, alternating in the same process.

The compiled kernel was written for mini-batches of many small graphs
(``bench_graph_epoch.py --native-compare``); this script shows what it does on one large graph,
with as many threads as the sparse kernels (``--threads``; since session 52 the compiled loops
run on torch's threads too). The default size is
Tolokers' (11,758 nodes, 1.04M edges) with the anomaly detector's attention (1 head of width
16, 64 channels, 2 steps). Each round times both paths (best of ``--repeats`` steps each, after
one untimed step); the ratio is compiled ÷ sparse.

    OMP_NUM_THREADS=1 python benchmarks/bench_native_attention.py --threads 1 \\
        --json docs/measured/graph/native/large_graph_t1.json
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from et_graph.native import load_native_attention, native_attention
from et_graph.nn import ETConv


def best_seconds(step: Callable[[], None], repeats: int) -> float:
    step()
    best = float("inf")
    for _ in range(repeats):
        begin = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - begin)
    return best


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--nodes", type=int, default=11758)
    parser.add_argument("--edges", type=int, default=1_040_000)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_native_attention()  # built before any timing
    torch.manual_seed(0)
    conv = ETConv(args.channels, heads=args.heads, head_dim=args.head_dim, steps=args.steps)
    x = torch.randn(args.nodes, args.channels)
    edge_index = torch.randint(0, args.nodes, (2, args.edges))

    def step() -> None:
        conv.zero_grad(set_to_none=True)
        conv(x, edge_index).square().sum().backward()

    def compiled_step() -> None:
        with native_attention():
            step()

    rounds = []
    for _ in range(args.rounds):
        sparse = best_seconds(step, args.repeats)
        compiled = best_seconds(compiled_step, args.repeats)
        rounds.append({"sparse_s": sparse, "compiled_s": compiled, "ratio": compiled / sparse})
        print(f"{args.threads} thread(s), N={args.nodes}, E={args.edges}: sparse {sparse:.3f} s, "
              f"compiled {compiled:.3f} s, compiled / sparse {compiled / sparse:.2f}")
    result = {"args": vars(args), "rounds": rounds, "torch": torch.__version__,
              "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
