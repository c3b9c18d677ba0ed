"""The label trick's input columns and the fitted-graph test, shared by the neural detectors and
the trees (Wang et al., "Bag of Tricks for Node Classification with Graph Neural Networks", 2021).

A node's input gains 3 columns from its in-neighbours' *training* labels
(:func:`neighbour_label_features`). A node never reads its own label, and validation and test
labels never enter. ET's descent carries information over several hops, so in its training the
labels that feed the columns and the nodes that carry the loss are disjoint halves of the
training nodes (a neighbour's aggregate could otherwise carry a node's own label back); a tree
reads its row's one-hop columns alone and trains on every training label. For scoring, every
training label feeds the columns, only on the graph the detector was fitted on
(:class:`FittedGraphLabels`).
"""
from __future__ import annotations

import warnings
from typing import Any, Optional, Union, cast

import torch
from torch import Tensor
from torch_geometric.data import Data

from ..callers import user_stacklevel
from ..exceptions import DataWarning
from ..transforms.neighbourhood import in_edges_without_self_loops

#: Number of input columns the label trick adds.
NUM_LABEL_FEATURES = 3


def known_labels(y: Tensor, nodes: Tensor) -> Tensor:
    """``[N]`` long: ``y`` at ``nodes`` (index or bool mask), ``-1`` (unknown) elsewhere.

    Args:
        y: the labels ``[N]``.
        nodes: the nodes whose label is known: their indices, or a bool mask ``[N]``.
    """
    labels = torch.full((y.numel(),), -1, dtype=torch.long, device=y.device)
    labels[nodes] = y[nodes].long()
    return labels


def neighbour_label_features(edge_index: Tensor, labels: Tensor) -> Tensor:
    """The label-trick columns ``[N, 3]`` (float32) from ``labels`` in {-1 (unknown), 0, 1}:
    for each node, the share of its in-neighbours (sources of ``j -> i``, with multiplicity)
    whose known label is 1 (anomalous), the share whose known label is 0, and
    ``log(1 + number of in-neighbours with a known label)``. Self-loops are skipped, so a node's
    own label never enters its row; a node without in-neighbours gets zeros, and so does every
    node when no label is known.

    Args:
        edge_index: the edges ``[2, E]``, from ``edge_index[0]`` to ``edge_index[1]``, on the
            device of ``labels``.
        labels: each node's known label ``[N]`` (:func:`known_labels`).

    Returns:
        ``[N, 3]`` float32, on the device of ``labels``.
    """
    num_nodes = labels.numel()
    src, dst = in_edges_without_self_loops(edge_index.long())
    source = labels[src]
    # float32 throughout, whatever the default dtype (float64 there failed in index_add_)
    counts: dict[str, Any] = {"dtype": torch.float32, "device": labels.device}
    ones = torch.ones(dst.numel(), **counts)
    degree = torch.zeros(num_nodes, **counts).index_add_(0, dst, ones)
    anomalous = torch.zeros(num_nodes, **counts).index_add_(0, dst, (source == 1).float())
    normal = torch.zeros(num_nodes, **counts).index_add_(0, dst, (source == 0).float())
    share = degree.clamp_min(1.0)
    return torch.stack([anomalous / share, normal / share, (anomalous + normal).log1p()], dim=-1)


def edge_keys(edge_index: Tensor, num_nodes: int) -> Tensor:
    """The edges as sorted unique ``dst * N + src`` keys without self-loops: equal for the same
    edges in any order, in any integer dtype, after coalescing or adding self-loops too.

    Args:
        edge_index: the edges ``[2, E]``.
        num_nodes: the number of nodes ``N``.

    Returns:
        int64 keys ``[E']``, ascending.
    """
    # int64: the keys of int32 edges overflowed past 46,341 nodes, and the fitted graph, its
    # edges merely sorted, was scored as another graph with its label columns zeroed
    edge_index = edge_index.long()
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return torch.unique(edge_index[1] * num_nodes + edge_index[0])


