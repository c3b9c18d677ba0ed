"""Silence PyTorch's CSR "beta" notices around code that builds CSR tensors on purpose."""
from __future__ import annotations

import functools
import threading
import warnings
from typing import Callable, TypeVar

_F = TypeVar("_F", bound=Callable)

_absorbed = threading.Event()
_lock = threading.Lock()


def _absorb_notices() -> None:
    """Make torch emit its once-per-process sparse notices now, under a filter: a tiny COO and
    CSR tensor and a product with them."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        index = torch.zeros(2, 1, dtype=torch.long)
        coo = torch.sparse_coo_tensor(index, torch.ones(1), (1, 1))
        csr = coo.to_sparse_csr()
        torch.sparse.mm(csr, torch.ones(1, 1))


def quiet_sparse(fn: _F) -> _F:
    """Run ``fn`` without PyTorch's sparse-CSR notices ("support is in beta", "invariant checks
    are implicitly disabled"). They fire once per process whenever a CSR tensor is built (our
    fused kernels; PyG's random-walk encoding of graphs above its dense-size limit); the
    operations used are stable, so for our users the notices are only noise.

    The notices are drawn out once, on the first call, under a filter; later calls touch no
    warning state. (A filter around every call reset Python's once-per-location warning
    memory on each ETConv pass, and, not being thread-safe, dropped filters other threads
    added and could leave its own "ignore .*sparse.*" in place for good.)"""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not _absorbed.is_set():
            with _lock:
                if not _absorbed.is_set():
                    _absorb_notices()
                    _absorbed.set()
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
