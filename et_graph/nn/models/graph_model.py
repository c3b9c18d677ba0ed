"""Graph-level Energy Transformer (Hoover et al., 2023, appendix D, eqs. 23-27)."""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Optional, Union, cast

import torch
from torch import Tensor, nn
from torch.nn.modules import module as _module

from ...exceptions import DataWarning
from ...fused import sparse_kernels_on
from ..adjacency_mask import Conv2DAdjacencyMask
from ..conv import ETConv
from ..dropout import Dropout
from ..encoders import EdgeEncoder, LaplacianPEEncoder, NodeEncoder, SumMessagePassing
from ..pool import CLSGraph, CLSPool, graph_sizes
from ..validation import (
    check_dtype,
    check_edge_index,
    check_positive_int,
    check_rw_pe,
    check_within_graphs,
    refuse_tracing,
)

TASKS = ("classification", "regression", "node")
#: Graph readouts: the CLS token; the CLS token concatenated with the sum and the mean of the
#: graph's node tokens; or the CLS token concatenated with the sums of the node tokens at the input
#: and after every block ("jk", jumping knowledge, as GIN's readout of every layer).
READOUTS = ("cls", "cls_sum_mean", "jk")


def _plain_call(module: nn.Module) -> bool:
    """Whether ``module(...)`` would only run ``module.forward``: no forward or backward hooks
    (the module's own or global ones), no ``module.compile()`` and no explainer attached."""
    names = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    hooks = [getattr(module, name, None) for name in names]
    hooks += [getattr(_module, "_global" + name, None) for name in names]
    return (not any(hooks) and getattr(module, "_compiled_call_impl", None) is None
            and not getattr(module, "_explain", False))


