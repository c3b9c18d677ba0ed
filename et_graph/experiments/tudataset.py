"""TUDataset graph classification: ET vs GIN vs the structure-agnostic baseline, stratified CV.

Loads any TU dataset offline from ``ROOT/NAME/raw/NAME_*.txt`` (the layout of PyG's download),
copying the raw files to a writable cache first because PyG writes ``processed/`` next to them.
Datasets without node features (IMDB-BINARY, ...) get a one-hot encoding of the node degree.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from threadpoolctl import threadpool_limits
from torch_geometric.datasets import TUDataset
from torch_geometric.transforms import OneHotDegree
from torch_geometric.utils import degree
from tqdm.auto import tqdm

from ..baselines.graph_baselines import GINClassifier, StructureAgnosticMLP
from ..nn.models.graph_model import ETGraphModel
from ..protocols.graph_cv import TrainConfig, cross_validate
from ..reporting import write_results
from ..transforms import CLSLaplacianPE

MODEL_NAMES = ("et", "gin", "structure_agnostic")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", required=True, help="TU dataset name, e.g. MUTAG")
    parser.add_argument("--root", required=True,
                        help="folder holding NAME/raw/NAME_*.txt (read only; copied to --cache)")
    parser.add_argument("--cache", default=None,
                        help="writable folder for the copy PyG processes (default: a temp dir)")
    parser.add_argument("--out", default="runs/tudataset", help="output folder (NAME/ is added)")
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: first 2 of the folds, 2 epochs, small ET")
    parser.add_argument("--models", default=",".join(MODEL_NAMES),
                        help="comma-separated subset of " + ", ".join(MODEL_NAMES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--patience", type=int, default=None,
                        help="early stop after this many epochs without validation gain")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    et = parser.add_argument_group("ET")
    et.add_argument("--hidden", type=int, default=32)
    et.add_argument("--blocks", type=int, default=2, help="stacked ET blocks S")
    et.add_argument("--steps", type=int, default=2, help="descent steps T per block")
    et.add_argument("--heads", type=int, default=4)
    et.add_argument("--head-dim", type=int, default=8)
    et.add_argument("--alpha", type=float, default=0.1)
    et.add_argument("--noise-std", type=float, default=0.02)
    et.add_argument("--pe-dim", type=int, default=8, help="Laplacian eigenvectors k")
    et.add_argument("--kernel-size", type=int, default=3, help="Conv2D mask kernel (3 = paper)")
    et.add_argument("--dropout", type=float, default=0.1)
    base = parser.add_argument_group("baselines")
    base.add_argument("--gin-hidden", type=int, default=64)
    base.add_argument("--gin-layers", type=int, default=3)
    base.add_argument("--baseline-dropout", type=float, default=0.5)


def prepare_root(root: str | Path, name: str, cache: str | Path | None) -> Path:
    """Copy ``root/name/raw`` into ``cache/name/raw`` (once) and return ``cache``."""
    source = Path(root) / name / "raw"
    if not source.is_dir() or not any(source.glob(f"{name}_*.txt")):
        raise ValueError(
            f"no TU raw files at {source} (expected {name}_A.txt, {name}_graph_indicator.txt, "
            f"{name}_graph_labels.txt, ...)"
        )
    cache = Path(cache) if cache else Path(tempfile.gettempdir()) / "et_graph_tudataset"
    target = cache / name / "raw"
    if not target.is_dir() or sorted(p.name for p in target.iterdir()) != sorted(
        p.name for p in source.iterdir()
    ):
        if target.exists():
            shutil.rmtree(cache / name)
        shutil.copytree(source, target)
    return cache


def load_tudataset(
    root: str | Path, name: str, cache: str | Path | None = None, pe_dim: int = 8
) -> tuple[list, dict[str, Any]]:
    """The graphs (with ``lap_pe``/``cls_lap_pe``) as a list and a description of the features."""
    dataset = TUDataset(str(prepare_root(root, name, cache)), name, use_node_attr=True,
                        use_edge_attr=True)
    graphs = [dataset[i] for i in range(len(dataset))]
    info: dict[str, Any] = {
        "graphs": len(graphs),
        "classes": int(dataset.num_classes),
        "node_attributes": int(dataset.num_node_attributes),
        "node_labels": int(dataset.num_node_labels),
        "edge_features": int(dataset.num_edge_features),
        "node_features": "TU node attributes + one-hot node labels",
    }
    if dataset.num_node_features == 0:
        max_degree = max(
            int(degree(g.edge_index[0], g.num_nodes).max()) if g.edge_index.numel() else 0
            for g in graphs
        )
        transform = OneHotDegree(max_degree)
        graphs = [transform(g) for g in graphs]
        info["node_features"] = f"one-hot node degree (0..{max_degree}); the data have none"
    empty = [i for i, g in enumerate(graphs) if not g.num_nodes]
    if empty:
        raise ValueError(f"{name} has graphs without nodes (indices {empty[:10]})")
    if pe_dim:
        pe = CLSLaplacianPE(pe_dim)
        # Many tiny eigh calls: threaded BLAS only adds contention (much slower on a busy CPU).
        with threadpool_limits(limits=1):
            graphs = [pe(g) for g in tqdm(graphs, desc="Laplacian PE", leave=False)]
    info["node_feature_width"] = int(graphs[0].x.size(1))
    return graphs, info


def plot_fold_accuracies(results: dict[str, Any], path: Path) -> Path:
    """Test accuracy of every fold (dots) and the mean ± std (bar) per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["models"])
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.2))
    for i, name in enumerate(names):
        stats = results["models"][name]["accuracy"]
        ax.bar(i, stats["mean"], yerr=stats["std"], color="#c6dbef", edgecolor="#3182bd",
               capsize=4)
        ax.plot([i] * len(stats["values"]), stats["values"], "o", color="#08519c", ms=3)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("test accuracy per fold")
    ax.set_ylim(0, 1)
    ax.set_title(f"{results['dataset']}: {len(results['folds'])} test folds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(max(args.threads, 1))
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(names) - set(MODEL_NAMES)
    if unknown or not names:
        raise ValueError(f"--models must be a subset of {MODEL_NAMES}, got {args.models!r}")
    epochs, max_folds = args.epochs, None
    if args.quick:
        epochs, max_folds = min(args.epochs, 2), 2
        args.hidden, args.blocks, args.steps = min(args.hidden, 16), 1, min(args.steps, 2)
    graphs, info = load_tudataset(args.root, args.dataset, args.cache, args.pe_dim)
    in_channels, classes = info["node_feature_width"], info["classes"]
    edge_dim = info["edge_features"] or None
    if not edge_dim:
        for g in graphs:
            g.edge_attr = None

    def make_et() -> ETGraphModel:
        return ETGraphModel(
            in_channels, classes, hidden_channels=args.hidden, blocks=args.blocks,
            steps=args.steps, heads=args.heads, head_dim=args.head_dim, alpha=args.alpha,
            noise_std=args.noise_std, pe_dim=args.pe_dim, kernel_size=args.kernel_size,
            edge_dim=edge_dim, dropout=args.dropout,
        )

    factories = {
        "et": make_et,
        "gin": lambda: GINClassifier(in_channels, classes, args.gin_hidden, args.gin_layers,
                                     args.baseline_dropout),
        "structure_agnostic": lambda: StructureAgnosticMLP(
            in_channels, classes, args.gin_hidden, args.baseline_dropout),
    }
    config = TrainConfig(epochs=epochs, lr=args.lr, weight_decay=args.weight_decay,
                         batch_size=args.batch_size, patience=args.patience)
    out_dir = Path(args.out) / args.dataset
    started = time.time()

    def log_fold(record: dict[str, Any]) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / "folds.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
        accs = ", ".join(f"{n}={r['test_accuracy']:.3f}" for n, r in record["models"].items())
        tqdm.write(f"[{args.dataset}] fold {record['fold']}: {accs}")

    if (out_dir / "folds.jsonl").exists():
        (out_dir / "folds.jsonl").unlink()
    cv = cross_validate(
        graphs, {n: factories[n] for n in names}, {n: config for n in names},
        folds=args.folds, seed=args.seed, val_fraction=args.val_fraction,
        continuous_channels=info["node_attributes"], max_folds=max_folds,
        on_fold_end=log_fold,
    )
    folds_run = len(cv["folds"])
    protocol = (
        f"stratified {args.folds}-fold CV (seed {args.seed})"
        + (f", first {folds_run} folds only (--quick)" if max_folds else "")
        + f"; in each training fold a stratified {args.val_fraction:.0%} validation split "
        f"selects the epoch (best validation accuracy, up to {epochs} epochs); the test fold is "
        "evaluated once; fixed hyperparameters (no grid search); same folds for every model"
    )
    results = {
        "dataset": args.dataset,
        "protocol": protocol,
        "models": cv["models"],
        "folds": cv["folds"],
        "data": info,
        "arguments": {k: v for k, v in vars(args).items() if k != "func"},
        "seconds": round(time.time() - started, 1),
    }
    notes = [
        f"node features: {info['node_features']}",
        "edge features: " + (f"{edge_dim} (used by ET through A')" if edge_dim else "none")
        + "; GIN and the structure-agnostic MLP ignore edge features",
        "accuracy: mean ± std (population) over the test folds",
        f"wall time: {results['seconds']} s (shared CPU, noisy)",
    ]
    write_results(out_dir, results, ["accuracy"],
                  title=f"{args.dataset}: graph classification", notes=notes)
    plot_fold_accuracies(results, out_dir / "accuracy.png")
    tqdm.write((out_dir / "results.md").read_text())
    return results
