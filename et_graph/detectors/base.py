"""The detector interface, after PyGOD: ``fit`` / ``decision_function`` / ``predict``.

PyGOD's core three, not its whole API: ``predict`` takes ``return_score`` and ``return_prob``
(no ``return_conf``, ``prob_method`` or ``label_``), and the supervised detectors choose their
threshold on validation instead of a ``contamination`` (the unsupervised one takes one).

A detector owns a network (kept apart, in :mod:`et_graph.nn` or :mod:`et_graph.baselines`), its
config, and what it learned: ``threshold_`` (chosen on validation macro-F1, as in the paper's
protocol), ``decision_score_`` (the scores of the graph it was fitted on) and ``history_``.
"""
from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import os
import pickle
import types
import warnings
import zipfile
from collections.abc import Iterator
from typing import Any, Literal, Optional, TypeVar, Union, cast, overload

import torch
from torch import Tensor
from torch_geometric.data import Data

from .. import __version__
from ..callers import user_stacklevel
from ..config import apply_keywords, check_device, resolve_device, to_dict
from ..exceptions import DataWarning, FitWarning, ReproducibilityWarning
from ..nn.validation import check_chunk_size, is_integral
from ..protocols.anomaly import check_inside_label_mask, choose_threshold
from ..training import private_rng
from ..transforms.features import check_node_graph

Prediction = Union[Tensor, tuple[Tensor, ...]]
DetectorT = TypeVar("DetectorT", bound="BaseDetector")

#: The tag :meth:`BaseDetector.save` writes, so that :meth:`BaseDetector.load` can refuse other
#: files with a clear error instead of unpickling whatever they hold into the wrong place.
SAVE_FORMAT = "et_graph.detector/1"

#: The key of a pickled detector's state that records the compiled-kernel switch.
_PICKLED_NATIVE = "_pickled_with_native_attention"
#: Set while :meth:`BaseDetector.load` unpickles (it warns about the switch itself).
_LOADING: contextvars.ContextVar[bool] = contextvars.ContextVar("et_graph_detector_loading",
                                                                default=False)


