"""``et-graph gnnbenchmark``: ET beside same-run GIN / GatedGCN on the GNNBenchmark datasets.

Datasets and what is run when their official files are absent (downloads are never attempted):

* ``ZINC`` (graph regression, test MAE). Official: PyG ``ZINC(subset=True)`` under
  ``ROOT/ZINC/raw``. Offline: the *ZINC proxy*: the official **val** split (1000 graphs,
  ``ROOT/ZINC_subset_partial``) is split into a training part and a holdout for epoch selection,
  and the official **test** split is evaluated once with the selected weights. The train split is
  missing, so the numbers are not comparable with published ZINC results.
* ``PATTERN`` / ``CLUSTER`` (node classification, weighted accuracy as in Dwivedi et al.).
  Official: PyG ``GNNBenchmarkDataset`` under ``ROOT/<NAME>/raw``. Offline: graphs *generated*
  with the published SBM recipe (:mod:`et_graph.datasets.graph_benchmarks`).
* ``MNIST`` / ``CIFAR10`` (graph classification, accuracy): official files only.

Protocol: each model trains on the training split, the epoch with the best validation/holdout
metric is selected, and the test split is evaluated once with those weights. Every model sees the
same data, splits and seeds. Results are mean ± std over seeds (population std).
"""
from __future__ import annotations

import argparse
import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

from ..baselines.gnnbenchmark_baselines import BASELINES
from ..datasets.graph_benchmarks import (
    ZINC_NUM_ATOM_TYPES,
    ZINC_NUM_BOND_TYPES,
    SBMClusterRecipe,
    SBMPatternRecipe,
    generate_sbm_cluster,
    generate_sbm_pattern,
    gnn_benchmark_required_file,
    load_gnn_benchmark,
    load_zinc,
    load_zinc_partial,
    recipe_dict,
    zinc_partial_file,
    zinc_required_files,
)
from ..reporting import format_stat, summarize, write_results

DATASETS = ("ZINC", "PATTERN", "CLUSTER", "MNIST", "CIFAR10")
SOURCES = ("auto", "official", "partial", "generated")
MODEL_NAMES = ("et", "gin", "gatedgcn")


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
def weighted_accuracy(pred: Tensor, target: Tensor) -> float:
    """Dwivedi et al.'s SBM accuracy: the mean over classes of per-class recall, in percent.

    Classes are those seen in ``target`` or ``pred``; a class that is only predicted counts with
    recall 0 (as in the benchmark's ``accuracy_SBM``). Computed here over a whole split, whereas
    the reference code averages it over test batches.
    """
    if pred.shape != target.shape or pred.numel() == 0:
        raise ValueError("pred and target must be non-empty and of equal shape")
    classes = torch.unique(torch.cat([pred, target]))
    recalls = []
    for cls in classes:
        members = target == cls
        count = int(members.sum())
        recalls.append(float((pred[members] == cls).sum()) / count if count else 0.0)
    return 100.0 * sum(recalls) / len(classes)


def accuracy(pred: Tensor, target: Tensor) -> float:
    if pred.shape != target.shape or pred.numel() == 0:
        raise ValueError("pred and target must be non-empty and of equal shape")
    return 100.0 * float((pred == target).float().mean())


def mean_absolute_error(pred: Tensor, target: Tensor) -> float:
    if pred.shape != target.shape or pred.numel() == 0:
        raise ValueError("pred and target must be non-empty and of equal shape")
    return float((pred - target).abs().mean())


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
@dataclass
class BenchmarkData:
    """Splits plus everything a model needs to know about the inputs."""

    name: str
    source: str  # "official", "partial" (ZINC proxy) or "generated"
    splits: dict[str, list[Data]]
    task: str  # "regression", "node", "classification"
    metric: str  # "mae", "weighted_accuracy", "accuracy"
    num_outputs: int
    node_dim: Optional[int] = None  # float node features
    num_node_types: Optional[int] = None  # integer node labels
    edge_dim: Optional[int] = None
    num_edge_types: Optional[int] = None
    protocol: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def lower_is_better(self) -> bool:
        return self.metric == "mae"


def _zinc_official_present(root: Path) -> bool:
    if all(p.is_file() for p in zinc_required_files(root / "ZINC")):
        return True
    processed = root / "ZINC" / "subset" / "processed"
    return all((processed / f"{s}.pt").is_file() for s in ("train", "val", "test"))


