"""The unsupervised ET detector, its network, its baselines and ``et-graph unsupervised``."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from helpers import results_keeping_random_streams
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Data

from et_graph.baselines.unsupervised import (
    BaselineUnavailable,
    baseline_features,
    isolation_forest_scores,
    lof_scores,
    pygod_scores,
)
from et_graph.cli import main as cli_main
from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import ETDetector, UnsupervisedETDetector
from et_graph.detectors.unsupervised import (
    COMBINE_DESCRIPTIONS,
    COMBINE_RULES,
    combine_scores,
    rank_score,
    robust_z,
)
from et_graph.exceptions import ConfigWarning, DataWarning, ETGraphWarning
from et_graph.experiments.unsupervised_anomaly import (
    UnsupervisedAnomalyConfig,
    compute_scores,
    load_graph,
    run,
)
from et_graph.nn.models.masked_reconstruction import ETMaskedNodeReconstruction, random_node_mask

FAST = {"epochs": 15, "score_rounds": 2}


@pytest.fixture(scope="module")
def graph() -> Data:
    return planted_anomaly_graph(num_nodes=300, seed=1)


@pytest.fixture(scope="module")
def fitted(graph: Data) -> UnsupervisedETDetector:
    return UnsupervisedETDetector(seed=0, **FAST).fit(graph)


def unlabelled(data: Data) -> Data:
    return Data(x=data.x, edge_index=data.edge_index)


# ---------------------------------------------------------------------------------------------
# Network
# ---------------------------------------------------------------------------------------------
def test_network_masked_tokens_start_from_the_mask_token_and_energy_is_per_node(graph):
    torch.manual_seed(0)
    model = ETMaskedNodeReconstruction(graph.num_features, 16, heads=2, head_dim=4, steps=2)
    mask = random_node_mask(graph.num_nodes, 0.3, torch.Generator().manual_seed(0))
    tokens = model.encode(graph.x, mask)
    assert torch.equal(tokens[mask], model.mask_token.expand(int(mask.sum()), -1))
    # A masked node's input features do not matter: changing them changes nothing.
    x2 = graph.x.clone()
    x2[mask] = 100.0
    assert torch.equal(model(graph.x, graph.edge_index, mask), model(x2, graph.edge_index, mask))
    error = model.reconstruction_error(graph.x, graph.edge_index, mask)
    energy = model.node_energy(graph.x, graph.edge_index, mask)
    assert error.shape == energy.shape == (graph.num_nodes,)
    last = model.final_tokens(graph.x, graph.edge_index, mask)
    assert torch.allclose(energy.sum(), model.conv.energy(last, graph.edge_index))
    assert torch.allclose(model.loss(graph.x, graph.edge_index, mask), error[mask].mean())
    both = model.scores(graph.x, graph.edge_index, mask)
    assert set(both) == {"reconstruction", "energy"}
    assert torch.allclose(both["reconstruction"], error)
    assert torch.allclose(both["energy"], energy)


def test_network_rejects_bad_masks(graph):
    model = ETMaskedNodeReconstruction(graph.num_features, 8, heads=1, head_dim=4, steps=1)
    with pytest.raises(ValueError, match="bool"):
        model(graph.x, graph.edge_index, torch.zeros(graph.num_nodes))
    with pytest.raises(ValueError, match="shape"):
        model(graph.x, graph.edge_index, torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="feature width"):
        model(graph.x[:, :3], graph.edge_index, torch.zeros(graph.num_nodes, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask_ratio"):
        random_node_mask(10, 1.5)


# ---------------------------------------------------------------------------------------------
# Detector
# ---------------------------------------------------------------------------------------------
def test_fit_without_labels_scores_every_node(graph, fitted):
    det = UnsupervisedETDetector(seed=0, **FAST).fit(unlabelled(graph))
    assert det.decision_score_.shape == (graph.num_nodes,)
    for key in ("reconstruction", "energy"):
        assert torch.equal(det.scores_[key], fitted.scores_[key])
    # The checkpoint is chosen on the held-out masked error, the history has it every epoch.
    assert len(det.history_) == FAST["epochs"]
    assert det.fit_info_["best_loss"] == min(r["val_loss"] for r in det.history_)
    pred = det.predict(graph)
    assert pred.dtype == torch.long and 0 < int(pred.sum()) < graph.num_nodes
    # The planted contextual anomalies are found by the completion error.
    assert roc_auc_score(graph.y.numpy(), det.scores_["reconstruction"].numpy()) > 0.8


def test_score_components_and_the_deprecated_score_samples(graph, fitted):
    # (API review) score_samples means "higher = more normal, one array" in scikit-learn;
    # ours returned a dict of anomaly scores, so it is now score_components
    components = fitted.score_components(graph)
    assert set(components) == {"reconstruction", "energy"}
    for key, score in components.items():
        assert torch.equal(score, fitted.scores_[key])
    assert torch.equal(fitted.decision_function(graph).double(),
                       components[fitted.config.score.anomaly_score].float().double())
    with pytest.warns(FutureWarning, match="renamed score_components") as caught:
        old = fitted.score_samples(graph)
    assert caught[0].filename == __file__  # points at the caller
    assert all(torch.equal(old[k], components[k]) for k in components)


def test_scrambled_labels_and_masks_give_bit_identical_scores(graph, fitted):
    scrambled = graph.clone()
    scrambled.y = graph.y[torch.randperm(graph.num_nodes, generator=torch.Generator()
                                         .manual_seed(5))]
    scrambled.train_mask = torch.rand(graph.num_nodes) < 0.5
    assert not torch.equal(scrambled.y, graph.y)
    det = UnsupervisedETDetector(seed=0, **FAST).fit(scrambled)
    for key in ("reconstruction", "energy"):
        assert torch.equal(det.scores_[key], fitted.scores_[key])
    assert torch.equal(det.decision_function(scrambled), fitted.decision_function(graph))
    # ... and the seed does matter (the test could fail).
    other = UnsupervisedETDetector(seed=1, **FAST).fit(graph)
    assert not torch.equal(other.scores_["reconstruction"], fitted.scores_["reconstruction"])


def test_et_detector_dispatch_and_clear_errors(graph):
    det = ETDetector(supervised=False, epochs=3, score_rounds=1)
    assert isinstance(det, UnsupervisedETDetector) and det.config.train.epochs == 3
    assert type(ETDetector(epochs=3)) is ETDetector
    with pytest.raises(ValueError, match="supervised=False"):
        ETDetector(epochs=1).fit(unlabelled(graph))
    # (an API audit) the other detectors said "no train_mask" of an unlabelled graph
    from et_graph.detectors import DETECTORS

    for detector in DETECTORS.values():
        with pytest.raises(ValueError, match="is supervised and data has no labels"):
            detector().fit(unlabelled(graph))
    with pytest.raises(ValueError, match="PyGOD's fit"):
        det.fit(graph, graph.y)
    with pytest.raises(ValueError, match="train_mask"):
        det.fit(graph, train_mask=torch.ones(graph.num_nodes, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="not fitted"):
        det.decision_function(graph)
    bad = unlabelled(graph)
    bad.x = bad.x.clone()
    bad.x[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        det.fit(bad)
    with pytest.raises(ValueError, match="mask_ratio"):
        UnsupervisedETDetector(mask_ratio=0.0)
    with pytest.raises(ValueError, match="anomaly_score"):
        UnsupervisedETDetector(anomaly_score="labels")
    with pytest.raises(TypeError, match="unknown keyword"):
        UnsupervisedETDetector(readout="first_last")


def test_scoring_another_width_raises(graph, fitted):
    other = Data(x=graph.x[:, :4], edge_index=graph.edge_index)
    with pytest.raises(ValueError, match="features"):
        fitted.decision_function(other)


# ---------------------------------------------------------------------------------------------
# Baselines and runner
# ---------------------------------------------------------------------------------------------
def test_sklearn_baselines_and_missing_pygod(graph, monkeypatch):
    free = unlabelled(graph)
    assert isolation_forest_scores(free, 0).shape == lof_scores(free).shape == (graph.num_nodes,)
    monkeypatch.setitem(sys.modules, "pygod", None)  # import pygod -> ImportError
    monkeypatch.setitem(sys.modules, "pygod.detector", None)
    with pytest.raises(BaselineUnavailable, match="pygod"):
        pygod_scores("dominant", free, 0)
    with pytest.raises(ValueError, match="unknown PyGOD"):
        pygod_scores("gcn", free, 0)


def test_chosen_baseline_settings_are_shown_beside_the_defaults(graph):
    """A run with other baseline settings also scores the defaults, in the same run (on
    reddit LOF at its defaults beat LOF chosen on planted anomalies)."""
    config = quick_config(**{"protocol.models": "iforest,lof", "baselines.lof_neighbors": 7})
    free = unlabelled(graph)
    free.name = "planted"
    scores, _, _ = compute_scores(free, config)
    assert set(scores) == {"iforest", "lof", "lof_defaults"}
    assert all(np.array_equal(s, lof_scores(free)) for s in scores["lof_defaults"])
    assert all(np.array_equal(s, lof_scores(free, 7)) for s in scores["lof"])
    from et_graph.experiments.unsupervised_anomaly import describe_protocol

    assert ("lof_defaults = the same detector at its defaults (x, min(20, N - 1) neighbours)"
            in describe_protocol(config, graph, 10))
    plain, _, _ = compute_scores(free, quick_config(**{"protocol.models": "iforest,lof"}))
    assert set(plain) == {"iforest", "lof"}


def test_lof_explains_groups_of_identical_feature_rows():
    """reddit holds one feature row 899 times; scikit-learn only said 'Duplicate values are
    leading to incorrect results'."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(120, 3, generator=generator)
    x[:40] = 0.0  # 40 identical rows
    data = Data(x=x, edge_index=torch.zeros(2, 0, dtype=torch.long))
    with pytest.warns(RuntimeWarning, match="the largest holds 40 nodes") as record:
        lof_scores(data, 10)
    assert not any("Duplicate values" in str(w.message) and w.category is UserWarning
                   for w in record)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lof_scores(data, 60)  # more neighbours than the group: no warning


