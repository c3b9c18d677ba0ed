"""LayerNorm with a scalar gain and a vector bias: the gradient of a convex Lagrangian."""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from ..energy import layer_norm, layer_norm_lagrangian


class EnergyLayerNorm(Module):
    r"""``g = gamma * (x - mean(x)) / sqrt(var(x) + eps) + delta`` with a scalar ``gamma > 0``.

    ``g`` is the gradient of the Lagrangian
    :math:`L(x) = D\gamma\sqrt{\mathrm{var}(x)+\varepsilon} + \delta\cdot x`, whose Hessian is
    positive semi-definite exactly when ``gamma >= 0``; that is what makes ``x <- x - alpha dE/dg``
    a descent on ``E(g(x))`` to first order in ``alpha`` (the continuous flow always descends; a
    discrete step descends for small enough ``alpha``, see docs/derivation.md). ``gamma`` is
    therefore stored as ``log_gamma`` and stays positive.
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        if not (isinstance(eps, numbers.Real) and not isinstance(eps, bool)
                and math.isfinite(eps) and eps > 0):
            # eps <= 0 divides by zero on a constant row; NaN poisons every token
            raise ValueError(f"eps must be a positive finite number, got {eps!r}")
        self.channels = channels
        self.eps = float(eps)
        self.log_gamma = Parameter(torch.zeros(()))
        self.delta = Parameter(torch.zeros(channels))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.log_gamma.zero_()
            self.delta.zero_()

    @property
    def gamma(self) -> Tensor:
        return self.log_gamma.exp()

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.gamma, self.delta, self.eps)

    def lagrangian(self, x: Tensor) -> Tensor:
        return layer_norm_lagrangian(x, self.gamma, self.delta, self.eps)

    def set_gamma(self, value: float) -> None:
        with torch.no_grad():
            self.log_gamma.fill_(math.log(value))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, eps={self.eps})"
