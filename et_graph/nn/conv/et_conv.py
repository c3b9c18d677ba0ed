from __future__ import annotations

import inspect
import math
import warnings
from typing import Any, Literal, Optional, Union, overload

import torch
from torch import Tensor
from torch_geometric.nn.aggr import SumAggregation
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.typing import Adj
from torch_geometric.utils import cumsum, is_sparse

from ... import energy as E
from ...exceptions import ConfigWarning
from ...fused import sparse_kernels_on
from ...native import normal_like
from ..edge_cache import EdgeCache
from ..energy_layer_norm import EnergyLayerNorm
from ..hetero_guard import check_relation_wrappers
from ..validation import (
    DEFAULT_CHUNK_SIZE,
    check_chunk_size,
    check_edge_attr,
    check_edge_index,
    check_edge_weight,
    check_finite_energy,
    check_finite_tokens,
    check_return_energy,
    check_same_device,
    destination_chunks,
    is_integral,
    is_real,
    refuse_tracing,
    sum_per_graph,
    total_dtype,
)
from .et_energy import EdgeSet, ETEnergy, _check_positive, in_parameter_precision

GRAD_MODES = ("analytic", "autograd")

#: Parameter names of ETConv before the energy moved into :class:`ETEnergy`; old state dicts with
#: these keys still load (they are renamed to ``energy_fn.<name>``).
_LEGACY_KEYS = ("w_k", "w_q", "xi", "log_beta", "norm.log_gamma", "norm.delta")
#: PyG's hook registries that run inside ``propagate`` (the fused kernel never calls it).
MESSAGE_HOOK_REGISTRIES = tuple(
    f"_{stage}_forward{kind}_hooks"
    for stage in ("propagate", "message", "aggregate", "message_and_aggregate")
    for kind in ("_pre", ""))


def is_watched(module: Any) -> bool:
    """Whether something watches a ``MessagePassing`` module's messages (an explainer's edge
    mask or a message-level hook), so that it must pass them through ``propagate``."""
    return bool(module._explain) or has_message_hooks(module)


def has_message_hooks(module: Any) -> bool:
    """Whether ``module`` has hooks that only ``propagate`` runs: ``register_message_forward_hook``
    and the rest of PyG's message-level hooks (``AttentionExplainer`` registers one)."""
    return any(getattr(module, name, None) for name in MESSAGE_HOOK_REGISTRIES)

__all__ = ["ETConv", "EdgeSet", "GRAD_MODES"]


def _check_steps(steps: Any) -> int:
    if not is_integral(steps) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    return int(steps)


class EnergyShape:
    """The energy's hyper-parameters and LayerNorm as attributes of the layer that descends on
    it (``self.energy_fn``), shared by :class:`ETConv` and
    :class:`~et_graph.nn.conv.RelationalETConv`."""

    energy_fn: Any

    def __prepare_scriptable__(self) -> Any:
        # torch.jit.script calls this first: without it the failure names a wrapper's line.
        raise NotImplementedError(
            f"{type(self).__name__} does not support TorchScript (keyword-only arguments, and "
            "a hand-written autograd.Function over sparse kernels): use torch.compile, or the "
            "eager module")

    @property
    def channels(self) -> int:
        """Token width ``D``."""
        return self.energy_fn.channels

    @property
    def head_dim(self) -> int:
        """Key/query width ``Y``."""
        return self.energy_fn.head_dim

    @property
    def hopfield_dim(self) -> int:
        """Memories ``K``."""
        return self.energy_fn.hopfield_dim

    @property
    def hopfield(self) -> str:
        """Hopfield energy kind."""
        return self.energy_fn.hopfield

    @property
    def hopfield_beta(self) -> float:
        """Inverse temperature of the ``"softmax"`` Hopfield energy."""
        return self.energy_fn.hopfield_beta

    @property
    def beta_init(self) -> float:
        """Initial per-head inverse temperature of the attention."""
        return self.energy_fn.beta_init

    @property
    def norm(self) -> EnergyLayerNorm:
        """The energy LayerNorm ``g = LN(x)`` (``energy_fn.norm``, shared by the relations
        of a relational layer)."""
        return self.energy_fn.norm

    def _changed_settings(self) -> str:
        """``", name=value"`` for each setting that changes the model and differs from its
        default, for ``__repr__`` (a relational layer hid them: it printed as a default one)."""
        settings: Any = self
        changed = [(name, value) for name, value, default in (
            ("hopfield_beta", self.hopfield_beta, 1.0), ("noise_std", settings.noise_std, 0.0),
            ("coupling", getattr(self.energy_fn, "coupling_matrix", None) is not None, False),
            ("edge_dim", getattr(self.energy_fn, "edge_dim", None), None),
            ("grad", settings.grad, "analytic"), ("cached", settings.cached, False),
        ) if value != default]
        return "".join(f", {name}={value!r}" for name, value in changed)


