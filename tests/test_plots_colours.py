"""Figures: one colour per model everywhere, and the tuning history shows every trial."""
import matplotlib.figure
import pytest
from helpers import record_arguments

from et_graph.plots.colours import MODEL_COLOURS, model_colour


def test_a_model_keeps_its_colour_and_its_ensemble_shares_it():
    assert model_colour("gcn") == model_colour("gcn", ("et", "gbt")) == MODEL_COLOURS["gcn"]
    assert model_colour("mlp_ensemble") == model_colour("mlp")
    fixed = [model_colour(n) for n in ("et", "gbt", "mlp", "gcn", "gat")]
    assert len(set(fixed)) == len(fixed)  # the anomaly rows are told apart
    spare = {model_colour(n, ("sage", "appnp")) for n in ("sage", "appnp")}
    assert len(spare) == 2 and not spare & set(fixed)
    # the unsupervised rows as the runner names them
    rows = ("et_combined", "et_energy", "et_reconstruction", "iforest", "lof", "degree")
    assert all(name in MODEL_COLOURS for name in rows)
    assert model_colour("degree") not in {model_colour(n, ("x", "y")) for n in ("x", "y")}


@pytest.fixture()
def saved_figures(monkeypatch):
    """Each savefig call's ``(args, kwargs)``; ``args[0]`` is the figure saved."""
    return record_arguments(monkeypatch, matplotlib.figure.Figure, "savefig")


def test_roc_and_training_curves_draw_a_model_in_one_colour(tmp_path, saved_figures):
    """gcn was green in the ROC figure (colours by position) and red in the training curves
    of the same run."""
    import numpy as np

    from et_graph.plots.anomaly import plot_roc_pr

    y = np.array([0, 1] * 10)
    rng = np.random.default_rng(0)
    plot_roc_pr(tmp_path / "roc.png", y, {n: rng.random(20) for n in ("gcn", "et", "gbt")},
                "test")
    roc = saved_figures[-1][0][0].axes[0]
    lines = {line.get_label().split(" ")[0]: line.get_color()
             for line in roc.lines if not line.get_label().startswith("_")}
    assert lines.pop("chance") == "black"  # named, and in no model's colour (a plots audit)
    assert lines == {n: model_colour(n) for n in ("gcn", "et", "gbt")}
    # given the built-in rows, a detector registered as lof is not drawn in the MLP's green
    plot_roc_pr(tmp_path / "roc.png", y, {n: rng.random(20) for n in ("mlp", "lof")}, "test",
                builtin=("et", "mlp", "gbt"))
    roc = saved_figures[-1][0][0].axes[0]
    lines = {line.get_label().split(" ")[0]: line.get_color()
             for line in roc.lines if not line.get_label().startswith("_")}
    assert lines["mlp"] == MODEL_COLOURS["mlp"] and lines["lof"] not in MODEL_COLOURS.values()


def test_the_tuning_history_draws_pruned_trials(tmp_path, saved_figures):
    """A model with half its trials pruned looked like one that had half the budget."""
    from et_graph.tuning.study import plot_history

    summaries = {"et": {"history": [(0, 0.8), (3, 0.85)], "direction": "maximize",
                        "pruned_history": [(1, 0.6), (2, 0.7)]},
                 "gbt": {"history": [(0, 0.8), (1, 0.82), (2, 0.81), (3, 0.83)],
                         "direction": "maximize"}}
    plot_history(tmp_path / "history.png", summaries, "auroc", "anomaly on tolokers")
    ax = saved_figures[-1][0][0].axes[0]
    labels = [line.get_label() for line in ax.lines]
    assert "et: 2 pruned (last value)" in labels and "et: 2 complete, best so far" in labels
    assert "higher is better" in ax.get_ylabel() and "tolokers" in ax.get_title()
    # a registered graph model named mlp took the structure-agnostic baseline's green
    from et_graph.tuning.study import builtin_models

    summaries = {"structure_agnostic": summaries["gbt"], "mlp": summaries["gbt"]}
    plot_history(tmp_path / "history.png", summaries, "accuracy", "tudataset on MUTAG",
                 builtin_models("tudataset"))
    colours = {line.get_label().split(":")[0]: line.get_color()
               for line in saved_figures[-1][0][0].axes[0].lines
               if not line.get_label().startswith("_")}
    assert colours["structure_agnostic"] == MODEL_COLOURS["structure_agnostic"]
    assert colours["mlp"] not in MODEL_COLOURS.values()


