import math

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.utils import to_undirected

from et_graph.nn.adjacency_mask import Conv2DAdjacencyMask


def graph(n: int, e: int, channels: int = 6) -> Data:
    return Data(x=torch.randn(n, channels),
                edge_index=to_undirected(torch.randint(0, n, (2, e)), num_nodes=n))


def reference(mask: Conv2DAdjacencyMask, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """Plain per-graph dense computation: conv2d of the Gram matrix, read at (dst, src)."""
    gram = (x @ x.t() / math.sqrt(x.size(1)))[None, None]
    dense = F.conv2d(gram, mask.weight, mask.bias, padding=mask.kernel_size // 2)[0]
    return dense[:, edge_index[1], edge_index[0]].t()


@pytest.mark.parametrize("kernel_size", [1, 3, 5])
@pytest.mark.parametrize("method", ["sparse", "dense"])
def test_edge_values_equal_dense_conv2d(kernel_size, method):
    torch.manual_seed(kernel_size)
    graphs = [graph(5, 6), graph(8, 10), graph(3, 2)]
    batch = Batch.from_data_list(graphs)
    mask = Conv2DAdjacencyMask(heads=3, kernel_size=kernel_size, method=method)
    torch.nn.init.normal_(mask.weight)
    out = mask(batch.x, batch.edge_index, batch.batch)
    assert out.shape == (batch.edge_index.size(1), 3)
    start = 0
    for data in graphs:
        e = data.edge_index.size(1)
        assert torch.allclose(out[start : start + e], reference(mask, data.x, data.edge_index),
                              atol=1e-5)
        start += e


def test_edge_features_multiply_the_conv_and_only_edges_are_returned():
    torch.manual_seed(0)
    data = graph(6, 7)
    attr = torch.randn(data.edge_index.size(1), 4)
    mask = Conv2DAdjacencyMask(heads=2, kernel_size=3, edge_dim=4)
    out = mask(data.x, data.edge_index, edge_attr=attr)
    expected = reference(mask, data.x, data.edge_index) * mask.edge_proj(attr)
    assert torch.allclose(out, expected, atol=1e-5)
    # one value per existing edge and nothing else: non-edges cannot enter the attention
    assert out.size(0) == data.edge_index.size(1)


def permute_within_graph(data: Data, perm: torch.Tensor) -> Data:
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel())
    return Data(x=data.x[perm], edge_index=inverse[data.edge_index])


def test_kernel_one_is_permutation_equivariant_kernel_three_is_not():
    torch.manual_seed(3)
    data = graph(7, 12)
    perm = torch.randperm(7)
    permuted = permute_within_graph(data, perm)
    for kernel_size, equivariant in ((1, True), (3, False)):
        mask = Conv2DAdjacencyMask(heads=2, kernel_size=kernel_size)
        torch.nn.init.normal_(mask.weight)
        before = mask(data.x, data.edge_index)
        after = mask(permuted.x, permuted.edge_index)
        # edge j of the permuted graph is edge j of the original one, renumbered
        assert torch.allclose(before, after, atol=1e-5) == equivariant


def test_graphs_in_a_batch_do_not_see_each_other():
    torch.manual_seed(4)
    a, b = graph(5, 6), graph(4, 5)
    mask = Conv2DAdjacencyMask(heads=2, kernel_size=3)
    torch.nn.init.normal_(mask.weight)
    batch = Batch.from_data_list([a, b])
    out = mask(batch.x, batch.edge_index, batch.batch)
    alone = mask(b.x, b.edge_index)
    assert torch.allclose(out[a.edge_index.size(1) :], alone, atol=1e-5)


def test_bad_input():
    data = graph(4, 3)
    with pytest.raises(ValueError, match="odd"):
        Conv2DAdjacencyMask(2, kernel_size=2)
    with pytest.raises(ValueError, match="edge_dim"):
        Conv2DAdjacencyMask(2)(data.x, data.edge_index, edge_attr=torch.ones(3, 1))
    mask = Conv2DAdjacencyMask(2, edge_dim=3)
    with pytest.raises(ValueError, match="one row per edge"):
        mask(data.x, data.edge_index, edge_attr=torch.ones(data.edge_index.size(1) + 1, 3))
    with pytest.raises(ValueError, match="width"):
        mask(data.x, data.edge_index, edge_attr=torch.ones(data.edge_index.size(1), 2))
    with pytest.raises(ValueError, match="node ids"):
        Conv2DAdjacencyMask(2)(data.x, torch.tensor([[0], [9]]))


@pytest.mark.parametrize("method", ["sparse", "dense"])
def test_an_edge_between_two_graphs_is_refused(method):
    """From a layer audit: such an edge was accepted, and the two methods gave it different
    values (ETGraphModel refused it)."""
    x, batch = torch.randn(5, 4), torch.tensor([0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="different graphs"):
        Conv2DAdjacencyMask(2, 3, method=method)(x, torch.tensor([[0, 1, 0], [1, 2, 4]]), batch)
