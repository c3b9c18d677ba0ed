"""Input checks shared by every layer and model: clear ``ValueError`` instead of wrong numbers."""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional, overload

import numpy as np
import torch
from torch import Tensor

from ..fused import values_unreadable
from ..precision import accumulation_dtype


def all_finite(values: Tensor) -> bool:
    """Whether every entry of ``values`` is finite (no NaN, no inf); ``True`` when empty.

    One min/max pass: a NaN propagates into both ends and an inf shows in one of them. On the
    CPU that is several times faster than ``torch.isfinite(values).all()`` (which writes a
    bool tensor first), and the models run this check on their tokens in every forward.
    Under a ``torch.func`` transform the check cannot read values and returns ``True``."""
    if not values.numel() or values_unreadable():
        return True
    if values.is_complex():
        return bool(torch.isfinite(values).all())
    if not values.is_floating_point():
        return True
    # both ends in one transfer: on a GPU each .item() is a host sync (a device audit)
    low, high = torch.stack(torch.aminmax(values.detach())).tolist()
    return math.isfinite(low) and math.isfinite(high)


def layer_norm_limit(dtype: torch.dtype, channels: int) -> float:
    """The largest feature magnitude an ET layer of ``dtype`` accepts: ``x - mean`` must stay
    finite, and so must the sum of its ``channels`` squares, which the LayerNorm forms in
    float32 for 16-bit dtypes (PyTorch's layer_norm and :func:`et_graph.energy.layer_norm`).
    float32: about ``9e18 / sqrt(D)``; float16: 32,752; float64: about ``7e153 / sqrt(D)``.
    Beyond it the tokens came out NaN, or (the formula) silently ``g = 0``."""
    info = torch.finfo(dtype)
    squares = torch.finfo(torch.float32) if info.bits <= 16 else info
    return min(info.max / 2, math.sqrt(squares.max / max(channels, 1)) / 2)


def check_features(x: Tensor, channels: int, name: str = "x", ndim: int = 2,
                   limit: Optional[float] = None, width_hint: str = "") -> None:
    """Validate the shape, width, dtype and values of features ``x``; with ``limit``, also
    refuse entries beyond it in magnitude (one min/max pass checks both). ``width_hint`` is
    added to the message of a wrong feature width."""
    if (isinstance(x, (tuple, list)) and name == "x" and len(x) == 2
            and all(part is None or isinstance(part, Tensor) for part in x)):
        # PyG's bipartite convention (to_hetero builds such calls too)
        raise ValueError(
            "x is a pair (x_src, x_dst): ET layers take no bipartite input, because every token "
            "descends one shared energy; pass one [N, D] tensor of all nodes (for a "
            "heterogeneous graph, a homogeneous copy such as data.to_homogeneous())"
        )
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    if x.size(-1) != channels:
        raise ValueError(
            f"{name} has feature width {x.size(-1)} but the layer expects channels={channels}"
            + width_hint
        )
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if limit is None or not x.numel() or values_unreadable() or x.is_complex():
        finite, magnitude = all_finite(x), 0.0
    else:
        low, high = (float(v) for v in torch.aminmax(x.detach()))
        finite, magnitude = math.isfinite(low) and math.isfinite(high), max(-low, high)
    if not finite:
        rows = (~torch.isfinite(x)).reshape(-1, x.size(-1)).any(dim=-1).nonzero().flatten()
        raise ValueError(f"{name} contains NaN or inf values (in {rows.numel()} rows, the "
                         f"first row {int(rows[0])})")
    if limit is not None and magnitude > limit:
        raise ValueError(
            f"{name} has entries beyond {limit:.3g} in magnitude: the LayerNorm's centring or "
            f"variance would overflow the layer's dtype; rescale the features or use float64 "
            f"(layer.double())")


