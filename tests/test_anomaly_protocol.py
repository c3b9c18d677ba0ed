"""Anomaly protocol: splits, threshold selection on validation only, metrics, checkpointing."""
import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import ETDetector
from et_graph.protocols.anomaly import (
    THRESHOLD_GRID,
    Split,
    choose_threshold,
    class_weight,
    evaluate_scores,
    macro_f1,
    make_splits,
    mask_splits,
    recall_at_k,
    scores_to_unit,
    stratified_split,
)

pytestmark = pytest.mark.usefixtures("one_thread")



def labels(n=1000, rate=0.2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(n, generator=gen) < rate).long()


@pytest.mark.parametrize("ratio", [0.01, 0.4])
def test_split_disjoint_covering_stratified_and_sized(ratio):
    y = labels(3000)
    split = stratified_split(y, ratio, seed=2)
    train, val, test = (set(part.tolist()) for part in (split.train, split.val, split.test))
    assert not train & val and not train & test and not val & test
    assert train | val | test == set(range(3000))
    assert abs(len(train) - ratio * 3000) <= 1
    assert abs(len(val) / (len(val) + len(test)) - 1 / 3) < 0.01
    rate = y.float().mean().item()
    for part in (split.val, split.test):
        assert abs(y[part].float().mean().item() - rate) < 0.01
    if ratio == 0.4:
        assert abs(y[split.train].float().mean().item() - rate) < 0.01
    else:
        assert 0 < int(y[split.train].sum()) < split.train.numel()


def test_split_is_fixed_by_seed_and_changes_with_it():
    y = labels(500)
    a, b, c = (stratified_split(y, 0.4, seed) for seed in (2, 2, 3))
    assert torch.equal(a.train, b.train) and torch.equal(a.test, b.test)
    assert not torch.equal(a.train, c.train)


def test_split_respects_eligible_nodes():
    y = labels(800)
    eligible = torch.ones(800, dtype=torch.bool)
    eligible[:300] = False
    split = stratified_split(y, 0.4, 0, eligible=eligible)
    used = torch.cat([split.train, split.val, split.test])
    assert used.min() >= 300 and used.numel() == 500


def test_split_rejects_bad_input():
    with pytest.raises(ValueError, match="binary"):
        stratified_split(torch.tensor([0, 1, 2] * 10), 0.4, 0)
    with pytest.raises(ValueError, match="train_ratio"):
        stratified_split(labels(), 1.5, 0)
    with pytest.raises(ValueError, match="at least 3"):
        stratified_split(torch.tensor([0] * 20 + [1]), 0.4, 0)
    # the counts found are named (an audit: a mis-coded label column said only "at least 3")
    with pytest.raises(ValueError, match="found 20 normal and 0 anomalous"):
        stratified_split(torch.tensor([0] * 20), 0.4, 0)
    with pytest.raises(ValueError, match="no labelled"):
        stratified_split(torch.tensor([], dtype=torch.long), 0.4, 0)


def test_make_splits_paper_and_gadbench():
    data = planted_anomaly_graph(200)
    same = make_splits(data, "paper", 3, 0.4, split_seed=2)
    assert all(torch.equal(s.train, same[0].train) for s in same)
    varied = make_splits(data, "paper", 2, 0.4, split_seed=2, vary_split=True)
    assert not torch.equal(varied[0].train, varied[1].train)
    with pytest.raises(ValueError, match="masks"):
        make_splits(data, "gadbench", 2)
    masks = torch.zeros(200, 2, dtype=torch.bool)
    data.train_mask, data.val_mask, data.test_mask = masks.clone(), masks.clone(), masks.clone()
    data.train_mask[:100, 0] = data.val_mask[100:150, 0] = data.test_mask[150:, 0] = True
    data.train_mask[100:, 1] = data.val_mask[:50, 1] = data.test_mask[50:100, 1] = True
    splits = make_splits(data, "gadbench", 2)
    assert torch.equal(splits[0].train, torch.arange(100))
    assert torch.equal(splits[1].test, torch.arange(50, 100))
    assert len(mask_splits(data)) == 2
    # From a fraud-data audit: seed 2 reused column 0, and the paired differences counted the
    # two scorings of one split as independent folds.
    with pytest.raises(ValueError, match="2 split columns, and 3 seeds would score"):
        make_splits(data, "gadbench", 3)
    one = data.clone()
    one.train_mask, one.val_mask, one.test_mask = (m[:, :1] for m in (
        data.train_mask, data.val_mask, data.test_mask))
    reused = make_splits(one, "gadbench", 3)
    assert all(split.same_as(reused[0]) for split in reused)
    # ... and masks reaching past label_mask trained and scored unlabelled nodes as normal.
    data.label_mask = torch.ones(200, dtype=torch.bool)
    data.label_mask[::40] = False
    with pytest.raises(ValueError, match="train_mask \\(column 0\\) holds 3 nodes that its "
                                         "label_mask marks unlabelled"):
        mask_splits(data)
    with pytest.raises(ValueError, match="protocol"):
        make_splits(data, "random", 1)


