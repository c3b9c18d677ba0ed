"""Bounded-memory inference: ETConv.forward_chunked equals the full pass."""
import pytest
import torch

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


def test_detector_scores_in_chunks_like_the_full_pass():
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.detectors import ETDetector, MLPDetector
    from et_graph.protocols.anomaly import make_splits

    data = planted_anomaly_graph(200, seed=4)
    train, val, _ = make_splits(data, "paper", 1, 0.4, 0)[0].masks(200)
    full = ETDetector(epochs=3, steps=2, hidden=16).fit(data, train, val)
    chunked = ETDetector(epochs=3, steps=2, hidden=16, chunk_size=17).fit(data, train, val)
    torch.testing.assert_close(chunked.decision_score_, full.decision_score_, rtol=1e-5,
                               atol=1e-6)
    assert chunked.fit_info_["best_epoch"] == full.fit_info_["best_epoch"]
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
