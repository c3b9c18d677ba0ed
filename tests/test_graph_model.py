import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.utils import to_undirected

from et_graph.exceptions import DataWarning
from et_graph.nn.models.graph_model import ETGraphModel
from et_graph.nn.pool import CLSPool, add_cls_nodes
from et_graph.transforms import CLSLaplacianPE, RandomWalkPE

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
    # num_graphs without a batch vector, and an edge between two graphs of a batch
    with pytest.raises(ValueError, match="no batch vector"):
        model(data.x, data.edge_index, lap_pe=data.lap_pe, cls_lap_pe=torch.ones(3, 4),
              num_graphs=3)
    two = torch.tensor([0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="different graphs"):
        model(data.x, data.edge_index, two, lap_pe=data.lap_pe, cls_lap_pe=torch.ones(2, 4))
    # featureless graphs (IMDB-BINARY) and a zero width: named for what they are
    with pytest.raises(ValueError, match="degree features"):
        model(None, data.edge_index, lap_pe=data.lap_pe, cls_lap_pe=data.cls_lap_pe)
    with pytest.raises(ValueError, match="hidden_channels must be positive"):
        small_model(hidden_channels=0)
    categorical_edges = small_model(edge_categories=4)
    with pytest.raises(ValueError, match="build the model with edge_dim"):
        categorical_edges(data.x, data.edge_index, edge_attr=torch.ones(10, 2),
                          lap_pe=data.lap_pe, cls_lap_pe=data.cls_lap_pe)
    # From a layer audit: encodings a model was built without were dropped without a word
    # (forward_data still leaves them out), and an int32 batch failed in index_copy_.
    without_pe = small_model(pe_dim=0).eval()
    for name, value in (("lap_pe", data.lap_pe), ("cls_lap_pe", data.cls_lap_pe),
                        ("rw_pe", torch.ones(5, 4))):
        with pytest.raises(ValueError, match=f"{name} was given but the model was built with"):
            without_pe(data.x, data.edge_index, **{name: value})
    assert without_pe.forward_data(data).shape == without_pe(data.x, data.edge_index).shape
    pair = Batch.from_data_list([data, data])
    assert torch.equal(without_pe(pair.x, pair.edge_index, pair.batch.int()),
                       without_pe(pair.x, pair.edge_index, pair.batch))


def test_explainer_edge_masks_are_refused_with_the_reason():
    """PyG's explainer masks the caller's E edges; the blocks run on E + 2N (CLS) edges, so
    PyG's own size assertion failed with a bare AssertionError. Node masks still work."""
    from torch_geometric.explain import Explainer, GNNExplainer

    model = small_model()
    model.eval()
    data = labelled(ring(5), 0)
    config = dict(explanation_type="model", node_mask_type="attributes",
                  model_config=dict(mode="multiclass_classification", task_level="graph",
                                    return_type="raw"))
    explainer = Explainer(model, GNNExplainer(epochs=2), edge_mask_type="object", **config)
    with pytest.raises(ValueError, match="edge masks"):
        explainer(data.x, data.edge_index, lap_pe=data.lap_pe, cls_lap_pe=data.cls_lap_pe)
    explainer = Explainer(model, GNNExplainer(epochs=2), edge_mask_type=None, **config)
    explanation = explainer(data.x, data.edge_index, lap_pe=data.lap_pe,
                            cls_lap_pe=data.cls_lap_pe)
    assert explanation.node_mask.shape == data.x.shape


def test_attention_explainer_reads_the_blocks_attention_on_the_callers_edges():
    # The blocks' edges are the caller's E edges first, then the CLS edges: AttentionExplainer
    # keeps the first E coefficients, which are the caller's edges' attention. A message hook
    # takes the block off the shared pre-sorted edges, as an explainer's mask does.
    from torch_geometric.explain import Explainer
    from torch_geometric.explain.algorithm import AttentionExplainer

    model = small_model()
    model.eval()
    data = labelled(ring(5), 0)
    inputs = dict(lap_pe=data.lap_pe, cls_lap_pe=data.cls_lap_pe)
    seen = []
    handle = model.convs[0].register_message_forward_hook(
        lambda module, args, out: seen.append(args[0]["alpha"].shape))
    model(data.x, data.edge_index, **inputs)
    handle.remove()
    num_edges = data.edge_index.size(1) + 2 * data.num_nodes
    assert seen == [(num_edges, 2)] * (2 * model.convs[0].steps)
    explainer = Explainer(model, AttentionExplainer(), explanation_type="model",
                          edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification",
                                            task_level="graph", return_type="raw"))
    explanation = explainer(data.x, data.edge_index, **inputs)
    assert explanation.edge_mask.shape == (data.edge_index.size(1),)
    assert bool((explanation.edge_mask > 0).all())  # every ring edge carries attention