def test_macro_f1_matches_sklearn():
    rng = np.random.default_rng(0)
    for _ in range(15):
        y = rng.integers(0, 2, 40)
        y[:2] = (0, 1)
        prob = rng.random(40)
        for t in (0.05, 0.5, 0.95):
            expected = f1_score(y, (prob >= t).astype(int), average="macro", zero_division=0)
            assert macro_f1(y, prob, t) == pytest.approx(expected)


def test_threshold_grid_is_19_values():
    assert len(THRESHOLD_GRID) == 19
    assert THRESHOLD_GRID[0] == 0.05 and THRESHOLD_GRID[-1] == 0.95


def test_threshold_chosen_on_validation_not_test():
    # Validation anomalies score ~0.3, test anomalies ~0.8: the best validation threshold (0.25
    # .. 0.3) is far from the best test threshold, and test labels must not move it.
    y = np.array([0] * 50 + [1] * 10 + [0] * 50 + [1] * 10)
    score = np.concatenate([
        np.full(50, 0.1), np.full(10, 0.3), np.full(50, 0.6), np.full(10, 0.8)
    ])
    split = Split(torch.arange(0), torch.arange(60), torch.arange(60, 120))
    metrics, threshold, _ = evaluate_scores(y, score, split)
    assert 0.1 < threshold <= 0.3
    assert choose_threshold(y[60:], score[60:])[0] > 0.6
    assert metrics["f1_macro"] < 0.5  # the validation threshold is applied unchanged to test
    flipped = y.copy()
    flipped[60:] = 1 - flipped[60:]
    assert evaluate_scores(flipped, score, split)[1] == threshold


def test_recall_at_k_and_calibration():
    y = np.array([0, 1, 0, 1, 0])
    assert recall_at_k(y, np.array([0.1, 0.9, 0.2, 0.8, 0.3])) == 1.0
    assert recall_at_k(y, np.array([0.9, 0.1, 0.8, 0.2, 0.3])) == 0.0
    assert recall_at_k(y, np.array([0.9, 0.8, 0.1, 0.2, 0.3])) == 0.5
    unit = scores_to_unit(np.array([-5.0, 0.0, 5.0, 100.0]), np.array([-1.0, 1.0, 3.0, 4.0]))
    assert unit.tolist() == [0.0, 0.25, 1.0, 1.0]


