from .features import FEATURE_NORMS, prepare_detection_data, quantile_normal
from .laplacian_pe import (
    CLSLaplacianPE,
    cls_laplacian_eigenvectors,
    cls_padded_adjacency,
    normalized_laplacian,
)

__all__ = [
    "FEATURE_NORMS",
    "prepare_detection_data",
    "quantile_normal",
    "CLSLaplacianPE",
    "cls_laplacian_eigenvectors",
    "cls_padded_adjacency",
    "normalized_laplacian",
]
