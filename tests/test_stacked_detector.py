"""ET stacked on the trees (StackedETDetector, model et_stacked): the cross-fit reads training
labels only, a training node reads the trees that did not see its label, another graph reads the
folds' mean, and the detector runs from the CLI and the tuner."""
import json

import pytest
import torch
from helpers import planted_graph_with_masks

from et_graph.cli import main as cli_main
from et_graph.config import parse
from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import (
    GBTDetector,
    GBTDetectorConfig,
    GBTModelConfig,
    StackedETDetector,
)
from et_graph.detectors.stacked import stacked_column, tree_log_odds
from et_graph.exceptions import ConfigWarning, DataWarning
from et_graph.protocols.anomaly_config import AnomalyConfig, make_detector

pytestmark = pytest.mark.usefixtures("one_thread")

TREES = GBTModelConfig(max_iter=20)


@pytest.fixture(scope="module")
def graph():
    return planted_graph_with_masks(240, seed=3)


@pytest.fixture(scope="module")
def fitted(graph):
    return StackedETDetector(epochs=3, hidden=16, trees=TREES, folds=3).fit(graph)


def test_each_fold_trees_fit_without_their_fold_and_training_nodes_read_them(graph, fitted):
    """Fold k's trees are the trees fitted on the other folds' training nodes (bit for bit),
    and a training node's column is its own fold's trees' log-odds, so no node reads a score
    fitted on its own label; every other node reads the folds' mean."""
    fold_of = fitted.fold_of_
    train = graph.train_mask
    assert bool((fold_of[train] >= 0).all()) and bool((fold_of[~train] == -1).all())
    assert sorted(fold_of[train].unique().tolist()) == [0, 1, 2]
    log_odds = tree_log_odds(fitted.trees_, graph)
    for k, tree in enumerate(fitted.trees_):
        again = GBTDetector(GBTDetectorConfig(model=TREES), seed=k).fit(
            graph, train & (fold_of != k), fold_of == k)
        assert torch.equal(again.decision_function(graph), tree.decision_function(graph))
    column = fitted.tree_column(graph)
    own = train.nonzero().view(-1)
    assert torch.equal(column[own], log_odds[fold_of[own], own])
    assert torch.allclose(column[~train], log_odds.mean(0)[~train])
    # (the out-of-fold training column differs from the in-sample mean: the test can fail)
    assert not torch.allclose(column[own], log_odds.mean(0)[own])


def test_labels_beyond_the_training_nodes_are_never_read(graph, fitted):
    """Scrambling every validation and test label changes neither the trees' column nor any
    score (validation labels choose ET's checkpoint and the threshold only, as for ET, so
    only the test labels may be scrambled for the scores)."""
    scrambled = graph.clone()
    scrambled.y = graph.y.clone()
    scrambled.y[graph.test_mask] = 1 - graph.y[graph.test_mask]
    again = StackedETDetector(epochs=3, hidden=16, trees=TREES, folds=3).fit(scrambled)
    assert torch.equal(again.decision_function(graph), fitted.decision_function(graph))
    # the trees read the training labels alone: the validation labels too may change
    scrambled.y[graph.val_mask] = 1 - graph.y[graph.val_mask]
    from et_graph.detectors.stacked import cross_fit_trees

    trees, fold_of = cross_fit_trees(scrambled, scrambled.y, graph.train_mask, TREES, 3)
    assert torch.equal(fold_of, fitted.fold_of_)
    assert torch.equal(stacked_column(tree_log_odds(trees, graph), fold_of),
                       fitted.tree_column(graph))


def test_another_graph_reads_the_folds_mean_and_a_grown_one_keeps_the_folds(graph, fitted):
    other = planted_anomaly_graph(150, seed=9)
    assert torch.allclose(fitted.tree_column(other),
                          tree_log_odds(fitted.trees_, other).mean(0))
    assert fitted.decision_function(other).shape == (150,)
    grown = graph.clone()  # a new node joins, linked to node 0
    grown.x = torch.cat([graph.x, graph.x[:1]])
    grown.edge_index = torch.cat([graph.edge_index, torch.tensor([[0, 240], [240, 0]])], dim=1)
    own = graph.train_mask.nonzero().view(-1)
    log_odds = tree_log_odds(fitted.trees_, grown)
    column = fitted.tree_column(grown)
    assert torch.equal(column[own], log_odds[fitted.fold_of_[own], own])
    assert torch.allclose(column[240], log_odds[:, 240].mean())


def test_save_load_clone_and_settings(graph, fitted, tmp_path):
    fitted.save(tmp_path / "stacked.pt")
    loaded = StackedETDetector.load(tmp_path / "stacked.pt")
    assert torch.equal(loaded.decision_function(graph), fitted.decision_function(graph))
    assert loaded.trees == TREES and loaded.folds == 3
    from sklearn.base import clone

    copy = clone(fitted)
    assert not copy.fitted_ and copy.trees == TREES and copy.folds == 3
    assert copy.config == fitted.config
    assert "folds=3" in repr(fitted) and "max_iter=20" in repr(fitted)
    assert copy.set_params(folds=4).folds == 4
    info = fitted.fit_info_
    assert 0.5 < info["tree_column_val_auroc"] <= 1.0 and info["epochs_run"] == 3


