from .adjacency_mask import Conv2DAdjacencyMask
from .conv import EdgeSet, ETConv, ETEnergy, RelationalETConv
from .dropout import Dropout
from .encoders import (
    EdgeEncoder,
    LaplacianPEEncoder,
    MeanMessagePassing,
    NodeEncoder,
    SumMessagePassing,
)
from .energy_layer_norm import EnergyLayerNorm
from .models.graph_model import ETGraphModel
from .pool import CLSGraph, CLSPool

__all__ = [
    "CLSGraph",
    "CLSPool",
    "Conv2DAdjacencyMask",
    "Dropout",
    "ETConv",
    "ETEnergy",
    "EdgeSet",
    "ETGraphModel",
    "EdgeEncoder",
    "EnergyLayerNorm",
    "LaplacianPEEncoder",
    "MeanMessagePassing",
    "NodeEncoder",
    "RelationalETConv",
    "SumMessagePassing",
]
