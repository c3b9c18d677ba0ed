"""Nested tuning (`et-graph tune tudataset --nested`): every model tuned inside every outer fold,
each fold scored by its own choice, no test graph read by any choice."""
import json
import warnings

import pytest

from et_graph.cli import main as cli_main
from et_graph.config import parse
from et_graph.datasets.tudataset import load_tudataset
from et_graph.experiments.tudataset import TUDatasetConfig
from et_graph.protocols.graph_cv import (
    cross_validate,
    graph_labels,
    inner_split,
    stratified_folds,
)
from et_graph.protocols.tudataset_config import model_factories
from et_graph.tuning import TuneBudget
from et_graph.tuning.nested import nested_cross_validate, nested_study_name
from et_graph.tuning.tudataset import TUObjective

pytest.importorskip("optuna")
pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = ["--dataset", "MUTAG", "--epochs", "2", "--no-progress", "--pe-dim", "4",
         "--rw-pe-dim", "0"]  # the fixture's graphs carry no random-walk encodings


@pytest.fixture(scope="module")
def mutag():
    graphs, info = load_tudataset(None, "MUTAG", pe_dim=4, progress=False)
    for g in graphs:
        g.edge_attr = None
    return graphs, {**info, "edge_features": 0}


def test_one_fold_run_alone_is_that_fold_of_the_whole_run(mutag):
    graphs, info = mutag
    config = parse(TUDatasetConfig, SMALL)
    factories = model_factories(config, info, {})
    options = dict(continuous_channels=info["node_attributes"], progress=False)
    whole = cross_validate(graphs, {"gin": factories["gin"]}, {"gin": config.train},
                           max_folds=3, **options)
    alone = cross_validate(graphs, {"gin": factories["gin"]}, {"gin": config.train},
                           run_folds=[2], **options)
    assert [r["fold"] for r in alone["folds"]] == [2]
    drop = ("epoch_seconds",)
    assert ({k: v for k, v in alone["folds"][0]["models"]["gin"].items() if k not in drop}
            == {k: v for k, v in whole["folds"][2]["models"]["gin"].items() if k not in drop})
    with pytest.raises(ValueError, match="not both"):
        cross_validate(graphs, factories, {m: config.train for m in factories}, max_folds=1,
                       run_folds=[0], **options)
    for bad in ([], [10], [1, 1], [True]):
        with pytest.raises(ValueError, match="fold indices"):
            cross_validate(graphs, factories, {m: config.train for m in factories},
                           run_folds=bad, **options)


def test_a_trial_on_one_fold_trains_what_that_fold_of_a_run_trains(mutag):
    # fold 3's trial must use fold 3's inner split and seed (not those of the first fold):
    # then the best trial's value is the inner-validation accuracy of the final training
    graphs, info = mutag
    # (long enough to learn: two epochs predict the majority class, whose share is the same
    # on every stratified validation split, and could not tell one split from another)
    config = parse(TUDatasetConfig, [*SMALL, "--epochs", "30"])
    objective = TUObjective(config, "structure_agnostic", graphs=graphs, info=info, folds=[3])
    cv = cross_validate(graphs, model_factories(config, info, {}), {
        m: config.train for m in ("et", "gin", "structure_agnostic")},
        continuous_channels=info["node_attributes"], progress=False, run_folds=[3])
    assert objective() == cv["folds"][0]["models"]["structure_agnostic"]["val_accuracy"]
    assert objective.fold_indices == [3]
    with pytest.raises(ValueError, match="not both"):
        TUObjective(config, "gin", 2, graphs, info, folds=[0])
    with pytest.raises(ValueError, match="fold indices"):
        TUObjective(config, "gin", graphs=graphs, info=info, folds=[10])