def is_real(value: object) -> bool:
    """Whether ``value`` is a real number and not a bool (NumPy scalars count).

    Typed ``object`` on purpose: after an inline ``isinstance(value, numbers.Real)`` on an
    argument annotated ``float``, a type checker deems the rest of the function unreachable
    (``float`` is no static subclass of ``numbers.Real``), so it stopped inferring the
    attributes set there and users saw "Cannot determine type" on them."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_integral(value: object) -> bool:
    """Whether ``value`` is an integer and not a bool (NumPy integers count); typed
    ``object`` for the reason given in :func:`is_real`."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_positive_int(value: object, name: str) -> int:
    """``value`` if it is a positive int (an encoding's width, a bin count), else a
    ``ValueError`` naming ``name``: 2.5 was accepted and failed on the first graph, True
    counted as 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _plain_edge_index(edge_index: Tensor, num_nodes: int) -> Tensor:
    """A PyG ``EdgeIndex`` as the plain tensor it wraps, after checking its ``sparse_size``.
    Left wrapped, every index operation went through the subclass's dispatch (1.4x slower),
    ``forward_chunked`` trusted its sort flags where ``forward`` did not, and a size other
    than ``[N, N]`` passed the fused path but failed inside PyG on the unfused one."""
    sparse_size = getattr(edge_index, "sparse_size", None)
    if type(edge_index) is Tensor or not callable(sparse_size):
        return edge_index
    rows, cols = sparse_size()
    if any(size is not None and size != num_nodes for size in (rows, cols)):
        raise ValueError(f"edge_index is an EdgeIndex of sparse_size ({rows}, {cols}), but x "
                         f"holds {num_nodes} nodes: an ET layer takes one square graph of "
                         "all its tokens")
    return edge_index.as_tensor()  # type: ignore[attr-defined]


def check_edge_index(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Validate ``edge_index [2, E]`` and return it as ``int64``."""
    if not isinstance(edge_index, Tensor):
        hint = ("; for several relations concatenate them, torch.cat(list, dim=1), and number "
                "each column's relation in edge_type (RelationalETConv, multi_relation=True)"
                if isinstance(edge_index, (dict, list, tuple)) else "")
        raise ValueError(f"edge_index must be a torch.Tensor, got "
                         f"{type(edge_index).__name__}{hint}")
    if edge_index.layout != torch.strided:
        # ("must have dtype torch.long, got torch.float32" named the wrong fault)
        raise ValueError(
            f"edge_index is a sparse adjacency ({edge_index.layout}); here it must be "
            "edge_index [2, E] (of the layers, ETConv alone reads a sparse adjacency), e.g. "
            "torch_geometric.utils.to_edge_index(adj_t)[0].flip(0) for PyG's adj_t")
    if (edge_index.is_floating_point() or edge_index.is_complex()
            or edge_index.dtype == torch.bool):  # other integer dtypes are read as int64
        raise ValueError(
            f"edge_index must hold integer node ids (torch.long, or another integer dtype), "
            f"got {edge_index.dtype}"
        )
    edge_index = _plain_edge_index(edge_index, num_nodes)
    if edge_index.dtype not in (torch.int64, torch.int32):
        # (torch.aminmax has no CPU kernel for uint16/32/64: a raw NotImplementedError)
        edge_index = edge_index.long()
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
    if edge_index.numel():
        low, high = torch.stack(torch.aminmax(edge_index)).tolist()  # one host sync
        if low < 0 or high >= num_nodes:
            raise ValueError(
                f"edge_index has node ids in [{low}, {high}] but there are {num_nodes} nodes "
                f"(valid ids are 0..{num_nodes - 1})"
            )
    return edge_index.long()


