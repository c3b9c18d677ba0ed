"""YelpChi and Amazon fraud graphs in the CARE-GNN ``.mat`` format.

DGL's ``FraudYelp.zip`` / ``FraudAmazon.zip`` hold ``YelpChi.mat`` / ``Amazon.mat`` (Dou et al.,
CIKM 2020, "Enhancing Graph Neural Network-based Fraud Detectors against Camouflaged
Fraudsters"). Each ``.mat`` file (read with :func:`scipy.io.loadmat`) has:

* ``features``: scipy sparse ``[N, F]`` (32 features for YelpChi, 25 for Amazon);
* ``label``: ``[1, N]`` in ``{0, 1}``;
* ``homo``: scipy sparse ``[N, N]``, the union of all relations;
* one sparse ``[N, N]`` matrix per relation: ``net_rur``, ``net_rtr``, ``net_rsr`` (YelpChi:
  same user, same product and month, same product and star rating) or ``net_upu``, ``net_usu``,
  ``net_uvu`` (Amazon: same product, same star rating within a week, top-5% review-text
  similarity).

In Amazon the first 3,305 users carry no real label (CARE-GNN and BWGNN leave them out of every
split); the loader marks them with ``label_mask = False``.

``relation="multi"`` keeps the relations apart as edge types, in PyG's ``RGCNConv`` convention:
``edge_index`` is every relation's (symmetric, loop-free, coalesced) edges concatenated,
``edge_type [E]`` the relation of each column and ``relation_names`` the matrix keys in that order
(a pair linked in two relations appears once per relation). :class:`~et_graph.nn.
RelationalETConv` and ``ETDetector(multi_relation=True)`` read them; a model without edge types
sees those edges with that multiplicity.
"""
from __future__ import annotations

import shutil
import tempfile
import urllib.request
import warnings
import zipfile
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
from torch_geometric.data import Data

from ..exceptions import DataWarning
from .anomaly_data import attach_relations, prepare_anomaly_data, warn_unread_entries

CARE_RELATIONS: dict[str, tuple[str, ...]] = {
    "yelpchi": ("net_rur", "net_rtr", "net_rsr"),
    "amazon": ("net_upu", "net_usu", "net_uvu"),
}
AMAZON_UNLABELLED_NODES = 3305
AMAZON_NODES = 11944
FRAUD_FILES: dict[str, str] = {"yelpchi": "YelpChi.mat", "amazon": "Amazon.mat"}
FRAUD_ARCHIVE_URLS: dict[str, str] = {
    "yelpchi": "https://data.dgl.ai/dataset/FraudYelp.zip",
    "amazon": "https://data.dgl.ai/dataset/FraudAmazon.zip",
}


def _detect_dataset(keys: set[str]) -> Optional[str]:
    for dataset, relations in CARE_RELATIONS.items():
        if any(relation in keys for relation in relations):
            return dataset
    return None


#: ``relation=`` value that loads every relation as an edge type.
MULTI_RELATION = "multi"


def _relation_key(relation: str, available: list[str], source: str) -> str:
    wanted = relation.lower()
    if wanted in ("homo", MULTI_RELATION):
        return wanted
    for key in available:
        if wanted in (key, key[len("net_"):]):
            return key
    raise ValueError(
        f"{source}: unknown relation {relation!r}; choose 'homo', 'multi' or one of "
        f"{available} (the 'net_' prefix may be left out)"
    )


def _check_adjacency_shape(adjacency: Any, key: str, num_nodes: int, source: str) -> None:
    shape = getattr(adjacency, "shape", None)
    if shape is None or len(shape) != 2 or tuple(shape) != (num_nodes, num_nodes):
        raise ValueError(
            f"{source}: '{key}' has shape {shape} but 'features' has {num_nodes} rows; "
            f"expected [{num_nodes}, {num_nodes}]"
        )


def _edges(adjacency: Any, key: str, source: str) -> np.ndarray:
    """``[2, E]`` int64 node pairs of the nonzero entries of the ``[N, N]`` matrix ``key``
    (its shape checked by :func:`load_fraud_mat` with every other adjacency of the file)."""
    if hasattr(adjacency, "tocoo"):
        coo = adjacency.tocoo()
        # A stored zero is no edge (as in a dense matrix); duplicates are summed first, so an
        # entry whose duplicates cancel is none either.
        coo.sum_duplicates()
        coo.eliminate_zeros()
        rows, cols, values = coo.row, coo.col, coo.data
    else:
        dense = np.asarray(adjacency)
        rows, cols = np.nonzero(dense)
        values = dense[rows, cols]
    off_diagonal = values[rows != cols]
    if off_diagonal.size and not bool(np.all(off_diagonal == 1)):
        # The loaders keep a pair once, unweighted: say so rather than drop weights silently.
        warnings.warn(f"{source}: '{key}' holds weights other than 1 (e.g. "
                      f"{off_diagonal[off_diagonal != 1][0]:g}); every nonzero entry is read as "
                      "one unweighted edge", DataWarning, stacklevel=3)
    return np.stack([rows, cols]).astype(np.int64)


