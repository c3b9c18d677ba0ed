"""A fitted detector in a scoring service: what a production audit found (session 61).

Fitted once offline, saved, loaded elsewhere and fed each day's graph: the graph grows by new
edges, arrives with int32 or int16 ids, in another feature dtype, or in a process whose default
dtype was changed; a save may fail half-way. Each test here failed before its fix.
"""
import re
import warnings

import pytest
import torch
from helpers import planted_graph_with_masks
from torch_geometric.data import Data

from et_graph.detectors import (
    ETDetector,
    GBTDetector,
    GCNDetector,
    MLPDetector,
    UnsupervisedETDetector,
)
from et_graph.detectors.label_trick import edge_keys
from et_graph.exceptions import ConfigWarning, ETGraphWarning

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def graph():
    return planted_graph_with_masks(240, seed=3)


@pytest.fixture
def float64_default():
    """The default dtype switched to float64 for the test, and back whatever happens."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def test_edge_keys_do_not_overflow_with_int32_ids():
    """``dst * N + src`` overflowed int32 past 46,341 nodes: the fitted graph of a label-trick
    detector, its edges merely sorted or its ids int32, was scored as another graph with every
    label column zeroed."""
    num_nodes = 50_000
    edges = torch.randint(0, num_nodes, (2, 3_000), generator=torch.Generator().manual_seed(0))
    assert torch.equal(edge_keys(edges.int(), num_nodes), edge_keys(edges, num_nodes))
    assert int(edge_keys(edges.int(), num_nodes).min()) >= 0


@pytest.mark.parametrize("detector", ["et", "gbt"])
def test_new_edges_between_fitted_nodes_keep_the_training_labels(graph, detector):
    """New transactions between known accounts (the usual daily update) made the fitted graph
    'another graph' unless a node was appended too: every label column went to zero."""
    det = (ETDetector(label_trick=True, epochs=2, hidden=16) if detector == "et"
           else GBTDetector(label_trick=True, max_iter=10)).fit(graph)
    fitted = det.label_columns(graph)
    updated = Data(x=graph.x, edge_index=torch.cat(
        [graph.edge_index, torch.tensor([[5, 17], [17, 5]])], dim=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        columns = det.label_columns(updated)
        det.decision_function(updated)
    untouched = [n for n in range(240) if n not in (5, 17)]
    assert torch.equal(columns[untouched], fitted[untouched])
    assert columns[:, :2].sum() == pytest.approx(float(fitted[:, :2].sum()), abs=2.0)


def test_saving_into_a_missing_folder_names_the_folder(graph, tmp_path):
    # (an audit) the error named mkstemp's temporary file, not the folder that was missing
    det = MLPDetector(epochs=2, hidden=16).fit(graph)
    folder = tmp_path / "missing" / "sub"
    with pytest.raises(FileNotFoundError, match=f"no folder {re.escape(str(folder))} to write "
                                                "det.pt into"):
        det.save(folder / "det.pt")
    assert not (tmp_path / "missing").exists()


def test_a_failed_save_leaves_the_previous_file_whole(graph, tmp_path, monkeypatch):
    det = MLPDetector(epochs=2, hidden=16).fit(graph)
    path = tmp_path / "model.pt"
    det.save(path)
    good = path.read_bytes()
    # a tuning loop's callback failed to pickle, and the file it cut no longer loaded
    det.on_epoch = lambda *args, **kwargs: None
    det.save(path)
    assert torch.equal(MLPDetector.load(path).decision_function(graph),
                       det.decision_function(graph))
    assert det.on_epoch is not None  # the detector itself keeps its callback

    def cut_then_fail(payload, stream, *args, **kwargs):
        stream.write(b"PK\x03\x04 half a file")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", cut_then_fail)
    path.write_bytes(good)
    with pytest.raises(OSError, match="No space"):
        det.save(path)
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no temporary file left


@pytest.mark.parametrize("make", [
    lambda: MLPDetector(epochs=2, hidden=16),
    lambda: GCNDetector(epochs=2, hidden=16),
    lambda: ETDetector(label_trick=True, epochs=2, hidden=16),
], ids=["mlp", "gcn", "et-label-trick"])
def test_scoring_under_another_default_dtype(graph, make, float64_default):
    """A service that set ``torch.set_default_dtype(torch.float64)`` could not score a detector
    fitted under float32 (a dtype mismatch), and the label trick could not fit under it."""
    torch.set_default_dtype(torch.float32)
    det = make().fit(graph)
    expected = det.decision_function(graph)
    torch.set_default_dtype(torch.float64)
    assert torch.allclose(det.decision_function(graph), expected, atol=1e-6)
    make().fit(graph).decision_function(graph)  # fitted under float64, scored under it


def test_trees_read_every_feature_dtype_as_float32_and_any_integer_ids(graph):
    """float16 features were read in half precision (scores off by up to 0.05), bfloat16 ones
    failed in NumPy, int16 or uint8 ids failed in indexing, and bool ids passed the check."""
    det = GBTDetector(label_trick=True, max_iter=10).fit(graph)
    half = Data(x=graph.x.half(), edge_index=graph.edge_index)
    as_float = Data(x=graph.x.half().float(), edge_index=graph.edge_index)
    assert torch.equal(det.decision_function(half), det.decision_function(as_float))
    det.decision_function(Data(x=graph.x.bfloat16(), edge_index=graph.edge_index))
    small_ids = Data(x=graph.x, edge_index=graph.edge_index.short())
    assert torch.equal(det.decision_function(small_ids), det.decision_function(graph))
    with pytest.raises(ValueError, match="integer tensor"):
        det.decision_function(Data(x=graph.x, edge_index=graph.edge_index.bool()))


def test_the_combined_score_knows_its_graph_in_any_edge_order_or_dtype(graph):
    det = UnsupervisedETDetector(epochs=2, hidden=16, structure_weight=0.5, score_rounds=2,
                                 anomaly_score="combined")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det.fit(graph)
    order = torch.randperm(graph.edge_index.size(1), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # it warned "threshold_ does not carry"
        warnings.simplefilter("error", ETGraphWarning)
        det.decision_function(Data(x=graph.x, edge_index=graph.edge_index[:, order]))
        det.decision_function(Data(x=graph.x, edge_index=graph.edge_index.int()))
    other = planted_graph_with_masks(240, seed=4)
    with pytest.warns(ConfigWarning, match="do not carry over"):
        det.decision_function(other)


def test_scoring_warnings_name_the_callers_line(graph):
    """They named et_graph/detectors/base.py, whichever line of the user's called."""
    other = planted_graph_with_masks(240, seed=4)
    det = GBTDetector(label_trick=True, max_iter=10).fit(graph)
    weighted = Data(x=graph.x, edge_index=graph.edge_index,
                    edge_weight=torch.ones(graph.edge_index.size(1)))
    for call in (lambda: det.decision_function(other), lambda: det.predict(other),
                 lambda: det.predict(weighted)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        assert caught and all(w.filename == __file__ for w in caught), \
            [(w.filename, w.lineno) for w in caught]


def test_a_saved_detector_is_readable_as_a_plain_write_would_leave_it(graph, tmp_path):
    """The atomic save went through a private temporary file: detectors came out 0600 (a
    scoring service under another user could not read them), a symbolic link was replaced by
    a file, and a file object was refused."""
    import io
    import os
    import stat

    det = GBTDetector(max_iter=5).fit(graph)
    before = os.umask(0o022)
    try:
        det.save(tmp_path / "det.pt")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "det.pt").stat().st_mode) == 0o644
    link = tmp_path / "current.pt"
    link.symlink_to(tmp_path / "det.pt")
    det.save(link)
    assert link.is_symlink()
    buffer = io.BytesIO()
    det.save(buffer)
    assert buffer.getbuffer().nbytes > 0


