"""GNNBenchmark data, baselines and runner (small and offline; nothing is downloaded)."""
from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CodeRunningPickle, record_calls
from torch_geometric.data import Data
from torch_geometric.utils import contains_self_loops, is_undirected

from et_graph.baselines.gnnbenchmark_baselines import GatedGCNBaseline, GINBaseline
from et_graph.config import load_file, merge, parse, resolve
from et_graph.datasets import (
    GNNBenchmarkDataConfig,
    SBMClusterRecipe,
    SBMPatternRecipe,
    generate_sbm_cluster,
    generate_sbm_pattern,
    load_benchmark,
    load_gnn_benchmark,
    load_zinc,
    load_zinc_partial,
)
from et_graph.exceptions import ConfigWarning, DataWarning, ETGraphWarning
from et_graph.experiments import gnnbenchmark
from et_graph.protocols.gnnbenchmark import (
    BaselineConfig,
    ETGraphModelConfig,
    GNNBenchmarkTrainConfig,
    build_model,
    train_one,
    weighted_accuracy,
)

REPO = Path(__file__).resolve().parents[1]
PARTIAL = REPO / "datasets" / "ZINC_subset_partial"
PRESETS = REPO / "configs" / "gnnbenchmark"


@pytest.fixture(scope="module")
def zinc_val() -> list[Data]:
    return load_zinc_partial(PARTIAL, "val")


# ------------------------------------------------------------------------------------------
# ZINC partial loader
# ------------------------------------------------------------------------------------------
def test_zinc_partial_val_rebuilds_valid_graphs(zinc_val):
    assert len(zinc_val) == 1000
    assert sum(g.num_nodes for g in zinc_val) == 23083  # datasets/SOURCES.md
    assert sum(g.edge_index.size(1) for g in zinc_val) == 49692  # 24.85 undirected per graph
    for g in zinc_val:
        g.validate(raise_on_error=True)
        assert g.x.dtype == torch.long and g.x.shape == (g.num_nodes, 1)
        assert g.edge_attr.shape == (g.edge_index.size(1),)
        assert set(g.edge_attr.tolist()) <= {1, 2, 3}
        assert g.y.shape == (1,) and g.y.dtype == torch.float
        assert is_undirected(g.edge_index, num_nodes=g.num_nodes)
    assert int(torch.cat([g.x for g in zinc_val]).max()) < 28
    targets = torch.cat([g.y for g in zinc_val])
    assert targets.mean().item() == pytest.approx(0.0315, abs=1e-3)


def test_zinc_partial_test_split_and_processed_dir_argument():
    test = load_zinc_partial(PARTIAL / "processed", "test")
    assert len(test) == 1000
    assert sum(g.num_nodes for g in test) == 23117


def test_zinc_partial_missing_train_and_missing_file_say_where(tmp_path):
    with pytest.raises(FileNotFoundError, match="ZINC/raw"):
        load_zinc_partial(PARTIAL, "train")
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "val.pt")):
        load_zinc_partial(tmp_path, "val")


# ------------------------------------------------------------------------------------------
# PyG wrappers: offline only
# ------------------------------------------------------------------------------------------
def test_pyg_wrappers_name_the_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"train\.pickle"):
        load_zinc(tmp_path / "ZINC", "train")
    with pytest.raises(FileNotFoundError, match=r"PATTERN/raw/PATTERN_v2\.pt"):
        load_gnn_benchmark(tmp_path, "PATTERN", "train")
    with pytest.raises(ValueError, match="name must be one of"):
        load_gnn_benchmark(tmp_path, "TSP", "train")
    assert not any(tmp_path.rglob("*.zip"))  # nothing was downloaded


def _write_fake_zinc_raw(root: Path, graphs: list[Data]) -> None:
    """PyG's ZINC raw layout (molecule dicts + subset indices) built from a few real graphs."""
    raw = root / "raw"
    raw.mkdir(parents=True)
    for split, chunk in (("train", graphs[:12]), ("val", graphs[12:18]), ("test", graphs[18:24])):
        mols = []
        for g in chunk:
            adj = torch.zeros(g.num_nodes, g.num_nodes, dtype=torch.long)
            adj[g.edge_index[0], g.edge_index[1]] = g.edge_attr
            mols.append({"atom_type": g.x.view(-1), "bond_type": adj,
                         "logP_SA_cycle_normalized": g.y})
        with open(raw / f"{split}.pickle", "wb") as handle:
            pickle.dump(mols, handle)
        (raw / f"{split}.index").write_text(",".join(str(i) for i in range(len(mols))) + "\n",
                                            encoding="utf-8")


def _write_fake_gnn_benchmark_raw(root: Path, name: str, splits: dict[str, list[Data]]) -> None:
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    # integer feature ids (the runner must one-hot them like the generated graphs)
    payload = [[{"x": g.x.argmax(1), "edge_index": g.edge_index, "y": g.y} for g in splits[s]]
               for s in ("train", "val", "test")]
    torch.save(payload, raw / f"{name}_v2.pt")


def test_pyg_wrappers_load_local_files(tmp_path, zinc_val):
    _write_fake_zinc_raw(tmp_path / "ZINC", zinc_val)
    train = load_zinc(tmp_path / "ZINC", "train")
    assert len(train) == 12
    assert torch.equal(train[0].x, zinc_val[0].x) and torch.equal(train[0].y, zinc_val[0].y)
    assert train[0].edge_index.size(1) == zinc_val[0].edge_index.size(1)
    assert (tmp_path / "ZINC" / "subset" / "processed" / "train.pt").is_file()
    splits = generate_sbm_cluster(4, 2, 2, seed=3)
    _write_fake_gnn_benchmark_raw(tmp_path, "CLUSTER", splits)
    val = load_gnn_benchmark(tmp_path, "CLUSTER", "val")
    assert len(val) == 2 and torch.equal(val[1].y, splits["val"][1].y)


def test_planted_data_files_cannot_run_code(tmp_path, zinc_val, monkeypatch):
    # (security review) PyG's fs.torch_load retries a refused weights-only load with full
    # unpickling, and its ZINC processing pickle.loads the raw files: a planted file under
    # datasets/ in the working directory ran its code through `et-graph gnnbenchmark`
    from et_graph.datasets.embedded import TRUST_ENV, UntrustedFileError

    monkeypatch.delenv(TRUST_ENV, raising=False)
    marker = tmp_path / "ran"
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    torch.save([[CodeRunningPickle(marker)], [], []], raw / "MNIST_v2.pt")
    with pytest.raises(UntrustedFileError, match="beyond tensors"):
        load_gnn_benchmark(tmp_path, "MNIST", "train")
    # a planted processed file (PyG loads it without looking at the raw one)
    splits = generate_sbm_cluster(4, 2, 2, seed=3)
    _write_fake_gnn_benchmark_raw(tmp_path, "CLUSTER", splits)
    load_gnn_benchmark(tmp_path, "CLUSTER", "train")
    processed = tmp_path / "CLUSTER" / "processed" / "train_data.pt"
    mtime = processed.stat().st_mtime
    torch.save(CodeRunningPickle(marker), processed)
    os.utime(processed, (mtime + 10, mtime + 10))  # newer than the raw file: not reprocessed
    with pytest.raises(UntrustedFileError):
        load_gnn_benchmark(tmp_path, "CLUSTER", "train")
    # (a review) PyG's Dataset._process torch.loads processed/pre_transform.pt in full itself
    shutil.rmtree(tmp_path / "CLUSTER" / "processed")
    load_gnn_benchmark(tmp_path, "CLUSTER", "train")  # processed afresh
    torch.save(CodeRunningPickle(marker), tmp_path / "CLUSTER" / "processed" / "pre_transform.pt")
    with pytest.raises(UntrustedFileError):
        load_gnn_benchmark(tmp_path, "CLUSTER", "train")
    # the official ZINC raw format is a pickle: tensors, lists and dicts only
    _write_fake_zinc_raw(tmp_path / "ZINC", zinc_val)
    with open(tmp_path / "ZINC" / "raw" / "val.pickle", "wb") as handle:
        pickle.dump([CodeRunningPickle(marker)], handle)
    with pytest.raises(UntrustedFileError, match=r"val\.pickle names builtins\.exec"):
        load_zinc(tmp_path / "ZINC", "train")
    assert not marker.exists()
    # nor a view that repeats one stored value into gigabytes (a review: 2 GiB from 415 bytes)
    with open(tmp_path / "ZINC" / "raw" / "val.pickle", "wb") as handle:
        pickle.dump([{"atom_type": torch.zeros(1, dtype=torch.uint8).expand(2**28)}], handle)
    with pytest.raises(UntrustedFileError, match="a view that repeats values"):
        load_zinc(tmp_path / "ZINC", "train")
    # PyG's own loaders are themselves again outside the loads
    from torch_geometric.data import dataset
    from torch_geometric.datasets import zinc
    from torch_geometric.io import fs

    assert fs.torch_load.__module__ == "torch_geometric.io.fs" and zinc.pickle is pickle
    assert dataset.torch is torch