# ----------------------------------------------------------------------------------------------
# Readouts and the random-walk encoding
# ----------------------------------------------------------------------------------------------
def test_readouts_set_the_head_width_and_output_shapes():
    torch.manual_seed(3)
    batch = Batch.from_data_list([labelled(ring(6), 0), labelled(star(5), 1),
                                  labelled(ring(4), 0)])
    for readout, factor in (("cls", 1), ("cls_sum_mean", 3), ("jk", 4)):
        model = small_model(readout=readout)
        assert model.head[0].in_features == 16 * factor
        assert model.forward_data(batch).shape == (3, 2)
        states = []
        out, graph, _ = model.tokens(batch.x, batch.edge_index, batch.batch,
                                     lap_pe=batch.lap_pe, cls_lap_pe=batch.cls_lap_pe,
                                     block_states=states)
        assert len(states) == 3 and states[-1] is out
        assert model.graph_readout(out, graph, states).shape == (3, 16 * factor)
    with pytest.raises(ValueError, match="needs the 3 block states"):
        model.graph_readout(out, graph)
    with pytest.raises(ValueError, match="readout must be one of"):
        small_model(readout="max")
    with pytest.raises(ValueError, match="readout must stay 'cls'"):
        small_model(task="node", readout="cls_sum_mean")


def test_sum_counts_nodes_where_mean_and_cls_cannot():
    # identical node tokens in graphs of 2 and 5 nodes: only the sum tells the sizes apart
    token = torch.randn(4)
    x = token.expand(7, 4).clone()
    batch = torch.tensor([0, 0, 1, 1, 1, 1, 1])
    edge_index = torch.tensor([[0, 2, 3], [1, 3, 4]])
    graph = add_cls_nodes(x, edge_index, torch.zeros(2, 4), batch)
    pooled = CLSPool.readout_sum_mean(graph.x, graph)
    cls, sums, means = pooled.split(4, dim=1)
    assert torch.allclose(sums[0], 2 * token) and torch.allclose(sums[1], 5 * token)
    assert torch.allclose(means[0], means[1]) and torch.equal(cls[0], cls[1])


def test_jk_readout_is_the_cls_token_and_the_sums_of_every_block_state():
    # computed by hand from the block states: the encoded input summed as it is, every block's
    # output through its own energy LayerNorm, the CLS token through the last block's
    torch.manual_seed(6)
    model = small_model(readout="jk", blocks=3, steps=1).eval()
    graphs = [labelled(ring(6), 0), labelled(star(5), 1)]
    batch = Batch.from_data_list(graphs)
    with torch.no_grad():
        states = []
        out, graph, _ = model.tokens(batch.x, batch.edge_index, batch.batch,
                                     lap_pe=batch.lap_pe, cls_lap_pe=batch.cls_lap_pe,
                                     block_states=states)
        pooled = model.graph_readout(out, graph, states)
        logits = model.forward_data(batch)
    assert pooled.shape == (2, 16 * 5) and len(states) == 4
    is_cls = torch.zeros(out.size(0), dtype=torch.bool)
    is_cls[graph.cls_index] = True
    expected = []
    for g in range(2):
        nodes = (graph.batch == g) & ~is_cls
        parts = [model.convs[-1].norm(out[graph.cls_index[g]].unsqueeze(0))[0],
                 states[0][nodes].sum(0)]
        parts += [conv.norm(state)[nodes].sum(0) for conv, state in zip(model.convs, states[1:])]
        expected.append(torch.cat(parts))
    assert torch.allclose(pooled, torch.stack(expected), atol=1e-5)
    assert torch.allclose(logits, model.head(pooled), atol=1e-6)
    # the input sum counts: the encoded input of the 6-ring sums to more than the 5-star's
    assert not torch.allclose(pooled[0, 16:32], pooled[1, 16:32])


