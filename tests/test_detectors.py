"""Detectors with PyGOD's conventions: fit / decision_function / predict, clear errors, one
source of defaults shared with the CLI."""
import re
import warnings

import numpy as np
import pytest
import torch
from helpers import planted_graph_with_masks, results_keeping_random_streams

from et_graph.config import parse
from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import (
    DETECTORS,
    ETDetector,
    GATDetector,
    GBTDetector,
    GBTModelConfig,
    GCNDetector,
    MLPDetector,
    StackedETDetector,
    UnsupervisedETDetector,
)
from et_graph.exceptions import DataWarning, ETGraphWarning, ReproducibilityWarning
from et_graph.protocols.anomaly_config import AnomalyConfig, detector_config

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def graph():
    return planted_graph_with_masks(240, seed=3)


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_fit_decision_function_predict(graph, name):
    det = DETECTORS[name](epochs=3) if name != "gbt" else DETECTORS[name](max_iter=20)
    assert det.fit(graph) is det
    score = det.decision_function(graph)
    assert score.shape == (240,) and score.dtype == torch.float32
    assert torch.equal(score, det.decision_score_)
    assert 0.0 < det.threshold_ < 1.0
    pred = det.predict(graph)
    assert pred.dtype == torch.long and set(pred.unique().tolist()) <= {0, 1}
    assert torch.equal(pred, (score >= det.threshold_).long())
    pred2, score2, prob = det.predict(graph, return_score=True, return_prob=True)
    assert torch.equal(pred2, pred) and torch.equal(score2, score)
    assert bool(((prob >= 0) & (prob <= 1)).all())
    if name != "gbt":
        assert len(det.history_) == 3 and det.fit_info_["epochs_run"] == 3


@pytest.mark.parametrize("name", ["et", "gbt"])
def test_labels_outside_train_and_val_are_never_read(graph, name):
    """Test nodes may be unlabelled (-1) or carry any label: fit blanks them before training,
    so the scores are bit-identical; bool labels are read as 0/1."""
    make = (lambda: ETDetector(epochs=2, hidden=16, label_trick=True)) if name == "et" else (
        lambda: GBTDetector(max_iter=10))
    reference = make().fit(graph).decision_function(graph)
    unlabelled = graph.clone()
    unlabelled.y = graph.y.clone()
    unlabelled.y[graph.test_mask] = -1
    assert torch.equal(make().fit(unlabelled).decision_function(graph), reference)
    scrambled = graph.clone()
    scrambled.y = graph.y.clone()
    scrambled.y[graph.test_mask] = 1 - graph.y[graph.test_mask]
    assert torch.equal(make().fit(scrambled).decision_function(graph), reference)
    as_bool = graph.clone()
    as_bool.y = graph.y.bool()
    assert torch.equal(make().fit(as_bool).decision_function(graph), reference)
    unlabelled.y[graph.train_mask.nonzero()[0]] = -1  # a training node must be labelled
    with pytest.raises(ValueError, match="binary on the training and validation nodes"):
        make().fit(unlabelled)


def test_gbt_reads_features_that_require_grad(graph):
    leaf = graph.clone()
    leaf.x = graph.x.clone().requires_grad_()
    assert GBTDetector(max_iter=5).fit(leaf).decision_function(leaf).shape == (240,)


def test_inductive_scoring_of_another_graph(graph):
    det = MLPDetector(epochs=2).fit(graph)
    other = planted_anomaly_graph(90, seed=9)
    assert det.decision_function(other).shape == (90,)
    with pytest.raises(ValueError, match="fitted on 8"):
        det.decision_function(planted_anomaly_graph(50, num_features=5))


def test_explicit_masks_override_data_masks(graph):
    train = torch.zeros(240, dtype=torch.bool)
    train[:150] = True
    val = ~train
    det = GBTDetector(max_iter=10).fit(graph, train_mask=train, val_mask=val)
    assert det.threshold_ is not None


def test_a_detector_fitted_with_a_callback_pickles_without_it(graph):
    """A tuning loop's on_epoch lambda made pickle, joblib and a process pool's transfer of the
    fitted detector fail (save() dropped it already: a multiprocessing audit)."""
    import copy
    import pickle

    det = MLPDetector(epochs=2, hidden=8)
    det.on_epoch = lambda *args, **kwargs: None
    det.fit(graph)
    again = pickle.loads(pickle.dumps(det))
    assert again.on_epoch is None and det.on_epoch is not None
    assert torch.equal(again.decision_function(graph), det.decision_function(graph))
    assert copy.deepcopy(det).on_epoch is None


def test_malformed_graphs_get_the_checks_message_before_the_edge_data_warning(graph):
    """The unread-edge-data check ran before the graph checks and hid their messages behind an
    AttributeError (a review)."""
    from torch_geometric.data import Data, HeteroData

    from et_graph.detectors import UnsupervisedETDetector

    det = GBTDetector(max_iter=5).fit(graph)
    hetero = HeteroData()
    hetero["a"].x = torch.randn(6, graph.num_features)
    cases = [(Data(x=torch.randn(6, graph.num_features)), ValueError, "edge_index"),
             (hetero, TypeError, "to_homogeneous"),
             (Data(x=torch.randn(6, graph.num_features), edge_index=np.array([[0, 1], [1, 2]])),
              TypeError, "ndarray")]
    for data, error, message in cases:
        with pytest.raises(error, match=message):
            det.decision_function(data)
        with pytest.raises(error, match=message):
            UnsupervisedETDetector(epochs=1).fit(data)


def test_masks_reaching_outside_the_label_mask_are_refused(graph):
    """Unlabelled nodes (label_mask False, placeholder label 0) trained as normal ones when the
    masks reached them, in Python; the command line's splits refused it (an input audit)."""
    from torch_geometric.data import Data

    from et_graph.protocols.anomaly import stratified_split

    data = graph.clone()
    data.label_mask = torch.ones(240, dtype=torch.bool)
    data.label_mask[::4] = False
    data.y[~data.label_mask] = 0
    with pytest.raises(ValueError, match=r"train_mask holds \d+ nodes that data.label_mask "
                                         "marks unlabelled"):
        GBTDetector(max_iter=5).fit(data)
    split = stratified_split(data.y, 0.4, 2, eligible=data.label_mask)
    train, val, _ = split.masks(240)
    assert GBTDetector(max_iter=5).fit(data, train, val).threshold_ is not None
    data.label_mask = data.label_mask.long()  # 0/1 integers read as the loaders read them
    assert GBTDetector(max_iter=5).fit(data, train, val).threshold_ is not None
    for other in (data.label_mask.float(), data.label_mask.view(-1, 1)):  # (a review)
        assert GBTDetector(max_iter=5).fit(Data(x=data.x, edge_index=data.edge_index,
                                                y=data.y, label_mask=other),
                                           train, val).threshold_ is not None
    with pytest.raises(ValueError, match="train_mask holds"):
        GBTDetector(max_iter=5).fit(data)
    data.label_mask[0] = 2
    with pytest.raises(ValueError, match=r"label_mask must be a bool \(or 0/1\) tensor"):
        GBTDetector(max_iter=5).fit(data, train, val)


def test_clear_errors(graph):
    det = ETDetector(epochs=1)
    with pytest.raises(RuntimeError, match="not fitted"):
        det.predict(graph)
    unlabelled = graph.clone()
    del unlabelled.y
    with pytest.raises(ValueError, match="data.y"):
        det.fit(unlabelled)
    no_masks = planted_anomaly_graph(100)
    with pytest.raises(ValueError, match="train_mask"):
        det.fit(no_masks)
    multi = graph.clone()
    multi.train_mask = torch.stack([graph.train_mask] * 3, dim=1)
    with pytest.raises(ValueError, match=r"data.train_mask\[:, i\]"):
        det.fit(multi)
    no_anomaly = graph.train_mask & (graph.y == 0)
    with pytest.raises(ValueError, match="no anomalous node"):
        det.fit(graph, train_mask=no_anomaly, val_mask=graph.val_mask)
    # only anomalies: the class weight #normal / #anomalous would be 0 and nothing would train
    only_anomalies = graph.train_mask & (graph.y == 1)
    with pytest.raises(ValueError, match="no normal node"):
        det.fit(graph, train_mask=only_anomalies, val_mask=graph.val_mask)
    fractional = graph.clone()
    fractional.y = fractional.y.float()
    fractional.y[graph.train_mask.nonzero()[0]] = 0.5  # .long() would make it a silent 0
    with pytest.raises(ValueError, match="binary"):
        det.fit(fractional)
    with pytest.raises(ValueError, match="overlap"):
        det.fit(graph, train_mask=graph.train_mask, val_mask=graph.train_mask)
    with pytest.raises(ValueError, match="bool tensor"):
        det.fit(graph, train_mask=graph.train_mask.long(), val_mask=graph.val_mask)
    bad_edges = graph.clone()
    bad_edges.edge_index = bad_edges.edge_index + 1000
    with pytest.raises(ValueError, match="outside"):
        det.fit(bad_edges)
    with pytest.raises(TypeError, match="unknown keyword"):
        ETDetector(hiden=3)
    with pytest.raises(ValueError, match="select_metric"):
        ETDetector(select_metric="accuracy")
    with pytest.raises(ValueError, match="must be an integer"):
        ETDetector(epochs=2.5)


