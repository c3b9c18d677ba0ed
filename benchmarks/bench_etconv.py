"""Speed and memory of ETConv against PyG's TransformerConv and GATConv (forward + backward).

For every size ``N x E`` (random graph, ``D = 64`` features) one training step is timed: the
layer's forward pass, a loss ``sum(out * P)`` with a fixed random ``P``, and backward to the
parameters and to ``x``. The models are

* ``etconv``:          ``ETConv(64, heads=4, head_dim=16, steps=2)`` (closed form, fused)
* ``etconv_autograd``: the same with ``grad="autograd"`` (the reference)
* ``transformer``:     ``TransformerConv(64, 16, heads=4)`` (concat -> 64)
* ``gat``:             ``GATConv(64, 16, heads=4)`` (concat -> 64)
* ``etconv_compiled``: ``torch.compile(etconv)``

With ``--edge-dim F`` every model takes edge features ``edge_attr [E, F]`` (standard normal):
``ETConv(..., edge_dim=F)`` (the fused kernel's form with key offsets), ``TransformerConv(...,
edge_dim=F)`` and ``GATConv(..., edge_dim=F)``.

Timing: ``time.perf_counter`` around one step; ``--warmup`` untimed rounds, then ``--repeats``
rounds in which the models take turns (round robin, so that a busy machine slows all of them
alike), and the median per model.

Peak memory (CPU): each model runs in its own subprocess. After one warm-up step the process
resets its resident-set high-water mark (``/proc/self/clear_refs``), runs one step and reports
``VmHWM - VmRSS(before)``: the extra resident memory of the step. glibc is told to return freed
blocks above 64 KiB to the system at once (``MALLOC_MMAP_THRESHOLD_=65536``), so memory freed by
the warm-up step cannot hide in the heap and the figure tracks the live tensors.

On CUDA (``--device cuda``) each step is timed with CUDA events (``begin.record()``, step,
``end.record()``, synchronise), and memory is ``torch.cuda.max_memory_allocated`` of one step
beyond what the inputs and the model hold, for ETConv, TransformerConv and GATConv, in the same
process. (Untested here: no CUDA machine was available when this was written; see
docs/benchmarks.md.)

Run ``python benchmarks/bench_etconv.py --help`` for the options; ``--quick`` runs tiny sizes.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Optional

import torch

CHANNELS = 64
HEADS = 4
HEAD_DIM = 16
STEPS = 2
DEFAULT_SIZES = "20000x400000,100000x2000000"
QUICK_SIZES = "200x2000,500x6000"
TIMED_MODELS = ("etconv", "etconv_autograd", "transformer", "gat")
MEMORY_MODELS = ("etconv", "transformer")
CUDA_MEMORY_MODELS = ("etconv", "transformer", "gat")


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        nodes, _, edges = item.strip().lower().partition("x")
        if not edges:
            raise argparse.ArgumentTypeError(f"size {item!r} is not of the form NxE")
        sizes.append((int(nodes), int(edges)))
    return sizes


def make_model(name: str, edge_dim: Optional[int] = None) -> torch.nn.Module:
    from torch_geometric.nn import GATConv, TransformerConv

    from et_graph.nn import ETConv

    torch.manual_seed(0)
    if name == "etconv":
        return ETConv(CHANNELS, heads=HEADS, head_dim=HEAD_DIM, steps=STEPS, edge_dim=edge_dim)
    if name == "etconv_autograd":
        return ETConv(CHANNELS, heads=HEADS, head_dim=HEAD_DIM, steps=STEPS, grad="autograd",
                      edge_dim=edge_dim)
    if name == "transformer":
        return TransformerConv(CHANNELS, HEAD_DIM, heads=HEADS, edge_dim=edge_dim)
    if name == "gat":
        return GATConv(CHANNELS, HEAD_DIM, heads=HEADS, edge_dim=edge_dim)
    raise ValueError(f"unknown model {name!r}")


def make_inputs(num_nodes: int, num_edges: int, seed: int = 0, device: str = "cpu",
                edge_dim: Optional[int] = None) -> tuple[Optional[torch.Tensor], ...]:
    """Uniformly random directed graph (self-loops and duplicates allowed, as they come), drawn
    on the CPU (the same graph on every device) and moved to ``device``: ``(x, edge_index,
    projection, edge_attr)``, the last ``None`` without ``edge_dim``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, CHANNELS, generator=gen).to(device).requires_grad_(True)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen).to(device)
    projection = torch.randn(num_nodes, CHANNELS, generator=gen).to(device)
    edge_attr = (None if edge_dim is None
                 else torch.randn(num_edges, edge_dim, generator=gen).to(device))
    return x, edge_index, projection, edge_attr


