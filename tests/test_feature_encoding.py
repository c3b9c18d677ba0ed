"""The label-free per-column feature transforms, and the piecewise-linear encoding."""
import pytest
import torch
from torch_geometric.data import Data

from et_graph.protocols.anomaly_config import AnomalyDataConfig, load_data
from et_graph.protocols.unsupervised import normalise_features
from et_graph.transforms import (
    FEATURE_NORMS,
    piecewise_linear_encoding,
    prepare_detection_data,
    transform_features,
)


def test_ple_matches_the_definition_on_hand_made_bins():
    # 0..8 has quantile edges 0, 2, 4, 6, 8 for 4 bins
    x = torch.arange(9.0).unsqueeze(1)
    encoded = piecewise_linear_encoding(x, bins=4)
    assert encoded.shape == (9, 4)
    expected = torch.tensor([[min(max((v - lo) / 2, 0), 1) for lo in (0, 2, 4, 6)]
                             for v in range(9)])
    assert torch.allclose(encoded, expected)
    assert torch.equal(encoded[5], torch.tensor([1.0, 1.0, 0.5, 0.0]))


def test_ple_is_monotone_and_merges_the_repeated_edges_of_discrete_columns():
    torch.manual_seed(0)
    continuous = torch.randn(200)
    discrete = torch.randint(0, 3, (200,)).float()   # at most 3 distinct values: 2 bins
    constant = torch.full((200,), 7.0)
    encoded = piecewise_linear_encoding(torch.stack([continuous, discrete, constant], 1), 8)
    assert encoded.shape == (200, 8 + 2 + 1)
    assert torch.all(encoded[:, -1] == 0)
    order = continuous.argsort()
    # the sum of a column's encoding is a strictly increasing function of the value
    total = encoded[order, :8].sum(1)
    assert torch.all(total[1:] > total[:-1])
    assert encoded.min() >= 0 and encoded.max() <= 1
    # each discrete value maps to one code: 0 -> [0, 0], 1 -> [1, 0], 2 -> [1, 1]
    codes = {int(v): tuple(encoded[i, 8:10].tolist()) for i, v in enumerate(discrete)}
    assert codes == {0: (0.0, 0.0), 1: (1.0, 0.0), 2: (1.0, 1.0)}


def test_ple_errors():
    with pytest.raises(ValueError, match="bins must be a positive int"):
        piecewise_linear_encoding(torch.randn(4, 2), 0)
    with pytest.raises(ValueError, match="x must be"):
        piecewise_linear_encoding(torch.randn(4), 2)
    with pytest.raises(ValueError, match="feature_norm must be one of"):
        transform_features(torch.randn(4, 2), "rank")
    with pytest.raises(ValueError, match="ple_bins must be a positive int"):
        AnomalyDataConfig(ple_bins=0)


def test_every_path_uses_the_same_transform_and_reads_no_label():
    torch.manual_seed(1)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    x = torch.randn(6, 3)
    graph = Data(x=x, edge_index=edge_index, y=torch.tensor([0, 1, 0, 0, 1, 0]))
    flipped = Data(x=x, edge_index=edge_index, y=1 - graph.y)
    for norm in FEATURE_NORMS:
        direct = transform_features(x, norm, 4)
        prepared = prepare_detection_data(graph, norm, ple_bins=4).x
        assert torch.allclose(prepared, direct)
        assert torch.equal(prepared, prepare_detection_data(flipped, norm, ple_bins=4).x)
        if norm != "ple":  # the unsupervised runner keeps the default 16 bins
            assert torch.allclose(normalise_features(x, norm), direct)
    assert torch.allclose(normalise_features(x, "ple"), piecewise_linear_encoding(x, 16))
    loaded = load_data(AnomalyDataConfig(feature_norm="ple", ple_bins=4, degree_feature=False),
                       graph)
    assert loaded.x.shape == (6, 12)


def test_encoder_shape_errors_show_the_callers_shape_and_name_edges_e():
    from et_graph.nn import ETGraphModel

    model = ETGraphModel(3, 2, pe_dim=0, hidden_channels=8, edge_dim=3)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"x must have shape \[N, 3\], got \(3,\)"):
        model(torch.ones(3), edge_index)  # said "got (3, 1)", the unsqueezed shape
    with pytest.raises(ValueError, match=r"edge_attr must have shape \[E, 3\], got \(2, 2\)"):
        model(torch.ones(3, 3), edge_index, edge_attr=torch.ones(2, 2))  # said [N, 3]
