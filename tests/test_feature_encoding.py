"""The label-free per-column feature transforms, and the piecewise-linear encoding."""
import warnings

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


# ----------------------------------------------------------------------------------------------
# The fitted transform: a scoring graph is mapped by the fitted graph's statistics
# ----------------------------------------------------------------------------------------------
def prepare_before_fitted_transform(data: Data, feature_norm: str, degree_feature: bool,
                                    ple_bins: int) -> torch.Tensor:
    """``prepare_detection_data(data, ...).x`` as computed before FeatureTransform existed
    (frozen here): every stored result was transformed this way."""
    from scipy.stats import norm, rankdata

    from et_graph.transforms import neighbourhood_statistics

    x = data.x if data.x.is_floating_point() else data.x.float()
    if degree_feature:
        x = torch.cat([x, neighbourhood_statistics(x, data.edge_index, ("degree",))], dim=-1)
    if feature_norm == "standard":
        std = x.std(dim=0)
        x = (x - x.mean(dim=0)) / torch.where(std > 0, std, torch.ones_like(std))
    elif feature_norm == "quantile":
        ranks = rankdata(x.double().numpy(), axis=0, method="average")
        x = torch.from_numpy(norm.ppf(ranks / (x.size(0) + 1))).to(x.dtype)
    elif feature_norm == "ple":
        levels = torch.linspace(0, 1, ple_bins + 1, dtype=torch.float64)
        columns = []
        for column in x.double().unbind(dim=1):
            edges = torch.unique(torch.quantile(column, levels))
            if edges.numel() < 2:
                columns.append(column.new_zeros(column.numel(), 1))
            else:
                columns.append(((column.unsqueeze(1) - edges[:-1])
                                / (edges[1:] - edges[:-1])).clamp_(0.0, 1.0))
        x = torch.cat(columns, dim=1).to(x.dtype)
    return x.float()


def awkward_graph(dtype: torch.dtype = torch.float32, seed: int = 0) -> Data:
    """A labelled graph whose columns have raw scales, ties, a constant and integer values."""
    from et_graph.datasets.synthetic import planted_anomaly_graph

    data = planted_anomaly_graph(num_nodes=120, num_features=5, seed=seed)
    x = data.x * torch.tensor([1.0, 10.0, 1000.0, 1.0, 1.0])
    x[:, 3] = x[:, 3].round()  # ties
    x[:, 4] = 3.0              # a constant column
    data.x = x.to(dtype)
    return data


