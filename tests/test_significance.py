"""Differences between two models with a confidence interval: the corrected resampled t-test
over shared folds and Welch's test over seeds, checked against SciPy, by hand and by
simulation; and the runners' difference tables."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from helpers import benchmark_module, record_arguments
from scipy import stats

from et_graph.protocols.significance import (
    Difference,
    compare_to,
    cv_test_train_ratio,
    describe_design,
    difference_section,
    difference_table,
    fold_difference,
    seed_difference,
)
from et_graph.reporting import summarize

ET = [0.80, 0.82, 0.79, 0.81, 0.83, 0.78, 0.84, 0.80, 0.81, 0.82]
GIN = [0.78, 0.80, 0.80, 0.79, 0.81, 0.79, 0.82, 0.79, 0.80, 0.80]


def test_the_uncorrected_fold_test_is_scipys_paired_t_test():
    d = fold_difference(ET, GIN, test_train_ratio=0.0, names=("et", "gin"), metric="accuracy")
    reference = stats.ttest_rel(ET, GIN)
    interval = reference.confidence_interval(0.95)
    assert d.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    assert (d.low, d.high) == pytest.approx((interval.low, interval.high), rel=1e-9)
    assert d.mean == pytest.approx(np.mean(ET) - np.mean(GIN))
    assert d.wins == (8, 0, 2) and d.n == 10 and d.design == "folds"
    assert type(d.low) is float and type(d.p_value) is float  # JSON-ready, not NumPy scalars


def test_the_corrected_fold_test_by_hand():
    """Nadeau and Bengio: variance (1/n + n_test/n_train) s^2, n - 1 degrees of freedom. For 10
    folds the interval is sqrt((1/10 + 1/9) / (1/10)) = 1.45 times the plain one."""
    differences = np.subtract(ET, GIN)
    ratio = cv_test_train_ratio(10)
    assert ratio == pytest.approx(1 / 9)
    from et_graph.protocols.significance import scored_parts_ratio

    assert scored_parts_ratio(10, 0.2, validation_only=False) == ratio  # the test folds
    assert scored_parts_ratio(10, 0.2, validation_only=True) == pytest.approx(0.25)  # inner val
    d = fold_difference(ET, GIN, test_train_ratio=ratio)
    standard_error = math.sqrt((0.1 + 1 / 9) * differences.var(ddof=1))
    half = stats.t.ppf(0.975, 9) * standard_error
    assert (d.low, d.high) == pytest.approx((differences.mean() - half,
                                             differences.mean() + half), rel=1e-9)
    assert d.p_value == pytest.approx(2 * stats.t.sf(differences.mean() / standard_error, 9))
    plain = fold_difference(ET, GIN, test_train_ratio=0.0)
    assert (d.high - d.low) / (plain.high - plain.low) == pytest.approx(
        math.sqrt((0.1 + 1 / 9) / 0.1))
    assert plain.significant and not d.significant  # the correction decides this example
    assert d.verdict() == "no significant difference"
    assert plain.verdict() == "first ahead"
    assert fold_difference(GIN, ET, test_train_ratio=0.0, names=("gin", "et")).verdict() == (
        "et ahead")


def test_the_correction_holds_its_coverage_where_the_plain_test_does_not():
    """Overlapping training sets make the fold differences correlated. With equicorrelated
    normal differences of correlation rho = r / (1 + r), the corrected statistic is exactly
    t-distributed, so its 95% interval covers the true difference 95% of the time; the plain
    paired interval covers far less."""
    rng = np.random.default_rng(0)
    folds, ratio, true_difference, repeats = 10, 1 / 9, 0.01, 4000
    rho = ratio / (1 + ratio)
    shared = rng.normal(size=(repeats, 1)) * math.sqrt(rho)
    own = rng.normal(size=(repeats, folds)) * math.sqrt(1 - rho)
    draws = true_difference + 0.02 * (shared + own)
    covered = {0.0: 0, ratio: 0}
    for row in draws:
        for r in covered:
            d = fold_difference(row, np.zeros(folds), test_train_ratio=r)
            covered[r] += d.low <= true_difference <= d.high
    assert 0.93 <= covered[ratio] / repeats <= 0.97
    assert covered[0.0] / repeats < 0.90


def test_the_seed_test_is_scipys_welch_test():
    a, b = [0.851, 0.848, 0.850, 0.849, 0.853], [0.844, 0.845, 0.845, 0.846, 0.845]
    d = seed_difference(a, b, names=("et", "gbt"), metric="auroc")
    reference = stats.ttest_ind(a, b, equal_var=False)
    interval = reference.confidence_interval(0.95)
    assert d.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    assert (d.low, d.high) == pytest.approx((interval.low, interval.high), rel=1e-9)
    assert d.significant and d.verdict() == "et ahead" and d.wins is None
    # a deterministic baseline (no spread): the interval is ET's alone, not an error
    lof = seed_difference(a, [0.84] * 3)
    assert lof.low < lof.mean < lof.high and lof.n == 3
    width = stats.t.ppf(0.975, 4) * np.std(a, ddof=1) / math.sqrt(5)
    assert lof.high - lof.mean == pytest.approx(width)


def test_scores_without_spread_fall_back_to_exact_tests():
    """No spread at all leaves the t procedure no noise to size. Equal scores are no
    difference (p 1); differing scores without spread get an exact test of the pattern: the
    sign test over paired folds (every fold one way: p = 2 / 2^n), the rank test over seeds
    (complete separation: p = 2 / C(n1 + n2, n1)). Two seeds of equal scores once read "ahead,
    p < 0.001" (a quick GNNBenchmark run, an audit); the rank test gives 0.33."""
    same = fold_difference([0.5, 0.6], [0.5, 0.6], test_train_ratio=0.1)
    assert (same.mean, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert not same.significant and same.wins == (0, 2, 0)
    two_seeds = seed_difference([0.7, 0.7], [0.6, 0.6])
    assert two_seeds.low == two_seeds.high == pytest.approx(0.1)
    assert two_seeds.p_value == pytest.approx(1 / 3) and not two_seeds.significant
    assert two_seeds.verdict() == "no significant difference"
    five_seeds = seed_difference([0.7] * 5, [0.6] * 5)
    assert five_seeds.p_value == pytest.approx(2 / 252) and five_seeds.significant
    assert five_seeds.p_value == pytest.approx(
        stats.mannwhitneyu([0.7] * 5, [0.6] * 5, method="exact").pvalue)
    two_folds = fold_difference([0.6, 0.7], [0.5, 0.6], test_train_ratio=1 / 9)
    assert two_folds.p_value == pytest.approx(0.5) and not two_folds.significant
    ten_folds = fold_difference([0.6] * 10, [0.5] * 10, test_train_ratio=1 / 9)
    assert ten_folds.p_value == pytest.approx(2 / 1024) and ten_folds.significant
    assert ten_folds.p_value == pytest.approx(
        stats.binomtest(10, 10, 0.5).pvalue)


@pytest.mark.parametrize("call, message", [
    (lambda: fold_difference([0.5, 0.6, 0.7], [0.5, 0.6], test_train_ratio=0.1),
     "as many scores"),
    (lambda: fold_difference([0.5], [0.5], test_train_ratio=0.1), "at least 2 scores"),
    (lambda: seed_difference([0.5, float("nan")], [0.5, 0.6]), "finite"),
    (lambda: fold_difference([0.5, 0.6], [0.5, 0.7], test_train_ratio=-1), "test_train_ratio"),
    (lambda: seed_difference([0.5, 0.6], [0.5, 0.7], confidence=95), "confidence"),
    (lambda: cv_test_train_ratio(1), "folds must be an integer >= 2"),
    (lambda: compare_to({"et": {}}, "et", ["auroc"], "splits"), "design"),
    (lambda: compare_to({"et": {}}, "et", ["auroc"], "folds"), "test_train_ratio"),
    (lambda: compare_to({"gin": {}}, "et", ["auroc"], "seeds"), "'et'"),
    (lambda: compare_to({"et": {}}, "et", ["auroc"], "seeds", others=["gbt"]), "'gbt'"),
])
def test_bad_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_compare_to_takes_reference_minus_each_model_and_skips_single_values():
    models = {"et": {"accuracy": summarize(ET), "ensemble_accuracy": summarize([0.8])},
              "gin": {"accuracy": summarize(GIN), "ensemble_accuracy": summarize([0.7])},
              "mlp": {"accuracy": summarize([v - 0.1 for v in ET])}}
    differences = compare_to(models, "et", ["accuracy", "ensemble_accuracy"], "folds",
                             test_train_ratio=cv_test_train_ratio(10))
    assert [(d.first, d.second, d.metric) for d in differences] == [
        ("et", "gin", "accuracy"), ("et", "mlp", "accuracy")]
    assert differences[1].mean == pytest.approx(0.1) and differences[1].wins == (10, 0, 0)
    table = difference_table(differences)
    assert "| et − gin | accuracy | +0.0120 |" in table
    assert "| folds ahead / level / behind |" in table and "| 8/0/2 |" in table
    assert "et ahead" in table and "no significant difference" in table
    record = json.loads(json.dumps(differences[0].as_dict()))
    assert Difference.from_dict(record) == differences[0]
    assert record["verdict"] == "no significant difference"
    section = difference_section({"differences": [record],
                                  "differences_design": describe_design("folds", 10, 1 / 9)})
    assert section.startswith("| difference |") and "corrected resampled t-test" in section
    assert difference_section({}) == ""
    seeds = compare_to(models, "et", ["accuracy"], "seeds")
    assert "folds ahead" not in difference_table(seeds)  # nothing pairs over seeds
    # an error metric (MAE): the lower mean is ahead, whatever the sign says for accuracy
    errors = compare_to(models, "et", ["accuracy"], "seeds", others=["mlp"],
                        higher_is_better=False)
    assert errors[0].mean > 0 and errors[0].verdict() == "mlp ahead"
    assert Difference.from_dict(errors[0].as_dict()) == errors[0]
    assert seeds[1].verdict() == "et ahead"


def _psi_components(labels, scores):
    """DeLong's components from the full comparison matrix (O(m n)), for the midrank check."""
    positives, negatives = scores[labels], scores[~labels]
    psi = (positives[:, None] > negatives[None, :]) + 0.5 * (
        positives[:, None] == negatives[None, :])
    return psi.mean(axis=1), psi.mean(axis=0)


def test_delong_components_by_midranks_match_the_comparison_matrix_with_ties():
    from sklearn.metrics import roc_auc_score

    from et_graph.protocols.significance import auroc_components, delong_variance

    rng = np.random.default_rng(1)
    labels = rng.random(200) < 0.25
    first = np.round(rng.normal(size=200) + labels, 1)  # rounded: many ties
    second = np.round(rng.normal(size=200) + 0.5 * labels, 1)
    auc, v10, v01 = auroc_components(labels, first)
    assert auc == pytest.approx(roc_auc_score(labels, first), abs=1e-12)
    brute10, brute01 = _psi_components(labels, first)
    np.testing.assert_allclose(v10, brute10, atol=1e-12)
    np.testing.assert_allclose(v01, brute01, atol=1e-12)
    difference, variance = delong_variance(labels, [first], [second])
    b10, b01 = _psi_components(labels, second)
    expected = (np.var(brute10 - b10, ddof=1) / labels.sum()
                + np.var(brute01 - b01, ddof=1) / (~labels).sum())
    assert variance == pytest.approx(expected, rel=1e-10)
    assert difference == pytest.approx(roc_auc_score(labels, first)
                                       - roc_auc_score(labels, second), abs=1e-12)


def test_node_difference_covers_a_zero_difference_and_adds_the_seeds_spread():
    """Two detectors of equal quality scored on fresh nodes: the 95% interval covers the true
    difference (0) about 95% of the time. Seeds with identical scores add nothing to DeLong's
    variance; seeds that disagree widen the interval."""
    from et_graph.protocols.significance import delong_variance, node_difference

    rng = np.random.default_rng(2)
    covered, repeats = 0, 400
    for _ in range(repeats):
        labels = rng.random(300) < 0.2
        shared = rng.normal(size=300)
        first = labels + shared + 0.8 * rng.normal(size=300)
        second = labels + shared + 0.8 * rng.normal(size=300)
        d = node_difference(labels, [first], [second])
        covered += d.low <= 0.0 <= d.high
    assert 0.92 <= covered / repeats <= 0.98
    one = node_difference(labels, [first], [second], names=("et", "gbt"))
    twice = node_difference(labels, [first, first], [second, second])
    assert (twice.low, twice.high) == pytest.approx((one.low, one.high))
    _, variance = delong_variance(labels, [first], [second])
    assert one.high - one.mean == pytest.approx(stats.norm.ppf(0.975) * math.sqrt(variance))
    moved = first + rng.normal(size=300)
    spread = node_difference(labels, [first, moved], [second, second])
    assert spread.high - spread.low > one.high - one.low
    # the seeds' part is estimated from two seeds: t with Welch-Satterthwaite's dof
    from et_graph.protocols.significance import auroc_components
    aucs = [auroc_components(labels, s)[0] for s in (first, moved)]
    share = np.var(aucs, ddof=1) / 2
    node_part = delong_variance(labels, [first, moved], [second, second])[1]
    dof = (node_part + share) ** 2 / share ** 2
    assert spread.high - spread.mean == pytest.approx(
        stats.t.ppf(0.975, dof) * math.sqrt(node_part + share))
    assert (one.design, one.metric, one.first, one.n) == ("nodes", "auroc", "et", 1)
    with pytest.raises(ValueError, match="same number of seeds"):
        node_difference(labels, [first], [second, second])
    with pytest.raises(ValueError, match="both classes"):
        node_difference(np.zeros(300, bool), [first], [second])


def test_a_difference_over_the_nodes_needs_two_of_each_class():
    # (statistics audit) with one anomaly DeLong's variance of its side was taken as 0: one
    # node gave "+0.51 [+0.37, +0.65], p 5e-13, first ahead"; the bootstrap redrew it every time
    from sklearn.metrics import average_precision_score

    from et_graph.protocols.significance import (
        bootstrap_node_difference,
        compare_nodes,
        node_difference,
    )

    labels = np.zeros(51, dtype=bool)
    labels[0] = True
    rng = np.random.default_rng(0)
    first = [np.r_[5.0, rng.normal(size=50)]]
    second = [np.r_[0.0, rng.normal(size=50)]]
    with pytest.raises(ValueError, match="at least 2 scored nodes of each class, got 1"):
        node_difference(labels, first, second)
    with pytest.raises(ValueError, match="at least 2 scored nodes of each class"):
        bootstrap_node_difference(labels, first, second, average_precision_score, rounds=100)
    assert compare_nodes(labels, {"a": first, "b": second}, "a", ["b"]) == []
    labels[1] = True  # two anomalies: a difference with a variance, said to under-cover
    with pytest.warns(RuntimeWarning, match="rest on 2 scored nodes of one class"):
        assert len(compare_nodes(labels, {"a": first, "b": second}, "a", ["b"])) == 1


def test_a_printed_row_never_contradicts_its_verdict_by_rounding():
    # (statistics audit) "[+0.0000, +0.0415] | 0.050 | first ahead" (p 0.0496), and a stored
    # "[−0.0, +9.3], p 0.050" read as not significant (p 0.0504)
    ahead = Difference("first", "second", "auroc", "seeds", 5, 0.0207, 0.00001, 0.0415,
                       0.0496, 0.95)
    row = difference_table([ahead]).splitlines()[-1]
    assert "[+0.00001, +0.0415]" in row and "| 0.0496 |" in row and "first ahead" in row
    level = replace(ahead, low=-0.0003, p_value=0.0504)
    row = difference_table([level]).splitlines()[-1]
    assert "[−0.0003, +0.0415]" in row and "| 0.0504 |" in row
    # away from the threshold and from zero, the usual digits
    plain = replace(ahead, low=0.012, p_value=0.021)
    assert "[+0.0120, +0.0415] | 0.021 |" in difference_table([plain])


def test_the_paired_bootstrap_agrees_with_delong_on_auroc_and_takes_any_metric():
    """The class-stratified paired bootstrap over the nodes estimates the same variance as
    DeLong's closed form for AUROC (one seed and the mean of three, whose node errors partly
    average out), and gives AUPRC, which has no closed form, an interval of its own."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    from et_graph.protocols.significance import (
        bootstrap_node_difference,
        delong_variance,
        node_difference,
    )

    rng = np.random.default_rng(3)
    labels = rng.random(800) < 0.2
    shared = rng.normal(size=800)
    first = [1.2 * labels + shared + rng.normal(size=800) for _ in range(3)]
    second = [1.2 * labels + shared + rng.normal(size=800) for _ in range(3)]
    for seeds in (1, 3):
        boot = bootstrap_node_difference(labels, first[:seeds], second[:seeds], roc_auc_score,
                                         rounds=400, names=("et", "gbt"), metric_name="auroc")
        closed = node_difference(labels, first[:seeds], second[:seeds])
        assert boot.mean == pytest.approx(closed.mean, abs=1e-12)
        assert boot.high - boot.low == pytest.approx(closed.high - closed.low, rel=0.12)
    assert (boot.first, boot.metric, boot.design) == ("et", "auroc", "nodes")
    # the seeds' node errors partly average out (their own spread is added separately)
    assert delong_variance(labels, first, second)[1] < delong_variance(
        labels, first[:1], second[:1])[1]
    precision = bootstrap_node_difference(labels, first, second, average_precision_score,
                                          rounds=100)
    assert precision.mean == pytest.approx(
        np.mean([average_precision_score(labels, s) for s in first])
        - np.mean([average_precision_score(labels, s) for s in second]))
    assert precision.low < precision.mean < precision.high
    for call, message in [
        (lambda: bootstrap_node_difference(labels, first, second[:2], roc_auc_score), "seeds"),
        (lambda: bootstrap_node_difference(labels, first, second, roc_auc_score, rounds=10),
         "rounds"),
        (lambda: bootstrap_node_difference(np.ones(800, bool), first, second, roc_auc_score),
         "both classes"),
    ]:
        with pytest.raises(ValueError, match=message):
            call()


def test_the_forest_plot_mirrors_error_metrics_and_draws_the_stored_tables(tmp_path,
                                                                           monkeypatch):
    """Right is better for the first model: an error metric's difference is drawn mirrored.
    The README's figure script reads every stored table it names."""
    import matplotlib.axes

    from et_graph.plots.significance import plot_differences

    calls = record_arguments(monkeypatch, matplotlib.axes.Axes, "plot")
    # the first model's error is the lower one
    mae = replace(seed_difference([0.40, 0.41, 0.42], [0.45, 0.46, 0.44]), higher_is_better=False)
    path = plot_differences({"MAE": [("zinc", mae)]}, tmp_path / "forest.png")
    assert path.stat().st_size > 0
    drawn = [args[1:] for args, _ in calls]  # without the axes
    point = [args for args in drawn if len(args) == 3][0]  # (x, y, "o")
    assert point[0] == pytest.approx(-mae.mean) and -mae.mean > 0  # drawn right: ET better
    with pytest.raises(ValueError, match="every panel is empty"):
        plot_differences({"empty": []}, tmp_path / "none.png")
    monkeypatch.undo()
    script = benchmark_module("significance_plot")
    figure = script.main(["--out", str(tmp_path / "readme.png")])
    assert figure.stat().st_size > 0
    rows = script.panels()
    assert sum(len(r) for r in rows.values()) == len(script.TU_ROWS) + len(
        script.ANOMALY_ROWS) + 1


def test_holm_adjusts_a_family_of_p_values_step_down_and_the_tables_show_it():
    from et_graph.protocols.significance import holm

    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]) == [0.5] and holm([]) == []
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    models = {"et": {"auroc": summarize([0.85, 0.86, 0.84])},
              "gbt": {"auroc": summarize([0.80, 0.80, 0.81])},
              "mlp": {"auroc": summarize([0.84, 0.85, 0.86])}}
    rows = compare_to(models, "et", ["auroc"], "seeds")
    table = difference_table(rows)
    assert "| p, Holm over this table |" in table
    # (from a CLI audit) the verdict beside it reads its own row's interval, and says so
    assert table.splitlines()[0].endswith("| verdict (this row's interval alone) |")
    first = table.splitlines()[2].split(" | ")
    assert float(first[5]) == pytest.approx(min(1.0, 2 * rows[0].p_value), abs=1e-3)
    assert "Holm" not in difference_table(rows[:1])  # one row: no family