def test_the_trees_keep_float64_features_in_float64(graph):
    """Detectors saved before read float64 features at full precision (neighbour means in
    float64): casting them to float32 first moved 61 of 3,000 scores of a loaded GBT. A tree
    fitted on float64 features keeps reading them so; one saved before ``fit_dtype_`` keeps
    the old rule (its own dtype for float32 and float64)."""
    wide = Data(x=graph.x.double(), edge_index=graph.edge_index, y=graph.y,
                train_mask=graph.train_mask, val_mask=graph.val_mask)
    det = GBTDetector(max_iter=5).fit(wide)
    assert det.fit_dtype_ == torch.float64
    assert det._prepare(Data(x=graph.x, edge_index=graph.edge_index)).x.dtype == torch.float64
    det.fit_dtype_ = None  # as in a file saved before it
    assert det._prepare(wide).x.dtype == torch.float64
    assert det._prepare(Data(x=graph.x.half(), edge_index=graph.edge_index)).x.dtype == (
        torch.float32)


@pytest.mark.parametrize("make", [lambda: GBTDetector(max_iter=10),
                                  lambda: GBTDetector(label_trick=True, max_iter=10),
                                  lambda: ETDetector(epochs=2, hidden=16)],
                         ids=["gbt", "gbt-label-trick", "et"])
def test_the_same_features_in_float64_score_as_the_fitted_float32_ones(graph, make):
    """(a deployment audit) a float32-fitted tree read float64 features in float64: its
    neighbour means rounded otherwise and crossed the bins' edges, so the same graph from a
    NumPy float64 pipeline moved scores by up to 0.17 and flipped 17 predictions."""
    det = make().fit(graph)
    assert det.fit_dtype_ == torch.float32
    wide = Data(x=graph.x.double(), edge_index=graph.edge_index)
    assert torch.equal(det.decision_function(wide), det.decision_function(graph))
    refit = make().fit(Data(x=graph.x.double(), edge_index=graph.edge_index, y=graph.y,
                            train_mask=graph.train_mask, val_mask=graph.val_mask))
    assert refit.fit_dtype_ == (torch.float64 if isinstance(refit, GBTDetector) else
                                torch.float32)


