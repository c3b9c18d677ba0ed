"""Structural encodings beside the Laplacian PE: random-walk return probabilities and log degree.

:class:`RandomWalkPE` stores PyG's :class:`~torch_geometric.transforms.AddRandomWalkPE` (the
probability of a random walk returning to its start after 1..k steps, Dwivedi et al., 2022) as
``data.rw_pe`` ``[N, k]``, the field :class:`~et_graph.nn.models.ETGraphModel` reads with
``rw_pe_dim=k``. :class:`LogDegree` appends ``log1p(degree)`` to ``data.x`` as one more column,
for every dataset (graphs without node features get a one-hot degree from the loader as well).
:class:`IncidentEdgeSum` appends the sum of each node's incoming edge features: with one-hot bond
types, how many bonds of each type an atom has.
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.transforms import AddRandomWalkPE, BaseTransform
from torch_geometric.utils import coalesce, degree, scatter

from .._sparse_warnings import quiet_sparse
from ..nn.validation import check_edge_index, check_positive_int


def _checked_structure(data: Data, transform: str) -> int:
    """The node count of ``data``, after checking the ``edge_index`` the transform reads (a
    missing one gave ``'NoneType' object is not subscriptable``, an id past the nodes a raw
    scatter error)."""
    edge_index = getattr(data, "edge_index", None)
    if edge_index is None:
        raise ValueError(f"{transform} reads data.edge_index, and this graph has none")
    num_nodes = data.num_nodes
    try:
        check_edge_index(edge_index, num_nodes)
    except ValueError as error:
        raise ValueError(f"{transform}: {error}") from None
    x = getattr(data, "x", None)
    if x is not None and x.size(0) != num_nodes:
        raise ValueError(f"{transform}: data.x has {x.size(0)} rows for {num_nodes} nodes")
    return num_nodes


class RandomWalkPE(BaseTransform):
    """``data[attr_name] = [P(return after 1 step), ..., P(return after k steps)]`` ``[N, k]``
    (PyG's :class:`~torch_geometric.transforms.AddRandomWalkPE`; isolated nodes get zeros).

    Unlike Laplacian eigenvectors, these are unique (no sign or basis ambiguity) and
    permutation-equivariant, and they see rings and branching that a degree cannot.

    The walk is on the graph's structure: ``edge_weight`` is not read. (PyG's transform divides
    by the weighted degree without multiplying by the weight, so with weights its values were
    not probabilities: 0.25 for a return that is certain on a path with weights 2.) A pair
    stored twice is one edge: PyG's dense path (graphs up to 2,000 nodes) assigned its
    transition once while counting it twice in the degree, so rows did not sum to 1 and the
    same graph got other values inside a larger batch. The caller's ``edge_index`` is kept. The
    encoding is in the default dtype (``torch.get_default_dtype()``), which the walk runs in.
    """

    def __init__(self, k: int = 16, attr_name: str = "rw_pe") -> None:
        check_positive_int(k, "k (the walk length)")
        self.k = k
        self.attr_name = attr_name
        self._transform = AddRandomWalkPE(walk_length=k, attr_name=attr_name)

    @quiet_sparse  # PyG builds a CSR matrix for graphs above its dense-size limit
    def forward(self, data: Data) -> Data:
        if not data.num_nodes:
            raise ValueError("RandomWalkPE got a graph without nodes; drop empty graphs first")
        num_nodes = _checked_structure(data, "RandomWalkPE")
        # The walk reads the structure alone (no weight), each pair once.
        walk = Data(edge_index=coalesce(data.edge_index.long(), num_nodes=num_nodes),
                    num_nodes=num_nodes)
        # In the default dtype, which PyG's walk also computes in (float64 for a float64 user).
        data[self.attr_name] = self._transform(walk)[self.attr_name].to(torch.get_default_dtype())
        return data

    def __repr__(self) -> str:
        name = "" if self.attr_name == "rw_pe" else f", attr_name={self.attr_name!r}"
        return f"{self.__class__.__name__}(k={self.k}{name})"


class LogDegree(BaseTransform):
    """Appends ``log1p(degree)`` (edges leaving each node in ``edge_index``; for the undirected
    TU graphs the number of neighbours) as the last column of ``data.x`` (created as ``[N, 1]``
    when the graph has no features)."""

    def forward(self, data: Data) -> Data:
        num_nodes = _checked_structure(data, "LogDegree")
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


class IncidentEdgeSum(BaseTransform):
    """Appends, per node, the sum of ``edge_attr`` over the edges entering it (``edge_index[1]``)
    as ``edge_attr.size(1)`` more columns of ``data.x``.

    With one-hot edge labels (the bond types of MUTAG and Mutagenicity) these are the counts of
    each type. Attention averages over the neighbours and cannot count them; a sum can. As an
    input transform every model sees the same columns, so a comparison stays fair.
    """

    def forward(self, data: Data) -> Data:
        edge_attr = getattr(data, "edge_attr", None)
        if edge_attr is None:
            raise ValueError("IncidentEdgeSum needs edge features (data.edge_attr); this graph "
                             "has none")
        if edge_attr.dim() == 1:
            edge_attr = edge_attr.unsqueeze(-1)
        _checked_structure(data, "IncidentEdgeSum")
        if not edge_attr.is_floating_point() and edge_attr.dtype != torch.bool:
            # Integers are category ids (OGB's bond ids [E, 3] were summed as numbers: a
            # graph-level audit) or a code whose sums count; a graph cannot tell which (a
            # molecule whose ids are all 0 or 1 passed where the next one was refused), so
            # the caller says: floats are summed, ids are embedded.
            raise ValueError("IncidentEdgeSum sums edge features, and edge_attr holds integers "
                             f"({edge_attr.size(1)} column(s)): category ids, whose sums mean "
                             "nothing, go to ETGraphModel(edge_categories=..., "
                             "incident_edges=True), which sums their embeddings (or one-hot "
                             "encode them: torch.nn.functional.one_hot); a one-hot code or "
                             "counts are summed as edge_attr.float()")
        if edge_attr.size(0) != data.edge_index.size(1):
            raise ValueError(f"edge_attr has {edge_attr.size(0)} rows for "
                             f"{data.edge_index.size(1)} edges")
        x = getattr(data, "x", None)
        if x is not None and x.dim() == 1:
            x = x.unsqueeze(-1)
        if x is not None and not x.is_floating_point():
            raise ValueError("IncidentEdgeSum appends to float features; x has dtype "
                             f"{x.dtype} (one-hot encode integer labels first)")
        dtype = x.dtype if x is not None else torch.get_default_dtype()
        sums = scatter(edge_attr.to(dtype), data.edge_index[1], dim=0,
                       dim_size=data.num_nodes, reduce="sum")
        data.x = sums if x is None else torch.cat([x, sums], dim=1)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"
