"""Registered detectors: a detector of your own as a model of `et-graph anomaly` and its tuner,
named in --models, loaded by --plugin, recorded in the results."""
import json
from dataclasses import dataclass, field

import helpers
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from et_graph.cli import console_main
from et_graph.cli import main as cli_main
from et_graph.config import load_file, merge, parse
from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import register_detector, registered_detectors, unregister_detector
from et_graph.detectors.base import BaseDetector
from et_graph.experiments import anomaly
from et_graph.protocols.anomaly_config import AnomalyConfig

pytestmark = pytest.mark.usefixtures("one_thread", "plugin_registries")


@dataclass
class LogisticSettings:
    c: float = 1.0


@dataclass
class LogisticConfig:
    model: LogisticSettings = field(default_factory=LogisticSettings)


class LogisticDetector(BaseDetector):
    """Logistic regression on the node features: the smallest supervised detector."""

    config_class = LogisticConfig

    def _fit(self, data, y, train, val):
        self.model_ = LogisticRegression(C=self.config.model.c, max_iter=500)
        self.model_.fit(data.x[train].numpy(), y[train].numpy())

    def _score(self, data):
        return torch.from_numpy(self.model_.predict_proba(data.x.numpy())[:, 1])


def make_logistic(config, seed, progress):
    # its L2 strength from a setting of the run config, so that a search space can set it
    return LogisticDetector(c=1.0 / (1e-3 + config.baselines.baseline_weight_decay), seed=seed)


def logistic_space(trial):
    return {"baselines": {
        "baseline_weight_decay": trial.suggest_float("weight_decay", 1e-3, 10.0, log=True)}}


def config(*argv):
    return parse(AnomalyConfig, ["--no-progress", *argv])


def test_a_registered_detector_is_a_baseline_row_of_the_run(tmp_path):
    data = planted_anomaly_graph(300, seed=2)
    calls = []

    def factory(config, seed, progress):
        calls.append((config.baselines.baseline_weight_decay, seed, progress))
        return make_logistic(config, seed, progress)

    register_detector("logreg", factory)
    out = tmp_path / "run"
    results = anomaly.run(
        config("--models", "et,logreg", "--seeds", "2", "--epochs", "2", "--hidden", "16",
               "--no-energy-row", "--baseline-weight-decay", "0.5", "--out", str(out)),
        data=data, detectors={"own_logreg": lambda seed: LogisticDetector(c=1 / 0.501,
                                                                          seed=seed)})
    # built once before any training (its kind checked), then once per seed, from the run's
    # own config
    assert calls == [(0.5, 0, False), (0.5, 0, False), (0.5, 1, False)]
    assert list(results["models"]) == ["et", "logreg", "own_logreg"]  # the --models order
    # the same protocol as a detector passed from Python: same splits, seeds and thresholds
    assert results["models"]["logreg"] == results["models"]["own_logreg"]
    assert {d["second"] for d in results["differences"]} == {"logreg", "own_logreg"}
    assert "registered detectors (by register_detector" in results["protocol"]
    assert "logreg = LogisticDetector" in results["protocol"]
    assert "| logreg |" in (out / "results.md").read_text(encoding="utf-8")
    written = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert written["per_seed"][1]["logreg"]["threshold"] is not None
    recorded = written["meta"]["plugins"]["detectors"]["logreg"]
    assert recorded["factory"].endswith("test_a_registered_detector_is_a_baseline_row_of_the_run"
                                        ".<locals>.factory")
    assert recorded["path"].endswith("test_plugins.py")


def test_an_unknown_model_names_the_plugin_flag_and_a_registered_one_is_known():
    with pytest.raises(ValueError, match=r"unknown models \['logreg'\].*--plugin MODULE"):
        config("--models", "et,logreg")
    register_detector("logreg", make_logistic)
    assert config("--models", "et,LOGREG").protocol.model_names() == ["et", "logreg"]
    unregister_detector("logreg")
    with pytest.raises(ValueError, match="unknown models"):
        config("--models", "logreg")


@pytest.mark.parametrize("name, message", [
    ("et", "taken"), ("gbt", "taken"), ("et_energy_trained", "taken"),
    ("et-stacked", "taken"),  # the figures colour it as et_stacked
    ("logreg_ensemble", "taken"), ("gcn-class-balance", "taken"), ("LogReg", "lower-case"),
    # the results files' own entries: a detector "labels" wrote its scores over the labels in
    # scores.npz, "seed" its metrics over per_seed's seed number (an output audit)
    ("labels", "taken"), ("nodes", "taken"), ("seed", "taken"), ("split_sizes", "taken"),
    ("run_id", "taken"), ("mine__seed0", "taken"),
    ("a,b", "lower-case"),
    ("a b", "lower-case"), ("a|b", "lower-case"), ("", "lower-case"), (3, "lower-case"),
])
def test_names_that_clash_or_cannot_stand_in_a_model_list_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        register_detector(name, make_logistic)
    assert dict(registered_detectors()) == {}


