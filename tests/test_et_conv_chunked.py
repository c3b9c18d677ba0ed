"""Bounded-memory inference: ETConv.forward_chunked equals the full pass."""
import pytest
import torch

from et_graph.exceptions import ConfigWarning
from et_graph.nn import ETConv

pytestmark = pytest.mark.usefixtures("one_thread")


def graph(num_nodes=90, num_edges=700, seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes - 5, (2, num_edges), generator=gen)  # 5 isolated
    edge_index[:, :10] = edge_index[0, :10].repeat(2, 1)  # self-loops (ignored)
    edge_index = torch.cat([edge_index, edge_index[:, :20]], 1)  # duplicates (counted)
    return torch.randn(num_nodes, 16, generator=gen, dtype=torch.float64), edge_index


@pytest.mark.parametrize("weights", [None, "edge", "head"])
@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_chunked_equals_full_pass(weights, chunk_size):
    x, edge_index = graph()
    torch.manual_seed(0)
    conv = ETConv(16, heads=3, head_dim=4, steps=3, alpha=0.3).double().eval()
    weight = None
    if weights is not None:
        shape = (edge_index.size(1),) if weights == "edge" else (edge_index.size(1), 3)
        weight = torch.rand(shape, dtype=torch.float64)
    full = conv(x, edge_index, weight)
    chunked = conv.forward_chunked(x, edge_index, weight, chunk_size=chunk_size)
    torch.testing.assert_close(chunked, full, rtol=1e-10, atol=1e-10)


def test_chunked_float32_and_softmax_hopfield():
    x, edge_index = graph(seed=3)
    conv = ETConv(16, heads=2, head_dim=8, steps=2, hopfield="softmax").eval()
    torch.testing.assert_close(conv.forward_chunked(x.float(), edge_index, chunk_size=10),
                               conv(x.float(), edge_index), rtol=1e-4, atol=1e-5)


def test_chunked_rejects_bad_input():
    x, edge_index = graph()
    conv = ETConv(16, noise_std=0.1).double()
    with pytest.raises(ValueError, match="eval"):
        conv.forward_chunked(x, edge_index)
    conv.eval()
    with pytest.raises(ValueError, match="chunk_size"):
        conv.forward_chunked(x, edge_index, chunk_size=0)
    with pytest.raises(ValueError, match="node ids|range"):
        conv.forward_chunked(x, edge_index + 100)


@pytest.mark.parametrize("chunking", [{"chunk_size": 17}, {"chunk_edges": 25}])
def test_detector_scores_in_chunks_like_the_full_pass(chunking, monkeypatch):
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.detectors import ETDetector, MLPDetector
    from et_graph.protocols.anomaly import make_splits

    data = planted_anomaly_graph(200, seed=4)
    train, val, _ = make_splits(data, "paper", 1, 0.4, 0)[0].masks(200)
    full = ETDetector(epochs=3, steps=2, hidden=16).fit(data, train, val)
    calls = []
    real = ETConv.forward_chunked

    def spy(self, *args, **kwargs):
        calls.append(kwargs)
        return real(self, *args, **kwargs)

    # the outputs match either way, so the settings must be seen to reach the layer
    monkeypatch.setattr(ETConv, "forward_chunked", spy)
    chunked = ETDetector(epochs=3, steps=2, hidden=16, **chunking).fit(data, train, val)
    assert len(calls) >= 4  # every epoch's validation and the final scoring
    for name, value in chunking.items():
        assert all(call[name] == value for call in calls), (name, calls[:2])
    torch.testing.assert_close(chunked.decision_score_, full.decision_score_, rtol=1e-5,
                               atol=1e-6)
    assert chunked.fit_info_["best_epoch"] == full.fit_info_["best_epoch"]
    assert chunked.chunking() == chunking
    with pytest.raises(ValueError, match="ETDetector only"):
        MLPDetector(chunk_size=10)
    with pytest.raises(ValueError, match="positive integer"):
        ETDetector(chunk_size=0)