class BaseDetector:
    """Common fitting, scoring, prediction and saving of the node anomaly detectors (the
    supervised ones fit here; :class:`~et_graph.detectors.UnsupervisedETDetector` overrides
    ``fit`` and reads no label).

    Args:
        config: the detector's config dataclass (default: its defaults).
        seed: seeds the initialisation and the training order.
        progress: show a progress bar while fitting.
        device: where the network trains and scores (``"cpu"``, ``"cuda"``, ..., or ``"auto"``:
            CUDA where torch sees a GPU, else the CPU).
        chunk_size: ETDetector only: validate and score this many destination nodes at a time,
            in bounded memory, with the same result as one full pass (``None`` = full pass).
        chunk_edges: ETDetector only: also cap each chunk's in-edges (a node with more is a
            chunk alone), so that hubs cannot blow up a chunk; alone, it implies chunks of at
            most 65,536 nodes.
        **keywords: any field of the config, e.g. ``epochs=50`` or ``hidden=32``.
    """

    config_class: type = object
    #: Fields of the shared config that this detector never reads: naming one as a keyword
    #: is refused rather than accepted and ignored (MLPDetector(gat_heads=8)).
    unused_settings: tuple[str, ...] = ()
    #: Set on a detector another one builds as a part of itself (StackedETDetector's inner ET
    #: and its folds' trees): the outer detector's name, which this one's messages then give
    #: (the user built no ETDetector). Messages were renamed by recording every warning of
    #: the part with warnings.catch_warnings, which is process-wide and not thread-safe: two
    #: threads scoring stacked detectors left every later warning of the process in a dead
    #: list (a long-run audit).
    _part_of: Optional[str] = None
    #: ``False`` on a part whose owner reports a flat validation itself (the stacked trees'
    #: folds: one summary over the folds instead of one warning per fold).
    _warns_flat_validation: bool = True
    #: Set when given (ETDetector's chunked scoring); a detector without them reads None.
    chunk_size: Optional[int]
    chunk_edges: Optional[int]

    def __init__(self, config: Any = None, *, seed: int = 0, progress: bool = False,
                 device: Union[str, torch.device] = "cpu", chunk_size: Optional[int] = None,
                 chunk_edges: Optional[int] = None, **keywords: Any) -> None:
        if not dataclasses.is_dataclass(self.config_class):
            # (a subclass without one failed mid-fit on "'object' has no attribute 'train'")
            raise TypeError(f"{type(self).__name__} needs a config_class: the dataclass of its "
                            "settings (e.g. a NeuralDetector subclass can reuse "
                            "et_graph.detectors.config.GNNDetectorConfig)")
        config = self.config_class() if config is None else config
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"config must be a {self.config_class.__name__}, got {type(config).__name__}"
            )
        unused = sorted(set(keywords) & set(self.unused_settings))
        if unused:
            raise ValueError(f"{type(self).__name__} does not use {', '.join(unused)} (a "
                             f"setting of the shared {self.config_class.__name__})")
        # A copy: two detectors built from one config object must not share its sections
        # (setting b.config.train.lr changed a's and the caller's).
        config = copy.deepcopy(config)
        self.config = apply_keywords(config, **keywords) if keywords else config
        # 1.7 became seed 1 without a word; NumPy and torch refuse negative seeds only mid-fit.
        if not is_integral(seed) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        self.seed = int(seed)
        self.progress = bool(progress)
        if not isinstance(device, (str, torch.device)):
            raise TypeError(f"device must be 'cpu', 'cuda', 'cuda:N', 'auto' or a "
                            f"torch.device, got {device!r}")
        device = resolve_device(device)
        check_device(device)  # a device this machine lacks fails here, not mid-fit
        if torch.device(device).type == "meta":  # it failed only inside fit, on .item()
            raise ValueError("device='meta' holds no values: a detector cannot fit or score "
                             "there; use 'cpu' or a GPU")
        self.device = torch.device(device)
        if chunk_size is not None or chunk_edges is not None:
            if not getattr(self, "supports_chunks", False):
                raise ValueError(f"chunked scoring is implemented for ETDetector only, not "
                                 f"{type(self).__name__}")
            if chunk_size is not None:
                self.chunk_size = check_chunk_size(chunk_size)
            if chunk_edges is not None:
                self.chunk_edges = check_chunk_size(chunk_edges, "chunk_edges")
        self.threshold_: Optional[float] = None
        self.decision_score_: Optional[Tensor] = None
        self.history_: list[dict[str, float]] = []
        self.in_channels_: Optional[int] = None
        #: The dtype the fitted graph's features were read in: later graphs are read in it.
        self.fit_dtype_: Optional[torch.dtype] = None
        #: Each fitted feature column's ``[min, max]`` (``[2, F]``, float64), for the drift check.
        self.feature_range_: Optional[Tensor] = None
        self.fit_info_: dict[str, Any] = {}
        self.fitted_ = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_config_class(cls)
        signature = constructor_signature(cls)
        if signature is not None:
            cls.__signature__ = signature  # type: ignore[attr-defined]

    # ------------------------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The detector's config as nested dicts, section by section."""
        return to_dict(self.config)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's keywords that build this detector again, flat as scikit-learn's
        and PyGOD's ``get_params`` give them: every config field (without those the class
        refuses), ``seed``, ``progress``, ``device`` and, where scoring is chunked,
        ``chunk_size``/``chunk_edges``. ``type(det)(**det.get_params())`` is an unfitted
        copy; ``deep`` is accepted for scikit-learn and changes nothing (no nested
        estimators)."""
        own = _own_constructor_arguments(type(self))
        if own and type(self).get_params is BaseDetector.get_params:
            # they would be dropped by clone and reset by set_params, silently
            raise TypeError(f"{type(self).__name__}.__init__ takes {', '.join(own)}, which "
                            "BaseDetector.get_params does not know: override get_params to "
                            "add them")
        params = {k: v for section in dataclasses.asdict(self.config).values()
                  for k, v in section.items() if k not in self.unused_settings}
        params.update(seed=self.seed, progress=self.progress, device=str(self.device))
        if getattr(self, "supports_chunks", False):
            params.update(chunk_size=getattr(self, "chunk_size", None),
                          chunk_edges=getattr(self, "chunk_edges", None))
        return params

    def set_params(self: DetectorT, **params: Any) -> DetectorT:
        """Change settings by :meth:`get_params`' names, checked as the constructor checks
        them (an unknown name is refused with the closest one). The detector is unfitted
        afterwards: its fitted model belongs to the old settings."""
        if "supervised" in params:  # ETDetector(supervised=False) is another class
            raise ValueError("set_params cannot change supervised: build the other detector "
                             "(ETDetector(supervised=False) is an UnsupervisedETDetector)")
        if "config" in params:
            # get_params' flat settings were passed beside it and overrode every field of the
            # new config: set_params(config=...) changed nothing, silently (an API audit)
            raise ValueError("set_params takes the flat settings get_params() names (e.g. "
                             "hidden=8), not config: build a new detector from a config "
                             f"({type(self).__name__}(config=...))")
        # Built whole first: a refused value left a half-changed detector that still counted
        # as fitted (the config replaced before the seed was checked).
        fresh = type(self)(**{**self.get_params(), **params})
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__)
        return self

    def __sklearn_clone__(self: DetectorT) -> DetectorT:
        """``sklearn.base.clone``: an unfitted detector of the same settings. (Its default
        check, that every parameter comes back as the same object, fails on settings the
        constructor validates and converts.)"""
        return type(self)(**self.get_params())

    def __sklearn_is_fitted__(self) -> bool:
        """``sklearn.utils.validation.check_is_fitted``: whether ``fit`` has completed."""
        return bool(getattr(self, "fitted_", False))

    def __sklearn_tags__(self) -> Any:
        """The tags scikit-learn >= 1.6 reads of any estimator it is given (``check_is_fitted``
        failed on their absence): a detector that needs fitting, whose labels (supervised) come
        inside the graph rather than as ``y``."""
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False))

    @property
    def _name(self) -> str:
        """The name this detector's messages give it: its class's, or its owner's
        (:attr:`_part_of`)."""
        return self._part_of or type(self).__name__

    def __repr__(self) -> str:
        """The constructor call that builds this detector again (``eval(repr(det))``): a
        subclass's own constructor arguments (from its ``get_params``), its settings, without
        those its class refuses, and its seed, progress, device and chunk
        sizes where not the defaults."""
        fields = [f"{k}={v!r}" for section in dataclasses.asdict(self.config).values()
                  for k, v in section.items() if k not in self.unused_settings]
        own = _own_constructor_arguments(type(self))
        if own and type(self).get_params is not BaseDetector.get_params:
            # a subclass's own constructor arguments, from its get_params (repr dropped them,
            # so eval(repr(det)) built another detector: an audit)
            params = self.get_params()
            fields = [f"{name}={params[name]!r}" for name in own if name in params] + fields
        if self.seed:
            fields.append(f"seed={self.seed}")
        if self.progress:
            fields.append("progress=True")
        if self.device.type != "cpu":
            fields.append(f"device={str(self.device)!r}")
        for name in ("chunk_size", "chunk_edges"):  # (eval(repr(det)) dropped them)
            if getattr(self, "supports_chunks", False) and getattr(self, name, None) is not None:
                fields.append(f"{name}={getattr(self, name)!r}")
        return f"{type(self).__name__}({', '.join(fields)})"

    def __getstate__(self) -> dict[str, Any]:
        """The detector's state without an ``on_epoch`` callback (a tuning loop's lambda): it
        belongs to the process that set it, and pickle, joblib and a process pool's transfer
        of a fitted detector failed on it (a multiprocessing audit; ``save`` dropped it
        already). Copies and loaded detectors have none. The state records whether the
        compiled kernels were on (:meth:`__setstate__` warns where they are not the same)."""
        from ..native import native_attention_enabled

        state = self.__dict__.copy()
        state.pop("on_epoch", None)
        state[_PICKLED_NATIVE] = native_attention_enabled()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The state back, with a ``ReproducibilityWarning`` where the compiled kernels were
        on when it was pickled and are off here, or the reverse: the switch is the process's
        (:func:`et_graph.native.set_native_attention`), so a detector sent to a spawned
        worker scored there without them, in other last bits, unannounced (a review). A
        copy in the same process never differs; :meth:`load` says it once itself."""
        state = dict(state)
        pickled = state.pop(_PICKLED_NATIVE, None)
        self.__dict__.update(state)
        if not _LOADING.get():
            _warn_other_kernels(f"this {type(self).__name__} was pickled", pickled, 2)

    # ------------------------------------------------------------------------------------------
    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write the fitted detector (config, weights, threshold, history) to ``path``.

        One ``torch.save`` file; :meth:`load` reads it back and scores bit for bit as before,
        under the same compiled-kernel setting (:func:`et_graph.native.set_native_attention`,
        recorded in the file; :meth:`load` warns when it differs). The file records the
        package version and git commit too, and the versions of torch, PyG, NumPy and
        scikit-learn (the loaded detector's ``saved_with_``). It is a pickle, so load only
        files you trust."""
        if not self.fitted_:
            raise RuntimeError(f"{type(self).__name__} is not fitted yet: fit it before save()")
        from ..config import _running_versions, code_identity
        from ..native import native_attention_enabled
        from ..training.checkpoint import torch_save_whole

        saved = copy.copy(self)  # (without an on_epoch callback: __getstate__)
        saved.__dict__.pop("saved_with_", None)  # (a loaded detector's: the file says anew)
        torch_save_whole(path, {"format": SAVE_FORMAT, **code_identity(),
                                "versions": _running_versions(),
                                "class": type(self).__name__,
                                "native_attention": native_attention_enabled(),
                                "detector": saved})

    @classmethod
    def _accepts(cls, detector: Any) -> bool:
        """Whether :meth:`load` called on this class may return ``detector``."""
        return isinstance(detector, cls)

    @classmethod
    def load(cls: type[DetectorT], path: Union[str, os.PathLike],
             map_location: Union[str, torch.device] = "cpu") -> DetectorT:
        """A detector written by :meth:`save`, its tensors moved to ``map_location`` (where it
        will score). Called on a subclass, it refuses a file holding another detector.

        The file is unpickled in full (a detector holds its fitted model objects): loading a
        file runs whatever code it carries, so load only files you or someone you trust wrote,
        as with any pickle.

        The loaded detector's ``saved_with_`` says what wrote the file (``et_graph_version``,
        ``git_commit`` and, in files written since it was kept, the ``versions`` of torch,
        PyG, NumPy and scikit-learn); a file of another et-graph version, or of another
        torch, PyG or NumPy release (major.minor), loads with a ``ReproducibilityWarning``
        naming them, as scikit-learn warns of its own estimators."""
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no detector file at {path}")
        # The device first: a device this machine lacks is not a fault of the file.
        if not isinstance(map_location, (str, torch.device)):  # None, a dict: torch.load's
            raise TypeError("map_location must be a device ('cpu', 'cuda', 'cuda:1', 'auto' or "
                            f"a torch.device), got {map_location!r}")
        map_location = resolve_device(map_location)
        check_device(map_location)
        if torch.device(map_location).type == "meta":
            raise ValueError("map_location='meta' holds no values: a detector cannot score "
                             "there; load it on 'cpu' or a GPU")
        device = torch.device(map_location)
        if device.type == "cpu":  # torch.load cannot map to "cpu:0"; there is one CPU device
            device = torch.device("cpu")
        loading = _LOADING.set(True)  # (load says a kernel mismatch once, from the file)
        try:
            payload = torch.load(path, map_location=device, weights_only=False,
                                 pickle_module=_CLASS_FINDING_PICKLE)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError,
                zipfile.BadZipFile) as error:
            # Not a file torch can read back (another format, or a truncated save: torch's
            # zip reader reports a cut file as RuntimeError or OSError).
            raise ValueError(f"{path} is not a detector written by et-graph's save(), or it "
                             f"is truncated ({type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else ''})") from error
        except _ClassNotFound as error:
            # (a deployment audit) a class the file names that this process lacks: a raw
            # "Can't get attribute 'MyGBT' on <module '__main__'>"
            raise ValueError(
                f"{path} holds a class that cannot be found here ({error}): a detector of your own "
                "(a plugin) must be importable under the same module and name where it is "
                "loaded as where it was saved (not defined in a script's __main__); a class "
                "of et-graph's, scikit-learn's or torch's may have moved between the versions "
                "that saved and load it") from error
        finally:
            _LOADING.reset(loading)
        written = payload.get("format") if isinstance(payload, dict) else None
        if isinstance(written, str) and written.startswith(SAVE_FORMAT.rsplit("/", 1)[0] + "/") \
                and written != SAVE_FORMAT:
            raise ValueError(
                f"{path} was saved in format {written!r} by et-graph "
                f"{payload.get('et_graph_version', '?')}; this et-graph "
                f"({__version__}) reads {SAVE_FORMAT!r}: load it with a version that reads "
                "its format")
        if written != SAVE_FORMAT:
            raise ValueError(f"{path} is not a detector written by et-graph's save()")
        detector = payload["detector"]
        if not cls._accepts(detector):
            raise TypeError(f"{path} holds a {payload['class']}, not a {cls.__name__}")
        # (absent in files before it was kept)
        _warn_other_kernels(f"{path} was saved", payload.get("native_attention"),
                            user_stacklevel())
        detector.saved_with_ = {name: payload[name] for name in
                                ("et_graph_version", "git_commit", "versions") if name in payload}
        changed = _changed_versions(payload)
        if changed:
            warnings.warn(f"{path} was saved under other versions ({'; '.join(changed)}): "
                          "its scores may differ from the saved detector's (docs/library.md "
                          "lists et-graph's changes)", ReproducibilityWarning,
                          stacklevel=user_stacklevel())
        detector.device = device
        return detector

    # ------------------------------------------------------------------------------------------
    def fit(self: DetectorT, data: Data, train_mask: Optional[Tensor] = None,
            val_mask: Optional[Tensor] = None) -> DetectorT:
        """Fit on the labelled graph ``data`` (``data.y`` in {0, 1}).

        Training nodes are ``train_mask`` (or ``data.train_mask``); the checkpoint and the
        decision threshold are chosen on ``val_mask`` (or ``data.val_mask``). No other label is
        read: the labels of the other nodes may be anything (e.g. -1 for unlabelled), and they
        are replaced by 0 before training starts, so no code path can see them.
        """
        x, edge_index = check_graph(data)
        if getattr(data, "y", None) is None:
            # (an API audit) every detector but ET said "no train_mask" of an unlabelled graph
            raise ValueError(
                f"{self._name} is supervised and data has no labels (data.y); to fit "
                "without labels use ETDetector(supervised=False) (= UnsupervisedETDetector), "
                "or et-graph unsupervised's baselines")
        warn_unused_edge_data(data, self._name, self._reads_edge_type())
        # read as an unfitted detector reads it: a refit follows its own graph's dtype, not
        # the previous fit's
        fitted, self.fitted_ = self.fitted_, False
        try:
            data = self._prepare(data)
        finally:
            self.fitted_ = fitted
        train = resolve_mask(data, train_mask, "train_mask")
        val = resolve_mask(data, val_mask, "val_mask")
        if bool((train & val).any()):
            raise ValueError("train_mask and val_mask overlap; they must be disjoint")
        check_inside_label_mask(data, train, val)
        y = check_labels(data, train | val)
        if int(y[train].sum()) == 0:
            raise ValueError(
                "the training split holds no anomalous node (y == 1); a supervised detector "
                "needs at least one: pass a train_mask that includes anomalies"
            )
        if int(y[train].sum()) == int(train.sum()):
            raise ValueError(
                "the training split holds no normal node (y == 0); a supervised detector needs "
                "both classes: pass a train_mask that includes normal nodes"
            )
        if int(y[val].sum()) == 0 or int(y[val].sum()) == int(val.sum()):
            raise ValueError(
                "the validation split needs both normal and anomalous nodes to choose the "
                "checkpoint and the threshold"
            )
        self.in_channels_ = x.size(1)
        # Unfitted until this fit ends: a refit that fails or is interrupted must not leave the
        # previous fit's scores beside no threshold (decision_function worked, predict not).
        self.fitted_ = False
        self.threshold_ = None
        self.decision_score_ = None
        self.feature_range_ = None  # (set once the fitted graph is scored: not checked there)
        # nor the previous fit's curves, read as this one's after an interrupted refit
        self.history_, self.fit_info_ = [], {}
        # Seeded for reproducibility, without resetting the caller's random stream.
        with private_rng(self.seed, self.device):
            self._fit(data, y, train, val)
        self.fit_dtype_ = data.x.dtype
        self.fitted_ = True
        try:
            score = self._checked_scores(self._decision(data), "the training graph")
        except BaseException:  # (unfitted, as a fit that fails before it: no half state)
            self.fitted_ = False
            raise
        self.decision_score_ = score
        self.feature_range_ = column_range(data.x)
        val_index = val.nonzero().view(-1)
        val_scores = score[val_index]
        if self._warns_flat_validation and bool((val_scores == val_scores[0]).all()):
            # A network with a loss trace likely diverged; trees find no split on few nodes.
            trace = self._loss_trace()
            hint = ("a lower learning rate may help" if trace else
                    "too few training nodes to learn from? (trees: min_samples_leaf)")
            if x.size(0) and bool((x == x[0]).all()):  # the cause, not a tuning hint
                hint = ("every node has the same features, so nothing tells the nodes apart "
                        "(add informative ones, e.g. et_graph.transforms.LogDegree)")
            warnings.warn(f"{self._name}: every validation node has the same score "
                          f"({float(val_scores[0]):.4g}), so the model ranks nothing{trace}; "
                          f"{hint}", FitWarning, stacklevel=user_stacklevel())
        self.threshold_, val_f1 = choose_threshold(
            y[val_index].numpy(), score[val_index].double().numpy()
        )
        self.fit_info_["val_f1_macro_at_threshold"] = val_f1
        return self

    def _fit(self, data: Data, y: Tensor, train: Tensor, val: Tensor) -> None:
        raise NotImplementedError

    def _prepare(self, data: Data, dtype: Optional[torch.dtype] = None) -> Data:
        """``data`` as ``_fit`` and ``_score`` read it (checked already): a shallow copy with
        ``x`` in ``dtype`` and ``edge_index`` as int64, or ``data`` itself when it is so
        already. ``dtype=None`` keeps float32 and float64 features as they are (the trees
        compute their neighbour means in the features' precision, as detectors saved before
        did) and reads any other as float32: float16 was read in half precision by the trees
        (scores off by 0.05) and bfloat16 failed in NumPy; int16 or uint8 ids failed in
        indexing. A fitted detector reads every graph in the dtype it was fitted in
        (``fit_dtype_``): the same features as float64 moved a float32-fitted tree's scores
        across its bin edges (a deployment audit)."""
        if dtype is None and self.fitted_:
            dtype = getattr(self, "fit_dtype_", None)  # (None in files saved before it)
        if dtype is None:
            dtype = data.x.dtype if data.x.dtype in (torch.float32, torch.float64) else (
                torch.float32)
        if data.x.dtype == dtype and data.edge_index.dtype == torch.long:
            return data
        data = copy.copy(data)
        data.x = data.x.to(dtype)
        data.edge_index = data.edge_index.long()
        return data

    def decision_function(self, data: Data) -> Tensor:
        """Anomaly score ``[N]`` of every node of ``data`` (any graph with the fitted feature
        width); higher = more anomalous. For the supervised detectors it is a probability in
        [0, 1]; for :class:`~et_graph.detectors.UnsupervisedETDetector` the configured raw score
        (reconstruction error, energy, ...)."""
        if not self.fitted_:
            raise RuntimeError(f"{type(self).__name__} is not fitted yet: call fit(data) first")
        # (fit scores its own graph through _decision, so it warns once, not twice)
        warn_unused_edge_data(data, self._name, self._reads_edge_type())
        return self._checked_scores(self._decision(data), "this graph")

    def _loss_trace(self) -> str:
        losses = [row["train_loss"] for row in self.history_ if "train_loss" in row]
        if len(losses) < 2:
            return ""
        return f" (training loss {losses[0]:.4g} at the first epoch, {losses[-1]:.4g} at the last)"

    def _checked_scores(self, score: Tensor, where: str) -> Tensor:
        """``score``, or ``FloatingPointError`` when some are NaN or inf (a diverged training,
        or features beyond the float32 range), rather than a threshold or ranking of NaN."""
        bad = int((~torch.isfinite(score)).sum())
        if bad:
            raise FloatingPointError(
                f"{self._name} scored {bad} of {score.numel()} nodes of {where} as NaN "
                f"or inf{self._loss_trace()}: the training diverged (lower the learning rate) "
                f"or the features are too large for float32 (rescale them)")
        return score

    def _decision(self, data: Data) -> Tensor:
        """:meth:`decision_function` without the warning (fit has given it already)."""
        return self._score(self._scorable(data)).detach().float().cpu()

    def _scorable(self, data: Data) -> Data:
        """``data`` checked against the fitted detector and prepared as ``_score`` reads it."""
        if not self.fitted_:
            raise RuntimeError(f"{self._name} is not fitted yet: call fit(data) first")
        x, _ = check_graph(data)
        if x.size(1) != self.in_channels_:
            raise ValueError(
                f"data.x has {x.size(1)} features but the detector was fitted on "
                f"{self.in_channels_}; score graphs with the same feature columns (and the "
                "fitted graph's FeatureTransform, whose degree_feature adds one)"
            )
        data = self._prepare(data)
        if self._part_of is None:  # (a stacked detector's parts: the whole checks once)
            warn_far_outside_fitted_range(data.x, getattr(self, "feature_range_", None),
                                          self._name)
        return data

    def _score(self, data: Data) -> Tensor:
        raise NotImplementedError

    # overloads: a plain predict(data) is typed a Tensor, not Tensor | tuple (the README's
    # `pred = det.predict(data)` was a type error in a user's checked code)
    @overload
    def predict(self, data: Data, return_score: Literal[False] = False,
                return_prob: Literal[False] = False) -> Tensor: ...

    @overload
    def predict(self, data: Data, return_score: Literal[True],
                return_prob: Literal[False] = False) -> tuple[Tensor, Tensor]: ...

    @overload
    def predict(self, data: Data, return_score: Literal[False] = False, *,
                return_prob: Literal[True]) -> tuple[Tensor, Tensor]: ...

    @overload
    def predict(self, data: Data, return_score: Literal[True],
                return_prob: Literal[True]) -> tuple[Tensor, Tensor, Tensor]: ...

    @overload
    def predict(self, data: Data, return_score: bool = False, return_prob: bool = False
                ) -> Prediction: ...

    def predict(self, data: Data, return_score: bool = False, return_prob: bool = False
                ) -> Prediction:
        """0/1 labels ``[N]``: 1 where the score is at or above ``threshold_`` (the grid value
        chosen on validation); optionally also the score and the probability (for these
        detectors the probability is the score itself, clamped to [0, 1]).
        :class:`~et_graph.detectors.UnsupervisedETDetector` differs where PyGOD does: 1 above
        its contamination quantile, and a rank among the fitted scores as the probability."""
        self._check_fitted()
        score = self.decision_function(data)
        pred = self._flagged(score).long()
        out: list[Tensor] = [pred]
        if return_score:
            out.append(score)
        if return_prob:
            out.append(self._probability(score))
        return out[0] if len(out) == 1 else tuple(out)

    def _flagged(self, score: Tensor) -> Tensor:
        """``predict``'s rule: a score at or above the threshold chosen on validation."""
        # in float64, the precision the threshold was chosen in (a float32 score equal to the
        # rounded threshold was flagged here and counted unflagged when it was chosen)
        # (set by fit: predict checked that first)
        return score.double() >= cast(float, self.threshold_)

    def _probability(self, score: Tensor) -> Tensor:
        """``predict``'s ``prob``: here the score itself (a probability for these detectors)."""
        return score.clamp(0.0, 1.0)

    def _reads_edge_type(self) -> bool:
        """Whether this detector reads ``data.edge_type`` (the multi-relation ET only)."""
        return bool(getattr(getattr(self.config, "model", None), "multi_relation", False))

    def _check_fitted(self) -> None:
        if self.threshold_ is None:
            raise RuntimeError(f"{self._name} is not fitted yet: call fit(data) first")


