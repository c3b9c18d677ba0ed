"""TUDataset graph classification data, read offline from PyG's raw layout.

Any TU dataset loads from ``ROOT/NAME/raw/NAME_*.txt`` (the layout of PyG's download). The raw
files are copied to a writable cache first, because PyG writes ``processed/`` next to them, so the
given root is never written to. Datasets without node features (IMDB-BINARY, ...) get a one-hot
encoding of the node degree; ``degree_feature=True`` appends ``log1p(degree)`` to every dataset's
node features, ``incident_edge_sums=True`` appends each node's summed incoming edge features (bond
counts by type) and ``rw_pe_dim=k`` adds random-walk encodings ``rw_pe``. The repository ships
MUTAG, PROTEINS, NCI1, NCI109, ENZYMES, IMDB-BINARY and Mutagenicity in ``datasets/TUDataset``
(:func:`default_tu_root`). The raw files are checked against each other first
(:func:`check_raw_files`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from torch_geometric.datasets import TUDataset
from torch_geometric.transforms import OneHotDegree
from torch_geometric.utils import degree, is_undirected

from ..exceptions import DataWarning
from ..paths import (
    cache_dir,
    cache_dir_is_chosen,
    no_data_hint,
    private_temp_folder,
    shipped_path,
    write_text_whole,
)
from ..progress import progress_bar
from ..transforms import CLSLaplacianPE, IncidentEdgeSum, LogDegree, RandomWalkPE
from .anomaly_data import physical_memory, refuse_beyond_memory
from .embedded import restricted_pyg_loads
from .gnnbenchmark_common import UNREADABLE_FILE_ERRORS, read_local_files, unreadable
from .locking import folder_lock, quiet_processing


def default_tu_root() -> Optional[Path]:
    """The shipped raw TU files, ``datasets/TUDataset`` (under ``$ET_GRAPH_DATA`` when set, else
    in the source checkout), or ``None`` when the package is installed without them."""
    return shipped_path(Path("datasets", "TUDataset"))


def default_tu_cache() -> Path:
    """Where the raw files are copied and PyG's ``processed/`` is written when no cache is given."""
    # in the user's own cache folder: in /tmp another user could make it first and plant
    # processed files, which PyG's loader unpickles (a security review ran code that way)
    folder = cache_dir() / "tudataset"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    except OSError as error:
        if cache_dir_is_chosen():
            raise ValueError(f"ET_GRAPH_CACHE={os.environ['ET_GRAPH_CACHE']!r}: cannot make "
                             f"{folder} there ({error}); point it at a writable folder, or "
                             "unset it") from error
        # no writable home (a container): a private folder in the temp dir
        return private_temp_folder("et_graph_tudataset")


def _names_hint(root: Path, name: str) -> str:
    """The datasets ``root`` holds, the closest to ``name`` first ("mutag" found nothing and
    named nothing else)."""
    import difflib

    held = sorted(p.name for p in root.iterdir() if (p / "raw").is_dir()) if root.is_dir() else []
    if name in held:  # its raw folder is there, without the files: guessing its name confuses
        return f"; {root / name / 'raw'} exists but holds no {name}_*.txt file"
    if not held:
        return ""
    close = difflib.get_close_matches(name.upper(), [h.upper() for h in held], n=1, cutoff=0.6)
    guess = next((h for h in held if close and h.upper() == close[0]), None)
    return (f"; did you mean {guess}?" if guess else "") + f" {root} holds {', '.join(held)}"


