from .laplacian_pe import (
    CLSLaplacianPE,
    cls_laplacian_eigenvectors,
    cls_padded_adjacency,
    normalized_laplacian,
)

__all__ = [
    "CLSLaplacianPE",
    "cls_laplacian_eigenvectors",
    "cls_padded_adjacency",
    "normalized_laplacian",
]
