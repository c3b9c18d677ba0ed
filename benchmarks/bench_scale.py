"""Scale benchmark: random graphs of T-Finance's and T-Social's sizes, every figure from one run.

**T-Finance size, full batch** (39,357 nodes, 21.2M edges, 10 features): one training step
(forward, class-weighted BCE on every node, backward, Adam step) of

* ``et``:  :class:`~et_graph.nn.models.ETAnomalyNet`, D = 64, one 64-dim head, T = 1;
* ``gcn``: two ``GCNConv`` layers (64) and a linear head (the anomaly baseline ``GCNNet``);
* ``gat``: two ``GATConv`` layers (4 heads x 16) and a linear head (``GATNet``).

**T-Social size, mini-batch** (5,781,065 nodes, 73.1M edges, 10 features): one training epoch
over the training nodes (``--train-fraction`` of the nodes as seeds, ``--batch-size`` seeds per
batch, ``--num-neighbors`` fanouts, the built-in sampler of :mod:`et_graph.loaders`) for ``et``
and for a 2-layer GraphSAGE (``sage``, 64) on the *same* batches (same sampler seed), then, for
ET, one exact full-graph inference pass in chunks of ``--chunk-size`` destination nodes
(:meth:`et_graph.nn.ETConv.forward_chunked` and the chunked readout, the path of
``ETDetector(chunk_size=...)``), in a subprocess of its own.

Every (size, model) runs in its own subprocess, on ``--threads`` threads. Memory is the
subprocess's peak resident set (``VmHWM``: graph, sampler, model, optimiser, everything), with
the allocator's default settings. A watchdog in the parent kills a subprocess whose resident
set passes ``--memory-cap-gb``, so that a model that does not fit is reported as such instead
of taking the machine down. Times are ``time.perf_counter``: the median over ``--repeats``
steps after one warm-up step (full batch), or one whole epoch (mini-batch; the sampling is
timed apart from the model).

``python benchmarks/bench_scale.py`` runs both sizes (about 20 minutes on 2 cores);
``--quick`` runs tiny graphs (the smoke test); ``--json FILE`` writes the report.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_etconv import _status_kib, fmt, load_average, ratio  # noqa: E402

FEATURES = 10
HIDDEN = 64
SIZES = {"tfinance": (39_357, 21_200_000), "tsocial": (5_781_065, 73_100_000),
         "tsocial_full": (5_781_065, 73_100_000)}
QUICK_SIZES = {"tfinance": (400, 8_000), "tsocial": (3_000, 30_000),
               "tsocial_full": (3_000, 30_000)}
#: The cases trained full batch (the others: mini-batch at T-Social's size).
FULL_BATCH_CASES = ("tfinance", "tsocial_full")
FULL_BATCH_MODELS = ("et", "gcn", "gat")
MINI_BATCH_MODELS = ("et", "sage")
INFERENCE = "et_inference"
GIB = 1024 ** 3


# --------------------------------------------------------------------------------------------
# Worker (inside the subprocess)
# --------------------------------------------------------------------------------------------
def make_graph(num_nodes: int, num_edges: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=generator)
    x = torch.randn(num_nodes, FEATURES, generator=generator)
    y = (torch.rand(num_nodes, generator=generator) < 0.05).float()
    return x, edge_index, y


class SAGENet(torch.nn.Module):
    """Two GraphSAGE layers (mean aggregation) and a linear head: the mini-batch peer."""

    def __init__(self, in_channels: int, hidden: int) -> None:
        super().__init__()
        from torch_geometric.nn import SAGEConv

        self.conv1 = SAGEConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, hidden)
        self.head = torch.nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).relu()
        return self.head(x).squeeze(-1)


def make_model(name: str) -> torch.nn.Module:
    from et_graph.baselines.node import GATNet, GCNNet
    from et_graph.nn.models import ETAnomalyNet

    if name == "et":
        return ETAnomalyNet(FEATURES, hidden_channels=HIDDEN, heads=1, head_dim=HIDDEN, steps=1)
    if name == "gcn":
        return GCNNet(FEATURES, HIDDEN)
    if name == "gat":
        return GATNet(FEATURES, HIDDEN, heads=4)
    if name == "sage":
        return SAGENet(FEATURES, HIDDEN)
    raise ValueError(f"unknown model {name!r}")


def training_step(model, optimizer, x, edge_index, y, loss_nodes=None) -> None:
    from et_graph.nn.models.anomaly import weighted_bce_loss

    optimizer.zero_grad(set_to_none=True)
    logits = model(x, edge_index)
    if loss_nodes is not None:
        logits, y = logits[loss_nodes], y[loss_nodes]
    weighted_bce_loss(logits, y, 19.0).backward()
    optimizer.step()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gpu_memory(device: torch.device) -> dict[str, Any]:
    """On CUDA, the peak of ``torch.cuda.max_memory_allocated`` so far (graph, model, optimiser
    state, activations: the whole process) and the device's name."""
    if device.type != "cuda":
        return {}
    return {"peak_gpu_bytes": torch.cuda.max_memory_allocated(device),
            "device_name": torch.cuda.get_device_name(device)}


