import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.utils import to_undirected

from et_graph.nn.models.graph_model import ETGraphModel
from et_graph.transforms import CLSLaplacianPE

PE = CLSLaplacianPE(4)


def ring(n: int) -> Data:
    src = torch.arange(n)
    return Data(x=torch.ones(n, 2), edge_index=to_undirected(torch.stack([src, (src + 1) % n])))


def star(n: int) -> Data:
    leaves = torch.arange(1, n)
    edges = torch.stack([torch.zeros_like(leaves), leaves])
    return Data(x=torch.ones(n, 2), edge_index=to_undirected(edges))


def labelled(data: Data, label: int) -> Data:
    data = PE(data)
    data.y = torch.tensor([label])
    return data


def small_model(**kwargs) -> ETGraphModel:
    defaults = dict(in_channels=2, out_channels=2, hidden_channels=16, blocks=2, steps=2,
                    heads=2, head_dim=8, pe_dim=4)
    defaults.update(kwargs)
    return ETGraphModel(**defaults)


def test_trains_above_chance_on_rings_versus_stars():
    # identical node features: only the structure (PE, mask, attention) separates the classes
    torch.manual_seed(0)
    sizes = list(range(5, 13))
    train = [labelled(ring(n), 0) for n in sizes] + [labelled(star(n), 1) for n in sizes]
    test = [labelled(ring(n), 0) for n in (6, 9, 14)] + [labelled(star(n), 1) for n in (6, 9, 14)]
    model = small_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = DataLoader(train, batch_size=8, shuffle=True)
    for _ in range(15):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            F.cross_entropy(model.forward_data(batch), batch.y).backward()
            optimizer.step()
    model.eval()
    batch = Batch.from_data_list(test)
    with torch.no_grad():
        accuracy = (model.forward_data(batch).argmax(-1) == batch.y).float().mean()
    assert accuracy >= 5 / 6


def test_blocks_are_separate_and_evaluation_is_deterministic():
    torch.manual_seed(1)
    model = small_model(noise_std=0.5, blocks=3)
    assert len(model.convs) == 3
    assert model.convs[0].norm is not model.convs[1].norm
    assert not torch.equal(model.convs[0].w_k, model.convs[1].w_k)
    batch = Batch.from_data_list([labelled(ring(6), 0), labelled(star(5), 1)])
    model.eval()
    assert torch.equal(model.forward_data(batch), model.forward_data(batch))
    model.train()
    assert not torch.equal(model.forward_data(batch), model.forward_data(batch))


def test_tasks_and_categorical_inputs():
    torch.manual_seed(2)
    graphs = []
    for n in (4, 6):
        data = PE(ring(n))
        data.x = torch.randint(0, 5, (n,))
        data.edge_attr = torch.randint(0, 3, (data.edge_index.size(1),))
        graphs.append(data)
    batch = Batch.from_data_list(graphs)
    regression = ETGraphModel(None, 1, task="regression", hidden_channels=8, heads=2,
                              head_dim=4, pe_dim=4, num_node_categories=5, edge_categories=3)
    assert regression.forward_data(batch).shape == (2, 1)
    node = ETGraphModel(None, 3, task="node", hidden_channels=8, heads=2, head_dim=4, pe_dim=4,
                        num_node_categories=5, edge_categories=3, kernel_size=1)
    out = node.forward_data(batch)
    assert out.shape == (10, 3)
    # node predictions come back in the input order: permuting one graph's nodes permutes them
    node.eval()
    perm = torch.tensor([2, 0, 3, 1])
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(4)
    g = graphs[0]
    permuted = PE(Data(x=g.x[perm], edge_index=inverse[g.edge_index], edge_attr=g.edge_attr))
    permuted.lap_pe, permuted.cls_lap_pe = g.lap_pe[perm], g.cls_lap_pe
    single = node.forward_data(Batch.from_data_list([g]))
    assert torch.allclose(node.forward_data(Batch.from_data_list([permuted])), single[perm],
                          atol=1e-5)


def test_bad_input():
    model = small_model()
    data = labelled(ring(5), 0)
    with pytest.raises(ValueError, match="without nodes"):
        model(torch.ones(0, 2), torch.empty(2, 0, dtype=torch.long),
              lap_pe=torch.ones(0, 4), cls_lap_pe=torch.ones(1, 4))
    with pytest.raises(ValueError, match="without nodes"):
        model(data.x, data.edge_index, torch.zeros(5, dtype=torch.long), lap_pe=data.lap_pe,
              cls_lap_pe=torch.ones(2, 4), num_graphs=2)
    with pytest.raises(ValueError, match="CLSLaplacianPE"):
        model(data.x, data.edge_index)
    with pytest.raises(ValueError, match="no edge encoder"):
        model(data.x, data.edge_index, edge_attr=torch.ones(10, 1), lap_pe=data.lap_pe,
              cls_lap_pe=data.cls_lap_pe)
    with_edges = small_model(edge_dim=3)
    with pytest.raises(ValueError, match="rows but edge_index has"):
        with_edges(data.x, data.edge_index, edge_attr=torch.ones(7, 3), lap_pe=data.lap_pe,
                   cls_lap_pe=data.cls_lap_pe)
    with pytest.raises(ValueError, match="edge_attr must have shape"):
        with_edges(data.x, data.edge_index, edge_attr=torch.ones(10, 2), lap_pe=data.lap_pe,
                   cls_lap_pe=data.cls_lap_pe)
    with pytest.raises(ValueError, match="edge_attr is None"):
        with_edges(data.x, data.edge_index, lap_pe=data.lap_pe, cls_lap_pe=data.cls_lap_pe)
    with pytest.raises(ValueError, match="NaN"):
        model(torch.full((5, 2), float("nan")), data.edge_index, lap_pe=data.lap_pe,
              cls_lap_pe=data.cls_lap_pe)
    with pytest.raises(ValueError, match="task"):
        small_model(task="ranking")
