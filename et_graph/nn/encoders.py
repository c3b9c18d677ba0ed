"""Input encoders for graph-level ET: node/edge features to tokens, Laplacian PE to tokens."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Callable, Optional, Union, cast

import torch
from torch import Tensor
from torch.nn import Embedding, Linear, Module, ModuleList

from .dropout import Dropout
from .validation import all_finite, check_batch, check_chunk_size, check_edge_features

Categories = Union[int, Sequence[int], None]


#: Where a model's user names the category sizes of each input (an audit found the message
#: naming the encoders' ``num_categories`` to a user of ETGraphModel, which has no such argument).
_CATEGORIES_ARGUMENT = {
    "x": "num_categories to NodeEncoder, num_node_categories to ETGraphModel,",
    "edge_attr": "num_categories to EdgeEncoder, edge_categories to ETGraphModel,",
}


#: The category sizes' argument names in the other messages (a graph-level audit: an
#: ETGraphModel user was told of num_categories, which it has no such argument).
_SIZES_NAMED = {
    "x": "num_categories (NodeEncoder) / num_node_categories (ETGraphModel)",
    "edge_attr": "num_categories (EdgeEncoder) / edge_categories (ETGraphModel)",
}


class FeatureEncoder(Module):
    """Maps per-item features to ``out_channels``.

    Floating-point inputs ``[N, in_channels]`` (one-hot labels, continuous attributes or both) go
    through a linear layer; the first ``continuous_channels`` columns are standardised first with
    statistics set by :meth:`fit` (call it on training data only; identity until then).
    Integer inputs ``[N]`` or ``[N, c]`` (categorical labels such as ZINC atom types) are embedded
    with one table per column (sizes ``num_categories``) and summed.

    The input's dtype picks the branch, so one tensor is either float or integer: categorical
    ids and float descriptors cannot be mixed in one ``x``. One-hot encode the ids beside the
    floats (float input), or embed the ids alone. Built with both sizes, an encoder reads
    whichever dtype comes, and the other branch's parameters stay unused.

    Args:
        out_channels: the output width.
        in_channels: the width of float input features (``None``: integer categories only).
        continuous_channels: how many leading float columns :meth:`fit` standardises, in
            ``[0, in_channels]``.
        num_categories: the number of categories of each integer column (an int for one
            column; ``None``: float features only). Give it, ``in_channels`` or both.
        name: the input's name in messages (``"x"`` or ``"edge_attr"``).
    """

    # Buffers (register_buffer), which mypy does not see.
    mean: Tensor
    std: Tensor

    def __init__(
        self,
        out_channels: int,
        in_channels: Optional[int] = None,
        continuous_channels: int = 0,
        num_categories: Categories = None,
        name: str = "x",
    ) -> None:
        super().__init__()
        if out_channels <= 0:
            raise ValueError(f"out_channels must be positive, got {out_channels}")
        if in_channels is None and num_categories is None:
            raise ValueError("give in_channels (float features) or the category sizes of integer "
                             f"ones: {_SIZES_NAMED.get(name, 'num_categories')}")
        if in_channels is not None and in_channels <= 0:
            raise ValueError(f"in_channels must be positive, got {in_channels}")
        if not 0 <= continuous_channels <= (in_channels or 0):
            raise ValueError(
                f"continuous_channels={continuous_channels} must lie in [0, in_channels]"
            )
        self.out_channels = out_channels
        self.in_channels = in_channels
        self.continuous_channels = continuous_channels
        self.name = name
        if isinstance(num_categories, int):
            num_categories = [num_categories]
        self.num_categories = list(num_categories) if num_categories is not None else None
        if self.num_categories is not None and any(n <= 0 for n in self.num_categories):
            raise ValueError(f"{_SIZES_NAMED.get(name, 'num_categories')} must be positive, "
                             f"got {self.num_categories}")
        self.linear = Linear(in_channels, out_channels) if in_channels else None
        self.embeddings = (
            ModuleList(Embedding(n, out_channels) for n in self.num_categories)
            if self.num_categories
            else None
        )
        self.register_buffer("mean", torch.zeros(continuous_channels))
        self.register_buffer("std", torch.ones(continuous_channels))

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        if self.linear is not None:
            self.linear.reset_parameters()
        if self.embeddings is not None:
            for table in cast("Iterable[Embedding]", self.embeddings):  # (ModuleList: Module)
                table.reset_parameters()
        self.mean.zero_()
        self.std.fill_(1.0)

    @torch.no_grad()
    def fit(self, x: Tensor) -> FeatureEncoder:
        """Set the standardisation of the continuous columns from (training) features ``x``.

        Args:
            x: the features ``[N, in_channels]``; integer or empty ones leave the statistics
                as they are.

        Returns:
            The encoder itself.
        """
        if self.continuous_channels and x.is_floating_point() and x.size(0):
            cont = x[:, : self.continuous_channels].to(self.mean.dtype)
            self.mean.copy_(cont.mean(0))
            self.std.copy_(cont.std(0, unbiased=False).clamp_min(1e-6))
        return self

    def forward(self, x: Tensor) -> Tensor:
        """Float features through the linear layer, or integer ids through the embedding
        tables (summed over the columns).

        Args:
            x: finite float features ``[N, in_channels]`` (``[N]`` where ``in_channels`` is
                1), or integer ids ``[N, c]`` with one column per category size (``[N]`` for
                one), each id in ``[0, size)``.

        Returns:
            ``[N, out_channels]``.
        """
        if not isinstance(x, Tensor):
            raise ValueError(f"{self.name} must be a torch.Tensor, got {type(x).__name__}")
        if x.is_floating_point():
            return self._encode_float(x)
        return self._encode_categories(x)

    @property
    def _rows(self) -> str:
        """The first dimension's name in shape messages: edges for edge features."""
        return "E" if self.name == "edge_attr" else "N"

    def _encode_float(self, x: Tensor) -> Tensor:
        if self.linear is None:
            raise ValueError(
                f"{self.name} is floating point but the encoder was built for integer categories "
                "only (" + ("pass in_channels" if self.name == "x" else
                            "build the model with edge_dim, EdgeEncoder with in_channels") + ")"
            )
        given = tuple(x.shape)  # the caller's shape, not the unsqueezed one, in the message
        if x.dim() == 1:
            x = x.unsqueeze(-1)
        if x.dim() != 2 or x.size(1) != self.in_channels:
            raise ValueError(
                f"{self.name} must have shape [{self._rows}, {self.in_channels}], got {given}"
            )
        if not all_finite(x):
            raise ValueError(f"{self.name} contains NaN or inf values")
        x = x.to(self.linear.weight.dtype)
        if self.continuous_channels:
            cont = (x[:, : self.continuous_channels] - self.mean) / self.std
            x = torch.cat([cont, x[:, self.continuous_channels :]], dim=1)
        return self.linear(x)

    def _encode_categories(self, x: Tensor) -> Tensor:
        if self.embeddings is None:
            raise ValueError(
                f"{self.name} has integer dtype {x.dtype} but the encoder expects float features "
                f"(pass {_CATEGORIES_ARGUMENT.get(self.name, 'num_categories')} for categorical "
                "labels, or one-hot encode them)"
            )
        given = tuple(x.shape)
        if x.dim() == 1:
            x = x.unsqueeze(-1)
        if x.dim() != 2 or x.size(1) != len(self.embeddings):
            raise ValueError(
                f"{self.name} must have shape [{self._rows}, {len(self.embeddings)}] (one column "
                f"per categorical label), got {given}"
            )
        # (set whenever embeddings are: both come from a non-empty num_categories)
        sizes = cast(list[int], self.num_categories)
        out: Optional[Tensor] = None
        for column, (table, size) in enumerate(zip(self.embeddings, sizes)):
            ids = x[:, column].long()
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= size):
                raise ValueError(
                    f"{self.name}[:, {column}] holds categories in [{int(ids.min())}, "
                    f"{int(ids.max())}] but its category size is {size} (column {column} of "
                    f"{_SIZES_NAMED.get(self.name, 'num_categories')})"
                )
            emb = table(ids)
            out = emb if out is None else out + emb
        return cast(Tensor, out)  # (one table at least: num_categories is not empty)


