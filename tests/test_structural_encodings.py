"""Random-walk encodings, the log-degree feature, and their wiring through the TU loader and
the TUDataset config."""
import math
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from et_graph.config import parse
from et_graph.datasets import load_tudataset
from et_graph.experiments import tudataset
from et_graph.protocols.gnnbenchmark import ETGraphModelConfig, build_model
from et_graph.transforms import LogDegree, RandomWalkPE

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


def test_log_degree_is_appended():
    data = LogDegree()(star(5))
    assert data.x.shape == (5, 3)
    assert torch.allclose(data.x[:, 2], torch.tensor([math.log(5)] + [math.log(2)] * 4))
    assert torch.equal(data.x[:, :2], torch.ones(5, 2))
    bare = LogDegree()(Data(edge_index=ring(4).edge_index, num_nodes=4))
    assert torch.allclose(bare.x, torch.full((4, 1), math.log(3)))
    with pytest.raises(ValueError, match="float features"):
        LogDegree()(Data(x=torch.ones(4, 1, dtype=torch.long), edge_index=ring(4).edge_index))


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
    config = parse(tudataset.CONFIG, ["--dataset", "MUTAG", "--readout", "cls_sum_mean",
                                      "--rw-pe-dim", "6", "--degree-feature"])
    assert config.data.rw_pe_dim == 6 and config.data.degree_feature
    info = {"node_feature_width": 8, "classes": 2, "edge_features": 0}
    et = tudataset.model_factories(config, info)["et"]()
    assert et.readout == "cls_sum_mean" and et.rw_encoder.in_features == 6
    assert et.head[0].in_features == 3 * config.et.hidden
    default = parse(tudataset.CONFIG, [])
    # the general preset (benchmarks/tu_general_preset.py): random-walk encodings, no Laplacian PE
    assert not default.data.degree_feature and default.data.rw_pe_dim == 16
    assert default.data.pe_dim == 0 and default.et.readout == "cls"
    assert (default.et.blocks, default.et.steps, default.et.alpha) == (2, 1, 0.34)


def test_gnnbenchmark_et_readout():
    data = type("D", (), dict(node_dim=3, num_outputs=2, task="classification", edge_dim=None,
                              num_edge_types=None, num_node_types=None, rw_pe_dim=0))()
    model = build_model("et", data, ETGraphModelConfig(hidden=8, heads=2, head_dim=4,
                                                       readout="cls_sum_mean"))
    assert model.readout == "cls_sum_mean" and model.head[0].in_features == 24
