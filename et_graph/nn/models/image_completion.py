"""Masked image completion with the Energy Transformer (Hoover et al., 2023, section 3).

Image patches are tokens and attention runs over all pairs of patches ``B != C``. The descent
itself is :meth:`ETConv.forward_dense`; this module only adds the image plumbing around it
(patchify, encoder, MASK token, position embedding, decoder), so there is one energy in the
library, not two.
"""
from __future__ import annotations

import math
from typing import Literal, Optional, Union, overload

import torch
from torch import Tensor, nn

from ..conv import ETConv
from ..validation import all_finite


def _pair(value: Union[int, tuple[int, int]], name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(f"{name} must be a positive int or a pair of positive ints, got {value!r}")
    return pair  # type: ignore[return-value]


def check_mask_ratio(mask_ratio: float) -> float:
    if not isinstance(mask_ratio, (int, float)) or not 0.0 < float(mask_ratio) < 1.0:
        raise ValueError(f"mask_ratio must lie strictly between 0 and 1, got {mask_ratio!r}")
    return float(mask_ratio)


def check_images(images: Tensor, channels: Optional[int] = None) -> None:
    """``images`` must be a finite floating-point ``[B, channels, H, W]`` tensor."""
    if not isinstance(images, Tensor):
        raise ValueError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if images.dim() != 4:
        raise ValueError(f"images must have shape [B, C, H, W], got {tuple(images.shape)}")
    if images.size(0) == 0:
        raise ValueError("images is an empty batch (B = 0)")
    if not images.is_floating_point():
        raise ValueError(f"images must be a floating-point tensor, got {images.dtype}")
    if channels is not None and images.size(1) != channels:
        raise ValueError(
            f"images have {images.size(1)} channels but the model expects channels={channels} "
            "(load the images as grayscale for 1 channel or as RGB for 3)"
        )
    if not all_finite(images):
        raise ValueError("images contain NaN or inf values")


def patchify(images: Tensor, patch_size: Union[int, tuple[int, int]]) -> Tensor:
    """``[B, C, H, W]`` images to ``[B, M, C * ph * pw]`` patches, row-major over the patch grid.

    Each patch is flattened channel first, then row, then column.
    """
    check_images(images)
    ph, pw = _pair(patch_size, "patch_size")
    batch, channels, height, width = images.shape
    if height % ph or width % pw:
        raise ValueError(
            f"image size {height}x{width} is not divisible by the patch size {ph}x{pw}"
        )
    grid = images.reshape(batch, channels, height // ph, ph, width // pw, pw)
    return grid.permute(0, 2, 4, 1, 3, 5).reshape(batch, (height // ph) * (width // pw), -1)


def unpatchify(
    patches: Tensor,
    patch_size: Union[int, tuple[int, int]],
    image_size: Union[int, tuple[int, int]],
    channels: int,
) -> Tensor:
    """Inverse of :func:`patchify`: ``[B, M, C * ph * pw]`` back to ``[B, C, H, W]``."""
    ph, pw = _pair(patch_size, "patch_size")
    height, width = _pair(image_size, "image_size")
    if height % ph or width % pw:
        raise ValueError(
            f"image size {height}x{width} is not divisible by the patch size {ph}x{pw}"
        )
    rows, cols = height // ph, width // pw
    expected = (rows * cols, channels * ph * pw)
    if patches.dim() != 3 or tuple(patches.shape[1:]) != expected:
        raise ValueError(
            f"patches must have shape [B, {expected[0]}, {expected[1]}], "
            f"got {tuple(patches.shape)}"
        )
    grid = patches.reshape(patches.size(0), rows, cols, channels, ph, pw)
    return grid.permute(0, 3, 1, 4, 2, 5).reshape(patches.size(0), channels, height, width)


def masked_patch_count(num_patches: int, mask_ratio: float) -> int:
    """How many of ``num_patches`` are masked: ``round(ratio * M)``, kept within ``[1, M - 1]``
    so that every image has at least one masked and one open patch."""
    check_mask_ratio(mask_ratio)
    if num_patches < 2:
        raise ValueError(f"masking needs at least 2 patches per image, got {num_patches}")
    return min(max(int(round(mask_ratio * num_patches)), 1), num_patches - 1)


def random_patch_mask(
    batch_size: int,
    num_patches: int,
    mask_ratio: float,
    generator: Optional[torch.Generator] = None,
    device: Optional[torch.device] = None,
) -> Tensor:
    """Bool ``[batch_size, num_patches]``, True = masked; the same count in every image."""
    count = masked_patch_count(num_patches, mask_ratio)
    scores = torch.rand(batch_size, num_patches, generator=generator)
    order = scores.argsort(dim=1)
    mask = torch.zeros(batch_size, num_patches, dtype=torch.bool)
    mask.scatter_(1, order[:, :count], True)
    return mask.to(device) if device is not None else mask


class ETImageCompletion(nn.Module):
    r"""Masked image completion with one recurrent Energy Transformer block.

    ``x_A = E y_A + \lambda_A`` (linear encoder of patch ``y_A`` plus a learnable position
    embedding), with the encoded patch replaced by a learnable MASK token for masked patches;
    then ``steps`` descent steps of :meth:`ETConv.forward_dense` over all pairs ``B != C``; then
    a decoder (``LayerNorm`` + linear) back to pixels. The training loss is the MSE on the masked
    patches only (:meth:`loss`).

    Args:
        image_size: ``H`` or ``(H, W)``; the position embedding is learned for this grid.
        patch_size: ``p`` or ``(ph, pw)``; must divide ``image_size``.
        channels: image channels (1 for grayscale, 3 for RGB).
        dim: token width ``D``.
        heads, head_dim, hopfield_dim, steps, alpha, hopfield, noise_std, grad, beta_init: passed
            to :class:`ETConv`.
        mask_ratio: default fraction of masked patches for :meth:`random_mask`, in ``(0, 1)``.
    """

    def __init__(
        self,
        image_size: Union[int, tuple[int, int]] = 8,
        patch_size: Union[int, tuple[int, int]] = 2,
        channels: int = 1,
        dim: int = 64,
        heads: int = 4,
        head_dim: int = 16,
        hopfield_dim: Optional[int] = None,
        steps: int = 12,
        alpha: float = 0.1,
        hopfield: str = "relu",
        noise_std: float = 0.0,
        grad: str = "analytic",
        beta_init: Optional[float] = None,
        mask_ratio: float = 0.5,
    ) -> None:
        super().__init__()
        self.image_size = _pair(image_size, "image_size")
        self.patch_size = _pair(patch_size, "patch_size")
        if not isinstance(channels, int) or channels <= 0:
            raise ValueError(f"channels must be a positive int, got {channels!r}")
        (height, width), (ph, pw) = self.image_size, self.patch_size
        if height % ph or width % pw:
            raise ValueError(
                f"image size {height}x{width} is not divisible by the patch size {ph}x{pw}"
            )
        self.channels = channels
        self.grid_size = (height // ph, width // pw)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.patch_dim = channels * ph * pw
        self.mask_ratio = check_mask_ratio(mask_ratio)
        masked_patch_count(self.num_patches, self.mask_ratio)

        self.encoder = nn.Linear(self.patch_dim, dim)
        self.mask_token = nn.Parameter(torch.empty(dim))
        self.position = nn.Parameter(torch.empty(self.num_patches, dim))
        self.conv = ETConv(
            dim,
            heads=heads,
            head_dim=head_dim,
            hopfield_dim=hopfield_dim,
            steps=steps,
            alpha=alpha,
            hopfield=hopfield,
            noise_std=noise_std,
            grad=grad,
            beta_init=beta_init,
        )
        self.decoder_norm = nn.LayerNorm(dim)
        self.decoder = nn.Linear(dim, self.patch_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        self.encoder.reset_parameters()
        std = 1.0 / math.sqrt(self.mask_token.numel())
        nn.init.normal_(self.mask_token, std=std)
        nn.init.normal_(self.position, std=std)
        self.conv.reset_parameters()
        self.decoder_norm.reset_parameters()
        self.decoder.reset_parameters()

    # ------------------------------------------------------------------------------------------
    def random_mask(
        self,
        batch_size: int,
        mask_ratio: Optional[float] = None,
        generator: Optional[torch.Generator] = None,
    ) -> Tensor:
        """A fresh bool patch mask ``[batch_size, num_patches]`` (True = masked)."""
        ratio = self.mask_ratio if mask_ratio is None else mask_ratio
        return random_patch_mask(
            batch_size, self.num_patches, ratio, generator, device=self.position.device
        )

    def patchify(self, images: Tensor) -> Tensor:
        """Validated ``[B, C, H, W]`` images to patches ``[B, M, patch_dim]``."""
        check_images(images, self.channels)
        if tuple(images.shape[2:]) != self.image_size:
            raise ValueError(
                f"images are {images.size(2)}x{images.size(3)} but the model was built for "
                f"{self.image_size[0]}x{self.image_size[1]} (resize them when loading)"
            )
        return patchify(images, self.patch_size)

    def unpatchify(self, patches: Tensor) -> Tensor:
        return unpatchify(patches, self.patch_size, self.image_size, self.channels)

    def _check_patch_mask(self, patch_mask: Tensor, batch_size: int) -> Tensor:
        if not isinstance(patch_mask, Tensor) or patch_mask.dtype != torch.bool:
            raise ValueError("patch_mask must be a bool tensor (True = masked patch)")
        if tuple(patch_mask.shape) != (batch_size, self.num_patches):
            raise ValueError(
                f"patch_mask must have shape [B, M]={[batch_size, self.num_patches]}, "
                f"got {list(patch_mask.shape)}"
            )
        return patch_mask.to(self.position.device)

    def encode(self, images: Tensor, patch_mask: Tensor) -> Tensor:
        """Initial tokens ``[B, M, D]``: encoded patch (or MASK token) plus position."""
        patches = self.patchify(images).to(self.encoder.weight.dtype)
        patch_mask = self._check_patch_mask(patch_mask, patches.size(0))
        tokens = self.encoder(patches)
        tokens = torch.where(patch_mask.unsqueeze(-1), self.mask_token, tokens)
        return tokens + self.position

    def decode(self, tokens: Tensor) -> Tensor:
        """Tokens ``[..., D]`` to pixel patches ``[..., patch_dim]``."""
        return self.decoder(self.decoder_norm(tokens))

    @overload
    def forward(self, images: Tensor, patch_mask: Tensor,
                return_energy: Literal[False] = False) -> Tensor: ...

    @overload
    def forward(self, images: Tensor, patch_mask: Tensor,
                return_energy: Literal[True]) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(self, images: Tensor, patch_mask: Tensor,
                return_energy: bool = False) -> Union[Tensor, tuple[Tensor, Tensor]]: ...

    def forward(
        self, images: Tensor, patch_mask: Tensor, return_energy: bool = False
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Predicted patches ``[B, M, patch_dim]`` for every position (masked or not).

        With ``return_energy=True`` also the detached energy of each image ``[B, steps + 1]``.
        """
        tokens = self.encode(images, patch_mask)
        if return_energy:
            tokens, energies = self.conv.forward_dense(tokens, return_energy=True)
            return self.decode(tokens), energies
        return self.decode(self.conv.forward_dense(tokens))

    def loss(self, images: Tensor, patch_mask: Tensor) -> Tensor:
        """Mean squared error over the pixels of the masked patches only."""
        prediction = self(images, patch_mask)
        target = self.patchify(images).to(prediction.dtype)
        error = (prediction - target).pow(2).mean(dim=-1)
        # the checked mask, on the model's device (a CPU mask met CUDA errors here)
        weight = self._check_patch_mask(patch_mask, error.size(0)).to(error.dtype)
        if not bool(weight.any()):  # it returned 0 (masked_mse raises): an audit
            raise ValueError("patch_mask masks no patch; there is nothing to score")
        return (error * weight).sum() / weight.sum()

    @torch.no_grad()
    def complete(self, images: Tensor, patch_mask: Tensor) -> Tensor:
        """Images ``[B, C, H, W]`` with the masked patches replaced by the model's prediction and
        the open patches kept as given."""
        prediction = self(images, patch_mask)
        patches = self.patchify(images).to(prediction.dtype)
        mask = self._check_patch_mask(patch_mask, patches.size(0))  # on the model's device
        filled = torch.where(mask.unsqueeze(-1), prediction, patches.to(prediction.device))
        return self.unpatchify(filled).to(images.dtype)

    @torch.no_grad()
    def decoded_memories(self) -> Tensor:
        """The Hopfield memories ``xi [K, D]`` passed through the decoder, as pixel patches
        ``[K, channels, ph, pw]``: the paper's way of showing memories in the image plane."""
        patches = self.decode(self.conv.xi)
        return patches.reshape(-1, self.channels, *self.patch_size)

    def extra_repr(self) -> str:
        return (
            f"image_size={self.image_size}, patch_size={self.patch_size}, "
            f"channels={self.channels}, num_patches={self.num_patches}"
        )
