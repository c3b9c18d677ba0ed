"""ET stacked on gradient-boosted trees: ET reads one more input column, the trees' cross-fitted
log-odds of each node (the stacking idea of BGNN, Ivanov and Prokhorenkova, ICLR 2021, fitted in
two stages here).

``fit`` cuts the training nodes into ``folds`` stratified folds and fits one
:class:`~et_graph.detectors.GBTDetector` per fold on the other folds' training nodes (its
threshold on the held-out fold: a training fold, never validation). A training node's column is
the log-odds of the trees that did not see its label; every other node's is the mean over the
folds' trees. Only training labels are read. The column is quantile-normalised (its statistics
kept from the fitted graph) and appended to ``x``, and an :class:`~et_graph.detectors.ETDetector`
is fitted on the result.

Scoring keeps the same rule: on the fitted graph, or the fitted graph grown (new edges, nodes
appended after its own), a fitted training node still reads the trees that did not see it; any
other node, and every node of another graph, reads the folds' mean.

.. code-block:: python

    from et_graph.detectors import GBTModelConfig, StackedETDetector
    det = StackedETDetector(trees=GBTModelConfig(max_iter=200), folds=5, epochs=300).fit(data)
    score = det.decision_function(data)
"""
from __future__ import annotations

import copy
import difflib
import time
import warnings
from dataclasses import fields
from typing import Any, Optional, Union, cast

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from torch import Tensor
from torch_geometric.data import Data

from ..callers import user_stacklevel
from ..config import sections
from ..exceptions import FitWarning
from ..nn.models.anomaly import graph_relations
from ..nn.validation import check_positive_int
from ..progress import progress_bar
from ..transforms.features import FeatureTransform
from .base import BaseDetector
from .config import ETDetectorConfig, GBTDetectorConfig, GBTModelConfig
from .label_trick import FittedGraphLabels, known_labels
from .neural import ETDetector
from .tree import GBTDetector

#: A tree's probability is clamped to [EPS, 1 - EPS] before its log-odds (a leaf of pure
#: training nodes gives 0 or 1).
PROBABILITY_EPS = 1e-7

TREES_WITH_LABEL_TRICK = (
    "the stacked trees cannot use label_trick: a neighbour's tree score would then carry a "
    "training node's own label back into its ET input (its label feeds the neighbour's label "
    "columns, which feed the neighbour's score, which ET's attention reads); ET's own "
    "label_trick is allowed")


def tree_log_odds(trees: list[GBTDetector], data: Data) -> Tensor:
    """``[len(trees), N]`` float64: each fitted tree model's log-odds of every node of ``data``.

    The folds' trees share their settings and so their input rows: the neighbourhood
    aggregates are computed once, not once per fold."""
    features = trees[0]._features(trees[0]._prepare(_trees_view(data)))
    out = []
    for tree in trees:
        # (in float32 first, as a detector's scores are: the stored columns, bit for bit)
        prob = tree._score_features(features).float().double()
        prob = prob.clamp(PROBABILITY_EPS, 1 - PROBABILITY_EPS)
        out.append(torch.log(prob / (1 - prob)))
    return torch.stack(out)