def _multi_relation_keys(dataset: Optional[str], available: list[str], source: str
                         ) -> list[str]:
    """The relation matrices of a multi-relation load, in CARE-GNN's order when known, then any
    other ``net_*`` key of the file (an extra relation was dropped without a word)."""
    if dataset is not None and all(key in available for key in CARE_RELATIONS[dataset]):
        care = list(CARE_RELATIONS[dataset])
        return care + [key for key in available if key not in care]
    if not available:
        raise ValueError(
            f"{source}: relation='multi' needs the relation matrices (keys starting with 'net_', "
            "e.g. net_rur/net_rtr/net_rsr); the file holds none"
        )
    return available


def check_unlabelled_prefix(value: Optional[int]) -> None:
    """``ValueError`` unless ``value`` is ``None`` or a count of nodes ``>= 0`` (the loaders and
    the configs' ``unlabelled_prefix`` share it, so that a bad flag fails before any loading)."""
    if value is None:
        return
    if isinstance(value, bool) or int(value) != value or value < 0:
        raise ValueError(f"unlabelled_prefix must be a count of nodes >= 0, got {value!r}")


def load_fraud_mat(
    path: Union[str, Path],
    relation: str = "homo",
    name: Optional[str] = None,
    unlabelled_prefix: Optional[int] = None,
) -> Data:
    """Load a CARE-GNN ``.mat`` fraud graph (YelpChi, Amazon, or the same layout).

    Args:
        path: the ``.mat`` file.
        relation: ``"homo"`` (all relations merged), ``"multi"`` (every relation kept as an
            edge type: ``edge_index`` concatenated over the relations, ``edge_type [E]`` and
            ``relation_names``) or one relation key such as ``"net_rur"`` (or ``"rur"``).
        name: ``data.name``; by default ``"yelpchi"`` / ``"amazon"`` for ``YelpChi.mat`` /
            ``Amazon.mat`` (any case), else the file name (a user's file in the same layout is
            not titled YelpChi).
        unlabelled_prefix: how many leading nodes carry no label and must stay out of splits
            (``label_mask`` False). Defaults to 3,305 for Amazon's layout (the usual protocol;
            a warning says so when the file is not Amazon's 11,944 nodes), 0 else.

    Keys outside the layout (``features``, ``label``, ``homo``, ``net_*``) are named in a
    warning: masks, a ``label_mask`` or edge weights stored there are not read.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: unreadable file, missing keys, shape mismatch, non-binary labels, etc.
    """
    from scipy.io import loadmat, whosmat

    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such .mat file: {path}")
    try:
        # The names first, without the data: the entries the layout does not read are never
        # unpacked (a 1 MB file with a 1 GiB extra entry unpacked it, while the warning below
        # said it was not read: a security audit).
        keys = {name for name, _, _ in whosmat(str(path)) if not name.startswith("__")}
        read = [key for key in keys if key in ("features", "label", "homo")
                or key.startswith("net_")]
        mat = loadmat(str(path), variable_names=read)
    except Exception as error:  # scipy raises several unrelated types for corrupt files
        raise ValueError(f"{source}: not a readable MATLAB .mat file ({error})") from error
    missing = [key for key in ("features", "label", "homo") if key not in keys]
    if missing:
        raise ValueError(
            f"{source}: missing key(s) {missing} of the CARE-GNN layout; found {sorted(keys)}. "
            "Expected 'features' (sparse [N, F]), 'label' ([1, N]), 'homo' ([N, N]) and the "
            "relation matrices (net_rur/net_rtr/net_rsr or net_upu/net_usu/net_uvu)."
        )
    dataset = _detect_dataset(keys)
    relations = sorted(key for key in keys if key.startswith("net_"))
    warn_unread_entries(source, keys, ("features", "label", "homo", *relations))
    key = _relation_key(relation, relations, source)
    features = mat["features"]
    num_nodes = features.shape[0]
    # Every adjacency of the file, read or not: a relation of the wrong size loaded without a
    # word under --relation homo (an audit), though the file is broken.
    for adjacency_key in ("homo", *relations):
        _check_adjacency_shape(mat[adjacency_key], adjacency_key, num_nodes, source)
    if key == MULTI_RELATION:
        names = _multi_relation_keys(dataset, relations, source)
        typed = [_edges(mat[name], name, source) for name in names]
        # Validated (and merged) once as the union; the typed edges replace it below.
        edge_index = np.concatenate(typed, axis=1)
    else:
        edge_index = _edges(mat[key], key, source)

    if unlabelled_prefix is None:
        unlabelled_prefix = AMAZON_UNLABELLED_NODES if dataset == "amazon" else 0
        if dataset == "amazon" and AMAZON_UNLABELLED_NODES < num_nodes != AMAZON_NODES:
            warnings.warn(
                f"{source}: Amazon's layout, so its first {AMAZON_UNLABELLED_NODES} nodes are "
                f"taken as unlabelled (kept out of every split), but the file has {num_nodes} "
                f"nodes, not Amazon.mat's {AMAZON_NODES}: pass unlabelled_prefix "
                "(--unlabelled-prefix) with the file's own count, 0 for none", DataWarning,
                stacklevel=2)
    check_unlabelled_prefix(unlabelled_prefix)
    label_mask = None
    if unlabelled_prefix:
        if unlabelled_prefix >= num_nodes:
            raise ValueError(
                f"{source}: {unlabelled_prefix} leading nodes are unlabelled but the graph has "
                f"only {num_nodes} nodes (Amazon.mat has 11,944); pass unlabelled_prefix=0 "
                "(--unlabelled-prefix 0) for files without that prefix, or the file's own count"
            )
        label_mask = np.arange(num_nodes) >= unlabelled_prefix

    # the dataset's name where the file is its usual one
    known = (dataset if dataset is not None and path.name.lower() == FRAUD_FILES[dataset].lower()
             else None)
    data = prepare_anomaly_data(
        features, edge_index, mat["label"], name=name or known or path.stem.lower(),
        label_mask=label_mask, source=source,
    )
    if key == MULTI_RELATION:
        attach_relations(data, typed, list(names))
    return data