# ----------------------------------------------------------------------------------------------
# Input checks shared by every detector
# ----------------------------------------------------------------------------------------------
class _ClassNotFound(Exception):
    """A class (or function) a pickle names that this process cannot import."""


class _ClassFindingUnpickler(pickle.Unpickler):
    """The unpickler that says a missing class as :class:`_ClassNotFound`: Python's own error
    for it is an ``AttributeError`` or ``ModuleNotFoundError`` whose text differs between
    versions, and a bug inside a class's ``__setstate__`` raises the same types."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except (AttributeError, ModuleNotFoundError) as error:
            raise _ClassNotFound(f"{module}.{name}: {type(error).__name__}: {error}") from error


#: ``pickle`` with :class:`_ClassFindingUnpickler`, as ``torch.load``'s ``pickle_module``.
_CLASS_FINDING_PICKLE = types.ModuleType("et_graph_class_finding_pickle")
_CLASS_FINDING_PICKLE.__dict__.update(
    {name: getattr(pickle, name) for name in ("load", "loads", "UnpicklingError")},
    Unpickler=_ClassFindingUnpickler)


def _changed_versions(payload: dict[str, Any]) -> list[str]:
    """``"torch 2.12 -> 2.13"`` for each library whose version differs between a saved
    detector's file and this process: et-graph's in full, torch's, PyG's and NumPy's by their
    major.minor (scikit-learn warns of its own estimators). Files before the libraries were
    recorded compare et-graph's only."""
    from ..config import _running_versions

    def release(version: str) -> str:
        return ".".join(version.split("+")[0].split(".")[:2])

    running = {"et_graph": __version__, **_running_versions()}
    saved = {"et_graph": payload.get("et_graph_version"), **(payload.get("versions") or {})}
    return [f"{name} {saved[name]} -> {running[name]}" for name in
            ("et_graph", "torch", "torch_geometric", "numpy")
            if isinstance(saved.get(name), str) and (
                saved[name] != running[name] if name == "et_graph"
                else release(saved[name]) != release(running[name]))]


