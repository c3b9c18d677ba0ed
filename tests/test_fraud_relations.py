"""Multi-relation fraud graphs: the loader hands the CARE-GNN relations over as edge types, and
ETDetector(multi_relation=True) attends per relation through fit, scoring and the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch

from et_graph.cli import main as cli_main
from et_graph.datasets import load_anomaly_dataset, load_fraud_mat
from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import ETDetector
from et_graph.exceptions import DataWarning
from et_graph.nn import RelationalETConv
from et_graph.nn.models.anomaly import ETAnomalyNet
from et_graph.protocols.anomaly import make_splits
from et_graph.protocols.anomaly_config import AnomalyDataConfig, load_data

YELP_RELATIONS = ("net_rur", "net_rtr", "net_rsr")
AMAZON_RELATIONS = ("net_upu", "net_usu", "net_uvu")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.delenv("ET_GRAPH_DOWNLOAD", raising=False)
    monkeypatch.delenv("ET_GRAPH_DATA", raising=False)
    monkeypatch.setenv("ET_GRAPH_CACHE", str(tmp_path / "cache"))


def write_care_mat(path, relations, n=60, seed=0, with_relations=True):
    """A small CARE-GNN .mat file: asymmetric relations with self-loops, overlapping on purpose
    (relation 1 repeats some pairs of relation 0)."""
    rng = np.random.RandomState(seed)
    mats = {}
    for name in relations:
        count = int(0.06 * n * n)
        rows, cols = rng.randint(0, n, count), rng.randint(0, n, count)
        matrix = sp.csr_matrix((np.ones(count), (rows, cols)), shape=(n, n)) + sp.eye(n)
        matrix.data[:] = 1.0
        mats[name] = matrix.tocsc()
    first, second = relations[0], relations[1]
    overlap = mats[first].tocoo()
    shared = sp.csr_matrix((np.ones(10), (overlap.row[:10], overlap.col[:10])), shape=(n, n))
    mats[second] = (mats[second] + shared).tocsc()
    mats[second].data[:] = 1.0
    homo = sum(mats.values())
    homo.data[:] = 1.0
    features = sp.random(n, 6, density=0.5, random_state=rng, format="csc")
    label = (rng.rand(1, n) < 0.25).astype(np.int64)
    label[0, :2] = [0, 1]
    content = {"homo": homo.tocsc(), "features": features, "label": label}
    if with_relations:
        content.update(mats)
    scipy.io.savemat(str(path), content)
    return content


def pairs(edge_index):
    return set(map(tuple, edge_index.t().tolist()))


def expected_pairs(matrix):
    coo = sp.coo_matrix(matrix)
    found = {(int(a), int(b)) for a, b in zip(coo.row, coo.col) if a != b}
    return found | {(b, a) for a, b in found}


# --------------------------------------------------------------------------------------------
# Loader
# --------------------------------------------------------------------------------------------
def test_multi_relation_load_keeps_each_relation_as_an_edge_type(tmp_path):
    content = write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS)
    data = load_anomaly_dataset("yelpchi", root=tmp_path, relation="multi")
    assert data.relation_names == list(YELP_RELATIONS)
    assert data.edge_type.dtype == torch.long
    assert data.edge_type.shape == (data.edge_index.size(1),)
    assert data.edge_type.unique().tolist() == [0, 1, 2]
    for r, name in enumerate(YELP_RELATIONS):
        part = data.edge_index[:, data.edge_type == r]
        assert pairs(part) == expected_pairs(content[name])  # symmetric, no self-loops
        assert len(pairs(part)) == part.size(1)  # no duplicate within a relation
    # The relations overlap, so the typed graph repeats some pairs; their union is homo.
    assert data.edge_index.size(1) > len(pairs(data.edge_index))
    assert pairs(data.edge_index) == expected_pairs(content["homo"])
    homo = load_anomaly_dataset("yelpchi", root=tmp_path)  # homo stays the default
    assert getattr(homo, "edge_type", None) is None
    assert pairs(homo.edge_index) == pairs(data.edge_index)
    assert torch.equal(homo.x, data.x) and torch.equal(homo.y, data.y)


def test_multi_relation_amazon_by_path_keeps_the_label_mask(tmp_path):
    path = tmp_path / "Amazon.mat"
    write_care_mat(path, AMAZON_RELATIONS[::-1], n=40, seed=2)  # keys written in another order
    data = load_fraud_mat(path, relation="MULTI", unlabelled_prefix=5)
    assert data.name == "amazon" and data.relation_names == list(AMAZON_RELATIONS)
    assert data.label_mask[:5].tolist() == [False] * 5 and bool(data.label_mask[5:].all())


def test_multi_relation_errors(tmp_path):
    path = tmp_path / "plain.mat"
    write_care_mat(path, YELP_RELATIONS, with_relations=False)
    with pytest.raises(ValueError, match="relation='multi' needs the relation matrices"):
        load_fraud_mat(path, relation="multi")
    with pytest.raises(ValueError, match="relation"):
        load_anomaly_dataset("tolokers", relation="multi")
    graph = tmp_path / "graph.pt"
    torch.save(planted_anomaly_graph(30, seed=1), graph)
    with pytest.raises(ValueError, match="has no edge_type"):
        load_anomaly_dataset(path=graph, relation="multi")
    with pytest.raises(ValueError, match="applies to CARE-GNN .mat files"):
        load_anomaly_dataset(path=graph, relation="net_rur")


def test_a_typed_torch_file_keeps_its_relations(tmp_path):
    """A user's own typed graph reached the multi-relation ET only through a .mat file: a .pt
    with edge_type lost its types (pairs in two relations merged), and relation='multi' said
    the file had a single edge type."""
    from torch_geometric.data import Data

    write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS)
    mat = load_fraud_mat(tmp_path / "YelpChi.mat", relation="multi")
    # the same graph as a .pt: one direction of each edge, relations shuffled in the columns
    order = torch.randperm(mat.edge_index.size(1), generator=torch.Generator().manual_seed(0))
    one_way = mat.edge_index[0, order] < mat.edge_index[1, order]
    kept = order[one_way]
    torch.save(Data(x=mat.x, y=mat.y, edge_index=mat.edge_index[:, kept],
                    edge_type=mat.edge_type[kept], relation_names=list(YELP_RELATIONS)),
               tmp_path / "typed.pt")
    data = load_anomaly_dataset(path=tmp_path / "typed.pt", relation="multi")
    assert data.relation_names == list(YELP_RELATIONS)
    for r in range(len(YELP_RELATIONS)):
        assert pairs(data.edge_index[:, data.edge_type == r]) == pairs(
            mat.edge_index[:, mat.edge_type == r])
    assert data.edge_index.size(1) == mat.edge_index.size(1)  # repeats across relations kept
    merged = load_anomaly_dataset(path=tmp_path / "typed.pt")  # homo: one edge set
    assert getattr(merged, "edge_type", None) is None
    assert merged.edge_index.size(1) == len(pairs(mat.edge_index))
    # a typed graph without edges or names has one empty relation (torch.cat of none failed)
    torch.save(Data(x=mat.x, y=mat.y, edge_index=torch.zeros(2, 0, dtype=torch.long),
                    edge_type=torch.zeros(0, dtype=torch.long)), tmp_path / "empty.pt")
    empty = load_anomaly_dataset(path=tmp_path / "empty.pt", relation="multi")
    assert empty.relation_names == ["relation_0"] and empty.edge_index.size(1) == 0
    # ids beyond the names, and an edge_type of the wrong length, are refused
    for edge_type, message in ((mat.edge_type[kept] + 1, "outside 0..2"),
                               (mat.edge_type[kept][:-1], "one integer relation id per edge")):
        torch.save(Data(x=mat.x, y=mat.y, edge_index=mat.edge_index[:, kept],
                        edge_type=edge_type, relation_names=list(YELP_RELATIONS)),
                   tmp_path / "bad.pt")
        with pytest.raises(ValueError, match=message):
            load_anomaly_dataset(path=tmp_path / "bad.pt", relation="multi")
    # unnamed ids that skip numbers made empty relations without a word, and an edge out of
    # range was named without the file (a data audit)
    torch.save(Data(x=mat.x, y=mat.y, edge_index=mat.edge_index[:, kept],
                    edge_type=mat.edge_type[kept] + 5), tmp_path / "skips.pt")
    with pytest.warns(DataWarning, match=r"skips\.pt: edge_type's ids are relation "
                                            r"numbers 0\.\.7, and 5 of them have no edge"):
        assert len(load_anomaly_dataset(path=tmp_path / "skips.pt",
                                        relation="multi").relation_names) == 8
    torch.save(Data(x=mat.x, y=mat.y, edge_index=mat.edge_index[:, kept] + 10 ** 6,
                    edge_type=mat.edge_type[kept]), tmp_path / "far.pt")
    with pytest.raises(ValueError, match=r"far\.pt: "):
        load_anomaly_dataset(path=tmp_path / "far.pt", relation="multi")


def test_detection_data_keeps_the_edge_types(tmp_path):
    path = tmp_path / "YelpChi.mat"
    write_care_mat(path, YELP_RELATIONS)
    config = AnomalyDataConfig(data=str(path), relation="multi", neighbour_stats="mean,degree")
    data = load_data(config)
    raw = load_fraud_mat(path, relation="multi")
    assert torch.equal(data.edge_type, raw.edge_type)
    assert torch.equal(data.edge_index, raw.edge_index)
    assert data.relation_names == list(YELP_RELATIONS)


# --------------------------------------------------------------------------------------------
# Network and detector
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def typed_graph():
    data = planted_anomaly_graph(160, seed=4)
    gen = torch.Generator().manual_seed(0)
    data.edge_type = torch.randint(0, 3, (data.edge_index.size(1),), generator=gen)
    data.relation_names = ["a", "b", "c"]
    split = make_splits(data, "paper", 1, 0.4, split_seed=0)[0]
    data.train_mask, data.val_mask, data.test_mask = split.masks(160)
    return data


def test_detector_fits_per_relation_attention(typed_graph):
    data = typed_graph
    det = ETDetector(epochs=3, hidden=16, steps=2, multi_relation=True).fit(data)
    conv = det.model_.conv
    assert isinstance(conv, RelationalETConv) and conv.num_relations == 3
    assert det.num_relations_ == 3
    score = det.decision_function(data)
    assert score.shape == (160,) and torch.isfinite(score).all()
    assert det.node_energy(data).shape == (160,)
    # The scores read the edge types: moving every edge into one relation changes them.
    merged = data.clone()
    merged.edge_type = torch.zeros_like(data.edge_type)
    assert not torch.allclose(det.decision_function(merged), score)
    untyped = data.clone()
    del untyped.edge_type
    with pytest.raises(ValueError, match="relation='multi'"):
        det.decision_function(untyped)
    # Without multi_relation the same graph gets the one-relation ETConv over all its edges.
    plain = ETDetector(epochs=2, hidden=16).fit(data)
    assert not isinstance(plain.model_.conv, RelationalETConv)


def test_relation_names_empty_relations_and_list_edge_types_are_checked(typed_graph):
    """From an audit: a graph with its relations in another order was scored with the
    per-relation weights swapped, silently; a relation without training edges kept random
    keys and queries unremarked; a list edge_type failed with "'list' object has no attribute
    'numel'"."""
    det = ETDetector(epochs=1, hidden=16, multi_relation=True).fit(typed_graph)
    assert det.relation_names_ == ["a", "b", "c"]
    reordered = typed_graph.clone()
    reordered.relation_names = ["b", "a", "c"]
    with pytest.raises(ValueError, match=r"relations are \['b', 'a', 'c'\], and the detector "
                                         r"was fitted on \['a', 'b', 'c'\]"):
        det.decision_function(reordered)
    short = typed_graph.clone()
    short.relation_names = ["a", "b"]  # ids 0..2: named the layer's num_relations before
    with pytest.raises(ValueError, match="give every id a name in data.relation_names"):
        ETDetector(epochs=1, hidden=16, multi_relation=True).fit(short)
    unnamed = typed_graph.clone()
    del unnamed.relation_names  # nothing to compare: scored as before
    assert det.decision_function(unnamed).shape == (160,)
    sparse = typed_graph.clone()
    sparse.edge_type = sparse.edge_type.clamp(max=1)  # relation "c" loses every edge
    with pytest.warns(RuntimeWarning, match=r"relation\(s\) \['c'\] have no edge"):
        ETDetector(epochs=1, hidden=16, multi_relation=True).fit(sparse)
    listed = typed_graph.clone()
    listed.edge_type = typed_graph.edge_type.tolist()
    with pytest.raises(ValueError, match="edge_type must be a tensor"):
        ETDetector(epochs=1, multi_relation=True).fit(listed)


