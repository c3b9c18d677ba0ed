"""One training epoch of the graph-level ET against one of GIN on a TU dataset (default NCI1).

Both models train for one epoch over the same graphs (all of the dataset, or ``--limit``), in
mini-batches of the same size (``--batch-size``, default 64) from one shuffling loader (each
epoch draws its own order, so the two models see different orders of the same graphs), the
loss, gradient clipping and optimizer of :class:`et_graph.training.Trainer`
(``Trainer.make_optimizer``). The models are
built by :func:`et_graph.experiments.tudataset.model_factories`, so every ``et-graph tudataset``
flag (``--config configs/tudataset/NCI1.toml``, ``--hidden``, ``--blocks``, ``--readout``, ...)
sets them; without ``--config`` the ET is the NCI1 preset's (hidden 32, one block, two steps),
which is what the project issue timed.

Timing: ``time.perf_counter`` around each epoch; ``--warmup`` untimed epochs per model, then
``--repeats`` rounds in which the two models take turns (the order alternates between rounds), so
that load from other jobs on the machine slows both alike; the median per model and the ratio
ET / GIN. ``loader`` is the time of one pass of the DataLoader alone (collation), which both
epochs include. Each epoch is also timed in CPU time of this process (``time.process_time``):
on a machine shared with other jobs that ratio is the steadier one (wall time also counts the
time other processes hold the core).

``--breakdown`` adds ET variants with one part of the model removed to the same rotation: no
Conv2D mask (plain graph attention), no Hopfield memories, and no descent steps at all (``T = 0``:
encoders, CLS tokens and head only; the mask is then computed but unused). Their epoch times, in
ratio to GIN's from the same rounds, show what each part of the default ET costs. They are
diagnostics, not models anyone trains.

``--preloaded`` collates the batches once, before any timing, and every epoch then runs over
that list (the same batches in the same order): the epochs time the models' own work only,
without the DataLoader's collation and the first touch of freshly collated memory, which both
models pay alike in training and which dilute the ratio. ``loader`` still reports one
collation pass, for reference.

``--native-compare`` adds ``et_native`` to the same rotation: the same ET (same initial
weights) with the compiled kernels of :mod:`et_graph.native` (attention gradient, mask, the
generator for noise and dropout) switched on for its epochs only, so that the default path and
the opt-in kernels are timed against the same GIN epochs.
``et_native_torch_random`` beside it has the kernels on but draws its training noise and
dropout from PyTorch's generator, as the default path does: the difference is what the
compiled generator (``et_graph/csrc/random.cpp``) saves.
``--native-attention`` instead switches them on for every ET epoch.

``--device cuda`` runs both models on a GPU: each batch is copied to the device inside the timed
epoch, and each epoch's clock stops after ``torch.cuda.synchronize``.

``--profile N`` then runs ``N`` ET training batches under cProfile and prints the functions with
the most own time (``--profile-torch`` uses ``torch.profiler`` and prints its operator table).

    OMP_NUM_THREADS=1 python benchmarks/bench_graph_epoch.py --threads 1 --json epoch.json
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.loader import DataLoader

from et_graph.config import add_config_arguments, machine_metadata, merge, resolve, to_dict
from et_graph.experiments.tudataset import TUDatasetConfig, et_model_kwargs, model_factories
from et_graph.native import load_native_attention, native_attention, native_random
from et_graph.nn.models.graph_model import ETGraphModel
from et_graph.protocols.graph_cv import model_outputs
from et_graph.training import Trainer

#: ``--breakdown``: ET variants, each with one part removed (ETGraphModel arguments).
BREAKDOWN = {
    "et_no_mask": {"use_mask": False},
    "et_no_hopfield": {"hopfield_dim": 0},
    "et_no_descent": {"steps": 0},
    # the defaults build tokens with message passing first: what that costs
    "et_no_message_passing": {"message_passing_layers": 0},
    # the training noise (paper eq. 27) and dropout: random numbers drawn every batch
    "et_no_noise_dropout": {"noise_std": 0.0, "dropout": 0.0},
}

#: The NCI1 preset's ET (configs/tudataset/NCI1.toml), used when no --config is given.
PRESET = Path(__file__).resolve().parents[1] / "configs" / "tudataset" / "NCI1.toml"


def load(config: TUDatasetConfig, limit: Optional[int]) -> tuple[list, dict[str, Any]]:
    from et_graph.datasets.tudataset import default_tu_root, load_tudataset

    data = config.data
    root = data.root if data.root is not None else default_tu_root()
    extra = {}
    # Only pass options that differ from their defaults, so the script also runs on older code.
    for name in ("rw_pe_dim", "degree_feature"):
        value = getattr(data, name, None)
        if value:
            extra[name] = value
    graphs, info = load_tudataset(root, data.dataset, data.cache, data.pe_dim, False, **extra)
    if not info["edge_features"]:
        for g in graphs:
            g.edge_attr = None
    if limit:
        graphs = graphs[:limit]
    return graphs, info


def train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, loader: Iterable[Any],
                clip: float = 5.0, max_batches: Optional[int] = None,
                device: Optional[torch.device] = None) -> tuple[float, float]:
    """Wall and CPU seconds of one training epoch (or ``max_batches`` batches). On CUDA each
    batch is copied to the device inside the timed loop (as in training) and the clock stops
    after the device has finished."""
    device = device or torch.device("cpu")
    model.train()
    synchronize(device)
    begin, begin_cpu = time.perf_counter(), time.process_time()
    for i, batch in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        batch = batch.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model_outputs(model, batch), batch.y.view(-1))
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
    synchronize(device)
    return time.perf_counter() - begin, time.process_time() - begin_cpu


@contextlib.contextmanager
def torch_random_with_native_kernels() -> Iterator[None]:
    """The compiled kernels on, but noise and dropout drawn by PyTorch's generator as on the
    default path: what the compiled generator alone saves (a diagnostic)."""
    with native_attention(True), native_random(False):
        yield


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loader_pass(loader: DataLoader) -> tuple[float, float]:
    begin, begin_cpu = time.perf_counter(), time.process_time()
    for _ in loader:
        pass
    return time.perf_counter() - begin, time.process_time() - begin_cpu


def profile_et(model: nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader,
               batches: int, use_torch: bool, top: int, clip: float = 5.0,
               device: Optional[torch.device] = None, by_shape: bool = False) -> str:
    if use_torch:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], record_shapes=by_shape) as prof:
            train_epoch(model, optimizer, loader, clip, max_batches=batches, device=device)
        return prof.key_averages(group_by_input_shape=by_shape).table(
            sort_by="self_cpu_time_total", row_limit=top)
    profiler = cProfile.Profile()
    profiler.enable()
    train_epoch(model, optimizer, loader, clip, max_batches=batches, device=device)
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(top)
    return stream.getvalue()


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    bench = parser.add_argument_group("benchmark")
    bench.add_argument("--repeats", type=int, default=5, help="timed epochs per model")
    bench.add_argument("--warmup", type=int, default=1, help="untimed epochs per model first")
    bench.add_argument("--limit", type=int, default=None, help="use only the first graphs")
    bench.add_argument("--json", default=None, help="write the results to this file")
    bench.add_argument("--profile", type=int, default=0, metavar="N",
                       help="profile N ET training batches afterwards (0 = off)")
    bench.add_argument("--profile-shapes", action="store_true",
                       help="torch.profiler's table grouped by input shapes (implies "
                            "--profile-torch)")
    bench.add_argument("--profile-torch", action="store_true",
                       help="profile with torch.profiler instead of cProfile")
    bench.add_argument("--profile-top", type=int, default=30)
    bench.add_argument("--breakdown", action="store_true",
                       help="also time ET without its mask, without its Hopfield memories, "
                       "without descent steps and without message-passing layers")
    bench.add_argument("--skip-timing", action="store_true", help="only profile")
    bench.add_argument("--preloaded", action="store_true",
                       help="collate the batches once before timing and run every epoch over "
                            "that list: the models' own work, without the loader")
    bench.add_argument("--native-compare", action="store_true",
                       help="also time ET with the compiled kernels (et_graph.native) "
                            "switched on for its epochs only")
    bench.add_argument("--no-preset", action="store_true",
                       help="start from the config defaults (the general preset), not NCI1's")
    add_config_arguments(parser, TUDatasetConfig)
    args = parser.parse_args(argv)
    if not args.config and not args.no_preset:
        args.config = str(PRESET)
    config = resolve(TUDatasetConfig, args)
    config = merge(config, {"protocol.models": "et,gin"})
    torch.set_num_threads(config.run.threads or 1)
    config.run.apply_threads()  # and the compiled attention kernel, if --native-attention

    graphs, info = load(config, args.limit)
    factories = model_factories(config, info)
    device = torch.device(config.run.device)
    torch.manual_seed(0)
    models = {name: factories[name]() for name in ("et", "gin")}
    if args.breakdown:
        for name, change in BREAKDOWN.items():
            if "use_mask" in change and info["edge_features"]:
                print(f"{name}: skipped, the edge features enter through the mask")
                continue
            torch.manual_seed(0)
            models[name] = ETGraphModel(**{**et_model_kwargs(config, info), **change})
    if args.native_compare:
        if device.type != "cpu":
            raise ValueError("--native-compare times the CPU kernel; use --device cpu")
        load_native_attention()  # built now, before any timing
        torch.manual_seed(0)
        models["et_native"] = factories["et"]()
        torch.manual_seed(0)
        models["et_native_torch_random"] = factories["et"]()
    models = {name: model.to(device) for name, model in models.items()}
    trainer = Trainer(config.train, progress=False)
    optimizers = {name: trainer.make_optimizer(m) for name, m in models.items()}
    clip = config.train.grad_clip
    loader = DataLoader(graphs, batch_size=config.train.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    # An epoch runs over the loader (collating as it goes), or over batches collated once.
    batches = list(loader) if args.preloaded else loader

    def epoch_setting(name: str) -> Any:
        # The compiled kernel is a process-wide switch: on for et_native's epochs only.
        if name == "et_native":
            return native_attention(True)
        if name == "et_native_torch_random":
            return torch_random_with_native_kernels()
        return contextlib.nullcontext()

    times: dict[str, list[float]] = {name: [] for name in [*models, "loader"]}
    cpu: dict[str, list[float]] = {name: [] for name in [*models, "loader"]}
    if not args.skip_timing:
        for name, model in models.items():
            for _ in range(args.warmup):
                with epoch_setting(name):
                    train_epoch(model, optimizers[name], batches, clip, device=device)
        for round_ in range(args.repeats):
            # The order alternates, so that a drift in machine load affects every model alike.
            order = list(models) if round_ % 2 == 0 else list(reversed(models))
            for name in order:
                with epoch_setting(name):
                    wall, used = train_epoch(models[name], optimizers[name], batches, clip,
                                             device=device)
                times[name].append(wall)
                cpu[name].append(used)
            wall, used = loader_pass(loader)
            times["loader"].append(wall)
            cpu["loader"].append(used)
    median = {k: statistics.median(v) for k, v in times.items() if v}
    median_cpu = {k: statistics.median(v) for k, v in cpu.items() if v}
    result = {
        "dataset": config.data.dataset, "graphs": len(graphs),
        "batch_size": config.train.batch_size, "threads": torch.get_num_threads(),
        "repeats": args.repeats, "preloaded": args.preloaded, "seconds": times,
        "median_seconds": median,
        "ratio_et_gin": median["et"] / median["gin"] if median else None,
        "cpu_seconds": cpu, "median_cpu_seconds": median_cpu,
        "ratio_et_gin_cpu": median_cpu["et"] / median_cpu["gin"] if median_cpu else None,
        # et's epochs ran with the compiled kernel on (--native-attention); et_native's always.
        "native_attention": config.run.native_attention,
        "optimizer": type(optimizers["et"]).__name__
        + (" (fused)" if optimizers["et"].defaults.get("fused") else ""),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "et_params": sum(p.numel() for p in models["et"].parameters()),
        "gin_params": sum(p.numel() for p in models["gin"].parameters()),
        "params": {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()},
        # Each model's median epoch over GIN's (the breakdown variants included).
        "ratio_to_gin": {name: median[name] / median["gin"] for name in models} if median else {},
        "config": {k: to_dict(config)[k] for k in ("data", "et", "baselines", "train")},
        "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
        # the processor by name, its instruction set and threads (the figures depend on them)
        "machine_details": machine_metadata(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }
    if median:
        print(f"{config.data.dataset}: {len(graphs)} graphs, batch {config.train.batch_size}, "
              f"{torch.get_num_threads()} thread(s), {result['device_name']}, median of "
              f"{args.repeats} epochs"
              + (", batches collated once (--preloaded)" if args.preloaded else ""))
        print("| | wall (s) | CPU (s) |")
        print("|---|---|---|")
        for key, label in (("et", "ET epoch"), ("gin", "GIN epoch"), ("loader", "loader pass")):
            print(f"| {label} | {median[key]:.3f} | {median_cpu[key]:.3f} |")
        print(f"| ET / GIN time | {result['ratio_et_gin']:.2f} | "
              f"{result['ratio_et_gin_cpu']:.2f} |")
        variants = [name for name in models if name in BREAKDOWN or name.startswith("et_native")]
        if variants:
            print("\n| ET variant | params | epoch wall (s) | / GIN wall | / GIN CPU |")
            print("|---|---|---|---|---|")
            for name in ["et", *variants]:
                print(f"| {name} | {result['params'][name]:,} | {median[name]:.3f} | "
                      f"{result['ratio_to_gin'][name]:.2f} | "
                      f"{median_cpu[name] / median_cpu['gin']:.2f} |")
    if args.profile:
        report = profile_et(models["et"], optimizers["et"], loader, args.profile,
                            args.profile_torch or args.profile_shapes, args.profile_top, clip,
                            device, by_shape=args.profile_shapes)
        print(report)
        result["profile"] = report
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
