"""LayerNorm with a scalar gain and a vector bias: the gradient of a convex Lagrangian."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from ..energy import layer_norm, layer_norm_lagrangian
from .validation import check_positive_int, is_real


class EnergyLayerNorm(Module):
    r"""``g = gamma * (x - mean(x)) / sqrt(var(x) + eps) + delta`` with a scalar ``gamma > 0``.

    ``g`` is the gradient of the Lagrangian
    :math:`L(x) = D\gamma\sqrt{\mathrm{var}(x)+\varepsilon} + \delta\cdot x`, whose Hessian is
    positive semi-definite exactly when ``gamma >= 0``; that is what makes ``x <- x - alpha dE/dg``
    a descent on ``E(g(x))`` to first order in ``alpha`` (the continuous flow always descends; a
    discrete step descends for small enough ``alpha``, see docs/derivation.md). ``gamma`` is
    therefore stored as ``log_gamma`` and stays positive.

    Args:
        channels: the width ``D`` of the last dimension it normalises.
        eps: added to the variance (positive and finite).
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        if not (is_real(eps)
                and math.isfinite(eps) and eps > 0):
            # eps <= 0 divides by zero on a constant row; NaN poisons every token
            raise ValueError(f"eps must be a positive finite number, got {eps!r}")
        self.channels = check_positive_int(channels, "channels")
        self.eps = float(eps)
        self.log_gamma = Parameter(torch.zeros(()))
        self.delta = Parameter(torch.zeros(channels))

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        with torch.no_grad():
            self.log_gamma.zero_()
            self.delta.zero_()

    @property
    def gamma(self) -> Tensor:
        """The scalar gain ``exp(log_gamma) > 0``: positive for every parameter value, so that
        the descent's metric stays positive semi-definite (docs/derivation.md)."""
        return self.log_gamma.exp()

    def forward(self, x: Tensor) -> Tensor:
        """``g = LN(x)``.

        Args:
            x: tokens ``[..., channels]``.
        """
        return layer_norm(self._checked(x), self.gamma, self.delta, self.eps)

    def lagrangian(self, x: Tensor) -> Tensor:
        """The Lagrangian ``L(x)`` per token ``[N]`` whose gradient is this LayerNorm:
        ``dL/dx = forward(x)``, the reason the block's energy decreases along its steps.

        Args:
            x: tokens ``[..., channels]``.
        """
        return layer_norm_lagrangian(self._checked(x), self.gamma, self.delta, self.eps)

    def _checked(self, x: Tensor) -> Tensor:
        # A width-1 input broadcast against delta and returned [N, channels] of delta alone.
        if not isinstance(x, Tensor) or x.dim() == 0 or x.size(-1) != self.channels:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"EnergyLayerNorm({self.channels}) normalises the last dimension, "
                             f"which must be {self.channels} wide; got shape {shape}")
        return x

    def set_gamma(self, value: float) -> None:
        """Set the scalar gain ``gamma`` (stored as its log, so it stays positive)."""
        if not is_real(value) or not (
                math.isfinite(value) and value > 0):
            raise ValueError(f"gamma must be a positive finite number, got {value!r}")
        with torch.no_grad():
            self.log_gamma.fill_(math.log(value))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, eps={self.eps})"
