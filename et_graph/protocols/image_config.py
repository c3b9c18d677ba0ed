"""The typed config of masked image completion (``et-graph image``): which images, the model,
the splits and seeds, the training. The run loop is :mod:`et_graph.experiments.image_completion`;
training and evaluation, :mod:`et_graph.protocols.image_completion`."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from ..config import RunConfig
from ..exceptions import ConfigWarning
from .image_completion import ImageTrainConfig

#: The colour modes of an image folder.
COLORS = ("grayscale", "rgb")


@dataclass
class ImageDataConfig:
    """Which images.

    Attributes:
        data: digits (scikit-learn's bundled 8x8 digits) or a folder of images.
        image_size: resize folder images to this height, and to this width too unless
            image_width is given (ignored for digits, which are 8x8).
        image_width: the width of resized folder images where it differs from their height
            (none = image_size, square images).
        color: channels for folder images, grayscale or rgb.
        train_limit: use at most this many training images per seed (none = all).
        test_limit: score at most this many held-out images per seed (none = all).
    """

    data: str = "digits"
    image_size: int = 32
    image_width: Optional[int] = None
    color: str = "grayscale"
    train_limit: Optional[int] = None
    test_limit: Optional[int] = None

    def __post_init__(self) -> None:
        if self.color not in COLORS:
            raise ValueError(f"color must be one of {COLORS}, got {self.color!r}")
        for name in ("train_limit", "test_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:  # a slice [:-5] would drop images instead
                raise ValueError(f"{name} must be positive (or none for all), got {value}")
        if self.image_size < 1:
            raise ValueError(f"image_size must be positive, got {self.image_size}")
        if self.image_width is not None and self.image_width < 1:
            raise ValueError(f"image_width must be positive (or none for image_size), got "
                             f"{self.image_width}")

    @property
    def size(self) -> tuple[int, int]:
        """``(height, width)`` of the resized folder images."""
        return self.image_size, self.image_width or self.image_size


@dataclass
class ImageModelConfig:
    """The :class:`ETImageCompletion` model.

    Attributes:
        patch_size: side of the square patches (the tokens).
        mask_ratio: share of the patches masked in every image.
        dim: token width D.
        heads: attention heads.
        head_dim: key/query width per head.
        hopfield_dim: Hopfield memories K (none = 4 * dim).
        steps: ET descent steps T.
        alpha: descent step size.
        hopfield: Hopfield energy, relu or softmax.
        noise_std: noise added to the tokens at each descent step in training (paper eq. 27),
            as the other tasks' --noise-std.
    """

    patch_size: int = 2
    mask_ratio: float = 0.5
    dim: int = 64
    heads: int = 4
    head_dim: int = 16
    hopfield_dim: Optional[int] = None
    steps: int = 12
    alpha: float = 0.1
    hopfield: str = "relu"
    noise_std: float = 0.0


@dataclass
class ImageProtocolConfig:
    """Splits and seeds.

    Attributes:
        seeds: number of runs; run i uses seed seed + i for its splits, masks and initialisation.
        seed: the first seed.
        test_fraction: held-out share of the images (re-split for every seed).
        val_fraction: share of the training images held out, with one fixed mask, to select the
            epoch (lowest masked MSE); the model trains on the rest.
    """

    seeds: int = 3
    seed: int = 0
    test_fraction: float = 0.2
    val_fraction: float = 0.1

    def __post_init__(self) -> None:
        if self.seeds <= 0:
            raise ValueError(f"seeds must be positive, got {self.seeds}")
        if 0.5 < self.val_fraction < 1.0:  # (0.99 trained on 2 of 200 images silently: an audit)
            warnings.warn(f"val_fraction {self.val_fraction:g} holds out more of the training "
                          "images for choosing the epoch than the model trains on",
                          ConfigWarning, stacklevel=3)


@dataclass
class ImageCompletionConfig:
    """Everything ``et-graph image`` needs (preset: ``configs/image/digits.toml``)."""

    data: ImageDataConfig = field(default_factory=ImageDataConfig)
    model: ImageModelConfig = field(default_factory=ImageModelConfig)
    protocol: ImageProtocolConfig = field(default_factory=ImageProtocolConfig)
    train: ImageTrainConfig = field(default_factory=ImageTrainConfig)
    run: RunConfig = field(
        default_factory=lambda: RunConfig(out="results/image_completion", threads=1)
    )

    #: ``--quick``: 2 seeds, 2 epochs, 200 training and 64 held-out digits, 4 steps (seconds).
    QUICK: ClassVar[dict[str, Any]] = {
        "train.epochs": 2, "protocol.seeds": 2, "data.train_limit": 200, "data.test_limit": 64,
        "model.steps": 4,
    }

    @property
    def seed_list(self) -> list[int]:
        return [self.protocol.seed + i for i in range(self.protocol.seeds)]