def check_edge_weight(
    edge_weight: Optional[Tensor], num_edges: int, heads: int,
    dtype: Optional[torch.dtype] = None,
) -> Optional[Tensor]:
    """Validate ``edge_weight`` of shape ``[E]`` or ``[E, heads]``; return ``[E, 1 or heads]``,
    in ``dtype`` when given (the layer's: the finiteness check runs after that cast, so that a
    float64 weight beyond float32's range is refused rather than becoming inf)."""
    if edge_weight is None:
        return None
    if not isinstance(edge_weight, Tensor):
        raise ValueError(f"edge_weight must be a torch.Tensor, got {type(edge_weight).__name__}")
    given = tuple(edge_weight.shape)  # named in the error as the caller passed it
    if edge_weight.dim() == 1:
        edge_weight = edge_weight.unsqueeze(-1)
    if edge_weight.dim() != 2 or edge_weight.size(0) != num_edges:
        raise ValueError(
            f"edge_weight must have shape [E] or [E, heads] with E={num_edges} "
            f"(the number of edges), got {given}"
        )
    if edge_weight.size(1) not in (1, heads):
        raise ValueError(
            f"edge_weight has {edge_weight.size(1)} columns; expected 1 or heads={heads} (edge "
            "features, TransformerConv's third argument edge_attr, go to ETConv(edge_dim=F) as "
            "the keyword edge_attr=)"
        )
    if edge_weight.dtype == torch.bool:
        # (a link-prediction audit) read as 1.0 / 0.0, a mask "hid" nothing: a weight of 0
        # keeps its edge in the softmax, with logit 0
        raise ValueError(
            "edge_weight is a boolean mask, but a weight scales an edge's attention logit (0 "
            "keeps the edge, at logit 0): to drop edges pass edge_index[:, mask] (and "
            "edge_weight[mask]); for weights of 0 and 1, edge_weight=mask.float()")
    if not edge_weight.is_floating_point():
        edge_weight = edge_weight.float()
    return finite_weight_in(edge_weight, dtype)


def check_edge_attr(
    edge_attr: Any, num_edges: int, edge_dim: Optional[int], dtype: torch.dtype,
    owner: str = "ETConv",
) -> Optional[Tensor]:
    """Validate the edge features ``edge_attr`` (``[E, edge_dim]``, or ``[E]`` when
    ``edge_dim == 1``) of a layer built with ``edge_dim`` (``None``: built without, so any
    ``edge_attr`` is refused, and none is required); return them ``[E, edge_dim]`` in
    ``dtype``. Features of higher precision than ``dtype`` are refused, as tokens are."""
    if edge_dim is None:
        if edge_attr is None:
            return None
        raise ValueError(
            f"{owner} was built without edge_dim, so it has no map for edge features: build it "
            f"with edge_dim=F for edge_attr [E, F] (each edge's features then offset the key "
            "its source offers), or pass a scalar per edge as edge_weight ([E] or [E, heads])")
    if edge_attr is None:
        raise ValueError(f"{owner} was built with edge_dim={edge_dim}: pass edge_attr "
                         f"[E, {edge_dim}], one row per column of edge_index")
    if not isinstance(edge_attr, Tensor):
        raise ValueError(f"edge_attr must be a torch.Tensor, got {type(edge_attr).__name__}")
    given = tuple(edge_attr.shape)
    if edge_attr.dim() == 1 and edge_dim == 1:
        edge_attr = edge_attr.unsqueeze(-1)
    if edge_attr.dim() != 2 or edge_attr.size(0) != num_edges or edge_attr.size(1) != edge_dim:
        raise ValueError(f"edge_attr must have shape [E, edge_dim]=[{num_edges}, {edge_dim}] "
                         f"(one row per edge), got {given}")
    if not edge_attr.is_floating_point():
        # integer columns are often category ids (bond types), which a linear map would read
        # as magnitudes
        raise ValueError(
            f"edge_attr is {_dtype_name(edge_attr.dtype)}, but the layer maps the features "
            "linearly: for category ids pass one_hot(ids, num_classes=K) (the number of "
            "categories, not each batch's largest id) or an nn.Embedding's output, for 0/1 or "
            "count columns edge_attr.float()")
    check_dtype(edge_attr, dtype, name="edge_attr")
    edge_attr = edge_attr.to(dtype)
    if not all_finite(edge_attr):
        raise ValueError("edge_attr contains NaN or inf values")
    return edge_attr


