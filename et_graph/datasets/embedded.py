"""Torch-saved PyG graphs (``.pt``, optionally zipped) and the data files shipped in ``datasets/``.

Shipped files (provenance, licences and checksums in ``datasets/SOURCES.md``):

* ``tolokers/tolokers.npz``: Tolokers (Platonov et al., ICLR 2023; MIT), real labels;
* ``pygod/reddit.pt.zip``: PyGOD Reddit (BOND, NeurIPS 2022; MIT), real labels;
* ``pygod/inj_amazon.pt.zip``: PyGOD injected Amazon-Computers (MIT), injected anomalies.
"""
from __future__ import annotations

import io
import math
import os
import pickle
import threading
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, BinaryIO, Optional, Union

import torch
from torch_geometric.data import Data

from ..exceptions import UnsafeLoadWarning
from .anomaly_data import (
    file_dataset_name,
    from_pyg_data,
    physical_memory,
    refuse_beyond_memory,
)

# name -> (path inside the data folder, whether multi-type labels are collapsed to y > 0)
EMBEDDED_FILES: dict[str, tuple[str, bool]] = {
    "tolokers": ("tolokers/tolokers.npz", False),
    "reddit": ("pygod/reddit.pt.zip", False),
    "inj_amazon": ("pygod/inj_amazon.pt.zip", True),
}


def _read_torch_object(path: Path) -> object:
    """``torch.load`` a ``.pt`` file, or the single ``.pt`` member of a zip, without unpacking it
    anywhere on disk (the zip is read into memory)."""
    if zipfile.is_zipfile(path) and not _is_torch_zip(path):
        with zipfile.ZipFile(path) as bundle:
            members = [m for m in bundle.namelist() if m.endswith((".pt", ".pth"))]
            if len(members) != 1:
                raise ValueError(
                    f"{path}: expected exactly one .pt file inside the zip, found {members}"
                )
            # zipfile reads no more than the declared size, so checking it bounds the memory
            # (a small zip can declare a huge member: a zip bomb)
            refuse_beyond_memory(bundle.getinfo(members[0]).file_size, physical_memory(),
                                 f"{path}: its member {members[0]} unpacks to")
            buffer = io.BytesIO(bundle.read(members[0]))
        source: Union[Path, io.BytesIO] = buffer
    else:
        source = path
    try:
        return load_torch_data(source, str(path))
    except UntrustedFileError:
        raise
    except Exception as error:  # pickle/zip/torch errors all mean "not a usable file"
        if path.is_file() and path.stat().st_size == 0:  # torch said only "()"
            raise ValueError(f"{path} is empty (0 bytes): a download or copy cut short?") \
                from error
        raise ValueError(f"{path}: torch.load failed ({type(error).__name__}: "
                         f"{load_error_detail(error) or 'no detail'})") from error


def load_error_detail(error: BaseException) -> str:
    """The first line of a failed load's message (at most 200 characters, ``""`` for none),
    without torch's advice to unpickle in full, which is not the fix for a damaged file."""
    detail = (str(error).strip().splitlines() or [""])[0][:200]
    if detail.startswith("Weights only load failed"):
        return "torch.load found no tensors it can read"
    return detail


#: Set to 1 to unpickle data files whose objects go beyond tensors and PyG's data classes.
TRUST_ENV = "ET_GRAPH_TRUST_PICKLE"


class UntrustedFileError(ValueError):
    """A data file holds objects that only full unpickling rebuilds, which would run any code
    the file carries; refused unless ``ET_GRAPH_TRUST_PICKLE=1``."""


def pyg_data_classes() -> list[type]:
    """The classes a torch-saved PyG ``Data`` (or an ``InMemoryDataset``'s ``(data, slices)``)
    is made of, which a weights-only load may rebuild."""
    import numpy as np
    from torch_geometric.data import HeteroData
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import (
        BaseStorage,
        EdgeStorage,
        GlobalStorage,
        NodeStorage,
    )

    # NumPy arrays and scalars too (a Data holding them was a supported input), rebuilt by
    # these functions and dtype classes only; HeteroData, which the loaders name as such (a
    # saved Batch rebuilds its class through a getter, not allowed)
    numpy_core = getattr(np, "_core", None) or np.core
    numpy_rebuild = [numpy_core.multiarray._reconstruct, numpy_core.multiarray.scalar,
                     np.ndarray, np.dtype]
    dtypes = [getattr(np.dtypes, name) for name in dir(getattr(np, "dtypes", object))
              if name.endswith("DType")]
    # np.dtypes exists from NumPy 1.25; before, each dtype's class is reached from an
    # instance (a minimum-version audit: NumPy 1.23 refused every Data holding arrays)
    dtypes += [type(np.dtype(code)) for code in np.typecodes["All"]]
    return [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, NodeStorage, EdgeStorage,
            BaseStorage, HeteroData, *numpy_rebuild, *dtypes]