def test_a_feature_transform_reads_later_graphs_in_its_fitted_precision(graph, tmp_path):
    """(a deployment audit) the same raw features as float64 through a transform fitted on
    float32 gave other degree and quantile columns in their last bits (7,167 of 11,758
    Tolokers nodes), which moved a tree's scores by up to 0.2."""
    from et_graph.transforms import FeatureTransform

    raw = Data(x=torch.rand(300, 4, generator=torch.Generator().manual_seed(0)) * 7,
               edge_index=graph.edge_index[:, graph.edge_index.max(0).values < 300])
    wide = Data(x=raw.x.double(), edge_index=raw.edge_index)
    for norm in ("quantile", "standard", "ple"):
        transform = FeatureTransform(norm, degree_feature=True).fit(raw)
        assert transform.fit_dtype_ == torch.float32
        assert torch.equal(transform.transform(wide).x, transform.transform(raw).x), norm
    transform.save(tmp_path / "t.pt")
    assert FeatureTransform.load(tmp_path / "t.pt").fit_dtype_ == torch.float32
    assert FeatureTransform().fit(wide).fit_dtype_ == torch.float64
    payload = torch.load(tmp_path / "t.pt", weights_only=True)
    del payload["fit_dtype"]  # a file saved before it: the features' own precision
    torch.save(payload, tmp_path / "old.pt")
    assert FeatureTransform.load(tmp_path / "old.pt").fit_dtype_ is None


@pytest.mark.parametrize("make", [lambda: GBTDetector(max_iter=10),
                                  lambda: UnsupervisedETDetector(epochs=1, hidden=8)],
                         ids=["gbt", "unsupervised-et"])
def test_features_far_outside_the_fitted_range_are_named_when_scored(graph, make):
    """(a deployment audit) the fitted graph's features x1000 (cents for dollars) were scored
    without a word, and predict flagged none of the nodes."""
    from et_graph.exceptions import DataWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = make().fit(graph)
    part = Data(x=graph.x[:50], edge_index=graph.edge_index[:, graph.edge_index.max(0).values
                                                              < 50])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        det.decision_function(graph)
        det.decision_function(part)  # a part of the fitted graph, in its range
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        det.decision_function(Data(x=graph.x * 1000, edge_index=graph.edge_index))
    told = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    assert len(told) == 1, told  # (the unsupervised detector said it twice: a review)
    assert re.search(r"in \d+ feature column\(s\) \(0: 100%, 1: 100%.*far outside the "
                     r"fitted graph's range", told[0])


