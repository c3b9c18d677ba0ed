"""Evaluation protocols (splits, thresholds, metrics, training loops), apart from the models."""
from . import (
    anomaly,
    benchmark_models,
    gnnbenchmark,
    graph_cv,
    graph_models,
    image_completion,
    significance,
)

__all__ = [
    "anomaly", "benchmark_models", "gnnbenchmark", "graph_cv", "graph_models",
    "image_completion", "significance",
]