def finite_weight_in(edge_weight: Tensor, dtype: Optional[torch.dtype] = None) -> Tensor:
    """``edge_weight`` cast to ``dtype`` (the layer's; ``None`` keeps its own), refused when it
    holds NaN or inf, or when the cast makes a finite value inf (a float64 weight beyond
    float32's range): the check runs on both sides of the cast."""
    if not all_finite(edge_weight):
        raise ValueError("edge_weight contains NaN or inf values")
    if dtype is None or edge_weight.dtype == dtype:
        return edge_weight
    given_dtype = edge_weight.dtype
    edge_weight = edge_weight.to(dtype)
    if not all_finite(edge_weight):
        raise ValueError(f"edge_weight has values beyond the range of the layer's "
                         f"{_dtype_name(dtype)} (|w| > {torch.finfo(dtype).max:.3g}): "
                         f"rescale the weights or use a {_dtype_name(given_dtype)} layer")
    return edge_weight


def check_same_device(x: Tensor, **tensors: Any) -> None:
    """``ValueError`` naming each of ``tensors`` (``edge_index=...``) that is a tensor on
    another device than ``x`` (torch's own error came from deep inside, or the CPU kernels
    read GPU memory). No value is read: no host sync."""
    for name, tensor in tensors.items():
        if isinstance(tensor, Tensor) and tensor.device != x.device:
            raise ValueError(f"{name} is on {tensor.device} but x is on {x.device}: move "
                             "both to one device")


def check_finite_tokens(out: Tensor, owner: str = "ETConv") -> None:
    """``FloatingPointError`` when a descent turned finite inputs into NaN or inf tokens: values
    beyond the dtype's range somewhere (features or edge weights within a few orders of the
    largest float32, an inverse temperature or LayerNorm gain that training blew up)."""
    if not all_finite(out):
        raise FloatingPointError(
            f"{owner} produced NaN or inf tokens from finite inputs: an intermediate value left "
            f"the {_dtype_name(out.dtype)} range (features, edge weights or edge features too "
            f"large, e.g. "
            f"|x| near 1e19 in float32, or parameters that training blew up: lower the "
            f"learning rate). Rescale the inputs or use float64 (layer.double())."
        )


def total_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a sum of energies in ``dtype`` is taken in: float32 for the 16-bit floats (a
    float16 layer's total energy of 2,000 nodes passed 65504 and came back as -inf, every node's
    share finite: a numerics audit), else ``dtype`` itself."""
    return accumulation_dtype(dtype)


def sum_per_graph(per_node: Tensor, batch: Optional[Tensor], num_graphs: Optional[int] = None
                  ) -> Tensor:
    """``per_node [N]`` summed (a scalar), or per graph ``[num_graphs]`` given ``batch`` (graph
    ids), in :func:`total_dtype` (float32 for 16-bit shares). ``num_graphs`` defaults to the
    largest id plus one; give it (``Batch.num_graphs``) when the last graphs may be empty, as
    PyG's pooling takes ``size``."""
    per_node = per_node.to(total_dtype(per_node.dtype))
    if batch is None:
        if num_graphs is not None:
            raise ValueError("num_graphs needs batch (the graph id of each node)")
        return per_node.sum()
    batch = check_batch(batch, per_node.numel())
    largest = int(batch.max()) + 1 if batch.numel() else 0
    if num_graphs is None:
        num_graphs = largest
    elif isinstance(num_graphs, bool) or not isinstance(num_graphs, int) or num_graphs < largest:
        raise ValueError(f"num_graphs must be an int >= the largest graph id + 1 ({largest}), "
                         f"got {num_graphs!r}")
    return per_node.new_zeros(num_graphs).index_add(0, batch, per_node)


def check_return_energy(value: object, owner: str) -> None:
    """``TypeError`` unless ``return_energy`` is a bool (or 0/1): a PyG user's edge weights in
    that position made the call return a tuple, or fail with "Boolean value of Tensor"."""
    flag = isinstance(value, (bool, np.bool_)) or (
        isinstance(value, (int, np.integer)) and value in (0, 1))
    if not flag:
        raise TypeError(f"{owner}: return_energy must be True or False, got "
                        f"{type(value).__name__}; edge weights go in edge_weight (the third "
                        "argument of ETConv; RelationalETConv takes none)")


