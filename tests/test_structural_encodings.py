"""Random-walk encodings, the log-degree feature, and their wiring through the TU loader and
the TUDataset config."""
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from et_graph.config import parse
from et_graph.datasets import load_tudataset
from et_graph.experiments import tudataset
from et_graph.protocols.gnnbenchmark import ETGraphModelConfig, build_model
from et_graph.transforms import IncidentEdgeSum, LogDegree, RandomWalkPE

DATA = Path(__file__).resolve().parents[1] / "datasets" / "TUDataset"


def ring(n: int) -> Data:
    src = torch.arange(n)
    return Data(x=torch.ones(n, 2), edge_index=to_undirected(torch.stack([src, (src + 1) % n])))


def star(n: int) -> Data:
    leaves = torch.arange(1, n)
    return Data(x=torch.ones(n, 2),
                edge_index=to_undirected(torch.stack([torch.zeros_like(leaves), leaves])))


def test_random_walk_return_probabilities():
    pe = RandomWalkPE(4)(ring(6)).rw_pe
    assert pe.shape == (6, 4) and pe.dtype == torch.float32
    # on a ring: no return after odd steps, 1/2 after two steps, 3/8 after four
    assert torch.allclose(pe, torch.tensor([0.0, 0.5, 0.0, 0.375]).expand(6, 4))
    star_pe = RandomWalkPE(2)(star(5)).rw_pe
    assert torch.allclose(star_pe[:, 1], torch.tensor([1.0, 0.25, 0.25, 0.25, 0.25]))
    lonely = RandomWalkPE(3)(Data(x=torch.ones(2, 1), edge_index=torch.empty(2, 0,
                                                                            dtype=torch.long)))
    assert torch.equal(lonely.rw_pe, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="positive"):
        RandomWalkPE(0)