def test_nested_selection_never_reads_the_test_fold(mutag):
    graphs, info = mutag
    # (20 epochs: at 2 every ET trial predicts the majority class and ties, and equal
    # choices would prove little)
    config = parse(TUDatasetConfig, [*SMALL, "--models", "et,structure_agnostic",
                                     "--max-folds", "1", "--epochs", "20"])
    splits = stratified_folds(graph_labels(graphs), 10, 0)
    flipped = [g.clone() for g in graphs]
    for i in splits[0][1]:  # fold 0's test graphs, relabelled
        flipped[i].y = 1 - flipped[i].y
    runs = [nested_cross_validate(config, TuneBudget(trials=3), graphs=data, info=info,
                                  splits=splits) for data in (graphs, flipped)]
    for model in ("et", "structure_agnostic"):
        a, b = (run["folds"][0]["models"][model] for run in runs)
        assert a["settings"] == b["settings"]  # the choice: validation only
        assert a["tuning_validation"] == b["tuning_validation"] == a["val_accuracy"]
        assert a["test_accuracy"] == pytest.approx(1 - b["test_accuracy"])  # the test was read
        assert a["trials"]["complete"] == 3
    # the same relabelling of the inner validation graphs must move the choice's scores
    _, val = inner_split(splits[0][0], graph_labels(graphs), 0.1, 0)
    leaky = [g.clone() for g in graphs]
    for i in val:
        leaky[i].y = leaky[i].y * 0  # every validation graph relabelled as class 0
    moved = nested_cross_validate(config, TuneBudget(trials=3), graphs=leaky, info=info,
                                  splits=splits)
    assert (moved["folds"][0]["models"]["et"]["tuning_validation"]
            != runs[0]["folds"][0]["models"]["et"]["tuning_validation"])


def test_nested_cli_writes_a_run_and_resumes_its_studies(tmp_path):
    out, storage = tmp_path / "o", f"sqlite:///{tmp_path}/n.db"
    argv = ["tune", "tudataset", *SMALL, "--nested", "--models", "gin,structure_agnostic",
            "--trials", "2", "--max-folds", "2", "--storage", storage, "--out", str(out)]
    with warnings.catch_warnings():
        # --max-folds is read by a nested run (its final trainings): no "never read" warning
        warnings.filterwarnings("error", message=".*never read them")
        assert cli_main(argv) == 0
    results = json.loads((out / "MUTAG" / "results.json").read_text(encoding="utf-8"))
    assert "nested selection" in results["protocol"]
    assert [r["fold"] for r in results["folds"]] == [0, 1]  # each fold trained as itself:
    for record in results["folds"]:  # the final training is the best trial's training
        for row in record["models"].values():
            assert row["tuning_validation"] == row["val_accuracy"]
            assert 1 <= row["tied_at_best"] <= 2
    assert "trials tied at the best inner-validation accuracy" in (
        out / "MUTAG" / "results.md").read_text(encoding="utf-8")
    assert len(results["models"]["gin"]["settings"]) == 2
    assert results["tuned_fields"]["gin"] == sorted(results["models"]["gin"]["settings"][0])
    assert "gin" in (out / "MUTAG" / "results.md").read_text(encoding="utf-8")
    assert (out / "MUTAG" / "accuracy.png").exists()
    folds = [json.loads(line) for line in (out / "MUTAG" / "folds.jsonl").read_text(
        encoding="utf-8").splitlines()]
    assert folds == results["folds"] and not (out / "MUTAG" / "folds.running.jsonl").exists()
    assert cli_main(argv) == 0  # the stored studies hold their budget: no trial runs again
    again = json.loads((out / "MUTAG" / "results.json").read_text(encoding="utf-8"))
    assert again["models"]["gin"]["accuracy"] == results["models"]["gin"]["accuracy"]
    import optuna

    study = optuna.load_study(study_name=nested_study_name("", "MUTAG", "gin", 1, False),
                              storage=storage)
    assert len(study.trials) == 2
    assert all(t.user_attrs["validation_loss"] > 0 for t in study.trials)  # the tie-break
    # a stored study the run cannot resume (gin's, under another epoch count) is refused
    # before any study runs: not after ET's new fold-0 study, which comes first
    other = [a if a != "2" or argv[i - 1] != "--epochs" else "3" for i, a in enumerate(argv)]
    other[other.index("gin,structure_agnostic")] = "et,gin"
    with pytest.raises(ValueError, match="train.epochs"):
        cli_main([*other, "--storage", storage])
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    assert names == {nested_study_name("", "MUTAG", m, f, False)
                     for m in ("gin", "structure_agnostic") for f in (0, 1)}
    assert len(optuna.load_study(study_name=nested_study_name(
        "", "MUTAG", "structure_agnostic", 0, False), storage=storage).trials) == 2
    with pytest.raises(ValueError, match="--nested applies to `tune tudataset`"):
        cli_main(["tune", "anomaly", "--nested", "--storage", storage])
    with pytest.raises(ValueError, match="--tune-folds belongs to the cheaper variant"):
        cli_main([*argv, "--tune-folds", "2"])
    with warnings.catch_warnings():
        # refused before any warning about the flags or the earlier results in --out
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="drop the grid"):
            cli_main([*argv, "--grid", "a:et.steps=1"])
        with pytest.raises(ValueError, match="for a probe without test scores"):
            cli_main([*argv, "--validation-only"])


