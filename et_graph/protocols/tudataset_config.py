"""Typed configuration of a TU graph-classification run (``et-graph tudataset``), the models it
builds, and its declared per-fold selection grid.

:class:`TUDatasetConfig` is the one source of defaults for the CLI, the presets in
``configs/tudataset/`` and the tuner; :func:`model_factories` builds the models of a config and
:func:`grid_configs` the config of each candidate of ``protocol.grid``
(:func:`et_graph.protocols.graph_cv.cross_validate_selected` runs them).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, ClassVar, Optional

from torch import nn

from .. import config as config_grid
from .. import plugins
from ..baselines.graph_baselines import GINClassifier, StructureAgnosticMLP
from ..config import RunConfig, check_ranges, parse_model_list
from ..nn.models.graph_model import ETGraphModel
from .graph_cv import GraphTrainConfig
from .graph_models import (
    GRAPH_MODEL_REGISTRY,
    UNKNOWN_GRAPH_MODEL_HINT,
    RegisteredGraphModel,
    known_graph_models,
    registered_graph_models,
)

#: The built-in models; :func:`~et_graph.protocols.graph_models.known_graph_models` adds the
#: registered ones.
MODEL_NAMES = ("et", "gin", "structure_agnostic")


@dataclass
class TUDataConfig:
    """Which TU dataset and its structural encodings.

    Attributes:
        dataset: TU dataset name, e.g. MUTAG, PROTEINS, NCI1, ENZYMES, IMDB-BINARY.
        root: folder holding NAME/raw/NAME_*.txt, read only (none = the shipped
            datasets/TUDataset of the checkout).
        cache: writable folder for the copy PyG processes (none = the user's own
            ~/.cache/et_graph/tudataset, or $ET_GRAPH_CACHE/tudataset).
        pe_dim: Laplacian eigenvectors k of the positional encoding.
        rw_pe_dim: random-walk return probabilities (1..k steps) added to the ET tokens (0 = off).
        degree_feature: append log1p(degree) to the node features (every model sees it).
        incident_edge_sums: append each node's summed incoming edge features to its node
            features (with one-hot bond types: its bonds counted by type; every model sees
            them; only for datasets with edge labels, e.g. MUTAG and Mutagenicity).
    """

    dataset: str = "MUTAG"
    root: Optional[str] = None
    cache: Optional[str] = None
    pe_dim: int = 0
    rw_pe_dim: int = 16
    degree_feature: bool = False
    incident_edge_sums: bool = False

    def __post_init__(self) -> None:
        # when parsed: it names folders of the root, the cache and the output
        from ..datasets.tudataset import check_dataset_name

        check_dataset_name(self.dataset)
        for name in ("pe_dim", "rw_pe_dim"):  # named here; the transforms say only "k"
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = off), got {getattr(self, name)}")


@dataclass
class TUProtocolConfig:
    """The cross-validation protocol.

    Attributes:
        folds: stratified outer folds.
        seed: seed of the folds, the inner splits and the models.
        val_fraction: stratified validation share of each training fold (selects the epoch).
        max_folds: run only the first this many folds (none = all).
        models: comma-separated subset of et, gin, structure_agnostic and the registered graph
            models (et_graph.protocols.graph_models.register_graph_model, --plugin).
        runs_per_fold: final trainings per model and fold, each from its own seed; the fold's
            test accuracy is their mean (Errica et al. use 3).
        validation_only: a validation probe: the test folds are never scored, and the outputs
            hold inner-validation accuracies only.
        grid: Errica et al.'s selection inside each fold over declared candidates besides the
            preset itself, as "NAME: section.field=value, ...; NAME: ...", e.g.
            "ls0.1: train.label_smoothing=0.1; wide: et.hidden=64" (sections et, baselines,
            train). Every model trains every candidate in every fold; each fold is scored by
            the candidate with the best inner validation (ties: the preset, then the order
            given). None = the preset alone.
    """

    folds: int = 10
    seed: int = 0
    val_fraction: float = 0.1
    max_folds: Optional[int] = None
    models: str = ",".join(MODEL_NAMES)
    runs_per_fold: int = 1
    validation_only: bool = False
    grid: Optional[str] = None

    def __post_init__(self) -> None:
        # an unknown model fails here
        parse_model_list(self.models, known_graph_models(), UNKNOWN_GRAPH_MODEL_HINT)
        # Here, not after the dataset is loaded and its encodings computed (minutes on NCI1).
        if self.folds < 2:
            raise ValueError(f"folds must be >= 2, got {self.folds}")
        if not 0 <= self.seed < 2**32:  # (NumPy's own message came after the data loaded)
            raise ValueError(f"seed must lie in [0, 2**32), got {self.seed}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must lie in (0, 1), got {self.val_fraction}")
        if self.runs_per_fold < 1:
            raise ValueError(f"runs_per_fold must be >= 1, got {self.runs_per_fold}")
        if self.max_folds is not None and self.max_folds < 1:
            raise ValueError(f"max_folds must be >= 1 (or none for every fold), got "
                             f"{self.max_folds}")
        if self.grid is not None:
            parse_grid(self.grid)  # a malformed grid fails here, before any data is loaded
            if self.validation_only:
                raise ValueError("grid selects on validation and scores the test folds; a "
                                 "validation-only probe of a grid is tu_validation_probe.py")

    @property
    def model_names(self) -> list[str]:
        """The models of ``models``: built-in or registered, lower-cased, each once."""
        return parse_model_list(self.models, known_graph_models(), UNKNOWN_GRAPH_MODEL_HINT)


#: The models that read each model-specific config section or field (the rest read by all):
#: the structural encodings go to ET's tokens only.
FLAG_READERS = {
    "et": ("et",), "data.pe_dim": ("et",), "data.rw_pe_dim": ("et",),
    "baselines": ("gin", "structure_agnostic"), "baselines.gin_layers": ("gin",),
    "baselines.gin_edges": ("gin",), "baselines.mlp_hidden": ("structure_agnostic",),
    "baselines.mlp_dropout": ("structure_agnostic",), "run.native_attention": ("et",),
}


def flag_readers() -> dict[str, tuple[str, ...]]:
    """:data:`FLAG_READERS` with every registered graph model added to each entry: its factory
    is given the whole config (and its forward the whole batch, encodings included), and which
    of it it reads cannot be told, so no setting is called unread (nor left out of a study's
    resume check) on its account."""
    return GRAPH_MODEL_REGISTRY.readers(FLAG_READERS)


#: Config sections a grid candidate may change (the data, protocol and run stay fixed).
GRID_SECTIONS = ("et", "baselines", "train")


def parse_grid(text: str) -> list[tuple[str, dict[str, str]]]:
    """The candidates of ``protocol.grid`` (:func:`et_graph.config.parse_grid`)."""
    return config_grid.parse_grid(text, GRID_SECTIONS)


@dataclass
class TUETConfig:
    """The graph-level ET (:class:`~et_graph.nn.models.graph_model.ETGraphModel`).

    Attributes:
        hidden: token width D.
        blocks: stacked ET blocks S.
        steps: descent steps T per block.
        heads: attention heads.
        head_dim: key/query width per head.
        alpha: descent step size.
        noise_std: noise added to the tokens at each step in training (paper eq. 27).
        kernel_size: Conv2D adjacency-mask kernel (3 = paper, 1 = permutation-equivariant).
        dropout: dropout in the readout MLP.
        readout: cls (the CLS token), cls_sum_mean (CLS, sum and mean of the node tokens) or
            jk (CLS and the sums of the node tokens at the input and after every block).
        coupling: add the edge coupling energy (its step sums the neighbours' tokens: it counts).
        hopfield_dim: Hopfield memories K per block (None = 4 × hidden, the paper's ratio;
            0 = none, attention energy only).
        message_passing_layers: residual GIN layers (sum aggregation) before the descent.
        message_passing_edges: those layers' messages also read the encoded edge features
            (GINE's form); needs a dataset with edge features (MUTAG, Mutagenicity).
        attention_edges: the blocks' attention reads the encoded edge features as key
            offsets (ETConv's edge_dim); needs a dataset with edge features.
    """

    hidden: int = 32
    blocks: int = 2
    steps: int = 1
    heads: int = 4
    head_dim: int = 8
    alpha: float = 0.34
    noise_std: float = 0.02
    kernel_size: int = 3
    dropout: float = 0.07
    readout: str = "cls_sum_mean"
    coupling: bool = False
    hopfield_dim: Optional[int] = None
    message_passing_layers: int = 2
    message_passing_edges: bool = False
    attention_edges: bool = False


@dataclass
class TUBaselinesConfig:
    """GIN and the structure-agnostic MLP (Errica et al., 2020).

    Attributes:
        gin_hidden: hidden width of GIN (and of the MLP where ``mlp_hidden`` is none).
        gin_layers: GIN layers.
        baseline_dropout: dropout of GIN (and of the MLP where ``mlp_dropout`` is none).
        mlp_hidden: hidden width of the structure-agnostic MLP (none = ``gin_hidden``).
        mlp_dropout: dropout of the structure-agnostic MLP (none = ``baseline_dropout``).
        gin_edges: GIN's layers read the edge features (``GINEConv``, Hu et al. 2020), the
            partner of ``et.message_passing_edges``; refused on data without edge features.
    """

    gin_hidden: int = 64
    gin_layers: int = 4
    baseline_dropout: float = 0.2
    mlp_hidden: Optional[int] = 128
    mlp_dropout: Optional[float] = 0.5
    gin_edges: bool = False

    def __post_init__(self) -> None:
        check_ranges(self, "baselines", positive_ints=("gin_hidden", "gin_layers", "mlp_hidden"),
                     dropouts=("baseline_dropout", "mlp_dropout"))


@dataclass
class TUDatasetConfig:
    """Everything ``et-graph tudataset`` needs (presets: ``configs/tudataset/NAME.toml``).

    The defaults are the best *general* preset found on inner validation (no test fold read):
    ``benchmarks/tu_general_preset.py`` chose 16 random-walk encodings, two blocks of width 32,
    T = 1, α = 0.34, learning rate 1.7e-3 (cosine), ≤ 80 epochs with patience 20; the mean rank
    over five datasets (``tu_validation_probe.py --datasets``) then added two message-passing
    layers with the CLS ‖ sum ‖ mean readout and gave GIN 4 layers; a later probe gave GIN
    dropout 0.2 and the structure-agnostic MLP width 128 (each ranked on its own).
    """

    data: TUDataConfig = field(default_factory=TUDataConfig)
    protocol: TUProtocolConfig = field(default_factory=TUProtocolConfig)
    et: TUETConfig = field(default_factory=TUETConfig)
    baselines: TUBaselinesConfig = field(default_factory=TUBaselinesConfig)
    train: GraphTrainConfig = field(
        default_factory=lambda: GraphTrainConfig(epochs=80, lr=1.7e-3, batch_size=64,
                                                 patience=20)
    )
    run: RunConfig = field(default_factory=lambda: RunConfig(out="runs/tudataset", threads=1))

    #: ``--quick``: the first 2 folds, 2 epochs, a small ET (one block of width 16).
    QUICK: ClassVar[dict[str, Any]] = {
        "protocol.max_folds": 2, "train.epochs": 2, "et.hidden": 16, "et.blocks": 1,
        "et.steps": 2, "protocol.runs_per_fold": 1,
    }


CONFIG = TUDatasetConfig


def et_model_kwargs(config: TUDatasetConfig, info: dict[str, Any]) -> dict[str, Any]:
    """The :class:`ETGraphModel` constructor arguments of ``config`` for data described by
    ``info`` (from :func:`~et_graph.datasets.load_tudataset`): what ``et-graph tudataset``
    builds, and what benchmarks vary one argument of."""
    et = config.et
    return dict(
        in_channels=info["node_feature_width"], out_channels=info["classes"],
        hidden_channels=et.hidden, blocks=et.blocks, steps=et.steps, heads=et.heads,
        head_dim=et.head_dim, alpha=et.alpha, noise_std=et.noise_std, pe_dim=config.data.pe_dim,
        kernel_size=et.kernel_size, edge_dim=info["edge_features"] or None, dropout=et.dropout,
        rw_pe_dim=config.data.rw_pe_dim, readout=et.readout, coupling=et.coupling,
        hopfield_dim=et.hopfield_dim, message_passing_layers=et.message_passing_layers,
        message_passing_edges=et.message_passing_edges, attention_edges=et.attention_edges,
    )


def model_factories(config: TUDatasetConfig, info: dict[str, Any],
                    registry: Optional[Mapping[str, RegisteredGraphModel]] = None
                    ) -> dict[str, Callable[[], nn.Module]]:
    """``{name: () -> model}`` for the models of ``config.protocol.models``; a registered one
    from its factory (in ``registry``, default the registered graph models now; a run passes
    the ones it started with: :func:`registered_models_of`)."""
    width, classes = info["node_feature_width"], info["classes"]
    base = config.baselines
    names = config.protocol.model_names
    for switch, value, model in (("baselines.gin_edges", base.gin_edges, "gin"),
                                 ("et.message_passing_edges", config.et.message_passing_edges,
                                  "et"),
                                 ("et.attention_edges", config.et.attention_edges, "et")):
        # (ETGraphModel's own message named constructor arguments a CLI user cannot set)
        if value and model in names and not info["edge_features"]:
            raise ValueError(f"{switch} needs edge features, and {config.data.dataset} has "
                             "none here")
    gin_edge_channels = info["edge_features"] if base.gin_edges else 0
    factories: dict[str, Callable[[], nn.Module]] = {
        "et": lambda: ETGraphModel(**et_model_kwargs(config, info)),
        "gin": lambda: GINClassifier(width, classes, base.gin_hidden, base.gin_layers,
                                     base.baseline_dropout, edge_channels=gin_edge_channels),
        "structure_agnostic": lambda: StructureAgnosticMLP(
            width, classes, base.gin_hidden if base.mlp_hidden is None else base.mlp_hidden,
            base.baseline_dropout if base.mlp_dropout is None else base.mlp_dropout),
    }
    registered = registered_graph_models() if registry is None else registry
    for name in config.protocol.model_names:
        if name in factories:
            continue
        if name not in registered:  # unregistered since the config was read
            raise ValueError(f"model {name!r} is not registered ({UNKNOWN_GRAPH_MODEL_HINT})")
        factories[name] = partial(registered[name].build, config, info)
    return {name: factories[name] for name in config.protocol.model_names}


def registered_models_of(config: TUDatasetConfig, info: dict[str, Any], graphs: Sequence[Any]
                         ) -> tuple[dict[str, RegisteredGraphModel], dict[str, str]]:
    """The registrations of the registered models ``config`` runs, and the class of each,
    built once for the data ``info`` describes and its outputs checked on ``graphs``' first
    two: a factory of the wrong kind or output shape is named before any training, and a name
    registered again while the run goes on (``replace=True``) cannot mix two models in one
    row (the run builds every fold from these registrations)."""
    registry = GRAPH_MODEL_REGISTRY.snapshot(config.protocol.model_names)
    kinds = {name: entry.check(config, info, graphs) for name, entry in registry.items()}
    return registry, kinds


def describe_registered(kinds: Mapping[str, str]) -> str:
    """The protocol's clause on the registered models of a run (``""`` without any)."""
    return plugins.describe_registered(
        kinds, "graph model", "trained as GIN is, with the train section, and read what their "
        "forward reads of each batch")


def grid_configs(config: TUDatasetConfig) -> dict[str, TUDatasetConfig]:
    """``{candidate: the full config it trains}`` for ``config.protocol.grid``, the preset
    first; unknown fields and bad values raise here."""
    return config_grid.grid_configs(config, config.protocol.grid, GRID_SECTIONS)


def load_graphs(data: TUDataConfig, progress: bool = False) -> tuple[list, dict[str, Any]]:
    """The graphs and their description as ``data`` configures them (encodings and extra node
    features included); graphs of a dataset without edge features carry ``edge_attr=None``."""
    from ..datasets.tudataset import load_tudataset

    graphs, info = load_tudataset(data.root, data.dataset, data.cache, data.pe_dim, progress,
                                  rw_pe_dim=data.rw_pe_dim, degree_feature=data.degree_feature,
                                  incident_edge_sums=data.incident_edge_sums)
    if not info["edge_features"]:
        for g in graphs:
            g.edge_attr = None
    return graphs, info
