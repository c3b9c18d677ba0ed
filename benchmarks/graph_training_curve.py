"""Per-epoch training and validation accuracy of ET (and GIN) on one fold of a TU dataset.

Is the graph-level ET underfitting? This trains on the inner training set of ONE outer fold
(fold ``--fold`` of the stratified ``--folds``-fold split and its stratified inner split, exactly
as :func:`et_graph.protocols.graph_cv.cross_validate` builds them) with the one training engine
and, after every epoch, records in eval mode

* ``train_accuracy`` / ``train_loss`` on the inner training graphs (how well the model fits),
* ``val_accuracy`` / ``val_loss`` on the validation graphs (what the protocol selects on),
* for ET, how far the descent moves the tokens: the mean over tokens of ``|x_T - x_0| / |x_0|``
  from the initial tokens to the last block's output (``move_all``; ``move_cls`` for the CLS
  tokens only) and per block (``move_block``), and ``attention_to_hopfield``, the mean norm of
  the attention part of the first block's first step over that of its Hopfield part, on a fixed
  probe batch of training graphs.

The test fold is never loaded into a model. Every ``et-graph tudataset`` flag sets the data, ET,
GIN and training (``--hidden``, ``--blocks``, ``--steps``, ``--alpha``, ``--readout``,
``--rw-pe-dim``, ``--lr``, ``--epochs``, ...); without ``--config`` the NCI1 preset
(configs/tudataset/NCI1.toml) is the starting point (``--no-preset``: the config's defaults);
``--et-extra NAME=VALUE`` passes ETGraphModel arguments the config lacks (``use_mask=False``,
``hopfield_dim=0``, ...). ``--train-limit`` trains on a random subset (an overfitting check).
Writes ``OUT_DIR/TAG.json`` and ``OUT_DIR/TAG.png``.

    OMP_NUM_THREADS=1 python benchmarks/graph_training_curve.py --threads 1 --epochs 30 \\
        --curve-models et,gin --tag preset
"""
from __future__ import annotations

import argparse
import ast
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.loader import DataLoader

from et_graph.config import add_config_arguments, resolve, to_dict
from et_graph.experiments.tudataset import (
    TUDatasetConfig,
    et_model_kwargs,
    load_graphs,
    model_factories,
)
from et_graph.nn.models.graph_model import ETGraphModel
from et_graph.protocols.graph_cv import (
    GraphClassificationTask,
    evaluate,
    graph_labels,
    inner_split,
    standardized_copies,
    stratified_folds,
)
from et_graph.training import Trainer, Validation, seed_everything

PRESET = Path(__file__).resolve().parents[1] / "configs" / "tudataset" / "NCI1.toml"


@torch.no_grad()
def token_movement(model: nn.Module, batch: Any) -> dict[str, Any]:
    """Mean ``|x_out - x_in| / |x_in|`` over tokens for the whole descent and for each block."""
    per_block: list[float] = []
    ratios: list[float] = []

    def hook(module: nn.Module, inputs: tuple, output: Tensor) -> None:
        x_in = inputs[0]
        per_block.append(float(((output - x_in).norm(dim=1) / x_in.norm(dim=1)).mean()))
        # the two parts of the first descent step: attention (relational) and Hopfield (per token)
        fn = module.energy_fn
        edges = fn.edges(x_in, inputs[1], inputs[2] if len(inputs) > 2 else None)
        att, hop = fn.attention_and_hopfield_grads(fn.norm(x_in), edges, fused=False)
        ratios.append(float(att.norm(dim=1).mean() / hop.norm(dim=1).mean().clamp_min(1e-12)))

    handles = [conv.register_forward_hook(hook) for conv in model.convs]
    try:
        out, graph, _ = model.tokens(
            batch.x, batch.edge_index, batch.batch,
            edge_attr=batch.edge_attr if model.has_edge_features else None,
            **{name: getattr(batch, name, None) for name, read in (
                ("lap_pe", model.pe_encoder), ("cls_lap_pe", model.pe_encoder),
                ("rw_pe", model.rw_encoder)) if read is not None},
            num_graphs=batch.num_graphs,
        )
    finally:
        for handle in handles:
            handle.remove()
    rel = (out - graph.x).norm(dim=1) / graph.x.norm(dim=1)
    return {"move_all": float(rel.mean()), "move_cls": float(rel[graph.cls_index].mean()),
            "move_nodes": float(rel[graph.node_index].mean()), "move_block": per_block,
            "attention_to_hopfield": ratios[0]}