def test_one_source_of_defaults():
    """The detector's defaults, the run config's defaults and the CLI's defaults agree."""
    from_cli = parse(AnomalyConfig, [])
    assert from_cli == AnomalyConfig()
    assert ETDetector().config == detector_config(from_cli, "et")
    assert GCNDetector().config.model == detector_config(from_cli, "gcn").model
    assert GCNDetector().config.train == detector_config(from_cli, "gcn").train
    assert GBTDetector().config == detector_config(from_cli, "gbt")
    assert ETDetector(hidden=32).config.model.hidden == 32


@pytest.mark.parametrize("name", ["MLPNet", "GCNNet", "GATNet"])
def test_baseline_networks_take_their_depth_and_load_two_layer_state_dicts(name):
    import et_graph.baselines as baselines

    network = getattr(baselines, name)
    graph = planted_anomaly_graph(60, seed=1)
    torch.manual_seed(0)
    default = network(8, 16).eval()
    torch.manual_seed(0)
    two = network(8, 16, layers=2).eval()
    out = default(graph.x, graph.edge_index)
    assert torch.equal(two(graph.x, graph.edge_index), out)  # the default depth is two
    linear = torch.nn.Linear
    for layers in (1, 3):
        deeper = network(8, 16, layers=layers).eval()
        if name == "MLPNet":  # layers hidden Linear layers and the head
            assert sum(isinstance(m, linear) for m in deeper.net) == layers + 1
        else:
            assert len(deeper.convs) == layers
        assert deeper(graph.x, graph.edge_index).shape == out.shape
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="layers"):
            network(8, 16, layers=bad)
    if name != "MLPNet":
        # a detector saved when the networks had two layers named conv1 and conv2
        legacy = {key.replace("convs.0.", "conv1.").replace("convs.1.", "conv2."): value
                  for key, value in default.state_dict().items()}
        assert any(key.startswith("conv1.") for key in legacy)
        fresh = network(8, 16).eval()
        fresh.load_state_dict(legacy)
        assert torch.equal(fresh(graph.x, graph.edge_index), out)
        # a detector pickled whole (save()) with such a network scores as before
        import pickle

        old_layout = network(8, 16).eval()
        old_layout.load_state_dict(default.state_dict())
        first, second = old_layout.convs
        del old_layout.convs
        old_layout.conv1, old_layout.conv2 = first, second
        old_layout._load_state_dict_pre_hooks.clear()
        restored = pickle.loads(pickle.dumps(old_layout))
        assert torch.equal(restored(graph.x, graph.edge_index), out)
        restored.load_state_dict(legacy)


@pytest.mark.parametrize("model", ["mlp", "gcn", "gat"])
def test_baseline_depth_reaches_the_detectors_from_the_run_config(model):
    from et_graph.protocols.anomaly_config import with_detector_config

    config = parse(AnomalyConfig, ["--baseline-layers", "3", "--baseline-hidden", "8"])
    det_config = detector_config(config, model)
    assert det_config.model.layers == 3
    # the tuner's presets write a detector's settings back into the run config
    assert with_detector_config(AnomalyConfig(), model, det_config).baselines.baseline_layers == 3
    detector = {"mlp": MLPDetector, "gcn": GCNDetector, "gat": GATDetector}[model]
    network = detector(layers=3, hidden=8).build_network(5, 20)
    layers = (sum(isinstance(m, torch.nn.Linear) for m in network.net) - 1 if model == "mlp"
              else len(network.convs))
    assert layers == 3
    with pytest.raises(ValueError, match="baseline_layers"):
        parse(AnomalyConfig, ["--baseline-layers", "0"])


def test_gcn_adjacency_cache_follows_the_graph():
    from et_graph.baselines import GCNNet

    net = GCNNet(8, 16).eval()
    a, b = planted_anomaly_graph(60, seed=1), planted_anomaly_graph(60, seed=2)
    out_a = net(a.x, a.edge_index)
    assert torch.equal(net(a.x, a.edge_index), out_a)  # reused for the same graph
    fresh = GCNNet(8, 16).eval()
    fresh.load_state_dict(net.state_dict())
    # A different graph right after: the cache must not hand it a's adjacency.
    assert torch.allclose(net(b.x, b.edge_index), fresh(b.x, b.edge_index))
    edge_index = a.edge_index.clone()
    net(a.x, edge_index)
    edge_index[:, :10] = edge_index[:, 10:20].clone()  # edited in place: version changes
    assert torch.allclose(net(a.x, edge_index), fresh(a.x, edge_index))
    assert not torch.allclose(net(a.x, edge_index), out_a)


def test_mini_batch_training_partitions_every_node_each_epoch(graph):
    from et_graph.detectors.config import NodeTrainConfig
    from et_graph.detectors.neural import NodeAnomalyTask

    config = NodeTrainConfig(batch_size=50)
    task = NodeAnomalyTask(graph, graph.y, graph.train_mask, graph.val_mask, config,
                           torch.Generator().manual_seed(0), True, torch.device("cpu"))
    batches = list(task.batches(0))
    assert len(batches) == 5  # ceil(240 / 50)
    seen = torch.cat([nodes for _, _, nodes, _ in batches])
    assert sorted(seen.tolist()) == list(range(240))
    edges = {tuple(e) for e in graph.edge_index.t().tolist()}
    kept = 0
    for x, edge_index, nodes, local in batches:
        assert x.shape == (nodes.numel(), 8) and edge_index.max() < nodes.numel()
        for s, d in nodes[edge_index].t().tolist():  # local ids map back to real edges
            assert (s, d) in edges
            kept += 1
        assert bool(graph.train_mask[nodes[local]].all())
    assert 0 < kept < len(edges)  # edges across parts are dropped
    det = ETDetector(epochs=2, batch_size=64, positional=True).fit(graph)
    assert det.decision_function(graph).shape == (240,)
    with pytest.raises(ValueError, match="choose one"):
        ETDetector(batch_size=10, subgraph_ratio=0.2)


def test_gbt_max_features_subsamples_columns(graph):
    """``max_features`` reaches scikit-learn and changes the trees (a per-split column draw),
    and out-of-range shares are refused before any fit."""
    full = GBTDetector(max_iter=20).fit(graph)
    sub = GBTDetector(max_iter=20, max_features=0.3).fit(graph)
    assert sub.model_.max_features == 0.3 and full.model_.max_features == 1.0
    assert not torch.equal(full.decision_function(graph), sub.decision_function(graph))
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="max_features"):
            GBTDetector(max_features=bad)


def test_quantile_binner_grows_scikit_learns_unweighted_trees():
    """Without sample weights, scikit-learn on the binned columns grows exactly the trees it
    grows on the raw columns (the binner reproduces its unweighted edges); narrow columns are
    untouched, wide ones keep at most 255 ordered codes, and unseen values map monotonically."""
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingClassifier

    from et_graph.detectors.tree import QuantileBinner

    rng = np.random.default_rng(0)
    n = 2000
    x = np.column_stack([rng.normal(size=n), rng.integers(0, 5, n), rng.exponential(size=n) ** 3,
                         np.round(rng.normal(size=n), 1)]).astype(np.float32)
    y = (x[:, 0] + 0.1 * x[:, 2] + rng.normal(size=n) > 1).astype(int)
    binner = QuantileBinner().fit(x)
    codes = binner.transform(x)
    assert binner.wide_.tolist() == [0, 2]
    assert np.array_equal(codes[:, [1, 3]], x[:, [1, 3]])
    assert all(len(np.unique(codes[:, c])) <= 255 for c in (0, 2))
    order = np.argsort(x[:, 0])
    assert (np.diff(codes[order, 0]) >= 0).all()
    raw = HistGradientBoostingClassifier(max_iter=25, random_state=0).fit(x, y)
    binned = HistGradientBoostingClassifier(max_iter=25, random_state=0).fit(codes, y)
    assert np.array_equal(raw.predict_proba(x), binned.predict_proba(codes))
    unseen = np.array([[-1e9, 0, 1e9, 0]], dtype=np.float32)
    assert binner.transform(unseen)[0, 0] == 0
    assert binner.transform(unseen)[0, 2] == len(binner.edges_[1])
    with pytest.raises(ValueError, match="finite"):
        QuantileBinner().fit(np.full((3, 2), np.nan))


def test_gbt_unweighted_binning_is_an_option(graph):
    """``binning="unweighted"`` bins before the fit and scores through the same binner; the
    default keeps scikit-learn's weighted binning; unknown values are refused."""
    weighted = GBTDetector(max_iter=20).fit(graph)
    unweighted = GBTDetector(max_iter=20, binning="unweighted").fit(graph)
    assert weighted.binner_ is None and unweighted.binner_ is not None
    scores = unweighted.decision_function(graph)
    assert scores.shape == (graph.num_nodes,) and bool(torch.isfinite(scores).all())
    with pytest.raises(ValueError, match="binning"):
        GBTDetector(binning="exact")