def test_a_detector_that_ignores_edge_types_says_so(typed_graph):
    """From an audit: a plain ETDetector (or a baseline) on a typed graph ignored edge_type
    silently; edge_weight and edge_attr already warned."""
    import warnings

    with pytest.warns(UserWarning, match="ETDetector ignores data.edge_type"):
        ETDetector(epochs=1, hidden=8).fit(typed_graph)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the multi-relation ET reads them
        ETDetector(epochs=1, hidden=8, multi_relation=True).fit(typed_graph)


def test_multi_relation_needs_edge_types_and_full_batch(typed_graph):
    untyped = typed_graph.clone()
    del untyped.edge_type
    with pytest.raises(ValueError, match="--relation multi"):
        ETDetector(epochs=1, multi_relation=True).fit(untyped)
    with pytest.raises(ValueError, match="full batch"):
        ETDetector(multi_relation=True, batch_size=32)
    with pytest.raises(ValueError, match="full batch"):
        ETDetector(multi_relation=True, subgraph_ratio=0.5)
    # The message names the CLI flags too: most users meet it through et-graph anomaly.
    with pytest.raises(ValueError,
                       match=r"chunked scoring \(chunk_size / chunk_edges.*--multi-relation"):
        ETDetector(epochs=1, multi_relation=True, chunk_size=16).fit(typed_graph)
    bad = typed_graph.clone()
    bad.edge_type = bad.edge_type + 3  # ids beyond the 3 relation names
    with pytest.raises(ValueError, match=r"ids up to 5, but the graph names 3 relations"):
        ETDetector(epochs=1, multi_relation=True).fit(bad)


