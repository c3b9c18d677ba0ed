"""Anomaly graphs stored as ``.npz``: the open layout (T-Finance, T-Social, anything converted)
and the heterophilous-graphs layout of Platonov et al. (Tolokers, Questions).

Open layout (written by :func:`save_anomaly_npz`)::

    x           float  [N, F]
    edge_index  int    [2, E]     any direction; the loader symmetrises
    y           int    [N]        0 = normal, 1 = anomalous
    train_mask, val_mask, test_mask   bool [N] or [N, S]   (optional, all three or none)
    label_mask  bool   [N]        (optional) nodes that may enter splits

Heterophilous-graphs layout (``yandex-research/heterophilous-graphs``)::

    node_features [N, F], node_labels [N], edges [E, 2],
    train_masks / val_masks / test_masks [S, N]
"""
from __future__ import annotations

import contextlib
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from torch_geometric.data import Data

from .anomaly_data import (
    MASK_KEYS,
    UNLABELLED_HINT,
    file_dataset_name,
    physical_memory,
    prepare_anomaly_data,
    refuse_beyond_memory,
    warn_unread_entries,
)
from .gnnbenchmark_common import one_hot_rows

OPEN_KEYS = ("x", "edge_index", "y")
HETEROPHILOUS_KEYS = ("node_features", "node_labels", "edges")


_UNREADABLE = (OSError, ValueError, zipfile.BadZipFile, EOFError)


class _Entries(Mapping[str, np.ndarray]):
    """An open ``.npz`` archive's entries, each decompressed when read: entries the loaders
    do not read are never unpacked (every entry was, so a small file that inflates to
    gigabytes in an unread key could exhaust memory)."""

    def __init__(self, archive: Any, path: Path) -> None:
        self.archive, self.path = archive, path

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.archive.files:
            raise KeyError(key)
        # zipfile reads no more than an entry declares, so checking the declared size bounds
        # the memory (a 1 MB file inflated to 3 GB unchecked: a security audit)
        bundle = getattr(self.archive, "zip", None)
        names = set(bundle.namelist()) if bundle is not None else set()
        stored = next((name for name in (f"{key}.npy", key) if name in names), None)
        # (stored is None without a bundle)
        size = (bundle.getinfo(stored).file_size if bundle is not None and stored is not None
                else 0)
        refuse_beyond_memory(size, physical_memory(), f"{self.path}: entry {key!r} unpacks to")
        try:
            return self.archive[key]
        except _UNREADABLE as error:
            raise ValueError(f"{self.path}: entry {key!r} cannot be read ({error})") from error

    def __contains__(self, key: object) -> bool:
        return key in self.archive.files

    def __iter__(self) -> Iterator[str]:
        return iter(self.archive.files)

    def __len__(self) -> int:
        return len(self.archive.files)


@contextlib.contextmanager
def _read_npz(path: Path) -> Iterator[_Entries]:
    if not path.is_file():
        raise FileNotFoundError(f"No such .npz file: {path}")
    try:
        archive = np.load(path, allow_pickle=False)
    except _UNREADABLE as error:
        raise ValueError(f"{path}: not a readable .npz archive ({error})") from error
    with archive:
        yield _Entries(archive, path)


def load_anomaly_npz(
    path: Union[str, Path], name: Optional[str] = None, binarize: bool = False, *,
    split_masks: bool = True,
) -> Data:
    """Load an anomaly graph from ``path`` (open or heterophilous-graphs layout).

    Args:
        path: the ``.npz`` file.
        name: ``data.name``; defaults to the file name without extension.
        binarize: treat labels ``> 0`` as anomalous instead of requiring ``{0, 1}``.
        split_masks: ``False`` drops the split masks unread
            (:func:`~et_graph.datasets.anomaly_data.prepare_anomaly_data`).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not an ``.npz`` archive, lacks keys, or holds malformed arrays.
    """
    path = Path(path)
    name = name or file_dataset_name(path)
    with _read_npz(path) as arrays:
        return _from_entries(arrays, str(path), name, binarize, split_masks)


