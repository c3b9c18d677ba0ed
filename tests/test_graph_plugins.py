"""Registered graph models: a graph classifier of your own as a model of `et-graph tudataset`
and its tuner, named in --models, loaded by --plugin, recorded in the results."""
import json
import textwrap
import warnings
from dataclasses import asdict
from pathlib import Path

import helpers
import pytest
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import global_add_pool

from et_graph.cli import console_main
from et_graph.cli import main as cli_main
from et_graph.config import load_file, merge, parse
from et_graph.detectors import registered_detectors
from et_graph.exceptions import ConfigWarning
from et_graph.experiments import tudataset
from et_graph.protocols import graph_cv
from et_graph.protocols.graph_models import (
    register_graph_model,
    registered_graph_models,
    unregister_graph_model,
)
from et_graph.protocols.tudataset_config import TUDatasetConfig

pytestmark = pytest.mark.usefixtures("one_thread", "plugin_registries")

ROOT = Path(__file__).resolve().parents[1]


class SumPoolClassifier(nn.Module):
    """One linear layer on the node features, a sum over each graph, a linear head."""

    def __init__(self, width, classes, hidden, dropout):
        super().__init__()
        self.node = nn.Linear(width, hidden)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, edge_index, batch):
        return self.head(global_add_pool(self.dropout(torch.relu(self.node(x))), batch))


def make_sum_pool(config, info):
    base = config.baselines
    return SumPoolClassifier(info["node_feature_width"], info["classes"], base.gin_hidden,
                             base.baseline_dropout)


def sum_pool_space(trial):
    return {"baselines": {"baseline_dropout": trial.suggest_float("dropout", 0.0, 0.5)},
            "train": {"lr": trial.suggest_float("lr", 1e-3, 1e-2, log=True)}}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One processed copy of MUTAG for the module's runs."""
    return str(tmp_path_factory.mktemp("cache"))


def tiny(cache, *argv):
    """MUTAG, one epoch, tiny models, no encodings."""
    return ["--dataset", "MUTAG", "--cache", cache, "--epochs", "1", "--rw-pe-dim", "0",
            "--gin-hidden", "8", "--gin-layers", "1", "--no-progress", *argv]


def small(cache, *argv):
    """A cheap run: :func:`tiny` over two folds, with ET as --quick sets it."""
    return tiny(cache, "--quick", "--max-folds", "2", *argv)


def test_a_registered_model_is_a_baseline_row_of_the_run(tmp_path, cache):
    calls = []

    def factory(config, info):
        calls.append((config.baselines.gin_hidden, info["node_feature_width"], info["classes"]))
        return make_sum_pool(config, info)

    register_graph_model("sumpool", factory)
    out = tmp_path / "run"
    config = parse(TUDatasetConfig, small(cache, "--models", "et,SUMPOOL,gin", "--out", str(out)))
    results = tudataset.run(config)
    # built once before any training (its kind checked), then once per fold, from the run's
    # config and the data's description
    assert calls == [(8, 7, 2)] * 3
    assert list(results["models"]) == ["et", "sumpool", "gin"]  # the --models order
    # trained as GIN is: the run's train section, the same folds
    row = results["models"]["sumpool"]
    assert row["config"] == asdict(config.train) == results["models"]["gin"]["config"]
    assert len(row["accuracy"]["values"]) == 2
    assert [(d["first"], d["second"]) for d in results["differences"]] == [
        ("et", "sumpool"), ("et", "gin")]
    assert "sumpool = SumPoolClassifier" in results["protocol"]
    markdown = (out / "MUTAG" / "results.md").read_text(encoding="utf-8")
    assert "| sumpool |" in markdown and "| et − sumpool | accuracy |" in markdown
    written = json.loads((out / "MUTAG" / "results.json").read_text(encoding="utf-8"))
    recorded = written["meta"]["plugins"]["graph_models"]["sumpool"]
    assert recorded["factory"].endswith("test_a_registered_model_is_a_baseline_row_of_the_run"
                                        ".<locals>.factory")
    assert recorded["path"].endswith("test_graph_plugins.py")
    assert "detectors" not in written["meta"]["plugins"]  # none registered
    assert (out / "MUTAG" / "accuracy.png").stat().st_size > 0


