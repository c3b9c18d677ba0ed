"""Atomic training checkpoints that load with ``torch.load(..., weights_only=True)``.

A checkpoint is written to a temporary file in the target folder and moved over the previous one
with :func:`os.replace`, which is atomic on POSIX and Windows: a run killed while saving leaves the
previous good checkpoint intact. Everything stored is a tensor, a number, a string, or a
list/dict/tuple of those, so loading never unpickles arbitrary objects.
"""
from __future__ import annotations

import os
import pickle
import random
import tempfile
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, Union

import numpy as np
import torch

from ..exceptions import ReproducibilityWarning
from ..paths import plain_file_mode

PathLike = Union[str, "os.PathLike[str]"]

#: The key every et-graph checkpoint carries; a file without it is someone else's.
FORMAT_KEY = "et_graph_checkpoint"
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file that is missing, truncated, or not an et-graph checkpoint."""


def save_checkpoint(path: PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` atomically to ``path`` (:func:`torch_save_whole`), folders made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return torch_save_whole(path, {FORMAT_KEY: FORMAT_VERSION, **state})


def torch_save_whole(path: Union[PathLike, BinaryIO], payload: Any) -> Any:
    """``torch.save(payload)`` to ``path`` whole or not at all: into a temporary file in the
    same folder, fsync, then ``os.replace``. A save that fails half-way (an object that does
    not pickle, a kill, a full disk) leaves the previous file as it was, and a reader never
    sees a cut one. The file gets the mode a plain write would give it (the existing file's, or
    the umask's: a temporary file is private, and a scoring service running as another user
    could not read the detector), and a symbolic link is written through, not replaced. A
    file object (``write``) is written directly."""
    if hasattr(path, "write"):
        torch.save(payload, path)
        return path
    path = Path(os.path.realpath(path))
    if not path.parent.is_dir():  # (mkstemp named its own temporary file instead: an audit)
        raise FileNotFoundError(f"no folder {path.parent} to write {path.name} into: make it "
                                "first (os.makedirs)")
    mode = plain_file_mode(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temporary, mode)
        with os.fdopen(handle, "wb") as stream:
            torch.save(payload, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(path: PathLike) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` with ``weights_only=True``.

    Raises :class:`CheckpointError` (a ``ValueError``) with the path and the reason for a missing,
    truncated or foreign file, instead of an error from deep inside torch.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's text here advises weights_only=False, which an et-graph checkpoint never needs.
        raise CheckpointError(
            f"{path} is not an et-graph checkpoint: it does not load as plain tensors and "
            "numbers (a foreign or corrupted file)"
        ) from error
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(
            f"{path} is not a readable et-graph checkpoint (truncated or foreign file): "
            f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        ) from error
    if not isinstance(state, dict) or state.get(FORMAT_KEY) != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} is a torch file but not an et-graph checkpoint (format {FORMAT_VERSION})"
        )
    return state


def changed_settings(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The sorted names whose values differ between two flat settings dicts (one missing on
    either side counts): what a refused resume names."""
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def fingerprint_with_data(fingerprint: str, checkpoint: Any, *tensors: Any) -> str:
    """``fingerprint``, followed by :func:`data_digest` of ``tensors`` when ``checkpoint`` is
    set (a resume must not score a model trained on other data); without checkpoints nothing
    is hashed."""
    if checkpoint is None:
        return fingerprint
    return f"{fingerprint}, data={data_digest(*tensors)}"


def fingerprint_with_graphs(fingerprint: str, checkpoint: Any, *graph_sets: Any) -> str:
    """:func:`fingerprint_with_data` of graph datasets (sequences of PyG ``Data``): every
    tensor of every graph, each graph's in sorted key order (features, edges, labels,
    encodings added to it). Without checkpoints nothing is gathered or hashed."""
    if checkpoint is None:
        return fingerprint
    return fingerprint_with_data(fingerprint, checkpoint, *graph_tensors(*graph_sets))


def graph_tensors(*graph_sets: Any, skip: Sequence[str] = ()) -> list[torch.Tensor]:
    """Every tensor of every graph (PyG ``Data``) of ``graph_sets``, each graph's in sorted key
    order, without the keys in ``skip``: what :func:`data_digest` hashes of graph datasets."""
    return [graph[key] for graphs in graph_sets for graph in graphs
            for key in sorted(graph.keys())
            if key not in skip and isinstance(graph[key], torch.Tensor)]


def data_digest(*tensors: Any) -> str:
    """A short SHA-256 of the tensors' dtypes, shapes and bytes (``None`` allowed): resume
    fingerprints include it, so that a checkpoint trained on other data (another split, other
    features, a normalisation) is refused instead of being scored on data it may have trained
    on, and every results file records one of the data its run read (``meta.data_digest``)."""
    import hashlib

    digest = hashlib.sha256()
    for tensor in tensors:
        if tensor is None:
            digest.update(b"none;")
            continue
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{tensor.dtype}{tuple(tensor.shape)};".encode())
        # the tensor's own memory, not a copy (tobytes() doubled a [2, 50M] edge index's
        # memory at setup: an audit); the same bytes, so the digests stay the same
        digest.update(memoryview(tensor.view(-1).view(torch.uint8).numpy())
                      if tensor.numel() else b"")
    return digest.hexdigest()[:16]


def mps_generator_ready() -> bool:
    """Whether Apple's ``mps`` device is here, with its own random generator (its dropout and
    noise on the device draw from it)."""
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available()
                and hasattr(getattr(torch, "mps", None), "get_rng_state"))


def rng_state() -> dict[str, Any]:
    """The global RNG states of Python, NumPy and torch (with CUDA's once it is up, and the
    ``mps`` device's where it exists: a resumed run on a Mac drew other dropout and noise, a
    portability audit), as weights-only-loadable values."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": _to_lists(random.getstate()),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
        # The GPU generators too (dropout masks and draws on the device), once CUDA is up.
        **({"cuda": torch.cuda.get_rng_state_all()}
           if torch.cuda.is_available() and torch.cuda.is_initialized() else {}),
        **({"mps": torch.mps.get_rng_state()} if mps_generator_ready() else {}),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(_to_tuples(state["python"]))
    numpy = state["numpy"]
    np.random.set_state((
        numpy["kind"], numpy["keys"].numpy().astype(np.uint32), numpy["pos"],
        numpy["has_gauss"], numpy["cached"],
    ))
    torch.set_rng_state(state["torch"])
    if state.get("mps") is not None and mps_generator_ready():
        torch.mps.set_rng_state(state["mps"])
    cuda = state.get("cuda")
    if cuda is not None:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
            torch.cuda.set_rng_state_all(cuda)
        else:
            warnings.warn(f"the checkpoint holds the random states of {len(cuda)} CUDA "
                          "device(s), which this machine cannot restore: the resumed run's "
                          "draws on the GPU differ from an uninterrupted run's",
                          ReproducibilityWarning, stacklevel=2)


def _to_lists(value: Any) -> Any:
    return [_to_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


def _to_tuples(value: Any) -> Any:
    return tuple(_to_tuples(v) for v in value) if isinstance(value, list) else value