def test_network_refuses_missing_or_unexpected_edge_types(typed_graph):
    x, edge_index = typed_graph.x, typed_graph.edge_index
    relational = ETAnomalyNet(x.size(1), 8, num_relations=3)
    with pytest.raises(ValueError, match="needs edge_type"):
        relational(x, edge_index)
    assert relational(x, edge_index, edge_type=typed_graph.edge_type).shape == (160,)
    with pytest.raises(ValueError, match="one relation"):
        ETAnomalyNet(x.size(1), 8)(x, edge_index, edge_type=typed_graph.edge_type)


def test_cli_runs_the_multi_relation_et_on_a_mat_file(tmp_path):
    path = tmp_path / "YelpChi.mat"
    write_care_mat(path, YELP_RELATIONS, n=120, seed=5)
    out = tmp_path / "run"
    code = cli_main([
        "anomaly", "--data", str(path), "--relation", "multi", "--multi-relation",
        "--models", "et", "--epochs", "2", "--seeds", "1", "--hidden", "8", "--out", str(out),
        "--no-progress",
    ])
    assert code == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["meta"]["config"]["et"]["multi_relation"] is True
    assert results["meta"]["config"]["data"]["relation"] == "multi"
    assert set(results["models"]) >= {"et", "et_energy_trained"}
    assert results["relation_names"] == list(YELP_RELATIONS)  # edge_type's ids, in order


