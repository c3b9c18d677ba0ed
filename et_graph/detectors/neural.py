"""Neural node anomaly detectors (ET, MLP, GCN, GAT), all trained by the one engine.

:class:`NodeAnomalyTask` is what a node detector contributes to :class:`~et_graph.training.Trainer`:
the class-weighted BCE of the training nodes (paper eq. 12; full batch, or one induced subgraph
per epoch) and the validation score (the config's ``select_metric`` at the validation-chosen
threshold). Only training and validation labels are read.

With the *label trick* (``ETModelConfig.label_trick``; Wang et al., "Bag of Tricks for Node
Classification with Graph Neural Networks", 2021) the training labels of a node's in-neighbours
become 3 extra input columns (:func:`neighbour_label_features`). Each epoch the training nodes are
split at random (the task's seeded, checkpointed generator) into an *input* half, whose labels
feed the columns, and a *target* half, which alone carries the loss: a neighbour's aggregate can
carry a node's own label back over two hops, and this way no loss is taken on a label that is
also an input. Validation and scoring use every training label as input; validation and test
labels never enter.
"""
from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, Optional, TypeVar, Union, cast, overload

import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from ..baselines.node import GATNet, GCNNet, MLPNet
from ..callers import user_stacklevel
from ..exceptions import DataWarning, FitWarning
from ..loaders.neighbour_sampling import (
    NeighbourSampler,
    PygNeighbourSampler,
    make_sampler,
    parse_fanouts,
    resolve_sampler,
)
from ..nn.edge_cache import clear_graph_caches
from ..nn.models.anomaly import (
    ETAnomalyNet,
    auc_square_loss,
    graph_relations,
    relation_inputs,
    relation_names_of,
    weighted_bce_loss,
)
from ..precision import float64_on_host_if_needed
from ..protocols.anomaly import class_weight, macro_f1, validation_score
from ..training import CheckpointConfig, Trainer, Validation, rank_world
from ..training.checkpoint import fingerprint_with_data
from ..training.engine import dataclass_defaults, raise_explained
from ..transforms.features import check_feature_limit
from .base import BaseDetector
from .config import ETDetectorConfig, GNNDetectorConfig, NodeTrainConfig
from .label_trick import (
    NUM_LABEL_FEATURES,
    FittedGraphLabels,
    known_labels,
    neighbour_label_features,
)

if TYPE_CHECKING:
    from .unsupervised import UnsupervisedETDetector

#: ETDetector or a subclass of it, as its constructor builds it.
ETDetectorT = TypeVar("ETDetectorT", bound="ETDetector")


def on_device(data: Data, device: torch.device) -> Data:
    """``data`` on ``device`` without moving the caller's graph: PyG's ``Data.to`` moves the
    object's own tensors in place, so it acts on a shallow copy (no tensor is copied on the
    device ``data`` already lives on)."""
    return copy.copy(data).to(device)


#: How ETDetector validates and scores a graph too large for one pass.
CHUNK_HINT = ("chunk_size / chunk_edges (--inference-chunk-size / --inference-chunk-edges) to "
              "validate and score in bounded memory")


def check_node_logits(model: nn.Module, logits: Any, nodes: int) -> None:
    """``ValueError`` unless ``logits`` is one floating-point logit per node, ``[nodes]``: a
    network returning ``[N, 1]`` failed inside the loss on torch's "Target size ... must be the
    same as input size", naming neither the network nor the shape it needs (an audit).

    Args:
        model: the network that returned ``logits`` (its class is named in the message).
        logits: what it returned.
        nodes: the number of nodes it was given.
    """
    if (isinstance(logits, Tensor) and logits.shape == (nodes,)
            and logits.is_floating_point()):
        return
    got = (f"{'a tensor of ' + str(logits.dtype).replace('torch.', '') + ' of shape '}"
           f"{list(logits.shape)}" if isinstance(logits, Tensor) else type(logits).__name__)
    raise ValueError(f"{type(model).__name__} returned {got} for {nodes} nodes; a detector's "
                     f"network returns one floating-point logit per node, shape [{nodes}] (a "
                     "[N, 1] output: squeeze its last dimension)")


