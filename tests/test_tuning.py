"""`et-graph tune`: validation-only objectives, resumable studies, presets that reproduce."""
import json
import sys
from pathlib import Path

import pytest
import torch

from et_graph.cli import main as cli_main
from et_graph.config import load_file, merge, parse
from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.exceptions import ConfigWarning, ETGraphWarning
from et_graph.protocols.anomaly import make_splits
from et_graph.protocols.anomaly_config import AnomalyConfig
from et_graph.tuning import AnomalyObjective, TuneBudget
from et_graph.tuning.cli import tune_anomaly

pytest.importorskip("optuna")
pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = ["--no-progress", "--epochs", "3", "--hidden", "16", "--max-iter", "20",
         "--feature-norm", "none", "--no-degree-feature"]


def _values(study_result, model):
    return [value for _, value in study_result["models"][model]["history"]]


def test_scrambled_test_labels_leave_every_trial_identical(tmp_path):
    # Fixed masks (GADBench mode): a stratified split would itself follow the scrambled labels.
    data = planted_anomaly_graph(200, seed=4)
    split = make_splits(data, "paper", 1, 0.4, 2)[0]
    data.train_mask, data.val_mask, data.test_mask = split.masks(200)
    config = parse(AnomalyConfig, [*SMALL, "--protocol", "gadbench"])
    scrambled = data.clone()
    scrambled.y = data.y.clone()
    scrambled.y[split.test] = 1 - scrambled.y[split.test]
    runs = []
    for i, graph in enumerate((data, scrambled)):
        runs.append(tune_anomaly(config, ["et", "gbt"], TuneBudget(trials=3, timeout_minutes=5),
                                 f"sqlite:///{tmp_path}/s{i}.db", out=tmp_path / f"o{i}",
                                 data=graph))
    for model in ("et", "gbt"):
        assert len(_values(runs[0], model)) >= 2
        assert _values(runs[0], model) == _values(runs[1], model)


def test_killed_and_restarted_study_continues_its_numbering(tmp_path):
    data = planted_anomaly_graph(200, seed=4)
    config = parse(AnomalyConfig, SMALL)
    storage = f"sqlite:///{tmp_path}/study.db"
    first = tune_anomaly(config, ["gbt"], TuneBudget(trials=2), storage, out=tmp_path / "a",
                         data=data)
    assert first["models"]["gbt"]["trial_numbers"] == [0, 1]
    again = tune_anomaly(config, ["gbt"], TuneBudget(trials=4), storage, out=tmp_path / "b",
                         data=data)
    assert again["models"]["gbt"]["trial_numbers"] == [0, 1, 2, 3]
    report = json.loads((tmp_path / "b" / "study_report.json").read_text(encoding="utf-8"))
    assert report["budget"]["trials"] == 4
    assert (tmp_path / "b" / "optimization_history.png").stat().st_size > 0
    assert "| gbt |" in (tmp_path / "b" / "study_report.md").read_text(encoding="utf-8")


def test_a_study_resumed_under_another_objective_is_refused(tmp_path):
    """Studies are named by task, dataset and model; a second run with another metric once
    resumed the first study and reported its AUROC values as the new metric's."""
    data = planted_anomaly_graph(200, seed=4)
    config = parse(AnomalyConfig, SMALL)
    storage = f"sqlite:///{tmp_path}/study.db"
    tune_anomaly(config, ["gbt"], TuneBudget(trials=1), storage, "auroc", tmp_path / "a",
                 data=data)
    with pytest.raises(ValueError, match="another objective"):
        tune_anomaly(config, ["gbt"], TuneBudget(trials=2), storage, "auprc", tmp_path / "b",
                     data=data)
    resumed = tune_anomaly(config, ["gbt"], TuneBudget(trials=2), storage, "auroc",
                           tmp_path / "c", data=data)  # the same objective resumes
    assert resumed["models"]["gbt"]["trial_numbers"] == [0, 1]


def test_a_study_resumed_under_other_fixed_settings_is_refused(tmp_path):
    """A rerun with another fixed (untuned) setting, e.g. --epochs 3 after --epochs 2, trained
    nothing and wrote a preset saying epochs = 3 with the score of a 2-epoch trial."""
    data = planted_anomaly_graph(200, seed=4)
    storage = f"sqlite:///{tmp_path}/study.db"
    tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=1), storage,
                 out=tmp_path / "a", data=data)
    changed = parse(AnomalyConfig, [*SMALL, "--train-ratio", "0.5"])
    with pytest.raises(ValueError, match=r"other fixed settings \(.*protocol.train_ratio: 0.4"):
        tune_anomaly(changed, ["gbt"], TuneBudget(trials=2), storage, out=tmp_path / "b",
                     data=data)
    # where the study runs is not what it measures: another output folder resumes it
    again = tune_anomaly(parse(AnomalyConfig, [*SMALL, "--threads", "1"]), ["gbt"],
                         TuneBudget(trials=2), storage, out=tmp_path / "c", data=data)
    assert again["models"]["gbt"]["trial_numbers"] == [0, 1]


def test_a_study_from_before_a_new_setting_resumes_at_its_default_only(tmp_path):
    """From an audit: adding gbt.label_trick made every stored study refuse to resume (its
    stored settings lack the key); the older code ran at the default, so that value resumes."""
    import optuna

    data = planted_anomaly_graph(200, seed=4)
    storage = f"sqlite:///{tmp_path}/study.db"
    tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=1), storage,
                 out=tmp_path / "a", data=data)
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    older = {k: v for k, v in study.user_attrs["settings"].items() if k != "gbt.label_trick"}
    study.set_user_attr("settings", older)  # as a study stored before the field existed
    again = tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=2), storage,
                         out=tmp_path / "b", data=data)
    assert again["models"]["gbt"]["trial_numbers"] == [0, 1]
    with pytest.raises(ValueError, match=r"gbt.label_trick: False -> True"):
        tune_anomaly(parse(AnomalyConfig, [*SMALL, "--gbt-label-trick"]), ["gbt"],
                     TuneBudget(trials=3), storage, out=tmp_path / "c", data=data)


def test_a_study_resumed_under_another_prune_warmup_is_refused(tmp_path):
    """--prune-warmup was not stored with a study: resuming it with another value silently
    pruned its later trials under another rule than its earlier ones. A study whose trials
    never reported to the pruner (the trees') was judged under no warm-up, and resumes under
    any (it was refused, from a review)."""
    data = planted_anomaly_graph(200, seed=4)
    config = parse(AnomalyConfig, SMALL)
    storage = f"sqlite:///{tmp_path}/study.db"
    tune_anomaly(config, ["et"], TuneBudget(trials=1, prune_warmup=5), storage,
                 out=tmp_path / "a", data=data)
    with pytest.raises(ValueError, match="--prune-warmup 5, not 2"):
        tune_anomaly(config, ["et"], TuneBudget(trials=2, prune_warmup=2), storage,
                     out=tmp_path / "b", data=data)
    resumed = tune_anomaly(config, ["et"], TuneBudget(trials=2, prune_warmup=5), storage,
                           out=tmp_path / "c", data=data)
    assert resumed["models"]["et"]["prune_warmup"] == 5
    tune_anomaly(config, ["gbt"], TuneBudget(trials=1, prune_warmup=5), storage,
                 out=tmp_path / "d", data=data)
    trees = tune_anomaly(config, ["gbt"], TuneBudget(trials=2, prune_warmup=2), storage,
                         out=tmp_path / "e", data=data)
    assert trees["models"]["gbt"]["trial_numbers"] == [0, 1]
    assert trees["models"]["gbt"]["prune_warmup"] == 2  # from now on, had a trial reported