def load_torch_data(source: Union[str, Path, io.BytesIO], what: str) -> object:
    """``torch.load`` of a data file with ``weights_only=True``: tensors, containers and PyG's
    data classes only, so a crafted file cannot run code (a security review ran code through a
    shared ``reddit.pt`` and a planted ZINC file, both loaded with full unpickling). Files that
    need more are refused with :class:`UntrustedFileError`, unless the environment sets
    ``ET_GRAPH_TRUST_PICKLE=1``. On a torch without ``safe_globals`` (< 2.5) the file is
    unpickled in full, as before: load only files you trust there."""
    allow = getattr(torch.serialization, "safe_globals", None)
    if os.environ.get(TRUST_ENV) == "1" or allow is None:
        if allow is None:
            warnings.warn(f"this torch ({torch.__version__}) cannot restrict what {what} "
                          "unpickles: load only files you trust (torch >= 2.5 can)",
                          UnsafeLoadWarning, stacklevel=2)
        return torch.load(source, map_location="cpu", weights_only=False)
    try:
        with allow(pyg_data_classes()):
            return refuse_repeating_views(
                torch.load(source, map_location="cpu", weights_only=True), what)
    except pickle.UnpicklingError as error:
        # a class or function outside the allowed ones; anything else (a cut or garbled
        # file) stays the caller's "cannot be read" (torch 2.13 words it "unsupported GLOBAL")
        refused = [line.strip() for line in str(error).splitlines()
                   if "unsupported global" in line.lower()]
        if not refused:
            raise
        raise UntrustedFileError(
            f"{what} holds objects beyond tensors and PyG's Data ({refused[0][:160]}); "
            f"unpickling it in full would run whatever code it carries. Save the graph as a "
            f"plain Data (x, edge_index, y tensors), or, for a file you trust, set "
            f"{TRUST_ENV}=1") from None


#: A view that repeats its storage's values may declare at most this many bytes.
MAX_REPEATED_VIEW_BYTES = 2**30


def refuse_repeating_views(loaded: Any, what: str) -> Any:
    """``loaded`` (a loaded file's object: tensors inside dicts, lists, tuples or PyG's data
    classes), after refusing tensors that declare more values than their storages hold, once
    such views total more than :data:`MAX_REPEATED_VIEW_BYTES`: a zero-stride view over one
    value of a 2.4 KB file declared gigabytes, which the loaders then copied (a security
    audit). A small one (a user's ``zeros(1).expand(5)``) passes, and a file loaded under
    ``ET_GRAPH_TRUST_PICKLE=1`` is not checked."""
    pending, seen, repeated = [loaded], set(), 0
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            held = (item.untyped_storage().nbytes() // max(item.element_size(), 1)
                    if item.layout == torch.strided else item.numel())
            if item.numel() > held:
                # summed over the file: 64 views of 1 GiB each passed one by one (a review)
                repeated += item.numel() * item.element_size()
            if repeated > MAX_REPEATED_VIEW_BYTES:
                raise UntrustedFileError(
                    f"{what} holds a tensor of shape {tuple(item.shape)} over a storage of "
                    f"{held} values "
                    f"(views that repeat values, {repeated / 2**30:.1f} GiB once copied in this "
                    f"file): refused; for a file you trust, set {TRUST_ENV}=1")
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif not isinstance(item, type) and hasattr(item, "__dict__"):
            # PyG's Data and its storages by their attributes: their properties may refuse an
            # object saved by another PyG version (the caller says so in its own words)
            pending.extend(vars(item).values())
    return loaded


#: What a plain pickle of tensors (the official ZINC ``{train,val,test}.pickle``: lists of
#: dicts of tensors) may name: a tensor's rebuild (checked below), its storage (loaded
#: weights-only below) and the ordered dict of its backward hooks.
TENSOR_PICKLE_GLOBALS = {("torch._utils", "_rebuild_tensor_v2"),
                         ("torch._utils", "_rebuild_tensor"), ("collections", "OrderedDict")}


