"""``et-graph anomaly`` / ``examples/yelpchi_anomaly.py``: ET against same-run baselines.

One run = one dataset, one protocol, ``--seeds`` seeds; per seed ET (supervised logit ``et`` and
the unsupervised fixed-point energy ``et_energy``) and the baselines (``mlp``, ``gcn``, ``gat``,
``gbt``) are trained and evaluated on the same split. Results: ``results.json``, ``results.md``
and PNG plots under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data
from tqdm.auto import tqdm

from ..baselines import (
    GATDetector,
    GCNDetector,
    MLPDetector,
    fit_tree_on_graph_features,
    graph_features,
)
from ..nn.models import ETAnomalyDetector
from ..protocols.anomaly import (
    METRICS,
    SELECT_METRICS,
    RunResult,
    Split,
    TrainConfig,
    evaluate,
    evaluate_scores,
    make_splits,
    summarize_runs,
    train_node_model,
)

ALL_BASELINES = ("mlp", "gcn", "gat", "gbt")
MODEL_ORDER = ("et", "et_energy", "mlp", "gcn", "gat", "gbt")

#: ``--quick``: the README's first command; measured to finish well under 5 minutes on 2 cores.
QUICK = {"epochs": 10, "seeds": 2}
DEFAULTS = {"epochs": 100, "seeds": 5}
FEATURE_NORMS = ("none", "standard", "quantile")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default="tolokers",
                      help="loader name: tolokers (embedded, default), reddit, inj_amazon, "
                           "yelpchi, amazon, tfinance, tsocial")
    data.add_argument("--data-root", default=None,
                      help="directory holding the dataset files (yelpchi/amazon .mat, ...)")
    data.add_argument("--data", default=None,
                      help="path to a .mat/.npz/.pt graph file (overrides --dataset)")
    data.add_argument("--relation", default="homo",
                      help="YelpChi/Amazon relation: homo (default) or one relation matrix")

    proto = parser.add_argument_group("protocol")
    proto.add_argument("--protocol", choices=("paper", "gadbench"), default="paper",
                       help="paper: stratified split (train ratio, rest 1:2 val:test); "
                            "gadbench: the dataset's own masks")
    proto.add_argument("--train-ratio", type=float, default=0.4)
    proto.add_argument("--split-seed", type=int, default=2,
                       help="fixed seed of the stratified split (paper protocol)")
    proto.add_argument("--vary-split", action="store_true",
                       help="draw a new split per seed (split seed + seed) instead of one")
    proto.add_argument("--seeds", type=int, default=5, help="model seeds (runs)")
    proto.add_argument("--epochs", type=int, default=100)
    proto.add_argument("--select-metric", choices=SELECT_METRICS, default="f1_macro",
                       help="validation metric that picks the checkpoint")
    proto.add_argument("--patience", type=int, default=0,
                       help="stop after this many epochs without validation gain (0 = never)")
    proto.add_argument("--quick", action="store_true",
                       help=f"small run for a first look: {QUICK} (explicit flags win)")

    model = parser.add_argument_group("ET model")
    model.add_argument("--hidden", type=int, default=64)
    model.add_argument("--heads", type=int, default=1)
    model.add_argument("--head-dim", type=int, default=16)
    model.add_argument("--hopfield-dim", type=int, default=None, help="default 4 * hidden")
    model.add_argument("--steps", type=int, default=1, help="ET steps T")
    model.add_argument("--alpha", type=float, default=1.0, help="ET step size")
    model.add_argument("--dropout", type=float, default=0.0)
    model.add_argument("--noise-std", type=float, default=0.0)
    model.add_argument("--positional", action=argparse.BooleanOptionalAction, default=False,
                       help="learnable per-node positional embedding (eq. 10)")
    model.add_argument("--feature-norm", choices=FEATURE_NORMS, default="quantile",
                       help="per-column feature transform over all nodes (labels unused): "
                            "standard (z-score) or quantile (rank -> normal scores)")
    model.add_argument("--degree-feature", action=argparse.BooleanOptionalAction, default=True,
                       help="append log(1 + degree) to the node features (all models get it)")
    model.add_argument("--lr", type=float, default=0.02)
    model.add_argument("--weight-decay", type=float, default=0.0)

    base = parser.add_argument_group("baselines")
    base.add_argument("--baselines", default=",".join(ALL_BASELINES),
                      help="comma list of mlp,gcn,gat,gbt, or 'none'")
    base.add_argument("--baseline-lr", type=float, default=0.01)
    base.add_argument("--no-et", action="store_true",
                      help="baselines only (e.g. to spread one table's models over processes)")

    run = parser.add_argument_group("run")
    run.add_argument("--subgraph-ratio", type=float, default=0.0,
                     help="train each epoch on an induced subgraph of this fraction of the "
                          "nodes (large graphs); evaluation stays full-graph")
    run.add_argument("--ddp", action="store_true",
                     help="data-parallel training over torch.distributed (launch with torchrun)")
    run.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    run.add_argument("--out", default=None, help="output directory (results + plots)")
    run.add_argument("--no-progress", action="store_true")


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def load_data(args: argparse.Namespace) -> Data:
    from ..datasets import load_anomaly_dataset

    if args.data:
        data = load_anomaly_dataset(path=args.data, relation=args.relation)
    else:
        data = load_anomaly_dataset(args.dataset, root=args.data_root, relation=args.relation)
    return prepare_data(data, args.feature_norm, args.degree_feature)


def prepare_data(data: Data, feature_norm: str = "none", degree_feature: bool = False) -> Data:
    """Validate the graph for node anomaly detection; optionally append log-degree and transform
    the features (label-free, over all nodes, the same input for ET and every baseline)."""
    if data.x is None or data.num_nodes == 0:
        raise ValueError("the graph has no nodes / no node features")
    if data.y is None or data.y.dim() != 1 or data.y.numel() != data.num_nodes:
        raise ValueError("the graph needs a binary node label y of shape [N]")
    if not bool(torch.isin(data.y, torch.tensor([0, 1])).all()):
        raise ValueError("labels y must be binary (0 = normal, 1 = anomalous)")
    if not bool(torch.isfinite(data.x).all()):
        raise ValueError("node features contain NaN or inf values")
    data = data.clone()
    data.x = data.x.float()
    data.y = data.y.long()
    if feature_norm not in FEATURE_NORMS:
        raise ValueError(f"feature_norm must be one of {FEATURE_NORMS}, got {feature_norm!r}")
    if degree_feature:
        degree = torch.zeros(data.num_nodes).index_add_(
            0, data.edge_index[1], torch.ones(data.edge_index.size(1))
        )
        data.x = torch.cat([data.x, degree.log1p().unsqueeze(-1)], dim=-1)
    if feature_norm == "standard":
        std = data.x.std(dim=0)
        data.x = (data.x - data.x.mean(dim=0)) / torch.where(std > 0, std, torch.ones_like(std))
    elif feature_norm == "quantile":
        data.x = quantile_normal(data.x)
    return data


def quantile_normal(x: Tensor) -> Tensor:
    """Each column's average rank mapped to standard-normal scores (ties share a score)."""
    from scipy.stats import norm, rankdata

    ranks = rankdata(x.double().numpy(), axis=0, method="average")
    scores = norm.ppf(ranks / (x.size(0) + 1))
    return torch.from_numpy(scores).to(x.dtype)


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------
def build_et(args: argparse.Namespace, data: Data) -> ETAnomalyDetector:
    return ETAnomalyDetector(
        data.num_features,
        hidden_channels=args.hidden,
        heads=args.heads,
        head_dim=args.head_dim,
        hopfield_dim=args.hopfield_dim,
        steps=args.steps,
        alpha=args.alpha,
        noise_std=args.noise_std,
        num_nodes=data.num_nodes,
        positional=args.positional,
        dropout=args.dropout,
    )


