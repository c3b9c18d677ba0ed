r"""The Energy Transformer energy as one module, shared by the sparse and the dense path.

:class:`ETEnergy` owns the parameters of the energy (the energy LayerNorm, :math:`W^K`,
:math:`W^Q`, the Hopfield memories :math:`\boldsymbol{\xi}` and the per-head inverse temperatures
:math:`\beta_h`) and evaluates the energy and its gradient with respect to
:math:`\mathbf{g} = \mathrm{LN}(\mathbf{x})`. The formulas themselves live in
:mod:`et_graph.energy` (the single source of truth); this module only binds them to parameters
and validated inputs. :class:`~et_graph.nn.ETConv` is the descent loop around one
:class:`ETEnergy`.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any, Callable, ClassVar, NamedTuple, Optional, TypeVar

import torch
from torch import Tensor
from torch.nn import Module, Parameter
from torch_geometric.typing import Adj
from torch_geometric.utils import is_sparse, to_edge_index

from ... import energy as E
from ...fused import (
    EdgePlan,
    build_edge_plan,
    fused_attention_grad,
    fused_offset_attention_grad,
)
from ...precision import autocast_off
from ..energy_layer_norm import EnergyLayerNorm
from ..validation import (
    check_dtype,
    check_edge_attr,
    check_edge_index,
    check_edge_weight,
    check_features,
    check_same_device,
    finite_weight_in,
    is_integral,
    is_real,
    layer_norm_limit,
)

Method = TypeVar("Method", bound=Callable[..., Any])


def in_parameter_precision(method: Method) -> Method:
    """Run a layer method (first argument: the tokens) with autocast off.

    The closed form mixes the projections (which autocast would run in bfloat16 or float16)
    with sums and softmaxes it keeps in float32, and scatters one into the other, so under
    ``torch.autocast`` it would fail or round the descent. The layers therefore compute in
    their parameters' dtype whatever the autocast state (the dtype rule of
    :meth:`ETEnergy.check_tokens`), and return tokens in the input's dtype; the layers
    around them keep their autocast."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The tokens, positional or by keyword (x, x_dense): their device names the autocast.
        tokens = args[0] if args else next(
            (value for value in kwargs.values() if isinstance(value, Tensor)), None)
        device_type = tokens.device.type if isinstance(tokens, Tensor) else "cpu"
        if device_type == "meta":  # (torch.autocast itself failed on it: "unsupported scalarType")
            raise NotImplementedError(
                f"{type(self).__name__} cannot run on the meta device: its input checks and "
                "its edge layout read the values. Build it under torch.device('meta') if you "
                "like, then to_empty(device=...) and reset_parameters() before calling it")
        with autocast_off(device_type):
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


class EdgeSet(NamedTuple):
    """Validated edges ``B -> C`` without self-loops, plus what explainers need to map back.

    Built by :meth:`ETEnergy.edges`; ``src``/``dst`` ``[E']`` are the kept edges, ``weight``
    their weights ``[E', 1 or H]`` (or ``None``), ``edge_index`` the caller's edges (self-loops
    included), ``kept`` a bool ``[E]`` marking the non-loop edges (``None`` when there were no
    loops), ``plan`` the sorted CSR layout of the fused kernel (``None`` unless requested) and
    ``attr`` the edges' features (``None`` without ``edge_dim``): the kept edges' ``[E', F]``,
    or, where self-loops were dropped, the caller's ``[E, F]`` with ``attr_rows [E']`` the
    kept edges' rows (increasing), from which the fused kernel makes its one sorted copy
    directly: a copy of the kept rows first was a fifth of a layer's step memory at F = 64.
    :meth:`kept_attr` gives ``[E', F]`` either way.
    """

    src: Tensor
    dst: Tensor
    weight: Optional[Tensor]
    edge_index: Tensor
    kept: Optional[Tensor]
    plan: Optional[EdgePlan] = None
    attr: Optional[Tensor] = None
    attr_rows: Optional[Tensor] = None

    def kept_attr(self) -> Optional[Tensor]:
        """The kept edges' features ``[E', F]`` (``None`` without features)."""
        if self.attr is None or self.attr_rows is None:
            return self.attr
        return self.attr.index_select(0, self.attr_rows)

    @property
    def num_edges(self) -> int:
        """Number of edges that enter the energy (self-loops removed)."""
        return self.src.numel()


def _check_positive(value: float, name: str) -> float:
    if not is_real(value):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


