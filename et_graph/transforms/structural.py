"""Structural encodings beside the Laplacian PE: random-walk return probabilities and log degree.

:class:`RandomWalkPE` stores PyG's :class:`~torch_geometric.transforms.AddRandomWalkPE` (the
probability of a random walk returning to its start after 1..k steps, Dwivedi et al., 2022) as
``data.rw_pe`` ``[N, k]``, the field :class:`~et_graph.nn.models.ETGraphModel` reads with
``rw_pe_dim=k``. :class:`LogDegree` appends ``log1p(degree)`` to ``data.x`` as one more column,
for every dataset (graphs without node features get a one-hot degree from the loader as well).
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.transforms import AddRandomWalkPE, BaseTransform
from torch_geometric.utils import degree


class RandomWalkPE(BaseTransform):
    """``data[attr_name] = [P(return after 1 step), ..., P(return after k steps)]`` ``[N, k]``
    (PyG's :class:`~torch_geometric.transforms.AddRandomWalkPE`; isolated nodes get zeros).

    Unlike Laplacian eigenvectors, these are unique (no sign or basis ambiguity) and
    permutation-equivariant, and they see rings and branching that a degree cannot.
    """

    def __init__(self, k: int = 16, attr_name: str = "rw_pe") -> None:
        if k <= 0:
            raise ValueError(f"k (the walk length) must be positive, got {k}")
        self.k = k
        self.attr_name = attr_name
        self._transform = AddRandomWalkPE(walk_length=k, attr_name=attr_name)

    def forward(self, data: Data) -> Data:
        if not data.num_nodes:
            raise ValueError("RandomWalkPE got a graph without nodes; drop empty graphs first")
        data = self._transform(data)
        data[self.attr_name] = data[self.attr_name].float()
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(k={self.k})"


class LogDegree(BaseTransform):
    """Appends ``log1p(degree)`` (edges leaving each node in ``edge_index``; for the undirected
    TU graphs the number of neighbours) as the last column of ``data.x`` (created as ``[N, 1]``
    when the graph has no features)."""

    def forward(self, data: Data) -> Data:
        num_nodes = data.num_nodes
        column = torch.log1p(degree(data.edge_index[0], num_nodes)).unsqueeze(-1)
        x = getattr(data, "x", None)
        if x is None:
            data.x = column
        else:
            if x.dim() == 1:
                x = x.unsqueeze(-1)
            if not x.is_floating_point():
                raise ValueError("LogDegree appends to float features; x has dtype "
                                 f"{x.dtype} (one-hot encode integer labels first)")
            data.x = torch.cat([x, column.to(x.dtype)], dim=1)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"
