"""Silence PyTorch's CSR "beta" notices around code that builds CSR tensors on purpose."""
from __future__ import annotations

import functools
import warnings
from typing import Callable, TypeVar

_F = TypeVar("_F", bound=Callable)


def quiet_sparse(fn: _F) -> _F:
    """Run ``fn`` with PyTorch's sparse-CSR notices ("support is in beta", "invariant checks are
    implicitly disabled") ignored. They fire once per process whenever a CSR tensor is built
    (our fused kernels; PyG's random-walk encoding of graphs above its dense-size limit); the
    operations used are stable, so for our users the notices are only noise."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