def test_processes_can_share_the_folds_and_one_run_gathers_them(tmp_path):
    """--outer-folds runs a share of the folds (one process per share, one storage); the same
    command without it resumes their finished studies and scores every fold as they did."""
    import optuna

    storage = f"sqlite:///{tmp_path}/n.db"
    base = ["tune", "tudataset", *SMALL, "--nested", "--models", "gin", "--trials", "2",
            "--storage", storage]
    assert cli_main([*base, "--outer-folds", "1", "--out", str(tmp_path / "share")]) == 0
    share = json.loads((tmp_path / "share" / "MUTAG" / "results.json").read_text(
        encoding="utf-8"))
    assert [r["fold"] for r in share["folds"]] == [1]
    assert "outer folds 1 only (outer_folds)" in share["protocol"]
    assert cli_main([*base, "--max-folds", "2", "--out", str(tmp_path / "all")]) == 0
    whole = json.loads((tmp_path / "all" / "MUTAG" / "results.json").read_text(
        encoding="utf-8"))
    assert [r["fold"] for r in whole["folds"]] == [0, 1]
    drop = ("epoch_seconds",)
    assert ({k: v for k, v in whole["folds"][1]["models"]["gin"].items() if k not in drop}
            == {k: v for k, v in share["folds"][0]["models"]["gin"].items() if k not in drop})
    study = optuna.load_study(study_name=nested_study_name("", "MUTAG", "gin", 1, False),
                              storage=storage)
    assert len(study.trials) == 2  # resumed, not tuned again
    for extra, message in ((["--max-folds", "2", "--outer-folds", "1"], "give one of them"),
                           (["--outer-folds", "1,x"], "comma list"),
                           (["--outer-folds", "10"], "fold indices"),
                           (["--outer-folds", "1,1"], "repeat a fold")):
        with pytest.raises(ValueError, match=message):
            cli_main([*base, *extra, "--out", str(tmp_path / "bad")])
    with pytest.raises(ValueError, match="applies to a nested run"):
        cli_main(["tune", "tudataset", *SMALL, "--outer-folds", "1", "--storage", storage])


def test_a_trial_done_with_its_folds_is_never_pruned(mutag, monkeypatch):
    # With one fold per trial (every nested study) and --prune-warmup 0, the median pruner
    # judged each trial after its last fold, and stored finished trials as pruned, their
    # values lost and their budget spent.
    from types import SimpleNamespace

    import et_graph.tuning.tudataset as tudataset
    from et_graph.tuning import run_study

    scores = iter([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])  # each trial worse than the median so far
    monkeypatch.setattr(tudataset, "fit_graph_classifier", lambda *args, **kwargs: (
        SimpleNamespace(best=SimpleNamespace(score=next(scores), loss=0.5))))
    graphs, info = mutag
    objective = TUObjective(parse(TUDatasetConfig, SMALL), "gin", graphs=graphs, info=info,
                            folds=[4])
    study = run_study("one-fold", objective, TuneBudget(trials=6, prune_warmup=0), None,
                      progress=False)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 6
    assert [t.value for t in study.trials] == [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]


