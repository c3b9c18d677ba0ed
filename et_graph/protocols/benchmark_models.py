"""GNNBenchmark models of your own under a model name, run beside ET, GIN and GatedGCN.

A registered name joins ``--models`` of ``et-graph gnnbenchmark`` and ``et-graph tune
gnnbenchmark`` (``protocol.models`` in Python): the model is trained by the same engine as the
built-in models, on the same splits and seeds, with the run's ``train`` section (its epoch
selected on the validation split, the test split evaluated once); it is a row of the tables and
the validation-curve plot, and one of ET's differences. With a search space, the tuner gives it
the same budget as the built-in models.

.. code-block:: python

    from et_graph.protocols.benchmark_models import register_benchmark_model
    register_benchmark_model("sage_bench", make_sage, search_space=sage_space)

The contract:

* ``factory(config, data)`` returns one new, untrained ``torch.nn.Module``. ``config`` is the
  run's :class:`~et_graph.protocols.gnnbenchmark_config.GNNBenchmarkConfig` (a trial's, when
  tuning), ``data`` the loaded :class:`~et_graph.datasets.gnnbenchmark_common.BenchmarkData`:
  ``task``, ``num_outputs``, ``num_node_types`` or ``node_dim``, ``num_edge_types`` or
  ``edge_dim`` (or neither), ``rw_pe_dim``. It is called once before any training (its model
  checked, then dropped), then once per seed after the seed is set, so that the seed chooses
  its initialisation.
* The model's ``forward_data(batch)``, if it has one, is given the whole PyG batch; else it is
  called as ``forward(x, edge_index, batch, edge_attr=..., rw_pe=...)``. ``x`` holds long ids
  ``[num_nodes, 1]`` where ``data.num_node_types`` is set (ZINC's atoms), else float features
  ``[num_nodes, data.node_dim]``; ``edge_attr`` holds long ids ``[num_edges]``
  (``data.num_edge_types``: ZINC's bonds), float ``[num_edges, data.edge_dim]``, or is
  ``None``; ``rw_pe`` is the random-walk encoding ``[num_nodes, data.rw_pe_dim]`` every model is
  given (``None`` at ``--rw-pe-dim 0``). The Laplacian PE (``lap_pe``, ``cls_lap_pe``) is ET's own
  input, computed only when ET runs and taken off the batch ``forward_data`` is given.
* It returns, for ``data.task`` ``"regression"`` (ZINC), one value per graph, ``[num_graphs]``
  or ``[num_graphs, 1]`` (L1 loss, MAE); ``"node"`` (PATTERN, CLUSTER), class logits
  ``[num_nodes, num_outputs]`` (cross-entropy weighted by the training classes, weighted
  accuracy); ``"classification"`` (MNIST, CIFAR10), class logits ``[num_graphs, num_outputs]``
  (cross-entropy, accuracy). The shape is checked on two training graphs before any training.
* A model with a ``fit_feature_scaling(x)`` method is given the training split's node features
  before training on a graph-classification dataset with float features, as ET is.
* ``search_space(trial)`` returns overrides of the config's sections, which the factory reads
  (``{"baselines": {"baseline_hidden": ...}, "train": {"lr": ...}}``).

Plugins (``--plugin MODULE``, ``ET_GRAPH_PLUGINS``) load such modules first, as for the other
tasks (:mod:`et_graph.plugins`); ``meta.plugins.benchmark_models`` of the results records them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Callable, Optional

from torch import nn

from ..datasets.gnnbenchmark_common import BenchmarkData
from ..plugins import (
    Registration,
    SearchSpace,
    TorchModelRegistry,
    checked_module,
    outputs_on_two_graphs,
)
from .gnnbenchmark import MODEL_NAMES, predict

if TYPE_CHECKING:
    from .gnnbenchmark_config import GNNBenchmarkConfig

#: ``factory(config, data) -> nn.Module``: one new, untrained model for the loaded data.
BenchmarkModelFactory = Callable[["GNNBenchmarkConfig", BenchmarkData], nn.Module]

#: What an unknown GNNBenchmark model name's error adds: where one's own models come from.
UNKNOWN_BENCHMARK_MODEL_HINT = ("a model of your own is named once registered by "
                                "et_graph.protocols.benchmark_models.register_benchmark_model; "
                                "on the command line, in a module that --plugin MODULE loads")

#: What the model's forward returns, for the error of a factory returning something else.
RETURNS = ("one value per graph (regression) or class logits per graph or node (see "
           "et_graph.protocols.benchmark_models)")


class RegisteredBenchmarkModel(Registration):
    """A registered GNNBenchmark model: its name, factory and optional search space."""

    def build(self, config: GNNBenchmarkConfig, data: BenchmarkData) -> nn.Module:
        """The factory's model for ``data``, checked to be a module the engine can train."""
        return checked_module(self.factory(config, data),
                              f"registered benchmark model {self.name!r}", RETURNS)

    def check(self, config: GNNBenchmarkConfig, data: BenchmarkData) -> str:
        """Build the model once and check its outputs on two training graphs, on the run's
        device (see :func:`check_outputs`), before any training; returns its class name."""
        model = self.build(config, data)
        check_outputs(model.to(config.run.device), data,
                      f"registered benchmark model {self.name!r}", config.run.device)
        return type(model).__name__