class ETEnergy(Module):
    r"""The energy :math:`E = E_{ATT} + E_{HN}` of the Energy Transformer as a function of
    :math:`\mathbf{g} = \mathrm{LN}(\mathbf{x})`, with its parameters.

    With :math:`\mathbf{k}_{hB} = W^K_h \mathbf{g}_B` and :math:`\mathbf{q}_{hC} = W^Q_h
    \mathbf{g}_C`,

    .. math::
        E_{ATT} = -\sum_h \frac{1}{\beta_h} \sum_{C} \log \sum_{B \in \mathcal{N}(C)}
        \exp\left(\beta_h\, w_{BCh}\, (\mathbf{k}_{hB} + W^E_h \mathbf{f}_{BC})^\top
        \mathbf{q}_{hC}\right),
        \qquad
        E_{HN} = -\sum_B \sum_\mu \tfrac12 \mathrm{relu}(\boldsymbol{\xi}_\mu^\top
        \mathbf{g}_B)^2
        \quad\text{or}\quad
        -\sum_B \tfrac{1}{b}\log\sum_\mu \exp(b\,\boldsymbol{\xi}_\mu^\top \mathbf{g}_B).

    The sparse path takes the neighbourhoods :math:`\mathcal{N}(C)` from an
    :class:`EdgeSet` (:meth:`edges`); the dense path from a bool mask ``[B, M, M]`` over all
    pairs of tokens (:meth:`dense_edges`). Every ``*_of_g`` method returns per-node (per-token)
    shares, so totals and per-graph energies come from the same code, and :meth:`grad_of_g`
    (closed form, paper eq. 17) equals :meth:`autograd_grad_of_g` (``torch.autograd.grad`` of
    :meth:`node_energy_of_g`).

    Calling the module, ``energy(g, edges)``, returns :meth:`node_energy_of_g`.

    **A new energy term** goes into a subclass that overrides :meth:`node_energy_of_g` (and
    :meth:`dense_node_energy_of_g` for the dense path); swap it in as ``conv.energy_fn``. The
    layer then descends it with ``grad="autograd"``. The default ``grad="analytic"`` runs
    this class's closed form, which knows only the built-in terms, so it refuses such a
    subclass unless it also writes the term's closed form: in :meth:`grad_from_attention_grads`,
    which every path's step ends in (:meth:`grad_of_g`, the unfused and explainer paths and
    :meth:`dense_grad_of_g` call it; override :meth:`grad_of_g` as well and the term counts
    twice), or in :meth:`grad_of_g` alone for the fused path only. At an object's first descent
    on a path (and dtype) the layer compares the closed form with autograd of the energy at a
    random point and refuses a mismatch; :meth:`closed_form_error` measures it in float64. A
    new attention (another kernel) overrides :meth:`attention_grads`, which the message path
    (``fused=False``, message hooks, explainers) never calls, so that path refuses it; a new
    Hopfield term's closed form is :meth:`hopfield_grad_of_g`.

    Args:
        channels: token width ``D``.
        heads: attention heads ``H``.
        head_dim: width ``Y`` of each key/query.
        hopfield_dim: number ``K >= 0`` of Hopfield memories (default ``4 * channels``).
        hopfield: ``"relu"`` or ``"softmax"``.
        hopfield_beta: inverse temperature ``b > 0`` of the ``"softmax"`` Hopfield energy.
        beta_init: initial per-head inverse temperature ``> 0`` (default ``1 / sqrt(head_dim)``).
        eps: LayerNorm epsilon.
        coupling: add the edge coupling energy :math:`E_{GC} = -\tfrac12 \sum_{e=(B\to C)}
            \mathbf{g}_B^\top W \mathbf{g}_C` (:func:`et_graph.energy.coupling_energy`) with a
            learned symmetric ``W [D, D]``, initialised to zero (so the layer starts as the
            plain ET). Its gradient sums the neighbours' tokens, so the descent can count
            neighbours, which the attention's softmax average cannot. It ignores edge weights
            and exists on the sparse path only.
        edge_dim: width ``F`` of edge features ``f_BC`` (``edge_attr [E, F]``), or ``None``
            (the default: no edge features, the paper's energy). Each edge's features offset
            the key its source offers by ``W^E_h f_BC`` (a learned ``w_edge [H, Y, F]``), as in
            ``TransformerConv(edge_dim=...)``; the offset does not depend on the tokens, so the
            energy stays a function of ``g`` with the closed form of
            :func:`et_graph.energy.attention_grad` (and the fused kernel's form,
            :func:`et_graph.fused.fused_offset_attention_grad`). Sparse path only.
    """

    # Registered with register_parameter (None without coupling / edge_dim), which mypy does
    # not see.
    coupling_raw: Optional[Parameter]
    w_edge: Optional[Parameter]
    # Set per subclass by _class_verdicts, in the class's own __dict__ (never inherited).
    _closed_form_class_verdicts: ClassVar[dict[tuple[Any, ...], str]]

    def __init__(
        self,
        channels: int,
        heads: int = 4,
        head_dim: int = 16,
        hopfield_dim: Optional[int] = None,
        hopfield: str = "relu",
        hopfield_beta: float = 1.0,
        beta_init: Optional[float] = None,
        eps: float = 1e-5,
        coupling: bool = False,
        edge_dim: Optional[int] = None,
    ) -> None:
        super().__init__()
        if not isinstance(coupling, bool):
            raise ValueError(f"coupling must be True or False, got {coupling!r}")
        if edge_dim is not None and (not is_integral(edge_dim) or edge_dim <= 0):
            raise ValueError(f"edge_dim must be a positive int or None, got {edge_dim!r}")
        for name, value in (("channels", channels), ("heads", heads), ("head_dim", head_dim)):
            if not is_integral(value) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        hopfield_dim = 4 * channels if hopfield_dim is None else hopfield_dim
        if (
            not is_integral(hopfield_dim)
            or hopfield_dim < 0
        ):
            raise ValueError(f"hopfield_dim must be an int >= 0, got {hopfield_dim!r}")
        if hopfield not in E.HOPFIELD_KINDS:
            raise ValueError(f"hopfield must be one of {E.HOPFIELD_KINDS}, got {hopfield!r}")
        if hopfield == "softmax" and hopfield_dim == 0:
            raise ValueError("hopfield='softmax' needs hopfield_dim >= 1 memories")
        self.channels = int(channels)
        self.heads = int(heads)
        self.head_dim = int(head_dim)
        self.hopfield_dim = int(hopfield_dim)
        self.hopfield = hopfield
        self.hopfield_beta = _check_positive(hopfield_beta, "hopfield_beta")
        self.beta_init = _check_positive(
            1.0 / math.sqrt(head_dim) if beta_init is None else beta_init, "beta_init"
        )

        self.norm = EnergyLayerNorm(self.channels, eps=eps)
        self.w_k = Parameter(torch.empty(self.heads, self.head_dim, self.channels))
        self.w_q = Parameter(torch.empty(self.heads, self.head_dim, self.channels))
        self.xi = Parameter(torch.empty(self.hopfield_dim, self.channels))
        self.log_beta = Parameter(torch.empty(self.heads))
        # W = (M + M^T) / 2 keeps the coupling symmetric, which its closed-form gradient assumes.
        self.register_parameter(
            "coupling_raw",
            Parameter(torch.empty(self.channels, self.channels)) if coupling else None,
        )
        self.register_parameter(
            "w_edge",
            None if edge_dim is None
            else Parameter(torch.empty(self.heads, self.head_dim, int(edge_dim))),
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        self.norm.reset_parameters()
        std = 1.0 / math.sqrt(self.channels)
        torch.nn.init.normal_(self.w_k, std=std)
        torch.nn.init.normal_(self.w_q, std=std)
        torch.nn.init.normal_(self.xi, std=std)
        with torch.no_grad():
            self.log_beta.fill_(math.log(self.beta_init))
            if self.coupling_raw is not None:
                self.coupling_raw.zero_()
        if self.w_edge is not None:
            # keys are about unit-sized (g's channels are, W_K's rows have norm about 1); a
            # unit-sized feature row then offsets them by about as much
            torch.nn.init.normal_(self.w_edge, std=1.0 / math.sqrt(self.w_edge.size(-1)))

    @property
    def coupling(self) -> bool:
        """Whether the edge coupling energy is on (it is when its parameter exists)."""
        return self.coupling_raw is not None

    @property
    def coupling_matrix(self) -> Optional[Tensor]:
        """The symmetric edge coupling ``W [D, D]`` (``None`` without ``coupling``)."""
        raw = self.coupling_raw
        return None if raw is None else (raw + raw.t()) * 0.5

    def refuse_coupling(self) -> None:
        """Raise ``NotImplementedError`` on the paths the coupling does not exist on (the dense
        path and chunked inference) when it is on."""
        if self.coupling:
            raise NotImplementedError(
                "the edge coupling energy exists on the sparse (edge_index) path only; build "
                "the layer with coupling=False for the dense path or chunked inference"
            )

    @property
    def edge_dim(self) -> Optional[int]:
        """Width ``F`` of the edge features (``None``: the energy takes none)."""
        return None if self.w_edge is None else self.w_edge.size(-1)

    def key_offsets(self, edges: EdgeSet) -> Optional[Tensor]:
        """The key offsets ``[E', H, Y]`` of ``edges``' features (``None`` without them;
        :meth:`check_edge_features` first)."""
        self.check_edge_features(edges)
        attr = edges.kept_attr()
        if attr is None or self.w_edge is None:
            return None
        return E.edge_key_offsets(attr, self.w_edge)

    def check_edge_features(self, edges: EdgeSet) -> None:
        """``ValueError`` when ``edges`` (built beforehand, by hand or through
        :meth:`topology` and :meth:`weighted`) lack the features this energy reads
        (``edge_dim``), or carry some it would ignore: either ran silently as the other
        energy."""
        width = None if edges.attr is None else edges.attr.size(-1)
        edge_dim = self.edge_dim
        if width == edge_dim:
            return
        if edge_dim is None:
            raise ValueError(
                f"the edges carry edge features ([E, {width}]) but the energy was built "
                f"without edge_dim, so it would ignore them: build the layer with "
                f"edge_dim={width}, or the edges without edge_attr")
        raise ValueError(
            f"the layer was built with edge_dim={edge_dim} but the edges carry "
            + ("no edge features" if width is None else f"[E, {width}] features")
            + f": build them with energy_fn.edges(..., edge_attr=[E, {edge_dim}]) (or "
            "energy_fn.featured(...) after weighted)")

    def refuse_edge_features(self) -> None:
        """Raise ``NotImplementedError`` on the dense path (all pairs of tokens, no edges)
        when the energy takes edge features (``edge_dim``): it would descend an energy
        without its edge term."""
        if self.edge_dim is not None:
            raise NotImplementedError(
                f"edge features (edge_dim={self.edge_dim}) exist on the sparse paths only "
                "(forward or forward_chunked, with edge_index and edge_attr); build the layer "
                "without edge_dim for the dense path")

    @property
    def beta(self) -> Tensor:
        """Per-head inverse temperature ``[H]``, positive by construction."""
        return self.log_beta.exp()

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the parameters, in which everything is computed."""
        return self.w_k.dtype

    # ----------------------------------------------------------------------------------------
    # Inputs
    # ----------------------------------------------------------------------------------------
    def check_tokens(self, x: Tensor, ndim: int = 2, name: str = "x") -> Tensor:
        """Validate tokens ``x`` (``[N, D]``, or ``[B, M, D]`` with ``ndim=3``) and return them
        in the parameters' dtype.

        Dtype rule: inputs of lower precision than the parameters (e.g. bfloat16 or float16
        on a float32 layer, float32 on a float64 layer) are upcast; callers return results in
        the input's dtype. Inputs of *higher* precision (float64 on a float32 layer) raise
        ``ValueError`` instead of being silently rounded.
        """
        # One min/max pass checks both that the values are finite and that the LayerNorm can
        # centre and square them in this dtype (layer_norm_limit).
        check_features(x, self.channels, name=name, ndim=ndim,
                       limit=layer_norm_limit(self.dtype, self.channels))
        check_dtype(x, self.dtype, name=name)
        return x.to(self.dtype)

    def layer_norm(self, x: Tensor) -> Tensor:
        """``g = self.norm(x)`` through PyTorch's fused LayerNorm kernel: the same formula (scalar
        gain expanded over the channels), one op each way instead of about ten."""
        norm = self.norm
        if type(norm) is not EnergyLayerNorm or x.dtype != norm.delta.dtype:
            return norm(x)
        gain = norm.gamma.expand(self.channels)
        return torch.nn.functional.layer_norm(x, (self.channels,), gain, norm.delta, norm.eps)

    def keys_queries(self, g: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and queries ``(k, q)``, each ``[..., H, Y]``, of ``g [..., D]`` (one matmul)."""
        shape = g.shape[:-1] + (self.heads, self.head_dim)
        weights = torch.cat([self.w_k, self.w_q], dim=0).reshape(-1, self.channels)
        kq = g @ weights.t()
        k, q = kq.split(self.heads * self.head_dim, dim=-1)
        return k.reshape(shape), q.reshape(shape)

    def edges(
        self,
        x: Tensor,
        edge_index: Adj,
        edge_weight: Optional[Tensor] = None,
        plan: bool = False,
        edge_attr: Optional[Tensor] = None,
    ) -> EdgeSet:
        """Validated edges of ``edge_index`` (``[2, E]``, a torch sparse ``adj_t`` or a
        ``SparseTensor``) for the tokens ``x [N, D]``, self-loops removed, weights ``[E', 1 or H]``
        and features (``edge_attr``, with ``edge_dim``; required then: ``attr`` and
        ``attr_rows``, :class:`EdgeSet`) in ``x``'s dtype. ``plan=True`` also builds the
        sorted layout that the fused kernel reuses across calls on the same edges (worth it
        when several gradients are taken)."""
        num_nodes = x.size(0)
        check_same_device(x, edge_index=edge_index, edge_weight=edge_weight,
                          edge_attr=edge_attr)
        if is_sparse(edge_index):
            if edge_weight is not None:
                raise ValueError(
                    "pass edge weights as the values of the sparse adjacency, not as edge_weight"
                )
            if self.edge_dim is not None:
                raise ValueError(
                    "edge features need an edge_index [2, E] beside edge_attr [E, F]: a sparse "
                    "adjacency has no edge order to align them with")
            # size(dim) works on torch sparse tensors and on torch_sparse's SparseTensor, whose
            # size() needs a dim.
            shape = (edge_index.size(0), edge_index.size(1))
            if shape != (num_nodes, num_nodes):
                raise ValueError(
                    f"sparse adjacency must be [{num_nodes}, {num_nodes}], got {shape}"
                )
            # PyG convention: the sparse input is adj_t, rows are destinations.
            if isinstance(edge_index, Tensor) and edge_index.layout == torch.sparse_coo:
                # The matrix the tensor stands for, as torch reads it: a pair stored twice is one
                # entry holding the sum. coalesce() makes a (differentiable) copy; PyG's
                # to_edge_index would flag the caller's own tensor coalesced in place instead,
                # which corrupts its later use (and has no derivative).
                matrix = edge_index.coalesce()
                index, values = matrix.indices(), matrix.values()
            else:
                index, values = to_edge_index(edge_index)
            edge_index = index.flip(0)
            # All-ones values are a plain adjacency, unless a gradient must reach them
            # (learnable weights initialised to 1 lost theirs).
            if values is not None and (values.requires_grad or not bool((values == 1).all())):
                edge_weight = values.to(x.dtype)
        return self.featured(self.weighted(self.topology(x, edge_index, plan), edge_weight,
                                           x.dtype), edge_attr, x.dtype)

    def topology(self, x: Tensor, edge_index: Tensor, plan: bool = False) -> EdgeSet:
        """The weightless part of :meth:`edges` for an ``edge_index [2, E]`` over the tokens
        ``x [N, D]``: validated, self-loops removed and (``plan=True``) sorted for the fused
        kernel. It depends on the graph alone, so a caller that sees the same graph again can
        keep it (``ETConv(cached=True)``) and give each call its weights by :meth:`weighted`."""
        num_nodes = x.size(0)
        edge_index = check_edge_index(edge_index, num_nodes)
        src, dst = edge_index[0], edge_index[1]
        not_loop: Tensor = src != dst
        kept: Optional[Tensor] = None
        if not bool(not_loop.all()):
            kept = not_loop
            src, dst = src[kept], dst[kept]
        layout = None
        if plan and src.numel() and num_nodes:
            layout = build_edge_plan(src, dst, num_nodes, self.heads)
        return EdgeSet(src, dst, None, edge_index, kept, layout)

    def weighted(
        self, topology: EdgeSet, edge_weight: Optional[Tensor], dtype: torch.dtype
    ) -> EdgeSet:
        """``topology`` (from :meth:`topology`) with the caller's ``edge_weight`` (``[E]`` or
        ``[E, heads]``, one per edge of ``topology.edge_index``) validated, its self-loop rows
        dropped and cast to ``dtype``: ``[E', 1 or H]``."""
        edge_weight = check_edge_weight(edge_weight, topology.edge_index.size(1), self.heads,
                                        dtype)
        if edge_weight is None:
            return topology
        if topology.kept is not None:
            edge_weight = edge_weight[topology.kept]
        return topology._replace(weight=edge_weight)

    def featured(
        self, edges: EdgeSet, edge_attr: Optional[Tensor], dtype: torch.dtype
    ) -> EdgeSet:
        """``edges`` (from :meth:`weighted`) with the caller's ``edge_attr`` (``[E, F]``, one
        row per edge of ``edges.edge_index``) validated and cast to ``dtype``; where self-loops
        were dropped, ``attr_rows`` names the kept rows (:meth:`EdgeSet.kept_attr`). Required
        with ``edge_dim``, refused without it."""
        edge_attr = check_edge_attr(edge_attr, edges.edge_index.size(1), self.edge_dim, dtype,
                                    owner="the layer")
        if edge_attr is None:
            return edges
        if edges.kept is not None:  # no copy of the kept rows (the class's docstring)
            return edges._replace(attr=edge_attr, attr_rows=edges.kept.nonzero().view(-1))
        return edges._replace(attr=edge_attr)

    def dense_edges(
        self, x: Tensor, mask: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None
    ) -> tuple[Tensor, Optional[Tensor]]:
        """Validated dense neighbourhoods of tokens ``x [B, M, D]``: the bool mask ``[B, M, M]``
        (``mask[b, C, B]`` = token ``C`` attends to token ``B``; ``None`` = all pairs; the
        diagonal is always removed; a node mask ``[B, M]``, as ``to_dense_batch`` returns it,
        means all pairs of real tokens) and the weights ``[B, 1 or H, M, M]`` in ``x``'s
        dtype."""
        check_features(x, self.channels, ndim=3)
        batch, tokens = x.size(0), x.size(1)
        eye = torch.eye(tokens, dtype=torch.bool, device=x.device)
        if mask is None:
            mask = ~eye.expand(batch, tokens, tokens)
        else:
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
                dtype = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
                raise ValueError(f"mask must be a bool tensor, got {dtype}")
            if tuple(mask.shape) == (batch, tokens):
                # A node mask, as torch_geometric.utils.to_dense_batch returns it: real tokens
                # attend to real tokens only. Without it (mask=None) padding took part.
                mask = mask[:, :, None] & mask[:, None, :]
            if tuple(mask.shape) != (batch, tokens, tokens):
                raise ValueError(
                    f"mask must have shape [B, M, M]={[batch, tokens, tokens]}, "
                    f"got {list(mask.shape)}"
                )
            mask = mask & ~eye
        if edge_weight is not None:
            if not isinstance(edge_weight, Tensor):
                raise ValueError(
                    f"edge_weight must be a torch.Tensor, got {type(edge_weight).__name__}"
                )
            if edge_weight.dim() == 3:
                edge_weight = edge_weight.unsqueeze(1)
            if (
                edge_weight.dim() != 4
                or tuple(edge_weight.shape[2:]) != (tokens, tokens)
                or (edge_weight.size(0) != batch or edge_weight.size(1) not in (1, self.heads))
            ):
                raise ValueError(
                    f"dense edge_weight must have shape [B, heads, M, M]="
                    f"{[batch, self.heads, tokens, tokens]}, got {list(edge_weight.shape)}"
                )
            if edge_weight.dtype == torch.bool:  # (as on the sparse path: a mask is no weight)
                raise ValueError("dense edge_weight is a boolean mask, but a weight scales a "
                                 "pair's attention logit (0 keeps the pair): pass it as mask")
            edge_weight = finite_weight_in(edge_weight, x.dtype)
        return mask, edge_weight

    # ----------------------------------------------------------------------------------------
    # Energy (per node) of g
    # ----------------------------------------------------------------------------------------
    def check_closed_form(self, path: str = "fused") -> None:
        """``ValueError`` when this is a subclass whose energy the closed form of ``path``
        (``"fused"``, ``"unfused"``: the propagate and explainer path, ``"dense"``,
        ``"relational"``) does not know: it overrides an energy method that path reports but
        none of the gradient methods it steps with, so the analytic descent would descend the
        built-in energy while the energies reported include the new term."""
        patched = any(callable(vars(self).get(name)) for name in _WATCHED)
        reason: Optional[str]
        if patched:
            # a method replaced on this object (types.MethodType) passed the class's check
            reason = _unmatched_energy_override(self, path)
        else:
            # The class's methods are part of the key: one patched after a first check was
            # descended unchecked (an audit)
            key = (path, *(getattr(type(self), name) for name in _WATCHED))
            verdicts = _class_verdicts(type(self))
            reason = verdicts.get(key)
            if reason is None:
                reason = verdicts[key] = _unmatched_energy_override(type(self), path)
        if not reason and (patched or type(self) is not ETEnergy):
            reason = self._probed_closed_form(path)
        if reason:
            raise ValueError(reason)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # an energy pickled before edge features existed has no w_edge entry (a layer saved
        # whole in a detector's file then failed on its first forward: a review)
        self._parameters.setdefault("w_edge", None)

    def __getstate__(self) -> dict[str, Any]:
        # The probe's verdicts are keyed by method objects, which need not pickle (a lambda
        # patched on a class); a copy probes again, once.
        state = super().__getstate__()
        state.pop("_closed_form_verdicts", None)
        return state

    def _probed_closed_form(self, path: str) -> str:
        """The verdict of :func:`_closed_form_mismatch` for this object, ``path`` and dtype,
        probed once and kept on the object (per object: a closed form that forgets a
        constructor setting is right for one value of it only). Its methods (patched ones
        included) are part of the key, so that a replaced one is probed again."""
        key = (path, _placement(self)[0], *(vars(self).get(name) or getattr(type(self), name)
                              for name in _WATCHED))
        verdicts = self.__dict__.setdefault("_closed_form_verdicts", {})
        reason = verdicts.get(key)
        if reason is None:
            reason = _closed_form_mismatch(self, path)
            if reason is None:  # not here (inference mode, a transform): at a later call
                return ""
            verdicts[key] = reason
        return reason

    def check_dense_energy(self) -> None:
        """``ValueError`` for a subclass whose new term the dense path would drop: it overrides
        :meth:`node_energy_of_g` but not :meth:`dense_node_energy_of_g`, which the dense path
        (all pairs of tokens) descends and reports instead, under ``grad="autograd"`` too."""
        if _overrides(self, "node_energy_of_g") and not _overrides(self,
                                                                    "dense_node_energy_of_g"):
            raise ValueError(
                f"{type(self).__name__} overrides node_energy_of_g but not "
                "dense_node_energy_of_g, which the dense path reads instead: override it too, "
                "or the dense path descends and reports the built-in energy")

    def check_builtin_energy(self, where: str,
                             names: Optional[tuple[str, ...]] = None) -> None:
        """``ValueError`` for a subclass that overrides any of ``names`` (default: every energy
        method and ``keys_queries``) in ``where``, a path that writes the built-in energy out
        by hand (no closed form to override)."""
        own = [name for name in names or (*_ENERGY_METHODS, "keys_queries")
               if _overrides(self, name)]
        if own:
            raise ValueError(f"{where} descends the built-in energy by hand, and "
                             f"{type(self).__name__} overrides {', '.join(own)}: use forward")

    def hopfield_energy_of_g(self, g: Tensor) -> Tensor:
        """Per-token Hopfield energy ``[...]`` of ``g [..., D]``."""
        return E.hopfield_energy(g, self.xi, self.hopfield, self.hopfield_beta)

    def node_energy_of_g(self, g: Tensor, edges: EdgeSet) -> Tensor:
        """Each node's share of the energy ``[N]``: its attention term (as a destination) plus
        its Hopfield term (and, with ``coupling``, each edge's coupling term at its
        destination)."""
        k, q = self.keys_queries(g)
        att = E.attention_energy(k, q, edges.src, edges.dst, self.beta, edges.weight, g.size(0),
                                 self.key_offsets(edges))
        energy = att + self.hopfield_energy_of_g(g)
        coupling = self.coupling_matrix  # (None without coupling)
        if coupling is not None:
            energy = energy + E.coupling_energy(g, edges.src, edges.dst, coupling)
        return energy

    def forward(self, g: Tensor, edges: EdgeSet) -> Tensor:
        """:meth:`node_energy_of_g`: the per-node energy ``[N]`` of ``g``."""
        return self.node_energy_of_g(g, edges)

    def dense_node_energy_of_g(
        self, g: Tensor, mask: Tensor, weight: Optional[Tensor] = None
    ) -> Tensor:
        """Each token's share of the energy ``[B, M]`` on the dense path (``mask`` and
        ``weight`` from :meth:`dense_edges`)."""
        self.refuse_coupling()
        self.refuse_edge_features()
        k, q = self.keys_queries(g)
        att = E.dense_attention_energy(k, q, self.beta, mask, weight)
        return att + self.hopfield_energy_of_g(g)

    # ----------------------------------------------------------------------------------------
    # Gradient dE/dg
    # ----------------------------------------------------------------------------------------
    def attention_grad_to_g(self, grad_k: Tensor, grad_q: Tensor) -> Tensor:
        """``(dE/dk) W_K + (dE/dq) W_Q``: the attention part of ``dE/dg`` as ``[tokens, D]``
        (tokens flattened) from the gradients with respect to the keys and queries."""
        width = self.heads * self.head_dim
        rows = grad_k.numel() // width
        out = torch.mm(grad_k.reshape(rows, width), self.w_k.reshape(width, self.channels))
        return torch.addmm(
            out, grad_q.reshape(rows, width), self.w_q.reshape(width, self.channels)
        )

    def grad_from_attention_grads(
        self, g: Tensor, grad_k: Tensor, grad_q: Tensor, edges: Optional[EdgeSet] = None
    ) -> Tensor:
        """``dE/dg`` (shape of ``g``) from the attention gradients with respect to keys and
        queries plus the Hopfield term, accumulated into one buffer (addmm) so that no
        ``[tokens, hopfield_dim]`` tensor is negated or copied; with ``coupling``, plus the
        edge coupling's gradient over ``edges`` (required then). A subclass's
        :meth:`hopfield_grad_of_g` is its Hopfield term here too."""
        out = self.attention_grad_to_g(grad_k, grad_q)
        if _overrides(self, "hopfield_grad_of_g"):
            # (the built-in activation here made the attention and Hopfield split of a new
            # Hopfield energy disagree with the descent)
            grad = out.view(g.shape) + self.hopfield_grad_of_g(g)
        else:
            activation = E.hopfield_activation(
                g.reshape(-1, self.channels), self.xi, self.hopfield, self.hopfield_beta
            )
            # Negating xi [K, D] rather than the product keeps the sign off the [N, K] backward.
            grad = torch.addmm(out, activation, self.xi.neg()).view(g.shape)
        coupling = self.coupling_matrix  # (None without coupling)
        if coupling is None:
            return grad
        if edges is None:
            raise ValueError("the edge coupling's gradient needs the edges: pass edges=")
        return grad + E.coupling_grad(g, edges.src, edges.dst, coupling)

    def attention_grads(
        self, k: Tensor, q: Tensor, edges: EdgeSet, fused: bool = True
    ) -> tuple[Tensor, Tensor]:
        """Closed form of ``(dE_ATT/dk, dE_ATT/dq)``, each ``[N, H, Y]``: the fused CSR kernel
        (``fused=True``, reusing ``edges.plan``) or the reference :func:`et_graph.energy.
        attention_grad`. Edges with features take the fused kernel's form with key offsets
        (:func:`et_graph.fused.fused_offset_attention_grad`)."""
        self.check_edge_features(edges)
        if fused and edges.attr is not None and self.w_edge is not None:
            return fused_offset_attention_grad(
                k, q, edges.src, edges.dst, self.beta, edges.weight, edges.attr, self.w_edge,
                edges.plan, attr_rows=edges.attr_rows)
        if fused:
            return fused_attention_grad(
                k, q, edges.src, edges.dst, self.beta, edges.weight, edges.plan
            )
        return E.attention_grad(k, q, edges.src, edges.dst, self.beta, edges.weight, k.size(0),
                                self.key_offsets(edges))

    def grad_of_g(self, g: Tensor, edges: EdgeSet, fused: bool = True) -> Tensor:
        r"""Closed form of :math:`\partial E/\partial \mathbf{g}` ``[N, D]`` (paper eq. 17)."""
        k, q = self.keys_queries(g)
        grad_k, grad_q = self.attention_grads(k, q, edges, fused)
        return self.grad_from_attention_grads(g, grad_k, grad_q, edges)

    def autograd_grad_of_g(self, g: Tensor, edges: EdgeSet) -> Tensor:
        """The reference ``dE/dg``: ``torch.autograd.grad`` of :meth:`node_energy_of_g`."""
        return _autograd_grad(g, lambda g: self.node_energy_of_g(g, edges))

    def closed_form_error(self, g: Tensor, edges: EdgeSet, fused: bool = False) -> float:
        """The largest difference between the closed form (:meth:`grad_of_g`) and autograd of
        :meth:`node_energy_of_g` at ``g``, relative to the largest entry of the latter: the
        check a subclass's closed form should pass, in float64 (about 1e-12 for the built-in
        terms). Both are evaluated as they are; call it on a float64 copy
        (``energy.double()``, ``g.double()``)."""
        return _relative_gap(self.grad_of_g(g, edges, fused=fused),
                             self.autograd_grad_of_g(g, edges))

    def dense_grad_of_g(self, g: Tensor, mask: Tensor, weight: Optional[Tensor] = None) -> Tensor:
        """Closed form of ``dE/dg`` ``[B, M, D]`` on the dense path."""
        self.refuse_coupling()
        self.refuse_edge_features()
        k, q = self.keys_queries(g)
        grad_k, grad_q = E.dense_attention_grad(k, q, self.beta, mask, weight)
        return self.grad_from_attention_grads(g, grad_k, grad_q)

    def dense_autograd_grad_of_g(
        self, g: Tensor, mask: Tensor, weight: Optional[Tensor] = None
    ) -> Tensor:
        """The reference ``dE/dg`` on the dense path: autograd of
        :meth:`dense_node_energy_of_g`."""
        return _autograd_grad(g, lambda g: self.dense_node_energy_of_g(g, mask, weight))

    def hopfield_grad_of_g(self, g: Tensor) -> Tensor:
        """``dE_HN/dg = -r(g xi^T) xi`` (paper eq. 9), shape of ``g``."""
        return E.hopfield_grad(g, self.xi, self.hopfield, self.hopfield_beta)

    def attention_and_hopfield_grads(
        self, g: Tensor, edges: EdgeSet, fused: bool = True
    ) -> tuple[Tensor, Tensor]:
        """The two parts of ``dE/dg``, ``(attention, hopfield)``, each ``[N, D]``: used to see
        which term drives which node. They sum to :meth:`grad_of_g` (without ``coupling``,
        whose share is :func:`et_graph.energy.coupling_grad`)."""
        k, q = self.keys_queries(g)
        grad_k, grad_q = self.attention_grads(k, q, edges, fused)
        attention = self.attention_grad_to_g(grad_k, grad_q).view(g.shape)
        # A new term's closed form written in the step: the rest of the step is its share
        # (the Hopfield gradient alone did not sum to the step with it, even a new one's)
        if _overrides(self, "grad_of_g"):
            return attention, self.grad_of_g(g, edges, fused) - attention
        if _overrides(self, "grad_from_attention_grads"):
            return attention, self.grad_from_attention_grads(g, grad_k, grad_q, edges) - attention
        return attention, self.hopfield_grad_of_g(g)

    def dense_attention_and_hopfield_grads(
        self, g: Tensor, mask: Tensor, weight: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """The two parts of ``dE/dg`` on the dense path, ``(attention, hopfield)``, each
        ``[B, M, D]``. They sum to :meth:`dense_grad_of_g` (a new term's share is in the
        second, as on the sparse path: an audit found it dropped)."""
        self.refuse_coupling()
        self.refuse_edge_features()
        k, q = self.keys_queries(g)
        grad_k, grad_q = E.dense_attention_grad(k, q, self.beta, mask, weight)
        attention = self.attention_grad_to_g(grad_k, grad_q).view(g.shape)
        if _overrides(self, "dense_grad_of_g"):
            return attention, self.dense_grad_of_g(g, mask, weight) - attention
        if _overrides(self, "grad_from_attention_grads"):
            return attention, self.grad_from_attention_grads(g, grad_k, grad_q) - attention
        return attention, self.hopfield_grad_of_g(g)

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, heads={self.heads}, head_dim={self.head_dim}, "
            f"hopfield_dim={self.hopfield_dim}, hopfield={self.hopfield!r}"
            + (", coupling=True" if self.coupling else "")
            + (f", edge_dim={self.edge_dim}" if self.edge_dim is not None else "")
        )


