"""What every GNNBenchmark dataset family shares: :class:`BenchmarkData` (splits plus what a
model needs to know about the inputs) and PyG's ``GNNBenchmarkDataset`` (PATTERN, CLUSTER, MNIST,
CIFAR10) read from local files only.

Layout expected under a user root ``ROOT`` (PyG's own layout)::

    ROOT/<NAME>/raw/<NAME>_v2.pt   (NAME in PATTERN, CLUSTER, MNIST, CIFAR10)
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union

import torch
from torch import Tensor
from torch_geometric.data import Data

from ..exceptions import DataWarning
from ..paths import write_text_whole
from .embedded import load_error_detail, load_torch_data, restricted_pyg_loads
from .locking import folder_lock

if TYPE_CHECKING:
    from torch_geometric.datasets import GNNBenchmarkDataset

PathLike = Union[str, "os.PathLike[str]"]

GNN_BENCHMARK_NAMES = ("PATTERN", "CLUSTER", "MNIST", "CIFAR10")
SPLITS = ("train", "val", "test")


@dataclass
class BenchmarkData:
    """Splits plus everything a model needs to know about the inputs.

    Attributes:
        name: the dataset as reported ("ZINC proxy", "PATTERN (generated)", ...).
        source: "official", "partial" (the ZINC proxy) or "generated".
        splits: ``{"train", "val", "test"}`` lists of graphs.
        task: "regression", "node" or "classification".
        metric: "mae", "weighted_accuracy" or "accuracy".
        num_outputs: output width of the model.
        node_dim: width of float node features (none for integer node labels).
        num_node_types: number of integer node labels (none for float features).
        edge_dim: width of float edge features.
        num_edge_types: number of integer edge labels.
        protocol: one sentence for results files.
        notes: caveats for results files.
        rw_pe_dim: width of the random-walk encoding ``rw_pe`` every graph carries (0 = none;
            set by :func:`~et_graph.datasets.gnnbenchmark.add_random_walk_encoding`).
    """

    name: str
    source: str
    splits: dict[str, list[Data]]
    task: str
    metric: str
    num_outputs: int
    node_dim: Optional[int] = None
    num_node_types: Optional[int] = None
    edge_dim: Optional[int] = None
    num_edge_types: Optional[int] = None
    protocol: str = ""
    notes: list[str] = field(default_factory=list)
    rw_pe_dim: int = 0

    @property
    def lower_is_better(self) -> bool:
        return self.metric == "mae"

    @property
    def better(self) -> str:
        """``"lower is better"`` or ``"higher is better"``, for the results' titles."""
        return "lower is better" if self.lower_is_better else "higher is better"


#: What torch.load / pickle raise for a truncated, damaged or foreign file.
UNREADABLE_FILE_ERRORS = (pickle.UnpicklingError, EOFError, RuntimeError, zipfile.BadZipFile,
                          ModuleNotFoundError, AttributeError, KeyError, TypeError, IndexError,
                          OSError)


def unreadable(error: BaseException) -> bool:
    """Whether ``error`` (one of :data:`UNREADABLE_FILE_ERRORS`) says the file is damaged: an
    ``OSError`` only for a cut zip archive ("[Errno 22] Invalid argument"), not for a full disk
    or a read-only folder, which are the machine's."""
    return not isinstance(error, OSError) or error.errno == errno.EINVAL
_Loaded = TypeVar("_Loaded")


def read_local_files(read: Callable[[], _Loaded], where: Path, fix: str) -> _Loaded:
    """``read()``, with the errors of a damaged file (``torch.load``'s advice to set
    ``weights_only=False``, a bare ``invalid load key``) turned into a ``ValueError`` that
    names the folder and the fix."""
    try:
        return read()
    except UNREADABLE_FILE_ERRORS as error:
        if not unreadable(error):
            raise
        raise ValueError(f"the files under {where} cannot be read ({type(error).__name__}: "
                         f"{load_error_detail(error)}): a file is truncated, damaged or not "
                         f"the expected one; {fix}") from error


def one_hot_rows(values: Tensor) -> Tensor:
    """Per row of ``values`` ``[N, C]``, whether it is one-hot: zeros and a single one (the
    SBM features and DGL label matrices the loaders read were taken as one-hot whatever they
    held: an audit)."""
    return ((values == 0) | (values == 1)).all(dim=1) & (values.sum(dim=1) == 1)


def category_ids(values: Tensor, what: str, count: int) -> Tensor:
    """``values`` as ``long`` ids in ``[0, count)``; a ``ValueError`` naming ``what`` for other
    values (a bare ``.long()`` turned a label 0.5 into 0, and an id past the vocabulary
    failed later inside ``one_hot`` or the loss)."""
    if values.is_floating_point() and not bool((values == values.round()).all()):
        raise ValueError(f"{what} must be whole numbers (category ids), found "
                         f"{values[values != values.round()][0].item()!r}")
    ids = values.long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= count):
        raise ValueError(f"{what} must be ids in 0..{count - 1}, found "
                         f"{int(ids.min())}..{int(ids.max())}")
    return ids


