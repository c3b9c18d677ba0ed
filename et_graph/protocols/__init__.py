"""Evaluation protocols (splits, thresholds, metrics, training loops), apart from the models."""
from . import anomaly

__all__ = ["anomaly"]
