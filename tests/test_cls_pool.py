import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.utils import to_undirected

from et_graph.nn import ETConv
from et_graph.nn.pool import CLSPool, add_cls_nodes


def random_graph(n: int, e: int, channels: int = 8) -> Data:
    edge_index = to_undirected(torch.randint(0, n, (2, e)), num_nodes=n)
    return Data(x=torch.randn(n, channels), edge_index=edge_index)


def test_layout_cls_first_and_edges_both_ways():
    torch.manual_seed(0)
    batch = Batch.from_data_list([random_graph(3, 2), random_graph(4, 3)])
    tokens = torch.full((2, 8), 7.0)
    g = add_cls_nodes(batch.x, batch.edge_index, tokens, batch.batch)
    assert g.cls_index.tolist() == [0, 4]
    assert g.node_index.tolist() == [1, 2, 3, 5, 6, 7, 8]
    assert g.batch.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert torch.equal(g.x[g.node_index], batch.x) and torch.all(g.x[g.cls_index] == 7.0)
    cls_edges = g.edge_index[:, g.is_cls_edge]
    assert cls_edges.size(1) == 2 * 7  # O(N): two edges per node
    pairs = set(map(tuple, cls_edges.t().tolist()))
    for node, graph in zip(g.node_index.tolist(), batch.batch.tolist()):
        cls = g.cls_index[graph].item()
        assert (node, cls) in pairs and (cls, node) in pairs
    original = g.edge_index[:, ~g.is_cls_edge]
    assert torch.equal(original, g.node_index[batch.edge_index])


def test_readout_of_each_graph_depends_only_on_that_graph():
    torch.manual_seed(1)
    graphs = [random_graph(5, 6), random_graph(4, 4), random_graph(6, 8)]
    pool = CLSPool(8)
    conv = ETConv(8, heads=2, head_dim=4, steps=3)

    def readout(data_list):
        batch = Batch.from_data_list(data_list)
        g = pool.attach(batch.x, batch.edge_index, batch.batch)
        return pool.readout(conv(g.x, g.edge_index), g)

    reference = readout(graphs)
    changed = [graphs[0], random_graph(7, 9), graphs[2]]
    other = readout(changed)
    assert torch.allclose(reference[0], other[0], atol=1e-6)
    assert torch.allclose(reference[2], other[2], atol=1e-6)
    assert not torch.allclose(reference[1], other[1], atol=1e-3)
    alone = readout([graphs[2]])
    assert torch.allclose(reference[2], alone[0], atol=1e-6)
    # the readout really uses the graph: gradients reach its nodes
    batch = Batch.from_data_list(graphs)
    x = batch.x.clone().requires_grad_(True)
    g = pool.attach(x, batch.edge_index, batch.batch)
    pool.readout(conv(g.x, g.edge_index), g)[1].sum().backward()
    touched = x.grad.abs().sum(1) > 0
    assert torch.equal(touched, batch.batch == 1)


def test_bad_input():
    pool = CLSPool(4)
    edge_index = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match="without nodes"):
        pool.attach(torch.randn(0, 4), torch.empty(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="without nodes"):
        pool.attach(torch.randn(2, 4), edge_index, torch.tensor([0, 0]), num_graphs=2)
    with pytest.raises(ValueError, match="sorted"):
        pool.attach(torch.randn(3, 4), edge_index, torch.tensor([1, 0, 1]))
    with pytest.raises(ValueError, match="node ids"):
        pool.attach(torch.randn(2, 4), torch.tensor([[0], [5]]))
    with pytest.raises(ValueError, match="NaN"):
        pool.attach(torch.tensor([[float("nan")] * 4]), torch.empty(2, 0, dtype=torch.long))


def test_an_edge_between_two_graphs_is_refused_and_an_int32_batch_read():
    """From a layer audit: attach and add_cls_nodes linked two graphs of a batch through such
    an edge without a word (ETGraphModel refused it), and an int32 batch failed in
    index_copy_."""
    x, batch = torch.randn(5, 4), torch.tensor([0, 0, 0, 1, 1])
    across = torch.tensor([[0, 1, 0], [1, 2, 4]])
    with pytest.raises(ValueError, match="different graphs"):
        add_cls_nodes(x, across, torch.zeros(2, 4), batch)
    with pytest.raises(ValueError, match="different graphs"):
        CLSPool(4).attach(x, across, batch)
    within = across[:, :2]
    assert torch.equal(add_cls_nodes(x, within, torch.zeros(2, 4), batch.int()).edge_index,
                       add_cls_nodes(x, within, torch.zeros(2, 4), batch).edge_index)