def test_registrations_that_cannot_work_are_refused():
    with pytest.raises(TypeError, match="factory must be callable"):
        register_detector("logreg", LogisticDetector())
    with pytest.raises(TypeError, match=r"factory must take \(config, seed, progress\)"):
        register_detector("logreg", lambda seed: LogisticDetector(seed=seed))
    with pytest.raises(TypeError, match="search_space must be callable"):
        register_detector("logreg", make_logistic, search_space={"c": [1, 2]})
    first = register_detector("logreg", make_logistic)
    with pytest.raises(ValueError, match="registered already"):
        register_detector("logreg", make_logistic, search_space=logistic_space)
    second = register_detector("logreg", make_logistic, search_space=logistic_space,
                               replace=True)
    assert registered_detectors()["logreg"] is second and second is not first
    with pytest.raises(ValueError, match="taken"):  # replace never replaces a built-in
        register_detector("et", make_logistic, replace=True)
    with pytest.raises(ValueError, match="empty or taken"):  # nor a row passed from Python
        anomaly.check_own_detectors({"LOGREG": lambda seed: LogisticDetector(seed=seed)})
    with pytest.raises(KeyError, match="no detector is registered under 'et'"):
        unregister_detector("et")


def test_a_factory_of_the_wrong_kind_is_refused_before_any_training(monkeypatch):
    data = planted_anomaly_graph(200, seed=2)
    register_detector("number", lambda config, seed, progress: 1)
    fitted = []
    monkeypatch.setattr(BaseDetector, "fit", lambda *args, **kwargs: fitted.append(1))
    with pytest.raises(TypeError, match="registered detector 'number' returned int, not a "
                                        "detector"):
        anomaly.run(config("--models", "gbt,number", "--seeds", "1"), data=data)
    assert fitted == []


def test_a_pygod_style_fit_is_refused_before_any_training():
    # fit(data) alone passed registration and failed inside the run on "takes from 2 to 3
    # positional arguments but 4 were given" (an audit)
    class Unsupervised(LogisticDetector):
        def fit(self, data):
            return self

    register_detector("own_unsupervised", lambda config, seed, progress: Unsupervised())
    with pytest.raises(TypeError, match="registered detector 'own_unsupervised' returned a "
                                        "Unsupervised, whose fit cannot take the runner's call"):
        anomaly.run(config("--models", "gbt,own_unsupervised", "--seeds", "1"),
                    data=planted_anomaly_graph(200, seed=2))


PLUGIN = '''
from dataclasses import dataclass, field

import torch

from et_graph.detectors import register_detector
from et_graph.detectors.base import BaseDetector


@dataclass
class Nothing:
    pass


@dataclass
class NormConfig:
    model: Nothing = field(default_factory=Nothing)


class NormDetector(BaseDetector):
    """Scores a node by the norm of its features (reads no label)."""

    config_class = NormConfig

    def _fit(self, data, y, train, val):
        pass

    def _score(self, data):
        return data.x.norm(dim=1).sigmoid()


register_detector("{name}", lambda config, seed, progress: NormDetector(seed=seed),
                  search_space=lambda trial: {{"baselines": {{
                      "baseline_hidden": trial.suggest_int("hidden", 8, 16)}}}})
'''


def write_plugin(folder, name):
    return helpers.write_plugin(folder, name, PLUGIN)