def test_gbt_class_balance_none_fits_without_sample_weights(graph, monkeypatch):
    """The trees weigh anomalies by #normal / #anomalous unless ``class_balance="none"``, which
    hands scikit-learn no sample weights at all (so its binning is unweighted too)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    seen = []
    original = HistGradientBoostingClassifier.fit

    def recording(self, features, y, sample_weight=None):
        seen.append(sample_weight)
        return original(self, features, y, sample_weight=sample_weight)

    monkeypatch.setattr(HistGradientBoostingClassifier, "fit", recording)
    weighted = GBTDetector(max_iter=10).fit(graph)
    plain = GBTDetector(max_iter=10, class_balance="none").fit(graph)
    assert seen[0] is not None and seen[0].max() > 1.0 and seen[0].min() == 1.0
    assert seen[1] is None
    assert not torch.equal(weighted.decision_function(graph), plain.decision_function(graph))
    assert parse(AnomalyConfig, ["--gbt-class-balance", "none"]).gbt.class_balance == "none"
    with pytest.raises(ValueError, match="class_balance"):
        GBTDetector(class_balance="sample")


def test_gcn_adjacency_cache_is_not_fooled_by_a_reused_address():
    """A new mini-batch's edge_index may land in a freed batch's memory with the same shape; a
    cache keyed on the address would hand it the old adjacency."""
    from et_graph.baselines import GCNNet

    torch.manual_seed(0)
    net = GCNNet(8, 16).eval()
    fresh = GCNNet(8, 16).eval()
    fresh.load_state_dict(net.state_dict())
    x = torch.randn(40, 8)
    for _ in range(20):  # (the allocator often reuses the block here; the old cache failed)
        edge_index = torch.randint(0, 40, (2, 120))
        net(x, edge_index)
        del edge_index
        other = torch.randint(0, 40, (2, 120))
        assert torch.allclose(net(x, other), fresh(x, other))


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_save_and_load_score_bit_for_bit(graph, name, tmp_path):
    det = DETECTORS[name](epochs=2) if name != "gbt" else DETECTORS[name](max_iter=10)
    with pytest.raises(RuntimeError, match="not fitted"):
        det.save(tmp_path / "unfitted.pt")
    det.fit(graph)
    det.save(tmp_path / "det.pt")
    loaded = DETECTORS[name].load(tmp_path / "det.pt")
    assert type(loaded) is type(det) and loaded is not det
    assert loaded.threshold_ == det.threshold_ and loaded.get_config() == det.get_config()
    assert torch.equal(loaded.decision_function(graph), det.decision_function(graph))
    assert torch.equal(loaded.predict(graph), det.predict(graph))
    # A file of another detector, and a file that is no detector, are refused by name.
    other = MLPDetector if name != "mlp" else GBTDetector
    with pytest.raises(TypeError, match=f"not a {other.__name__}"):
        other.load(tmp_path / "det.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "weights.pt")
    with pytest.raises(ValueError, match="not a detector written by"):
        ETDetector.load(tmp_path / "weights.pt")


def test_unsupervised_detector_saves_too(graph, tmp_path):
    from et_graph.detectors import UnsupervisedETDetector

    det = UnsupervisedETDetector(seed=0, epochs=3, score_rounds=2).fit(graph)
    det.save(tmp_path / "unsup.pt")
    loaded = UnsupervisedETDetector.load(tmp_path / "unsup.pt")
    assert torch.equal(loaded.decision_function(graph), det.decision_function(graph))
    # ETDetector(supervised=False) builds one, so ETDetector.load reads it back (it refused)
    again = ETDetector.load(tmp_path / "unsup.pt")
    assert isinstance(again, UnsupervisedETDetector)
    with pytest.raises(TypeError, match="not a MLPDetector"):
        MLPDetector.load(tmp_path / "unsup.pt")
    wide = graph.clone()
    wide.x = wide.x.double()  # float64 features are read as float32, as the supervised ones
    assert torch.equal(det.decision_function(wide), det.decision_function(graph))


@pytest.mark.parametrize("name", ["et", "mlp", "gcn"])
def test_float64_and_integer_features_are_read_in_the_networks_dtype(graph, name):
    """Features from NumPy often arrive as float64: the detector scores them as it would the
    float32 copy, and leaves the caller's data as it was."""
    det = DETECTORS[name](epochs=2, seed=0).fit(graph)
    wide = graph.clone()
    wide.x = wide.x.double()
    assert torch.equal(det.decision_function(wide), det.decision_function(graph))
    assert wide.x.dtype == torch.float64
    refit = DETECTORS[name](epochs=2, seed=0).fit(wide)
    assert torch.equal(refit.decision_function(graph), det.decision_function(graph))
    counts = graph.clone()
    counts.x = counts.x.round().long()
    assert det.decision_function(counts).shape == (240,)