def test_the_accuracy_plot_draws_a_registered_row_in_a_colour_of_its_own(tmp_path, monkeypatch):
    """Checked on the figure's bars: an unknown name gets a spare colour, not a built-in's."""
    from matplotlib.axes import Axes

    from et_graph.plots.colours import MODEL_COLOURS
    from et_graph.plots.graph import plot_fold_accuracies

    drawn = {}
    bar = Axes.bar
    monkeypatch.setattr(Axes, "bar", lambda ax, x, *args, **kwargs: drawn.setdefault(
        x, kwargs["color"]) and bar(ax, x, *args, **kwargs))
    stats = {"accuracy": {"mean": 0.7, "std": 0.1, "values": [0.6, 0.8]}}
    plot_fold_accuracies({"dataset": "MUTAG", "folds": [{}, {}],
                          "models": {"et": stats, "gin": stats, "sumpool": stats}},
                         tmp_path / "accuracy.png")
    assert drawn[0] == MODEL_COLOURS["et"] and drawn[1] == MODEL_COLOURS["gin"]
    assert drawn[2] not in MODEL_COLOURS.values()
    # a registered model named mlp took the structure-agnostic baseline's green (an audit)
    drawn.clear()
    plot_fold_accuracies({"dataset": "MUTAG", "folds": [{}, {}],
                          "models": {"structure_agnostic": stats, "mlp": stats}},
                         tmp_path / "accuracy.png")
    assert drawn[0] == MODEL_COLOURS["structure_agnostic"]
    assert drawn[1] not in MODEL_COLOURS.values()


def test_an_unknown_model_names_the_plugin_flag_and_a_registered_one_is_known():
    with pytest.raises(ValueError, match=r"unknown models \['sumpool'\].*--plugin MODULE"):
        parse(TUDatasetConfig, ["--models", "et,sumpool"])
    register_graph_model("sumpool", make_sum_pool)
    assert parse(TUDatasetConfig, ["--models", "gin,SumPool"]).protocol.model_names == [
        "gin", "sumpool"]
    unregister_graph_model("sumpool")
    with pytest.raises(ValueError, match="unknown models"):
        parse(TUDatasetConfig, ["--models", "sumpool"])


@pytest.mark.parametrize("name, message", [
    ("et", "taken"), ("gin", "taken"), ("structure_agnostic", "taken"),
    # drawn as the built-in (the figures read '-' as '_'), or a name the run derives: a
    # fold's further trainings checkpoint as NAME-runN, the figures draw NAME_ensemble as NAME
    ("structure-agnostic", "taken"), ("gin-run1", "taken"), ("sage_ensemble", "taken"),
    ("gin-bonds", "taken"),
    ("SAGE", "lower-case"), ("a@b", "lower-case"), ("a,b", "lower-case"), ("", "lower-case"),
    (3, "lower-case"),
])
def test_names_that_clash_or_cannot_stand_in_a_model_list_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        register_graph_model(name, make_sum_pool)
    assert dict(registered_graph_models()) == {}


