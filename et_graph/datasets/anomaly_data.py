"""The one place that turns raw arrays into a clean anomaly-detection ``Data`` object.

Every loader (CARE-GNN ``.mat``, open ``.npz``, torch-saved ``.pt``, the embedded defaults) ends
in :func:`prepare_anomaly_data`, so all of them return the same thing:

* ``x`` float32 ``[N, F]``, finite;
* ``edge_index`` int64 ``[2, E]``, symmetric, without self-loops or duplicates (coalesced);
* ``y`` int64 ``[N]`` in ``{0, 1}`` (1 = anomalous);
* optionally ``train_mask`` / ``val_mask`` / ``test_mask`` bool ``[N, S]`` (``S`` shipped splits);
* optionally ``label_mask`` bool ``[N]`` (nodes allowed into splits);
* ``name`` (str).
"""
from __future__ import annotations

import math
import os
import warnings
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from et_graph.nn.validation import check_edge_index, check_features

from ..exceptions import DataWarning
from ..paths import NO_DATA_HINT, shipped_data_dir

MASK_KEYS = ("train_mask", "val_mask", "test_mask")

ArrayLike = Union[np.ndarray, Tensor]


def data_dir(required: bool = True) -> Optional[Path]:
    """The folder holding the shipped data files.

    ``$ET_GRAPH_DATA`` if set, else the repository's ``datasets/`` folder (present in a source
    checkout or editable install, never in a wheel: :mod:`et_graph.paths`). With
    ``required=False`` a missing folder gives ``None``.
    """
    env = os.environ.get("ET_GRAPH_DATA")
    if env:
        folder = Path(env).expanduser()
        if folder.is_dir() or not required:
            return folder if folder.is_dir() else None
        raise FileNotFoundError(
            f"ET_GRAPH_DATA points to {folder}, which is not a directory. Point it to a folder "
            "holding tolokers/tolokers.npz, pygod/*.pt.zip and any YelpChi.mat / Amazon.mat / "
            "tfinance.npz / tsocial.npz you have."
        )
    shipped = shipped_data_dir()
    if shipped is not None or not required:
        return shipped
    raise FileNotFoundError(
        f"No data folder found: {NO_DATA_HINT} (or to a folder holding the data files), or pass "
        "root=DIR / path=FILE (--data-root DIR / --data FILE)."
    )


def physical_memory() -> Optional[int]:
    """This machine's memory in bytes (POSIX ``sysconf``, Windows ``GlobalMemoryStatusEx``),
    or ``None`` where neither answers. A container's own limit may be lower."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        pass
    try:
        import ctypes

        class MemoryStatus(ctypes.Structure):
            _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong),
                        *((field, ctypes.c_ulonglong) for field in (
                            "total_physical", "available_physical", "total_page_file",
                            "available_page_file", "total_virtual", "available_virtual",
                            "available_extended_virtual"))]

        status = MemoryStatus()
        status.length = ctypes.sizeof(status)
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore
            return int(status.total_physical)
    except (AttributeError, OSError):  # not Windows
        pass
    return None


def refuse_beyond_memory(need: int, memory: Optional[int], what: str, after: str = "") -> None:
    """``ValueError`` "``what`` N GiB, more than this machine's M GiB``after``" where ``need``
    bytes exceed ``memory`` (:func:`physical_memory`, passed by the caller; ``None``: not
    known, nothing refused): the one check before a file's declared sizes are allocated."""
    if memory is not None and need > memory:
        raise ValueError(f"{what} {need / 2**30:.1f} GiB, more than this machine's "
                         f"{memory / 2**30:.1f} GiB{after}")


def _dense(value: Any, what: str, source: str) -> Any:
    """A scipy sparse matrix or a sparse tensor made dense, after checking that it fits: a few
    hundred bytes of file can declare a [10^6, 10^6] matrix (a security review filled memory
    that way)."""
    shape = [int(n) for n in value.shape]
    itemsize = (value.element_size() if isinstance(value, Tensor)
                else np.dtype(value.dtype).itemsize)
    need = math.prod(shape) * itemsize
    refuse_beyond_memory(need, physical_memory(),
                         f"{source}: {what} is a sparse {shape} array whose dense form needs",
                         ": the models read dense features (reduce the columns first, e.g. "
                         "with a truncated SVD)")
    try:
        return value.to_dense() if isinstance(value, Tensor) else value.toarray()
    except (MemoryError, RuntimeError) as error:  # torch: "DefaultCPUAllocator: not enough"
        raise ValueError(f"{source}: {what}, a sparse {shape} array, does not fit in "
                         f"memory as a dense array ({need / 2**30:.1f} GiB)") from error