_ENERGY_METHODS = ("node_energy_of_g", "hopfield_energy_of_g", "dense_node_energy_of_g",
                   "forward")
#: Per descent path: the energy methods it reports and the closed-form methods it steps with
#: (grad_of_g and dense_grad_of_g call grad_from_attention_grads, so an override there counts).
#: (keys_queries: a non-linear key map changes the chain rule that attention_grad_to_g writes)
#: (attention_grads: grad_of_g calls it; hopfield_grad_of_g: grad_from_attention_grads does)
_PATHS = {
    "fused": (("node_energy_of_g", "hopfield_energy_of_g", "forward", "keys_queries"),
              ("grad_of_g", "attention_grads", "grad_from_attention_grads",
               "attention_grad_to_g", "hopfield_grad_of_g")),
    "unfused": (("node_energy_of_g", "hopfield_energy_of_g", "forward", "keys_queries"),
                ("grad_from_attention_grads", "attention_grad_to_g", "hopfield_grad_of_g")),
    "dense": (("dense_node_energy_of_g", "hopfield_energy_of_g", "keys_queries"),
              ("dense_grad_of_g", "grad_from_attention_grads", "attention_grad_to_g",
               "hopfield_grad_of_g")),
    "relational": (("hopfield_energy_of_g",), ("grad_from_attention_grads", "hopfield_grad_of_g")),
}
#: Per path: closed forms of the attention that the path never calls. The message path
#: (``fused=False``, message hooks, explainers) computes the dot-product attention's edge
#: coefficients itself, so a new attention closed form there would be skipped without a word.
_BYPASSED = {"unfused": ("attention_grads",)}
#: Closed forms that cover only some energy methods: a Hopfield gradient covers the Hopfield
#: energy alone, and a new attention's gradient the attention (not a new key map, whose chain
#: rule attention_grad_to_g writes). Any other closed form covers every energy method, as the
#: whole step passes through it. (A Hopfield gradient once let a term added to
#: node_energy_of_g, with no gradient, through.)
_COVERS = {"hopfield_grad_of_g": ("hopfield_energy_of_g",),
           "attention_grads": ("node_energy_of_g", "forward", "dense_node_energy_of_g")}