def test_clear_errors(graph):
    with pytest.raises(ValueError, match="cannot use label_trick"):
        StackedETDetector(trees=GBTModelConfig(label_trick=True))
    StackedETDetector(label_trick=True)  # ET's own label trick is allowed
    with pytest.raises(ValueError, match="at least 2"):
        StackedETDetector(folds=1)
    with pytest.raises(TypeError, match="GBTModelConfig"):
        StackedETDetector(trees={"max_iter": 10})
    few = graph.clone()
    few.y = graph.y.clone()
    anomalous = (graph.train_mask & (graph.y == 1)).nonzero().view(-1)
    few.y[anomalous[2:]] = 0  # two training anomalies left
    with pytest.raises(ValueError, match="folds=3 stratified folds need"):
        StackedETDetector(epochs=1, trees=TREES, folds=3).fit(few)
    with pytest.raises(ValueError, match="cannot use label_trick"):
        parse(AnomalyConfig, ["--models", "et_stacked", "--gbt-label-trick"])


def test_the_run_config_builds_it_from_ets_gbts_and_the_stack_section():
    config = parse(AnomalyConfig, ["--models", "et_stacked", "--hidden", "24", "--max-iter",
                                   "30", "--stack-folds", "4", "--no-progress"])
    det = make_detector(config, "et_stacked", seed=2)
    assert isinstance(det, StackedETDetector) and det.seed == 2 and det.folds == 4
    assert det.config.model.hidden == 24 and det.trees.max_iter == 30


