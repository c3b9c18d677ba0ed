"""Anomaly-detection loaders: generated CARE-GNN .mat / open .npz / .pt files through the real
code paths, the shipped Tolokers and PyGOD graphs, and the errors for missing or bad files."""
from __future__ import annotations

import importlib.util
import io
import sys
import types
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch
from torch_geometric.data import Data
from torch_geometric.utils import contains_self_loops, is_undirected

from et_graph.datasets import (
    AMAZON_UNLABELLED_NODES,
    ANOMALY_DATASETS,
    data_dir,
    dgl_graph_to_data,
    load_anomaly_dataset,
    load_anomaly_npz,
    load_fraud_mat,
    save_anomaly_npz,
)
from et_graph.exceptions import DataWarning, ETGraphWarning

REPO = Path(__file__).resolve().parents[1]
YELP_RELATIONS = ("net_rur", "net_rtr", "net_rsr")
AMAZON_RELATIONS = ("net_upu", "net_usu", "net_uvu")


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """No test may download, and the download cache must not leak in from the user's home."""
    monkeypatch.delenv("ET_GRAPH_DOWNLOAD", raising=False)
    monkeypatch.delenv("ET_GRAPH_DATA", raising=False)
    monkeypatch.setenv("ET_GRAPH_CACHE", str(tmp_path / "cache"))

    def refuse(*args, **kwargs):
        raise AssertionError("a test tried to use the network")

    monkeypatch.setattr("urllib.request.urlopen", refuse)


def random_adjacency(rng, n, density=0.05, self_loops=True):
    """Directed sparse 0/1 matrix (asymmetric on purpose, optionally with self-loops)."""
    count = max(1, int(density * n * n))
    rows, cols = rng.randint(0, n, count), rng.randint(0, n, count)
    matrix = sp.csr_matrix((np.ones(count), (rows, cols)), shape=(n, n))
    matrix.data[:] = 1.0  # repeated pairs were summed
    if self_loops:
        matrix = matrix + sp.eye(n, format="csr")
    return matrix.tocsc()


def write_care_mat(path, relations, n=60, num_features=7, seed=0, density=0.05, **overrides):
    """A small .mat file in the CARE-GNN layout; returns the arrays written."""
    rng = np.random.RandomState(seed)
    mats = {name: random_adjacency(rng, n, density) for name in relations}
    homo = sum(mats.values())
    homo.data[:] = 1.0
    features = sp.random(n, num_features, density=0.4, random_state=rng, format="csc")
    label = (rng.rand(1, n) < 0.2).astype(np.int64)
    label[0, :2] = [0, 1]
    content = {"homo": homo.tocsc(), "features": features, "label": label, **mats}
    content.update(overrides)
    content = {k: v for k, v in content.items() if v is not None}
    scipy.io.savemat(str(path), content)
    return content


def test_sparse_features_too_large_to_make_dense_are_refused_before_allocating():
    # (security review) a 16 KB .mat declaring [10^6, 10^6] sparse features was made dense
    # first: a MemoryError past the CLI's one-line errors, or a machine driven into the OOM
    # killer at sizes that allocate lazily
    from et_graph.datasets import anomaly_data

    n = 10**6
    # a machine whose memory is known refuses before allocating; one that does not say
    # (neither sysconf nor GlobalMemoryStatusEx) turns the allocator's refusal into the same
    # one-line error
    for memory, message in ((lambda: 16 * 2**30, "whose dense form needs 3725.3 GiB"),
                            (lambda: None, "does not fit in memory")):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(anomaly_data, "physical_memory", memory)
            with pytest.raises(ValueError, match=r"sparse \[1000000, 1000000\] array.*" + message):
                anomaly_data.prepare_anomaly_data(
                    sp.csr_matrix((n, n), dtype=np.float32), np.zeros((2, 0), dtype=np.int64),
                    np.zeros(n, dtype=np.int64), name="bomb", source="bomb.mat")


def test_huge_sparse_or_zipped_torch_files_are_refused_before_allocating(tmp_path, monkeypatch):
    from et_graph.datasets import anomaly_data, embedded

    graph = small_graph()
    graph.x = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0),
                                      (graph.num_nodes, 10**12))
    torch.save(graph, tmp_path / "wide.pt")
    with pytest.raises(ValueError, match="whose dense form needs|does not fit in memory"):
        load_anomaly_dataset(path=tmp_path / "wide.pt")
    # a zip's member is checked against its declared size (all zipfile will unpack)
    torch.save(small_graph(), tmp_path / "mine.pt")
    with zipfile.ZipFile(tmp_path / "mine.pt.zip", "w") as bundle:
        bundle.write(tmp_path / "mine.pt", "mine.pt")
    monkeypatch.setattr(embedded, "physical_memory", lambda: 100)
    with pytest.raises(ValueError, match=r"mine\.pt unpacks to .* more than this machine's"):
        load_anomaly_dataset(path=tmp_path / "mine.pt.zip")
    memory = anomaly_data.physical_memory()  # unpatched: this machine's figure, if it says
    assert memory is None or memory > 100


def edge_set(edge_index):
    return set(map(tuple, edge_index.t().tolist()))


def expected_edges(matrix):
    """Undirected edge set without self-loops, both directions."""
    coo = sp.coo_matrix(matrix)
    pairs = {(int(a), int(b)) for a, b in zip(coo.row, coo.col) if a != b}
    return pairs | {(b, a) for a, b in pairs}


def assert_clean(data):
    assert data.x.dtype == torch.float32 and data.x.dim() == 2
    assert data.edge_index.dtype == torch.int64 and data.edge_index.size(0) == 2
    assert data.y.dtype == torch.int64 and set(data.y.unique().tolist()) <= {0, 1}
    assert is_undirected(data.edge_index, num_nodes=data.num_nodes)
    assert not contains_self_loops(data.edge_index)
    keys = data.edge_index[0] * data.num_nodes + data.edge_index[1]
    assert torch.unique(keys).numel() == keys.numel()  # no duplicate edges


# ---------------------------------------------------------------- CARE-GNN .mat (YelpChi/Amazon)


def test_yelpchi_mat_homo_and_each_relation(tmp_path):
    content = write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS)
    data = load_anomaly_dataset("yelpchi", root=tmp_path)
    assert_clean(data)
    assert data.name == "yelpchi"
    assert torch.allclose(data.x, torch.tensor(content["features"].toarray(), dtype=torch.float32))
    assert data.y.tolist() == content["label"][0].tolist()
    assert edge_set(data.edge_index) == expected_edges(content["homo"])
    assert getattr(data, "label_mask", None) is None  # every YelpChi node is labelled

    for relation in YELP_RELATIONS:
        chosen = load_anomaly_dataset("yelpchi", root=tmp_path, relation=relation)
        assert edge_set(chosen.edge_index) == expected_edges(content[relation])
    short = load_anomaly_dataset("yelpchi", root=tmp_path, relation="rtr")
    assert edge_set(short.edge_index) == expected_edges(content["net_rtr"])
    assert expected_edges(content["net_rtr"]) != expected_edges(content["net_rur"])

    with pytest.raises(ValueError, match="net_rur"):
        load_anomaly_dataset("yelpchi", root=tmp_path, relation="net_upu")