def check_dataset_name(name: str) -> str:
    """``name`` if it can name a folder inside the roots and caches: letters, digits and
    ``_ . + -``, not ``.`` or ``..`` (a preset naming ".." made the cache cleanup delete the
    cache's parent folder)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", name) \
            or name in (".", ".."):
        raise ValueError(f"a TU dataset name is letters, digits and _ . + - (a folder inside "
                         f"the root), got {name!r}")
    return name


def prepare_root(root: str | Path, name: str, cache: str | Path | None) -> Path:
    """Copy ``root/name/raw`` into ``cache/name/raw`` (once) and return ``cache``."""
    check_dataset_name(name)
    source = Path(root) / name / "raw"
    if not source.is_dir() or not any(source.glob(f"{name}_*.txt")):
        raise ValueError(
            f"no TU raw files at {source} (expected {name}_A.txt, {name}_graph_indicator.txt, "
            f"{name}_graph_labels.txt, ...){_names_hint(Path(root), name)}"
        )
    required = [f"{name}_{part}.txt" for part in ("A", "graph_indicator", "graph_labels")]
    missing = [file for file in required if not (source / file).is_file()]
    if missing:
        # PyG would try to download the dataset instead (and fail offline with a DNS error).
        raise ValueError(f"{source} lacks {', '.join(missing)}: a TU dataset needs "
                         f"{', '.join(required)} (node and edge files are optional)")
    cache = Path(cache) if cache else default_tu_cache()
    target = cache / name / "raw"
    if source.resolve() == target.resolve():
        # (a security audit) --root D --cache D: the cleanup below deleted the raw files
        raise ValueError(f"the cache {cache} is the root {root}: the cache holds copies that "
                         "et-graph replaces, so it must be another folder (or none, for "
                         "the user's own cache)")
    # By content, not by file names: another root (or edited files) under the same dataset name
    # must not load the graphs processed from the first one.
    stamp = cache / name / "raw_source.json"
    fingerprint = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                   for p in sorted(source.iterdir()) if p.is_file()}
    # The checks' version too: a cache made before a check was added is checked again once (a
    # review: a repeated edge cached earlier kept its summed edge labels)
    fingerprint[RAW_CHECKS_KEY] = RAW_CHECKS_VERSION
    if not target.is_dir() or _stamped(stamp) != fingerprint:
        texts = check_raw_files(source, name)  # new or changed files only
        if (cache / name).exists():
            # the processed graphs go with the old raw files; only a folder inside the cache
            if (cache / name).resolve().parent != cache.resolve():
                raise ValueError(f"{cache / name} is not a folder inside the cache {cache}")
            if not stamp.is_file():
                # Only a folder et-graph made (its stamp is written before anything else): a
                # --cache naming a folder of the user's, or a crafted preset's, had its
                # same-named subfolder deleted (a security audit).
                raise ValueError(f"{cache / name} exists without et-graph's stamp ({stamp.name}): "
                                 "a folder of someone else's, or the cache of an et-graph "
                                 "before session 66 or an interrupted copy of one. et-graph "
                                 "replaces only its own, so remove it if it is a cache, or "
                                 "choose another --cache")
            shutil.rmtree(cache / name)
        # the stamp first, an empty one: a run killed while copying leaves a folder that the
        # next run recognises as its own and replaces
        stamp.parent.mkdir(parents=True, exist_ok=True)
        write_text_whole(stamp, "{}")
        # the regular files (those fingerprinted above) only: a link in the raw folder to
        # /dev/zero, or to another folder, was followed, filling the disk or copying that
        # folder (a security audit)
        target.mkdir()
        for path in sorted(source.iterdir()):
            if path.is_file():
                shutil.copyfile(path, target / path.name)
        for file_name, text in texts.items():  # what PyG reads: the normalised lines
            (target / file_name).write_text(text, encoding="utf-8")
        # (a full disk left an empty stamp, read as JSON on every run)
        write_text_whole(stamp, json.dumps(fingerprint, indent=1))
    return cache


def _stamped(stamp: Path) -> Optional[dict[str, str]]:
    """The fingerprint a cache was stamped with; ``None`` when missing or unreadable (the files
    are then copied again)."""
    try:
        return json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _integers(text: str, path: Path) -> np.ndarray:
    """The integers of a TU text file's content (one or more per line, comma separated)."""
    tokens = text.replace(",", " ").split()
    try:
        return np.array(tokens, dtype=np.int64)
    except ValueError:
        bad = next(t for t in tokens if not t.lstrip("-").isdigit())
        raise ValueError(f"{path} must hold integers (a TU raw file), found {bad!r}") from None