NORMS_AND_BINS = [("none", 16), ("standard", 16), ("quantile", 16), ("ple", 16), ("ple", 3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_fit_transform_is_the_earlier_prepare_detection_data_bit_for_bit(dtype):
    """prepare_detection_data became FeatureTransform.fit_transform: no stored result may move,
    and the fitted transform gives its own graph back unchanged."""
    from et_graph.transforms import FeatureTransform

    data = awkward_graph(dtype)
    if dtype == torch.int64:
        data.x = data.x.abs()
    for (norm, bins), degree in [(nb, d) for nb in NORMS_AND_BINS for d in (False, True)]:
        before = prepare_before_fitted_transform(data, norm, degree, bins)
        transform = FeatureTransform(norm, degree_feature=degree, ple_bins=bins)
        fitted = transform.fit_transform(data).x
        setting = (norm, bins, degree)
        assert fitted.dtype == torch.float32 and torch.equal(fitted, before), setting
        assert torch.equal(prepare_detection_data(data, norm, degree, bins).x, before), setting
        assert torch.equal(transform.transform(data).x, before), setting
        assert torch.equal(FeatureTransform(norm, degree, bins).fit(data).transform(data).x,
                           before), setting


def test_a_nodes_row_is_the_same_alone_in_a_batch_or_in_the_fitted_graph():
    """From a production audit: each graph was transformed with its own statistics, so the same
    raw node got other inputs (by up to 3.08; 10 of 40 predictions flipped), and a lone new
    node became all zeros. A fitted transform maps every graph with the fitted graph's."""
    from torch_geometric.utils import subgraph

    from et_graph.transforms import FeatureTransform

    data = awkward_graph()
    batch = data.x[:, 2].argsort()[-40:].sort().values  # the nodes with the largest column 2
    edges, _ = subgraph(batch, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes)
    alone = Data(x=data.x[7:8], edge_index=torch.zeros(2, 0, dtype=torch.long))
    extra = torch.randn(5, data.x.size(1)) * 100  # new nodes beyond the fitted range too
    grown = Data(x=torch.cat([data.x, extra]), edge_index=data.edge_index)
    for norm in ("standard", "quantile", "ple"):
        transform = FeatureTransform(norm)
        fitted = transform.fit_transform(data).x
        assert torch.equal(transform.transform(Data(x=data.x[batch], edge_index=edges)).x,
                           fitted[batch]), norm
        assert torch.equal(transform.transform(alone).x, fitted[7:8]), norm
        assert torch.equal(transform.transform(grown).x[:data.num_nodes], fitted), norm
        # what each graph transformed by its own statistics gave: other rows
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch: the std of one row
            assert not torch.equal(prepare_detection_data(alone, norm).x, fitted[7:8]), norm


def test_the_degree_column_is_the_scoring_graphs_degree_under_the_fitted_statistics():
    """The degree is a property of the node in the graph transformed (a lone node has none);
    the statistics that map it stay the fitted graph's."""
    from et_graph.transforms import FeatureTransform

    data = awkward_graph()
    isolated = 0  # a fitted node without in-edges
    data.edge_index = data.edge_index[:, data.edge_index[1] != isolated]
    connected = int(torch.bincount(data.edge_index[1]).argmax())
    alone = Data(x=data.x[connected:connected + 1], edge_index=torch.zeros(2, 0, dtype=torch.long))
    # the fitted graph and, apart from it, new nodes with edges among themselves
    extra = torch.randn(3, data.x.size(1))
    grown = Data(x=torch.cat([data.x, extra]),
                 edge_index=torch.cat([data.edge_index, torch.tensor([[120, 121], [122, 122]])], 1))
    for norm in ("standard", "quantile", "ple"):
        transform = FeatureTransform(norm, degree_feature=True)
        fitted = transform.fit_transform(data).x
        without_degree = FeatureTransform(norm).fit_transform(data).x.size(1)
        lone = transform.transform(alone).x[0]
        assert torch.equal(lone[:without_degree], fitted[connected, :without_degree]), norm
        # degree 0 here: the fitted map of degree 0, not the node's degree in the fitted graph
        assert torch.equal(lone[without_degree:], fitted[isolated, without_degree:]), norm
        assert not torch.equal(lone[without_degree:], fitted[connected, without_degree:]), norm
        assert torch.equal(transform.transform(grown).x[:data.num_nodes], fitted), norm


def test_values_outside_the_fitted_range_are_held_at_its_ends():
    """quantile: a fitted value gets its own score, a value between two fitted ones the linear
    interpolation of theirs, a value outside the range the nearer end's; ple saturates at 0 and
    1; standard stays linear."""
    from scipy.stats import norm

    from et_graph.transforms import FeatureTransform

    fitted = Data(x=torch.tensor([[0.0], [1.0], [1.0], [3.0]], dtype=torch.float64),
                  edge_index=torch.zeros(2, 0, dtype=torch.long))
    scores = norm.ppf(torch.tensor([1.0, 2.5, 4.0]).double().numpy() / 5)  # 1 ties at rank 2.5
    new = Data(x=torch.tensor([[-50.0], [0.0], [0.5], [2.0], [3.0], [1e6]], dtype=torch.float64),
               edge_index=torch.zeros(2, 0, dtype=torch.long))
    quantile = FeatureTransform("quantile").fit(fitted).transform(new).x.view(-1)
    expected = [scores[0], scores[0], (scores[0] + scores[1]) / 2, (scores[1] + scores[2]) / 2,
                scores[2], scores[2]]
    torch.testing.assert_close(quantile, torch.tensor(expected, dtype=torch.float32))
    ple = FeatureTransform("ple", ple_bins=2).fit(fitted).transform(new).x  # edges 0, 1, 3
    torch.testing.assert_close(ple, torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.5, 0.0],
                                                  [1.0, 0.5], [1.0, 1.0], [1.0, 1.0]]))
    standard = FeatureTransform("standard").fit(fitted).transform(new).x.view(-1)
    mean, std = fitted.x.mean(), fitted.x.std()
    torch.testing.assert_close(standard, ((new.x.view(-1) - mean) / std).float())


