"""Unsupervised node anomaly baselines for ``et-graph unsupervised``: no label is read.

- :func:`isolation_forest_scores`, :func:`lof_scores`: scikit-learn on the node features, alone
  or with label-free statistics of each node's neighbours appended (:func:`baseline_features`:
  the structure these feature-space detectors otherwise never see).
- :func:`pygod_scores`: PyGOD's DOMINANT, AnomalyDAE, CoLA and CONAD, an optional extra
  (``pip install -e .[pygod]``). PyGOD's samplers also need ``torch-sparse`` or ``pyg-lib``.
  When PyGOD or those are missing, :class:`BaselineUnavailable` says why, and the runner reports
  the baseline as skipped with that reason.

Every function takes the label-free graph (``x``, ``edge_index``) and returns one score per
node, higher = more anomalous.
"""
from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Sequence
from typing import Callable, Union

import numpy as np
import torch
from torch_geometric.data import Data

from ..exceptions import FitWarning
from ..training import private_rng
from ..transforms.neighbourhood import neighbourhood_statistics, parse_neighbour_stats

#: PyGOD detector class names by the runner's model names.
PYGOD_MODELS = {"dominant": "DOMINANT", "anomalydae": "AnomalyDAE", "cola": "CoLA",
                "conad": "CONAD"}
SKLEARN_MODELS = ("iforest", "lof")
#: Baselines without any learning: a node's in-degree (self-loops not counted), the floor a
#: structural score must clear (the injected cliques of PyGOD's graphs raise it).
STRUCTURE_MODELS = ("degree",)


class BaselineUnavailable(RuntimeError):
    """An optional baseline cannot run here; the message says why and how to install it."""


def baseline_features(data: Data, neighbour_stats: Union[str, Sequence[str], None] = ()
                      ) -> np.ndarray:
    """The float64 matrix the scikit-learn baselines score: ``data.x`` as it is, or, with
    ``neighbour_stats`` (names of :func:`~et_graph.transforms.neighbourhood_statistics`, e.g.
    ``"mean,std,degree"``), ``[x, statistics of the in-neighbours' x]`` with every column
    z-scored over all nodes (so that no block outweighs another in LOF's distances; constant
    columns become 0). Label-free: only ``x`` and ``edge_index`` are read."""
    stats = parse_neighbour_stats(neighbour_stats)
    x = data.x.cpu().double()  # scikit-learn reads NumPy arrays (a CUDA graph failed here)
    if not stats:
        return x.numpy()
    features = torch.cat([x, neighbourhood_statistics(x, data.edge_index.cpu(), stats)], dim=-1)
    spread = features.std(dim=0, unbiased=False)
    features = (features - features.mean(dim=0)) / torch.where(spread > 0, spread,
                                                               torch.ones_like(spread))
    return features.numpy()


def degree_scores(data: Data) -> np.ndarray:
    """Each node's in-degree, self-loops not counted (float64; label-free, no seed)."""
    source, target = data.edge_index.cpu()
    kept = target[source != target]
    return torch.bincount(kept, minlength=data.num_nodes).double().numpy()


def isolation_forest_scores(data: Data, seed: int, n_estimators: int = 100,
                            max_samples: int = 256, max_features: float = 1.0,
                            neighbour_stats: Union[str, Sequence[str], None] = ()
                            ) -> np.ndarray:
    """IsolationForest (scikit-learn) on :func:`baseline_features`: minus the mean isolation
    depth. ``max_samples`` is capped at the node count (256 = scikit-learn's ``"auto"``);
    ``max_features`` is the share of columns each tree draws."""
    from sklearn.ensemble import IsolationForest

    features = baseline_features(data, neighbour_stats)
    forest = IsolationForest(n_estimators=n_estimators,
                             max_samples=min(max_samples, features.shape[0]),
                             max_features=max_features, random_state=seed)
    forest.fit(features)
    return -forest.score_samples(features)