def test_lof_explains_identical_rows_where_scikit_learn_says_nothing(monkeypatch):
    """From a minimum-version audit: the explanation was issued only in reply to scikit-learn's
    own "Duplicate values" warning, which scikit-learn before 1.6 does not give; it is read from
    the outlier factors themselves (scikit-learn's silence stands in for an older release)."""
    import types

    import sklearn.neighbors._lof as sklearn_lof

    monkeypatch.setattr(sklearn_lof, "warnings",
                        types.SimpleNamespace(warn=lambda *args, **kwargs: None))
    x = torch.randn(120, 3, generator=torch.Generator().manual_seed(0))
    x[:40] = 0.0
    data = Data(x=x, edge_index=torch.zeros(2, 0, dtype=torch.long))
    with pytest.warns(RuntimeWarning, match="the largest holds 40 nodes"):
        lof_scores(data, 10)


def test_default_isolation_forest_is_scikit_learns_auto_sample_size(graph):
    """The new max_samples key keeps the earlier tables' IsolationForest (scikit-learn's
    "auto" draws min(256, N) nodes), on a graph above and one below 256 nodes."""
    from sklearn.ensemble import IsolationForest

    for data in (unlabelled(graph), Data(x=graph.x[:100], edge_index=graph.edge_index[:, :0])):
        features = data.x.double().numpy()
        forest = IsolationForest(n_estimators=100, random_state=3).fit(features)
        assert np.array_equal(isolation_forest_scores(data, 3), -forest.score_samples(features))