def test_registrations_that_cannot_work_are_refused():
    with pytest.raises(TypeError, match="factory must be callable"):
        register_graph_model("sumpool", "make_sum_pool")
    # (a module is callable, but one model would be trained in every fold)
    with pytest.raises(TypeError, match=r"is a model \(SumPoolClassifier\), not a factory"):
        register_graph_model("sumpool", SumPoolClassifier(7, 2, 8, 0.0))
    with pytest.raises(TypeError, match=r"factory must take \(config, info\)"):
        register_graph_model("sumpool", lambda info: make_sum_pool(None, info))
    with pytest.raises(TypeError, match="search_space must be callable"):
        register_graph_model("sumpool", make_sum_pool, search_space={"dropout": [0.1]})
    first = register_graph_model("sumpool", make_sum_pool)
    with pytest.raises(ValueError, match="graph model name 'sumpool' is registered already"):
        register_graph_model("sumpool", make_sum_pool, search_space=sum_pool_space)
    second = register_graph_model("sumpool", make_sum_pool, search_space=sum_pool_space,
                                  replace=True)
    assert registered_graph_models()["sumpool"] is second and second is not first
    with pytest.raises(ValueError, match="taken"):  # replace never replaces a built-in
        register_graph_model("gin", make_sum_pool, replace=True)
    with pytest.raises(KeyError, match="no graph model is registered under 'gin'"):
        unregister_graph_model("gin")
    # the tasks' names are apart: a detector may share it, and is not a graph model
    from et_graph.detectors import register_detector

    register_detector("sumpool", lambda config, seed, progress: None)
    assert list(registered_graph_models()) == ["sumpool"] == list(registered_detectors())


def test_a_factory_of_the_wrong_kind_is_refused_before_any_training(cache, monkeypatch):
    register_graph_model("number", lambda config, info: 1)
    trained = []
    monkeypatch.setattr(graph_cv, "fit_graph_classifier",
                        lambda *args, **kwargs: trained.append(1))
    with pytest.raises(TypeError, match="registered graph model 'number' returned int, not a "
                                        "torch.nn.Module"):
        tudataset.run(parse(TUDatasetConfig, small(cache, "--models", "gin,number",
                                                   "--out", "none")))
    assert trained == []


def test_a_factory_returning_one_module_every_time_is_refused(cache):
    # each fold started from the last one's trained weights, so that a fold trained on the
    # next fold's test graphs, without a word (an audit)
    kept = []
    register_graph_model("kept", lambda config, info: kept[0] if kept else kept.append(
        make_sum_pool(config, info)) or kept[0])
    with pytest.raises(TypeError, match="registered graph model 'kept' returned a "
                                        "SumPoolClassifier it had returned before: its "
                                        "factory must build a new, untrained model"):
        tudataset.run(parse(TUDatasetConfig, small(cache, "--models", "kept", "--out", "none")))


def test_a_run_builds_every_fold_from_the_registrations_it_started_with(cache):
    """As the anomaly runner: a name registered again while the run goes on (replace=True)
    must not mix two models in one row."""
    built = []

    def first(config, info):
        built.append("first")
        register_graph_model("swapped", second, replace=True)  # mid-run, by anyone
        return make_sum_pool(config, info)

    def second(config, info):
        built.append("second")
        return make_sum_pool(config, info)

    register_graph_model("swapped", first)
    tudataset.run(parse(TUDatasetConfig, small(cache, "--models", "swapped", "--out", "none")))
    assert built == ["first"] * 3  # the check before training, then both folds


PLUGIN = '''
from torch import nn
from torch_geometric.nn import global_add_pool

from et_graph.protocols.graph_models import register_graph_model


class Pooled(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.head = nn.Linear(width, classes)

    def forward(self, x, edge_index, batch):
        return self.head(global_add_pool(x, batch))


register_graph_model("{name}", lambda config, info: Pooled(info["node_feature_width"],
                                                            info["classes"]),
                     search_space=lambda trial: {{"train": {{
                         "lr": trial.suggest_float("lr", 1e-3, 1e-2, log=True)}}}})
'''


def write_plugin(folder, name):
    return helpers.write_plugin(folder, name, PLUGIN)