class NodeAnomalyTask:
    """Loss and validation of a node anomaly network ``model(x, edge_index[, node_ids])``.

    With ``label_trick`` the network's input is ``[x, neighbour_label_features]``: in training
    from a fresh random half of the training nodes each epoch (the loss on the other half), in
    validation from all training nodes.

    Args:
        data: the graph (``x``, ``edge_index``, and ``edge_type`` for a multi-relation
            network).
        y: the labels ``[N]`` (0/1); only those of the training and validation nodes are read.
        train, val: bool masks ``[N]`` of the training and the validation nodes.
        config: the training settings (loss weighting, batches, selection metric).
        generator: the seeded generator of every draw (the label trick's split, balanced
            targets, subgraphs, partitions and sampled batches).
        pass_node_ids: give the network each batch's node ids as its third argument where a
            batch has them (a positional network's per-node embeddings).
        device: where the labels and the batches go.
        label_trick: append the label-trick columns (:func:`neighbour_label_features`).
        chunking: the network's bounded-memory keywords for validation (``chunk_size``,
            ``chunk_edges``; ``None`` = none).
        label_trick_share: with ``label_trick``, the share of the training nodes whose labels
            feed the columns each epoch (:meth:`split_train`).
    """

    def __init__(self, data: Data, y: Tensor, train: Tensor, val: Tensor,
                 config: NodeTrainConfig, generator: torch.Generator, pass_node_ids: bool,
                 device: torch.device, label_trick: bool = False,
                 chunking: Optional[dict[str, int]] = None,
                 label_trick_share: float = 0.5) -> None:
        self.data = data
        self.y = y.to(device)
        self.y_val = y[val].numpy()
        self.labels = y.cpu()
        self.train_index = train.nonzero().view(-1)
        self.val_index = val.nonzero().view(-1)
        self.config = config
        self.generator = generator
        self.pass_node_ids = pass_node_ids
        self.pos_weight = class_weight(y[train])
        # With class-balanced sampling the training loss sees both classes equally often, so it
        # is not weighted, nor under "none"; validation still reports the weighted loss,
        # comparable across runs.
        self.train_pos_weight = (self.pos_weight if config.class_balance == "weight" else 1.0)
        self.device = device
        self.label_trick = label_trick
        self.label_trick_share = label_trick_share
        # the network's bounded-memory keywords (chunk_size, chunk_edges) for validation
        self.chunking = dict(chunking or {})
        self.eval_x = data.x
        self._cpu_edge_index: Optional[Tensor] = None
        self.sampler = None
        fanouts = parse_fanouts(config.num_neighbors)
        if fanouts:
            self.sampler = make_sampler(config.neighbor_sampler, data.edge_index, data.num_nodes,
                                        fanouts)
        if label_trick:
            labels = known_labels(self.y, self.train_index.to(device))
            self.eval_x = torch.cat(
                [data.x, neighbour_label_features(data.edge_index, labels).to(data.x.dtype)],
                dim=-1)

    @property
    def cpu_edge_index(self) -> Tensor:
        """The host copy of the edges that subgraph and partition batches index, made once (a
        GPU graph's edges were copied to the host every epoch: 1.2 GB for T-Social's)."""
        if self._cpu_edge_index is None:
            self._cpu_edge_index = self.data.edge_index.cpu()
        return self._cpu_edge_index

    def split_train(self) -> tuple[Tensor, Tensor]:
        """The label trick's draw: ``(input nodes, target nodes)``, ``label_trick_share`` of
        the training nodes and the rest (at the default 0.5 two halves, the target half getting
        the extra node of an odd count; each part keeps at least one node)."""
        train = self.train_index
        order = torch.randperm(train.numel(), generator=self.generator)
        inputs = min(max(int(train.numel() * self.label_trick_share), 1), train.numel() - 1)
        return train[order[:inputs]].sort().values, train[order[inputs:]].sort().values

    def train_input(self) -> tuple[Tensor, Tensor]:
        """``(x, target nodes)`` of one training epoch: ``data.x`` and every training node, or
        with the label trick the input half's label columns appended and the target half; with
        ``class_balance="sample"`` the targets are then drawn down to equal class counts."""
        if not self.label_trick:
            return self.data.x, self.balanced(self.train_index)
        inputs, targets = self.split_train()
        labels = known_labels(self.y, inputs.to(self.device))
        x = torch.cat(
            [self.data.x,
             neighbour_label_features(self.data.edge_index, labels).to(self.data.x.dtype)],
            dim=-1)
        return x, self.balanced(targets)

    def balanced(self, targets: Tensor) -> Tensor:
        """``targets`` (sorted node ids) as they are, or with ``class_balance="sample"`` every
        node of the rarer class among them and as many of the other, drawn afresh from the
        task's generator (so a resumed run draws the same), sorted."""
        if self.config.class_balance != "sample":
            return targets
        labels = self.labels[targets]
        anomalous, normal = targets[labels == 1], targets[labels == 0]
        count = min(anomalous.numel(), normal.numel())
        if count == 0:  # one class only among the targets: nothing to balance
            return targets
        keep = [group[torch.randperm(group.numel(), generator=self.generator)[:count]]
                for group in (anomalous, normal)]
        return torch.cat(keep).sort().values

    def batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor, Optional[Tensor], Tensor]]:
        """One batch per epoch: the full graph (each DDP rank scoring its shard of the training
        nodes) or an induced subgraph on ``subgraph_ratio`` of the nodes (other ranks draw other
        nodes); in a subgraph only its training nodes carry a loss."""
        data, ratio = self.data, self.config.subgraph_ratio
        rank, world = rank_world()
        x, targets = self.train_input()
        if self.sampler is not None:
            yield from self.neighbour_batches(x, targets, rank, world)
            return
        if self.config.batch_size:
            yield from self.partition_batches(x, targets, rank, world)
            return
        if ratio <= 0:
            train = targets
            if world > 1:
                order = torch.randperm(train.numel(), generator=self.generator)
                train = train[order][rank::world]
            yield x, data.edge_index, None, train.to(self.device)
            return
        num_nodes = data.num_nodes
        count = max(int(round(ratio * num_nodes)), 2)
        perm = torch.randperm(num_nodes, generator=self.generator)
        # each rank its own window of the permutation, wrapping around (past 1/world of the
        # nodes every rank took the first window, the same subgraph: a DDP audit); rank 0's
        # window is the single-process one
        lo = rank * num_nodes // world
        nodes = perm.roll(-lo)[:count].sort().values
        edge_index, _ = subgraph(nodes, self.cpu_edge_index, relabel_nodes=True,
                                 num_nodes=num_nodes)
        is_train = torch.zeros(num_nodes, dtype=torch.bool)
        is_train[targets] = True
        local = is_train[nodes].nonzero().view(-1)
        yield (x[nodes.to(x.device)], edge_index.to(self.device),
               nodes.to(self.device), local.to(self.device))

    def neighbour_batches(self, x: Tensor, targets: Tensor, rank: int, world: int
                          ) -> Iterator[tuple[Tensor, Tensor, Optional[Tensor], Tensor]]:
        """Neighbour-sampled batches of ``batch_size`` training (seed) nodes each, the loss on
        the seeds only. The seed order is drawn from the task's checkpointed generator (the same
        on every rank); the sampling draws from a generator seeded by one more draw plus the
        rank, so under DDP rank ``r`` takes batches ``r, r + world, ...`` (every rank the same
        count, wrapping) and samples independently of the other ranks.

        Args:
            x: the epoch's node input (the ``x`` of :meth:`train_input`).
            targets: the epoch's target nodes (sorted ids).
            rank, world: this process's rank and the number of processes (``0, 1`` outside
                torch.distributed).
        """
        size = self.config.batch_size
        seeds = targets.cpu()[torch.randperm(targets.numel(), generator=self.generator)]
        draw = int(torch.randint(2 ** 62, (1,), generator=self.generator))
        sampling = torch.Generator().manual_seed(draw + rank)
        count = (seeds.numel() + size - 1) // size
        # (batches calls this only with a sampler, which num_neighbors makes)
        sampler = cast(Union[NeighbourSampler, PygNeighbourSampler], self.sampler)
        for k in range((count + world - 1) // world):
            b = (rank + k * world) % count
            batch = sampler.sample(seeds[b * size:(b + 1) * size], sampling)
            nodes = batch.nodes.to(x.device)
            yield (x[nodes], batch.edge_index.to(self.device), nodes.to(self.device),
                   torch.arange(batch.num_seeds, device=self.device))

    def partition_batches(self, x: Tensor, targets: Tensor, rank: int, world: int
                          ) -> Iterator[tuple[Tensor, Tensor, Optional[Tensor], Tensor]]:
        """Random node partitions of ``batch_size`` nodes, one induced subgraph each. The edges
        are grouped by part with one sort per epoch (no pass over all edges per batch). Under
        DDP rank ``r`` takes parts ``r, r + world, ...``, every rank the same count (wrapping).

        Args:
            x: the epoch's node input (the ``x`` of :meth:`train_input`).
            targets: the epoch's target nodes (sorted ids).
            rank, world: this process's rank and the number of processes (``0, 1`` outside
                torch.distributed).
        """
        data, size = self.data, self.config.batch_size
        num_nodes = data.num_nodes
        perm = torch.randperm(num_nodes, generator=self.generator)
        part = torch.empty(num_nodes, dtype=torch.long)
        part[perm] = torch.arange(num_nodes) // size
        position = torch.empty(num_nodes, dtype=torch.long)
        position[perm] = torch.arange(num_nodes) % size
        edge_index = self.cpu_edge_index
        edge_part = part[edge_index[0]]
        inside = edge_part == part[edge_index[1]]
        edge_index, edge_part = edge_index[:, inside], edge_part[inside]
        order = torch.argsort(edge_part, stable=True)
        edge_index = edge_index[:, order]
        parts = (num_nodes + size - 1) // size
        ptr = torch.cat([torch.zeros(1, dtype=torch.long),
                         torch.bincount(edge_part, minlength=parts).cumsum(0)])
        is_target = torch.zeros(num_nodes, dtype=torch.bool)
        is_target[targets.cpu()] = True
        per_rank = (parts + world - 1) // world
        for k in range(per_rank):
            p = (rank + k * world) % parts
            nodes = perm[p * size:(p + 1) * size]
            local_edges = position[edge_index[:, ptr[p]:ptr[p + 1]]]
            local = is_target[nodes].nonzero().view(-1)
            yield (x[nodes.to(x.device)], local_edges.to(self.device), nodes.to(self.device),
                   local.to(self.device))

    def loss(self, model: nn.Module, batch: Any) -> Optional[Tensor]:
        x, edge_index, node_ids, local = batch
        if local.numel() == 0 and rank_world()[1] == 1:
            # A subgraph without training nodes: no step (nor a forward pass). Under DDP the
            # zero loss below keeps the ranks' gradient all-reduces in step.
            return None
        # The multi-relation ET trains full batch only (ETDetectorConfig), so these edge types
        # are the full graph's and line up with edge_index.
        relations = relation_inputs(model, self.data)
        logits = model(x, edge_index, node_ids, **relations) if (
            self.pass_node_ids and node_ids is not None) else model(x, edge_index, **relations)
        check_node_logits(model, logits, x.size(0))
        if local.numel() == 0:
            return logits.sum() * 0.0
        target = self.y[local if node_ids is None else node_ids[local]]
        loss = weighted_bce_loss(logits[local], target, self.train_pos_weight)
        if self.config.auc_loss_weight:
            loss = loss + self.config.auc_loss_weight * auc_square_loss(logits[local], target)
        return loss

    def validate(self, model: nn.Module) -> Validation:
        extra = {**self.chunking, **relation_inputs(model, self.data)}
        logits = model(self.eval_x, self.data.edge_index, **extra)[self.val_index.to(self.device)]
        prob = torch.sigmoid(logits).cpu().double().numpy()
        score, threshold = validation_score(self.y_val, prob, self.config.select_metric)
        loss = float(weighted_bce_loss(logits.cpu(), torch.from_numpy(self.y_val),
                                       self.pos_weight))
        return Validation(
            score=score,
            loss=loss,
            # every metric a tuner may maximise, so that its pruner reads the curve it tunes
            metrics={"auroc": float(roc_auc_score(self.y_val, prob)),
                     "auprc": float(average_precision_score(self.y_val, prob)),
                     "f1_macro": macro_f1(self.y_val, prob, threshold)},
            extra={"threshold": threshold},
        )


#: Feature magnitudes and column-scale ratios above which a neural detector warns, and the
#: magnitude at which it refuses (a float32 network's products overflow near 1e19).
RAW_SCALE_LIMIT = 1e3
HOPELESS_SCALE = 1e15


def check_feature_scales(x: Tensor, detector: str) -> None:
    """A ``ValueError`` for features no float32 network can take (beyond 1e15), and a
    ``DataWarning`` for features on raw scales (an amount in the thousands beside a ratio
    near 1): a network trains poorly on them (Tolokers-like data with one column times
    1e4 gave ET an AUROC of 0.38 raw, 0.99 quantile-transformed), while ``et-graph anomaly``
    transforms every column by default. Trees do not care, so GBT does not warn.

    Args:
        x: the node features ``[N, F]`` (nothing is checked where some are NaN or inf).
        detector: the detector's name in the messages.
    """
    x = float64_on_host_if_needed(x.detach())
    if x.numel() == 0 or not bool(torch.isfinite(x).all()):
        return
    spread = x.std(0, unbiased=False) if x.size(0) > 1 else x.abs()[0]
    largest = float(x.abs().max())
    # The ET layer would refuse them later with advice (layer.double()) that a detector's or
    # the command line's user cannot take.
    check_feature_limit(x, HOPELESS_SCALE, f"{detector}: data.x",
                        "beyond what a float32 network can train on")
    varying = spread[spread > 0]
    ratio = float(varying.max() / varying.min()) if varying.numel() else 1.0
    if largest > RAW_SCALE_LIMIT or ratio > RAW_SCALE_LIMIT:
        warnings.warn(
            f"{detector}: the features look raw (largest |x| {largest:.3g}, column spreads "
            f"differing by a factor {ratio:.3g}); networks train poorly on such scales. "
            "Transform them first, as et-graph anomaly does, with one transform fitted on the "
            "training graph and applied to every graph scored: transform = et_graph.transforms."
            "FeatureTransform('quantile').fit(data) (or 'standard'), then fit and score "
            "transform.transform(graph).",
            DataWarning, stacklevel=user_stacklevel())


class NeuralDetector(FittedGraphLabels, BaseDetector):
    """A network trained by :class:`NodeAnomalyTask`; subclasses build the network.

    After ``fit``: ``model_`` (the network with the best validation epoch's weights),
    ``history_`` (one row per epoch), ``fit_info_`` (best epoch, epoch time, ...).

    Args:
        config, seed, progress, device, chunk_size, chunk_edges, **keywords: as for
            :class:`~et_graph.detectors.BaseDetector`. A subclass sets ``config_class`` and
            defines :meth:`build_network` (this class has no config class: building it raises
            ``TypeError``).
    """

    #: Set by callers (a tuner) to watch every epoch.
    on_epoch = None
    #: Score (and validate) ``chunk_size`` destination nodes at a time in bounded memory
    #: (ETDetector only; ``None`` = one full pass).
    chunk_size: Optional[int] = None
    #: With chunks: at most this many in-edges per chunk (ETDetector only; ``None`` = no cap).
    chunk_edges: Optional[int] = None
    checkpoint: Optional[CheckpointConfig] = None
    #: Set by the runner for a registered detector: its factory and code (the plugin file's
    #: SHA-256), which join the checkpoint's fingerprint (its config does not show its network).
    checkpoint_identity: str = ""

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        """A new network for ``in_channels`` input features (and ``num_nodes`` nodes, for the
        networks that need it) that returns one logit per node, ``[N]``: what a subclass
        defines.

        Args:
            in_channels: the width of the fitted graph's ``data.x``.
            num_nodes: the fitted graph's number of nodes.

        Returns:
            The network (``fit`` moves it to the detector's device).
        """
        raise NotImplementedError

    def _oom_hint(self) -> str:
        """What an out-of-memory error in training or validation should suggest here."""
        hint = ("train on mini-batches: pass batch_size (--batch-size) with num_neighbors "
                "(--num-neighbors, neighbour sampling: the mode for large sparse graphs), or "
                "batch_size alone (random node partitions)"
                if not self.config.train.batch_size else
                f"pass a smaller batch_size than {self.config.train.batch_size} (--batch-size)")
        if getattr(self, "supports_chunks", False):
            hint += f", and to validate and score, {self._chunk_advice()}"
        return hint

    def _chunk_advice(self) -> str:
        """``chunk_size``'s advice, for the values already set too (the advice to pass them
        was given to a run that had: a scale audit)."""
        chunks = self.chunking()
        if not chunks:
            return CHUNK_HINT
        return ("smaller chunks than " + ", ".join(f"{k}={v}" for k, v in chunks.items())
                + " (--inference-chunk-size / --inference-chunk-edges); below some size the "
                "graph's own per-node and per-edge arrays set a floor no chunk size goes "
                "under (docs/scale.md)")

    def _validation_oom_hint(self) -> str:
        """What an out-of-memory error in the (full-graph) validation pass should suggest."""
        if getattr(self, "supports_chunks", False):
            return f"pass {self._chunk_advice()}"
        # A smaller batch_size, the training advice, cannot shrink this pass (an audit).
        return (f"{self._name} validates and scores the whole graph in one pass, "
                "whatever the batch size; only ETDetector validates and scores in chunks "
                "(chunk_size), or use a machine with more memory")

    def chunking(self) -> dict[str, int]:
        """The network's bounded-memory scoring keywords: ``chunk_size`` and ``chunk_edges``
        where set (empty: one full pass)."""
        return {name: value for name in ("chunk_size", "chunk_edges")
                if (value := getattr(self, name)) is not None}

    def _prepare(self, data: Data, dtype: Optional[torch.dtype] = None) -> Data:
        """A shallow copy whose features are in the network's dtype: features from NumPy often
        come as float64 (or as integer counts), which the layers would refuse. That is the
        fitted network's own dtype, not the default dtype of the moment: a process that set
        ``torch.set_default_dtype(torch.float64)`` after the fit (or before it, and back) made
        every score fail on a dtype mismatch. (A ``dtype`` given is used as BaseDetector's
        own; no caller here gives one.)"""
        if dtype is None:
            model = getattr(self, "model_", None)
            dtype = (next(model.parameters()).dtype if model is not None and self.fitted_
                     else torch.get_default_dtype())  # fit builds the network in this one
        return super()._prepare(data, dtype)

    @property
    def label_trick(self) -> bool:
        """Whether the network reads the neighbours' training labels (ET's ``label_trick``)."""
        return bool(getattr(self.config.model, "label_trick", False))

    def _fit(self, data: Data, y: Tensor, train: Tensor, val: Tensor) -> None:
        # BaseDetector.fit runs this under private_rng(self.seed): torch and NumPy are seeded.
        check_feature_scales(data.x, self._name)
        data = on_device(data, self.device)
        model = self.build_network(data.num_features, data.num_nodes).to(self.device)
        train_config: NodeTrainConfig = self.config.train
        generator = torch.Generator().manual_seed(self.seed)
        self.train_labels_ = known_labels(y, train) if self.label_trick else None
        transductive = self.label_trick or getattr(model, "positional", None) is not None
        self._remember_fitted_graph(data, edges=transductive)
        task = NodeAnomalyTask(data, y, train, val, train_config, generator,
                               getattr(model, "positional", None) is not None, self.device,
                               label_trick=self.label_trick, chunking=self.chunking(),
                               label_trick_share=float(getattr(self.config.model,
                                                               "label_trick_share", 0.5)))
        # With checkpoints, the data too: a resume with another split or other features must
        # not score a model that may have trained on the new test nodes. (The seed too: a
        # resume under another seed went on with the first seed's run.)
        same_runs = self._same_runs(fingerprint_with_data(
            "", self.checkpoint, data.x, data.edge_index, y, train, val))
        trainer = Trainer(
            train_config,
            checkpoint=self.checkpoint,
            description=self._name,
            progress=self.progress,
            generators=[generator],
            on_epoch=self.on_epoch,
            fingerprint=same_runs[0][1], aliases=same_runs[1:],
            setting_defaults=dataclass_defaults(self.config),
            oom_hint=self._oom_hint(), validation_oom_hint=self._validation_oom_hint())
        result = trainer.fit(model, task)
        self.model_ = model
        self.history_ = result.history
        self.fit_info_ = result.as_dict()

    def _same_runs(self, data_digest: str) -> list[tuple[NodeTrainConfig, str]]:
        """The run's training settings and checkpoint fingerprint, then the same run's under
        the other name of its neighbour sampler (``"builtin"`` where ``"auto"`` picks it, and
        back): a resume that spelt the same sampler another way was refused (a scale audit)."""
        train = self.config.train
        names = [train.neighbor_sampler]
        if train.num_neighbors:
            picked = resolve_sampler(train.neighbor_sampler)
            names += [name for name in ("auto", picked)
                      if name not in names and resolve_sampler(name) == picked]
        runs = []
        for name in names:
            config = dataclasses.replace(
                self.config, train=dataclasses.replace(train, neighbor_sampler=name))
            runs.append((config.train, f"{config!r}, seed={self.seed}"
                         + (f", {self.checkpoint_identity}" if self.checkpoint_identity else "")
                         + _picked_sampler(config.train) + data_digest))
        return runs

    def network_input(self, data: Data) -> Tensor:
        """The network's node input for ``data``: ``data.x``, or with the label trick
        ``[data.x, neighbour_label_features]``. On the fitted graph (the same number of nodes
        and the same ``edge_index``) the label columns come from the training labels remembered
        by ``fit`` (never from ``data.y``); on any other graph no label is known and the columns
        are zero.

        Args:
            data: the graph (``x`` and ``edge_index``).

        Returns:
            ``[N, F]``, or ``[N, F + 3]`` with the label trick, on the detector's device.
        """
        x = data.x.to(self.device)
        if not self.label_trick:
            return x
        columns = self.label_columns(data, self.device)
        return torch.cat([x, columns.to(x.dtype)], dim=-1)

    def _check_transductive(self, data: Data) -> None:
        """Refuse another graph for a positional network: a graph with the same number of nodes
        would silently get the fitted graph's per-node embeddings on unrelated nodes."""
        if (getattr(self.model_, "positional", None) is not None
                and self.fit_edge_index_ is not None  # files saved before the check: as then
                and not self._is_fitted_graph(data)):
            raise ValueError(
                f"{self._name} was fitted with positional=True: its embeddings belong "
                "to the nodes of the fitted graph (transductive), and this graph is another one "
                "(other edges); score the fitted graph, or fit without positional")

    def _check_relations(self, data: Data) -> None:
        """The scored graph's relation ids must mean the fitted ones: they index per-relation
        weights, so another order would swap them silently. Names on both sides are compared;
        a side without names is warned about (its ids cannot be checked)."""
        if not getattr(getattr(self.config, "model", None), "multi_relation", False):
            return
        if getattr(data, "edge_type", None) is None:
            return  # the network refuses the graph, with the remedy (a warning first was noise)
        fitted = getattr(self, "relation_names_", None)
        given = relation_names_of(data)
        if fitted is not None and given is not None:
            if [str(n) for n in given] != fitted:
                raise ValueError(f"this graph's relations are {list(given)}, and the detector "
                                 f"was fitted on {fitted} (the ids must mean the same "
                                 "relations, in the same order)")
        elif fitted is not None or given is not None:
            # (fitted may be [], falsy: a graph without edges; list(None) failed here)
            # (given is set where fitted is None)
            named = (f"fitted {fitted}" if fitted is not None
                     else f"given {list(cast(list[str], given))}")
            warnings.warn(f"{self._name}: the relation ids cannot be checked (names "
                          f"{named}"
                          ", none on the other side): edge_type must number the relations as "
                          "in the fitted graph", DataWarning, stacklevel=user_stacklevel())

    @torch.no_grad()
    def _score(self, data: Data) -> Tensor:
        model, args, keywords = self._network_call(data)
        try:
            return torch.sigmoid(model(*args, **self.chunking(), **keywords))
        except RuntimeError as error:  # (a raw allocator error, unlike training's: an audit)
            raise_explained(error, self._validation_oom_hint(), "scoring")
        finally:  # a fitted detector held the scored graph's operators (graph-sized) after it
            clear_graph_caches(self.model_)

    def _network_call(self, data: Data) -> tuple[nn.Module, tuple[Tensor, Tensor],
                                                 dict[str, Tensor]]:
        self._check_transductive(data)
        self._check_relations(data)
        self.model_.eval()
        data = on_device(data, self.device)
        return (self.model_, (self.network_input(data), data.edge_index),
                relation_inputs(self.model_, data))

    def explanation_inputs(self, data: Data) -> tuple[nn.Module, tuple[Tensor, Tensor],
                                                      dict[str, Tensor]]:
        """``(model, args, keywords)``: the fitted network (in eval mode) and what it takes to
        score ``data``, so that ``torch.sigmoid(model(*args, **keywords))`` is
        :meth:`decision_function` (up to float rounding) and PyG's ``Explainer`` explains it:
        ``explainer(*args, **keywords, index=node)``. ``args`` are the network's input
        (:meth:`network_input`: the label trick's columns included) and ``edge_index``;
        ``keywords`` hold ``edge_type`` for the multi-relation ET. The network's edge mask
        covers every path the edges take inside it (the attention, the readout's neighbour
        means, the message-passing layers), not input columns computed from the edges before
        it (the degree feature, neighbour statistics, the label trick's columns).

        Args:
            data: the graph to explain, checked and prepared as :meth:`decision_function`
                checks and prepares it (the fitted detector's feature width).
        """
        return self._network_call(self._scorable(data))


class ETDetector(NeuralDetector):
    """Energy Transformer node anomaly detector (supervised, paper eqs. 10-12).

    With ``label_trick=True`` the network reads 3 more input columns (the neighbours' training
    labels, see :func:`neighbour_label_features`); :meth:`network_input` gives its input for a
    graph. Scoring the graph it was fitted on uses the training labels from ``fit``; scoring
    another graph (inductive use) sets those columns to zero, as no label is known there.

    ``ETDetector(supervised=False, ...)`` returns an
    :class:`~et_graph.detectors.UnsupervisedETDetector` (masked completion, no label read), and
    ``ETDetector.load`` reads such a detector's file back as one; fitting a supervised
    ETDetector on a graph without ``data.y`` raises a ``ValueError`` that points there. (pyright
    types ``ETDetector(supervised=False)`` as the unsupervised detector; mypy takes the class
    whatever ``__new__`` returns, and neither can tell what a file holds: in checked code,
    build and load ``UnsupervisedETDetector`` by its own name.)

    Args:
        config: the detector's config (:class:`~et_graph.detectors.ETDetectorConfig`, default:
            its defaults).
        seed: seeds the initialisation and the training order.
        progress: show a progress bar while fitting.
        device: where the network trains and scores (``"cpu"``, ``"cuda"``, ..., or ``"auto"``:
            CUDA where torch sees a GPU, else the CPU).
        chunk_size: validate and score this many destination nodes at a time, in bounded
            memory, with the same result as one full pass (``None`` = full pass). Refused with
            ``multi_relation``.
        chunk_edges: also cap each chunk's in-edges (a node with more is a chunk alone), so
            that hubs cannot blow up a chunk; alone, it implies chunks of at most 65,536 nodes.
            Refused with ``multi_relation``.
        supervised: ``False`` returns an :class:`~et_graph.detectors.UnsupervisedETDetector`
            built from the other arguments instead (its own config and settings; it refuses
            chunk sizes).
        **keywords: any field of the config, e.g. ``epochs=50`` or ``hidden=32``.

    Example:
        >>> det = ETDetector(epochs=50, hidden=32).fit(data)   # data.train_mask / val_mask
        >>> pred, score = det.predict(data, return_score=True)
    """

    config_class = ETDetectorConfig
    config: ETDetectorConfig
    model_: ETAnomalyNet  # (build_network's)
    supports_chunks = True
    #: After ``fit`` with ``multi_relation``: the number of relations of the fitted graph.
    num_relations_: Optional[int] = None
    #: ... and their names (``data.relation_names``), which a scored graph must share.
    relation_names_: Optional[list[str]] = None

    # The overloads type ETDetector(...) as ETDetector (supervised=False: the unsupervised
    # detector); with `-> Any` alone, pyright and Pylance saw every ETDetector as Any (a
    # typing audit). mypy refuses a __new__ returning another class, hence the ignore.
    @overload
    def __new__(cls: type[ETDetectorT], config: Optional[ETDetectorConfig] = None, *,
                seed: int = 0, progress: bool = False, device: Union[str, torch.device] = "cpu",
                chunk_size: Optional[int] = None, chunk_edges: Optional[int] = None,
                supervised: Literal[True] = True, **keywords: Any) -> ETDetectorT: ...

    @overload
    def __new__(cls, config: Any = None, *, seed: int = 0,  # type: ignore[misc]
                progress: bool = False, device: Union[str, torch.device] = "cpu",
                chunk_size: Optional[int] = None, chunk_edges: Optional[int] = None,
                supervised: Literal[False], **keywords: Any) -> UnsupervisedETDetector: ...

    @overload
    def __new__(cls, config: Any = None, *, seed: int = 0,  # type: ignore[misc]
                progress: bool = False, device: Union[str, torch.device] = "cpu",
                chunk_size: Optional[int] = None, chunk_edges: Optional[int] = None,
                supervised: bool = True, **keywords: Any
                ) -> Union[ETDetector, UnsupervisedETDetector]: ...

    def __new__(cls, *args: Any, supervised: bool = True, **keywords: Any) -> Any:
        if not supervised:
            from .unsupervised import UnsupervisedETDetector

            return UnsupervisedETDetector(*args, **keywords)
        return super().__new__(cls)

    def __init__(self, config: Optional[ETDetectorConfig] = None, *, seed: int = 0,
                 progress: bool = False, device: Union[str, torch.device] = "cpu",
                 chunk_size: Optional[int] = None, chunk_edges: Optional[int] = None,
                 supervised: bool = True, **keywords: Any) -> None:
        super().__init__(config, seed=seed, progress=progress, device=device,
                         chunk_size=chunk_size, chunk_edges=chunk_edges, **keywords)
        if self.config.model.multi_relation and self.chunking():
            raise ValueError(MULTI_RELATION_CHUNKS)  # here, not once the graph is in fit

    @classmethod
    def _accepts(cls, detector: Any) -> bool:
        # ETDetector(supervised=False) builds an UnsupervisedETDetector, so ETDetector.load
        # reads its files back too.
        from .unsupervised import UnsupervisedETDetector

        return isinstance(detector, (cls, UnsupervisedETDetector))

    def _fit(self, data: Data, y: Tensor, train: Tensor, val: Tensor) -> None:
        self.num_relations_ = None
        if self.config.model.multi_relation:
            if self.chunking():  # (chunks set after construction)
                raise ValueError(MULTI_RELATION_CHUNKS)
            self.num_relations_ = graph_relations(data)
            self.relation_names_ = relation_names_of(data)
            counts = torch.bincount(data.edge_type.view(-1).long().cpu(),
                                    minlength=self.num_relations_)
            empty = [self.relation_names_[i] if self.relation_names_ else str(i)
                     for i in range(self.num_relations_) if counts[i] == 0]
            if empty:
                warnings.warn(f"{self._name}: relation(s) {empty} have no edge in the "
                              "fitted graph, so their keys and queries stay untrained; edges "
                              "of them in a scored graph would meet random weights",
                              FitWarning, stacklevel=user_stacklevel())
        super()._fit(data, y, train, val)

    def build_network(self, in_channels: int, num_nodes: int) -> ETAnomalyNet:
        """The network for ``in_channels`` raw features (plus the label columns with
        ``label_trick``); with ``multi_relation`` a per-relation attention over the relations
        of the graph being fitted.

        Args:
            in_channels: the width of ``data.x``, without the label columns (added here).
            num_nodes: the fitted graph's number of nodes: the size of the per-node embedding
                with ``positional``, unused otherwise.
        """
        m = self.config.model
        if m.label_trick:
            in_channels += NUM_LABEL_FEATURES
        return ETAnomalyNet(
            in_channels, hidden_channels=m.hidden, heads=m.heads, head_dim=m.head_dim,
            hopfield_dim=m.hopfield_dim, steps=m.steps, alpha=m.alpha, hopfield=m.hopfield,
            noise_std=m.noise_std, num_nodes=num_nodes if m.positional else None,
            positional=m.positional, dropout=m.dropout, readout=m.readout,
            num_relations=self.num_relations_, blocks=m.blocks,
            message_passing_layers=m.message_passing_layers,
        )

    @torch.no_grad()
    def node_energy(self, data: Data) -> Tensor:
        """Each node's energy ``[N]`` at the end of the learned descent. This model was trained
        on labels: its energy is not an unsupervised score.

        Args:
            data: the graph, with the fitted feature columns (with ``positional``, the fitted
                graph only).

        Returns:
            ``[N]`` float32, on the CPU.
        """
        self._check_fitted()
        self._check_transductive(data)
        self._check_relations(data)  # decision_function's check, skipped here before an audit
        self.model_.eval()
        data = on_device(data, self.device)
        try:
            return self.model_.energy_score(self.network_input(data), data.edge_index,
                                            **relation_inputs(self.model_, data)).float().cpu()
        finally:  # as _score: the fitted detector held the scored graph's operators after it
            clear_graph_caches(self.model_)


#: Why chunked scoring and the multi-relation ET do not go together.
MULTI_RELATION_CHUNKS = ("chunked scoring (chunk_size / chunk_edges, --inference-chunk-size / "
                         "--inference-chunk-edges) is not implemented for the multi-relation ET "
                         "(multi_relation=True, --multi-relation); leave both unset")


class MLPDetector(NeuralDetector):
    """A perceptron (``layers`` hidden layers, default two) on the node features alone
    (ignores the graph).

    Args:
        config: the detector's config (:class:`~et_graph.detectors.GNNDetectorConfig`, default:
            its defaults, with ``lr=0.01``).
        seed, progress, device: as for :class:`~et_graph.detectors.BaseDetector`.
        chunk_size, chunk_edges: refused (only ``ETDetector`` scores in chunks).
        **keywords: any field of the config but ``gat_heads`` (refused: a GAT setting), e.g.
            ``hidden=32`` or ``layers=3``.
    """

    config_class = GNNDetectorConfig
    config: GNNDetectorConfig
    unused_settings = ("gat_heads",)

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        m = self.config.model
        return MLPNet(in_channels, m.hidden, m.dropout, layers=m.layers)


class GCNDetector(NeuralDetector):
    """GCN layers (``layers``, default two) and a linear head.

    Args:
        config: the detector's config (:class:`~et_graph.detectors.GNNDetectorConfig`, default:
            its defaults, with ``lr=0.01``).
        seed, progress, device: as for :class:`~et_graph.detectors.BaseDetector`.
        chunk_size, chunk_edges: refused (only ``ETDetector`` scores in chunks).
        **keywords: any field of the config but ``gat_heads`` (refused: a GAT setting), e.g.
            ``hidden=32`` or ``layers=3``.
    """

    config_class = GNNDetectorConfig
    config: GNNDetectorConfig
    unused_settings = ("gat_heads",)

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        # GCNNet keys its normalised adjacency by the edge_index tensor's identity and
        # version (EdgeCache), so another graph never reuses it.
        m = self.config.model
        return GCNNet(in_channels, m.hidden, m.dropout, layers=m.layers)


class GATDetector(NeuralDetector):
    """GAT layers (``layers``, default two; concatenated heads) and a linear head.

    Args:
        config: the detector's config (:class:`~et_graph.detectors.GNNDetectorConfig`, default:
            its defaults, with ``lr=0.01``).
        seed, progress, device: as for :class:`~et_graph.detectors.BaseDetector`.
        chunk_size, chunk_edges: refused (only ``ETDetector`` scores in chunks).
        **keywords: any field of the config, e.g. ``hidden=32`` or ``gat_heads=8``.
    """

    config_class = GNNDetectorConfig
    config: GNNDetectorConfig

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        m = self.config.model
        return GATNet(in_channels, m.hidden, heads=m.gat_heads, dropout=m.dropout,
                      layers=m.layers)


def _picked_sampler(train: Any) -> str:
    """A checkpoint fingerprint's note of PyG's sampler where ``neighbor_sampler="auto"`` picks
    it: a run resumed after pyg-lib was installed switched samplers without a word (a scale
    audit). Nothing where ``auto`` picks the built-in one, so that the checkpoints of such runs,
    which record ``auto`` alone, still resume."""
    if (train.num_neighbors and train.neighbor_sampler == "auto"
            and resolve_sampler("auto") == "pyg"):
        return ", sampler=pyg"
    return ""
