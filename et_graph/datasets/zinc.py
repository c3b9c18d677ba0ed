"""ZINC-12k (GNNBenchmark graph regression), offline-first.

* :func:`load_zinc_partial` reads the ZINC-12k ``val``/``test`` files that survive in
  ``datasets/ZINC_subset_partial`` (PyG-1.x ``(Data, slices)`` pickles that PyG 2.x refuses to
  load through ``InMemoryDataset``). The train split is not there.
* :func:`load_zinc` wraps PyG's ``ZINC`` when its files are present under a root, and never
  downloads: a missing file raises :class:`FileNotFoundError` that names the file and where it
  must go.
* :func:`zinc_benchmark` picks the official splits when present, else the *ZINC proxy*.

Layout expected under a user root ``ROOT`` (PyG's own layout)::

    ROOT/ZINC/raw/{train,val,test}.pickle and {train,val,test}.index    -> load_zinc
    ROOT/ZINC_subset_partial/processed/{val,test}.pt                    -> load_zinc_partial
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from ..paths import no_data_hint, source_checkout
from .embedded import load_torch_data, restricted_pyg_loads
from .gnnbenchmark_common import (
    SPLITS,
    BenchmarkData,
    PathLike,
    category_ids,
    check_benchmark_graph,
    drop_stale_processed,
    missing_files,
    read_local_files,
    stamp_processed,
)
from .locking import folder_lock

if TYPE_CHECKING:
    from torch_geometric.datasets import ZINC

#: Atom types of ZINC-12k (``atom_dict.pickle``: C, O, N, F, C H1, ... 28 entries).
ZINC_NUM_ATOM_TYPES = 28
#: Bond types are 1 (single), 2 (double), 3 (triple); 0 is unused, so an embedding needs 4 rows.
ZINC_NUM_BOND_TYPES = 4
ZINC_PARTIAL_SPLITS = ("val", "test")
ZINC_SPLIT_SIZES = {"train": 10000, "val": 1000, "test": 1000}
_PARTIAL_KEYS = ("x", "edge_index", "edge_attr", "y")


def finite_targets(values: Tensor, what: str) -> Tensor:
    """``values`` as a float vector, or a ``ValueError``: a NaN target made the test MAE NaN
    (printed as n/a, without a reason) or the training 'diverge' with advice to lower the
    learning rate."""
    values = values.float().view(-1)
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{what} is NaN or infinite")
    return values


def zinc_partial_file(root: PathLike, split: str) -> Path:
    """Path of ``split``'s processed file; ``root`` may be the dataset folder or its processed/."""
    root = Path(root)
    if root.name != "processed" and (root / "processed").is_dir():
        root = root / "processed"
    return root / f"{split}.pt"


def load_zinc_partial(root: PathLike, split: str) -> list[Data]:
    """Rebuild ZINC-12k ``split`` (``"val"`` or ``"test"``) from the PyG-1.x processed file.

    Each graph becomes ``Data(x=[n, 1] long atom type, edge_index=[2, e] long (local ids,
    both directions), edge_attr=[e] long bond type, y=[1] float)``, the layout of PyG's
    ``ZINC(subset=True)``. Keys added by a foreign pre-transform (``node_id``, ``degrees``...) are
    ignored.
    """
    if split not in ZINC_PARTIAL_SPLITS:
        raise FileNotFoundError(
            f"the partial ZINC copy has only the splits {ZINC_PARTIAL_SPLITS}; the {split!r} split "
            "is missing. For the official benchmark put PyG's ZINC raw files "
            "({train,val,test}.pickle and {train,val,test}.index) in ROOT/ZINC/raw/ and use "
            "load_zinc(ROOT/ZINC, split)."
        )
    path = zinc_partial_file(root, split)
    if not path.is_file():
        raise FileNotFoundError(
            f"missing {path}: copy ZINC_subset_partial/processed/{split}.pt (provenance in "
            f"datasets/SOURCES.md) to {path}"
        )
    # A damaged file fails in torch.load or, with slices that disagree with the tensors, in
    # the slicing below: either way the file is named.
    return read_local_files(lambda: _rebuild_partial(path), path,
                            f"copy ZINC_subset_partial/processed/{split}.pt again")