def _gnnb_official_present(root: Path, name: str) -> bool:
    if gnn_benchmark_required_file(root, name).is_file():
        return True
    processed = root / name / "processed"
    return all((processed / f"{s}_data.pt").is_file() for s in ("train", "val", "test"))


def _limit(graphs: list[Data], limit: Optional[int], seed: int) -> list[Data]:
    if limit is None or limit >= len(graphs):
        return list(graphs)
    order = np.random.default_rng(seed).permutation(len(graphs))[:limit]
    return [graphs[i] for i in sorted(order)]


def _zinc_data(root: Path, source: str, args: argparse.Namespace) -> BenchmarkData:
    common = dict(task="regression", metric="mae", num_outputs=1,
                  num_node_types=ZINC_NUM_ATOM_TYPES, num_edge_types=ZINC_NUM_BOND_TYPES)
    if source in ("auto", "official") and _zinc_official_present(root):
        splits = {s: [d for d in load_zinc(root / "ZINC", s)] for s in ("train", "val", "test")}
        for split in splits.values():
            for d in split:
                d.y = d.y.float().view(-1)
                d.x = d.x.long().view(d.num_nodes, -1)
        return BenchmarkData(
            "ZINC", "official", splits, **common,
            protocol="ZINC-12k (official splits): train on train, select the epoch on val, "
                     "test MAE once with the selected weights",
        )
    if source == "official":
        missing = "\n  ".join(str(p) for p in zinc_required_files(root / "ZINC"))
        raise FileNotFoundError(f"official ZINC files missing; put them here:\n  {missing}")
    if source == "generated":
        raise ValueError("ZINC cannot be generated; use --source partial or official")
    partial_root = root / "ZINC_subset_partial"
    for split in ("val", "test"):
        path = zinc_partial_file(partial_root, split)
        if not path.is_file():
            raise FileNotFoundError(
                f"neither the official ZINC files (ROOT/ZINC/raw/{{train,val,test}}.pickle and "
                f".index) nor the partial copy were found: put ZINC_subset_partial/processed/"
                f"{split}.pt at {path}"
            )
    official_val = load_zinc_partial(partial_root, "val")
    test = load_zinc_partial(partial_root, "test")
    order = np.random.default_rng(args.split_seed).permutation(len(official_val))
    num_holdout = max(1, int(round(args.holdout_fraction * len(official_val))))
    holdout_ids, train_ids = sorted(order[:num_holdout]), sorted(order[num_holdout:])
    splits = {
        "train": [official_val[i] for i in train_ids],
        "val": [official_val[i] for i in holdout_ids],
        "test": test,
    }
    return BenchmarkData(
        "ZINC proxy", "partial", splits, **common,
        protocol=(
            "ZINC proxy (trained on the official val split; the train split is missing): the "
            f"1000 official val graphs are split {len(train_ids)} train / {num_holdout} holdout "
            f"(split seed {args.split_seed}); the epoch with the best holdout MAE is selected "
            "and the official test split (1000 graphs) is evaluated once with those weights"
        ),
        notes=["Not comparable with published ZINC results (10k training graphs there)."],
    )


def _sbm_data(name: str, root: Path, source: str, args: argparse.Namespace) -> BenchmarkData:
    num_classes = 2 if name == "PATTERN" else 6
    vocab = 3 if name == "PATTERN" else 7
    common = dict(task="node", metric="weighted_accuracy", num_outputs=num_classes)
    if source in ("auto", "official") and _gnnb_official_present(root, name):
        splits = {s: list(load_gnn_benchmark(root, name, s)) for s in ("train", "val", "test")}
        for split in splits.values():
            for d in split:
                if d.x.is_floating_point():
                    d.x = d.x.float().view(d.num_nodes, -1)
                else:  # integer feature ids: one-hot, the layout of the generated graphs
                    d.x = nn.functional.one_hot(d.x.long().view(-1), vocab).float()
                d.y = d.y.long().view(-1)
                d.edge_attr = None
        node_dim = splits["train"][0].x.size(1)
        return BenchmarkData(
            name, "official", splits, node_dim=node_dim, **common,
            protocol=f"{name} (official PyG GNNBenchmarkDataset splits): train on train, select "
                     "the epoch on val, weighted accuracy on test once",
        )
    if source == "official":
        raise FileNotFoundError(
            f"official {name} file missing: put {name}_v2.pt at "
            f"{gnn_benchmark_required_file(root, name)}"
        )
    if source == "partial":
        raise ValueError(f"{name} has no partial copy; use --source generated or official")
    num_train, num_val, num_test = args.generated_sizes
    if name == "PATTERN":
        recipe = SBMPatternRecipe()
        splits = generate_sbm_pattern(num_train, num_val, num_test, seed=args.data_seed)
    else:
        recipe = SBMClusterRecipe()
        splits = generate_sbm_cluster(num_train, num_val, num_test, seed=args.data_seed)
    params = ", ".join(f"{k}={v}" for k, v in recipe_dict(recipe).items())
    return BenchmarkData(
        f"{name} (generated)", "generated", splits, node_dim=vocab, **common,
        protocol=(
            f"{name} generated with the published SBM recipe ({params}); {num_train} train / "
            f"{num_val} val / {num_test} test graphs (data seed {args.data_seed}); train on "
            "train, select the epoch on val, weighted accuracy on test once"
        ),
        notes=["Generated graphs, not the official files: same recipe, different samples."],
    )