#: Every method whose override the checks read (a method replaced on an instance included).
_WATCHED = tuple({*_ENERGY_METHODS, "keys_queries", "key_offsets", *_BYPASSED["unfused"],
                  *(name for _, closed in _PATHS.values() for name in closed)})


def _class_verdicts(cls: type[ETEnergy]) -> dict[tuple[Any, ...], str]:
    """Per (path, the watched methods) of the ETEnergy subclass ``cls``: "" (its closed form
    covers its energy and matches autograd of it) or why not. Kept in the class's own
    ``__dict__`` (not inherited), so that they go with the class: a module-level dict keyed
    by class kept every subclass ever defined alive, one per re-run of a notebook cell (a
    long-run audit)."""
    verdicts = vars(cls).get("_closed_form_class_verdicts")
    if verdicts is None:
        verdicts = {}
        cls._closed_form_class_verdicts = verdicts
    return verdicts


#: The largest relative difference between a subclass's closed form and autograd of its
#: energy that passes, per dtype of its parameters (the built-in terms: ~1e-12 in float64,
#: ~1e-6 in float32); other dtypes are not probed.
_PROBE_TOLERANCE = {torch.float64: 1e-7, torch.float32: 1e-3}
#: ``torch.compiler.disable``: the probe runs eagerly under ``torch.compile`` (traced, it was
#: skipped, and it broke the graph).
_compiler_disable: Callable[[Callable[..., Any]], Callable[..., Any]] = getattr(
    getattr(torch, "compiler", None), "disable", lambda function: function)