@pytest.mark.parametrize("readout", ["first_last", "ego_neighbour", "ego_two_hop"])
def test_anomaly_net_scores_in_chunks_like_the_full_pass(readout):
    from et_graph.nn.models import ETAnomalyNet

    x, edge_index = graph(seed=5)
    torch.manual_seed(0)
    net = ETAnomalyNet(16, 12, heads=2, head_dim=4, steps=2, readout=readout).double().eval()
    with torch.no_grad():
        full = net(x, edge_index)
        for chunk_size in (1, 13, 500):
            torch.testing.assert_close(net(x, edge_index, chunk_size=chunk_size), full,
                                       rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="inference"):
        net(x, edge_index, chunk_size=8)  # gradients enabled


def test_a_numpy_integer_chunk_size_is_read_as_an_int():
    import numpy as np

    from et_graph.detectors import ETDetector

    torch.manual_seed(0)
    conv = ETConv(8, heads=2, head_dim=4, steps=2).double().eval()
    x = torch.randn(20, 8, dtype=torch.float64)
    edge_index = torch.randint(0, 20, (2, 60))
    torch.testing.assert_close(conv.forward_chunked(x, edge_index, chunk_size=np.int64(7)),
                               conv.forward_chunked(x, edge_index, chunk_size=7))
    assert ETDetector(chunk_size=np.int32(64)).chunk_size == 64
    with pytest.raises(ValueError, match="positive integer"):
        ETDetector(chunk_size=7.0)


def hub_graph(num_nodes=60, seed=0):
    """A graph whose node 3 receives an edge from every other node (a hub), plus random
    edges, self-loops and duplicates."""
    gen = torch.Generator().manual_seed(seed)
    others = torch.tensor([n for n in range(num_nodes) if n != 3])
    hub = torch.stack([others, torch.full_like(others, 3)])
    rest = torch.randint(0, num_nodes, (2, 150), generator=gen)
    edge_index = torch.cat([hub, rest, rest[:, :10]], 1)
    return torch.randn(num_nodes, 16, generator=gen, dtype=torch.float64), edge_index


def test_destination_chunks_cap_nodes_and_in_edges():
    from et_graph.nn.validation import destination_chunks

    _, edge_index = hub_graph()
    degree = torch.bincount(edge_index[1], minlength=60)
    in_ptr = torch.cat([degree.new_zeros(1), degree.cumsum(0)])
    assert destination_chunks(in_ptr, 25) == [(0, 25), (25, 50), (50, 60)]
    for chunk_size, chunk_edges in [(25, 1), (25, 7), (4, 30), (100, 40), (100, 10_000)]:
        chunks = destination_chunks(in_ptr, chunk_size, chunk_edges)
        assert chunks[0][0] == 0 and chunks[-1][1] == 60
        assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))  # contiguous, in order
        for start, end in chunks:
            assert 0 < end - start <= chunk_size
            edges = int(in_ptr[end] - in_ptr[start])
            assert edges <= chunk_edges or end - start == 1, (chunk_size, chunk_edges, start)
            # greedy: the next node would have broken a cap
            if end < 60:
                assert (end + 1 - start > chunk_size
                        or int(in_ptr[end + 1] - in_ptr[start]) > chunk_edges)
    assert (3, 4) in destination_chunks(in_ptr, 100, 40)  # the hub (59 in-edges) alone


