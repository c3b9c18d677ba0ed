"""Evaluation mode for the length of a call, and the caller's modes back after it.

A library function that scores a model (``predict_logits``, ``predict_patches``, ...) switches
it to eval mode (no dropout, no descent noise). Left there, a caller who scores in the middle of
their own training loop would train on without dropout or noise and never be told: each such
function gives back the mode of the model and of every submodule as it found them.

Two threads scoring one model take turns: each holds the locks of the model's modules for its
call. Without them
one thread restored the training mode while the other was still scoring, which then scored
with dropout and noise (scores off by up to 0.4), and the model could end in the wrong mode (a
long-run audit). Training one model in one thread while another scores it is not supported."""
from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, TypeVar

from torch import nn

Function = TypeVar("Function", bound=Callable[..., Any])

_locks: weakref.WeakKeyDictionary[nn.Module, threading.RLock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def _fresh_locks_in_child() -> None:
    """In a child forked while another thread scored, that thread does not exist and its locks
    stay held: every score of that model waited for good (a multiprocessing audit). The child
    starts with free locks; the forking thread releases what it holds through its own
    references."""
    global _locks
    _locks = weakref.WeakKeyDictionary()
    _locks_guard._at_fork_reinit()  # type: ignore[attr-defined]


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_fresh_locks_in_child)


def _lock_of(model: nn.Module) -> threading.RLock:
    with _locks_guard:
        lock = _locks.get(model)
        if lock is None:
            lock = _locks[model] = threading.RLock()
        return lock


@contextmanager
def evaluation_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode inside the block; afterwards every module of it in the mode it
    had before (a submodule kept in eval mode inside a training model stays so). The block
    holds the lock of every module of the model (re-entrant, all of them or none at a time):
    another thread's block on the model, on a submodule of it or on a model holding it waits
    (a lock of the model alone let a block on a submodule switch it back mid-score: a
    review)."""
    modules = list(model.modules())
    taken = _take_all([_lock_of(module) for module in modules])
    try:
        modes = [(module, module.training) for module in modules]
        model.eval()
        try:
            yield model
        finally:
            for module, training in modes:
                module.training = training
    finally:
        for lock in reversed(taken):
            lock.release()


def _take_all(locks: list[threading.RLock]) -> list[threading.RLock]:
    """Every one of ``locks`` or, while one is busy, none: a thread inside a block on a
    submodule that opens a block on its model would otherwise hold one lock and wait for
    another that a thread waiting on its submodule holds (locks taken one by one in a fixed
    order deadlocked there: a review). Re-entrant: a lock this thread holds is taken again."""
    while True:
        taken = []
        busy = None
        for lock in locks:
            if not lock.acquire(blocking=False):
                busy = lock
                break
            taken.append(lock)
        if busy is None:
            return taken
        for lock in reversed(taken):
            lock.release()
        with busy:  # until its holder is done, then try them all again
            pass


def evaluates_model(function: Function) -> Function:
    """Decorator: ``function(model, ...)`` runs inside :func:`evaluation_mode` of its first
    argument."""

    @functools.wraps(function)
    def wrapper(model: nn.Module, *args: Any, **kwargs: Any) -> Any:
        with evaluation_mode(model):
            return function(model, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