def _overrides(energy: Any, name: str) -> bool:
    """Whether ``energy`` (an :class:`ETEnergy` subclass or instance) replaces method ``name``:
    in its class, or on the object itself."""
    if not isinstance(energy, type) and callable(vars(energy).get(name)):
        return True
    cls = energy if isinstance(energy, type) else type(energy)
    return getattr(cls, name) is not getattr(ETEnergy, name)


@_compiler_disable
def _closed_form_mismatch(energy: ETEnergy, path: str) -> Optional[str]:
    """Why a subclass's closed form of ``path`` differs from autograd of the energy it reports,
    at a random point of a small irregular graph (in- and out-degrees apart, an isolated node,
    random edge weights) in its parameters' dtype, in eval mode (a factor 2 in a new term's
    gradient passed the override check and was descended without a word: an audit). "" when
    it matches or cannot be probed (a probe error, a dtype without a tolerance, the
    relational path); ``None`` where no probe can run now (inference mode, a functorch
    transform such as vmap), to be tried at a later call. It runs eagerly under
    ``torch.compile``, outside activation checkpointing's saved-tensor hooks, and in a forked
    random state, so that a run's random numbers do not move."""
    dtype, device = _placement(energy)
    tolerance = _PROBE_TOLERANCE.get(dtype)
    if path == "relational" or tolerance is None or device.type == "meta":
        return ""
    if torch.is_inference_mode_enabled() or _under_functorch():
        return None
    modes = [(module, module.training) for module in energy.modules()]
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.random.fork_rng(
                devices=[device] if device.type == "cuda" else []))
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(_same, _same))
            stack.enter_context(torch.enable_grad())
            stack.enter_context(autocast_off(device.type))
            energy.eval()  # a term with dropout draws another mask in each of the two
            try:
                closed, reference = _probe_gradients(energy, path, dtype, device)
            except Exception:  # noqa: BLE001 (a term that refuses edge weights: without)
                closed, reference = _probe_gradients(energy, path, dtype, device, weighted=False)
            if not bool(torch.isfinite(reference).all()):
                return ""  # an energy this point does not suit: nothing to compare
            gap = _relative_gap(closed, reference)
    except Exception:  # noqa: BLE001 (a term the probe cannot evaluate: the descent will say)
        return ""
    finally:
        for module, training in modes:
            module.training = training
    if gap <= tolerance:
        return ""
    return (f"{type(energy).__name__}'s closed form of dE/dg on the {path} path differs from "
            f"autograd of the energy it reports by {gap:.2g} (relative, at a random point in "
            f"{str(dtype).replace('torch.', '')}; at most {tolerance:g} passes): the analytic "
            "descent would not descend that energy. Fix the closed form (closed_form_error "
            "measures it, in float64), or build the layer with grad='autograd'")