def build_baseline(
    name: str, data: Data, hidden: int, full_batch: bool = True
) -> torch.nn.Module:
    if name == "mlp":
        return MLPDetector(data.num_features, hidden)
    if name == "gcn":
        return GCNDetector(data.num_features, hidden, cached=full_batch)
    if name == "gat":
        return GATDetector(data.num_features, hidden)
    raise ValueError(f"unknown baseline {name!r}")


def parse_baselines(text: str) -> list[str]:
    if text.strip().lower() in ("", "none"):
        return []
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(ALL_BASELINES))
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; choose from {list(ALL_BASELINES)}")
    return names


@torch.no_grad()
def energy_score_result(
    model: ETAnomalyDetector, data: Data, split: Split
) -> tuple[dict[str, float], float, np.ndarray, int]:
    """The unsupervised score: node energy at the final ET state. Its sign (does high energy
    mean anomalous?) is chosen on *validation* AUROC; the threshold on validation quantiles."""
    from sklearn.metrics import roc_auc_score

    model.eval()
    energy = model.energy_score(data.x, data.edge_index).double().cpu().numpy()
    y = data.y.cpu().numpy()
    val = split.val.numpy()
    sign = 1 if roc_auc_score(y[val], energy[val]) >= 0.5 else -1
    metrics, threshold, prob = evaluate_scores(y, sign * energy, split, calibrate=True)
    return metrics, threshold, prob, sign


