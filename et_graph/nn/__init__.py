from .conv import ETConv
from .energy_layer_norm import EnergyLayerNorm

__all__ = ["ETConv", "EnergyLayerNorm"]