def _as_tensor(value: Any, what: str, source: str) -> Tensor:
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if hasattr(value, "toarray"):  # scipy sparse
        value = _dense(value, what, source)
    try:
        array = np.asarray(value)
    except Exception as error:  # any failure means the entry is unusable
        raise ValueError(f"{source}: {what} cannot be read as an array ({error})") from error
    if array.dtype == object:
        raise ValueError(f"{source}: {what} has dtype object; expected a numeric array")
    array = np.ascontiguousarray(array)
    if not array.flags.writeable or (not isinstance(value, np.ndarray)
                                     and not array.flags.owndata):
        # A view into another library's object (a pandas column): the graph's tensors shared
        # its memory (writing data.y changed the user's Series), and a read-only array
        # (DataFrame.T) made torch warn about undefined behaviour (an input audit). NumPy
        # arrays (a file's entries, the caller's own) are shared, as torch.from_numpy does.
        array = array.copy()
    return torch.from_numpy(array)


#: The file name whose PyGOD prefix (inj_, gen_) turned ``binarize`` on, while that file loads:
#: a label above 1 collapsed to "anomalous" without a word when the name alone chose it (a
#: user's 2 = "unknown" became an anomaly: an input audit).
BINARIZED_BY_NAME: ContextVar[Optional[str]] = ContextVar("binarized_by_name", default=None)


#: Where a label mask can be stored (a .mat file was told to add one it cannot carry: an audit).
_LABEL_MASK_FILES = (" (an .npz or .pt file carries one as label_mask; a .mat file none, so "
                     "write such a graph as .npz or .pt, or for YelpChi/Amazon files whose "
                     "first nodes are the unlabelled ones pass unlabelled_prefix)")


def _labels(y: Any, num_nodes: int, source: str, binarize: bool) -> Tensor:
    if hasattr(y, "toarray"):  # scipy sparse: np.asarray gave an object array, called text
        y = _dense(y, "y (labels)", source)
    if not isinstance(y, Tensor):
        kind = np.asarray(y).dtype.kind
        if kind in "USO":  # torch: "can't convert np.ndarray of type numpy.str_"
            raise ValueError(f"{source}: labels are text ({np.asarray(y).dtype}); write them as "
                             "numbers, 0 = normal and 1 = anomalous")
    y = _as_tensor(y, "y (labels)", source)
    if y.dim() == 2 and 1 in y.shape:
        y = y.reshape(-1)  # MATLAB stores label vectors as [1, N]
    if y.dim() == 2 and y.size(0) == num_nodes and y.size(1) == 2:
        raise ValueError(f"{source}: labels have shape [N, 2]; if they are one-hot, store "
                         "their argmax (y.argmax(1): 0 = normal, 1 = anomalous)")
    if y.dim() != 1 or y.numel() != num_nodes:
        raise ValueError(
            f"{source}: labels must have shape [N]=[{num_nodes}], got {tuple(y.shape)}"
        )
    if y.dtype == torch.bool:
        return y.long()
    if y.is_floating_point():
        if not bool(torch.isfinite(y).all()):
            raise ValueError(f"{source}: labels contain NaN or inf")
        if not bool((y == y.round()).all()):
            raise ValueError(f"{source}: labels must be integers (0 = normal, 1 = anomalous)")
    y = y.long()
    values = torch.unique(y)
    if binarize:
        if bool((values < 0).any()):
            raise ValueError(f"{source}: labels hold negative values {values.tolist()[:10]}; "
                             "for unlabelled nodes (e.g. -1), give them 0 and mark the labelled "
                             f"ones in data.label_mask{_LABEL_MASK_FILES}")
        named = BINARIZED_BY_NAME.get()
        if named is not None and bool((values > 1).any()):
            warnings.warn(
                f"{source}: labels {values.tolist()[:10]} read as anomalous where > 0, because "
                f"the name {named!r} starts as PyGOD's injected graphs do (inj_, gen_), whose "
                "1, 2 and 3 are kinds of anomaly; if your labels mean otherwise (e.g. 2 = "
                "unknown), pass binarize=False (--no-binarize) and mark the labelled nodes in "
                "label_mask", DataWarning, stacklevel=2)
        return (y > 0).long()
    if not bool(((values == 0) | (values == 1)).all()):
        raise ValueError(
            f"{source}: labels must be binary (0 = normal, 1 = anomalous), found values "
            f"{values.tolist()[:10]}. For multi-type anomaly labels (e.g. PyGOD's 0..3) "
            "pass binarize=True (load_anomaly_dataset; --binarize on the command line) to treat "
            "every label > 0 as anomalous; "
            "for unlabelled nodes (e.g. -1), give them 0 and mark the labelled ones in "
            f"data.label_mask, which keeps them out of every split{_LABEL_MASK_FILES}."
        )
    return y