def check_benchmark_graph(d: Data, where: str, node_task: bool) -> None:
    """``ValueError`` naming ``where`` (the file, split and graph) for a graph no model can use:
    no nodes, NaN/inf features, edge ids past the last node, edge features that do not match
    the edges, or labels of the wrong count (one per node for a node task, one per graph
    else). Checked when the files load: these failed only at the test evaluation, after the
    training, naming no file."""
    n = d.num_nodes
    if not n:
        raise ValueError(f"{where} has no nodes")
    for name in ("x", "pos", "edge_attr"):
        value = getattr(d, name, None)
        if isinstance(value, Tensor) and value.is_floating_point() and not bool(
                torch.isfinite(value).all()):
            raise ValueError(f"{where}: {name} holds NaN or inf")
    edge_index = d.edge_index
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
        raise ValueError(f"{where}: edge_index holds node ids outside 0..{n - 1} "
                         f"({int(edge_index.min())}..{int(edge_index.max())})")
    edge_attr = getattr(d, "edge_attr", None)
    if edge_attr is not None and edge_attr.size(0) != edge_index.size(1):
        raise ValueError(f"{where}: {edge_attr.size(0)} edge feature rows for "
                         f"{edge_index.size(1)} edges")
    labels, wanted = d.y.numel(), (n if node_task else 1)
    if labels != wanted:
        raise ValueError(f"{where}: {labels} labels, but a "
                         + (f"node task needs one per node ({n})" if node_task
                            else "graph task needs one per graph"))


def check_raw_splits(raw_file: Path, name: str) -> None:
    """``ValueError`` for a raw ``<NAME>_v2.pt`` that is not three non-empty splits (PyG's
    layout): PyG's processing failed on it with an IndexError or a missing processed file,
    which read as a damaged file."""
    fix = f"put a fresh {name}_v2.pt (from PyG's {name}_v2.zip) at {raw_file}"
    loaded = read_local_files(lambda: load_torch_data(raw_file, str(raw_file)), raw_file, fix)
    if not isinstance(loaded, (list, tuple)) or len(loaded) != len(SPLITS):
        count = len(loaded) if isinstance(loaded, (list, tuple)) else type(loaded).__name__
        raise ValueError(f"{raw_file} holds {count} splits; PyG's {name}_v2.pt holds three "
                         "lists of graphs (train, val, test)")
    for split, graphs in zip(SPLITS, loaded):
        if not len(graphs):
            raise ValueError(f"{raw_file}: its {split} split holds no graph")


#: Beside PyG's processed copies: the size, change time and SHA-256 of the raw files they came
#: from.
RAW_STAMP = "raw_signature.json"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: Whether ``st_ctime`` is the file's creation time (Windows), not its last status change.
_CREATION_CTIME = os.name == "nt"


def _raw_signature(raw_files: list[Path], known: Optional[dict[str, Any]] = None
                   ) -> dict[str, list[Any]]:
    """Per raw file ``[size, ctime_ns, sha256]``. The change time, unlike the modification
    time, cannot be set back: a file replaced by `cp -p` or unzip keeps an old mtime, and its
    old processed copy was used. It also moves on a chmod or a copy of the folder, so a file
    whose size and ctime match ``known`` keeps its known hash, and any other is hashed (a
    review: a copied folder was processed again, and a read-only one failed). On Windows
    ``st_ctime`` is the creation time, which an in-place overwrite keeps: every file is hashed
    there (a portability audit: a same-size file replaced with its old mtime kept its stale
    processed copy)."""
    signature = {}
    for path in raw_files:
        status = path.stat()
        entry: Any = (known or {}).get(path.name)  # (as read from JSON: checked below)
        same = (not _CREATION_CTIME and isinstance(entry, list) and len(entry) == 3
                and entry[:2] == [status.st_size, status.st_ctime_ns])
        signature[path.name] = [status.st_size, status.st_ctime_ns,
                                entry[2] if same else _sha256(path)]
    return signature