def test_baseline_features_append_z_scored_neighbour_statistics():
    x = torch.tensor([[1.0, 5.0], [3.0, 5.0], [2.0, 5.0]])
    edges = torch.tensor([[1, 2, 0, 0], [0, 0, 1, 1]])  # 0 <- 1, 2; 1 <- 0 (twice); 2 alone
    data = Data(x=x, edge_index=edges)
    assert np.array_equal(baseline_features(data, "none"), x.double().numpy())
    found = baseline_features(data, "mean,degree")
    raw = np.array([[1, 5, 2.5, 5, np.log(3)], [3, 5, 1, 5, np.log(3)], [2, 5, 0, 0, 0]])
    spread = raw.std(axis=0)
    expected = (raw - raw.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    assert found.shape == (3, 5) and np.allclose(found, expected)
    assert np.all(found[:, 1] == 0)  # a constant column becomes 0, not NaN
    # LOF sees the neighbours: a node whose features are ordinary but whose neighbourhood is
    # far from every other node's is found only with the statistics appended.
    generator = torch.Generator().manual_seed(0)
    n = 200
    x = torch.randn(n, 4, generator=generator)
    ring = torch.arange(n)
    edge_index = torch.cat([torch.stack([ring, (ring + 1) % n]),
                            torch.stack([(ring + 1) % n, ring])], dim=1)
    x[[1, 199]] += 6.0  # node 0's two neighbours are far out, node 0 itself is not
    data = Data(x=x, edge_index=edge_index)
    alone, beside = lof_scores(data, 10), lof_scores(data, 10, "mean")
    assert 0 not in alone.argsort()[::-1][:3] and 0 in beside.argsort()[::-1][:3]


def test_baseline_settings_are_checked_and_reach_the_scores_and_protocol(graph):
    from et_graph.experiments.unsupervised_anomaly import describe_protocol

    for key, value, match in (("iforest_max_samples", 1, "at least 2"),
                              ("iforest_max_features", 0.0, "in \\(0, 1\\]"),
                              ("iforest_max_features", 1.5, "in \\(0, 1\\]"),
                              ("lof_neighbors", 0, "at least 1"),
                              ("lof_neighbour_stats", "mean,median", "lof_neighbour_stats"),
                              ("iforest_neighbour_stats", "kurtosis", "iforest_neighbour")):
        with pytest.raises(ValueError, match=match):
            quick_config(**{f"baselines.{key}": value})
    config = quick_config(**{"protocol.models": "et,iforest,lof",
                             "baselines.lof_neighbors": 7,
                             "baselines.lof_neighbour_stats": "mean,degree",
                             "baselines.iforest_max_samples": 64,
                             "baselines.iforest_max_features": 0.5})
    free = unlabelled(graph)
    assert np.array_equal(config.baselines.scorer("lof", 0)(free),
                          lof_scores(free, 7, "mean,degree"))
    assert np.array_equal(config.baselines.scorer("iforest", 2)(free),
                          isolation_forest_scores(free, 2, 100, 64, 0.5))
    assert not np.array_equal(config.baselines.scorer("iforest", 2)(free),
                              isolation_forest_scores(free, 2))
    line = describe_protocol(config, graph, 10)
    assert ("IsolationForest on x: 100 trees, min(64, N) samples, max_features 0.5; LOF on "
            "[x, in-neighbours' mean, degree], columns z-scored: min(7, N - 1) neighbours") in line
    only_et = describe_protocol(quick_config(**{"protocol.models": "et"}), graph, 10)
    assert "baselines:" not in only_et and "ET: masked-node completion" in only_et
    # without ET, the line does not describe ET
    only_lof = describe_protocol(quick_config(**{"protocol.models": "lof"}), graph, 10)
    assert "ET:" not in only_lof and "descent" not in only_lof
    assert only_lof.endswith("2 seeds. baselines: LOF on x: min(20, N - 1) neighbours")


def quick_config(**overrides) -> UnsupervisedAnomalyConfig:
    from et_graph.config import merge

    base = {"train.epochs": 5, "protocol.seeds": 2, "score.score_rounds": 1,
            "run.progress": False, "protocol.models": "et,iforest,lof,dominant,cola"}
    return merge(UnsupervisedAnomalyConfig(), {**base, **overrides})


def test_runner_reports_skipped_pygod_and_never_reads_labels_before_scoring(graph, monkeypatch,
                                                                            capsys):
    monkeypatch.setitem(sys.modules, "pygod", None)
    monkeypatch.setitem(sys.modules, "pygod.detector", None)
    config = quick_config()
    with pytest.warns(RuntimeWarning, match="skipped baseline dominant") as caught:
        results = run(config, data=graph)
    # once per baseline, not once per seed
    assert sum("skipped baseline dominant" in str(w.message) for w in caught) == 1
    assert set(results["skipped"]) == {"dominant", "cola"}
    assert "pip install -e .[pygod]" in results["skipped"]["dominant"]
    assert "skipped dominant: " in capsys.readouterr().out  # and the runner lists it
    assert set(results["models"]) == {"et_reconstruction", "et_energy", "iforest", "lof"}
    for row in results["models"].values():
        assert len(row["auroc"]["values"]) == 2
    # Scores come from the label-free graph: scrambled labels give the same scores.
    free, _ = load_graph(config.data, graph)
    assert getattr(free, "y", None) is None
    scrambled = graph.clone()
    scrambled.y = graph.y.flip(0)
    free2, _ = load_graph(config.data, scrambled)
    scores, _, _ = compute_scores(free, config)
    scores2, _, _ = compute_scores(free2, config)
    for name in scores:
        for a, b in zip(scores[name], scores2[name]):
            assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="label-free"):
        compute_scores(graph, config)


def test_runner_evaluates_only_the_labelled_nodes_of_a_label_mask(graph, tmp_path):
    """A graph's label_mask (Amazon's first 3,305 nodes carry no label and y = 0) was ignored:
    the unlabelled nodes were evaluated as normal. Now every node is scored and only the
    labelled ones are evaluated, so what y says outside the mask changes nothing."""
    config = quick_config(**{"protocol.models": "iforest"})
    masked = graph.clone()
    masked.label_mask = torch.arange(graph.num_nodes) >= 40
    results = []
    for outside in (0, 1):
        data = masked.clone()
        data.y = graph.y.clone()
        data.y[:40] = outside
        out = {"run.out": str(tmp_path / str(outside))}
        results.append(run(quick_config(**{"protocol.models": "iforest", **out}), data=data))
    assert results[0]["models"] == results[1]["models"]
    assert "the 260 labelled ones (label_mask) evaluated" in results[0]["protocol"]
    import numpy as np  # the kept scores are the evaluated nodes', with their ids
    stored = np.load(tmp_path / "0" / "scores.npz")
    assert stored["nodes__seed0"].tolist() == list(range(40, graph.num_nodes))
    assert stored["labels__seed0"].tolist() == graph.y[40:].tolist()
    with pytest.raises(ValueError, match="label_mask must be a bool vector"):
        bad = graph.clone()
        bad.label_mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
        run(config, data=bad)


def test_runner_bad_inputs(graph):
    with pytest.raises(ValueError, match="unknown models"):
        quick_config(**{"protocol.models": "et,svm"})
    with pytest.raises(ValueError, match="needs data.y"):
        run(quick_config(), data=unlabelled(graph))
    with pytest.raises(ValueError, match="feature_norm"):
        quick_config(**{"data.feature_norm": "minmax"})