def test_the_docs_multi_relation_snippet_runs(tmp_path, monkeypatch):
    """docs/anomaly.md's multi-relation snippet, run as written (only the epochs cut): it once
    omitted the split and failed with "no train_mask" for every reader who pasted it."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "anomaly.md").read_text(encoding="utf-8")
    section = page[page.index("## Multi-relation graphs"):]
    snippet = section[section.index("```python") + len("```python"):]
    snippet = snippet[:snippet.index("```")]
    assert "ETDetector(multi_relation=True)" in snippet
    snippet = snippet.replace("ETDetector(multi_relation=True)",
                              "ETDetector(multi_relation=True, epochs=2, hidden=16)")
    write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS)
    monkeypatch.setenv("ET_GRAPH_DATA", str(tmp_path))
    namespace: dict = {}
    exec(compile(snippet, "docs/anomaly.md", "exec"), namespace)
    assert namespace["det"].num_relations_ == 3
    assert namespace["det"].decision_function(namespace["data"]).shape == (60,)


def test_multi_relation_with_mini_batches_is_refused_before_any_data_loads(monkeypatch):
    """From a large-graph audit: the other bad combinations failed at parse time, this one
    only once the data had loaded and the first detector was built."""
    from et_graph.config import parse
    from et_graph.protocols import anomaly_config
    from et_graph.protocols.anomaly_config import AnomalyConfig

    def no_loading(*args, **kwargs):
        raise AssertionError("the data loaded before the settings were checked")

    monkeypatch.setattr(anomaly_config, "load_data", no_loading)
    for flags in (["--batch-size", "64"], ["--subgraph-ratio", "0.5"]):
        with pytest.raises(ValueError, match="multi_relation trains full batch only"):
            parse(AnomalyConfig, ["--multi-relation", "--relation", "multi", *flags])
    parse(AnomalyConfig, ["--multi-relation", "--batch-size", "64", "--models", "gbt"])


def test_relations_are_kept_checked_and_described(typed_graph, tmp_path):
    """From a multi-relation audit: a fourth net_* relation of a CARE file was dropped without
    a word; node_energy skipped the relation-name check of decision_function, and a graph
    without names was scored unchecked; chunks with the multi-relation ET were refused only in
    fit; the protocol line never said which models read the relations."""
    import scipy.io

    from et_graph.config import parse
    from et_graph.experiments.anomaly import describe_protocol
    from et_graph.protocols.anomaly_config import AnomalyConfig

    content = write_care_mat(tmp_path / "YelpChi.mat", YELP_RELATIONS)
    scipy.io.savemat(tmp_path / "Shop.mat", {**content, "net_extra": content["net_rur"]})
    assert load_fraud_mat(tmp_path / "Shop.mat", relation="multi").relation_names == [
        *YELP_RELATIONS, "net_extra"]
    det = ETDetector(epochs=2, hidden=16, multi_relation=True).fit(typed_graph)
    swapped = typed_graph.clone()
    swapped.relation_names = ["b", "a", "c"]
    with pytest.raises(ValueError, match="the ids must mean the same relations"):
        det.node_energy(swapped)
    unnamed = typed_graph.clone()
    del unnamed.relation_names
    with pytest.warns(DataWarning, match="relation ids cannot be checked"):
        det.decision_function(unnamed)
    with pytest.raises(ValueError, match="not implemented for the multi-relation ET"):
        ETDetector(multi_relation=True, chunk_size=50)
    config = parse(AnomalyConfig, ["--relation", "multi", "--multi-relation"])
    split = make_splits(typed_graph, "paper", 1, 0.4, split_seed=0)
    assert "relations: multi (et attends per relation; the other models see" in (
        describe_protocol(config, split, ["et", "gbt"]))
    # the stacked detector's ET attends per relation too (an audit found it called merged)
    assert "relations: multi (et and et_stacked (its ET) attend per relation; the other " in (
        describe_protocol(config, split, ["et", "et_stacked", "gbt"]))
    assert "relations: multi (et_stacked (its ET) attends per relation)" in (
        describe_protocol(config, split, ["et_stacked"]))
    merged = parse(AnomalyConfig, ["--relation", "multi"])
    assert "relations: multi (every model sees every relation's" in (
        describe_protocol(merged, split, ["et_stacked", "gbt"]))
    # the default, homo, merges a fraud file's relations: the line says so (an audit), and
    # says nothing of relations for a graph that has one
    for flags in (["--dataset", "yelpchi"], ["--data", str(tmp_path / "Shop.mat")]):
        assert "relations: homo (the file's merged adjacency" in describe_protocol(
            parse(AnomalyConfig, flags), split, ["et", "gbt"])
    assert "relations" not in describe_protocol(
        parse(AnomalyConfig, ["--dataset", "reddit"]), split, ["et", "gbt"])


def test_fitted_empty_relation_names_warn_instead_of_failing(typed_graph):
    # a detector fitted on a graph whose relation_names is [] (falsy, not None) took the
    # other branch of the warning and called list(None) on the unnamed scored graph
    det = ETDetector(epochs=1, hidden=16, multi_relation=True).fit(typed_graph)
    det.relation_names_ = []
    unnamed = typed_graph.clone()
    del unnamed.relation_names
    with pytest.warns(DataWarning, match=r"names fitted \[\], none on the other side"):
        det._check_relations(unnamed)


def test_a_to_homogeneous_graph_names_its_relations(typed_graph):
    """HeteroData.to_homogeneous() sets no relation_names, so every scoring warned that the
    relation ids could not be checked (and the warning named torch's contextlib)."""
    import warnings

    from torch_geometric.data import HeteroData

    hetero = HeteroData()
    for key in ("x", "y", "train_mask", "val_mask"):
        hetero["review"][key] = typed_graph[key]
    for r, name in enumerate(("rur", "rtr", "rsr")):
        hetero["review", name, "review"].edge_index = typed_graph.edge_index[
            :, typed_graph.edge_type == r]
    data = hetero.to_homogeneous()
    det = ETDetector(epochs=1, hidden=16, multi_relation=True).fit(data)
    assert det.relation_names_ == ["review__rur__review", "review__rtr__review",
                                   "review__rsr__review"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        det.decision_function(data)  # names on both sides: checked, no warning
    swapped = hetero.clone()
    del swapped["review", "rur", "review"]
    swapped["review", "rur", "review"].edge_index = hetero["review", "rur", "review"].edge_index
    with pytest.raises(ValueError, match="relations are"):  # another order of the edge types
        det.decision_function(swapped.to_homogeneous())
    unnamed = typed_graph.clone()
    del unnamed.relation_names
    with pytest.warns(DataWarning, match="cannot be checked") as caught:
        det.decision_function(unnamed)
    assert caught[0].filename == __file__  # the caller's line, not torch's contextlib


def test_a_run_names_edge_types_a_model_ignores_once_not_once_per_seed(tmp_path):
    """(a fraud-data audit) 'MLPDetector ignores data.edge_type' came once per seed and model."""
    import warnings

    path = tmp_path / "YelpChi.mat"
    write_care_mat(path, YELP_RELATIONS, n=120, seed=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli_main(["anomaly", "--data", str(path), "--relation", "multi", "--models",
                         "mlp,gbt", "--epochs", "1", "--max-iter", "5", "--seeds", "3",
                         "--baseline-hidden", "8", "--no-energy-row", "--no-progress",
                         "--out", str(tmp_path / "run")]) == 0
    said = [str(w.message).split(" ")[0] for w in caught
            if "ignores data.edge_type" in str(w.message)]
    assert sorted(said) == ["GBTDetector", "MLPDetector"]