def test_the_fitted_transform_refuses_what_it_cannot_map():
    from et_graph.transforms import FeatureTransform

    data = awkward_graph()
    with pytest.raises(RuntimeError, match="not fitted yet: call fit"):
        FeatureTransform("quantile").transform(data)
    with pytest.raises(RuntimeError, match="not fitted yet"):
        FeatureTransform("quantile").save("never.pt")
    transform = FeatureTransform("standard").fit(data)
    narrower = Data(x=data.x[:, :3], edge_index=data.edge_index)
    with pytest.raises(ValueError, match="data.x has 3 features but the FeatureTransform was "
                                         "fitted on 5"):
        transform.transform(narrower)
    with pytest.raises(ValueError, match="feature_norm must be one of"):
        FeatureTransform("minmax")
    with pytest.raises(ValueError, match="ple_bins must be a positive int"):
        FeatureTransform("ple", ple_bins=0)
    with pytest.raises(ValueError, match="NaN or inf"):  # the graph checks of prepare
        transform.transform(Data(x=torch.full((2, 5), float("nan")),
                                 edge_index=torch.zeros(2, 0, dtype=torch.long)))
    with pytest.raises(ValueError, match="binary"):
        transform.transform(Data(x=data.x, edge_index=data.edge_index, y=data.y + 1))
    beyond = Data(x=data.x.double() * 1e42, edge_index=data.edge_index)
    wide = FeatureTransform("standard").fit(Data(x=data.x.double(), edge_index=data.edge_index))
    with pytest.raises(ValueError, match="after the 'standard' transform reaches"):
        wide.transform(beyond)  # fitted statistics keep far values far: refused for float32
    with pytest.raises(ValueError, match="beyond float32's range, in which this FeatureTransform "
                                         "was fitted .*fit it on the float64 features"):
        transform.transform(beyond)  # fitted on float32: read in it
    half = FeatureTransform("standard").fit(Data(x=data.x.half(), edge_index=data.edge_index))
    assert half.fit_dtype_ == torch.float32  # (not half precision: 7e4 was refused by it)
    assert bool(torch.isfinite(half.transform(Data(x=data.x * 1e4,
                                                   edge_index=data.edge_index)).x).all())


def test_the_fitted_transform_pickles_saves_and_reads_no_label(tmp_path):
    """It is kept beside the detector: plain tensors (on the CPU), a pickle round trip and a
    save() file that torch.load(weights_only=True) reads; the labels never reach it."""
    import pickle

    from et_graph.transforms import FeatureTransform

    data = awkward_graph(seed=1)
    new = awkward_graph(seed=2)
    del new.y
    flipped = data.clone()
    flipped.y = 1 - data.y
    for norm, bins in NORMS_AND_BINS:
        transform = FeatureTransform(norm, degree_feature=True, ple_bins=bins).fit(data)
        expected = transform.transform(new).x
        assert torch.equal(FeatureTransform(norm, True, bins).fit(flipped).transform(new).x,
                           expected)
        statistics = [getattr(transform, name) for name in FeatureTransform.STATISTICS[norm]]
        tensors = [t for s in statistics for t in (s if isinstance(s, list) else [s])]
        assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in tensors)
        copy = pickle.loads(pickle.dumps(transform))
        assert torch.equal(copy.transform(new).x, expected), norm
        path = tmp_path / f"{norm}-{bins}.pt"
        transform.save(path)
        assert isinstance(torch.load(path, weights_only=True), dict)
        loaded = FeatureTransform.load(path)
        assert repr(loaded) == repr(transform)
        assert torch.equal(loaded.transform(new).x, expected), norm
        assert torch.equal(loaded(new).x, expected)  # also a PyG transform
    # small beside the graph: a few numbers per column, and two per distinct value (quantile)
    assert len(pickle.dumps(FeatureTransform("ple").fit(data))) < 8_000
    with pytest.raises(FileNotFoundError, match="no feature transform file"):
        FeatureTransform.load(tmp_path / "missing.pt")
    (tmp_path / "text.pt").write_text("not a transform", encoding="utf-8")
    with pytest.raises(ValueError, match="is not a FeatureTransform written by save"):
        FeatureTransform.load(tmp_path / "text.pt")
    torch.save({"format": "something else"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="is not a FeatureTransform written by save"):
        FeatureTransform.load(tmp_path / "other.pt")


def test_ple_bins_is_read_and_checked_by_ple_alone():
    """prepare_detection_data(data, "none", ple_bins=0) was accepted (and ignored) before the
    fitted transform; it raised after it."""
    import numpy as np

    data = Data(x=torch.randn(6, 2), edge_index=torch.tensor([[0, 1], [1, 2]]))
    assert torch.equal(prepare_detection_data(data, "standard", ple_bins=0).x,
                       prepare_detection_data(data, "standard").x)
    prepare_detection_data(data, "none", ple_bins=np.int64(4))