def test_the_plugin_flag_loads_a_file_before_the_models_are_read(tmp_path, cache, capsys):
    plugin = write_plugin(tmp_path, "pooled")
    out = tmp_path / "run"
    argv = ["tudataset", *small(cache, "--models", "et,pooled", "--out", str(out))]
    assert console_main(argv) == 2  # not loaded: refused, naming the flag
    assert "--plugin MODULE" in capsys.readouterr().err
    assert cli_main([*argv, "--plugin", str(plugin)]) == 0
    results = json.loads((out / "MUTAG" / "results.json").read_text(encoding="utf-8"))
    assert list(results["models"]) == ["et", "pooled"]
    plugins = results["meta"]["plugins"]
    assert plugins["loaded"] == [{"module": "pooled_plugin", "path": str(plugin.resolve())}]
    assert plugins["graph_models"]["pooled"]["path"] == str(plugin.resolve())
    assert "| pooled |" in (out / "MUTAG" / "results.md").read_text(encoding="utf-8")


def test_plugins_come_from_the_environment_and_the_help_names_the_flag(tmp_path, monkeypatch):
    from et_graph.cli import build_parser
    from et_graph.plugins import PLUGINS_ENV

    assert "register_graph_model" in build_parser("tudataset").format_help()
    first, second = write_plugin(tmp_path, "first"), write_plugin(tmp_path, "second")
    monkeypatch.setenv(PLUGINS_ENV, str(second))
    monkeypatch.setattr(tudataset, "run", lambda config: config)
    chosen = tudataset.main(["--plugin", str(first), "--models", "first,second,gin"])
    assert chosen.protocol.model_names == ["first", "second", "gin"]


def test_a_plugin_that_fails_leaves_none_of_its_models_registered(tmp_path):
    """A graph model and a detector registered before the plugin failed are both removed, so
    that a retry fails the same way, not with "registered already"."""
    from et_graph.plugins import load_plugins

    failing = write_plugin(tmp_path, "half")
    failing.write_text(failing.read_text(encoding="utf-8") + textwrap.dedent('''
        from et_graph.detectors import register_detector
        register_detector("half_detector", lambda config, seed, progress: None)
        raise RuntimeError("late")
        '''), encoding="utf-8")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="late"):
            load_plugins([str(failing)])
        assert "half" not in registered_graph_models()
        assert "half_detector" not in registered_detectors()


def test_no_flag_is_called_unread_on_a_registered_models_account(monkeypatch):
    """Its factory is given the whole config: GIN's width may be what it reads."""
    monkeypatch.setattr(tudataset, "run", lambda config: config)
    with pytest.warns(ConfigWarning, match="baselines.gin_hidden: no model of this run"):
        tudataset.main(["--models", "et", "--gin-hidden", "8"])
    register_graph_model("sumpool", make_sum_pool)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tudataset.main(["--models", "et,sumpool", "--gin-hidden", "8", "--pe-dim", "2"])


# ----------------------------------------------------------------------------------------------
# Tuning
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mutag(cache):
    from et_graph.experiments.tudataset import load_graphs

    return load_graphs(parse(TUDatasetConfig, tiny(cache)).data)


def test_a_registered_search_space_tunes_the_model_and_its_preset_reproduces(tmp_path, mutag):
    pytest.importorskip("optuna")
    from et_graph.tuning import TuneBudget
    from et_graph.tuning.cli import tune_tudataset
    from et_graph.tuning.tudataset import TUObjective

    graphs, info = mutag
    seen = []

    def factory(config, info):
        seen.append(config.baselines.baseline_dropout)
        return make_sum_pool(config, info)

    register_graph_model("sumpool", factory, search_space=sum_pool_space)
    config = parse(TUDatasetConfig, tiny("unused"))
    result = tune_tudataset(config, ["gin", "sumpool"], TuneBudget(trials=2),
                            f"sqlite:///{tmp_path}/s.db", tmp_path, tune_folds=1,
                            graphs=graphs, info=info)
    summary = result["models"]["sumpool"]
    # the same budget as GIN's
    assert summary["trial_numbers"] == result["models"]["gin"]["trial_numbers"] == [0, 1]
    # built once from the base config (its kind checked), then with each trial's suggestion
    assert seen[0] == config.baselines.baseline_dropout and len(set(seen[1:])) == 2
    preset = load_file(result["presets"]["sumpool"])
    assert preset["protocol"]["models"] == "sumpool"
    assert preset["baselines"]["baseline_dropout"] == summary["best_params"]["dropout"]
    assert 'plugin = "test_graph_plugins"' in (tmp_path / "best_sumpool.toml").read_text(
        encoding="utf-8")  # registered from this module, not by a --plugin
    value = TUObjective(merge(TUDatasetConfig(), preset), "sumpool", 1, graphs, info)()
    assert value == pytest.approx(summary["best_value"], abs=1e-12)