def test_calibrated_scores_keep_their_own_ranking_for_auroc():
    """The energy row maps a score to validation quantiles for its threshold; the ties that
    creates (every test node between two validation values) once entered AUROC and AUPRC."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.2).astype(int)
    y[:4] = [0, 1, 0, 1]
    score = rng.normal(size=400) + y  # distinct values, informative
    split = Split(torch.arange(0, 8), torch.arange(8, 20), torch.arange(20, 400))  # 12 val nodes
    metrics, _, prob = evaluate_scores(y, score, split, calibrate=True)
    test = split.test.numpy()
    assert len(np.unique(prob[test])) < len(np.unique(score[test]))  # the calibration ties
    assert metrics["auroc"] == roc_auc_score(y[test], score[test])
    assert metrics["auprc"] == average_precision_score(y[test], score[test])


def test_class_weight_is_normal_over_anomalous():
    assert class_weight(torch.tensor([0, 0, 0, 1])) == 3.0
    with pytest.raises(ValueError, match="no anomalous"):
        class_weight(torch.tensor([0, 0]))


def test_selection_never_sees_test_labels():
    """Scrambling the test labels must leave the chosen epoch, threshold and scores alone."""
    data = planted_anomaly_graph(300, seed=1)
    split = make_splits(data, "paper", 1, 0.4, split_seed=0)[0]
    train_mask, val_mask, _ = split.masks(300)
    scrambled = data.clone()
    scrambled.y = data.y.clone()
    scrambled.y[split.test] = 1 - scrambled.y[split.test]
    runs = []
    for graph in (data, scrambled):
        det = ETDetector(epochs=8, hidden=16, heads=2, head_dim=8)
        runs.append(det.fit(graph, train_mask, val_mask))
    assert runs[0].fit_info_["best_epoch"] == runs[1].fit_info_["best_epoch"]
    assert runs[0].threshold_ == runs[1].threshold_
    assert torch.equal(runs[0].decision_score_, runs[1].decision_score_)
    test = split.test.numpy()
    score = runs[0].decision_score_.numpy()[test]
    assert evaluate_scores(data.y.numpy(), runs[0].decision_score_.numpy(), split)[0][
        "auroc"] != evaluate_scores(scrambled.y.numpy(), runs[1].decision_score_.numpy(),
                                    split)[0]["auroc"]
    assert score.shape == (test.size,)


def test_split_masks_match_the_indices():
    split = Split(torch.tensor([0, 2]), torch.tensor([1]), torch.tensor([3, 4]))
    train, val, test = split.masks(5)
    assert train.tolist() == [True, False, True, False, False]
    assert val.tolist() == [False, True, False, False, False]
    assert test.tolist() == [False, False, False, True, True]


def test_a_split_without_both_classes_is_refused_with_the_flag_to_change():
    """A train ratio too small for the anomaly rate drew 6 training nodes and no anomaly (the
    comment promised one of each), and a shipped test mask without anomalies ran to 'n/a'."""
    y = torch.zeros(300, dtype=torch.long)
    y[:9] = 1  # 3% anomalies
    with pytest.raises(ValueError, match=r"training split holds 6 normal and 0 anomalous.*"
                                         r"--train-ratio"):
        stratified_split(y, 0.02, seed=0)
    from torch_geometric.data import Data

    data = Data(y=y, num_nodes=300)
    data.train_mask = torch.zeros(300, dtype=torch.bool)
    data.val_mask, data.test_mask = data.train_mask.clone(), data.train_mask.clone()
    data.train_mask[[0, 1, 20, 21]] = True
    data.val_mask[[2, 3, 22, 23]] = True
    data.test_mask[30:60] = True  # normal nodes only
    with pytest.raises(ValueError, match="test split holds 30 normal and 0 anomalous.*column 0"):
        make_splits(data, "gadbench", 1)


def test_protocol_config_refuses_what_a_run_would_not_use():
    from et_graph.protocols.anomaly_config import AnomalyProtocolConfig

    for bad, message in (({"seeds": 0}, "seeds"), ({"seeds": -1}, "seeds"),
                         ({"train_ratio": 40}, "train_ratio"),
                         ({"protocol": "gadbench", "vary_split": True}, "vary_split"),
                         ({"models": "et,nope"}, "unknown models")):
        with pytest.raises(ValueError, match=message):
            AnomalyProtocolConfig(**bad)
    # a model named twice runs once (its seeds were listed twice)
    assert AnomalyProtocolConfig(models="mlp,MLP,et").model_names() == ["mlp", "et"]


def test_stratified_split_reads_only_eligible_labels_and_masks_know_their_graph():
    """-1 labels outside `eligible` were refused as non-binary; masks(30) of a 40-node split
    raised a raw IndexError and masks(100) returned 100-long masks, silently."""
    from et_graph.protocols.anomaly import stratified_split

    y = torch.tensor([0, 1] * 15 + [-1] * 10)
    eligible = y >= 0
    split = stratified_split(y, 0.4, seed=0, eligible=eligible)
    plain = stratified_split(y.clamp_min(0), 0.4, seed=0, eligible=eligible)
    for part in ("train", "val", "test"):
        assert torch.equal(getattr(split, part), getattr(plain, part))
        assert bool(eligible[getattr(split, part)].all())
    train, val, test = split.masks()
    assert train.shape == (40,) and not bool((train & val).any())
    for wrong in (30, 100):
        with pytest.raises(ValueError, match="40 nodes"):
            split.masks(wrong)
    with pytest.raises(ValueError, match="binary"):
        stratified_split(y, 0.4, seed=0)  # without eligible, every label is read


def test_split_errors_point_train_ratio_the_right_way():
    """A validation or test part short of a class needs a smaller train_ratio; the hint said
    "raise train_ratio" for every part, and scikit-learn's own error came through raw."""
    from et_graph.protocols.anomaly import Split, check_split, make_splits

    data = planted_anomaly_graph(40, seed=2)
    data.y[:] = 0
    data.y[:6] = 1
    with pytest.raises(ValueError, match="too few nodes to stratify .* lower train_ratio"):
        make_splits(data, "paper", 1, 0.9, 0)
    labels = np.array([1, 0, 1, 0, 0, 0])
    hint = "train_ratio 0.9: {direction} train_ratio (--train-ratio)"
    no_val_anomaly = Split(torch.tensor([0, 1]), torch.tensor([3, 4]), torch.tensor([2, 5]),
                           num_nodes=6)
    with pytest.raises(ValueError, match="validation split .* lower train_ratio"):
        check_split(no_val_anomaly, labels, hint)
    no_train_anomaly = Split(torch.tensor([1, 3]), torch.tensor([0, 4]), torch.tensor([2, 5]),
                             num_nodes=6)
    with pytest.raises(ValueError, match="training split .* raise train_ratio"):
        check_split(no_train_anomaly, labels, hint)