def test_sum_and_mean_do_not_depend_on_the_node_order():
    torch.manual_seed(4)
    model = small_model(readout="cls_sum_mean", kernel_size=1, pe_dim=0, in_channels=3).eval()
    first = Data(x=torch.randn(6, 3), edge_index=to_undirected(
        torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 5, 3]])))
    second = Data(x=torch.randn(4, 3), edge_index=to_undirected(torch.tensor([[0, 1], [1, 3]])))
    perm = torch.tensor([3, 5, 0, 2, 1, 4])
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(6)
    permuted = Data(x=first.x[perm], edge_index=inverse[first.edge_index])

    def readout(graphs):
        batch = Batch.from_data_list(graphs)
        with torch.no_grad():
            out, graph, _ = model.tokens(batch.x, batch.edge_index, batch.batch)
            return model.graph_readout(out, graph), model.forward_data(batch)

    (features, logits), (features_p, logits_p) = readout([first, second]), readout(
        [permuted, second])
    assert torch.allclose(features[:, 16:], features_p[:, 16:], atol=1e-5)
    assert torch.allclose(features, features_p, atol=1e-5)  # kernel 1: CLS too
    assert torch.allclose(logits, logits_p, atol=1e-5)
    assert not torch.allclose(features[0, 16:32], features[1, 16:32])


def test_random_walk_encoding_is_projected_into_the_tokens():
    torch.manual_seed(5)
    walk = RandomWalkPE(4)
    graphs = [walk(labelled(ring(6), 0)), walk(labelled(star(5), 1))]
    batch = Batch.from_data_list(graphs)
    assert batch.rw_pe.shape == (11, 4)
    model = small_model(rw_pe_dim=4).eval()
    assert model.rw_encoder.in_features == 4
    with torch.no_grad():
        out = model.forward_data(batch)
        batch.rw_pe = torch.zeros_like(batch.rw_pe)
        assert not torch.allclose(model.forward_data(batch), out)
        # a model without the encoding ignores the field
        assert small_model().forward_data(batch).shape == (2, 2)
    kwargs = dict(lap_pe=batch.lap_pe, cls_lap_pe=batch.cls_lap_pe)
    with pytest.raises(ValueError, match="RandomWalkPE"):
        model(batch.x, batch.edge_index, batch.batch, **kwargs)
    with pytest.raises(ValueError, match="rw_pe must be"):
        model(batch.x, batch.edge_index, batch.batch, rw_pe=torch.zeros(11, 3), **kwargs)
    with pytest.raises(ValueError, match="finite"):
        model(batch.x, batch.edge_index, batch.batch,
              rw_pe=torch.full((11, 4), float("nan")), **kwargs)
    with pytest.raises(ValueError, match="rw_pe_dim"):
        small_model(rw_pe_dim=-1)


