"""The graph model's fast paths give the generic paths' values and gradients."""
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.utils import to_undirected

from et_graph.nn.adjacency_mask import Conv2DAdjacencyMask
from et_graph.nn.pool import CLSPool


def cls_batch(sizes, channels=6, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    graphs = []
    for n in sizes:
        edges = torch.randint(0, n, (2, 2 * n)) if n > 1 else torch.empty(2, 0, dtype=torch.long)
        graphs.append(Data(x=torch.randn(n, channels, dtype=dtype),
                           edge_index=to_undirected(edges, num_nodes=n)))
    batch = Batch.from_data_list(graphs)
    pool = CLSPool(channels).to(dtype)
    return pool.attach(batch.x, batch.edge_index, batch.batch), batch


def mask_case(kernel_size, edge_dim):
    """A float64 CLS graph of five graphs (sizes 1-8), a 3-head mask with random weights,
    the tokens as a leaf, edge features (or None) and a probe for the mask's output."""
    graph, _ = cls_batch([1, 2, 5, 8, 3], seed=kernel_size)
    mask = Conv2DAdjacencyMask(heads=3, kernel_size=kernel_size, edge_dim=edge_dim).double()
    torch.nn.init.normal_(mask.weight)
    torch.nn.init.normal_(mask.bias)
    x = graph.x.detach().clone().requires_grad_(True)
    graph = graph._replace(x=x)
    attr = (torch.randn(graph.edge_index.size(1), edge_dim, dtype=torch.float64)
            if edge_dim else None)
    probe = torch.randn(graph.edge_index.size(1), 3, dtype=torch.float64)
    return graph, mask, x, attr, probe


@pytest.mark.parametrize("kernel_size", [1, 3, 5])
@pytest.mark.parametrize("edge_dim", [None, 3])
def test_cls_graph_mask_equals_the_generic_mask(kernel_size, edge_dim):
    graph, mask, x, attr, probe = mask_case(kernel_size, edge_dim)
    fast = mask.forward_cls_graph(graph, attr)
    grads_fast = torch.autograd.grad((fast * probe).sum(), [x, mask.weight, mask.bias])
    slow = mask(x, graph.edge_index, graph.batch, attr)
    grads_slow = torch.autograd.grad((slow * probe).sum(), [x, mask.weight, mask.bias])
    assert torch.allclose(fast, slow, atol=1e-10)
    for a, b in zip(grads_fast, grads_slow):
        assert torch.allclose(a, b, atol=1e-10)


def test_cls_graph_mask_dense_method_and_float32():
    graph, _ = cls_batch([4, 1, 6], dtype=torch.float32)
    for method in ("dense", "sparse"):
        mask = Conv2DAdjacencyMask(heads=2, kernel_size=3, method=method)
        torch.nn.init.normal_(mask.weight)
        assert torch.allclose(mask.forward_cls_graph(graph),
                              mask(graph.x, graph.edge_index, graph.batch), atol=1e-5)


def test_cls_graph_mask_under_torch_func():
    """torch.func.grad through the mask: the per-edge route (the Gram matrices' hand-written
    backward cannot be traced), the same gradient as autograd's through the fast path."""
    graph, mask, x, attr, probe = mask_case(3, 3)

    def total(tokens):
        return (mask.forward_cls_graph(graph._replace(x=tokens), attr) * probe).sum()

    got = torch.func.grad(total)(x.detach())
    want = torch.autograd.grad(total(x), x)[0]
    assert torch.allclose(got, want, atol=1e-10)


def test_graph_model_gradients_under_torch_func():
    """torch.func.grad of a whole ETGraphModel (mask included) equals autograd's."""
    from et_graph.nn.models import ETGraphModel

    _, batch = cls_batch([3, 5, 4], channels=6, dtype=torch.float32)
    torch.manual_seed(0)
    model = ETGraphModel(in_channels=6, hidden_channels=16, out_channels=2, pe_dim=0)
    params = dict(model.named_parameters())

    def loss(p):
        out = torch.func.functional_call(model, p, (batch.x, batch.edge_index, batch.batch))
        return out.square().sum()

    got = torch.func.grad(loss)(params)
    want = torch.autograd.grad(loss(params), list(params.values()))
    for name, reference in zip(params, want):
        assert torch.allclose(got[name], reference, rtol=1e-4, atol=1e-5), name