def test_a_study_from_before_the_prune_warmup_was_stored_resumes(tmp_path):
    import optuna

    from et_graph.tuning.study import run_study, study_summary, write_report

    storage = f"sqlite:///{tmp_path}/study.db"
    optuna.create_study(study_name="older", storage=storage,  # as an older version stored it
                        direction="maximize")
    study = run_study("older", lambda trial: trial.suggest_float("x", 0, 1),
                      TuneBudget(trials=1, prune_warmup=9), storage, progress=False)
    summary = study_summary(study, 0.0)
    assert summary["prune_warmup"] is None  # unknown, not the warm-up of this resume
    write_report(tmp_path, "anomaly", "x", "auroc", TuneBudget(trials=1), {"et": summary}, {},
                 parse(AnomalyConfig, SMALL))
    text = " ".join((tmp_path / "study_report.md").read_text(encoding="utf-8").split())
    assert "The studies of et were stored before the pruner's warm-up was recorded" in text


def test_each_trial_records_the_seed_its_sampler_had_when_a_study_resumes(tmp_path):
    """A stopped and resumed study draws other trials than one run straight through (its
    sampler is seeded past the finished trials), and nothing recorded it (a determinism
    audit)."""
    from et_graph.tuning.study import run_study

    storage = f"sqlite:///{tmp_path}/study.db"
    for trials in (2, 3):
        study = run_study("resumed", lambda trial: trial.suggest_float("x", 0, 1),
                          TuneBudget(trials=trials, seed=5), storage, progress=False)
    assert [t.user_attrs["sampler_seed"] for t in study.trials] == [5, 5, 7]


def test_failing_trials_stop_the_study_instead_of_running_to_the_time_limit():
    """A diverging model fails every trial; optuna's trial-count callback ignores failures,
    so 4,110 failed trials ran in 6 seconds of a 30-minute budget."""
    from et_graph.tuning.study import run_study

    def diverges(trial):
        raise FloatingPointError("loss is nan")

    with pytest.warns(RuntimeWarning, match="3 trials in a row failed"):
        study = run_study("nan", diverges, TuneBudget(trials=3, timeout_minutes=5), None,
                          progress=False)
    assert len(study.trials) == 3


@pytest.mark.parametrize("call, message", [
    (lambda: TuneBudget(trials=2.5), "integer"),
    (lambda: TuneBudget(trials=True), "integer"),
    (lambda: TuneBudget(seed=-1), "seed"),
    (lambda: TuneBudget(timeout_minutes=float("inf")), "finite"),
    (lambda: tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=1),
                          "inmemory", data=planted_anomaly_graph(60)), "database URL"),
    (lambda: tune_anomaly(parse(AnomalyConfig, SMALL), [], TuneBudget(trials=1), None,
                          data=planted_anomaly_graph(60)), "no model"),
])
def test_tuning_api_input_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_in_memory_storage(tmp_path):
    result = tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=1), None,
                          out=tmp_path, data=planted_anomaly_graph(200, seed=4))
    assert result["models"]["gbt"]["trial_numbers"] == [0]


@pytest.mark.parametrize("model", ["et", "gbt", "gat"])
def test_written_preset_reproduces_the_best_trial(tmp_path, model):
    data = planted_anomaly_graph(200, seed=4)
    config = parse(AnomalyConfig, SMALL)
    result = tune_anomaly(config, [model], TuneBudget(trials=3), f"sqlite:///{tmp_path}/p.db",
                          out=tmp_path, data=data)
    preset = load_file(result["presets"][model])
    reloaded = merge(AnomalyConfig(), preset)
    assert reloaded.protocol.models == model
    value = AnomalyObjective(reloaded, model, data=data)()
    assert value == pytest.approx(result["models"][model]["best_value"], abs=1e-12)


def test_class_balance_tuning_adds_one_switch_to_every_space_and_its_preset(tmp_path):
    """``--tune-class-balance``: every model's space gains its weighting (weight or none), the
    studies get their own names, and the written preset carries the trial's choice."""
    optuna = pytest.importorskip("optuna")
    from et_graph.detectors import SEARCH_SPACES
    from et_graph.tuning.anomaly import CLASS_BALANCE_SWITCHES, search_space

    assert set(CLASS_BALANCE_SWITCHES) == set(SEARCH_SPACES)
    for model, (section, name) in CLASS_BALANCE_SWITCHES.items():
        study = optuna.create_study()
        plain = study.ask()
        assert name not in SEARCH_SPACES[model](plain).get(section, {})
        switched = study.ask()
        assert search_space(model, class_balance=True)(switched)[section][name] in (
            "weight", "none")
        assert switched.params[name] in ("weight", "none")
    data = planted_anomaly_graph(200, seed=4)
    result = tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=3),
                          f"sqlite:///{tmp_path}/cb.db", out=tmp_path, data=data,
                          class_balance=True)
    assert result["models"]["gbt"]["study"].endswith("-gbt-class-balance")
    preset = load_file(result["presets"]["gbt"])
    best = result["models"]["gbt"]["best_params"]["class_balance"]
    assert preset["gbt"]["class_balance"] == best
    reloaded = merge(AnomalyConfig(), preset)
    value = AnomalyObjective(reloaded, "gbt", data=data)()
    assert value == pytest.approx(result["models"]["gbt"]["best_value"], abs=1e-12)
    with pytest.raises(ValueError, match="--tune-class-balance applies to `tune anomaly`"):
        cli_main(["tune", "tudataset", "--tune-class-balance", "--trials", "1"])


def test_tune_cli_end_to_end(tmp_path):
    graph = tmp_path / "g.pt"
    import torch

    torch.save(planted_anomaly_graph(200, seed=4), graph)
    out = tmp_path / "out"
    code = cli_main(["tune", "anomaly", "--trials", "2", "--timeout-minutes", "2",
                     "--storage", f"sqlite:///{tmp_path}/cli.db", "--models", "gbt",
                     "--data", str(graph), "--out", str(out), *SMALL])
    assert code == 0
    assert (out / "best_gbt.toml").exists() and (out / "study_report.md").exists()
    # the budget's inequalities are said where the budget is (from a fairness audit)
    assert "Pruned trials count toward the trial budget" in (out / "study_report.md").read_text(
        encoding="utf-8")
    with pytest.raises(ValueError, match="trials must be positive"):
        cli_main(["tune", "anomaly", "--trials", "0"])