def test_incident_edges_add_each_nodes_sum_of_incoming_encoded_edges():
    torch.manual_seed(6)
    data = ring(5)
    data.x = torch.randint(0, 5, (5,))
    data.edge_attr = torch.randint(0, 3, (data.edge_index.size(1),))
    model = ETGraphModel(None, 1, task="regression", hidden_channels=8, heads=2, head_dim=4,
                         pe_dim=0, num_node_categories=5, edge_categories=3,
                         incident_edges=True).eval()
    with torch.no_grad():
        states = []
        _, graph, _ = model.tokens(data.x, data.edge_index, edge_attr=data.edge_attr,
                                   block_states=states)
        encoded = model.edge_encoder(data.edge_attr)
        incoming = torch.zeros(5, encoded.size(1)).index_add_(0, data.edge_index[1], encoded)
        expected = model.node_encoder(data.x) + model.incident_encoder(incoming)
        assert torch.allclose(CLSPool.node_states(states[0], graph), expected, atol=1e-6)
        # a sum over the incoming edges: the order in which the edges are stored does not matter
        order = torch.randperm(data.edge_index.size(1))
        shuffled = model(data.x, data.edge_index[:, order], edge_attr=data.edge_attr[order])
        assert torch.allclose(shuffled, model(data.x, data.edge_index, edge_attr=data.edge_attr),
                              atol=1e-5)
    with pytest.raises(ValueError, match="incident_edges"):
        small_model(incident_edges=True)


def test_sum_message_passing_is_a_residual_gin_layer_that_counts():
    from et_graph.nn import SumMessagePassing

    torch.manual_seed(7)
    layers = SumMessagePassing(6, 2).eval()
    data = star(4)  # centre 0 with three leaves, each leaf with one neighbour
    h = torch.randn(4, 6)
    adjacency = torch.zeros(4, 4)
    adjacency.index_put_((data.edge_index[1], data.edge_index[0]), torch.ones(6), accumulate=True)
    expected = h
    for mlp in layers.mlps:
        expected = expected + mlp(expected + adjacency @ expected)
    with torch.no_grad():
        out = layers(h, data.edge_index)
        assert torch.allclose(out, expected, atol=1e-5)
        # equal features, three neighbours against one: a sum tells them apart, a mean would not
        same = layers(torch.ones(4, 6), data.edge_index)
        assert not torch.allclose(same[0], same[1])
        assert torch.allclose(same[1], same[2]) and torch.allclose(same[2], same[3])
        # relabelling the nodes relabels the output
        perm = torch.tensor([2, 0, 3, 1])
        inverse = torch.argsort(perm)
        moved = layers(h[perm], inverse[data.edge_index])
        assert torch.allclose(moved, out[perm], atol=1e-5)
    with pytest.raises(ValueError, match="must be \\[N, 6\\]"):
        layers(torch.randn(4, 5), data.edge_index)
    with pytest.raises(ValueError, match="positive"):
        SumMessagePassing(6, 0)


