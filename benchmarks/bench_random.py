"""Drawing the training noise and dropout of one batch: PyTorch's CPU generator against the
compiled Philox generator of :mod:`et_graph.native` (``et_graph/csrc/random.cpp``).

The default shape is a 64-graph NCI1 batch's tokens (2,118 with the CLS tokens, width 32): each
descent step draws one such tensor of normals (ETConv's ``noise_std``) and the model one
dropout mask. ``torch`` is ``torch.randn_like`` and ``torch.nn.functional.dropout``; ``native``
is :func:`et_graph.native.random_normal_like` and :func:`et_graph.native.dropout` (the mask's
product with the tokens included in both dropout rows). Each figure is the median over
``--repeats`` rounds of the mean over ``--inner`` calls, the two generators alternating.

    OMP_NUM_THREADS=1 python benchmarks/bench_random.py --threads 1 --json random.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from et_graph import native


def mean_microseconds(draw: Callable[[], Any], inner: int) -> float:
    begin = time.perf_counter()
    for _ in range(inner):
        draw()
    return (time.perf_counter() - begin) / inner * 1e6


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--tokens", type=int, default=2118)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--p", type=float, default=0.07, help="dropout probability")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--inner", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    native.load_native_attention()  # built before any timing
    x = torch.randn(args.tokens, args.width)
    draws: dict[str, Callable[[], Any]] = {
        "normal_torch": lambda: torch.randn_like(x),
        "normal_native": lambda: native.random_normal_like(x),
        "dropout_torch": lambda: F.dropout(x, args.p, training=True),
        "dropout_native": lambda: native.dropout(x, args.p),
    }
    for draw in draws.values():
        draw()
    times: dict[str, list[float]] = {name: [] for name in draws}
    for _ in range(args.repeats):
        for name, draw in draws.items():
            times[name].append(mean_microseconds(draw, args.inner))
    median = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "tokens": args.tokens, "width": args.width, "p": args.p,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "microseconds": median, "rounds": times,
        "native_over_torch": {kind: median[f"{kind}_native"] / median[f"{kind}_torch"]
                              for kind in ("normal", "dropout")},
    }
    print(f"[{args.tokens}, {args.width}] float32, {result['threads']} thread(s), median of "
          f"{args.repeats} rounds of {args.inner} calls")
    print("| draw | PyTorch (µs) | compiled (µs) | compiled / PyTorch |")
    print("|---|---|---|---|")
    for kind, label in (("normal", "normals (noise)"), ("dropout", f"dropout, p = {args.p}")):
        print(f"| {label} | {median[f'{kind}_torch']:.0f} | {median[f'{kind}_native']:.0f} | "
              f"{result['native_over_torch'][kind]:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