def test_a_relative_data_path_is_written_absolute(tmp_path, monkeypatch):
    """The preset is run later from anywhere: a path relative to where the study ran would
    name nothing there."""
    import torch

    (tmp_path / "files").mkdir()
    torch.save(planted_anomaly_graph(200, seed=4), tmp_path / "files" / "g.pt")
    monkeypatch.chdir(tmp_path)
    code = cli_main(["tune", "anomaly", "--trials", "1", "--storage",
                     f"sqlite:///{tmp_path}/rel.db", "--models", "gbt", "--data", "files/g.pt",
                     "--out", "out", *SMALL])
    assert code == 0
    preset = load_file(tmp_path / "out" / "best_gbt.toml")
    assert preset["data"]["data"] == str(tmp_path.resolve() / "files" / "g.pt")


def test_tune_cli_refuses_no_trials():
    with pytest.raises(ValueError, match="trials must be positive"):
        cli_main(["tune", "anomaly", "--trials", "0"])


TUNED = sorted((Path(__file__).resolve().parents[1] / "configs" / "anomaly" / "tuned")
               .glob("*.toml"))


@pytest.mark.parametrize("path", TUNED, ids=lambda p: p.stem)
def test_tuned_anomaly_presets_name_one_model_and_their_dataset(path):
    config = merge(AnomalyConfig(), load_file(path))
    # benchmarks/anomaly_tuned.py writes one preset per model, run on its own; a later revision
    # of a model's preset (a study continued elsewhere) carries a number: inj_amazon-gbt2
    name = f"{config.data.dataset}-{config.protocol.models}"
    assert path.stem == name or (path.stem[len(name):].isdigit() and path.stem.startswith(name))
    assert config.protocol.model_names() == [config.protocol.models]
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    meta = tomllib.loads(path.read_text(encoding="utf-8"))["meta"]
    assert meta["metric"] == "validation auroc" and 0.5 < meta["best_validation"] <= 1.0


def test_resumed_study_whose_best_trial_predates_a_new_search_parameter(tmp_path):
    # GBT's space gained max_features after studies had been run; the best trial of such a
    # study must give back the config it ran with (max_features at its base value) rather
    # than fail when the tuner writes its preset.
    import optuna

    from et_graph.detectors.config import gbt_space
    from et_graph.tuning.cli import fixed_settings
    from et_graph.tuning.study import space_overrides

    old = {"max_iter": 150, "learning_rate": 0.05, "max_leaf_nodes": 20, "min_samples_leaf": 30,
           "l2_regularization": 0.01, "features": "x_mean"}
    # Today's GBT space without max_features is the space such an old study ran with.
    live = optuna.create_study().ask()
    gbt_space(live)
    distributions = {k: d for k, d in live.distributions.items() if k != "max_features"}
    assert set(distributions) == set(old)
    # A value no AUROC reaches, so that this old trial stays the study's best.
    frozen = optuna.trial.create_trial(params=old, distributions=distributions, value=2.0)
    assert space_overrides(gbt_space, frozen) == {"model": old}
    data = planted_anomaly_graph(200, seed=4)
    config = parse(AnomalyConfig, [*SMALL, "--max-features", "0.3"])
    objective = AnomalyObjective(config, "gbt", data=data)
    gbt = objective.trial_config(frozen).gbt
    assert (gbt.max_iter, gbt.features, gbt.max_features) == (150, "x_mean", 0.3)
    # Resuming the study with today's space adds trials and writes the old best as the preset.
    # (The old study ran with --max-features 0.3, a fixed setting then, stored as such.)
    name = f"anomaly-{getattr(data, 'name', None) or config.data.dataset}-gbt"

    def old_study(path):
        storage = f"sqlite:///{path}"
        study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
        study.add_trial(frozen)
        # what that run stored: its fixed settings, gbt.max_features = 0.3 among them
        study.set_user_attr("settings", fixed_settings(config, "anomaly"))
        return storage

    result = tune_anomaly(config, ["gbt"], TuneBudget(trials=2), old_study(tmp_path / "old.db"),
                          out=tmp_path, data=data)
    summary = result["models"]["gbt"]
    assert summary["trial_numbers"] == [0, 1] and summary["best_trial"] == 0
    preset = load_file(result["presets"]["gbt"])["gbt"]
    assert (preset["max_iter"], preset["features"], preset["max_features"]) == (150, "x_mean", 0.3)
    # Resumed under another base value, the old trial would be replayed (and its preset
    # written) with a value it never ran with: refused, naming it (an audit's finding).
    with pytest.raises(ValueError, match=r"gained 'max_features'.*gbt\.max_features = 1\.0 "
                                         r"\(they ran with 0\.3\)"):
        tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=2),
                     old_study(tmp_path / "other.db"), out=tmp_path / "other", data=data)


def test_a_study_from_before_the_baselines_depth_resumes_only_with_the_depth_it_ran_with(
        tmp_path):
    """An audit deleted the trials' layers (as a study from before session 63 holds them) and
    resumed with --baseline-layers 3: the preset said 3 layers beside a two-layer score."""
    import sqlite3

    data = planted_anomaly_graph(200, seed=4)
    storage_path = tmp_path / "old.db"
    storage = f"sqlite:///{storage_path}"
    tune_anomaly(parse(AnomalyConfig, SMALL), ["mlp"], TuneBudget(trials=2), storage,
                 out=tmp_path / "first", data=data)
    with sqlite3.connect(storage_path) as db:
        assert db.execute("delete from trial_params where param_name = 'layers'").rowcount == 2
    with pytest.raises(ValueError, match=r"gained 'layers'.*baselines\.baseline_layers = 3 "
                                         r"\(they ran with 2\)"):
        tune_anomaly(parse(AnomalyConfig, [*SMALL, "--baseline-layers", "3"]), ["mlp"],
                     TuneBudget(trials=3), storage, out=tmp_path / "flag", data=data)
    result = tune_anomaly(parse(AnomalyConfig, SMALL), ["mlp"], TuneBudget(trials=3), storage,
                          out=tmp_path / "plain", data=data)
    preset = merge(AnomalyConfig(), load_file(result["presets"]["mlp"]))
    best = result["models"]["mlp"]
    if best["best_trial"] < 2:  # an old trial: replayed with the two layers it ran with
        assert preset.baselines.baseline_layers == 2
    value = AnomalyObjective(preset, "mlp", data=data)()
    assert value == pytest.approx(best["best_value"], abs=1e-12)


def test_an_objective_called_from_python_gives_the_caller_its_random_streams_back():
    """AnomalyObjective's trial seeded the global generator with 0 and left it there: the
    caller's next draw was the seed-0 one (a determinism audit; the CLI's tuner was
    wrapped, a Python caller of the public objective was not)."""
    import random

    import numpy as np

    data = planted_anomaly_graph(120, seed=4)
    objective = AnomalyObjective(parse(AnomalyConfig, SMALL), "mlp", data=data)
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    states = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    first = objective()
    assert torch.equal(torch.get_rng_state(), states[0])
    assert np.array_equal(np.random.get_state()[1], states[1]) and random.getstate() == states[2]
    torch.manual_seed(7)  # and the trial's value does not depend on the caller's streams
    assert objective() == first


