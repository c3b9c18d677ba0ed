"""Hyperparameter search with Optuna on validation data only (``et-graph tune``)."""
from .anomaly import TUNE_METRICS, AnomalyObjective, validation_metric
from .study import TuneBudget, run_study, study_summary

__all__ = ["TUNE_METRICS", "AnomalyObjective", "TuneBudget", "run_study", "study_summary",
           "validation_metric"]