def _warn_other_kernels(what: str, recorded: Optional[bool], stacklevel: int) -> None:
    """A ``ReproducibilityWarning`` where the compiled attention kernels were ``recorded`` on
    (or off) for a detector and are not so in this process (``None``: not recorded): they
    round differently, so its scores moved in the last bits, unannounced. ``what`` says how
    it was recorded (``PATH was saved``, ``this ETDetector was pickled``)."""
    from ..native import native_attention_enabled

    if recorded is None or recorded == native_attention_enabled():
        return
    warnings.warn(f"{what} with the compiled attention kernels {'on' if recorded else 'off'} "
                  f"and they are {'off' if recorded else 'on'} here: its scores may differ "
                  "in the last bits; et_graph.native.set_native_attention("
                  f"{recorded}) in this process scores bit for bit as before"
                  + (" (it compiles the kernels on first use: a C++ compiler and about a "
                     "minute)" if recorded else ""),
                  ReproducibilityWarning, stacklevel=stacklevel + 1)


#: A scored column warns when more than this share of the graph's nodes lie far outside its
#: fitted range (beyond it by more than the range's own width) ...
FAR_OUTSIDE_SHARE = 0.01
#: ... and at least this many: one or two outlying nodes are no change of units.
FAR_OUTSIDE_NODES = 3


