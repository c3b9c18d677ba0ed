"""Anomaly-detection ingredients, each a config switch that is off by default: neighbourhood
statistics as input features, the ego/neighbour ET readout, and the training-label features
("label trick") with their leakage rules."""
import math

import pytest
import torch
from helpers import planted_graph_with_masks
from torch_geometric.data import Data

from et_graph.cli import main as cli_main
from et_graph.config import parse
from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import ETDetector, ETModelConfig
from et_graph.detectors.config import et_space
from et_graph.detectors.neural import (
    NodeAnomalyTask,
    known_labels,
    neighbour_label_features,
)
from et_graph.exceptions import DataWarning, ETGraphWarning
from et_graph.nn.models import ETAnomalyNet, weighted_bce_loss
from et_graph.protocols.anomaly import make_splits
from et_graph.protocols.anomaly_config import AnomalyConfig, AnomalyDataConfig, load_data
from et_graph.training import CheckpointConfig
from et_graph.transforms import NeighbourhoodStatistics, neighbourhood_statistics
from et_graph.transforms.neighbourhood import parse_neighbour_stats

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------------------------
# Defaults and flags
# ----------------------------------------------------------------------------------------------
def test_switch_defaults_and_flags(capsys):
    config = AnomalyConfig()
    assert config.data.neighbour_stats == "none"
    # the ego/neighbour readout is on by default (validation evidence on three datasets)
    assert config.et.readout == "ego_neighbour" and config.et.label_trick is False
    flags = parse(AnomalyConfig, ["--neighbour-stats", "mean,std", "--readout", "ego_neighbour",
                                  "--label-trick"])
    assert flags.data.neighbour_stats == "mean,std"
    assert flags.et.readout == "ego_neighbour" and flags.et.label_trick is True
    assert parse(AnomalyConfig, ["--readout", "first_last"]).et.readout == "first_last"
    with pytest.raises(SystemExit):
        cli_main(["anomaly", "--help"])
    text = capsys.readouterr().out
    for flag in ("--neighbour-stats", "--readout", "--label-trick"):
        assert flag in text
    with pytest.raises(ValueError, match="neighbour statistics"):
        AnomalyDataConfig(neighbour_stats="mean,median")
    with pytest.raises(ValueError, match="readout"):
        ETModelConfig(readout="sum")


def test_search_space_offers_the_switches():
    optuna = pytest.importorskip("optuna")
    params = {"hidden": 32, "heads": 1, "head_dim": 8, "steps": 1, "alpha": 0.5, "dropout": 0.1,
              "readout": "ego_neighbour", "label_trick": True, "lr": 0.01,
              "weight_decay": 1e-5}
    space = et_space(optuna.trial.FixedTrial(params))
    assert space["model"]["readout"] == "ego_neighbour"
    assert space["model"]["label_trick"] is True


# ----------------------------------------------------------------------------------------------
# 1. Neighbourhood statistics
# ----------------------------------------------------------------------------------------------
def hand_graph():
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.0, 4.0], [5.0, 5.0]])
    # src -> dst: node 0 hears 1 and 2, node 1 hears 0 and 2, node 2 hears 1, node 3 nobody.
    edge_index = torch.tensor([[1, 2, 0, 2, 1], [0, 0, 1, 1, 2]])
    return Data(x=x, edge_index=edge_index, y=torch.tensor([0, 1, 0, 0]))


def test_neighbourhood_statistics_match_a_hand_computation():
    data = hand_graph()
    stats = neighbourhood_statistics(data.x, data.edge_index,
                                     ("mean", "sq_mean", "max", "min", "std", "degree"))
    l2, l1 = math.log(3.0), math.log(2.0)
    expected = torch.tensor([
        # mean       sq_mean       max         min          std         degree
        [1.5, 1.5, 4.5, 8.5, 3.0, 4.0, 0.0, -1.0, 1.5, 2.5, l2],
        [0.5, 3.0, 0.5, 10.0, 1.0, 4.0, 0.0, 2.0, 0.5, 1.0, l2],
        [3.0, -1.0, 9.0, 1.0, 3.0, -1.0, 3.0, -1.0, 0.0, 0.0, l1],
        [0.0] * 11,
    ])
    assert torch.allclose(stats, expected, atol=1e-6)
    # The block order follows stats.
    assert torch.allclose(neighbourhood_statistics(data.x, data.edge_index, ("min", "mean")),
                          torch.cat([expected[:, 6:8], expected[:, 0:2]], -1))