def test_the_pruner_reads_the_tuned_metric_every_epoch():
    """Tuning AUPRC, the pruner once read the selection score (macro-F1) instead: the
    validation metrics lacked auprc and the callback fell back silently."""
    from et_graph.tuning.study import pruning_callback

    data = planted_anomaly_graph(200, seed=4)
    split = make_splits(data, "paper", 1, 0.4, 2)[0]
    data.train_mask, data.val_mask, data.test_mask = split.masks(200)
    from et_graph.detectors import MLPDetector

    det = MLPDetector(epochs=2).fit(data)
    row = det.history_[-1]
    assert {"val_auroc", "val_auprc", "val_f1_macro"} <= set(row)

    reported = []

    class Trial:
        def report(self, value, step):
            reported.append(value)

        def should_prune(self):
            return False

    class Validation:
        metrics = {"auroc": 0.7, "auprc": 0.3, "f1_macro": 0.5}
        score = 0.5

    pruning_callback(Trial(), "auprc")(0, Validation())
    assert reported == [0.3]


def test_a_preset_tuned_on_an_in_memory_graph_cannot_run_on_the_default_dataset(tmp_path):
    """It used to say dataset = "tolokers" and run there; and its run.out was the tuning
    folder, so its results landed beside the study report."""
    data = planted_anomaly_graph(200, seed=4)
    data.name = "planted"
    result = tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=1), None,
                          out=tmp_path / "tune", data=data)
    preset = load_file(result["presets"]["gbt"])
    assert "IN-MEMORY GRAPH planted" in preset["data"]["data"]
    assert preset["run"]["out"] == "none"  # the task's default (no output), not tmp_path
    assert "data_note = \"tuned on an in-memory graph (planted)" in Path(
        result["presets"]["gbt"]).read_text(encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="IN-MEMORY GRAPH"):
        cli_main(["anomaly", "--config", result["presets"]["gbt"], "--no-progress"])


def test_tuning_a_protocol_with_several_splits_warns_that_later_test_splits_saw_it():
    """From an audit: the tuner selects on the first split only, and under --vary-split (or a
    dataset's several gadbench masks) later seeds' test nodes include that split's validation
    nodes, with no word."""
    import warnings

    import torch

    data = planted_anomaly_graph(200, seed=4)
    with pytest.warns(ConfigWarning, match="has seen part of its test nodes"):
        AnomalyObjective(parse(AnomalyConfig, [*SMALL, "--vary-split"]), "gbt", data=data)
    masked = data.clone()
    order = torch.stack([torch.randperm(200, generator=torch.Generator().manual_seed(s))
                         for s in range(3)], dim=1)
    masked.train_mask, masked.val_mask, masked.test_mask = (
        order < 80, (order >= 80) & (order < 120), order >= 120)
    with pytest.warns(ConfigWarning, match="the dataset's masks"):
        AnomalyObjective(parse(AnomalyConfig, [*SMALL, "--protocol", "gadbench"]), "gbt",
                         data=masked)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        AnomalyObjective(parse(AnomalyConfig, SMALL), "gbt", data=data)  # one split: no word


def test_flags_a_study_overrides_or_no_model_reads_are_named():
    """``tune anomaly --models et --hidden 32`` tuned the width anyway, and ``tune tudataset
    --models gin --blocks 3`` set a model that did not run, both without a word. Flags of
    untuned settings of a chosen model stay silent."""
    import warnings

    from et_graph.config import parse_given
    from et_graph.tuning.cli import task_config, warn_flags_of_tuning

    def named(task, *argv, **switches):
        config, given = parse_given(task_config(task), list(argv))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            names = warn_flags_of_tuning(task, config, given, **switches)
        assert bool(caught) == bool(names)
        return names

    assert named("anomaly", "--models", "et,gbt", "--hidden", "32", "--epochs", "5",
                 "--max-iter", "50") == ["et.hidden", "gbt.max_iter"]
    assert named("anomaly", "--models", "mlp", "--baseline-hidden", "32", "--hidden", "8") == [
        "et.hidden", "baselines.baseline_hidden"]
    assert named("anomaly", "--models", "et", "--class-balance", "none") == []
    assert named("anomaly", "--models", "et", "--class-balance", "none",
                 class_balance=True) == ["train.class_balance"]
    assert named("tudataset", "--models", "gin", "--blocks", "3", "--gin-layers", "3") == [
        "et.blocks", "baselines.gin_layers"]
    assert named("tudataset", "--models", "et", "--noise-std", "0.1") == []
    assert named("gnnbenchmark", "--models", "gin", "--baseline-layers", "3") == [
        "baselines.baseline_layers"]


def test_a_study_resumes_only_on_the_data_and_settings_its_trials_read(tmp_path):
    """From a tuning audit: (1) a study was matched by name and settings only, so the same
    relative file name in another folder (other labels) continued the first one's study and
    wrote its score into the second one's preset; (2) a resume was refused over settings no
    trial of that model reads (which models run, the task's seed count, ET's epochs for the
    trees), and (3) a refusal of the second model's study came after the first model's new
    trials, with no report."""
    import optuna

    storage = f"sqlite:///{tmp_path}/study.db"
    graph = planted_anomaly_graph(200, seed=4)
    flipped = graph.clone()
    flipped.y = 1 - graph.y
    tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=1), storage,
                 out=tmp_path / "a", data=graph)
    with pytest.raises(ValueError, match=r"other fixed settings \(data\.digest"):
        tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=2), storage,
                     out=tmp_path / "b", data=flipped)
    more = parse(AnomalyConfig, [*SMALL, "--seeds", "2", "--models", "gbt,mlp",
                                 "--epochs", "4", "--no-energy-row"])
    again = tune_anomaly(more, ["gbt"], TuneBudget(trials=2), storage, out=tmp_path / "c",
                         data=graph)
    assert again["models"]["gbt"]["trial_numbers"] == [0, 1]
    tune_anomaly(parse(AnomalyConfig, SMALL), ["mlp"], TuneBudget(trials=1), storage,
                 out=tmp_path / "d", data=graph)
    # The MLP's study refuses another epoch count (the trees' does not read it); the trees'
    # study, first in line, takes no new trial before that refusal.
    with pytest.raises(ValueError, match=r"anomaly-planted-mlp.*train\.epochs: 3 -> 5"):
        tune_anomaly(parse(AnomalyConfig, [*SMALL, "--epochs", "5"]), ["gbt", "mlp"],
                     TuneBudget(trials=3), storage, out=tmp_path / "e", data=graph)
    trees = optuna.load_study(study_name="anomaly-planted-gbt", storage=storage)
    assert len(trees.trials) == 2