def check_outputs(model: nn.Module, data: BenchmarkData, origin: str,
                  device: str = "cpu") -> None:
    """``ValueError`` naming ``origin`` unless ``model``'s outputs on two training graphs (moved
    to ``device``, the model's) have the shape that ``data.task``'s loss and metric read: a
    regression output of another shape could broadcast against the targets and train on a
    wrong loss without an error."""
    batch, shape = outputs_on_two_graphs(model, data.splits["train"], predict, device, origin)
    rows, what = ((batch.num_nodes, "nodes") if data.task == "node"
                  else (batch.num_graphs, "graphs"))
    wanted = (rows,) if data.task == "regression" else (rows, data.num_outputs)
    if shape != wanted:
        needs = ("one value per graph, [num_graphs] or [num_graphs, 1]"
                 if data.task == "regression"
                 else f"class logits [num_{what}, {data.num_outputs}]")
        raise ValueError(f"{origin}: its outputs on {rows} training {what} have shape "
                         f"{list(shape)}; {data.name}'s {data.task} task needs {needs}")


def builtin_benchmark_models() -> tuple[str, ...]:
    """The built-in model names of ``et-graph gnnbenchmark``."""
    return MODEL_NAMES


#: The registered GNNBenchmark models. The figures draw ``NAME_ensemble`` as NAME's own, and
#: the tuner names the study of N tuning seeds ``...-MODEL-seedsN`` (``gin-seeds2`` would be
#: GIN's two-seed study): both are refused.
BENCHMARK_MODEL_REGISTRY: TorchModelRegistry[RegisteredBenchmarkModel] = TorchModelRegistry(
    "benchmark model", "benchmark_models", RegisteredBenchmarkModel, ("config", "data"),
    builtin_benchmark_models, derived={"*_ensemble": r".*_ensemble", "*-seedsN": r".*-seeds\d+"})


def register_benchmark_model(name: str, factory: BenchmarkModelFactory, *,
                             search_space: Optional[SearchSpace] = None,
                             replace: bool = False) -> RegisteredBenchmarkModel:
    """Make ``name`` a model of ``et-graph gnnbenchmark`` and its tuner (see the module
    docstring).

    Args:
        name: lower-case letters, digits, ``_``, ``.``, ``-``; not a built-in model's name
            (``et``, ``gin``, ``gatedgcn``) nor one a run derives (``*_ensemble``,
            ``*-seedsN``).
        factory: ``factory(config, data)`` -> a new, untrained ``torch.nn.Module``.
        search_space: ``space(trial)`` -> overrides of the run config's sections for one
            Optuna trial; without it, tuning ``name`` is refused.
        replace: replace a model registered under ``name`` (never a built-in).

    Returns the registration. Raises ``ValueError`` for a name that is invalid or taken,
    ``TypeError`` for a factory or space that is not callable with those arguments (or a
    model given as the factory).
    """
    return BENCHMARK_MODEL_REGISTRY.register(name, factory, search_space=search_space,
                                             replace=replace)


def unregister_benchmark_model(name: str) -> None:
    """Remove the model registered under ``name`` (``KeyError`` if there is none)."""
    BENCHMARK_MODEL_REGISTRY.unregister(name)


def registered_benchmark_models() -> Mapping[str, RegisteredBenchmarkModel]:
    """The registered GNNBenchmark models by name, in registration order (a read-only view)."""
    return BENCHMARK_MODEL_REGISTRY.entries()


def known_benchmark_models() -> tuple[str, ...]:
    """The names ``et-graph gnnbenchmark --models`` takes: the built-in models, then the
    registered ones."""
    return (*builtin_benchmark_models(), *registered_benchmark_models())


__all__ = [
    "BENCHMARK_MODEL_REGISTRY",
    "UNKNOWN_BENCHMARK_MODEL_HINT",
    "BenchmarkModelFactory",
    "RegisteredBenchmarkModel",
    "builtin_benchmark_models",
    "check_outputs",
    "known_benchmark_models",
    "register_benchmark_model",
    "registered_benchmark_models",
    "unregister_benchmark_model",
]