def test_a_spread_of_rounding_is_no_spread_and_takes_the_exact_test():
    from et_graph.protocols.significance import fold_difference, seed_difference

    # the fold differences are 0.1000...09, 0.0999...98 and 0.0999...98: t said p = 3.5e-31
    paired = fold_difference([.8, .9, .7], [.7, .8, .6], test_train_ratio=.5)
    assert paired.p_value == 0.25 and paired.low == paired.high
    assert fold_difference([.75, .85, .65, .8], [.7, .8, .6, .75],
                           test_train_ratio=1 / 3).p_value == 0.125
    assert seed_difference([0.1] * 3, [0.2] * 3).p_value == pytest.approx(0.1)


def test_a_stored_difference_with_a_tables_extra_keys_reads_back():
    from et_graph.protocols.significance import Difference, fold_difference

    stored = {**fold_difference([.8, .7, .9], [.7, .7, .6], test_train_ratio=.5).as_dict(),
              "p_holm": 0.9, "dataset": "X"}  # tu_reassess rows carry these beside their own
    assert Difference.from_dict(stored).p_value == stored["p_value"]


def test_the_forest_plot_fills_only_what_survives_holm(monkeypatch, tmp_path):
    """Points were filled when their own interval excluded 0, while the text beside the figure
    says that only one of them stays significant after Holm's adjustment over the panel."""
    import matplotlib.axes

    from et_graph.plots.significance import plot_differences

    calls = record_arguments(monkeypatch, matplotlib.axes.Axes, "plot")
    strong = seed_difference([0.9, 0.91, 0.92, 0.9, 0.91], [0.5, 0.52, 0.51, 0.5, 0.52])
    weak = replace(strong, p_value=0.03, low=0.001)  # alone significant; Holm over 3: 0.06
    none = replace(strong, p_value=0.5, low=-0.1)
    assert strong.p_value < 0.01 and weak.significant and not none.significant
    plot_differences({"AUROC": [("a", strong), ("b", weak), ("c", none)]},
                     tmp_path / "forest.png")
    styles = [kwargs["fillstyle"] for _, kwargs in calls if "fillstyle" in kwargs]
    assert styles == ["none", "left", "full"]  # drawn bottom-up: c, b, a