def column_range(x: Tensor) -> Tensor:
    """Each column's ``[min, max]`` of ``x`` ``[N, F]`` as ``[2, F]`` float64 on the CPU: what
    :func:`warn_far_outside_fitted_range` compares a scored graph with."""
    return torch.stack([x.amin(0), x.amax(0)]).cpu().double()


def warn_far_outside_fitted_range(x: Tensor, feature_range: Optional[Tensor],
                                  detector: str) -> None:
    """A ``DataWarning`` naming each feature column in which more than
    :data:`FAR_OUTSIDE_SHARE` of the nodes of ``x`` (and at least :data:`FAR_OUTSIDE_NODES`)
    lie beyond the fitted column range by more than its width: features in other units (cents
    for dollars, x1000) or from another transform. A detector scored them without a word, and
    flagged none of them (a deployment audit). Counted per column, so that one mis-scaled
    column of hundreds is named; a column constant in the fitted graph is not checked (a
    category it never held is no change of units), nor a graph of fewer than
    :data:`FAR_OUTSIDE_NODES` nodes. A transform forgotten whose raw values fall inside the
    range cannot be told from data and is not caught."""
    if feature_range is None or x.size(0) < FAR_OUTSIDE_NODES:
        return
    if x.dtype not in (torch.float32, torch.float64):  # (uint8 bounds wrapped, float16's
        x = x.float()                                   # overflowed to inf - inf = NaN)
    low, high = feature_range.to(x.device, x.dtype)  # (compared in x's own dtype: no copy)
    width = high - low
    far = ((x < low - width) | (x > high + width)) & (width > 0)
    counts = far.sum(0)
    flagged = ((counts >= FAR_OUTSIDE_NODES)
               & (counts > FAR_OUTSIDE_SHARE * x.size(0))).nonzero().view(-1).tolist()
    if flagged:
        shares = [f"{column}: {int(counts[column]) / x.size(0):.0%}" for column in flagged[:6]]
        warnings.warn(
            f"{detector}: in {len(flagged)} feature column(s) ({', '.join(shares)}"
            f"{', ...' if len(flagged) > 6 else ''} of the nodes) this graph's values lie far "
            "outside the fitted graph's range (beyond it by more than its width): are they in "
            "the fitted graph's units, through the same FeatureTransform? Scores read from "
            "them may mean little", DataWarning, stacklevel=user_stacklevel())


