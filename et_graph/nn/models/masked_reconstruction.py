"""Masked node-feature completion with the Energy Transformer, for unsupervised anomaly scores.

The node analogue of :class:`~et_graph.nn.models.image_completion.ETImageCompletion`: nodes are
the tokens, the graph's edges are the attention pairs, and :class:`~et_graph.nn.ETConv`'s descent
completes the masked tokens from their neighbourhoods. No label enters anywhere.
"""
from __future__ import annotations

import math
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import scatter

from ..conv import ETConv
from ..validation import check_features
from .image_completion import check_mask_ratio

#: How :meth:`ETMaskedNodeReconstruction.structure_error` pools a node's in-edge losses.
STRUCTURE_REDUCES = ("mean", "sum", "max")


def random_node_mask(num_nodes: int, mask_ratio: float, generator: Optional[torch.Generator] = None,
                     candidates: Optional[Tensor] = None) -> Tensor:
    """Bool ``[num_nodes]``, True = masked: ``round(ratio * n)`` nodes drawn uniformly from
    ``candidates`` (a bool ``[num_nodes]`` mask; default all nodes), at least one."""
    check_mask_ratio(mask_ratio)
    pool = (torch.arange(num_nodes) if candidates is None
            else candidates.cpu().nonzero().view(-1))
    if pool.numel() == 0:
        raise ValueError("no node can be masked (candidates selects none)")
    count = max(int(round(mask_ratio * pool.numel())), 1)
    chosen = pool[torch.randperm(pool.numel(), generator=generator)[:count]]
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[chosen] = True
    return mask