class DescentSettings:
    """The validated descent hyper-parameters shared by :class:`ETConv` and
    :class:`~et_graph.nn.conv.RelationalETConv`: ``steps``, ``alpha``, ``noise_std``, ``grad``
    and ``cached``."""

    training: bool  # nn.Module's

    def _step(self, x: Tensor, grad: Tensor) -> Tensor:
        """One descent step ``x - alpha * grad`` (plus the training noise), rounded alike in
        both layers: one relation gives ETConv's tokens bit for bit."""
        # One kernel per term (sub/add with alpha) rather than a scaled temporary each.
        x = torch.sub(x, grad, alpha=self.alpha)
        if self.training and self.noise_std > 0:
            x = torch.add(x, normal_like(x), alpha=math.sqrt(self.alpha) * self.noise_std)
        return x

    @property
    def noise_std(self) -> float:
        """Standard deviation of the training-time noise (a finite number ``>= 0``)."""
        if "_noise_std" not in self.__dict__:  # a layer pickled when it was a plain attribute
            return float(self.__dict__.get("noise_std", 0.0))
        return self._noise_std

    @noise_std.setter
    def noise_std(self, value: float) -> None:
        # Set after construction too: -1 or NaN was accepted there without a word.
        if (not is_real(value)
                or not math.isfinite(value) or value < 0):
            raise ValueError(f"noise_std must be a finite number >= 0, got {value!r}")
        self._noise_std = float(value)

    @property
    def steps(self) -> int:
        """Descent steps per forward call (an int ``>= 0``)."""
        return self._steps

    @steps.setter
    def steps(self, value: int) -> None:
        self._steps = _check_steps(value)

    @property
    def alpha(self) -> float:
        """Step size (a positive number)."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        self._alpha = _check_positive(value, "alpha (the step size)")

    @property
    def grad(self) -> str:
        """How ``dE/dg`` is computed: ``"analytic"`` or ``"autograd"``."""
        return self._grad

    @grad.setter
    def grad(self, value: str) -> None:
        if value not in GRAD_MODES:
            raise ValueError(f"grad must be one of {GRAD_MODES}, got {value!r}")
        self._grad = value

    @property
    def cached(self) -> bool:
        """Whether the layer keeps the edges of the last graph it saw
        (:class:`~et_graph.nn.edge_cache.EdgeCache`); setting it starts an empty cache."""
        return self._cached

    @cached.setter
    def cached(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise ValueError(f"cached must be True or False, got {value!r}")
        self._cached = value
        self._edge_cache = EdgeCache()

    def clear_edge_cache(self) -> None:
        """Forget the edges kept by ``cached=True``."""
        self._edge_cache.clear()

    def _num_steps(self, steps: Optional[int]) -> int:
        return self.steps if steps is None else _check_steps(steps)


class AttentionMessages:
    """The attention gradient's two aggregations as PyG messages, for the ET layers that are a
    :class:`~torch_geometric.nn.conv.MessagePassing`: explainers' edge masks and message-level
    hooks act on them. The fused kernel passes no message, so a layer takes this path only
    while something watches (:attr:`_sees_messages`)."""

    def _propagate_coefficients(self, k: Tensor, q: Tensor, alpha: Tensor, edge_index: Tensor,
                                key_offset: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        """``(dE_ATT/dk, dE_ATT/dq)`` from the attention coefficients ``alpha [E, heads]`` of
        the edges ``edge_index [2, E]`` (the caller's, self-loops included with coefficient
        zero, so that an explainer's edge mask lines up with them) and, with edge features,
        their key offsets ``[E, heads, head_dim]``."""
        size = (k.size(0), k.size(0))
        propagate = self.propagate  # type: ignore[attr-defined]
        grad_q = -propagate(edge_index, value=k, alpha=alpha, key_offset=key_offset, size=size)
        grad_k = -propagate(edge_index.flip(0), value=q, alpha=alpha, key_offset=None,
                            size=size)
        return grad_k, grad_q

    def message(self, value_j: Tensor, alpha: Tensor,
                key_offset: Optional[Tensor] = None) -> Tensor:
        """``alpha[e, h] (value_j[e, h] + key_offset[e, h])``: ``alpha`` is edge ``B -> C``'s
        attention coefficient (the softmax over ``C``'s in-neighbours, times the edge weight),
        per head; ``key_offset`` the key offset of its features, on the queries' gradient only
        (``None`` otherwise). It is named as in ``GATConv``, so that ``AttentionExplainer``
        reads it from the messages (twice per descent step: the keys' and the queries'
        gradients)."""
        if key_offset is not None:
            value_j = value_j + key_offset
        return alpha.unsqueeze(-1) * value_j

    @property
    def _sees_messages(self) -> bool:
        """Whether something watches the messages (an explainer's edge mask or a message-level
        hook), so that the descent must run through ``propagate``."""
        return is_watched(self)

    def _check_watchers(self, edge_index: Any) -> None:
        """Refuse the watchers (an explainer's edge mask, message-level hooks) and wrappers
        that this call would ignore or mislead."""
        if getattr(self, "_edge_type", None) is not None:  # set by to_hetero_with_bases
            raise ValueError(
                "to_hetero_with_bases re-weights each relation's messages with a message hook, "
                f"but {type(self).__name__}'s output is the token state after descent, not "
                "aggregated messages: the wrapper would add up num_bases copies of it. Use "
                "RelationalETConv on data.to_homogeneous() (one energy over the relations)")
        grad = self.grad  # type: ignore[attr-defined]
        if self._explain and grad == "autograd":  # type: ignore[attr-defined]
            raise ValueError(
                "an explainer's edge mask acts on the messages, which grad='autograd' (the "
                "reference path) never passes: the mask would change nothing. Explain a layer "
                "with grad='analytic' (the default)")
        if grad == "autograd" and has_message_hooks(self):
            raise ValueError(
                "this layer has message-level hooks (register_message_forward_hook and the "
                "like, or AttentionExplainer's), which grad='autograd' never runs: it passes no "
                "messages. Use grad='analytic' (the default)")
        if self._explain and getattr(self.energy_fn, "coupling", False):  # type: ignore
            # the coupling term reads the edges outside the messages: an all-zero mask left
            # it whole (an output 3.2 from the edgeless one's, where attention alone gave 0)
            warnings.warn(
                "an explainer's edge mask acts on the attention messages only: the edge "
                "coupling energy (coupling=True) reads every edge unmasked, so the explanation "
                "misses what the layer takes from the edges through it", ConfigWarning,
                stacklevel=4)
        if (self._explain and isinstance(edge_index, Tensor)  # type: ignore[attr-defined]
                and edge_index.layout == torch.sparse_coo and not edge_index.is_coalesced()):
            # the messages run over the coalesced entries (sorted, duplicates summed), and a
            # mask in the caller's order was misaligned, or failed PyG's size assertion
            raise ValueError(
                "an explainer's edge mask lines up with the adjacency's stored entries, which "
                "an uncoalesced COO tensor reorders and merges: pass adj.coalesce()")


class ETConv(EnergyShape, DescentSettings, AttentionMessages, MessagePassing):
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
    \mathbf{k}_{hB}^\top \mathbf{q}_{hC})`. With ``coupling=True`` the energy also has
    :math:`E_{GC} = -\tfrac12\sum_{B\to C} \mathbf{g}_B^\top W \mathbf{g}_C`, which adds
    :math:`\tfrac12 W (\sum_{A \to C} \mathbf{g}_C + \sum_{B \to A} \mathbf{g}_B)` to
    :math:`-\partial E/\partial \mathbf{g}_A`.

    The energy and its parameters are one :class:`~et_graph.nn.ETEnergy` module,
    ``conv.energy_fn``, shared by the sparse path (:meth:`forward`, over ``edge_index``) and
    the dense path (:meth:`forward_dense`, over all pairs of tokens); this class is the descent
    loop around it. ``conv.norm``, ``conv.w_k``, ``conv.w_q``, ``conv.xi``, ``conv.log_beta`` and
    ``conv.beta`` are that module's; state dicts saved before the split (keys ``w_k``, ...) still
    load.

    Defined behaviour: an edge ``B -> C`` (``edge_index[0] = B``, ``edge_index[1] = C``) lets
    ``C`` attend to ``B``; self-loops are ignored (the paper sums over ``B != C``); duplicate
    edges count as often as they appear (a sparse adjacency is read as its matrix: each stored
    pair once, the value its edge weight, so a stored 0 is an edge of weight 0); a node without
    in-neighbours contributes no attention energy; ``N = 0`` returns an empty tensor. NaN/inf
    features, features whose square would overflow the LayerNorm's variance (float32: beyond
    about ``1e19 / sqrt(D)``), malformed ``edge_index`` and wrongly shaped or out-of-range
    weights raise ``ValueError``; a descent
    that turns finite inputs into NaN or inf raises ``FloatingPointError``, as does an energy
    (or ``return_energy`` trace) that is NaN or inf, e.g. at a ``beta`` of 0 or inf.

    Dtypes: everything is computed in the parameters' dtype. Features of lower precision (e.g.
    bfloat16/float16 on a float32 layer) are upcast and the tokens come back in the features'
    dtype, while energies stay in the parameters' dtype (``node_energy``: a float16 total
    would overflow past 65504), except a 16-bit *layer*'s totals (``energy``,
    ``dense_energy`` and the ``return_energy`` traces), which are summed and returned in
    float32 for the same reason; features of higher
    precision (float64 on a float32 layer) raise ``ValueError`` rather than being rounded
    silently: call ``conv.double()`` or ``x.float()``. Edge weights (and a sparse adjacency's
    values) are cast to the parameters' dtype: float64 weights, as NumPy gives them, are
    rounded on a float32 layer (to 7 digits, like the features of any float32 pipeline).

    In PyG pipelines:

    * **Receptive field.** One step reads two hops: the query side over ``C``'s in-neighbours,
      the key side along ``C``'s out-edges into its out-neighbours' softmaxes. ``T`` steps
      read ``2T`` hops, so a subgraph (``k_hop_subgraph``, a ``NeighborLoader`` batch) gives a
      seed its full-graph tokens only with ``2T`` hops of a symmetric graph (see
      :class:`~et_graph.loaders.NeighbourSampler`); fewer hops give an approximation, silently.
    * **Heterogeneous graphs.** The output is the token state ``x`` after descent, not a
      message: ``to_hetero(..., aggr="sum")`` and ``HeteroConv`` would add ``x`` once per
      relation into a node type (between node types the call is bipartite and refused; over
      one node type it runs, with a ``ConfigWarning``, found by a look up the call stack: not
      under ``torch.compile``, nor from more than about fifteen modules deep inside the
      wrapper). ``to_hetero_with_bases`` is refused, and
      so is :class:`~et_graph.nn.RelationalETConv` under ``to_hetero`` or ``HeteroConv``. Use
      :class:`~et_graph.nn.RelationalETConv` (one energy summed over relations, the exact
      model) on ``data.to_homogeneous()``.
    * **Transforms.** ``torch.compile`` works (with graph breaks at the input checks;
      ``fullgraph=True`` and ``torch.export`` do not). ``torch.func`` (``grad``, ``vmap``,
      ``functional_call``) uses the reference closed form instead of the fused kernel, with
      the same values; under ``vmap`` the NaN/inf input check is skipped (it reads values).
      TorchScript (``torch.jit.script``/``trace``), ``torch.export`` (so ONNX export) and the
      meta device are not supported on edges. The dense path (``forward_dense``, e.g.
      :class:`~et_graph.nn.models.ETImageCompletion`) exports with ``torch.export`` (torch
      >= 2.6, which tells the layers it is exporting; the default ``grad="analytic"``), a
      dynamic batch included; the exported program skips the input checks that read values.
      Training a compiled layer with ``grad="autograd"`` fails in torch ("aot_autograd does
      not support double backward"); the default analytic path trains compiled.
    * **Message hooks and explainers.** The fused kernel does not call ``propagate``, so a
      layer with PyG's message-level hooks (``register_message_forward_hook``,
      ``register_propagate_forward_hook`` and the rest) or an explainer's edge mask runs the
      reference path, which gives the same values more slowly; ``grad="autograd"`` passes no
      messages and refuses them. The messages carry each edge's attention coefficient as
      ``alpha`` (``[E, H]``, aligned with ``edge_index``), so ``AttentionExplainer`` reads
      ET's attention averaged over the descent steps. There is no
      ``return_attention_weights``: the attention changes at every step, and a
      ``register_message_forward_hook`` reading ``inputs[0]["alpha"]`` sees each step's
      (twice: the keys' and the queries' messages); :meth:`attention_coefficients` gives
      them at a given state without hooks. Module forward hooks fire on every
      path. An explainer's edge mask multiplies the messages after the softmax (PyG's
      convention), so a mask value of 0 is not the same as removing the edge.
    * **Against** :class:`~torch_geometric.nn.conv.TransformerConv`. The output width is the
      input width (the tokens descend in place), so there is no ``out_channels``, and every
      setting after ``channels`` is keyword-only: ``ETConv(16, 32)``, PyG's ``(in, out)``
      habit, would otherwise have built 32 heads. There is no attention ``dropout``, ``bias``,
      ``root_weight``, ``concat`` or ``beta`` (the update is the energy's gradient; put
      ``nn.Dropout`` or a skip connection around the layer). ``edge_dim`` exists, with the
      features' map inside the energy (below), and ``edge_attr`` is keyword-only: the third
      positional argument of ``forward`` is ``edge_weight`` (``[E]`` or ``[E, H]``), which
      scales the attention logits.
    * **Edge features** (``edge_dim=F``, ``forward(x, edge_index, edge_attr=...)``). Each
      edge's features ``f_BC [F]`` offset the key its source offers, as
      ``TransformerConv(edge_dim=...)`` adds them to its keys:
      :math:`a_{BCh} = \beta_h w_{BCh} (\mathbf{k}_{hB} + W^E_h \mathbf{f}_{BC})^\top
      \mathbf{q}_{hC}`, inside :math:`E_{ATT}`. The offset does not depend on the tokens, so
      the descent is still the energy's exact gradient (the query side gains
      :math:`-\sum_B c_{BC} W^E_h \mathbf{f}_{BC}`) and the energy still falls. The fused
      kernel takes them without an ``[E, H, Y]`` tensor
      (:func:`~et_graph.fused.fused_offset_attention_grad`; the opt-in compiled kernel has no
      offsets, so such a layer runs the sparse kernels; ``bench_etconv.py --edge-dim F``
      measures it against ``TransformerConv(edge_dim=F)``). Sparse paths only
      (:meth:`forward_chunked` takes ``edge_attr`` too; :meth:`forward_dense` refuses such a
      layer).

    Args:
        channels: token width ``D``.
        heads: attention heads ``H``.
        head_dim: width ``Y`` of each key/query.
        hopfield_dim: number ``K >= 0`` of Hopfield memories (default ``4 * channels``).
        steps: descent steps per forward call (``>= 0``; :meth:`forward` can override it).
        alpha: step size ``> 0``.
        hopfield: ``"relu"`` or ``"softmax"``.
        hopfield_beta: inverse temperature ``> 0`` of the ``"softmax"`` Hopfield energy.
        beta_init: initial per-head inverse temperature ``> 0`` (default ``1 / sqrt(head_dim)``).
        noise_std: standard deviation ``>= 0`` of the training-time noise of eq. 27.
        grad: ``"analytic"`` (fused closed form) or ``"autograd"`` (differentiate the energy
            function's per-node energy, ``energy_fn.node_energy_of_g``, which :meth:`energy`
            sums; the reference). A new term belongs in :attr:`energy_fn`, an
            :class:`~et_graph.nn.ETEnergy` subclass: both modes descend that.
        eps: LayerNorm epsilon.
        coupling: add the edge coupling energy :math:`-\tfrac12\sum_{B\to C} g_B^\top W g_C`
            (see :class:`~et_graph.nn.ETEnergy`; sparse path only), whose gradient sums the
            neighbours' tokens. Edge weights and an explainer's edge mask do not enter it
            (they act on the attention logits and messages).
        edge_dim: width ``F`` of the edge features ``edge_attr [E, F]`` that :meth:`forward`
            then requires (``None``, the default: no edge features). A learned ``w_edge
            [H, Y, F]`` maps them to key offsets (see *Edge features* above).
        energy_cls: the energy to descend: :class:`~et_graph.nn.ETEnergy` or a subclass with a
            new term (built with the settings above, as :attr:`energy_fn`).
        energy_kwargs: the subclass's own constructor settings (a new term's strength, say),
            passed to ``energy_cls`` beside those above.
        cached: keep the validated, sorted edges of the last ``edge_index`` and reuse them while
            the same tensor (same object, not changed in place) comes again, as in full-batch
            training, where every epoch and every evaluation pass the same graph (sorting its
            edges for the fused kernel is a sizeable share of a training step on Tolokers).
            Like PyG's ``cached=True``, meant for a fixed graph; the check is by identity and
            version counter, so a change the counter does not see (a write through ``.data``
            or a shared NumPy buffer) needs :meth:`clear_edge_cache`. Off by default; the
            anomaly and masked-reconstruction models turn it on.
        **kwargs: passed to :class:`~torch_geometric.nn.conv.MessagePassing`. The energy fixes
            the aggregation, so only ``aggr="add"`` (or ``"sum"``) and
            ``flow="source_to_target"`` are accepted; anything else raises ``ValueError``.

    Shapes:
        - **input:**
          node features :math:`(|\mathcal{V}|, D)`,
          edge indices :math:`(2, |\mathcal{E}|)` (a ``torch.Tensor`` of any integer dtype, a
          PyG ``EdgeIndex``, a torch sparse ``adj_t`` or a ``SparseTensor``),
          edge weights :math:`(|\mathcal{E}|)` or :math:`(|\mathcal{E}|, H)` *(optional)*,
          edge features :math:`(|\mathcal{E}|, F)` (``edge_attr``, with ``edge_dim=F``)
        - **output:** node features :math:`(|\mathcal{V}|, D)`, and with
          ``return_energy=True`` the energies :math:`(T + 1)`
    """

    #: Use the fused autograd.Function; ``False`` routes the closed form through ``propagate``.
    fused: bool = True

    #: Methods that report the energy but that no descent reads (the descent reads
    #: ``energy_fn``): a subclass overriding them would report one energy and descend another.
    _REPORTING_ONLY = ("node_energy", "energy", "energy_grad")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = [name for name in cls._REPORTING_ONLY
               if getattr(cls, name) is not getattr(ETConv, name)]
        if own:
            warnings.warn(
                f"{cls.__name__} overrides ETConv.{', ETConv.'.join(own)}, which the descent "
                "does not read: it descends energy_fn (an ETEnergy). Put a new term in an "
                "ETEnergy subclass and set it as conv.energy_fn (or pass energy_cls=), so "
                "that the steps and the reported energies agree", ConfigWarning, stacklevel=2)

    def __init__(
        self,
        channels: int,
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
        coupling: bool = False,
        edge_dim: Optional[int] = None,
        cached: bool = False,
        energy_cls: type[ETEnergy] = ETEnergy,
        energy_kwargs: Optional[dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        _refuse_transformer_conv_settings(kwargs)
        if not (isinstance(energy_cls, type) and issubclass(energy_cls, ETEnergy)):
            raise TypeError(f"energy_cls must be ETEnergy or a subclass of it, got {energy_cls!r}"
                            " (a new term's own settings go in energy_kwargs={...})")
        energy_kwargs = _checked_energy_kwargs(energy_kwargs, energy_cls, kwargs)
        aggr = kwargs.setdefault("aggr", "add")
        if not (isinstance(aggr, str) and aggr in ("add", "sum")) and not isinstance(
            aggr, SumAggregation
        ):
            raise ValueError(
                f"ETConv supports only aggr='add': its update is the closed-form gradient of the "
                f"energy, a sum over edges; got aggr={aggr!r}"
            )
        flow = kwargs.get("flow", "source_to_target")
        if flow != "source_to_target":
            raise ValueError(
                "ETConv supports only flow='source_to_target' (an edge B -> C lets C attend to "
                f"B; flip edge_index to reverse the edges); got flow={flow!r}"
            )
        if kwargs.pop("node_dim", 0) != 0:
            raise ValueError("ETConv fixes node_dim=0 (tokens are [N, ...])")
        super().__init__(node_dim=0, **kwargs)
        if grad not in GRAD_MODES:
            raise ValueError(f"grad must be one of {GRAD_MODES}, got {grad!r}")
        if edge_dim is not None and "edge_dim" not in _named_settings(energy_cls.__init__) \
                and not _takes_any_keyword(energy_cls.__init__):
            raise TypeError(f"{energy_cls.__name__} takes no edge_dim: an energy subclass "
                            "for edge features accepts edge_dim=None and passes it to "
                            "ETEnergy.__init__")
        self.energy_fn = energy_cls(
            channels,
            heads=heads,
            head_dim=head_dim,
            hopfield_dim=hopfield_dim,
            hopfield=hopfield,
            hopfield_beta=hopfield_beta,
            beta_init=beta_init,
            eps=eps,
            coupling=coupling,
            # (only when set: an energy subclass written before edge features need not take it)
            **({} if edge_dim is None else {"edge_dim": edge_dim}),
            **energy_kwargs,
        )
        if getattr(self.energy_fn, "edge_dim", None) != edge_dim:
            raise TypeError(f"{energy_cls.__name__} was given edge_dim={edge_dim} but built an "
                            f"energy with edge_dim={getattr(self.energy_fn, 'edge_dim', None)}: "
                            "pass it on to ETEnergy.__init__")
        self.steps = steps
        self.alpha = alpha
        self.noise_std = noise_std
        self.grad = grad
        self.cached = cached
        # (the public register_load_state_dict_pre_hook exists from torch 2.5; this form,
        # which it calls, in every torch the package allows)
        self._register_load_state_dict_pre_hook(_rename_legacy_keys, with_module=True)

    def _edges(
        self, x: Tensor, edge_index: Adj, edge_weight: Optional[Tensor], plan: bool,
        edge_attr: Optional[Tensor] = None,
    ) -> EdgeSet:
        """``energy_fn.edges``, through the cache when ``cached`` is on."""
        fn = self.energy_fn
        if not self.cached or is_sparse(edge_index):
            return fn.edges(x, edge_index, edge_weight, plan=plan, edge_attr=edge_attr)
        # before the cache: a hit skipped the check in fn.edges, so a model moved to the CPU
        # mixed its CPU tokens with the kept GPU edges (a device audit)
        check_same_device(x, edge_index=edge_index, edge_weight=edge_weight,
                          edge_attr=edge_attr)
        topology = self._edge_cache.fetch(
            (edge_index,), x.size(0), lambda: fn.topology(x, edge_index, plan),
            # a plan may be wanted now that was not built before (no edges: none is ever built)
            lambda kept: not plan or kept.plan is not None or not kept.num_edges or not x.size(0))
        return fn.featured(fn.weighted(topology, edge_weight, x.dtype), edge_attr, x.dtype)

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        super().reset_parameters()
        self.energy_fn.reset_parameters()

    # ----------------------------------------------------------------------------------------
    # Hyper-parameters and the energy's parameters, as attributes of the layer
    # ----------------------------------------------------------------------------------------
    @property
    def heads(self) -> int:
        """Attention heads ``H``."""
        return self.energy_fn.heads

    @property
    def edge_dim(self) -> Optional[int]:
        """Width ``F`` of the edge features (``None``: the layer takes none)."""
        return getattr(self.energy_fn, "edge_dim", None)

    @property
    def w_edge(self) -> Optional[Tensor]:
        """Edge-feature key maps ``[H, Y, F]`` (``energy_fn.w_edge``; ``None`` without
        ``edge_dim``)."""
        return getattr(self.energy_fn, "w_edge", None)

    @property
    def w_k(self) -> Tensor:
        """Key maps ``[H, Y, D]`` (``energy_fn.w_k``)."""
        return self.energy_fn.w_k

    @property
    def w_q(self) -> Tensor:
        """Query maps ``[H, Y, D]`` (``energy_fn.w_q``)."""
        return self.energy_fn.w_q

    @property
    def xi(self) -> Tensor:
        """Hopfield memories ``[K, D]`` (``energy_fn.xi``)."""
        return self.energy_fn.xi

    @property
    def log_beta(self) -> Tensor:
        """Log of the per-head inverse temperature ``[H]`` (``energy_fn.log_beta``)."""
        return self.energy_fn.log_beta

    @property
    def beta(self) -> Tensor:
        """Per-head inverse temperature ``[H]``, positive by construction."""
        return self.energy_fn.beta

    # ----------------------------------------------------------------------------------------
    # Energy
    # ----------------------------------------------------------------------------------------
    @in_parameter_precision
    def node_energy(
        self, x: Tensor, edge_index: Adj, edge_weight: Optional[Tensor] = None, *,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor:
        """Each node's share of the energy ``[N]``: its attention term (as a destination) plus its
        Hopfield term (and, with ``coupling``, each edge's coupling term at its destination).
        The shares sum to :meth:`energy`. The attention share falls with the in-degree (a
        log-sum-exp over more in-edges), so as an anomaly score it reads partly as a low
        in-degree."""
        fn = self.energy_fn
        x_in = fn.check_tokens(x)
        edges = fn.edges(x_in, edge_index, edge_weight, edge_attr=edge_attr)
        # In the parameters' dtype, not x's: a float16 total overflows past 65504.
        return check_finite_energy(fn.node_energy_of_g(fn.norm(x_in), edges), fn.beta)

    def energy(
        self,
        x: Tensor,
        edge_index: Adj,
        edge_weight: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
        *,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor:
        """Total energy of state ``x`` (scalar), or per graph ``[num_graphs]`` given ``batch``
        (an integer ``[N]`` tensor of graph ids); pass ``num_graphs`` (``Batch.num_graphs``)
        when the last graphs of a batch may be empty, or they are dropped."""
        return sum_per_graph(self.node_energy(x, edge_index, edge_weight, edge_attr=edge_attr),
                             batch, num_graphs)

    @in_parameter_precision
    def attention_coefficients(
        self, x: Tensor, edge_index: Adj, edge_weight: Optional[Tensor] = None, *,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor:
        r"""Each edge's attention coefficient at state ``x``, ``[E, heads]``:
        :math:`c_{e,h} = w_{e,h}\,\operatorname{softmax}_{B \in N(C)}(\beta_h w_{e,h}\,
        \mathbf{k}_{hB}^\top \mathbf{q}_{hC})` for edge ``e = B -> C`` (the weight scales the
        logit and the coefficient, as in the energy; ``w = 1`` without ``edge_weight``), in
        the order of ``edge_index``'s columns (of a sparse adjacency's coalesced entries), a
        self-loop's 0. It is the coefficient the first descent step from
        ``x`` gives its messages (``alpha`` to a message hook): pass the layer's input for the
        attention it starts from, its output for where the descent ended. The per-edge scores
        of PyG's ``return_attention_weights``, which ``forward`` does not take; computed
        without the messages, so no hook runs and the fused path stays on. They are the
        built-in dot-product attention's (an energy subclass with another attention has its
        own), and differentiable: wrap the call in ``torch.no_grad()`` to only read them."""
        fn = self.energy_fn
        x_in = fn.check_tokens(x)
        edges = fn.edges(x_in, edge_index, edge_weight, edge_attr=edge_attr)
        k, q = fn.keys_queries(fn.norm(x_in))
        return self._callers_edge_coefficients(k, q, edges, fn.key_offsets(edges)).to(x.dtype)

    @in_parameter_precision
    def energy_grad(
        self, x: Tensor, edge_index: Adj, edge_weight: Optional[Tensor] = None, *,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor:
        """``dE/dg`` at state ``x`` as ``[N, channels]``, by the method chosen with ``grad``."""
        fn = self.energy_fn
        x_in = fn.check_tokens(x)
        edges = fn.edges(x_in, edge_index, edge_weight, edge_attr=edge_attr)
        return self._grad_of_g(fn.norm(x_in), edges).to(x.dtype)

    # ----------------------------------------------------------------------------------------
    # Gradient dE/dg on the sparse path
    # ----------------------------------------------------------------------------------------
    def _grad_of_g(self, g: Tensor, edges: EdgeSet) -> Tensor:
        fn = self.energy_fn
        if self.grad == "autograd":
            return fn.autograd_grad_of_g(g, edges)
        unfused = self._sees_messages or not self.fused or not sparse_kernels_on(g.device)
        fn.check_closed_form("unfused" if unfused else "fused")
        if unfused:
            k, q = fn.keys_queries(g)
            grad_k, grad_q = self._propagate_attention_grad(k, q, edges)
            return fn.grad_from_attention_grads(g, grad_k, grad_q, edges)
        return fn.grad_of_g(g, edges, fused=True)

    def _propagate_attention_grad(
        self, k: Tensor, q: Tensor, edges: EdgeSet
    ) -> tuple[Tensor, Tensor]:
        """The closed form through ``propagate``, so that explainers and hooks see messages.

        Messages run over the caller's edges, self-loops included with coefficient zero, so that
        an explainer's edge mask (and ``AttentionExplainer``'s coefficients) line up with
        ``edge_index``.
        """
        key_offset = self.energy_fn.key_offsets(edges)
        return self._propagate_coefficients(
            k, q, self._callers_edge_coefficients(k, q, edges, key_offset), edges.edge_index,
            None if key_offset is None else _at_callers_edges(key_offset, edges.kept))

    def _callers_edge_coefficients(self, k: Tensor, q: Tensor, edges: EdgeSet,
                                   key_offset: Optional[Tensor]) -> Tensor:
        """Each edge's attention coefficient ``[E, H]`` in the order of the caller's
        ``edge_index``, a self-loop's 0 (no neighbour to attend): what the messages carry and
        :meth:`attention_coefficients` returns (``key_offset``: the kept edges' key offsets,
        ``energy_fn.key_offsets(edges)``, which the message path also passes on)."""
        alpha = E.edge_coefficients(k, q, edges.src, edges.dst, self.beta, edges.weight,
                                    k.size(0), key_offset)
        return _at_callers_edges(alpha, edges.kept)

    # ----------------------------------------------------------------------------------------
    # Dynamics
    # ----------------------------------------------------------------------------------------
    @overload
    def forward(
        self,
        x: Tensor,
        edge_index: Adj,
        edge_weight: Optional[Tensor] = None,
        return_energy: Literal[False] = False,
        *,
        steps: Optional[int] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor: ...

    @overload
    def forward(
        self,
        x: Tensor,
        edge_index: Adj,
        edge_weight: Optional[Tensor],
        return_energy: Literal[True],
        *,
        steps: Optional[int] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(
        self,
        x: Tensor,
        edge_index: Adj,
        edge_weight: Optional[Tensor] = None,
        *,
        return_energy: Literal[True],
        steps: Optional[int] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(
        self,
        x: Tensor,
        edge_index: Adj,
        edge_weight: Optional[Tensor] = None,
        return_energy: bool = False,
        *,
        steps: Optional[int] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]: ...

    @in_parameter_precision
    def forward(
        self,
        x: Tensor,
        edge_index: Adj,
        edge_weight: Optional[Tensor] = None,
        return_energy: bool = False,
        *,
        steps: Optional[int] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Run ``steps`` descent steps from ``x [N, channels]`` over the edges ``edge_index``
        (``[2, E]``, a torch sparse ``adj_t`` or a ``SparseTensor``) with optional weights
        ``edge_weight [E]`` or ``[E, heads]``.

        ``edge_attr [E, edge_dim]`` are the edges' features, for a layer built with ``edge_dim``
        (required then, refused otherwise; keyword-only, as the third positional argument is
        ``edge_weight``). ``steps`` overrides ``self.steps`` for this call (``None`` =
        ``self.steps``). Returns the
        tokens ``[N, channels]`` in ``x``'s dtype, and with ``return_energy=True`` also the
        (detached) total energy ``[steps + 1]`` before each update and after the last.
        """
        refuse_tracing(self)
        check_return_energy(return_energy, type(self).__name__)
        check_relation_wrappers(self)
        self._check_watchers(edge_index)
        num_steps = self._num_steps(steps)
        fn = self.energy_fn
        out = fn.check_tokens(x)
        if edge_attr is None and edge_weight is not None and self.edge_dim is not None:
            raise ValueError(
                f"{type(self).__name__} was built with edge_dim={self.edge_dim} but got no "
                "edge_attr: pass the edge features by name, conv(x, edge_index, "
                "edge_attr=...) (the third positional argument is edge_weight, not "
                "TransformerConv's edge_attr)")
        fused = (self.grad == "analytic" and self.fused and not self._sees_messages
                 and num_steps > 0 and sparse_kernels_on(out.device))
        # With the fused kernel the edges are sorted once; every step and backward reuse that.
        edges = self._edges(out, edge_index, edge_weight, fused, edge_attr)
        try:
            return self._descend(x, out, edges, num_steps, return_energy)
        finally:  # a kept plan (cached=True) must not hold this call's weights past it
            if edges.plan is not None:
                edges.plan.forget_values()

    @overload
    def descend_edges(self, x: Tensor, edges: EdgeSet, *, steps: Optional[int] = None,
                      return_energy: Literal[False] = False) -> Tensor: ...

    @overload
    def descend_edges(self, x: Tensor, edges: EdgeSet, *, steps: Optional[int] = None,
                      return_energy: Literal[True]) -> tuple[Tensor, Tensor]: ...

    @overload
    def descend_edges(self, x: Tensor, edges: EdgeSet, *, steps: Optional[int] = None,
                      return_energy: bool = False) -> Union[Tensor, tuple[Tensor, Tensor]]: ...

    @in_parameter_precision
    def descend_edges(
        self, x: Tensor, edges: EdgeSet, *, steps: Optional[int] = None,
        return_energy: bool = False,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """:meth:`forward` over edges built beforehand by ``self.energy_fn.edges(x, edge_index,
        edge_weight, plan=True, edge_attr=...)`` (``edge_attr`` with ``edge_dim``, refused
        without; checked against the layer's ``edge_dim``): a caller that runs several blocks
        with the same heads on one graph (:class:`~et_graph.nn.ETGraphModel`) validates and
        sorts the edges once. Edges built from learnable weights or features hold what
        self-loop removal derived from them: build them again in each training iteration. No
        module
        hooks run, as with any method other than ``__call__`` (PyG's message-level hooks do:
        the descent then runs through ``propagate``)."""
        try:
            return self._descend(x, self.energy_fn.check_tokens(x), edges,
                                 self._num_steps(steps), return_energy)
        finally:  # as forward: edges reused across iterations must not keep this call's
            # reordered weights and features, whose autograd graph a backward frees (a review)
            if edges.plan is not None:
                edges.plan.forget_values()

    def _descend(
        self, x: Tensor, out: Tensor, edges: EdgeSet, num_steps: int, return_energy: bool
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """The descent loop of :meth:`forward` from validated tokens ``out`` (``x`` in the
        parameters' dtype) over validated ``edges`` (from ``energy_fn.edges``, which a caller
        running several blocks on one graph builds once; see :class:`ETGraphModel`)."""
        fn = self.energy_fn
        if edges.plan is not None and edges.plan.heads != self.heads:
            raise ValueError(f"edges were planned for {edges.plan.heads} heads, not {self.heads}")
        fn.check_edge_features(edges)
        energies = []
        for _ in range(num_steps):
            g = fn.layer_norm(out)
            if return_energy:
                energies.append(_detached_total(fn, g, edges))
            out = self._step(out, self._grad_of_g(g, edges))
        if num_steps:
            check_finite_tokens(out)
        if return_energy:
            energies.append(_detached_total(fn, fn.norm(out), edges))
            return out.to(x.dtype), check_finite_energy(torch.stack(energies).detach(), fn.beta)
        return out.to(x.dtype)

    @in_parameter_precision
    @torch.no_grad()
    def forward_chunked(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Optional[Tensor] = None,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_edges: Optional[int] = None,
        steps: Optional[int] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor:
        r"""Inference in bounded memory: the same tokens as :meth:`forward` (to float rounding),
        computed ``chunk_size`` destination nodes at a time, under ``torch.no_grad``.
        ``chunk_edges`` also caps the in-edges of a chunk (a node with more in-edges than that
        is a chunk alone): on a graph with hubs, a chunk's per-edge arrays are then bounded by
        edges, whatever the degrees.

        The edges are sorted once by destination (one index per edge). Each step then makes
        one pass over chunks of destination nodes :math:`S` with their in-edges. Those edges
        give the softmax of every node of :math:`S` exactly (paper eq. 17, the coefficients of
        :func:`et_graph.energy.edge_coefficients`), hence

        * the query-side gradient of :math:`S`, mapped to :math:`\mathbf{g}` at once, and
        * the key-side gradient that these softmaxes send to their source nodes, scattered into
          an ``[N, H, Y]`` accumulator.

        A last pass over node chunks adds the key side and the Hopfield term and takes the
        step. The work is one pass over the edges per step, as in the full pass. The memory is
        four ``[N, D]``-sized arrays (tokens, keys, the key-gradient accumulator, the next
        tokens) plus the per-edge arrays of one chunk, ``[E_S, H, Y]`` for a chunk with
        ``E_S`` in-edges (``E_S <= chunk_edges`` when it is given), and the queries only per
        chunk. A single chunk holding every edge (``chunk_size >= N`` without ``chunk_edges``)
        needs more memory than :meth:`forward`'s fused pass. Evaluation mode only (no noise);
        ``edge_index`` must be a ``[2, E]`` tensor. A layer with ``edge_dim`` takes
        ``edge_attr [E, F]`` here as in :meth:`forward` (sorted once with the edges; a chunk's
        key offsets are ``[E_S, H, Y]``, with its other per-edge arrays).
        """
        if self.training and self.noise_std > 0:
            raise ValueError("forward_chunked is for inference: call conv.eval() first")
        self.energy_fn.refuse_coupling()
        self.energy_fn.check_builtin_energy("forward_chunked")
        chunk_size = check_chunk_size(chunk_size)
        if chunk_edges is not None:
            chunk_edges = check_chunk_size(chunk_edges, "chunk_edges")
        if not isinstance(edge_index, Tensor) or is_sparse(edge_index):
            raise ValueError("forward_chunked takes edge_index as a [2, E] tensor")
        num_steps = self._num_steps(steps)
        fn = self.energy_fn
        out = fn.check_tokens(x)
        num_nodes = out.size(0)
        edge_index = check_edge_index(edge_index, num_nodes)
        weight = check_edge_weight(edge_weight, edge_index.size(1), fn.heads, out.dtype)
        check_same_device(out, edge_attr=edge_attr)
        attr = check_edge_attr(edge_attr, edge_index.size(1), fn.edge_dim, out.dtype,
                               owner="the layer")
        # In-edges grouped by destination (CSR); self-loops stay in the layout and are dropped
        # chunk by chunk, so that no second [E] copy of the edges is made.
        order = torch.argsort(edge_index[1], stable=True)
        in_src = edge_index[0][order]
        in_weight = None if weight is None else weight[order].to(out.dtype)
        in_attr = None if attr is None else attr[order]
        del order
        in_degree = torch.bincount(edge_index[1], minlength=num_nodes)
        in_ptr = cumsum(in_degree)
        # Node-only passes (keys, the step) take node chunks; the edge pass, edge-capped ones.
        chunks = destination_chunks(in_ptr, chunk_size)
        edge_chunks = chunks if chunk_edges is None else destination_chunks(
            in_ptr, chunk_size, chunk_edges)
        beta, width = self.beta, fn.heads * fn.head_dim
        w_q = fn.w_q.reshape(width, fn.channels)
        for _ in range(num_steps):
            k = out.new_empty(num_nodes, fn.heads, fn.head_dim)
            for start, end in chunks:
                k[start:end] = fn.keys_queries(fn.layer_norm(out[start:end]))[0]
            grad_k = torch.zeros_like(k)
            new = out.new_empty(out.shape)  # holds the query side of dE/dg until the step
            for start, end in edge_chunks:
                lo, hi = int(in_ptr[start]), int(in_ptr[end])
                src = in_src[lo:hi]
                dst = torch.repeat_interleave(
                    torch.arange(end - start, device=out.device), in_degree[start:end])
                w = None if in_weight is None else in_weight[lo:hi]
                features = None if in_attr is None else in_attr[lo:hi]
                keep = src != dst + start
                if not bool(keep.all()):
                    src, dst = src[keep], dst[keep]
                    w = None if w is None else w[keep]
                    features = None if features is None else features[keep]
                offset = (None if features is None or fn.w_edge is None
                          else E.edge_key_offsets(features, fn.w_edge))
                q = fn.keys_queries(fn.layer_norm(out[start:end]))[1]
                coef = E.edge_coefficients(k, q, src, dst, beta, w, end - start,
                                           key_offset=offset).unsqueeze(-1)
                # dE/dq_C = -sum_{B -> C} c (k_B + o_e) and dE/dk_B = -sum_{B -> C} c q_C
                # (et_graph.energy.attention_grad), for the in-edges of this chunk.
                grad_q = torch.zeros_like(q).index_add_(
                    0, dst, coef * E.edge_keys(k, src, offset), alpha=-1)
                torch.mm(grad_q.view(-1, width), w_q, out=new[start:end])
                grad_k.index_add_(0, src, coef * q.index_select(0, dst), alpha=-1)
            del k
            for start, end in chunks:
                rows = out[start:end]
                key_side = grad_k[start:end]
                grad = fn.grad_from_attention_grads(fn.layer_norm(rows), key_side,
                                                    torch.zeros_like(key_side))
                grad += new[start:end]
                torch.add(rows, grad, alpha=-self.alpha, out=new[start:end])
            del grad_k
            out = new
        if num_steps:
            check_finite_tokens(out)
        return out.to(x.dtype)

    # ----------------------------------------------------------------------------------------
    # Dense path: all pairs of tokens (images, complete graphs)
    # ----------------------------------------------------------------------------------------
    def _dense_grad_of_g(self, g: Tensor, mask: Tensor, weight: Optional[Tensor]) -> Tensor:
        self.energy_fn.check_dense_energy()
        if self.grad == "autograd":
            return self.energy_fn.dense_autograd_grad_of_g(g, mask, weight)
        self.energy_fn.check_closed_form("dense")
        return self.energy_fn.dense_grad_of_g(g, mask, weight)

    @in_parameter_precision
    def dense_attention_and_hopfield_grads(
        self,
        x_dense: Tensor,
        mask: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
    ) -> tuple[Tensor, Tensor]:
        """The two parts of ``dE/dg`` on the dense path, ``(attention, hopfield)``, each
        ``[B, M, channels]`` in ``x_dense``'s dtype: used to see which term drives which token."""
        fn = self.energy_fn
        x = fn.check_tokens(x_dense, ndim=3)
        mask, weight = fn.dense_edges(x, mask, edge_weight)
        attention, hopfield = fn.dense_attention_and_hopfield_grads(fn.norm(x), mask, weight)
        return attention.to(x_dense.dtype), hopfield.to(x_dense.dtype)

    @in_parameter_precision
    def dense_energy(
        self, x_dense: Tensor, mask: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None
    ) -> Tensor:
        """Energy of each item of a dense batch ``[B]``, in the parameters' dtype (float32 for
        a 16-bit layer; with the node mask ``[B, M]`` of ``to_dense_batch``, of its real tokens
        only)."""
        fn = self.energy_fn
        x = fn.check_tokens(x_dense, ndim=3)
        real = _node_mask(mask)
        mask, weight = fn.dense_edges(x, mask, edge_weight)
        energy = _item_energy(fn.dense_node_energy_of_g(fn.norm(x), mask, weight), real)
        return check_finite_energy(energy, fn.beta)

    @overload
    def forward_dense(
        self,
        x_dense: Tensor,
        mask: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
        return_energy: Literal[False] = False,
        *,
        steps: Optional[int] = None,
    ) -> Tensor: ...

    @overload
    def forward_dense(
        self,
        x_dense: Tensor,
        mask: Optional[Tensor],
        edge_weight: Optional[Tensor],
        return_energy: Literal[True],
        *,
        steps: Optional[int] = None,
    ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward_dense(
        self,
        x_dense: Tensor,
        mask: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
        *,
        return_energy: Literal[True],
        steps: Optional[int] = None,
    ) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward_dense(
        self,
        x_dense: Tensor,
        mask: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
        return_energy: bool = False,
        *,
        steps: Optional[int] = None,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]: ...

    @in_parameter_precision
    def forward_dense(
        self,
        x_dense: Tensor,
        mask: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
        return_energy: bool = False,
        *,
        steps: Optional[int] = None,
    ) -> Union[Tensor, tuple[Tensor, Tensor]]:
        """Dense ET on ``x_dense [B, M, channels]``.

        ``mask [B, M, M]`` (bool, ``mask[b, C, B]`` = token ``C`` attends to token ``B``; ``None``
        = all pairs ``B != C``; the diagonal is always excluded; the node mask ``[B, M]`` of
        ``to_dense_batch`` = all pairs of real tokens, so padding takes no part) and
        ``edge_weight [B, heads, M, M]`` indexed the same way. ``steps`` overrides
        ``self.steps`` for this call. Inputs of lower precision than the parameters (e.g.
        bfloat16) are computed in the parameters' dtype and returned in their own; higher
        precision raises ``ValueError`` (see the class docstring). With ``return_energy=True``
        also returns the detached energy of each item ``[B, steps + 1]``.
        """
        check_return_energy(return_energy, type(self).__name__)
        num_steps = self._num_steps(steps)
        fn = self.energy_fn
        x = fn.check_tokens(x_dense, ndim=3)
        real = _node_mask(mask)
        mask, weight = fn.dense_edges(x, mask, edge_weight)
        energies = []
        for _ in range(num_steps):
            g = fn.norm(x)
            if return_energy:
                with torch.no_grad():
                    energies.append(_item_energy(fn.dense_node_energy_of_g(g, mask, weight),
                                                 real))
            x = self._step(x, self._dense_grad_of_g(g, mask, weight))
        if num_steps:
            check_finite_tokens(x)
        out = x.to(x_dense.dtype)
        if return_energy:
            with torch.no_grad():
                energies.append(_item_energy(fn.dense_node_energy_of_g(fn.norm(x), mask, weight),
                                             real))
            return out, check_finite_energy(torch.stack(energies, dim=-1).detach(), fn.beta)
        return out

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
            f"head_dim={self.head_dim}, hopfield_dim={self.hopfield_dim}, steps={self.steps}, "
            f"alpha={self.alpha}, hopfield={self.hopfield!r}{self._changed_settings()})"
        )


def _at_callers_edges(per_kept_edge: Tensor, kept: Optional[Tensor]) -> Tensor:
    """``per_kept_edge [E', ...]`` (one row per edge that is not a self-loop) spread over the
    caller's edges ``[E, ...]``, a self-loop's row zero."""
    if kept is None:
        return per_kept_edge
    out = per_kept_edge.new_zeros((kept.numel(), *per_kept_edge.shape[1:]))
    out[kept] = per_kept_edge
    return out


@torch.no_grad()
def _detached_total(fn: ETEnergy, g: Tensor, edges: EdgeSet) -> Tensor:
    return sum_per_graph(fn.node_energy_of_g(g, edges), None)


#: TransformerConv's settings that ETConv has no counterpart for, and why (an audit found them
#: refused by MessagePassing.__init__, whose error named neither ETConv nor the reason).
_TRANSFORMER_CONV_ONLY = {
    "out_channels": "the output width is the input width, channels: the tokens descend in "
                    "place (add a Linear after the layer for another width)",
    "dropout": "the update is the energy's exact gradient, with no attention dropout: put "
               "nn.Dropout around the layer, or use noise_std (the paper's training noise)",
    "bias": "the update is the energy's gradient, with no bias or skip weights",
    "root_weight": "the update is the energy's gradient, with no bias or skip weights",
    "concat": "the heads are summed in the energy; there is no concatenation",
    "beta": "the heads' inverse temperatures are learned (beta_init sets their start)",
}


def _refuse_transformer_conv_settings(kwargs: dict[str, Any]) -> None:
    """Refuse, with the reason, a :class:`~torch_geometric.nn.conv.TransformerConv` setting
    that ETConv does not have."""
    for name, why in _TRANSFORMER_CONV_ONLY.items():
        if name in kwargs:
            raise TypeError(f"ETConv has no {name!r} (TransformerConv's): {why}")


def _takes_any_keyword(function: Any) -> bool:
    """Whether ``function`` has a ``**kwargs`` parameter."""
    return any(parameter.kind is inspect.Parameter.VAR_KEYWORD
               for parameter in inspect.signature(function).parameters.values())


def _named_settings(function: Any) -> tuple[str, ...]:
    """The names ``function`` (a constructor) takes, without ``self``, ``*args``, ``**kw``."""
    return tuple(
        name for name, parameter in inspect.signature(function).parameters.items()
        if name != "self" and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                     inspect.Parameter.VAR_KEYWORD))


#: MessagePassing's own settings, which ETConv passes on (any other keyword is refused); read
#: from its signature, so that a PyG release's new one passes too.
_MESSAGE_PASSING_SETTINGS = _named_settings(MessagePassing.__init__)
#: ETEnergy's settings, which ETConv sets from its own arguments (read from its signature).
_ENERGY_SETTINGS = _named_settings(ETEnergy.__init__)


def _checked_energy_kwargs(energy_kwargs: Optional[dict[str, Any]], energy_cls: type,
                           kwargs: dict[str, Any]) -> dict[str, Any]:
    """``energy_kwargs`` as a dict, after refusing the layer's own settings there and, among the
    layer's other keywords, any that MessagePassing does not take: a new term's setting given
    to the layer failed in MessagePassing.__init__, which named no way to pass it (an audit)."""
    unknown = [name for name in kwargs if name not in _MESSAGE_PASSING_SETTINGS]
    if unknown:
        hint = (f"; a setting of {energy_cls.__name__}'s own goes in energy_kwargs="
                f"{{{unknown[0]!r}: ...}}" if energy_cls is not ETEnergy else "")
        raise TypeError(f"ETConv got unexpected keyword argument(s) {unknown}{hint}")
    if energy_kwargs is None:
        return {}
    if not isinstance(energy_kwargs, dict):
        raise TypeError(f"energy_kwargs must be a dict, got {type(energy_kwargs).__name__}")
    own = [name for name in energy_kwargs if name in _ENERGY_SETTINGS]
    if own:
        raise TypeError(f"energy_kwargs sets {own}, which are ETConv's own arguments: pass "
                        "them to ETConv")
    return dict(energy_kwargs)


def _rename_legacy_keys(
    module: ETConv, state_dict: dict, prefix: str, *args: Any, **kwargs: Any
) -> None:
    """Load state dicts written before the parameters moved to ``energy_fn``."""
    for name in _LEGACY_KEYS:
        old = prefix + name
        if old in state_dict:
            state_dict.setdefault(prefix + "energy_fn." + name, state_dict.pop(old))


def _node_mask(mask: Optional[Tensor]) -> Optional[Tensor]:
    """The node mask ``[B, M]`` of ``to_dense_batch`` when ``mask`` is one (the dense methods
    also take a pair mask ``[B, M, M]``, which says nothing about padding)."""
    if isinstance(mask, Tensor) and mask.dtype == torch.bool and mask.dim() == 2:
        return mask
    return None


def _item_energy(node_energy: Tensor, real: Optional[Tensor]) -> Tensor:
    """Each item's energy ``[B]`` from its tokens' ``[B, M]``, padding tokens left out: their
    Hopfield term (that of ``g = LN(0)``) was counted, though padding takes no part."""
    if real is not None:
        node_energy = node_energy.masked_fill(~real, 0.0)
    # in float32 for a 16-bit layer, as sum_per_graph (a review: the dense path's float16
    # totals still overflowed and blamed beta)
    return node_energy.to(total_dtype(node_energy.dtype)).sum(-1)