def _mask(value: Any, key: str, num_nodes: int, source: str) -> Tensor:
    mask = _as_tensor(value, key, source)
    if mask.dim() == 1 and mask.numel() != num_nodes and not mask.is_floating_point() \
            and mask.dtype != torch.bool:
        # node indices (OGB's split_idx) read as a mask of the wrong length
        raise ValueError(f"{source}: {key} holds {mask.numel()} integers for {num_nodes} nodes; "
                         "node indices? store a boolean mask: torch_geometric.utils."
                         f"index_to_mask(idx, size={num_nodes})")
    if mask.dim() == 1:
        mask = mask.unsqueeze(1)
    if mask.dim() != 2:
        raise ValueError(f"{source}: {key} must be [N] or [N, S], got {tuple(mask.shape)}")
    if mask.size(0) != num_nodes:
        if mask.size(1) == num_nodes:
            mask = mask.t()  # the heterophilous-graphs layout stores splits as [S, N]
        else:
            raise ValueError(
                f"{source}: {key} has shape {tuple(mask.shape)}; expected [N], [N, S] or [S, N] "
                f"with N={num_nodes}"
            )
    if mask.dtype != torch.bool:
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"{source}: {key} must be boolean (or 0/1)")
        mask = mask != 0
    return mask.contiguous()


