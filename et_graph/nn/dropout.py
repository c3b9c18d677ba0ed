"""Dropout that draws from the compiled generator when the compiled kernels are on."""
from __future__ import annotations

from torch import Tensor, nn

from .. import native


class Dropout(nn.Dropout):
    r""":class:`torch.nn.Dropout` (same arguments, same behaviour) whose random draws, in
    training on the CPU with the compiled kernels switched on
    (:func:`et_graph.native.set_native_attention`), come from
    :func:`et_graph.native.dropout`: a Philox generator about five times faster than
    PyTorch's Bernoulli sampling on a batch of tokens. Otherwise (also under
    :func:`et_graph.native.native_random` ``(False)``), and for ``inplace=True`` or ``p = 1``,
    it is :class:`torch.nn.Dropout` itself.

    Args:
        p: the probability that an element is zeroed (default 0.5).
        inplace: zero the input in place (always through :class:`torch.nn.Dropout`).
    """

    def forward(self, input: Tensor) -> Tensor:
        if (self.training and 0.0 < self.p < 1.0 and not self.inplace
                and native.native_random_applies(input)):
            return native.dropout(input, self.p)
        return super().forward(input)