def test_damaged_files_are_named_with_the_fix(tmp_path, zinc_val):
    """A truncated download gave torch.load's advice to set weights_only=False, or a bare
    "invalid load key"."""
    splits = generate_sbm_cluster(4, 2, 2, seed=3)
    _write_fake_gnn_benchmark_raw(tmp_path, "CLUSTER", splits)
    raw = tmp_path / "CLUSTER" / "raw" / "CLUSTER_v2.pt"
    raw.write_bytes(raw.read_bytes()[:200])  # an interrupted download
    with pytest.raises(ValueError, match=r"cannot be read .*put a fresh CLUSTER_v2\.pt") as error:
        load_gnn_benchmark(tmp_path, "CLUSTER", "train")
    assert "weights_only" not in str(error.value)
    _write_fake_zinc_raw(tmp_path / "ZINC", zinc_val)
    (tmp_path / "ZINC" / "raw" / "val.pickle").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match=r"ZINC cannot be read .*invalid load key"):
        load_zinc(tmp_path / "ZINC", "train")
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "val.pt").write_bytes(b"\x80\x04 truncated")
    with pytest.raises(ValueError, match=r"val\.pt cannot be read.*copy ZINC_subset_partial"):
        load_zinc_partial(tmp_path / "partial", "val")


def test_nan_targets_and_non_integer_ids_are_refused(tmp_path):
    """From an audit: a NaN target in the test split printed 'mae n/a' with exit status 0 (in
    training it 'diverged', with advice to lower the learning rate); a bare .long() read a
    label 0.5 as 0 and an atom type 0.5 as 0."""
    from torch_geometric.io import fs

    def damaged(key, change):
        collated, slices = fs.torch_load(str(PARTIAL / "processed" / "val.pt"))
        store = collated.__dict__
        store[key] = change(store[key].clone())
        folder = tmp_path / f"{key}{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        torch.save((collated, slices), folder / "val.pt")
        return folder

    with pytest.raises(ValueError, match="graph 0 target is NaN"):
        load_zinc_partial(damaged("y", lambda y: y.index_fill_(0, torch.tensor([0]), float("nan"))),
                          "val")
    with pytest.raises(ValueError, match=r"atom types must be whole .*, found 0.5"):
        load_zinc_partial(damaged("x", lambda x: x.float().index_fill_(0, torch.tensor([0]), 0.5)),
                          "val")
    with pytest.raises(ValueError, match=r"bond types must be ids in 0\.\.3"):
        load_zinc_partial(damaged("edge_attr", lambda e: e + 7), "val")
    with pytest.raises(ValueError, match=r"val\.pt cannot be read \(RuntimeError: start"):
        load_zinc_partial(damaged("y", lambda y: y[:10]), "val")  # shorter than its slices
    splits = generate_sbm_cluster(4, 2, 2, seed=3)
    splits["val"][1].y = splits["val"][1].y.float()
    splits["val"][1].y[0] = 0.5
    _write_fake_gnn_benchmark_raw(tmp_path / "official", "CLUSTER", splits)
    config = GNNBenchmarkDataConfig(dataset="CLUSTER", root=str(tmp_path / "official"),
                                    source="official")
    with pytest.raises(ValueError, match="CLUSTER_v2.pt: val graph 1: node labels must be whole"):
        load_benchmark(config)


# ------------------------------------------------------------------------------------------
# SBM generator
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pattern_splits():
    return generate_sbm_pattern(30, 5, 5, seed=1, recipe=SBMPatternRecipe(num_patterns=5))


@pytest.fixture(scope="module")
def cluster_splits():
    return generate_sbm_cluster(30, 5, 5, seed=1)


def test_pattern_sizes_labels_and_features(pattern_splits):
    recipe = SBMPatternRecipe()
    assert [len(pattern_splits[s]) for s in ("train", "val", "test")] == [30, 5, 5]
    low = recipe.num_communities * recipe.size_min + recipe.pattern_size
    high = recipe.num_communities * (recipe.size_max - 1) + recipe.pattern_size
    for g in pattern_splits["train"]:
        assert low <= g.num_nodes <= high
        assert int(g.y.sum()) == recipe.pattern_size  # label 1 = the planted pattern
        assert g.x.shape == (g.num_nodes, recipe.vocab_size)
        assert torch.equal(g.x.sum(1), torch.ones(g.num_nodes))  # one-hot
        assert is_undirected(g.edge_index) and not contains_self_loops(g.edge_index)
        counts = torch.bincount(g.community, minlength=recipe.num_communities + 1)
        assert bool((counts[:-1] >= recipe.size_min).all() & (counts[:-1] < recipe.size_max).all())


def test_pattern_is_shared_within_a_pattern_instance(pattern_splits):
    """Graphs 0 and 5 use pattern 0 (5 patterns): the planted subgraphs are identical up to order;
    graphs 0 and 1 use different patterns."""

    def planted(g: Data) -> tuple[list[int], int]:
        nodes = torch.nonzero(g.y).view(-1)
        inside = g.y[g.edge_index[0]].bool() & g.y[g.edge_index[1]].bool()
        return sorted(g.x[nodes].argmax(1).tolist()), int(inside.sum())

    graphs = pattern_splits["train"]
    assert planted(graphs[0]) == planted(graphs[5]) == planted(pattern_splits["val"][0])
    assert planted(graphs[0]) != planted(graphs[1])


def _edge_densities(graphs: list[Data], num_blocks: int) -> tuple[float, float]:
    """Edge density inside and across blocks ``0..num_blocks-1`` (other nodes are ignored)."""
    same_edges = cross_edges = same_pairs = cross_pairs = 0.0
    for g in graphs:
        src, dst = g.community[g.edge_index[0]], g.community[g.edge_index[1]]
        kept = (src < num_blocks) & (dst < num_blocks)
        same_edges += float((kept & (src == dst)).sum())
        cross_edges += float((kept & (src != dst)).sum())
        counts = torch.bincount(g.community, minlength=num_blocks)[:num_blocks].double()
        pairs_same = float((counts * (counts - 1)).sum())
        total = float(counts.sum())
        same_pairs += pairs_same
        cross_pairs += total * (total - 1) - pairs_same
    return same_edges / same_pairs, cross_edges / cross_pairs


