"""Peak memory of exact chunked scoring on a graph with a hub: node chunks against edge-capped ones.

``ETConv.forward_chunked(x, edge_index, chunk_size=C)`` bounds each chunk by ``C`` destination
nodes; its per-edge arrays (``[E_S, H, Y]``) then grow with the in-edges ``E_S`` that those nodes
bring. On a graph where one node receives an edge from most of the others (a hub, as in social
and fraud graphs), the chunk holding the hub brings them all. ``chunk_edges=M`` also caps each
chunk at ``M`` in-edges (a node with more is a chunk alone), so that the other nodes never add
to the hub's chunk and every other chunk stays at most ``M`` edges.

The graph: ``--nodes`` nodes, ``--edges`` random edges, plus one edge from every ``--hub-every``-th
node to node 0. Each setting runs in a fresh subprocess (``VmHWM``: the whole process's peak
resident set, graph included) with the same graph (seeded) and the same ``ETConv`` (D = 64, 4
heads x 16, T = 2, float32, eval). The settings compare ``--chunk-size`` alone with
``--chunk-size`` plus ``--chunk-edges``; the outputs are compared too (they must agree to float
rounding). The report is a table plus ``--json``.

    OMP_NUM_THREADS=1 python benchmarks/chunk_edges_memory.py --json chunk_edges.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import torch

from et_graph.nn import ETConv


def status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def make_graph(nodes: int, edges: int, hub_every: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    random_edges = torch.randint(0, nodes, (2, edges), generator=gen)
    sources = torch.arange(1, nodes, hub_every)
    hub = torch.stack([sources, torch.zeros_like(sources)])
    x = torch.randn(nodes, 64, generator=gen)
    return x, torch.cat([hub, random_edges], dim=1)


def worker(args: argparse.Namespace, chunk_edges: Optional[int], out: Path) -> None:
    torch.set_num_threads(args.threads)
    x, edge_index = make_graph(args.nodes, args.edges, args.hub_every)
    torch.manual_seed(0)
    conv = ETConv(64, heads=4, head_dim=16, steps=2).eval()
    rss_graph = status_kib("VmRSS")
    begin = time.perf_counter()
    result = conv.forward_chunked(x, edge_index, chunk_size=args.chunk_size,
                                  chunk_edges=chunk_edges)
    seconds = time.perf_counter() - begin
    torch.save(result, out)
    print(json.dumps({"seconds": seconds, "peak_rss_mib": status_kib("VmHWM") / 1024,
                      "rss_after_graph_mib": rss_graph / 1024}))


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--nodes", type=int, default=400_000)
    parser.add_argument("--edges", type=int, default=4_000_000, help="random edges")
    parser.add_argument("--hub-every", type=int, default=1,
                        help="every k-th node sends an edge to node 0 (the hub)")
    parser.add_argument("--chunk-size", type=int, default=65_536)
    parser.add_argument("--chunk-edges", type=int, default=250_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not os.path.exists("/proc/self/status"):  # (as bench_scale.py: Linux only)
        raise SystemExit("chunk_edges_memory.py needs Linux /proc (peak RSS of the process)")
    if args.worker is not None:
        worker(args, None if args.worker == "none" else int(args.worker), Path(args.out))
        return {}
    hub_edges = len(range(1, args.nodes, args.hub_every))
    report: dict[str, Any] = {
        "nodes": args.nodes, "random_edges": args.edges, "hub_in_edges": hub_edges,
        "chunk_size": args.chunk_size, "chunk_edges": args.chunk_edges,
        "threads": args.threads, "torch": torch.__version__,
        "load_average_before": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "settings": {},
    }
    outputs = {}
    scratch = Path(tempfile.mkdtemp(prefix="chunk_edges_"))  # private (a guessable /tmp name
    # could be planted or a symlink)
    for name, cap in (("nodes_only", "none"), ("edge_capped", str(args.chunk_edges))):
        out = scratch / f"{name}.pt"
        command = [sys.executable, __file__, "--worker", cap, "--out", str(out),
                   *[f"--{k.replace('_', '-')}={v}" for k, v in
                     (("nodes", args.nodes), ("edges", args.edges), ("hub_every", args.hub_every),
                      ("chunk_size", args.chunk_size), ("threads", args.threads))]]
        done = subprocess.run(command, capture_output=True, text=True, check=True,
                              env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
        report["settings"][name] = json.loads(done.stdout.strip().splitlines()[-1])
        outputs[name] = torch.load(out, weights_only=True)
        out.unlink()
    scratch.rmdir()
    difference = (outputs["nodes_only"] - outputs["edge_capped"]).abs().max().item()
    report["max_abs_difference"] = difference
    report["load_average_after"] = list(os.getloadavg())
    if args.json:  # written first: the table below is printed from the same report
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"{args.nodes:,} nodes, {args.edges:,} random edges + a hub with {hub_edges:,} "
          f"in-edges; chunk_size {args.chunk_size:,}, {args.threads} thread(s)\n")
    print("| setting | peak RSS (MiB) | RSS with the graph loaded (MiB) | seconds |")
    print("|---|---|---|---|")
    for name, label in (("nodes_only", f"chunk_size {args.chunk_size:,}"),
                        ("edge_capped", f"+ chunk_edges {args.chunk_edges:,}")):
        s = report["settings"][name]
        print(f"| {label} | {s['peak_rss_mib']:,.0f} | {s['rss_after_graph_mib']:,.0f} | "
              f"{s['seconds']:.1f} |")
    print(f"\nlargest difference between the two outputs: {difference:.2e}")
    return report


if __name__ == "__main__":
    main()
