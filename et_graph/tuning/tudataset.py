"""The tuning objective of TUDataset graph classification: a cheaper variant of Errica et al.

Errica et al. select hyperparameters inside *each* outer fold. Here one selection serves every
fold: a trial trains the model on the inner training part of each of the first ``tune_folds``
outer folds and returns the mean *inner validation* accuracy. The test folds are never read (a
test scrambles their labels). The chosen preset is then evaluated by the usual 10-fold run, so
the validation graphs of the first ``tune_folds`` folds have also served the selection, which
results must state.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Callable, Optional

import numpy as np
import torch

from ..datasets.tudataset import with_incident_edge_sums
from ..protocols.graph_cv import (
    check_fold_indices,
    fit_graph_classifier,
    graph_labels,
    inner_split,
    standardized_copies,
    stratified_folds,
)
from ..protocols.graph_models import (
    GRAPH_MODEL_REGISTRY,
    UNKNOWN_GRAPH_MODEL_HINT,
    known_graph_models,
)
from ..protocols.tudataset_config import TUDatasetConfig, load_graphs, model_factories
from ..training import keeps_caller_rng, seed_everything
from ..training.checkpoint import data_digest, graph_tensors
from .study import VALIDATION_LOSS, apply_space, stop_at_deadline, with_switch


def et_graph_space(trial: Any) -> dict[str, dict[str, Any]]:
    return {
        "et": {
            "hidden": trial.suggest_categorical("hidden", [32, 64, 128]),
            "blocks": trial.suggest_int("blocks", 1, 2),
            "steps": trial.suggest_int("steps", 1, 3),
            "alpha": trial.suggest_float("alpha", 0.05, 1.0, log=True),
            "dropout": trial.suggest_float("dropout", 0.0, 0.5),
            "readout": trial.suggest_categorical("readout", ["cls", "cls_sum_mean"]),
        },
        "train": {"lr": trial.suggest_float("lr", 5e-4, 1e-2, log=True)},
    }


def gin_space(trial: Any) -> dict[str, dict[str, Any]]:
    return {
        "baselines": {
            "gin_hidden": trial.suggest_categorical("gin_hidden", [32, 64, 128]),
            "gin_layers": trial.suggest_int("gin_layers", 2, 5),
            "baseline_dropout": trial.suggest_float("baseline_dropout", 0.0, 0.5),
        },
        "train": {"lr": trial.suggest_float("lr", 5e-4, 1e-2, log=True)},
    }


def agnostic_space(trial: Any) -> dict[str, dict[str, Any]]:
    # The MLP once shared GIN's settings, and its studies record them under GIN's names: the
    # names stay, so that those studies resume with the values their trials ran with.
    return {
        "baselines": {
            "mlp_hidden": trial.suggest_categorical("gin_hidden", [32, 64, 128]),
            "mlp_dropout": trial.suggest_float("baseline_dropout", 0.0, 0.5),
        },
        "train": {"lr": trial.suggest_float("lr", 5e-4, 1e-2, log=True)},
    }


TU_SEARCH_SPACES: dict[str, Callable[[Any], dict[str, dict[str, Any]]]] = {
    "et": et_graph_space,
    "gin": gin_space,
    "structure_agnostic": agnostic_space,
}

#: The one switch through which each model can read the edge features (bond types), as
#: ``(config section, field)``: ET's message-passing tokens in GINE's form, GIN's layers as
#: ``GINEConv``, and for the structure-agnostic MLP, which sees no edge, each node's summed
#: incoming edge features as input columns. ``bonds=True`` adds exactly this one categorical
#: to every model's space, so the budgets stay equal.
BOND_SWITCHES: dict[str, tuple[str, str]] = {
    "et": ("et", "message_passing_edges"),
    "gin": ("baselines", "gin_edges"),
    "structure_agnostic": ("data", "incident_edge_sums"),
}


def with_bond_switch(model: str) -> Callable[[Any], dict[str, dict[str, Any]]]:
    """``model``'s search space plus its :data:`BOND_SWITCHES` entry (off or on)."""
    section, name = BOND_SWITCHES[model]
    return with_switch(TU_SEARCH_SPACES[model], section, name, [False, True])


