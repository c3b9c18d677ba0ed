"""Thin models around ``ETConv``: node anomaly detection, graph-level tasks, image completion."""
from .anomaly import ETAnomalyNet, auc_square_loss, weighted_bce_loss
from .graph_model import ETGraphModel
from .image_completion import ETImageCompletion
from .masked_reconstruction import ETMaskedNodeReconstruction

__all__ = ["ETAnomalyNet", "ETGraphModel", "ETImageCompletion", "ETMaskedNodeReconstruction",
           "auc_square_loss", "weighted_bce_loss"]
