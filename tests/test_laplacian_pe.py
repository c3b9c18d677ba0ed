import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.utils import to_undirected

from et_graph.nn.encoders import LaplacianPEEncoder
from et_graph.transforms import (
    CLSLaplacianPE,
    cls_laplacian_eigenvectors,
    cls_padded_adjacency,
    normalized_laplacian,
)


def ring(n: int) -> torch.Tensor:
    src = torch.arange(n)
    return to_undirected(torch.stack([src, (src + 1) % n]))


def path(n: int) -> torch.Tensor:
    src = torch.arange(n - 1)
    return to_undirected(torch.stack([src, src + 1]))


def test_padded_adjacency_has_cls_row_and_column():
    adjacency = cls_padded_adjacency(path(4), 4)
    assert adjacency.shape == (5, 5)
    assert torch.all(adjacency[0] == 1) and torch.all(adjacency[:, 0] == 1)
    inner = adjacency[1:, 1:]
    expected = torch.zeros(4, 4, dtype=inner.dtype)
    for a, b in [(0, 1), (1, 2), (2, 3)]:
        expected[a, b] = expected[b, a] = 1
    assert torch.equal(inner, expected)


def test_eigenvectors_are_orthonormal_eigenvectors_after_the_trivial_one():
    n, k = 9, 4
    vectors = cls_laplacian_eigenvectors(ring(n), n, k).double()
    assert vectors.shape == (n + 1, k)
    assert torch.allclose(vectors.t() @ vectors, torch.eye(k, dtype=torch.float64), atol=1e-5)
    laplacian = normalized_laplacian(cls_padded_adjacency(ring(n), n))
    # L v = lambda v for each kept column, with non-trivial (positive) eigenvalues ...
    rayleigh = torch.einsum("ik,ij,jk->k", vectors, laplacian, vectors)
    assert torch.allclose(laplacian @ vectors, vectors * rayleigh, atol=1e-5)
    assert bool((rayleigh > 1e-6).all())
    # ... orthogonal to the trivial eigenvector D^1/2 1
    trivial = cls_padded_adjacency(ring(n), n).sum(1).sqrt()
    assert torch.allclose(trivial @ vectors, torch.zeros(k, dtype=torch.float64), atol=1e-5)
    # and they are the smallest ones
    all_values = torch.linalg.eigvalsh(laplacian)
    assert torch.allclose(rayleigh.sort().values, all_values[1 : k + 1], atol=1e-5)


def test_encoding_follows_the_default_dtype_unrounded():
    """Computed in float64 and returned in the default dtype: a float64 user's eigenvectors
    hold float64's digits (they were rounded to float32: a numerics audit)."""
    n, k = 7, 3
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        data = CLSLaplacianPE(k)(Data(edge_index=ring(n), num_nodes=n))
    finally:
        torch.set_default_dtype(previous)
    assert data.lap_pe.dtype == data.cls_lap_pe.dtype == torch.float64
    vectors = torch.cat([data.cls_lap_pe, data.lap_pe])
    laplacian = normalized_laplacian(cls_padded_adjacency(ring(n), n))
    rayleigh = torch.einsum("ik,ij,jk->k", vectors, laplacian, vectors)
    assert torch.allclose(laplacian @ vectors, vectors * rayleigh, atol=1e-12)
    assert CLSLaplacianPE(k)(Data(edge_index=ring(n), num_nodes=n)).lap_pe.dtype == torch.float32


def test_tiny_graphs_are_zero_padded_and_batch():
    k = 6
    transform = CLSLaplacianPE(k)
    tiny = transform(Data(x=torch.ones(2, 3), edge_index=path(2)))
    single = transform(Data(x=torch.ones(1, 3), edge_index=torch.empty(2, 0, dtype=torch.long)))
    big = transform(Data(x=torch.ones(8, 3), edge_index=ring(8)))
    assert tiny.lap_pe.shape == (2, k) and tiny.cls_lap_pe.shape == (1, k)
    full = torch.cat([tiny.cls_lap_pe, tiny.lap_pe])
    # 3 tokens -> 2 non-trivial eigenvectors; the remaining k - 2 columns are zero
    assert torch.all(full[:, 2:] == 0) and torch.all(full[:, :2].abs().sum(0) > 0)
    assert torch.all(single.lap_pe[:, 1:] == 0)
    batch = Batch.from_data_list([tiny, single, big])
    assert batch.lap_pe.shape == (11, k) and batch.cls_lap_pe.shape == (3, k)


def test_graph_without_nodes_is_rejected():
    with pytest.raises(ValueError, match="without nodes"):
        CLSLaplacianPE(4)(Data(x=torch.ones(0, 3), edge_index=torch.empty(2, 0, dtype=torch.long)))
    with pytest.raises(ValueError, match="k must be a positive int"):
        CLSLaplacianPE(0)


def test_sign_flips_per_graph_and_eigenvector_only_in_training():
    torch.manual_seed(0)
    k = 4
    transform = CLSLaplacianPE(k)
    graphs = [transform(Data(x=torch.ones(n, 1), edge_index=ring(n))) for n in (6, 7, 9)]
    batch = Batch.from_data_list(graphs)
    encoder = LaplacianPEEncoder(k, 5)
    encoder.eval()
    pe, cls_pe = encoder.flip_signs(batch.lap_pe, batch.cls_lap_pe, batch.batch)
    assert torch.equal(pe, batch.lap_pe) and torch.equal(cls_pe, batch.cls_lap_pe)
    out_a = encoder(batch.lap_pe, batch.cls_lap_pe, batch.batch)
    out_b = encoder(batch.lap_pe, batch.cls_lap_pe, batch.batch)
    assert all(torch.equal(a, b) for a, b in zip(out_a, out_b))

    encoder.train()
    seen_flip, seen_keep = False, False
    for _ in range(10):
        pe, cls_pe = encoder.flip_signs(batch.lap_pe, batch.cls_lap_pe, batch.batch)
        for g in range(3):
            rows = torch.cat([cls_pe[g : g + 1], pe[batch.batch == g]])
            original = torch.cat([batch.cls_lap_pe[g : g + 1], batch.lap_pe[batch.batch == g]])
            for column in range(k):
                # one sign for the whole column of this graph, CLS row included
                ratio = rows[:, column] / original[:, column]
                ratio = ratio[original[:, column].abs() > 1e-6]
                assert torch.allclose(ratio, ratio[:1].expand_as(ratio))
                assert float(ratio[0].abs()) == pytest.approx(1.0)
                seen_flip |= bool(ratio[0] < 0)
                seen_keep |= bool(ratio[0] > 0)
    assert seen_flip and seen_keep