def _rebuild_partial(path: Path) -> list[Data]:
    # weights-only: PyG's fs.torch_load retries with full unpickling when that fails, so a
    # planted processed file ran its code
    loaded = load_torch_data(path, str(path))
    if not (isinstance(loaded, (tuple, list)) and len(loaded) == 2):
        raise ValueError(f"{path} is not a PyG (Data, slices) pickle")
    collated, slices = loaded
    # PyG-1.x Data objects keep their tensors in ``__dict__`` (PyG 2 would use ``_store``).
    store = collated.__dict__
    for key in _PARTIAL_KEYS:
        if key not in slices or store.get(key) is None:
            raise ValueError(f"{path} has no {key!r} entry; is it a ZINC processed file?")
    num_graphs = len(slices["y"]) - 1
    graphs: list[Data] = []
    for i in range(num_graphs):
        parts = {
            key: _slice(store[key], slices[key], i, dim=1 if key == "edge_index" else 0)
            for key in _PARTIAL_KEYS
        }
        num_nodes = parts["x"].size(0)
        edge_index = parts["edge_index"].long()
        if num_nodes == 0:
            raise ValueError(f"{path}: graph {i} has no nodes")
        if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
            raise ValueError(f"{path}: graph {i} has edge ids outside 0..{num_nodes - 1}")
        graphs.append(
            Data(
                x=category_ids(parts["x"], f"{path}: graph {i} atom types",
                               ZINC_NUM_ATOM_TYPES).view(num_nodes, -1),
                edge_index=edge_index,
                edge_attr=category_ids(parts["edge_attr"], f"{path}: graph {i} bond types",
                                       ZINC_NUM_BOND_TYPES).view(-1),
                y=finite_targets(parts["y"], f"{path}: graph {i} target"),
                num_nodes=num_nodes,
            )
        )
    return graphs


def _slice(values: Tensor, bounds: Tensor, i: int, dim: int) -> Tensor:
    start, stop = int(bounds[i]), int(bounds[i + 1])
    return values.narrow(dim, start, stop - start)


def zinc_required_files(root: PathLike) -> list[Path]:
    """Raw files PyG's ``ZINC`` needs under ``root`` (the folder that holds ``raw/``)."""
    raw = Path(root) / "raw"
    names = [f"{s}.pickle" for s in ("train", "val", "test")]
    names += [f"{s}.index" for s in ("train", "val", "test")]
    return [raw / n for n in names]


def load_zinc(root: PathLike, split: str, subset: bool = True) -> ZINC:
    """PyG's ``ZINC`` (12k subset by default) from local files; raises instead of downloading.

    ``root`` is PyG's root for ZINC (it holds ``raw/``; PyG writes ``subset/processed/`` there, so
    it must be writable). Either the six raw files or PyG-2 processed files must exist.
    """
    from torch_geometric.datasets import ZINC

    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    root = Path(root)
    processed = root / ("subset" if subset else "full") / "processed"
    processed_files = [processed / f"{s}.pt" for s in ("train", "val", "test")]
    missing_raw = missing_files(zinc_required_files(root))
    if missing_raw and missing_files(processed_files):
        listing = "\n  ".join(str(p) for p in missing_raw)
        raise FileNotFoundError(
            "PyG ZINC files not found (downloads are disabled). Put the files of "
            "molecules.zip (Dwivedi et al.) and the split indices here:\n  " + listing
        )

    class _OfflineZINC(ZINC):
        def download(self) -> None:  # processed files exist: nothing to fetch
            return None

    # under the lock the TU and GNNBenchmark loaders take: two first runs side by side raced
    # on processed/*.pt
    with folder_lock(root, "zinc"), restricted_pyg_loads():
        raw_files = zinc_required_files(root)
        drop_stale_processed(raw_files, processed_files)
        if subset and missing_files(processed_files):  # PyG reads the raw files now (the
            check_split_indices(root)                  # full set reads no index file)
        dataset = read_local_files(
            lambda: _OfflineZINC(str(root), subset=subset, split=split), root,
            f"delete {processed} and put fresh copies of molecules.zip's files and the split "
            f"indices in {root / 'raw'}")
        stamp_processed(raw_files, processed_files)
        return dataset


def check_split_indices(root: PathLike) -> None:
    """``ValueError`` for a split's ``raw/<split>.index`` that PyG's reader would misread: it
    drops the file's last character, so a file without a final newline lost the last digit of
    its last index and loaded another molecule without a word (an audit); a repeated index
    counted a molecule twice."""
    for split in ("train", "val", "test"):
        path = Path(root) / "raw" / f"{split}.index"
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if not text.endswith("\n"):
            raise ValueError(f"{path} does not end with a newline: PyG's ZINC reader drops the "
                             "file's last character, which would cut the last index short; "
                             "add the newline (the files of the subset's split indices end "
                             "with one)")
        indices = [item.strip() for item in text[:-1].split(",") if item.strip()]
        repeated = sorted(item for item, count in Counter(indices).items() if count > 1)[:5]
        if repeated:
            raise ValueError(f"{path} repeats the molecule index(es) {repeated}: each molecule "
                             "of a split is listed once")


def zinc_official_present(root: PathLike) -> bool:
    """Whether PyG's ZINC raw files or PyG-2 processed files are in ``root`` (holding raw/)."""
    root = Path(root)
    if not missing_files(zinc_required_files(root)):
        return True
    processed = root / "subset" / "processed"
    return not missing_files([processed / f"{s}.pt" for s in SPLITS])