def _relative_gap(closed: Tensor, reference: Tensor) -> float:
    """The largest difference between a closed form and its autograd ``reference``, relative
    to the reference's largest entry (:meth:`ETEnergy.closed_form_error` and the probe)."""
    scale = reference.abs().max().clamp_min(torch.finfo(reference.dtype).tiny)
    return float(((closed - reference).abs().max() / scale).detach())


def _placement(energy: ETEnergy) -> tuple[torch.dtype, torch.device]:
    """The dtype and device of ``energy``'s parameters (the defaults without any)."""
    parameter = next(energy.parameters(), None)
    if parameter is None:
        return torch.get_default_dtype(), torch.device("cpu")
    return parameter.dtype, parameter.device


def _probe_gradients(energy: ETEnergy, path: str, dtype: torch.dtype, device: torch.device,
                     weighted: bool = True) -> tuple[Tensor, Tensor]:
    """``(closed form, autograd)`` of ``dE/dg`` on ``path`` at the probe's random point (its
    edges weighted or not)."""
    nodes, edges_count = 7, 15
    generator = torch.Generator().manual_seed(0)
    g = (0.5 * torch.randn(nodes, energy.channels, generator=generator,
                           dtype=torch.float64)).to(device=device, dtype=dtype)
    if path == "dense":
        tokens = g.unsqueeze(0)
        ring = torch.roll(torch.eye(nodes, dtype=torch.bool), 1, dims=1)  # a neighbour each
        mask = (torch.rand(1, nodes, nodes, generator=generator) < 0.4) | ring
        mask = (mask & ~torch.eye(nodes, dtype=torch.bool)).to(device)
        return (energy.dense_grad_of_g(tokens, mask).detach(),
                energy.dense_autograd_grad_of_g(tokens, mask).detach())
    # node nodes - 1 is isolated; in- and out-degrees differ
    edge_index = torch.randint(0, nodes - 1, (2, edges_count), generator=generator).to(device)
    weight = (0.5 + torch.rand(edges_count, 1, generator=generator,
                               dtype=torch.float64)).to(device=device, dtype=dtype)
    edge_attr = None if energy.edge_dim is None else torch.randn(
        edges_count, energy.edge_dim, generator=generator, dtype=torch.float64).to(
        device=device, dtype=dtype)
    edges = energy.edges(g, edge_index, weight if weighted else None, plan=path == "fused",
                         edge_attr=edge_attr)
    if path == "fused":
        closed = energy.grad_of_g(g, edges, fused=True)
    else:  # the message path's attention is the built-in one, then the rest of the step
        k, q = energy.keys_queries(g)
        grad_k, grad_q = E.attention_grad(k, q, edges.src, edges.dst, energy.beta, edges.weight,
                                          nodes, energy.key_offsets(edges))
        closed = energy.grad_from_attention_grads(g, grad_k, grad_q, edges)
    return closed.detach(), energy.autograd_grad_of_g(g, edges).detach()


