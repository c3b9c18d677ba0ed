from .et_conv import ETConv
from .et_energy import EdgeSet, ETEnergy

__all__ = ["ETConv", "ETEnergy", "EdgeSet"]