def test_transform_appends_is_label_free_and_leaves_the_input_alone():
    data = hand_graph()
    out = NeighbourhoodStatistics()(data)
    assert out.x.shape == (4, 2 + 4 * 2)
    assert torch.equal(out.x[:, :2], data.x) and data.x.shape == (4, 2)
    assert torch.equal(out.x[:, 2:], neighbourhood_statistics(
        data.x, data.edge_index, ("mean", "sq_mean", "max", "min")))
    relabelled = data.clone()
    relabelled.y = 1 - relabelled.y
    assert torch.equal(NeighbourhoodStatistics()(relabelled).x, out.x)
    only = NeighbourhoodStatistics("degree", cat=False)(data)
    assert only.x.shape == (4, 1)
    assert "degree" in repr(NeighbourhoodStatistics("degree"))
    assert parse_neighbour_stats(" Mean , max ") == ("mean", "max")
    assert parse_neighbour_stats("none") == () and parse_neighbour_stats(None) == ()
    with pytest.raises(ValueError, match="repeat"):
        parse_neighbour_stats("mean,mean")
    with pytest.raises(ValueError, match="at least one"):
        NeighbourhoodStatistics("none")


def test_load_data_adds_statistics_before_the_feature_norm():
    data = planted_anomaly_graph(150, num_features=4, seed=1)
    raw = load_data(AnomalyDataConfig(feature_norm="none", degree_feature=True,
                                      neighbour_stats="mean,max"), data)
    assert raw.x.shape == (150, 4 + 2 * 4 + 1)
    assert torch.allclose(raw.x[:, 4:12], neighbourhood_statistics(
        data.x.float(), data.edge_index, ("mean", "max")))
    config = AnomalyDataConfig(feature_norm="quantile", neighbour_stats="mean,std,degree")
    normed = load_data(config, data)
    assert normed.x.shape == (150, 4 + 2 * 4 + 1 + 1)
    # The quantile transform saw the new columns too: every column is a normal score.
    assert normed.x.mean(0).abs().max() < 0.2
    relabelled = data.clone()
    relabelled.y = 1 - relabelled.y
    assert torch.equal(load_data(config, relabelled).x, normed.x)
    default = load_data(AnomalyDataConfig(), data)
    assert default.x.shape == (150, 5)


# ----------------------------------------------------------------------------------------------
# 2. Ego / neighbour readout
# ----------------------------------------------------------------------------------------------
def test_ego_neighbour_readout_shapes_and_hand_computed_neighbour_mean():
    data = planted_anomaly_graph(60, num_features=6, seed=3)
    # A self-loop on node 0 (skipped by the neighbour mean) and a node 59 without in-edges.
    edge_index = data.edge_index[:, data.edge_index[1] != 59]
    edge_index = torch.cat([edge_index, torch.tensor([[0], [0]])], dim=1)
    model = ETAnomalyNet(6, 8, readout="ego_neighbour").eval()
    assert model.readout[0].in_features == 24
    assert model(data.x, edge_index).shape == (60,)
    first = model.embed(data.x)
    last = model.conv(first, edge_index)
    feats = model.readout_features(first, last, edge_index)
    assert feats.shape == (60, 24)
    normed = model.conv.norm(last)
    assert torch.allclose(feats[:, :16], torch.cat([model.conv.norm(first), normed], -1))
    for node in range(60):
        sources = [int(s) for s, d in edge_index.t() if int(d) == node and int(s) != node]
        expected = (normed[sources].mean(0) if sources else torch.zeros(8))
        assert torch.allclose(feats[node, 16:], expected, atol=1e-5), node
    assert torch.allclose(model(data.x, edge_index),
                          model.readout(feats).squeeze(-1), atol=1e-6)
    assert ETAnomalyNet(6, 8).readout[0].in_features == 16
    with pytest.raises(ValueError, match="readout"):
        ETAnomalyNet(6, 8, readout="cls")