def test_cli_quick_on_a_planted_graph(graph, tmp_path, capsys):
    path = tmp_path / "planted.pt"
    torch.save(graph, path)
    out = tmp_path / "out"
    code = cli_main(["unsupervised", "--data", str(path), "--quick", "--models", "et,iforest",
                     "--score-rounds", "1", "--epochs", "3", "--no-progress", "--out", str(out),
                     "--threads", "1", "--bootstrap-rounds", "100"])
    assert code == 0
    assert "et_reconstruction" in capsys.readouterr().out  # printed without progress bars too
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["dataset"] == "planted"
    assert set(results["models"]) == {"et_reconstruction", "et_energy", "iforest"}
    assert results["meta"]["config"]["protocol"]["seeds"] == 2
    # the graph it read, as a digest (a changed file showed nowhere: a determinism audit)
    assert len(results["meta"]["data_digest"]) >= 16
    table = (out / "results.md").read_text(encoding="utf-8")
    assert "et_reconstruction" in table and "rec_at_k" in table
    assert (out / "roc_pr.png").stat().st_size > 0
    # ET's headline row minus each baseline (never minus ET's other rows)
    assert [(d["first"], d["second"], d["metric"]) for d in results["differences"]] == [
        ("et_reconstruction", "iforest", "auroc"), ("et_reconstruction", "iforest", "auprc")]
    assert "| et_reconstruction − iforest | auroc |" in table
    # per-node scores kept (the table's AUROC from them) and AUROC over the nodes (DeLong)
    import numpy as np
    from sklearn.metrics import roc_auc_score

    stored = np.load(out / "scores.npz")
    labels = stored["labels__seed1"]
    assert len(stored["nodes__seed0"]) == len(labels) == graph.num_nodes
    assert roc_auc_score(labels, stored["iforest__seed1"]) == pytest.approx(
        results["models"]["iforest"]["auroc"]["values"][1], abs=1e-12)
    nodes, precision = results["node_differences"]  # AUROC by DeLong, AUPRC bootstrapped
    assert (nodes["first"], nodes["second"], nodes["design"]) == (
        "et_reconstruction", "iforest", "nodes")
    assert (precision["metric"], precision["design"]) == ("auprc", "nodes")
    assert "paired over the scored nodes (DeLong)" in table


def test_roc_plot_draws_every_score_with_its_tables_first_seed_figures(graph, tmp_path,
                                                                         monkeypatch):
    """The unsupervised run wrote no figure; roc_pr.png now draws every row's first-seed score
    over all nodes, and those curves' AUROC and AUPRC are the table's first-seed values."""
    from et_graph.experiments import unsupervised_anomaly
    from et_graph.protocols.anomaly import evaluate

    drawn = {}
    real = unsupervised_anomaly.plot_roc_pr

    def capture(path, y, scores, scope):
        drawn.update(y=y, scores=scores, scope=scope)
        return real(path, y, scores, scope)

    monkeypatch.setattr(unsupervised_anomaly, "plot_roc_pr", capture)
    results = run(quick_config(**{"protocol.models": "et,iforest", "run.out": str(tmp_path)}),
                  data=graph)
    assert (tmp_path / "roc_pr.png").stat().st_size > 0
    assert set(drawn["scores"]) == set(results["models"])
    assert f"all {graph.num_nodes:,} nodes" in drawn["scope"]
    for name, score in drawn["scores"].items():
        for metric in ("auroc", "auprc"):
            assert evaluate(drawn["y"], score, 0.5)[metric] == pytest.approx(
                results["models"][name][metric]["values"][0], abs=1e-12), (name, metric)


# ---------------------------------------------------------------------------------------------
# Structure reconstruction (edge decoder)
# ---------------------------------------------------------------------------------------------
def with_clique(data: Data, size: int = 20, seed: int = 0) -> tuple[Data, torch.Tensor]:
    """``data`` plus a clique among ``size`` random normal nodes (PyGOD's structural injection:
    the members keep their features, only their edges are anomalous); returns the graph and the
    bool clique mask."""
    from torch_geometric.utils import coalesce

    normal = (data.y == 0).nonzero().view(-1)
    members = normal[torch.randperm(normal.numel(),
                                    generator=torch.Generator().manual_seed(seed))[:size]]
    pairs = torch.cartesian_prod(members, members).t()
    pairs = pairs[:, pairs[0] != pairs[1]]
    edge_index = coalesce(torch.cat([data.edge_index, pairs], dim=1), num_nodes=data.num_nodes)
    clique = torch.zeros(data.num_nodes, dtype=torch.bool)
    clique[members] = True
    return Data(x=data.x, edge_index=edge_index, y=data.y), clique


def test_network_structure_error_is_the_mean_edge_loss_over_in_edges(graph):
    torch.manual_seed(0)
    model = ETMaskedNodeReconstruction(graph.num_features, 8, heads=1, head_dim=4, steps=1,
                                       structure=True)
    mask = random_node_mask(graph.num_nodes, 0.2, torch.Generator().manual_seed(0))
    tokens = model.final_tokens(graph.x, graph.edge_index, mask)
    error = model.structure_error(tokens, graph.edge_index)
    src, dst = graph.edge_index
    z = model.edge_decoder(model.decoder_norm(tokens))
    for node in (0, 7, 123):
        incoming = src[dst == node]
        logits = z[incoming] @ z[node]
        expected = torch.nn.functional.softplus(-logits).mean()
        assert torch.allclose(error[node], expected, atol=1e-6)
    # an isolated node has no edge loss, and the loss adds the sampled negative pairs
    assert float(model.structure_error(tokens, graph.edge_index[:, :0]).detach().abs().sum()) == 0.0
    loss = model.structure_loss(tokens, graph.edge_index, torch.Generator().manual_seed(1))
    assert loss.ndim == 0 and float(loss.detach()) > float(error.detach().mean()) * 0.5
    assert set(model.scores(graph.x, graph.edge_index, mask)) == {
        "reconstruction", "energy", "structure"}
    plain = ETMaskedNodeReconstruction(graph.num_features, 8, heads=1, head_dim=4, steps=1)
    with pytest.raises(RuntimeError, match="structure=True"):
        plain.structure_error(tokens, graph.edge_index)