def _from_entries(arrays: Mapping[str, np.ndarray], source: str, name: str,
                  binarize: bool, split_masks: bool = True) -> Data:
    """:func:`load_anomaly_npz` on the archive's entries (read as needed)."""
    if all(key in arrays for key in OPEN_KEYS):
        warn_unread_entries(source, arrays)
        masks = {key: arrays[key] for key in MASK_KEYS if key in arrays}
        edge_index = arrays["edge_index"]
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise ValueError(
                f"{source}: edge_index must have shape [2, E], got {edge_index.shape}"
                + (" (transpose it: the open layout stores one edge per column)"
                   if edge_index.ndim == 2 and edge_index.shape[1] == 2 else "")
            )
        return prepare_anomaly_data(
            arrays["x"], edge_index, arrays["y"], name=name, masks=masks or None,
            label_mask=arrays.get("label_mask"), source=source, binarize=binarize,
            split_masks=split_masks,
        )
    if all(key in arrays for key in HETEROPHILOUS_KEYS):
        edges = arrays["edges"]
        if edges.ndim != 2 or edges.shape[1] != 2:
            raise ValueError(f"{source}: edges must have shape [E, 2], got {edges.shape}")
        warn_unread_entries(source, arrays,
                            (*HETEROPHILOUS_KEYS, *(key + "s" for key in MASK_KEYS),
                             "label_mask"))
        masks = {
            key: arrays[key + "s"] for key in MASK_KEYS if key + "s" in arrays
        }
        return prepare_anomaly_data(
            arrays["node_features"], edges.T, arrays["node_labels"], name=name,
            masks=masks or None, label_mask=arrays.get("label_mask"), source=source,
            binarize=binarize, split_masks=split_masks,
        )
    if all(key in arrays for key in OPEN_KEYS if key != "y"):
        # (an audit: the layout was called unrecognised, not the labels missing)
        raise ValueError(f"{source}: the .npz file has no labels (y; found keys "
                         f"{sorted(arrays)}){UNLABELLED_HINT}")
    raise ValueError(
        f"{source}: unrecognised .npz layout; found keys {sorted(arrays)}. Expected "
        f"{list(OPEN_KEYS)} (+ optional {list(MASK_KEYS)}, label_mask) or the "
        f"heterophilous-graphs keys {list(HETEROPHILOUS_KEYS)}"
    )


def save_anomaly_npz(data: Data, path: Union[str, Path], compressed: bool = True,
                     validate: bool = True) -> Path:
    """Write ``data`` in the open ``.npz`` layout that :func:`load_anomaly_npz` reads.

    ``data`` needs ``x``, ``edge_index`` and ``y``; the three split masks and ``label_mask`` are
    written when present. The edges are written as stored (no symmetrisation), and the file is
    validated by reading it back, so a malformed ``data`` fails here rather than at load time
    (``validate=False`` leaves that read to the caller, who is about to load it anyway).
    """
    path = Path(path)
    arrays: dict[str, Any] = {}
    for key in OPEN_KEYS:
        value = getattr(data, key, None)
        if value is None:
            raise ValueError(f"cannot save: data has no {key}")
        arrays[key] = value.detach().cpu().numpy()
    for key in (*MASK_KEYS, "label_mask"):
        value = getattr(data, key, None)
        if value is not None:
            arrays[key] = value.detach().cpu().numpy()
    path.parent.mkdir(parents=True, exist_ok=True)
    # np.savez appends ".npz" to names without it; write to the exact path instead
    with open(path, "wb") as handle:
        (np.savez_compressed if compressed else np.savez)(handle, **arrays)
    if validate:
        load_anomaly_npz(path)
    return path


#: GADBench's released DGL graphs (``datasets/preprocess.ipynb`` of ``squareRoot3/GADBench``)
#: carry 20 split columns per mask: 0-9 fully supervised (T-Finance/T-Social: 40/20/40), 10-19
#: semi-supervised. Mixing the two regimes under "seed i -> column i mod S" would be wrong.
GADBENCH_SPLIT_COLUMNS = {"supervised": slice(0, 10), "semi_supervised": slice(10, 20)}