def test_the_plugin_flag_loads_a_file_before_the_models_are_read(tmp_path, capsys):
    graph = tmp_path / "planted.pt"
    torch.save(planted_anomaly_graph(300, seed=2), graph)
    plugin = write_plugin(tmp_path, "norm")
    out = tmp_path / "run"
    argv = ["anomaly", "--data", str(graph), "--models", "gbt,norm", "--seeds", "1",
            "--max-iter", "20", "--no-progress", "--out", str(out)]
    assert console_main(argv) == 2  # not loaded: refused, naming the flag
    assert "--plugin MODULE" in capsys.readouterr().err
    assert cli_main([*argv, "--plugin", str(plugin)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert list(results["models"]) == ["gbt", "norm"]
    plugins = results["meta"]["plugins"]
    assert plugins["loaded"] == [{"module": "norm_plugin", "path": str(plugin.resolve())}]
    assert plugins["detectors"]["norm"]["path"] == str(plugin.resolve())
    assert "| norm |" in (out / "results.md").read_text(encoding="utf-8")


def test_plugins_come_as_a_comma_list_and_from_the_environment(tmp_path, monkeypatch):
    from et_graph.cli import build_parser
    from et_graph.detectors import registry

    assert "--plugin MODULE" in build_parser("anomaly").format_help()
    first, second, third = (write_plugin(tmp_path, name) for name in ("one", "two", "three"))
    monkeypatch.setenv(registry.PLUGINS_ENV, str(third))
    monkeypatch.setattr(anomaly, "run", lambda config: config)
    chosen = anomaly.main(["--plugin", f"{first},{second}", "--plugin", str(first),
                           "--models", "one,two,three"])
    assert chosen.protocol.model_names() == ["one", "two", "three"]
    # the environment's first, each plugin once
    assert [p["module"] for p in registry.load_plugins([])] == ["three_plugin", "one_plugin",
                                                                "two_plugin"]
    with pytest.raises(ValueError, match="no module named 'no_such_plugin'"):
        registry.load_plugins(["no_such_plugin"])
    with pytest.raises(FileNotFoundError, match="no such file"):
        registry.load_plugins([str(tmp_path / "missing.py")])


def test_a_plugin_file_imports_a_module_beside_it(tmp_path):
    # its folder was not searched, so `from helpers_beside import ...` failed with a
    # ModuleNotFoundError traceback (an audit); it is searched last, while the plugin runs;
    # a same-named helper beside another plugin is refused rather than shared (a review)
    import sys

    from et_graph.detectors import registry

    first, second = tmp_path / "a", tmp_path / "b"
    for folder, width in ((first, 3), (second, 4)):
        folder.mkdir()
        (folder / "beside_helpers.py").write_text(f"WIDTH = {width}\n", encoding="utf-8")
        (folder / f"uses_{folder.name}.py").write_text(
            f"from beside_helpers import WIDTH\nassert WIDTH == {width}\n", encoding="utf-8")
    try:
        registry.load_plugins([str(first / "uses_a.py")])
        assert str(first) not in sys.path
        with pytest.raises(ValueError, match="imports 'beside_helpers', which lies beside it "
                                             ".* but is imported already from"):
            registry.load_plugins([str(second / "uses_b.py")])
    finally:
        for name in ("uses_a", "uses_b", "beside_helpers"):
            sys.modules.pop(name, None)
        for folder in (first, second):
            while str(folder) in sys.path:
                sys.path.remove(str(folder))


def test_a_registered_search_space_tunes_the_detector_and_its_preset_reproduces(tmp_path):
    pytest.importorskip("optuna")
    from et_graph.tuning import AnomalyObjective, TuneBudget
    from et_graph.tuning.cli import tune_anomaly

    data = planted_anomaly_graph(200, seed=4)
    seen = []

    def factory(config, seed, progress):
        seen.append(config.baselines.baseline_weight_decay)
        return make_logistic(config, seed, progress)

    register_detector("logreg", factory, search_space=logistic_space)
    result = tune_anomaly(config("--feature-norm", "none"), ["logreg"], TuneBudget(trials=2),
                          f"sqlite:///{tmp_path}/s.db", out=tmp_path, data=data)
    summary = result["models"]["logreg"]
    assert summary["trial_numbers"] == [0, 1]
    # built once from the base config (its kind checked), then with each trial's suggestion
    assert seen[0] == 0.0 and len(set(seen[1:])) == 2 and 0.0 not in seen[1:]
    preset = load_file(result["presets"]["logreg"])
    assert preset["protocol"]["models"] == "logreg"
    assert preset["baselines"]["baseline_weight_decay"] == summary["best_params"]["weight_decay"]
    meta = (tmp_path / "best_logreg.toml").read_text(encoding="utf-8")
    assert 'plugin = "test_plugins"' in meta  # registered from this module, not a --plugin
    value = AnomalyObjective(merge(AnomalyConfig(), preset), "logreg", data=data)()
    assert value == pytest.approx(summary["best_value"], abs=1e-12)


def test_tuning_a_registered_detector_without_a_search_space_is_refused(tmp_path):
    pytest.importorskip("optuna")
    from et_graph.tuning import TuneBudget
    from et_graph.tuning.cli import tune_anomaly

    data = planted_anomaly_graph(200, seed=4)
    register_detector("logreg", make_logistic)
    with pytest.raises(ValueError, match="'logreg' has no search space"):
        tune_anomaly(config(), ["gbt", "logreg"], TuneBudget(trials=1), None, out=tmp_path,
                     data=data)
    assert not (tmp_path / "best_gbt.toml").exists()  # refused before any study ran
    register_detector("logreg", make_logistic, search_space=logistic_space, replace=True)
    with pytest.raises(ValueError, match="--tune-class-balance"):
        tune_anomaly(config(), ["logreg"], TuneBudget(trials=1), None, out=tmp_path,
                     data=data, class_balance=True)


def test_the_tune_command_loads_plugins(tmp_path):
    pytest.importorskip("optuna")
    graph = tmp_path / "planted.pt"
    torch.save(planted_anomaly_graph(200, seed=4), graph)
    plugin = write_plugin(tmp_path, "norm")
    out = tmp_path / "tune"
    assert cli_main(["tune", "anomaly", "--plugin", str(plugin), "--models", "norm",
                     "--trials", "1", "--data", str(graph), "--no-progress",
                     "--storage", f"sqlite:///{tmp_path}/t.db", "--out", str(out)]) == 0
    preset = load_file(out / "best_norm.toml")
    assert preset["protocol"]["models"] == "norm"
    assert f'plugin = "{plugin.resolve()}"' in (out / "best_norm.toml").read_text(
        encoding="utf-8")
    report = json.loads((out / "study_report.json").read_text(encoding="utf-8"))
    assert report["meta"]["plugins"]["loaded"][0]["path"] == str(plugin.resolve())


def test_the_example_plugin_runs_and_the_docs_quote_it_whole():
    from pathlib import Path

    from et_graph.detectors.registry import load_plugins

    root = Path(__file__).resolve().parents[1]
    example = root / "examples" / "sage_plugin.py"
    code = example.read_text(encoding="utf-8").split('"""\n', 1)[1].lstrip("\n")
    assert f"```python\n{code}```" in (root / "docs" / "library.md").read_text(encoding="utf-8")
    load_plugins([str(example)])
    results = anomaly.run(config("--models", "gcn,sage", "--seeds", "1", "--epochs", "2",
                                 "--baseline-hidden", "8"),
                          data=planted_anomaly_graph(200, seed=2))
    assert list(results["models"]) == ["gcn", "sage"]
    assert "sage = SAGEDetector" in results["protocol"]


def test_plugins_that_would_run_from_anywhere_or_shadow_a_library_are_refused(
        tmp_path, monkeypatch):
    """From the review of the plugin loader: a relative path in the environment imported a
    file of whatever folder a command ran in (even for --help); a file named optuna.py became
    the tuner's optuna; a plugin failing after registering left its name taken."""
    from et_graph.detectors import registered_detectors, registry

    monkeypatch.chdir(tmp_path)
    write_plugin(tmp_path, "env")
    monkeypatch.setenv(registry.PLUGINS_ENV, "env_plugin.py")
    with pytest.raises(ValueError, match="relative path"):
        registry.load_plugins([], environment=True)
    monkeypatch.delenv(registry.PLUGINS_ENV)
    shadow = tmp_path / "tabnanny.py"  # (a library nothing here imports: one imported is
    shadow.write_text("raise SystemExit('the plugin ran')\n", encoding="utf-8")  # named so)
    with pytest.raises(ValueError, match="would shadow it"):
        registry.load_plugins([str(shadow)])
    failing = write_plugin(tmp_path, "half")
    failing.write_text(failing.read_text(encoding="utf-8") + "\nraise RuntimeError('late')\n",
                       encoding="utf-8")
    for _ in range(2):  # the retry fails the same way, not with "registered already"
        with pytest.raises(RuntimeError, match="late"):
            registry.load_plugins([str(failing)])
        assert "half" not in registered_detectors()


def test_a_run_builds_every_seed_from_the_registrations_it_started_with():
    """From the review: the run looked the registry up again for each seed, so a name
    registered again while it ran (replace=True) mixed two detectors in one row."""
    built = []

    def first(config, seed, progress):
        built.append(("first", seed))
        # another thread, or the factory itself, replaces the registration mid-run
        register_detector("swapped", second, replace=True)
        return make_logistic(config, seed, progress)

    def second(config, seed, progress):
        built.append(("second", seed))
        return make_logistic(config, seed, progress)

    register_detector("swapped", first)
    anomaly.run(config("--models", "swapped", "--seeds", "2", "--no-energy-row"),
                data=planted_anomaly_graph(200, seed=2))
    assert built == [("first", 0), ("first", 0), ("first", 1)]


NEURAL_PLUGIN = '''
import torch
from torch import nn

from et_graph.detectors import NeuralDetector, register_detector
from et_graph.detectors.config import GNNDetectorConfig
from et_graph.protocols.anomaly_config import baseline_config


class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = nn.Linear(width, 1)

    def forward(self, x, edge_index):
        return torch.{act}(self.lin(x)).squeeze(-1)


class Linear(NeuralDetector):
    config_class = GNNDetectorConfig

    def build_network(self, in_channels, num_nodes):
        return Net(in_channels)


register_detector("{{name}}", lambda config, seed, progress: Linear(baseline_config(config),
                                                                  seed=seed))
'''


def test_a_checkpoint_resumes_only_under_the_factory_and_code_that_wrote_it(tmp_path):
    """A registered detector's config does not show its network: --resume after its plugin
    file was edited (same layers, another forward) went on with the old training."""
    import sys

    from et_graph.plugins import _LOADED

    graph = tmp_path / "planted.pt"
    torch.save(planted_anomaly_graph(200, seed=2), graph)
    plugin = helpers.write_plugin(tmp_path, "lin", NEURAL_PLUGIN.format(act="tanh"))
    argv = ["anomaly", "--data", str(graph), "--models", "lin", "--seeds", "1", "--epochs",
            "2", "--no-progress", "--checkpoint-dir", str(tmp_path / "checkpoints"),
            "--plugin", str(plugin)]
    assert cli_main([*argv, "--out", str(tmp_path / "a")]) == 0

    def reload() -> None:  # a new process would import the plugin afresh
        unregister_detector("lin")
        sys.modules.pop("lin_plugin", None)
        _LOADED.clear()

    reload()
    assert cli_main([*argv, "--resume", "--out", str(tmp_path / "b")]) == 0  # the same code
    reload()
    helpers.write_plugin(tmp_path, "lin", NEURAL_PLUGIN.format(act="sigmoid"))  # edited
    with pytest.raises(ValueError, match="another configuration"):
        cli_main([*argv, "--resume", "--out", str(tmp_path / "c")])


def test_a_tuned_preset_run_without_its_plugin_names_the_plugin(tmp_path):
    """From a user audit: the preset's [meta] records the plugin its model needs, and the
    error said only "--plugin MODULE"."""
    preset = tmp_path / "best_spy.toml"
    preset.write_text('[meta]\nplugin = "/plugins/spy.py"\n\n[protocol]\nmodels = "spy"\n',
                      encoding="utf-8")
    with pytest.raises(ValueError, match=r"unknown models.*best_spy.toml was tuned with the "
                                         r"plugin /plugins/spy.py: add --plugin "
                                         r"/plugins/spy.py"):
        parse(AnomalyConfig, ["--config", str(preset)])
    plain = tmp_path / "plain.toml"
    plain.write_text('[protocol]\nmodels = "spy"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="unknown models") as caught:
        parse(AnomalyConfig, ["--config", str(plain)])
    assert "tuned with the plugin" not in str(caught.value)


class PeekingDetector(LogisticDetector):
    """A detector that overrides ``fit`` and keeps the labels it was handed."""

    def fit(self, data, train_mask=None, val_mask=None):
        self.seen_y, self.known = data.y.clone(), train_mask | val_mask
        return super().fit(data, train_mask, val_mask)


def test_a_detector_that_overrides_fit_is_handed_no_test_label(tmp_path, monkeypatch):
    """From a leakage audit: the runner and the tuner handed every detector the whole graph,
    test labels included; the built-in detectors blank them in fit, but one that overrides fit
    could read them. fit now gets -1 outside the training and validation nodes."""
    data = planted_anomaly_graph(300, seed=2)
    made = []

    def own(seed):
        made.append(PeekingDetector(c=1.0, seed=seed))
        return made[-1]

    anomaly.run(config("--models", "et", "--seeds", "1", "--epochs", "1", "--hidden", "16",
                       "--no-energy-row", "--out", str(tmp_path / "run")),
                data=data, detectors={"peek": own})
    detector = made[-1]  # (the first one built was only checked, never fitted)
    known = detector.known
    assert int((~known).sum()) > 100 and bool((detector.seen_y[~known] == -1).all())
    assert torch.equal(detector.seen_y[known], data.y[known])