def test_stored_zeros_of_a_sparse_adjacency_are_no_edges(tmp_path):
    """A sparse matrix may store explicit zeros (or duplicates that cancel); they became edges,
    while the same matrix dense gave none."""
    content = write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS)
    homo = content["homo"].tocoo()
    zeros = sp.coo_matrix((np.r_[homo.data, 0.0, 1.0, -1.0],
                           (np.r_[homo.row, 0, 5, 5], np.r_[homo.col, 3, 9, 9])), homo.shape)
    assert zeros.nnz == homo.nnz + 3
    write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS, homo=zeros.tocsc())
    data = load_anomaly_dataset("yelpchi", root=tmp_path)
    assert edge_set(data.edge_index) == expected_edges(homo)


def test_lowercase_file_and_path_argument(tmp_path):
    content = write_care_mat(tmp_path / "yelpchi.mat", YELP_RELATIONS, seed=3)
    by_root = load_anomaly_dataset("yelpchi", root=tmp_path)
    by_path = load_anomaly_dataset(path=tmp_path / "yelpchi.mat", relation="net_rsr")
    assert by_root.name == by_path.name == "yelpchi"  # recognised from the relation keys
    assert edge_set(by_path.edge_index) == expected_edges(content["net_rsr"])


def test_amazon_excludes_first_3305_nodes_by_default(tmp_path):
    assert AMAZON_UNLABELLED_NODES == 3305
    n = AMAZON_UNLABELLED_NODES + 95
    content = write_care_mat(
        tmp_path / "Amazon.mat", AMAZON_RELATIONS, n=n, num_features=5, density=2 / n
    )
    # Not Amazon.mat's 11,944 nodes: the default prefix is applied, and said (a fraud-data
    # audit: a user's 3,400-node file in Amazon's layout lost 3,305 nodes without a word).
    with pytest.warns(UserWarning, match="first 3305 nodes are taken as unlabelled .* 3400 nodes"):
        data = load_anomaly_dataset("amazon", root=tmp_path, relation="net_uvu")
    assert_clean(data)
    assert data.name == "amazon" and data.num_nodes == n
    assert data.label_mask.dtype == torch.bool and data.label_mask.shape == (n,)
    assert not data.label_mask[:3305].any() and data.label_mask[3305:].all()
    assert edge_set(data.edge_index) == expected_edges(content["net_uvu"])


def test_amazon_prefix_is_a_parameter(tmp_path):
    write_care_mat(tmp_path / "Amazon.mat", AMAZON_RELATIONS, n=40)
    data = load_fraud_mat(tmp_path / "Amazon.mat", unlabelled_prefix=10)
    assert int(data.label_mask.sum()) == 30 and not data.label_mask[:10].any()
    assert getattr(load_fraud_mat(tmp_path / "Amazon.mat", unlabelled_prefix=0),
                   "label_mask", None) is None
    with pytest.raises(ValueError, match="unlabelled"):  # the default 3,305 exceeds 40 nodes
        load_anomaly_dataset(path=tmp_path / "Amazon.mat")


def test_sparse_mat_labels_are_read(tmp_path):
    # they were called "labels are text (object)" (a data audit)
    label = (np.random.RandomState(1).rand(1, 60) < 0.2).astype(np.float64)
    label[0, :2] = [0, 1]
    write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS, label=sp.csr_matrix(label))
    data = load_anomaly_dataset("yelpchi", root=tmp_path)
    assert data.y.tolist() == label[0].astype(int).tolist()


def test_missing_mat_says_where_to_put_it(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_anomaly_dataset("yelpchi", root=tmp_path)
    message = str(info.value)
    assert str(tmp_path / "YelpChi.mat") in message and "FraudYelp.zip" in message
    assert "ET_GRAPH_DOWNLOAD" in message
    assert "--data-root" in message and "--data FILE" in message  # the CLI's spelling too
    # every folder looked in, not the root alone (a fraud-data audit)
    for folder in ("yelpchi", "YelpChi", "yelp"):
        assert repr(str(tmp_path / folder)) in message
    with pytest.raises(ValueError, match="is a folder"):
        load_anomaly_dataset(path=tmp_path)


def test_download_is_opt_in_and_failures_are_reported(tmp_path, monkeypatch):
    def unreachable(url, timeout):
        raise OSError("network unreachable")

    monkeypatch.setattr("urllib.request.urlopen", unreachable)
    with pytest.raises(FileNotFoundError, match="network unreachable"):
        load_anomaly_dataset("amazon", root=tmp_path, download=True)


def test_download_extracts_the_mat_file(tmp_path, monkeypatch):
    source = tmp_path / "source"
    source.mkdir()
    write_care_mat(source / "YelpChi.mat", YELP_RELATIONS)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.write(source / "YelpChi.mat", "YelpChi.mat")
    requested = []

    def fake_urlopen(url, timeout):
        requested.append(url)
        return io.BytesIO(archive.getvalue())

    monkeypatch.setattr("urllib.request.urlopen", fake_urlopen)
    monkeypatch.setenv("ET_GRAPH_DOWNLOAD", "1")
    target = tmp_path / "data"
    data = load_anomaly_dataset("yelpchi", root=target)
    assert requested == ["https://data.dgl.ai/dataset/FraudYelp.zip"]
    assert (target / "YelpChi.mat").is_file() and data.num_nodes == 60
    assert sorted(p.name for p in target.iterdir()) == ["YelpChi.mat"]  # no leftovers


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"label": None}, "label"),
        ({"homo": None}, "homo"),
        ({"label": np.full((1, 60), 2)}, "binary"),
        ({"homo": sp.eye(59, format="csc")}, "shape"),
        # a relation the homogeneous load does not read, of the wrong size: the file is
        # broken (an audit saw it load without a word)
        ({"net_rtr": sp.eye(50, format="csc")}, "'net_rtr' has shape"),
        ({"net_rsr": sp.random(60, 59, density=0.1, format="csc")}, "'net_rsr' has shape"),
        ({"features": np.full((60, 3), np.nan)}, "NaN"),
        ({"label": np.zeros((1, 59))}, r"\[N\]"),
    ],
)
def test_malformed_mat_raises_value_error(tmp_path, overrides, match):
    write_care_mat(tmp_path / "bad.mat", YELP_RELATIONS, **overrides)
    with pytest.raises(ValueError, match=match):
        load_anomaly_dataset(path=tmp_path / "bad.mat")


def test_corrupt_mat_file(tmp_path):
    (tmp_path / "YelpChi.mat").write_bytes(b"not a matlab file at all")
    with pytest.raises(ValueError, match="readable"):
        load_anomaly_dataset("yelpchi", root=tmp_path)


# ---------------------------------------------------------------- open .npz (T-Finance/T-Social)


def small_graph(n=30, splits=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, 80), generator=generator)
    y = (torch.rand(n, generator=generator) < 0.3).long()
    y[:2] = torch.tensor([0, 1])
    data = Data(x=torch.randn(n, 4, generator=generator, dtype=torch.float64),
                edge_index=edge_index, y=y)
    order = torch.stack([torch.randperm(n, generator=generator) for _ in range(splits)], dim=1)
    data.train_mask, data.val_mask, data.test_mask = order < 10, (order >= 10) & (order < 20), \
        order >= 20
    data.label_mask = torch.arange(n) >= 2
    return data