def test_cli_run_and_tuner(tmp_path):
    data = tmp_path / "planted.pt"
    torch.save(planted_anomaly_graph(300, seed=2), data)
    out = tmp_path / "run"
    small = ["--epochs", "3", "--hidden", "16", "--max-iter", "20", "--no-progress"]
    assert cli_main(["anomaly", "--data", str(data), "--models", "et_stacked,gbt", "--seeds",
                     "2", "--stack-folds", "3", "--out", str(out), *small]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(results["models"]) == {"et_stacked", "gbt"}
    assert "et_stacked = ET reading one more column" in results["protocol"]
    assert "3 stratified folds" in results["protocol"]
    differences = results["differences"]
    assert differences and {d["first"] for d in differences} == {"et_stacked"}
    tuned = tmp_path / "tune"
    assert cli_main(["tune", "anomaly", "--trials", "1", "--storage",
                     f"sqlite:///{tmp_path}/stack.db", "--models", "et_stacked", "--data",
                     str(data), "--out", str(tuned), *small]) == 0
    preset = parse(AnomalyConfig, ["--config", str(tuned / "best_et_stacked.toml")])
    assert preset.protocol.model_names() == ["et_stacked"]


def test_edge_data_is_named_once_and_a_multi_relation_et_reads_its_relations(graph):
    """The trees and ET inside read what they use: the detector warns once about per-edge data
    it ignores (not once per tree), and a multi-relation ET still gets the edge types and their
    names."""
    import warnings

    data = graph.clone()
    data.edge_attr = torch.ones(data.edge_index.size(1), 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StackedETDetector(epochs=1, hidden=16, trees=TREES, folds=2).fit(data)
    named = [w for w in caught if "ignores data.edge_attr" in str(w.message)]
    assert len(named) == 1, [str(w.message) for w in caught]
    typed = graph.clone()
    typed.edge_type = torch.randint(0, 2, (typed.edge_index.size(1),),
                                    generator=torch.Generator().manual_seed(0))
    typed.relation_names = ["a", "b"]
    det = StackedETDetector(epochs=2, hidden=16, multi_relation=True, trees=TREES,
                            folds=2).fit(typed)
    assert det.et_.num_relations_ == 2 and det.et_.relation_names_ == ["a", "b"]
    merged = typed.clone()
    merged.edge_type = torch.zeros_like(typed.edge_type)
    assert not torch.allclose(det.decision_function(merged), det.decision_function(typed))
    # scoring and explaining an untyped graph say the same thing (a review: explaining one
    # raised an AttributeError on edge_type)
    untyped = graph.clone()
    for read in (det.decision_function, det.explanation_inputs):
        with pytest.raises(ValueError, match="multi_relation needs a graph with edge types"):
            read(untyped)


def test_mistakes_are_named_early_and_in_the_detectors_words(graph, tmp_path, monkeypatch):
    """From a user audit: a multi-relation ET on an untyped graph failed with an AttributeError
    after every tree was fitted; too many --stack-folds failed after the other models had
    trained; flat trees warned once per fold as a "GBTDetector" on its "validation" nodes; a
    misspelt or a trees' keyword was not pointed to folds or trees=GBTModelConfig(...)."""
    import warnings

    with pytest.raises(ValueError, match="multi_relation needs a graph with edge types"):
        StackedETDetector(multi_relation=True, trees=TREES, folds=2).fit(graph)
    data = tmp_path / "planted.pt"
    torch.save(planted_anomaly_graph(300, seed=2), data)
    trained = []
    monkeypatch.setattr("et_graph.detectors.ETDetector.fit",
                        lambda self, *a, **k: trained.append(1) or self)
    with pytest.raises(ValueError, match="--stack-folds=200 stratified folds need"):
        cli_main(["anomaly", "--data", str(data), "--models", "et,et_stacked", "--seeds", "1",
                  "--stack-folds", "200", "--no-progress", "--out", str(tmp_path / "run")])
    assert not trained  # refused before any model trained
    monkeypatch.undo()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StackedETDetector(epochs=1, hidden=16, folds=3, trees=GBTModelConfig(
            max_iter=5, min_samples_leaf=100)).fit(graph)
    messages = [str(w.message) for w in caught]
    assert sum("stacked trees of fold(s) [0, 1, 2] of 3" in m for m in messages) == 1, messages
    assert not any(m.startswith("GBTDetector") for m in messages), messages
    with pytest.raises(TypeError, match="did you mean 'folds'"):
        StackedETDetector(fold=3)
    with pytest.raises(TypeError, match=r"trees=GBTModelConfig\(max_iter=...\)"):
        StackedETDetector(max_iter=200)
    det = StackedETDetector(folds=3, trees=TREES, chunk_size=37, progress=True, hidden=24)
    again = eval(repr(det), {"StackedETDetector": StackedETDetector,
                             "GBTModelConfig": GBTModelConfig})
    assert again.get_params() == det.get_params()  # chunk_size and progress were dropped


def test_the_inner_ets_warnings_name_the_stacked_detector(graph, fitted):
    """From a user audit: scoring another graph with ET's label trick warned as "ETDetector",
    a detector the user never built."""
    det = StackedETDetector(epochs=1, hidden=16, label_trick=True, trees=TREES,
                            folds=2).fit(graph)
    with pytest.warns(DataWarning, match=r"^StackedETDetector: this graph has 150 nodes"):
        det.decision_function(planted_anomaly_graph(150, seed=9))


def test_the_energy_row_asked_for_without_plain_et_is_named(monkeypatch):
    """From a user audit: --models et_stacked --energy-row made no energy row, silently (the
    row is plain ET's node energy)."""
    import warnings

    from et_graph.experiments import anomaly

    monkeypatch.setattr(anomaly, "run", lambda config, *args, **kwargs: config)
    with pytest.warns(ConfigWarning, match="flags for protocol.energy_row: no model of this "
                                            "run reads them"):
        anomaly.main(["--models", "et_stacked,gbt", "--energy-row", "--no-progress"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        anomaly.main(["--models", "et,et_stacked", "--energy-row", "--no-progress"])
        anomaly.main(["--models", "et_stacked,gbt", "--no-energy-row", "--no-progress"])
    # only ET scores in chunks: a GCN run given them thought its memory bounded (a scale audit)
    with pytest.warns(ConfigWarning, match=r"flags for protocol.inference_chunk_edges, "
                                            r"protocol.inference_chunk_size: no model"):
        anomaly.main(["--models", "mlp,gcn", "--inference-chunk-size", "1000",
                      "--inference-chunk-edges", "5000", "--no-progress"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        anomaly.main(["--models", "et_stacked,gcn", "--inference-chunk-size", "1000",
                      "--no-progress"])


def test_fitting_and_scoring_never_record_the_process_warnings(graph, fitted, monkeypatch):
    """From a long-run audit: the inner ET's messages were renamed by recording every warning
    with ``warnings.catch_warnings(record=True)``, process-wide and not thread-safe: two threads
    scoring stacked detectors left every later warning of the process in a dead list. The parts
    now name their owner themselves; nothing records the process's warnings."""
    import warnings

    recorded = []
    real = warnings.catch_warnings

    class Spy(real):
        def __init__(self, *args, **kwargs):
            recorded.append(kwargs.get("record", False))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(warnings, "catch_warnings", Spy)
    det = StackedETDetector(epochs=1, hidden=16, label_trick=True, trees=TREES,
                            folds=2).fit(graph)
    with pytest.warns(DataWarning, match=r"^StackedETDetector: this graph has 150 nodes"):
        det.decision_function(planted_anomaly_graph(150, seed=9))
    fitted.decision_function(graph)
    assert not any(recorded)


def test_flat_fold_trees_are_summed_up_in_one_warning_naming_no_gbt_detector(graph):
    """A fold whose trees give every held-out node one score is named once, in one summary over
    the folds, and never as a GBTDetector's own warning (the user built none)."""
    import warnings

    flat = GBTModelConfig(max_iter=5, min_samples_leaf=10_000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StackedETDetector(epochs=1, hidden=16, trees=flat, folds=2).fit(graph)
    messages = [str(w.message) for w in caught]
    assert sum("the stacked trees of fold(s) [0, 1] of 2" in m for m in messages) == 1
    assert not any(m.startswith("GBTDetector") for m in messages)
    assert not any("every validation node has the same score" in m for m in messages)