def _image_data(name: str, root: Path, source: str) -> BenchmarkData:
    if source in ("partial", "generated"):
        raise ValueError(f"{name} is only available from the official files (--source official)")
    if not _gnnb_official_present(root, name):
        raise FileNotFoundError(
            f"{name} is not available offline: put {name}_v2.pt (from PyG's {name}_v2.zip) at "
            f"{gnn_benchmark_required_file(root, name)}"
        )
    splits = {s: list(load_gnn_benchmark(root, name, s)) for s in ("train", "val", "test")}
    for split in splits.values():
        for d in split:
            parts = [d.x.float().view(d.num_nodes, -1)]
            if getattr(d, "pos", None) is not None:
                parts.append(d.pos.float().view(d.num_nodes, -1))
                d.pos = None
            d.x = torch.cat(parts, dim=1)
            if getattr(d, "edge_attr", None) is not None:
                d.edge_attr = d.edge_attr.float().view(d.edge_index.size(1), -1)
            d.y = d.y.long().view(-1)
    sample = splits["train"][0]
    edge_dim = None if sample.edge_attr is None else sample.edge_attr.size(1)
    return BenchmarkData(
        name, "official", splits, task="classification", metric="accuracy", num_outputs=10,
        node_dim=sample.x.size(1), edge_dim=edge_dim,
        protocol=f"{name} (official splits; node features = pixel values + coordinates): train "
                 "on train, select the epoch on val, test accuracy once",
    )


def load_benchmark(args: argparse.Namespace) -> BenchmarkData:
    """Resolve ``--dataset``/``--source``/``--root`` into splits (see the module docstring)."""
    root = Path(args.root)
    if args.dataset == "ZINC":
        data = _zinc_data(root, args.source, args)
    elif args.dataset in ("PATTERN", "CLUSTER"):
        data = _sbm_data(args.dataset, root, args.source, args)
    elif args.dataset in ("MNIST", "CIFAR10"):
        data = _image_data(args.dataset, root, args.source)
    else:
        raise ValueError(f"--dataset must be one of {DATASETS}, got {args.dataset!r}")
    limits = {"train": args.train_limit, "val": args.val_limit, "test": args.test_limit}
    for split, limit in limits.items():
        if limit is not None and limit < len(data.splits[split]):
            data.splits[split] = _limit(data.splits[split], limit, args.split_seed)
            data.notes.append(f"{split} limited to {limit} graphs (random subset, split seed "
                              f"{args.split_seed}).")
    for split, graphs in data.splits.items():
        if not graphs:
            raise ValueError(f"the {split} split is empty")
        if any(g.num_nodes == 0 for g in graphs):
            raise ValueError(f"the {split} split contains a graph without nodes")
    return data