def warn_unused_edge_data(data: Data, detector: str, reads_edge_type: bool = False) -> None:
    """A ``DataWarning`` for per-edge data the detectors do not read, rather than silence: the
    user may believe the weights, features or relation types shape the result (``edge_type``
    is read only by the multi-relation ET)."""
    unused = [name for name in ("edge_weight", "edge_attr", "edge_type")
              if getattr(data, name, None) is not None
              and not (name == "edge_type" and reads_edge_type)]
    # and any other per-edge tensor (networkx's edge "weight" arrives under its own name
    # through from_networkx, and was ignored without a word: an input audit); told by its name
    # or its length (PyG's is_edge_attr caches enum values in the caller's Data, which then no
    # longer saves for a weights-only load)
    # (only on a graph the checks will accept: on a malformed one this ran first, and its
    # AttributeError hid their message: a review)
    edge_index = getattr(data, "edge_index", None) if isinstance(data, Data) else None
    if isinstance(edge_index, Tensor) and edge_index.dim() == 2:
        edges, nodes = edge_index.size(1), data.num_nodes
        unused += [key for key in sorted(data.keys()) if key not in (
            "edge_index", "edge_weight", "edge_attr", "edge_type")
            and isinstance(data[key], Tensor) and data[key].dim() >= 1
            and ("edge" in key or (data[key].size(0) == edges and edges != nodes))]
    if unused:
        warnings.warn(f"{detector} ignores data.{' and data.'.join(unused)}: the detectors read "
                      "x, edge_index (and edge_type with multi_relation) only", DataWarning,
                      stacklevel=user_stacklevel())