def test_cluster_community_structure_and_seed_labels(cluster_splits):
    recipe = SBMClusterRecipe()
    graphs = cluster_splits["train"]
    intra, inter = _edge_densities(graphs, recipe.num_communities)
    assert intra == pytest.approx(recipe.p, abs=0.02)
    assert inter == pytest.approx(recipe.q, abs=0.02)
    for g in graphs:
        assert torch.equal(g.y, g.community)
        assert set(g.y.tolist()) == set(range(recipe.num_communities))
        features = g.x.argmax(1)
        assert int((features > 0).sum()) == recipe.num_communities  # one seed per community
        seeds = torch.nonzero(features).view(-1)
        assert torch.equal(features[seeds] - 1, g.y[seeds])
        assert recipe.num_communities * recipe.size_min <= g.num_nodes
        assert g.num_nodes <= recipe.num_communities * (recipe.size_max - 1)


def test_pattern_background_densities(pattern_splits):
    recipe = SBMPatternRecipe()
    intra, inter = _edge_densities(pattern_splits["train"], recipe.num_communities)
    assert intra == pytest.approx(recipe.p, abs=0.03)
    assert inter == pytest.approx(recipe.q, abs=0.03)
    assert intra > inter + 0.1


def test_generator_is_deterministic_by_seed():
    first = generate_sbm_cluster(3, 1, 1, seed=7)
    again = generate_sbm_cluster(3, 1, 1, seed=7)
    other = generate_sbm_cluster(3, 1, 1, seed=8)
    for a, b in zip(first["train"], again["train"]):
        assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    assert any(a.num_nodes != c.num_nodes or not torch.equal(a.y, c.y)
               for a, c in zip(first["train"], other["train"]))
    p1 = generate_sbm_pattern(2, 1, 1, seed=4, recipe=SBMPatternRecipe(num_patterns=2))
    p2 = generate_sbm_pattern(2, 1, 1, seed=4, recipe=SBMPatternRecipe(num_patterns=2))
    assert all(torch.equal(a.edge_index, b.edge_index) for a, b in zip(p1["test"], p2["test"]))


def test_generator_rejects_bad_recipes():
    with pytest.raises(ValueError, match="probability"):
        generate_sbm_cluster(1, 1, 1, recipe=SBMClusterRecipe(p=1.5))
    with pytest.raises(ValueError, match="size_min"):
        generate_sbm_pattern(1, 1, 1, recipe=SBMPatternRecipe(size_min=10, size_max=10))
    with pytest.raises(ValueError, match="num_train"):
        generate_sbm_cluster(-1, 1, 1)


# ------------------------------------------------------------------------------------------
# Metric and baselines
# ------------------------------------------------------------------------------------------
def test_weighted_accuracy_is_mean_class_recall():
    target = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1])
    assert weighted_accuracy(torch.zeros(8, dtype=torch.long), target) == pytest.approx(50.0)
    pred = torch.tensor([0, 0, 0, 1, 1, 1, 1, 0])
    assert weighted_accuracy(pred, target) == pytest.approx(100 * (0.5 + 0.5) / 2)
    assert weighted_accuracy(target, target) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        weighted_accuracy(pred[:3], target)


@pytest.mark.parametrize("cls", [GINBaseline, GatedGCNBaseline])
def test_baselines_shapes_and_bad_input(cls, zinc_val):
    from torch_geometric.loader import DataLoader

    batch = next(iter(DataLoader(zinc_val[:4], batch_size=4)))
    model = cls(1, "regression", hidden=16, num_layers=2, num_node_types=28, num_edge_types=4)
    assert model(batch.x, batch.edge_index, batch.batch, batch.edge_attr).shape == (4,)
    with pytest.raises(ValueError, match="edge_attr"):
        model(batch.x, batch.edge_index, batch.batch, batch.edge_attr[:-1])
    with pytest.raises(ValueError, match="no nodes"):
        model(batch.x[:0], batch.edge_index[:, :0], batch.batch[:0], batch.edge_attr[:0])
    with pytest.raises(ValueError, match="category ids"):
        model(batch.x + 30, batch.edge_index, batch.batch, batch.edge_attr)
    node_model = cls(2, "node", hidden=16, num_layers=2, node_dim=3)
    x = torch.nn.functional.one_hot(batch.x.view(-1) % 3, 3).float()
    assert node_model(x, batch.edge_index, batch.batch).shape == (batch.num_nodes, 2)
    with pytest.raises(ValueError, match="NaN"):
        node_model(x * float("nan"), batch.edge_index, batch.batch)


@pytest.mark.parametrize("cls", [GINBaseline, GatedGCNBaseline])
def test_baselines_read_the_random_walk_encoding(cls, zinc_val):
    """With rw_pe_dim > 0 the encoding changes the output (it enters the node embedding); a
    missing, mis-shaped or unexpected rw_pe is an error rather than silently ignored."""
    from torch_geometric.loader import DataLoader

    from et_graph.transforms import RandomWalkPE

    batch = next(iter(DataLoader([RandomWalkPE(4)(g) for g in zinc_val[:4]], batch_size=4)))
    torch.manual_seed(0)
    model = cls(1, "regression", hidden=16, num_layers=2, num_node_types=28, num_edge_types=4,
                rw_pe_dim=4).eval()
    args = (batch.x, batch.edge_index, batch.batch, batch.edge_attr)
    out = model(*args, rw_pe=batch.rw_pe)
    assert out.shape == (4,)
    assert not torch.allclose(out, model(*args, rw_pe=torch.zeros_like(batch.rw_pe)))
    with pytest.raises(ValueError, match="rw_pe_dim=4"):
        model(*args)
    with pytest.raises(ValueError, match="rw_pe must be"):
        model(*args, rw_pe=batch.rw_pe[:, :3])
    plain = cls(1, "regression", hidden=16, num_layers=2, num_node_types=28, num_edge_types=4)
    with pytest.raises(ValueError, match="rw_pe_dim=0"):
        plain(*args, rw_pe=batch.rw_pe)
    with pytest.raises(ValueError, match="rw_pe_dim"):
        cls(1, "regression", num_node_types=28, rw_pe_dim=-1)


@pytest.mark.parametrize("cls", [GINBaseline, GatedGCNBaseline])
def test_baselines_incident_edges_add_the_sum_of_incoming_encoded_edges(cls, zinc_val):
    """The input ET's incident_edges adds: a hook on the first layer sees the node embedding
    plus a linear map of each node's summed incoming edge encodings, whatever the edge order."""
    from torch_geometric.loader import DataLoader

    batch = next(iter(DataLoader(zinc_val[:3], batch_size=3)))
    torch.manual_seed(0)
    model = cls(1, "regression", hidden=16, num_layers=2, num_node_types=28, num_edge_types=4,
                incident_edges=True).eval()
    seen = []
    model.convs[0].register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    with torch.no_grad():
        out = model(batch.x, batch.edge_index, batch.batch, batch.edge_attr)
        e = model.edge_encoder(batch.edge_attr)
        incoming = torch.zeros(batch.num_nodes, 16).index_add_(0, batch.edge_index[1], e)
        expected = model.node_encoder(batch.x) + model.incident_encoder(incoming)
        assert torch.allclose(seen[0], expected, atol=1e-6)
        order = torch.randperm(batch.edge_index.size(1))
        shuffled = model(batch.x, batch.edge_index[:, order], batch.batch, batch.edge_attr[order])
        assert torch.allclose(shuffled, out, atol=1e-5)
    with pytest.raises(ValueError, match="incident_edges"):
        cls(1, "regression", num_node_types=28, incident_edges=True)