def prepare_anomaly_data(
    x: Any,
    edge_index: Any,
    y: Any,
    *,
    name: str,
    masks: Optional[dict[str, Any]] = None,
    label_mask: Optional[Any] = None,
    source: Optional[str] = None,
    binarize: bool = False,
    split_masks: bool = True,
) -> Data:
    """Validate raw arrays and build the normalised :class:`~torch_geometric.data.Data`.

    Args:
        x: node features ``[N, F]`` (dense or scipy sparse, any real dtype).
        edge_index: ``[2, E]`` integer node ids; made undirected, self-loops and duplicates
            dropped.
        y: labels ``[N]`` (or ``[1, N]``) in ``{0, 1}``; with ``binarize=True`` any
            non-negative integers, ``y > 0`` counting as anomalous.
        name: stored as ``data.name``.
        masks: optional ``{"train_mask"|"val_mask"|"test_mask": [N] | [N, S] | [S, N]}``; all
            three must be given together, with the same number of splits, and within each split
            they must be disjoint.
        label_mask: optional ``[N]`` bool marking nodes that may enter splits.
        source: what to call the input in error messages (defaults to ``name``).
        binarize: collapse multi-class anomaly labels to ``y > 0``.
        split_masks: keep and check ``masks``. ``False`` drops them unread (a
            ``DataWarning`` names them), for callers that split nothing: the unsupervised
            protocol scores every node, so a file's partial or odd masks must not stop it.

    Raises:
        ValueError: on missing entries, wrong shapes, non-finite features, out-of-range or
            non-integer edge ids, non-binary labels or inconsistent masks.
    """
    source = source or name
    if x is None or edge_index is None or y is None:
        missing = [k for k, v in (("x", x), ("edge_index", edge_index), ("y", y)) if v is None]
        raise ValueError(f"{source}: missing {', '.join(missing)}")

    x = _as_tensor(x, "x (features)", source)
    if x.dim() == 1:
        x = x.unsqueeze(1)
    if x.dim() != 2:
        raise ValueError(f"{source}: features must have shape [N, F], got {tuple(x.shape)}")
    if x.size(0) == 0:
        raise ValueError(f"{source}: the graph has no nodes")
    if x.size(1) == 0:
        raise ValueError(f"{source}: the nodes have no features (x has shape {tuple(x.shape)})")
    if x.is_complex():
        raise ValueError(f"{source}: features must be real numbers, got {x.dtype}")
    if x.is_floating_point() and bool(torch.isfinite(x).all()):
        # Checked in the file's own precision: cast first, a finite 1e39 became inf and was
        # reported as "NaN or inf".
        largest = float(x.abs().max())
        if largest > torch.finfo(torch.float32).max:
            raise ValueError(f"{source}: features reach {largest:.3g}, beyond float32's range "
                             "(about 3.4e38), in which et-graph stores them: rescale them "
                             "(log1p, ranks) before saving the file")
    if not x.is_floating_point() and x.dtype != torch.bool and x.numel():
        # float32 holds integers exactly up to 2^24 only: counts, ids or timestamps above it
        # were rounded without a word (16,777,217 became 16,777,216)
        # in float64 (exact far past 2^24): torch has no abs for uint16-64, and int64's
        # smallest value has none in int64
        largest = int(x.double().abs().max())
        if largest > 2 ** 24:
            warnings.warn(f"{source}: integer features reach {largest:,}, beyond 2^24 = "
                          "16,777,216, the largest range float32 (in which et-graph stores "
                          "features) holds exactly: larger values are rounded (ids and "
                          "timestamps lose their last digits); rescale them (log1p, ranks) "
                          "before saving the file if the digits matter", DataWarning,
                          stacklevel=3)
    x = x.to(torch.float32)
    try:
        check_features(x, x.size(1), name=f"{source}: x")
    except ValueError as error:
        raise ValueError(str(error)) from None
    num_nodes = x.size(0)

    edge_index = _as_tensor(edge_index, "edge_index", source)
    if edge_index.is_floating_point():
        if not bool((edge_index == edge_index.round()).all()):
            raise ValueError(f"{source}: edge_index must hold integer node ids")
        edge_index = edge_index.long()
    if edge_index.dtype not in (torch.int64, torch.int32):
        edge_index = edge_index.long()
    if edge_index.dim() == 2 and edge_index.size(0) == 0 and edge_index.numel() == 0:
        edge_index = edge_index.reshape(2, 0)
    try:
        edge_index = check_edge_index(edge_index, num_nodes)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None
    edge_index, _ = remove_self_loops(edge_index)
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)  # also sorts and deduplicates

    y = _labels(y, num_nodes, source, binarize)

    data = Data(x=x, edge_index=edge_index, y=y)
    data.name = name

    masks = {k: v for k, v in (masks or {}).items() if v is not None}
    if masks and not split_masks:
        warnings.warn(f"{source}: the split masks {sorted(masks)} are not read and play no part "
                      "(loaded with split_masks=False: every node is scored, none is split)",
                      DataWarning, stacklevel=3)
        masks = {}
    if masks:
        missing = [k for k in MASK_KEYS if k not in masks]
        unknown = [k for k in masks if k not in MASK_KEYS]
        if missing or unknown:
            raise ValueError(
                f"{source}: split masks must come as all of {', '.join(MASK_KEYS)}; "
                f"missing {missing}, unexpected {unknown}"
            )
        prepared = {k: _mask(masks[k], k, num_nodes, source) for k in MASK_KEYS}
        widths = {k: m.size(1) for k, m in prepared.items()}
        if len(set(widths.values())) != 1:
            raise ValueError(f"{source}: the masks hold different numbers of splits: {widths}")
        train, val, test = (prepared[k] for k in MASK_KEYS)
        for (first, a), (second, b) in ((("train", train), ("val", val)),
                                        (("train", train), ("test", test)),
                                        (("val", val), ("test", test))):
            both = (a & b).nonzero()
            if both.numel():
                node, split = (int(v) for v in both[0])
                raise ValueError(f"{source}: the {first} and {second} masks overlap within a "
                                 f"split: node {node} is in both in split column {split}")
        sizes = train.sum(0).tolist()
        # (a node or two apart is k-fold rounding, not another protocol: a review)
        if max(sizes) - min(sizes) > max(2, 0.05 * max(sizes)):
            # Splits of one kind hold equally many training nodes; GADBench's [N, 20] masks
            # hold two kinds (columns 0-9 fully supervised, 10-19 semi-supervised), which a
            # hand-made file copied whole ran as one protocol's 20 seeds without a word.
            first_other = max(range(len(sizes)), key=lambda i: abs(sizes[i] - sizes[0]))
            warnings.warn(
                f"{source}: the split columns hold different numbers of training nodes "
                f"({sizes[0]} in column 0, {sizes[first_other]} in column {first_other}), so "
                "the seeds of a run are not repeats of one protocol"
                + ("; these look like GADBench's 20 columns (0-9 fully supervised, 10-19 "
                   "semi-supervised): keep one kind, as et_graph.datasets.dgl_graph_to_data "
                   "does" if len(sizes) == 20 else ""), DataWarning, stacklevel=3)
        for key, mask in prepared.items():
            setattr(data, key, mask)

    if label_mask is not None:
        label_mask = _mask(label_mask, "label_mask", num_nodes, source)
        if label_mask.size(1) != 1:
            raise ValueError(f"{source}: label_mask must have shape [N]")
        label_mask = label_mask.squeeze(1)
        if not bool(label_mask.any()):
            raise ValueError(f"{source}: label_mask marks no node as labelled")
        data.label_mask = label_mask

    return data


