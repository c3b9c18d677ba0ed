"""Message-passing tokens for the anomaly ET (``MeanMessagePassing``,
``ETAnomalyNet(message_passing_layers=L)``, ``--message-passing-layers``): the layers against a
hand computation, where the network uses them, and the switch through the detector and CLI."""
import pytest
import torch
from helpers import planted_graph_with_masks

from et_graph.config import parse
from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import ETDetector, ETModelConfig
from et_graph.nn.encoders import MeanMessagePassing
from et_graph.nn.models import ETAnomalyNet
from et_graph.protocols.anomaly import energy_trajectory, make_splits
from et_graph.protocols.anomaly_config import AnomalyConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def graph():
    return planted_graph_with_masks(240, seed=3)


def hand_mean_message_passing(layers: MeanMessagePassing, h: torch.Tensor,
                              edges: list[tuple[int, int]]) -> torch.Tensor:
    """The layers' formula node by node: the mean over the in-edges ``j -> i`` with ``j != i``
    (a repeated edge counts each time), zero without one."""
    for norm, mlp in zip(layers.norms, layers.mlps):
        normed = norm(h)
        rows = []
        for i in range(h.size(0)):
            sources = [j for j, k in edges if k == i and j != i]
            mean = (torch.stack([normed[j] for j in sources]).mean(0) if sources
                    else torch.zeros_like(normed[i]))
            rows.append(mlp(torch.cat([normed[i], mean]).unsqueeze(0)).squeeze(0))
        h = h + torch.stack(rows)
    return h


def test_layers_match_a_hand_computation_in_float64():
    torch.manual_seed(0)
    # 0 hears 1, 2 and itself; 1 hears 0 twice; 2 hears 3; 3 nobody; 4 only itself.
    edges = [(1, 0), (2, 0), (0, 0), (0, 1), (0, 1), (3, 2), (4, 4)]
    edge_index = torch.tensor(edges).t()
    model = ETAnomalyNet(5, 6, message_passing_layers=2).double().eval()
    with torch.no_grad():  # non-trivial LayerNorms, so that a skipped or shared norm shows
        for i, norm in enumerate(model.message_passing.norms):
            norm.weight.normal_(1.0, 0.3)
            norm.bias.normal_(0.0, 0.1 * (i + 1))
    x = torch.randn(5, 5, dtype=torch.float64)
    tokens = model.input_tokens(x, edge_index)
    expected = hand_mean_message_passing(model.message_passing, model.embed(x), edges)
    assert torch.allclose(tokens, expected, atol=1e-12)
    assert not torch.allclose(tokens, model.embed(x), atol=1e-3)


def test_zero_layers_is_the_network_as_before():
    torch.manual_seed(0)
    before = ETAnomalyNet(6, 8)
    torch.manual_seed(0)
    none = ETAnomalyNet(6, 8, message_passing_layers=0)
    assert none.message_passing is None
    assert before.state_dict().keys() == none.state_dict().keys()
    assert all(torch.equal(before.state_dict()[k], v) for k, v in none.state_dict().items())
    x = torch.randn(7, 6)
    assert torch.equal(none.input_tokens(x, torch.tensor([[0, 1], [1, 2]])), none.embed(x))
    with_layers = ETAnomalyNet(6, 8, message_passing_layers=2)
    assert {k for k in with_layers.state_dict() if k.startswith("message_passing.")} == {
        f"message_passing.{part}.{i}.{p}" for i in range(2) for part, p in
        [("norms", "weight"), ("norms", "bias"), ("mlps", "0.weight"), ("mlps", "0.bias"),
         ("mlps", "3.weight"), ("mlps", "3.bias")]}


def test_descent_readout_chunks_and_energy_start_from_the_message_passing_tokens():
    torch.manual_seed(1)
    data = planted_anomaly_graph(60, num_features=6, seed=2)
    model = ETAnomalyNet(6, 8, steps=2, readout="ego_two_hop", message_passing_layers=1).eval()
    first = model.input_tokens(data.x, data.edge_index)
    assert not torch.allclose(first, model.embed(data.x), atol=1e-3)
    last = model.descend(first, data.edge_index)
    normed = model.conv.norm(last)
    hop = model.neighbour_means(data.edge_index, normed)
    expected = model.readout(torch.cat(
        [model.conv.norm(first), normed, hop, model.neighbour_means(data.edge_index, hop)], -1))
    logits = model(data.x, data.edge_index)
    assert torch.allclose(logits, expected.squeeze(-1), atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(model(data.x, data.edge_index, chunk_size=7), logits, atol=1e-5)
        # The layers' MLPs run chunk by chunk too (no [N, 2 * hidden] input held).
        calls = []
        hook = model.message_passing.mlps[0].register_forward_hook(
            lambda module, inputs, output: calls.append(inputs[0].size(0)))
        chunked_first = model.input_tokens(data.x, data.edge_index, chunk_size=7)
        hook.remove()
        assert calls == [7] * 8 + [4] and torch.allclose(chunked_first, first, atol=1e-6)
    with pytest.raises(ValueError, match="inference"):
        model.input_tokens(data.x, data.edge_index, chunk_size=7)
    assert torch.allclose(model.energy_score(data.x, data.edge_index),
                          model.conv.node_energy(last, data.edge_index), atol=1e-6)


def test_gradients_reach_every_message_passing_parameter():
    torch.manual_seed(2)
    data = planted_anomaly_graph(40, num_features=6, seed=5)
    model = ETAnomalyNet(6, 8, message_passing_layers=2, dropout=0.2).train()
    model(data.x, data.edge_index).sum().backward()
    for name, parameter in model.message_passing.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_bad_layer_counts_and_shapes_are_refused():
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="message_passing_layers"):
            ETAnomalyNet(6, 8, message_passing_layers=bad)
    with pytest.raises(ValueError, match="message_passing_layers"):
        ETModelConfig(message_passing_layers=-1)
    for channels, layers in ((0, 1), (8, 0)):
        with pytest.raises(ValueError, match="positive"):
            MeanMessagePassing(channels, layers)
    with pytest.raises(ValueError, match="dropout"):
        MeanMessagePassing(8, 1, dropout=1.0)
    with pytest.raises(ValueError, match=r"h must be \[N, 8\]"):
        MeanMessagePassing(8, 1)(torch.zeros(3, 5), lambda h: h)