def train_step(model: Callable, x: torch.Tensor, edge_index: torch.Tensor, proj: torch.Tensor,
               edge_attr: Optional[torch.Tensor] = None):
    out = (model(x, edge_index) if edge_attr is None
           else model(x, edge_index, edge_attr=edge_attr))
    (out * proj).sum().backward()


def clear_grads(modules: list[torch.nn.Module], x: torch.Tensor) -> None:
    for module in modules:
        module.zero_grad(set_to_none=True)
    x.grad = None


def time_models(
    models: dict[str, Callable],
    inputs: tuple[torch.Tensor, ...],
    modules: list[torch.nn.Module],
    warmup: int,
    repeats: int,
    device: str = "cpu",
) -> dict[str, dict[str, Any]]:
    """Median seconds per step of each model, measured round robin with the order turning
    every round (on CUDA with CUDA events around the step, so that asynchronous kernels are
    counted)."""
    cuda = torch.device(device).type == "cuda"
    from tqdm import tqdm

    x = inputs[0]
    times: dict[str, list[float]] = {name: [] for name in models}
    rounds = warmup + repeats
    with tqdm(total=rounds * len(models), desc="timing", leave=False, file=sys.stderr) as bar:
        for round_index in range(rounds):
            # The order turns every round, so that no model always runs first after the
            # previous round's last (cache and frequency effects land on every model alike).
            order = list(models.items())
            shift = round_index % len(order)
            for name, model in order[shift:] + order[:shift]:
                clear_grads(modules, x)
                if cuda:
                    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                        enable_timing=True)
                    begin.record()
                    train_step(model, *inputs)
                    end.record()
                    torch.cuda.synchronize()
                    elapsed = begin.elapsed_time(end) / 1e3
                else:
                    start = time.perf_counter()
                    train_step(model, *inputs)
                    elapsed = time.perf_counter() - start
                if round_index >= warmup:
                    times[name].append(elapsed)
                bar.update()
    clear_grads(modules, x)
    return {
        name: {"median_s": statistics.median(values), "all_s": values}
        for name, values in times.items()
    }


# --------------------------------------------------------------------------------------------
# Peak memory, one subprocess per model
# --------------------------------------------------------------------------------------------
def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not found in /proc/self/status")


def memory_child(name: str, num_nodes: int, num_edges: int, edge_dim: Optional[int] = None
                 ) -> dict[str, Any]:
    """Runs inside the subprocess: extra resident memory of one step, in bytes."""
    import gc

    model = make_model(name, edge_dim)
    inputs = make_inputs(num_nodes, num_edges, edge_dim=edge_dim)
    x = inputs[0]
    train_step(model, *inputs)  # warm-up: lazy initialisation, libraries
    clear_grads([model], x)
    gc.collect()
    before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w", encoding="utf-8") as refs:
        refs.write("5")  # reset the high-water mark VmHWM to the current RSS
    train_step(model, *inputs)
    peak = _status_kib("VmHWM")
    return {"peak_delta_bytes": (peak - before) * 1024, "rss_before_bytes": before * 1024}


def measure_cuda_memory(name: str, num_nodes: int, num_edges: int, device: str,
                        edge_dim: Optional[int] = None) -> dict[str, Any]:
    """Peak CUDA memory of one step beyond what the inputs and the model hold:
    ``torch.cuda.max_memory_allocated`` after a warm-up step and a reset of the peak."""
    model = make_model(name, edge_dim).to(device)
    inputs = make_inputs(num_nodes, num_edges, device=device, edge_dim=edge_dim)
    x = inputs[0]
    train_step(model, *inputs)
    clear_grads([model], x)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    train_step(model, *inputs)
    torch.cuda.synchronize()
    return {"peak_delta_bytes": torch.cuda.max_memory_allocated() - before,
            "allocated_before_bytes": before}


