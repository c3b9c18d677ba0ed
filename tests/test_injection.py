"""PyGOD-style anomaly injection (et_graph.transforms.injection)."""
import pytest
import torch
from torch_geometric.data import Data

from et_graph.transforms import (
    InjectAnomalies,
    inject_contextual_anomalies,
    inject_structural_anomalies,
)
from et_graph.transforms.injection import CONTEXTUAL, STRUCTURAL


def _graph(num_nodes: int = 60, num_edges: int = 150, features: int = 4, seed: int = 0) -> Data:
    generator = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(num_nodes, (2, num_edges), generator=generator)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return Data(x=torch.randn(num_nodes, features, generator=generator), edge_index=edge_index)


def test_cliques_link_every_ordered_pair_once():
    data = _graph()
    edge_index, nodes = inject_structural_anomalies(
        data.edge_index, 60, num_cliques=3, clique_size=5,
        generator=torch.Generator().manual_seed(1))
    assert nodes.numel() == 15 and nodes.unique().numel() == 15
    pairs = set(map(tuple, edge_index.t().tolist()))
    assert len(pairs) == edge_index.size(1)  # coalesced: no edge twice
    for group in nodes.view(3, 5).tolist():
        for a in group:
            for b in group:
                if a != b:
                    assert (a, b) in pairs
    # Only clique edges were added.
    old = set(map(tuple, data.edge_index.t().tolist()))
    clique = {(a, b) for g in nodes.view(3, 5).tolist() for a in g for b in g if a != b}
    assert pairs == old | clique


def test_contextual_copies_the_farthest_candidate():
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(0))
    # With many candidates every other node is drawn, so the copy is the farthest row overall.
    out, nodes = inject_contextual_anomalies(x, 4, candidates=2000,
                                             generator=torch.Generator().manual_seed(2))
    assert nodes.numel() == 4
    for node in nodes.tolist():
        distance = (x - x[node]).pow(2).sum(1)
        assert torch.equal(out[node], x[int(distance.argmax())])
    untouched = torch.ones(12, dtype=torch.bool)
    untouched[nodes] = False
    assert torch.equal(out[untouched], x[untouched])
    assert not torch.equal(out, x)


def test_transform_labels_kinds_and_is_reproducible():
    data = _graph()
    data.y = torch.ones(60, dtype=torch.long)  # replaced, never kept
    transform = InjectAnomalies(num_cliques=2, clique_size=4, num_contextual=6, candidates=10,
                                seed=3)
    out = transform(data)
    assert torch.equal(out.y, (out.anomaly_type > 0).long())
    assert int((out.anomaly_type & STRUCTURAL).bool().sum()) == 8
    assert int((out.anomaly_type & CONTEXTUAL).bool().sum()) == 6
    again = transform(data)
    assert torch.equal(out.x, again.x) and torch.equal(out.edge_index, again.edge_index)
    other = InjectAnomalies(2, 4, 6, 10, seed=4)(data)
    assert not torch.equal(out.anomaly_type, other.anomaly_type)
    assert torch.equal(data.x, _graph().x)  # the input is not modified


@pytest.mark.parametrize("kwargs, message", [
    ({"num_cliques": 5, "clique_size": 20}, "need 100 nodes"),
    ({"num_cliques": 0, "num_contextual": 61}, "exceeds"),
    ({"clique_size": 1}, "clique_size"),
    ({"candidates": 0}, "candidates"),
    ({"num_cliques": -1}, "num_cliques"),
])
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        InjectAnomalies(**kwargs)(_graph())


def test_refuses_edge_attr_and_integer_features():
    data = _graph()
    data.edge_attr = torch.randn(data.edge_index.size(1), 2)
    with pytest.raises(ValueError, match="edge_attr"):
        InjectAnomalies(1, 3, 0)(data)
    # any per-edge tensor, not only edge_attr: they stayed [E] beside [2, E + clique edges]
    for name in ("edge_weight", "edge_type"):
        other = _graph()
        other[name] = torch.ones(other.edge_index.size(1))
        with pytest.raises(ValueError, match=name):
            InjectAnomalies(1, 3, 0)(other)
        assert InjectAnomalies(0, 3, 2)(other)[name].shape == (other.edge_index.size(1),)
    with pytest.raises(ValueError, match="float node features"):
        InjectAnomalies(1, 3, 0)(Data(x=torch.zeros(10, 2, dtype=torch.long),
                                      edge_index=torch.zeros(2, 0, dtype=torch.long)))


def test_an_edge_id_past_the_last_node_is_refused():
    """From a transforms audit: such an id passed through into the planted graph."""
    from torch_geometric.data import Data

    from et_graph.transforms import InjectAnomalies

    with pytest.raises(ValueError, match="InjectAnomalies: edge_index has node ids in"):
        InjectAnomalies(num_cliques=1, clique_size=2, num_contextual=0)(
            Data(x=torch.randn(3, 2), edge_index=torch.tensor([[0], [7]])))


def test_a_contextual_anomaly_never_copies_its_own_features():
    """The candidates are drawn from the *other* nodes: with one candidate, a node drawn as its
    own candidate kept its features and was labelled an anomaly it is not."""
    x = torch.arange(12.0).view(4, 3)  # four distinct rows
    for seed in range(20):
        out, nodes = inject_contextual_anomalies(
            x, num_contextual=4, candidates=1, generator=torch.Generator().manual_seed(seed))
        assert sorted(nodes.tolist()) == [0, 1, 2, 3]
        for node in nodes.tolist():
            assert not torch.equal(out[node], x[node]), (seed, node)
            assert any(torch.equal(out[node], x[other]) for other in range(4) if other != node)
