"""ET node anomaly detector (Hoover et al., 2023, eqs. 10-12)."""
from __future__ import annotations

from typing import Any, Literal, Optional, Union, cast, overload

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn.conv import MessagePassing

from ..._sparse_warnings import quiet_sparse
from ...fused import sparse_kernels_on
from ...precision import HALF_DTYPES, autocast_off, backward_without_autocast
from ..conv import ETConv, RelationalETConv
from ..conv.et_conv import is_watched
from ..conv.relational_et_conv import check_edge_type
from ..dropout import Dropout
from ..edge_cache import EdgeCache
from ..encoders import MeanMessagePassing
from ..validation import DEFAULT_CHUNK_SIZE, check_edge_index, check_features


class _NeighbourMeanMessages(MessagePassing):
    """Every node's mean in-neighbour token as PyG messages over the caller's edges: each edge
    ``B -> A`` carries ``x_B / |N(A)|`` (self-loops with weight zero, duplicates counted), summed
    at ``A``. :class:`ETAnomalyNet` takes this path only while an explainer's edge mask or a
    message-level hook watches (an audit found the readout's neighbour mean, one sparse product,
    outside every edge mask); otherwise its cached sparse product gives the same mean."""

    def __init__(self) -> None:
        super().__init__(aggr="add", node_dim=0)

    @property
    def watched(self) -> bool:
        return is_watched(self)

    def forward(self, tokens: Tensor, edge_index: Tensor) -> Tensor:
        num_nodes = tokens.size(0)
        edge_index = check_edge_index(edge_index, num_nodes)
        src, dst = edge_index
        loops = src == dst
        degree = torch.bincount(dst[~loops], minlength=num_nodes).to(tokens.dtype)
        weight = degree.clamp(min=1).reciprocal()[dst].masked_fill(loops, 0.0)
        return self.propagate(edge_index, x=tokens, weight=weight, size=(num_nodes, num_nodes))

    def message(self, x_j: Tensor, weight: Tensor) -> Tensor:
        return weight.unsqueeze(-1) * x_j


#: Readouts of :class:`ETAnomalyNet`.
READOUTS = ("first_last", "ego_neighbour", "ego_two_hop")

#: Token blocks each readout hands to the MLP (its input is this many times ``hidden`` wide).
READOUT_WIDTHS = {"first_last": 2, "ego_neighbour": 3, "ego_two_hop": 4}


@quiet_sparse
def _transposed_csr(matrix: Tensor) -> Tensor:
    """``matrix^T`` in CSR layout, PyTorch's beta notice for CSR tensors silenced."""
    return matrix.t().to_sparse_csr()


def _sparse_product(operator: Tensor, tokens: Tensor) -> Tensor:
    """``torch.sparse.mm(operator, tokens)`` with autocast off: autocast runs the product in 16
    bits, for which the CPU has no sparse kernel (the caller hands 32-bit tokens)."""
    with autocast_off(tokens.device.type):
        return torch.sparse.mm(operator, tokens)


class _SparseProduct(torch.autograd.Function):
    """``operator @ tokens`` for a constant sparse ``operator`` whose transpose is given: the
    backward is the same product with the transpose, bit for bit what autograd computes, without
    converting the transpose every time. Its own backward is the forward again, so any order
    of derivative works."""

    @staticmethod
    def forward(ctx: Any, operator: Tensor, transposed: Tensor, tokens: Tensor) -> Tensor:
        ctx.operators = (operator, transposed)
        return _sparse_product(operator, tokens)

    @staticmethod
    @backward_without_autocast
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:
        operator, transposed = ctx.operators
        return None, None, _SparseProduct.apply(transposed, operator, grad)