def test_structure_score_finds_an_injected_clique_the_feature_score_misses(graph):
    data, clique = with_clique(graph)
    det = UnsupervisedETDetector(seed=0, structure_weight=1.0, anomaly_score="combined",
                                 **FAST).fit(unlabelled(data))
    assert set(det.scores_) == {"reconstruction", "energy", "structure", "combined"}
    assert torch.equal(det.decision_score_, det.scores_["combined"].float())
    combined = det.scores_["combined"]
    assert float(combined.min()) > 0.0 and float(combined.max()) <= 1.0
    # judged among the nodes without planted contextual anomalies: clique member or not
    normal = (graph.y == 0).numpy()
    target = clique.numpy()[normal]
    structure_auc = roc_auc_score(target, det.scores_["structure"].numpy()[normal])
    feature_auc = roc_auc_score(target, det.scores_["reconstruction"].numpy()[normal])
    assert structure_auc > 0.9 and structure_auc > feature_auc + 0.2
    # labels never enter: a scrambled y gives bit-identical scores
    scrambled = Data(x=data.x, edge_index=data.edge_index, y=data.y.flip(0))
    again = UnsupervisedETDetector(seed=0, structure_weight=1.0, **FAST).fit(scrambled)
    for key, value in det.scores_.items():
        assert torch.equal(again.scores_[key], value)


def test_structure_settings_are_checked():
    with pytest.raises(ValueError, match="structure_weight"):
        UnsupervisedETDetector(structure_weight=-1.0)
    for score in ("structure", "combined"):
        with pytest.raises(ValueError, match="edge decoder"):
            UnsupervisedETDetector(anomaly_score=score)


def test_structure_reduce_pools_the_same_edge_losses(graph):
    torch.manual_seed(0)
    model = ETMaskedNodeReconstruction(graph.num_features, 8, heads=1, head_dim=4, steps=1,
                                       structure=True)
    mask = random_node_mask(graph.num_nodes, 0.2, torch.Generator().manual_seed(0))
    tokens = model.final_tokens(graph.x, graph.edge_index, mask).detach()
    src, dst = graph.edge_index
    z = model.edge_decoder(model.decoder_norm(tokens)).detach()
    pooled = {reduce: model.structure_error(tokens, graph.edge_index, reduce).detach()
              for reduce in ("mean", "sum", "max")}
    for node in (0, 7, 123):
        losses = torch.nn.functional.softplus(-(z[src[dst == node]] @ z[node]))
        assert torch.allclose(pooled["sum"][node], losses.sum(), atol=1e-5)
        assert torch.allclose(pooled["max"][node], losses.max(), atol=1e-6)
        assert torch.allclose(pooled["mean"][node], losses.mean(), atol=1e-6)
    with pytest.raises(ValueError, match="reduce"):
        model.structure_error(tokens, graph.edge_index, "median")


def test_combine_max_takes_the_larger_rank_and_reduce_reaches_the_scores(graph):
    data, _ = with_clique(graph)
    base = UnsupervisedETDetector(seed=0, structure_weight=1.0, **FAST).fit(unlabelled(data))
    other = UnsupervisedETDetector(seed=0, structure_weight=1.0, combine="max",
                                   structure_reduce="sum", anomaly_score="combined",
                                   **FAST).fit(unlabelled(data))
    # Same network and masked passes: only the pooling and the joining differ.
    for key in ("reconstruction", "energy"):
        assert torch.equal(base.scores_[key], other.scores_[key])
    assert not torch.allclose(base.scores_["structure"], other.scores_["structure"])
    recon = rank_score(other.scores_["reconstruction"])
    structure = rank_score(other.scores_["structure"])
    assert torch.equal(other.scores_["combined"], torch.maximum(recon, structure))
    assert torch.equal(base.scores_["combined"],
                       (rank_score(base.scores_["reconstruction"])
                        + rank_score(base.scores_["structure"])) / 2)
    assert torch.equal(other.decision_score_, other.scores_["combined"].float())


def test_robust_z_is_scaled_by_the_mad_and_z_rules_join_it():
    score = torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0])
    # median 3, absolute deviations 2, 1, 0, 1, 97: MAD 1
    assert torch.allclose(robust_z(score), (score.double() - 3.0) / 1.4826)
    # over half equal: the MAD is 0 and the mean absolute deviation takes its place
    mostly_zero = torch.tensor([0.0, 0.0, 0.0, 5.0])
    assert torch.allclose(robust_z(mostly_zero), mostly_zero.double() / (1.2533 * 1.25))
    assert torch.equal(robust_z(torch.ones(4)), torch.zeros(4, dtype=torch.float64))
    recon, structure = torch.tensor([0.0, 1.0, 2.0, 9.0]), torch.tensor([5.0, 1.0, 3.0, 2.0])
    z = robust_z(recon), robust_z(structure)
    assert torch.equal(combine_scores(recon, structure, "max_z"), torch.maximum(*z))
    assert torch.equal(combine_scores(recon, structure, "sum_z"), z[0] + z[1])
    # ranks flatten how far out node 3 lies on the reconstruction; z-scores keep it first
    assert int(combine_scores(recon, structure, "max_z").argmax()) == 3
    assert float(combine_scores(recon, structure, "max")[0]) == 1.0  # a rank tie at the top
    with pytest.raises(ValueError, match="combine"):
        combine_scores(recon, structure, "min")
    assert set(COMBINE_DESCRIPTIONS) == set(COMBINE_RULES)  # every rule is worded in reports


def test_combine_max_z_reaches_the_detector(graph):
    data, _ = with_clique(graph)
    det = UnsupervisedETDetector(seed=0, structure_weight=1.0, combine="max_z",
                                 anomaly_score="combined", **FAST).fit(unlabelled(data))
    assert torch.equal(det.scores_["combined"],
                       torch.maximum(robust_z(det.scores_["reconstruction"]),
                                     robust_z(det.scores_["structure"])))


def test_score_rules_are_checked():
    with pytest.raises(ValueError, match="structure_reduce"):
        UnsupervisedETDetector(structure_weight=1.0, structure_reduce="median")
    with pytest.raises(ValueError, match="combine"):
        UnsupervisedETDetector(structure_weight=1.0, combine="min")


