from .et_conv import ETConv
from .et_energy import EdgeSet, ETEnergy
from .relational_et_conv import RelationalETConv

__all__ = ["ETConv", "ETEnergy", "EdgeSet", "RelationalETConv"]