class ETAnomalyNet(nn.Module):
    r"""Energy Transformer network for node anomaly detection (the network; the detector with
    ``fit``/``predict`` is :class:`et_graph.detectors.ETDetector`).

    .. math::
        \mathbf{x}^{1}_A = \mathbf{E}\,\mathbf{y}_A + \boldsymbol{\lambda}_A, \qquad
        \mathbf{x}^{T} = \mathrm{ETConv}^{T}(\mathbf{x}^{1}), \qquad
        p_A = \sigma\big(\mathrm{MLP}(\mathrm{LN}(\mathbf{x}^1_A) \,\|\,
        \mathrm{LN}(\mathbf{x}^T_A))\big)

    where ``LN`` is the conv's own energy LayerNorm (``conv.norm``), so the readout sees exactly
    the ``g`` the energy is a function of. With ``blocks = S > 1`` the descent is ``S`` stacked
    blocks, each with its own parameters and ``steps`` steps, ``x^T`` is the last block's output,
    and ``LN(x^T)`` uses the last block's LayerNorm (``LN(x^1)`` the first's).

    With ``readout="ego_neighbour"`` the MLP also gets the mean of the in-neighbours' final
    normalised tokens, so that it can compare a node with its neighbourhood explicitly:

    .. math::
        \mathrm{MLP}\big(\mathrm{LN}(\mathbf{x}^1_A) \,\|\, \mathrm{LN}(\mathbf{x}^T_A)
        \,\|\, \tfrac{1}{|\mathcal{N}(A)|}\textstyle\sum_{B \in \mathcal{N}(A)}
        \mathrm{LN}(\mathbf{x}^T_B)\big)

    over the in-neighbours ``B -> A`` of ``edge_index`` other than ``A`` itself (self-loops are
    skipped; zero for a node without in-neighbours). ``readout="ego_two_hop"`` appends the same
    mean taken once more, ``P^2 LN(x^T)`` with ``P`` the row-normalised in-adjacency: the
    neighbours' neighbourhood, as the trees' "mean of mean" column reads it.

    :meth:`forward` returns the anomaly *logit*; train it with :func:`weighted_bce_loss` (weight
    ``#normal / #anomalous``, paper eq. 12).

    :meth:`energy_score` is the unsupervised score: each node's energy share at the end of the
    descent (``conv.node_energy`` of ``x^T``).

    With ``num_relations`` the descent is a :class:`~et_graph.nn.RelationalETConv` (one
    attention energy per relation, with its own keys and queries, and one Hopfield energy) and
    every call takes the relation of each edge, ``edge_type=`` ``[E]``; the ``ego_neighbour``
    readout still averages over all in-edges (a neighbour linked in two relations counts
    twice). :func:`relation_inputs` gives that keyword for a graph.

    With ``message_passing_layers = L > 0`` the embedded tokens first pass ``L`` residual
    mean-aggregation layers with separate ego and neighbour weights
    (:class:`~et_graph.nn.encoders.MeanMessagePassing`, over the same in-neighbour mean as the
    readout), and their output is ``x^1``, where the descent starts and what ``LN(x^1)`` reads:
    ET's attention then works on tokens that already carry their neighbourhood, the "local
    message passing, then attention" split of graph transformers (GraphGPS).

    Args:
        in_channels: raw feature width ``F``.
        hidden_channels: token width ``D``.
        heads, head_dim, hopfield_dim, steps, alpha, hopfield, noise_std: passed to
            :class:`~et_graph.nn.ETConv` (``heads`` per relation with ``num_relations``).
        num_nodes: with ``positional=True``, the number of nodes of the (transductive) graph,
            one learnable positional vector each.
        positional: add the learnable per-node positional embedding of eq. 10.
        mlp_hidden: hidden width of the readout MLP (default ``hidden_channels``).
        dropout: dropout on the readout MLP's hidden layer (training mode only).
        readout: ``"first_last"`` (``LN(x^1) || LN(x^T)``, width ``2 * hidden``) or
            ``"ego_neighbour"`` (plus the in-neighbour mean of ``LN(x^T)``, width
            ``3 * hidden``) or ``"ego_two_hop"`` (plus that mean of the means, width
            ``4 * hidden``).
        num_relations: build a :class:`~et_graph.nn.RelationalETConv` over this many relations
            (edge types) instead of an :class:`~et_graph.nn.ETConv` (``None``).
        blocks: stacked ET blocks ``S`` (``>= 1``). ``conv`` is the first; the others are
            ``stacked``, so a one-block network keeps the state-dict keys it always had.
        message_passing_layers: mean-aggregation layers between the embedding and the descent
            (``0``: none, the network as before); their hidden layers share ``dropout``.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 64,
        heads: int = 1,
        head_dim: int = 16,
        hopfield_dim: Optional[int] = None,
        steps: int = 1,
        alpha: float = 1.0,
        hopfield: str = "relu",
        noise_std: float = 0.0,
        num_nodes: Optional[int] = None,
        positional: bool = False,
        mlp_hidden: Optional[int] = None,
        dropout: float = 0.0,
        readout: str = "first_last",
        num_relations: Optional[int] = None,
        blocks: int = 1,
        message_passing_layers: int = 0,
    ) -> None:
        super().__init__()
        if (isinstance(message_passing_layers, bool) or not isinstance(message_passing_layers, int)
                or message_passing_layers < 0):
            raise ValueError("message_passing_layers must be an int >= 0, got "
                             f"{message_passing_layers!r}")
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
            raise ValueError(f"blocks must be an int >= 1, got {blocks!r}")
        if in_channels <= 0 or hidden_channels <= 0:
            raise ValueError("in_channels and hidden_channels must be positive")
        if positional and (num_nodes is None or num_nodes <= 0):
            raise ValueError("positional=True needs num_nodes (the number of graph nodes)")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.readout_kind = readout
        self.embedding = nn.Linear(in_channels, hidden_channels)
        self.positional = (
            # (positional=True without num_nodes was refused above)
            nn.Embedding(cast(int, num_nodes), hidden_channels) if positional else None
        )
        self.num_relations = num_relations
        conv_options: dict[str, Any] = dict(
            heads=heads, head_dim=head_dim, hopfield_dim=hopfield_dim, steps=steps, alpha=alpha,
            hopfield=hopfield, noise_std=noise_std,
        )

        def block() -> Union[ETConv, RelationalETConv]:
            # Full-batch training passes one graph every epoch: its edges are sorted once.
            if num_relations is None:
                return ETConv(hidden_channels, cached=True, **conv_options)
            return RelationalETConv(hidden_channels, num_relations, cached=True, **conv_options)

        self.conv: Union[ETConv, RelationalETConv] = block()
        self._neighbour_cache = EdgeCache()
        # (no parameters: the state dict and a seed's initialisation are unchanged)
        self.neighbour_messages = _NeighbourMeanMessages()
        self.stacked = nn.ModuleList(block() for _ in range(blocks - 1))
        self.message_passing = (
            MeanMessagePassing(hidden_channels, message_passing_layers, dropout)
            if message_passing_layers else None
        )
        mlp_hidden = hidden_channels if mlp_hidden is None else mlp_hidden
        self.readout = nn.Sequential(
            nn.Linear(READOUT_WIDTHS[readout] * hidden_channels, mlp_hidden),
            nn.ReLU(),
            Dropout(dropout),
            nn.Linear(mlp_hidden, 1),
        )
        self.reset_parameters()

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # A network pickled before the message-passing layers existed (a detector saved by
        # an older et-graph) has none: it loaded, then failed to score with AttributeError.
        if "message_passing" not in self.__dict__ and "message_passing" not in self._modules:
            self.message_passing = None
        if "neighbour_messages" not in self._modules:  # pickled before session 63
            self.neighbour_messages = _NeighbourMeanMessages()

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        self.embedding.reset_parameters()
        if self.positional is not None:
            # Small, so that at initialisation the tokens are driven by the features.
            nn.init.normal_(self.positional.weight, std=0.02)
        for conv in self.convs:
            conv.reset_parameters()
        if self.message_passing is not None:
            self.message_passing.reset_parameters()
        for layer in self.readout:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    @property
    def convs(self) -> list[Union[ETConv, RelationalETConv]]:
        """The blocks in descent order: ``conv`` and then the ``stacked`` ones."""
        return [self.conv, *self.stacked]

    @property
    def last_conv(self) -> Union[ETConv, RelationalETConv]:
        """The block whose output is ``x^T`` (its LayerNorm reads it out, its energy scores it)."""
        return self.convs[-1]

    def embed(self, x: Tensor, node_ids: Optional[Tensor] = None) -> Tensor:
        """Tokens ``x^1 [N, hidden]`` (eq. 10). ``node_ids`` are the nodes' ids in the full graph
        (needed for the positional embedding when ``x`` is an induced subgraph)."""
        # A fitted detector's network reads more than data.x (the label trick's columns, a
        # stacked tree column): a user explaining one called it with data.x (an audit).
        check_features(x, self.in_channels, width_hint=(
            "; a fitted detector's network takes det.network_input(data) (the label trick "
            "adds columns), or use det.explanation_inputs(data)"))
        # Raw features come in any float dtype (NumPy's float64): read in the model's, as
        # ETGraphModel does; the bare ETConv refuses a mismatch instead (no silent cast there).
        tokens = self.embedding(x.to(self.embedding.weight.dtype))
        if self.positional is None and node_ids is not None:
            # (PyG's third argument is an edge weight: model(x, edge_index, w) ran, ignoring w)
            raise ValueError(
                "node_ids (the third argument) are read only with positional=True; this network "
                "reads no edge weights: leave the third argument out")
        if self.positional is not None:
            if node_ids is None:
                if x.size(0) != self.positional.num_embeddings:
                    raise ValueError(
                        f"x has {x.size(0)} rows but the positional embedding covers "
                        f"{self.positional.num_embeddings} nodes: pass node_ids for subgraphs"
                    )
                tokens = tokens + self.positional.weight
            else:
                if node_ids.shape != (x.size(0),):
                    raise ValueError(
                        f"node_ids must have shape [{x.size(0)}], got {tuple(node_ids.shape)}"
                    )
                tokens = tokens + self.positional(node_ids)
        return tokens

    def input_tokens(self, x: Tensor, edge_index: Tensor, node_ids: Optional[Tensor] = None,
                     chunk_size: Optional[int] = None) -> Tensor:
        """``x^1 [N, hidden]``, where the descent starts: :meth:`embed`, then the
        message-passing layers over ``edge_index`` when the network has any (their MLPs
        ``chunk_size`` nodes at a time when given: inference only)."""
        tokens = self.embed(x, node_ids)
        if self.message_passing is None:
            return tokens
        return self.message_passing(tokens, lambda h: self.neighbour_means(edge_index, h),
                                    chunk_size=chunk_size)

    @overload
    def forward(self, x: Tensor, edge_index: Tensor, node_ids: Optional[Tensor] = None,
                return_energy: Literal[False] = False, chunk_size: Optional[int] = None, *,
                edge_type: Optional[Tensor] = None, chunk_edges: Optional[int] = None
                ) -> Tensor: ...

    @overload
    def forward(self, x: Tensor, edge_index: Tensor, node_ids: Optional[Tensor],
                return_energy: Literal[True], chunk_size: Optional[int] = None, *,
                edge_type: Optional[Tensor] = None, chunk_edges: Optional[int] = None
                ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(self, x: Tensor, edge_index: Tensor, node_ids: Optional[Tensor] = None, *,
                return_energy: Literal[True], chunk_size: Optional[int] = None,
                edge_type: Optional[Tensor] = None, chunk_edges: Optional[int] = None
                ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(self, x: Tensor, edge_index: Tensor, node_ids: Optional[Tensor] = None,
                return_energy: bool = False, chunk_size: Optional[int] = None, *,
                edge_type: Optional[Tensor] = None, chunk_edges: Optional[int] = None
                ) -> Union[Tensor, tuple[Tensor, Tensor]]: ...

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        node_ids: Optional[Tensor] = None,
        return_energy: bool = False,
        chunk_size: Optional[int] = None,
        *,
        edge_type: Optional[Tensor] = None,
        chunk_edges: Optional[int] = None,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Anomaly logits ``[N]``; with ``return_energy=True`` also the total energy before each
        ET step and after the last ``[steps + 1]`` (detached; ``[blocks, steps + 1]``, each block
        under its own energy, when ``blocks > 1``). ``chunk_size`` runs the descent
        in bounded memory (:meth:`ETConv.forward_chunked`; inference only, same result; not
        with ``num_relations``); ``chunk_edges`` also caps each chunk's in-edges (alone, it
        implies chunks of at most ``ETConv.forward_chunked``'s default 65,536 nodes).
        ``edge_type [E]``: the relation of each edge, required with ``num_relations`` and
        refused without."""
        if chunk_size is None and chunk_edges is not None:  # (chunk_edges alone chunks too)
            chunk_size = DEFAULT_CHUNK_SIZE
        if chunk_size is not None:  # chunked
            if return_energy or torch.is_grad_enabled():
                raise ValueError("chunked scoring (chunk_size / chunk_edges) is for "
                                 "inference: use it under torch.no_grad() and without "
                                 "return_energy")
            if self.num_relations is not None:
                raise ValueError("chunked scoring (chunk_size / chunk_edges) is not "
                                 "implemented for the multi-relation ET: score in one full pass")
            self._relation_args(edge_type)
        first = self.input_tokens(x, edge_index, node_ids, chunk_size)
        if chunk_size is not None:
            last = first
            for conv in self.convs:
                last = conv.forward_chunked(last, edge_index, chunk_size=chunk_size,
                                            chunk_edges=chunk_edges)
            return self.chunked_logits(first, last, edge_index, chunk_size)
        elif return_energy:
            last, energies = self.descend(first, edge_index, edge_type, return_energy=True)
        else:
            last = self.descend(first, edge_index, edge_type)
        logits = self.readout(self.readout_features(first, last, edge_index)).squeeze(-1)
        return (logits, energies) if return_energy else logits

    def readout_features(self, first: Tensor, last: Tensor, edge_index: Tensor) -> Tensor:
        """The readout MLP's input from the tokens ``x^1`` and ``x^T``: ``[N, 2 * hidden]``
        (``first_last``), ``[N, 3 * hidden]`` (``ego_neighbour``) or ``[N, 4 * hidden]``
        (``ego_two_hop``)."""
        first, last = self.conv.norm(first), self.last_conv.norm(last)
        return torch.cat([first, last, *self.neighbourhood_blocks(edge_index, last)], dim=-1)

    def neighbourhood_blocks(self, edge_index: Tensor, last: Tensor) -> list[Tensor]:
        """The readout's neighbourhood inputs from the normalised ``LN(x^T)``: none
        (``first_last``), ``[P g]`` (``ego_neighbour``) or ``[P g, P^2 g]`` (``ego_two_hop``)."""
        hops = READOUT_WIDTHS[self.readout_kind] - 2
        blocks: list[Tensor] = []
        tokens = last
        for _ in range(hops):
            tokens = self.neighbour_means(edge_index, tokens)
            blocks.append(tokens)
        return blocks

    def neighbour_means(self, edge_index: Tensor, tokens: Tensor) -> Tensor:
        """Every node's mean in-neighbour token ``[N, hidden]`` (one SpMM; PyG messages while an
        explainer or a message hook watches, so that an edge mask covers it)."""
        if self.neighbour_messages.watched or not sparse_kernels_on(tokens.device):
            # (and where the sparse product has no kernel, Apple's mps: a portability audit)
            return self.neighbour_messages(tokens, edge_index)
        if tokens.dtype in HALF_DTYPES:
            # torch.sparse.mm has no 16-bit kernel on the CPU: under autocast every readout
            # but first_last failed on "addmm_out_sparse_csr_impl_mkl not implemented for
            # 'BFloat16'" (a numerics audit). The mean in float32, handed back in the tokens'
            # dtype.
            return self.neighbour_means(edge_index, tokens.float()).to(tokens.dtype)
        kept = self._neighbour_entry(edge_index, tokens)
        if not (torch.is_grad_enabled() and tokens.requires_grad):
            return _sparse_product(kept["matrix"], tokens)
        if kept["transposed"] is None:
            # Built once, the first time a gradient needs it: autograd would otherwise convert
            # the transpose again in every backward, for every hop.
            kept["transposed"] = _transposed_csr(kept["matrix"])
        return _SparseProduct.apply(kept["matrix"], kept["transposed"], tokens)

    def chunked_logits(self, first: Tensor, last: Tensor, edge_index: Tensor, chunk_size: int
                       ) -> Tensor:
        """The logits of :meth:`readout_features` and the MLP, ``chunk_size`` nodes at a time,
        so that scoring a large graph never holds the ``[N, 2-3 * hidden]`` readout input."""
        neighbourhood = self.neighbourhood_blocks(edge_index, self.last_conv.norm(last))
        logits = first.new_empty(first.size(0))
        for start in range(0, first.size(0), chunk_size):
            end = min(start + chunk_size, first.size(0))
            parts = [self.conv.norm(first[start:end]), self.last_conv.norm(last[start:end])]
            parts.extend(block[start:end] for block in neighbourhood)
            logits[start:end] = self.readout(torch.cat(parts, dim=-1)).squeeze(-1)
        return logits

    def neighbour_mean_operator(self, edge_index: Tensor, like: Tensor) -> Tensor:
        """The row-normalised in-adjacency (self-loops dropped, duplicates counted) as a sparse
        CSR matrix ``[N, N]``: one SpMM gives every node's mean neighbour token without an
        ``[E, D]`` gather. Kept while the same ``edge_index`` tensor comes back."""
        return self._neighbour_entry(edge_index, like)["matrix"]

    def _neighbour_entry(self, edge_index: Tensor, like: Tensor) -> dict[str, Any]:
        """The kept operator of ``edge_index`` for tokens like ``like`` (built if needed), and
        its transpose once a gradient has needed it."""
        num_nodes, like_kind = like.size(0), (like.dtype, like.device)

        @quiet_sparse
        def build() -> dict[str, Any]:
            # Checked here, before ETConv sees the graph: an id past the last node made the
            # unchecked sparse tensor below corrupt the heap (the process aborted).
            src, dst = check_edge_index(edge_index, num_nodes)
            keep = src != dst
            src, dst = src[keep], dst[keep]
            degree = torch.bincount(dst, minlength=num_nodes).to(like.dtype)
            values = degree.reciprocal()[dst]
            matrix = torch.sparse_coo_tensor(torch.stack([dst, src]), values,
                                             (num_nodes, num_nodes), check_invariants=False)
            return {"like": like_kind, "transposed": None,
                    "matrix": matrix.coalesce().to_sparse_csr()}

        # By identity and version counter, not by address: a new mini-batch's edge_index can
        # reuse a freed tensor's memory with the same shape.
        return self._neighbour_cache.fetch((edge_index,), num_nodes, build,
                                           lambda kept: kept["like"] == like_kind)

    def _relation_args(self, edge_type: Optional[Tensor]) -> tuple[Tensor, ...]:
        """``(edge_type,)`` for the relational conv, ``()`` for ETConv; a missing or unexpected
        ``edge_type`` raises ``ValueError`` rather than being ignored."""
        if self.num_relations is None:
            if edge_type is not None:
                raise ValueError("edge_type given, but this network has one relation: build it "
                                 "with num_relations to attend per relation")
            return ()
        if edge_type is None:
            raise ValueError(f"this network attends over {self.num_relations} relations and "
                             "needs edge_type [E] (the relation of each edge)")
        return (edge_type,)

    @overload
    def descend(self, tokens: Tensor, edge_index: Tensor, edge_type: Optional[Tensor] = None,
                return_energy: Literal[False] = False, *, steps: Optional[int] = None,
                blocks: Optional[slice] = None) -> Tensor: ...

    @overload
    def descend(self, tokens: Tensor, edge_index: Tensor, edge_type: Optional[Tensor],
                return_energy: Literal[True], *, steps: Optional[int] = None,
                blocks: Optional[slice] = None) -> tuple[Tensor, Tensor]: ...

    @overload
    def descend(self, tokens: Tensor, edge_index: Tensor, edge_type: Optional[Tensor] = None,
                *, return_energy: Literal[True], steps: Optional[int] = None,
                blocks: Optional[slice] = None) -> tuple[Tensor, Tensor]: ...

    @overload
    def descend(self, tokens: Tensor, edge_index: Tensor, edge_type: Optional[Tensor] = None,
                return_energy: bool = False, *, steps: Optional[int] = None,
                blocks: Optional[slice] = None) -> Union[Tensor, tuple[Tensor, Tensor]]: ...

    def descend(
        self,
        tokens: Tensor,
        edge_index: Tensor,
        edge_type: Optional[Tensor] = None,
        return_energy: bool = False,
        *,
        steps: Optional[int] = None,
        blocks: Optional[slice] = None,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """The ET descent from ``tokens [N, hidden]`` through every block (``conv(tokens,
        edge_index[, edge_type])``; ``steps`` overrides each block's for this call), or through
        the blocks ``self.convs[blocks]`` only (e.g. ``slice(-1, None)``: the last one). With
        ``return_energy`` also the energy trace: ``[steps + 1]`` for one block,
        ``[blocks, steps + 1]`` for several (each under its own energy, so they are not
        summed)."""
        args = self._relation_args(edge_type)
        convs = self.convs if blocks is None else self.convs[blocks]
        if return_energy and not convs:
            raise ValueError(f"blocks={blocks} selects no block: there is no energy to trace")
        if len(convs) == 1:
            return convs[0](tokens, edge_index, *args, return_energy=return_energy, steps=steps)
        traces = []
        for conv in convs:
            tokens = conv(tokens, edge_index, *args, return_energy=return_energy, steps=steps)
            if return_energy:
                tokens, trace = tokens
                traces.append(trace)
        return (tokens, torch.stack(traces)) if return_energy else tokens

    def node_energy(
        self, tokens: Tensor, edge_index: Tensor, edge_type: Optional[Tensor] = None
    ) -> Tensor:
        """Each node's energy share ``[N]`` at the state ``tokens [N, hidden]``, under the last
        block's energy (the one ``x^T`` descended)."""
        return self.last_conv.node_energy(tokens, edge_index, *self._relation_args(edge_type))

    @torch.no_grad()
    def energy_score(
        self,
        x: Tensor,
        edge_index: Tensor,
        node_ids: Optional[Tensor] = None,
        *,
        edge_type: Optional[Tensor] = None,
    ) -> Tensor:
        """Each node's energy ``[N]`` at the final ET state (higher = less typical under the
        learned energy, before any sign calibration)."""
        last = self.descend(self.input_tokens(x, edge_index, node_ids), edge_index, edge_type)
        return self.node_energy(last, edge_index, edge_type)


def relation_inputs(model: nn.Module, data: Data) -> dict[str, Tensor]:
    """``{"edge_type": data.edge_type}`` when ``model`` (or the module a DDP wrapper holds) is a
    multi-relation :class:`ETAnomalyNet`, else ``{}``: the keywords to add to
    ``model(x, edge_index, ...)`` on the graph ``data``."""
    network = getattr(model, "module", model)
    if getattr(network, "num_relations", None) is None:
        return {}
    edge_type = getattr(data, "edge_type", None)
    if edge_type is None:
        raise ValueError(
            "the multi-relation ET needs data.edge_type (the relation of each edge): load the "
            "graph with relation='multi' (CLI: --relation multi)"
        )
    return {"edge_type": edge_type}


def relation_names_of(data: Data) -> Optional[list[str]]:
    """A typed graph's relation names in id order: ``data.relation_names`` (the loaders'), or
    the edge types that PyG's ``HeteroData.to_homogeneous()`` numbered (``src__rel__dst``)."""
    names = getattr(data, "relation_names", None)
    if names is None:
        edge_types = getattr(data, "_edge_type_names", None)  # set by to_homogeneous()
        if edge_types is not None and getattr(data, "edge_type", None) is not None:
            return ["__".join(map(str, key)) if isinstance(key, tuple) else str(key)
                    for key in edge_types]
        return None
    return [str(name) for name in names]


def graph_relations(data: Data) -> int:
    """The number of relations of a typed graph (``data.edge_type [E]``): the length of
    its relation names (:func:`relation_names_of`) when present, else the largest id plus
    one. ``ValueError`` if the graph has no or malformed edge types."""
    edge_type = getattr(data, "edge_type", None)
    if edge_type is None:
        raise ValueError(
            "multi_relation needs a graph with edge types (data.edge_type [E]): load YelpChi or "
            "Amazon with relation='multi' (CLI: --relation multi)"
        )
    if not isinstance(edge_type, Tensor):  # a list or an array: .numel() failed below
        raise ValueError(f"data.edge_type must be a tensor [E] of relation ids, got "
                         f"{type(edge_type).__name__}: data.edge_type = torch.as_tensor(...)")
    names = relation_names_of(data)
    count = len(names) if names is not None else (
        int(edge_type.max()) + 1 if edge_type.numel() else 1)
    try:
        check_edge_type(edge_type, data.edge_index.size(1), count)
    except ValueError as error:
        beyond_names = (names is not None and edge_type.dim() == 1 and edge_type.numel() > 0
                        and not edge_type.is_floating_point()
                        and edge_type.dtype != torch.bool and int(edge_type.max()) >= count)
        if not beyond_names:
            raise
        # "the layer has num_relations" named a layer the detector's user never built
        raise ValueError(f"data.edge_type holds ids up to {int(edge_type.max())}, but the graph "
                         f"names {count} relations ({names}): give every id a name in "
                         "data.relation_names, in id order") from error
    return count


def weighted_bce_loss(logits: Tensor, target: Tensor, pos_weight: Union[float, Tensor]) -> Tensor:
    """Class-weighted binary cross-entropy (paper eq. 12), mean over the given nodes;
    ``pos_weight`` is ``#normal / #anomalous`` among the training nodes."""
    weight = torch.as_tensor(pos_weight, dtype=logits.dtype, device=logits.device)
    return nn.functional.binary_cross_entropy_with_logits(
        logits, target.to(logits.dtype), pos_weight=weight
    )


def auc_square_loss(logits: Tensor, target: Tensor, margin: float = 1.0) -> Tensor:
    """The square AUC surrogate on the sigmoid probabilities ``p`` (Ying et al., NeurIPS 2016;
    Yuan et al., ICCV 2021): the mean over every (anomalous ``a``, normal ``n``) pair of the
    given nodes of ``(margin - (p_a - p_n))^2``.

    AUROC counts the pairs ranked right; this smooth stand-in pulls each pair apart. With
    probabilities in [0, 1] and ``margin = 1`` it only ever rewards a wider gap. Computed in
    ``O(N)`` from the two classes' first two moments, since the mean over pairs of
    ``(m - a + n)^2`` is ``m^2 - 2m (E[a] - E[n]) + E[a^2] - 2 E[a] E[n] + E[n^2]``. Zero (with
    a gradient of zeros) when the nodes hold one class only."""
    prob = torch.sigmoid(logits)
    anomalous = target.to(torch.bool)
    pos, neg = prob[anomalous], prob[~anomalous]
    if pos.numel() == 0 or neg.numel() == 0:
        return logits.sum() * 0.0
    mean_pos, mean_neg = pos.mean(), neg.mean()
    return (margin ** 2 - 2 * margin * (mean_pos - mean_neg)
            + pos.square().mean() - 2 * mean_pos * mean_neg + neg.square().mean())