def _storage_from_bytes(data: bytes) -> Any:
    """A pickled storage's bytes (a ``torch.save`` of it), loaded weights-only: torch's own
    ``_load_from_bytes`` unpickles them in full."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _checked_rebuild(rebuild: Any, what: str) -> Any:
    """``rebuild(storage, offset, size, stride, ...)`` for tensors that hold no more elements
    than their storage: a view with a zero stride over one byte could declare gigabytes,
    which the ZINC processing then copies (a review made 2 GiB from a 415-byte file)."""
    def checked(storage: Any, storage_offset: int, size: Any, stride: Any, *rest: Any) -> Any:
        with warnings.catch_warnings():  # torch's deprecation of TypedStorage, read here
            warnings.simplefilter("ignore", UserWarning)
            held = storage.nbytes() // max(storage.element_size(), 1)
        if math.prod(size) > held:
            raise UntrustedFileError(
                f"{what} holds a tensor of shape {tuple(size)} over a storage of {held} values "
                "(a view that repeats values): refused, as no data file needs one")
        return rebuild(storage, storage_offset, size, stride, *rest)

    return checked


class _TensorUnpickler(pickle.Unpickler):
    def __init__(self, file: BinaryIO, what: str) -> None:
        super().__init__(file)
        self.what = what

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _storage_from_bytes
        if (module, name) in TENSOR_PICKLE_GLOBALS:
            found = super().find_class(module, name)
            return (_checked_rebuild(found, self.what) if name.startswith("_rebuild_tensor")
                    else found)
        raise UntrustedFileError(
            f"{self.what} names {module}.{name}, beyond the tensors, "
            "lists and dicts of a data file; unpickling it in full would run whatever code it "
            f"carries. For a file you trust, set {TRUST_ENV}=1")


def load_tensor_pickle(file: BinaryIO, what: str = "the file") -> object:
    """``pickle.load`` of a plain pickle of tensors, lists, dicts and numbers only (the official
    ZINC files), refusing any other class or function with :class:`UntrustedFileError` unless
    ``ET_GRAPH_TRUST_PICKLE=1``."""
    if os.environ.get(TRUST_ENV) == "1":
        return pickle.load(file)
    return _TensorUnpickler(file, what).load()


_PYG_LOADS_LOCK = threading.RLock()


@contextmanager
def restricted_pyg_loads() -> Iterator[None]:
    """Inside it, PyG's own loads read data files weights-only (:func:`load_torch_data`) and
    its ZINC processing unpickles tensors only (:func:`load_tensor_pickle`). PyG's
    ``fs.torch_load`` retries a refused weights-only load with full unpickling, and its
    ``Dataset._process`` loads ``processed/pre_transform.pt`` and ``pre_filter.pt`` with
    ``weights_only=False``, so a planted processed or raw file (``datasets/`` in the working
    directory, say) ran its code; security reviews did so through ``et-graph gnnbenchmark``.
    ``ET_GRAPH_TRUST_PICKLE=1`` leaves PyG's loads as they are, and so does a torch without
    ``safe_globals`` (< 2.5), where a restricted load cannot read PyG's classes.

    The patches are the process's: PyG loads in other threads meanwhile are restricted too."""
    if (os.environ.get(TRUST_ENV) == "1"
            or getattr(torch.serialization, "safe_globals", None) is None):
        yield
        return
    from torch_geometric.data import dataset
    from torch_geometric.datasets import zinc
    from torch_geometric.io import fs

    def torch_load(path: Any, map_location: Any = None) -> Any:
        return load_torch_data(str(path), str(path))

    def zinc_pickle_load(file: BinaryIO) -> object:
        return load_tensor_pickle(file, str(getattr(file, "name", "a ZINC file")))

    with _PYG_LOADS_LOCK:
        saved = fs.torch_load, zinc.pickle, dataset.torch
        fs.torch_load = torch_load
        zinc.pickle = SimpleNamespace(load=zinc_pickle_load)  # type: ignore[assignment]
        dataset.torch = _TorchLoadingWeightsOnly()  # type: ignore[assignment]
        try:
            yield
        finally:
            fs.torch_load, zinc.pickle, dataset.torch = saved


class _TorchLoadingWeightsOnly:
    """``torch`` as PyG's ``data/dataset.py`` sees it inside :func:`restricted_pyg_loads`: every
    attribute torch's own, but ``load`` weights-only (``_process`` unpickled
    ``pre_transform.pt``, a repr string, in full)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        return load_torch_data(f if isinstance(f, io.BytesIO) else str(f), str(f))


def _is_torch_zip(path: Path) -> bool:
    """torch.save itself writes a zip archive; tell it apart from a zip that wraps a .pt file."""
    with zipfile.ZipFile(path) as bundle:
        return any(name.endswith("data.pkl") for name in bundle.namelist())


def load_pyg_file(
    path: Union[str, Path], name: Optional[str] = None, binarize: bool = False,
    relation: str = "homo", *, split_masks: bool = True,
) -> Data:
    """Load a torch-saved PyG ``Data`` (``.pt`` or a zip holding one ``.pt``) and normalise it.

    The object needs ``x``, ``edge_index`` and ``y``; ``train_mask``/``val_mask``/``test_mask``
    and ``label_mask`` are kept when present. A plain dict with those keys works too.
    ``relation="multi"`` keeps a typed graph's ``edge_type`` (and ``relation_names``);
    ``split_masks=False`` drops the split masks unread.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such file: {path}")
    name = name or file_dataset_name(path)
    loaded = _read_torch_object(path)
    if isinstance(loaded, dict):
        loaded = Data(**loaded)
    if isinstance(loaded, tuple):
        raise ValueError(
            f"{path}: holds a tuple (an InMemoryDataset's (data, slices)?), not one Data object"
        )
    return from_pyg_data(loaded, name=name, source=str(path), binarize=binarize,
                         relation=relation, split_masks=split_masks)


def find_embedded_file(name: str, roots: list[Path]) -> Optional[Path]:
    """The shipped file for ``name`` under any of ``roots`` (``root/<sub>/<file>`` or
    ``root/<file>``; for PyGOD also an already unzipped ``<name>.pt``)."""
    relative, _ = EMBEDDED_FILES[name]
    filename = Path(relative).name
    candidates = [relative, filename]
    if filename.endswith(".pt.zip"):
        candidates += [relative[: -len(".zip")], filename[: -len(".zip")]]
    for root in roots:
        for candidate in candidates:
            path = root / candidate
            if path.is_file():
                return path
    return None