def test_ties_choose_the_smallest_threshold():
    # every grid value in (0.2, 0.8] separates these perfectly: the smallest is the promise
    assert choose_threshold(np.array([0, 1]), np.array([0.2, 0.8]))[0] == 0.25


def test_the_energy_rows_sign_and_threshold_read_validation_labels_alone():
    # (from a mutation audit) the sign could be chosen on test AUROC and nothing failed
    from et_graph.protocols.anomaly import energy_row

    data = planted_anomaly_graph(300, seed=1)
    split = make_splits(data, "paper", 1, 0.4, split_seed=0)[0]
    train_mask, val_mask, _ = split.masks(300)
    det = ETDetector(epochs=3, hidden=16, heads=2, head_dim=8).fit(data, train_mask, val_mask)
    flipped = data.clone()
    flipped.y = data.y.clone()
    flipped.y[split.test] = 1 - flipped.y[split.test]
    rows = [energy_row(det, graph, split) for graph in (data, flipped)]
    assert rows[0][2] == rows[1][2]  # sign and threshold quantile
    assert np.array_equal(rows[0][1], rows[1][1])
    assert rows[0][0]["auroc"] != rows[1][0]["auroc"]  # the test labels do enter the metrics


# From a mutation audit: each of these mutants of the protocol passed the whole suite (Rec@K
# counting K+1 nodes; the ECDF's other side; the Nadeau-Bengio ratio inverted; a one-class
# split raising) or was caught only end to end (the seed ensemble's threshold read on test).

def test_recall_at_k_counts_exactly_k_nodes():
    from et_graph.protocols.anomaly import recall_at_k

    y, score = np.array([1, 0, 1, 0]), np.array([0.9, 0.8, 0.7, 0.1])
    assert recall_at_k(y, score) == 0.5  # K = the number of anomalies, 2
    assert recall_at_k(y, score, k=3) == 1.0


def test_recall_at_k_does_not_read_the_node_order_of_ties():
    """(an unsupervised audit) a stable sort took tied nodes in id order: a constant score
    recalled every anomaly numbered first (1.0) and none numbered last (0.0)."""
    first, last = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0]), np.array([0] * 8 + [1, 1])
    constant = np.zeros(10)
    assert recall_at_k(first, constant) == recall_at_k(last, constant) == 0.2  # K/N
    # a tie across the K-th place: one anomaly above it, one place shared by three nodes
    y, score = np.array([1, 0, 1, 0, 0]), np.array([0.9, 0.5, 0.5, 0.5, 0.1])
    assert recall_at_k(y, score) == (1 + 1 / 3) / 2
    assert recall_at_k(y, np.array([0.9, 0.1, 0.8, 0.5, 0.2])) == 1.0  # no ties: as before


def test_scores_to_unit_is_the_validation_ecdf():
    from et_graph.protocols.anomaly import scores_to_unit

    np.testing.assert_allclose(
        scores_to_unit(np.array([0.5, 1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])),
        [0.0, 1 / 3, 2 / 3, 1.0])


def test_varying_splits_are_corrected_by_scored_over_training_nodes():
    from et_graph.protocols.anomaly import Split, et_differences

    def split(offset):
        return Split(torch.arange(offset, offset + 10), torch.arange(offset + 10, offset + 30),
                     torch.arange(offset + 30, offset + 60), num_nodes=100)

    models = {"et": {"auroc": {"values": [0.80, 0.82, 0.85]},
                     "auprc": {"values": [0.30, 0.31, 0.36]}},
              "gcn": {"auroc": {"values": [0.70, 0.75, 0.71]},
                      "auprc": {"values": [0.20, 0.22, 0.21]}}}
    differences, _ = et_differences(models, [split(0), split(10), split(0)], "test",
                                    one_split=False)
    # 30 scored nodes over 10 training nodes (the inverse made the intervals far too narrow)
    assert differences and all(d.test_train_ratio == pytest.approx(3.0) for d in differences)