#: What a registered graph model's search space returns, for the error of one without any.
REGISTERED_SPACE_EXAMPLE = "{'baselines': {...}, 'train': {'lr': trial.suggest_float(...)}}"


def search_space(model: str, bonds: bool = False) -> Callable[[Any], Any]:
    """``model``'s search space, with ``bonds`` plus its bond switch (:func:`with_bond_switch`).
    A registered graph model's space is the one it was registered with; one without a space,
    or with ``bonds``, is refused."""
    registered_space = GRAPH_MODEL_REGISTRY.tuning_space(model, REGISTERED_SPACE_EXAMPLE)
    if registered_space is not None:
        if bonds:
            # Where it reads the edge features is its own business: only its own space can
            # add that one choice.
            raise ValueError(f"--tune-bonds adds each built-in model's switch for reading the "
                             f"edge features to its space; registered graph model {model!r} "
                             "has none known: add the choice to its own search space, or drop "
                             "the flag")
        return registered_space
    if model not in TU_SEARCH_SPACES:
        raise ValueError(f"unknown model {model!r}; choose from {list(known_graph_models())} "
                         f"({UNKNOWN_GRAPH_MODEL_HINT})")
    return with_bond_switch(model) if bonds else TU_SEARCH_SPACES[model]


def check_bond_tuning(config: TUDatasetConfig, model: str, info: dict[str, Any]) -> None:
    """Refuse ``bonds=True`` where a model's bond switch could not act: data without edge
    features, an ET without message-passing layers, or input sums already on for every model."""
    name = ".".join(BOND_SWITCHES[model])
    if not info["edge_features"]:
        raise ValueError(f"tuning the bond switches needs edge features, and "
                         f"{config.data.dataset} has none here ({name} would refuse it)")
    if model == "et" and not config.et.message_passing_layers:
        raise ValueError("tuning ET's bond switch (et.message_passing_edges) needs "
                         "message-passing layers: set et.message_passing_layers > 0 "
                         "(--message-passing-layers)")
    if model == "structure_agnostic" and config.data.incident_edge_sums:
        raise ValueError("tuning the MLP's bond switch (data.incident_edge_sums) needs it off "
                         "in the config: with it on every model already reads the sums")