@torch.no_grad()
def energy_trajectory(
    model: ETAnomalyDetector, data: Data, split: Split, extra_steps: int = 6
) -> dict[str, list[float]]:
    """Mean node energy per ET step (0..T+extra), over all nodes and over the normal/anomalous
    *validation* nodes, continuing the descent past the trained T to show it settles."""
    model.eval()
    conv = model.conv
    trained_steps = conv.steps
    y = data.y.cpu().numpy()
    val = split.val.numpy()
    normal, anomalous = val[y[val] == 0], val[y[val] == 1]
    x = model.embed(data.x)
    out: dict[str, list[float]] = {"all": [], "normal": [], "anomalous": []}
    try:
        conv.steps = 1
        for step in range(trained_steps + extra_steps + 1):
            energy = conv.node_energy(x, data.edge_index).double().cpu().numpy()
            out["all"].append(float(energy.mean()))
            out["normal"].append(float(energy[normal].mean()))
            out["anomalous"].append(float(energy[anomalous].mean()))
            if step < trained_steps + extra_steps:
                x = conv(x, data.edge_index)
    finally:
        conv.steps = trained_steps
    out["trained_steps"] = [float(trained_steps)]
    return out


# --------------------------------------------------------------------------------------------
# Run
# --------------------------------------------------------------------------------------------
def _apply_quick(args: argparse.Namespace) -> None:
    """``--quick`` shrinks the options still at their defaults (explicit values win)."""
    if getattr(args, "quick", False):
        for key, value in QUICK.items():
            if getattr(args, key) == DEFAULTS[key]:
                setattr(args, key, value)