def test_studies_the_time_limit_cut_are_named():
    from et_graph.tuning.nested import _short_studies

    def row(complete, pruned):
        return {"trials": {"complete": complete, "pruned": pruned}}

    records = [{"fold": 0, "models": {"et": row(3, 1), "gin": row(4, 0)}},
               {"fold": 1, "models": {"et": row(2, 0), "gin": row(5, 0)}}]
    assert _short_studies(records, 4) == ["et: fewer than 4 finished trials in 1 fold "
                                          "(fold 1: 2)"]
    assert _short_studies(records, 2) == []


def test_folds_that_chose_the_same_settings_are_named_together():
    from et_graph.tuning.nested import settings_line

    records = [{"fold": f, "models": {"gin": {"settings": s}}}
               for f, s in enumerate([{"lr": 0.1}, {"lr": 0.2}, {"lr": 0.1}])]
    assert settings_line("gin", records) == ("gin: settings chosen per fold: folds 0, 2: "
                                             "lr=0.1; fold 1: lr=0.2")


def test_ties_of_the_objective_go_to_the_lower_validation_loss():
    import optuna

    from et_graph.tuning.study import VALIDATION_LOSS, best_within_budget, tied_at_best

    def trial(value, loss=None):
        return optuna.trial.create_trial(
            value=value, params={}, distributions={},
            user_attrs={} if loss is None else {VALIDATION_LOSS: loss})

    study = optuna.create_study(direction="maximize")
    for t in (trial(1.0, 0.5), trial(1.0), trial(1.0, 0.3), trial(0.9, 0.1),
              trial(1.0, float("nan"))):
        study.add_trial(t)
    assert best_within_budget(study).number == 2  # the lowest loss among the best accuracy
    assert best_within_budget(study, 2).number == 0  # a recorded loss before none
    plain = optuna.create_study(direction="maximize")
    for t in (trial(1.0), trial(1.0)):
        plain.add_trial(t)
    assert best_within_budget(plain).number == 0  # without losses: the earlier trial
    # how many the tie rule chose among: every trial at the best value within the budget
    assert (tied_at_best(study), tied_at_best(study, 2), tied_at_best(plain)) == (4, 2, 2)
    assert tied_at_best(optuna.create_study(direction="maximize")) == 0


def test_the_ties_at_the_best_are_reported(tmp_path):
    """The choice among tied trials is the tie rule's, not the validation split's: the nested
    run and the study report say how many tied."""
    from et_graph.tuning.nested import ties_line
    from et_graph.tuning.study import write_report

    assert ties_line({"et": {"tied_at_best": [1, 3]}, "gin": {"tied_at_best": [2, 1]}}) == (
        "trials tied at the best inner-validation accuracy, per fold (above 1 the tie rule "
        "chose among them: the lower validation loss, then the earlier trial): et [1, 3]; "
        "gin [2, 1]")
    summary = {"trials": {"complete": 4, "pruned": 0, "fail": 0}, "best_value": 1.0,
               "best_trial": 2, "best_params": {}, "tied_at_best": 3, "seconds_this_run": 1.0,
               "history": [(0, 1.0)]}
    write_report(tmp_path, "tudataset", "MUTAG", "accuracy", TuneBudget(trials=4),
                 {"et": summary, "gin": {**summary, "tied_at_best": 1}}, {},
                 parse(TUDatasetConfig, SMALL))
    text = (tmp_path / "study_report.md").read_text(encoding="utf-8")
    assert "| 1.0000 | 2 (3 tied) |" in text and "| 1.0000 | 2 |" in text
    assert "did not tell them apart" in text