#: The suffixes of the graph files, removed from a file name to name its dataset.
DATA_SUFFIXES = (".pt.zip", ".pth", ".pt", ".npz", ".mat", ".zip")


def file_dataset_name(path: Union[str, Path]) -> str:
    """The dataset name of a graph file: its name without the data suffix (``My.Graph.v2.npz``
    is ``My.Graph.v2``; cutting at the first dot named it ``My``, and ``run.1.npz`` and
    ``run.2.npz`` both ``run``)."""
    name = Path(path).name
    for suffix in DATA_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return Path(name).stem


#: Entries of a graph file that the loaders read or that carry no data (a name).
READ_ENTRIES = ("x", "edge_index", "y", *MASK_KEYS, "label_mask", "name")


def warn_unread_entries(source: str, found: Any, read: Any = READ_ENTRIES) -> None:
    """A ``DataWarning`` naming the entries of a graph file that the loaders drop, so that
    nobody believes edge weights or types (or anything else stored) shaped the result."""
    unread = sorted(set(found) - set(read))
    if not unread:
        return
    edge = [key for key in unread if key.startswith("edge_")]
    why = (f" ({', '.join(edge)}: every edge counts once, with one type; the detectors read x, "
           "edge_index and y; a typed graph keeps its relations with relation='multi' "
           "(--relation multi))" if edge else "")
    warnings.warn(f"{source}: the entries {unread} are not read and play no part{why}", DataWarning,
                  stacklevel=3)


def attach_relations(data: Data, typed: list[Any], names: list[str]) -> Data:
    """Give a prepared graph its typed edges: ``edge_index`` concatenated over the relations
    (``typed``, one ``[2, E_r]`` array or tensor each), ``edge_type [E]`` and
    ``relation_names``. Each relation is cleaned as :func:`prepare_anomaly_data` cleans one
    edge set: symmetric, no self-loops, no duplicates within the relation."""
    num_nodes = int(data.num_nodes)
    parts = [to_undirected(remove_self_loops(torch.as_tensor(edges, dtype=torch.long))[0],
                           num_nodes=num_nodes) for edges in typed]
    data.edge_index = torch.cat(parts, dim=1)
    data.edge_type = torch.cat(
        [torch.full((part.size(1),), r, dtype=torch.long) for r, part in enumerate(parts)])
    data.relation_names = list(names)
    return data


#: What a file without labels is told (the .pt and .npz loaders alike).
UNLABELLED_HINT = ("; the runners evaluate against labels (et-graph unsupervised reads them only "
                   "after scoring), so an unlabelled graph is scored in Python: "
                   "et_graph.detectors.UnsupervisedETDetector().fit(data), then "
                   "decision_function(data)")


def _typed_edges(stored: dict[str, Any], source: str) -> tuple[list[Tensor], list[str]]:
    """A Data's ``edge_index`` split by its ``edge_type`` (ids ``0..R-1``), with its
    ``relation_names`` (or ``relation_0``, ...)."""
    edge_type = stored.get("edge_type")
    if edge_type is None:
        raise ValueError(f"{source}: relation='multi' needs typed edges, but the Data object "
                         "has no edge_type (an integer relation id per edge_index column)")
    edge_index = torch.as_tensor(stored["edge_index"])
    try:
        edge_index = check_edge_index(edge_index, int(torch.as_tensor(stored["x"]).size(0)))
    except ValueError as error:  # (it named no file: an audit)
        raise ValueError(f"{source}: {error}") from None
    edge_type = torch.as_tensor(edge_type)
    if (edge_type.dim() != 1 or edge_type.numel() != edge_index.size(1)
            or edge_type.is_floating_point() or edge_type.dtype == torch.bool):
        raise ValueError(f"{source}: edge_type must hold one integer relation id per edge "
                         f"({edge_index.size(1)}), got {edge_type.dtype} of shape "
                         f"{tuple(edge_type.shape)}")
    names = stored.get("relation_names")
    # (a graph without edges and names: one empty relation; torch.cat of none failed)
    count = len(names) if names is not None else int(edge_type.max()) + 1 if len(edge_type) else 1
    if len(edge_type) and (int(edge_type.min()) < 0 or int(edge_type.max()) >= count):
        raise ValueError(f"{source}: edge_type holds ids outside 0..{count - 1} "
                         f"(relation_names: {list(names) if names is not None else None})")
    if names is None and len(edge_type):
        unused = torch.nonzero(torch.bincount(edge_type.long(), minlength=count) == 0
                               ).view(-1).tolist()
        if unused:
            # ids 5, 6, 7 made eight relations, five of them empty, without a word (an audit)
            warnings.warn(f"{source}: edge_type's ids are relation numbers 0..{count - 1}, and "
                          f"{len(unused)} of them have no edge ({unused[:5]}"
                          f"{', ...' if len(unused) > 5 else ''}): empty relations, whose "
                          "weights stay untrained; number the relations 0..R-1, or name them "
                          "all in relation_names", DataWarning, stacklevel=3)
    names = [str(name) for name in names] if names is not None else [
        f"relation_{r}" for r in range(count)]
    return [edge_index[:, edge_type == r] for r in range(count)], names