def test_the_unsupervised_design_line_says_every_node_is_scored():
    """It said "scoring the same test set" for a protocol that scores every node."""
    from et_graph.protocols.significance import describe_design

    assert "scoring every node of the graph" in describe_design("seeds", 5, scored="all")
    assert "scoring the same test set" in describe_design("seeds", 5)


def test_two_difference_tables_are_headed_and_two_runs_are_flagged():
    """Two tables with one header and no heading gave two p-values for one comparison; with 2
    seeds an AUROC interval reached [-0.94, +1.28] without a word."""
    from et_graph.protocols.significance import difference_sections, results_entries

    two = seed_difference([0.9, 0.6], [0.5, 0.55])
    nodes = replace(two, design="nodes", n=2)
    results = {**results_entries([two], "over the seeds"),
               **results_entries([nodes], "over the nodes", "node_")}
    runs, over_nodes = difference_sections(results)
    assert runs.startswith("**Differences over the runs**")
    assert over_nodes.startswith("**Differences over the scored nodes")
    assert "With 2 runs an interval rests on very few degrees of freedom" in runs
    assert "degrees of freedom" not in over_nodes
    (alone,) = difference_sections(results_entries([two], "over the seeds"))
    assert alone.startswith("|")  # one table: no heading needed


def test_an_interval_touching_zero_is_not_significant():
    # (a mutation audit: ">=" for ">" at the interval's end passed)
    from et_graph.protocols.significance import Difference

    assert not Difference("a", "b", "auroc", "seeds", 3, 0.1, 0.0, 0.2, 0.05, 0.95).significant