class NodeEncoder(FeatureEncoder):
    """Node features (one-hot / categorical labels, continuous attributes) to tokens.

    Args:
        out_channels: the token width.
        in_channels: the width of float node features (``None``: integer categories only).
        continuous_channels: how many leading float columns :meth:`fit` standardises, in
            ``[0, in_channels]``.
        num_categories: the number of categories of each integer column (an int for one
            column; ``None``: float features only). Give it, ``in_channels`` or both.
    """

    def __init__(
        self,
        out_channels: int,
        in_channels: Optional[int] = None,
        continuous_channels: int = 0,
        num_categories: Categories = None,
    ) -> None:
        super().__init__(out_channels, in_channels, continuous_channels, num_categories, name="x")


class EdgeEncoder(FeatureEncoder):
    """Edge features (one-hot / categorical labels, continuous attributes) to ``out_channels``.

    Args:
        out_channels: the output width.
        in_channels: the width of float edge features (``None``: integer categories only).
        continuous_channels: how many leading float columns :meth:`fit` standardises, in
            ``[0, in_channels]``.
        num_categories: the number of categories of each integer column (an int for one
            column; ``None``: float features only). Give it, ``in_channels`` or both.
    """

    def __init__(
        self,
        out_channels: int,
        in_channels: Optional[int] = None,
        continuous_channels: int = 0,
        num_categories: Categories = None,
    ) -> None:
        super().__init__(
            out_channels, in_channels, continuous_channels, num_categories, name="edge_attr"
        )