def test_message_passing_layers_build_the_tokens_entering_the_descent():
    torch.manual_seed(8)
    batch = Batch.from_data_list([labelled(ring(6), 0), labelled(star(5), 1)])
    model = small_model(message_passing_layers=2).eval()
    assert len(model.message_passing.mlps) == 2
    with torch.no_grad():
        states = []
        _, graph, _ = model.tokens(batch.x, batch.edge_index, batch.batch, lap_pe=batch.lap_pe,
                                   cls_lap_pe=batch.cls_lap_pe, block_states=states)
        encoded = model.node_encoder(batch.x) + model.pe_encoder(
            batch.lap_pe, batch.cls_lap_pe, batch.batch)[0]
        expected = model.message_passing(encoded, batch.edge_index)
        assert torch.allclose(CLSPool.node_states(states[0], graph), expected, atol=1e-6)
    # off by default: the paper's model, with the parameters it always had
    plain = small_model()
    assert plain.message_passing is None
    assert not any(name.startswith("message_passing") for name in plain.state_dict())
    with pytest.raises(ValueError, match="message_passing_layers"):
        small_model(message_passing_layers=-1)
    # it trains: the loss falls on rings against stars
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(20):
        loss = F.cross_entropy(model.forward_data(batch), batch.y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_sum_message_passing_with_edges_is_gine_and_reads_each_bond():
    from et_graph.nn import SumMessagePassing

    torch.manual_seed(9)
    layers = SumMessagePassing(6, 2, edge_channels=3).eval()
    data = star(4)
    h, edges = torch.randn(4, 6), torch.randn(data.edge_index.size(1), 3)
    source, target = data.edge_index
    expected = h
    for mlp, edge_linear in zip(layers.mlps, layers.edge_linears):
        messages = torch.relu(expected[source] + edge_linear(edges))
        summed = expected + torch.zeros(4, 6).index_add_(0, target, messages)
        expected = expected + mlp(summed)
    with torch.no_grad():
        out = layers(h, data.edge_index, edges)
        assert torch.allclose(out, expected, atol=1e-5)
        # one bond changes: after one layer only the node it points at moves
        one = SumMessagePassing(6, 1, edge_channels=3).eval()
        changed = edges.clone()
        changed[0] += 1.0
        moved = (one(h, data.edge_index, changed) - one(h, data.edge_index, edges)).abs().sum(1)
        assert (moved > 1e-6).tolist() == [i == int(target[0]) for i in range(4)]
        # the edge order does not matter
        order = torch.randperm(source.numel())
        assert torch.allclose(layers(h, data.edge_index[:, order], edges[order]), out, atol=1e-5)
    with pytest.raises(ValueError, match="edge_channels=3\\), but edge_features is None"):
        layers(h, data.edge_index)
    with pytest.raises(ValueError, match="edge_features must be \\[E, 3\\]"):
        layers(h, data.edge_index, edges[:, :2])
    with pytest.raises(ValueError, match="built with edge_channels=0"):
        SumMessagePassing(6, 1)(h, data.edge_index, edges)
    with pytest.raises(ValueError, match="edge_channels"):
        SumMessagePassing(6, 1, edge_channels=-1)


def test_message_passing_edges_let_the_tokens_read_bond_types():
    torch.manual_seed(10)
    data = ring(5)
    data.x = torch.randint(0, 5, (5,))
    data.edge_attr = torch.randint(0, 3, (data.edge_index.size(1),))
    kwargs = dict(in_channels=None, out_channels=1, task="regression", hidden_channels=8,
                  heads=2, head_dim=4, pe_dim=0, num_node_categories=5, edge_categories=3,
                  message_passing_layers=2)
    model = ETGraphModel(**kwargs, message_passing_edges=True).eval()
    assert model.message_passing.edge_channels == model.edge_encoder.out_channels
    with torch.no_grad():
        states = []
        _, graph, _ = model.tokens(data.x, data.edge_index, edge_attr=data.edge_attr,
                                   block_states=states)
        expected = model.message_passing(model.node_encoder(data.x), data.edge_index,
                                         model.edge_encoder(data.edge_attr))
        assert torch.allclose(CLSPool.node_states(states[0], graph), expected, atol=1e-6)
        # the edge-blind layers: no edge parameters, so older checkpoints still load
        blind = ETGraphModel(**kwargs).eval()
        assert blind.message_passing.edge_linears is None
        assert not any("edge_linears" in name for name in blind.state_dict())
    for bad in (dict(message_passing_layers=0), dict(edge_categories=None)):
        with pytest.raises(ValueError, match="message_passing_edges"):
            ETGraphModel(**{**kwargs, **bad}, message_passing_edges=True)


def test_attention_edges_let_the_blocks_attend_by_bond_type():
    """attention_edges: every block's ETConv reads the encoded edge features (the mask's,
    CLS edges included) as key offsets, on the shared-edges path and through a hooked block
    alike; without edge features it is refused."""
    torch.manual_seed(11)
    data = ring(6)
    data.x = torch.randint(0, 5, (6,))
    data.edge_attr = torch.randint(0, 3, (data.edge_index.size(1),))
    kwargs = dict(in_channels=None, out_channels=1, task="regression", hidden_channels=8,
                  heads=2, head_dim=4, pe_dim=0, num_node_categories=5, edge_categories=3,
                  edge_channels=4)
    model = ETGraphModel(**kwargs, attention_edges=True).eval()
    assert all(conv.edge_dim == 5 for conv in model.convs)  # 4 encoded + the CLS indicator
    with torch.no_grad():
        out = model(data.x, data.edge_index, edge_attr=data.edge_attr)
        other = model(data.x, data.edge_index, edge_attr=(data.edge_attr + 1) % 3)
        assert not torch.allclose(out, other)
        # the same through a block called as a module (a forward hook turns sharing off)
        hooked = copy.deepcopy(model)
        hooked.convs[0].register_forward_hook(lambda *args: None)
        assert torch.allclose(hooked(data.x, data.edge_index, edge_attr=data.edge_attr), out,
                              atol=1e-6)
        # with the key maps at zero the blocks are the edge-blind model's
        blind = ETGraphModel(**kwargs).eval()
        blind.load_state_dict({k: v for k, v in model.state_dict().items()
                               if "w_edge" not in k})
        for conv in model.convs:
            conv.energy_fn.w_edge.zero_()
        assert torch.allclose(model(data.x, data.edge_index, edge_attr=data.edge_attr),
                              blind(data.x, data.edge_index, edge_attr=data.edge_attr),
                              atol=1e-6)
    with pytest.raises(ValueError, match="attention_edges"):
        ETGraphModel(**{**kwargs, "edge_categories": None}, attention_edges=True)


def test_mixed_precision_training_step_runs_under_autocast():
    """Under ``torch.autocast`` the message passing, mask and head run in bfloat16 and the ET
    blocks in float32 (they switch autocast off): a training step runs, and the logits stay
    near the float32 ones."""
    torch.manual_seed(0)
    batch = Batch.from_data_list([labelled(ring(n), n % 2) for n in range(5, 12)])
    model = small_model(readout="cls_sum_mean")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model.forward_data(batch), batch.y)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()  # training noise aside, bfloat16 moves the logits by well under 5%
    expected = model.forward_data(batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model.forward_data(batch)
    assert (logits.float() - expected).norm() / expected.norm() < 0.05


def test_higher_precision_inputs_and_short_encodings_are_named():
    """From an audit: float64 x and lap_pe were rounded to the float32 parameters silently,
    and a lap_pe with too few rows was reported as a wrong batch shape."""
    model = small_model().eval()
    data = labelled(ring(5), 0)
    for name in ("x", "lap_pe", "cls_lap_pe"):
        inputs = {"x": data.x, "lap_pe": data.lap_pe, "cls_lap_pe": data.cls_lap_pe}
        inputs[name] = inputs[name].double()
        with pytest.raises(ValueError, match=f"{name} is float64 but the layer's parameters "
                                             "are float32; call model.double"):
            model(inputs["x"], data.edge_index, **{k: v for k, v in inputs.items() if k != "x"})
    with pytest.raises(ValueError, match="lap_pe has 4 rows for 5 nodes"):
        model(data.x, data.edge_index, lap_pe=data.lap_pe[:-1], cls_lap_pe=data.cls_lap_pe)
    half = model(data.x.half(), data.edge_index, lap_pe=data.lap_pe, cls_lap_pe=data.cls_lap_pe)
    assert half.dtype == torch.float32  # a lower-precision input is still read
    double = small_model().double().eval()
    assert double(data.x.double(), data.edge_index, lap_pe=data.lap_pe.double(),
                  cls_lap_pe=data.cls_lap_pe.double()).dtype == torch.float64


def test_graph_model_library_inputs_are_checked_by_their_own_names():
    from torch_geometric.data import Batch, Data

    from et_graph.nn import ETGraphModel

    torch.manual_seed(0)
    graph = Data(x=torch.randn(4, 3), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
                 edge_attr=torch.randn(3, 2))
    batch = Batch.from_data_list([graph, graph])
    plain = ETGraphModel(3, 2, hidden_channels=8, heads=2, head_dim=4, pe_dim=0).eval()
    # forward_data dropped edge_attr without a word: a MUTAG model never saw the bonds
    with pytest.warns(DataWarning, match="holds edge_attr.*not read"):
        plain.forward_data(batch)
    with pytest.raises(ValueError, match="holds edge_attr"):
        plain.forward_data(batch, unused="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain.forward_data(batch, unused="ignore")
    # num_graphs 2.7 was truncated to 2
    with pytest.raises(ValueError, match="num_graphs must be an int"):
        plain(batch.x, batch.edge_index, batch.batch, num_graphs=2.7)
    edges = ETGraphModel(3, 2, hidden_channels=8, heads=2, head_dim=4, pe_dim=0, edge_dim=2)
    with pytest.raises(ValueError, match="edge_attr is float64"):  # rounded to float32 silently
        edges(graph.x, graph.edge_index, edge_attr=graph.edge_attr.double())
    for kwargs, name in [({"edge_dim": 0}, "edge_dim"), ({"edge_dim": 2, "edge_channels": 0},
                                                        "edge_channels"),
                         ({"edge_categories": 0}, "edge_categories")]:
        with pytest.raises(ValueError, match=name):
            ETGraphModel(3, 2, pe_dim=0, **kwargs)
    # message passing in training on one node: PyTorch's BatchNorm message named no cause
    passing = ETGraphModel(3, 2, hidden_channels=8, heads=2, head_dim=4, pe_dim=0,
                           message_passing_layers=1).train()
    single = Data(x=torch.randn(1, 3), edge_index=torch.empty(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="drop_last"):
        passing.forward_data(Batch.from_data_list([single]))


def test_a_molecule_users_mistakes_are_named_in_the_models_own_terms():
    """(a graph-level audit, OGB-style data) bond ids [E, 3] were summed as numbers by
    IncidentEdgeSum; CLSLaplacianPE without edges was an AttributeError; multi-task labels
    came back flattened from predict_logits and failed in torch in evaluate; the encoders'
    messages named num_categories to an ETGraphModel user."""
    from et_graph.protocols.graph_cv import evaluate, predict_logits
    from et_graph.transforms import IncidentEdgeSum

    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    bonds = Data(x=torch.randn(3, 2), edge_index=edge_index,
                 edge_attr=torch.tensor([[0, 0, 1], [0, 0, 1], [3, 1, 0], [3, 1, 0]]))
    with pytest.raises(ValueError, match=r"integers \(3 column\(s\)\).*edge_categories"):
        IncidentEdgeSum()(bonds.clone())
    zeros_and_ones = bonds.clone()  # (a molecule whose ids are all 0 or 1: refused as well)
    zeros_and_ones.edge_attr = (bonds.edge_attr > 0).long()
    with pytest.raises(ValueError, match=r"summed as edge_attr\.float\(\)"):
        IncidentEdgeSum()(zeros_and_ones.clone())
    zeros_and_ones.edge_attr = zeros_and_ones.edge_attr.float()  # said to be a code: counted
    assert IncidentEdgeSum()(zeros_and_ones).x.shape == (3, 5)
    with pytest.raises(ValueError, match="CLSLaplacianPE reads data.edge_index"):
        CLSLaplacianPE(4)(Data(x=torch.zeros(3, 1), num_nodes=3))
    model = ETGraphModel(2, 12, hidden_channels=8, heads=1, head_dim=4, pe_dim=0)
    graphs = [Data(x=torch.randn(3, 2), edge_index=edge_index,
                   y=torch.full((1, 12), float("nan"))) for _ in range(4)]
    loader = DataLoader(graphs, batch_size=2)
    for score in (evaluate, predict_logits):
        with pytest.raises(ValueError, match=r"single-label classification.*\(2, 12\)"):
            score(model, loader)
    with pytest.raises(ValueError, match="num_node_categories \\(ETGraphModel\\)"):
        ETGraphModel(None, 2)
    with pytest.raises(ValueError, match="num_node_categories \\(ETGraphModel\\) must be"):
        ETGraphModel(None, 2, num_node_categories=[0, 3])
    categorical = ETGraphModel(None, 2, num_node_categories=[5], hidden_channels=8, heads=1,
                               head_dim=4, pe_dim=0)
    with pytest.raises(ValueError, match="category size is 5 .*num_node_categories"):
        categorical(torch.tensor([7, 1, 2]), edge_index, torch.zeros(3, dtype=torch.long))
