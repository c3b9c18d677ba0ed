"""et-graph: the Energy Transformer for PyTorch Geometric."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # type checkers and IDEs see the names the imports below would bind
    from . import energy, exceptions, transforms
    from .nn import ETConv, ETGraphModel, RelationalETConv
    from .nn.models import ETAnomalyNet, ETImageCompletion

#: Each public name and the submodule it comes from, imported on first use: importing the
#: package (which every ``et_graph.*`` import does, the ``et-graph`` command included) no
#: longer imports torch and PyG, so ``et-graph --version`` answers at once.
_LAZY = {
    "ETAnomalyNet": ".nn.models",
    "ETConv": ".nn",
    "ETGraphModel": ".nn",
    "ETImageCompletion": ".nn.models",
    "RelationalETConv": ".nn",
    "energy": ".energy",
    "exceptions": ".exceptions",
    "transforms": ".transforms",
}

__all__ = [
    "ETAnomalyNet",
    "ETConv",
    "ETGraphModel",
    "ETImageCompletion",
    "RelationalETConv",
    "energy",
    "exceptions",
    "transforms",
    "__version__",
]


if not TYPE_CHECKING:  # to a type checker a misspelt name (et_graph.ETCnv) was Any, not an
    # error, through this module __getattr__ (a typing audit): the names are above
    def __getattr__(name: str) -> Any:
        if name in _LAZY:
            module = importlib.import_module(_LAZY[name], __name__)
            value = module if module.__name__ == f"{__name__}.{name}" else getattr(module, name)
        elif not name.startswith("_"):
            # ``et_graph.nn`` after ``import et_graph``: the eager imports had loaded it
            try:
                value = importlib.import_module(f".{name}", __name__)
            except ModuleNotFoundError as error:
                if error.name != f"{__name__}.{name}":
                    raise  # a submodule that exists and failed to import names its own cause
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value  # later lookups skip this function
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