def from_pyg_data(data: Data, name: str, source: Optional[str] = None,
                  binarize: bool = False, relation: str = "homo", *,
                  split_masks: bool = True) -> Data:
    """Normalise any PyG ``Data`` with ``x``, ``edge_index`` and a binary ``y``.

    ``relation="multi"`` keeps the relations of a typed graph (``edge_type`` per edge, and
    ``relation_names`` when stored) as the CARE-GNN ``.mat`` loader does; ``"homo"`` merges
    them into one edge set. ``split_masks=False`` drops the split masks unread
    (:func:`prepare_anomaly_data`)."""
    source = source or name
    if not isinstance(data, Data):
        hint = (": save data.to_homogeneous() (its edge_type numbers the relations) and load it "
                "with relation='multi' (--relation multi)"
                if type(data).__name__ == "HeteroData" else "")
        raise ValueError(f"{source}: expected a torch_geometric.data.Data object, got "
                         f"{type(data).__name__}{hint}")
    if relation not in ("homo", "multi"):
        raise ValueError(f"{source}: relation must be 'homo' or 'multi' for a Data object, got "
                         f"{relation!r} (relation keys such as 'net_rur' belong to .mat files)")
    stored = data.to_dict()
    missing = [k for k in ("x", "edge_index", "y") if stored.get(k) is None]
    if missing:
        hint = UNLABELLED_HINT if missing == ["y"] else ""
        raise ValueError(f"{source}: the Data object has no {', '.join(missing)}{hint}")
    typed = _typed_edges(stored, source) if relation == "multi" else None
    read = (*READ_ENTRIES, "edge_type", "relation_names") if typed else READ_ENTRIES
    warn_unread_entries(source, [k for k, v in stored.items() if v is not None], read)
    masks = {k: stored[k] for k in MASK_KEYS if stored.get(k) is not None}
    x = stored["x"]
    if isinstance(x, torch.Tensor) and x.layout != torch.strided:
        # sparse features (bag-of-words) are stored sparse, read dense
        x = _dense(x, "x (features)", source)
    prepared = prepare_anomaly_data(
        x, stored["edge_index"], stored["y"], name=name, masks=masks or None,
        label_mask=stored.get("label_mask"), source=source, binarize=binarize,
        split_masks=split_masks,
    )
    return attach_relations(prepared, *typed) if typed else prepared


def describe_anomaly_data(data: Data) -> dict[str, Any]:
    """Summary statistics of a prepared graph (the numbers quoted in ``datasets/SOURCES.md``)."""
    from ..protocols.anomaly import labelled_nodes  # (here: the protocols import this module)

    num_nodes = int(data.num_nodes)
    labelled = labelled_nodes(data)  # (0/1 numbers or an [N, 1] column too: a review)
    y = data.y if labelled is None else data.y[labelled]
    summary: dict[str, Any] = {
        "name": getattr(data, "name", None),
        "nodes": num_nodes,
        "undirected_edges": int(data.edge_index.size(1)) // 2,
        "edge_index_columns": int(data.edge_index.size(1)),
        "features": int(data.x.size(1)),
        "labelled_nodes": int(y.numel()),
        "anomalies": int(y.sum()),
        "anomaly_ratio": float(y.float().mean()),
        "shipped_splits": int(data.train_mask.size(1))
        if getattr(data, "train_mask", None) is not None else 0,
    }
    return summary