def full_batch_worker(name: str, num_nodes: int, num_edges: int, repeats: int,
                      device: str = "cpu") -> dict[str, Any]:
    """``repeats`` timed training steps after a warm-up step, then one full-graph inference pass
    (``eval``, no gradient), all on ``device``."""
    device = torch.device(device)
    x, edge_index, y = (t.to(device) for t in make_graph(num_nodes, num_edges))
    model = make_model(name).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    rss_graph = _status_kib("VmRSS") * 1024
    seconds = []
    for step in range(repeats + 1):
        synchronize(device)
        begin = time.perf_counter()
        training_step(model, optimizer, x, edge_index, y)
        synchronize(device)
        if step:  # the first step is the warm-up
            seconds.append(time.perf_counter() - begin)
    training_memory = gpu_memory(device)
    model.eval()
    begin = time.perf_counter()
    with torch.no_grad():
        scores = model(x, edge_index)
    synchronize(device)
    inference_s = time.perf_counter() - begin
    return {"step_s": statistics.median(seconds), "steps_s": seconds,
            "rss_after_graph_bytes": rss_graph, "peak_rss_bytes": _status_kib("VmHWM") * 1024,
            **training_memory, "inference_s": inference_s,
            "inference_finite": bool(torch.isfinite(scores).all())}


def mini_batch_worker(name: str, num_nodes: int, num_edges: int, args: dict[str, Any]
                      ) -> dict[str, Any]:
    """One epoch; the sampler runs on the CPU, and on CUDA each batch is copied to the device
    (inside the model's time)."""
    from et_graph.loaders import NeighbourSampler

    device = torch.device(args.get("device", "cpu"))
    x, edge_index, y = make_graph(num_nodes, num_edges)
    begin = time.perf_counter()
    sampler = NeighbourSampler(edge_index, num_nodes, args["num_neighbors"])
    sampler_build_s = time.perf_counter() - begin
    generator = torch.Generator().manual_seed(1)
    seeds = torch.randperm(num_nodes, generator=generator)[
        :max(1, int(args["train_fraction"] * num_nodes))]
    model = make_model(name).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    sampling = torch.Generator().manual_seed(2)
    sample_s = model_s = 0.0
    batches = sampled_nodes = sampled_edges = 0
    for start in range(0, seeds.numel(), args["batch_size"]):
        begin = time.perf_counter()
        batch = sampler.sample(seeds[start:start + args["batch_size"]], sampling)
        middle = time.perf_counter()
        training_step(model, optimizer, x[batch.nodes].to(device),
                      batch.edge_index.to(device), y[batch.nodes].to(device),
                      torch.arange(batch.num_seeds, device=device))
        synchronize(device)
        model_s += time.perf_counter() - middle
        sample_s += middle - begin
        batches += 1
        sampled_nodes += batch.nodes.numel()
        sampled_edges += batch.edge_index.size(1)
    result: dict[str, Any] = {
        "epoch_model_s": model_s, "epoch_sampling_s": sample_s,
        "sampler_build_s": sampler_build_s, "batches": batches, "seeds": seeds.numel(),
        "mean_batch_nodes": sampled_nodes / batches, "mean_batch_edges": sampled_edges / batches,
        "epoch_peak_rss_bytes": _status_kib("VmHWM") * 1024, **gpu_memory(device),
    }
    return result