def lof_scores(data: Data, n_neighbors: int = 20,
               neighbour_stats: Union[str, Sequence[str], None] = ()) -> np.ndarray:
    """Local outlier factor (scikit-learn) of each node among all nodes'
    :func:`baseline_features` (deterministic: it has no seed)."""
    from sklearn.neighbors import LocalOutlierFactor

    features = baseline_features(data, neighbour_stats)
    lof = LocalOutlierFactor(n_neighbors=min(n_neighbors, features.shape[0] - 1))
    with warnings.catch_warnings():
        # scikit-learn's own "Duplicate values" (1.6+) is said below; every other warning goes
        # through the caller's filters (recorded and re-sent, it escaped their module filters
        # and their once-per-place memory: a logging audit)
        warnings.filterwarnings("ignore", message="Duplicate values", category=UserWarning)
        lof.fit(features)
    # Read from the factors themselves, as scikit-learn 1.6+ decides its warning: before 1.6
    # it gives none, and neither did this (a minimum-version audit). Its own message names
    # neither the cause's size nor a remedy.
    extreme = int((lof.negative_outlier_factor_ < -1e7).sum())
    if extreme:
        _, counts = np.unique(features, axis=0, return_counts=True)
        warnings.warn(
            f"LOF: {extreme} nodes got an outlier "
            f"factor above 1e7: groups of identical feature rows (the largest holds "
            f"{int(counts.max())} nodes) put a member's {lof.n_neighbors_} nearest neighbours "
            "at distance zero, so densities there are infinite and LOF ranks those nodes "
            "arbitrarily (scikit-learn: 'Duplicate values are leading to incorrect results'). "
            "More neighbours than the largest group, or neighbour statistics beside x "
            "(lof_neighbour_stats), tell such nodes apart.", FitWarning, stacklevel=2)
    return -lof.negative_outlier_factor_


def pygod_available() -> tuple[bool, str]:
    """``(True, "")`` if PyGOD and one of its samplers' back-ends import, else ``(False,
    reason)``."""
    try:
        importlib.import_module("pygod.detector")
    except ImportError as error:
        return False, (f"pygod is not installed ({error}); pip install -e .[pygod] to add "
                       "DOMINANT, AnomalyDAE, CoLA and CONAD")
    backends = []
    for module in ("pyg_lib", "torch_sparse"):
        try:
            importlib.import_module(module)
            backends.append(module)
        except ImportError:
            pass
    if not backends:
        return False, ("pygod is installed but its NeighborLoader sampler needs pyg-lib or "
                       "torch-sparse, and neither imports")
    return True, ""


def pygod_scores(name: str, data: Data, seed: int, epochs: int = 100,
                 device: str = "cpu") -> np.ndarray:
    """Transductive outlier scores (``decision_score_``) of PyGOD detector ``name`` (one of
    :data:`PYGOD_MODELS`) fitted on the label-free ``data`` with PyGOD's other defaults.
    Raises :class:`BaselineUnavailable` when PyGOD or its sampler back-end is missing."""
    if name not in PYGOD_MODELS:
        raise ValueError(f"unknown PyGOD baseline {name!r}; choose from {list(PYGOD_MODELS)}")
    ok, reason = pygod_available()
    if not ok:
        raise BaselineUnavailable(reason)
    detector_module = importlib.import_module("pygod.detector")
    where = torch.device(device)
    gpu = (where.index or 0) if where.type == "cuda" else -1
    graph = Data(x=data.x.float(), edge_index=data.edge_index)
    # Seeded as before, without leaving the caller's random streams reset.
    with private_rng(seed, where):
        detector = getattr(detector_module, PYGOD_MODELS[name])(epoch=epochs, gpu=gpu,
                                                                verbose=0)
        try:
            detector.fit(graph)
        except ImportError as error:  # a sampler back-end missing shows up only when used
            raise BaselineUnavailable(f"PyGOD {PYGOD_MODELS[name]} failed to import a "
                                      f"dependency: {error}") from error
    score = detector.decision_score_
    score = score.detach().cpu().numpy() if isinstance(score, torch.Tensor) else score
    return np.asarray(score, dtype=np.float64)


def baseline_scorer(name: str, seed: int, iforest_trees: int = 100, lof_neighbors: int = 20,
                    pygod_epochs: int = 100, device: str = "cpu", *,
                    iforest_max_samples: int = 256, iforest_max_features: float = 1.0,
                    iforest_neighbour_stats: Union[str, Sequence[str], None] = (),
                    lof_neighbour_stats: Union[str, Sequence[str], None] = ()
                    ) -> Callable[[Data], np.ndarray]:
    """A function ``data -> scores`` for baseline ``name`` (iforest, lof or a PyGOD model); a
    ``functools.partial``, so that it pickles to a process pool's workers (lambdas did not: a
    multiprocessing audit)."""
    if name == "iforest":
        return functools.partial(isolation_forest_scores, seed=seed, n_estimators=iforest_trees,
                                 max_samples=iforest_max_samples,
                                 max_features=iforest_max_features,
                                 neighbour_stats=iforest_neighbour_stats)
    if name == "lof":
        return functools.partial(lof_scores, n_neighbors=lof_neighbors,
                                 neighbour_stats=lof_neighbour_stats)
    if name == "degree":
        return degree_scores
    if name in PYGOD_MODELS:
        return functools.partial(pygod_scores, name, seed=seed, epochs=pygod_epochs,
                                 device=device)
    raise ValueError(f"unknown baseline {name!r}; choose from "
                     f"{list(SKLEARN_MODELS) + list(STRUCTURE_MODELS) + list(PYGOD_MODELS)}")