def test_contamination_range_is_pygods_and_ties_never_flag_more_than_it():
    """(0, 0.5] as in PyGOD (0.5 was refused); the flagged count follows the quantile, and a
    block of identical scores at the threshold is left unflagged as a whole, with a warning
    (it flagged all 20 nodes of a graph whose scores all tied)."""
    from et_graph.detectors import UnsupervisedScoreConfig

    assert UnsupervisedScoreConfig(contamination=0.5).contamination == 0.5
    for bad in (0.0, 0.6):
        with pytest.raises(ValueError, match=r"\(0, 0.5\]"):
            UnsupervisedScoreConfig(contamination=bad)
    det = UnsupervisedETDetector(seed=0, epochs=2, score_rounds=1, contamination=0.1)
    det.fit(planted_anomaly_graph(num_nodes=200, seed=2))
    score = det.decision_score_
    assert int(det.predict(planted_anomaly_graph(num_nodes=200, seed=2)).sum()) == int(
        (score > det.threshold_).sum()) == 20
    tied = Data(x=torch.ones(20, 5), edge_index=torch.empty(2, 0, dtype=torch.long))
    with pytest.warns(ETGraphWarning) as caught:
        det = UnsupervisedETDetector(seed=0, epochs=2, score_rounds=1).fit(tied)
    messages = " ".join(str(w.message) for w in caught)
    assert "same features" in messages and "no edges" in messages
    if det.decision_score_.unique().numel() == 1:  # every score ties
        assert "tie at the threshold" in messages
    assert int(det.predict(tied).sum()) <= 2
    # Self-loops alone are no edges between nodes either (a fraud-data audit: no warning).
    loops = Data(x=torch.randn(20, 5), edge_index=torch.arange(20).repeat(2, 1))
    with pytest.warns(DataWarning, match="no edges between two nodes"):
        UnsupervisedETDetector(seed=0, epochs=1, score_rounds=1).fit(loops)


def test_the_cli_points_an_unlabelled_graph_to_the_python_detector(graph, tmp_path):
    """It said only "the Data object has no y", on a page that opens with "no label is known"."""
    unlabelled = graph.clone()
    del unlabelled.y
    path = tmp_path / "noy.pt"
    torch.save(unlabelled, path)
    with pytest.raises(ValueError, match=r"has no y; .*UnsupervisedETDetector\(\)\.fit\(data\)"):
        cli_main(["unsupervised", "--data", str(path), "--quick", "--no-progress"])


def test_a_files_split_masks_are_dropped_unread_by_the_unsupervised_runner(graph, tmp_path):
    """The unsupervised protocol scores every node and reads no split, yet its loader checked a
    file's masks: one with a train_mask alone (as some exports carry) was refused. Now the
    masks are dropped unread, with a DataWarning naming them; the supervised loader still
    refuses them."""
    from et_graph.datasets import load_anomaly_dataset
    from et_graph.datasets.npz import save_anomaly_npz

    partial = graph.clone()
    partial.train_mask = torch.arange(graph.num_nodes) % 2 == 0
    pt_path = tmp_path / "partial.pt"
    torch.save(partial, pt_path)
    npz_path = save_anomaly_npz(graph, tmp_path / "plain.npz")
    arrays = dict(np.load(npz_path))
    arrays["val_mask"] = np.arange(graph.num_nodes) % 3 == 0
    np.savez(tmp_path / "partial.npz", **arrays)
    for path in (pt_path, tmp_path / "partial.npz"):
        with pytest.raises(ValueError, match="split masks must come as all of"):
            load_anomaly_dataset(path=path)
        with pytest.warns(DataWarning, match=r"split masks \['(train|val)_mask'\] are not read"):
            loaded = load_anomaly_dataset(path=path, split_masks=False)
        assert all(getattr(loaded, key, None) is None
                   for key in ("train_mask", "val_mask", "test_mask"))
        assert torch.equal(loaded.y, graph.y)
    config = quick_config(**{"protocol.models": "iforest", "data.data": str(pt_path),
                             "run.out": str(tmp_path / "out")})
    with pytest.warns(DataWarning, match="are not read"):
        result = run(config)
    assert result["models"]["iforest"]


def test_pygod_baselines_are_seeded_without_resetting_the_callers_stream(graph, monkeypatch):
    """pygod_scores seeded torch and NumPy globally and left them so; a stand-in PyGOD
    detector (PyGOD is an optional extra) shows the fit seeded and the caller's stream kept."""
    import types

    import numpy as np

    from et_graph.baselines import unsupervised as baselines

    class FakeDominant:
        def __init__(self, epoch, gpu, verbose):
            pass

        def fit(self, data):
            self.decision_score_ = torch.rand(data.num_nodes) + float(np.random.rand())

    fake = types.ModuleType("pygod.detector")
    fake.DOMINANT = FakeDominant
    monkeypatch.setitem(sys.modules, "pygod", types.ModuleType("pygod"))
    monkeypatch.setitem(sys.modules, "pygod.detector", fake)
    monkeypatch.setattr(baselines, "pygod_available", lambda: (True, ""))
    runs = results_keeping_random_streams(
        lambda: baselines.pygod_scores("dominant", graph, seed=7))
    assert np.array_equal(runs[0], runs[1])  # seeded by its own seed, not the caller's


def test_a_baseline_lost_after_its_first_seed_is_dropped_whole(graph, monkeypatch):
    """From an audit: a baseline unavailable from the second seed on left a one-seed row that
    crashed the runner with an IndexError after every training."""
    from et_graph.protocols import unsupervised as protocol

    real = protocol.baseline_scorer

    def flaky(name, seed, *args, **kwargs):
        if name == "lof" and seed > 0:
            def unavailable(data):
                raise BaselineUnavailable("the machine ran out of memory")
            return unavailable
        return real(name, seed, *args, **kwargs)

    monkeypatch.setattr(protocol, "baseline_scorer", flaky)
    with pytest.warns(RuntimeWarning, match="skipped baseline lof"):
        results = run(quick_config(**{"protocol.models": "et,iforest,lof"}), data=graph)
    assert "lof" not in results["models"]
    assert "unavailable at seed 1" in results["skipped"]["lof"]
    assert all(len(row["auroc"]["values"]) == 2 for row in results["models"].values())


def test_the_protocol_line_counts_one_seed_in_the_singular(graph):
    from et_graph.experiments.unsupervised_anomaly import describe_protocol
    from et_graph.reporting import counted

    assert (counted(1, "seed"), counted(0, "seed"), counted(5, "fold")) == (
        "1 seed", "0 seeds", "5 folds")
    one = describe_protocol(quick_config(**{"protocol.seeds": 1}), graph, 10)
    assert "; 1 seed." in one and "1 seeds" not in one
    assert "; 2 seeds." in describe_protocol(quick_config(), graph, 10)