def _same(tensor: Tensor) -> Tensor:
    return tensor


def _under_functorch() -> bool:
    """Whether a functorch transform (vmap, grad) is active, whose wrapped parameters and
    refusal of random operations the probe cannot run under."""
    peek = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", None)
    return peek is not None and peek() is not None


def _unmatched_energy_override(energy: Any, path: str) -> str:
    """Why the closed form of ``path`` does not cover ``energy`` (a subclass or an instance),
    or "" when it does."""
    def overridden(names: tuple[str, ...]) -> list[str]:
        return [name for name in names if _overrides(energy, name)]

    cls = energy if isinstance(energy, type) else type(energy)
    bypassed = overridden(_BYPASSED.get(path, ()))
    if bypassed:
        return (f"{cls.__name__} overrides {', '.join(bypassed)} (a new attention), which the "
                "message path "
                "(fused=False, a message hook or an explainer) never calls: it computes the "
                "built-in dot-product attention's coefficients itself, and would step with "
                "them. Use the fused path, or build the layer with grad='autograd'")
    energy_methods, closed_methods = _PATHS[path]
    closed = overridden(closed_methods)
    energies = [name for name in overridden(energy_methods)
                if not any(name in _COVERS.get(method, (name,)) for method in closed)]
    if not energies:
        return ""
    # (grad_from_attention_grads, which every path's step passes through, is where
    # docs/derivation.md adds a term: grad_of_g as well would count it twice)
    where = ("grad_from_attention_grads" if "grad_from_attention_grads" in closed_methods
             else closed_methods[0])
    return (f"{cls.__name__} overrides {', '.join(energies)} but not the closed form the "
            f"{path} descent steps with ({', '.join(closed_methods)}): it would ignore the new "
            "energy while the reported energies include it. Build the layer with "
            f"grad='autograd' (descends autograd of your energy), or add the term's gradient "
            f"in {where}")


def _autograd_grad(g: Tensor, energy_of_g: Callable[[Tensor], Tensor]) -> Tensor:
    """``d(sum energy_of_g(g))/dg``, kept differentiable when the caller records gradients, so
    that training through it works."""
    if torch.is_inference_mode_enabled():
        # enable_grad cannot lift inference mode, so autograd would fail on an obscure error.
        raise ValueError("grad='autograd' differentiates the energy with torch.autograd, which "
                         "torch.inference_mode() forbids: score under torch.no_grad(), or use "
                         "grad='analytic' (the same values, the default)")
    outer_grad = torch.is_grad_enabled()
    with torch.enable_grad():
        if not g.requires_grad:
            g = g.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(energy_of_g(g).sum(), g, create_graph=outer_grad)
    return grad
