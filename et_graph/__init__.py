"""et-graph: the Energy Transformer for PyTorch Geometric."""
from . import energy, transforms
from .nn import ETConv

__version__ = "0.1.0"

__all__ = ["ETConv", "energy", "transforms", "__version__"]