def test_one_class_gives_nan_rank_metrics():
    import math

    from et_graph.protocols.anomaly import evaluate

    out = evaluate(np.ones(4), np.array([0.1, 0.2, 0.3, 0.4]), 0.5)
    assert math.isnan(out["auroc"]) and math.isnan(out["auprc"])


def test_the_seed_ensemble_threshold_never_reads_test_labels():
    from et_graph.protocols.anomaly import Split, seed_ensemble

    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.2).astype(int)
    scores = [np.clip(y * 0.3 + rng.random(200), 0, 1) for _ in range(3)]
    split = Split(torch.arange(0, 80), torch.arange(80, 140), torch.arange(140, 200),
                  num_nodes=200)
    metrics, threshold, val_auroc = seed_ensemble(y, scores, split)
    flipped = y.copy()
    flipped[140:] = 1 - flipped[140:]
    again, threshold_again, val_again = seed_ensemble(flipped, scores, split)
    assert (threshold_again, val_again) == (threshold, val_auroc)
    assert again["auroc"] == pytest.approx(1 - metrics["auroc"])  # test labels do score


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.bool, torch.float32])
def test_sealed_labels_mark_the_unread_nodes_minus_one_in_any_label_dtype(dtype):
    """What fit is handed: -1 outside the training and validation nodes (uint8 labels came back
    as 255, which a detector testing y >= 0 read as known: a review), the caller's y intact."""
    from torch_geometric.data import Data

    from et_graph.protocols.anomaly import sealed_labels

    y = torch.tensor([0, 1, 1, 0, 1]).to(dtype)
    data = Data(x=torch.zeros(5, 2), y=y.clone())
    train = torch.tensor([True, True, False, False, False])
    val = torch.tensor([False, False, True, False, False])
    sealed = sealed_labels(data, train, val)
    assert sealed.y.tolist() == [0, 1, 1, -1, -1] and torch.equal(data.y, y)


@pytest.mark.parametrize("form", ["bool", "float01", "column"])
def test_the_protocols_read_label_mask_in_the_forms_the_detectors_take(form):
    """label_mask as 0/1 numbers or [N, 1] (the forms the loaders and detectors accept): the
    dataset's masks were checked with ``~label_mask`` (a TypeError on floats) and the paper
    protocol's eligible nodes refused the [N, 1] column (a review of the twin checks)."""
    data = planted_anomaly_graph(200)
    labelled = torch.ones(200, dtype=torch.bool)
    labelled[::40] = False
    data.label_mask = {"bool": labelled, "float01": labelled.float(),
                       "column": labelled.view(-1, 1)}[form]
    split = make_splits(data, "paper", 1, 0.4, split_seed=2)[0]
    for part in (split.train, split.val, split.test):
        assert bool(labelled[part].all())
    masks = torch.zeros(200, 1, dtype=torch.bool)
    data.train_mask, data.val_mask, data.test_mask = masks.clone(), masks.clone(), masks.clone()
    data.train_mask[:100, 0] = data.val_mask[100:150, 0] = data.test_mask[150:, 0] = True
    with pytest.raises(ValueError, match="train_mask \\(column 0\\) holds 3 nodes that its "
                                         "label_mask marks unlabelled"):
        mask_splits(data)
    data.label_mask = torch.full((200,), 0.5)  # neither bool nor 0/1: refused, not rounded
    with pytest.raises(ValueError, match="label_mask must be a bool"):
        make_splits(data, "paper", 1, 0.4, split_seed=2)
    with pytest.raises(ValueError, match="label_mask must be a bool"):
        mask_splits(data)


def test_the_dataset_summary_reads_label_mask_as_the_protocols_do():
    from et_graph.datasets.anomaly_data import describe_anomaly_data

    data = planted_anomaly_graph(200)
    labelled = torch.ones(200, dtype=torch.bool)
    labelled[::40] = False
    data.label_mask = labelled.float().view(-1, 1)  # an [N, 1] column of 0/1 numbers
    assert describe_anomaly_data(data)["labelled_nodes"] == 195