def test_the_report_says_which_labels_trials_read_and_counts_unfinished_trials(tmp_path):
    """From a tuning audit: the graph-classification report said "test labels are never
    read", though with several tuned folds one fold's test graphs train another; a trial
    killed mid-run stayed RUNNING and no column showed it; the MLP's best parameters were
    shown under GIN's names (gin_hidden) while its preset sets mlp_hidden."""
    import optuna

    from et_graph.tuning.study import study_summary, write_report

    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.5))
    study.ask()  # started and never told: a trial its run was killed during
    summary = {**study_summary(study, 1.0), "best_settings": {"baselines.mlp_hidden": 64}}
    write_report(tmp_path, "tudataset", "MUTAG", "accuracy", TuneBudget(trials=1),
                 {"structure_agnostic": summary}, {}, parse(AnomalyConfig, []),
                 labels_read="the labels of the first 2 test folds enter the selection")
    text = (tmp_path / "study_report.md").read_text(encoding="utf-8")
    assert "(the labels of the first 2 test folds enter the selection)" in text
    assert "test labels are never read" not in text and "the trees" not in text
    assert "| structure_agnostic | 1 | 0 | 0 | 1 | 0.5000 |" in text
    assert '`{"baselines.mlp_hidden": 64}`' in text


def test_storage_urls_that_cannot_persist_or_open_are_named():
    """From a tuning audit: sqlite:/// (in memory) ran and kept nothing; a database without
    its driver ended in a raw ImportError; the hint offered "None", which no flag can pass."""
    from et_graph.tuning.cli import _ensure_sqlite_folder

    with pytest.raises(ValueError, match="names no file, so nothing would persist"):
        _ensure_sqlite_folder("sqlite:///")
    with pytest.raises(ValueError, match="cannot be opened here"):
        _ensure_sqlite_folder("nosuchdatabase://user@host/db")
    with pytest.raises(ValueError, match="in Python, storage=None"):
        _ensure_sqlite_folder("bogus")