def test_tuning_a_registered_model_without_a_space_or_with_bonds_is_refused(tmp_path, mutag):
    pytest.importorskip("optuna")
    from et_graph.tuning import TuneBudget
    from et_graph.tuning.cli import tune_tudataset

    graphs, info = mutag
    config = parse(TUDatasetConfig, tiny("unused"))
    register_graph_model("sumpool", make_sum_pool)
    with pytest.raises(ValueError, match="graph model 'sumpool' has no search space.*"
                                         "register it with search_space=space"):
        tune_tudataset(config, ["gin", "sumpool"], TuneBudget(trials=1), None, tmp_path,
                       tune_folds=1, graphs=graphs, info=info)
    assert not (tmp_path / "best_gin.toml").exists()  # refused before any study ran
    register_graph_model("sumpool", make_sum_pool, search_space=sum_pool_space, replace=True)
    with pytest.raises(ValueError, match="--tune-bonds"):
        tune_tudataset(config, ["sumpool"], TuneBudget(trials=1), None, tmp_path,
                       tune_folds=1, graphs=graphs, info=info, bonds=True)


def test_the_tune_command_loads_plugins(tmp_path, cache):
    pytest.importorskip("optuna")
    plugin = write_plugin(tmp_path, "pooled")
    out = tmp_path / "tune"
    assert cli_main(["tune", "tudataset", "--plugin", str(plugin), *tiny(cache),
                     "--models", "pooled", "--trials", "1", "--tune-folds", "1",
                     "--storage", f"sqlite:///{tmp_path}/t.db", "--out", str(out)]) == 0
    assert load_file(out / "best_pooled.toml")["protocol"]["models"] == "pooled"
    assert f'plugin = "{plugin.resolve()}"' in (out / "best_pooled.toml").read_text(
        encoding="utf-8")
    report = json.loads((out / "study_report.json").read_text(encoding="utf-8"))
    assert report["meta"]["plugins"]["loaded"][0]["path"] == str(plugin.resolve())


def test_the_example_plugin_registers_its_model_and_the_docs_quote_it_whole():
    from et_graph.plugins import load_plugins

    example = ROOT / "examples" / "graph_plugin.py"
    code = example.read_text(encoding="utf-8").split('"""\n', 1)[1].lstrip("\n")
    assert f"```python\n{code}```" in (ROOT / "docs" / "library.md").read_text(encoding="utf-8")
    load_plugins([str(example)])
    entry = registered_graph_models()["sage_graph"]
    config = parse(TUDatasetConfig, ["--gin-hidden", "8", "--gin-layers", "2"])
    model = entry.build(config, {"node_feature_width": 7, "classes": 2})
    batch = next(iter(DataLoader(
        [Data(x=torch.rand(4, 7), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
              y=torch.tensor([1])) for _ in range(3)], batch_size=3)))
    assert graph_cv.model_outputs(model, batch).shape == (3, 2)
    assert entry.search_space is not None


class ManyLogits(nn.Module):
    def __init__(self, width, outputs, pool=True):
        super().__init__()
        self.lin, self.pool = nn.Linear(width, outputs), pool

    def forward(self, x, edge_index, batch):
        h = self.lin(x)
        return global_add_pool(h, batch) if self.pool else h