@pytest.mark.parametrize("cls", [GINBaseline, GatedGCNBaseline])
def test_baselines_jk_readout_reads_every_layer(cls, zinc_val):
    """readout="jk": the head sees the pooled states at the input and after every layer,
    concatenated (checked against a hand-built concatenation); a bad name is an error."""
    from torch_geometric.loader import DataLoader

    batch = next(iter(DataLoader(zinc_val[:3], batch_size=3)))
    torch.manual_seed(0)
    model = cls(1, "regression", hidden=8, num_layers=2, num_node_types=28, num_edge_types=4,
                readout="jk").eval()
    assert model.head[0].in_features == 3 * 8
    states, seen = [], []
    model.node_encoder.register_forward_hook(lambda m, i, out: states.append(out))
    model.head.register_forward_hook(lambda m, inputs, out: seen.append(inputs[0]))
    with torch.no_grad():
        out = model(batch.x, batch.edge_index, batch.batch, batch.edge_attr)
        h = states[0]
        layers = [h]
        e = model.edge_encoder(batch.edge_attr)
        for conv, norm in zip(model.convs, model.norms):
            h = h + torch.relu(norm(conv(h, batch.edge_index, e)))
            layers.append(h)
        pooled = torch.cat([type(model).pooling(s, batch.batch) for s in layers], dim=1)
    assert out.shape == (3,)
    assert torch.allclose(seen[0], pooled, atol=1e-5)
    last = cls(1, "regression", hidden=8, num_layers=2, num_node_types=28, num_edge_types=4)
    assert last.head[0].in_features == 8
    node_model = cls(2, "node", hidden=8, num_layers=3, node_dim=3, readout="jk")
    x = torch.nn.functional.one_hot(batch.x.view(-1) % 3, 3).float()
    assert node_model(x, batch.edge_index, batch.batch).shape == (batch.num_nodes, 2)
    assert node_model.head[0].in_features == 4 * 8
    with pytest.raises(ValueError, match="readout"):
        cls(1, "regression", num_node_types=28, readout="sum")


def test_random_walk_encoding_reaches_every_model(tmp_path):
    """``--rw-pe-dim`` gives the encoding to ET and both baselines (their parameter counts grow
    by the encoder), and the results say so."""
    root = str(REPO / "datasets")
    plain = _main("--dataset", "ZINC", "--root", root, "--seeds", "0",
                  "--out", str(tmp_path / "plain"))
    with_rw = _main("--dataset", "ZINC", "--root", root, "--seeds", "0", "--rw-pe-dim", "4",
                    "--out", str(tmp_path / "rw"))
    for name, stats in with_rw["models"].items():
        hidden = 16  # --quick: ET and the baselines have width 16
        assert stats["params"] == plain["models"][name]["params"] + 4 * hidden + hidden, name
    assert "random-walk encoding (4 steps)" in (tmp_path / "rw" / "results.md").read_text(
        encoding="utf-8")
    with pytest.raises(ValueError, match="rw_pe_dim"):
        GNNBenchmarkDataConfig(rw_pe_dim=-1)


def test_message_passing_edges_reach_ets_layers_from_the_command_line(tmp_path):
    """``--message-passing-edges`` gives each of ET's message-passing layers a map of the
    encoded bonds (16 -> 16 at --quick's width, plus a bias), and the results store it."""
    root = str(REPO / "datasets")
    common = ("--dataset", "ZINC", "--root", root, "--seeds", "0", "--models", "et",
              "--message-passing-layers", "2")
    blind = _main(*common, "--out", str(tmp_path / "blind"))
    edges = _main(*common, "--message-passing-edges", "--out", str(tmp_path / "edges"))
    hidden = edge_channels = 16
    assert (edges["models"]["et"]["params"]
            == blind["models"]["et"]["params"] + 2 * (edge_channels * hidden + hidden))
    stored = json.loads((tmp_path / "edges" / "results.json").read_text(encoding="utf-8"))
    assert stored["meta"]["config"]["et"]["message_passing_edges"] is True


# ------------------------------------------------------------------------------------------
# Config
# ------------------------------------------------------------------------------------------
def test_config_defaults_are_the_former_cli_defaults():
    config = gnnbenchmark.CONFIG()
    assert (config.data.dataset, config.data.root, config.data.source) == ("ZINC", "datasets",
                                                                           "auto")
    assert config.data.sizes == (2000, 400, 400) and config.data.holdout_fraction == 0.2
    assert config.protocol.model_names == ["et", "gin", "gatedgcn"]
    assert config.protocol.seed_list == [0, 1, 2]
    train = config.train
    assert (train.epochs, train.lr, train.batch_size, train.eval_batch_size) == (100, 1e-3, 64, 256)
    assert (train.lr_schedule, train.lr_patience, train.grad_clip) == ("plateau", 10, 1.0)
    assert (config.et.hidden, config.et.blocks, config.et.steps, config.et.pe_dim) == (64, 2, 3, 8)
    assert (config.baselines.baseline_hidden, config.baselines.baseline_layers) == (64, 4)
    assert config.run.threads == 1


def test_quick_is_the_smallest_whole_pipeline():
    config = merge(gnnbenchmark.CONFIG(), gnnbenchmark.CONFIG.QUICK)
    assert config.train.epochs <= 10 and len(config.protocol.seed_list) == 2
    assert config.data.sizes == (16, 8, 8) and config.data.train_limit == 48


def test_config_rejects_bad_values():
    for argv in (["--models", "et,transformer"], ["--seeds", ""], ["--seeds", "0,x"],
                 ["--dataset", "TSP"], ["--source", "web"], ["--holdout-fraction", "1.5"],
                 ["--generated-sizes", "10,10"], ["--epochs", "0"], ["--lr-schedule", "step"],
                 ["--baseline-readout", "sum"], ["--seeds", "0,0"]):
        with pytest.raises(ValueError):
            gnnbenchmark.main(argv)
    # refused when the config is read, not after the data load (numpy's seed error)
    with pytest.raises(ValueError, match="seeds must be >= 0"):
        parse(gnnbenchmark.CONFIG, ["--seeds", "-1"])
    # a model named twice is trained once per seed (its results were listed twice)
    assert parse(gnnbenchmark.CONFIG, ["--models", "gin,gin,et"]).protocol.model_names == [
        "gin", "et"]


@pytest.mark.parametrize("name, dataset, epochs, seeds, sizes", [
    ("zinc_proxy", "ZINC", 50, [0, 1, 2], (2000, 400, 400)),
    ("zinc_proxy_long", "ZINC", 100, [0, 1, 2], (2000, 400, 400)),
    ("zinc_proxy_long_rwpe", "ZINC", 100, [0, 1, 2], (2000, 400, 400)),
    ("zinc_proxy_long_rwpe_deeper", "ZINC", 100, [0, 1, 2], (2000, 400, 400)),
    ("pattern_generated", "PATTERN", 12, [0, 1], (200, 50, 50)),
    ("cluster_generated", "CLUSTER", 12, [0, 1], (200, 50, 50)),
])
def test_presets_hold_the_documented_runs(name, dataset, epochs, seeds, sizes):
    path = PRESETS / f"{name}.toml"
    assert set(load_file(path)) <= {"data", "et", "baselines", "train", "protocol", "run"}
    config = resolve(gnnbenchmark.CONFIG, _namespace(config=str(path)))
    assert (config.data.dataset, config.train.epochs) == (dataset, epochs)
    assert config.protocol.seed_list == seeds and config.data.sizes == sizes
    assert config.protocol.model_names == ["et", "gin", "gatedgcn"]
    assert f"configs/gnnbenchmark/{name}.toml" in (REPO / "docs" / "gnnbenchmark.md").read_text(
        encoding="utf-8")
    quick = resolve(gnnbenchmark.CONFIG, _namespace(config=str(path), quick=True))
    assert quick.train.epochs == 2 and quick.protocol.seed_list == [0, 1]
    assert quick.data.dataset == dataset


def _namespace(**values):
    from argparse import Namespace

    return Namespace(**values)


# ------------------------------------------------------------------------------------------
# Runner
# ------------------------------------------------------------------------------------------
def _main(*argv: str) -> dict:
    return gnnbenchmark.main([*argv, "--quick", "--no-progress"])