def add_positional_encoding(data: BenchmarkData, k: int) -> None:
    """Attach ``lap_pe``/``cls_lap_pe`` (ET's CLS Laplacian PE) to every graph, once."""
    if k <= 0:
        return
    from ..transforms import CLSLaplacianPE

    transform = CLSLaplacianPE(k=k)
    try:  # scikit-learn's dependency; one BLAS thread makes small eigh calls ~50x faster here
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        threadpool_limits = None
    limit = threadpool_limits(limits=1) if threadpool_limits is not None else None
    try:
        for split, graphs in data.splits.items():
            data.splits[split] = [
                transform(g) for g in tqdm(graphs, desc=f"Laplacian PE ({split})", leave=False)
            ]
    finally:
        if limit is not None:
            limit.unregister()


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------
def build_model(name: str, data: BenchmarkData, args: argparse.Namespace) -> nn.Module:
    if name == "et":
        from ..nn.models.graph_model import ETGraphModel

        return ETGraphModel(
            data.node_dim,
            data.num_outputs,
            task=data.task,
            hidden_channels=args.hidden,
            blocks=args.blocks,
            steps=args.steps,
            heads=args.heads,
            head_dim=args.head_dim,
            alpha=args.alpha,
            noise_std=args.noise_std,
            pe_dim=args.pe_dim,
            kernel_size=args.kernel_size,
            edge_dim=data.edge_dim,
            edge_categories=data.num_edge_types,
            continuous_channels=data.node_dim if data.task == "classification" else 0,
            num_node_categories=data.num_node_types,
            dropout=args.dropout,
        )
    if name in BASELINES:
        return BASELINES[name](
            data.num_outputs,
            data.task,
            hidden=args.baseline_hidden,
            num_layers=args.baseline_layers,
            dropout=args.dropout,
            num_node_types=data.num_node_types,
            node_dim=data.node_dim,
            num_edge_types=data.num_edge_types,
            edge_dim=data.edge_dim,
        )
    raise ValueError(f"unknown model {name!r}; choose from {MODEL_NAMES}")


def _predict(model: nn.Module, batch: Data) -> Tensor:
    if hasattr(model, "forward_data"):
        out = model.forward_data(batch)
    else:
        out = model(batch.x, batch.edge_index, getattr(batch, "edge_attr", None), batch.batch)
    return out.view(-1) if out.dim() == 2 and out.size(1) == 1 else out


def _loss_fn(data: BenchmarkData) -> Callable[[Tensor, Tensor], Tensor]:
    if data.task == "regression":
        return lambda out, y: (out - y).abs().mean()
    if data.task == "node":
        # The benchmark weights the cross-entropy by inverse class frequency (classes are
        # unbalanced: about 1 pattern node in 6 for PATTERN).
        labels = torch.cat([g.y for g in data.splits["train"]])
        counts = torch.bincount(labels, minlength=data.num_outputs).float()
        weight = counts.sum() / (counts.clamp_min(1.0) * data.num_outputs)
        return lambda out, y: nn.functional.cross_entropy(out, y, weight=weight.to(out.device))
    return lambda out, y: nn.functional.cross_entropy(out, y)


def _score(data: BenchmarkData, outputs: Tensor, targets: Tensor) -> float:
    if data.metric == "mae":
        return mean_absolute_error(outputs, targets)
    pred = outputs.argmax(dim=-1)
    if data.metric == "weighted_accuracy":
        return weighted_accuracy(pred, targets)
    return accuracy(pred, targets)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, data: BenchmarkData, device: str) -> float:
    model.eval()
    outputs, targets = [], []
    for batch in loader:
        batch = batch.to(device)
        outputs.append(_predict(model, batch).cpu())
        targets.append(batch.y.cpu())
    return _score(data, torch.cat(outputs), torch.cat(targets))