def test_the_training_curves_name_the_rows_without_epochs(tmp_path, saved_figures):
    """GBT (often the best row) was left out of the training curves without a word, and the
    baselines were drawn faded."""
    import numpy as np

    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.plots.anomaly import plot_curves
    from et_graph.protocols.anomaly import make_splits

    data = planted_anomaly_graph(120, seed=1)
    split = make_splits(data, "paper", 1)[0]
    rng = np.random.default_rng(0)
    history = [{"loss": [1.0, 0.6, 0.5], "val_auroc": [0.6, 0.7, 0.65], "best_epoch": 1}]
    curves = {"prob": {n: rng.random(120) for n in ("et", "mlp", "gbt")},
              "history": {"et": history, "mlp": history}, "energy": None,
              "select_metric": "f1_macro"}
    plot_curves(tmp_path, curves, data, split)
    training = saved_figures[-1][0][0]
    assert any("not drawn (no epochs): gbt" in t.get_text() for t in training.texts)
    lines = [line for line in training.axes[0].lines if not line.get_label().startswith("_")]
    assert {line.get_alpha() for line in lines} <= {None, 1.0}
    # epochs from 1, as the graph and image figures count them (they were drawn from 0)
    assert list(lines[0].get_xdata()) == [1, 2, 3]
    kept = [line for line in training.axes[1].lines if line.get_marker() == "*"
            and len(line.get_xdata())]
    assert list(kept[0].get_xdata()) == [2] and list(kept[0].get_ydata()) == [0.7]


def test_the_roc_pr_figure_tells_defaults_rows_and_chance_apart_and_keeps_the_pr_scale(
        tmp_path, saved_figures):
    """From a plots audit: iforest_defaults was drawn exactly as iforest; chance was in the
    degree row's grey; every PR curve spiked to precision 1 at recall 0 (scikit-learn's
    closing point, no node), squashing curves of AUPRC 0.04 into the bottom tenth."""
    import numpy as np

    from et_graph.plots.anomaly import plot_roc_pr

    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.05).astype(int)
    scores = {name: rng.random(400) for name in ("iforest", "iforest_defaults", "degree")}
    scores["iforest"][y == 1] += 0.05  # no top-ranked anomaly: no real precision of 1
    scores["iforest_defaults"] = scores["iforest"] * 0.5 + 0.1 * rng.random(400)
    plot_roc_pr(tmp_path / "roc.png", y, scores, "all nodes")
    roc, pr = saved_figures[-1][0][0].axes
    style = {line.get_label().split(" ")[0]: line.get_linestyle() for line in roc.lines}
    assert style["iforest"] != style["iforest_defaults"]
    colours = {line.get_label().split(" ")[0]: line.get_color() for line in roc.lines}
    assert colours["chance"] != colours["degree"]
    drawn_max = max(max(line.get_ydata()) for line in pr.lines if line.get_label() != "chance")
    assert drawn_max < 1.0 and pr.get_ylim()[1] < 1.0


def test_the_fold_figure_draws_equal_folds_apart_and_the_majority_guess(tmp_path,
                                                                         saved_figures):
    """From a plots audit: GIN's two equal folds showed as one dot under a title saying two,
    and nothing marked the accuracy of always guessing the largest class."""
    from et_graph.plots.graph import plot_fold_accuracies

    stats = {"accuracy": {"mean": 0.684, "std": 0.0, "values": [0.684, 0.684]}}
    plot_fold_accuracies({"dataset": "MUTAG", "folds": [{}, {}], "models": {"gin": stats}},
                         tmp_path / "accuracy.png", majority=0.665)
    ax = saved_figures[-1][0][0].axes[0]
    dots = [line for line in ax.lines if line.get_marker() == "o"][0]
    assert len(set(dots.get_xdata())) == 2
    guess = [line for line in ax.lines if "largest class" in line.get_label()]
    assert guess and list(guess[0].get_ydata()) == [0.665, 0.665]


def test_an_exploding_training_loss_puts_the_loss_panel_on_a_log_scale(tmp_path,
                                                                       saved_figures):
    """From a plots audit: one diverged seed's loss flattened every other line of the panel."""
    import numpy as np

    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.plots.anomaly import plot_curves, training_curve
    from et_graph.protocols.anomaly import make_splits

    data = planted_anomaly_graph(120, seed=0)
    split = make_splits(data, "paper", 1)[0]
    rows = lambda losses: [{"train_loss": v, "val_auroc": 0.7} for v in losses]  # noqa: E731
    curves = {"prob": {"et": np.random.default_rng(0).random(120)},
              "history": {"et": [training_curve(rows([0.7, 0.6, 0.5]), 2),
                                 training_curve(rows([0.7, 90.0, 4000.0]), 0)]}}
    plot_curves(tmp_path, curves, data, split)
    loss_panel = saved_figures[-1][0][0].axes[0]
    assert loss_panel.get_yscale() == "log"
    curves["history"]["et"].pop()
    plot_curves(tmp_path, curves, data, split)
    assert saved_figures[-1][0][0].axes[0].get_yscale() == "linear"