@pytest.mark.parametrize("outputs, pool", [(5, True), (2, False)])
def test_a_model_of_the_wrong_output_shape_is_refused_before_any_training(
        tmp_path, cache, monkeypatch, outputs, pool):
    """From a user audit: five logits on two classes trained without a word (accuracy 0 on a
    fold, predicting classes that do not exist), and node logits (no pooling) failed only in
    the loss, after ET's first fold, in PyTorch's words."""
    register_graph_model("shape", lambda config, info: ManyLogits(
        info["node_feature_width"], outputs, pool), search_space=lambda trial: {})
    trained = []
    monkeypatch.setattr(graph_cv, "fit_graph_classifier",
                        lambda *a, **k: trained.append(1))
    with pytest.raises(ValueError, match=r"registered graph model 'shape': its outputs on 2 "
                                         r"graphs have shape \[\d+, \d+\]; MUTAG needs class "
                                         r"logits \[num_graphs, 2\]"):
        tudataset.main(small(cache, "--models", "et,shape", "--out", str(tmp_path / "run")))
    assert not trained
    from et_graph.tuning.tudataset import TUObjective

    config = parse(TUDatasetConfig, small(cache, "--models", "shape"))
    with pytest.raises(ValueError, match="registered graph model 'shape': its outputs"):
        TUObjective(config, "shape")  # the tuner checks it as the run does, before any trial
    assert not trained


def test_a_checkpoint_resumes_only_under_the_factory_and_code_that_wrote_it(tmp_path, cache):
    """From a user audit: --resume under another plugin whose model has the same layers (its
    repr) resumed the first one's training without a word; so did the same file edited."""
    template = """
        import torch
        from torch import nn
        from torch_geometric.nn import global_add_pool
        from et_graph.protocols.graph_models import register_graph_model

        class M(nn.Module):
            def __init__(self, width, classes):
                super().__init__()
                self.a, self.b = nn.Linear(width, 8), nn.Linear(8, classes)

            def forward(self, x, edge_index, batch):
                return self.b(torch.{act}(global_add_pool(self.a(x), batch)))

        register_graph_model("{{name}}", lambda config, info: M(info["node_feature_width"],
                                                              info["classes"]))
    """
    plugin = helpers.write_plugin(tmp_path, "act", template.format(act="relu"))
    argv = tiny(cache, "--max-folds", "1", "--models", "act", "--checkpoint-dir",
                str(tmp_path / "checkpoints"), "--plugin", str(plugin))
    assert cli_main(["tudataset", *argv, "--out", str(tmp_path / "a")]) == 0
    resumed = ["tudataset", *argv, "--resume", "--out", str(tmp_path / "b")]
    unregister_graph_model("act")
    import sys

    sys.modules.pop("act_plugin", None)
    from et_graph import plugins

    plugins._LOADED.clear()
    assert cli_main(resumed) == 0  # the same code resumes
    unregister_graph_model("act")
    sys.modules.pop("act_plugin", None)
    plugins._LOADED.clear()
    helpers.write_plugin(tmp_path, "act", template.format(act="tanh"))  # edited in place
    with pytest.raises(ValueError, match="another configuration"):
        cli_main([*resumed[:-2], "--out", str(tmp_path / "c")])


def test_a_factory_of_the_wrong_kind_is_reported_in_one_line(tmp_path, cache, capsys):
    """From a user audit: the message was clear, but came below a full traceback (a plugin's
    mistake is bad input, not a library fault)."""
    plugin = helpers.write_plugin(tmp_path, "none", """
        from et_graph.protocols.graph_models import register_graph_model
        register_graph_model("{name}", lambda config, info: None)
    """)
    code = console_main(["tudataset", *small(cache, "--models", "gin,none", "--plugin",
                                             str(plugin), "--out", str(tmp_path / "run"))])
    error = capsys.readouterr().err
    assert code == 2 and "returned NoneType, not a torch.nn.Module" in error
    assert "Traceback" not in error
