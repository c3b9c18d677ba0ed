"""One entry point for every node-anomaly dataset: :func:`load_anomaly_dataset`."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from torch_geometric.data import Data

from ..paths import cache_dir
from .anomaly_data import BINARIZED_BY_NAME, data_dir, file_dataset_name
from .embedded import EMBEDDED_FILES, find_embedded_file, load_pyg_file
from .fraud_mat import (
    FRAUD_ARCHIVE_URLS,
    FRAUD_FILES,
    download_fraud_mat,
    find_fraud_mat,
    fraud_mat_folders,
    load_fraud_mat,
)
from .npz import load_anomaly_npz

ANOMALY_DATASETS: tuple[str, ...] = (
    "tolokers",
    "reddit",
    "inj_amazon",
    "yelpchi",
    "amazon",
    "tfinance",
    "tsocial",
)
DEFAULT_ANOMALY_DATASET = "tolokers"
NPZ_FILES: dict[str, str] = {"tfinance": "tfinance.npz", "tsocial": "tsocial.npz"}
DOWNLOAD_ENV = "ET_GRAPH_DOWNLOAD"
#: PyGOD's published injected and generated graphs (pygod.utils.load_data), whose labels 1-3
#: are kinds of anomaly: binarised by their name without a word.
PYGOD_GRAPHS = frozenset({"inj_cora", "inj_amazon", "inj_flickr", "gen_time", "gen_100",
                          "gen_500", "gen_1000", "gen_5000", "gen_10000"})


def _download_enabled(download: Optional[bool]) -> bool:
    if download is not None:
        return download
    return os.environ.get(DOWNLOAD_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _search_roots(root: Optional[Path]) -> list[Path]:
    if root is not None:
        return [root]
    # A set ET_GRAPH_DATA that is not a folder is a mistake to report, not a folder to skip.
    shipped = data_dir(required=bool(os.environ.get("ET_GRAPH_DATA")))
    return [folder for folder in (shipped, cache_dir()) if folder is not None]


def _placement_hint(root: Optional[Path]) -> Path:
    if root is not None:
        return root
    return data_dir(required=False) or cache_dir()


def _load_path(path: Path, name: Optional[str], relation: str, binarize: Optional[bool],
               unlabelled_prefix: Optional[int] = None, split_masks: bool = True) -> Data:
    if path.is_dir():
        raise ValueError(f"{path} is a folder; path= (--data) takes one graph file (.mat, .npz, "
                         ".pt); to search a folder for a named dataset pass root= (--data-root)")
    if not path.is_file():
        raise FileNotFoundError(f"No such file: {path}")
    suffixes = [suffix.lower() for suffix in path.suffixes]
    stem = file_dataset_name(path)
    by_name = None
    if binarize is None:
        # PyGOD's injected and generated graphs (inj_*, gen_*) label contextual/structural
        # anomalies as 1/2/3 (pygod.utils.load_data)
        binarize = (name or stem).lower().startswith(("inj_", "gen_"))
        # said where the name is not one of PyGOD's own graphs (their 1-3 are anomaly kinds;
        # a warning on every PyGOD file was noise: a review)
        by_name = ((name or stem) if binarize and (name or stem).lower() not in PYGOD_GRAPHS
                   else None)
    token = BINARIZED_BY_NAME.set(by_name)  # (a label above 1 is then named in a warning)
    try:
        return _load_file(path, name, relation, binarize, unlabelled_prefix, suffixes,
                          split_masks)
    finally:
        BINARIZED_BY_NAME.reset(token)


def _load_file(path: Path, name: Optional[str], relation: str, binarize: bool,
               unlabelled_prefix: Optional[int], suffixes: list[str],
               split_masks: bool = True) -> Data:
    if suffixes and suffixes[-1] == ".mat":
        if binarize:
            raise ValueError("binarize applies to .npz/.pt files, not to CARE-GNN .mat files")
        return load_fraud_mat(path, relation=relation, name=name,
                              unlabelled_prefix=unlabelled_prefix)
    if unlabelled_prefix is not None:
        raise ValueError(f"unlabelled_prefix applies to CARE-GNN .mat files, not to {path.name} "
                         "(mark its labelled nodes in label_mask instead)")
    torch_file = bool(suffixes) and suffixes[-1] in (".pt", ".pth", ".zip")
    if relation != "homo" and not (torch_file and relation == "multi"):
        raise ValueError(
            f"relation={relation!r} applies to CARE-GNN .mat files (YelpChi, Amazon), and "
            f"'multi' also to a torch-saved Data with edge_type; {path.name} is read with "
            "relation='homo'"
        )
    if suffixes and suffixes[-1] == ".npz":
        return load_anomaly_npz(path, name=name, binarize=binarize, split_masks=split_masks)
    if torch_file:
        return load_pyg_file(path, name=name, binarize=binarize, relation=relation,
                             split_masks=split_masks)
    raise ValueError(
        f"{path}: unknown file type; expected .mat (CARE-GNN), .npz (open layout) or "
        ".pt / .pt.zip (torch-saved PyG Data)"
    )


def load_anomaly_dataset(
    name: Optional[str] = None,
    root: Optional[Union[str, Path]] = None,
    path: Optional[Union[str, Path]] = None,
    relation: str = "homo",
    *,
    download: Optional[bool] = None,
    binarize: Optional[bool] = None,
    unlabelled_prefix: Optional[int] = None,
    split_masks: bool = True,
) -> Data:
    """Load a node-anomaly graph as a normalised PyG ``Data``.

    Args:
        name: one of :data:`ANOMALY_DATASETS`; ``"tolokers"`` when both ``name`` and ``path`` are
            ``None``. With ``path`` given, ``name`` sets ``data.name`` and, as the file name
            does without it, decides the default of ``binarize`` (PyGOD's ``inj_*``/``gen_*``).
        root: folder to look in. Defaults to the shipped data folder (``$ET_GRAPH_DATA``, else
            the repository's ``datasets/``) and then the download cache (``$ET_GRAPH_CACHE``,
            else ``~/.cache/et_graph``). YelpChi/Amazon are found as ``YelpChi.mat`` /
            ``Amazon.mat`` (or lowercase), T-Finance/T-Social as ``tfinance.npz`` /
            ``tsocial.npz``, directly in the folder or in a sub-folder named after the dataset.
        path: a file to load instead of a named dataset: ``.mat`` (CARE-GNN), ``.npz`` (open
            layout, see :mod:`et_graph.datasets.npz`) or ``.pt`` / ``.pt.zip`` (a torch-saved
            PyG ``Data``; it is unpickled, so only load files you trust).
        relation: ``"homo"``, ``"multi"`` (every relation as an edge type: ``edge_type`` and
            ``relation_names``, see :func:`load_fraud_mat`) or one relation of a ``.mat`` file
            (``"net_rur"``, ``"rur"``...).
        download: fetch YelpChi/Amazon from DGL's server when missing (into ``root``, else the
            cache). Off unless ``True`` or the environment sets ``ET_GRAPH_DOWNLOAD=1``.
        binarize: collapse labels to ``y > 0``. Default: only for PyGOD injected graphs
            (``inj_*``), whose labels are 0..3.
        unlabelled_prefix: leading nodes of a CARE-GNN ``.mat`` file that carry no label
            (:func:`load_fraud_mat`); ``None`` = 3,305 for Amazon, 0 otherwise.
        split_masks: read and check the split masks a graph carries (the default). ``False``
            drops them unread, with a ``DataWarning`` naming them: for protocols that split
            nothing (``et-graph unsupervised`` scores every node), so that a file's partial or
            inconsistent masks do not stop them.

    Returns:
        ``Data`` with ``x`` float32 ``[N, F]``, symmetric coalesced ``edge_index`` without
        self-loops, ``y`` int64 in ``{0, 1}``, ``name``, and where the data provide them
        ``train_mask``/``val_mask``/``test_mask`` bool ``[N, S]`` and ``label_mask`` bool ``[N]``.

    Raises:
        FileNotFoundError: the file is not where it should be (the message says where to put it).
        ValueError: unknown name or relation, or a malformed file.
    """
    root_path = Path(root).expanduser() if root is not None else None
    if path is not None:
        return _load_path(Path(path).expanduser(), name, relation, binarize, unlabelled_prefix,
                          split_masks)

    if name is not None and not str(name).strip():  # "" loaded Tolokers without a word
        raise ValueError(f"name is empty; choose one of {list(ANOMALY_DATASETS)}, or leave it "
                         "out for the default")
    given = name
    name = (name or DEFAULT_ANOMALY_DATASET).lower()
    if name not in ANOMALY_DATASETS:
        looks_like_a_file = Path(name).suffix in (".mat", ".npz", ".pt") or os.sep in name
        raise ValueError(
            f"unknown anomaly dataset {given!r}; "
            + (f"a file is read with path={given!r} (--data on the command line)"
               if looks_like_a_file else
               f"choose one of {list(ANOMALY_DATASETS)} or pass path=FILE / --data FILE "
               "(.mat, .npz, .pt)"))
    if relation != "homo" and name not in FRAUD_FILES:
        raise ValueError(
            f"relation={relation!r} only applies to yelpchi and amazon; {name} has one edge type"
        )
    if unlabelled_prefix is not None and name not in FRAUD_FILES:
        raise ValueError(f"unlabelled_prefix only applies to yelpchi and amazon, not to {name}")
    if binarize is not None and name not in EMBEDDED_FILES:
        raise ValueError(f"binarize applies to graph files (path=) and to the embedded "
                         f"{', '.join(EMBEDDED_FILES)}, not to {name}")
    roots = _search_roots(root_path)

    if name in EMBEDDED_FILES:
        found = find_embedded_file(name, roots)
        if found is None:
            relative, _ = EMBEDDED_FILES[name]
            raise FileNotFoundError(
                f"{name}: {relative} not found in {[str(r) for r in roots]}. It ships in the "
                f"repository's datasets/ folder; set ET_GRAPH_DATA to a folder holding "
                f"{relative}, or pass root=DIR (--data-root DIR) or path=FILE (--data FILE)."
            )
        default_binarize = EMBEDDED_FILES[name][1]
        return _load_path(found, name, "homo", default_binarize if binarize is None else binarize,
                          split_masks=split_masks)

    if name in FRAUD_FILES:
        found = find_fraud_mat(name, roots)
        failure = ""
        if found is None and _download_enabled(download):
            target = root_path or cache_dir()
            try:
                found = download_fraud_mat(name, target)
            except OSError as error:
                failure = f" Download attempt: {error}."
        if found is None:
            filename = FRAUD_FILES[name]
            hint = _placement_hint(root_path)
            raise FileNotFoundError(
                f"{name}: {filename} not found (searched "
                f"{[str(f) for f in fraud_mat_folders(name, roots)]}).{failure} "
                f"Download {FRAUD_ARCHIVE_URLS[name]}, unzip it and put {filename} at "
                f"{hint / filename} (or pass root=DIR / --data-root DIR holding {filename}, or "
                f"path=FILE / --data FILE). To let et-graph fetch it, set {DOWNLOAD_ENV}=1 (in "
                "Python also download=True)."
            )
        if binarize:
            raise ValueError("binarize does not apply to the CARE-GNN .mat datasets")
        return load_fraud_mat(found, relation=relation, name=name,
                              unlabelled_prefix=unlabelled_prefix)

    filename = NPZ_FILES[name]
    folders = [folder for root in roots for folder in (root, root / name)]
    for folder in folders:
        if (folder / filename).is_file():
            return load_anomaly_npz(folder / filename, name=name, binarize=bool(binarize),
                                    split_masks=split_masks)
    hint = _placement_hint(root_path)
    raise FileNotFoundError(
        f"{name}: {filename} not found (searched {[str(f) for f in folders]}). {name} is "
        f"distributed as a DGL binary graph (BWGNN); on a machine with DGL run "
        f"`python datasets/tools/dgl_to_npz.py --input PATH/{name} --output "
        f"{hint / filename}` and copy the result to {hint / filename} (or pass root=DIR / "
        "--data-root DIR, or path=FILE / --data FILE)."
    )
