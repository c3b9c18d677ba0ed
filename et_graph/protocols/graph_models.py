"""Graph classifiers of your own under a model name, run beside ET and GIN.

A registered name joins ``--models`` of ``et-graph tudataset`` and ``et-graph tune tudataset``
(``protocol.models`` in Python): the model is trained by the same engine as GIN, on the same
folds, inner splits and seeds, with the run's ``train`` section; it is a row of the tables and
the accuracy plot, and one of ET's differences. With a search space, the tuner gives it the same
budget as the built-in models.

.. code-block:: python

    from et_graph.protocols.graph_models import register_graph_model
    register_graph_model("sage_graph", make_sage, search_space=sage_space)

``factory(config, info)`` returns one new, untrained ``torch.nn.Module`` for the data ``info``
describes (the dict of :func:`~et_graph.datasets.load_tudataset`: ``node_feature_width``,
``classes``, ``edge_features``, ...), as the run's
:class:`~et_graph.protocols.tudataset_config.TUDatasetConfig` ``config`` sets it. Its
``forward_data(batch)``, if it has one, else ``forward(x, edge_index, batch)`` returns class
logits ``[num_graphs, classes]``. ``search_space(trial)`` returns overrides of the config's
sections (``{"baselines": {...}, "train": {"lr": ...}}``), which the factory reads.

Plugins (``--plugin MODULE``, ``ET_GRAPH_PLUGINS``) load such modules first, as for the
anomaly detectors (:mod:`et_graph.plugins`); ``meta.plugins`` of the results records them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional

from torch import nn
from torch_geometric.data import Data

from ..plugins import (
    Registration,
    SearchSpace,
    TorchModelRegistry,
    checked_module,
    outputs_on_two_graphs,
)

if TYPE_CHECKING:
    from .tudataset_config import TUDatasetConfig

#: ``factory(config, info) -> nn.Module``: one new, untrained graph classifier.
GraphModelFactory = Callable[["TUDatasetConfig", dict[str, Any]], nn.Module]

#: What an unknown TU model name's error adds: where the names of one's own models come from.
UNKNOWN_GRAPH_MODEL_HINT = ("a graph model of your own is named once registered by "
                            "et_graph.protocols.graph_models.register_graph_model; on the "
                            "command line, in a module that --plugin MODULE loads")


class RegisteredGraphModel(Registration):
    """A registered graph classifier: its name, factory and optional search space."""

    def build(self, config: TUDatasetConfig, info: dict[str, Any]) -> nn.Module:
        """The factory's model for data described by ``info``, checked to be a module the
        engine can train."""
        return checked_module(self.factory(config, info), f"registered graph model {self.name!r}",
                              "class logits [num_graphs, classes]")

    def check(self, config: TUDatasetConfig, info: dict[str, Any], graphs: Sequence[Data]
              ) -> str:
        """Build the model once and check its outputs on the first two graphs, before any
        training: class logits ``[2, classes]``. A model that forgets to pool failed only
        inside the loss, after the other models' first fold, and one with more logits than
        classes trained without a word, predicting classes that do not exist. Returns its
        class name."""
        from .graph_cv import model_outputs

        model = self.build(config, info).to(config.run.device)
        batch, shape = outputs_on_two_graphs(model, graphs, model_outputs, config.run.device,
                                             f"registered graph model {self.name!r}")
        wanted = (batch.num_graphs, int(info["classes"]))
        if shape != wanted:
            raise ValueError(f"registered graph model {self.name!r}: its outputs on "
                             f"{batch.num_graphs} graphs have shape {list(shape)}; "
                             f"{config.data.dataset} needs class logits [num_graphs, "
                             f"{wanted[1]}] (one row per graph: pool the nodes, e.g. "
                             "torch_geometric.nn.global_add_pool(h, batch))")
        return type(model).__name__


def builtin_graph_models() -> tuple[str, ...]:
    """The built-in model names of ``et-graph tudataset``."""
    from .tudataset_config import MODEL_NAMES

    return MODEL_NAMES


#: The registered graph models. A run derives checkpoint names ``NAME-runN`` (the further
#: trainings of a fold) and the figures draw ``NAME_ensemble`` as NAME's own: both are refused.
GRAPH_MODEL_REGISTRY: TorchModelRegistry[RegisteredGraphModel] = TorchModelRegistry(
    "graph model", "graph_models", RegisteredGraphModel, ("config", "info"),
    builtin_graph_models, derived={"*_ensemble": r".*_ensemble", "*-runN": r".*-run\d+",
                                   # MODEL's --tune-bonds study is named MODEL-bonds
                                   "*-bonds": r".*-bonds"})


def register_graph_model(name: str, factory: GraphModelFactory, *,
                         search_space: Optional[SearchSpace] = None,
                         replace: bool = False) -> RegisteredGraphModel:
    """Make ``name`` a model of ``et-graph tudataset`` and its tuner (see the module docstring).

    Args:
        name: lower-case letters, digits, ``_``, ``.``, ``-``; not a built-in model's name
            (``et``, ``gin``, ``structure_agnostic``) nor one a run derives (``*-runN``,
            ``*_ensemble``).
        factory: ``factory(config, info)`` -> a new, untrained ``torch.nn.Module``.
        search_space: ``space(trial)`` -> overrides of the run config's sections for one
            Optuna trial; without it, tuning ``name`` is refused.
        replace: replace a model registered under ``name`` (never a built-in).

    Returns the registration. Raises ``ValueError`` for a name that is invalid or taken,
    ``TypeError`` for a factory or space that is not callable with those arguments.
    """
    return GRAPH_MODEL_REGISTRY.register(name, factory, search_space=search_space,
                                         replace=replace)


def unregister_graph_model(name: str) -> None:
    """Remove the graph model registered under ``name`` (``KeyError`` if there is none)."""
    GRAPH_MODEL_REGISTRY.unregister(name)


def registered_graph_models() -> Mapping[str, RegisteredGraphModel]:
    """The registered graph models by name, in registration order (a read-only view)."""
    return GRAPH_MODEL_REGISTRY.entries()


def known_graph_models() -> tuple[str, ...]:
    """The names ``et-graph tudataset --models`` takes: the built-in models, then the
    registered ones."""
    return (*builtin_graph_models(), *registered_graph_models())


__all__ = [
    "GRAPH_MODEL_REGISTRY",
    "UNKNOWN_GRAPH_MODEL_HINT",
    "GraphModelFactory",
    "RegisteredGraphModel",
    "builtin_graph_models",
    "known_graph_models",
    "register_graph_model",
    "registered_graph_models",
    "unregister_graph_model",
]