def measure_memory(name: str, num_nodes: int, num_edges: int, threads: int,
                   edge_dim: Optional[int] = None) -> dict[str, Any]:
    if not os.path.exists("/proc/self/clear_refs"):
        return {"error": "needs Linux /proc/self/clear_refs to reset the peak RSS"}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS=str(threads))
    command = [
        sys.executable, os.path.abspath(__file__), "--memory-child", name,
        "--sizes", f"{num_nodes}x{num_edges}", "--threads", str(threads),
        *(() if edge_dim is None else ("--edge-dim", str(edge_dim))),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------
# torch.compile
# --------------------------------------------------------------------------------------------
def compile_unavailable_reason() -> Optional[str]:
    if not hasattr(torch, "compile"):
        return "this PyTorch has no torch.compile"
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        return "no C++ compiler (g++/c++) on PATH; the Inductor CPU backend needs one"
    return None


def compiled_model(model: torch.nn.Module, inputs, compile_state: dict) -> Optional[Callable]:
    """``torch.compile(model)`` after one (timed) compiling step, or None with the reason."""
    reason = compile_state.get("reason")
    if reason:
        return None
    try:
        compiled = torch.compile(model)
        start = time.perf_counter()
        train_step(compiled, *inputs)
        compile_state["compile_s"] = time.perf_counter() - start
        return compiled
    except Exception as error:  # report any compiler failure instead of dying
        compile_state["reason"] = f"torch.compile failed: {type(error).__name__}: {error}"
        traceback.print_exc(file=sys.stderr)
        return None


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None or b == 0 else a / b


def fmt(value: Optional[float], digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def size_row(result: dict[str, Any]) -> dict[str, Optional[float]]:
    timing = result["time"]
    memory = result["memory"]

    def median(name: str) -> Optional[float]:
        return timing.get(name, {}).get("median_s")

    def peak(name: str) -> Optional[float]:
        return memory.get(name, {}).get("peak_delta_bytes")

    return {
        "etconv_over_transformer_time": ratio(median("etconv"), median("transformer")),
        "etconv_over_gat_time": ratio(median("etconv"), median("gat")),
        "etconv_over_transformer_memory": ratio(peak("etconv"), peak("transformer")),
        "analytic_over_autograd_time": ratio(median("etconv"), median("etconv_autograd")),
        "compile_speedup": ratio(median("etconv"), median("etconv_compiled")),
    }


RATIO_LABELS = {
    "etconv_over_transformer_time": "ETConv / TransformerConv time",
    "etconv_over_gat_time": "ETConv / GATConv time",
    "etconv_over_transformer_memory": "ETConv / TransformerConv peak memory",
    "analytic_over_autograd_time": "analytic / autograd time",
    "compile_speedup": "torch.compile speed-up (eager / compiled)",
}


def render(report: dict[str, Any]) -> str:
    results = report["results"]
    names = [f"N={r['num_nodes']} E={r['num_edges']}" for r in results]
    lines = ["Ratios (forward + backward, median of repeats):", ""]
    lines.append("| ratio | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for key, label in RATIO_LABELS.items():
        cells = [fmt(r["ratios"][key]) for r in results]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Absolute figures:", ""]
    models = list(TIMED_MODELS) + ["etconv_compiled"]
    memory_models = [m for m in CUDA_MEMORY_MODELS
                     if any(m in r["memory"] for r in results)] or list(MEMORY_MODELS)
    lines.append("| size | " + " | ".join(f"{m} ms" for m in models)
                 + " | " + " | ".join(f"{m} peak MiB" for m in memory_models) + " |")
    lines.append("|---|" + "---|" * (len(models) + len(memory_models)))
    for name, r in zip(names, results):
        times = [r["time"].get(m, {}).get("median_s") for m in models]
        peaks = [r["memory"].get(m, {}).get("peak_delta_bytes") for m in memory_models]
        lines.append(
            f"| {name} | "
            + " | ".join(fmt(None if t is None else t * 1e3, 1) for t in times)
            + " | "
            + " | ".join(fmt(None if p is None else p / 2**20, 1) for p in peaks)
            + " |"
        )
    notes = []
    for r in results:
        for key, value in r.get("notes", {}).items():
            notes.append(f"- N={r['num_nodes']} E={r['num_edges']}: {key}: {value}")
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def run_size(num_nodes: int, num_edges: int, args: argparse.Namespace) -> dict[str, Any]:
    cuda = torch.device(args.device).type == "cuda"
    inputs = make_inputs(num_nodes, num_edges, device=args.device, edge_dim=args.edge_dim)
    names = [m for m in TIMED_MODELS if not (m == "etconv_autograd" and args.skip_autograd)]
    modules = {name: make_model(name, args.edge_dim).to(args.device) for name in names}
    models: dict[str, Callable] = dict(modules)
    notes: dict[str, str] = {}
    compile_state: dict[str, Any] = {"reason": args.compile_skip_reason}
    compiled = compiled_model(modules["etconv"], inputs, compile_state)
    if compiled is not None:
        models["etconv_compiled"] = compiled
        notes["torch.compile first step (compilation)"] = f"{compile_state['compile_s']:.1f} s"
    else:
        notes["torch.compile"] = compile_state["reason"]
    timing = time_models(models, inputs, list(modules.values()), args.warmup, args.repeats,
                         args.device)
    memory = {}
    if not args.skip_memory:
        del models, modules, compiled
        for name in CUDA_MEMORY_MODELS if cuda else MEMORY_MODELS:
            memory[name] = (
                measure_cuda_memory(name, num_nodes, num_edges, args.device, args.edge_dim)
                if cuda else measure_memory(name, num_nodes, num_edges, args.threads,
                                            args.edge_dim))
            if "error" in memory[name]:
                notes[f"memory {name}"] = memory[name]["error"]
    result = {
        "num_nodes": num_nodes,
        "num_edges": num_edges,
        "time": timing,
        "memory": memory,
        "notes": notes,
    }
    result["ratios"] = size_row(result)
    return result


def load_average() -> str:
    """1, 5 and 15 minute load averages: how busy the machine was (timings are relative)."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except (OSError, AttributeError):  # (AttributeError: no getloadavg on Windows)
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--sizes", default=None,
                        help=f"comma-separated NxE (default {DEFAULT_SIZES}; --quick: "
                             f"{QUICK_SIZES})")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="torch intra-op threads")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument("--device", default="cpu",
                        help="cpu or cuda[:i]: on CUDA, times are CUDA events and memory is "
                             "torch.cuda.max_memory_allocated (GATConv included)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and 2 repeats, no torch.compile (smoke test)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--skip-autograd", action="store_true",
                        help="skip the grad='autograd' reference (slow and memory-hungry)")
    parser.add_argument("--skip-memory", action="store_true", help="skip the memory runs")
    parser.add_argument("--edge-dim", type=int, default=None, metavar="F",
                        help="give every model edge features edge_attr [E, F] (edge_dim=F)")
    parser.add_argument("--render", default=None, metavar="JSON",
                        help="only print the tables of a saved --json result")
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    if args.render:
        with open(args.render, encoding="utf-8") as saved:
            report = json.load(saved)
        print(render(report))
        return report
    torch.set_num_threads(args.threads)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: this PyTorch sees no CUDA device "
                         f"(torch {torch.__version__})")
    sizes = parse_sizes(args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES))
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, *sizes[0], args.edge_dim)))
        return {}
    if args.edge_dim is not None and args.edge_dim <= 0:
        raise SystemExit(f"--edge-dim must be a positive int, got {args.edge_dim}")
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.no_compile:
        args.compile_skip_reason = "skipped (--no-compile)"
    elif args.quick:
        args.compile_skip_reason = "skipped in --quick (compilation takes minutes)"
    else:
        args.compile_skip_reason = compile_unavailable_reason()

    load_before = load_average()
    results = []
    for num_nodes, num_edges in sizes:
        print(f"size N={num_nodes} E={num_edges} ...", file=sys.stderr, flush=True)
        results.append(run_size(num_nodes, num_edges, args))
    load_after = load_average()
    from et_graph.config import machine_metadata

    report = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "torch": torch.__version__,
        "threads": args.threads,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "machine": platform.processor() or platform.machine(),
        # the processor by name, its instruction set and threads (the figures depend on them)
        "machine_details": machine_metadata(),
        "cpu_count": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "config": {"channels": CHANNELS, "heads": HEADS, "head_dim": HEAD_DIM, "steps": STEPS,
                   "edge_dim": args.edge_dim},
        "device": args.device,
        "device_name": (torch.cuda.get_device_name(torch.device(args.device))
                        if torch.device(args.device).type == "cuda" else "cpu"),
        "memory_method": ("torch.cuda.max_memory_allocated of one step beyond the inputs and "
                          "the model, after a warm-up step"
                          if torch.device(args.device).type == "cuda" else
                          "peak RSS delta of one step in a fresh subprocess per model "
                          "(VmHWM reset via /proc/self/clear_refs, MALLOC_MMAP_THRESHOLD_=65536)"),
        "results": results,
    }
    print(render(report))
    print(f"\nthreads={args.threads} repeats={args.repeats} load average before: {load_before}"
          f" / after: {load_after}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2)
    return report


if __name__ == "__main__":
    main()