def cross_fit_trees(data: Data, y: Tensor, train: Tensor, trees: GBTModelConfig, folds: int,
                    seed: int = 0, progress: bool = False, owner: str = "StackedETDetector"
                    ) -> tuple[list[GBTDetector], Tensor]:
    """The folds' fitted trees and each node's fold ``[N]`` (long; -1 off the training nodes).

    ``train`` (bool ``[N]``) is cut into ``folds`` stratified folds by ``seed``; fold ``k``'s
    trees fit on the others (seed ``seed * folds + k``) with fold ``k`` as their threshold
    nodes. ``y`` is read on the training nodes only. ``progress``: a bar over the folds.
    ``owner``: the detector the trees' messages name (the user built no GBTDetector)."""
    if trees.label_trick:
        raise ValueError(TREES_WITH_LABEL_TRICK)
    train_index = train.nonzero().view(-1).numpy()
    y_train = y[train_index].numpy()
    check_folds(y_train, folds)
    fold_of = torch.full((data.num_nodes,), -1, dtype=torch.long)
    fitted: list[GBTDetector] = []
    cuts = StratifiedKFold(folds, shuffle=True, random_state=seed).split(train_index, y_train)
    bar = progress_bar(cuts, desc="trees, cross-fitted", total=folds, unit="fold",
                       disable=not progress)
    flat: list[int] = []
    for fold, (fit_part, held_out) in enumerate(bar):
        masks = [torch.zeros(data.num_nodes, dtype=torch.bool) for _ in range(2)]
        masks[0][train_index[fit_part]] = True
        masks[1][train_index[held_out]] = True
        fold_of[train_index[held_out]] = fold
        tree = GBTDetector(GBTDetectorConfig(model=trees), seed=seed * folds + fold)
        # GBTDetector's own warning of a flat validation named a detector the user never
        # built, and a "validation" split that is a training fold, once per fold: one
        # summary instead
        tree._part_of, tree._warns_flat_validation = owner, False
        fitted.append(tree.fit(_trees_view(data, y), masks[0], masks[1]))
        held_out_scores = cast(Tensor, tree.decision_score_)[masks[1]]  # (set by fit)
        if bool((held_out_scores == held_out_scores[0]).all()):
            flat.append(fold)
    if flat:
        warnings.warn(f"the stacked trees of fold(s) {flat} of {folds} give every held-out "
                      "training node the same score, so their column ranks nothing there: too "
                      "few training nodes per leaf? (trees=GBTModelConfig(min_samples_leaf=...) "
                      "lower, or fewer folds)", FitWarning, stacklevel=user_stacklevel())
    return fitted, fold_of


def check_fold_count(folds: int, name: str = "folds") -> int:
    """``folds`` if it is an int of at least 2 (cross-fitting), else ``ValueError`` naming
    ``name``."""
    folds = check_positive_int(folds, name)
    if folds < 2:
        raise ValueError(f"{name} must be at least 2 (cross-fitting), got {folds}")
    return folds


def check_folds(y_train: Any, folds: int, name: str = "folds") -> None:
    """``ValueError`` unless the training labels ``y_train`` (0/1) hold at least ``folds``
    nodes of each class (stratified folds need one of each per fold); ``name``: the setting's
    name in the message (``--stack-folds`` on the command line)."""
    positives = int(np.sum(y_train))
    smallest = min(positives, len(y_train) - positives)
    if smallest < folds:
        raise ValueError(f"{name}={folds} stratified folds need at least {folds} training "
                         f"nodes of each class; the training split holds {smallest} of one: "
                         f"lower {name} or label more nodes")


def stacked_column(log_odds: Tensor, fold_of: Optional[Tensor]) -> Tensor:
    """``[N]`` float64: the folds' mean of ``log_odds`` ``[folds, N]``, except at the nodes
    where ``fold_of`` (``[M]``, ``M <= N``, the first ``M`` nodes) names a fold: there, that
    fold's trees, which did not see the node's label."""
    column = log_odds.mean(dim=0)
    if fold_of is not None:
        own = (fold_of >= 0).nonzero().view(-1)
        column[own] = log_odds[fold_of[own], own]
    return column


def _trees_view(data: Data, y: Optional[Tensor] = None) -> Data:
    """What the trees read of ``data``: ``x``, ``edge_index`` (and ``y``). The per-edge data
    they ignore is left out, so that the detector warns about it once, not once per tree."""
    return Data(x=data.x, edge_index=data.edge_index, y=y, num_nodes=data.num_nodes)