def _check_outputs(out: Path, metric: str, models: list[str], seeds: int = 1) -> dict:
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(results) >= {"dataset", "protocol", "models", "meta"}
    assert results["meta"]["config"]["data"]["dataset"] in results["dataset"].split()[0]
    assert {"et_graph_version", "git_commit", "data_digest"} <= set(results["meta"])
    assert sorted(results["models"]) == sorted(models)
    for stats in results["models"].values():
        assert np.isfinite(stats[metric]["mean"]) and len(stats[metric]["values"]) == seeds
        assert all(1 <= epoch <= 2 for epoch in stats["selected_epoch"])
        # the engine's record as every task gives it: from 0, epochs run, patience's stop
        assert stats["best_epoch"] == [epoch - 1 for epoch in stats["selected_epoch"]]
        assert all(run >= best + 1 for run, best in zip(stats["epochs_run"],
                                                        stats["best_epoch"]))
        assert all(isinstance(flag, bool) for flag in stats["stopped_early"])
    assert "| model |" in (out / "results.md").read_text(encoding="utf-8")
    from et_graph.config import peak_memory

    if peak_memory()["rss_bytes"] is not None:  # (none on Windows)
        assert "peak memory of the process" in (out / "results.md").read_text(encoding="utf-8")
    assert (out / "val_curves.png").stat().st_size > 0
    drawn = json.loads((out / "val_curves.json").read_text(encoding="utf-8"))  # its numbers
    assert drawn["run_id"] == results["meta"]["run_id"] and drawn["metric"] == metric
    assert sorted(drawn["models"]) == sorted(models)
    assert all(drawn["seeds"] == stats["seeds"] for stats in results["models"].values())
    assert all(len(curves) == seeds for curves in drawn["models"].values())
    return results


def test_runner_quick_zinc_proxy(tmp_path):
    out = tmp_path / "zinc"
    _main("--dataset", "ZINC", "--root", str(REPO / "datasets"), "--out", str(out))
    results = _check_outputs(out, "mae", ["et", "gin", "gatedgcn"], seeds=2)
    assert results["source"] == "partial"
    assert results["split_sizes"] == {"train": 48, "val": 16, "test": 16}
    assert results["meta"]["config"]["protocol"]["seeds"] == "0,1"
    assert "ZINC proxy (trained on the official val split" in results["protocol"]
    assert "limits the splits to random subsets (train 48, val 16, test 16)" in results["protocol"]
    assert "ZINC proxy" in (out / "results.md").read_text(encoding="utf-8")
    pe_dim = results["meta"]["config"]["et"]["pe_dim"]
    declared = f"ET alone reads a Laplacian PE ({pe_dim} eigenvectors); the baselines do not."
    assert (declared in (out / "results.md").read_text(
        encoding="utf-8")) == bool(pe_dim)  # undeclared before
    # ET minus each baseline over the seeds; an error metric: the lower mean is the one ahead
    differences = {d["second"]: d for d in results["differences"]}
    assert set(differences) == {"gin", "gatedgcn"}
    for name, d in differences.items():
        assert d["higher_is_better"] is False and d["metric"] == "mae"
        assert d["mean"] == pytest.approx(results["models"]["et"]["mae"]["mean"]
                                          - results["models"][name]["mae"]["mean"])
    assert "| et − gin | mae |" in (out / "results.md").read_text(encoding="utf-8")


def test_runner_quick_generated_pattern(tmp_path):
    out = tmp_path / "pattern"
    # A root that does not exist generates the graphs, and says so (a benchmark audit: a
    # mistyped --root switched to generated graphs without a word).
    with pytest.warns(DataWarning, match="does not exist: PATTERN is generated"):
        _main("--dataset", "PATTERN", "--root", str(tmp_path / "none"), "--models", "et,gin",
              "--seeds", "0", "--out", str(out))
    results = _check_outputs(out, "weighted_accuracy", ["et", "gin"])
    assert results["source"] == "generated" and "generated" in results["dataset"]
    assert "p=0.5, q=0.35" in results["protocol"]


@pytest.mark.parametrize("layout", ["ids", "float_one_hot", "long_one_hot"])
def test_official_sbm_features_in_every_layout_become_one_hot_rows(tmp_path, layout):
    """PyG ships one-hot float rows; integer ids are one-hot encoded; an integer one-hot
    [N, 3] was once read as ids, giving 3N rows for N nodes."""
    from et_graph.datasets.gnnbenchmark_sbm import sbm_benchmark

    splits = generate_sbm_pattern(3, 2, 2, seed=4, recipe=SBMPatternRecipe(num_patterns=2))
    encode = {"ids": lambda x: x.argmax(1), "float_one_hot": lambda x: x.float(),
              "long_one_hot": lambda x: x.long()}[layout]
    raw = tmp_path / "PATTERN" / "raw"
    raw.mkdir(parents=True)
    torch.save([[{"x": encode(g.x), "edge_index": g.edge_index, "y": g.y} for g in splits[s]]
                for s in ("train", "val", "test")], raw / "PATTERN_v2.pt")
    data = sbm_benchmark("PATTERN", tmp_path, source="official")
    for mine, theirs in zip(data.splits["val"], splits["val"]):
        assert mine.x.dtype == torch.float32 and torch.equal(mine.x, theirs.x.float())


def test_runner_uses_official_files_when_present(tmp_path):
    splits = generate_sbm_cluster(8, 4, 4, seed=2)
    _write_fake_gnn_benchmark_raw(tmp_path, "CLUSTER", splits)
    out = tmp_path / "out"
    _main("--dataset", "CLUSTER", "--root", str(tmp_path), "--models", "gatedgcn", "--seeds", "0",
          "--out", str(out))
    results = _check_outputs(out, "weighted_accuracy", ["gatedgcn"])
    assert results["source"] == "official"


def test_runner_uses_official_zinc_when_present(tmp_path, zinc_val):
    _write_fake_zinc_raw(tmp_path / "ZINC", zinc_val)
    out = tmp_path / "out"
    _main("--dataset", "ZINC", "--root", str(tmp_path), "--models", "gin", "--seeds", "0",
          "--out", str(out))
    results = _check_outputs(out, "mae", ["gin"])
    assert results["source"] == "official" and results["split_sizes"]["train"] == 12


def test_the_default_root_is_found_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "datasets" does not exist here: the checkout's is used
    out = tmp_path / "zinc"
    _main("--dataset", "ZINC", "--models", "gin", "--out", str(out))
    assert json.loads((out / "results.json").read_text(encoding="utf-8"))["source"] == "partial"


def test_runner_errors_say_what_to_put_where(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"MNIST/raw/MNIST_v2\.pt"):
        _main("--dataset", "MNIST", "--root", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"ZINC_subset_partial/processed/val\.pt"):
        _main("--dataset", "ZINC", "--root", str(tmp_path))
    with pytest.raises(FileNotFoundError) as missing:  # one path to put it at, not two
        _main("--dataset", "ZINC", "--root", str(tmp_path))
    assert f"at {tmp_path / 'ZINC_subset_partial' / 'processed' / 'val.pt'}" in str(missing.value)
    with pytest.raises(FileNotFoundError, match=r"PATTERN_v2\.pt"):
        _main("--dataset", "PATTERN", "--root", str(tmp_path), "--source", "official")
    with pytest.raises(ValueError, match="generated"):
        _main("--dataset", "ZINC", "--source", "generated")