@pytest.mark.parametrize("chunk_edges", [1, 6, 40, 10_000])
def test_edge_capped_chunks_equal_the_full_pass_and_bound_each_chunk(chunk_edges, monkeypatch):
    """chunk_size counts nodes: a chunk holding a hub formed arrays as long as all of its
    chunk's in-edges. chunk_edges caps them (a hub alone is its own chunk), same tokens."""
    from et_graph import energy as E

    x, edge_index = hub_graph()
    weight = torch.rand(edge_index.size(1), 3, dtype=torch.float64)
    torch.manual_seed(0)
    conv = ETConv(16, heads=3, head_dim=4, steps=2, alpha=0.3).double().eval()
    full = conv(x, edge_index, weight)
    sizes = []
    real = E.edge_coefficients

    def spy(k, q, src, *args, **kwargs):
        sizes.append((src.numel(), args[-1]))  # (edges, destination nodes) of one chunk
        return real(k, q, src, *args, **kwargs)

    monkeypatch.setattr(E, "edge_coefficients", spy)
    chunked = conv.forward_chunked(x, edge_index, weight, chunk_size=20, chunk_edges=chunk_edges)
    torch.testing.assert_close(chunked, full, rtol=1e-10, atol=1e-10)
    assert sizes and all(edges <= chunk_edges or nodes == 1 for edges, nodes in sizes)
    assert max(nodes for _, nodes in sizes) <= 20
    if chunk_edges == 40:
        assert max(edges for edges, _ in sizes) > 40  # the hub's 59 in-edges, alone


def test_edge_caps_through_the_net_the_detector_and_the_config():
    from et_graph.config import parse
    from et_graph.detectors import ETDetector, MLPDetector
    from et_graph.nn.models import ETAnomalyNet
    from et_graph.protocols.anomaly_config import AnomalyConfig, make_detector

    x, edge_index = hub_graph(seed=2)
    torch.manual_seed(0)
    net = ETAnomalyNet(16, 12, heads=2, head_dim=4, steps=2, readout="ego_two_hop"
                       ).double().eval()
    with torch.no_grad():
        full = net(x, edge_index)
        for kwargs in ({"chunk_edges": 9}, {"chunk_size": 5, "chunk_edges": 30}):
            torch.testing.assert_close(net(x, edge_index, **kwargs), full, rtol=1e-10,
                                       atol=1e-10)
    with pytest.raises(ValueError, match="inference"):
        net(x, edge_index, chunk_edges=8)  # gradients enabled

    with pytest.raises(ValueError, match="ETDetector only"):
        MLPDetector(chunk_edges=10)
    with pytest.raises(ValueError, match="chunk_edges must be a positive integer"):
        ETDetector(chunk_edges=0)
    config = parse(AnomalyConfig, ["--inference-chunk-size", "64", "--inference-chunk-edges",
                                   "500"])
    assert make_detector(config, "et", 0).chunking() == {"chunk_size": 64, "chunk_edges": 500}
    assert make_detector(config, "mlp", 0).chunking() == {}
    with pytest.raises(ValueError, match="inference_chunk_edges must be a positive integer"):
        parse(AnomalyConfig, ["--inference-chunk-edges", "0"])


def test_a_chunked_run_leaves_out_the_full_graph_energy_row(tmp_path):
    """From a large-graph audit: the energy row (on by default) and its trajectory ran full
    graph passes beside chunked scoring, 4 GiB above the chunks' 77 MiB on a hub graph."""
    from et_graph.config import parse
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.experiments import anomaly
    from et_graph.protocols.anomaly_config import AnomalyConfig

    argv = ["--models", "et", "--seeds", "1", "--epochs", "2", "--hidden", "8", "--no-progress",
            "--threads", "1", "--inference-chunk-size", "50", "--out", str(tmp_path / "a")]
    data = planted_anomaly_graph(200, seed=2)
    with pytest.warns(ConfigWarning, match="energy row and its trajectory are full-graph"):
        chunked = anomaly.run(parse(AnomalyConfig, argv), data=data)
    assert set(chunked["models"]) == {"et"} and "et_energy_trained" not in chunked["protocol"]
    full = anomaly.run(parse(AnomalyConfig, [*argv[:-6], "--out", str(tmp_path / "b")]),
                       data=data)
    assert "et_energy_trained" in full["models"]
