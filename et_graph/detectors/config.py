"""Configs of the node anomaly detectors, with each model's search space beside its config.

These dataclasses are the one source of defaults: ``ETDetector()``, the ``et-graph anomaly``
flags and the presets in ``configs/anomaly/`` all start from them. A search space is a function
``space(trial) -> {section: {field: value}}`` over an Optuna trial; the tuner gives every model
the same number of trials and the same time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..energy import HOPFIELD_KINDS
from ..loaders.neighbour_sampling import SAMPLERS, parse_fanouts
from ..nn.models.anomaly import READOUTS
from ..protocols.anomaly import SELECT_METRICS
from ..training import TrainConfig

#: How training makes up for the rare anomalous class: a weighted loss or balanced draws.
CLASS_BALANCE = ("weight", "sample", "none")
# One definition each: the energy's Hopfield kinds and the anomaly network's readouts.
READOUT_KINDS = READOUTS
#: The readouts ET's search space chooses from. Fixed, so that studies made before
#: ``ego_two_hop`` existed still resume (Optuna refuses a categorical whose choices changed).
TUNED_READOUTS = ("first_last", "ego_neighbour")


@dataclass
class ETModelConfig:
    """The ET network of :class:`~et_graph.detectors.ETDetector` (paper eqs. 10-12).

    Attributes:
        hidden: token width D.
        heads: attention heads.
        head_dim: key/query width per head.
        hopfield_dim: Hopfield memories K (none = 4 * hidden).
        steps: ET descent steps T (per block).
        blocks: stacked ET blocks S, each with its own parameters and T steps.
        alpha: descent step size.
        hopfield: Hopfield energy, relu or softmax.
        noise_std: noise added to the tokens at each step in training (paper eq. 27).
        dropout: dropout in the readout MLP.
        positional: learnable per-node positional embedding (transductive use only).
        readout: ego_neighbour (MLP on LN(x1) || LN(xT) || the mean of the in-neighbours'
            LN(xT), so the MLP compares a node with its neighbourhood; the default, because it
            raised validation AUROC on Tolokers, reddit and inj_amazon in
            benchmarks/anomaly_ablation.py), ego_two_hop (also the mean of those means: the
            two-hop neighbourhood, as the trees' mean-of-mean column) or first_last (LN(x1) ||
            LN(xT) only).
        label_trick: add the neighbours' training labels as 3 input columns (share of the
            in-neighbours that are training anomalies / training normals, log(1 + labelled
            in-neighbours)); a node never sees its own label, validation and test labels never
            enter, and each epoch a share of the training nodes (``label_trick_share``) feed
            labels while the others carry the loss. Scoring the fitted graph uses every
            training label, and so does the fitted graph grown by new edges or by nodes
            appended after its own (every fitted edge kept); another graph gets zeros (no
            labels known) and a warning.
        label_trick_share: with ``label_trick``, the share of the training nodes drawn afresh
            each epoch to feed the label columns (the rest carry the loss): a larger share
            trains on label columns closer to the scoring's (every training label) with fewer
            loss nodes per epoch. In (0, 1); 0.5 splits them in halves.
        multi_relation: attention energy summed over the graph's relations, with keys, queries
            and temperatures per relation (RelationalETConv; heads per relation); needs a graph
            with data.edge_type (e.g. --relation multi) and full-batch training.
        message_passing_layers: residual mean-aggregation layers with separate ego and
            neighbour weights between the embedding and the descent (MeanMessagePassing; 0 =
            none): the descent starts from tokens that already carry their neighbourhood.
    """

    hidden: int = 64
    heads: int = 1
    head_dim: int = 16
    hopfield_dim: Optional[int] = None
    steps: int = 1
    blocks: int = 1
    alpha: float = 1.0
    hopfield: str = "relu"
    noise_std: float = 0.0
    dropout: float = 0.0
    positional: bool = False
    readout: str = "ego_neighbour"
    label_trick: bool = False
    label_trick_share: float = 0.5
    multi_relation: bool = False
    message_passing_layers: int = 0

    def __post_init__(self) -> None:
        if self.hopfield not in HOPFIELD_KINDS:
            raise ValueError(f"hopfield must be one of {HOPFIELD_KINDS}, got {self.hopfield!r}")
        if self.readout not in READOUT_KINDS:
            raise ValueError(f"readout must be one of {READOUT_KINDS}, got {self.readout!r}")
        for name in ("hidden", "heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.blocks < 1:
            raise ValueError(f"blocks must be >= 1, got {self.blocks}")
        if self.message_passing_layers < 0:
            raise ValueError("message_passing_layers must be >= 0, got "
                             f"{self.message_passing_layers}")
        if not 0.0 < self.label_trick_share < 1.0:
            raise ValueError("label_trick_share (the share of training nodes that feed the "
                             "label columns) must be in (0, 1), got "
                             f"{self.label_trick_share}")
        check_descent_settings(self.alpha, self.noise_std, self.hopfield_dim)
        _check_dropout(self.dropout)


def check_descent_settings(alpha: float, noise_std: float, hopfield_dim: Optional[int]) -> None:
    """The descent's settings of an ET detector config, checked at construction (not first in
    fit): alpha <= 0 ascends (or freezes) the energy, an infinite one diverges.

    Args:
        alpha: the descent step, positive and finite.
        noise_std: the training noise, finite and ``>= 0``.
        hopfield_dim: the Hopfield memories, ``>= 0`` or ``None`` (4 * hidden).

    Raises:
        ValueError: a setting outside its range.
    """
    if not 0 < alpha < math.inf:
        raise ValueError(f"alpha (the descent step) must be a positive finite number, got "
                         f"{alpha}")
    if not 0 <= noise_std < math.inf:
        raise ValueError(f"noise_std must be >= 0 and finite, got {noise_std}")
    if hopfield_dim is not None and hopfield_dim < 0:
        raise ValueError(f"hopfield_dim must be >= 0 (none = 4 * hidden), got {hopfield_dim}")


def _check_dropout(dropout: float) -> None:
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


@dataclass
class GNNModelConfig:
    """The MLP / GCN / GAT baseline networks (``layers`` hidden layers and a linear head).

    Attributes:
        hidden: hidden width.
        dropout: dropout after each hidden layer.
        gat_heads: attention heads of each GAT layer (hidden must be divisible by it).
        layers: hidden layers (message-passing layers for GCN and GAT) before the head.
    """

    hidden: int = 64
    dropout: float = 0.0
    gat_heads: int = 4
    layers: int = 2

    def __post_init__(self) -> None:
        for name in ("hidden", "gat_heads", "layers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        _check_dropout(self.dropout)


@dataclass
class NodeTrainConfig(TrainConfig):
    """Training of a neural node detector: the engine's settings (:class:`TrainConfig`, whose
    fields it inherits) plus the selection metric and the subgraph mode.

    Attributes:
        select_metric: validation metric that picks the checkpoint: f1_macro, auroc or auprc.
        subgraph_ratio: train each epoch on an induced subgraph of this fraction of the nodes
            (0 = full batch); scoring stays full-graph.
        batch_size: mini-batch training (0 = full batch). Without num_neighbors each epoch
            partitions all nodes at random into parts of this many nodes and takes one step per
            induced subgraph (edges between parts are dropped for that epoch). With
            num_neighbors it is the number of seed (training) nodes per batch. Scoring stays
            full-graph either way.
        num_neighbors: neighbour sampling for mini-batches, fanouts per hop like "10,5" (-1 =
            all in-neighbours; empty = random node partitions). Needs batch_size.
        neighbor_sampler: auto (PyG's NeighborLoader when pyg-lib or torch-sparse is
            installed, else builtin), builtin (pure torch, bit-reproducible on resume) or pyg.
        class_balance: weight (the loss weighs each anomalous training node by #normal /
            #anomalous, paper eq. 12) or sample (class-balanced sampling: each epoch the loss
            is taken, unweighted, on as many normal as anomalous training nodes, every node of
            the rarer class and a fresh random draw of the other) or none (the loss is taken,
            unweighted, on every training node: the classes count as often as they occur).
        auc_loss_weight: adds this multiple of the square AUC surrogate
            (:func:`~et_graph.nn.models.anomaly.auc_square_loss`: every anomalous-normal pair of
            the training targets pulled apart) to the cross-entropy; 0 = off.
    """

    epochs: int = 100
    lr: float = 0.02
    select_metric: str = "f1_macro"
    subgraph_ratio: float = 0.0
    batch_size: int = 0
    num_neighbors: str = ""
    neighbor_sampler: str = "auto"
    class_balance: str = "weight"
    auc_loss_weight: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.auc_loss_weight) and self.auc_loss_weight >= 0):
            raise ValueError(f"auc_loss_weight must be a finite number >= 0 (0 = off), got "
                             f"{self.auc_loss_weight}")
        if self.class_balance not in CLASS_BALANCE:
            raise ValueError(
                f"class_balance must be one of {CLASS_BALANCE}, got {self.class_balance!r}"
            )
        if self.select_metric not in SELECT_METRICS:
            raise ValueError(
                f"select_metric must be one of {SELECT_METRICS}, got {self.select_metric!r}"
            )
        if not 0.0 <= self.subgraph_ratio < 1.0:
            raise ValueError(f"subgraph_ratio must be in [0, 1), got {self.subgraph_ratio}")
        if self.batch_size < 0:
            raise ValueError(f"batch_size must be >= 0 (0 = full batch), got {self.batch_size}")
        # One spelling per fanout list (" 5 , 3 " and [5, 3] are "5,3"): resume compares them.
        self.num_neighbors = ",".join(str(k) for k in parse_fanouts(self.num_neighbors))
        if parse_fanouts(self.num_neighbors) and not self.batch_size:
            raise ValueError("num_neighbors needs batch_size (the seed nodes per batch)")
        if self.neighbor_sampler not in SAMPLERS:
            raise ValueError(f"neighbor_sampler must be one of {SAMPLERS}, got "
                             f"{self.neighbor_sampler!r}")
        if self.neighbor_sampler != "auto" and not self.num_neighbors:
            # It chooses the sampler of neighbour-sampled batches; without them it was ignored.
            raise ValueError(f"neighbor_sampler={self.neighbor_sampler!r} needs num_neighbors "
                             "(neighbour-sampled batches); without them nothing is sampled")
        if self.batch_size and self.subgraph_ratio:
            raise ValueError("choose one of batch_size (random node partitions every epoch) and "
                             "subgraph_ratio (one random subgraph per epoch)")


GBT_BINNINGS = ("weighted", "unweighted")
#: The trees' class weighting: class-balanced sample weights, or none.
GBT_CLASS_BALANCE = ("weight", "none")
#: The trees' input columns: the features, plus the neighbour mean, plus its neighbour mean.
GBT_FEATURES = ("x", "x_mean", "x_mean_mean2")


@dataclass
class GBTModelConfig:
    """Gradient-boosted trees (scikit-learn HistGradientBoosting) on neighbourhood features.

    Attributes:
        max_iter: boosting iterations.
        learning_rate: shrinkage.
        max_depth: tree depth limit (none = unlimited).
        max_leaf_nodes: leaves per tree.
        min_samples_leaf: smallest leaf.
        l2_regularization: L2 penalty on leaf values.
        features: x (features only), x_mean (plus neighbour mean) or x_mean_mean2 (plus the
            mean of the neighbour means).
        max_features: share of the feature columns drawn at random for each split (scikit-learn
            >= 1.4). Below 1 it cuts the histogram work in proportion, which is what makes
            wide inputs affordable (inj_amazon with neighbour statistics has 11,505 columns).
        binning: how the feature columns are cut into scikit-learn's 255 bins. ``weighted``
            (scikit-learn's own): from scikit-learn 1.9 the class-balanced sample weights move
            the bin edges, at 254 weighted-percentile calls per column, about 10 minutes per fit
            on inj_amazon's 11,505 columns (before 1.9 scikit-learn bins without the weights,
            so ``weighted`` is ``unweighted`` there: a run made with 1.9 does not repeat on
            an older scikit-learn; results files record its version from session 67 on).
            ``unweighted``: the edges are the training quantiles that scikit-learn computes
            without weights, found for all columns at once
            (``et_graph.detectors.tree.QuantileBinner``); the weights still weigh the loss.
        label_trick: add ET's 3 label-trick columns (the share of a node's in-neighbours with
            training label 1, with 0, and the log-count of labelled in-neighbours), from every
            training label: the columns are one hop without self-loops, so no row reads its own
            label (ET splits its training nodes into halves because its descent carries labels
            over two hops; a tree does not). Validation and test labels never enter. Off by
            default (every stored table).
        class_balance: weight (each anomalous training node weighs #normal / #anomalous in
            the loss, the analogue of ET's weighted loss; every stored table) or none (no
            sample weights, so ``binning="weighted"`` bins on the plain training quantiles).
    """

    max_iter: int = 200
    learning_rate: float = 0.1
    max_depth: Optional[int] = None
    max_leaf_nodes: int = 31
    min_samples_leaf: int = 20
    l2_regularization: float = 0.0
    features: str = "x_mean_mean2"
    max_features: float = 1.0
    binning: str = "weighted"
    label_trick: bool = field(default=False, metadata={"flag": "gbt_label_trick"})
    class_balance: str = field(default="weight", metadata={"flag": "gbt_class_balance"})

    def __post_init__(self) -> None:
        # scikit-learn would refuse these only inside fit, after the features are built
        for name in ("max_iter", "min_samples_leaf"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_leaf_nodes < 2:
            raise ValueError(f"max_leaf_nodes must be >= 2, got {self.max_leaf_nodes}")
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError(f"max_depth must be >= 1 (none = unlimited), got {self.max_depth}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if not self.l2_regularization >= 0:
            raise ValueError(f"l2_regularization must be >= 0, got {self.l2_regularization}")
        if not 0.0 < self.max_features <= 1.0:
            raise ValueError(f"max_features must be in (0, 1], got {self.max_features}")
        if self.binning not in GBT_BINNINGS:
            raise ValueError(f"binning must be one of {GBT_BINNINGS}, got {self.binning!r}")
        if self.class_balance not in GBT_CLASS_BALANCE:
            raise ValueError(f"class_balance must be one of {GBT_CLASS_BALANCE}, got "
                             f"{self.class_balance!r}")
        if self.features not in GBT_FEATURES:
            raise ValueError(f"features must be one of {GBT_FEATURES}, got {self.features!r}")


@dataclass
class ETDetectorConfig:
    """The config of :class:`~et_graph.detectors.ETDetector`: the network and its training.
    ``multi_relation`` trains full batch only (a nonzero ``batch_size`` or ``subgraph_ratio``
    beside it raises ``ValueError``).

    Attributes:
        model: the ET network (:class:`ETModelConfig`).
        train: its training (:class:`NodeTrainConfig`).
    """

    model: ETModelConfig = field(default_factory=ETModelConfig)
    train: NodeTrainConfig = field(default_factory=NodeTrainConfig)

    def __post_init__(self) -> None:
        if self.model.multi_relation and (self.train.batch_size or self.train.subgraph_ratio):
            # Mini-batches are induced subgraphs whose edges would need their edge types
            # carried along; the multi-relation ET trains on the full graph only.
            raise ValueError("multi_relation trains full batch only: set batch_size=0 and "
                             "subgraph_ratio=0 (or turn multi_relation off)")


@dataclass
class GNNDetectorConfig:
    """The config of the MLP, GCN and GAT detectors: the network and its training.

    Attributes:
        model: the network (:class:`GNNModelConfig`).
        train: its training (:class:`NodeTrainConfig`, default learning rate 0.01).
    """

    model: GNNModelConfig = field(default_factory=GNNModelConfig)
    train: NodeTrainConfig = field(default_factory=lambda: NodeTrainConfig(lr=0.01))


@dataclass
class GBTDetectorConfig:
    """The config of :class:`~et_graph.detectors.GBTDetector`.

    Attributes:
        model: the trees (:class:`GBTModelConfig`).
    """

    model: GBTModelConfig = field(default_factory=GBTModelConfig)


# ----------------------------------------------------------------------------------------------
# Search spaces (Optuna trials); each returns {section: {field: value}} overrides.
# ----------------------------------------------------------------------------------------------
def et_space(trial: Any) -> dict[str, dict[str, Any]]:
    """ET's search space for ``et-graph tune anomaly``: overrides of the ``model`` and ``train``
    sections drawn from an Optuna ``trial``."""
    return {
        "model": {
            "hidden": trial.suggest_categorical("hidden", [32, 64, 128]),
            "heads": trial.suggest_categorical("heads", [1, 2, 4]),
            "head_dim": trial.suggest_categorical("head_dim", [8, 16, 32]),
            "steps": trial.suggest_int("steps", 1, 2),
            "alpha": trial.suggest_float("alpha", 0.1, 1.0, log=True),
            "dropout": trial.suggest_float("dropout", 0.0, 0.5),
            "readout": trial.suggest_categorical("readout", list(TUNED_READOUTS)),
            "label_trick": trial.suggest_categorical("label_trick", [False, True]),
        },
        "train": {
            "lr": trial.suggest_float("lr", 1e-3, 5e-2, log=True),
            "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-3, log=True),
        },
    }


def gnn_space(trial: Any) -> dict[str, dict[str, Any]]:
    """The MLP's, GCN's and GAT's search space: width, dropout, depth and the training
    section's settings, drawn from an Optuna ``trial``."""
    return {
        "model": {
            "hidden": trial.suggest_categorical("hidden", [32, 64, 128]),
            "dropout": trial.suggest_float("dropout", 0.0, 0.5),
            # their depth, as ET's space has its steps (added in session 63: the studies
            # stored before it searched the two-layer networks only)
            "layers": trial.suggest_int("layers", 1, 3),
        },
        "train": {
            "lr": trial.suggest_float("lr", 1e-3, 5e-2, log=True),
            "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-3, log=True),
        },
    }