def test_train_one_selects_on_val_and_resumes_from_its_checkpoint(tmp_path):
    """The engine keeps the best val epoch (MAE as score -MAE); a resumed finished run restores
    the same weights and so the same test MAE."""
    from et_graph.training import CheckpointConfig

    data = load_benchmark(GNNBenchmarkDataConfig(root=str(REPO / "datasets"), train_limit=32,
                                                 val_limit=16, test_limit=16))
    train = GNNBenchmarkTrainConfig(epochs=3, batch_size=16)
    small = BaselineConfig(baseline_hidden=8, baseline_layers=1)
    torch.manual_seed(99)
    expected = torch.rand(2)
    torch.manual_seed(99)
    first = train_one("gin", data, 0, train, baselines=small, progress=False,
                      checkpoint=CheckpointConfig(str(tmp_path)))
    # (engine audit) it reseeded the caller's generators; the caller's stream comes back
    assert torch.equal(torch.rand(2), expected)
    assert first["val"] == pytest.approx(min(first["curve"]))
    assert first["curve"][first["epoch"] - 1] == first["val"] and len(first["curve"]) == 3
    again = train_one("gin", data, 0, train, baselines=small, progress=False,
                      checkpoint=CheckpointConfig(str(tmp_path), resume=True))
    assert again["test"] == pytest.approx(first["test"]) and again["epoch"] == first["epoch"]
    # other graphs under the same settings (another file at the same path): refused
    data.splits["train"] = [g.clone() for g in data.splits["train"]]
    data.splits["train"][0].y = data.splits["train"][0].y + 1.0
    with pytest.raises(ValueError, match="another configuration"):
        train_one("gin", data, 0, train, baselines=small, progress=False,
                  checkpoint=CheckpointConfig(str(tmp_path), resume=True))


def test_build_model_takes_typed_configs():
    data = load_benchmark(GNNBenchmarkDataConfig(dataset="CLUSTER", root="/nonexistent",
                                                 source="generated", generated_sizes="2,1,1"))
    et = build_model("et", data, ETGraphModelConfig(hidden=8, blocks=3, heads=1, head_dim=4))
    assert (et.hidden_channels, len(et.convs), et.task, et.out_channels) == (8, 3, "node", 6)
    assert et.message_passing is None
    layered = build_model("et", data, ETGraphModelConfig(hidden=8, heads=1, head_dim=4,
                                                         message_passing_layers=2))
    assert len(layered.message_passing.mlps) == 2
    assert layered.message_passing.edge_linears is None
    gin = build_model("gin", data, baselines=BaselineConfig(baseline_hidden=8, baseline_layers=3))
    assert len(gin.convs) == 3
    jk = build_model("gatedgcn", data, baselines=BaselineConfig(baseline_hidden=8,
                                                                 baseline_layers=3,
                                                                 baseline_readout="jk"))
    assert jk.readout == "jk" and jk.head[0].in_features == 4 * 8
    with pytest.raises(ValueError, match="unknown model"):
        build_model("transformer", data)


@pytest.mark.parametrize("path", sorted((PRESETS / "tuned").glob("*.toml")), ids=lambda p: p.stem)
def test_tuned_presets_name_one_model_and_run(path, tmp_path):
    # et-graph tune gnnbenchmark writes one preset per model: its best trial, run over the seeds
    model = path.stem.split("-")[-1]
    config = resolve(gnnbenchmark.CONFIG, _namespace(config=str(path)))
    assert config.protocol.model_names == [model] and config.protocol.seed_list == [0, 1, 2]
    assert (config.data.dataset, config.train.epochs, config.data.rw_pe_dim) == ("ZINC", 100, 16)
    relative = path.relative_to(REPO).as_posix()
    assert relative in (REPO / "docs" / "gnnbenchmark.md").read_text(encoding="utf-8")
    result = gnnbenchmark.main(["--config", str(path), "--quick", "--no-progress", "--out",
                                str(tmp_path)])
    assert list(result["models"]) == [model]


def test_a_diverging_training_names_itself_and_what_finished(monkeypatch):
    from et_graph.experiments import gnnbenchmark as experiment

    calls = []

    def fake_train_one(name, data, seed, *args, **kwargs):
        calls.append((name, seed))
        if name == "et":
            raise FloatingPointError("loss is nan")
        return {"test": 0.5, "val": 0.5, "epoch": 1, "curve": [0.5], "seconds": 0.0,
                "params": 1, "stopped_early": False}

    monkeypatch.setattr(experiment, "train_one", fake_train_one)
    config = parse(experiment.CONFIG, ["--dataset", "PATTERN", "--generated-sizes", "4,2,2",
                                       "--models", "gin,et", "--seeds", "0,1", "--no-progress",
                                       "--out", "none"])
    with pytest.raises(FloatingPointError, match=r"et seed 0 diverged.*gin seed 0, gin seed 1"):
        experiment.run(config)


def test_a_single_nonzero_seed_warns_that_seeds_is_a_list():
    """--seeds 2 ran seed 2 once, silently: the other commands read --seeds as a count."""
    import warnings

    from et_graph.config import parse
    from et_graph.experiments.gnnbenchmark import GNNBenchmarkConfig

    with pytest.warns(UserWarning, match="runs the single seed 2"):
        config = parse(GNNBenchmarkConfig, ["--seeds", "2"])
    assert config.protocol.seed_list == [2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse(GNNBenchmarkConfig, ["--seeds", "0"])
        parse(GNNBenchmarkConfig, ["--seeds", "0,1,2"])


@pytest.mark.parametrize("cls", [GINBaseline, GatedGCNBaseline])
def test_benchmark_baselines_take_batch_third_like_the_other_graph_models(cls):
    """forward(x, edge_index, edge_attr, batch) differed from ETGraphModel/GINClassifier: a
    batch passed third became edge_attr, was ignored by a model without edge features, and
    every node was pooled into one graph, silently."""
    from torch_geometric.loader import DataLoader

    graphs = [Data(x=torch.randint(0, 3, (4,)), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
                   y=torch.tensor([0.5])) for _ in range(3)]
    batch = next(iter(DataLoader(graphs, batch_size=3)))
    model = cls(1, "regression", hidden=8, num_layers=2, num_node_types=3).eval()
    out = model(batch.x, batch.edge_index, batch.batch)
    assert out.shape == (3,)
    torch.testing.assert_close(model.forward_data(batch), out)
    with pytest.raises(ValueError, match="without edge features"):
        model(batch.x, batch.edge_index, batch.batch, torch.ones(batch.edge_index.size(1), 1))


def test_a_holdout_that_leaves_nothing_to_train_names_the_flag():
    config = GNNBenchmarkDataConfig(dataset="ZINC", holdout_fraction=0.9999, source="partial")
    with pytest.raises(ValueError, match=r"--holdout-fraction\) holds out all 1000 graphs"):
        load_benchmark(config)


def test_the_selection_curve_keeps_the_epochs_of_seeds_that_ran_longer(monkeypatch, tmp_path):
    """From an audit: the curve was cut to the shortest seed, so a seed stopped early by
    --patience hid the others' later epochs (and perhaps their selected epochs)."""
    from et_graph.datasets.gnnbenchmark_common import BenchmarkData
    from et_graph.plots.figures import OwnFigures

    figures = []
    monkeypatch.setattr(OwnFigures, "close", staticmethod(lambda fig=None: figures.append(fig)))
    data = BenchmarkData("toy", "generated", {"train": [], "val": [], "test": []},
                         task="regression", metric="mae", num_outputs=1)
    gnnbenchmark._plot_curves(tmp_path, {"et": [[3.0, 2.0], [3.0, 2.0, 1.0, 0.5]]}, data)
    line = figures[0].axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [1, 2, 3, 4]
    assert list(line.get_ydata()) == [3.0, 2.0, 1.0, 0.5]
    assert "seeds end at epochs 2, 4" in line.get_label()
    # with train.validate_every 2 the curve holds NaN between passes: a line through them drew
    # nothing
    nan = float("nan")
    gnnbenchmark._plot_curves(tmp_path, {"et": [[nan, 2.0, nan, 1.0], [nan, 4.0, nan, 3.0]]},
                              data)
    line = figures[1].axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [2, 4] and list(line.get_ydata()) == [3.0, 2.0]


def test_flags_no_chosen_model_reads_are_named(monkeypatch):
    """ET's flags with ``--models gin`` (and the baselines' with ``--models et``) changed
    nothing without a word."""
    from helpers import assert_unread_flags_named

    assert_unread_flags_named(gnnbenchmark, monkeypatch, [
        (["--models", "gin,gatedgcn", "--blocks", "3"], r"flags for et\.blocks: no model"),
        (["--models", "et", "--baseline-layers", "3"],
         r"flags for baselines\.baseline_layers: no model"),
    ], ["--models", "et,gatedgcn", "--blocks", "3", "--baseline-layers", "3"])


def _write_raw(root: Path, name: str, payload: list) -> Path:
    raw = root / name / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    torch.save(payload, raw / f"{name}_v2.pt")
    return raw / f"{name}_v2.pt"


def _pattern_payload(change=None) -> list:
    splits = generate_sbm_pattern(3, 2, 2, seed=1)
    payload = [[{"x": g.x.argmax(1), "edge_index": g.edge_index, "y": g.y} for g in splits[s]]
               for s in ("train", "val", "test")]
    if change is not None:
        change(payload)
    return payload


def _superpixel_payload(channels: int = 1, node_labels: bool = False, pos: bool = True) -> list:
    def graph(seed: int) -> dict:
        g = torch.Generator().manual_seed(seed)
        graph = {"x": torch.rand(6, channels, generator=g),
                 "edge_index": torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]]),
                 "edge_attr": torch.rand(6, generator=g),
                 "y": torch.randint(0, 10, (6,) if node_labels else (1,), generator=g)}
        if pos:
            graph["pos"] = torch.rand(6, 2, generator=g)
        return graph
    return [[graph(3 * s + i) for i in range(3)] for s in range(3)]


