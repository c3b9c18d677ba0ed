"""One training engine for every task: :class:`Trainer` with a task's loss and validation."""
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .engine import (
    CheckpointConfig,
    FitResult,
    TrainConfig,
    Trainer,
    TrainingTask,
    Validation,
    WeightAverage,
    dataclass_defaults,
    is_distributed,
    keeps_caller_rng,
    private_rng,
    rank_world,
    seed_everything,
)
from .modes import evaluates_model, evaluation_mode

__all__ = [
    "CheckpointConfig",
    "CheckpointError",
    "FitResult",
    "TrainConfig",
    "Trainer",
    "TrainingTask",
    "Validation",
    "WeightAverage",
    "dataclass_defaults",
    "is_distributed",
    "keeps_caller_rng",
    "load_checkpoint",
    "save_checkpoint",
    "private_rng",
    "rank_world",
    "seed_everything",
    "evaluates_model",
    "evaluation_mode",
]
