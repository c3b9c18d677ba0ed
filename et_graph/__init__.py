"""et-graph: the Energy Transformer for PyTorch Geometric."""
from . import energy, transforms
from .nn import ETConv, ETGraphModel
from .nn.models import ETAnomalyDetector, ETImageCompletion

__version__ = "0.1.0"

__all__ = [
    "ETAnomalyDetector",
    "ETConv",
    "ETGraphModel",
    "ETImageCompletion",
    "energy",
    "transforms",
    "__version__",
]
