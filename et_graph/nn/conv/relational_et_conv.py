from __future__ import annotations

from typing import Any, Literal, Optional, Union, overload

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.typing import Adj
from torch_geometric.utils import is_sparse

from ... import energy as E
from ...fused import build_edge_plan, fused_attention_grad, sparse_kernels_on
from ..hetero_guard import check_relation_wrappers
from ..validation import (
    check_edge_index,
    check_finite_energy,
    check_finite_tokens,
    check_return_energy,
    check_same_device,
    is_integral,
    refuse_tracing,
    sum_per_graph,
)
from .et_conv import AttentionMessages, DescentSettings, EnergyShape
from .et_energy import EdgeSet, ETEnergy, _autograd_grad, in_parameter_precision

__all__ = ["RelationalETConv", "check_edge_type"]


def check_edge_type(edge_type: Any, num_edges: int, num_relations: int) -> Tensor:
    """Validate ``edge_type [E]`` (integer ids in ``[0, num_relations)``) and return it as
    ``int64``."""
    if not isinstance(edge_type, Tensor):
        raise ValueError(
            f"edge_type must be a torch.Tensor of relation ids, got {type(edge_type).__name__}"
        )
    if edge_type.is_floating_point() or edge_type.is_complex() or edge_type.dtype == torch.bool:
        raise ValueError(
            f"edge_type must hold integer relation ids (torch.long), got {edge_type.dtype}; "
            "use edge_type.long() if the values are whole numbers"
        )
    if edge_type.dim() != 1 or edge_type.numel() != num_edges:
        raise ValueError(
            f"edge_type must have shape [E]=[{num_edges}] (one relation id per column of "
            f"edge_index), got {tuple(edge_type.shape)}"
        )
    if edge_type.numel():
        low, high = int(edge_type.min()), int(edge_type.max())
        if low < 0 or high >= num_relations:
            raise ValueError(
                f"edge_type holds relation ids in [{low}, {high}] but the layer has "
                f"num_relations={num_relations} (valid ids are 0..{num_relations - 1})"
            )
    return edge_type.long()


def _refuse_sparse(edge_index: Adj) -> None:
    if is_sparse(edge_index):
        raise ValueError(
            "RelationalETConv takes edge_index as a [2, E] tensor with edge_type [E]: a "
            "sparse adjacency cannot hold two relations on the same pair of nodes "
            "(convert it with torch_geometric.utils.to_edge_index)"
        )


#: MessagePassing's settings for this layer: the closed form's sums over edges, tokens [N, ...].
_MESSAGE_PASSING = {"aggr": "add", "node_dim": 0}

#: ETEnergy methods whose override this layer cannot follow: it sums each relation's
#: attention energy itself, through keys and queries whose closed form it writes out, so a
#: subclass changing them would be ignored or descended wrongly, with either grad (only the
#: Hopfield term and the LayerNorm come from energy_fn as they are).
_OWN_TERMS = ("node_energy_of_g", "forward", "keys_queries", "dense_node_energy_of_g")