def test_load_refuses_files_save_did_not_write(tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("not a detector", encoding="utf-8")
    with pytest.raises(ValueError, match="not a detector"):
        ETDetector.load(text)
    torch.save({"weights": torch.zeros(1000)}, tmp_path / "whole.pt")
    truncated = tmp_path / "truncated.pt"  # a save cut short (a full disk, a killed copy)
    truncated.write_bytes((tmp_path / "whole.pt").read_bytes()[:300])
    with pytest.raises(ValueError, match="not a detector"):
        MLPDetector.load(truncated)
    with pytest.raises(FileNotFoundError, match="no detector file"):
        MLPDetector.load(tmp_path / "missing.pt")


def test_load_names_a_cut_file_and_a_missing_device_for_what_they_are(graph, tmp_path):
    """A save cut anywhere (not only in its first bytes) is a ValueError naming the file; a
    device this machine lacks is named as such, not blamed on a sound file."""
    det = MLPDetector(epochs=1, hidden=8).fit(graph)
    det.save(tmp_path / "d.pt")
    whole = (tmp_path / "d.pt").read_bytes()
    for fraction in (0.1, 0.5, 0.9, 0.99):
        cut = tmp_path / f"cut{fraction}.pt"
        cut.write_bytes(whole[:int(len(whole) * fraction)])
        with pytest.raises(ValueError, match="truncated") as error:
            MLPDetector.load(cut)
        assert str(cut) in str(error.value)
    with pytest.raises(ValueError, match="device must be"):
        MLPDetector.load(tmp_path / "d.pt", map_location="gpu")
    for odd in (None, {"cuda:0": "cpu"}):  # torch.load's other forms: a raw TypeError before
        with pytest.raises(TypeError, match="map_location must be a device"):
            MLPDetector.load(tmp_path / "d.pt", map_location=odd)
    with pytest.raises(ValueError, match="'meta' holds no values"):  # Tensor.item() failed
        MLPDetector.load(tmp_path / "d.pt", map_location="meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            MLPDetector.load(tmp_path / "d.pt", map_location="cuda")
        with pytest.raises(ValueError, match="no CUDA GPU"):
            MLPDetector(device="cuda")
    assert MLPDetector.load(tmp_path / "d.pt", map_location="cpu:0").device.type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert MLPDetector.load(tmp_path / "d.pt", map_location="auto").device.type == expected


def test_edge_data_the_detectors_do_not_read_is_named_in_a_warning(graph, tmp_path):
    weighted = graph.clone()
    weighted.edge_weight = torch.rand(graph.edge_index.size(1))
    with pytest.warns(UserWarning, match="ignores data.edge_weight") as caught:
        det = MLPDetector(epochs=1).fit(weighted)
    assert len([w for w in caught if "ignores" in str(w.message)]) == 1  # once per fit
    with pytest.warns(UserWarning, match="ignores data.edge_weight"):  # scoring said nothing
        det.decision_function(weighted)
    from et_graph.detectors import UnsupervisedETDetector

    with pytest.warns(UserWarning, match="ignores data.edge_weight"):
        UnsupervisedETDetector(epochs=1, score_rounds=1).fit(weighted)
    # networkx's edge weight, as from_networkx names it (an input audit: said nothing)
    from_networkx = graph.clone()
    from_networkx.weight = torch.rand(graph.edge_index.size(1))
    with pytest.warns(UserWarning, match="ignores data.weight: the detectors read"):
        det.decision_function(from_networkx)
    from et_graph.detectors.base import UNUSED_EDGE_DATA, unused_edge_data_said

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with unused_edge_data_said(True):  # said once already: silenced, whatever the name
            det.decision_function(from_networkx)
    assert re.match(UNUSED_EDGE_DATA, "MLPDetector ignores data.edge_weight and data.weight: "
                                      "the detectors read x")
    # the check leaves the graph as it was: it still saves for a weights-only load (PyG's
    # is_edge_attr, tried first, cached enum values in it, which such a load refuses)
    from et_graph.datasets.embedded import load_pyg_file

    torch.save(from_networkx, tmp_path / "g.pt")
    with pytest.warns(UserWarning):  # (the loader names the unread weight too)
        load_pyg_file(tmp_path / "g.pt")


@pytest.mark.parametrize("make, message", [
    (lambda: ETDetector(alpha=-1), "alpha"),
    (lambda: ETDetector(alpha=0), "alpha"),
    (lambda: ETDetector(dropout=1.5), "dropout"),
    (lambda: ETDetector(noise_std=-1), "noise_std"),
    (lambda: ETDetector(hopfield_dim=-2), "hopfield_dim"),
    (lambda: MLPDetector(dropout=-0.1), "dropout"),
    (lambda: GATDetector(gat_heads=0), "gat_heads"),
    (lambda: GBTDetector(max_iter=0), "max_iter"),
    (lambda: GBTDetector(learning_rate=0), "learning_rate"),
    (lambda: GBTDetector(max_leaf_nodes=1), "max_leaf_nodes"),
    # accepted before, and failed only in fit (or not at all)
    (lambda: ETDetector(alpha=float("inf")), "alpha"),
    (lambda: ETDetector(supervised=False, alpha=-1.0), "alpha"),
    (lambda: ETDetector(supervised=False, noise_std=-1.0), "noise_std"),
    (lambda: ETDetector(supervised=False, hopfield_dim=-1), "hopfield_dim"),
    # a fraud-data audit: seed=1.7 ran as seed 1
    (lambda: ETDetector(seed=1.7), "seed must be an int >= 0"),
    (lambda: GBTDetector(seed=-1), "seed must be an int >= 0"),
])
def test_bad_settings_are_refused_at_construction(make, message):
    """Not first inside fit (scikit-learn's InvalidParameterError), nor never (alpha < 0
    would ascend the energy)."""
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("name", ["et", "mlp", "gbt", "unsupervised"])
def test_fit_leaves_the_callers_random_streams_alone(graph, name):
    """fit seeded torch and NumPy globally: whatever seed the user had set, the draws after a
    fit were the same (seed 0's). The fit is still reproducible, whatever the caller's state."""

    from et_graph.detectors import UnsupervisedETDetector

    make = {"et": lambda: ETDetector(epochs=2, hidden=16, dropout=0.2),
            "mlp": lambda: MLPDetector(epochs=2, hidden=16),
            "gbt": lambda: GBTDetector(),
            "unsupervised": lambda: UnsupervisedETDetector(epochs=2, hidden=16)}[name]
    scores = results_keeping_random_streams(lambda: make().fit(graph).decision_function(graph))
    torch.testing.assert_close(scores[0], scores[1], rtol=0, atol=0)


def test_self_loops_change_no_detector_that_reads_neighbours(graph):
    """GBT's neighbour means and the neighbourhood statistics counted a self-loop as a
    neighbour while ET ignores it: the same graph with self-loops gave GBT other scores
    (0.86 apart). A node is nobody's neighbour of itself now, in every detector."""
    from torch_geometric.utils import add_self_loops

    from et_graph.transforms.neighbourhood import neighbourhood_statistics

    looped = graph.clone()
    looped.edge_index, _ = add_self_loops(graph.edge_index, num_nodes=graph.num_nodes)
    for make in (lambda: GBTDetector(), lambda: ETDetector(epochs=2, hidden=16)):
        plain = make().fit(graph).decision_function(graph)
        torch.testing.assert_close(make().fit(looped).decision_function(looped), plain)
    # a GBT saved before (no ignores_self_loops_) scores the features it was trained on
    old = GBTDetector().fit(graph)
    del old.ignores_self_loops_
    from et_graph.detectors.tree import neighbourhood_features
    counted = neighbourhood_features(graph.x, looped.edge_index, self_loops=True)
    expected = old.model_.predict_proba(counted)[:, 1]
    torch.testing.assert_close(old.decision_function(looped).double(),
                               torch.from_numpy(expected).double(), rtol=1e-6, atol=1e-7)
    stats = ("mean", "sq_mean", "max", "min", "std", "degree")
    torch.testing.assert_close(neighbourhood_statistics(graph.x, looped.edge_index, stats),
                               neighbourhood_statistics(graph.x, graph.edge_index, stats))
    from et_graph.transforms import prepare_detection_data

    torch.testing.assert_close(prepare_detection_data(looped, degree_feature=True).x,
                               prepare_detection_data(graph, degree_feature=True).x)


def test_positional_detector_refuses_another_graph_of_the_same_size(graph):
    """positional=True learns an embedding per node of the fitted graph; another graph with as
    many nodes was scored with them, silently (only another node count was refused)."""
    det = ETDetector(epochs=2, hidden=16, positional=True).fit(graph)
    same = graph.clone()
    same.x = same.x + 0.1  # new features on the fitted graph: still the fitted graph
    assert det.decision_function(same).shape == (graph.num_nodes,)
    shuffled = graph.clone()  # the fitted graph with its edges in another order
    shuffled.edge_index = graph.edge_index[:, torch.randperm(graph.edge_index.size(1))]
    torch.testing.assert_close(det.decision_function(shuffled), det.decision_function(graph))
    other = planted_anomaly_graph(graph.num_nodes, seed=9)
    with pytest.raises(ValueError, match="positional=True"):
        det.decision_function(other)
    with pytest.raises(ValueError, match="positional=True"):  # the energy read them too
        det.node_energy(other)
    # a detector saved before the check (no fit_edge_index_) still scores its graph
    det.fit_edge_index_ = det.fit_num_nodes_ = None
    assert det.decision_function(graph).shape == (graph.num_nodes,)


def test_numpy_attributes_are_read_or_named(graph):
    """A NumPy train_mask or y on the Data object crashed with "'numpy.ndarray' object has no
    attribute 'dim'" (the same arrays passed as arguments worked). Masks and labels are now
    read like tensors; NumPy features are named with the fix."""
    data = graph.clone()
    data.train_mask, data.val_mask = graph.train_mask.numpy(), graph.val_mask.numpy()
    data.y = graph.y.numpy()
    scores = GBTDetector().fit(data).decision_function(graph)
    torch.testing.assert_close(scores, GBTDetector().fit(graph).decision_function(graph))
    data.x = graph.x.numpy()
    with pytest.raises(TypeError, match=r"data.x is a ndarray.*torch.as_tensor"):
        GBTDetector().fit(data)


def test_a_list_or_heterodata_is_named_as_not_a_data_object(graph):
    """ETDetector.fit([data]) said the data had no labels and suggested supervised=False."""
    from torch_geometric.data import HeteroData

    for wrong in ([graph], HeteroData()):
        for make in (ETDetector, GBTDetector):
            with pytest.raises(TypeError, match="must be a torch_geometric.data.Data"):
                make().fit(wrong)
    with pytest.raises(TypeError, match="to_homogeneous"):  # what to do with one
        ETDetector().fit(HeteroData())


def test_settings_a_detector_ignores_or_cannot_use_fail_at_construction():
    """GBTDetector(features='zz') failed only in fit; MLPDetector(gat_heads=8) was accepted
    and ignored (it shares GAT's config)."""
    with pytest.raises(ValueError, match="features must be one of"):
        GBTDetector(features="zz")
    for make in (MLPDetector, GCNDetector):
        with pytest.raises(ValueError, match="does not use gat_heads"):
            make(gat_heads=8)
    assert GATDetector(gat_heads=8).config.model.gat_heads == 8


def test_a_refused_resume_names_what_changed(graph, tmp_path):
    """Through the detectors (and the CLI) every change gave the same generic message: their
    whole config is the fingerprint, and it was compared before the training settings."""
    from et_graph.training import CheckpointConfig

    def fit(**settings):
        det = ETDetector(**{"epochs": 2, "hidden": 16, **settings})
        det.checkpoint = CheckpointConfig(str(tmp_path), resume=True)
        return det.fit(graph)

    fit()
    with pytest.raises(ValueError, match=r"other training settings \(lr differ\)"):
        fit(lr=0.05)
    with pytest.raises(ValueError, match=r"another configuration \(now: hidden=8\)"):
        fit(hidden=8)
    # another split: the data digest was named by its hash alone (a scale audit)
    det = ETDetector(epochs=2, hidden=16)
    det.checkpoint = CheckpointConfig(str(tmp_path), resume=True)
    with pytest.raises(ValueError, match=r"now: data=\w+ \(the data: another graph, features, "
                                         r"split or training labels\)"):
        det.fit(graph, train_mask=graph.val_mask, val_mask=graph.train_mask)


def test_out_of_memory_hints_fit_the_detector():
    """MLP/GCN/GAT were told to use chunk_size, which they refuse; a mini-batch run was told
    that full-batch training did not fit."""
    assert "chunk_size" in ETDetector()._oom_hint()
    assert "chunk_size" not in MLPDetector()._oom_hint()
    assert "smaller batch_size" in ETDetector(batch_size=64)._oom_hint()
    assert "node partitions" in GATDetector()._oom_hint()
    # (a scale audit) full batch pointed at partitions, not at neighbour sampling; a run with
    # chunks was told to pass them; scoring ran out with the allocator's raw error
    assert "num_neighbors" in ETDetector()._oom_hint()
    assert "smaller batch_size than 64" in ETDetector(batch_size=64)._oom_hint()
    assert "smaller chunks than chunk_size=500" in ETDetector(
        chunk_size=500)._validation_oom_hint()
    # chunks serve validation and scoring only (a review)
    assert "and to validate and score, smaller chunks than chunk_size=500" in ETDetector(
        batch_size=64, chunk_size=500)._oom_hint()


def test_running_out_of_memory_while_scoring_is_explained(graph, monkeypatch):
    det = ETDetector(epochs=1, hidden=16, chunk_size=100).fit(graph)

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 9 GB")

    monkeypatch.setattr(type(det.model_), "forward", out_of_memory)
    with pytest.raises(MemoryError, match="out of memory during scoring: pass smaller chunks "
                                          "than chunk_size=100"):
        det.decision_function(graph)


def test_a_diverged_training_is_reported_not_thresholded(graph, monkeypatch):
    """A learning rate far too large left every score equal (AUROC 0.5, no word of it), and
    NaN scores reached scikit-learn's threshold search ("Input contains NaN")."""
    monkeypatch.setattr(MLPDetector, "_decision",
                        lambda self, data: torch.zeros(data.num_nodes))
    with pytest.warns(RuntimeWarning, match=r"every validation node has the same score \(0\), "
                                            r"so the model ranks nothing \(training loss.*"
                                            r"a lower learning rate"):
        MLPDetector(epochs=2).fit(graph)
    # Trees have no loss trace: the hint names their usual cause instead.
    monkeypatch.setattr(GBTDetector, "_decision", lambda self, data: torch.zeros(data.num_nodes))
    with pytest.warns(RuntimeWarning, match="ranks nothing; too few training nodes"):
        GBTDetector(max_iter=5).fit(graph)
    det = MLPDetector(epochs=2)
    monkeypatch.setattr(MLPDetector, "_decision",
                        lambda self, data: torch.full((data.num_nodes,), float("nan")))
    with pytest.raises(FloatingPointError, match="scored 240 of 240 nodes of the training "
                                                 "graph as NaN"):
        det.fit(graph)
    monkeypatch.undo()
    det = MLPDetector(epochs=2).fit(graph)
    monkeypatch.setattr(MLPDetector, "_decision",
                        lambda self, data: torch.full((data.num_nodes,), float("inf")))
    with pytest.raises(FloatingPointError, match="of this graph as NaN or inf"):
        det.decision_function(graph)


@pytest.mark.parametrize("name", ["mlp", "gbt"])
def test_index_masks_and_sparse_features_get_the_fix_in_the_error(graph, name):
    """OGB-style index splits got a bare shape message; sparse features an ATen dispatch error
    ("Could not run 'aten::ne.Scalar' with arguments from the 'SparseCPU' backend")."""
    make = (lambda: MLPDetector(epochs=1)) if name == "mlp" else (lambda: GBTDetector(max_iter=5))
    index = graph.train_mask.nonzero().view(-1)
    with pytest.raises(ValueError, match=r"index_to_mask\(idx, size=240\)"):
        make().fit(graph, train_mask=index)
    with pytest.raises(ValueError, match=r"val_mask\.bool\(\)"):
        make().fit(graph, val_mask=graph.val_mask.long())
    sparse = graph.clone()
    sparse.x = graph.x.to_sparse()
    with pytest.raises(ValueError, match=r"sparse tensor.*to_dense\(\)"):
        make().fit(sparse)
    fitted = make().fit(graph)
    with pytest.raises(ValueError, match=r"sparse tensor"):
        fitted.decision_function(sparse)


def test_gbt_trains_every_iteration_on_every_training_node_at_any_size():
    """From an audit: scikit-learn's early_stopping="auto" switches on above 10,000 training
    nodes, holding out 10% of them and stopping on their loss, silently (YelpChi at 40%)."""
    big = planted_anomaly_graph(12_000, num_features=4, seed=1)
    order = torch.randperm(12_000, generator=torch.Generator().manual_seed(0))
    train = torch.zeros(12_000, dtype=torch.bool)
    train[order[:10_500]] = True
    val = ~train
    det = GBTDetector(max_iter=30, learning_rate=0.5).fit(big, train_mask=train, val_mask=val)
    assert det.fit_info_["iterations"] == 30 and not det.model_.do_early_stopping_


def test_neural_detectors_warn_about_raw_feature_scales(graph):
    """From a new-user audit: one column times 1e4 (an amount) took ET's test AUROC from 0.94
    to 0.38 without a word, while the CLI transforms every column by default."""
    import warnings

    from et_graph.transforms import prepare_detection_data

    raw = graph.clone()
    raw.x = graph.x.clone()
    raw.x[:, 0] = (raw.x[:, 0].abs() * 1e4).round()
    with pytest.warns(DataWarning, match="features look raw .*FeatureTransform"):
        MLPDetector(epochs=1, hidden=8).fit(raw)
    with pytest.warns(DataWarning, match="features look raw") as caught:
        ETDetector(epochs=1, hidden=8).fit(raw)  # named detectors/base.py, two frames short
    assert {w.filename for w in caught if "look raw" in str(w.message)} == {__file__}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        MLPDetector(epochs=1, hidden=8).fit(prepare_detection_data(raw, "quantile"))
        GBTDetector(max_iter=5).fit(raw)  # trees do not care about scales
    # Far beyond a float32 network: refused with the fix for both kinds of user (the layer's
    # own error advised layer.double(), which neither can call).
    huge = graph.clone()
    huge.x = graph.x * 1e30
    with pytest.raises(ValueError, match=r"data.x reaches .*--feature-norm quantile"):
        ETDetector(epochs=1, hidden=8).fit(huge)
    # From a fraud-data audit: a finite float64 value beyond float32's range became inf in the
    # cast, reported as "NaN or inf" (ET), a "non-finite training loss" (MLP), or fitted by the
    # trees as inf; the transform, run in float64, brings it back.
    beyond = graph.clone()
    beyond.x = graph.x.double()
    beyond.x[0, 0] = 1e39
    for detector in (ETDetector(epochs=1, hidden=8), MLPDetector(epochs=1, hidden=8),
                     GBTDetector(max_iter=5), UnsupervisedETDetector(epochs=1, hidden=8)):
        with pytest.raises(ValueError, match=r"reaches 1e\+39, beyond float32's range"):
            detector.fit(beyond)
    transformed = prepare_detection_data(beyond, "quantile")
    assert transformed.x.dtype == torch.float32 and bool(torch.isfinite(transformed.x).all())


def test_a_graph_with_more_nodes_than_feature_rows_is_named(graph):
    """From a fraud-data audit: num_nodes above x's rows gave an IndexError deep in the loss
    (ET), NumPy's (GBT), or 500 scores for a '510-node' graph (unsupervised)."""
    from torch_geometric.data import Data

    n = graph.num_nodes
    longer = Data(x=graph.x, edge_index=graph.edge_index,
                  y=torch.cat([graph.y, torch.zeros(10, dtype=graph.y.dtype)]), num_nodes=n + 10)
    for detector in (ETDetector(epochs=1, hidden=8), GBTDetector(max_iter=5),
                     UnsupervisedETDetector(epochs=1, hidden=8)):
        with pytest.raises(ValueError, match=f"data.x has {n} rows but data.num_nodes is {n + 10}"):
            detector.fit(longer)


def test_a_loaded_single_split_mask_fits_as_it_is(tmp_path):
    """From a new-user audit: a .pt saved with [N] masks loads with [N, 1] masks (one split), and
    fit(data), the README's pattern, refused them as 'one column per split'."""
    from et_graph.datasets import load_anomaly_dataset

    graph = planted_graph_with_masks(200, seed=3)
    torch.save(graph, tmp_path / "mine.pt")
    loaded = load_anomaly_dataset(path=tmp_path / "mine.pt")
    assert loaded.train_mask.shape == (200, 1)
    fitted = MLPDetector(epochs=1, hidden=8).fit(loaded)
    direct = MLPDetector(epochs=1, hidden=8).fit(graph)
    assert torch.equal(fitted.decision_score_, direct.decision_score_)
    several = loaded.clone()
    several.train_mask = torch.cat([loaded.train_mask, loaded.train_mask], dim=1)
    with pytest.raises(ValueError, match="one column per split"):
        MLPDetector(epochs=1).fit(several)


def test_fitting_and_scoring_leave_the_callers_graph_where_it_was(graph):
    # PyG's Data.to moves the object's own tensors: fit and scoring on a GPU moved the
    # caller's graph there. They move a shallow copy (on_device); "meta" stands in for a GPU.
    from et_graph.detectors.neural import on_device

    moved = on_device(graph, torch.device("meta"))
    assert moved.x.device.type == "meta" and graph.x.device.type == "cpu"
    assert graph.y.device.type == "cpu" and graph.train_mask.device.type == "cpu"


def test_a_failed_refit_leaves_the_detector_unfitted_not_half_reset(graph):
    detector = MLPDetector(epochs=2).fit(graph)
    assert detector.fitted_

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    detector.on_epoch = interrupt
    with pytest.raises(KeyboardInterrupt):
        detector.fit(graph)
    assert not detector.fitted_ and detector.decision_score_ is None
    for call in (lambda: detector.decision_function(graph), lambda: detector.predict(graph),
                 lambda: detector.save("unused.pt")):
        with pytest.raises(RuntimeError, match="not fitted"):
            call()


def test_identical_features_are_named_as_the_cause_of_a_constant_score(graph):
    flat = graph.clone()
    flat.x = torch.ones_like(graph.x)
    with pytest.warns(RuntimeWarning, match="every node has the same features"):
        MLPDetector(epochs=2).fit(flat)


def test_detectors_copy_their_config_and_check_the_device_at_construction():
    from et_graph.detectors import ETDetectorConfig

    config = ETDetectorConfig()
    first, second = ETDetector(config), ETDetector(config, hidden=8)
    second.config.train.lr = 0.5
    assert first.config.train.lr == config.train.lr != 0.5  # no section shared
    with pytest.raises(ValueError, match="meta"):
        ETDetector(device="meta")
    with pytest.raises(TypeError, match="device must be"):
        ETDetector(device=None)


def test_predict_compares_in_the_thresholds_precision(graph):
    detector = MLPDetector(epochs=2).fit(graph)
    score = torch.tensor([0.35, 0.36])  # float32(0.35) lies above the float64 0.35
    detector.threshold_ = 0.35
    assert detector._flagged(score).tolist() == [False, True]


def test_a_detectors_repr_builds_the_same_detector():
    import et_graph.detectors as detectors

    for detector in (MLPDetector(), GCNDetector(seed=3), GATDetector(hidden=8),
                     ETDetector(seed=2, steps=2), GBTDetector(max_iter=7)):
        # MLP and GCN printed gat_heads, which their constructor refuses; the seed was left out
        again = eval(repr(detector), vars(detectors))
        assert repr(again) == repr(detector) and again.seed == detector.seed


def test_features_without_columns_are_named_as_data_x():
    # (from an audit) F = 0 failed with "in_channels and hidden_channels must be positive",
    # an argument the user never passed
    graph = planted_anomaly_graph(num_nodes=40, seed=0)
    graph.x = graph.x[:, :0]
    with pytest.raises(ValueError, match=r"data\.x must hold .* F > 0, got \(40, 0\)"):
        ETDetector(epochs=1).fit(graph)


def test_a_resume_after_auto_would_pick_another_sampler_is_refused(graph, tmp_path,
                                                                   monkeypatch):
    # installing pyg-lib between a kill and a resume switched an "auto" run's sampler without
    # a word (a scale audit); the checkpoints of runs where auto picks the built-in one, which
    # record "auto" alone, still resume (a review)
    from et_graph.detectors import neural
    from et_graph.training import CheckpointConfig

    def fit():
        det = ETDetector(epochs=2, hidden=16, batch_size=64, num_neighbors=[5])
        det.checkpoint = CheckpointConfig(str(tmp_path), resume=True)
        return det.fit(graph)

    monkeypatch.setattr(neural, "resolve_sampler", lambda name: "builtin")
    first = fit()
    assert torch.equal(fit().decision_function(graph), first.decision_function(graph))
    monkeypatch.setattr(neural, "resolve_sampler", lambda name: "pyg")
    with pytest.raises(ValueError, match=r"another configuration \(now: sampler=pyg\)"):
        fit()


def test_a_resume_naming_the_sampler_auto_picked_goes_on(graph, tmp_path, monkeypatch):
    # an "auto" run's checkpoint, resumed with neighbor_sampler="builtin" where auto picks the
    # built-in sampler (the same code), was refused as another configuration (a scale audit)
    from et_graph.detectors import neural
    from et_graph.training import CheckpointConfig

    def fit(sampler, expect_resume=True):
        det = ETDetector(epochs=2, hidden=16, batch_size=64, num_neighbors=[5],
                         neighbor_sampler=sampler)
        det.checkpoint = CheckpointConfig(str(tmp_path), resume=True)
        det.fit(graph)
        assert (det.fit_info_["resumed_from_epoch"] is not None) == expect_resume
        return det

    monkeypatch.setattr(neural, "resolve_sampler",
                        lambda name: "pyg" if name == "pyg" else "builtin")
    first = fit("auto", expect_resume=False)
    again = fit("builtin")
    assert torch.equal(again.decision_function(graph), first.decision_function(graph))
    fit("auto")  # and back, over the checkpoint the "builtin" run wrote
    # where auto picks PyG's sampler, an auto checkpoint is another sampler's run
    monkeypatch.setattr(neural, "resolve_sampler",
                        lambda name: "builtin" if name == "builtin" else "pyg")
    with pytest.raises(ValueError, match=r"other training settings \(neighbor_sampler differ"):
        fit("builtin")


def test_a_resume_under_another_seed_is_refused(graph, tmp_path):
    # (from an audit) the fingerprint was the config's repr, which has no seed: a loop over
    # seeds with one checkpoint folder and resume=True went on with the first seed's run
    from et_graph.training import CheckpointConfig

    def fit(seed):
        det = ETDetector(epochs=2, hidden=16, seed=seed)
        det.checkpoint = CheckpointConfig(str(tmp_path), resume=True)
        return det.fit(graph)

    fit(1)
    with pytest.raises(ValueError, match=r"another configuration \(now: seed=7"):
        fit(7)


def test_a_network_pickled_before_message_passing_existed_still_scores(graph, tmp_path):
    # (from an audit) a detector saved 400 commits earlier loaded, then failed to score with
    # "'ETAnomalyNet' object has no attribute 'message_passing'"
    det = ETDetector(epochs=2, hidden=16).fit(graph)
    expected = det.decision_function(graph)
    del det.model_.__dict__["message_passing"]  # as the older network was pickled
    det.save(tmp_path / "old.pt")
    assert torch.equal(ETDetector.load(tmp_path / "old.pt").decision_function(graph), expected)


def test_loading_under_another_kernel_setting_warns(graph, tmp_path):
    # (from an audit) the compiled kernels round differently: a detector saved with them on
    # scored up to 6e-8 apart after a load in a process without them, unannounced
    det = MLPDetector(epochs=1).fit(graph)
    det.save(tmp_path / "det.pt")
    payload = torch.load(tmp_path / "det.pt", weights_only=False)
    assert payload["native_attention"] is False and payload["git_commit"]
    payload["native_attention"] = True
    torch.save(payload, tmp_path / "native.pt")
    with pytest.warns(ReproducibilityWarning, match=r"kernels on and they are off here"):
        MLPDetector.load(tmp_path / "native.pt")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MLPDetector.load(tmp_path / "det.pt")


# ----------------------------------------------------------------------------------------------
# Selections that must read the validation nodes only (from a mutation audit: each of these
# could be changed to read other nodes and no test failed)
# ----------------------------------------------------------------------------------------------
def test_the_threshold_is_chosen_on_the_validation_nodes_alone(graph):
    from et_graph.protocols.anomaly import choose_threshold

    det = ETDetector(epochs=3, hidden=16).fit(graph)
    score = det.decision_score_.double().numpy()
    y, val = graph.y.numpy(), graph.val_mask.numpy()
    assert det.threshold_ == choose_threshold(y[val], score[val])[0]
    # the fixture tells the two apart: over every node (other labels blanked) it differs
    blanked = np.where(graph.train_mask.numpy() | val, y, 0)
    assert choose_threshold(blanked, score)[0] != det.threshold_


@pytest.mark.parametrize("metric", ["f1_macro", "auroc", "auprc"])
def test_the_checkpoint_is_chosen_on_the_configured_metric(graph, metric):
    det = ETDetector(epochs=6, hidden=16, select_metric=metric).fit(graph)
    best = det.fit_info_["best_epoch"]
    assert det.fit_info_["best_score"] == det.history_[best][f"val_{metric}"]
    assert det.fit_info_["best_score"] == max(row[f"val_{metric}"] for row in det.history_)


def test_labels_outside_the_training_and_validation_nodes_are_blanked():
    # the safety net behind "no code path can see them": fit's labels are 0 off its masks
    from et_graph.detectors.base import check_labels

    data = planted_graph_with_masks(120, seed=0)
    data.y = torch.ones(120, dtype=torch.long)
    used = data.train_mask | data.val_mask
    y = check_labels(data, used)
    assert bool((y[~used] == 0).all()) and bool((y[used] == 1).all())


def test_the_gbt_bins_are_cut_on_the_training_nodes_alone():
    from et_graph.detectors import neighbourhood_features
    from et_graph.detectors.tree import QuantileBinner

    graph = planted_graph_with_masks(800, seed=3)  # over 255 training nodes: columns binned
    det = GBTDetector(binning="unweighted", max_iter=5).fit(graph)
    features = np.asarray(neighbourhood_features(graph.x, graph.edge_index,
                                                 det.config.model.features))
    expected = QuantileBinner().fit(features[graph.train_mask.numpy()]).edges_
    assert len(expected) > 0
    assert all(np.array_equal(a, b) for a, b in zip(det.binner_.edges_, expected))
    everywhere = QuantileBinner().fit(features).edges_
    assert not all(np.array_equal(a, b) for a, b in zip(everywhere, expected))


def test_pygod_argument_names_get_the_et_graph_name():
    # (from an API review) hid_dim was met with the whole list of names (and its closest
    # spelling is head_dim, another setting)
    # (a later API review) the layers' hidden_channels and scikit-learn's random_state too
    for pygod, ours in (("epoch", "epochs"), ("hid_dim", "hidden"), ("gpu", "device"),
                        ("hidden_channels", "hidden"), ("random_state", "seed")):
        with pytest.raises(TypeError, match=rf"'{pygod}' .*did you mean '{ours}'"):
            ETDetector(**{pygod: 1})
    with pytest.raises(TypeError, match="did you mean 'hidden'"):
        MLPDetector(hiden=8)


def test_detectors_fitted_in_two_threads_score_as_fitted_one_after_the_other():
    # (from an audit of global state) the seeded fits shared the process's generators: in two
    # threads they interleaved their draws (other scores) and the caller's states were lost
    import threading

    graphs = [planted_graph_with_masks(80, seed=s) for s in (1, 2)]

    def fit(seed, graph):
        return ETDetector(epochs=4, hidden=16, seed=seed).fit(graph).decision_score_

    alone = [fit(seed, graph) for seed, graph in enumerate(graphs)]
    for _ in range(3):
        torch.manual_seed(123)
        expected_draw = torch.rand(3)
        torch.manual_seed(123)
        together = [None, None]

        def run(i, out=together):
            out[i] = fit(i, graphs[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert torch.equal(torch.rand(3), expected_draw)  # the caller's stream, untouched
        assert all(torch.equal(a, b) for a, b in zip(alone, together))


def test_a_pygod_name_is_suggested_only_where_the_setting_exists():
    with pytest.raises(TypeError) as error:
        GBTDetector(epoch=1)  # GBT has no epochs either
    assert "did you mean 'epochs'" not in str(error.value)


def test_an_interrupted_refit_leaves_no_earlier_curves(graph):
    """history_ and fit_info_ kept the previous fit's rows after an interrupted refit: its
    curves read as this one's."""
    detector = MLPDetector(epochs=3, hidden=8).fit(graph)
    assert len(detector.history_) == 3

    def stop(epoch, validation):
        raise KeyboardInterrupt

    detector.on_epoch = stop
    with pytest.raises(KeyboardInterrupt):
        detector.fit(graph)
    assert detector.history_ == [] and detector.fit_info_ == {} and not detector.fitted_


def test_get_params_set_params_and_sklearn_clone(graph):
    """scikit-learn's and PyGOD's get_params / set_params were missing, and sklearn's clone
    failed; set_params is checked as the constructor and leaves the detector unfitted."""
    from sklearn.base import clone

    from et_graph.detectors import UnsupervisedETDetector

    for kind in (ETDetector, GBTDetector, MLPDetector, UnsupervisedETDetector):
        detector = kind(seed=3)
        params = detector.get_params()
        assert kind(**params).get_params() == params and params["seed"] == 3
        assert clone(detector).get_params() == params
    assert "gat_heads" not in MLPDetector().get_params()  # a setting the class refuses
    fitted = MLPDetector(epochs=1, hidden=8).fit(graph)
    assert fitted.set_params(hidden=16, seed=1) is fitted
    assert fitted.get_params()["hidden"] == 16 and fitted.seed == 1 and not fitted.fitted_
    with pytest.raises(TypeError, match="did you mean 'hidden'"):
        fitted.set_params(hiden=3)
    with pytest.raises(ValueError):
        fitted.set_params(seed=-1)


def test_sklearn_check_is_fitted_reads_the_detectors(graph):
    # (API review) check_is_fitted failed on any detector, fitted or not: scikit-learn >= 1.6
    # reads every estimator's tags first
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    detector = GBTDetector(max_iter=5)
    with pytest.raises(NotFittedError):
        check_is_fitted(detector)
    check_is_fitted(detector.fit(graph))
    detector.set_params(max_iter=6)  # a changed setting unfits it
    with pytest.raises(NotFittedError):
        check_is_fitted(detector)


def test_help_shows_every_keyword_a_detector_takes():
    # (API review) inspect.signature(ETDetector) was (*args, supervised=True, **keywords): help()
    # and an IDE showed no setting
    import inspect

    from et_graph.detectors import UnsupervisedETDetector
    from et_graph.detectors.neural import NeuralDetector

    for kind in (ETDetector, GBTDetector, MLPDetector, UnsupervisedETDetector):
        parameters = inspect.signature(kind).parameters
        defaults = {name: p.default for name, p in parameters.items()
                    if name not in ("config", "supervised")}
        assert defaults == kind().get_params(), kind
    assert "supervised" in inspect.signature(ETDetector).parameters
    assert "gat_heads" not in inspect.signature(MLPDetector).parameters  # refused there

    class Wide(NeuralDetector):
        config_class = MLPDetector.config_class

        def __init__(self, width: int = 16, **keywords):
            super().__init__(**keywords)

    assert "width" in inspect.signature(Wide).parameters  # its own constructor stays


def test_a_refused_set_params_changes_nothing(graph):
    """set_params(epochs=7, seed=-1) raised, yet left epochs=7 in a detector still fitted
    with the old settings; supervised= was accepted and ignored; a subclass's own
    constructor arguments were dropped by get_params and clone."""
    from et_graph.detectors.neural import NeuralDetector

    fitted = MLPDetector(epochs=1, hidden=8).fit(graph)
    before = fitted.get_params()
    with pytest.raises(ValueError, match="seed"):
        fitted.set_params(epochs=7, seed=-1)
    assert fitted.get_params() == before and fitted.fitted_
    with pytest.raises(ValueError, match="cannot change supervised"):
        ETDetector().set_params(supervised=False)
    # (an API audit) the flat settings overrode a new config's every field: a silent no-op
    with pytest.raises(ValueError, match="not config"):
        fitted.set_params(config=MLPDetector(hidden=4).config)
    assert fitted.get_params() == before and fitted.fitted_

    class Wide(NeuralDetector):
        config_class = MLPDetector.config_class

        def __init__(self, width: int = 16, **keywords):
            super().__init__(**keywords)
            self.width = width

    with pytest.raises(TypeError, match="takes width, which BaseDetector.get_params"):
        Wide(width=64).get_params()

    class WideKw(NeuralDetector):  # the passed-on keywords under another name
        config_class = MLPDetector.config_class

        def __init__(self, width: int = 16, *args, **kw):
            super().__init__(*args, **kw)
            self.width = width

    with pytest.raises(TypeError, match="takes width, which BaseDetector.get_params"):
        WideKw(width=64).get_params()

    class WideParams(Wide):  # get_params overridden, as the error asks
        def get_params(self, deep=True):
            return {"width": self.width, **super().get_params(deep)}

    # repr dropped the subclass's own arguments, so eval(repr(det)) built another (an audit)
    assert repr(WideParams(width=64, hidden=8)).startswith("WideParams(width=64, hidden=8,")

    class NoConfig(NeuralDetector):
        pass

    with pytest.raises(TypeError, match="needs a config_class"):
        NoConfig()


@pytest.mark.parametrize("make", [
    lambda: ETDetector(epochs=2, hidden=16, label_trick=True, progress=False),
    lambda: ETDetector(epochs=2, hidden=16, multi_relation=True, progress=False),
    lambda: GATDetector(epochs=2, hidden=8, layers=1, progress=False),
    lambda: StackedETDetector(epochs=2, hidden=16, folds=2, trees=GBTModelConfig(max_iter=10),
                              progress=False),
], ids=["et-label-trick", "et-multi-relation", "gat", "stacked"])
def test_explanation_inputs_give_the_scores_and_an_explanation(graph, make):
    """An audit had to rebuild a detector's network input by hand (the label trick's columns,
    the stacked detector's tree column) to explain one node's score."""
    from torch_geometric.explain import Explainer, GNNExplainer

    data = graph.clone()
    data.edge_type = torch.arange(data.edge_index.size(1)) % 2
    det = make()
    if not getattr(det.config.model, "multi_relation", False):
        del data.edge_type
    det.fit(data)
    model, args, keywords = det.explanation_inputs(data)
    with torch.no_grad():
        scores = torch.sigmoid(model(*args, **keywords))
    torch.testing.assert_close(scores.float(), det.decision_function(data), rtol=0, atol=1e-6)
    explainer = Explainer(model, GNNExplainer(epochs=2), explanation_type="model",
                          edge_mask_type="object", node_mask_type="attributes",
                          model_config=dict(mode="binary_classification", task_level="node",
                                            return_type="raw"))
    explanation = explainer(*args, **keywords, index=int(data.y.argmax()))
    assert explanation.edge_mask.shape == (data.edge_index.size(1),)
    assert explanation.node_mask.shape == args[0].shape
    torch.testing.assert_close(det.decision_function(data), scores.float(), rtol=0, atol=1e-6)
    with pytest.raises(RuntimeError, match="not fitted"):
        make().explanation_inputs(data)
    if args[0].size(1) != data.x.size(1):  # the label trick's columns, the tree column
        with pytest.raises(ValueError, match=r"takes det\.network_input\(data\)"):
            model(data.x, *args[1:], **keywords)


def test_a_graph_without_relations_is_refused_for_a_multi_relation_detector_without_noise(graph):
    # (an audit) a warning that the relation ids could not be checked came before the real
    # error, which names the remedy
    data = graph.clone()
    data.edge_type = torch.arange(data.edge_index.size(1)) % 2
    data.relation_names = ["net_a", "net_b"]
    det = ETDetector(epochs=2, hidden=16, multi_relation=True, progress=False).fit(data)
    plain = graph.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="needs data.edge_type"):
            det.decision_function(plain)


@pytest.mark.parametrize(("output", "message"), [
    (lambda h: h, r"Column returned a tensor of float32 of shape \[240, 1\] for 240 nodes; a "
                  r"detector's network returns one floating-point logit per node, shape \[240\]"),
    (lambda h: h.view(-1).long(), r"Column returned a tensor of int64 of shape \[240\]"),
])
def test_a_detector_network_of_the_wrong_shape_or_kind_is_named(graph, output, message):
    # a network returning [N, 1] failed in the loss on torch's "Target size ... must be the
    # same as input size", naming neither the network nor the shape it needs (an audit)
    from et_graph.detectors.config import GNNDetectorConfig
    from et_graph.detectors.neural import NeuralDetector

    class Column(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.lin = torch.nn.Linear(width, 1)

        def forward(self, x, edge_index):
            return output(self.lin(x))

    class OwnDetector(NeuralDetector):
        config_class = GNNDetectorConfig

        def build_network(self, in_channels, num_nodes):
            return Column(in_channels)

    with pytest.raises(ValueError, match=message):
        OwnDetector(epochs=1).fit(graph)


def test_a_detector_config_without_sections_is_refused_where_the_class_is_defined():
    # it failed at the class statement on "'int' object has no attribute 'items'" (an audit)
    import dataclasses

    from et_graph.detectors.base import BaseDetector

    @dataclasses.dataclass
    class Flat:
        width: int = 3

    with pytest.raises(TypeError, match=r"Own.config_class Flat has setting\(s\) \['width'\] "
                                        "outside a section"):
        class Own(BaseDetector):  # noqa: F841 (defining it is the test)
            config_class = Flat


def test_a_detector_config_given_as_an_instance_is_refused_by_name():
    # mypy found it: the instance's call failed, and the message's config_class.__name__ then
    # raised AttributeError ("'Sections' object has no attribute '__name__'")
    import dataclasses

    from et_graph.detectors.base import BaseDetector

    @dataclasses.dataclass
    class Section:
        width: int = 3

    @dataclasses.dataclass
    class Sections:
        model: Section = dataclasses.field(default_factory=Section)

    with pytest.raises(TypeError, match=r"Own.config_class is an instance of Sections: give the "
                                        "dataclass itself"):
        class Own(BaseDetector):  # noqa: F841 (defining it is the test)
            config_class = Sections()


def test_a_detector_validating_every_few_epochs_keeps_a_validated_epoch(graph):
    det = MLPDetector(epochs=5, validate_every=2).fit(graph)
    validated = [row["epoch"] for row in det.history_ if "val_auroc" in row]
    assert validated == [1, 3, 4] and det.fit_info_["best_epoch"] in validated


@pytest.mark.parametrize("make", [
    lambda: ETDetector(epochs=1, hidden=16, label_trick=True),
    lambda: GBTDetector(max_iter=5, label_trick=True),
    lambda: StackedETDetector(epochs=1, hidden=16, trees=GBTModelConfig(max_iter=5), folds=2),
], ids=["et", "gbt", "stacked"])
def test_the_fitted_graph_is_kept_as_a_copy_not_the_callers_tensor(graph, make):
    """From a long-run audit: ``edge_index.cpu()`` of a CPU tensor is the caller's own, so an
    in-place edit of their graph after the fit made the edited graph "the fitted graph" (scored
    with the training labels' columns) and the real one "another graph"."""
    data = graph.clone()
    det = make().fit(data)
    original = data.edge_index.clone()
    data.edge_index.copy_(torch.randint(0, data.num_nodes, data.edge_index.shape,
                                        generator=torch.Generator().manual_seed(0)))
    assert torch.equal(det.fit_edge_index_, original)
    rewired = graph.clone()
    rewired.edge_index = data.edge_index.clone()
    assert det._is_fitted_graph(graph) and not det._is_fitted_graph(rewired)


@pytest.mark.parametrize("off", ["no_grad", "set_grad_enabled"])
def test_fit_trains_where_the_caller_turned_gradients_off(graph, off):
    """From a long-run audit: a service that turned gradients off could not retrain (every fit
    failed on "loss returned a tensor without a graph", naming a task class the user never
    wrote); training turns them on for itself and gives the caller's setting back."""
    reference = ETDetector(epochs=2, hidden=16).fit(graph).decision_function(graph)
    context = torch.no_grad() if off == "no_grad" else torch.set_grad_enabled(False)
    with context:
        score = ETDetector(epochs=2, hidden=16).fit(graph).decision_function(graph)
        assert not torch.is_grad_enabled()
    assert torch.equal(score, reference)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="inside torch.inference_mode"):
        ETDetector(epochs=1, hidden=16).fit(graph)


@pytest.mark.parametrize("version, method", [("1.4.2", "midpoint"), ("1.8.0", "midpoint"),
                                             ("1.9.1", "averaged_inverted_cdf"),
                                             ("2.0.0", "averaged_inverted_cdf")])
def test_the_binner_follows_the_installed_scikit_learns_interpolation(monkeypatch, version,
                                                                      method):
    """From a minimum-version audit: scikit-learn 1.4.2-1.8 bin at "midpoint" percentiles and
    1.9 at "averaged_inverted_cdf"; the binner took 1.9's method everywhere, so on the older
    releases the package allows its trees were not scikit-learn's (probabilities up to 0.22
    apart)."""
    import sklearn

    from et_graph.detectors.tree import QuantileBinner, sklearn_percentile_method

    monkeypatch.setattr(sklearn, "__version__", version)
    assert sklearn_percentile_method() == method
    features = np.arange(999, dtype=np.float64)[:, None] ** 1.5
    edges = QuantileBinner(max_bins=4).fit(features).edges_[0]
    want, other = (np.percentile(features[:, 0], [25, 50, 75], method=m)
                   for m in (method, {"midpoint": "averaged_inverted_cdf"}.get(method,
                                                                               "midpoint")))
    assert not np.array_equal(want, other)  # (a review: on 1000 rows the two agreed)
    assert np.array_equal(edges, np.unique(want))


def test_ddp_ranks_draw_other_subgraphs_past_a_share_of_one_over_the_world(graph,
                                                                           monkeypatch):
    """With subgraph_ratio above 1/world every rank took the first window of the permutation,
    the same subgraph (a DDP audit); rank 0's window is the single-process one."""
    from et_graph.detectors import neural
    from et_graph.detectors.config import NodeTrainConfig

    def drawn(rank: int, world: int) -> torch.Tensor:
        monkeypatch.setattr(neural, "rank_world", lambda: (rank, world))
        train = torch.zeros(240, dtype=torch.bool)
        train[:120] = True
        task = neural.NodeAnomalyTask(graph, graph.y, train, ~train,
                                      NodeTrainConfig(subgraph_ratio=0.6),
                                      torch.Generator().manual_seed(0), True,
                                      torch.device("cpu"))
        return next(iter(task.batches(0)))[2]

    alone, first, second = drawn(0, 1), drawn(0, 2), drawn(1, 2)
    assert torch.equal(alone, first) and not torch.equal(first, second)
    assert first.numel() == second.numel() == 144


def test_a_detector_pickled_under_another_kernel_setting_warns(graph, monkeypatch):
    """The compiled-kernel switch is the process's: a detector sent to a spawned worker scored
    there without them, in other last bits, unannounced (a review). Copies say nothing."""
    import copy
    import pickle
    import warnings

    import et_graph.native as native

    det = MLPDetector(epochs=1).fit(graph)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReproducibilityWarning)
        same = pickle.loads(pickle.dumps(det))
        copy.deepcopy(det), copy.copy(det)
    assert not hasattr(same, "_pickled_with_native_attention")  # (the record is not kept)
    monkeypatch.setattr(native, "native_attention_enabled", lambda: True)
    sent = pickle.dumps(det)
    monkeypatch.undo()
    with pytest.warns(ReproducibilityWarning, match="pickled with the compiled attention "
                                                    "kernels on and they are off here"):
        received = pickle.loads(sent)
    assert torch.equal(received.decision_function(graph), det.decision_function(graph))