#: What :func:`warn_unused_edge_data` says, for the callers that say it once.
UNUSED_EDGE_DATA = r".* ignores data\.\w+(?: and data\.\w+)*: the detectors read"


@contextlib.contextmanager
def unused_edge_data_said(already: bool) -> Iterator[None]:
    """Silence :func:`warn_unused_edge_data` where it has been said already (``already``): a
    run's later seeds fit the same detectors on the same graph, and a fraud-data audit saw the
    warning once per seed and model."""
    if not already:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNUSED_EDGE_DATA, category=UserWarning)
        yield


def check_graph(data: Data) -> tuple[Tensor, Tensor]:
    """``(x, edge_index)`` of a node graph a detector reads, checked (a ``HeteroData`` is refused
    with the way to a homogeneous graph)."""
    if not isinstance(data, Data):
        hint = (": pass data.to_homogeneous(), whose edge_type numbers the relations (ET reads "
                "them with multi_relation=True; node types of other feature widths are "
                "zero-padded into one feature space)"
                if type(data).__name__ == "HeteroData" else "")
        raise TypeError(f"data must be a torch_geometric.data.Data, got "
                        f"{type(data).__name__}{hint}")
    return check_node_graph(data)


def check_labels(data: Data, used: Tensor) -> Tensor:
    """``data.y`` as a long tensor ``[N]`` holding the labels of the ``used`` nodes (which must
    be 0 or 1; bool works) and 0 everywhere else."""
    y = getattr(data, "y", None)
    if y is None:
        raise ValueError(
            "fit needs node labels data.y (0 = normal, 1 = anomalous) of shape [N]"
        )
    y = torch.as_tensor(y)  # NumPy or list labels are read like a tensor
    y = y.view(-1) if y.dim() == 2 and 1 in y.shape else y
    if y.dim() != 1 or y.numel() != data.num_nodes:
        raise ValueError(f"data.y must have shape [{data.num_nodes}], got {tuple(y.shape)}")
    y = y.detach().cpu()
    if y.dtype == torch.bool:
        y = y.long()
    used_labels = y[used]
    # Compared as they are: .long() first would turn a stray 0.5 into a silent 0.
    if not bool(((used_labels == 0) | (used_labels == 1)).all()):
        raise ValueError("data.y must be binary on the training and validation nodes: "
                         "0 = normal, 1 = anomalous (other nodes' labels are not read)")
    return torch.where(used, y, torch.zeros((), dtype=y.dtype)).long()