def test_detector_fits_scores_and_traces_with_the_switch(graph):
    assert parse(AnomalyConfig, ["--message-passing-layers", "2"]).et.message_passing_layers == 2
    assert AnomalyConfig().et.message_passing_layers == 0
    det = ETDetector(message_passing_layers=1, steps=1, epochs=2, hidden=16,
                     label_trick=True).fit(graph)
    assert det.model_.message_passing is not None
    scores = det.decision_function(graph)
    assert scores.shape == (240,) and torch.isfinite(scores).all()
    split = make_splits(graph, "paper", 1, 0.4, split_seed=0)[0]
    trace = energy_trajectory(det, graph, split, extra_steps=1)
    assert len(trace["all"]) == 1 + 1 + 1
    # Sampled mini-batches: the layers average over each batch's own subgraph.
    sampled = ETDetector(message_passing_layers=1, epochs=2, hidden=16, batch_size=64,
                         num_neighbors=[5, 5]).fit(graph)
    assert torch.isfinite(sampled.decision_function(graph)).all()


def test_multi_relation_network_averages_over_every_relation():
    """With per-relation attention the layers read all in-edges, whatever their relation (as
    the ego/neighbour readout does); the descent keeps its relations."""
    torch.manual_seed(3)
    data = planted_anomaly_graph(60, num_features=6, seed=6)
    edge_type = torch.randint(0, 3, (data.edge_index.size(1),),
                              generator=torch.Generator().manual_seed(0))
    model = ETAnomalyNet(6, 8, num_relations=3, message_passing_layers=1,
                         readout="ego_neighbour").eval()
    first = model.input_tokens(data.x, data.edge_index)
    untyped = ETAnomalyNet(6, 8, message_passing_layers=1).eval()
    untyped.embedding.load_state_dict(model.embedding.state_dict())
    untyped.message_passing.load_state_dict(model.message_passing.state_dict())
    assert torch.equal(first, untyped.input_tokens(data.x, data.edge_index))
    last = model.descend(first, data.edge_index, edge_type)
    logits = model(data.x, data.edge_index, edge_type=edge_type)
    normed = model.conv.norm(last)
    expected = model.readout(torch.cat(
        [model.conv.norm(first), normed, model.neighbour_means(data.edge_index, normed)], -1))
    assert torch.allclose(logits, expected.squeeze(-1), atol=1e-6)


@pytest.mark.parametrize("edge_index, message", [
    (torch.tensor([[3, 4, 5, 6], [4, 5, 3, 7]]), "node ids in \\[3, 7\\] but there are 6 nodes"),
    (torch.tensor([[0.0, 1.0], [1.0, 2.0]]), "edge_index must hold integer node ids"),
])
def test_message_passing_tokens_check_the_graph_before_reading_it(edge_index, message):
    """From a layer audit: with message-passing layers, an id past the last node reached an
    unchecked sparse tensor and aborted the process (heap corruption); a float edge_index gave
    "bincount_cpu not implemented for 'Float'"."""
    from et_graph.nn.models import ETAnomalyNet

    net = ETAnomalyNet(3, 8, message_passing_layers=1).eval()
    with pytest.raises(ValueError, match=message):
        net(torch.randn(6, 3), edge_index)


def test_a_fitted_detector_keeps_nothing_of_the_graphs_it_scored():
    """From a large-graph audit: a fitted detector kept the graph-sized neighbour-mean matrix
    (and ETConv the graph's sorted edges) after scoring, as long as the detector lived."""
    from et_graph.detectors import UnsupervisedETDetector
    from et_graph.nn.edge_cache import EdgeCache

    graph = planted_graph_with_masks(120, seed=4)

    def kept(model):
        return [value._entry for layer in model.modules() for value in vars(layer).values()
                if isinstance(value, EdgeCache) and value._entry is not None]

    det = ETDetector(epochs=2, hidden=8, message_passing_layers=1).fit(graph)
    assert not kept(det.model_)
    det.decision_function(graph)
    assert not kept(det.model_)
    det.node_energy(graph)  # (a memory audit: it kept 3.6x the scored graph's edges)
    assert not kept(det.model_)
    unsupervised = UnsupervisedETDetector(epochs=1, hidden=8).fit(graph)
    assert not kept(unsupervised.model_)