class FittedGraphLabels:
    """What a label-trick detector remembers of its fit, and the columns it scores with.

    ``fit`` sets ``train_labels_`` (:func:`known_labels` of the training nodes),
    ``fit_edge_index_`` and ``fit_num_nodes_``. :meth:`label_columns` then gives the columns of
    any graph: the training labels' on the fitted graph and on the fitted graph *grown* (new
    nodes appended after the fitted ones, every fitted edge kept, new edges allowed: the
    fitted nodes keep their ids, so their known labels still apply, and the new nodes have
    none); zeros on any other graph, with a warning (no label is known there).
    """

    #: After ``fit`` with the label trick: the training labels (-1 elsewhere) and the fitted
    #: graph's ``edge_index``, from which :meth:`label_columns` builds the columns.
    train_labels_: Optional[Tensor] = None
    fit_edge_index_: Optional[Tensor] = None
    #: After ``fit``: the fitted graph's number of nodes (a neural detector keeps its
    #: ``edge_index`` as ``fit_edge_index_`` when it is transductive: label trick or positional).
    fit_num_nodes_: Optional[int] = None
    #: The host detector's name in messages (BaseDetector's property; declared, not defined,
    #: so that the property, later in the MRO, still answers).
    _name: str

    def _remember_fitted_graph(self, data: Data, edges: bool = True) -> None:
        """Keep what tells the fitted graph from another: its number of nodes, and (``edges``)
        a copy of its ``edge_index`` on the CPU. A copy, because ``.cpu()`` of a CPU tensor is
        the caller's own: an in-place edit of their graph after the fit (a long-run audit)
        made the edited graph "the fitted graph", scored with the training labels' columns,
        and the real one "another graph"."""
        self.fit_edge_index_ = (data.edge_index.detach().to("cpu", copy=True) if edges
                                else None)
        self.fit_num_nodes_ = data.num_nodes

    def _is_fitted_graph(self, data: Data) -> bool:
        """Whether ``data`` is the fitted graph: as many nodes and the same edges, in any
        order, repeats and self-loops aside (sorting or coalescing the edges, or adding
        self-loops, after the fit does not make it another graph)."""
        edge_index = self.fit_edge_index_
        if edge_index is None:
            return False
        # (load(map_location="cuda") moves it to the GPU; the comparisons below run on the CPU)
        edge_index = edge_index.cpu()
        num_nodes = self.fit_num_nodes_
        if num_nodes is None:  # a file saved before fit_num_nodes_: the label trick's labels
            num_nodes = self.train_labels_.numel() if self.train_labels_ is not None else None
        if num_nodes is None or data.num_nodes != num_nodes:  # (None: data.num_nodes is an int)
            return False
        given = data.edge_index.cpu()
        # the same order (the usual case) needs no sort
        if given.shape == edge_index.shape and torch.equal(given, edge_index):
            return True
        return torch.equal(edge_keys(given, num_nodes), edge_keys(edge_index, num_nodes))

    def _is_grown_fitted_graph(self, data: Data) -> bool:
        """Whether ``data`` is the fitted graph grown: new edges, nodes appended after the
        fitted ones, or both, with every fitted edge among its first ``fit_num_nodes_`` nodes
        (the daily update of a transaction graph: new transactions between known accounts,
        and new accounts)."""
        # (set by every fit whose detector asks: the label trick's and the stacked one's)
        fitted = cast(Tensor, self.train_labels_).numel()
        # (new edges alone once made it "another graph": every label column went to zero,
        # although each fitted node and edge was still there)
        if self.fit_edge_index_ is None or data.num_nodes < fitted:
            return False
        size = int(data.num_nodes)
        old = edge_keys(self.fit_edge_index_.cpu(), size)
        return bool(torch.isin(old, edge_keys(data.edge_index.cpu(), size)).all())

    def label_columns(self, data: Data, device: Union[torch.device, str] = "cpu") -> Tensor:
        """The ``[N, 3]`` label-trick columns of ``data`` (float32 on ``device``).

        Args:
            data: the graph (its ``edge_index`` and number of nodes are read).
            device: where the columns are computed.
        """
        if self.train_labels_ is None:
            raise RuntimeError(f"{self._name} is not fitted yet: call fit(data) first")
        if self._is_fitted_graph(data):
            return neighbour_label_features(data.edge_index.to(device),
                                            self.train_labels_.to(device))
        fitted = self.train_labels_.numel()
        labels = torch.full((data.num_nodes,), -1, dtype=torch.long)
        if self._is_grown_fitted_graph(data):
            # New edges or accounts joined the fitted graph: its nodes keep their ids and their
            # known training labels (it once zeroed every column here, and the scores of the
            # old nodes collapsed without a word); new nodes have no label.
            labels[:fitted] = self.train_labels_
        else:
            what = ("the fitted graph's nodes but not all of its edges" if data.num_nodes == fitted
                    else f"{data.num_nodes} nodes (the fitted graph {fitted})" if
                    data.num_nodes < fitted else
                    f"{data.num_nodes} nodes (the fitted graph {fitted}) and does not keep "
                    "its edges among its first nodes")
            warnings.warn(
                f"{self._name}: this graph has {what}, so it is scored as another "
                "graph: the label-trick columns are zero (no training label is known there), "
                "which lowers the scores' quality. Score the fitted graph, or the fitted graph "
                "grown (new edges, or new nodes appended after its own, every fitted edge "
                "kept), to use its training labels.", DataWarning,
                stacklevel=user_stacklevel())
        return neighbour_label_features(data.edge_index.to(device), labels.to(device))