def test_random_walk_encoding_follows_the_default_dtype():
    """A float64 user gets float64 return probabilities, not float32 ones cast up (rounded
    near 1e-8; they came back float32 whatever the default: a numerics audit)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        pe = RandomWalkPE(3)(star(5)).rw_pe
    finally:
        torch.set_default_dtype(previous)
    assert pe.dtype == torch.float64
    # the leaves return after two steps with probability 1/4 and after three never
    assert pe[1:, 1].tolist() == [0.25] * 4 and pe[0, 2].item() == 0.0
    assert RandomWalkPE(3)(star(5)).rw_pe.dtype == torch.float32


def test_log_degree_is_appended():
    data = LogDegree()(star(5))
    assert data.x.shape == (5, 3)
    assert torch.allclose(data.x[:, 2], torch.tensor([math.log(5)] + [math.log(2)] * 4))
    assert torch.equal(data.x[:, :2], torch.ones(5, 2))
    bare = LogDegree()(Data(edge_index=ring(4).edge_index, num_nodes=4))
    assert torch.allclose(bare.x, torch.full((4, 1), math.log(3)))
    with pytest.raises(ValueError, match="float features"):
        LogDegree()(Data(x=torch.ones(4, 1, dtype=torch.long), edge_index=ring(4).edge_index))


def test_incident_edge_sums_count_bonds_by_type():
    # a path 0 - 1 - 2 (both directions), bond types one-hot: 0-1 single, 1-2 double
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    edge_attr = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    data = IncidentEdgeSum()(Data(x=torch.full((3, 1), 7.0), edge_index=edge_index,
                                  edge_attr=edge_attr))
    assert torch.equal(data.x, torch.tensor([[7.0, 1, 0], [7.0, 1, 1], [7.0, 0, 1]]))
    # the order of the edges does not matter; only the destination of an edge counts
    perm = torch.tensor([3, 0, 2, 1])
    shuffled = IncidentEdgeSum()(Data(x=torch.full((3, 1), 7.0), edge_index=edge_index[:, perm],
                                      edge_attr=edge_attr[perm]))
    assert torch.equal(shuffled.x, data.x)
    one_way = IncidentEdgeSum()(Data(x=torch.zeros(3, 1), edge_index=edge_index[:, :1],
                                     edge_attr=edge_attr[:1]))
    assert torch.equal(one_way.x[:, 1], torch.tensor([0.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="edge features"):
        IncidentEdgeSum()(Data(x=torch.ones(3, 1), edge_index=edge_index))
    with pytest.raises(ValueError, match="rows"):
        IncidentEdgeSum()(Data(x=torch.ones(3, 1), edge_index=edge_index, edge_attr=edge_attr[:3]))
    with pytest.raises(ValueError, match="float features"):
        IncidentEdgeSum()(Data(x=torch.ones(3, 1, dtype=torch.long), edge_index=edge_index,
                               edge_attr=edge_attr))


def test_loader_appends_incident_edge_sums(tmp_path):
    plain, info = load_tudataset(DATA, "MUTAG", tmp_path, pe_dim=0, progress=False)
    graphs, richer = load_tudataset(DATA, "MUTAG", tmp_path, pe_dim=0, progress=False,
                                    incident_edge_sums=True)
    width = info["edge_features"]
    assert width == 4 and richer["node_feature_width"] == info["node_feature_width"] + width
    assert "edge features" in richer["node_features"]
    for g, p in zip(graphs[:5], plain[:5]):
        assert torch.equal(g.x[:, :-width], p.x)
        counts = torch.zeros(g.num_nodes, width)
        for (_, dst), attr in zip(g.edge_index.t().tolist(), g.edge_attr):
            counts[dst] += attr
        assert torch.equal(g.x[:, -width:], counts)
        # every atom's bonds, counted by type, add up to its degree
        assert torch.equal(g.x[:, -width:].sum(1), torch.bincount(g.edge_index[1],
                                                                  minlength=g.num_nodes).float())
    config = parse(tudataset.CONFIG, ["--dataset", "MUTAG", "--incident-edge-sums",
                                      "--root", str(DATA), "--cache", str(tmp_path)])
    loaded, described = tudataset.load_graphs(config.data)
    assert described["node_feature_width"] == richer["node_feature_width"]
    assert torch.equal(loaded[0].x, graphs[0].x)
    with pytest.raises(ValueError, match="has none"):
        load_tudataset(DATA, "PROTEINS", tmp_path, pe_dim=0, progress=False,
                       incident_edge_sums=True)


def test_loader_adds_the_encodings(tmp_path):
    plain, info = load_tudataset(DATA, "MUTAG", tmp_path, pe_dim=0, progress=False)
    graphs, richer = load_tudataset(DATA, "MUTAG", tmp_path, pe_dim=0, progress=False,
                                    rw_pe_dim=5, degree_feature=True)
    assert richer["node_feature_width"] == info["node_feature_width"] + 1
    assert "log1p(degree)" in richer["node_features"]
    g, p = graphs[0], plain[0]
    assert torch.equal(g.x[:, :-1], p.x)
    degrees = torch.bincount(g.edge_index[0], minlength=g.num_nodes).float()
    assert torch.allclose(g.x[:, -1], torch.log1p(degrees))
    assert g.rw_pe.shape == (g.num_nodes, 5) and not hasattr(p, "rw_pe")
    with pytest.raises(ValueError, match="rw_pe_dim"):
        load_tudataset(DATA, "MUTAG", tmp_path, pe_dim=0, progress=False, rw_pe_dim=-1)


def test_config_flags_reach_the_model():
    config = parse(tudataset.CONFIG, ["--dataset", "MUTAG", "--readout", "cls",
                                      "--rw-pe-dim", "6", "--degree-feature"])
    assert config.data.rw_pe_dim == 6 and config.data.degree_feature
    info = {"node_feature_width": 8, "classes": 2, "edge_features": 0}
    et = tudataset.model_factories(config, info)["et"]()
    assert et.readout == "cls" and et.rw_encoder.in_features == 6
    assert et.head[0].in_features == config.et.hidden
    default = parse(tudataset.CONFIG, [])
    # the general preset (benchmarks/tu_general_preset.py): random-walk encodings, no Laplacian
    # PE; then two message-passing layers and the sum readout (chosen on inner validation)
    assert not default.data.degree_feature and default.data.rw_pe_dim == 16
    assert default.data.pe_dim == 0 and default.et.readout == "cls_sum_mean"
    assert default.et.message_passing_layers == 2
    assert (default.et.blocks, default.et.steps, default.et.alpha) == (2, 1, 0.34)


def _hidden_and_dropout(model) -> tuple[int, float]:
    linear, dropout = model.head[0], model.head[2]
    return linear.out_features, dropout.p


def test_baseline_defaults_and_the_mlps_own_width_and_dropout():
    info = {"node_feature_width": 8, "classes": 2, "edge_features": 0}
    default = parse(tudataset.CONFIG, [])
    # chosen separately on inner validation (defaults_{gin,mlp}_width_dropout probes)
    factories = tudataset.model_factories(default, info)
    assert default.baselines.gin_layers == 4
    assert _hidden_and_dropout(factories["gin"]()) == (64, 0.2)
    assert _hidden_and_dropout(factories["structure_agnostic"]()) == (128, 0.5)
    # none: the MLP follows GIN's knobs, which is what every preset written before the split
    # pins (so none of them changes)
    shared = parse(tudataset.CONFIG, ["--gin-hidden", "32", "--baseline-dropout", "0.3",
                                      "--mlp-hidden", "none", "--mlp-dropout", "none"])
    mlp = tudataset.model_factories(shared, info)["structure_agnostic"]()
    assert _hidden_and_dropout(mlp) == (32, 0.3)


def test_gnnbenchmark_et_readout():
    data = type("D", (), dict(node_dim=3, num_outputs=2, task="classification", edge_dim=None,
                              num_edge_types=None, num_node_types=None, rw_pe_dim=0))()
    model = build_model("et", data, ETGraphModelConfig(hidden=8, heads=2, head_dim=4,
                                                       readout="cls_sum_mean"))
    assert model.readout == "cls_sum_mean" and model.head[0].in_features == 24


def test_random_walk_pe_of_a_large_graph_prints_no_sparse_notice():
    """Above PyG's dense-size limit the walk runs on a CSR matrix, whose one-time "beta" notices
    are silenced. Run in a fresh interpreter (the notices fire once per process) with
    UserWarnings raised as errors."""
    script = (
        "import torch\n"
        "from torch_geometric.data import Data\n"
        "from torch_geometric.utils import to_undirected\n"
        "from et_graph.transforms import RandomWalkPE\n"
        "i = torch.arange(3000)\n"
        "data = Data(num_nodes=3000, edge_index=to_undirected(torch.stack([i, (i + 1) % 3000])))\n"
        "pe = RandomWalkPE(4)(data).rw_pe\n"
        "assert pe.shape == (3000, 4) and torch.allclose(pe[:, 1], torch.full((3000,), 0.5))\n"
    )
    result = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", script],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_structure_transforms_check_their_input_and_ignore_edge_weights():
    """From an audit: PyG's random-walk PE divided by the weighted degree without the weight (a
    certain return read 0.25 with weights 2); integer bond ids were summed (1 + 3 = 4); a
    missing or out-of-range edge_index gave raw errors."""
    weighted = ring(6)
    weighted.edge_weight = torch.full((weighted.edge_index.size(1),), 2.0)
    pe = RandomWalkPE(4)(weighted)
    assert torch.allclose(pe.rw_pe, torch.tensor([0.0, 0.5, 0.0, 0.375]).expand(6, 4))
    assert torch.equal(pe.edge_weight, torch.full((12,), 2.0))  # kept on the graph
    path = Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
                edge_weight=torch.full((4,), 0.5))
    assert torch.allclose(RandomWalkPE(2)(path).rw_pe, torch.tensor([[0.0, 0.5], [0.0, 1.0],
                                                                     [0.0, 0.5]]))  # not 4.0
    ids = Data(x=torch.ones(3, 1), edge_index=path.edge_index, edge_attr=torch.tensor([1, 1, 3, 3]))
    with pytest.raises(ValueError, match="category ids.*one-hot"):
        IncidentEdgeSum()(ids)
    # integer 0/1 columns are refused too since session 70 (ids or a code: a graph cannot
    # tell, and a molecule whose ids were 0 or 1 was summed); as floats they are counted
    one_hot = Data(x=torch.ones(3, 1), edge_index=path.edge_index,
                   edge_attr=torch.tensor([[1.0], [1.0], [0.0], [0.0]]))
    assert IncidentEdgeSum()(one_hot).x[:, 1].tolist() == [1.0, 1.0, 0.0]
    for transform in (RandomWalkPE(2), LogDegree(), IncidentEdgeSum()):
        name = type(transform).__name__
        with pytest.raises(ValueError, match=f"{name} reads data.edge_index"):
            transform(Data(x=torch.ones(3, 1), edge_attr=torch.ones(4, 1)))
        bad = Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0, 5], [1, 0]]),
                   edge_attr=torch.ones(2, 1))
        with pytest.raises(ValueError, match=f"{name}: edge_index has node ids in \\[0, 5\\]"):
            transform(bad)


def test_random_walk_encoding_counts_a_pair_stored_twice_once():
    """From a transforms audit: PyG's dense path (up to 2,000 nodes) assigned a duplicate
    edge's transition once but counted it twice in the degree, so 0 -> 1 stored twice gave a
    return probability of 0.25 alone and 0.5 inside a batch of 2,100 nodes."""
    from torch_geometric.data import Batch, Data

    from et_graph.transforms import RandomWalkPE

    doubled = Data(edge_index=torch.tensor([[0, 0, 1, 1, 2], [1, 1, 0, 2, 1]]), num_nodes=3)
    alone = RandomWalkPE(2)(doubled.clone()).rw_pe
    batched = RandomWalkPE(2)(Batch.from_data_list([doubled] * 700)).rw_pe[:3]
    simple = RandomWalkPE(2)(Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
                                  num_nodes=3)).rw_pe
    assert torch.allclose(alone, simple) and torch.allclose(batched, simple)
    assert alone[0].tolist() == [0.0, 0.5]
    assert doubled.edge_index.size(1) == 5  # the caller's edges are left as they were


def test_the_cls_laplacian_encoding_refuses_a_batch_of_graphs():
    """From a transforms audit: on a Batch it encoded the batch as one graph with one CLS node
    ([1, k] instead of [G, k]), without a word."""
    from torch_geometric.data import Batch, Data

    from et_graph.transforms import CLSLaplacianPE

    path = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), num_nodes=3)
    with pytest.raises(ValueError, match="apply it to each graph"):
        CLSLaplacianPE(2)(Batch.from_data_list([path, path]))
    assert CLSLaplacianPE(2)(Batch.from_data_list([path])).cls_lap_pe.shape == (1, 2)


def test_encoders_and_feature_transforms_refuse_what_they_cannot_read():
    """From a transforms audit: RandomWalkPE(2.5) and CLSLaplacianPE(2.5) failed only on the
    first graph (True counted as 1); quantile_normal truncated integer columns to zeros and
    'standard' crashed on them; neighbourhood_statistics raised raw indexing errors for an id
    past the last node or a float edge_index."""
    from et_graph.transforms import CLSLaplacianPE, RandomWalkPE, neighbourhood_statistics
    from et_graph.transforms.features import quantile_normal, transform_features

    for encoder in (RandomWalkPE, CLSLaplacianPE):
        for k in (2.5, True, 0):
            with pytest.raises(ValueError, match="must be a positive int"):
                encoder(k)
    counts = torch.tensor([[3], [1], [2], [2]])
    assert torch.allclose(quantile_normal(counts), quantile_normal(counts.float()))
    assert quantile_normal(counts).dtype == torch.float32
    assert transform_features(torch.tensor([[1], [5], [9]]), "standard").view(-1).tolist() == [
        -1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="NaN or inf"):
        quantile_normal(torch.tensor([[1.0], [float("nan")]]))
    x = torch.randn(3, 2)
    for edges, message in ((torch.tensor([[0], [5]]), "node ids in"),
                           (torch.tensor([[0.0], [1.0]]), "dtype")):
        with pytest.raises(ValueError, match=message):
            neighbourhood_statistics(x, edges, ("mean",))


def test_small_input_checks_of_the_public_loaders_and_encodings():
    """From a transforms audit: a NaN made a whole PLE column NaN; planted_anomaly_graph took a
    NumPy node count but not a NumPy seed; load_anomaly_dataset(name="") loaded Tolokers."""
    import numpy as np

    from et_graph.datasets import load_anomaly_dataset
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.transforms.features import piecewise_linear_encoding

    with pytest.raises(ValueError, match="NaN or inf"):
        piecewise_linear_encoding(torch.tensor([[1.0], [float("nan")], [2.0]]), 2)
    assert torch.equal(planted_anomaly_graph(50, seed=np.int64(3)).x,
                       planted_anomaly_graph(50, seed=3).x)
    with pytest.raises(ValueError, match="name is empty"):
        load_anomaly_dataset(name="")