def train_one(name: str, data: BenchmarkData, seed: int, args: argparse.Namespace,
              device: str) -> dict[str, Any]:
    """Train ``name`` with ``seed``; select the epoch on val; evaluate test once."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    generator = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(data.splits["train"], batch_size=args.batch_size, shuffle=True,
                              generator=generator)
    val_loader = DataLoader(data.splits["val"], batch_size=args.eval_batch_size)
    test_loader = DataLoader(data.splits["test"], batch_size=args.eval_batch_size)
    model = build_model(name, data, args).to(device)
    if hasattr(model, "fit_feature_scaling") and data.node_dim and data.task == "classification":
        model.fit_feature_scaling(torch.cat([g.x for g in data.splits["train"]]).to(device))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min" if data.lower_is_better else "max", factor=0.5,
        patience=args.lr_patience,
    )
    loss_fn = _loss_fn(data)
    sign = 1.0 if data.lower_is_better else -1.0
    best = (math.inf, -1, None)
    curve: list[float] = []
    start = time.perf_counter()
    bar = tqdm(range(args.epochs), desc=f"{name} seed {seed}", leave=False)
    for epoch in bar:
        model.train()
        total, count = 0.0, 0
        for batch in train_loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            loss = loss_fn(_predict(model, batch), batch.y)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"{name}: non-finite training loss at epoch {epoch}")
            loss.backward()
            if args.grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            optimizer.step()
            total += float(loss.detach()) * batch.num_graphs
            count += batch.num_graphs
        val_score = evaluate(model, val_loader, data, device)
        curve.append(val_score)
        scheduler.step(val_score)
        if sign * val_score < best[0]:
            best = (sign * val_score, epoch, copy.deepcopy(model.state_dict()))
        bar.set_postfix(loss=f"{total / max(count, 1):.3f}", val=f"{val_score:.3f}")
    train_seconds = time.perf_counter() - start
    model.load_state_dict(best[2])
    test_score = evaluate(model, test_loader, data, device)
    return {
        "test": test_score,
        "val": sign * best[0],
        "epoch": best[1] + 1,
        "curve": curve,
        "seconds": train_seconds,
        "params": sum(p.numel() for p in model.parameters()),
    }


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def _int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _name_list(text: str) -> list[str]:
    names = [v.strip().lower() for v in text.split(",") if v.strip()]
    for name in names:
        if name not in MODEL_NAMES:
            raise argparse.ArgumentTypeError(f"unknown model {name!r}; choose from {MODEL_NAMES}")
    return names


def _sizes(text: str) -> tuple[int, int, int]:
    values = _int_list(text)
    if len(values) != 3 or min(values) <= 0:
        raise argparse.ArgumentTypeError("expected three positive sizes TRAIN,VAL,TEST")
    return tuple(values)  # type: ignore[return-value]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default="ZINC", choices=DATASETS)
    parser.add_argument("--root", default="datasets",
                        help="folder with ZINC/, ZINC_subset_partial/, PATTERN/, ... (PyG layout)")
    parser.add_argument("--source", default="auto", choices=SOURCES,
                        help="auto: official files when present, else the ZINC proxy (partial) "
                             "or generated SBM graphs")
    parser.add_argument("--models", type=_name_list, default=list(MODEL_NAMES),
                        help="comma-separated subset of et,gin,gatedgcn")
    parser.add_argument("--seeds", type=_int_list, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--eval-batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--lr-patience", type=int, default=10,
                        help="epochs without val improvement before halving the learning rate")
    parser.add_argument("--grad-clip", type=float, default=1.0, help="0 disables clipping")
    parser.add_argument("--dropout", type=float, default=0.0)
    # ET
    parser.add_argument("--hidden", type=int, default=64, help="ET token width")
    parser.add_argument("--blocks", type=int, default=2, help="stacked ET blocks (S)")
    parser.add_argument("--steps", type=int, default=3, help="descent steps per block (T)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--noise-std", type=float, default=0.0)
    parser.add_argument("--pe-dim", type=int, default=8, help="Laplacian eigenvectors (0 = none)")
    parser.add_argument("--kernel-size", type=int, default=3,
                        help="Conv2D mask kernel: 3 = paper (node-order dependent), "
                             "1 = permutation-equivariant")
    # baselines
    parser.add_argument("--baseline-hidden", type=int, default=64)
    parser.add_argument("--baseline-layers", type=int, default=4)
    # data
    parser.add_argument("--holdout-fraction", type=float, default=0.2,
                        help="ZINC proxy: share of the official val split held out for selection")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the SBM generator")
    parser.add_argument("--generated-sizes", type=_sizes, default=(2000, 400, 400),
                        help="TRAIN,VAL,TEST graphs for generated PATTERN/CLUSTER "
                             "(the official sizes are 10000,2000,2000 and 10000,1000,1000)")
    parser.add_argument("--train-limit", type=int, default=None)
    parser.add_argument("--val-limit", type=int, default=None)
    parser.add_argument("--test-limit", type=int, default=None)
    parser.add_argument("--quick", action="store_true",
                        help="tiny smoke run: few graphs, 2 epochs, 1 seed, small models")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None, help="output folder (default results/gnnbenchmark/"
                                                    "<dataset>)")


def _apply_quick(args: argparse.Namespace) -> None:
    args.epochs = min(args.epochs, 2)
    args.seeds = args.seeds[:1]
    args.train_limit = min(args.train_limit or 48, 48)
    args.val_limit = min(args.val_limit or 16, 16)
    args.test_limit = min(args.test_limit or 16, 16)
    args.generated_sizes = (16, 8, 8)
    args.hidden = min(args.hidden, 16)
    args.head_dim = min(args.head_dim, 8)
    args.heads = min(args.heads, 2)
    args.blocks, args.steps = 1, 1
    args.pe_dim = min(args.pe_dim, 4)
    args.baseline_hidden = min(args.baseline_hidden, 16)
    args.baseline_layers = min(args.baseline_layers, 2)
    args.batch_size = min(args.batch_size, 16)


METRIC_LABELS = {"mae": "MAE", "weighted_accuracy": "weighted accuracy (%)",
                 "accuracy": "accuracy (%)"}


def _plot_curves(out: Path, per_model: dict[str, list[list[float]]], data: BenchmarkData) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curves in per_model.items():
        length = min(len(c) for c in curves)
        values = np.array([c[:length] for c in curves])
        mean, std = values.mean(0), values.std(0)
        epochs = np.arange(1, length + 1)
        ax.plot(epochs, mean, label=name)
        ax.fill_between(epochs, mean - std, mean + std, alpha=0.2)
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"val {METRIC_LABELS[data.metric]}")
    ax.set_title(f"{data.name}: selection curve (mean ± std over seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "val_curves.png", dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Load the data, train every model with every seed, write results.json/.md and a plot."""
    if args.quick:
        _apply_quick(args)
    if not args.seeds:
        raise ValueError("--seeds must name at least one seed")
    if not 0.0 < args.holdout_fraction < 1.0:
        raise ValueError(f"--holdout-fraction must lie in (0, 1), got {args.holdout_fraction}")
    if args.epochs < 1:
        raise ValueError(f"--epochs must be >= 1, got {args.epochs}")
    torch.set_num_threads(max(1, args.threads))
    data = load_benchmark(args)
    if "et" in args.models:
        add_positional_encoding(data, args.pe_dim)
    out = Path(args.out or Path("results") / "gnnbenchmark" / args.dataset)
    metric = data.metric
    models: dict[str, dict[str, Any]] = {}
    curves: dict[str, list[list[float]]] = {}
    jobs = [(name, seed) for name in args.models for seed in args.seeds]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.models}
    for name, seed in tqdm(jobs, desc=f"{data.name}: models x seeds"):
        result = train_one(name, data, seed, args, args.device)
        runs[name].append(result)
        tqdm.write(f"{data.name} {name} seed {seed}: test {metric} {result['test']:.4f} "
                   f"(val {result['val']:.4f}, epoch {result['epoch']}, "
                   f"{result['seconds']:.0f}s)")
    for name, results in runs.items():
        models[name] = {
            metric: summarize(r["test"] for r in results),
            f"val_{metric}": summarize(r["val"] for r in results),
            "selected_epoch": [r["epoch"] for r in results],
            "train_seconds": summarize(r["seconds"] for r in results),
            "params": results[0]["params"],
            "seeds": list(args.seeds),
        }
        curves[name] = [r["curve"] for r in results]
    sizes = {split: len(graphs) for split, graphs in data.splits.items()}
    config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()
              if k not in ("func",)}
    results = {
        "dataset": data.name,
        "protocol": data.protocol + f"; mean ± std over seeds {list(args.seeds)}",
        "source": data.source,
        "metric": metric,
        "lower_is_better": data.lower_is_better,
        "split_sizes": sizes,
        "models": models,
        "config": config,
    }
    notes = list(data.notes)
    notes.append("Split sizes: " + ", ".join(f"{k} {v}" for k, v in sizes.items()) + ".")
    notes += [f"{name}: {m['params']:,} parameters, selected epochs {m['selected_epoch']}, "
              f"{format_stat(m['train_seconds'], 0)} s training per seed (CPU, shared machine)"
              for name, m in models.items()]
    if args.quick:
        notes.append("--quick smoke run: the numbers mean nothing.")
    title = f"GNNBenchmark: {data.name} ({METRIC_LABELS[metric]}, test)"
    write_results(out, results, [metric, f"val_{metric}"], title=title, notes=notes)
    _plot_curves(out, curves, data)
    print((out / "results.md").read_text())
    return results


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="et-graph gnnbenchmark", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