def refuse_tracing(module: torch.nn.Module) -> None:
    """``NotImplementedError`` under ``torch.jit.trace``, which would record one graph's edge
    layout as constants (or fail deep inside with an unrelated message), and under
    ``torch.export``, which failed on a data-dependent guard with torch's message."""
    if torch.jit.is_tracing():
        raise NotImplementedError(
            f"{type(module).__name__} does not support torch.jit.trace (its edge layout depends "
            "on the data): use torch.compile, or the eager module (torch.export fails on the "
            "same data-dependent shapes)")
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    if is_exporting is not None and is_exporting():
        # torch's own failure named a guard on an unbacked symbol deep in the input checks
        raise NotImplementedError(
            f"{type(module).__name__} does not support torch.export (nor ONNX export, which "
            "builds on it): its input checks and edge layout read the values of the data. "
            "Deploy the eager module or torch.compile it")


def check_finite_energy(energy: Tensor, beta: Tensor, owner: str = "ETConv") -> Tensor:
    """``energy`` itself, or ``FloatingPointError`` when it is NaN or inf at finite tokens. The
    attention term divides by each head's ``beta``: at ``beta = 0`` (a ``log_beta`` below about
    -104 in float32, -745 in float64) it is ``-inf`` in the limit and 0/0 in floats, and at
    ``beta = inf`` inf/inf, while the descent itself may still run."""
    if not all_finite(energy):
        raise FloatingPointError(
            f"{owner}'s energy is NaN or inf at finite tokens: the inverse temperatures beta = "
            f"{[float(b) for b in beta.detach().flatten()]} (an energy needs each finite and "
            f"positive: training or an edit set log_beta out of range), or values beyond the "
            f"{_dtype_name(energy.dtype)} range"
        )
    return energy


_DTYPE_METHODS = {
    torch.float64: "double",
    torch.float32: "float",
    torch.float16: "half",
    torch.bfloat16: "bfloat16",
}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_dtype(x: Tensor, dtype: torch.dtype, name: str = "x", owner: str = "conv") -> None:
    """Reject floating-point ``x`` of *higher* precision than the parameters' ``dtype``.

    Lower-precision inputs (bfloat16/float16 on a float32 layer, float32 on a float64 layer) are
    allowed: the layer upcasts them, computes in its own dtype and returns its result in theirs.
    A higher-precision input would be rounded silently, so it raises ``ValueError``.
    """
    if x.dtype == dtype or not x.is_floating_point():
        return
    if torch.finfo(x.dtype).eps < torch.finfo(dtype).eps:
        to_layer = _DTYPE_METHODS.get(x.dtype, "to")
        to_input = _DTYPE_METHODS.get(dtype, "to")
        raise ValueError(
            f"{name} is {_dtype_name(x.dtype)} but the layer's parameters are "
            f"{_dtype_name(dtype)}; call {owner}.{to_layer}() or {name}.{to_input}()"
        )


@overload
def check_batch(batch: None, num_nodes: int) -> None: ...


@overload
def check_batch(batch: Tensor, num_nodes: int) -> Tensor: ...


def check_batch(batch: Optional[Tensor], num_nodes: int) -> Optional[Tensor]:
    """``batch`` must be an integer ``[N]`` tensor of non-negative graph ids; returned as
    ``int64`` (an int32 batch failed later in ``index_copy_``)."""
    if batch is None:
        return None
    if not isinstance(batch, Tensor):
        raise ValueError(f"batch must be a torch.Tensor, got {type(batch).__name__}")
    if batch.is_floating_point() or batch.is_complex() or batch.dtype == torch.bool:
        raise ValueError(
            f"batch must hold integer graph ids (torch.long), got {batch.dtype}"
            + ("; a 2-D float tensor here looks like edge features: pass them by name "
               "(edge_attr=...), the argument after edge_index is batch"
               if batch.is_floating_point() and batch.dim() == 2
               else "; use batch.long() if the values are whole numbers"))
    if batch.dim() != 1 or batch.numel() != num_nodes:
        raise ValueError(f"batch must have shape [N]=[{num_nodes}], got {tuple(batch.shape)}")
    if batch.numel() and int(batch.min()) < 0:
        raise ValueError("batch holds negative graph ids")
    return batch.long()


