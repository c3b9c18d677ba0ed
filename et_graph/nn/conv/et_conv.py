from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Union

import torch
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.typing import Adj
from torch_geometric.utils import is_sparse, to_edge_index

from ... import energy as E
from ...fused import EdgePlan, build_edge_plan, fused_attention_grad
from ..energy_layer_norm import EnergyLayerNorm
from ..validation import check_batch, check_edge_index, check_edge_weight, check_features

GRAD_MODES = ("analytic", "autograd")


class EdgeSet(NamedTuple):
    """Validated edges without self-loops, plus what explainers need to map back."""

    src: Tensor
    dst: Tensor
    weight: Optional[Tensor]  # [E', 1 or H] or None
    edge_index: Tensor  # the caller's edges, self-loops included
    kept: Optional[Tensor]  # bool [E] marking non-loop edges; None when there were no loops
    plan: Optional[EdgePlan] = None  # sorted CSR layout for the fused path, built once per forward


class ETConv(MessagePassing):
    r"""The Energy Transformer block (Hoover et al., 2023) as a graph operator.

    The tokens :math:`\mathbf{x}` descend the energy :math:`E = E_{ATT} + E_{HN}` for ``steps``
    steps. With :math:`\mathbf{g} = \mathrm{LN}(\mathbf{x})` (scalar gain, vector bias),
    :math:`\mathbf{k}_{hB} = W^K_h \mathbf{g}_B` and :math:`\mathbf{q}_{hC} = W^Q_h \mathbf{g}_C`,

    .. math::
        E_{ATT} = -\sum_h \frac{1}{\beta_h} \sum_{C} \log \sum_{B \in \mathcal{N}(C)}
        \exp\left(\beta_h\, w_{BCh}\, \mathbf{k}_{hB}^\top \mathbf{q}_{hC}\right)

    .. math::
        E_{HN} = -\sum_B \sum_\mu \tfrac12 \mathrm{relu}(\boldsymbol{\xi}_\mu^\top \mathbf{g}_B)^2
        \quad\text{or}\quad
        -\sum_B \tfrac{1}{b}\log\sum_\mu \exp(b\,\boldsymbol{\xi}_\mu^\top \mathbf{g}_B)

    and each step is :math:`\mathbf{x} \leftarrow \mathbf{x} - \alpha\,\partial E/\partial
    \mathbf{g} + \sqrt{\alpha}\,\boldsymbol{\epsilon}` (noise only in training and only when
    ``noise_std > 0``). The closed form of :math:`\partial E/\partial \mathbf{g}` (paper eq. 17)
    is two aggregations over edges, one to the destination and one to the source, plus the
    Hopfield term:

    .. math::
        -\frac{\partial E}{\partial \mathbf{g}_A} = \sum_h \Big[ W^{Q\top}_h
        \sum_{B \to A} c_{BAh} \mathbf{k}_{hB} + W^{K\top}_h \sum_{A \to C} c_{ACh}
        \mathbf{q}_{hC} \Big] + \boldsymbol{\xi}^\top r(\boldsymbol{\xi}\mathbf{g}_A),

    with :math:`c_{BCh} = w_{BCh}\,\mathrm{softmax}_{B \in \mathcal{N}(C)}(\beta_h w_{BCh}
    \mathbf{k}_{hB}^\top \mathbf{q}_{hC})`.

    Defined behaviour: an edge ``B -> C`` (``edge_index[0] = B``, ``edge_index[1] = C``) lets
    ``C`` attend to ``B``; self-loops are ignored (the paper sums over ``B != C``); duplicate
    edges count as often as they appear; a node without in-neighbours contributes no attention
    energy; ``N = 0`` returns an empty tensor. NaN/inf features, malformed ``edge_index`` and
    wrongly shaped weights raise ``ValueError``.

    Args:
        channels: token width ``D``.
        heads: attention heads ``H``.
        head_dim: width ``Y`` of each key/query.
        hopfield_dim: number ``K`` of Hopfield memories (default ``4 * channels``).
        steps: descent steps per forward call.
        alpha: step size.
        hopfield: ``"relu"`` or ``"softmax"``.
        hopfield_beta: inverse temperature of the ``"softmax"`` Hopfield energy.
        beta_init: initial per-head inverse temperature (default ``1 / sqrt(head_dim)``).
        noise_std: standard deviation of the training-time noise of eq. 27.
        grad: ``"analytic"`` (fused closed form) or ``"autograd"`` (differentiate
            :meth:`energy`; the reference).
        eps: LayerNorm epsilon.
    """

    #: Use the fused autograd.Function; ``False`` routes the closed form through ``propagate``.
    fused: bool = True

    def __init__(
        self,
        channels: int,
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
        **kwargs,
    ) -> None:
        kwargs.setdefault("aggr", "add")
        super().__init__(node_dim=0, **kwargs)
        if channels <= 0 or heads <= 0 or head_dim <= 0:
            raise ValueError("channels, heads and head_dim must be positive")
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        if hopfield not in E.HOPFIELD_KINDS:
            raise ValueError(f"hopfield must be one of {E.HOPFIELD_KINDS}, got {hopfield!r}")
        if grad not in GRAD_MODES:
            raise ValueError(f"grad must be one of {GRAD_MODES}, got {grad!r}")
        if noise_std < 0:
            raise ValueError(f"noise_std must be >= 0, got {noise_std}")
        self.channels = channels
        self.heads = heads
        self.head_dim = head_dim
        self.hopfield_dim = 4 * channels if hopfield_dim is None else hopfield_dim
        self.steps = steps
        self.alpha = alpha
        self.hopfield = hopfield
        self.hopfield_beta = hopfield_beta
        self.beta_init = 1.0 / math.sqrt(head_dim) if beta_init is None else beta_init
        self.noise_std = noise_std
        self.grad = grad

        self.norm = EnergyLayerNorm(channels, eps=eps)
        self.w_k = Parameter(torch.empty(heads, head_dim, channels))
        self.w_q = Parameter(torch.empty(heads, head_dim, channels))
        self.xi = Parameter(torch.empty(self.hopfield_dim, channels))
        self.log_beta = Parameter(torch.empty(heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.norm.reset_parameters()
        std = 1.0 / math.sqrt(self.channels)
        torch.nn.init.normal_(self.w_k, std=std)
        torch.nn.init.normal_(self.w_q, std=std)
        torch.nn.init.normal_(self.xi, std=std)
        with torch.no_grad():
            self.log_beta.fill_(math.log(self.beta_init))

    @property
    def beta(self) -> Tensor:
        """Per-head inverse temperature ``[H]``, positive by construction."""
        return self.log_beta.exp()

    # ----------------------------------------------------------------------------------------
    # Input handling
    # ----------------------------------------------------------------------------------------
    def _edges(self, x: Tensor, edge_index: Adj, edge_weight: Optional[Tensor]) -> EdgeSet:
        """Validated ``(src, dst, weight [E', 1 or H], ...)`` with self-loops removed."""
        num_nodes = x.size(0)
        if is_sparse(edge_index):
            if edge_weight is not None:
                raise ValueError(
                    "pass edge weights as the values of the sparse adjacency, not as edge_weight"
                )
            if tuple(edge_index.size()) != (num_nodes, num_nodes):
                raise ValueError(
                    f"sparse adjacency must be [{num_nodes}, {num_nodes}], "
                    f"got {tuple(edge_index.size())}"
                )
            # PyG convention: the sparse input is adj_t, rows are destinations.
            index, values = to_edge_index(edge_index)
            edge_index = index.flip(0)
            if values is not None and not bool((values == 1).all()):
                edge_weight = values.to(x.dtype)
        edge_index = check_edge_index(edge_index, num_nodes)
        edge_weight = check_edge_weight(edge_weight, edge_index.size(1), self.heads)
        src, dst = edge_index[0], edge_index[1]
        kept: Optional[Tensor] = src != dst
        if bool(kept.all()):
            kept = None
        else:
            src, dst = src[kept], dst[kept]
            edge_weight = None if edge_weight is None else edge_weight[kept]
        if edge_weight is not None:
            edge_weight = edge_weight.to(x.dtype)
        return EdgeSet(src, dst, edge_weight, edge_index, kept)

    def _check_x(self, x: Tensor) -> None:
        check_features(x, self.channels)

    # ----------------------------------------------------------------------------------------
    # Energy (the single source of truth)
    # ----------------------------------------------------------------------------------------
    def _keys_queries(self, g: Tensor) -> tuple[Tensor, Tensor]:
        shape = g.shape[:-1] + (self.heads, self.head_dim)
        weights = torch.cat([self.w_k, self.w_q], dim=0).reshape(-1, self.channels)
        kq = g @ weights.t()
        k, q = kq.split(self.heads * self.head_dim, dim=-1)
        return k.reshape(shape), q.reshape(shape)

    def _node_energy_of_g(
        self, g: Tensor, src: Tensor, dst: Tensor, weight: Optional[Tensor]
    ) -> Tensor:
        k, q = self._keys_queries(g)
        att = E.attention_energy(k, q, src, dst, self.beta, weight, g.size(0))
        return att + E.hopfield_energy(g, self.xi, self.hopfield, self.hopfield_beta)

    def node_energy(
        self, x: Tensor, edge_index: Adj, edge_weight: Optional[Tensor] = None
    ) -> Tensor:
        """Each node's share of the energy ``[N]``: its attention term (as a destination) plus its
        Hopfield term. The shares sum to :meth:`energy`."""
        self._check_x(x)
        edges = self._edges(x, edge_index, edge_weight)
        return self._node_energy_of_g(self.norm(x), edges.src, edges.dst, edges.weight)

    def energy(
        self,
        x: Tensor,
        edge_index: Adj,
        edge_weight: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
    ) -> Tensor:
        """Total energy of state ``x`` (scalar), or per graph ``[num_graphs]`` given ``batch``."""
        per_node = self.node_energy(x, edge_index, edge_weight)
        return self._reduce_energy(per_node, batch)

    @staticmethod
    def _reduce_energy(per_node: Tensor, batch: Optional[Tensor]) -> Tensor:
        if batch is None:
            return per_node.sum()
        check_batch(batch, per_node.numel())
        num_graphs = int(batch.max()) + 1 if batch.numel() else 0
        return per_node.new_zeros(num_graphs).index_add(0, batch, per_node)

    # ----------------------------------------------------------------------------------------
    # Gradient dE/dg
    # ----------------------------------------------------------------------------------------
    def _grad_of_g(self, g: Tensor, edges: EdgeSet) -> Tensor:
        src, dst, weight = edges.src, edges.dst, edges.weight
        if self.grad == "autograd":
            return self._autograd_grad(g, lambda g: self._node_energy_of_g(g, src, dst, weight))
        k, q = self._keys_queries(g)
        if self._explain or not self.fused:
            grad_k, grad_q = self._propagate_attention_grad(k, q, edges)
        else:
            grad_k, grad_q = fused_attention_grad(k, q, src, dst, self.beta, weight, edges.plan)
        return self._grad_from_attention_parts(g, grad_k, grad_q)

    def _attention_part(self, grad_k: Tensor, grad_q: Tensor) -> Tensor:
        """``(dE/dk) W_K + (dE/dq) W_Q`` as ``[tokens, channels]`` (tokens flattened)."""
        width = self.heads * self.head_dim
        rows = grad_k.numel() // width
        out = torch.mm(grad_k.reshape(rows, width), self.w_k.reshape(width, self.channels))
        return torch.addmm(
            out, grad_q.reshape(rows, width), self.w_q.reshape(width, self.channels)
        )

    def _grad_from_attention_parts(self, g: Tensor, grad_k: Tensor, grad_q: Tensor) -> Tensor:
        """``dE/dg`` from the attention gradients with respect to keys and queries plus the
        Hopfield term, accumulated into one buffer (addmm) so that no ``[tokens, hopfield_dim]``
        tensor is negated or copied."""
        activation = E.hopfield_activation(
            g.reshape(-1, self.channels), self.xi, self.hopfield, self.hopfield_beta
        )
        out = self._attention_part(grad_k, grad_q)
        # Negating xi [K, D] rather than the product keeps the sign off the [N, K] backward.
        return torch.addmm(out, activation, self.xi.neg()).view(g.shape)

    def _fused_norm(self, x: Tensor) -> Tensor:
        """``self.norm(x)`` through PyTorch's fused LayerNorm kernel: the same formula (scalar
        gain expanded over the channels), one op each way instead of about ten."""
        norm = self.norm
        if type(norm) is not EnergyLayerNorm or x.dtype != norm.delta.dtype:
            return norm(x)
        gain = norm.gamma.expand(self.channels)
        return torch.nn.functional.layer_norm(x, (self.channels,), gain, norm.delta, norm.eps)

    def _uses_fused_path(self) -> bool:
        return self.grad == "analytic" and self.fused and not self._explain and self.steps > 0

    @staticmethod
    def _autograd_grad(g: Tensor, energy_of_g: Callable[[Tensor], Tensor]) -> Tensor:
        """The reference ``dE/dg``: differentiate the energy itself (kept differentiable when
        the caller records gradients, so training through it works)."""
        outer_grad = torch.is_grad_enabled()
        with torch.enable_grad():
            if not g.requires_grad:
                g = g.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(energy_of_g(g).sum(), g, create_graph=outer_grad)
        return grad

    def _propagate_attention_grad(
        self, k: Tensor, q: Tensor, edges: EdgeSet
    ) -> tuple[Tensor, Tensor]:
        """The closed form through ``propagate``, so that explainers and hooks see messages.

        Messages run over the caller's edges, self-loops included with coefficient zero, so that
        an explainer's edge mask lines up with ``edge_index``.
        """
        coef = E.edge_coefficients(k, q, edges.src, edges.dst, self.beta, edges.weight, k.size(0))
        if edges.kept is not None:
            coef = coef.new_zeros(edges.kept.numel(), coef.size(1)).masked_scatter(
                edges.kept.unsqueeze(-1), coef
            )
        size = (k.size(0), k.size(0))
        edge_index = edges.edge_index
        grad_q = -self.propagate(edge_index, value=k, coef=coef, size=size)
        grad_k = -self.propagate(edge_index.flip(0), value=q, coef=coef, size=size)
        return grad_k, grad_q

    def message(self, value_j: Tensor, coef: Tensor) -> Tensor:
        return coef.unsqueeze(-1) * value_j

    def energy_grad(
        self, x: Tensor, edge_index: Adj, edge_weight: Optional[Tensor] = None
    ) -> Tensor:
        """``dE/dg`` at state ``x`` as ``[N, channels]``, by the method chosen with ``grad``."""
        self._check_x(x)
        return self._grad_of_g(self.norm(x), self._edges(x, edge_index, edge_weight))

    # ----------------------------------------------------------------------------------------
    # Dynamics
    # ----------------------------------------------------------------------------------------
    @torch.no_grad()
    def _detached_energy(self, g: Tensor, edges: EdgeSet) -> Tensor:
        return self._node_energy_of_g(g, edges.src, edges.dst, edges.weight).sum()

    def _step(self, x: Tensor, grad: Tensor) -> Tensor:
        x = x - self.alpha * grad
        if self.training and self.noise_std > 0:
            x = x + math.sqrt(self.alpha) * self.noise_std * torch.randn_like(x)
        return x

    def forward(
        self,
        x: Tensor,
        edge_index: Adj,
        edge_weight: Optional[Tensor] = None,
        return_energy: bool = False,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Run ``steps`` descent steps from ``x``.

        Returns the tokens ``[N, channels]``, and with ``return_energy=True`` also the (detached)
        total energy ``[steps + 1]`` before each update and after the last.
        """
        self._check_x(x)
        edges = self._edges(x, edge_index, edge_weight)
        if self._uses_fused_path() and edges.src.numel() and x.size(0):
            # Sort the edges once; every step and the backward pass reuse the layout.
            edges = edges._replace(
                plan=build_edge_plan(edges.src, edges.dst, x.size(0), self.heads)
            )
        energies = []
        for _ in range(self.steps):
            g = self._fused_norm(x)
            if return_energy:
                energies.append(self._detached_energy(g, edges))
            x = self._step(x, self._grad_of_g(g, edges))
        if return_energy:
            energies.append(self._detached_energy(self.norm(x), edges))
            return x, torch.stack(energies).detach()
        return x

    # ----------------------------------------------------------------------------------------
    # Dense path: all pairs of tokens (images, complete graphs)
    # ----------------------------------------------------------------------------------------
    def _dense_inputs(
        self, x: Tensor, mask: Optional[Tensor], edge_weight: Optional[Tensor]
    ) -> tuple[Tensor, Optional[Tensor]]:
        check_features(x, self.channels, ndim=3)
        batch, tokens = x.size(0), x.size(1)
        eye = torch.eye(tokens, dtype=torch.bool, device=x.device)
        if mask is None:
            mask = ~eye.expand(batch, tokens, tokens)
        else:
            if mask.dtype != torch.bool:
                raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
            if tuple(mask.shape) != (batch, tokens, tokens):
                raise ValueError(
                    f"mask must have shape [B, M, M]={[batch, tokens, tokens]}, "
                    f"got {list(mask.shape)}"
                )
            mask = mask & ~eye
        if edge_weight is not None:
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
            if not bool(torch.isfinite(edge_weight).all()):
                raise ValueError("edge_weight contains NaN or inf values")
        return mask, edge_weight

    def _dense_node_energy_of_g(self, g: Tensor, mask: Tensor, weight: Optional[Tensor]) -> Tensor:
        k, q = self._keys_queries(g)
        att = E.dense_attention_energy(k, q, self.beta, mask, weight)
        return att + E.hopfield_energy(g, self.xi, self.hopfield, self.hopfield_beta)

    def _dense_grad_of_g(self, g: Tensor, mask: Tensor, weight: Optional[Tensor]) -> Tensor:
        if self.grad == "autograd":
            return self._autograd_grad(g, lambda g: self._dense_node_energy_of_g(g, mask, weight))
        k, q = self._keys_queries(g)
        grad_k, grad_q = E.dense_attention_grad(k, q, self.beta, mask, weight)
        return self._grad_from_attention_parts(g, grad_k, grad_q)

    def dense_attention_and_hopfield_grads(
        self, x_dense: Tensor, mask: Optional[Tensor] = None
    ) -> tuple[Tensor, Tensor]:
        """The two parts of ``dE/dg`` on the dense path, ``(attention, hopfield)``, each
        ``[B, M, channels]``: used to see which term drives which token."""
        mask, _ = self._dense_inputs(x_dense, mask, None)
        g = self.norm(x_dense)
        k, q = self._keys_queries(g)
        grad_k, grad_q = E.dense_attention_grad(k, q, self.beta, mask, None)
        attention = self._attention_part(grad_k, grad_q).view(g.shape)
        return attention, E.hopfield_grad(g, self.xi, self.hopfield, self.hopfield_beta)

    def dense_energy(
        self, x_dense: Tensor, mask: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None
    ) -> Tensor:
        """Energy of each item of a dense batch ``[B]``."""
        x_dense, restore = self._dense_dtype(x_dense)
        mask, weight = self._dense_inputs(x_dense, mask, edge_weight)
        return self._dense_node_energy_of_g(self.norm(x_dense), mask, weight).sum(-1).to(restore)

    def _dense_dtype(self, x: Tensor) -> tuple[Tensor, torch.dtype]:
        return x.to(self.w_k.dtype), x.dtype

    def forward_dense(
        self,
        x_dense: Tensor,
        mask: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
        return_energy: bool = False,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Dense ET on ``x_dense [B, M, channels]``.

        ``mask [B, M, M]`` (bool, ``mask[b, C, B]`` = token ``C`` attends to token ``B``; ``None``
        = all pairs ``B != C``; the diagonal is always excluded) and ``edge_weight [B, heads, M,
        M]`` indexed the same way. Inputs of another dtype (e.g. bfloat16) are computed in the
        parameters' dtype and returned in their own. With ``return_energy=True`` also returns
        the detached energy of each item ``[B, steps + 1]``.
        """
        x, restore = self._dense_dtype(x_dense)
        mask, weight = self._dense_inputs(x, mask, edge_weight)
        if weight is not None:
            weight = weight.to(x.dtype)
        energies = []
        for _ in range(self.steps):
            g = self.norm(x)
            if return_energy:
                with torch.no_grad():
                    energies.append(self._dense_node_energy_of_g(g, mask, weight).sum(-1))
            x = self._step(x, self._dense_grad_of_g(g, mask, weight))
        out = x.to(restore)
        if return_energy:
            with torch.no_grad():
                energies.append(self._dense_node_energy_of_g(self.norm(x), mask, weight).sum(-1))
            return out, torch.stack(energies, dim=-1).detach()
        return out

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
            f"head_dim={self.head_dim}, hopfield_dim={self.hopfield_dim}, steps={self.steps}, "
            f"alpha={self.alpha}, hopfield={self.hopfield!r})"
        )
