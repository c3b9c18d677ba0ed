"""The tuning objective of GNNBenchmark: train one model on the training split and score its
selected epoch on the validation split (the ZINC proxy's holdout). The test split is dropped
before any trial runs (a test scrambles its targets and checks that the objective stays the
same).

A trial trains with model seed 0 (or seeds ``0 .. tune_seeds - 1``, scoring their mean); the
preset of the best trial is then run over the usual seeds by ``et-graph gnnbenchmark --config``,
which reads the test split once per seed. The objective is the validation metric itself, so MAE
is *minimised* (the study's ``direction``).

Why several seeds: on the ZINC proxy's 200 holdout graphs, ET's best of 40 one-seed trials scored
0.4285 on seed 0 and 0.4511 over seeds 0-2, and its test MAE was worse than the untuned
preset's; the best of many one-seed trials is partly the luckiest seed.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional

from ..datasets.gnnbenchmark import (
    BenchmarkData,
    add_positional_encoding,
    add_random_walk_encoding,
    load_benchmark,
)
from ..protocols.benchmark_models import (
    BENCHMARK_MODEL_REGISTRY,
    UNKNOWN_BENCHMARK_MODEL_HINT,
    known_benchmark_models,
)
from ..protocols.gnnbenchmark import train_one
from ..protocols.gnnbenchmark_config import GNNBenchmarkConfig, model_builder
from ..training.checkpoint import data_digest, graph_tensors
from .study import apply_space, deadline_callback, pruning_callback

#: Learning rates every model's space searches (the same range for each).
LR_RANGE = (3e-4, 5e-3)


def et_benchmark_space(trial: Any) -> dict[str, dict[str, Any]]:
    return {
        "et": {
            "hidden": trial.suggest_categorical("hidden", [32, 64, 128]),
            "blocks": trial.suggest_int("blocks", 1, 4),
            "steps": trial.suggest_int("steps", 1, 3),
            "alpha": trial.suggest_float("alpha", 0.05, 1.0, log=True),
            "dropout": trial.suggest_float("dropout", 0.0, 0.2),
        },
        "train": {"lr": trial.suggest_float("lr", *LR_RANGE, log=True)},
    }


def message_passing_space(trial: Any) -> dict[str, dict[str, Any]]:
    """GIN's and GatedGCN's space: width, depth and dropout (their shared settings)."""
    return {
        "baselines": {
            "baseline_hidden": trial.suggest_categorical("baseline_hidden", [32, 64, 128]),
            "baseline_layers": trial.suggest_int("baseline_layers", 2, 8),
            "baseline_dropout": trial.suggest_float("baseline_dropout", 0.0, 0.2),
        },
        "train": {"lr": trial.suggest_float("lr", *LR_RANGE, log=True)},
    }


BENCHMARK_SEARCH_SPACES: dict[str, Callable[[Any], dict[str, dict[str, Any]]]] = {
    "et": et_benchmark_space,
    "gin": message_passing_space,
    "gatedgcn": message_passing_space,
}


def search_space(model: str) -> Callable[[Any], Any]:
    """``model``'s search space: a built-in one's from :data:`BENCHMARK_SEARCH_SPACES`, a
    registered model's the one it was registered with (one without a space is refused)."""
    registered_space = BENCHMARK_MODEL_REGISTRY.tuning_space(
        model, "{'baselines': {...}, 'train': {'lr': trial.suggest_float('lr', *LR_RANGE)}} "
               "(LR_RANGE of et_graph.tuning.gnnbenchmark: the built-in models' range)")
    if registered_space is not None:
        return registered_space
    if model not in BENCHMARK_SEARCH_SPACES:
        raise ValueError(f"unknown model {model!r}; choose from {list(known_benchmark_models())} "
                         f"({UNKNOWN_BENCHMARK_MODEL_HINT})")
    return BENCHMARK_SEARCH_SPACES[model]


class GNNBenchmarkObjective:
    """``objective(trial) -> validation metric`` (model seed 0, or the mean over seeds
    ``0 .. tune_seeds - 1``) for one model of a :class:`GNNBenchmarkConfig`; ``direction`` says
    whether the study minimises it (MAE).

    ``data`` (as :func:`~et_graph.datasets.gnnbenchmark.load_benchmark` returns it, encodings
    not yet added) may be passed in; its test split is dropped either way. With ``trial=None``
    the objective evaluates the config as it is (used to check that a written preset
    reproduces its trial).
    """

    def __init__(self, config: GNNBenchmarkConfig, model: str,
                 data: Optional[BenchmarkData] = None, tune_seeds: int = 1) -> None:
        # (refused here, before the data load: an unknown model, a registered one without a
        # space)
        self.space = search_space(model)
        if tune_seeds <= 0:
            raise ValueError(f"tune_seeds must be positive, got {tune_seeds}")
        self.config, self.model, self.tune_seeds = config, model, tune_seeds
        # The registration this study started with, for every trial (as a run keeps its own)
        self.registry = BENCHMARK_MODEL_REGISTRY.snapshot([model])
        data = load_benchmark(config.data) if data is None else data
        # A copy without the test split: no trial can read it, whatever the model does. The
        # graphs are cloned because the encodings below are attached to them.
        splits = {k: [g.clone() for g in v] for k, v in data.splits.items() if k != "test"}
        self.data = replace(data, splits=splits, notes=list(data.notes))
        add_random_walk_encoding(self.data, config.data.rw_pe_dim, progress=False)
        if model == "et":
            add_positional_encoding(self.data, config.et.pe_dim, progress=False)
        self.direction = "minimize" if self.data.lower_is_better else "maximize"
        if model in self.registry:  # a factory of the wrong kind or shape, before any trial
            self.registry[model].check(config, self.data)

    @property
    def preset_meta(self) -> dict[str, str]:
        """What this model's preset notes beside its settings: for a registered model, the
        plugin that registers it (the preset runs with ``--plugin`` and that value)."""
        registered = self.registry.get(self.model)
        return {} if registered is None else registered.preset_meta

    def data_digest(self) -> str:
        """A digest of the training and validation graphs the trials read (the test split is
        dropped), stored with the study."""
        return data_digest(*graph_tensors(self.data.splits["train"], self.data.splits["val"]))

    def trial_config(self, trial: Any) -> GNNBenchmarkConfig:
        config = apply_space(self.config, self.space, trial)
        return replace(config, protocol=replace(config.protocol, models=self.model))

    def __call__(self, trial: Any = None) -> float:
        values = self.seed_values(trial)
        return sum(values) / len(values)

    def seed_values(self, trial: Any = None) -> list[float]:
        """The validation metric of each model seed ``0 .. tune_seeds - 1`` (the objective is
        their mean)."""
        config = self.trial_config(trial)
        build = model_builder(config, self.model, self.registry)
        values = []
        for seed in range(self.tune_seeds):
            # The pruner reads seed 0's curve only: a later seed's curve would be compared with
            # other trials' seed-0 curves at the same epoch.
            # (the later seeds stop at the time limit too)
            on_epoch = (None if trial is None else pruning_callback(trial, self.data.metric)
                        if seed == 0 else deadline_callback(trial))
            result = train_one(self.model, self.data, seed, config.train, config.et,
                               config.baselines, device=config.run.device, progress=False,
                               on_epoch=on_epoch, evaluate_test=False, build=build)
            values.append(float(result["val"]))
        return values