def test_the_study_outputs_go_to_out_given_on_the_command_line_only(tmp_path, monkeypatch):
    """From a tuning audit: a preset given with --config carries the task's results folder in
    run.out, and the study's report and presets were written there, not to runs/tune/<task>
    as documented."""
    from et_graph.tuning import cli as tune_cli

    seen = {}
    monkeypatch.setattr(tune_cli, "tune_anomaly",
                        lambda config, models, budget, storage, metric, out, *args, **kwargs:
                        seen.setdefault("out", out))
    preset = tmp_path / "preset.toml"
    preset.write_text('[run]\nout = "results/anomaly/mine"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    tune_cli.main(["anomaly", "--config", str(preset), "--models", "gbt"])
    assert seen.pop("out") == Path("runs/tune/anomaly")
    tune_cli.main(["anomaly", "--config", str(preset), "--models", "gbt", "--out", "mine"])
    assert seen.pop("out") == Path("mine")


def test_flags_the_tuner_never_reads_are_named():
    """From a tuning audit: tune anomaly built its detectors without --inference-chunk-size or
    --checkpoint-dir, and said nothing."""
    import warnings

    from et_graph.config import parse_given
    from et_graph.tuning.cli import task_config, warn_flags_of_tuning

    config, given = parse_given(task_config("anomaly"), [
        "--models", "et", "--inference-chunk-size", "64", "--checkpoint-dir", "ck"])
    with pytest.warns(ConfigWarning, match=r"protocol\.inference_chunk_size, "
                                            r"run\.checkpoint_dir: the tuner's trials never"):
        assert warn_flags_of_tuning("anomaly", config, given) == [
            "protocol.inference_chunk_size", "run.checkpoint_dir"]
    config, given = parse_given(task_config("tudataset"), ["--models", "gin", "--max-folds", "2"])
    with pytest.warns(ConfigWarning, match=r"protocol\.max_folds"):
        warn_flags_of_tuning("tudataset", config, given)
    config, given = parse_given(task_config("anomaly"), ["--models", "et,gbt"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        assert warn_flags_of_tuning("anomaly", config, given) == []


def test_the_study_report_is_strict_json(tmp_path):
    # (from an audit) study_report.json was the one results file written with Python's
    # json.dumps: a diverged trial's inf came out as Infinity, which other parsers refuse
    from et_graph.tuning.study import write_report

    summary = {"study": "s", "trials": {"complete": 1, "pruned": 0, "fail": 0, "running": 0},
               "trial_numbers": [0], "direction": "minimize", "best_value": float("inf"),
               "best_trial": 0, "best_params": {"lr": 0.1}, "seconds_this_run": 1.0,
               "history": [(0, float("inf"))]}
    write_report(tmp_path, "anomaly", "planted", "auroc", TuneBudget(trials=1),
                 {"et": summary}, {"et": tmp_path / "et.toml"}, parse(AnomalyConfig, []))
    text = (tmp_path / "study_report.json").read_text(encoding="utf-8")
    report = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert report["models"]["et"]["best_value"] is None


def test_a_sqlite_storage_under_home_is_refused_with_the_path_written_out():
    # (from an audit) SQLAlchemy opened the literal "~": a bare OperationalError traceback
    from et_graph.tuning.cli import _ensure_sqlite_folder

    with pytest.raises(ValueError, match="do not expand ~"):
        _ensure_sqlite_folder("sqlite:///~/tune.db")


def test_a_tune_into_an_earlier_tunes_folder_names_what_it_left(tmp_path):
    # (from an audit) a second tune into one --out left the first one's best_gbt.toml beside
    # the new report, with no word
    import torch

    graph = tmp_path / "g.pt"
    torch.save(planted_anomaly_graph(200, seed=4), graph)
    out = tmp_path / "out"
    out.mkdir()
    (out / "best_et.toml").write_text("# an earlier tune's preset\n", encoding="utf-8")
    with pytest.warns(RuntimeWarning, match=r"not rewritten by this one: best_et\.toml"):
        cli_main(["tune", "anomaly", "--trials", "1", "--timeout-minutes", "2",
                  "--storage", f"sqlite:///{tmp_path}/cli.db", "--models", "gbt",
                  "--data", str(graph), "--out", str(out), *SMALL])


def test_tune_help_says_where_a_study_writes():
    # (from a CLI audit) --out's help was the task's: "none = do not write ... results.json",
    # or "default: runs/tudataset", where tune writes runs/tune/<task>
    from et_graph.tuning.cli import build_parser

    for task in ("anomaly", "tudataset", "gnnbenchmark"):
        text = " ".join(build_parser(task).format_help().split())
        assert f"study_report.{{md,json}}, optimization_history.png (default: runs/tune/{task})" \
            in text
    assert "et-graph tune TASK --help" in build_parser().format_help()


def test_a_study_gives_back_optunas_log_level(tmp_path):
    # (from an audit of library embedding) tuning left Optuna's process-wide level at WARNING
    import optuna

    from et_graph.tuning.study import run_study

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        run_study("quiet", lambda trial: trial.suggest_float("x", 0, 1), TuneBudget(trials=2),
                  None, progress=False)
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
    finally:
        optuna.logging.set_verbosity(before)  # (it left WARNING: a test-isolation audit)


def test_tuning_one_metric_while_epochs_are_chosen_on_another_is_said():
    # (engine audit) the tuner scored AUROC at the epoch of the best F1 (select_metric's
    # default) without a word; the TU and GNNBenchmark tuners choose on what they tune
    import warnings

    from et_graph.tuning.anomaly import AnomalyObjective

    data = planted_anomaly_graph(200, seed=4)
    with pytest.warns(ConfigWarning, match="best validation f1_macro .* --select-metric auroc"):
        AnomalyObjective(parse(AnomalyConfig, SMALL), "mlp", "auroc", data=data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        AnomalyObjective(parse(AnomalyConfig, [*SMALL, "--select-metric", "auroc"]), "mlp",
                         "auroc", data=data)
        AnomalyObjective(parse(AnomalyConfig, SMALL), "gbt", "auroc", data=data)  # no epochs


def test_tuning_gives_the_caller_its_threads_and_random_stream_back(tmp_path):
    # (memory audit) a tuning pinned the caller's process to --threads and moved torch's
    # random stream, as a task run (process_state_kept) and a detector's fit do not
    data = planted_anomaly_graph(200, seed=4)
    config = parse(AnomalyConfig, [*SMALL, "--threads", "1", "--quiet"])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(5)
        expected = torch.rand(2)
        torch.manual_seed(5)
        tune_anomaly(config, ["mlp"], TuneBudget(trials=1), None, out=tmp_path / "t",
                     data=data)
        assert torch.get_num_threads() == 2 and torch.equal(torch.rand(2), expected)
    finally:
        torch.set_num_threads(before)


def test_the_best_trial_is_chosen_within_the_budget(tmp_path):
    # (tuning audit) a study resumed with a smaller --trials kept its later trials, and its
    # best (the 7th trial of a 6-trial budget) went into the table beside models held to it
    import optuna

    from et_graph.tuning.study import (
        TuneBudget,
        best_within_budget,
        study_summary,
        write_report,
    )

    study = optuna.create_study(direction="maximize")
    for value in (0.5, 0.7, 0.6, 0.9):
        trial = study.ask()
        study.tell(trial, value)
    pruned = study.ask()
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    assert best_within_budget(study, 3).number == 1
    assert best_within_budget(study, None).number == 3
    summary = study_summary(study, 1.0, 3)
    assert (summary["best_trial"], summary["best_value"]) == (1, 0.7)
    lower = optuna.create_study(direction="minimize")
    for value in (0.3, 0.2, 0.2):
        trial = lower.ask()
        lower.tell(trial, value)
    assert best_within_budget(lower, 3).number == 1  # ties: the earlier trial
    config = parse(AnomalyConfig, SMALL)
    write_report(tmp_path, "anomaly", "x", "auroc", TuneBudget(trials=3),
                 {"et": summary, "gbt": study_summary(lower, 1.0, 3)}, {}, config)
    report = (tmp_path / "study_report.md").read_text(encoding="utf-8")
    assert "the best is chosen among each study's first trials up to the budget" in report


def test_a_quiet_tuning_prints_no_report(tmp_path, capsys):
    """--quiet was accepted by et-graph tune and ignored: the study report still printed."""
    data = planted_anomaly_graph(200, seed=4)
    config = parse(AnomalyConfig, [*SMALL, "--quiet"])
    tune_anomaly(config, ["gbt"], TuneBudget(trials=1), f"sqlite:///{tmp_path}/q.db",
                 out=tmp_path / "q", data=data)
    assert "# Tuning" not in capsys.readouterr().out
    assert (tmp_path / "q" / "study_report.md").exists()
    # (CLI audit) without --quiet the report ends with where it and the studies are kept
    tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=1),
                 f"sqlite:///{tmp_path}/q.db", out=tmp_path / "loud", data=data)
    assert (f"Written to {(tmp_path / 'loud').resolve()} (study_report.md" in
            capsys.readouterr().out)


def test_tuning_in_a_log_writes_no_redraws(tmp_path, capsys):
    """Optuna's own tqdm bar wrote carriage returns into a redirected log."""
    data = planted_anomaly_graph(200, seed=4)
    config = parse(AnomalyConfig, [a for a in SMALL if a != "--no-progress"])
    assert config.run.progress
    tune_anomaly(config, ["gbt"], TuneBudget(trials=2), f"sqlite:///{tmp_path}/p.db",
                 out=tmp_path / "p", data=data)
    assert "\r" not in capsys.readouterr().err


def test_a_trial_ended_by_ctrl_c_is_not_logged_with_a_traceback():
    """Optuna logged "Trial 0 failed ... KeyboardInterrupt()" with a torch traceback before
    the command's one line "interrupted" (a CLI audit)."""
    import logging

    from et_graph.tuning.study import run_study

    class Recorder(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    recorder = Recorder()
    logging.getLogger("optuna").addHandler(recorder)
    try:
        def interrupted(trial):
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            run_study("ctrl-c", interrupted, TuneBudget(trials=1), None, progress=False)
        assert not [m for m in recorder.messages if "failed" in m]

        def diverged(trial):  # another failure is still logged
            raise FloatingPointError("loss is NaN")

        run_study("nan-once", diverged, TuneBudget(trials=1, timeout_minutes=1), None,
                  progress=False)
        assert [m for m in recorder.messages if "failed" in m]
    finally:
        logging.getLogger("optuna").removeHandler(recorder)


def test_storage_that_cannot_be_a_database_is_refused_in_one_line(tmp_path):
    """A folder, a file standing where the folder goes, or a file that is no database gave
    SQLAlchemy tracebacks of a hundred lines (a CLI audit)."""
    from et_graph.tuning.cli import _ensure_sqlite_folder
    from et_graph.tuning.study import study_or_none

    with pytest.raises(ValueError, match="names a folder"):
        _ensure_sqlite_folder(f"sqlite:///{tmp_path}")
    (tmp_path / "results.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match="a file stands where its folder"):
        _ensure_sqlite_folder(f"sqlite:///{tmp_path}/results.json/tune.db")
    with pytest.raises(ValueError, match="not an SQLite database"):
        _ensure_sqlite_folder(f"sqlite:///{tmp_path}/results.json")
    with pytest.raises(ValueError, match="cannot be opened as an Optuna database"):
        study_or_none("x", f"sqlite:///{tmp_path}/missing/folder/t.db")
    _ensure_sqlite_folder(f"sqlite:///{tmp_path}/new/tune.db")  # made, as before


def test_the_task_comes_first_and_presets_leave_the_sessions_display_out(tmp_path):
    """`tune --trials 1 anomaly` failed on an AttributeError (the task's flags unknown), and a
    --quiet tuning wrote quiet = true into every preset, whose runs then printed nothing (a CLI
    audit)."""
    with pytest.raises(ValueError, match="name the task first"):
        cli_main(["tune", "--trials", "1", "anomaly"])
    data = planted_anomaly_graph(120, seed=4)
    config = parse(AnomalyConfig, [*SMALL, "--quiet", "--no-progress"])
    result = tune_anomaly(config, ["mlp"], TuneBudget(trials=1), None, out=tmp_path, data=data)
    preset = merge(AnomalyConfig(), load_file(result["presets"]["mlp"]))
    assert preset.run.quiet is False and preset.run.progress is True


def test_a_study_is_never_louder_than_the_callers_optuna_verbosity():
    """run_study set Optuna's level to WARNING for its length: a caller who chose ERROR got the
    failed trials' tracebacks on standard error (a logging audit)."""
    import logging

    import optuna

    from et_graph.tuning.study import run_study

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger("optuna").addHandler(handler)
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        def diverged(trial):
            raise FloatingPointError("loss is NaN")

        run_study("quiet-caller", diverged, TuneBudget(trials=1, timeout_minutes=1), None,
                  progress=False)
        assert optuna.logging.get_verbosity() == optuna.logging.ERROR
        assert not [message for message in seen if "failed" in message]
    finally:
        optuna.logging.set_verbosity(level)
        logging.getLogger("optuna").removeHandler(handler)


class _Validation:
    def __init__(self, value):
        self.metrics, self.score = {"auroc": value}, value


def _epochs(seconds_per_epoch, epochs=50):
    """An objective whose trial reports an epoch every ``seconds_per_epoch`` through the
    tuner's pruning hook, as the engine's on_epoch does."""
    import time

    from et_graph.tuning.study import pruning_callback

    def objective(trial):
        report = pruning_callback(trial, "auroc")
        x = trial.suggest_float("x", 0, 1)
        for epoch in range(epochs):
            time.sleep(seconds_per_epoch)
            report(epoch, _Validation(x))
        return x
    return objective


def test_a_trial_running_when_the_time_limit_passes_stops_at_its_next_epoch():
    """Optuna checks its time limit only between trials: one trial of 50 x 0.1 s ran 5 s past
    a 0.6 s limit (a tuning audit saw 18 s past 3 s)."""
    import time

    from et_graph.tuning.study import STOPPED_BY_TIME, run_study, study_summary

    start = time.perf_counter()
    study = run_study("deadline", _epochs(0.1), TuneBudget(trials=3, timeout_minutes=0.01,
                                                           prune_warmup=100), None,
                      progress=False)
    assert time.perf_counter() - start < 2.5  # 0.6 s and one epoch, not 5 s
    [trial] = study.trials
    assert trial.state.name == "PRUNED" and trial.user_attrs[STOPPED_BY_TIME]
    summary = study_summary(study, 1.0, 3)
    # cut by the limit, not by the pruner: unfinished, and no trial of the budget (a review)
    assert summary["trials"]["stopped_by_time_limit"] == 1 and summary["trials"]["pruned"] == 0
    from et_graph.tuning.study import _finished

    assert _finished(study) == []
    assert summary["seconds_all_runs"] == pytest.approx(time.perf_counter() - start, abs=0.5)
    # never fewer seconds in all runs than in this one (the caller's clock starts first)
    assert study_summary(study, 100.0, 3)["seconds_all_runs"] == 100.0


def test_the_time_limit_binds_every_run_of_a_study_together(tmp_path):
    """Each resumed run got a fresh limit, so a model stopped and resumed had more time than
    one run straight through (a tuning audit)."""
    from et_graph.tuning.study import SECONDS_SPENT, run_study

    storage = f"sqlite:///{tmp_path}/time.db"
    budget = TuneBudget(trials=20, timeout_minutes=0.01, prune_warmup=100)
    # (a Study reads its storage live: the counts are taken after each run)
    first = run_study("spent", _epochs(0.05, epochs=2), budget, storage, progress=False)
    spent, ran = first.user_attrs[SECONDS_SPENT], len(first.trials)
    assert spent >= 0.6 and 0 < ran < 20
    with pytest.warns(ConfigWarning, match="earlier runs spent its time limit"):
        again = run_study("spent", _epochs(0.05, epochs=2), budget, storage, progress=False)
    assert len(again.trials) == ran  # no trial ran
    assert again.user_attrs[SECONDS_SPENT] == spent
    more = TuneBudget(trials=20, timeout_minutes=0.02, prune_warmup=100)
    longer = run_study("spent", _epochs(0.05, epochs=2), more, storage, progress=False)
    assert len(longer.trials) > ran
    assert 1.2 <= longer.user_attrs[SECONDS_SPENT] < 2.5  # 0.6 s more, not 1.2 s more


def test_a_resume_under_another_sampler_seed_is_refused(tmp_path):
    from et_graph.tuning.study import run_study

    storage = f"sqlite:///{tmp_path}/seed.db"
    run_study("seeded", lambda trial: trial.suggest_float("x", 0, 1), TuneBudget(trials=2),
              storage, progress=False)
    with pytest.raises(ValueError, match="drawn with --sampler-seed 0, not 5"):
        run_study("seeded", lambda trial: trial.suggest_float("x", 0, 1),
                  TuneBudget(trials=3, seed=5), storage, progress=False)
    run_study("seeded", lambda trial: trial.suggest_float("x", 0, 1), TuneBudget(trials=3),
              storage, progress=False)  # the same seed resumes


def test_a_trial_out_of_memory_fails_alone_and_ctrl_c_counts_as_unfinished(tmp_path):
    from et_graph.tuning.study import run_study, study_summary

    def sometimes_too_big(trial):
        x = trial.suggest_float("x", 0, 1)
        if trial.number == 1:
            raise MemoryError("a trial's width that does not fit")
        return x

    study = run_study("oom", sometimes_too_big, TuneBudget(trials=3), None, progress=False)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    storage = f"sqlite:///{tmp_path}/ctrl-c.db"

    def interrupted(trial):
        trial.suggest_float("x", 0, 1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study("ctrl-c", interrupted, TuneBudget(trials=2), storage, progress=False)
    study = run_study("ctrl-c", lambda trial: trial.suggest_float("x", 0, 1),
                      TuneBudget(trials=2), storage, progress=False)
    counts = study_summary(study, 1.0, 2)["trials"]
    assert counts["fail"] == 0 and counts["interrupted"] == 1 and counts["complete"] == 2


def test_trials_marked_running_are_named_on_resume(tmp_path):
    """Two processes on one study draw the same trials; a run killed without Ctrl-C leaves
    trials marked running. Either way a resume says so."""
    import optuna

    from et_graph.tuning.study import run_study

    storage = f"sqlite:///{tmp_path}/running.db"
    run_study("busy", lambda trial: trial.suggest_float("x", 0, 1), TuneBudget(trials=1),
              storage, progress=False)
    optuna.load_study(study_name="busy", storage=storage).ask()  # left running
    with pytest.warns(ConfigWarning, match=r"holds 1 trial\(s\) marked running \(1\)"):
        run_study("busy", lambda trial: trial.suggest_float("x", 0, 1), TuneBudget(trials=2),
                  storage, progress=False)


def test_a_read_only_database_is_named_in_one_line(tmp_path):
    from et_graph.tuning.cli import _ensure_sqlite_folder
    from et_graph.tuning.study import run_study

    storage = f"sqlite:///{tmp_path}/ro.db"
    run_study("made", lambda trial: trial.suggest_float("x", 0, 1), TuneBudget(trials=1),
              storage, progress=False)
    read_only = f"sqlite:///file:{tmp_path}/ro.db?mode=ro&uri=true"
    _ensure_sqlite_folder(read_only)  # an SQLite URI: no folder "file:..." is made
    assert not Path("file:" + str(tmp_path)).exists()
    with pytest.raises(ValueError, match="cannot be written as an Optuna database"):
        run_study("new", lambda trial: trial.suggest_float("x", 0, 1), TuneBudget(trials=1),
                  read_only, progress=False)


def test_a_preset_says_how_its_study_found_it(tmp_path):
    from et_graph.config import read_file
    from et_graph.tuning.cli import shown_storage

    out = tmp_path / "out"
    tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=1, seed=3),
                 f"sqlite:///{tmp_path}/p.db", out=out, data=planted_anomaly_graph(120, seed=1))
    meta = read_file(out / "best_gbt.toml")["meta"]
    assert meta["storage"] == f"sqlite:///{tmp_path}/p.db"
    assert (meta["budget_trials"], meta["sampler_seed"], meta["finished_trials"]) == (1, 3, 1)
    assert meta["seconds_all_runs"] >= 0
    assert meta["budget_timeout_minutes"] == TuneBudget().timeout_minutes
    assert {"et_graph_version", "git_commit", "written_at"} <= set(meta)
    assert shown_storage("postgresql://me:secret@db/tune") == "postgresql://me:***@db/tune"
    # (session 70) the default's relative file is recorded from the working folder
    assert shown_storage("sqlite:///runs/tune.db?timeout=9") == \
        f"sqlite:///{Path.cwd()}/runs/tune.db?timeout=9"
    assert shown_storage("sqlite+pysqlite:///r.db") == f"sqlite+pysqlite:///{Path.cwd()}/r.db"
    for kept in ("sqlite:///file:r.db?mode=ro&uri=true", "sqlite:///~/t.db", "sqlite:///"):
        assert shown_storage(kept) == kept


def test_a_resume_under_another_sampler_seed_is_refused_before_any_study_runs(tmp_path):
    """A review: the check before the studies left the seed out, so the first model's study
    ran (and stored the new seed) before the second one's was refused, with no report."""
    storage = f"sqlite:///{tmp_path}/two.db"
    data = planted_anomaly_graph(120, seed=1)
    tune_anomaly(parse(AnomalyConfig, SMALL), ["mlp"], TuneBudget(trials=1), storage,
                 out=tmp_path / "a", data=data)
    with pytest.raises(ValueError, match="drawn with --sampler-seed 0, not 5"):
        tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt", "mlp"], TuneBudget(trials=2, seed=5),
                     storage, out=tmp_path / "b", data=data)
    import optuna

    assert "anomaly-planted-gbt" not in optuna.get_all_study_names(storage)


def test_the_time_limit_stops_a_trial_at_its_own_steps_and_reports_name_themselves(tmp_path):
    """A review: a TU trial ran all its folds, and a later GNNBenchmark seed all its epochs,
    past the limit (only the pruner's hook read it)."""
    import time

    import optuna

    from et_graph.tuning.study import (
        _DEADLINE,
        STOPPED_BY_TIME,
        deadline_callback,
        stop_at_deadline,
    )

    trial = optuna.create_study().ask()
    stop_at_deadline(trial, "fold 0")  # outside a study: nothing
    token = _DEADLINE.set(time.monotonic() - 1)
    try:
        with pytest.raises(optuna.TrialPruned, match="stopped at fold 0"):
            stop_at_deadline(trial, "fold 0")
        with pytest.raises(optuna.TrialPruned, match="stopped at epoch 3"):
            deadline_callback(trial)(3, None)
    finally:
        _DEADLINE.reset(token)
    assert trial.user_attrs[STOPPED_BY_TIME]
    out = tmp_path / "r"
    tune_anomaly(parse(AnomalyConfig, SMALL), ["gbt"], TuneBudget(trials=1),
                 f"sqlite:///{tmp_path}/r.db", out=out, data=planted_anomaly_graph(120, seed=1))
    report = json.loads((out / "study_report.json").read_text(encoding="utf-8"))
    assert report["meta"]["task"] == "tune anomaly"
    from et_graph.config import read_file

    written = read_file(out / "best_gbt.toml")["meta"]["written_at"]
    assert written.endswith("+00:00")  # UTC, as the results files' written_at


def test_a_storage_failure_after_ctrl_c_leaves_the_ctrl_c(tmp_path, monkeypatch):
    """A review: recording the run's seconds in a storage that fails replaced the Ctrl-C in
    flight by a ValueError (exit 2, not 130)."""
    import optuna

    from et_graph.exceptions import OutputWarning
    from et_graph.tuning import study as study_module

    def interrupted(trial):
        trial.suggest_float("x", 0, 1)
        raise KeyboardInterrupt

    real = optuna.study.Study.set_user_attr

    def failing(self, key, value):
        if key == study_module.SECONDS_SPENT:
            raise optuna.exceptions.StorageInternalError("disk I/O error")
        return real(self, key, value)

    monkeypatch.setattr(optuna.study.Study, "set_user_attr", failing)
    with pytest.warns(OutputWarning, match="seconds were not recorded"):
        with pytest.raises(KeyboardInterrupt):
            study_module.run_study("lost", interrupted, TuneBudget(trials=1),
                                   f"sqlite:///{tmp_path}/lost.db", progress=False)
    with pytest.raises(ValueError, match="cannot be written as an Optuna database"):
        study_module.run_study("lost2", lambda trial: trial.suggest_float("x", 0, 1),
                               TuneBudget(trials=1), f"sqlite:///{tmp_path}/lost.db",
                               progress=False)


def test_a_resumed_study_reaches_its_budget_past_a_trial_the_limit_cut(tmp_path):
    """A review: Optuna's MaxTrialsCallback counted the cut trial, which no budget counts, so
    a resumed study stopped one trial short."""
    import optuna

    from et_graph.tuning.study import STOPPED_BY_TIME, _finished, run_study, study_summary

    storage = f"sqlite:///{tmp_path}/cut.db"
    run_study("cut", lambda trial: trial.suggest_float("x", 0, 1), TuneBudget(trials=2),
              storage, progress=False)
    study = optuna.load_study(study_name="cut", storage=storage)
    study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.PRUNED, params={"x": 0.5},
        distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
        user_attrs={STOPPED_BY_TIME: True}, intermediate_values={0: 0.5}))
    study.add_trial(optuna.trial.create_trial(  # marked, then Ctrl-C'd before the prune
        state=optuna.trial.TrialState.FAIL, params={"x": 0.5},
        distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
        user_attrs={STOPPED_BY_TIME: True, "interrupted": True}))
    resumed = run_study("cut", lambda trial: trial.suggest_float("x", 0, 1),
                        TuneBudget(trials=4), storage, progress=False)
    assert len(_finished(resumed)) == 4
    counts = study_summary(resumed, 1.0, 4)["trials"]
    assert (counts["pruned"], counts["stopped_by_time_limit"], counts["interrupted"]) == (0, 1, 1)
