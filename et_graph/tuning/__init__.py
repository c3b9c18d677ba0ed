"""Hyperparameter search with Optuna on validation data only (``et-graph tune``)."""
from .anomaly import TUNE_METRICS, AnomalyObjective, validation_metric
from .nested import nested_cross_validate
from .study import TuneBudget, run_study, study_summary

__all__ = ["TUNE_METRICS", "AnomalyObjective", "TuneBudget", "nested_cross_validate",
           "run_study", "study_summary", "validation_metric"]