def test_flags_no_chosen_model_reads_are_named(monkeypatch):
    """ET's flags with ``--models lof`` (or LOF's with ``--models iforest``) changed nothing
    without a word."""
    from helpers import assert_unread_flags_named

    from et_graph.experiments import unsupervised_anomaly as runner

    assert_unread_flags_named(runner, monkeypatch, [
        (["--models", "lof", "--epochs", "3", "--score-rounds", "2"],
         r"flags for score\.score_rounds, train\.epochs: no"),
        (["--models", "et,iforest", "--lof-neighbors", "5"],
         r"flags for baselines\.lof_neighbors: no model"),
    ], ["--models", "et,lof", "--epochs", "3", "--lof-neighbors", "5"])


def test_combined_scores_on_another_graph_and_unread_score_settings_are_named(graph):
    """From an unsupervised audit: the combined score ranks within the graph scored, so on
    another graph predict flagged 3 of 30 anomalies it flagged in the fitted graph, without
    a word; combine/structure_reduce without the edge decoder were read by nothing;
    structure_weight=inf and a graph without edges failed mid-training."""
    import warnings

    from torch_geometric.data import Data

    free = unlabelled(graph)
    det = UnsupervisedETDetector(seed=0, epochs=1, score_rounds=1, structure_weight=1.0,
                                 anomaly_score="combined", combine="sum_z").fit(free)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        det.decision_function(free)  # the fitted graph: no word
    part = free.subgraph(torch.arange(60))
    with pytest.warns(ConfigWarning, match="relative to that graph: threshold_ and predict"):
        det.decision_function(part)
    for keywords in ({"combine": "max"}, {"structure_reduce": "sum"}):
        with pytest.raises(ValueError, match="shape the structure score, which needs the edge"):
            UnsupervisedETDetector(**keywords)
    with pytest.raises(ValueError, match="structure_weight must be a finite number"):
        UnsupervisedETDetector(structure_weight=float("inf"))
    lonely = Data(x=torch.randn(20, 5), edge_index=torch.arange(20).repeat(2, 1))
    with pytest.raises(ValueError, match="no edge between two nodes: set structure_weight=0"):
        UnsupervisedETDetector(epochs=1, structure_weight=1.0).fit(lonely)


def test_the_differences_compare_the_configured_anomaly_score(graph, tmp_path):
    """From an unsupervised audit: with --anomaly-score energy the significance tables still
    compared et_reconstruction with the baselines."""
    config = quick_config(**{"protocol.models": "et,lof", "score.anomaly_score": "energy",
                             "run.out": str(tmp_path)})
    results = run(config, data=graph)
    assert {d["first"] for d in results["differences"]} == {"et_energy"}
    assert {d["first"] for d in results["node_differences"]} == {"et_energy"}


def test_a_run_whose_detectors_were_all_skipped_fails_and_defaults_have_one_spelling(
        graph, monkeypatch):
    """From an unsupervised audit: --models dominant,cola without PyGOD exited 0 with an empty
    table; --lof-neighbour-stats NONE added a lof_defaults row identical to lof's."""
    from et_graph.protocols.unsupervised import UnsupervisedBaselineConfig

    monkeypatch.setitem(sys.modules, "pygod", None)
    monkeypatch.setitem(sys.modules, "pygod.detector", None)
    with pytest.raises(ValueError, match="every chosen detector was skipped"), pytest.warns(
            RuntimeWarning):
        run(quick_config(**{"protocol.models": "dominant,cola"}), data=graph)
    spelled = UnsupervisedBaselineConfig(iforest_neighbour_stats="NONE", lof_neighbour_stats="")
    assert (spelled.iforest_neighbour_stats, spelled.lof_neighbour_stats) == ("none", "none")
    assert not spelled.changed_from_defaults("lof")


def test_the_degree_baseline_counts_in_edges_without_self_loops(graph):
    from torch_geometric.data import Data

    from et_graph.baselines.unsupervised import baseline_scorer, degree_scores

    tiny = Data(x=torch.zeros(4, 2), edge_index=torch.tensor([[0, 1, 2, 3, 3], [1, 1, 1, 0, 3]]))
    assert degree_scores(tiny).tolist() == [1.0, 2.0, 0.0, 0.0]  # 1 -> 1 and 3 -> 3 not counted
    assert baseline_scorer("degree", seed=0)(tiny).tolist() == [1.0, 2.0, 0.0, 0.0]
    results = run(quick_config(**{"protocol.models": "degree,lof"}), data=graph)
    assert results["models"]["degree"]["auroc"]["values"][0] == results["models"]["degree"][
        "auroc"]["values"][1]  # no seed in it
    assert "degree = each node's in-degree" in results["protocol"]


def test_training_masks_never_pick_a_validation_node(monkeypatch):
    """The label-free validation nodes must never be masked (so never a training target):
    masks drawn from all nodes would let training fit the very nodes that select the epoch."""
    import et_graph.detectors.unsupervised as unsupervised

    seen = []

    class WatchedTask(unsupervised.MaskedReconstructionTask):
        def batches(self, epoch):
            for mask in super().batches(epoch):
                seen.append((mask.clone(), self.val_nodes.clone()))
                yield mask

    monkeypatch.setattr(unsupervised, "MaskedReconstructionTask", WatchedTask)
    graph = planted_anomaly_graph(num_nodes=60, seed=1)
    UnsupervisedETDetector(seed=0, epochs=6, score_rounds=1, hidden=8, head_dim=4,
                           mask_ratio=0.5, val_fraction=0.3).fit(graph)
    assert len(seen) == 6
    for mask, val_nodes in seen:
        assert val_nodes.any() and mask.any()
        assert not (mask & val_nodes).any()


def test_an_interrupted_refit_leaves_no_earlier_fit(graph: Data) -> None:
    """The unsupervised fit kept the previous fit's scores, curves and fitted_ = True after an
    interrupted refit."""
    detector = UnsupervisedETDetector(seed=0, **FAST).fit(graph)
    assert detector.fitted_ and detector.history_

    def stop(epoch, validation):
        raise KeyboardInterrupt

    detector.on_epoch = stop
    with pytest.raises(KeyboardInterrupt):
        detector.fit(graph)
    assert not detector.fitted_ and detector.history_ == [] and detector.decision_score_ is None


def test_masked_scores_take_the_energy_of_open_nodes_and_the_error_of_masked_ones():
    # (a mutation audit: the energy averaged over the passes where a node was masked passed)
    from et_graph.detectors.unsupervised import masked_scores

    class Stub(torch.nn.Module):
        def scores(self, x, edge_index, mask, structure_reduce):
            return {"reconstruction": mask.double(), "energy": mask.double()}

    out = masked_scores(Stub(), torch.zeros(50, 2), torch.zeros(2, 0, dtype=torch.long),
                        0.2, 2, torch.Generator().manual_seed(0))
    torch.testing.assert_close(out["energy"], torch.zeros(50, dtype=torch.float64))
    torch.testing.assert_close(out["reconstruction"], torch.ones(50, dtype=torch.float64))