def _check_line_widths(text: str, path: Path) -> None:
    """``ValueError`` naming the line of a TU labels file that holds another number of values
    than line 1 (PyG failed on "expected sequence of length 1 at dim 1 (got 2)", naming no
    file: an audit)."""
    widths = [len(line.split(",")) for line in text.splitlines()]
    for number, width in enumerate(widths, start=1):
        if width != widths[0]:
            raise ValueError(f"{path}: line {number} holds {width} values, line 1 {widths[0]}")


def _normalised_text(path: Path) -> str:
    """The file's lines, trailing blank lines dropped and a final newline added: PyG's reader
    drops the last line of a file without one (a lost edge in ``A.txt``), and fails on blank
    lines with ``invalid literal for int() with base 10: ''``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    blank = [i + 1 for i, line in enumerate(lines) if not line.strip()]
    if blank:
        raise ValueError(f"{path}: line {blank[0]} is blank (one value per line, no gaps)")
    # Values separated by spaces or tabs ("1 2" in A.txt) passed the checks and then failed in
    # PyG's reader, which splits on commas, naming no file: written with commas here.
    lines = [line if "," in line or len(line.split()) < 2 else ", ".join(line.split())
             for line in lines]
    return "\n".join(lines) + "\n" if lines else ""


def _float_rows(text: str, path: Path) -> np.ndarray:
    """The rows of a TU attributes file as floats, each line the same width, every value
    finite; a ``ValueError`` naming the file and line otherwise (PyG named neither, and a NaN
    surfaced only in the first forward pass, spread by standardisation over its column)."""
    rows = [[value.strip() for value in line.split(",")] for line in text.splitlines()]
    for number, row in enumerate(rows, start=1):
        if len(row) != len(rows[0]):
            raise ValueError(f"{path}: line {number} holds {len(row)} values, line 1 "
                             f"{len(rows[0])}")
        try:
            values = [float(value) for value in row]
        except ValueError:
            bad = next(v for v in row if not _is_float(v))
            raise ValueError(f"{path}: line {number} holds {bad!r}, not a number") from None
        if not all(np.isfinite(values)):
            raise ValueError(f"{path}: line {number} holds NaN or inf ({', '.join(row)})")
    return np.array(rows, dtype=np.float64) if rows else np.zeros((0, 0))


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


#: The version of :func:`check_raw_files` a cache's stamp records (raise it with every new
#: check, so that earlier caches are checked again).
RAW_CHECKS_VERSION = "2"
RAW_CHECKS_KEY = "(raw checks)"

#: The parts of a TU folder that PyG's reader reads (``{name}_{part}.txt``). Other files there
#: (the official zips ship ``{name}_label_readme.txt``, free text) are copied as they are.
TU_RAW_PARTS = ("A", "graph_indicator", "graph_labels", "graph_attributes", "node_labels",
                "node_attributes", "edge_labels", "edge_attributes")


def check_raw_files(source: Path, name: str) -> dict[str, str]:
    """The raw files' normalised texts (:func:`_normalised_text`), or a ``ValueError`` for
    files that disagree with each other. PyG reads them without these checks: a short labels
    file failed deep inside its slicing ("start (180) + length (1) exceeds dimension size
    (180)"); an unsorted graph indicator assigned nodes to the wrong graphs silently (it splits
    the nodes by counts, in file order), and so did an edge joining two graphs; graphs without
    edges at the end of the file were dropped."""
    def where(part: str) -> Path:
        return source / f"{name}_{part}.txt"

    texts = {path.name: _normalised_text(path)
             for path in map(where, TU_RAW_PARTS) if path.is_file()}

    def lines(part: str) -> int:
        return texts[f"{name}_{part}.txt"].count("\n")

    indicator = _integers(texts[f"{name}_graph_indicator.txt"], where("graph_indicator"))
    if indicator.size == 0 or int(indicator.min()) < 1:
        raise ValueError(f"{where('graph_indicator')}: graph ids start at 1")
    if bool((np.diff(indicator) < 0).any()):
        row = int(np.argmax(np.diff(indicator) < 0)) + 2
        raise ValueError(f"{where('graph_indicator')}: graph ids must be in ascending order "
                         f"(node i belongs to the graph on line i), line {row} goes back")
    num_graphs, num_nodes = int(indicator.max()), int(indicator.size)
    if num_graphs < 2:
        raise ValueError(f"{where('graph_indicator')} names {num_graphs} graph; a dataset for "
                         "graph classification needs at least 2")
    labels = _integers(texts[f"{name}_graph_labels.txt"], where("graph_labels"))
    if labels.size != num_graphs or lines("graph_labels") != num_graphs:
        raise ValueError(f"{where('graph_labels')} has {lines('graph_labels')} labels, but the "
                         f"graph indicator names {num_graphs} graphs")
    edges = _integers(texts[f"{name}_A.txt"], where("A"))
    if edges.size % 2 or edges.size != 2 * lines("A"):
        raise ValueError(f"{where('A')}: each line must hold two node ids")
    if edges.size < 4:
        raise ValueError(f"{where('A')} holds {edges.size // 2} edge; PyG's TU reader needs 2")
    if int(edges.min()) < 1 or int(edges.max()) > num_nodes:
        raise ValueError(f"{where('A')} names node ids in [{int(edges.min())}, "
                         f"{int(edges.max())}], but the graph indicator has nodes 1..{num_nodes}")
    source_graph, target_graph = indicator[edges[0::2] - 1], indicator[edges[1::2] - 1]
    if bool((source_graph != target_graph).any()):
        row = int(np.argmax(source_graph != target_graph)) + 1
        raise ValueError(f"{where('A')}: line {row} joins a node of graph "
                         f"{source_graph[row - 1]} to one of graph {target_graph[row - 1]}")
    loops = edges[0::2] == edges[1::2]
    # (self-loops do not count: PyG's reader removes them before it slices the edges, so a last
    # graph of self-loops alone was dropped with its label, without a word: an audit)
    last_with_edges = int(source_graph[~loops].max()) if bool((~loops).any()) else 0
    if last_with_edges < num_graphs:
        raise ValueError(f"graphs {last_with_edges + 1}..{num_graphs} (the last of "
                         f"{where('graph_indicator')}) have no edge (self-loops do not "
                         "count: PyG's TU reader removes them), and it drops graphs without "
                         "edges at the end; move them before a graph with edges")
    if bool(loops.any()):
        warnings.warn(f"{where('A')} holds {int(loops.sum())} self-loop(s) (first: line "
                      f"{int(np.argmax(loops)) + 1}); PyG's TU reader removes them, with their "
                      "edge labels and attributes", DataWarning, stacklevel=3)
    with_edge_data = [part for part in ("edge_labels", "edge_attributes")
                      if f"{name}_{part}.txt" in texts]
    if with_edge_data:
        # PyG's reader coalesces repeated edges and sums their edge data: one-hot bond types
        # became 2s without a word (an audit). (Edges without data may repeat: IMDB-BINARY
        # lists each twice, and merging them changes nothing.)
        # (self-loops apart: PyG removes them before it merges, so nothing of theirs is summed)
        pair = (edges[0::2] * (num_nodes + 1) + edges[1::2])[~loops]
        order = np.argsort(pair, kind="stable")
        copies = order[np.flatnonzero(pair[order][1:] == pair[order][:-1]) + 1]
        if copies.size:
            line = int(np.flatnonzero(~loops)[copies.min()]) + 1
            raise ValueError(f"{where('A')} repeats {copies.size} edge(s) (first: line "
                             f"{line}), and PyG's TU reader merges a repeated "
                             f"edge into one whose {' and '.join(with_edge_data)} are the sums "
                             "of the copies'; list each edge once")
    if f"{name}_graph_attributes.txt" in texts:
        raise ValueError(f"{where('graph_attributes')} is present: PyG's TU reader then takes "
                         "the graph attributes as the targets instead of graph_labels (a "
                         "regression set), and et-graph classifies by graph_labels; move it "
                         "out of the folder")
    for part, count, what in (("node_labels", num_nodes, "nodes"),
                              ("node_attributes", num_nodes, "nodes"),
                              ("edge_labels", edges.size // 2, "edges in A.txt"),
                              ("edge_attributes", edges.size // 2, "edges in A.txt"),
                              ("graph_attributes", num_graphs, "graphs")):
        if f"{name}_{part}.txt" not in texts:
            continue
        if lines(part) != count:
            raise ValueError(f"{where(part)} has {lines(part)} lines for {count} {what}")
        if part.endswith("labels"):
            _integers(texts[f"{name}_{part}.txt"], where(part))
            _check_line_widths(texts[f"{name}_{part}.txt"], where(part))
        else:
            _float_rows(texts[f"{name}_{part}.txt"], where(part))
    return texts


def with_incident_edge_sums(graphs: list, info: dict[str, Any], name: str
                            ) -> tuple[list, dict[str, Any]]:
    """Copies of ``graphs`` with each node's summed incoming edge features appended to ``x``
    (:class:`~et_graph.transforms.IncidentEdgeSum`), and a copy of their description ``info``
    (as :func:`load_tudataset` returns it) that says so; ``name`` names the dataset in the
    error for graphs without edge features."""
    if not info["edge_features"]:
        raise ValueError(f"incident_edge_sums needs edge features, and {name} has none")
    summing = IncidentEdgeSum()
    graphs = [summing(g.clone()) for g in graphs]
    info = {**info, "node_feature_width": int(graphs[0].x.size(1)),
            "node_features": f"{info.get('node_features', 'x')} + summed incoming edge features"}
    return graphs, info


def _processed_with_a_transform(processed: Path) -> bool:
    """Whether PyG's ``processed/`` folder records a ``pre_transform`` or ``pre_filter`` (the
    text PyG writes beside its data: ``'None'`` without one), or a record that cannot be read:
    :func:`load_tudataset` processes without either, so such a folder is not its own."""
    for record in ("pre_transform.pt", "pre_filter.pt"):
        path = processed / record
        if not path.exists():
            continue
        try:
            written = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # (cut short, or not PyG's: processed again, not trusted)
            return True
        if written != "None":
            return True
    return False


def load_tudataset(
    root: str | Path | None, name: str, cache: str | Path | None = None, pe_dim: int = 8,
    progress: bool = True, *, rw_pe_dim: int = 0, degree_feature: bool = False,
    incident_edge_sums: bool = False,
) -> tuple[list, dict[str, Any]]:
    """The graphs (with ``lap_pe``/``cls_lap_pe`` when ``pe_dim > 0``, ``rw_pe`` ``[N,
    rw_pe_dim]`` when ``rw_pe_dim > 0``, and ``log1p(degree)`` as the last column of ``x`` when
    ``degree_feature``, then the summed incoming edge features when ``incident_edge_sums``) as a
    list and a description of the features (with ``class_labels``, the file's graph label of
    each class in order, where those are not 0..C-1: PyG renumbers them). ``root=None`` reads the
    shipped ``datasets/TUDataset``."""
    if rw_pe_dim < 0:
        raise ValueError(f"rw_pe_dim must be >= 0, got {rw_pe_dim}")
    if root is None:
        root = default_tu_root()
        if root is None:
            raise ValueError("no TU root given and no shipped datasets/TUDataset folder found: "
                             "pass the folder holding NAME/raw/NAME_*.txt (--root DIR), or "
                             f"{no_data_hint()}")
    cache = Path(cache) if cache else default_tu_cache()
    # Copying the raw files and PyG's processing run under one lock: parallel jobs on the same
    # cache would otherwise race on processed/data.pt (a half-written file fails to load).
    with folder_lock(cache, name), quiet_processing(not progress), restricted_pyg_loads():
        # PyG prints "Processing... Done!" to stderr on a first load: quiet under --no-progress
        prepared = str(prepare_root(root, name, cache))
        if _processed_with_a_transform(cache / name / "processed"):
            # A user's own TUDataset(..., pre_transform=...) on the same cache folder (the
            # docs' example did so): PyG only warned, and its transformed graphs were read as
            # the raw ones (a graph-level audit found lap_pe on graphs loaded with pe_dim=0).
            shutil.rmtree(cache / name / "processed", ignore_errors=True)
        try:
            dataset = TUDataset(prepared, name, use_node_attr=True, use_edge_attr=True)
        except UNREADABLE_FILE_ERRORS as error:
            if not unreadable(error):
                raise
            # processed/ cut short (a killed run, a full disk): every later run failed on it
            shutil.rmtree(cache / name / "processed", ignore_errors=True)
            dataset = read_local_files(
                lambda: TUDataset(prepared, name, use_node_attr=True, use_edge_attr=True),
                cache / name, "remove that folder, or pass another --cache")
        # PyG numbers the classes by the sorted label values: a file's {-1, 1} became {0, 1}
        # without a word, so a user reading predictions could not tell which class was which.
        # (Read under the lock: another job may replace the cached raw files after it.)
        labels_file = cache / name / "raw" / f"{name}_graph_labels.txt"
        file_labels = np.unique(_integers(labels_file.read_text(encoding="utf-8"),
                                          labels_file))
    graphs = [dataset[i] for i in range(len(dataset))]
    one_way = sum(not is_undirected(g.edge_index, num_nodes=g.num_nodes) for g in graphs)
    if one_way:
        # TU files list each edge both ways; a hand-made file that lists it once was read as
        # directed graphs without a word (GIN then passes messages one way only).
        warnings.warn(f"{name}: {one_way} of {len(graphs)} graphs list some edge in one direction "
                      "only; TU files list each edge both ways (an undirected graph). The "
                      "models read them as directed: add the reverse lines to A.txt (and its "
                      "edge files) if the graphs are undirected", DataWarning, stacklevel=2)
    info: dict[str, Any] = {
        "graphs": len(graphs),
        "classes": int(dataset.num_classes),
        "node_attributes": int(dataset.num_node_attributes),
        "node_labels": int(dataset.num_node_labels),
        "edge_features": int(dataset.num_edge_features),
        # What the file gave (MUTAG has labels only: "attributes + labels" misdescribed it).
        "node_features": " + ".join(part for part, count in (
            (f"TU node attributes ({dataset.num_node_attributes})", dataset.num_node_attributes),
            (f"one-hot node labels ({dataset.num_node_labels})", dataset.num_node_labels))
            if count),
    }
    if not np.array_equal(file_labels, np.arange(file_labels.size)):
        info["class_labels"] = [int(value) for value in file_labels]
    if dataset.num_node_features == 0:
        max_degree = max(
            int(degree(g.edge_index[0], g.num_nodes).max()) if g.edge_index.numel() else 0
            for g in graphs
        )
        # nodes x (max degree + 1) floats: a 278 KB star graph asked for 0.9 GB (a security
        # audit); refused where the machine cannot hold it, before it is built
        refuse_beyond_memory(sum(g.num_nodes for g in graphs) * (max_degree + 1) * 4,
                             physical_memory(), f"{name} has no node features, and its one-hot "
                             f"degree features (degrees 0..{max_degree}) would take")
        transform = OneHotDegree(max_degree)
        graphs = [transform(g) for g in graphs]
        info["node_features"] = f"one-hot node degree (0..{max_degree}); the data have none"
    empty = [i for i, g in enumerate(graphs) if not g.num_nodes]
    if empty:
        raise ValueError(f"{name} has graphs without nodes (indices {empty[:10]})")
    if degree_feature:
        graphs = [LogDegree()(g) for g in graphs]
        info["node_features"] += " + log1p(degree)"
    if incident_edge_sums:
        graphs, info = with_incident_edge_sums(graphs, info, name)
    if rw_pe_dim:
        walk = RandomWalkPE(rw_pe_dim)
        with threadpool_limits(limits=1):
            graphs = [walk(g) for g in graphs]
    if pe_dim:
        pe = CLSLaplacianPE(pe_dim)
        # Many tiny eigh calls: threaded BLAS only adds contention (much slower on a busy CPU).
        with threadpool_limits(limits=1):
            graphs = [pe(g) for g in progress_bar(graphs, desc="Laplacian PE", leave=False,
                                                  disable=not progress)]
    info["node_feature_width"] = int(graphs[0].x.size(1))
    return graphs, info
