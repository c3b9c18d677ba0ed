"""Laplacian eigenvector positional encoding of a graph padded with a CLS node (paper eq. 23)."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from ..nn.validation import check_edge_index, check_positive_int
from .structural import _checked_structure


def cls_padded_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Dense ``[N + 1, N + 1]`` adjacency with the CLS node at index 0.

    Row and column 0 are all ones (the paper pads the upper left corner with ones, so the CLS node
    is linked to every node, itself included); the lower right block is the symmetrised graph
    adjacency without self-loops.
    """
    if num_nodes <= 0:
        raise ValueError("a graph without nodes has no Laplacian encoding; drop empty graphs")
    edge_index = check_edge_index(edge_index, num_nodes)
    adjacency = torch.zeros(num_nodes + 1, num_nodes + 1, dtype=torch.float64)
    adjacency[edge_index[0] + 1, edge_index[1] + 1] = 1.0
    adjacency = torch.maximum(adjacency, adjacency.t())
    adjacency.fill_diagonal_(0.0)
    adjacency[0, :] = 1.0
    adjacency[:, 0] = 1.0
    return adjacency


def normalized_laplacian(adjacency: Tensor) -> Tensor:
    """``I - D^-1/2 A D^-1/2``; with the CLS row every degree is positive."""
    degree = adjacency.sum(dim=1)
    inv_sqrt = degree.clamp_min(1e-12).rsqrt()
    return torch.eye(adjacency.size(0), dtype=adjacency.dtype) - (
        inv_sqrt[:, None] * adjacency * inv_sqrt[None, :]
    )


def cls_laplacian_eigenvectors(edge_index: Tensor, num_nodes: int, k: int) -> Tensor:
    """The ``k`` eigenvectors after the trivial one of the CLS-padded normalised Laplacian.

    Returns ``[N + 1, k]`` (row 0 = CLS node), columns sorted by eigenvalue; graphs with
    ``N + 1 <= k`` nodes only have ``N`` non-trivial eigenvectors and get zero columns after them.
    Eigenvector signs are arbitrary (fixed here by making the largest-magnitude entry positive so
    the transform is deterministic); :class:`LaplacianPEEncoder` flips them at random in training.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    laplacian = normalized_laplacian(cls_padded_adjacency(edge_index, num_nodes)).numpy()
    _, vectors = np.linalg.eigh(laplacian)
    vectors = vectors[:, 1 : k + 1]
    pivots = np.abs(vectors).argmax(axis=0)
    signs = np.sign(vectors[pivots, np.arange(vectors.shape[1])])
    vectors = vectors * np.where(signs == 0, 1.0, signs)
    out = np.zeros((num_nodes + 1, k))
    out[:, : vectors.shape[1]] = vectors
    # In the default dtype: float32 unless a float64 user set it (computed in float64 here).
    return torch.from_numpy(out).to(torch.get_default_dtype())


class CLSLaplacianPE(BaseTransform):
    r"""Adds the CLS-padded Laplacian positional encoding of Hoover et al. (2023), eq. 23.

    The graph is padded with one CLS node linked to every node, the normalised Laplacian
    :math:`\tilde L = I - \tilde D^{-1/2}\tilde A\tilde D^{-1/2}` is diagonalised and the ``k``
    eigenvectors after the trivial one are kept (zero-padded for graphs with fewer than ``k``
    nodes; a graph of exactly ``k`` nodes has ``k`` of them with its CLS node). The signs are
    fixed for a given node numbering only (a tie in magnitude is broken by node order), and a
    repeated eigenvalue's basis is arbitrary: the encoder's sign flips in training are why.
    Stores ``data[attr_name]`` ``[N, k]`` (the node rows) and ``data[cls_attr_name]``
    ``[1, k]`` (the CLS row), so that batching concatenates them to ``[N, k]`` and
    ``[num_graphs, k]``, in the default dtype (``torch.get_default_dtype()``; computed in
    float64). Use :class:`et_graph.nn.LaplacianPEEncoder` to project them to the token
    space (it also does the training-time sign flips).
    """

    def __init__(self, k: int = 8, attr_name: str = "lap_pe", cls_attr_name: str = "cls_lap_pe"
                 ) -> None:
        check_positive_int(k, "k")
        self.k = k
        self.attr_name = attr_name
        self.cls_attr_name = cls_attr_name

    def forward(self, data: Data) -> Data:
        num_nodes = data.num_nodes
        if not num_nodes:
            raise ValueError("CLSLaplacianPE got a graph without nodes; drop empty graphs first")
        batch = getattr(data, "batch", None)
        if batch is not None and batch.numel() and int(batch.max()) > 0:
            # One CLS node for the whole batch: the encodings of neither graph (an audit).
            raise ValueError("CLSLaplacianPE encodes one graph with its CLS node: apply it to "
                             "each graph (a dataset's transform or pre_transform), then batch")
        # (no edge_index: "'NoneType' object has no attribute 'cpu'", a graph-level audit)
        _checked_structure(data, "CLSLaplacianPE")
        # computed on the CPU (NumPy's eigh), returned where the graph lives
        vectors = cls_laplacian_eigenvectors(data.edge_index.cpu(), num_nodes, self.k).to(
            data.edge_index.device)
        data[self.attr_name] = vectors[1:]
        data[self.cls_attr_name] = vectors[:1]
        return data

    def __repr__(self) -> str:
        names = "".join(f", {arg}={value!r}" for arg, value, default in (
            ("attr_name", self.attr_name, "lap_pe"), ("cls_attr_name", self.cls_attr_name,
                                                      "cls_lap_pe")) if value != default)
        return f"{self.__class__.__name__}(k={self.k}{names})"