def check_within_graphs(edge_index: Tensor, batch: Tensor) -> None:
    """``ValueError`` for an edge between two graphs of the batch: it would pass information
    between them (``edge_index`` and ``batch`` already validated)."""
    if edge_index.numel() and bool((batch[edge_index[0]] != batch[edge_index[1]]).any()):
        raise ValueError("edge_index joins nodes of different graphs of the batch")


def check_edge_features(edge_features: Optional[Tensor], num_edges: int, edge_channels: int,
                        name: str = "edge_attr", owner: str = "this model") -> None:
    """Edge features exactly when a layer was built to read them: ``[E, edge_channels]`` with
    ``E = num_edges`` for ``edge_channels > 0``, and ``None`` for ``edge_channels == 0`` (given
    features that nothing reads would be dropped without a word)."""
    if not edge_channels:
        if edge_features is not None:
            raise ValueError(f"{owner} ignores edge features (built with edge_channels=0), but "
                             f"{name} was given; build it with edge_channels="
                             f"{edge_features.size(-1)} to use them")
        return
    if edge_features is None:
        raise ValueError(f"{owner} reads edge features (edge_channels={edge_channels}), but "
                         f"{name} is None")
    if tuple(edge_features.shape) != (num_edges, edge_channels):
        raise ValueError(f"{name} must be [E, {edge_channels}] with E = {num_edges} edges, got "
                         f"{tuple(edge_features.shape)}")


def check_rw_pe(rw_pe: Optional[Tensor], num_nodes: int, dim: int) -> Tensor:
    """A model built with ``rw_pe_dim=dim`` needs a finite float ``rw_pe`` ``[N, dim]``."""
    if rw_pe is None:
        raise ValueError(
            f"rw_pe_dim={dim} needs rw_pe: apply et_graph.transforms.RandomWalkPE({dim}) to the "
            "data (or build the model with rw_pe_dim=0)"
        )
    if rw_pe.dim() != 2 or tuple(rw_pe.shape) != (num_nodes, dim):
        raise ValueError(f"rw_pe must be [N, rw_pe_dim]={[num_nodes, dim]}, "
                         f"got {list(rw_pe.shape)}")
    if not rw_pe.is_floating_point() or not all_finite(rw_pe):
        raise ValueError("rw_pe must be finite floating point")
    return rw_pe


#: Destination nodes per chunk of bounded-memory scoring when only an edge cap is given.
DEFAULT_CHUNK_SIZE = 65536


def check_chunk_size(chunk_size: Any, name: str = "chunk_size") -> int:
    """``chunk_size`` as an ``int`` (a NumPy integer, e.g. a computed size, is as good as one);
    ``ValueError`` (naming the argument ``name``) unless it is a positive integer (``True`` is
    not)."""
    if (not is_integral(chunk_size)
            or chunk_size <= 0):
        raise ValueError(f"{name} must be a positive integer, got {chunk_size!r}")
    return int(chunk_size)


def destination_chunks(in_ptr: Tensor, chunk_size: int, chunk_edges: Optional[int] = None
                       ) -> list[tuple[int, int]]:
    """Consecutive ``(start, end)`` ranges of destination nodes covering ``0..N`` for the
    in-edge CSR pointer ``in_ptr [N + 1]``: at most ``chunk_size`` nodes each and, with
    ``chunk_edges``, at most that many in-edges, except a single node with more in-edges than
    that, which is a chunk alone (its softmax needs all of its in-edges at once)."""
    num_nodes = in_ptr.numel() - 1
    if chunk_edges is None:
        return [(start, min(start + chunk_size, num_nodes))
                for start in range(0, num_nodes, chunk_size)]
    pointer = in_ptr.cpu()
    chunks, start = [], 0
    while start < num_nodes:
        # the last end whose in-edges since start fit the budget
        fits = int(torch.searchsorted(pointer, pointer[start] + chunk_edges, right=True)) - 1
        end = min(start + chunk_size, num_nodes, max(fits, start + 1))
        chunks.append((start, end))
        start = end
    return chunks