def dgl_graph_to_data(graph: Any, name: str, gadbench_splits: str = "supervised") -> Data:
    """Convert a DGL graph as BWGNN or GADBench ships T-Finance / T-Social into a plain PyG
    ``Data``.

    Reads ``graph.edges()``, ``graph.ndata['feature']`` and ``graph.ndata['label']`` (a label
    of shape ``[N, 2]`` is one-hot and becomes its ``argmax``), plus the split masks when the
    graph carries them: ``train_mask`` / ``val_mask`` / ``test_mask`` (``[N]``), or GADBench's
    ``train_masks`` / ``val_masks`` / ``test_masks`` (``[N, 20]``), of which
    ``gadbench_splits`` keeps columns 0-9 (``"supervised"``) or 10-19
    (``"semi_supervised"``); a graph with both (GADBench's Amazon and YelpChi keep DGL's
    single masks beside its own) is read through GADBench's. GADBench's ``mark`` (the
    labelled nodes, e.g. of Amazon) becomes ``label_mask``. Only the DGL graph API is used, so
    this function itself does not import DGL.
    """
    if gadbench_splits not in GADBENCH_SPLIT_COLUMNS:
        raise ValueError(f"gadbench_splits must be one of {tuple(GADBENCH_SPLIT_COLUMNS)}, "
                         f"got {gadbench_splits!r}")
    ndata = graph.ndata
    for key in ("feature", "label"):
        if key not in ndata:
            raise ValueError(
                f"{name}: the DGL graph has no node data '{key}' (found {sorted(ndata.keys())})"
            )
    src, dst = graph.edges()
    label = ndata["label"]
    if label.dim() == 2 and label.size(1) > 1:
        # a row that is not one-hot (all zeros, two ones, three classes) was argmaxed into a
        # class without a word (a data audit)
        one_hot = one_hot_rows(label)
        if label.size(1) != 2 or not bool(one_hot.all()):
            bad = int((~one_hot).nonzero()[0]) if not bool(one_hot.all()) else None
            raise ValueError(
                f"{name}: the DGL graph's labels have shape {list(label.shape)}; two-column "
                "one-hot labels are read as their argmax"
                + (f", but row {bad} is {label[bad].tolist()}" if bad is not None else "")
                + ": store binary labels [N] (0 = normal, 1 = anomalous)")
        label = label.argmax(dim=1)
    edge_index = torch.stack([src.long(), dst.long()], dim=0)
    data = Data(x=ndata["feature"], edge_index=edge_index, y=label.reshape(-1).long())
    plural = [key + "s" for key in MASK_KEYS]
    # GADBench's masks first: its Amazon and YelpChi keep DGL's single masks beside them, and
    # reading those ignored gadbench_splits (semi_supervised gave DGL's 70/10/20 split without
    # a word: a format audit)
    if all(key in ndata for key in plural):
        for key, stored in zip(MASK_KEYS, plural):
            masks = ndata[stored].bool()
            if masks.dim() == 2 and masks.size(1) == 20:
                masks = masks[:, GADBENCH_SPLIT_COLUMNS[gadbench_splits]]
            elif gadbench_splits != "supervised":
                raise ValueError(
                    f"{name}: {stored} has shape {tuple(masks.shape)}, not GADBench's [N, 20]; "
                    "cannot tell its semi-supervised columns")
            setattr(data, key, masks)
    elif all(key in ndata for key in MASK_KEYS):
        for key in MASK_KEYS:
            setattr(data, key, ndata[key].bool())
    elif any(key in ndata for key in (*MASK_KEYS, *plural)):
        found = sorted(k for k in ndata.keys() if k in (*MASK_KEYS, *plural))
        raise ValueError(f"{name}: the DGL graph carries only some split masks ({found}); "
                         "expected all three of train/val/test")
    if "mark" in ndata:
        data.label_mask = ndata["mark"].bool().reshape(-1)
    data.num_nodes = int(graph.num_nodes())
    return data
