"""An inter-process lock for dataset folders that PyG processes on first use.

Two jobs started side by side on a fresh folder (the usual way to run benchmarks in parallel)
would otherwise both write PyG's ``processed/*.pt`` at the same time, and one of them reads a
half-written file ("PytorchStreamReader failed reading zip archive")."""
from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Union

from ..exceptions import OutputWarning


@contextlib.contextmanager
def folder_lock(folder: Union[str, os.PathLike[str]], name: str) -> Iterator[None]:
    """Hold an exclusive lock on ``folder/.name.lock`` while the block runs.

    The lock is advisory (``fcntl.flock`` on POSIX, ``msvcrt.locking`` on Windows) and the
    operating system drops it when the process dies, so a killed job never leaves a stale lock.
    A folder that cannot be written to is not locked: nothing can be processed into it either,
    so there is no write to race with."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / f".{name}.lock", "a+b")
    except OSError:
        yield
        return
    with handle:
        _acquire(handle)
        try:
            yield
        finally:
            _release(handle)


class FolderBusy(RuntimeError):
    """Another process holds the lock :func:`exclusive_folder` asked for."""


@contextlib.contextmanager
def exclusive_folder(folder: Union[str, os.PathLike[str]], name: str) -> Iterator[None]:
    """Hold ``folder/.name.lock`` for the block without waiting: :class:`FolderBusy` when
    another process holds it, ``OSError`` when the folder cannot be written (the caller names
    both). The operating system drops the lock when the process dies; the file is removed when
    the block ends. On a filesystem without locks the block runs unlocked, with a warning."""
    path = Path(folder) / f".{name}.lock"
    for _ in range(10):
        handle = open(path, "a+b")
        try:
            _acquire(handle, blocking=False)
        except OSError as error:
            handle.close()
            if error.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise FolderBusy(str(folder)) from error
            # no locks here (some network and FUSE mounts): every run was refused as "busy"
            warnings.warn(f"{folder} cannot be locked ({error.strerror or error}): nothing "
                          "stops a second run from writing there at the same time",
                          OutputWarning, stacklevel=3)
            yield
            return
        try:
            same = os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
        except OSError:  # removed since it was opened
            same = False
        if same:
            break
        # the file this process locked was removed by the run that held it before, and a
        # third run may lock a new one: both would write at once. Lock the current file.
        _release(handle)
        handle.close()
    else:  # pragma: no cover - a file replaced ten times in a row
        raise FolderBusy(str(folder))
    with handle:
        try:
            yield
        finally:
            # Removed while still held; a process that opened it meanwhile sees another file
            # at the path once it holds the lock, and tries again (above).
            with contextlib.suppress(OSError):
                path.unlink()
            _release(handle)


#: How often a blocked Windows lock is tried again, in seconds.
RETRY_S = 0.2
# What msvcrt.locking raises for a byte another process holds.
_HELD = (errno.EACCES, errno.EDEADLK)


def _wait_for_lock(try_lock: Callable[[], None], blocking: bool) -> None:
    """Call ``try_lock`` (a non-blocking lock) until it succeeds. msvcrt's blocking mode,
    ``LK_LOCK``, gives up after ten one-second tries with ``OSError``: a second job died while
    the first processed a dataset for longer than that. This waits as ``fcntl.flock`` does."""
    while True:
        try:
            try_lock()
            return
        except OSError as error:
            if not blocking or error.errno not in _HELD:
                raise
            time.sleep(RETRY_S)


# (sys.platform, which type checkers read, rather than os.name: both say Windows alike)
if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _acquire(handle, blocking: bool = True) -> None:
        handle.seek(0)
        _wait_for_lock(lambda: msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1), blocking)

    def _release(handle) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def _acquire(handle, blocking: bool = True) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _release(handle) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


__all__ = ["FolderBusy", "exclusive_folder", "folder_lock"]


#: What PyG prints to stderr while it processes a dataset's raw files.
PYG_PROCESSING_LINES = ("Processing...", "Done!")


@contextlib.contextmanager
def quiet_processing(quiet: bool = True) -> Iterator[None]:
    """Around a PyG dataset's first load: PyG's "Processing... Done!" lines are dropped from
    stderr when ``quiet`` (a run under ``--no-progress``); anything else written there (a
    warning, say) is passed on afterwards."""
    if not quiet:
        yield
        return
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    finally:
        passed = "".join(line for line in captured.getvalue().splitlines(keepends=True)
                         if line.strip() not in PYG_PROCESSING_LINES)
        if passed and sys.stderr is not None:  # (None in a daemon whose fd 2 is closed: a
            sys.stderr.write(passed)           # write of nothing failed there: an audit)