def _setup_distributed(args: argparse.Namespace) -> tuple[int, int]:
    if not args.ddp:
        return 0, 1
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            raise ValueError("--ddp needs torchrun (RANK/WORLD_SIZE/MASTER_ADDR unset)")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def run(args: argparse.Namespace, data: Optional[Data] = None) -> dict[str, Any]:
    """Run the experiment; ``data`` (a PyG ``Data`` with binary ``y``) replaces loading."""
    _apply_quick(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    rank, world = _setup_distributed(args)
    try:
        return _run(args, data, rank, world)
    finally:
        if args.ddp and dist.is_initialized():
            dist.destroy_process_group()


def _run(args: argparse.Namespace, data: Optional[Data], rank: int, world: int) -> dict[str, Any]:
    start = time.perf_counter()
    baselines = parse_baselines(args.baselines)
    data = (
        load_data(args)
        if data is None
        else prepare_data(data, args.feature_norm, args.degree_feature)
    )
    name = str(getattr(data, "name", None) or args.dataset)
    splits = make_splits(
        data, args.protocol, args.seeds, args.train_ratio, args.split_seed, args.vary_split
    )
    progress = not args.no_progress and rank == 0
    y = data.y.cpu().numpy()
    per_model: dict[str, list[dict[str, float]]] = {m: [] for m in MODEL_ORDER}
    curves: dict[str, Any] = {"prob": {}, "history": {}, "energy": None}
    et_seconds: list[float] = []
    tree_features = graph_features(data.x, data.edge_index) if "gbt" in baselines else None
    details: list[dict[str, Any]] = []

    for seed, split in enumerate(tqdm(splits, desc=f"{name} seeds", disable=not progress)):
        seed_detail: dict[str, Any] = {"seed": seed, "split_sizes": list(split.sizes())}
        config = TrainConfig(
            epochs=args.epochs,
            lr=args.lr,
            weight_decay=args.weight_decay,
            select_metric=args.select_metric,
            subgraph_ratio=args.subgraph_ratio,
            patience=args.patience,
            progress=progress,
            description=f"ET seed {seed}",
        )
        if not args.no_et:
            torch.manual_seed(seed)
            et = build_et(args, data)
            result = train_node_model(et, data, split, config, seed=seed)
            et_seconds.append(result.epoch_seconds)
            _record(per_model, curves, seed_detail, "et", result, seed)
            metrics, threshold, prob, sign = energy_score_result(result.model, data, split)
            per_model["et_energy"].append(metrics)
            seed_detail["et_energy"] = {**metrics, "threshold_quantile": threshold, "sign": sign}
            if seed == 0:
                curves["prob"]["et_energy"] = prob
                curves["energy"] = energy_trajectory(result.model, data, split)

        for baseline in baselines:
            if baseline == "gbt":
                if rank == 0:
                    prob = fit_tree_on_graph_features(
                        tree_features, y, split.train.numpy(), seed
                    )
                    metrics, threshold, _ = evaluate_scores(y, prob, split)
                    per_model["gbt"].append(metrics)
                    seed_detail["gbt"] = {**metrics, "threshold": threshold}
                    if seed == 0:
                        curves["prob"]["gbt"] = prob
                continue
            torch.manual_seed(seed)
            model = build_baseline(baseline, data, args.hidden, args.subgraph_ratio <= 0)
            config.lr = args.baseline_lr
            config.description = f"{baseline} seed {seed}"
            result = train_node_model(model, data, split, config, seed=seed)
            _record(per_model, curves, seed_detail, baseline, result, seed)
        details.append(seed_detail)

    models = {m: summarize_runs(runs) for m, runs in per_model.items() if runs}
    results = {
        "dataset": name,
        "protocol": describe_protocol(args, splits),
        "models": models,
        "config": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "et_epoch_seconds_median": float(np.median(et_seconds)) if et_seconds else None,
        "seconds_total": time.perf_counter() - start,
        "world_size": world,
        "per_seed": details,
    }
    if rank == 0 and args.out:
        write_outputs(Path(args.out), results, curves, data, splits[0])
    if rank == 0 and progress:
        from ..reporting import markdown_table

        print(markdown_table(models, METRICS))
    return results


def _record(per_model, curves, seed_detail, name: str, result: RunResult, seed: int) -> None:
    per_model[name].append(result.metrics)
    seed_detail[name] = {
        **result.metrics,
        "threshold": result.threshold,
        "best_epoch": result.best_epoch,
        "epoch_seconds": result.epoch_seconds,
    }
    curves["history"].setdefault(name, []).append(result.history)
    if seed == 0:
        curves["prob"][name] = result.prob


def describe_protocol(args: argparse.Namespace, splits: list[Split]) -> str:
    train, val, test = splits[0].sizes()
    if args.protocol == "gadbench":
        head = "GADBench: the dataset's own train/val/test masks (seed i uses mask i mod S)"
    else:
        head = (
            f"paper/BWGNN: stratified split, train ratio {args.train_ratio}, rest 1:2 val:test, "
            f"split seed {args.split_seed}" + (" + seed" if args.vary_split else " (fixed)")
        )
    return (
        f"{head}; {train}/{val}/{test} train/val/test nodes; {args.seeds} seeds; up to "
        f"{args.epochs} epochs of Adam; threshold from 0.05..0.95 (19) maximising validation "
        f"macro-F1; checkpoint = best validation {args.select_metric}; test metrics in eval mode"
        + (
            ""
            if args.no_et
            else "; et_energy = node energy at the final ET state, sign and threshold "
            "(validation quantile) chosen on validation"
        )
    )


# --------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------
def write_outputs(
    out: Path, results: dict[str, Any], curves: dict[str, Any], data: Data, split: Split
) -> None:
    from ..reporting import write_results

    notes = [f"total wall time: {results['seconds_total']:.1f} s"]
    if results["et_epoch_seconds_median"] is not None:
        seconds = results["et_epoch_seconds_median"]
        notes.append(f"ET epoch (train + validation pass), median: {seconds:.2f} s")
    notes += [
        "Rec@K: share of the test anomalies among the K top-scored test nodes, K = #anomalies",
    ]
    write_results(out, results, METRICS, title=f"Anomaly detection: {results['dataset']}",
                  notes=notes)
    plot_curves(out, curves, data, split)


def plot_curves(out: Path, curves: dict[str, Any], data: Data, split: Split) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import precision_recall_curve, roc_curve

    y = data.y.cpu().numpy()
    test = split.test.numpy()
    fig, (ax_roc, ax_pr) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name in MODEL_ORDER:
        prob = curves["prob"].get(name)
        if prob is None:
            continue
        metrics = evaluate(y[test], prob[test], 0.5)
        fpr, tpr, _ = roc_curve(y[test], prob[test])
        precision, recall, _ = precision_recall_curve(y[test], prob[test])
        style = "-" if name.startswith("et") else "--"
        ax_roc.plot(fpr, tpr, style, label=f"{name} (AUROC {metrics['auroc']:.3f})")
        ax_pr.plot(recall, precision, style, label=f"{name} (AUPRC {metrics['auprc']:.3f})")
    ax_roc.plot([0, 1], [0, 1], ":", color="grey")
    ax_roc.set(
        xlabel="false positive rate", ylabel="true positive rate", title="ROC (test, seed 0)"
    )
    ax_pr.axhline(y[test].mean(), ls=":", color="grey")
    ax_pr.set(xlabel="recall", ylabel="precision", title="Precision-recall (test, seed 0)")
    for ax in (ax_roc, ax_pr):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "roc_pr.png", dpi=120)
    plt.close(fig)

    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(11, 4))
    for name, histories in curves["history"].items():
        for i, hist in enumerate(histories):
            label = name if i == 0 else None
            alpha = 1.0 if name == "et" else 0.5
            ax_loss.plot(hist["loss"], color=_color(name), alpha=alpha, label=label)
            ax_val.plot(hist["val_auroc"], color=_color(name), alpha=alpha, label=label)
    ax_loss.set(xlabel="epoch", ylabel="weighted BCE (train)", title="Training loss")
    ax_val.set(xlabel="epoch", ylabel="validation AUROC", title="Validation AUROC (all seeds)")
    for ax in (ax_loss, ax_val):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "training_curves.png", dpi=120)
    plt.close(fig)

    energy = curves.get("energy")
    if energy:
        trained = int(energy["trained_steps"][0])
        fig, (ax_all, ax_cls) = plt.subplots(1, 2, figsize=(11, 4))
        steps = np.arange(len(energy["all"]))
        ax_all.plot(steps, energy["all"], "o-")
        ax_all.axvline(trained, ls=":", color="grey", label=f"trained T = {trained}")
        ax_all.set(xlabel="ET step", ylabel="mean node energy", title="Energy vs ET step (seed 0)")
        ax_all.legend(fontsize=8)
        ax_cls.plot(steps, energy["normal"], "o-", label="normal (validation)")
        ax_cls.plot(steps, energy["anomalous"], "s-", label="anomalous (validation)")
        ax_cls.axvline(trained, ls=":", color="grey")
        ax_cls.set(xlabel="ET step", ylabel="mean node energy", title="By class")
        ax_cls.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "energy_steps.png", dpi=120)
        plt.close(fig)
        (out / "energy_steps.json").write_text(json.dumps(energy, indent=2))


def _color(name: str) -> str:
    palette = {"et": "C0", "mlp": "C2", "gcn": "C3", "gat": "C4"}
    return palette.get(name, "C5")


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