def test_quantiles_past_torch_size_limit(graph, monkeypatch):
    """torch.quantile refuses more than 2**24 elements: an unsupervised fit on a graph of more
    nodes trained to the end and then failed in its threshold (an API audit), and the
    piecewise-linear feature encoding failed on such a column."""
    from et_graph import precision
    from et_graph.precision import quantile
    from et_graph.transforms.features import quantile_bin_edges

    big = torch.rand(2**24 + 1, generator=torch.Generator().manual_seed(0))
    with pytest.raises(RuntimeError, match="too large"):
        torch.quantile(big, 0.5)
    values = big[:1000].double()
    levels = torch.linspace(0, 1, 7, dtype=torch.float64)
    reference = torch.quantile(values, levels)
    assert float(quantile(big, 0.5)) == pytest.approx(float(big.median()), abs=1e-6)
    # the large-input route (the limit lowered, torch's refusal imitated) gives torch's values
    real = torch.quantile

    def limited(values, q, *args, **kwargs):
        if values.numel() > 64:
            raise RuntimeError("quantile() input tensor is too large")
        return real(values, q, *args, **kwargs)

    monkeypatch.setattr(precision, "TORCH_QUANTILE_LIMIT", 64)
    monkeypatch.setattr(torch, "quantile", limited)
    torch.testing.assert_close(quantile(values, levels), reference, rtol=0, atol=1e-15)
    edges = quantile_bin_edges(values.unsqueeze(1), bins=6)[0]
    torch.testing.assert_close(edges, reference, rtol=0, atol=1e-15)
    det = UnsupervisedETDetector(seed=0, epochs=2, score_rounds=1).fit(graph)
    assert det.threshold_ == pytest.approx(
        float(real(det.decision_score_.double(), 1.0 - det.config.score.contamination)))


def test_the_baseline_scorers_pickle_for_a_process_pool(graph):
    """iforest's and lof's scorers were lambdas, which a process pool cannot send to its
    workers (a multiprocessing audit)."""
    import pickle

    from et_graph.baselines.unsupervised import baseline_scorer

    free = unlabelled(graph)
    for name in ("iforest", "lof", "degree", "dominant"):
        scorer = pickle.loads(pickle.dumps(baseline_scorer(name, 3, lof_neighbors=7)))
        if name != "dominant":  # (PyGOD may be missing: its scorer only needs to travel)
            assert np.array_equal(scorer(free), baseline_scorer(name, 3, lof_neighbors=7)(free))


def test_lof_passes_other_warnings_through_the_callers_filters(graph, monkeypatch):
    """lof_scores recorded scikit-learn's warnings and sent them again with warn_explicit, past
    the caller's module filters (its module became the file's path: a logging audit); only the
    terse "Duplicate values" is left out."""
    import warnings

    from sklearn.neighbors import LocalOutlierFactor

    real_fit = LocalOutlierFactor.fit

    def fit(self, features, y=None):
        warnings.warn("something scikit-learn says", FutureWarning, stacklevel=1)
        warnings.warn("Duplicate values are leading to incorrect results", UserWarning,
                      stacklevel=1)
        return real_fit(self, features)

    monkeypatch.setattr(LocalOutlierFactor, "fit", fit)
    free = unlabelled(graph)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lof_scores(free, 7)
        warnings.filterwarnings("ignore", category=FutureWarning, module=__name__)
        lof_scores(free, 7)  # the caller's filter of the warning's module holds
    said = [str(w.message) for w in caught]
    assert said.count("something scikit-learn says") == 1
    assert not any("Duplicate values are leading" in message for message in said)


def test_self_loops_reach_no_score_of_the_edge_decoder():
    """(an unsupervised audit) the attention skipped self-loops but the edge decoder read them:
    the fitted graph with self-loops added moved the structure score by up to 0.11, with no
    'another graph' warning (its digest ignores self-loops)."""
    import warnings

    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.detectors import UnsupervisedETDetector

    graph = planted_anomaly_graph(120, seed=1)
    graph = Data(x=graph.x, edge_index=graph.edge_index)
    looped = Data(x=graph.x, edge_index=torch.cat([graph.edge_index,
                                                   torch.arange(120).repeat(2, 1)], dim=1))
    det = UnsupervisedETDetector(epochs=2, hidden=8, structure_weight=1.0, score_rounds=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det.fit(graph)
    plain, with_loops = det.score_components(graph), det.score_components(looped)
    assert torch.equal(plain["structure"], with_loops["structure"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = UnsupervisedETDetector(epochs=2, hidden=8, structure_weight=1.0,
                                       score_rounds=1).fit(looped)
    assert torch.equal(again.decision_function(graph), det.decision_function(graph))


def test_one_class_labels_are_refused_before_any_detector_is_fitted():
    """(an unsupervised audit) a file whose labels were all 0 trained every detector first and
    failed only when the metrics were computed, writing nothing."""
    from et_graph.datasets.synthetic import planted_anomaly_graph

    graph = planted_anomaly_graph(60, seed=1)
    normal = Data(x=graph.x, edge_index=graph.edge_index, y=torch.zeros(60, dtype=torch.long))
    config = quick_config()
    with pytest.raises(ValueError, match=r"both normal and anomalous .*the 60 nodes hold 0"):
        load_graph(config.data, normal)
    masked = Data(x=graph.x, edge_index=graph.edge_index, y=graph.y,
                  label_mask=graph.y == 0)  # the labelled nodes: normal ones only
    with pytest.raises(ValueError, match=r"the \d+ labelled nodes hold 0 anomalies"):
        load_graph(config.data, masked)


def test_scoring_under_another_default_dtype_reads_the_networks(fitted, graph):
    """Fitted under float32 and scored under torch.set_default_dtype(torch.float64): the
    features, cast to the new default by label_free_graph, are read by the network in its own
    dtype (its encoder casts them), so the scores are the same bit for bit."""
    expected = fitted.decision_function(graph)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        scores = fitted.decision_function(graph)
    finally:
        torch.set_default_dtype(previous)
    assert torch.equal(torch.as_tensor(scores), torch.as_tensor(expected))