class RelationalETConv(EnergyShape, DescentSettings, AttentionMessages, MessagePassing):
    r"""The Energy Transformer block on a multi-relation graph: one attention energy per
    relation, with its own keys, queries and temperatures, and one shared Hopfield energy.
    It takes no edge features (no ``edge_dim``): for relations with features, use
    :class:`~et_graph.nn.ETConv` with ``edge_dim`` on ``data.to_homogeneous()``, the relation
    as a one-hot column of ``edge_attr`` beside the features.

    With :math:`\mathbf{g} = \mathrm{LN}(\mathbf{x})` (one energy LayerNorm, scalar gain),
    :math:`\mathbf{k}^r_{hB} = W^{K,r}_h \mathbf{g}_B`, :math:`\mathbf{q}^r_{hC} = W^{Q,r}_h
    \mathbf{g}_C` and :math:`\mathcal{N}_r(C)` the sources of the edges of type :math:`r` into
    :math:`C`,

    .. math::
        E = \sum_{r=1}^{R} E^r_{ATT} + E_{HN}, \qquad
        E^r_{ATT} = -\sum_h \frac{1}{\beta_{rh}} \sum_{C} \log \sum_{B \in \mathcal{N}_r(C)}
        \exp\left(\beta_{rh}\, \mathbf{k}^{r\top}_{hB} \mathbf{q}^r_{hC}\right)

    with :math:`E_{HN}` the Hopfield energy of :class:`~et_graph.nn.ETConv` (one set of
    memories :math:`\boldsymbol{\xi}` for all relations). Each step is :math:`\mathbf{x}
    \leftarrow \mathbf{x} - \alpha\,\partial E/\partial\mathbf{g} + \sqrt{\alpha}\,
    \boldsymbol{\epsilon}` (noise only in training, only when ``noise_std > 0``). The relations
    share no key or query, so the closed form stays exact: :math:`\partial E/\partial
    \mathbf{g}` is the sum of every relation's closed-form attention gradient (paper eq. 17,
    the fused kernel of :class:`~et_graph.nn.ETConv` once per relation) plus the Hopfield
    gradient,

    .. math::
        -\frac{\partial E}{\partial \mathbf{g}_A} = \sum_r \sum_h \Big[ W^{Q,r\top}_h
        \sum_{B \to_r A} c^r_{BAh} \mathbf{k}^r_{hB} + W^{K,r\top}_h \sum_{A \to_r C}
        c^r_{ACh} \mathbf{q}^r_{hC} \Big] + \boldsymbol{\xi}^\top r(\boldsymbol{\xi}
        \mathbf{g}_A),

    with :math:`c^r_{BCh} = \mathrm{softmax}_{B \in \mathcal{N}_r(C)}(\beta_{rh}
    \mathbf{k}^{r\top}_{hB} \mathbf{q}^r_{hC})`. With one relation this is
    :class:`~et_graph.nn.ETConv` (same parameters, same result). The cost per step is that of
    ``ETConv`` with ``R * heads`` heads on the same edges: every edge enters one relation's
    softmax only, and keys and queries of all relations come from one matmul.

    Edges follow PyG's :class:`~torch_geometric.nn.conv.RGCNConv` convention: ``edge_index
    [2, E]`` with ``edge_type [E]`` (integer ids in ``[0, num_relations)``); a pair of nodes
    linked in several relations appears once per relation. An edge ``B -> C`` lets ``C``
    attend to ``B``; self-loops are ignored; a node without in-edges of type ``r`` gets no
    energy from relation ``r``.

    Parameters: ``conv.energy_fn`` is an :class:`~et_graph.nn.ETEnergy` with ``R * heads``
    heads holding the shared LayerNorm and memories and the stacked per-relation maps: heads
    ``r * heads .. (r + 1) * heads - 1`` (``w_k``, ``w_q``, ``log_beta``) belong to relation
    ``r``. Its own ``node_energy_of_g`` (every head over one edge set) is not this layer's
    energy; use :meth:`node_energy_of_g` here.

    Dtypes and bad input as in :class:`~et_graph.nn.ETConv`; a malformed ``edge_type`` (not an
    integer tensor, wrong shape, ids outside ``[0, num_relations)``) raises ``ValueError``.
    Sparse adjacencies are not accepted: one sparse matrix cannot hold two relations on the
    same pair of nodes. Every setting after ``num_relations`` is keyword-only (PyG's
    ``RGCNConv(in, out, num_relations)`` habit would otherwise give ``num_relations = out``).

    **Explainers and message hooks** (a :class:`~torch_geometric.nn.conv.MessagePassing`
    since session 63), as on :class:`~et_graph.nn.ETConv`: the fused kernel passes no message,
    so while an explainer's edge mask or a message-level hook is set the descent runs through
    ``propagate``, with the same result. Each step passes two sets of messages over the
    caller's ``edge_index`` (every relation's edges at once, in the caller's order, self-loops
    with coefficient zero), so an edge mask ``[E]`` lines up with ``edge_index`` and
    ``edge_type``; ``alpha`` is ``[E, R * H]``, an edge's coefficients in its own relation's
    heads and zero in the others'. ``GNNExplainer`` and ``AttentionExplainer`` take
    ``edge_type`` as a keyword: ``explainer(x, edge_index, edge_type=edge_type, index=...)``.

    Args:
        channels: token width ``D``.
        num_relations: number of relations (edge types) ``R >= 1``.
        heads: attention heads ``H`` per relation.
        head_dim: width ``Y`` of each key/query.
        hopfield_dim: number ``K >= 0`` of Hopfield memories (default ``4 * channels``).
        steps: descent steps per forward call (``>= 0``; :meth:`forward` can override it).
        alpha: step size ``> 0``.
        hopfield: ``"relu"`` or ``"softmax"``.
        hopfield_beta: inverse temperature ``> 0`` of the ``"softmax"`` Hopfield energy.
        beta_init: initial inverse temperature ``> 0`` of every head of every relation
            (default ``1 / sqrt(head_dim)``).
        noise_std: standard deviation ``>= 0`` of the training-time noise of eq. 27.
        grad: ``"analytic"`` (closed form, fused kernel per relation) or ``"autograd"``
            (differentiate :meth:`energy`; the reference).
        eps: LayerNorm epsilon.
        cached: keep each relation's validated, sorted edges while the same ``edge_index``
            and ``edge_type`` tensors come again (full-batch training); see
            :class:`~et_graph.nn.edge_cache.EdgeCache`.
    """

    #: Use the fused kernel per relation; ``False`` uses the reference closed form of
    #: :func:`et_graph.energy.relational_attention_grad`.
    fused: bool = True

    def __init__(
        self,
        channels: int,
        num_relations: int,
        *,
        heads: int = 4,
        head_dim: int = 16,
        hopfield_dim: Optional[int] = None,
        steps: int = 2,
        alpha: float = 0.1,
        hopfield: str = "relu",
        hopfield_beta: float = 1.0,
        beta_init: Optional[float] = None,
        noise_std: float = 0.0,
        grad: str = "analytic",
        eps: float = 1e-5,
        cached: bool = False,
    ) -> None:
        super().__init__(**_MESSAGE_PASSING)
        for name, value in (("num_relations", num_relations), ("heads", heads)):
            if not is_integral(value) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.num_relations = int(num_relations)
        self._heads = int(heads)
        self.energy_fn = ETEnergy(
            channels,
            heads=self.num_relations * self._heads,
            head_dim=head_dim,
            hopfield_dim=hopfield_dim,
            hopfield=hopfield,
            hopfield_beta=hopfield_beta,
            beta_init=beta_init,
            eps=eps,
        )
        self.steps = steps
        self.alpha = alpha
        self.noise_std = noise_std
        self.grad = grad
        self.cached = cached

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        self.energy_fn.reset_parameters()

    def __setstate__(self, data: dict[str, Any]) -> None:
        if "inspector" not in data:
            # Pickled (a saved multi-relation detector) before the layer was a MessagePassing
            # (session 63): MessagePassing's own state comes from a fresh one, and its
            # aggregation module joins the pickled submodules.
            template = type(self).__new__(type(self))
            MessagePassing.__init__(template, **_MESSAGE_PASSING)
            data = {**{key: value for key, value in template.__dict__.items()
                       if key not in data}, **data}
            data["_modules"] = {**template._modules, **data["_modules"]}
        super().__setstate__(data)

    # ----------------------------------------------------------------------------------------
    # Hyper-parameters and parameters
    # ----------------------------------------------------------------------------------------
    @property
    def heads(self) -> int:
        """Attention heads ``H`` per relation."""
        return self._heads

    @property
    def w_k(self) -> Tensor:
        """Key maps ``[R, H, Y, D]`` (a view of ``energy_fn.w_k``)."""
        return self.energy_fn.w_k.view(self.num_relations, self.heads, self.head_dim, -1)

    @property
    def w_q(self) -> Tensor:
        """Query maps ``[R, H, Y, D]`` (a view of ``energy_fn.w_q``)."""
        return self.energy_fn.w_q.view(self.num_relations, self.heads, self.head_dim, -1)

    @property
    def xi(self) -> Tensor:
        """Shared Hopfield memories ``[K, D]`` (``energy_fn.xi``)."""
        return self.energy_fn.xi

    @property
    def beta(self) -> Tensor:
        """Inverse temperatures ``[R, H]``, positive by construction."""
        return self.energy_fn.beta.view(self.num_relations, self.heads)

    # ----------------------------------------------------------------------------------------
    # Edges of each relation
    # ----------------------------------------------------------------------------------------
    def edges(
        self, x: Tensor, edge_index: Tensor, edge_type: Tensor, plan: bool = False
    ) -> list[EdgeSet]:
        """One validated :class:`~et_graph.nn.EdgeSet` per relation (self-loops removed) for
        the tokens ``x [N, D]``; ``plan=True`` also builds each relation's sorted layout for the
        fused kernel, reused by every step and by backward."""
        _refuse_sparse(edge_index)
        num_nodes = x.size(0)
        edge_index = check_edge_index(edge_index, num_nodes)
        edge_type = check_edge_type(edge_type, edge_index.size(1), self.num_relations)
        fn, out = self.energy_fn, []
        for relation in range(self.num_relations):
            edges = fn.edges(x, edge_index[:, edge_type == relation])
            if plan and edges.num_edges and num_nodes:
                edges = edges._replace(
                    plan=build_edge_plan(edges.src, edges.dst, num_nodes, self.heads)
                )
            out.append(edges)
        return out

    def _edges(self, x: Tensor, edge_index: Tensor, edge_type: Tensor, plan: bool) -> list[EdgeSet]:
        """:meth:`edges`, through the cache when ``cached`` is on."""
        if not self.cached or is_sparse(edge_index):
            return self.edges(x, edge_index, edge_type, plan=plan)
        # before the cache, whose hit skips the check in edges (as ETConv._edges)
        check_same_device(x, edge_index=edge_index, edge_type=edge_type)
        return self._edge_cache.fetch(
            (edge_index, edge_type), x.size(0), lambda: self.edges(x, edge_index, edge_type, plan),
            lambda kept: not plan or not x.size(0)
            or all(e.plan is not None or not e.num_edges for e in kept))

    # ----------------------------------------------------------------------------------------
    # Energy and gradient as functions of g
    # ----------------------------------------------------------------------------------------
    def node_energy_of_g(self, g: Tensor, edges: list[EdgeSet]) -> Tensor:
        """Each node's share of the energy ``[N]``: its attention terms (as a destination, summed
        over the relations) plus its Hopfield term."""
        fn = self.energy_fn
        k, q = fn.keys_queries(g)
        att = E.relational_attention_energy(
            k, q, [e.src for e in edges], [e.dst for e in edges], fn.beta, g.size(0)
        )
        return att + fn.hopfield_energy_of_g(g)

    def attention_grads(self, g: Tensor, edges: list[EdgeSet]) -> tuple[Tensor, Tensor]:
        """Closed form of ``(dE_ATT/dk, dE_ATT/dq)``, each ``[N, R*H, Y]``: per relation, the
        fused kernel on that relation's heads and edges (or the reference closed form with
        ``fused = False``)."""
        fn = self.energy_fn
        k, q = fn.keys_queries(g)
        if not self.fused or not sparse_kernels_on(g.device):  # (mps: no sparse kernels)
            return E.relational_attention_grad(
                k, q, [e.src for e in edges], [e.dst for e in edges], fn.beta, g.size(0)
            )
        beta, grad_k, grad_q = fn.beta, [], []
        for relation, e in enumerate(edges):
            part = E.relation_heads(relation, self.heads)
            gk, gq = fused_attention_grad(k[:, part], q[:, part], e.src, e.dst, beta[part],
                                          None, e.plan)
            grad_k.append(gk)
            grad_q.append(gq)
        return torch.cat(grad_k, dim=1), torch.cat(grad_q, dim=1)

    def _message_routes(self, x: Tensor, edge_index: Tensor, edge_type: Tensor,
                        edges: list[EdgeSet]) -> tuple[Tensor, list[Tensor]]:
        """The caller's edges ``[2, E]`` (validated) and, per relation, the positions in them
        of that relation's edges that enter the energy (self-loops left out): where the
        messages carry each relation's coefficients."""
        edge_index = check_edge_index(edge_index, x.size(0))
        edge_type = check_edge_type(edge_type, edge_index.size(1), self.num_relations)
        positions = []
        for relation, e in enumerate(edges):
            where = (edge_type == relation).nonzero().squeeze(1)
            positions.append(where if e.kept is None else where[e.kept])
        return edge_index, positions

    def _grad_by_messages(self, g: Tensor, edges: list[EdgeSet],
                          routes: tuple[Tensor, list[Tensor]]) -> Tensor:
        """The closed form of :meth:`grad_of_g` through ``propagate`` (explainers, hooks):
        every relation's coefficients on its own heads, one set of messages per side."""
        fn = self.energy_fn
        fn.check_closed_form("relational")
        k, q = fn.keys_queries(g)
        edge_index, positions = routes
        alpha = k.new_zeros(edge_index.size(1), k.size(1))
        for relation, (e, where) in enumerate(zip(edges, positions)):
            part = E.relation_heads(relation, self.heads)
            alpha[where, part] = E.edge_coefficients(k[:, part], q[:, part], e.src, e.dst,
                                                     fn.beta[part], None, g.size(0))
        grad_k, grad_q = self._propagate_coefficients(k, q, alpha, edge_index)
        return fn.grad_from_attention_grads(g, grad_k, grad_q)

    def grad_of_g(self, g: Tensor, edges: list[EdgeSet]) -> Tensor:
        r""":math:`\partial E/\partial \mathbf{g}` ``[N, D]`` by the method chosen with ``grad``:
        the closed form (every relation's attention gradient, mapped back through its own
        :math:`W^{K,r}, W^{Q,r}` in one matmul, plus the Hopfield term) or autograd of
        :meth:`node_energy_of_g`."""
        if self.grad == "autograd":
            return _autograd_grad(g, lambda g: self.node_energy_of_g(g, edges))
        self.energy_fn.check_closed_form("relational")
        grad_k, grad_q = self.attention_grads(g, edges)
        return self.energy_fn.grad_from_attention_grads(g, grad_k, grad_q)

    # ----------------------------------------------------------------------------------------
    # Energy of a state x
    # ----------------------------------------------------------------------------------------
    @in_parameter_precision
    def node_energy(self, x: Tensor, edge_index: Tensor, edge_type: Tensor) -> Tensor:
        """Each node's share of the energy ``[N]``; the shares sum to :meth:`energy`."""
        fn = self.energy_fn
        fn.check_builtin_energy(type(self).__name__, _OWN_TERMS)
        x_in = fn.check_tokens(x)
        edges = self.edges(x_in, edge_index, edge_type)
        # In the parameters' dtype, not x's (ETConv.node_energy).
        return check_finite_energy(self.node_energy_of_g(fn.norm(x_in), edges), fn.beta,
                                   type(self).__name__)

    def energy(
        self, x: Tensor, edge_index: Tensor, edge_type: Tensor, batch: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
    ) -> Tensor:
        """Total energy of state ``x`` (scalar), or per graph ``[num_graphs]`` given ``batch``
        (an integer ``[N]`` tensor of graph ids); pass ``num_graphs`` when the last graphs of a
        batch may be empty, or they are dropped."""
        return sum_per_graph(self.node_energy(x, edge_index, edge_type), batch, num_graphs)

    @in_parameter_precision
    def energy_grad(self, x: Tensor, edge_index: Tensor, edge_type: Tensor) -> Tensor:
        """``dE/dg`` at state ``x`` as ``[N, channels]``, by the method chosen with ``grad``."""
        fn = self.energy_fn
        x_in = fn.check_tokens(x)
        edges = self.edges(x_in, edge_index, edge_type)
        # through the messages while watched, as forward and ETConv.energy_grad do
        routes = self._watched_routes(x_in, edge_index, edge_type, edges)
        return self._watched_grad(fn.norm(x_in), edges, routes).to(x.dtype)

    def _watched_routes(self, x: Tensor, edge_index: Tensor, edge_type: Tensor,
                        edges: list[EdgeSet]) -> Optional[tuple[Tensor, list[Tensor]]]:
        """:meth:`_message_routes` while an explainer or a message hook watches, else None."""
        if not self._sees_messages:
            return None
        return self._message_routes(x, edge_index, edge_type, edges)

    def _watched_grad(self, g: Tensor, edges: list[EdgeSet],
                      routes: Optional[tuple[Tensor, list[Tensor]]]) -> Tensor:
        """:meth:`grad_of_g`, through the messages when ``routes`` are given."""
        if routes is None:
            return self.grad_of_g(g, edges)
        return self._grad_by_messages(g, edges, routes)

    # ----------------------------------------------------------------------------------------
    # Dynamics
    # ----------------------------------------------------------------------------------------
    @overload
    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_type: Tensor,
        return_energy: Literal[False] = False,
        *,
        steps: Optional[int] = None,
    ) -> Tensor: ...

    @overload
    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_type: Tensor,
        return_energy: Literal[True],
        *,
        steps: Optional[int] = None,
    ) -> tuple[Tensor, Tensor]: ...

    @overload  # (a flag known only at run time: its bool matched no overload)
    def forward(self, x: Tensor, edge_index: Tensor, edge_type: Tensor,
                return_energy: bool = False, *, steps: Optional[int] = None
                ) -> Union[Tensor, tuple[Tensor, Tensor]]: ...

    @in_parameter_precision
    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_type: Tensor,
        return_energy: bool = False,
        *,
        steps: Optional[int] = None,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Run ``steps`` descent steps from ``x [N, channels]`` over the typed edges
        ``edge_index [2, E]``, ``edge_type [E]``.

        ``steps`` overrides ``self.steps`` for this call. Returns the tokens ``[N, channels]``
        in ``x``'s dtype, and with ``return_energy=True`` also the (detached) total energy
        ``[steps + 1]`` before each update and after the last.
        """
        refuse_tracing(self)
        check_return_energy(return_energy, type(self).__name__)
        check_relation_wrappers(self, relational=True)
        _refuse_sparse(edge_index)  # (before the watchers' advice on sparse adjacencies)
        self._check_watchers(edge_index)
        self.energy_fn.check_builtin_energy(type(self).__name__, _OWN_TERMS)
        num_steps = self._num_steps(steps)
        fn = self.energy_fn
        out = fn.check_tokens(x)
        watched = self._sees_messages
        fused = (self.grad == "analytic" and self.fused and not watched and num_steps > 0
                 and sparse_kernels_on(out.device))
        edges = self._edges(out, edge_index, edge_type, fused)
        routes = self._watched_routes(out, edge_index, edge_type, edges)
        energies = []
        for _ in range(num_steps):
            g = fn.layer_norm(out)
            if return_energy:
                energies.append(self._detached_total(g, edges))
            out = self._step(out, self._watched_grad(g, edges, routes))
        if num_steps:
            check_finite_tokens(out, type(self).__name__)
        if return_energy:
            energies.append(self._detached_total(fn.norm(out), edges))
            trace = check_finite_energy(torch.stack(energies).detach(), fn.beta,
                                        type(self).__name__)
            return out.to(x.dtype), trace
        return out.to(x.dtype)

    @torch.no_grad()
    def _detached_total(self, g: Tensor, edges: list[EdgeSet]) -> Tensor:
        return sum_per_graph(self.node_energy_of_g(g, edges), None)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, num_relations={self.num_relations}, "
            f"heads={self.heads}, head_dim={self.head_dim}, hopfield_dim={self.hopfield_dim}, "
            f"steps={self.steps}, alpha={self.alpha}, hopfield={self.hopfield!r}"
            f"{self._changed_settings()})"
        )