def resolve_mask(data: Data, mask: Optional[Tensor], name: str) -> Tensor:
    """``mask`` (or ``data.<name>`` when ``None``) as a checked bool tensor over the nodes."""
    if mask is None:
        mask = getattr(data, name, None)
        if mask is None:
            raise ValueError(
                f"no {name}: pass fit(data, train_mask=..., val_mask=...) as bool tensors [N], "
                f"or set data.{name}"
            )
        mask = torch.as_tensor(mask)  # a NumPy or list attribute, read like the argument
        if mask.dim() == 2 and mask.size(1) == 1:
            mask = mask[:, 0]  # the loaders store one split as [N, 1]: nothing to choose
        if mask.dim() == 2:
            raise ValueError(
                f"data.{name} has shape {tuple(mask.shape)} (one column per split); pass "
                f"{name}=data.{name}[:, i] for the split you want"
            )
    mask = torch.as_tensor(mask).cpu()
    if mask.dim() == 1 and not mask.is_floating_point() and mask.dtype != torch.bool:
        # OGB-style split_idx["train"] and 0/1 vectors both arrive as integers: which one is
        # meant cannot be told apart in general, so neither is guessed.
        raise ValueError(
            f"{name} must be a bool tensor of shape [{data.num_nodes}], got {mask.dtype} of "
            f"shape {tuple(mask.shape)}: for node indices pass "
            f"torch_geometric.utils.index_to_mask(idx, size={data.num_nodes}), for a 0/1 "
            f"vector pass {name}.bool()"
        )
    if mask.dtype != torch.bool or mask.shape != (data.num_nodes,):
        raise ValueError(
            f"{name} must be a bool tensor of shape [{data.num_nodes}], got "
            f"{tuple(mask.shape)} {mask.dtype}"
        )
    if not bool(mask.any()):
        raise ValueError(f"{name} selects no node")
    return mask


#: The constructor arguments BaseDetector.get_params covers (a subclass's keywords go to the
#: config through **keywords).
_BASE_ARGUMENTS = frozenset({"self", "config", "seed", "progress", "device", "chunk_size",
                             "chunk_edges", "keywords", "args", "supervised"})


def check_config_class(cls: type) -> None:
    """``TypeError`` unless ``cls.config_class`` (when a dataclass) holds sections: every field
    a dataclass of settings, as :class:`~et_graph.detectors.config.GNNDetectorConfig` holds
    ``model`` and ``train``. A flat config failed at the class statement on ``'int' object has
    no attribute 'items'`` (an audit)."""
    config_class = getattr(cls, "config_class", None)
    if not dataclasses.is_dataclass(config_class):
        return
    if not isinstance(config_class, type):
        # (an instance failed on its call, then on its missing __name__: an AttributeError)
        raise TypeError(f"{cls.__name__}.config_class is an instance of "
                        f"{type(config_class).__name__}: give the dataclass itself, "
                        "without the call's parentheses")
    try:
        defaults = config_class()
    except TypeError as error:
        raise TypeError(f"{cls.__name__}.config_class {config_class.__name__} cannot be built "
                        f"without arguments ({error}): give every section a default") from error
    flat = [field.name for field in dataclasses.fields(defaults)
            if not dataclasses.is_dataclass(getattr(defaults, field.name))]
    if flat:
        raise TypeError(
            f"{cls.__name__}.config_class {config_class.__name__} has setting(s) {flat} outside "
            "a section: a detector's config is a dataclass of section dataclasses (its settings "
            "grouped as model=..., train=..., like GNNDetectorConfig's, each section a field "
            "with a default_factory)")


def constructor_signature(cls: type[BaseDetector]) -> Optional[Any]:
    """The keywords a detector class takes, as ``inspect.signature`` (``help()``, an IDE's or
    Jupyter's ``?``) shows them: its config's fields with their defaults (without those it
    refuses), then ``seed``, ``progress``, ``device`` (and the chunk sizes where it scores in
    chunks, ``supervised`` where it takes it). The constructor itself takes ``**keywords``,
    which showed nothing. ``None`` for a class without a dataclass config or with constructor
    arguments of its own (its own signature stays)."""
    import inspect

    config_class = getattr(cls, "config_class", None)
    if not dataclasses.is_dataclass(config_class) or _own_constructor_arguments(cls):
        return None
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("config", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    default=None)]
    for section in dataclasses.asdict(config_class()).values():  # type: ignore[operator]
        parameters += [inspect.Parameter(name, keyword, default=value)
                       for name, value in section.items()
                       if name not in getattr(cls, "unused_settings", ())]
    parameters += [inspect.Parameter("seed", keyword, default=0),
                   inspect.Parameter("progress", keyword, default=False),
                   inspect.Parameter("device", keyword, default="cpu")]
    if getattr(cls, "supports_chunks", False):
        parameters += [inspect.Parameter(name, keyword, default=None)
                       for name in ("chunk_size", "chunk_edges")]
    if "supervised" in inspect.signature(cls.__init__).parameters:
        parameters.append(inspect.Parameter("supervised", keyword, default=True))
    return inspect.Signature(parameters, return_annotation=None)


def _own_constructor_arguments(cls: type[BaseDetector]) -> list[str]:
    import inspect

    # (*args and **keywords pass on to the base constructor under whatever name they have:
    # an audit's **kw was listed as an argument of the subclass's own)
    passed_on = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [name for name, parameter in inspect.signature(cls.__init__).parameters.items()
            if name not in _BASE_ARGUMENTS and parameter.kind not in passed_on]