class CurveTask(GraphClassificationTask):
    """The protocol's task, whose validation also measures the fit on the training graphs."""

    def __init__(self, train_data: Sequence, val_data: Sequence, batch_size: int, seed: int,
                 probe_size: int = 256) -> None:
        super().__init__(train_data, val_data, batch_size, seed)
        self.train_eval_loader = DataLoader(list(train_data), batch_size=max(batch_size, 64))
        self.probe = next(iter(DataLoader(list(train_data)[:probe_size], batch_size=probe_size)))
        self.eval_seconds = 0.0

    def validate(self, model: nn.Module) -> Validation:
        begin = time.perf_counter()
        validation = super().validate(model)
        train = evaluate(model, self.train_eval_loader)
        validation.metrics.update({"train_accuracy": train["accuracy"],
                                   "train_eval_loss": train["loss"]})
        if hasattr(model, "convs") and hasattr(model, "tokens"):
            movement = token_movement(model, self.probe)
            validation.metrics.update({k: v for k, v in movement.items() if k != "move_block"})
            validation.extra["move_block"] = movement["move_block"]
            for i, value in enumerate(movement["move_block"]):
                validation.metrics[f"move_block{i}"] = value
        self.eval_seconds = time.perf_counter() - begin
        return validation


def fold_data(config: TUDatasetConfig, fold: int, train_limit: Optional[int]
              ) -> tuple[list, list, dict[str, Any]]:
    data, protocol = config.data, config.protocol
    graphs, info = load_graphs(data)
    labels = graph_labels(graphs)
    train_index, _ = stratified_folds(labels, protocol.folds, protocol.seed)[fold]
    inner, val = inner_split(train_index, labels, protocol.val_fraction, protocol.seed + fold)
    if train_limit and train_limit < len(inner):
        rng = np.random.default_rng(protocol.seed + fold)
        inner = np.sort(rng.permutation(inner)[:train_limit])
    graphs = standardized_copies(graphs, inner, info["node_attributes"])
    return [graphs[i] for i in inner], [graphs[i] for i in val], info