def gbt_space(trial: Any) -> dict[str, dict[str, Any]]:
    """The gradient-boosted trees' search space: depth, learning rate, leaf size,
    regularisation and feature set, drawn from an Optuna ``trial``."""
    return {
        "model": {
            "max_iter": trial.suggest_int("max_iter", 100, 500, step=50),
            "learning_rate": trial.suggest_float("learning_rate", 0.02, 0.3, log=True),
            "max_leaf_nodes": trial.suggest_int("max_leaf_nodes", 15, 127, log=True),
            "min_samples_leaf": trial.suggest_int("min_samples_leaf", 5, 100, log=True),
            "l2_regularization": trial.suggest_float("l2_regularization", 1e-6, 1.0, log=True),
            "features": trial.suggest_categorical("features", ["x", "x_mean", "x_mean_mean2"]),
            "max_features": trial.suggest_categorical("max_features", [0.1, 0.3, 1.0]),
        },
    }


SEARCH_SPACES: dict[str, Callable[[Any], dict[str, dict[str, Any]]]] = {
    "et": et_space,
    "mlp": gnn_space,
    "gcn": gnn_space,
    "gat": gnn_space,
    "gbt": gbt_space,
    # ET's space; the stacked trees keep the run's [gbt] settings (tune them as gbt)
    "et_stacked": et_space,
}