def test_a_rounding_level_difference_is_no_difference():
    """From a statistics audit: 0.3 against 0.1 + 0.2 over five seeds each was "second ahead,
    p 0.008" (the rank test of complete separation), and folds whose differences were ties and
    rounding-level losses "p 0.004" (the sign test)."""
    seeds = seed_difference([0.3] * 5, [0.1 + 0.2] * 5)
    assert seeds.mean == 0.0 and seeds.p_value == 1.0
    folds = fold_difference([0.3] * 9, [0.3] * 6 + [0.1 + 0.2] * 3, test_train_ratio=1 / 9)
    assert folds.mean == 0.0 and folds.p_value == 1.0 and folds.wins == (0, 9, 0)
    real = seed_difference([0.3] * 5, [0.2] * 5)  # a real complete separation still counts
    assert real.p_value == pytest.approx(2 / math.comb(10, 5))


def test_a_fold_missing_for_one_model_is_left_out_for_both():
    """From a statistics audit: stored nulls (non-finite scores) were dropped from each model's
    list apart, so ET's fold 3 was paired with the MLP's fold 2 without a word."""
    # (as a results file stores them: a non-finite value is written as null)
    models = {"et": {"mse": {"values": [0.10, None, 0.12, 0.11, 0.13]}},
              "mlp": {"mse": {"values": [0.20, 0.21, 0.22, None, 0.23]}}}
    (difference,) = compare_to(models, "et", ["mse"], "folds", test_train_ratio=0.25)
    expected = fold_difference([0.10, 0.12, 0.13], [0.20, 0.22, 0.23], test_train_ratio=0.25,
                               names=("et", "mlp"), metric="mse")
    assert difference.n == 3 and difference.mean == pytest.approx(expected.mean)
    assert (difference.low, difference.high) == pytest.approx((expected.low, expected.high))
    # lists of other lengths cannot be paired, whatever their nulls (one null once made them
    # equal, and they were paired: a review)
    models["mlp"]["mse"]["values"] = [0.20, 0.21, 0.22, 0.23]
    with pytest.raises(ValueError, match="as many stored mse values for et as for mlp"):
        compare_to(models, "et", ["mse"], "folds", test_train_ratio=0.25)