class TUObjective:
    """``objective(trial) -> mean inner-validation accuracy`` over the first ``tune_folds``
    outer folds (default 3), or over the outer folds of the indices ``folds``, for one model
    of a :class:`TUDatasetConfig`. Each fold's inner split and seed are the ones the 10-fold
    run gives it, so a trial on ``folds=[k]`` trains exactly what fold ``k`` of a run of that
    configuration trains (the nested protocol, :mod:`et_graph.tuning.nested`).

    ``graphs``/``info`` (as :func:`~et_graph.datasets.load_tudataset` returns them) and
    ``splits`` may be passed in; by default they are loaded and drawn as the 10-fold run does.
    ``bonds=True`` adds the model's :data:`BOND_SWITCHES` entry to its space.
    """

    def __init__(self, config: TUDatasetConfig, model: str, tune_folds: Optional[int] = None,
                 graphs: Optional[list] = None, info: Optional[dict[str, Any]] = None,
                 splits: Optional[Sequence[tuple[np.ndarray, np.ndarray]]] = None,
                 bonds: bool = False, *, folds: Optional[Sequence[int]] = None) -> None:
        # (refused here, before the data load: an unknown model, a registered one without a
        # space or with bonds)
        self.space = search_space(model, bonds)
        if tune_folds is not None and folds is not None:
            raise ValueError("give tune_folds (the first outer folds) or folds (their "
                             "indices), not both")
        tune_folds = 3 if tune_folds is None else tune_folds
        if tune_folds <= 0:
            raise ValueError(f"tune_folds must be positive, got {tune_folds}")
        self.config, self.model = config, model
        # The registration this study started with, for every trial (as a run keeps its own)
        self.registry = GRAPH_MODEL_REGISTRY.snapshot([model])
        if (graphs is None) != (info is None):
            # graphs alone failed deep in a trial (info is read there); info alone was replaced
            raise ValueError("pass graphs and info together (as load_graphs returns them), "
                             "or neither to load them from config.data")
        if graphs is None or info is None:  # (then both are: checked above)
            graphs, info = load_graphs(config.data)
        if bonds:
            check_bond_tuning(config, model, info)
        if model in self.registry:  # a factory of the wrong kind or shape, before any trial
            self.registry[model].check(config, info, graphs)
        self.graphs, self.info = graphs, info
        self._with_sums: Optional[tuple[list, dict[str, Any]]] = None
        self.labels = graph_labels(graphs)
        p = config.protocol
        splits = splits if splits is not None else stratified_folds(self.labels, p.folds, p.seed)
        if folds is None and tune_folds > len(splits):
            raise ValueError(f"tune_folds ({tune_folds}) exceeds the {len(splits)} outer folds")
        #: the outer folds a trial trains on, by index
        self.fold_indices = (list(range(tune_folds)) if folds is None
                             else check_fold_indices(folds, len(splits)))
        self.splits = [splits[i] for i in self.fold_indices]

    @property
    def preset_meta(self) -> dict[str, str]:
        """What this model's preset notes beside its settings: for a registered graph model,
        the plugin that registers it (the preset runs with ``--plugin`` and that value)."""
        registered = self.registry.get(self.model)
        return {} if registered is None else registered.preset_meta

    def data_digest(self) -> str:
        """A digest of what the trials read: every graph without its label, the folds, and the
        labels of the graphs the tuned folds train and validate on (stored with the study)."""
        read = np.unique(np.concatenate([np.asarray(train) for train, _ in self.splits]))
        return data_digest(*graph_tensors(self.graphs, skip=("y",)),
                           *(torch.as_tensor(np.asarray(part)) for split in self.splits
                             for part in split), torch.as_tensor(self.labels[read]))

    def trial_config(self, trial: Any) -> TUDatasetConfig:
        config = apply_space(self.config, self.space, trial)
        return replace(config, protocol=replace(config.protocol, models=self.model))

    def graphs_for(self, config: TUDatasetConfig) -> tuple[list, dict[str, Any]]:
        """The graphs and description a trial's ``config`` trains on: the objective's own, or,
        when the trial switched ``data.incident_edge_sums`` on, copies with the summed incoming
        edge features appended to ``x`` (made once; as loading with the switch on would)."""
        if not config.data.incident_edge_sums or self.config.data.incident_edge_sums:
            return self.graphs, self.info
        if self._with_sums is None:
            self._with_sums = with_incident_edge_sums(self.graphs, self.info,
                                                      self.config.data.dataset)
        return self._with_sums

    @keeps_caller_rng  # the folds seed the process's generators; the caller keeps its streams
    def __call__(self, trial: Any = None) -> float:
        config = self.trial_config(trial)
        graphs, info = self.graphs_for(config)
        factory = model_factories(config, info, self.registry)[self.model]
        p = config.protocol
        accuracies, losses = [], []
        for step, (fold, (train_index, _test_index)) in enumerate(  # test never read
                zip(self.fold_indices, self.splits)):
            inner, val = inner_split(train_index, self.labels, p.val_fraction, p.seed + fold)
            data = standardized_copies(graphs, inner, info["node_attributes"])
            seed_everything(p.seed + fold)
            result = fit_graph_classifier(
                factory(), [data[i] for i in inner], [data[i] for i in val], config.train,
                seed=p.seed + fold, progress=False, device=config.run.device)
            accuracies.append(result.best.score)
            losses.append(result.best.loss)
            if trial is not None:
                # ties of the accuracy go to the lower loss (best_within_budget)
                trial.set_user_attr(VALIDATION_LOSS, float(np.mean(losses)))
                import optuna

                trial.report(float(np.mean(accuracies)), step)
                # A trial done with its folds is kept: pruning it then saves nothing and
                # loses its value (with one fold and --prune-warmup 0, finished trials were
                # stored as pruned and spent the budget: a review).
                if step + 1 < len(self.splits):
                    if trial.should_prune():
                        raise optuna.TrialPruned(f"pruned after fold {fold}")
                    stop_at_deadline(trial, f"fold {fold}")
        return float(np.mean(accuracies))