def test_npz_round_trip_keeps_everything(tmp_path):
    original = small_graph()
    path = save_anomaly_npz(original, tmp_path / "graph.npz")
    data = load_anomaly_dataset(path=path)
    assert_clean(data)
    assert data.name == "graph"
    assert torch.allclose(data.x, original.x.float())
    assert torch.equal(data.y, original.y)
    expected = {(a, b) for a, b in edge_set(original.edge_index) if a != b}
    assert edge_set(data.edge_index) == expected | {(b, a) for a, b in expected}
    for key in ("train_mask", "val_mask", "test_mask"):
        assert getattr(data, key).dtype == torch.bool
        assert torch.equal(getattr(data, key), getattr(original, key))
    assert torch.equal(data.label_mask, original.label_mask)


def test_tfinance_found_under_root_and_missing_tsocial_explains_converter(tmp_path):
    save_anomaly_npz(small_graph(), tmp_path / "tfinance.npz")
    data = load_anomaly_dataset("tfinance", root=tmp_path)
    assert data.name == "tfinance" and data.train_mask.shape == (30, 3)
    with pytest.raises(FileNotFoundError, match="dgl_to_npz.py") as info:
        load_anomaly_dataset("tsocial", root=tmp_path)
    assert repr(str(tmp_path / "tsocial")) in str(info.value)  # the sub-folder looked in too


def test_single_split_masks_become_n_by_1(tmp_path):
    graph = small_graph(splits=1)
    for key in ("train_mask", "val_mask", "test_mask"):
        setattr(graph, key, getattr(graph, key)[:, 0])
    data = load_anomaly_dataset(path=save_anomaly_npz(graph, tmp_path / "one.npz"))
    assert data.train_mask.shape == (30, 1)


def write_npz(path, **arrays):
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    "change, match",
    [
        # (a data audit: the layout was called unrecognised, not the labels missing)
        (lambda a: a.pop("y"), r"has no labels \(y; found keys \['edge_index', 'x'\]\); the "
                               "runners evaluate against labels.*UnsupervisedETDetector"),
        (lambda a: a.pop("x"), "unrecognised .npz layout"),
        (lambda a: a.update(edge_index=a["edge_index"].T), "transpose"),
        (lambda a: a["edge_index"].__setitem__((0, 0), 99), "node ids"),
        (lambda a: a["x"].__setitem__((3, 1), np.nan), "NaN"),
        # a finite float64 beyond float32 was reported as "NaN or inf" (a fraud-data audit)
        (lambda a: a.update(x=np.where(np.arange(4) == 1, 1e39, a["x"].astype(np.float64))),
         r"features reach 1e\+39, beyond float32's range"),
        (lambda a: a.update(y=np.arange(30) % 3), "binary"),
        (lambda a: a.update(y=np.zeros(29, dtype=np.int64)), "shape"),
        (lambda a: a.update(x=np.zeros((0, 4))), "no nodes"),
        (lambda a: a.update(train_mask=np.ones(30, bool)), "train_mask"),
        (lambda a: a.update(train_mask=np.ones(30, bool), val_mask=np.ones(30, bool),
                            test_mask=np.zeros(30, bool)),
         "the train and val masks overlap within a split: node 0 is in both in split column 0"),
    ],
)
def test_malformed_npz_raises_value_error(tmp_path, change, match):
    graph = small_graph()
    arrays = {"x": graph.x.numpy(), "edge_index": graph.edge_index.numpy(),
              "y": graph.y.numpy()}
    change(arrays)
    with pytest.raises(ValueError, match=match):
        load_anomaly_dataset(path=write_npz(tmp_path / "bad.npz", **arrays))


def test_multiclass_labels_need_binarize(tmp_path):
    graph = small_graph()
    path = write_npz(tmp_path / "multi.npz", x=graph.x.numpy(), edge_index=graph.edge_index.numpy(),
                     y=np.arange(30) % 4)
    data = load_anomaly_npz(path, binarize=True)
    assert data.y.tolist() == [int(v > 0) for v in np.arange(30) % 4]
    assert load_anomaly_dataset(path=path, binarize=True).y.sum() == data.y.sum()
    # The refusal advised binarize=True, which a command-line user could not pass (a
    # fraud-data audit): both commands take --binarize now.
    from et_graph.config import parse
    from et_graph.protocols.anomaly_config import AnomalyConfig, load_data
    from et_graph.protocols.unsupervised import UnsupervisedAnomalyConfig, load_graph

    with pytest.raises(ValueError, match="--binarize on the command line"):
        load_data(parse(AnomalyConfig, ["--data", str(path)]).data)
    loaded = load_data(parse(AnomalyConfig, ["--data", str(path), "--binarize"]).data)
    assert torch.equal(loaded.y, data.y)
    config = parse(UnsupervisedAnomalyConfig, ["--data", str(path), "--binarize"])
    labels = load_graph(config.data)[1]
    assert int(labels.open().sum()) == int(data.y.sum())


def test_unlabelled_minus_one_labels_are_told_where_a_label_mask_can_go(tmp_path):
    # (an audit) the advice was to mark the labelled nodes in label_mask, which a .mat file
    # cannot carry, and --binarize's refusal of -1 gave no advice at all
    graph = small_graph()
    labels = np.arange(30) % 2
    labels[:4] = -1
    path = write_npz(tmp_path / "unknown.npz", x=graph.x.numpy(),
                     edge_index=graph.edge_index.numpy(), y=labels)
    for binarize in (False, True):
        with pytest.raises(ValueError, match="a .mat file none, so write such a graph as .npz"):
            load_anomaly_npz(path, binarize=binarize)
    content = write_care_mat(tmp_path / "YelpChi.mat", ["net_rur"], label=labels[None, :30],
                             n=30)
    assert content["label"].min() == -1
    with pytest.raises(ValueError, match="pass unlabelled_prefix"):
        load_anomaly_dataset(path=tmp_path / "YelpChi.mat")