def zinc_benchmark(root: PathLike, source: str = "auto", holdout_fraction: float = 0.2,
                   split_seed: int = 0) -> BenchmarkData:
    """ZINC under the GNNBenchmark ``root``: the official splits (``ROOT/ZINC``) when present
    (``source`` "auto" or "official"), else the ZINC proxy (``source`` "auto" or "partial"): the
    official val split (``ROOT/ZINC_subset_partial``) split into ``1 - holdout_fraction`` training
    graphs and a ``holdout_fraction`` holdout for epoch selection (``split_seed``), and the
    official test split."""
    root = Path(root)
    common: dict[str, Any] = dict(task="regression", metric="mae", num_outputs=1,
                                  num_node_types=ZINC_NUM_ATOM_TYPES,
                                  num_edge_types=ZINC_NUM_BOND_TYPES)
    if source in ("auto", "official") and zinc_official_present(root / "ZINC"):
        splits = {s: list(load_zinc(root / "ZINC", s)) for s in SPLITS}
        for split_name, split in splits.items():
            for index, d in enumerate(split):
                where = f"{root / 'ZINC'}: {split_name} graph {index}"
                check_benchmark_graph(d, where, node_task=False)
                d.y = finite_targets(d.y, f"{where} target")
                d.x = category_ids(d.x, f"{where} atom types",
                                   ZINC_NUM_ATOM_TYPES).view(d.num_nodes, -1)
                # Checked here as the proxy's are: a bond type past the embedding failed only
                # at the test evaluation, after the training.
                d.edge_attr = category_ids(d.edge_attr, f"{where} bond types",
                                           ZINC_NUM_BOND_TYPES).view(-1)
        return BenchmarkData(
            "ZINC", "official", splits, **common,
            protocol="ZINC-12k (official splits): train on train, select the epoch on val, "
                     "test MAE once with the selected weights",
        )
    if source == "official":
        missing = "\n  ".join(str(p) for p in zinc_required_files(root / "ZINC"))
        raise FileNotFoundError(f"official ZINC files missing; put them here:\n  {missing}")
    if source == "generated":
        raise ValueError("ZINC cannot be generated; use --source partial or official")
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must lie in (0, 1), got {holdout_fraction}")
    partial_root = root / "ZINC_subset_partial"
    for partial_split in ZINC_PARTIAL_SPLITS:
        path = zinc_partial_file(partial_root, partial_split)
        if not path.is_file():
            target = (partial_root / "processed" / f"{partial_split}.pt"
                      if path.parent == partial_root else path)
            raise FileNotFoundError(
                f"neither the official ZINC files (ROOT/ZINC/raw/{{train,val,test}}.pickle and "
                f".index) under {root.resolve()} nor the partial copy were found: put the "
                f"partial copy's processed/{partial_split}.pt at {target.resolve()} (a relative "
                "--root is looked up in the working directory first, then in the checkout)"
                # from a wheel there is no checkout: the other tasks' errors said what to set,
                # this one did not (a packaging audit)
                + ("" if source_checkout() is not None and not os.environ.get("ET_GRAPH_DATA")
                   else f"; {no_data_hint()}")
            )
    official_val = load_zinc_partial(partial_root, "val")
    test = load_zinc_partial(partial_root, "test")
    order = np.random.default_rng(split_seed).permutation(len(official_val))
    num_holdout = max(1, int(round(holdout_fraction * len(official_val))))
    holdout_ids, train_ids = sorted(order[:num_holdout]), sorted(order[num_holdout:])
    if not train_ids:
        raise ValueError(f"holdout_fraction={holdout_fraction} (--holdout-fraction) holds out "
                         f"all {len(official_val)} graphs of the ZINC proxy, so none is left "
                         "to train on; lower it (the default is 0.2)")
    splits = {
        "train": [official_val[i] for i in train_ids],
        "val": [official_val[i] for i in holdout_ids],
        "test": test,
    }
    return BenchmarkData(
        "ZINC proxy", "partial", splits, **common,
        protocol=(
            "ZINC proxy (trained on the official val split; the train split is missing): the "
            f"{len(official_val)} official val graphs are split {len(train_ids)} train / "
            f"{num_holdout} holdout (split seed {split_seed}); the epoch with the best holdout "
            f"MAE is selected and the official test split ({len(test)} graphs) is evaluated "
            "once with those weights"
        ),
        notes=["Not comparable with published ZINC results (10k training graphs there)."],
    )


__all__ = [
    "ZINC_NUM_ATOM_TYPES",
    "ZINC_NUM_BOND_TYPES",
    "ZINC_PARTIAL_SPLITS",
    "ZINC_SPLIT_SIZES",
    "load_zinc",
    "load_zinc_partial",
    "zinc_benchmark",
    "zinc_official_present",
    "zinc_partial_file",
    "zinc_required_files",
]
