"""Unsupervised node anomaly baselines for ``et-graph unsupervised``: no label is read.

- :func:`isolation_forest_scores`, :func:`lof_scores`: scikit-learn on the node features alone.
- :func:`pygod_scores`: PyGOD's DOMINANT, AnomalyDAE, CoLA and CONAD, an optional extra
  (``pip install -e .[pygod]``). PyGOD's samplers also need ``torch-sparse`` or ``pyg-lib``.
  When PyGOD or those are missing, :class:`BaselineUnavailable` says why, and the runner reports
  the baseline as skipped with that reason.

Every function takes the label-free graph (``x``, ``edge_index``) and returns one score per
node, higher = more anomalous.
"""
from __future__ import annotations

import importlib
from typing import Callable

import numpy as np
import torch
from torch_geometric.data import Data

from ..training import private_rng

#: PyGOD detector class names by the runner's model names.
PYGOD_MODELS = {"dominant": "DOMINANT", "anomalydae": "AnomalyDAE", "cola": "CoLA",
                "conad": "CONAD"}
SKLEARN_MODELS = ("iforest", "lof")


class BaselineUnavailable(RuntimeError):
    """An optional baseline cannot run here; the message says why and how to install it."""


def isolation_forest_scores(data: Data, seed: int, n_estimators: int = 100) -> np.ndarray:
    """IsolationForest (scikit-learn) on ``data.x``: minus the mean isolation depth."""
    from sklearn.ensemble import IsolationForest

    forest = IsolationForest(n_estimators=n_estimators, random_state=seed)
    forest.fit(data.x.double().numpy())
    return -forest.score_samples(data.x.double().numpy())


def lof_scores(data: Data, n_neighbors: int = 20) -> np.ndarray:
    """Local outlier factor (scikit-learn) of each node among all nodes' features
    (deterministic: it has no seed)."""
    from sklearn.neighbors import LocalOutlierFactor

    lof = LocalOutlierFactor(n_neighbors=min(n_neighbors, data.num_nodes - 1))
    lof.fit(data.x.double().numpy())
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
                    pygod_epochs: int = 100, device: str = "cpu"
                    ) -> Callable[[Data], np.ndarray]:
    """A function ``data -> scores`` for baseline ``name`` (iforest, lof or a PyGOD model)."""
    if name == "iforest":
        return lambda data: isolation_forest_scores(data, seed, iforest_trees)
    if name == "lof":
        return lambda data: lof_scores(data, lof_neighbors)
    if name in PYGOD_MODELS:
        return lambda data: pygod_scores(name, data, seed, pygod_epochs, device)
    raise ValueError(f"unknown baseline {name!r}; choose from "
                     f"{list(SKLEARN_MODELS) + list(PYGOD_MODELS)}")
