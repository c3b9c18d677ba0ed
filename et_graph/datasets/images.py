"""Images for masked image completion: scikit-learn's bundled digits, or a folder of images.

Both loaders return a float32 tensor ``[N, C, H, W]`` with pixel values in ``[0, 1]``.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor

from ..exceptions import DataWarning

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
COLOR_MODES = {"grayscale": "L", "rgb": "RGB"}


def load_digits_images() -> Tensor:
    """The 1797 scikit-learn digits (8x8, grey levels 0..16) as ``[1797, 1, 8, 8]`` in ``[0, 1]``.

    They ship with scikit-learn, so nothing is downloaded.
    """
    from sklearn.datasets import load_digits

    images = load_digits().images.astype(np.float32) / 16.0
    return torch.from_numpy(images).unsqueeze(1)


def _size_pair(size: Union[int, Sequence[int]]) -> tuple[int, int]:
    # (16.0 failed in tuple() with a bare TypeError: an audit)
    pair = (size, size) if isinstance(size, int) else (
        tuple(size) if isinstance(size, (tuple, list)) else (size,))
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                 for v in pair):
        raise ValueError(f"size must be a positive int or (height, width), got {size!r}")
    return pair  # type: ignore[return-value]


def load_image_folder(
    root: Union[str, Path],
    size: Union[int, Sequence[int]] = 32,
    color: str = "grayscale",
    extensions: Sequence[str] = IMAGE_EXTENSIONS,
    limit: Optional[int] = None,
) -> Tensor:
    """Every image under ``root`` (recursively, sorted by path) as ``[N, C, H, W]`` in ``[0, 1]``.

    Args:
        root: folder to search.
        size: output ``H`` or ``(H, W)``; images are resized with bilinear filtering (aspect ratio
            is not kept; crop beforehand if it matters). Pick a size divisible by the patch size.
        color: ``"grayscale"`` (1 channel) or ``"rgb"`` (3 channels).
        extensions: file suffixes to read (case-insensitive).
        limit: read at most this many files (after sorting).

    A JPEG's camera rotation (its EXIF orientation) is applied; an animated image gives its
    first frame, and images whose aspect ratio differs from ``size``'s are stretched, each
    with a warning.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    if color not in COLOR_MODES:
        raise ValueError(f"color must be one of {sorted(COLOR_MODES)}, got {color!r}")
    height, width = _size_pair(size)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit <= 0):  # -1 dropped the last image (an audit)
        raise ValueError(f"limit must be a positive number of images (or None for all), got "
                         f"{limit!r}")
    if isinstance(extensions, str):  # "png" was read letter by letter
        extensions = (extensions,)
    folder = Path(root)
    if not folder.is_dir():
        raise ValueError(f"image folder {str(folder)!r} does not exist or is not a folder")
    # "png" and ".png" alike: Path.suffix keeps the dot, and without it nothing would match
    suffixes = {ext.lower() if ext.startswith(".") else f".{ext.lower()}" for ext in extensions}
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
    if limit is not None:
        files = files[:limit]
    if not files:
        raise ValueError(
            f"no images with extensions {sorted(suffixes)} found under {str(folder)!r}"
        )
    arrays = []
    transparent, animated, stretched = [], [], []
    for path in files:
        try:
            with Image.open(path) as opened:
                if getattr(opened, "n_frames", 1) > 1:
                    animated.append(path.name)
                # the camera's rotation (a portrait photo loaded on its side: an audit)
                image = ImageOps.exif_transpose(opened) or opened
                if abs(image.width / image.height - width / height) > 0.01 * width / height:
                    stretched.append(path.name)
                arrays.append(_pixels(image, color, width, height, path))
                if _has_transparency(image):
                    transparent.append(path.name)
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as error:
            # (the last: an image above twice Pillow's pixel limit, a decompression bomb; a
            # security audit found it a bare traceback naming no file)
            raise ValueError(f"could not read image {str(path)!r}: {error}") from error
    if transparent:
        warnings.warn(f"{len(transparent)} image(s) have transparent pixels (e.g. "
                      f"{transparent[0]}); their colour is read without the alpha channel",
                      DataWarning, stacklevel=2)
    if animated:
        warnings.warn(f"{len(animated)} image(s) hold several frames (e.g. {animated[0]}); "
                      "only the first frame of each is read", DataWarning, stacklevel=2)
    if stretched:
        warnings.warn(f"{len(stretched)} of {len(files)} image(s) have another aspect ratio "
                      f"than {height}x{width} (e.g. {stretched[0]}) and are stretched to it; "
                      "crop them first if the shapes matter", DataWarning, stacklevel=2)
    stacked = np.stack(arrays)
    if stacked.ndim == 3:
        stacked = stacked[:, None]
    else:
        stacked = stacked.transpose(0, 3, 1, 2)
    return torch.from_numpy(np.ascontiguousarray(stacked))


#: Pillow's modes for more than 8 bits per sample: 16-bit greyscale PNGs open as one of these
#: (``I``: 32-bit integers holding the 16-bit values), which ``convert("L")`` would clip to 255.
_WIDE_INTEGER_MODES = {"I;16": 65535.0, "I;16B": 65535.0, "I;16L": 65535.0, "I": 65535.0}


def _pixels(image: Any, color: str, width: int, height: int, path: Path) -> np.ndarray:
    """One image as float32 ``[H, W]`` (grayscale) or ``[H, W, 3]`` (rgb) in ``[0, 1]``."""
    from PIL import Image

    if image.mode in _WIDE_INTEGER_MODES or image.mode == "F":
        values = np.asarray(image, dtype=np.float64)
        scale = _WIDE_INTEGER_MODES.get(image.mode, 1.0)
        if values.size and (values.min() < 0 or values.max() > scale):
            raise ValueError(f"image {str(path)!r} (mode {image.mode}) holds values outside "
                             f"[0, {scale:g}]; convert it to 8 or 16 bits per sample first")
        if image.mode == "I" and values.size and 0 < values.max() <= 255:
            # Pillow's 32-bit mode holds 16-bit PNGs, and is read as such; 8-bit values there
            # came out 257 times too dark without a word (an audit)
            warnings.warn(f"image {str(path)!r} (mode I, 32-bit integers) is read as 16 bits "
                          f"per sample (divided by 65535), but its largest value is "
                          f"{values.max():g}: if it holds 8-bit values, save it as 8-bit",
                          DataWarning, stacklevel=3)
        grey = Image.fromarray((values / scale).astype(np.float32), mode="F").resize(
            (width, height), Image.Resampling.BILINEAR)
        pixels = np.asarray(grey, dtype=np.float32)
        return np.repeat(pixels[..., None], 3, axis=-1) if color == "rgb" else pixels
    converted = image.convert(COLOR_MODES[color]).resize((width, height),
                                                         Image.Resampling.BILINEAR)
    return np.asarray(converted, dtype=np.float32) / 255.0


def _has_transparency(image: Any) -> bool:
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        alpha = image.convert("RGBA").getchannel("A")
        return alpha.getextrema()[0] < 255
    return False


def split_images(
    images: Tensor, test_fraction: float = 0.2, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """A seeded random split into ``(train, test)``; both parts are non-empty."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction}")
    count = images.size(0)
    if count < 2:
        raise ValueError(f"need at least 2 images to split, got {count}")
    num_test = min(max(int(round(test_fraction * count)), 1), count - 1)
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    return images[order[num_test:]], images[order[:num_test]]