def check_keywords(keywords: dict[str, Any]) -> None:
    """``TypeError`` for a keyword that is no field of ET's config, naming where it belongs: a
    setting of the trees goes into ``trees=GBTModelConfig(...)``, a misspelling gets the
    closest name among ET's fields, ``folds`` and ``trees``."""
    known = {f.name for section in sections(ETDetectorConfig()).values()
             for f in fields(section)}
    tree_fields = {f.name for f in fields(GBTModelConfig)}
    for key in keywords:
        if key in known:
            continue
        if key in tree_fields:
            raise TypeError(f"{key!r} is a setting of the stacked trees: pass "
                            f"trees=GBTModelConfig({key}=...)")
        close = difflib.get_close_matches(key, [*known, "folds", "trees"], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(f"unknown keyword {key!r} for StackedETDetector{hint}: it takes ET's "
                        "settings (those of ETDetector), folds and trees")


class StackedETDetector(FittedGraphLabels, BaseDetector):
    """:class:`~et_graph.detectors.ETDetector` on ``x`` plus the cross-fitted log-odds of
    gradient-boosted trees (see the module docstring).

    Args:
        config: ET's config (:class:`~et_graph.detectors.ETDetectorConfig`); flat keywords
            (``epochs=300``, ``hidden=128``) set its fields, as for ``ETDetector``.
        trees: the trees' settings (:class:`~et_graph.detectors.GBTModelConfig`, default its
            defaults); ``label_trick`` is refused there (ET's own is allowed).
        folds: stratified folds of the training nodes (at least 2).
        seed, progress, device, chunk_size, chunk_edges: as for ``ETDetector``; ``seed`` also
            cuts the folds.

    After ``fit``: ``trees_`` (one fitted :class:`GBTDetector` per fold), ``fold_of_`` (each
    fitted node's fold, -1 off the training nodes), ``column_transform_`` and ``et_`` (the
    fitted ``ETDetector``, whose input width is one more than ``x``'s). ``fit_info_`` adds the
    column's out-of-fold training AUROC, its validation AUROC and the trees' seconds.
    """

    config_class = ETDetectorConfig
    config: ETDetectorConfig
    supports_chunks = True
    #: Set by ``et-graph anomaly`` and the tuner; handed to the ET fit.
    checkpoint: Any = None
    on_epoch: Any = None

    def __init__(self, config: Optional[ETDetectorConfig] = None, *,
                 trees: Union[GBTModelConfig, GBTDetectorConfig, None] = None, folds: int = 5,
                 seed: int = 0, progress: bool = False,
                 device: Union[str, torch.device] = "cpu", chunk_size: Optional[int] = None,
                 chunk_edges: Optional[int] = None, **keywords: Any) -> None:
        check_keywords(keywords)
        super().__init__(config, seed=seed, progress=progress, device=device,
                         chunk_size=chunk_size, chunk_edges=chunk_edges, **keywords)
        if isinstance(trees, GBTDetectorConfig):
            trees = trees.model
        if trees is None:
            trees = GBTModelConfig()
        if not isinstance(trees, GBTModelConfig):
            raise TypeError(f"trees must be a GBTModelConfig, got {type(trees).__name__}")
        if trees.label_trick:
            raise ValueError(TREES_WITH_LABEL_TRICK)
        self.trees = copy.deepcopy(trees)
        self.folds = check_fold_count(folds)
        self.et_: Optional[ETDetector] = None
        self.trees_: list[GBTDetector] = []
        self.fold_of_: Optional[Tensor] = None
        self.column_transform_: Optional[FeatureTransform] = None

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {**super().get_params(deep), "trees": copy.deepcopy(self.trees),
                "folds": self.folds}

    # ------------------------------------------------------------------------------------------
    def _fit(self, data: Data, y: Tensor, train: Tensor, val: Tensor) -> None:
        if self._reads_edge_type():
            graph_relations(data)  # a graph without edge types is named now, before the trees
        started = time.perf_counter()
        self.trees_, self.fold_of_ = cross_fit_trees(data, y, train, self.trees, self.folds,
                                                     self.seed, self.progress, self._name)
        # what FittedGraphLabels reads to tell the fitted graph (and it grown) from another
        self.train_labels_ = known_labels(y, train)
        self._remember_fitted_graph(data)
        column = stacked_column(tree_log_odds(self.trees_, data), self.fold_of_)
        tree_seconds = time.perf_counter() - started
        self.column_transform_ = FeatureTransform("quantile").fit(
            Data(x=column[:, None], edge_index=data.edge_index, num_nodes=data.num_nodes))
        et = ETDetector(self.config, seed=self.seed, progress=self.progress, device=self.device,
                        chunk_size=getattr(self, "chunk_size", None),
                        chunk_edges=getattr(self, "chunk_edges", None))
        et.checkpoint, et.on_epoch = self.checkpoint, self.on_epoch
        et._part_of = self._name
        try:
            et.fit(self._augmented(data, column, y), train, val)
        finally:
            et.__dict__.pop("on_epoch", None)  # a tuner's callback does not pickle with save()
        self.et_ = et
        self.history_ = et.history_
        y_np, column_np = y.numpy(), column.numpy()
        self.fit_info_ = {
            **et.fit_info_,
            "tree_column_train_auroc_out_of_fold": float(
                roc_auc_score(y_np[train.numpy()], column_np[train.numpy()])),
            "tree_column_val_auroc": float(roc_auc_score(y_np[val.numpy()],
                                                         column_np[val.numpy()])),
            "tree_seconds": tree_seconds,
        }

    def tree_column(self, data: Data) -> Tensor:
        """The tree column ``[N]`` (float64 log-odds, before its normalisation) that ET reads
        for ``data``."""
        if not self.fitted_:
            raise RuntimeError(f"{type(self).__name__} is not fitted yet: call fit(data) first")
        return self._column(self._prepare(data))

    def _column(self, data: Data) -> Tensor:
        # The fitted nodes keep their ids on the fitted graph and on it grown: a training node
        # there still reads the trees that did not see its label.
        fitted_ids = self._is_fitted_graph(data) or self._is_grown_fitted_graph(data)
        return stacked_column(tree_log_odds(self.trees_, data),
                              self.fold_of_ if fitted_ids else None)

    def _score(self, data: Data) -> Tensor:
        return self._inner(data)._decision(self._augmented(data, self._column(data)))

    def _inner(self, data: Data) -> ETDetector:
        """The fitted inner ET, ready to read ``data`` (prepared) with the column appended."""
        assert self.et_ is not None
        if self._reads_edge_type():
            graph_relations(data)  # (ET's own message, not an AttributeError on edge_type)
        self.et_.device = self.device  # (load(map_location=...) sets the outer one alone)
        self.et_._part_of = self._name  # (a file saved before parts were named)
        return self.et_

    def explanation_inputs(self, data: Data) -> tuple[Any, tuple[Tensor, Tensor],
                                                      dict[str, Tensor]]:
        """The inner ET's :meth:`ETDetector.explanation_inputs` for ``data`` with the tree
        column appended, as this detector scores it: ``torch.sigmoid(model(*args,
        **keywords))`` is :meth:`decision_function`. The column is an input computed before
        the network (from the trees and the fitted folds), so an edge mask does not reach it."""
        data = self._scorable(data)
        return self._inner(data).explanation_inputs(self._augmented(data, self._column(data)))

    def _augmented(self, data: Data, column: Tensor, y: Optional[Tensor] = None) -> Data:
        """What ET reads: ``x`` with the normalised column appended, ``edge_index``,
        ``edge_type`` where ET reads it (and ``y``); the detector has warned about the rest."""
        assert self.column_transform_ is not None
        normalised = self.column_transform_.transform(
            Data(x=column[:, None], edge_index=data.edge_index, num_nodes=data.num_nodes)).x
        out = Data(x=torch.cat([data.x, normalised.to(data.x)], dim=1),
                   edge_index=data.edge_index, y=y, num_nodes=data.num_nodes)
        if self._reads_edge_type():
            out.edge_type = data.edge_type
            if getattr(data, "relation_names", None) is not None:  # ET checks them by name
                out.relation_names = data.relation_names
        return out
