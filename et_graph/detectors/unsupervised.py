"""The unsupervised ET detector: masked node-feature completion, no label anywhere.

:class:`UnsupervisedETDetector` (also reached as ``ETDetector(supervised=False)``) trains
:class:`~et_graph.nn.models.masked_reconstruction.ETMaskedNodeReconstruction` through the one
engine (:class:`~et_graph.training.Trainer`) with :class:`MaskedReconstructionTask`:

- each epoch masks a fresh random ``mask_ratio`` of the *training* nodes; ET's descent completes
  them from their neighbourhoods and the loss is the MSE of their features;
- a fixed random ``val_fraction`` of the nodes is never a training target: the checkpoint is the
  epoch with the lowest reconstruction error of those nodes under one fixed mask (label-free
  model selection).

Scores (higher = more anomalous), from the same passes: every round partitions the nodes at
random into ``ceil(1 / mask_ratio)`` masks, so that each node is masked exactly once per round;

- ``reconstruction``: a node's completion error, averaged over the ``score_rounds`` passes in
  which it is masked;
- ``energy``: a node's energy at the final tokens (:meth:`ETConv.node_energy`), averaged over the
  passes in which it is *open* (its own features enter), high energy = anomalous.
- with ``structure_weight > 0`` (the network also reconstructs edges):
  ``structure``, a node's edge-reconstruction loss over its in-edges (pooled by
  ``structure_reduce``: mean by default), averaged over the passes in which it is open; and
  ``combined``, the mean (or, with ``combine="max"``, the maximum) of the reconstruction and
  structure scores' ranks (a fixed, label-free rule: the two errors have unrelated scales), or,
  with ``combine="max_z"`` / ``"sum_z"``, the maximum / sum of their robust z-scores (median
  and MAD), which keep how far out a node lies where ranks flatten it.

``fit`` reads ``data.x`` and ``data.edge_index`` only; ``data.y`` and any mask are ignored, so
scrambling the labels leaves every score bit-identical (tested).
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Optional, cast

import torch
from torch import Tensor
from torch_geometric.data import Data

from ..callers import user_stacklevel
from ..exceptions import ConfigWarning, DataWarning, ETGraphDeprecationWarning, FitWarning
from ..nn.edge_cache import clear_graph_caches
from ..nn.models.image_completion import check_mask_ratio
from ..nn.models.masked_reconstruction import (
    STRUCTURE_REDUCES,
    ETMaskedNodeReconstruction,
    random_node_mask,
)
from ..precision import quantile
from ..training import (
    CheckpointConfig,
    TrainConfig,
    Trainer,
    Validation,
    evaluates_model,
    private_rng,
)
from ..training.checkpoint import data_digest, fingerprint_with_data
from ..training.engine import dataclass_defaults
from .base import (
    BaseDetector,
    check_graph,
    column_range,
    warn_far_outside_fitted_range,
    warn_unused_edge_data,
)
from .config import HOPFIELD_KINDS, check_descent_settings
from .label_trick import edge_keys

#: The unsupervised ET scores; the last two need the edge decoder (``structure_weight > 0``).
ANOMALY_SCORES = ("reconstruction", "energy", "structure", "combined")
STRUCTURE_SCORES = ("structure", "combined")
#: How ``combined`` joins the reconstruction and structure scores: the mean or maximum of their
#: ranks, or the maximum or sum of their robust z-scores.
COMBINE_RULES = ("mean", "max", "max_z", "sum_z")
#: What each rule makes of the two scores, as run reports word it.
COMBINE_DESCRIPTIONS = {
    "mean": "mean of the reconstruction and structure ranks",
    "max": "max of the reconstruction and structure ranks",
    "max_z": "max of the reconstruction and structure robust z-scores (median, MAD)",
    "sum_z": "sum of the reconstruction and structure robust z-scores (median, MAD)",
}


@dataclass
class MaskedETModelConfig:
    """The masked-completion ET network (:class:`ETMaskedNodeReconstruction`).

    Attributes:
        hidden: token width D.
        heads: attention heads.
        head_dim: key/query width per head.
        hopfield_dim: Hopfield memories K (none = 4 * hidden).
        steps: ET descent steps T that complete the masked tokens.
        alpha: descent step size.
        hopfield: Hopfield energy, relu or softmax.
        noise_std: noise added to the tokens at each step in training.
        mask_ratio: share of the nodes masked in each training pass and scoring pass.
        structure_weight: weight of the edge-reconstruction loss beside the feature loss
            (0 = features only; above 0 adds the edge decoder and the structure scores).
    """

    hidden: int = 64
    heads: int = 1
    head_dim: int = 16
    hopfield_dim: Optional[int] = None
    steps: int = 2
    alpha: float = 1.0
    hopfield: str = "relu"
    noise_std: float = 0.0
    mask_ratio: float = 0.2
    structure_weight: float = 0.0

    def __post_init__(self) -> None:
        if not (self.structure_weight >= 0.0 and math.isfinite(self.structure_weight)):
            # inf passed here and ended as a "non-finite training loss" traceback
            raise ValueError(f"structure_weight must be a finite number >= 0, got "
                             f"{self.structure_weight}")
        if self.hopfield not in HOPFIELD_KINDS:
            raise ValueError(f"hopfield must be one of {HOPFIELD_KINDS}, got {self.hopfield!r}")
        for name in ("hidden", "heads", "head_dim", "steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        check_descent_settings(self.alpha, self.noise_std, self.hopfield_dim)
        check_mask_ratio(self.mask_ratio)


@dataclass
class MaskedTrainConfig(TrainConfig):
    """Training of the masked-completion ET: the engine's settings (:class:`TrainConfig`) plus
    the label-free validation nodes.

    Attributes:
        val_fraction: share of the nodes held out as reconstruction targets; the checkpoint is
            the epoch with the lowest masked reconstruction error on them (no label is read).
    """

    epochs: int = 300
    lr: float = 0.005
    val_fraction: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must lie strictly between 0 and 1, "
                             f"got {self.val_fraction}")


@dataclass
class UnsupervisedScoreConfig:
    """How the fitted network scores nodes.

    Attributes:
        anomaly_score: decision_function's score: reconstruction (masked completion error),
            energy (node energy at the final tokens), structure (edge reconstruction loss) or
            combined (the reconstruction and structure scores joined by combine); the last
            two need structure_weight > 0.
        structure_reduce: how the structure score pools a node's in-edge losses: mean, sum
            or max.
        combine: how combined joins the two scores: mean or max of their ranks (max: a node
            is as anomalous as its more anomalous rank, so an anomaly seen by one score only
            is not halved), or max_z / sum_z, the max / sum of their robust z-scores (a node
            far out on one score stays above one just inside the tail of the other).
        score_rounds: scoring rounds; each masks every node exactly once (ceil(1 / mask_ratio)
            passes), and the scores are averaged over the rounds.
        contamination: expected share of anomalies; predict flags the top share of the fitted
            graph's scores (PyGOD's convention). ``et-graph unsupervised`` reports ranking
            metrics only (AUROC, AUPRC, Rec@K), which it does not change: it sets what
            ``UnsupervisedETDetector.predict`` flags, and a preset keeps it for that.
    """

    anomaly_score: str = "reconstruction"
    structure_reduce: str = "mean"
    combine: str = "mean"
    score_rounds: int = 4
    contamination: float = 0.1

    def __post_init__(self) -> None:
        if self.anomaly_score not in ANOMALY_SCORES:
            raise ValueError(f"anomaly_score must be one of {ANOMALY_SCORES}, "
                             f"got {self.anomaly_score!r}")
        if self.structure_reduce not in STRUCTURE_REDUCES:
            raise ValueError(f"structure_reduce must be one of {STRUCTURE_REDUCES}, "
                             f"got {self.structure_reduce!r}")
        if self.combine not in COMBINE_RULES:
            raise ValueError(f"combine must be one of {COMBINE_RULES}, got {self.combine!r}")
        if self.score_rounds <= 0:
            raise ValueError(f"score_rounds must be positive, got {self.score_rounds}")
        if not 0.0 < self.contamination <= 0.5:  # PyGOD's range
            raise ValueError(f"contamination must lie in (0, 0.5], got {self.contamination}")


@dataclass
class UnsupervisedETDetectorConfig:
    """The config of :class:`UnsupervisedETDetector`: the network, its training and its scores.
    A structure or combined score, or a ``combine`` or ``structure_reduce`` other than the
    default, needs ``structure_weight > 0`` (``ValueError`` otherwise).

    Attributes:
        model: the masked-completion network (:class:`MaskedETModelConfig`).
        train: its training (:class:`MaskedTrainConfig`).
        score: how the fitted network scores nodes (:class:`UnsupervisedScoreConfig`).
    """

    model: MaskedETModelConfig = field(default_factory=MaskedETModelConfig)
    train: MaskedTrainConfig = field(default_factory=MaskedTrainConfig)
    score: UnsupervisedScoreConfig = field(default_factory=UnsupervisedScoreConfig)

    def __post_init__(self) -> None:
        if self.score.anomaly_score in STRUCTURE_SCORES and not self.model.structure_weight:
            raise ValueError(f"anomaly_score={self.score.anomaly_score!r} needs the edge "
                             "decoder: set structure_weight > 0")
        default = UnsupervisedScoreConfig()
        unread = [f"{name}={getattr(self.score, name)!r}"
                  for name in ("combine", "structure_reduce")
                  if getattr(self.score, name) != getattr(default, name)]
        if unread and not self.model.structure_weight:
            # They shape the structure and combined scores only, which need the edge decoder:
            # without it they were accepted, recorded, and read by nothing.
            raise ValueError(f"{', '.join(unread)} shape the structure score, which needs the "
                             "edge decoder: set structure_weight > 0, or leave them out")


def label_free_graph(data: Data) -> Data:
    """A new ``Data`` holding only ``x`` (in the networks' dtype, float32) and ``edge_index`` of
    ``data`` without self-loops, validated: what the unsupervised detectors see, so that no
    label or mask can reach them. (The attention skips self-loops, but the edge decoder read
    them as edges: the same graph with self-loops added moved its structure score by 0.11,
    while its digest called it the fitted graph, and the command, whose loader strips them,
    scored otherwise than the Python API: an unsupervised audit.)"""
    x, edge_index = check_graph(data)
    x = x.to(torch.get_default_dtype())  # float64 (from NumPy) or integer counts
    loops = edge_index[0] == edge_index[1]
    if bool(loops.any()):
        edge_index = edge_index[:, ~loops]
    return Data(x=x, edge_index=edge_index, num_nodes=x.size(0))


def graph_digest(graph: Data) -> str:
    """A short digest of a graph's features and edges, the edges as sorted unique keys: the
    same graph with its edges reordered, in another integer dtype or with self-loops added
    (none of which the detector reads), or with edges repeated, has the same digest. Repeated
    edges do move the scores (the layers read a multigraph's every edge, as PyG's do); the
    digest tells only whether the node set is the fitted one, among which the combined score
    ranks its nodes."""
    return data_digest(graph.x.float(), edge_keys(graph.edge_index, graph.num_nodes))


class MaskedReconstructionTask:
    """Loss and label-free validation of :class:`ETMaskedNodeReconstruction` for the engine.

    ``val_nodes`` (bool ``[N]``) are never masked in training, so they are never a training
    target; validation masks them, together with enough other nodes (drawn once) to reach the
    training mask ratio, and scores their mean completion error.

    Args:
        x: the node features ``[N, F]``.
        edge_index: the edges ``[2, E]``.
        val_nodes: bool ``[N]``: the validation nodes (at least one node in and one out,
            ``ValueError`` otherwise).
        mask_ratio: the share of the training nodes masked in each training pass.
        generator: the seeded generator of every random draw of the task.
        structure_weight: the weight of the edge-reconstruction loss (0 = features only).
    """

    def __init__(self, x: Tensor, edge_index: Tensor, val_nodes: Tensor, mask_ratio: float,
                 generator: torch.Generator, structure_weight: float = 0.0) -> None:
        self.x, self.edge_index = x, edge_index
        self.structure_weight = structure_weight
        self.num_nodes = x.size(0)
        self.val_nodes = val_nodes.cpu()
        self.train_nodes = ~self.val_nodes
        if not bool(self.train_nodes.any()) or not bool(self.val_nodes.any()):
            raise ValueError("masked training needs at least one training and one validation "
                             "node (the graph is too small for val_fraction)")
        self.mask_ratio = mask_ratio
        self.generator = generator
        extra = max(int(round(mask_ratio * self.num_nodes)) - int(self.val_nodes.sum()), 0)
        self.val_mask = self.val_nodes.clone()
        if extra:
            pool = self.train_nodes.nonzero().view(-1)
            pick = pool[torch.randperm(pool.numel(), generator=generator)[:extra]]
            self.val_mask[pick] = True

    def batches(self, epoch: int) -> Iterator[Tensor]:
        yield random_node_mask(self.num_nodes, self.mask_ratio, self.generator,
                               candidates=self.train_nodes)

    def loss(self, model: ETMaskedNodeReconstruction, mask: Tensor) -> Tensor:
        # With weight 0 the generator is never drawn from: runs without structure are unchanged.
        return model.loss(self.x, self.edge_index, mask, structure_weight=self.structure_weight,
                          generator=self.generator)

    def validate(self, model: ETMaskedNodeReconstruction) -> Validation:
        error = model.reconstruction_error(self.x, self.edge_index, self.val_mask)
        loss = float(error[self.val_nodes.to(error.device)].mean())
        return Validation(score=-loss, loss=loss, metrics={"masked_mse": loss})


def rank_score(score: Tensor) -> Tensor:
    """Ranks ``[N]`` in (0, 1] (ties broken by position), so that scores of unrelated scales
    can be averaged."""
    rank = torch.empty(score.numel(), dtype=torch.float64)
    rank[score.argsort(stable=True)] = torch.arange(1, score.numel() + 1, dtype=torch.float64)
    return rank / score.numel()


def robust_z(score: Tensor) -> Tensor:
    """``(score - median) / (1.4826 MAD)`` in float64: a z-score that the anomalies themselves
    (a heavy upper tail) barely move. Where the MAD is 0 (over half the scores equal), the mean
    absolute deviation from the median takes its place; a constant score gives zeros."""
    score = score.double()
    deviation = (score - score.median()).abs()
    scale = 1.4826 * float(deviation.median())
    if scale == 0.0:
        scale = 1.2533 * float(deviation.mean())  # the MAD's normal-consistent counterpart
    return (score - score.median()) / scale if scale > 0.0 else torch.zeros_like(score)


def combine_scores(reconstruction: Tensor, structure: Tensor, combine: str = "mean") -> Tensor:
    """The ``combined`` score: the mean or the maximum of the two scores' :func:`rank_score`
    ranks (``combine`` = ``"mean"`` / ``"max"``), or the maximum or sum of their
    :func:`robust_z` scores (``"max_z"`` / ``"sum_z"``).

    Args:
        reconstruction: the reconstruction score ``[N]``.
        structure: the structure score ``[N]``.
        combine: one of :data:`COMBINE_RULES` (anything else raises ``ValueError``).

    Returns:
        ``[N]`` float64.
    """
    if combine not in COMBINE_RULES:
        raise ValueError(f"combine must be one of {COMBINE_RULES}, got {combine!r}")
    if combine in ("max_z", "sum_z"):
        z = robust_z(reconstruction), robust_z(structure)
        return torch.maximum(*z) if combine == "max_z" else z[0] + z[1]
    ranks = rank_score(reconstruction), rank_score(structure)
    return (ranks[0] + ranks[1]) / 2 if combine == "mean" else torch.maximum(*ranks)


@torch.no_grad()
@evaluates_model
def masked_scores(model: ETMaskedNodeReconstruction, x: Tensor, edge_index: Tensor,
                  mask_ratio: float, rounds: int, generator: torch.Generator,
                  structure_reduce: str = "mean", combine: str = "mean"
                  ) -> dict[str, Tensor]:
    """``{"reconstruction": [N], "energy": [N]}`` (float64, CPU; with the edge decoder also
    ``"structure"`` and ``"combined"``): per round the nodes are split at random into
    ``ceil(1 / mask_ratio)`` masks; a node's reconstruction error is averaged over the passes in
    which it is masked, its final-token energy and structure error (its in-edge losses pooled by
    ``structure_reduce``) over those in which it is open. ``combined`` joins the
    reconstruction and structure scores by ``combine`` (:func:`combine_scores`). The passes run
    in eval mode; the model's mode is given back.

    Args:
        model: the fitted network.
        x: the node features ``[N, F]``.
        edge_index: the edges ``[2, E]``.
        mask_ratio: the share of the nodes in each mask (``ceil(1 / mask_ratio)`` masks per
            round, at least 2).
        rounds: the number of rounds.
        generator: the generator of the masks.
        structure_reduce: how a node's in-edge losses are pooled (``"mean"``, ``"sum"`` or
            ``"max"``).
        combine: one of :data:`COMBINE_RULES` (checked before any pass).
    """
    if combine not in COMBINE_RULES:  # before the passes, not after them (combine_scores)
        raise ValueError(f"combine must be one of {COMBINE_RULES}, got {combine!r}")
    num_nodes = x.size(0)
    parts = max(math.ceil(1.0 / check_mask_ratio(mask_ratio)), 2)
    sums: dict[str, Tensor] = {}
    open_count = torch.zeros(num_nodes, dtype=torch.float64)
    for _ in range(rounds):
        group = torch.empty(num_nodes, dtype=torch.long)
        group[torch.randperm(num_nodes, generator=generator)] = torch.arange(num_nodes) % parts
        for part in range(parts):
            mask = group == part
            if not bool(mask.any()):
                continue
            for name, value in model.scores(x, edge_index, mask, structure_reduce).items():
                value = value.cpu().double()
                total = sums.setdefault(name, torch.zeros(num_nodes, dtype=torch.float64))
                chosen = mask if name == "reconstruction" else ~mask
                total[chosen] += value[chosen]
            open_count[~mask] += 1
    out = {name: total / (rounds if name == "reconstruction" else open_count.clamp_min(1.0))
           for name, total in sums.items()}
    if "structure" in out:
        out["combined"] = combine_scores(out["reconstruction"], out["structure"], combine)
    return out


def _warn_uninformative(graph: Data, detector: str, linked: bool) -> None:
    """A ``DataWarning`` for graphs whose nodes the masked completion cannot tell apart
    (equal features everywhere: the scores then only reflect the random masks) or complete
    from nothing but the node itself (no edges: ``linked`` is whether an edge joins two
    nodes)."""
    x = graph.x
    if bool((x == x[:1]).all()):
        warnings.warn(f"{detector}: every node has the same features, so the scores differ "
                      "only by the random masks and rank the nodes arbitrarily",
                      DataWarning, stacklevel=user_stacklevel())
    # Self-loops are no neighbours: ET's attention skips them (a graph of self-loops alone
    # scored as one without edges, and said nothing).
    if not linked:
        warnings.warn(f"{detector}: the graph has no edges between two nodes (self-loops at "
                      "most), so the completion of a masked node "
                      "reads no neighbour (the detector works as a feature autoencoder)",
                      DataWarning, stacklevel=user_stacklevel())


class UnsupervisedETDetector(BaseDetector):
    """Energy Transformer node anomaly detector trained without labels (masked completion).

    ``fit(data)`` reads only ``data.x`` and ``data.edge_index``. ``decision_function`` gives the
    configured ``anomaly_score`` (``reconstruction``, ``energy``, and with the edge decoder
    ``structure`` or ``combined``); :meth:`score_components` gives all of them (float64, while
    ``decision_function`` returns float32 like every detector).
    ``threshold_`` is the ``1 - contamination`` quantile of the fitted graph's scores, and
    ``predict`` flags the scores strictly above it (PyOD's rule), so that tied scores never
    flag more than ``contamination`` of the nodes.

    Args:
        config: the detector's config (:class:`UnsupervisedETDetectorConfig`, default: its
            defaults).
        seed: seeds the initialisation, the validation nodes and the training masks; the
            scoring masks come from a generator seeded from it too.
        progress: show a progress bar while fitting.
        device: where the network trains and scores, as for
            :class:`~et_graph.detectors.BaseDetector`.
        chunk_size, chunk_edges: refused (only ``ETDetector`` scores in chunks).
        **keywords: any field of the config, e.g. ``epochs=50``, ``mask_ratio=0.3`` or
            ``anomaly_score="energy"``.

    Example:
        >>> det = UnsupervisedETDetector(epochs=50).fit(data)     # no data.y needed
        >>> score = det.decision_function(data)                    # [N], higher = anomalous
        >>> both = det.score_components(data)                   # reconstruction and energy
    """

    config_class = UnsupervisedETDetectorConfig
    config: UnsupervisedETDetectorConfig
    checkpoint: Optional[CheckpointConfig] = None
    #: Set by callers (a tuner) to watch every epoch.
    on_epoch = None

    def build_network(self, in_channels: int) -> ETMaskedNodeReconstruction:
        """The masked-completion network of the ``model`` section, with the edge decoder where
        ``structure_weight > 0``.

        Args:
            in_channels: the width of the fitted graph's ``data.x``.
        """
        m = self.config.model
        return ETMaskedNodeReconstruction(
            in_channels, hidden_channels=m.hidden, heads=m.heads, head_dim=m.head_dim,
            hopfield_dim=m.hopfield_dim, steps=m.steps, alpha=m.alpha, hopfield=m.hopfield,
            noise_std=m.noise_std, structure=m.structure_weight > 0)

    def fit(self, data: Data, train_mask: Optional[Tensor] = None,
            val_mask: Optional[Tensor] = None) -> UnsupervisedETDetector:
        """Fit on ``data`` without labels. ``train_mask``/``val_mask`` are not accepted: the
        validation nodes are drawn at random (``val_fraction``) and judged without labels.

        Args:
            data: the graph, of which only ``x`` and ``edge_index`` are used (self-loops
                dropped); at least 4 nodes, and with ``structure_weight > 0`` an edge between
                two nodes.
            train_mask, val_mask: must be ``None`` (``ValueError`` otherwise).

        Returns:
            The fitted detector itself.
        """
        if train_mask is not None or val_mask is not None:
            raise ValueError("UnsupervisedETDetector.fit takes no train_mask/val_mask (its "
                             "second argument; labels, PyGOD's fit(data, label), are not taken "
                             "either): it reads no labels and draws its own label-free "
                             "validation nodes")
        warn_unused_edge_data(data, type(self).__name__)
        graph = label_free_graph(data)
        if graph.num_nodes < 4:
            raise ValueError(f"unsupervised fitting needs at least 4 nodes, got {graph.num_nodes}")
        # whether an edge joins two nodes (self-loops are no neighbours to the attention)
        linked = bool((graph.edge_index[0] != graph.edge_index[1]).any())
        if self.config.model.structure_weight and not linked:
            # Refused here, not as "the structure loss needs at least one edge" mid-training
            raise ValueError("structure_weight > 0 trains an edge decoder, and this graph has no "
                             "edge between two nodes: set structure_weight=0")
        _warn_uninformative(graph, type(self).__name__, linked)
        # Unfitted until this fit ends, as BaseDetector.fit: an interrupted refit kept the
        # previous fit's scores, threshold and curves beside fitted_ = True.
        self.fitted_ = False
        self.threshold_ = self.decision_score_ = None
        self.history_, self.fit_info_ = [], {}
        # Kept for the combined score only, whose ranks are relative to the graph scored.
        self.fitted_graph_digest_ = (graph_digest(graph)
                                     if self.config.score.anomaly_score == "combined" else None)
        # Seeded for reproducibility, without resetting the caller's random stream.
        with private_rng(self.seed, self.device):
            self._train(graph)
        self.fitted_ = True
        self.scores_ = self.score_components(graph)
        self.feature_range_ = column_range(graph.x)
        self.decision_score_ = self.scores_[self.config.score.anomaly_score].float()
        contamination = self.config.score.contamination
        self.threshold_ = float(quantile(self.decision_score_.double(), 1.0 - contamination))
        flagged = float(self._flagged(self.decision_score_).float().mean())
        if flagged < contamination / 2:
            warnings.warn(
                f"{type(self).__name__}: the scores tie at the threshold, so predict flags "
                f"{flagged:.1%} of the fitted nodes instead of contamination={contamination} "
                "(the ranking in decision_function still holds)", FitWarning,
                stacklevel=user_stacklevel())
        return self

    def _is_fitted_graph(self, graph: Data) -> bool:
        """Whether ``graph`` (a :func:`label_free_graph`) is the one the combined score was
        fitted on (True when nothing was kept: another score, or nothing to compare)."""
        digest = getattr(self, "fitted_graph_digest_", None)
        if digest is not None:
            return graph_digest(graph) == digest
        # a file saved before the digest ignored edge order and dtype: its own recipe
        saved = getattr(self, "fitted_graph_", None)
        return saved is None or data_digest(graph.x, graph.edge_index) == saved

    def _flagged(self, score: Tensor) -> Tensor:
        # in the threshold's own precision (set by fit: predict checked that first)
        return score.double() > cast(float, self.threshold_)

    def _train(self, graph: Data) -> None:
        """Train the network on the label-free ``graph`` (under the seeded generators)."""
        self.in_channels_ = graph.num_features
        self.feature_range_ = None  # (set once the fitted graph is scored: not checked there)
        x, edge_index = graph.x.to(self.device), graph.edge_index.to(self.device)
        model = self.build_network(graph.num_features).to(self.device)
        generator = torch.Generator().manual_seed(self.seed)
        val_nodes = random_node_mask(graph.num_nodes, self.config.train.val_fraction, generator)
        task = MaskedReconstructionTask(x, edge_index, val_nodes, self.config.model.mask_ratio,
                                        generator, self.config.model.structure_weight)
        trainer = Trainer(self.config.train, checkpoint=self.checkpoint,
                          description=type(self).__name__, progress=self.progress,
                          generators=[generator], on_epoch=self.on_epoch,
                          fingerprint=fingerprint_with_data(f"{self.config!r}, seed={self.seed}",
                                                            self.checkpoint, graph.x,
                                                            graph.edge_index),
                          setting_defaults=dataclass_defaults(self.config))
        result = trainer.fit(model, task)
        self.model_ = model
        self.history_ = result.history
        self.fit_info_ = {**result.as_dict(), "num_val_nodes": int(val_nodes.sum())}

    def score_components(self, data: Data) -> dict[str, Tensor]:
        """``{"reconstruction": [N], "energy": [N]}`` (float64; plus ``"structure"`` and
        ``"combined"`` with ``structure_weight > 0``) for any graph with the fitted feature
        width; deterministic for a given detector seed and node numbering. The random masks
        are drawn over the node ids, so renumbering the nodes, or adding or removing any node,
        draws other masks for every node and moves the scores (as another seed would; more
        ``score_rounds`` average the masks out).

        Args:
            data: the graph to score, of which only ``x`` (the fitted width) and
                ``edge_index`` are used (self-loops dropped).
        """
        return self._score_components(data, check_range=True)

    def _score_components(self, data: Data, check_range: bool) -> dict[str, Tensor]:
        """:meth:`score_components`; ``check_range=False`` where the caller's
        ``_scorable`` has compared the features with the fitted range already (a review saw
        ``decision_function`` warn twice)."""
        if not self.fitted_:
            raise RuntimeError(f"{type(self).__name__} is not fitted yet: call fit(data) first")
        graph = label_free_graph(data)
        if graph.num_features != self.in_channels_:
            raise ValueError(
                f"data.x has {graph.num_features} features but the detector was fitted on "
                f"{self.in_channels_}; score graphs with the same feature columns")
        if check_range:
            warn_far_outside_fitted_range(graph.x, getattr(self, "feature_range_", None),
                                          type(self).__name__)
        if self.config.score.anomaly_score == "combined" and not self._is_fitted_graph(graph):
            warnings.warn(
                f"{type(self).__name__}: the combined score ranks (or robust-z-scores) the two "
                "scores among the nodes of the graph scored, so on another graph than the "
                "fitted one it is relative to that graph: threshold_ and predict, set on the "
                "fitted graph's scores, do not carry over; compare graphs by "
                "score_components()['reconstruction'] or ['structure']", ConfigWarning,
                stacklevel=user_stacklevel())
        # Its own generator: the scores do not depend on what was drawn before.
        generator = torch.Generator().manual_seed(self.seed + 1_000_003)
        try:
            return masked_scores(self.model_, graph.x.to(self.device),
                                 graph.edge_index.to(self.device), self.config.model.mask_ratio,
                                 self.config.score.score_rounds, generator,
                                 self.config.score.structure_reduce, self.config.score.combine)
        finally:  # what the layers kept of the scored graph would live as long as the detector
            clear_graph_caches(self.model_)

    def score_samples(self, data: Data) -> dict[str, Tensor]:
        """Deprecated name of :meth:`score_components`. scikit-learn's ``score_samples``
        returns one array where *higher means more normal*; this returns a dict of scores
        where higher means more anomalous, so the name misled."""
        warnings.warn(f"{type(self).__name__}.score_samples is renamed score_components (a "
                      "dict of anomaly scores, higher = more anomalous; scikit-learn's "
                      "score_samples means the opposite)", ETGraphDeprecationWarning,
                      stacklevel=user_stacklevel())
        return self.score_components(data)

    def _score(self, data: Data) -> Tensor:
        return self._score_components(data, check_range=False)[self.config.score.anomaly_score]

    def _probability(self, score: Tensor) -> Tensor:
        """``predict``'s ``prob``: the share of the fitted graph's scores below each score (a
        rank in [0, 1], not a calibrated probability)."""
        # (a detector loaded onto a GPU keeps its fitted scores there; decision_function's are
        # on the CPU)
        # (set by fit with the threshold: predict checked that first)
        reference = cast(Tensor, self.decision_score_).cpu().sort().values
        return torch.searchsorted(reference, score.cpu(), right=True).float() / reference.numel()
