"""et-graph: the Energy Transformer for PyTorch Geometric."""
from . import energy, transforms
from .nn import ETConv, ETGraphModel, RelationalETConv
from .nn.models import ETAnomalyNet, ETImageCompletion

__version__ = "0.1.0"

__all__ = [
    "ETAnomalyNet",
    "ETConv",
    "ETGraphModel",
    "ETImageCompletion",
    "RelationalETConv",
    "energy",
    "transforms",
    "__version__",
]