def test_official_files_are_checked_when_they_load_and_named(tmp_path):
    """From a benchmark audit: NaN features or an edge id past the last node failed only at the
    test evaluation, after the training, naming no file; a float id column trained as one
    continuous feature and five one-hot columns under PATTERN ran; an MNIST file with a label
    per node failed inside the loss; a file of two splits, or with an empty split, read as a
    damaged file."""
    def load(name, payload, folder):
        _write_raw(tmp_path / folder, name, payload)
        return load_benchmark(GNNBenchmarkDataConfig(dataset=name, root=str(tmp_path / folder),
                                                     source="official"))

    def nan_x(payload):
        payload[2][0]["x"] = torch.full((payload[2][0]["y"].numel(),), float("nan"))

    def edge_past_end(payload):
        payload[1][1]["edge_index"] = payload[1][1]["edge_index"].clone()
        payload[1][1]["edge_index"][0, 0] = 10_000

    def wide(payload):
        for split in payload:
            for graph in split:
                graph["x"] = torch.nn.functional.one_hot(graph["x"], 5).float()

    with pytest.raises(ValueError, match=r"PATTERN_v2\.pt: test graph 0: x holds NaN or inf"):
        load("PATTERN", _pattern_payload(nan_x), "nan")
    with pytest.raises(ValueError, match=r"PATTERN_v2\.pt: val graph 1: edge_index holds node"):
        load("PATTERN", _pattern_payload(edge_past_end), "edges")
    with pytest.raises(ValueError, match=r"5 feature columns; PATTERN's one-hot node features"):
        load("PATTERN", _pattern_payload(wide), "wide")

    def scaled(payload):  # one-hot times 5, minus 1: taken as one-hot (a data audit)
        for split in payload:
            for graph in split:
                graph["x"] = torch.nn.functional.one_hot(graph["x"], 3).float() * 5 - 1

    with pytest.raises(ValueError, match=r"train graph 0: node 0's features \[.*\] are not "
                                         "one-hot"):
        load("PATTERN", _pattern_payload(scaled), "scaled")

    def float_ids(payload):
        for split in payload:
            for graph in split:
                graph["x"] = graph["x"].float().view(-1, 1)

    as_floats = load("PATTERN", _pattern_payload(float_ids), "floats")
    as_ints = load("PATTERN", _pattern_payload(), "ints")
    assert as_floats.node_dim == 3
    assert torch.equal(as_floats.splits["train"][0].x, as_ints.splits["train"][0].x)
    with pytest.raises(ValueError, match=r"train graph 0: 6 labels, but a graph task needs one"):
        load("MNIST", _superpixel_payload(node_labels=True), "node_labels")
    with pytest.raises(ValueError, match=r"3 pixel channels .*MNIST's superpixels have 1 "):
        load("MNIST", _superpixel_payload(channels=3), "rgb")
    with pytest.raises(ValueError, match=r"no coordinates; CIFAR10's superpixels have 3"):
        load("CIFAR10", _superpixel_payload(channels=3, pos=False), "no_pos")
    assert load("MNIST", _superpixel_payload(), "mnist").node_dim == 3
    with pytest.raises(ValueError, match=r"holds 2 splits; PyG's PATTERN_v2\.pt holds three"):
        load("PATTERN", _pattern_payload()[:2], "two")
    with pytest.raises(ValueError, match=r"its test split holds no graph"):
        load("PATTERN", _pattern_payload(lambda p: p[2].clear()), "empty")


def test_a_replaced_raw_file_is_processed_again(tmp_path):
    """From a benchmark audit: PyG reuses processed/ whenever it exists, so a raw file replaced
    after a first run trained the old data, with identical numbers and no word."""
    import os

    config = GNNBenchmarkDataConfig(dataset="PATTERN", root=str(tmp_path), source="official")
    raw = _write_raw(tmp_path, "PATTERN", _pattern_payload())
    first = load_benchmark(config)

    def flipped(payload):
        for split in payload:
            for graph in split:
                graph["y"] = 1 - graph["y"]

    _write_raw(tmp_path, "PATTERN", _pattern_payload(flipped))
    later = max(p.stat().st_mtime for p in (tmp_path / "PATTERN" / "processed").iterdir()) + 5
    os.utime(raw, (later, later))
    with pytest.warns(UserWarning, match="changed since the processed copies"):
        second = load_benchmark(config)
    assert torch.equal(second.splits["test"][0].y, 1 - first.splits["test"][0].y)
    # replaced with an older modification time (cp -p, unzip): its old copies were used
    # without a word (an audit); the change time, recorded beside them, tells
    _write_raw(tmp_path, "PATTERN", _pattern_payload())
    earlier = min(p.stat().st_mtime for p in (tmp_path / "PATTERN" / "processed").iterdir()) - 86400
    os.utime(raw, (earlier, earlier))
    with pytest.warns(UserWarning, match="changed since the processed copies"):
        third = load_benchmark(config)
    assert torch.equal(third.splits["test"][0].y, first.splits["test"][0].y)
    # the same content under a new change time (a chmod, a copied folder) is not processed
    # again (a review)
    import shutil
    import warnings

    os.chmod(raw, 0o600)
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "PATTERN", copy / "PATTERN", copy_function=shutil.copy2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_benchmark(config)
        load_benchmark(GNNBenchmarkDataConfig(dataset="PATTERN", root=str(copy),
                                              source="official"))