def _read_stamp(processed_files: list[Path]) -> Optional[dict[str, Any]]:
    try:
        stamped = json.loads((processed_files[0].parent / RAW_STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stamped if isinstance(stamped, dict) else None


def _write_stamp(processed_files: list[Path], signature: dict[str, list[Any]]) -> None:
    """``signature`` beside the processed copies, whole or not at all; nothing where the folder
    is read-only."""
    try:
        write_text_whole(processed_files[0].parent / RAW_STAMP, json.dumps(signature))
    except OSError:
        pass


def processed_is_stale(raw_files: list[Path], processed_files: list[Path]) -> bool:
    """Whether every file exists and some raw file is newer than a processed copy, or its
    content changed since the copies were stamped (:func:`stamp_processed`)."""
    if missing_files(raw_files) or missing_files(processed_files):
        return False
    if (max(path.stat().st_mtime for path in raw_files)
            > min(path.stat().st_mtime for path in processed_files)):
        return True
    stamped = _read_stamp(processed_files)
    if stamped is None:
        return False  # copies made before stamps, or an unreadable stamp: the mtimes decide
    current = _raw_signature(raw_files, stamped)
    # (the content decides: a chmod or a copied folder moves only the change time)
    stale = {k: v[0::2] for k, v in current.items()} != {
        k: v[0::2] for k, v in stamped.items() if isinstance(v, list)}
    if not stale and current != stamped:
        # the same content under a new change time: hashed once, not at every load
        _write_stamp(processed_files, current)
    return stale


def stamp_processed(raw_files: list[Path], processed_files: list[Path]) -> None:
    """Record which raw files the processed copies came from (see :func:`processed_is_stale`),
    where that changed (ZINC's loader passes here at every load); nothing where a file is
    missing or the folder is read-only."""
    if missing_files(raw_files) or missing_files(processed_files):
        return
    stamped = _read_stamp(processed_files)
    signature = _raw_signature(raw_files, stamped)
    if signature != stamped:
        _write_stamp(processed_files, signature)


def drop_stale_processed(raw_files: list[Path], processed_files: list[Path]) -> None:
    """Delete PyG's processed copies when a raw file is newer than one of them or changed since
    they were made: PyG processes only when they are missing, so a replaced raw file was
    ignored and the old data trained without a word."""
    if not processed_is_stale(raw_files, processed_files):
        return
    warnings.warn(f"{raw_files[0].parent} holds files that changed since the processed copies "
                  f"in {processed_files[0].parent} were made: processing them again", DataWarning,
                  stacklevel=3)
    for path in processed_files:
        try:
            path.unlink()
        except OSError as error:  # a read-only copy: say so rather than read stale copies
            raise OSError(f"{raw_files[0].parent} holds files that changed since the processed "
                          f"copies in {processed_files[0].parent} were made, and they cannot be "
                          f"deleted ({error}): delete them where the folder is writable, or "
                          "point the root at a writable copy") from error


def missing_files(paths: list[Path]) -> list[Path]:
    return [p for p in paths if not p.is_file()]


def gnn_benchmark_required_file(root: PathLike, name: str) -> Path:
    return Path(root) / name / "raw" / f"{name}_v2.pt"


def gnn_benchmark_processed_files(root: PathLike, name: str) -> list[Path]:
    """PyG-2's processed files of every split of ``name`` under ``root``."""
    return [Path(root) / name / "processed" / f"{s}_data.pt" for s in SPLITS]


def gnn_benchmark_processed(root: PathLike, name: str) -> bool:
    """Whether PyG-2's processed files of every split of ``name`` are under ``root``."""
    return not missing_files(gnn_benchmark_processed_files(root, name))


def gnn_benchmark_present(root: PathLike, name: str) -> bool:
    """Whether the raw file or PyG-2 processed files of ``name`` are under ``root``."""
    return gnn_benchmark_required_file(root, name).is_file() or gnn_benchmark_processed(root, name)


def load_gnn_benchmark(root: PathLike, name: str, split: str) -> GNNBenchmarkDataset:
    """PyG's ``GNNBenchmarkDataset`` (PATTERN, CLUSTER, MNIST, CIFAR10) from local files only."""
    from torch_geometric.datasets import GNNBenchmarkDataset

    if name not in GNN_BENCHMARK_NAMES:
        raise ValueError(f"name must be one of {GNN_BENCHMARK_NAMES}, got {name!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    raw_file = gnn_benchmark_required_file(root, name)
    if not gnn_benchmark_present(root, name):
        raise FileNotFoundError(
            f"{name} not found (downloads are disabled): put {name}_v2.pt (the file inside "
            f"PyG's {name}_v2.zip) at {raw_file}"
        )

    class _OfflineGNNBenchmark(GNNBenchmarkDataset):
        def download(self) -> None:  # processed files exist: nothing to fetch
            return None

    fix = (f"delete {Path(root) / name / 'processed'} and put a fresh {name}_v2.pt (from PyG's "
           f"{name}_v2.zip) at {raw_file}")

    def read() -> GNNBenchmarkDataset:
        with restricted_pyg_loads():
            return read_local_files(
                lambda: _OfflineGNNBenchmark(str(root), name=name, split=split),
                Path(root) / name, fix)

    processed = gnn_benchmark_processed_files(root, name)
    if gnn_benchmark_processed(root, name) and not processed_is_stale([raw_file], processed):
        return read()
    # The first load processes the raw file into root/name/processed: parallel jobs take turns.
    with folder_lock(root, name):
        drop_stale_processed([raw_file], processed)
        if not gnn_benchmark_processed(root, name):
            check_raw_splits(raw_file, name)
        dataset = read()
        stamp_processed([raw_file], processed)
        return dataset


__all__ = [
    "GNN_BENCHMARK_NAMES",
    "BenchmarkData",
    "check_benchmark_graph",
    "gnn_benchmark_present",
    "gnn_benchmark_required_file",
    "load_gnn_benchmark",
]
