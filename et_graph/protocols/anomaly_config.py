"""Typed configuration of a node anomaly run (``et-graph anomaly``), and the detectors it builds.

:class:`AnomalyConfig` is the one source of defaults for the CLI, the presets in
``configs/anomaly/`` and the tuner. :func:`detector_config` maps it onto each detector's own
config (:mod:`et_graph.detectors.config`), :func:`with_detector_config` back.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Optional, cast

from torch_geometric.data import Data

from ..config import RunConfig, check_ranges, parse_model_list
from ..datasets.fraud_mat import check_unlabelled_prefix
from ..detectors import (
    DETECTORS,
    BaseDetector,
    ETDetectorConfig,
    ETModelConfig,
    GBTDetectorConfig,
    GBTModelConfig,
    GNNDetectorConfig,
    GNNModelConfig,
    NodeTrainConfig,
    registered_detectors,
)
from ..detectors.registry import (
    DETECTOR_REGISTRY,
    RegisteredDetector,
    checked_detector,
    reserved_name,
)
from ..detectors.stacked import check_fold_count, check_folds
from ..nn.validation import check_chunk_size, check_positive_int
from ..transforms.features import prepare_detection_data
from ..transforms.neighbourhood import NeighbourhoodStatistics, parse_neighbour_stats
from .anomaly import ENERGY_ROW  # noqa: F401 - its home before protocols.anomaly
from .significance import check_bootstrap_rounds

#: The built-in models; :func:`known_models` adds the registered ones.
MODEL_NAMES = tuple(DETECTORS)
#: The models built on ET's ``et`` and ``train`` sections (``et_stacked`` adds its trees').
ET_MODELS = ("et", "et_stacked")

#: What an unknown model name's error adds: where the names of one's own detectors come from.
UNKNOWN_MODEL_HINT = ("a detector of your own is named once registered by "
                      "et_graph.detectors.register_detector; on the command line, in a module "
                      "that --plugin MODULE loads")


def known_models() -> tuple[str, ...]:
    """The names ``--models`` takes: the built-in models, then the registered detectors."""
    return (*MODEL_NAMES, *registered_detectors())


@dataclass
class AnomalyDataConfig:
    """Which graph and which label-free feature transform (the same input for every model).

    Attributes:
        dataset: loader name: tolokers (embedded), reddit, inj_amazon, yelpchi, amazon, tfinance,
            tsocial.
        data_root: folder holding the dataset files (yelpchi/amazon .mat, ...).
        data: path to a .mat/.npz/.pt graph file (overrides dataset); its edges are made
            undirected, without self-loops and repeats (the Python detectors keep a graph's
            direction as given).
        relation: YelpChi/Amazon relation: homo (all merged), multi (every relation as an edge
            type, for ET's multi_relation; models without edge types see a pair once per
            relation) or one relation matrix.
        feature_norm: per-column transform over all nodes: none, standard, quantile, or ple
            (the piecewise-linear encoding of ple_bins quantile bins: one column per bin).
        ple_bins: bins per column for feature_norm = ple.
        unlabelled_prefix: leading nodes of a CARE-GNN .mat file without labels, kept out of
            every split (none = 3305 for Amazon, 0 otherwise; a smaller Amazon-layout file
            gives its own count).
        degree_feature: append log(1 + degree) to the node features.
        neighbour_stats: append statistics of each node's in-neighbours' features (a comma list
            of mean, sq_mean, max, min, std, degree; none = off), computed on the raw features
            before feature_norm, label-free, the same for every model.
        binarize: read a .npz/.pt file's labels as anomalous where > 0 (multi-type anomaly
            labels such as PyGOD's 0..3); none = only for PyGOD's inj_*/gen_* files.
    """

    dataset: str = "tolokers"
    data_root: Optional[str] = None
    data: Optional[str] = None
    relation: str = "homo"
    feature_norm: str = "quantile"
    degree_feature: bool = True
    neighbour_stats: str = "none"
    ple_bins: int = 16
    unlabelled_prefix: Optional[int] = None
    binarize: Optional[bool] = None

    def __post_init__(self) -> None:
        parse_neighbour_stats(self.neighbour_stats)  # ValueError for unknown names
        check_positive_int(self.ple_bins, "ple_bins")
        check_unlabelled_prefix(self.unlabelled_prefix)


@dataclass
class AnomalyProtocolConfig:
    """Splits, seeds and models.

    Attributes:
        protocol: paper (stratified split: train ratio, rest 1:2 val:test) or gadbench (the
            dataset's own masks).
        train_ratio: share of the labelled nodes that train (paper protocol).
        split_seed: seed of the stratified split (paper protocol).
        vary_split: draw a new split per seed (split_seed + seed) instead of one.
        seeds: model seeds (runs).
        models: comma list of et, mlp, gcn, gat, gbt, et_stacked (ET reading the trees'
            cross-fitted log-odds: the et, train, gbt and stack sections) and registered
            detectors (--plugin MODULE loads a module that registers them).
        energy_row: also report the node energy of the label-trained ET (sign and threshold
            chosen on validation; needs et among the models, not et_stacked alone); it is
            not an unsupervised detector. It takes full-graph passes, so a run with
            inference chunks leaves it out (with a warning).
        ddp: data-parallel training over torch.distributed (launch with torchrun).
        inference_chunk_size: ET validates and scores this many destination nodes at a time,
            in bounded memory, with the same result (none = one full pass).
        inference_chunk_edges: with chunks, at most this many in-edges per chunk (a node with
            more is a chunk alone), so that hubs cannot blow up a chunk; alone, it implies
            chunks of at most 65,536 nodes (none = no edge cap).
        seed_ensemble: also report, per model, the ensemble of its seeds (``NAME_ensemble``):
            the mean of the seeds' scores, its threshold chosen on validation. The seeds must
            share one split (paper protocol without vary_split, or one mask).
        validation_only: score the validation nodes only, for a probe that decides what will
            later run on test: no test node is scored, no test label is read once the split is
            drawn, and the tables, plots and results.json hold validation metrics (macro-F1 at
            the threshold chosen on those same nodes, so optimistic). The energy row is
            skipped; not with seed_ensemble.
        bootstrap_rounds: also AUPRC differences over the scored nodes (ET minus each baseline,
            beside DeLong's for AUROC), their node variance from a paired class-stratified
            bootstrap of this many draws: 0 = off, else at least 100, 2000 a good value (it
            evaluates AUPRC rounds x seeds x baselines times).
    """

    protocol: str = "paper"
    train_ratio: float = 0.4
    split_seed: int = 2
    vary_split: bool = False
    seeds: int = 5
    models: str = "et,mlp,gcn,gat,gbt"
    energy_row: bool = True
    ddp: bool = False
    inference_chunk_size: Optional[int] = None
    inference_chunk_edges: Optional[int] = None
    seed_ensemble: bool = False
    validation_only: bool = False
    bootstrap_rounds: int = 0

    def __post_init__(self) -> None:
        check_bootstrap_rounds(self.bootstrap_rounds)
        if self.protocol not in ("paper", "gadbench"):
            raise ValueError(f"protocol must be 'paper' or 'gadbench', got {self.protocol!r}")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise ValueError(f"seeds must be a positive integer (the number of runs), got "
                             f"{self.seeds!r}")
        if not 0.0 < self.train_ratio < 1.0:
            raise ValueError(f"train_ratio must lie strictly between 0 and 1, got "
                             f"{self.train_ratio}")
        if self.protocol == "gadbench" and self.vary_split:
            # The shipped masks are the splits; a vary_split recorded in the config would be
            # a setting the run never used.
            raise ValueError("vary_split draws stratified splits (paper protocol); with "
                             "protocol gadbench seed i uses the dataset's mask column i")
        if self.seed_ensemble and self.seeds < 2:  # its rows repeated the seed's, drawn on it
            raise ValueError("seed_ensemble averages the seeds' scores, and seeds = 1 gives one: "
                             "use seeds >= 2, or drop seed_ensemble")
        if self.validation_only and self.seed_ensemble:
            raise ValueError("seed_ensemble reports test metrics of the seeds' ensemble; a "
                             "validation_only run scores no test node: drop one of the two")
        for name in ("inference_chunk_size", "inference_chunk_edges"):
            if getattr(self, name) is not None:  # a zero fails here, not after the training
                check_chunk_size(getattr(self, name), name)
        self.model_names()  # unknown names fail here, not after the data load

    @property
    def chunked(self) -> bool:
        """Whether ET validates and scores in chunks (bounded memory)."""
        return self.inference_chunk_size is not None or self.inference_chunk_edges is not None

    @property
    def reports_energy(self) -> bool:
        """Whether the energy row runs: asked for, and no chunks (its node energies and the
        energy trajectory are full-graph passes, which a large graph's chunks avoid)."""
        return self.energy_row and not self.chunked and not self.validation_only

    def model_names(self) -> list[str]:
        """The models in the given order, each once (``mlp,MLP`` trains the MLP once per seed;
        it used to train twice and list every seed twice)."""
        return parse_model_list(self.models, known_models(), UNKNOWN_MODEL_HINT)


@dataclass
class BaselineConfig:
    """The neural baselines (MLP, GCN, GAT); they share the train section except these.

    Attributes:
        baseline_hidden: hidden width.
        baseline_dropout: dropout after each hidden layer.
        gat_heads: heads of each GAT layer.
        baseline_layers: hidden layers of the MLP, GCN and GAT (message-passing layers for
            the last two) before their linear head.
        baseline_lr: learning rate.
        baseline_weight_decay: weight decay.
    """

    baseline_hidden: int = 64
    baseline_dropout: float = 0.0
    gat_heads: int = 4
    baseline_layers: int = 2
    baseline_lr: float = 0.01
    baseline_weight_decay: float = 0.0

    def __post_init__(self) -> None:
        check_ranges(self, "baselines", positive_ints=("baseline_hidden", "gat_heads",
                                                         "baseline_layers"),
                     dropouts=("baseline_dropout",), positive=("baseline_lr",),
                     non_negative=("baseline_weight_decay",))


@dataclass
class StackConfig:
    """ET stacked on the trees (model ``et_stacked``: ET's sections, and the ``gbt`` section for
    its trees, whose ``label_trick`` must stay off).

    Attributes:
        stack_folds: stratified folds of the training nodes that the trees are cross-fitted on
            (a training node's column comes from the trees that did not see its label).
    """

    stack_folds: int = 5

    def __post_init__(self) -> None:
        check_fold_count(self.stack_folds, "stack_folds")


@dataclass
class AnomalyConfig:
    data: AnomalyDataConfig = field(default_factory=AnomalyDataConfig)
    protocol: AnomalyProtocolConfig = field(default_factory=AnomalyProtocolConfig)
    et: ETModelConfig = field(default_factory=ETModelConfig)
    train: NodeTrainConfig = field(default_factory=NodeTrainConfig)
    baselines: BaselineConfig = field(default_factory=BaselineConfig)
    gbt: GBTModelConfig = field(default_factory=GBTModelConfig)
    stack: StackConfig = field(default_factory=StackConfig)
    run: RunConfig = field(default_factory=RunConfig)

    QUICK: ClassVar[dict[str, Any]] = {"train.epochs": 10, "protocol.seeds": 2}

    def __post_init__(self) -> None:
        if self.protocol.ddp and str(self.run.device).startswith("cuda"):
            # gloo on one GPU: every rank on cuda:0, K copies of the model, no speed-up
            raise ValueError("--ddp trains over gloo on the CPU (docs/anomaly.md); with "
                             "--device cuda every rank would share GPU 0: drop one of them")
        # ET's settings together (multi_relation with batch_size, say) are checked here, not
        # once the data has loaded and the first seed's detector is built.
        names = self.protocol.model_names()
        if "et_stacked" in names and self.gbt.label_trick:
            from ..detectors.stacked import TREES_WITH_LABEL_TRICK

            raise ValueError(f"models et_stacked: {TREES_WITH_LABEL_TRICK} (gbt.label_trick)")
        if set(ET_MODELS) & set(names):
            ETDetectorConfig(model=self.et, train=self.train)
            if self.et.multi_relation and self.protocol.chunked:
                from ..detectors.neural import MULTI_RELATION_CHUNKS

                raise ValueError(MULTI_RELATION_CHUNKS)


#: The models that read each model-specific section of :class:`AnomalyConfig`.
SECTION_READERS = {"et": ET_MODELS, "baselines": ("mlp", "gcn", "gat"),
                   "gbt": ("gbt", "et_stacked"), "stack": ("et_stacked",),
                   # the neural models train; the baselines take their own learning rate and
                   # weight decay (baselines.baseline_lr, baseline_weight_decay)
                   "train": (*ET_MODELS, "mlp", "gcn", "gat"),
                   "train.lr": ET_MODELS, "train.weight_decay": ET_MODELS,
                   "baselines.gat_heads": ("gat",),
                   # the compiled kernels serve ET's attention alone
                   "run.native_attention": ET_MODELS,
                   # the node energy of plain ET (a run of et_stacked alone made no row)
                   "protocol.energy_row": ("et",),
                   # only ET scores in chunks: a GCN run given them thought its memory bounded
                   # (a scale audit)
                   "protocol.inference_chunk_size": ET_MODELS,
                   "protocol.inference_chunk_edges": ET_MODELS}


def section_readers() -> dict[str, tuple[str, ...]]:
    """:data:`SECTION_READERS` with every registered detector added to each entry: its factory
    is given the whole config, and which of it it reads cannot be told, so no setting is
    called unread (nor left out of a study's resume check) on its account."""
    return DETECTOR_REGISTRY.readers(SECTION_READERS)


# ----------------------------------------------------------------------------------------------
# Detectors from the run config (and back, for the tuner's presets)
# ----------------------------------------------------------------------------------------------
def detector_config(config: AnomalyConfig, name: str) -> Any:
    """The config of detector ``name`` as this run configures it."""
    if name in ET_MODELS:  # the stacked trees: the gbt and stack sections
        return ETDetectorConfig(model=config.et, train=config.train)
    if name == "gbt":
        return GBTDetectorConfig(model=config.gbt)
    return baseline_config(config)


def baseline_config(config: AnomalyConfig) -> GNNDetectorConfig:
    """The config of the neural baselines (MLP, GCN, GAT) as this run configures them: the
    ``baselines`` section, and the ``train`` section with the baselines' own learning rate and
    weight decay. A registered neural detector can take it too."""
    b = config.baselines
    return GNNDetectorConfig(
        model=GNNModelConfig(hidden=b.baseline_hidden, dropout=b.baseline_dropout,
                             gat_heads=b.gat_heads, layers=b.baseline_layers),
        train=replace(config.train, lr=b.baseline_lr, weight_decay=b.baseline_weight_decay),
    )


def with_detector_config(config: AnomalyConfig, name: str, det: Any) -> AnomalyConfig:
    """``config`` with detector ``name``'s settings replaced by ``det`` (inverse of
    :func:`detector_config`)."""
    if name in ET_MODELS:
        return replace(config, et=det.model, train=det.train)
    if name == "gbt":
        return replace(config, gbt=det.model)
    baselines = BaselineConfig(
        baseline_hidden=det.model.hidden, baseline_dropout=det.model.dropout,
        gat_heads=det.model.gat_heads, baseline_layers=det.model.layers,
        baseline_lr=det.train.lr,
        baseline_weight_decay=det.train.weight_decay,
    )
    return replace(config, baselines=baselines, train=replace(det.train, lr=config.train.lr,
                                                              weight_decay=config.train.weight_decay))


def make_detector(config: AnomalyConfig, name: str, seed: int, progress: bool = False,
                  dataset: Optional[str] = None,
                  registry: Optional[Mapping[str, RegisteredDetector]] = None) -> BaseDetector:
    """Detector ``name`` as the run configures it; its checkpoints (with ``run.checkpoint_dir``)
    go to ``checkpoint_dir/dataset/name/seedS`` (``dataset``: the graph's name, by default the
    configured dataset's). ``registry``: the registrations to build from (default: the
    registered detectors now; a run passes the ones it started with)."""
    p = config.protocol
    chunks = ({"chunk_size": p.inference_chunk_size, "chunk_edges": p.inference_chunk_edges}
              if name in ET_MODELS else {})
    detector = new_detector(config, name, seed, progress, registry, **chunks)
    if hasattr(detector, "checkpoint"):
        detector.checkpoint = config.run.checkpoint(dataset or config.data.dataset, name,
                                                    f"seed{seed}")
        registered = registration(name, registry)
        if registered is not None:  # another plugin, or the same file edited, cannot resume
            # (any detector with checkpoints; NeuralDetector's fingerprint reads it)
            cast(Any, detector).checkpoint_identity = registered.identity
    return detector


def new_detector(config: AnomalyConfig, name: str, seed: int, progress: bool = False,
                 registry: Optional[Mapping[str, RegisteredDetector]] = None,
                 **options: Any) -> BaseDetector:
    """Detector ``name``, unfitted, as ``config`` sets it: a built-in one from its sections
    (``options``: further constructor keywords), a registered one from its factory (in
    ``registry``, default the registered detectors now)."""
    registered = registration(name, registry)
    if registered is not None:
        return registered.build(config, seed, progress)
    if name == "et_stacked":
        options.update(trees=config.gbt, folds=config.stack.stack_folds)
    return DETECTORS[name](detector_config(config, name), seed=seed, progress=progress,
                           device=config.run.device, **options)


def registration(name: str, registry: Optional[Mapping[str, RegisteredDetector]] = None
                 ) -> Optional[RegisteredDetector]:
    """The registration of ``name`` in ``registry`` (default: the registered detectors now);
    ``None`` for a built-in model."""
    return (registered_detectors() if registry is None else registry).get(name)


def check_own_detectors(detectors: Mapping[str, Callable[[int], BaseDetector]]
                        ) -> dict[str, Callable[[int], BaseDetector]]:
    """The caller's own rows, refused where a name is taken (a built-in or registered model or
    one of the rows a run derives, in any case: the figures colour by the lowercased name),
    holds a character the tables cannot show, or a factory is not callable or does not build a
    supervised detector (each is built once here, before any training)."""
    own = dict(detectors)
    for name, factory in own.items():
        if not isinstance(name, str) or not name or reserved_name(name):
            raise ValueError(f"own detector name {name!r} is empty or taken (models "
                             f"{list(known_models())}, {ENERGY_ROW!r}, *_ensemble, the results "
                             "files' entries seed, split_sizes, nodes, labels, run_id and "
                             "*__seed*, in any case)")
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):  # a "|" added a column to results.md
            raise ValueError(f"own detector name {name!r}: use letters, digits, '_', '.', '-'")
        if not callable(factory):
            raise TypeError(f"detectors[{name!r}] must be a factory, seed -> unfitted "
                            f"detector; got {type(factory).__name__}")
        own_detector(own, name, 0)  # a wrong kind found now, not after seed 0's trainings
    return own


def own_detector(own: Mapping[str, Callable[[int], BaseDetector]], name: str,
                 seed: int) -> BaseDetector:
    return checked_detector(own[name](seed), f"detectors[{name!r}](seed)")


def check_stack_folds(config: AnomalyConfig, names: list[str], train_labels: list[Any]
                      ) -> None:
    """With ``et_stacked`` among ``names``: ``ValueError`` naming ``--stack-folds`` unless every
    split's training labels (``train_labels``, one 0/1 array per split) hold enough nodes of
    each class, found once the splits are drawn, before any model trains."""
    if "et_stacked" in names:
        for labels in train_labels:
            check_folds(labels, config.stack.stack_folds, "--stack-folds")


def load_graph(config: AnomalyDataConfig) -> Data:
    """The configured graph as loaded, before any feature transform."""
    from ..datasets import load_anomaly_dataset

    # a file (data) names itself; a named dataset is looked up under data_root
    return load_anomaly_dataset(None if config.data else config.dataset,
                                root=config.data_root, path=config.data or None,
                                relation=config.relation,
                                unlabelled_prefix=config.unlabelled_prefix,
                                binarize=config.binarize)


def load_data(config: AnomalyDataConfig, data: Optional[Data] = None) -> Data:
    """The configured graph (or ``data``), validated and with the label-free feature transform:
    ``[x, neighbour statistics of x, log(1 + degree)]`` (each part as configured), then
    ``feature_norm`` over all of these columns."""
    if data is None:
        data = load_graph(config)
    stats = parse_neighbour_stats(config.neighbour_stats)
    if stats:
        data = NeighbourhoodStatistics(stats)(prepare_detection_data(data, "none", False))
    return prepare_detection_data(data, config.feature_norm, config.degree_feature,
                                  config.ple_bins)