def test_the_drift_check_names_one_scaled_column_and_spares_legitimate_graphs(graph):
    """(a review of the check above) it counted the share of all values: one column x100 of
    many went unnamed, while one new node with a value in a column constant in training (a
    category never seen) warned that its scores 'may mean nothing'; a stacked detector
    warned twice, with two numbers."""
    from et_graph.detectors import StackedETDetector
    from et_graph.detectors.config import GBTModelConfig
    from et_graph.exceptions import DataWarning

    wide = torch.cat([graph.x, torch.randn(graph.num_nodes, 60,
                                           generator=torch.Generator().manual_seed(0)),
                      torch.zeros(graph.num_nodes, 1)], dim=1)  # the last: constant 0
    fitted = Data(x=wide, edge_index=graph.edge_index, y=graph.y,
                  train_mask=graph.train_mask, val_mask=graph.val_mask)
    det = GBTDetector(max_iter=5).fit(fitted)
    one_column = wide.clone()
    one_column[:, 20] *= 100
    with pytest.warns(DataWarning, match=r"in 1 feature column\(s\) \(20: "):
        det.decision_function(Data(x=one_column, edge_index=graph.edge_index))
    unseen = wide.clone()
    unseen[:30, -1] = 1.0  # a category the fitted graph never held
    one_node = wide[:1].clone()
    one_node[0, 5] = 1e4  # one outlying node: no change of units
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        det.decision_function(Data(x=unseen, edge_index=graph.edge_index))
        det.decision_function(Data(x=one_node, edge_index=torch.zeros(2, 0, dtype=torch.long)))
    stacked = StackedETDetector(epochs=2, hidden=8, trees=GBTModelConfig(max_iter=5), folds=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stacked.fit(graph)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stacked.decision_function(Data(x=graph.x * 1000, edge_index=graph.edge_index))
    assert len([w for w in caught if issubclass(w.category, DataWarning)]) == 1


def test_a_loaded_detector_says_what_saved_it_and_other_versions_are_named(graph, tmp_path,
                                                                         monkeypatch):
    """(a deployment audit) the file's version was recorded but never read: a file of another
    et-graph loaded silently, a newer format was "not a detector written by save()", and a
    class missing here was a raw AttributeError from pickle."""
    import sys
    import types

    import torch as torch_module

    from et_graph import __version__
    from et_graph.detectors import BaseDetector
    from et_graph.exceptions import ReproducibilityWarning

    det = GBTDetector(max_iter=5).fit(graph)
    det.save(tmp_path / "det.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReproducibilityWarning)
        loaded = BaseDetector.load(tmp_path / "det.pt")
    assert loaded.saved_with_["et_graph_version"] == __version__
    assert loaded.saved_with_["versions"]["torch"] == torch_module.__version__
    payload = torch_module.load(tmp_path / "det.pt", weights_only=False)
    torch_module.save({**payload, "et_graph_version": "9.9.9"}, tmp_path / "other.pt")
    with pytest.warns(ReproducibilityWarning, match=rf"et_graph 9\.9\.9 -> {__version__}"):
        BaseDetector.load(tmp_path / "other.pt")
    versions = payload["versions"]
    major, minor = torch_module.__version__.split(".")[:2]
    older = {**versions, "torch": f"{major}.{int(minor) - 1}.0",
             "numpy": versions["numpy"] + "+local"}  # a local build of the same release
    torch_module.save({**payload, "versions": older}, tmp_path / "older_torch.pt")
    with pytest.warns(ReproducibilityWarning, match=r"\(torch \d+\.\d+\.0 -> [^;]*\)"):
        BaseDetector.load(tmp_path / "older_torch.pt")
    torch_module.save({**payload, "format": "et_graph.detector/2"}, tmp_path / "newer.pt")
    with pytest.raises(ValueError, match="saved in format 'et_graph.detector/2'"):
        BaseDetector.load(tmp_path / "newer.pt")
    module = types.ModuleType("my_fraud_models")
    exec("from et_graph.detectors import GBTDetector\n"
         "class MyGBT(GBTDetector):\n    pass\n", module.__dict__)
    monkeypatch.setitem(sys.modules, "my_fraud_models", module)
    module.MyGBT(max_iter=5).fit(graph).save(tmp_path / "mine.pt")
    del module.MyGBT  # the class renamed away, its module still there (an AttributeError)
    with pytest.raises(ValueError, match="holds a class that cannot be found here "
                                         r"\(my_fraud_models\.MyGBT: AttributeError"):
        BaseDetector.load(tmp_path / "mine.pt")
    monkeypatch.delitem(sys.modules, "my_fraud_models")  # the module gone too
    with pytest.raises(ValueError, match=r"cannot be found here .*ModuleNotFoundError"):
        BaseDetector.load(tmp_path / "mine.pt")


def test_a_bad_scored_graph_is_named_where_it_is_bad(graph):
    """(a deployment audit) NaN features were "data.x contains NaN or inf values", with no
    record to look up; features on the meta device failed on Tensor.item()."""
    det = GBTDetector(max_iter=5).fit(graph)
    x = graph.x.clone()
    x[7, 2] = float("nan")
    x[9, 0] = float("inf")
    with pytest.raises(ValueError, match=r"2 entries, in 2 nodes; the first at node 7, "
                                         r"column 2"):
        det.decision_function(Data(x=x, edge_index=graph.edge_index))
    with pytest.raises(ValueError, match="meta device"):
        det.decision_function(Data(x=graph.x.to("meta"), edge_index=graph.edge_index))


def test_the_range_check_reads_any_dtype_and_a_failed_fit_leaves_no_half_state(graph,
                                                                             monkeypatch):
    """(a second review) uint8 features wrapped the bounds, float16 ones overflowed them to
    NaN (the column skipped); a fit whose last scoring of the fitted graph failed left
    fitted_ = True beside no threshold."""
    from et_graph.detectors.base import column_range, warn_far_outside_fitted_range
    from et_graph.exceptions import DataWarning

    fitted = torch.tensor([[0.0, 200.0], [10.0, 250.0], [5.0, 220.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        warn_far_outside_fitted_range(fitted.to(torch.uint8), column_range(fitted), "d")
    with pytest.warns(DataWarning, match=r"\(1: 100%"):
        warn_far_outside_fitted_range((fitted * torch.tensor([1.0, 300.0])).half(),
                                      column_range(fitted), "d")
    det = GBTDetector(max_iter=5)

    def broken(data):
        raise MemoryError("scoring the fitted graph")

    monkeypatch.setattr(det, "_decision", broken)
    with pytest.raises(MemoryError):
        det.fit(graph)
    assert not det.fitted_
