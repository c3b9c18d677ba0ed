"""The typed config of a GNNBenchmark run (``et-graph gnnbenchmark``, ``et-graph tune
gnnbenchmark``): which data, models, training and seeds. The run loop is
:mod:`et_graph.experiments.gnnbenchmark`; the training and evaluation,
:mod:`et_graph.protocols.gnnbenchmark`."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..config import RunConfig, parse_model_list
from ..datasets.gnnbenchmark import QUICK_GENERATED_SIZES, GNNBenchmarkDataConfig
from .gnnbenchmark import (
    MODEL_NAMES,
    BaselineConfig,
    ETGraphModelConfig,
    GNNBenchmarkTrainConfig,
)

#: The models that read each model-specific config section (the rest are read by all).
FLAG_READERS = {"et": ("et",), "baselines": ("gin", "gatedgcn"), "run.native_attention": ("et",)}


@dataclass
class ProtocolConfig:
    """Which models run, and with which seeds.

    Attributes:
        models: comma-separated subset of et,gin,gatedgcn.
        seeds: comma-separated list of the seeds (initialisation and batch order), e.g. 0,1,2
            for three runs; not a count as in et-graph anomaly (2 runs seed 2 once).
    """

    models: str = ",".join(MODEL_NAMES)
    seeds: str = "0,1,2"

    def __post_init__(self) -> None:
        parse_model_list(self.models, MODEL_NAMES)  # an unknown or empty list fails here
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
                          UserWarning, stacklevel=2)

    @property
    def model_names(self) -> list[str]:
        """The models in the given order, each once (``gin,gin`` trains GIN once per seed)."""
        return parse_model_list(self.models, MODEL_NAMES)

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