class ETGraphModel(nn.Module):
    r"""Energy Transformer for graph classification/regression and node classification.

    1. Node features are embedded (:class:`~et_graph.nn.encoders.NodeEncoder`: one-hot or
       continuous float features, or integer categorical labels), the Laplacian encoding of
       :class:`~et_graph.transforms.CLSLaplacianPE` is projected and added (signs flipped at random
       in training), as is a random-walk encoding (``rw_pe``, e.g. from
       :class:`~et_graph.transforms.RandomWalkPE`) when ``rw_pe_dim > 0``; with
       ``message_passing_layers > 0`` residual sum-aggregation layers then mix each node's
       neighbours into its token (:class:`~et_graph.nn.encoders.SumMessagePassing`); and one
       learnable CLS token per graph is linked both ways to every node of its graph
       (:class:`~et_graph.nn.pool.CLSPool`).
    2. The mask :math:`\hat A = \mathrm{Conv2D}(XX^\top)\odot A'` (eq. 24) is computed once from
       these initial tokens and used as per-edge, per-head ``edge_weight`` by every block; with
       edge features :math:`A'` is a linear map of the encoded edge features (CLS edges carry an
       indicator feature of their own), else the padded adjacency.
    3. ``blocks`` stacked :class:`~et_graph.nn.ETConv` blocks (``S``), each with its own
       parameters and LayerNorm, run ``steps`` (``T``) descent steps each, with noise of std
       ``noise_std`` injected in training only (eq. 27); evaluation is deterministic.
    4. Readout: every final token passes the last block's energy LayerNorm; ``"node"`` uses
       every node's token; ``"classification"``/``"regression"`` use the CLS token of each graph
       (``readout="cls"``) or the CLS token concatenated with the sum and the mean of the graph's
       node tokens (``readout="cls_sum_mean"``: the sum can count, which a softmax average
       cannot), or (``readout="jk"``) the CLS token concatenated with the per-graph sums of the
       node tokens as encoded (before any descent) and after every block (each through that
       block's energy LayerNorm). The input sum makes ET a superset of the structure-agnostic
       baseline (a sum of node features into an MLP), and the per-block sums are the
       jumping-knowledge readout of GIN (Xu et al., 2019); an MLP head maps that to the outputs.

    ``forward(x, edge_index, batch=None, edge_attr=None, lap_pe=None, cls_lap_pe=None,
    num_graphs=None, rw_pe=None)`` returns ``[num_graphs, out_channels]`` (graph tasks) or
    ``[N, out_channels]`` (``task="node"``); for regression with ``out_channels=1`` it is still
    ``[num_graphs, 1]``. ``forward_data(data)`` reads those fields from a PyG ``Data``/``Batch``.

    The constructor's defaults are the paper's model. ``et-graph tudataset`` builds another, the
    best general preset found (``readout="cls_sum_mean"``, ``rw_pe_dim=16``, ``pe_dim=0``, two
    message-passing layers, noise): :func:`et_graph.protocols.tudataset_config.et_model_kwargs`
    gives its arguments. ``kernel_size=1`` with ``pe_dim=0`` makes the model independent of the
    order of a graph's nodes (docs/graph_classification.md, "Node order").

    Args:
        in_channels: width of float node features (``None`` for integer labels only).
        out_channels: classes (classification, node) or targets (regression).
        task: ``"classification"``, ``"regression"`` or ``"node"``.
        hidden_channels: token width ``D``.
        blocks: number ``S`` of stacked ET blocks.
        steps: descent steps ``T`` per block.
        heads, head_dim, hopfield_dim, alpha, hopfield, grad: passed to every ``ETConv``.
        noise_std: std of the training-time noise of eq. 27 (0 disables it).
        pe_dim: number ``k`` of Laplacian eigenvectors (0 disables the encoding; otherwise
            ``lap_pe``/``cls_lap_pe`` from ``CLSLaplacianPE(k=pe_dim)`` are required).
        rw_pe_dim: width of the random-walk encoding ``rw_pe`` ``[N, rw_pe_dim]`` (0 disables
            it); projected and added to the node tokens (the CLS token gets none).
        readout: ``"cls"``, ``"cls_sum_mean"`` or ``"jk"`` (graph tasks; ``"node"`` needs
            ``"cls"``).
        coupling: add the edge coupling energy to every block (:class:`~et_graph.nn.ETConv`):
            a learned symmetric bilinear term over the edges (CLS edges included) whose
            gradient *sums* the neighbours' tokens, so the descent can count.
        kernel_size: Conv2D kernel of the mask (3 = paper, order dependent; 1 =
            permutation-equivariant, the whole model too when ``pe_dim=0``: the Laplacian
            PE's eigenvector basis depends on the node order where an eigenvalue repeats).
        use_mask: apply the Conv2D adjacency mask (``False``: plain graph attention).
        mask_method: ``"sparse"`` or ``"dense"``, see :class:`Conv2DAdjacencyMask`.
        edge_dim: width of float edge features.
        edge_categories: sizes of integer edge labels (one int, or one per label column).
        edge_channels: width the edge features are encoded to before the projection to ``A'``.
        incident_edges: add to each node token a linear map of the sum of its incoming encoded
            edge features (needs edge features). The mask only re-weights a softmax over the
            neighbours, so without it ET cannot count a node's bonds of each type.
        continuous_channels: how many leading node-feature columns are continuous attributes
            (standardised with statistics set by :meth:`fit_feature_scaling`).
        num_node_categories: sizes of integer node labels (e.g. 28 atom types for ZINC).
        message_passing_layers: residual sum-aggregation (GIN) layers applied to the encoded
            node tokens before the CLS token is attached and the descent starts
            (:class:`~et_graph.nn.encoders.SumMessagePassing`; 0 = none, the paper's model).
        message_passing_edges: those layers' messages also read the encoded features of their
            edges (GINE's form, ``ReLU(h_j + W e_ji)``), as the GIN and GatedGCN baselines'
            layers do; needs edge features and ``message_passing_layers > 0``.
        attention_edges: every block's attention also reads the encoded edge features as key
            offsets (``ETConv(edge_dim=...)``: edge ``B -> C`` offers ``k_B + W^E f_BC``),
            the CLS edges with zero features and an indicator column of their own, as the mask
            reads them; needs edge features.
        dropout: dropout on the input tokens and in the head.
    """

    def __init__(
        self,
        in_channels: Optional[int],
        out_channels: int,
        task: str = "classification",
        hidden_channels: int = 64,
        blocks: int = 2,
        steps: int = 3,
        heads: int = 4,
        head_dim: int = 16,
        hopfield_dim: Optional[int] = None,
        alpha: float = 0.1,
        hopfield: str = "relu",
        noise_std: float = 0.0,
        pe_dim: int = 8,
        kernel_size: int = 3,
        use_mask: bool = True,
        mask_method: str = "sparse",
        edge_dim: Optional[int] = None,
        edge_categories: Union[int, Sequence[int], None] = None,
        edge_channels: int = 16,
        continuous_channels: int = 0,
        num_node_categories: Union[int, Sequence[int], None] = None,
        dropout: float = 0.0,
        grad: str = "analytic",
        rw_pe_dim: int = 0,
        readout: str = "cls",
        coupling: bool = False,
        incident_edges: bool = False,
        message_passing_layers: int = 0,
        message_passing_edges: bool = False,
        attention_edges: bool = False,
    ) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if out_channels <= 0:
            raise ValueError(f"out_channels must be positive, got {out_channels}")
        if hidden_channels <= 0:  # checked here, or the node encoder names its own argument
            raise ValueError(f"hidden_channels must be positive, got {hidden_channels}")
        if blocks <= 0:
            raise ValueError(f"blocks must be positive, got {blocks}")
        if pe_dim < 0:
            raise ValueError(f"pe_dim must be >= 0, got {pe_dim}")
        if rw_pe_dim < 0:
            raise ValueError(f"rw_pe_dim must be >= 0, got {rw_pe_dim}")
        if message_passing_layers < 0:
            raise ValueError(f"message_passing_layers must be >= 0, got {message_passing_layers}")
        if readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
        if task == "node" and readout != "cls":
            raise ValueError("task='node' reads every node's token; readout must stay 'cls'")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        # Named here: the encoders' own messages spoke of in_channels and num_categories.
        if edge_dim is not None:
            check_positive_int(edge_dim, "edge_dim")
        check_positive_int(edge_channels, "edge_channels")
        if edge_categories is not None:
            for size in ([edge_categories] if isinstance(edge_categories, int)
                         else list(edge_categories)):
                check_positive_int(size, "edge_categories (each label's number of values)")
        has_edges = edge_dim is not None or edge_categories is not None
        if has_edges and not use_mask:
            raise ValueError("edge features enter through the mask A'; set use_mask=True")
        if incident_edges and not has_edges:
            raise ValueError("incident_edges sums encoded edge features: give edge_dim or "
                             "edge_categories")
        if attention_edges and not has_edges:
            raise ValueError("attention_edges lets the blocks' attention read edge features: "
                             "give edge_dim or edge_categories")
        if message_passing_edges and not (has_edges and message_passing_layers):
            raise ValueError("message_passing_edges lets the message-passing layers read edge "
                             "features: give edge_dim or edge_categories, and "
                             "message_passing_layers > 0")
        self.task = task
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.hidden_channels = hidden_channels
        self.pe_dim = pe_dim
        self.rw_pe_dim = rw_pe_dim
        self.readout = readout
        self.use_mask = use_mask
        self.has_edge_features = has_edges
        self.attention_edges = attention_edges

        self.node_encoder = NodeEncoder(
            hidden_channels, in_channels, continuous_channels, num_node_categories
        )
        self.pe_encoder = LaplacianPEEncoder(pe_dim, hidden_channels) if pe_dim else None
        self.rw_encoder = nn.Linear(rw_pe_dim, hidden_channels) if rw_pe_dim else None
        self.pool = CLSPool(hidden_channels)
        self.edge_encoder = (
            EdgeEncoder(edge_channels, edge_dim, 0, edge_categories) if has_edges else None
        )
        self.incident_encoder = (
            nn.Linear(edge_channels, hidden_channels) if incident_edges else None
        )
        self.message_passing = (
            SumMessagePassing(hidden_channels, message_passing_layers,
                              edge_channels if message_passing_edges else 0)
            if message_passing_layers else None
        )
        self.mask = (
            Conv2DAdjacencyMask(
                heads, kernel_size, edge_channels + 1 if has_edges else None, mask_method
            )
            if use_mask
            else None
        )
        self.convs = nn.ModuleList(
            ETConv(
                hidden_channels,
                heads=heads,
                head_dim=head_dim,
                hopfield_dim=hopfield_dim,
                steps=steps,
                alpha=alpha,
                hopfield=hopfield,
                noise_std=noise_std,
                grad=grad,
                coupling=coupling,
                # the mask's edge features: the encoded ones, zeros and a 1 on the CLS edges
                edge_dim=edge_channels + 1 if attention_edges else None,
            )
            for _ in range(blocks)
        )
        self.dropout = Dropout(dropout)
        readout_width = hidden_channels * {"cls": 1, "cls_sum_mean": 3, "jk": 2 + blocks}[readout]
        self.head = nn.Sequential(
            nn.Linear(readout_width, hidden_channels),
            nn.GELU(),
            Dropout(dropout),
            nn.Linear(hidden_channels, out_channels),
        )

    def reset_parameters(self) -> None:
        """Reinitialise the learnable parameters (PyG's convention)."""
        for module in self.modules():
            reset = getattr(module, "reset_parameters", None)
            if module is not self and reset is not None:
                reset()

    @property
    def _blocks(self) -> Sequence[ETConv]:
        """``convs``, typed as what it holds (a ModuleList's items are typed Module)."""
        return cast("Sequence[ETConv]", self.convs)

    def fit_feature_scaling(self, x: Tensor) -> ETGraphModel:
        """Standardise the continuous node attributes with statistics of (training) nodes ``x``."""
        self.node_encoder.fit(x)
        return self

    # ------------------------------------------------------------------------------------------
    def _encode_edges(self, edge_attr: Optional[Tensor], num_edges: int) -> Optional[Tensor]:
        """The encoded edge features ``[E, edge_channels]`` (``None`` without an encoder)."""
        if self.edge_encoder is None:
            if edge_attr is not None:
                raise ValueError(
                    "edge_attr was given but the model has no edge encoder; build it with "
                    "edge_dim= (float features) or edge_categories= (integer labels)"
                )
            return None
        if edge_attr is None:
            raise ValueError("the model was built with edge features but edge_attr is None")
        if edge_attr.size(0) != num_edges:
            raise ValueError(
                f"edge_attr has {edge_attr.size(0)} rows but edge_index has {num_edges} edges"
            )
        if edge_attr.is_floating_point():  # float64 was rounded to float32 without a word
            check_dtype(edge_attr, self._parameter_dtype(), "edge_attr", "ETGraphModel")
        return self.edge_encoder(edge_attr)

    def _parameter_dtype(self) -> torch.dtype:
        """The parameters' floating-point dtype (the precision every input is computed in)."""
        return next(p.dtype for p in self.parameters() if p.is_floating_point())

    @staticmethod
    def _edge_features(encoded: Tensor, graph: CLSGraph) -> Tensor:
        """The mask's edge features: the encoded graph edges, then zeros for the CLS edges,
        and an indicator column that is 1 on the CLS edges."""
        num_edges = encoded.size(0)
        num_cls_edges = int(graph.is_cls_edge.sum())
        indicator = torch.cat(
            [encoded.new_zeros(num_edges, 1), encoded.new_ones(num_cls_edges, 1)], dim=0
        )
        padded = torch.cat([encoded, encoded.new_zeros(num_cls_edges, encoded.size(1))], dim=0)
        return torch.cat([padded, indicator], dim=1)

    def tokens(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        edge_attr: Optional[Tensor] = None,
        lap_pe: Optional[Tensor] = None,
        cls_lap_pe: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
        return_energy: bool = False,
        rw_pe: Optional[Tensor] = None,
        block_states: Optional[list[Tensor]] = None,
    ) -> tuple[Tensor, CLSGraph, Optional[list[Tensor]]]:
        """Final tokens of the CLS-augmented graph, the :class:`CLSGraph` layout, and (with
        ``return_energy=True``) each block's detached energy trace ``[steps + 1]``. A list passed
        as ``block_states`` receives the tokens entering the first block and those leaving every
        block (``blocks + 1`` tensors, what ``readout="jk"`` reads)."""
        if x is None:
            raise ValueError("x is None: the graphs have no node features; give them some "
                             "first, e.g. degree features (torch_geometric.transforms."
                             "OneHotDegree / LocalDegreeProfile, or et-graph tudataset's "
                             "--degree-feature)")
        if not isinstance(x, Tensor) or x.dim() not in (1, 2):
            raise ValueError("x must be a [N, F] (or [N] integer) tensor")
        if any(conv.explain and getattr(conv, "_edge_mask", None) is not None
               for conv in self.convs):
            # PyG's explainer masks the caller's E edges, but the blocks attend over the
            # CLS-augmented graph (E + 2N edges); its own size assertion would fail obscurely.
            # The masks are removed first: PyG leaves them set when an explanation fails, and
            # the model could not be explained without edge masks afterwards.
            from torch_geometric.explain.algorithm.utils import clear_masks

            clear_masks(self)
            raise ValueError("ETGraphModel does not support edge masks of torch_geometric."
                             "explain: its ET blocks attend over the CLS-augmented graph "
                             "(E + 2N edges), not over edge_index; explain node features "
                             "(edge_mask_type=None), or explain an ETConv model on its graph")
        num_nodes = x.size(0)
        # A float64 input was rounded to the float32 parameters without a word.
        dtype = next(self.parameters()).dtype
        for name, value in (("x", x), ("lap_pe", lap_pe), ("cls_lap_pe", cls_lap_pe),
                            ("rw_pe", rw_pe)):
            if value is not None:
                check_dtype(value, dtype, name, owner="model")
        sizes = graph_sizes(batch, num_nodes, num_graphs)
        batch = (torch.zeros(num_nodes, dtype=torch.long, device=x.device) if batch is None
                 else batch.long())
        edge_index = check_edge_index(edge_index, num_nodes)
        check_within_graphs(edge_index, batch)
        # Encodings the model was built without were dropped without a word (forward_data
        # passes only those it reads).
        for name, value, reads in (("lap_pe", lap_pe, self.pe_encoder is not None),
                                   ("cls_lap_pe", cls_lap_pe, self.pe_encoder is not None),
                                   ("rw_pe", rw_pe, self.rw_encoder is not None)):
            if value is not None and not reads:
                dim = "pe_dim" if name != "rw_pe" else "rw_pe_dim"
                raise ValueError(f"{name} was given but the model was built with {dim}=0: "
                                 f"build it with {dim} > 0 to read it, or leave it out")
        h = self.node_encoder(x)
        cls_offset = None
        if self.pe_encoder is not None:
            if lap_pe is None or cls_lap_pe is None:
                raise ValueError(
                    f"pe_dim={self.pe_dim} needs lap_pe and cls_lap_pe: apply "
                    f"et_graph.transforms.CLSLaplacianPE(k={self.pe_dim}) to the data "
                    "(or build the model with pe_dim=0)"
                )
            if lap_pe.size(0) != num_nodes:  # named, not blamed on batch by the encoder
                raise ValueError(f"lap_pe has {lap_pe.size(0)} rows for {num_nodes} nodes")
            if cls_lap_pe.size(0) != sizes.numel():
                raise ValueError(
                    f"cls_lap_pe has {cls_lap_pe.size(0)} rows for {sizes.numel()} graphs"
                )
            node_pe, cls_offset = self.pe_encoder(lap_pe, cls_lap_pe, batch)
            h = h + node_pe
        if self.rw_encoder is not None:
            rw_pe = check_rw_pe(rw_pe, num_nodes, self.rw_pe_dim)
            h = h + self.rw_encoder(rw_pe.to(self.rw_encoder.weight.dtype))
        encoded = (self._encode_edges(edge_attr, edge_index.size(1))
                   if self.mask is not None else None)
        if self.incident_encoder is not None:
            # Attention averages over neighbours (a softmax), so it cannot count bonds of a
            # type; the sum of a node's incoming encoded edges can.
            # (incident_edges needs edge features, hence the mask and an edge encoder)
            incident_features = cast(Tensor, encoded)
            incident = incident_features.new_zeros(num_nodes, incident_features.size(1))
            h = h + self.incident_encoder(
                incident.index_add_(0, edge_index[1], incident_features)
            )
        if self.message_passing is not None:
            h = self.message_passing(
                h, edge_index, encoded if self.message_passing.edge_channels else None
            )
        h = self.dropout(h)
        # x, edge_index and batch are validated above: the pool and the mask skip their checks
        graph = self.pool.attach(h, edge_index, batch, sizes.numel(), cls_offset, sizes=sizes)
        edge_weight = None
        features = None if encoded is None else self._edge_features(encoded, graph)
        if self.mask is not None:
            edge_weight = self.mask.forward_cls_graph(graph, features)
        elif edge_attr is not None:
            raise ValueError("edge_attr was given but the model was built without the mask")
        out = graph.x
        if block_states is not None:
            block_states.append(out)
        traces: Optional[list[Tensor]] = [] if return_energy else None
        # Every block runs on the same edges and weights: they are validated, and sorted for
        # the fused kernel, once per batch rather than once per block. That calls the blocks'
        # descent directly, so it is skipped when calling a block would do more (hooks, e.g.
        # benchmarks/graph_training_curve.py's, an explainer, or a compiled block).
        shared = all(_plain_call(conv) for conv in self.convs)
        edges = None
        attention_features = features if getattr(self, "attention_edges", False) else None
        for conv in self._blocks:
            if not shared:
                result = conv(out, graph.edge_index, edge_weight, return_energy=return_energy,
                              edge_attr=attention_features)
            else:
                if edges is None:
                    # (no plan where no sparse kernel would read it: mps)
                    edges = conv.energy_fn.edges(conv.energy_fn.check_tokens(out),
                                                 graph.edge_index, edge_weight,
                                                 plan=sparse_kernels_on(out.device),
                                                 edge_attr=attention_features)
                result = conv.descend_edges(out, edges, return_energy=return_energy)
            if traces is not None:  # (return_energy)
                out, trace = result
                traces.append(trace)
            else:
                out = result
            if block_states is not None:
                block_states.append(out)
        return out, graph, traces

    def graph_readout(
        self, out: Tensor, graph: CLSGraph, block_states: Optional[list[Tensor]] = None
    ) -> Tensor:
        """What the head reads from the final tokens ``out`` (after the last block's energy
        LayerNorm): ``[N, D]`` node tokens (``task="node"``), ``[G, D]`` CLS tokens
        (``readout="cls"``), ``[G, 3D]`` CLS ‖ sum ‖ mean of the node tokens
        (``readout="cls_sum_mean"``) or ``[G, (2 + blocks) D]`` CLS ‖ the sums of the node
        tokens entering the first block and leaving every block (``readout="jk"``, which needs
        the ``block_states`` that :meth:`tokens` filled)."""
        norm = self._blocks[-1].norm
        if self.task == "node":
            return norm(CLSPool.node_states(out, graph))
        if self.readout == "cls":
            return norm(CLSPool.readout(out, graph))
        if self.readout == "cls_sum_mean":
            return CLSPool.readout_sum_mean(norm(out), graph)
        if block_states is None or len(block_states) != len(self.convs) + 1:
            raise ValueError(
                f"readout='jk' needs the {len(self.convs) + 1} block states filled by "
                "tokens(..., block_states=[])"
            )
        # The encoded input is summed as it is (its scale carries the feature counts, as in the
        # structure-agnostic baseline); each block's output through that block's LayerNorm.
        normed = [block_states[0]] + [
            conv.norm(state) for conv, state in zip(self._blocks, block_states[1:])
        ]
        return torch.cat([norm(CLSPool.readout(out, graph)), CLSPool.readout_sums(normed, graph)],
                         dim=1)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        edge_attr: Optional[Tensor] = None,
        lap_pe: Optional[Tensor] = None,
        cls_lap_pe: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
        rw_pe: Optional[Tensor] = None,
    ) -> Tensor:
        refuse_tracing(self)
        states: Optional[list[Tensor]] = [] if self.readout == "jk" else None
        out, graph, _ = self.tokens(
            x, edge_index, batch, edge_attr, lap_pe, cls_lap_pe, num_graphs, rw_pe=rw_pe,
            block_states=states,
        )
        return self.head(self.graph_readout(out, graph, states))

    def forward_data(self, data: Any, unused: str = "warn") -> Tensor:
        """``forward`` on a PyG ``Data``/``Batch``: reads ``x``, ``edge_index``, ``batch``,
        ``num_graphs`` and, where the model was built for them, ``edge_attr`` (``edge_dim`` /
        ``edge_categories``), ``lap_pe`` and ``cls_lap_pe`` (``pe_dim``) and ``rw_pe``
        (``rw_pe_dim``). Such fields present for a model built without them are not read:
        ``unused="warn"`` (the default) says so once per model, ``"raise"`` refuses them (as
        :meth:`forward` does when they are passed), ``"ignore"`` is silent (the runners, whose
        data carry every field while a preset chooses what the model reads).

        ``torch.compile(model)`` compiles ``forward`` only: ``compiled.forward_data(batch)``
        runs the module uncompiled. Compile ``model.forward`` and call it on the batch's
        fields, or compile a function that calls ``model.forward_data``."""
        if unused not in ("warn", "raise", "ignore"):
            raise ValueError(f"unused must be 'warn', 'raise' or 'ignore', got {unused!r}")
        readers = {"edge_attr": self.has_edge_features, "lap_pe": self.pe_encoder is not None,
                   "cls_lap_pe": self.pe_encoder is not None,
                   "rw_pe": self.rw_encoder is not None}
        left = [name for name, read in readers.items()
                if not read and getattr(data, name, None) is not None]
        if left and unused != "ignore" and not (unused == "warn"
                                                and getattr(self, "_warned_unused", False)):
            message = (f"the batch holds {', '.join(left)}, which this ETGraphModel was built "
                       "without (edge_dim / edge_categories, pe_dim, rw_pe_dim): not read")
            if unused == "raise":
                raise ValueError(message)
            warnings.warn(message + " (forward_data(..., unused='ignore') to silence)",
                          DataWarning, stacklevel=2)
            self._warned_unused = True
        return self(
            data.x,
            data.edge_index,
            getattr(data, "batch", None),
            edge_attr=data.edge_attr if self.has_edge_features else None,
            lap_pe=getattr(data, "lap_pe", None) if self.pe_encoder is not None else None,
            cls_lap_pe=getattr(data, "cls_lap_pe", None) if self.pe_encoder is not None else None,
            num_graphs=getattr(data, "num_graphs", None),
            rw_pe=getattr(data, "rw_pe", None) if self.rw_encoder is not None else None,
        )
