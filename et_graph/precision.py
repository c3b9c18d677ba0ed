"""Autocast and the hand-written backward passes.

The layers compute in their parameters' dtype whatever the autocast state
(:func:`et_graph.nn.conv.et_energy.in_parameter_precision`). A backward run inside an autocast
block (``with torch.autocast(...): loss.backward()``, which PyTorch advises against) casts the
ops of the backward pass too: the sparse products of the custom backward passes have no
bfloat16 kernel on the CPU (CSR addmm), so it failed. :func:`backward_without_autocast` runs
those in the dtype the forward pass used; autograd's own backward ops still follow the autocast
state, so such a backward runs, in partly rounded precision. Call ``backward()`` after the
block for the layer's own precision.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, TypeVar

import torch
from torch import Tensor

Backward = TypeVar("Backward", bound=Callable[..., Any])

#: The 16-bit floating dtypes, whose sums and squares are taken in float32.
HALF_DTYPES = (torch.float16, torch.bfloat16)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for a 16-bit float (float16 overflows beyond 65504 and bfloat16 keeps about
    three digits, so its sums, squares and sparse products are taken wider), else ``dtype``."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


def autocast_off(device_type: str) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast(device_type, enabled=False)``, or nothing on a device that has no
    autocast to turn off: torch before 2.5 refused ``torch.autocast("mps")`` outright ("an
    unsupported autocast device_type"), which failed every layer call on a Mac."""
    available = getattr(torch.amp, "is_autocast_available", None)
    known = available(device_type) if available is not None else device_type in ("cpu", "cuda")
    if not known:
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


def float64_on_host_if_needed(tensor: Tensor) -> Tensor:
    """``tensor.double()`` on its own device, or on the CPU for Apple's ``mps``, which has no
    float64 ("Cannot convert a MPS Tensor to float64")."""
    if tensor.device.type == "mps":
        tensor = tensor.cpu()
    return tensor.double()


#: torch.quantile refuses inputs with more elements than this ("input tensor is too large").
TORCH_QUANTILE_LIMIT = 2**24


def quantile(values: Tensor, q: Tensor | float) -> Tensor:
    """``torch.quantile(values, q)`` (1-D ``values``, linear interpolation) at any size: above
    :data:`TORCH_QUANTILE_LIMIT` elements, where torch refuses, NumPy's quantile (the same
    interpolation) on the CPU, returned in ``values``' dtype and device. (An unsupervised fit on
    a graph of more than 16.8 million nodes trained to the end, then failed in its threshold:
    an API audit.)"""
    if values.numel() <= TORCH_QUANTILE_LIMIT:
        return torch.quantile(values, q)
    import numpy as np

    levels = q.detach().cpu().numpy() if isinstance(q, Tensor) else q
    result = np.quantile(values.detach().cpu().numpy(), levels)
    return torch.as_tensor(result, dtype=values.dtype, device=values.device)


def backward_without_autocast(backward: Backward) -> Backward:
    """Decorate an ``autograd.Function.backward`` (under ``@staticmethod``) to run with
    autocast off on the device of its incoming gradients."""

    @functools.wraps(backward)
    def run(ctx: Any, *grads: Any) -> Any:
        device = next((g.device.type for g in grads if isinstance(g, Tensor)), "cpu")
        if device == "meta":
            return backward(ctx, *grads)
        with autocast_off(device):
            return backward(ctx, *grads)

    return run  # type: ignore[return-value]