#: The sub-folder DGL's ``FraudDataset`` extracts each archive into (``~/.dgl/yelp/``), so a
#: DGL cache can serve as ``root``.
DGL_FOLDERS = {"yelpchi": "yelp", "amazon": "amazon"}


def fraud_mat_folders(dataset: str, roots: list[Path]) -> list[Path]:
    """The folders :func:`find_fraud_mat` looks in, in its order: each root and its sub-folders
    named after the dataset, the file and DGL's cache folder (a missing file's message named
    the roots alone)."""
    filename = FRAUD_FILES[dataset]
    folders: list[Path] = []
    for root in roots:
        for folder in (root, root / dataset, root / filename[: -len(".mat")],
                       root / DGL_FOLDERS.get(dataset, dataset)):
            if folder not in folders:
                folders.append(folder)
    return folders


def find_fraud_mat(dataset: str, roots: list[Path]) -> Optional[Path]:
    """First ``YelpChi.mat`` / ``Amazon.mat`` (or lowercase) in :func:`fraud_mat_folders`."""
    filename = FRAUD_FILES[dataset]
    for folder in fraud_mat_folders(dataset, roots):
        for candidate in (filename, filename.lower()):
            path = folder / candidate
            if path.is_file():
                return path
    return None


#: The most a fraud archive download may be (DGL's are tens of MB): a larger one is refused.
MAX_DOWNLOAD_BYTES = 512 * 2**20


def download_fraud_mat(dataset: str, root: Path, timeout: float = 15.0) -> Path:
    """Fetch DGL's archive for ``dataset`` and extract its ``.mat`` file into ``root``.

    Raises ``OSError`` (with the reason) on any network or archive failure, on a redirect away
    from HTTPS and on an archive above :data:`MAX_DOWNLOAD_BYTES` (a security audit: urllib
    follows a redirect to plain HTTP, and the size had no bound). DGL publishes no checksum of
    its archives, so the file is checked only as every ``.mat`` file is, when it is read.
    """
    url = FRAUD_ARCHIVE_URLS[dataset]
    filename = FRAUD_FILES[dataset]
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        archive = Path(scratch) / Path(url).name
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response, open(
                archive, "wb"
            ) as handle:
                final = getattr(response, "geturl", lambda: url)()
                if not str(final).startswith("https://"):
                    raise OSError(f"redirected to {final}, which is not HTTPS")
                received = 0
                while chunk := response.read(1 << 20):
                    received += len(chunk)
                    if received > MAX_DOWNLOAD_BYTES:
                        raise OSError(f"the archive exceeds {MAX_DOWNLOAD_BYTES >> 20} MiB")
                    handle.write(chunk)
            with zipfile.ZipFile(archive) as bundle:
                members = [m for m in bundle.namelist() if Path(m).name.lower() == filename.lower()]
                if not members:
                    raise OSError(f"{url} does not contain {filename}")
                extracted = Path(bundle.extract(members[0], scratch))
        except Exception as error:  # any failure (DNS, timeout, HTTP, bad zip) means "no file"
            raise OSError(f"download of {url} failed: {error}") from error
        target = root / filename
        shutil.move(str(extracted), target)
    return target