def parse_extra(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        name, _, text = item.partition("=")
        out[name.strip()] = ast.literal_eval(text.strip())
    return out


def et_factory(config: TUDatasetConfig, info: dict[str, Any], extra: dict[str, Any]) -> Any:
    """The ET of :func:`model_factories` with ``extra`` constructor arguments."""
    kwargs = {**et_model_kwargs(config, info), **extra}
    return lambda: ETGraphModel(**kwargs)


def train_curve(name: str, factory: Any, train: list, val: list, config: TUDatasetConfig,
                seed: int) -> dict[str, Any]:
    seed_everything(seed)
    model = factory()
    task = CurveTask(train, val, config.train.batch_size, seed)
    rows: list[dict[str, Any]] = []

    def on_epoch(epoch: int, validation: Validation) -> None:
        row = {"epoch": epoch + 1, **{k: float(v) for k, v in validation.metrics.items()}}
        if "move_block" in validation.extra:
            row["move_block"] = validation.extra["move_block"]
        rows.append(row)
        moved = (f" move={row['move_all']:.3f} cls={row['move_cls']:.3f} "
                 f"att/hop={row['attention_to_hopfield']:.3f}" if "move_all" in row else "")
        print(f"{name} epoch {epoch + 1}: train_acc={row['train_accuracy']:.4f} "
              f"val_acc={row['accuracy']:.4f} val_loss={row['loss']:.4f}{moved}", flush=True)

    trainer = Trainer(config.train, description=name, progress=False, generators=[task.generator],
                      on_epoch=on_epoch)
    fit = trainer.fit(model, task)
    by_epoch = {hist["epoch"] + 1: hist for hist in fit.history}
    for row in rows:  # (on_epoch sees validated epochs only: train.validate_every)
        hist = by_epoch[row["epoch"]]
        row.update(train_loss=hist["train_loss"], lr=hist["lr"],
                   seconds=hist["seconds"], val_accuracy=row.pop("accuracy"),
                   val_loss=row.pop("loss"))
    return {"rows": rows, "best_epoch": fit.best_epoch + 1, "best_val_accuracy": fit.best.score,
            "params": sum(p.numel() for p in model.parameters()),
            "median_epoch_seconds": fit.epoch_seconds}


def _style(axes: Any, titles: Sequence[str]) -> None:
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for name, curve in results["models"].items():
        epochs = [r["epoch"] for r in curve["rows"]]
        axes[0].plot(epochs, [r["train_accuracy"] for r in curve["rows"]], label=name)
        axes[1].plot(epochs, [r["val_accuracy"] for r in curve["rows"]], label=name)
        if curve["rows"] and "move_all" in curve["rows"][0]:
            axes[2].plot(epochs, [r["move_all"] for r in curve["rows"]], label=f"{name}: all")
            axes[2].plot(epochs, [r["move_cls"] for r in curve["rows"]], "--",
                         label=f"{name}: CLS")
    _style(axes, ("training accuracy (eval mode)", "validation accuracy",
                  "|x_T - x_0| / |x_0| (ET)"))
    fig.suptitle(f"{results['dataset']} fold {results['fold']}: {results['tag']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare(paths: Sequence[str], out: Path) -> None:
    """One figure of training and validation accuracy from several saved runs (``TAG.json``):
    the before/after view of a change, each curve labelled ``tag: model``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from et_graph.plots.colours import model_colour

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    # A model's colour (ET blue, GIN vermillion: colour-blind safe) and a line style per run,
    # so that no two lines differ by colour alone (six lines in matplotlib's default colours,
    # red beside green: a plots audit)
    styles = ("-", "--", "-.", ":")
    if len(paths) > len(styles):  # (a fifth run drew like the first: a review)
        raise SystemExit(f"--compare draws up to {len(styles)} runs, got {len(paths)}")
    shown = set()
    for index, path in enumerate(paths):
        run = json.loads(Path(path).read_text(encoding="utf-8"))
        shown.add((run.get("dataset"), run.get("fold")))
        for name, curve in run["models"].items():
            epochs = [r["epoch"] for r in curve["rows"]]
            look = {"color": model_colour(name), "linestyle": styles[index % len(styles)],
                    "label": f"{run['tag']}: {name}"}
            axes[0].plot(epochs, [r["train_accuracy"] for r in curve["rows"]], **look)
            axes[1].plot(epochs, [r["val_accuracy"] for r in curve["rows"]], **look)
    _style(axes, ("training accuracy (eval mode)", "validation accuracy"))
    fig.suptitle("; ".join(f"{dataset}, outer fold {fold}'s inner split"
                           for dataset, fold in sorted(shown, key=str)), fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    curve = parser.add_argument_group("curve")
    curve.add_argument("--fold", type=int, default=0, help="outer fold whose inner split is used")
    curve.add_argument("--train-limit", type=int, default=None,
                       help="train on a random subset of this many inner training graphs")
    curve.add_argument("--curve-models", default="et,gin", help="comma list of et, gin")
    curve.add_argument("--tag", default="run", help="name of the output files")
    curve.add_argument("--out-dir", default="runs/graph_curve")
    curve.add_argument("--no-preset", action="store_true",
                       help="start from the config defaults, not the NCI1 preset")
    curve.add_argument("--et-extra", action="append", default=[], metavar="NAME=VALUE",
                       help="extra ETGraphModel argument the config has no field for, e.g. "
                            "use_mask=False, hopfield_dim=0, beta_init=1.0 (repeatable)")
    curve.add_argument("--compare", nargs="+", metavar="TAG_JSON", default=None,
                       help="only overlay the curves of these saved runs into --compare-out")
    curve.add_argument("--compare-out", default="runs/graph_curve/compare.png")
    add_config_arguments(parser, TUDatasetConfig)
    args = parser.parse_args(argv)
    if args.compare:
        compare(args.compare, Path(args.compare_out))
        return {"compared": args.compare, "figure": args.compare_out}
    if not args.config and not args.no_preset:
        args.config = str(PRESET)
    config = resolve(TUDatasetConfig, args)
    names = [n.strip() for n in args.curve_models.split(",") if n.strip()]
    config.protocol.models = ",".join(names)
    config.run.apply_threads()
    train, val, info = fold_data(config, args.fold, args.train_limit)
    factories = model_factories(config, info)
    extra = parse_extra(args.et_extra)
    if extra and "et" in factories:
        factories["et"] = et_factory(config, info, extra)
    seed = config.protocol.seed + args.fold
    results: dict[str, Any] = {
        "dataset": config.data.dataset, "fold": args.fold, "tag": args.tag,
        "train_graphs": len(train), "val_graphs": len(val), "threads": torch.get_num_threads(),
        "config": to_dict(config), "et_extra": extra, "models": {},
    }
    for name in names:
        results["models"][name] = train_curve(name, factories[name], train, val, config, seed)
        last = results["models"][name]["rows"][-1]
        print(f"{name}: last-epoch train_acc={last['train_accuracy']:.4f} "
              f"val_acc={last['val_accuracy']:.4f}; best val "
              f"{results['models'][name]['best_val_accuracy']:.4f} at epoch "
              f"{results['models'][name]['best_epoch']}", flush=True)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.tag}.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    plot(results, out_dir / f"{args.tag}.png")
    return results


if __name__ == "__main__":
    main()
