from .anomaly import ETAnomalyDetector, weighted_bce_loss

__all__ = ["ETAnomalyDetector", "weighted_bce_loss"]