class LaplacianPEEncoder(Module):
    """Projects the CLS Laplacian encoding (see :class:`et_graph.transforms.CLSLaplacianPE`) to the
    token space.

    In training mode each eigenvector's sign is flipped at random, once per eigenvector per graph
    (the CLS row and all node rows of a graph share the sign), because eigenvectors are defined
    only up to sign. In evaluation mode nothing is random.

    Args:
        k: the number of eigenvectors per node (the width of the encoding).
        out_channels: the token width.
    """

    def __init__(self, k: int, out_channels: int) -> None:
        super().__init__()
        if k <= 0 or out_channels <= 0:
            raise ValueError("k and out_channels must be positive")
        self.k = k
        self.out_channels = out_channels
        self.linear = Linear(k, out_channels)

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        self.linear.reset_parameters()

    def flip_signs(
        self, pe: Tensor, cls_pe: Tensor, batch: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """``(pe, cls_pe)`` with random per-graph, per-eigenvector signs (training mode only).

        Args:
            pe: the nodes' encodings ``[N, k]``, finite floating point.
            cls_pe: the CLS nodes' encodings ``[G, k]``, one row per graph.
            batch: each node's graph ``[N]`` (``None``: one graph).
        """
        if batch is None:
            batch = torch.zeros(pe.size(0), dtype=torch.long, device=pe.device)
        self._check(pe, cls_pe, batch)
        if not self.training:
            return pe, cls_pe
        signs = torch.randint(0, 2, cls_pe.shape, device=pe.device).to(pe.dtype) * 2 - 1
        return pe * signs[batch], cls_pe * signs

    def _check(self, pe: Tensor, cls_pe: Tensor, batch: Tensor) -> None:
        for name, value in (("lap_pe", pe), ("cls_lap_pe", cls_pe)):
            if value.dim() != 2 or value.size(1) != self.k:
                raise ValueError(f"{name} must be [*, k={self.k}], got {tuple(value.shape)}")
            if not value.is_floating_point() or not all_finite(value):
                raise ValueError(f"{name} must be finite floating point")
        check_batch(batch, pe.size(0))
        if pe.size(0) and int(batch.max()) >= cls_pe.size(0):
            raise ValueError(
                f"cls_lap_pe has {cls_pe.size(0)} rows but batch holds graph id {int(batch.max())}"
            )

    def forward(
        self, pe: Tensor, cls_pe: Tensor, batch: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """Node embeddings ``[N, out]`` and CLS embeddings ``[G, out]``.

        Args:
            pe, cls_pe, batch: as for :meth:`flip_signs`.
        """
        pe, cls_pe = self.flip_signs(pe, cls_pe, batch)
        weight_dtype = self.linear.weight.dtype
        return self.linear(pe.to(weight_dtype)), self.linear(cls_pe.to(weight_dtype))


class SumMessagePassing(Module):
    r"""Residual sum-aggregation layers that turn node embeddings into structure-aware tokens:

    .. math::
        h_i \leftarrow h_i + \mathrm{MLP}_l\Big(h_i + \sum_{j \in \mathcal{N}(i)} h_j\Big),
        \qquad l = 1, \dots, L,

    with :math:`\mathrm{MLP}_l = \mathrm{Linear} \to \mathrm{BatchNorm} \to \mathrm{ReLU} \to
    \mathrm{Linear}` (a GIN layer, Xu et al. 2019, with :math:`\epsilon = 0`, plus a skip).

    With ``edge_channels > 0`` every message also reads the encoded features :math:`e_{ji}` of
    its edge, in GINE's form (Hu et al. 2020):

    .. math::
        h_i \leftarrow h_i + \mathrm{MLP}_l\Big(h_i + \sum_{j \in \mathcal{N}(i)}
        \mathrm{ReLU}\big(h_j + W_l e_{ji}\big)\Big),

    so that a node's tokens can count its bonds *of each type* and tell which neighbour sits
    behind which bond, as the GINE and GatedGCN baselines' layers do (the mask only re-weights
    a softmax over the neighbours, and the incident sums lose which neighbour a bond leads to).

    ET's attention energy reads neighbours through a softmax, an average, which cannot count
    (an atom with three neighbours of one kind and an atom with one such neighbour look alike).
    A sum can; running a few such layers before the descent hands ET tokens that already tell
    those apart, the "local message passing, then global attention" split of GraphTrans and
    GraphGPS.

    Args:
        channels: the token width.
        num_layers: the number of layers ``L``.
        edge_channels: the width of the encoded edge features every message reads (0 = none).
    """

    def __init__(self, channels: int, num_layers: int, edge_channels: int = 0) -> None:
        super().__init__()
        if channels <= 0 or num_layers <= 0:
            raise ValueError(
                f"channels and num_layers must be positive, got {channels} and {num_layers}"
            )
        if edge_channels < 0:
            raise ValueError(f"edge_channels must be >= 0, got {edge_channels}")
        self.channels = channels
        self.edge_channels = edge_channels
        self.edge_linears = (
            ModuleList(Linear(edge_channels, channels) for _ in range(num_layers))
            if edge_channels else None
        )
        self.mlps = ModuleList(
            torch.nn.Sequential(
                Linear(channels, channels), torch.nn.BatchNorm1d(channels), torch.nn.ReLU(),
                Linear(channels, channels),
            )
            for _ in range(num_layers)
        )

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        for mlp in cast("Iterable[torch.nn.Sequential]", self.mlps):  # (a ModuleList's: Module)
            for layer in mlp:
                reset = getattr(layer, "reset_parameters", None)  # (ReLU has none)
                if reset is not None:
                    reset()
        for linear in cast("Iterable[Linear]", self.edge_linears or ()):
            linear.reset_parameters()

    def forward(self, h: Tensor, edge_index: Tensor,
                edge_features: Optional[Tensor] = None) -> Tensor:
        """``h`` ``[N, channels]`` after every layer; ``edge_index`` ``[2, E]`` (source, target)
        must already be validated (messages flow from ``edge_index[0]`` to ``edge_index[1]``);
        ``edge_features`` ``[E, edge_channels]`` exactly when the layers were built with
        ``edge_channels > 0``.

        Args:
            h: the node embeddings ``[N, channels]``.
            edge_index: the edges ``[2, E]``, validated already.
            edge_features: ``[E, edge_channels]``, or ``None`` for layers without them.
        """
        if h.dim() != 2 or h.size(1) != self.channels:
            raise ValueError(f"h must be [N, {self.channels}], got {tuple(h.shape)}")
        check_edge_features(edge_features, edge_index.size(1), self.edge_channels,
                            "edge_features", "these message-passing layers")
        if self.training and h.size(0) == 1:  # BatchNorm's own message named no cause
            raise ValueError("message-passing layers normalise over the batch's nodes "
                             "(BatchNorm), which a training batch of one node cannot do: drop "
                             "such a batch (DataLoader(drop_last=True)) or batch more graphs")
        source, target = edge_index[0], edge_index[1]
        for layer, mlp in enumerate(self.mlps):
            messages = h.index_select(0, source)
            if self.edge_linears is not None:
                messages = torch.relu(messages + self.edge_linears[layer](edge_features))
            summed = h.index_add(0, target, messages)
            h = h + mlp(summed)
        return h


class MeanMessagePassing(Module):
    r"""Residual mean-aggregation layers with separate ego and neighbour weights, for node
    tokens on large graphs:

    .. math::
        h_i \leftarrow h_i + W_{2,l}\,\mathrm{Dropout}\Big(\mathrm{ReLU}\big(W_{1,l}
        \big[\mathrm{LN}_l(h)_i \,\|\, \tfrac{1}{|\mathcal{N}(i)|}
        \textstyle\sum_{j \in \mathcal{N}(i)} \mathrm{LN}_l(h)_j\big]\big)\Big),
        \qquad l = 1, \dots, L,

    a pre-norm residual GraphSAGE layer whose ego and neighbour halves keep their own weights
    (the "-sep" variants that Platonov et al., ICLR 2023, found strongest on heterophilous graphs
    such as Tolokers). A mean rather than a sum: on graphs whose degrees run into the hundreds
    a sum's scale follows the degree, and the degree is a feature of its own
    (``--degree-feature``).

    The aggregation is the caller's ``neighbour_mean(tokens) -> [N, channels]`` (for
    :class:`~et_graph.nn.models.anomaly.ETAnomalyNet`, one product with its cached
    row-normalised adjacency), so that no ``[E, channels]`` gather is ever made.

    Args:
        channels: the token width.
        num_layers: the number of layers ``L``.
        dropout: the dropout inside each layer's MLP, in ``[0, 1)``.
    """

    def __init__(self, channels: int, num_layers: int, dropout: float = 0.0) -> None:
        super().__init__()
        if channels <= 0 or num_layers <= 0:
            raise ValueError(
                f"channels and num_layers must be positive, got {channels} and {num_layers}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.channels = channels
        self.norms = ModuleList(torch.nn.LayerNorm(channels) for _ in range(num_layers))
        self.mlps = ModuleList(
            torch.nn.Sequential(Linear(2 * channels, channels), torch.nn.ReLU(),
                                Dropout(dropout), Linear(channels, channels))
            for _ in range(num_layers)
        )

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        # (a ModuleList's items are typed Module)
        for norm in cast("Iterable[torch.nn.LayerNorm]", self.norms):
            norm.reset_parameters()
        for mlp in cast("Iterable[torch.nn.Sequential]", self.mlps):
            for layer in mlp:
                if isinstance(layer, Linear):
                    layer.reset_parameters()

    def forward(self, h: Tensor, neighbour_mean: Callable[[Tensor], Tensor],
                chunk_size: Optional[int] = None) -> Tensor:
        """``h`` ``[N, channels]`` after every layer; ``neighbour_mean`` maps ``[N, channels]``
        tokens to every node's mean in-neighbour token (zero for a node without one).

        ``chunk_size`` (inference, under ``torch.no_grad()``) applies each layer's MLP that many
        nodes at a time, so that no ``[N, 2 * channels]`` input is ever held; same result.

        Args:
            h: the node tokens ``[N, channels]``.
            neighbour_mean: the aggregation, ``[N, channels]`` to ``[N, channels]``.
            chunk_size: nodes per chunk (``None``: all at once); refused where gradients are
                enabled.
        """
        if h.dim() != 2 or h.size(1) != self.channels:
            raise ValueError(f"h must be [N, {self.channels}], got {tuple(h.shape)}")
        if chunk_size is not None:
            if torch.is_grad_enabled():
                raise ValueError("chunk_size is for inference: call under torch.no_grad()")
            chunk_size = check_chunk_size(chunk_size)
        for norm, mlp in zip(self.norms, self.mlps):
            normed = norm(h)
            neighbours = neighbour_mean(normed)
            if chunk_size is None:
                h = h + mlp(torch.cat([normed, neighbours], dim=-1))
                continue
            h = h.clone()
            for start in range(0, h.size(0), chunk_size):
                rows = slice(start, start + chunk_size)
                h[rows] += mlp(torch.cat([normed[rows], neighbours[rows]], dim=-1))
        return h