def test_one_seeds_interval_over_the_nodes_says_it_is_one_trainings():
    """From a statistics audit: with one seed the interval has no training randomness in it,
    and its line said it covered it."""
    one = describe_design("nodes", 1)
    assert "this one training only" in one and "the training randomness (one seed)" in one
    assert "the sampling of these nodes and the training randomness" in describe_design(
        "nodes", 5)


def test_the_forest_plot_says_when_an_interval_is_unbounded_or_a_value_missing(monkeypatch,
                                                                                tmp_path):
    """From a plots audit: a one-run difference (an unbounded interval) drew no bar, so it
    looked certain, and a row without a value was left blank without a word."""
    import matplotlib.axes

    from et_graph.plots.significance import plot_differences

    texts = record_arguments(monkeypatch, matplotlib.axes.Axes, "text")
    bounded = seed_difference([0.9, 0.91, 0.92], [0.5, 0.52, 0.51])
    one_run = replace(bounded, low=float("-inf"), high=float("inf"), p_value=float("nan"))
    missing = replace(bounded, mean=float("nan"), low=float("nan"), high=float("nan"))
    plot_differences({"AUROC": [("a", bounded), ("b", one_run), ("c", missing)]},
                     tmp_path / "forest.png")
    said = [args[3] if len(args) > 3 else kwargs.get("s") for args, kwargs in texts]
    assert " interval unbounded" in said and "  no value" in said


