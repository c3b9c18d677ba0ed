"""Neural node anomaly detectors (ET, MLP, GCN, GAT), all trained by the one engine.

:class:`NodeAnomalyTask` is what a node detector contributes to :class:`~et_graph.training.Trainer`:
the class-weighted BCE of the training nodes (paper eq. 12; full batch, or one induced subgraph
per epoch) and the validation score (the config's ``select_metric`` at the validation-chosen
threshold). Only training and validation labels are read.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from ..baselines.node import GATDetector as GATNet
from ..baselines.node import GCNDetector as GCNNet
from ..baselines.node import MLPDetector as MLPNet
from ..nn.models.anomaly import ETAnomalyNet, weighted_bce_loss
from ..protocols.anomaly import class_weight, macro_f1, validation_score
from ..training import CheckpointConfig, Trainer, Validation
from ..training.engine import _rank_world
from .base import BaseDetector
from .config import ETDetectorConfig, GNNDetectorConfig, NodeTrainConfig


class NodeAnomalyTask:
    """Loss and validation of a node anomaly network ``model(x, edge_index[, node_ids])``."""

    def __init__(self, data: Data, y: Tensor, train: Tensor, val: Tensor,
                 config: NodeTrainConfig, generator: torch.Generator, pass_node_ids: bool,
                 device: torch.device) -> None:
        self.data = data
        self.y = y.to(device)
        self.y_val = y[val].numpy()
        self.train_index = train.nonzero().view(-1)
        self.val_index = val.nonzero().view(-1)
        self.config = config
        self.generator = generator
        self.pass_node_ids = pass_node_ids
        self.pos_weight = class_weight(y[train])
        self.device = device

    def batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor, Optional[Tensor], Tensor]]:
        """One batch per epoch: the full graph (each DDP rank scoring its shard of the training
        nodes) or an induced subgraph on ``subgraph_ratio`` of the nodes (other ranks draw other
        nodes); in a subgraph only its training nodes carry a loss."""
        data, ratio = self.data, self.config.subgraph_ratio
        rank, world = _rank_world()
        if ratio <= 0:
            train = self.train_index
            if world > 1:
                order = torch.randperm(train.numel(), generator=self.generator)
                train = train[order][rank::world]
            yield data.x, data.edge_index, None, train.to(self.device)
            return
        num_nodes = data.num_nodes
        count = max(int(round(ratio * num_nodes)), 2)
        perm = torch.randperm(num_nodes, generator=self.generator)
        lo = rank * count if (rank + 1) * count <= num_nodes else 0
        nodes = perm[lo: lo + count].sort().values
        edge_index, _ = subgraph(nodes, data.edge_index.cpu(), relabel_nodes=True,
                                 num_nodes=num_nodes)
        is_train = torch.zeros(num_nodes, dtype=torch.bool)
        is_train[self.train_index] = True
        local = is_train[nodes].nonzero().view(-1)
        yield (data.x[nodes.to(data.x.device)], edge_index.to(self.device),
               nodes.to(self.device), local.to(self.device))

    def loss(self, model: nn.Module, batch: Any) -> Tensor:
        x, edge_index, node_ids, local = batch
        logits = model(x, edge_index, node_ids) if (
            self.pass_node_ids and node_ids is not None) else model(x, edge_index)
        if local.numel() == 0:  # a subgraph without training nodes: keeps DDP ranks in step
            return logits.sum() * 0.0
        target = self.y[local if node_ids is None else node_ids[local]]
        return weighted_bce_loss(logits[local], target, self.pos_weight)

    def validate(self, model: nn.Module) -> Validation:
        logits = model(self.data.x, self.data.edge_index)[self.val_index.to(self.device)]
        prob = torch.sigmoid(logits).double().cpu().numpy()
        score, threshold = validation_score(self.y_val, prob, self.config.select_metric)
        loss = float(weighted_bce_loss(logits.cpu(), torch.from_numpy(self.y_val),
                                       self.pos_weight))
        return Validation(
            score=score,
            loss=loss,
            metrics={"auroc": float(roc_auc_score(self.y_val, prob)),
                     "f1_macro": macro_f1(self.y_val, prob, threshold)},
            extra={"threshold": threshold},
        )


class NeuralDetector(BaseDetector):
    """A network trained by :class:`NodeAnomalyTask`; subclasses build the network.

    After ``fit``: ``model_`` (the network with the best validation epoch's weights),
    ``history_`` (one row per epoch), ``fit_info_`` (best epoch, epoch time, ...).
    """

    #: Set by :meth:`fit_with` callers (a tuner) to watch every epoch.
    on_epoch = None
    checkpoint: Optional[CheckpointConfig] = None

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        raise NotImplementedError

    def _fit(self, data: Data, y: Tensor, train: Tensor, val: Tensor) -> None:
        torch.manual_seed(self.seed)
        np.random.seed(self.seed)
        data = data.to(self.device)
        model = self.build_network(data.num_features, data.num_nodes).to(self.device)
        train_config: NodeTrainConfig = self.config.train
        generator = torch.Generator().manual_seed(self.seed)
        task = NodeAnomalyTask(data, y, train, val, train_config, generator,
                               getattr(model, "positional", None) is not None, self.device)
        trainer = Trainer(
            train_config,
            checkpoint=self.checkpoint,
            description=type(self).__name__,
            progress=self.progress,
            generators=[generator],
            on_epoch=self.on_epoch,
            fingerprint=repr(self.config),
            oom_hint="full-batch training does not fit: pass subgraph_ratio (--subgraph-ratio) "
                     "to train on induced subgraphs",
        )
        result = trainer.fit(model, task)
        self.model_ = model
        self.history_ = result.history
        self.fit_info_ = result.as_dict()

    @torch.no_grad()
    def _score(self, data: Data) -> Tensor:
        self.model_.eval()
        data = data.to(self.device)
        return torch.sigmoid(self.model_(data.x, data.edge_index))


class ETDetector(NeuralDetector):
    """Energy Transformer node anomaly detector (supervised, paper eqs. 10-12).

    Example:
        >>> det = ETDetector(epochs=50, hidden=32).fit(data)   # data.train_mask / val_mask
        >>> pred, score = det.predict(data, return_score=True)
    """

    config_class = ETDetectorConfig

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        m = self.config.model
        return ETAnomalyNet(
            in_channels, hidden_channels=m.hidden, heads=m.heads, head_dim=m.head_dim,
            hopfield_dim=m.hopfield_dim, steps=m.steps, alpha=m.alpha, hopfield=m.hopfield,
            noise_std=m.noise_std, num_nodes=num_nodes if m.positional else None,
            positional=m.positional, dropout=m.dropout,
        )

    @torch.no_grad()
    def node_energy(self, data: Data) -> Tensor:
        """Each node's energy ``[N]`` at the end of the learned descent. This model was trained
        on labels: its energy is not an unsupervised score."""
        self._check_fitted()
        self.model_.eval()
        data = data.to(self.device)
        return self.model_.energy_score(data.x, data.edge_index).float().cpu()


class MLPDetector(NeuralDetector):
    """Two-layer perceptron on the node features alone (ignores the graph)."""

    config_class = GNNDetectorConfig

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        return MLPNet(in_channels, self.config.model.hidden, self.config.model.dropout)


class GCNDetector(NeuralDetector):
    """Two GCN layers and a linear head."""

    config_class = GNNDetectorConfig

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        # Never cached: a cached normalised adjacency would be reused on another graph.
        return GCNNet(in_channels, self.config.model.hidden, self.config.model.dropout)


class GATDetector(NeuralDetector):
    """Two GAT layers (concatenated heads) and a linear head."""

    config_class = GNNDetectorConfig

    def build_network(self, in_channels: int, num_nodes: int) -> nn.Module:
        m = self.config.model
        return GATNet(in_channels, m.hidden, heads=m.gat_heads, dropout=m.dropout)
