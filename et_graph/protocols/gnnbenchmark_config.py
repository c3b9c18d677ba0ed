"""The typed config of a GNNBenchmark run (``et-graph gnnbenchmark``, ``et-graph tune
gnnbenchmark``): which data, models, training and seeds. The run loop is
:mod:`et_graph.experiments.gnnbenchmark`; the training and evaluation,
:mod:`et_graph.protocols.gnnbenchmark`."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, ClassVar, Optional

from torch import nn

from .. import plugins
from ..config import RunConfig, parse_model_list
from ..datasets.gnnbenchmark import QUICK_GENERATED_SIZES, GNNBenchmarkDataConfig
from ..datasets.gnnbenchmark_common import BenchmarkData
from ..exceptions import ConfigWarning
from .benchmark_models import (
    BENCHMARK_MODEL_REGISTRY,
    UNKNOWN_BENCHMARK_MODEL_HINT,
    RegisteredBenchmarkModel,
    known_benchmark_models,
    registered_benchmark_models,
)
from .gnnbenchmark import (
    MODEL_NAMES,
    BaselineConfig,
    ETGraphModelConfig,
    GNNBenchmarkTrainConfig,
    build_model,
)

#: The models that read each model-specific config section (the rest are read by all).
FLAG_READERS = {"et": ("et",), "baselines": ("gin", "gatedgcn"), "run.native_attention": ("et",)}


def flag_readers() -> dict[str, tuple[str, ...]]:
    """:data:`FLAG_READERS` with every registered benchmark model added to each entry: its
    factory is given the whole config, and which of it it reads cannot be told, so no setting
    is called unread (nor left out of a study's resume check) on its account."""
    return BENCHMARK_MODEL_REGISTRY.readers(FLAG_READERS)


@dataclass
class ProtocolConfig:
    """Which models run, and with which seeds.

    Attributes:
        models: comma-separated subset of et,gin,gatedgcn and the registered benchmark models
            (et_graph.protocols.benchmark_models.register_benchmark_model, --plugin).
        seeds: comma-separated list of the seeds (initialisation and batch order), e.g. 0,1,2
            for three runs; not a count as in et-graph anomaly (2 runs seed 2 once).
    """

    models: str = ",".join(MODEL_NAMES)
    seeds: str = "0,1,2"

    def __post_init__(self) -> None:
        # an unknown or empty list fails here
        parse_model_list(self.models, known_benchmark_models(), UNKNOWN_BENCHMARK_MODEL_HINT)
        try:
            seeds = self.seed_list
        except ValueError:
            seeds = None
        if not seeds:
            raise ValueError(f"seeds must be comma-separated integers, got {self.seeds!r}")
        if any(seed < 0 for seed in seeds):  # numpy would refuse them only after the data load
            raise ValueError(f"seeds must be >= 0, got {self.seeds!r}")
        if len(set(seeds)) != len(seeds):
            # a repeated seed repeats a training bit for bit and shrinks the reported std
            raise ValueError(f"seeds must be distinct, got {self.seeds!r}")
        if len(seeds) == 1 and seeds[0] > 0:
            # The other commands take --seeds as a count: --seeds 3 meant as three runs here
            # runs seed 3 once, and said nothing.
            warnings.warn(f"seeds={self.seeds!r} runs the single seed {seeds[0]}: gnnbenchmark's "
                          f"seeds are a list (0,1,2 for three runs), not a count",
                          ConfigWarning, stacklevel=2)

    @property
    def model_names(self) -> list[str]:
        """The models in the given order, built-in or registered, lower-cased, each once
        (``gin,gin`` trains GIN once per seed)."""
        return parse_model_list(self.models, known_benchmark_models(),
                                UNKNOWN_BENCHMARK_MODEL_HINT)

    @property
    def seed_list(self) -> list[int]:
        return [int(v) for v in self.seeds.split(",") if v.strip()]


@dataclass
class GNNBenchmarkConfig:
    """A GNNBenchmark run.

    Attributes:
        data: which dataset, source and splits.
        et: the ET model.
        baselines: the GIN / GatedGCN baselines.
        train: optimisation (shared by every model).
        protocol: models and seeds.
        run: output folder, threads, device, progress, checkpoints.
    """

    data: GNNBenchmarkDataConfig = field(default_factory=GNNBenchmarkDataConfig)
    et: ETGraphModelConfig = field(default_factory=ETGraphModelConfig)
    baselines: BaselineConfig = field(default_factory=BaselineConfig)
    train: GNNBenchmarkTrainConfig = field(default_factory=GNNBenchmarkTrainConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    run: RunConfig = field(default_factory=lambda: RunConfig(threads=1))

    #: ``--quick``: a few graphs (generated sizes 16,8,8 or limits 48/16/16), 2 epochs, 2 seeds,
    #: small models.
    QUICK: ClassVar[dict[str, Any]] = {
        "train.epochs": 2, "train.batch_size": 16, "protocol.seeds": "0,1",
        "data.train_limit": 48, "data.val_limit": 16, "data.test_limit": 16,
        "data.generated_sizes": QUICK_GENERATED_SIZES,
        "et.hidden": 16, "et.head_dim": 8, "et.heads": 2, "et.blocks": 1, "et.steps": 1,
        "et.pe_dim": 4, "baselines.baseline_hidden": 16, "baselines.baseline_layers": 2,
    }


def model_builder(config: GNNBenchmarkConfig, name: str,
                  registry: Optional[Mapping[str, RegisteredBenchmarkModel]] = None
                  ) -> Callable[[BenchmarkData], nn.Module]:
    """``build(data) -> model`` for model ``name`` of ``config``: a built-in one from its
    section, a registered one from its factory (in ``registry``, default the registered models
    now; a run passes the ones it started with: :func:`registered_models_of`)."""
    if name in MODEL_NAMES:
        return partial(build_model, name, et=config.et, baselines=config.baselines)
    registered = registered_benchmark_models() if registry is None else registry
    if name not in registered:  # unregistered since the config was read
        raise ValueError(f"model {name!r} is not registered ({UNKNOWN_BENCHMARK_MODEL_HINT})")
    return partial(registered[name].build, config)


def registered_models_of(config: GNNBenchmarkConfig, data: BenchmarkData
                         ) -> tuple[dict[str, RegisteredBenchmarkModel], dict[str, str]]:
    """The registrations of the registered models ``config`` runs, and the class of each,
    built once for ``data`` and its outputs checked: a factory of the wrong kind or shape is
    named before any training, and a name registered again while the run goes on
    (``replace=True``) cannot mix two models in one row (every seed is built from these)."""
    registry = BENCHMARK_MODEL_REGISTRY.snapshot(config.protocol.model_names)
    kinds = {name: entry.check(config, data) for name, entry in registry.items()}
    return registry, kinds


def describe_registered(kinds: Mapping[str, str]) -> str:
    """The protocol's clause on the registered models of a run (``""`` without any)."""
    return plugins.describe_registered(
        kinds, "benchmark model", "trained as the built-in models are, with the train section")