def inference_worker(num_nodes: int, num_edges: int, chunk_size: int, device: str = "cpu"
                     ) -> dict[str, Any]:
    """One exact full-graph scoring pass of ET in chunks, in a fresh process."""
    device = torch.device(device)
    x, edge_index, _ = (t.to(device) for t in make_graph(num_nodes, num_edges))
    model = make_model("et").to(device).eval()
    rss_graph = _status_kib("VmRSS") * 1024
    synchronize(device)
    begin = time.perf_counter()
    with torch.no_grad():
        scores = model(x, edge_index, chunk_size=chunk_size)
    synchronize(device)
    return {"inference_s": time.perf_counter() - begin, "rss_after_graph_bytes": rss_graph,
            "inference_peak_rss_bytes": _status_kib("VmHWM") * 1024, **gpu_memory(device),
            "inference_finite": bool(torch.isfinite(scores).all())}


# --------------------------------------------------------------------------------------------
# Parent: one subprocess per (size, model), with a resident-memory watchdog
# --------------------------------------------------------------------------------------------
def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_worker(case: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    sizes = QUICK_SIZES if args.quick else SIZES
    num_nodes, num_edges = (max(2, int(round(v * args.scale))) for v in sizes[case])
    settings = {"num_neighbors": [int(k) for k in args.num_neighbors.split(",")],
                "batch_size": args.batch_size, "train_fraction": args.train_fraction,
                "chunk_size": args.chunk_size, "repeats": args.repeats, "device": args.device}
    # Unlike bench_etconv's per-step deltas, the whole-process peak is the figure here, with the
    # allocator's default behaviour (what a user's process gets).
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    # The repository root first, so that a checkout runs without being installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                      env.get("PYTHONPATH")]))
    command = [sys.executable, os.path.abspath(__file__), "--worker", case, name,
               "--threads", str(args.threads), "--worker-settings", json.dumps(settings),
               "--worker-size", f"{num_nodes}x{num_edges}"]
    begin = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    cap = args.memory_cap_gb * GIB
    killed = threading.Event()
    highest = [0]

    def watch() -> None:
        while child.poll() is None:
            rss = _rss_bytes(child.pid)
            highest[0] = max(highest[0], rss)
            if rss > cap:
                killed.set()
                child.kill()
                return
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stdout, stderr = child.communicate()
    watcher.join()
    wall = time.perf_counter() - begin
    base = {"case": case, "model": name, "num_nodes": num_nodes, "num_edges": num_edges,
            "wall_s": wall}
    if killed.is_set():
        return {**base, "error": f"killed: resident memory passed the {args.memory_cap_gb:g} "
                                 f"GiB cap after {wall:.0f} s", "peak_rss_bytes": highest[0]}
    if child.returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {child.returncode}"
        return {**base, "error": last}
    return {**base, **json.loads(stdout.strip().splitlines()[-1])}


def gib(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value / GIB:.2f}"


def render(report: dict[str, Any]) -> str:
    lines = [f"# Scale benchmark ({report['threads']} threads, load average before: "
             f"{report['load_before']})", ""]
    gpu = report.get("device", "cpu") != "cpu"
    titles = {"tfinance": "T-Finance size", "tsocial_full": "T-Social size"}
    for case in FULL_BATCH_CASES:
        full = {r["model"]: r for r in report["results"] if r["case"] == case}
        if not full:
            continue
        first = next(iter(full.values()))
        lines += [f"## {titles[case]}, full batch ({first['num_nodes']:,} nodes, "
                  f"{first['num_edges']:,} edges): one Adam step, one inference pass", "",
                  "| model | step time (s) | inference (s) | peak RSS (GiB) |"
                  + (" peak GPU (GiB) |" if gpu else "") + " note |",
                  "|---|---|---|---|" + ("---|" if gpu else "") + "---|"]
        for name in FULL_BATCH_MODELS:
            r = full.get(name)
            if r is not None:
                lines.append(f"| {name} | {fmt(r.get('step_s'), 3)} | "
                             f"{fmt(r.get('inference_s'), 3)} | "
                             f"{gib(r.get('peak_rss_bytes'))} |"
                             + (f" {gib(r.get('peak_gpu_bytes'))} |" if gpu else "")
                             + f" {r.get('error', '')} |")
        et, gcn = full.get("et", {}), full.get("gcn", {})
        memory = "peak_gpu_bytes" if gpu else "peak_rss_bytes"
        lines += ["", "| ratio | value |", "|---|---|",
                  f"| ET / GCNConv step time | {fmt(ratio(et.get('step_s'), gcn.get('step_s')))} "
                  "|",
                  f"| ET / GCNConv peak {'GPU memory' if gpu else 'RSS'} | "
                  f"{fmt(ratio(et.get(memory), gcn.get(memory)))} |", ""]
    mini = {r["model"]: r for r in report["results"] if r["case"] == "tsocial"}
    if mini:
        first = next(iter(mini.values()))
        s = report["settings"]
        lines += [f"## T-Social size, mini-batch ({first['num_nodes']:,} nodes, "
                  f"{first['num_edges']:,} edges)", "",
                  f"One epoch over {first.get('seeds', 0):,} seed nodes (train fraction "
                  f"{s['train_fraction']}), {s['batch_size']} seeds per batch, fanouts "
                  f"{s['num_neighbors']}, built-in sampler; the same batches for both models.",
                  "", "| model | epoch, model (s) | epoch, sampling (s) | batches | mean batch "
                  "nodes / edges | epoch peak RSS (GiB) | note |",
                  "|---|---|---|---|---|---|---|"]
        for name in MINI_BATCH_MODELS:
            r = mini.get(name)
            if r is not None:
                lines.append(
                    f"| {name} | {fmt(r.get('epoch_model_s'), 1)} | "
                    f"{fmt(r.get('epoch_sampling_s'), 1)} | {r.get('batches', 'n/a')} | "
                    f"{r.get('mean_batch_nodes', 0):,.0f} / {r.get('mean_batch_edges', 0):,.0f} | "
                    f"{gib(r.get('epoch_peak_rss_bytes'))} | {r.get('error', '')} |")
        et, sage = mini.get("et", {}), mini.get("sage", {})
        scoring = mini.get(INFERENCE, {})
        lines += ["", "| figure | value |", "|---|---|",
                  f"| ET / GraphSAGE epoch time (model part) | "
                  f"{fmt(ratio(et.get('epoch_model_s'), sage.get('epoch_model_s')))} |",
                  f"| ET full-graph inference, chunk {s['chunk_size']:,} (s) | "
                  f"{fmt(scoring.get('inference_s'), 1)} |",
                  f"| ET full-graph inference peak RSS (GiB) | "
                  f"{gib(scoring.get('inference_peak_rss_bytes'))} "
                  f"{scoring.get('error', '')} |"]
        if gpu:
            lines += [f"| peak GPU memory, ET epoch / GraphSAGE epoch / ET inference (GiB) | "
                      f"{gib(et.get('peak_gpu_bytes'))} / {gib(sage.get('peak_gpu_bytes'))} / "
                      f"{gib(scoring.get('peak_gpu_bytes'))} |"]
        lines.append("")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> None:
    """Step time and peak memory of the full-batch models, one group per graph size (log
    scales: the models differ by up to an order of magnitude). Memory is the peak GPU memory on
    CUDA, the peak RSS on the CPU; a model that did not fit has no point and is named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from et_graph.plots.colours import model_colour

    gpu = report.get("device", "cpu") != "cpu"
    memory_key = "peak_gpu_bytes" if gpu else "peak_rss_bytes"
    cases = [c for c in FULL_BATCH_CASES if any(r["case"] == c for r in report["results"])]
    if not cases:
        raise SystemExit("--plot: the report has no full-batch case")
    titles = {"tfinance": "T-Finance size", "tsocial_full": "T-Social size"}
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    width = 0.8 / len(FULL_BATCH_MODELS)
    for panel, (key, label, scale) in zip(axes, (("step_s", "training step (s)", 1.0),
                                                 (memory_key, "peak memory (GiB)", 1 / GIB))):
        for i, name in enumerate(FULL_BATCH_MODELS):
            heights, missing = [], []
            for case in cases:
                row = next((r for r in report["results"]
                            if r["case"] == case and r["model"] == name), {})
                value = row.get(key) if "error" not in row else None
                heights.append(value * scale if value is not None else 0.0)
                if value is None:
                    missing.append(case)
            positions = [j + (i - (len(FULL_BATCH_MODELS) - 1) / 2) * width
                         for j in range(len(cases))]
            # Points, not bars: on a log axis a bar's length depends on where the axis starts.
            colour = model_colour(name)
            drawn = [(x, h) for x, h in zip(positions, heights) if h]
            if drawn:
                panel.plot(*zip(*drawn), "o", color=colour, ms=7, label=name)
            else:
                panel.plot([], [], "o", color=colour, ms=7, label=name)
            for middle, height in zip(positions, heights):
                if height:
                    panel.annotate(f"{height:.3g}", (middle, height), ha="center",
                                   va="bottom", xytext=(0, 5), textcoords="offset points",
                                   fontsize=7)
                else:  # at the foot of the axis: a log scale has no zero
                    panel.annotate("did not fit", (middle, 0.03),
                                   xycoords=("data", "axes fraction"), ha="center",
                                   va="bottom", rotation=90, fontsize=7, color=colour)
        panel.set_xticks(range(len(cases)), [titles[c] for c in cases])
        panel.set_yscale("log")
        panel.set_ylabel(f"{label}, lower is better")
        panel.set_xlim(-0.6, len(cases) - 0.4)
    axes[0].legend(fontsize=8)
    where = (f"{report['results'][0].get('device_name', 'GPU')}" if gpu
             else f"CPU, {report['threads']} threads")
    figure.suptitle(f"Full-batch ET, GCNConv and GATConv ({where})", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--cases", default="tfinance,tsocial",
                        help="comma-separated: tfinance (full batch), tsocial (mini-batch), "
                             "tsocial_full (T-Social's size, full batch: for a GPU)")
    parser.add_argument("--device", default="cpu",
                        help="cpu or cuda[:i]: the models, graphs and batches go there (the "
                             "sampler stays on the CPU); on CUDA the clock stops after "
                             "torch.cuda.synchronize and the peak GPU memory is reported")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="timed full-batch steps")
    parser.add_argument("--batch-size", type=int, default=8192, help="seed nodes per batch")
    parser.add_argument("--num-neighbors", default="10",
                        help="fanouts per hop (T = 1 reads two hops, the query side one; see "
                             "docs/scale.md)")
    parser.add_argument("--train-fraction", type=float, default=0.4,
                        help="share of the nodes that are training seeds (GADBench: 40%%)")
    parser.add_argument("--chunk-size", type=int, default=65536,
                        help="destination nodes per chunk of the full-graph inference pass")
    parser.add_argument("--memory-cap-gb", type=float, default=16.0,
                        help="kill a subprocess whose resident memory passes this many GiB")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the node and edge counts (e.g. 0.1 for a dry run)")
    parser.add_argument("--quick", action="store_true", help="tiny graphs (smoke test)")
    parser.add_argument("--json", default=None, help="write the report here")
    parser.add_argument("--render", default=None, metavar="JSON",
                        help="only print the tables of a saved --json report")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="also draw the full-batch step times and peak memory here")
    parser.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-settings", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-size", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    if args.render:
        report = json.loads(Path(args.render).read_text(encoding="utf-8"))
        print(render(report))
        if args.plot:
            plot(report, args.plot)
        return report
    torch.set_num_threads(args.threads)
    if args.worker:
        case, name = args.worker
        settings = json.loads(args.worker_settings)
        num_nodes, num_edges = (int(v) for v in args.worker_size.split("x"))
        device = settings.get("device", "cpu")
        if case in FULL_BATCH_CASES:
            result = full_batch_worker(name, num_nodes, num_edges, settings["repeats"], device)
        elif name == INFERENCE:
            result = inference_worker(num_nodes, num_edges, settings["chunk_size"], device)
        else:
            result = mini_batch_worker(name, num_nodes, num_edges, settings)
        print(json.dumps(result))
        return result
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: this PyTorch sees no CUDA device")
    if not os.path.exists("/proc/self/clear_refs"):
        raise SystemExit("bench_scale.py needs Linux /proc (peak RSS per subprocess)")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(SIZES))
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; choose from {sorted(SIZES)}")
    report: dict[str, Any] = {
        "threads": args.threads, "load_before": load_average(), "quick": args.quick,
        "scale": args.scale,
        "settings": {"num_neighbors": args.num_neighbors, "batch_size": args.batch_size,
                     "train_fraction": args.train_fraction, "chunk_size": args.chunk_size,
                     "repeats": args.repeats, "memory_cap_gb": args.memory_cap_gb},
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "cpu_count": os.cpu_count()},
        "device": args.device,
        "results": [],
    }
    from tqdm.autonotebook import tqdm

    jobs = [(case, name) for case in cases
            for name in (FULL_BATCH_MODELS if case in FULL_BATCH_CASES
                         else (*MINI_BATCH_MODELS, INFERENCE))]
    for case, name in tqdm(jobs, desc="bench_scale"):
        report["results"].append(run_worker(case, name, args))
    report["load_after"] = load_average()
    text = render(report)
    print(text)
    print(f"load average after: {report['load_after']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
        Path(args.json).with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    if args.plot:
        plot(report, args.plot)
    return report


if __name__ == "__main__":
    main()