def test_two_hop_readout_appends_the_mean_of_the_neighbour_means():
    data = planted_anomaly_graph(40, num_features=6, seed=4)
    # Node 39 has no in-edges and a self-loop on node 0 is skipped, as in the one-hop readout.
    edge_index = data.edge_index[:, data.edge_index[1] != 39]
    edge_index = torch.cat([edge_index, torch.tensor([[0], [0]])], dim=1)
    torch.manual_seed(0)
    model = ETAnomalyNet(6, 8, readout="ego_two_hop").double().eval()
    assert model.readout[0].in_features == 32
    x = data.x.double()
    first = model.embed(x)
    last = model.conv(first, edge_index)
    feats = model.readout_features(first, last, edge_index)
    assert feats.shape == (40, 32)

    def hand_mean(tokens: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(tokens)
        for node in range(tokens.size(0)):
            sources = [int(s) for s, d in edge_index.t() if int(d) == node and int(s) != node]
            if sources:
                out[node] = tokens[sources].mean(0)
        return out

    one_hop = hand_mean(model.conv.norm(last))
    torch.testing.assert_close(feats[:, 16:24], one_hop)
    torch.testing.assert_close(feats[:, 24:], hand_mean(one_hop))
    assert feats[39, 16:].abs().sum() == 0  # no in-neighbours: both means are zero
    torch.testing.assert_close(model(x, edge_index), model.readout(feats).squeeze(-1))
    # The detector takes it as a config choice.
    assert ETDetector(readout="ego_two_hop", epochs=1).config.model.readout == "ego_two_hop"

# ----------------------------------------------------------------------------------------------
# 3. Training-label features
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def graph():
    return planted_graph_with_masks(240, seed=3)


def test_label_features_match_a_hand_computation():
    # src -> dst: 0 hears 1, 2, 3 and itself; 1 hears 0; 2 hears 0 twice; 3 nobody.
    edge_index = torch.tensor([[1, 2, 3, 0, 0, 0, 0], [0, 0, 0, 0, 1, 2, 2]])
    labels = torch.tensor([1, 0, -1, 1])  # node 2 unlabelled
    feats = neighbour_label_features(edge_index, labels)
    expected = torch.tensor([
        [1 / 3, 1 / 3, math.log(3.0)],   # self-loop skipped; 3 in-neighbours, 2 labelled
        [1.0, 0.0, math.log(2.0)],
        [1.0, 0.0, math.log(3.0)],       # multiplicity counts
        [0.0, 0.0, 0.0],
    ])
    assert torch.allclose(feats, expected, atol=1e-6)
    assert torch.equal(neighbour_label_features(edge_index, torch.full((4,), -1)),
                       torch.zeros(4, 3))
    assert torch.equal(known_labels(torch.tensor([1, 0, 1]), torch.tensor([True, False, True])),
                       torch.tensor([1, -1, 1]))


def test_training_epochs_split_inputs_from_targets(graph):
    def task(seed):
        return NodeAnomalyTask(graph, graph.y, graph.train_mask, graph.val_mask,
                               ETDetector().config.train, torch.Generator().manual_seed(seed),
                               False, torch.device("cpu"), label_trick=True)

    first, again = task(0), task(0)
    train = set(graph.train_mask.nonzero().view(-1).tolist())
    draws = []
    for _ in range(2):
        x, edge_index, _, targets = next(iter(first.batches(0)))
        x2, _, _, targets2 = next(iter(again.batches(0)))
        assert torch.equal(x, x2) and torch.equal(targets, targets2)  # seeded
        target_set = set(targets.tolist())
        assert target_set < train and len(target_set) == len(train) - len(train) // 2
        inputs = torch.tensor(sorted(train - target_set))
        columns = neighbour_label_features(graph.edge_index, known_labels(graph.y, inputs))
        assert torch.equal(x, torch.cat([graph.x, columns], -1))
        draws.append(target_set)
    assert draws[0] != draws[1]  # a fresh split each epoch
    # Validation input: every training label, no other.
    columns = neighbour_label_features(graph.edge_index, known_labels(graph.y, graph.train_mask))
    assert torch.equal(first.eval_x, torch.cat([graph.x, columns], -1))


@pytest.mark.parametrize("share", [0.25, 0.75])
def test_label_trick_share_sets_the_input_part_of_each_draw(graph, share, monkeypatch):
    task = NodeAnomalyTask(graph, graph.y, graph.train_mask, graph.val_mask,
                           ETDetector().config.train, torch.Generator().manual_seed(0),
                           False, torch.device("cpu"), label_trick=True,
                           label_trick_share=share)
    train = graph.train_mask.nonzero().view(-1)
    inputs, targets = task.split_train()
    assert inputs.numel() == int(train.numel() * share)
    assert inputs.numel() + targets.numel() == train.numel()
    assert not set(inputs.tolist()) & set(targets.tolist())
    # the detector hands its config's share to the task
    seen = []
    original = NodeAnomalyTask.split_train

    def recording(self):
        drawn = original(self)
        seen.append((self.label_trick_share, drawn[0].numel()))
        return drawn

    monkeypatch.setattr(NodeAnomalyTask, "split_train", recording)
    ETDetector(label_trick=True, label_trick_share=share, epochs=2, hidden=8).fit(graph)
    assert seen == [(share, int(train.numel() * share))] * 2


@pytest.mark.parametrize("share", [0.0, 1.0, -0.5, float("nan")])
def test_label_trick_share_outside_the_open_unit_interval_is_refused(share):
    with pytest.raises(ValueError, match="label_trick_share"):
        ETDetector(label_trick=True, label_trick_share=share)


def test_scrambled_validation_and_test_labels_change_nothing(graph):
    def fit(data, epochs):
        return ETDetector(label_trick=True, epochs=epochs, hidden=16, seed=1).fit(data)

    hidden = graph.val_mask | graph.test_mask
    scrambled = graph.clone()
    scrambled.y = graph.y.clone()
    scrambled.y[hidden] = 1 - scrambled.y[hidden]
    # One epoch: the only checkpoint, so even scrambled validation labels cannot move it.
    a, b = fit(graph, 1), fit(scrambled, 1)
    assert torch.equal(a.network_input(graph), b.network_input(scrambled))
    assert torch.equal(a.decision_score_, b.decision_score_)
    # Several epochs, scrambled test labels only: every epoch and the scores are bit-identical.
    test_only = graph.clone()
    test_only.y = graph.y.clone()
    test_only.y[graph.test_mask] = 1 - test_only.y[graph.test_mask]
    c, d = fit(graph, 4), fit(test_only, 4)
    assert [r["train_loss"] for r in c.history_] == [r["train_loss"] for r in d.history_]
    assert torch.equal(c.decision_score_, d.decision_score_)


def test_a_training_node_never_sees_its_own_label(graph):
    train = graph.train_mask.nonzero().view(-1)
    src, dst = graph.edge_index
    # A normal training node with out-neighbours; give it a self-loop too.
    node = next(int(i) for i in train if graph.y[i] == 0 and bool((src == i).any()))
    looped = graph.clone()
    looped.edge_index = torch.cat([graph.edge_index, torch.tensor([[node], [node]])], dim=1)
    flipped = looped.clone()
    flipped.y = looped.y.clone()
    flipped.y[node] = 1
    a = ETDetector(label_trick=True, epochs=1, hidden=16).fit(looped)
    b = ETDetector(label_trick=True, epochs=1, hidden=16).fit(flipped)
    xa, xb = a.network_input(looped), b.network_input(flipped)
    assert torch.equal(xa[node], xb[node])
    hearers = sorted(set(dst[src == node].tolist()) - {node})
    assert hearers and all(not torch.equal(xa[h], xb[h]) for h in hearers)
    others = sorted(set(range(240)) - set(hearers))
    assert torch.equal(xa[others], xb[others])


def test_label_trick_trains_and_scores_end_to_end(graph):
    det = ETDetector(label_trick=True, readout="ego_neighbour", epochs=3, hidden=16).fit(graph)
    assert det.model_.in_channels == graph.num_features + 3
    score = det.decision_function(graph)
    assert torch.equal(score, det.decision_score_) and score.shape == (240,)
    assert det.predict(graph).shape == (240,) and det.node_energy(graph).shape == (240,)
    assert len(det.history_) == 3
    # Another graph (inductive): no labels known there, the label columns are zero.
    other = planted_anomaly_graph(90, seed=9)
    assert torch.equal(det.network_input(other)[:, -3:], torch.zeros(90, 3))
    assert det.decision_function(other).shape == (90,)
    # Subgraph training works with it too.
    sub = ETDetector(label_trick=True, subgraph_ratio=0.5, epochs=2, hidden=16).fit(graph)
    assert sub.decision_score_.shape == (240,)


def test_the_fitted_graph_is_recognised_after_coalescing_or_self_loops(graph):
    """From an audit: adding self-loops or coalescing the edges after the fit made it 'another
    graph', whose label-trick columns were zeroed silently (scores moved by 0.1)."""
    import warnings

    from torch_geometric.utils import add_self_loops, coalesce

    det = ETDetector(label_trick=True, epochs=2, hidden=16).fit(graph)
    fitted = det.network_input(graph)[:, -3:]
    looped, deduplicated = graph.clone(), graph.clone()
    looped.edge_index = add_self_loops(graph.edge_index, num_nodes=240)[0]
    doubled = torch.cat([graph.edge_index, graph.edge_index[:, :10]], dim=1)
    deduplicated.edge_index = coalesce(doubled, num_nodes=240)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        assert torch.equal(det.network_input(looped)[:, -3:], fitted)
        assert torch.equal(det.network_input(deduplicated)[:, -3:], fitted)
    rewired = graph.clone()
    rewired.edge_index = graph.edge_index[:, 10:]  # other edges on the same nodes
    with pytest.warns(DataWarning, match="scored as another graph: the label-trick columns"):
        assert not det.network_input(rewired)[:, -3:].any()


@pytest.mark.parametrize("detector", ["et", "gbt"])
def test_the_fitted_graph_grown_by_new_nodes_keeps_its_training_labels(graph, detector):
    """From an audit: one new node appended to the fitted graph made it 'another graph', whose
    label-trick columns were zeroed without a warning (ET's test AUROC fell from 1.0 to 0.70,
    GBT's to 0.5). The fitted nodes keep their ids, so their known labels still apply; the
    new nodes have none; a graph that drops a fitted edge is another graph and warns."""
    import warnings

    from et_graph.detectors import GBTDetector

    det = (ETDetector(label_trick=True, epochs=2, hidden=16) if detector == "et"
           else GBTDetector(label_trick=True, max_iter=10)).fit(graph)
    fitted = det.label_columns(graph)
    known = int(graph.train_mask.nonzero()[0])  # a training node links to the new node 240
    # (seeded: from the global stream, about a third of the draws moved the median past the
    # bound below, so the test passed or failed by what ran before it: a test-isolation audit)
    new_features = torch.randn(2, graph.x.size(1), generator=torch.Generator().manual_seed(1))
    grown = Data(x=torch.cat([graph.x, new_features]),
                 edge_index=torch.cat([graph.edge_index,
                                       torch.tensor([[240, known, 241], [3, 240, 5]])], dim=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        columns = det.label_columns(grown)
        scores = det.decision_function(grown)
    new_edge_rows = {3, 5, 240}  # their in-neighbours changed
    old = [n for n in range(240) if n not in new_edge_rows]
    assert torch.equal(columns[old], fitted[old]) and columns[240:, :2].sum() > 0
    # the old nodes' scores stay close (those near the new edges move a little: the model
    # reads more than one hop); with their labels zeroed they moved by up to 0.56
    change = (scores[:240] - det.decision_function(graph)).abs()
    assert float(change.median()) < 1e-5 and float(change.max()) < 0.1, float(change.max())
    shrunk = Data(x=grown.x, edge_index=grown.edge_index[:, 5:])  # fitted edges dropped
    with pytest.warns(DataWarning, match="does not keep its edges"):
        assert not det.label_columns(shrunk).any()


def assert_resumes_exactly(graph, folder, **options):
    """A run stopped after epoch 1 and resumed from its checkpoint equals an uninterrupted one:
    the same losses and the same scores (so every random draw was replayed)."""
    class Stop(Exception):
        pass

    def detector(resume=None):
        det = ETDetector(epochs=4, hidden=16, **options)
        if resume is not None:
            det.checkpoint = CheckpointConfig(str(folder / "ck"), 1, resume)
        return det

    full = detector().fit(graph)
    cut = detector(False)

    def stop(epoch, _):
        if epoch == 1:
            raise Stop

    cut.on_epoch = stop
    with pytest.raises(Stop):
        cut.fit(graph)
    resumed = detector(True).fit(graph)
    assert resumed.fit_info_["epochs_run"] == 4
    assert [r["train_loss"] for r in resumed.history_] == [r["train_loss"] for r in full.history_]
    assert torch.equal(resumed.decision_score_, full.decision_score_)


def test_label_trick_run_resumes_exactly(graph, tmp_path):
    assert_resumes_exactly(graph, tmp_path, label_trick=True)


# ----------------------------------------------------------------------------------------------
# 5. Stacked blocks (deeper ET)
# ----------------------------------------------------------------------------------------------
def test_one_block_network_keeps_its_state_dict_keys():
    keys = set(ETAnomalyNet(6, 8).state_dict())
    assert not any(key.startswith("stacked") for key in keys)
    assert {"conv.energy_fn.w_k", "conv.energy_fn.xi"} <= keys
    two = ETAnomalyNet(6, 8, blocks=2)
    assert {key.replace("stacked.0.", "conv.") for key in two.state_dict()} == keys
    assert two.convs[0] is two.conv and two.last_conv is two.stacked[0]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="blocks"):
            ETAnomalyNet(6, 8, blocks=bad)
    with pytest.raises(ValueError, match="blocks"):
        ETModelConfig(blocks=0)


def test_stacked_blocks_chain_and_read_out_the_last_block():
    torch.manual_seed(0)
    data = planted_anomaly_graph(50, num_features=6, seed=4)
    model = ETAnomalyNet(6, 8, steps=2, blocks=3, readout="ego_neighbour").eval()
    blocks = model.convs
    assert len(blocks) == 3
    assert not torch.equal(blocks[0].energy_fn.w_k, blocks[1].energy_fn.w_k)
    with torch.no_grad():  # distinct LayerNorms, so that reading out the wrong one shows
        for i, conv in enumerate(blocks):
            conv.norm.set_gamma(1.0 + 0.5 * i)
            conv.norm.delta.fill_(0.1 * i)
    first = model.embed(data.x)
    tokens, traces = first, []
    for conv in blocks:
        tokens, trace = conv(tokens, data.edge_index, return_energy=True)
        traces.append(trace)
    logits, energies = model(data.x, data.edge_index, return_energy=True)
    assert energies.shape == (3, 3) and torch.equal(energies, torch.stack(traces))
    # LN(x^1) through the first block's LayerNorm, LN(x^T) through the last's.
    normed = blocks[-1].norm(tokens)
    expected = model.readout(torch.cat(
        [blocks[0].norm(first), normed, model.neighbour_means(data.edge_index, normed)], -1))
    assert torch.allclose(logits, expected.squeeze(-1), atol=1e-6)
    # The energy score is the last block's energy at x^T.
    assert torch.allclose(model.energy_score(data.x, data.edge_index),
                          blocks[-1].node_energy(tokens, data.edge_index), atol=1e-6)
    # Bounded-memory scoring chains the blocks the same way.
    with torch.no_grad():
        chunked = model(data.x, data.edge_index, chunk_size=7)
    assert torch.allclose(chunked, logits, atol=1e-5)
    # Selected blocks only: the first two, then the last one, make the whole descent.
    middle = model.descend(first, data.edge_index, blocks=slice(0, -1))
    assert torch.allclose(model.descend(middle, data.edge_index, blocks=slice(-1, None)), tokens,
                          atol=1e-6)
    with pytest.raises(ValueError, match="selects no block"):
        model.descend(first, data.edge_index, return_energy=True, blocks=slice(0, 0))


def test_detector_with_stacked_blocks_fits_and_traces_the_last_block(graph):
    from et_graph.protocols.anomaly import energy_trajectory

    det = ETDetector(blocks=2, steps=1, epochs=2, hidden=16).fit(graph)
    assert len(det.model_.convs) == 2 and det.decision_function(graph).shape == (240,)
    split = make_splits(graph, "paper", 1, 0.4, split_seed=0)[0]
    trace = energy_trajectory(det, graph, split, extra_steps=2)
    assert len(trace["all"]) == 1 + 1 + 2 and trace["trained_steps"] == [1.0]
    assert parse(AnomalyConfig, ["--blocks", "2"]).et.blocks == 2


# ----------------------------------------------------------------------------------------------
# 6. Class-balanced sampling
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("label_trick", [False, True])
def test_class_balanced_sampling_draws_equal_classes_each_epoch(graph, label_trick):
    config = ETDetector(class_balance="sample").config.train
    task = NodeAnomalyTask(graph, graph.y, graph.train_mask, graph.val_mask, config,
                           torch.Generator().manual_seed(0), False, torch.device("cpu"),
                           label_trick=label_trick)
    train = set(graph.train_mask.nonzero().view(-1).tolist())
    anomalous = {n for n in train if int(graph.y[n]) == 1}
    draws = []
    for epoch in range(3):
        _, _, _, targets = next(iter(task.batches(epoch)))
        labels = graph.y[targets]
        assert int(labels.sum()) == int((labels == 0).sum()) > 0
        assert set(targets.tolist()) <= train and torch.equal(targets, targets.sort().values)
        if not label_trick:  # every training anomaly, each epoch
            assert {n for n in targets.tolist() if int(graph.y[n]) == 1} == anomalous
        draws.append(set(targets.tolist()))
    assert draws[0] != draws[1]  # a fresh draw of the normal nodes each epoch
    # Balanced batches carry an unweighted loss; validation still reports the weighted one.
    assert task.train_pos_weight == 1.0 and task.pos_weight > 1.0
    weighted = NodeAnomalyTask(graph, graph.y, graph.train_mask, graph.val_mask,
                               ETDetector().config.train, torch.Generator().manual_seed(0),
                               False, torch.device("cpu"))
    assert weighted.train_pos_weight == weighted.pos_weight
    assert torch.equal(next(iter(weighted.batches(0)))[3], graph.train_mask.nonzero().view(-1))
    with pytest.raises(ValueError, match="class_balance"):
        ETDetector(class_balance="oversample")


def test_unweighted_loss_trains_on_every_training_node(graph):
    """``class_balance="none"``: every training node each epoch (no draw), an unweighted
    training loss; validation keeps the weighted loss, comparable across runs."""
    config = ETDetector(class_balance="none").config.train
    task = NodeAnomalyTask(graph, graph.y, graph.train_mask, graph.val_mask, config,
                           torch.Generator().manual_seed(0), False, torch.device("cpu"))
    assert task.train_pos_weight == 1.0 and task.pos_weight > 1.0
    for epoch in range(2):
        assert torch.equal(next(iter(task.batches(epoch)))[3],
                           graph.train_mask.nonzero().view(-1))
    assert parse(AnomalyConfig, ["--class-balance", "none"]).train.class_balance == "none"


def test_class_balanced_training_fits_and_resumes_exactly(graph, tmp_path):
    assert_resumes_exactly(graph, tmp_path, class_balance="sample")
    assert parse(AnomalyConfig, ["--class-balance", "sample"]).train.class_balance == "sample"



def test_auc_square_loss_is_the_mean_over_every_pair_and_enters_training(graph):
    from et_graph.nn.models import auc_square_loss

    torch.manual_seed(0)
    logits = torch.randn(30, dtype=torch.float64, requires_grad=True)
    target = (torch.rand(30) < 0.3).long()
    prob = torch.sigmoid(logits)
    pairs = (1.0 - (prob[target == 1][:, None] - prob[target == 0][None, :])) ** 2
    fast = auc_square_loss(logits, target)
    assert torch.allclose(fast, pairs.mean(), rtol=1e-12, atol=1e-14)
    assert torch.allclose(torch.autograd.grad(fast, logits)[0],
                          torch.autograd.grad(pairs.mean(), logits)[0], rtol=1e-10, atol=1e-14)
    one_class = auc_square_loss(logits, torch.zeros(30, dtype=torch.long))
    assert one_class.item() == 0.0 and one_class.requires_grad
    # In the detector's training loss: cross-entropy plus the weighted surrogate
    config = ETDetector(auc_loss_weight=2.0, epochs=1).config.train
    task = NodeAnomalyTask(graph, graph.y, graph.train_mask, graph.val_mask, config,
                           torch.Generator().manual_seed(0), False, torch.device("cpu"))
    model = ETAnomalyNet(graph.num_features, 8, heads=1, head_dim=4)
    batch = next(iter(task.batches(0)))
    logits = model(batch[0], batch[1])[batch[3]]
    target = graph.y[batch[3]]
    expected = (weighted_bce_loss(logits, target, task.train_pos_weight)
                + 2.0 * auc_square_loss(logits, target))
    assert torch.allclose(task.loss(model, batch), expected)
    assert parse(AnomalyConfig, ["--auc-loss-weight", "0.5"]).train.auc_loss_weight == 0.5
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="auc_loss_weight"):
            ETDetector(auc_loss_weight=bad)

# ----------------------------------------------------------------------------------------------
# The label trick for the trees (the same input ET reads)
# ----------------------------------------------------------------------------------------------
def label_homophilous_graph(num_nodes: int = 400, seed: int = 0) -> Data:
    """Anomalies link mostly to anomalies; the features carry almost nothing."""
    generator = torch.Generator().manual_seed(seed)
    y = (torch.rand(num_nodes, generator=generator) < 0.2).long()
    src = torch.randint(0, num_nodes, (num_nodes * 8,), generator=generator)
    dst = torch.randint(0, num_nodes, (num_nodes * 8,), generator=generator)
    keep = (y[src] == y[dst]) | (torch.rand(src.numel(), generator=generator) < 0.1)
    edge_index = torch.cat([torch.stack([src[keep], dst[keep]]),
                            torch.stack([dst[keep], src[keep]])], dim=1)
    x = torch.randn(num_nodes, 4, generator=generator) + 0.05 * y.unsqueeze(-1)
    order = torch.randperm(num_nodes, generator=generator)
    masks = [torch.zeros(num_nodes, dtype=torch.bool) for _ in range(3)]
    for mask, part in zip(masks, (order[:160], order[160:240], order[240:])):
        mask[part] = True
    return Data(x=x, edge_index=edge_index, y=y, train_mask=masks[0], val_mask=masks[1],
                test_mask=masks[2])


def test_gbt_label_trick_reads_every_training_label_and_never_a_rows_own():
    from et_graph.detectors import GBTDetector

    data = label_homophilous_graph()
    det = GBTDetector(label_trick=True, features="x", max_iter=20, seed=3)
    features = det._with_label_columns(data.x.numpy(), data, data.y, data.train_mask)
    every = neighbour_label_features(data.edge_index, known_labels(data.y, data.train_mask))
    assert torch.equal(torch.from_numpy(features[:, 4:]), every)
    # A training node's own label (with a self-loop added) changes its neighbours' rows only.
    node = int(data.train_mask.nonzero()[0])
    looped = data.clone()
    looped.edge_index = torch.cat([data.edge_index, torch.tensor([[node], [node]])], dim=1)
    flipped = looped.clone()
    flipped.y = looped.y.clone()
    flipped.y[node] = 1 - flipped.y[node]
    a = det._with_label_columns(looped.x.numpy(), looped, looped.y, looped.train_mask)
    b = det._with_label_columns(flipped.x.numpy(), flipped, flipped.y, flipped.train_mask)
    changed = set((a != b).any(axis=1).nonzero()[0].tolist())
    src, dst = data.edge_index
    assert node not in changed and changed == set(dst[src == node].tolist()) - {node}
    # The neighbours' labels are the signal here: the trick lifts validation AUROC.
    plain = GBTDetector(features="x", max_iter=20, seed=3).fit(data)
    tricked = GBTDetector(label_trick=True, features="x", max_iter=20, seed=3).fit(data)
    assert tricked.fit_info_["val_auroc"] > plain.fit_info_["val_auroc"] + 0.1


def test_gbt_label_trick_never_reads_validation_or_test_labels(tmp_path):
    from et_graph.detectors import GBTDetector

    data = label_homophilous_graph()
    scrambled = data.clone()
    scrambled.y = data.y.clone()
    hidden = ~data.train_mask
    scrambled.y[hidden] = 1 - scrambled.y[hidden]
    a = GBTDetector(label_trick=True, features="x_mean", max_iter=20, seed=1).fit(data)
    b = GBTDetector(label_trick=True, features="x_mean", max_iter=20, seed=1).fit(scrambled)
    assert torch.equal(a.decision_function(data), b.decision_function(scrambled))
    # Saved and loaded, it scores the fitted graph with its training labels, bit for bit.
    a.save(tmp_path / "gbt.pt")
    assert torch.equal(GBTDetector.load(tmp_path / "gbt.pt").decision_function(data),
                       a.decision_function(data))
    # Another graph: no label known there, so the columns are zero (a same-size graph warns).
    other = data.clone()
    other.edge_index = data.edge_index.flip(1)[:, ::2]
    with pytest.warns(DataWarning, match="scored as another graph"):
        zero = a.decision_function(other)
    assert zero.shape == (400,) and not torch.equal(zero, a.decision_function(data))


def test_gbt_label_trick_has_its_own_flag_beside_ets():
    flags = parse(AnomalyConfig, ["--gbt-label-trick"])
    assert flags.gbt.label_trick is True and flags.et.label_trick is False
    flags = parse(AnomalyConfig, ["--label-trick"])
    assert flags.gbt.label_trick is False and flags.et.label_trick is True