class ETMaskedNodeReconstruction(nn.Module):
    r"""Masked node-feature completion with one recurrent ET block (the network; the detector
    is :class:`et_graph.detectors.UnsupervisedETDetector`).

    .. math::
        \mathbf{x}^{1}_A = \begin{cases} \mathbf{m} & A \text{ masked} \\
        \mathbf{E}\,\mathbf{y}_A & \text{otherwise} \end{cases}, \qquad
        \mathbf{x}^{T} = \mathrm{ETConv}^{T}(\mathbf{x}^{1}), \qquad
        \hat{\mathbf{y}}_A = \mathbf{W}\,\mathrm{LN}(\mathbf{x}^{T}_A) + \mathbf{b}

    with a linear encoder ``E``, a learnable MASK token ``m``, ``T`` descent steps over the
    graph's edges and a decoder (``LayerNorm`` + linear) back to the features, exactly as the
    image path completes masked patches. A masked node's token starts from ``m`` and is filled in
    through the attention over its edges (as the query of its in-edges and the key of its
    out-edges, whose softmaxes read its out-neighbours' in-neighbours) and the Hopfield memories
    (no neighbour), so the decoded ``\hat{y}_A`` is what the learned energy expects at ``A``
    from its neighbourhood.

    - :meth:`loss`: mean squared error over the features of the masked nodes only.
    - :meth:`reconstruction_error`: per-node squared error ``[N]`` (mean over features).
    - :meth:`node_energy`: per-node energy ``[N]`` at the final tokens
      (:meth:`ETConv.node_energy` of ``x^T``).

    With ``structure=True`` the final tokens also reconstruct the *edges*, as DOMINANT's
    structure decoder does, but sparsely: an edge's logit is
    ``s_AB = z_A . z_B`` with ``z = W_s LN(x^T)``, trained with the logistic loss on every edge
    against as many uniformly drawn node pairs (:meth:`structure_loss`). A node's structure
    error (:meth:`structure_error`) is the mean ``-log sigmoid(s_AB)`` over its in-edges: high
    when its edges join tokens the model does not expect to be linked (an injected clique of
    unrelated nodes), with no dense ``N x N`` product.

    Args:
        in_channels: feature width ``F``.
        hidden_channels: token width ``D``.
        heads, head_dim, hopfield_dim, steps, alpha, hopfield, noise_std: passed to
            :class:`ETConv`.
        structure: also reconstruct the edges (the structure decoder above).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 64,
        heads: int = 4,
        head_dim: int = 16,
        hopfield_dim: Optional[int] = None,
        steps: int = 4,
        alpha: float = 0.5,
        hopfield: str = "relu",
        noise_std: float = 0.0,
        structure: bool = False,
    ) -> None:
        super().__init__()
        if in_channels <= 0 or hidden_channels <= 0:
            raise ValueError("in_channels and hidden_channels must be positive")
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.encoder = nn.Linear(in_channels, hidden_channels)
        self.mask_token = nn.Parameter(torch.empty(hidden_channels))
        self.conv = ETConv(hidden_channels, heads=heads, head_dim=head_dim,
                           hopfield_dim=hopfield_dim, steps=steps, alpha=alpha,
                           hopfield=hopfield, noise_std=noise_std, cached=True)
        self.decoder_norm = nn.LayerNorm(hidden_channels)
        self.decoder = nn.Linear(hidden_channels, in_channels)
        self.edge_decoder = (nn.Linear(hidden_channels, hidden_channels, bias=False)
                             if structure else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        self.encoder.reset_parameters()
        nn.init.normal_(self.mask_token, std=1.0 / math.sqrt(self.mask_token.numel()))
        self.conv.reset_parameters()
        self.decoder_norm.reset_parameters()
        self.decoder.reset_parameters()
        if self.edge_decoder is not None:
            self.edge_decoder.reset_parameters()

    @property
    def structure(self) -> bool:
        """Whether the network also reconstructs edges."""
        return self.edge_decoder is not None

    def _check_mask(self, mask: Tensor, num_nodes: int) -> Tensor:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise ValueError("mask must be a bool tensor [N] (True = masked node)")
        if tuple(mask.shape) != (num_nodes,):
            raise ValueError(f"mask must have shape [{num_nodes}], got {tuple(mask.shape)}")
        return mask.to(self.mask_token.device)

    def encode(self, x: Tensor, mask: Tensor) -> Tensor:
        """Initial tokens ``x^1 [N, D]``: encoded features, or the MASK token where masked."""
        check_features(x, self.in_channels)
        mask = self._check_mask(mask, x.size(0))
        # Raw features in any float dtype (NumPy's float64) are read in the model's.
        tokens = self.encoder(x.to(self.encoder.weight.dtype))
        return torch.where(mask.unsqueeze(-1), self.mask_token.to(tokens.dtype), tokens)

    def decode(self, tokens: Tensor) -> Tensor:
        """Tokens ``[N, D]`` to features ``[N, F]``."""
        return self.decoder(self.decoder_norm(tokens))

    def final_tokens(self, x: Tensor, edge_index: Tensor, mask: Tensor) -> Tensor:
        """``x^T [N, D]``: the tokens after the descent."""
        return self.conv(self.encode(x, mask), edge_index)

    def forward(self, x: Tensor, edge_index: Tensor, mask: Tensor,
                return_energy: bool = False) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Predicted features ``[N, F]`` of every node (masked or not); with
        ``return_energy=True`` also the detached total energy ``[steps + 1]``."""
        tokens = self.encode(x, mask)
        if return_energy:
            tokens, energies = self.conv(tokens, edge_index, return_energy=True)
            return self.decode(tokens), energies
        return self.decode(self.conv(tokens, edge_index))

    def loss(self, x: Tensor, edge_index: Tensor, mask: Tensor,
             targets: Optional[Tensor] = None, structure_weight: float = 0.0,
             generator: Optional[torch.Generator] = None) -> Tensor:
        """Mean squared feature error over the masked nodes (or over ``targets``, a bool
        ``[N]`` subset of them), plus ``structure_weight`` times :meth:`structure_loss` of the
        same final tokens (negative pairs drawn with ``generator``)."""
        chosen = mask if targets is None else targets & mask.to(targets.device)
        if not bool(chosen.any()):
            raise ValueError("the loss needs at least one masked target node")
        tokens = self.final_tokens(x, edge_index, mask)
        error = self._feature_error(tokens, x)
        loss = error[chosen.to(error.device)].mean()
        if structure_weight:
            loss = loss + structure_weight * self.structure_loss(tokens, edge_index, generator)
        return loss

    def _feature_error(self, tokens: Tensor, x: Tensor) -> Tensor:
        """Per-node squared error ``[N]`` (mean over the features) of the decoded ``tokens``."""
        return (self.decode(tokens) - x.to(tokens.dtype)).pow(2).mean(dim=-1)

    def _edge_embedding(self, tokens: Tensor) -> Tensor:
        """``z = W_s LN(tokens)`` ``[N, D]``, the vectors whose dot products are edge logits."""
        if self.edge_decoder is None:
            raise RuntimeError("this network has no edge decoder: build it with structure=True")
        return self.edge_decoder(self.decoder_norm(tokens))

    @staticmethod
    def _pair_logits(z: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        return (z.index_select(0, src) * z.index_select(0, dst)).sum(dim=-1)

    def edge_logits(self, tokens: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        """``s_AB = z_A . z_B`` ``[E]`` for the pairs ``(src, dst)``, ``z = W_s LN(tokens)``."""
        return self._pair_logits(self._edge_embedding(tokens), src, dst)

    def structure_loss(self, tokens: Tensor, edge_index: Tensor,
                       generator: Optional[torch.Generator] = None) -> Tensor:
        """Logistic edge loss: mean ``-log sigmoid(s)`` over the edges plus mean
        ``-log sigmoid(-s)`` over as many uniformly drawn node pairs (the negatives may hit an
        edge now and then, as in any negative sampling; on sparse graphs that is rare)."""
        z = self._edge_embedding(tokens)  # once for the edges and the negatives
        if edge_index.size(1) == 0:
            raise ValueError("the structure loss needs at least one edge")
        negatives = torch.randint(tokens.size(0), (2, edge_index.size(1)), generator=generator)
        negatives = negatives.to(edge_index.device)
        positive = self._pair_logits(z, edge_index[0], edge_index[1])
        negative = self._pair_logits(z, negatives[0], negatives[1])
        return F.softplus(-positive).mean() + F.softplus(negative).mean()

    def structure_error(self, tokens: Tensor, edge_index: Tensor, reduce: str = "mean"
                        ) -> Tensor:
        """Per-node ``-log sigmoid(s_AB)`` ``[N]`` over the node's in-edges, pooled by
        ``reduce`` (``"mean"``, ``"sum"`` or ``"max"``; 0 for a node without any in-edge)."""
        if reduce not in STRUCTURE_REDUCES:
            raise ValueError(f"reduce must be one of {STRUCTURE_REDUCES}, got {reduce!r}")
        loss = F.softplus(-self.edge_logits(tokens, edge_index[0], edge_index[1]))
        return scatter(loss, edge_index[1], dim=0, dim_size=tokens.size(0), reduce=reduce)

    def reconstruction_error(self, x: Tensor, edge_index: Tensor, mask: Tensor) -> Tensor:
        """Per-node squared error ``[N]`` (mean over the ``F`` features) between the prediction
        and ``x``. Only the masked nodes' entries are completion errors; an open node's entry
        is how well its own token is decoded back."""
        return self._feature_error(self.final_tokens(x, edge_index, mask), x)

    def node_energy(self, x: Tensor, edge_index: Tensor, mask: Tensor) -> Tensor:
        """Each node's energy ``[N]`` at the final tokens ``x^T`` (:meth:`ETConv.node_energy`)."""
        return self.conv.node_energy(self.final_tokens(x, edge_index, mask), edge_index)

    def scores(self, x: Tensor, edge_index: Tensor, mask: Tensor,
               structure_reduce: str = "mean") -> dict[str, Tensor]:
        """``{"reconstruction": [N], "energy": [N]}`` (plus ``"structure"``, pooled by
        ``structure_reduce``, with the edge decoder) from one descent."""
        tokens = self.final_tokens(x, edge_index, mask)
        out = {"reconstruction": self._feature_error(tokens, x),
               "energy": self.conv.node_energy(tokens, edge_index)}
        if self.structure:
            out["structure"] = self.structure_error(tokens, edge_index, structure_reduce)
        return out

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, hidden_channels={self.hidden_channels}"