def test_a_zinc_index_file_pyg_would_misread_is_refused(tmp_path, zinc_val):
    # PyG's reader drops an .index file's last character: without a final newline, the last
    # index lost a digit and another molecule loaded without a word (an audit)
    _write_fake_zinc_raw(tmp_path / "ZINC", zinc_val)
    index = tmp_path / "ZINC" / "raw" / "train.index"
    index.write_text("0,1,2,11", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.index does not end with a newline"):
        load_zinc(tmp_path / "ZINC", "train")
    index.write_text("0,1,1,11\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.index repeats the molecule index\(es\) \['1'\]"):
        load_zinc(tmp_path / "ZINC", "train")
    index.write_text("0,1,2,11\n", encoding="utf-8")
    assert [float(g.y) for g in load_zinc(tmp_path / "ZINC", "train")] == [
        float(zinc_val[i].y) for i in (0, 1, 2, 11)]
    # the loader passes the stamp at every load: it is written only when it changed
    stamp = tmp_path / "ZINC" / "subset" / "processed" / "raw_signature.json"
    written = stamp.stat().st_mtime_ns
    load_zinc(tmp_path / "ZINC", "val")
    assert stamp.stat().st_mtime_ns == written


def test_a_root_folder_without_the_file_and_settings_no_source_reads_are_named(tmp_path):
    """From a benchmark audit: ROOT/PATTERN/raw/PATTERN.pt (not _v2) ran on generated graphs
    without a word; --holdout-fraction on PATTERN and --generated-sizes on official files
    changed nothing and were recorded as settings of the run."""
    import warnings

    (tmp_path / "PATTERN" / "raw").mkdir(parents=True)
    torch.save(_pattern_payload(), tmp_path / "PATTERN" / "raw" / "PATTERN.pt")
    with pytest.raises(FileNotFoundError, match=r"holds no PATTERN_v2\.pt .*--source generated"):
        load_benchmark(GNNBenchmarkDataConfig(dataset="PATTERN", root=str(tmp_path)))
    with pytest.warns(ConfigWarning, match=r"holdout_fraction=0\.5: not read by this run's "
                                            r"PATTERN data \(generated source\)"):
        load_benchmark(GNNBenchmarkDataConfig(dataset="PATTERN", root=str(tmp_path),
                                              source="generated", holdout_fraction=0.5,
                                              generated_sizes="4,2,2"))
    _write_raw(tmp_path / "official", "PATTERN", _pattern_payload())
    with pytest.warns(ConfigWarning, match=r"generated_sizes='4,2,2', data_seed=3: not read"):
        official = load_benchmark(GNNBenchmarkDataConfig(
            dataset="PATTERN", root=str(tmp_path / "official"), generated_sizes="4,2,2",
            data_seed=3))
    assert f"data read from {(tmp_path / 'official').resolve()}" in official.notes
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        load_benchmark(GNNBenchmarkDataConfig(dataset="PATTERN", root=str(tmp_path / "official"),
                                              generated_sizes="16,8,8"))  # --quick's sizes


def test_pyg_processing_lines_are_dropped_without_progress(capsys):
    """From a benchmark audit: PyG's "Processing..." and "Done!" printed under --no-progress
    on a GNNBenchmark/ZINC first load (the TU loader dropped them already)."""
    import sys

    from et_graph.datasets.locking import quiet_processing

    with quiet_processing(True):
        print("Processing...", file=sys.stderr)
        print("a warning of the load", file=sys.stderr)
        print("Done!", file=sys.stderr)
    assert capsys.readouterr().err == "a warning of the load\n"
    with quiet_processing(False):
        print("Processing...", file=sys.stderr)
    assert capsys.readouterr().err == "Processing...\n"


def test_the_input_encoder_refuses_zero_types_and_widths():
    from et_graph.baselines.gnnbenchmark_baselines import InputEncoder

    # num_types=0 passed the one-of check and built nn.Linear(None, ...): a torch TypeError
    with pytest.raises(ValueError, match="num_types must be a positive int"):
        InputEncoder(8, num_types=0)
    with pytest.raises(ValueError, match="in_dim must be a positive int"):
        InputEncoder(8, in_dim=0)
    assert isinstance(InputEncoder(8, num_types=3).embed, torch.nn.Embedding)


# ------------------------------------------------------------------------------------------
# Statistics read from the training split only
# ------------------------------------------------------------------------------------------
def _float_feature_graphs(count: int, shift: float, labels: list[int], seed: int,
                          nodes: int = 4) -> list[Data]:
    """Path graphs with two float node features around ``shift``; graph ``i`` of class
    ``labels[i % len(labels)]``."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    return [Data(x=torch.randn(nodes, 2, generator=gen) * (1 + i % 3) + shift,
                 edge_index=edge_index, y=torch.tensor([labels[i % len(labels)]]))
            for i in range(count)]


def test_weighted_accuracy_counts_a_class_that_is_only_predicted_with_recall_zero():
    # pred first, target second: class 2 is only predicted, so it enters with recall 0 (the
    # docstring's rule, the benchmark's accuracy_SBM); reading classes from target alone gave 50.
    pred, target = torch.tensor([0, 0, 2]), torch.tensor([0, 0, 1])
    assert weighted_accuracy(pred, target) == pytest.approx(100 * (1 + 0 + 0) / 3)


def test_node_task_class_weights_come_from_the_training_labels_only():
    """The inverse class frequencies weighting the node loss must be the training split's: the
    test split's labels (a different mix here) must not reach the loss."""
    from et_graph.datasets.gnnbenchmark_common import BenchmarkData
    from et_graph.protocols.gnnbenchmark import loss_function

    def node_graph(labels):
        return Data(x=torch.zeros(len(labels), 1), y=torch.tensor(labels))

    splits = {"train": [node_graph([0, 0, 0, 1]), node_graph([0, 0, 2, 0])],
              "val": [node_graph([1, 1, 2])], "test": [node_graph([1, 1, 1, 2, 2, 0])]}
    data = BenchmarkData("toy", "generated", splits, "node", "weighted_accuracy", 3)
    counts = torch.tensor([6.0, 1.0, 1.0])  # the training labels' classes 0, 1, 2
    weight = counts.sum() / (counts * 3)
    gen = torch.Generator().manual_seed(0)
    out, y = torch.randn(9, 3, generator=gen), torch.tensor([0, 1, 2, 2, 1, 0, 1, 1, 2])
    expected = torch.nn.functional.cross_entropy(out, y, weight=weight)
    torch.testing.assert_close(loss_function(data)(out, y), expected)


def test_et_feature_scaling_is_fitted_on_the_training_split_only(monkeypatch):
    """ET's input standardisation (graph classification with float features) must hold the
    training nodes' mean and std: shifted test (and validation) features must not enter it."""
    from et_graph.datasets.gnnbenchmark_common import BenchmarkData
    from et_graph.protocols import gnnbenchmark as protocol

    splits = {"train": _float_feature_graphs(6, 0.0, [0, 1], seed=0),
              "val": _float_feature_graphs(4, 50.0, [0, 1], seed=1),
              "test": _float_feature_graphs(4, 100.0, [1, 0], seed=2)}
    data = BenchmarkData("toy", "generated", splits, "classification", "accuracy", 2, node_dim=2)
    built = record_calls(monkeypatch, protocol, "build_model")
    small = ETGraphModelConfig(hidden=8, blocks=1, steps=1, heads=1, head_dim=4, pe_dim=0)
    train_one("et", data, 0, GNNBenchmarkTrainConfig(epochs=1, batch_size=8), et=small,
              progress=False)
    features = torch.cat([g.x for g in splits["train"]])
    encoder = built[0].node_encoder
    torch.testing.assert_close(encoder.mean, features.mean(0))
    torch.testing.assert_close(encoder.std, features.std(0, unbiased=False))


def test_where_ctime_is_the_creation_time_every_raw_file_is_hashed(tmp_path, monkeypatch):
    """From a portability audit: on Windows st_ctime is the creation time, which an in-place
    overwrite keeps, so a same-size file replaced with its old mtime kept its known (stale)
    hash and its stale processed copies. There every file is hashed."""
    from et_graph.datasets import gnnbenchmark_common as common

    raw = tmp_path / "raw.pkl"
    raw.write_bytes(b"new content")
    status = raw.stat()
    known = {"raw.pkl": [status.st_size, status.st_ctime_ns, "stale-hash"]}
    assert common._raw_signature([raw], known)["raw.pkl"][2] == "stale-hash"  # trusted here
    monkeypatch.setattr(common, "_CREATION_CTIME", True)
    assert common._raw_signature([raw], known)["raw.pkl"][2] == common._sha256(raw)