def test_a_time_is_better_lower_whatever_the_files_direction():
    """compare --metrics train_seconds called a model 56 s faster "behind" (an output audit):
    the file's direction is its quality metric's."""
    from et_graph.protocols.significance import compare_to

    models = {"et": {"train_seconds": summarize([10.0, 11.0, 10.5]),
                     "accuracy": summarize([0.9, 0.91, 0.92])},
              "gin": {"train_seconds": summarize([60.0, 62.0, 61.0]),
                      "accuracy": summarize([0.8, 0.81, 0.82])}}
    rows = {d.metric: d for d in compare_to(models, "et", ["accuracy", "train_seconds"],
                                            "seeds")}
    assert rows["accuracy"].higher_is_better and rows["accuracy"].verdict() == "et ahead"
    assert not rows["train_seconds"].higher_is_better
    assert rows["train_seconds"].verdict() == "et ahead"


def test_the_json_rows_carry_the_tables_holm_adjusted_p():
    """results.json and compare --json lacked the Holm-adjusted p the Markdown tables print
    (an output audit)."""
    from et_graph.protocols.significance import (
        compare_to,
        difference_records,
        holm,
        results_entries,
    )

    models = {name: {"auroc": summarize(list(values))} for name, values in
              {"et": (0.90, 0.91, 0.92), "gbt": (0.80, 0.81, 0.83),
               "mlp": (0.89, 0.92, 0.90)}.items()}
    rows = compare_to(models, "et", ["auroc"], "seeds")
    records = results_entries(rows, "seeds")["differences"]
    assert [r["p_holm"] for r in records] == holm([d.p_value for d in rows])
    assert records[0]["p_holm"] != records[0]["p_value"]
    [one] = difference_records(rows[:1])
    assert one["p_holm"] == one["p_value"]  # a family of one