def test_pygod_generated_graphs_are_binarized_by_name(tmp_path):
    """PyGOD's gen_* graphs label anomalies 0..3 like its inj_* graphs."""
    graph = small_graph()
    del graph.train_mask, graph.val_mask, graph.test_mask, graph.label_mask
    graph.y = torch.arange(30) % 4
    torch.save(graph, tmp_path / "gen_100.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyGOD's own graph: nothing to say
        data = load_anomaly_dataset(path=tmp_path / "gen_100.pt")
    assert data.y.tolist() == [int(v % 4 > 0) for v in range(30)]
    # another name that the prefix alone chose it for: said, since a user's own gen_*.pt may
    # mean 2 = unknown (an input audit: collapsed without a word)
    torch.save(graph, tmp_path / "gen_transactions.pt")
    with pytest.warns(UserWarning, match=r"labels \[0, 1, 2, 3\] read as anomalous where > 0, "
                                         r"because the name 'gen_transactions'.*"
                                         r"binarize=False"):
        load_anomaly_dataset(path=tmp_path / "gen_transactions.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for, or 0/1 labels: nothing to say
        load_anomaly_dataset(path=tmp_path / "gen_transactions.pt", binarize=True)
        graph.y = graph.y.clamp(max=1)
        torch.save(graph, tmp_path / "gen_mine.pt")
        load_anomaly_dataset(path=tmp_path / "gen_mine.pt")
    graph.y = torch.arange(30) % 4
    torch.save(graph, tmp_path / "mine.pt")
    with pytest.raises(ValueError, match="binary"):
        load_anomaly_dataset(path=tmp_path / "mine.pt")


def test_yelpchi_found_in_dgl_cache_layout(tmp_path):
    """DGL's FraudDataset extracts YelpChi.mat into ~/.dgl/yelp/ (not yelpchi/)."""
    (tmp_path / "yelp").mkdir()
    write_care_mat(tmp_path / "yelp" / "YelpChi.mat", YELP_RELATIONS)
    assert load_anomaly_dataset("yelpchi", root=tmp_path).num_nodes == 60


def test_not_an_npz_and_unknown_suffix(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(ValueError, match="readable"):
        load_anomaly_dataset(path=tmp_path / "junk.npz")
    (tmp_path / "graph.csv").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown file type"):
        load_anomaly_dataset(path=tmp_path / "graph.csv")
    with pytest.raises(FileNotFoundError):
        load_anomaly_dataset(path=tmp_path / "absent.npz")


# ---------------------------------------------------------------- torch-saved .pt


def test_pt_and_zipped_pt(tmp_path):
    graph = small_graph()
    graph.y = graph.y.double()  # PyGOD stores float labels
    torch.save(graph, tmp_path / "mine.pt")
    with zipfile.ZipFile(tmp_path / "mine.pt.zip", "w") as bundle:
        bundle.write(tmp_path / "mine.pt", "mine.pt")
    for path in (tmp_path / "mine.pt", tmp_path / "mine.pt.zip"):
        data = load_anomaly_dataset(path=path)
        assert_clean(data)
        assert data.name == "mine" and torch.equal(data.y, graph.y.long())
        assert torch.equal(data.test_mask, graph.test_mask)


def test_pt_with_sparse_features_is_read_dense(tmp_path):
    graph = small_graph()
    dense = graph.x.clone()
    graph.x = graph.x.to_sparse()  # bag-of-words features are often saved sparse
    torch.save(graph, tmp_path / "sparse.pt")
    data = load_anomaly_dataset(path=tmp_path / "sparse.pt")
    assert_clean(data)
    assert data.x.layout == torch.strided and torch.equal(data.x, dense.float())


def test_an_empty_or_garbled_pt_file_is_named_with_the_cause(tmp_path):
    # (CLI audit) an empty file gave "torch.load failed ()"
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.pt is empty \(0 bytes\)"):
        load_anomaly_dataset(path=tmp_path / "empty.pt")
    (tmp_path / "garbled.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=r"garbled\.pt: torch\.load failed \(\w+: .+\)"):
        load_anomaly_dataset(path=tmp_path / "garbled.pt")


def test_pt_without_labels_is_rejected(tmp_path):
    torch.save(Data(x=torch.randn(5, 2), edge_index=torch.tensor([[0], [1]])), tmp_path / "a.pt")
    with pytest.raises(ValueError, match="no y"):
        load_anomaly_dataset(path=tmp_path / "a.pt")


# ---------------------------------------------------------------- shipped data


def test_embedded_tolokers_is_the_default():
    data = load_anomaly_dataset()
    assert data.name == "tolokers"
    assert_clean(data)
    assert data.num_nodes == 11_758 and data.num_features == 10
    assert data.edge_index.size(1) == 2 * 519_000
    assert abs(float(data.y.float().mean()) - 0.2182) < 5e-5
    for key in ("train_mask", "val_mask", "test_mask"):
        mask = getattr(data, key)
        assert mask.dtype == torch.bool and mask.shape == (11_758, 10)
    assert not (data.train_mask & data.test_mask).any()
    assert not (data.val_mask & data.test_mask).any()


def test_embedded_reddit_loads_without_self_loops():
    data = load_anomaly_dataset("reddit")
    assert_clean(data)
    assert data.num_nodes == 10_984 and data.num_features == 64
    assert int(data.y.sum()) == 366
    assert data.edge_index.size(1) == 168_016 - 10_984  # the file has one self-loop per node


def test_shipped_files_match_sources_checksums():
    sources = (REPO / "datasets" / "SOURCES.md").read_text(encoding="utf-8")
    import hashlib

    for relative in ("tolokers/tolokers.npz", "pygod/reddit.pt.zip", "pygod/inj_amazon.pt.zip"):
        digest = hashlib.sha256((REPO / "datasets" / relative).read_bytes()).hexdigest()
        assert digest in sources, relative


def test_data_folder_from_environment(tmp_path, monkeypatch):
    assert data_dir() == REPO / "datasets"
    monkeypatch.setenv("ET_GRAPH_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    with pytest.raises(FileNotFoundError, match="reddit.pt.zip"):
        load_anomaly_dataset("reddit")
    monkeypatch.setenv("ET_GRAPH_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="ET_GRAPH_DATA"):
        data_dir()
    # a loader reports the mistyped folder rather than skipping it and suggesting to set it
    with pytest.raises(FileNotFoundError, match="ET_GRAPH_DATA points to"):
        load_anomaly_dataset("reddit")



def test_an_installed_package_finds_no_foreign_datasets_folder_and_reads_the_environment(
        tmp_path, monkeypatch):
    # A wheel's parent is site-packages, whose datasets/ is HuggingFace's: never the data.
    from et_graph import paths
    from et_graph.datasets.gnnbenchmark import resolve_root
    from et_graph.datasets.tudataset import default_tu_root

    site = tmp_path / "site-packages"
    (site / "et_graph").mkdir(parents=True)
    (site / "datasets" / "TUDataset").mkdir(parents=True)
    monkeypatch.setattr(paths, "PACKAGE_DIR", site / "et_graph")
    monkeypatch.delenv("ET_GRAPH_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    assert paths.source_checkout() is None and data_dir(required=False) is None
    assert default_tu_root() is None and resolve_root("datasets") == "datasets"
    with pytest.raises(FileNotFoundError, match="wheel ships no data"):
        data_dir()
    data = tmp_path / "data"
    (data / "TUDataset").mkdir(parents=True)
    monkeypatch.setenv("ET_GRAPH_DATA", str(data))
    assert data_dir() == data and default_tu_root() == data / "TUDataset"
    assert resolve_root("datasets") == str(data)
    monkeypatch.setattr(paths, "PACKAGE_DIR", REPO / "et_graph")  # the checkout counts
    monkeypatch.delenv("ET_GRAPH_DATA")
    assert default_tu_root() == REPO / "datasets" / "TUDataset"

def test_the_zinc_error_of_an_installed_package_says_what_to_set(tmp_path, monkeypatch):
    # (a packaging audit) the other tasks' errors named ET_GRAPH_DATA, ZINC's did not
    from et_graph import paths
    from et_graph.datasets.zinc import zinc_benchmark

    monkeypatch.delenv("ET_GRAPH_DATA", raising=False)
    with pytest.raises(FileNotFoundError) as in_checkout:
        zinc_benchmark(tmp_path, source="partial")
    assert "ET_GRAPH_DATA" not in str(in_checkout.value)
    monkeypatch.setattr(paths, "PACKAGE_DIR", tmp_path / "site-packages" / "et_graph")
    with pytest.raises(FileNotFoundError, match="wheel ships no data"):
        zinc_benchmark(tmp_path, source="partial")
    monkeypatch.setattr(paths, "PACKAGE_DIR", REPO / "et_graph")
    monkeypatch.setenv("ET_GRAPH_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not hold it"):
        zinc_benchmark(tmp_path, source="partial")


def test_name_and_relation_errors():
    assert "tolokers" in ANOMALY_DATASETS and "tsocial" in ANOMALY_DATASETS
    with pytest.raises(ValueError, match="unknown anomaly dataset"):
        load_anomaly_dataset("cora")
    # a file given as the name: echoed as typed (it was lower-cased) and told to use path=
    with pytest.raises(ValueError, match=r"'/data/YelpChi\.mat'; a file is read with path="):
        load_anomaly_dataset("/data/YelpChi.mat")
    with pytest.raises(ValueError, match="relation"):
        load_anomaly_dataset("tolokers", relation="net_rur")


# ---------------------------------------------------------------- DGL converter (no DGL needed)


class FakeDGLGraph:
    """The slice of the DGL graph API the converter uses, shaped like BWGNN's T-Finance."""

    def __init__(self, n=12):
        generator = torch.Generator().manual_seed(1)
        self.src = torch.randint(0, n, (30,), generator=generator)
        self.dst = torch.randint(0, n, (30,), generator=generator)
        labels = (torch.arange(n) % 4 == 0).long()
        self.ndata = {"feature": torch.randn(n, 10, generator=generator),
                      "label": torch.nn.functional.one_hot(labels, 2)}
        self.labels = labels
        self.n = n

    def edges(self):
        return self.src, self.dst

    def num_nodes(self):
        return self.n


def load_converter():
    spec = importlib.util.spec_from_file_location(
        "dgl_to_npz", REPO / "datasets" / "tools" / "dgl_to_npz.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dgl_graph_to_data_handles_one_hot_labels():
    graph = FakeDGLGraph()
    data = dgl_graph_to_data(graph, "tfinance")
    assert torch.equal(data.y, graph.labels)
    assert data.edge_index.tolist() == [graph.src.tolist(), graph.dst.tolist()]
    # a row that is not one-hot, or three classes, was argmaxed into a class (a data audit)
    for label, message in ((torch.tensor([[0, 0]]), r"row 0 is \[0, 0\]"),
                           (torch.eye(3, dtype=torch.long)[:1], r"shape \[12, 3\]")):
        graph.ndata["label"] = torch.cat([label, graph.ndata["label"][1:, :label.size(1)]
                                          if label.size(1) == 2 else
                                          torch.eye(3, dtype=torch.long)[[0] * 11]])
        with pytest.raises(ValueError, match=message):
            dgl_graph_to_data(graph, "tfinance")


def test_converter_script_end_to_end(tmp_path, monkeypatch):
    graph = FakeDGLGraph()
    fake_dgl = types.SimpleNamespace(load_graphs=lambda path: ([graph], {}))
    monkeypatch.setitem(sys.modules, "dgl", fake_dgl)
    converter = load_converter()
    assert converter.main(["--input", str(tmp_path / "tfinance"),
                           "--output", str(tmp_path / "out" / "tfinance.npz")]) == 0
    data = load_anomaly_dataset("tfinance", root=tmp_path / "out")
    assert torch.equal(data.y, graph.labels)
    assert torch.allclose(data.x, graph.ndata["feature"])


class FakeGADBenchGraph(FakeDGLGraph):
    """GADBench's released layout: 20 split columns per mask (0-9 supervised, 10-19
    semi-supervised) and ``mark`` for the labelled nodes."""

    def __init__(self, n=40):
        super().__init__(n)
        generator = torch.Generator().manual_seed(2)
        role = torch.randint(0, 3, (n, 20), generator=generator)  # 0 train, 1 val, 2 test
        role[:8] = torch.arange(8).view(-1, 1) % 3  # every column: both classes in each role
        mark = torch.arange(n) % 10 != 9  # GADBench draws its splits among the marked nodes
        role[~mark] = -1
        self.ndata.update(train_masks=role == 0, val_masks=role == 1, test_masks=role == 2,
                          mark=mark)
        self.role = role


@pytest.mark.parametrize("regime, columns", [("supervised", slice(0, 10)),
                                             ("semi_supervised", slice(10, 20))])
def test_converter_keeps_gadbench_splits_and_mark(tmp_path, monkeypatch, regime, columns):
    """GADBench's masks are `*_masks` [N, 20]; they once vanished in conversion, and
    `--protocol gadbench` then refused the converted file."""
    from et_graph.protocols.anomaly import make_splits

    graph = FakeGADBenchGraph()
    monkeypatch.setitem(sys.modules, "dgl", types.SimpleNamespace(
        load_graphs=lambda path: ([graph], {})))
    assert load_converter().main(["--input", str(tmp_path / "tsocial"), "--output",
                                  str(tmp_path / "out" / "tsocial.npz"),
                                  "--gadbench-splits", regime]) == 0
    data = load_anomaly_dataset("tsocial", root=tmp_path / "out")
    assert data.train_mask.shape == (40, 10)
    assert torch.equal(data.train_mask, graph.role[:, columns] == 0)
    assert torch.equal(data.test_mask, graph.role[:, columns] == 2)
    assert torch.equal(data.label_mask, graph.ndata["mark"])
    split = make_splits(data, "gadbench", 4)[3]  # seed 3 -> column 3 of the regime
    expected = graph.role[:, columns][:, 3] == 0  # the shipped split, as shipped
    assert sorted(split.train.tolist()) == expected.nonzero().view(-1).tolist()


@pytest.mark.parametrize("regime, columns", [("supervised", slice(0, 10)),
                                             ("semi_supervised", slice(10, 20))])
def test_gadbench_masks_win_over_dgls_single_masks_beside_them(regime, columns):
    """From a format audit: GADBench's Amazon and YelpChi keep DGL FraudDataset's single
    train/val/test masks beside its own [N, 20] ones; the converter read the single masks, so
    --gadbench-splits semi_supervised gave DGL's 70/10/20 split without a word."""
    graph = FakeGADBenchGraph()
    single = torch.arange(40) % 3
    graph.ndata.update(train_mask=single == 0, val_mask=single == 1, test_mask=single == 2)
    data = dgl_graph_to_data(graph, "amazon", gadbench_splits=regime)
    assert torch.equal(data.train_mask, graph.role[:, columns] == 0)
    assert torch.equal(data.val_mask, graph.role[:, columns] == 1)


def test_dgl_graph_to_data_refuses_partial_masks():
    graph = FakeGADBenchGraph()
    del graph.ndata["val_masks"]
    with pytest.raises(ValueError, match="only some split masks"):
        dgl_graph_to_data(graph, "tsocial")
    with pytest.raises(ValueError, match="gadbench_splits"):
        dgl_graph_to_data(FakeDGLGraph(), "tfinance", gadbench_splits="semi")



def test_converter_without_dgl_explains(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dgl", None)  # makes `import dgl` raise ImportError
    converter = load_converter()
    with pytest.raises(SystemExit, match="pip install dgl"):
        converter.main(["--input", str(tmp_path / "x"), "--output", str(tmp_path / "x.npz")])


def test_converter_beside_a_torch_dgl_was_not_built_for_explains(tmp_path, monkeypatch):
    """DGL installed beside current torch fails to load its C++ libraries (an OSError), which
    escaped as a traceback; it gets the same explanation, naming the torch DGL was built for."""
    import builtins

    real_import = builtins.__import__

    def failing_import(name, *args, **kwargs):
        if name == "dgl":
            raise FileNotFoundError("Cannot find DGL C++ graphbolt library")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "dgl", raising=False)
    monkeypatch.setattr(builtins, "__import__", failing_import)
    with pytest.raises(SystemExit, match="torch 2.4"):
        load_converter().main(["--input", str(tmp_path / "x"), "--output",
                               str(tmp_path / "x.npz")])


def test_planted_anomaly_graph_checks_its_settings_and_small_sizes():
    """num_nodes=10 crashed inside torch (an empty community), communities=1 likewise, and
    anomaly_rate=1.5 or num_features=0 were accepted."""
    from et_graph.datasets.synthetic import planted_anomaly_graph

    small = planted_anomaly_graph(10)
    assert small.num_nodes == 10 and small.x.shape == (10, 8)
    for bad, message in (({"communities": 1}, "communities"), ({"anomaly_rate": 1.5},
                         "anomaly_rate"), ({"num_features": 0}, "num_features"),
                         ({"num_nodes": 0}, "num_nodes")):
        with pytest.raises(ValueError, match=message):
            planted_anomaly_graph(**bad)


def test_entries_the_loaders_drop_are_named(tmp_path):
    """Edge weights (or anything else stored) in a user's file are not read: a warning says so
    rather than letting the user believe they shaped the result."""
    graph = small_graph()
    graph.edge_weight = torch.rand(graph.edge_index.size(1))
    torch.save(graph, tmp_path / "weighted.pt")
    with pytest.warns(UserWarning, match=r"\['edge_weight'\] are not read.*every edge counts"):
        load_anomaly_dataset(path=tmp_path / "weighted.pt")
    arrays = {key: getattr(graph, key).numpy() for key in ("x", "edge_index", "y")}
    np.savez(tmp_path / "open.npz", **arrays, edge_attr=np.ones((graph.edge_index.size(1), 3)),
             degree=np.ones(graph.num_nodes))
    with pytest.warns(UserWarning, match=r"\['degree', 'edge_attr'\] are not read"):
        load_anomaly_npz(tmp_path / "open.npz")
    np.savez(tmp_path / "hetero.npz", node_features=arrays["x"], node_labels=arrays["y"],
             edges=arrays["edge_index"].T, edge_weights=np.ones(graph.edge_index.size(1)))
    with pytest.warns(UserWarning, match=r"\['edge_weights'\] are not read"):
        load_anomaly_npz(tmp_path / "hetero.npz")
    import warnings

    with warnings.catch_warnings():  # a file holding only what is read loads quietly
        warnings.simplefilter("error")
        np.savez(tmp_path / "plain.npz", **arrays)
        load_anomaly_npz(tmp_path / "plain.npz")
        del graph.edge_weight
        torch.save(graph, tmp_path / "plain.pt")
        load_anomaly_dataset(path=tmp_path / "plain.pt")


def test_unlabelled_prefix_is_checked_and_only_for_mat_files(tmp_path):
    write_care_mat(tmp_path / "Amazon.mat", AMAZON_RELATIONS, n=40)
    data = load_anomaly_dataset(path=tmp_path / "Amazon.mat", unlabelled_prefix=10)
    assert int(data.label_mask.sum()) == 30
    with pytest.raises(ValueError, match="count of nodes >= 0"):
        load_anomaly_dataset(path=tmp_path / "Amazon.mat", unlabelled_prefix=-1)
    torch.save(small_graph(), tmp_path / "g.pt")
    with pytest.raises(ValueError, match="applies to CARE-GNN .mat files"):
        load_anomaly_dataset(path=tmp_path / "g.pt", unlabelled_prefix=3)
    with pytest.raises(ValueError, match="only applies to yelpchi and amazon"):
        load_anomaly_dataset("reddit", unlabelled_prefix=3)


def test_text_labels_one_hot_labels_and_index_masks_get_the_fix(tmp_path):
    """From a new-user audit: text labels gave torch's "can't convert np.ndarray of type
    numpy.str_", one-hot [N, 2] labels a shape message, index lists a reshaped shape."""
    graph = small_graph()
    arrays = {key: getattr(graph, key).numpy() for key in ("x", "edge_index")}
    np.savez(tmp_path / "text.npz", **arrays, y=np.where(graph.y.numpy() == 1, "fraud", "ok"))
    with pytest.raises(ValueError, match="labels are text"):
        load_anomaly_npz(tmp_path / "text.npz")
    np.savez(tmp_path / "onehot.npz", **arrays, y=np.eye(2)[graph.y.numpy()])
    with pytest.raises(ValueError, match=r"\[N, 2\]; if they are one-hot.*argmax"):
        load_anomaly_npz(tmp_path / "onehot.npz")
    index = {k: np.flatnonzero(getattr(graph, k)[:, 0].numpy()) for k in
             ("train_mask", "val_mask", "test_mask")}
    np.savez(tmp_path / "index.npz", **arrays, y=graph.y.numpy(), **index)
    with pytest.raises(ValueError, match=r"train_mask holds 10 integers for 30 nodes.*"
                                         r"index_to_mask\(idx, size=30\)"):
        load_anomaly_npz(tmp_path / "index.npz")


def test_weighted_mat_adjacency_warns_and_heterophilous_npz_reads_label_mask(tmp_path):
    """From a new-user audit: a .mat adjacency with weights 0.5 loaded unweighted without a
    word; a heterophilous-layout .npz ignored its label_mask, so the unlabelled nodes the
    library told the user to mark came back as labelled normal nodes."""
    content = write_care_mat(tmp_path / "w.mat", YELP_RELATIONS, n=60)
    weighted = dict(content)
    weighted["homo"] = content["homo"] * 0.5
    scipy.io.savemat(str(tmp_path / "w.mat"), weighted)
    with pytest.warns(UserWarning, match="'homo' holds weights other than 1 .*0.5"):
        load_fraud_mat(tmp_path / "w.mat")
    graph = small_graph()
    label_mask = np.arange(30) >= 5
    np.savez(tmp_path / "hetero.npz", node_features=graph.x.numpy(),
             node_labels=graph.y.numpy(), edges=graph.edge_index.numpy().T,
             label_mask=label_mask)
    data = load_anomaly_npz(tmp_path / "hetero.npz")
    assert torch.equal(data.label_mask, torch.from_numpy(label_mask))


def test_a_files_dataset_name_keeps_the_dots_of_its_name(tmp_path):
    """From a new-user audit: 'My.Graph.v2.npz' was named 'My', and run.1.npz and run.2.npz
    both 'run' in the results."""
    from et_graph.datasets.anomaly_data import file_dataset_name

    assert file_dataset_name("My.Graph.v2.npz") == "My.Graph.v2"
    assert file_dataset_name("run.1.pt.zip") == "run.1" and file_dataset_name("CARE.MAT") == "CARE"
    graph = small_graph()
    arrays = {key: getattr(graph, key).numpy() for key in ("x", "edge_index", "y")}
    np.savez(tmp_path / "run.1.npz", **arrays)
    assert load_anomaly_npz(tmp_path / "run.1.npz").name == "run.1"
    torch.save(graph, tmp_path / "run.2.pt")
    assert load_anomaly_dataset(path=tmp_path / "run.2.pt").name == "run.2"


def test_a_users_mat_file_is_named_by_its_file_and_its_other_keys_are_named(tmp_path):
    """From a fraud-data audit: any file in YelpChi's layout was titled 'yelpchi', and keys
    outside the layout (masks, a label_mask, edge weights) were dropped without a word, while
    the .npz and .pt loaders warn."""
    import scipy.io

    content = write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS)
    extra = {**content, "train_mask": np.ones(content["label"].shape[1], bool),
             "edge_weight": np.ones(3)}
    scipy.io.savemat(tmp_path / "MyShop.mat", extra)
    with pytest.warns(UserWarning, match=r"\['edge_weight', 'train_mask'\] are not read"):
        mine = load_anomaly_dataset(path=tmp_path / "MyShop.mat")
    assert mine.name == "myshop"
    assert load_anomaly_dataset(path=tmp_path / "YelpChi.mat").name == "yelpchi"


def test_a_torch_file_is_not_unpickled_beyond_tensors_and_pyg_data(tmp_path, monkeypatch):
    # (from a security review) --data X.pt, a named dataset found in a shared folder and the
    # ZINC files were unpickled in full: a crafted file ran its code
    import fractions

    from helpers import CodeRunningPickle

    from et_graph.datasets import load_pyg_file
    from et_graph.datasets.embedded import UntrustedFileError
    from et_graph.datasets.synthetic import planted_anomaly_graph

    plain = tmp_path / "plain.pt"
    torch.save(planted_anomaly_graph(40, seed=0), plain)
    assert load_pyg_file(plain).num_nodes == 40  # a plain Data loads as before
    graph = planted_anomaly_graph(40, seed=0)
    extra = tmp_path / "extra.pt"
    torch.save({"x": graph.x, "edge_index": graph.edge_index, "y": graph.y,
                "note": fractions.Fraction(1, 3)}, extra)  # an object only pickle rebuilds
    with pytest.raises(UntrustedFileError, match="ET_GRAPH_TRUST_PICKLE=1"):
        load_pyg_file(extra)
    monkeypatch.setenv("ET_GRAPH_TRUST_PICKLE", "1")
    assert load_pyg_file(extra).num_nodes == 40  # the user's own trusted file
    monkeypatch.delenv("ET_GRAPH_TRUST_PICKLE")
    marker = tmp_path / "ran"
    crafted = tmp_path / "crafted.pt"
    torch.save({"x": graph.x, "edge_index": graph.edge_index, "y": graph.y,
                "payload": CodeRunningPickle(marker)}, crafted)
    # (a security audit) torch 2.13 words the refusal "unsupported GLOBAL": the message fell
    # back to "cannot be read", naming neither the global nor the switch
    with pytest.raises(UntrustedFileError, match="ET_GRAPH_TRUST_PICKLE=1"):
        load_pyg_file(crafted)
    assert not marker.exists()
    # (a security audit) a zero-stride view of a 2.4 KB file declared gigabytes
    from et_graph.datasets.embedded import load_torch_data

    repeated = tmp_path / "repeated.pt"
    torch.save({"x": torch.zeros(1).expand(40, 10_000_000), "edge_index": graph.edge_index,
                "y": graph.y}, repeated)
    assert repeated.stat().st_size < 10_000
    with pytest.raises(UntrustedFileError, match="views that repeat values, 1.5 GiB"):
        load_pyg_file(repeated)
    # (a review) summed over the file: 64 views of 1 GiB each passed one by one
    many = tmp_path / "many.pt"
    torch.save({"x": graph.x, "edge_index": graph.edge_index, "y": graph.y,
                **{f"part{i}": torch.zeros(1).expand(2**28) for i in range(64)}}, many)
    with pytest.raises(UntrustedFileError, match="views that repeat values"):
        load_torch_data(many, "it")
    monkeypatch.setenv("ET_GRAPH_TRUST_PICKLE", "1")  # the user's own file: not checked
    assert load_torch_data(repeated, "it")["x"].shape == (40, 10_000_000)
    monkeypatch.delenv("ET_GRAPH_TRUST_PICKLE")
    # (a review) a small repeated view is a user's plain tensor, not a bomb
    small = tmp_path / "small.pt"
    torch.save({"x": graph.x, "edge_index": graph.edge_index,
                "y": torch.zeros(1, dtype=torch.long).expand(40)}, small)
    assert load_pyg_file(small).num_nodes == 40


def test_the_weights_only_loader_reads_numpy_and_hetero_graphs(tmp_path):
    # (from a review) a Data holding NumPy arrays (a supported input) and a HeteroData (named
    # as such by the loaders) were refused as untrusted
    from torch_geometric.data import Data, HeteroData

    from et_graph.datasets.embedded import load_torch_data

    graph = Data(x=np.ones((3, 2), dtype=np.float32), y=np.int64(1))
    torch.save(graph, tmp_path / "numpy.pt")
    loaded = load_torch_data(tmp_path / "numpy.pt", "numpy.pt")
    assert np.array_equal(loaded.x, graph.x) and loaded.y == 1
    torch.save(HeteroData(), tmp_path / "hetero.pt")
    assert isinstance(load_torch_data(tmp_path / "hetero.pt", "hetero.pt"), HeteroData)


def test_numpy_graphs_load_where_numpy_has_no_dtypes_module(tmp_path, monkeypatch):
    """From a minimum-version audit: the allowed dtype classes came from np.dtypes, which
    NumPy has from 1.25 on (1.22 is allowed); on 1.23 every Data holding arrays was refused
    with a raw UnpicklingError. Each dtype's class is reached from an instance too."""
    from torch_geometric.data import Data

    from et_graph.datasets.embedded import load_torch_data

    graph = Data(x=np.ones((3, 2), dtype=np.float32), y=np.int64(1))
    torch.save(graph, tmp_path / "numpy.pt")
    import types

    monkeypatch.setattr(np, "dtypes", types.SimpleNamespace())  # (deleting it re-imports it)
    loaded = load_torch_data(tmp_path / "numpy.pt", "numpy.pt")
    assert np.array_equal(loaded.x, graph.x) and loaded.y == 1


def test_npz_entries_the_loaders_do_not_read_are_never_unpacked(tmp_path, monkeypatch):
    # (from a security review) every entry was decompressed before the keys were checked: a
    # small file inflating to gigabytes in an unread key could exhaust memory
    from et_graph.datasets import load_anomaly_npz
    from et_graph.datasets.synthetic import planted_anomaly_graph

    graph = planted_anomaly_graph(40, seed=0)
    path = tmp_path / "g.npz"
    np.savez_compressed(path, x=graph.x.numpy(), edge_index=graph.edge_index.numpy(),
                        y=graph.y.numpy(), huge=np.zeros((1000, 1000)))
    read = []
    original = np.lib.npyio.NpzFile.__getitem__
    monkeypatch.setattr(np.lib.npyio.NpzFile, "__getitem__",
                        lambda self, key: read.append(key) or original(self, key))
    with pytest.warns(UserWarning, match=r"\['huge'\] are not read"):
        assert load_anomaly_npz(path).num_nodes == 40
    assert "huge" not in read and {"x", "edge_index", "y"} <= set(read)


def test_integer_features_that_float32_would_round_are_named():
    """float32 holds integers exactly up to 2^24: larger ids or counts were rounded without a
    word (a data audit)."""
    import warnings

    from et_graph.datasets.anomaly_data import prepare_anomaly_data

    edges = torch.tensor([[0, 1, 2], [1, 2, 3]])
    y = torch.tensor([0, 1, 0, 0])
    x = torch.tensor([[1], [2], [3], [2 ** 24 + 1]], dtype=torch.int64)
    with pytest.warns(DataWarning, match="integer features reach 16,777,217"):
        prepare_anomaly_data(x, edges, y, name="ids")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        prepare_anomaly_data(x - 1, edges, y, name="ids")  # 2^24 itself is exact
        prepare_anomaly_data(x.double(), edges, y, name="floats")  # a float file rounds anyway
        # unsigned integers (torch has no abs for them: a review saw uint16 files fail)
        prepare_anomaly_data(x.to(torch.uint16) if hasattr(torch, "uint16") else x - 1, edges,
                             y, name="u16")
    if hasattr(torch, "uint32"):
        with pytest.warns(DataWarning, match="integer features reach 16,777,217"):
            prepare_anomaly_data(x.to(torch.uint32), edges, y, name="u32")


def test_split_columns_of_different_kinds_are_named():
    """GADBench's [N, 20] masks hold two protocols (columns 0-9 fully supervised, 10-19
    semi-supervised); a hand-made file with all 20 ran them as one protocol's seeds."""
    import warnings

    from et_graph.datasets.anomaly_data import prepare_anomaly_data

    n = 20
    edges = torch.tensor([list(range(n - 1)), list(range(1, n))])
    y = torch.tensor([0, 1] * (n // 2))
    train = torch.zeros(n, 20, dtype=torch.bool)
    train[:8, :10] = True  # 40 % in the supervised columns
    train[:2, 10:] = True  # 10 % in the semi-supervised ones
    val = torch.zeros(n, 20, dtype=torch.bool)
    val[8:12] = True
    test = torch.zeros(n, 20, dtype=torch.bool)
    test[12:] = True
    masks = {"train_mask": train, "val_mask": val, "test_mask": test}
    with pytest.warns(DataWarning, match=r"\(8 in column 0, 2 in column 10\).*GADBench's 20 "
                                            "columns"):
        prepare_anomaly_data(torch.randn(n, 3), edges, y, name="g", masks=masks)
    train[2:8, 10:] = True
    train[7, 19] = False  # a node apart, as k-fold's rounding leaves it: no warning (a review)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        data = prepare_anomaly_data(torch.randn(n, 3), edges, y, name="g", masks=masks)
    assert data.train_mask.shape == (n, 20)


def test_a_download_redirected_off_https_or_too_large_is_refused(tmp_path, monkeypatch):
    """(a security audit) urllib follows a redirect to plain HTTP, and the archive's size had no
    bound."""
    from et_graph.datasets import fraud_mat

    class Response(io.BytesIO):
        def __init__(self, final):
            super().__init__(b"x" * 4096)
            self.final = final

        def geturl(self):
            return self.final

    monkeypatch.setattr("urllib.request.urlopen", lambda url, timeout: Response("http://a/b.zip"))
    with pytest.raises(OSError, match="not HTTPS"):
        fraud_mat.download_fraud_mat("yelpchi", tmp_path / "a")
    monkeypatch.setattr("urllib.request.urlopen", lambda url, timeout: Response(url))
    monkeypatch.setattr(fraud_mat, "MAX_DOWNLOAD_BYTES", 1024)
    with pytest.raises(OSError, match="exceeds"):
        fraud_mat.download_fraud_mat("yelpchi", tmp_path / "b")
    assert not list((tmp_path / "b").iterdir())  # nothing left behind


def test_an_npz_entry_declaring_more_than_the_memory_is_refused(tmp_path, monkeypatch):
    """(a security audit) a 1 MB .npz inflated to 3 GB without a check."""
    from et_graph.datasets import npz
    from et_graph.datasets.synthetic import planted_anomaly_graph

    graph = planted_anomaly_graph(40, seed=0)
    path = tmp_path / "g.npz"
    np.savez_compressed(path, node_features=graph.x.numpy(), edges=graph.edge_index.t().numpy(),
                        node_labels=graph.y.numpy())
    assert npz.load_anomaly_npz(path).num_nodes == 40
    monkeypatch.setattr(npz, "physical_memory", lambda: 1000)  # bytes: less than the features
    with pytest.raises(ValueError, match="unpacks to .* more than this machine's"):
        npz.load_anomaly_npz(path)


def test_a_mat_entry_the_layout_does_not_read_is_never_unpacked(tmp_path, monkeypatch):
    """(a security audit) a 1 MB .mat with a 1 GiB extra entry unpacked it, while the warning
    said the entry was not read."""
    import scipy.io

    write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS, junk=np.ones((50, 50)))
    asked = []
    original = scipy.io.loadmat

    def recording(path, *args, **kwargs):
        asked.append(kwargs.get("variable_names"))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(scipy.io, "loadmat", recording)
    with pytest.warns(UserWarning, match=r"\['junk'\] are not read"):
        data = load_anomaly_dataset(path=tmp_path / "YelpChi.mat")
    assert data.num_nodes == 60 and asked and all(
        names is not None and "junk" not in names for names in asked)


def test_arrays_from_a_dataframe_are_copied_not_shared_nor_warned_about():
    """An input audit: labels given as a view of the caller's data (a pandas column) were
    shared, so writing data.y changed the user's Series, and read-only features (a transposed
    DataFrame) made torch warn about undefined behaviour."""
    import numpy as np

    from et_graph.datasets.anomaly_data import prepare_anomaly_data

    table = np.zeros((3, 6), dtype=np.int64)  # row 0: the labels, as pandas stores a block
    table[0, 1] = 1

    class Column:  # what np.asarray sees of a pandas Series: a view into the frame's block
        def __array__(self, dtype=None, copy=None):
            return table[0]

    features = np.ones((6, 2), dtype=np.float32)
    features.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = prepare_anomaly_data(features, np.array([[0, 1], [1, 2]]), Column(), name="df")
    data.y[0] = 1
    assert table[0].tolist() == [0, 1, 0, 0, 0, 0]
    data.x[0, 0] = 5.0
    assert features[0, 0] == 1.0
