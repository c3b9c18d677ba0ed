"""Registered benchmark models: a model of your own as a model of `et-graph gnnbenchmark` and
its tuner, named in --models, loaded by --plugin, recorded in the results."""
import json
import textwrap
import warnings
from pathlib import Path

import helpers
import pytest
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import global_mean_pool

from et_graph.baselines.gnnbenchmark_baselines import InputEncoder
from et_graph.cli import console_main
from et_graph.cli import main as cli_main
from et_graph.config import load_file, merge, parse
from et_graph.datasets.gnnbenchmark import add_random_walk_encoding, load_benchmark
from et_graph.datasets.gnnbenchmark_common import BenchmarkData
from et_graph.exceptions import ConfigWarning
from et_graph.experiments import gnnbenchmark
from et_graph.protocols.benchmark_models import (
    check_outputs,
    register_benchmark_model,
    registered_benchmark_models,
    unregister_benchmark_model,
)
from et_graph.protocols.gnnbenchmark_config import GNNBenchmarkConfig
from et_graph.protocols.graph_models import register_graph_model, registered_graph_models

pytestmark = pytest.mark.usefixtures("one_thread", "plugin_registries")

ROOT = Path(__file__).resolve().parents[1]


class MeanPoolModel(nn.Module):
    """Node inputs encoded, a mean over each graph (graph tasks), a linear head."""

    def __init__(self, data, hidden, dropout):
        super().__init__()
        self.encode = InputEncoder(hidden, num_types=data.num_node_types, in_dim=data.node_dim)
        self.dropout = nn.Dropout(dropout)
        self.per_node = data.task == "node"
        self.head = nn.Linear(hidden, data.num_outputs)

    def forward(self, x, edge_index, batch, edge_attr=None, rw_pe=None):
        h = self.dropout(torch.relu(self.encode(x)))
        return self.head(h if self.per_node else global_mean_pool(h, batch))


def make_mean_pool(config, data):
    return MeanPoolModel(data, config.baselines.baseline_hidden, config.baselines.baseline_dropout)


def mean_pool_space(trial):
    return {"baselines": {"baseline_dropout": trial.suggest_float("dropout", 0.0, 0.3)},
            "train": {"lr": trial.suggest_float("lr", 1e-3, 1e-2, log=True)}}


def quick(*argv):
    """The ZINC proxy at --quick (48 training graphs, 2 epochs, seeds 0,1, width 16)."""
    return ["--quick", "--no-progress", *argv]


def test_a_registered_model_is_a_row_of_the_run(tmp_path):
    calls = []

    def factory(config, data):
        calls.append((config.baselines.baseline_hidden, data.task, data.num_node_types))
        return make_mean_pool(config, data)

    register_benchmark_model("meanpool", factory)
    out = tmp_path / "run"
    results = gnnbenchmark.main(quick("--models", "et,MEANPOOL,gin", "--out", str(out)))
    # built once before any training (its kind and outputs checked), then once per seed, from
    # the run's config and the loaded data
    assert calls == [(16, "regression", 28)] * 3
    assert list(results["models"]) == ["et", "meanpool", "gin"]  # the --models order
    row = results["models"]["meanpool"]
    assert len(row["mae"]["values"]) == 2 and row["seeds"] == [0, 1]
    assert row["params"] == 28 * 16 + 16 + 1  # its own model: the embedding and the head
    assert [(d["first"], d["second"]) for d in results["differences"]] == [
        ("et", "meanpool"), ("et", "gin")]
    assert "meanpool = MeanPoolModel" in results["protocol"]
    markdown = (out / "results.md").read_text(encoding="utf-8")
    assert "| meanpool |" in markdown and "| et − meanpool | mae |" in markdown
    written = json.loads((out / "results.json").read_text(encoding="utf-8"))
    recorded = written["meta"]["plugins"]["benchmark_models"]["meanpool"]
    assert recorded["factory"].endswith("test_a_registered_model_is_a_row_of_the_run"
                                        ".<locals>.factory")
    assert recorded["path"].endswith("test_benchmark_plugins.py")
    assert "graph_models" not in written["meta"]["plugins"]  # none registered
    assert (out / "val_curves.png").stat().st_size > 0


def test_the_curve_plot_draws_a_registered_row_in_a_colour_of_its_own(tmp_path, monkeypatch):
    from et_graph.plots.colours import MODEL_COLOURS
    from et_graph.plots.figures import OwnFigures

    figures = []
    monkeypatch.setattr(OwnFigures, "close", staticmethod(lambda fig=None: figures.append(fig)))
    data = BenchmarkData("toy", "generated", {"train": [], "val": [], "test": []},
                         task="regression", metric="mae", num_outputs=1)
    gnnbenchmark._plot_curves(tmp_path, {"et": [[2.0, 1.0]], "gin": [[2.0, 1.5]],
                                         "meanpool": [[3.0, 2.0]]}, data)
    lines = {line.get_label(): line.get_color() for line in figures[0].axes[0].get_lines()}
    assert lines["et"] == MODEL_COLOURS["et"] and lines["gin"] == MODEL_COLOURS["gin"]
    assert lines["meanpool"] not in MODEL_COLOURS.values()
    # a registered model under a name with a colour of its own elsewhere (the anomaly GAT's
    # purple is GatedGCN's here) is drawn in a spare one
    gnnbenchmark._plot_curves(tmp_path, {"gatedgcn": [[2.0, 1.0]], "gat": [[2.0, 1.5]]}, data)
    lines = {line.get_label(): line.get_color() for line in figures[1].axes[0].get_lines()}
    assert lines["gatedgcn"] == MODEL_COLOURS["gatedgcn"]
    assert lines["gat"] not in MODEL_COLOURS.values()


def test_an_unknown_model_names_the_plugin_flag_and_a_registered_one_is_known():
    with pytest.raises(ValueError, match=r"unknown models \['meanpool'\].*--plugin MODULE"):
        parse(GNNBenchmarkConfig, ["--models", "et,meanpool"])
    register_benchmark_model("meanpool", make_mean_pool)
    assert parse(GNNBenchmarkConfig, ["--models", "gin,MeanPool"]).protocol.model_names == [
        "gin", "meanpool"]
    unregister_benchmark_model("meanpool")
    with pytest.raises(ValueError, match="unknown models"):
        parse(GNNBenchmarkConfig, ["--models", "meanpool"])


@pytest.mark.parametrize("name, message", [
    ("et", "taken"), ("gin", "taken"), ("gatedgcn", "taken"),
    # the figures draw NAME_ensemble in NAME's colour; the tuner names the study of N tuning
    # seeds MODEL-seedsN, so gin-seeds2 would resume GIN's two-seed study
    ("gin_ensemble", "taken"), ("gin-seeds2", "taken"), ("mine-seeds10", "taken"),
    ("SAGE", "lower-case"), ("a@b", "lower-case"), ("a,b", "lower-case"), ("", "lower-case"),
    (3, "lower-case"),
])
def test_names_that_clash_or_cannot_stand_in_a_model_list_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        register_benchmark_model(name, make_mean_pool)
    assert dict(registered_benchmark_models()) == {}


def test_registrations_that_cannot_work_are_refused():
    with pytest.raises(TypeError, match="factory must be callable"):
        register_benchmark_model("meanpool", "make_mean_pool")
    # (a module is callable, but one model would be trained again for every seed)
    data = BenchmarkData("toy", "generated", {}, task="regression", metric="mae",
                         num_outputs=1, num_node_types=4)
    with pytest.raises(TypeError, match=r"is a model \(MeanPoolModel\), not a factory: pass a "
                                        r"function \(config, data\)"):
        register_benchmark_model("meanpool", MeanPoolModel(data, 8, 0.0))
    with pytest.raises(TypeError, match=r"factory must take \(config, data\)"):
        register_benchmark_model("meanpool", lambda data: make_mean_pool(None, data))
    with pytest.raises(TypeError, match="search_space must be callable"):
        register_benchmark_model("meanpool", make_mean_pool, search_space={"lr": [0.1]})
    first = register_benchmark_model("meanpool", make_mean_pool)
    with pytest.raises(ValueError, match="benchmark model name 'meanpool' is registered already"):
        register_benchmark_model("meanpool", make_mean_pool, search_space=mean_pool_space)
    second = register_benchmark_model("meanpool", make_mean_pool, search_space=mean_pool_space,
                                      replace=True)
    assert registered_benchmark_models()["meanpool"] is second and second is not first
    with pytest.raises(ValueError, match="taken"):  # replace never replaces a built-in
        register_benchmark_model("gatedgcn", make_mean_pool, replace=True)
    with pytest.raises(KeyError, match="no benchmark model is registered under 'gin'"):
        unregister_benchmark_model("gin")
    # the tasks' names are apart: a TU graph model may share it, and is not a benchmark model
    register_graph_model("meanpool", lambda config, info: None)
    assert list(registered_benchmark_models()) == ["meanpool"] == list(registered_graph_models())


class NodeValues(nn.Module):
    """One value per node: ZINC's regression needs one per graph (a pooling forgotten)."""

    def __init__(self):
        super().__init__()
        self.value = nn.Embedding(28, 1)

    def forward(self, x, edge_index, batch, edge_attr=None, rw_pe=None):
        return self.value(x.view(-1))


class Pooled(NodeValues):
    """One value per graph, passed through ``then``."""

    def __init__(self, then):
        super().__init__()
        self.then = then

    def forward(self, x, edge_index, batch, edge_attr=None, rw_pe=None):
        return self.then(global_mean_pool(self.value(x.view(-1)), batch))


def test_a_fault_inside_forward_keeps_its_own_traceback_and_shared_weights_are_refused():
    # (a review) a TypeError raised inside forward was reported as a call it could not take;
    # a new module around a shared trained submodule passed the new-module check
    class Faulty(NodeValues):
        def forward(self, x, edge_index, batch, edge_attr=None, rw_pe=None):
            return torch.cat(x, x)

    register_benchmark_model("faulty", lambda config, data: Faulty())
    with pytest.raises(TypeError, match="cat()") as raised:
        gnnbenchmark.main(quick("--models", "faulty"))
    assert "calling it on two training graphs" not in str(raised.value)
    shared = nn.Embedding(28, 1)

    def sharing(config, data):
        model = Pooled(lambda y: y)
        model.value = shared
        return model

    register_benchmark_model("sharing", sharing)
    with pytest.raises(TypeError, match="'sharing' returned a Pooled that shares trainable "
                                        r"parameters with a model it returned before \(value"):
        gnnbenchmark.main(quick("--models", "sharing"))


class Positional(NodeValues):
    """A forward without the contract's keywords."""

    def forward(self, x, edge_index, batch):
        return global_mean_pool(self.value(x.view(-1)), batch)


class DecoratedPositional(NodeValues):
    """The same, decorated."""

    @torch.no_grad()
    def forward(self, x, edge_index, batch):
        return global_mean_pool(self.value(x.view(-1)), batch)


def test_a_registered_model_never_sees_ets_laplacian_pe(tmp_path):
    # The PE is computed only in runs with ET: a model reading it through forward_data read it
    # only beside ET, so that its row depended on the other models run (an audit)
    seen = []

    class Peeking(MeanPoolModel):
        def forward_data(self, batch):
            seen.append(sorted(key for key in ("lap_pe", "cls_lap_pe", "rw_pe") if key in batch))
            return self(batch.x, batch.edge_index, batch.batch)

    register_benchmark_model("peek", lambda config, data: Peeking(
        data, config.baselines.baseline_hidden, 0.0))
    gnnbenchmark.main(quick("--models", "et,peek", "--rw-pe-dim", "2", "--seeds", "0"))
    assert seen and all(keys == ["rw_pe"] for keys in seen)  # every model's encoding stays


@pytest.mark.parametrize("factory, error, message", [
    (lambda config, data: 1, TypeError,
     "registered benchmark model 'wrong' returned int, not a torch.nn.Module"),
    (lambda config, data: NodeValues(), ValueError,
     r"registered benchmark model 'wrong': its outputs on 2 training graphs have shape \[\d+\]; "
     r"ZINC proxy's regression task needs one value per graph"),
    # integer values, NaN and a forward without the keywords failed only later, or in a bare
    # TypeError (an audit)
    (lambda config, data: Pooled(lambda y: y.long()), TypeError,
     "'wrong': its outputs on two training graphs are int64, not floating point"),
    (lambda config, data: Pooled(lambda y: y * float("nan")), ValueError,
     "'wrong': its outputs on two training graphs are not finite"),
    (lambda config, data: Positional(), TypeError,
     r"'wrong': calling it on two training graphs failed: .*unexpected keyword argument"),
    # a decorated forward's wrapper frame hid the call it could not take (a review)
    (lambda config, data: DecoratedPositional(), TypeError,
     r"'wrong': calling it on two training graphs failed: .*unexpected keyword argument"),
])
def test_a_factory_of_the_wrong_kind_or_shape_is_refused_before_any_training(
        factory, error, message, monkeypatch):
    register_benchmark_model("wrong", factory)
    trained = []
    monkeypatch.setattr(gnnbenchmark, "train_one", lambda *args, **kwargs: trained.append(1))
    with pytest.raises(error, match=message):
        gnnbenchmark.main(quick("--models", "gin,wrong"))
    assert trained == []


def test_outputs_are_checked_against_each_task():
    """Node tasks need logits per node, graph classification logits per graph."""
    graphs = [Data(x=torch.rand(5, 3), edge_index=torch.tensor([[0, 1], [1, 0]]),
                   y=torch.tensor([1])) for _ in range(2)]

    def toy(task):
        return BenchmarkData("toy", "generated", {"train": graphs}, task=task,
                             metric="accuracy", num_outputs=4, node_dim=3)

    config = parse(GNNBenchmarkConfig, [])
    for task, other, shape, wanted in (("classification", "node", "2, 4", "10 training nodes"),
                                       ("node", "classification", "10, 4", "2 training graphs")):
        check_outputs(make_mean_pool(config, toy(task)), toy(task), "it")
        with pytest.raises(ValueError, match=rf"it: its outputs on {wanted} have shape "
                                             rf"\[{shape}\]; toy's {other} task needs"):
            check_outputs(make_mean_pool(config, toy(task)), toy(other), "it")


def test_every_seed_is_built_from_the_registrations_the_run_started_with():
    """A name registered again while the run goes on (replace=True) must not mix two models in
    one row."""
    built = []

    def first(config, data):
        built.append("first")
        register_benchmark_model("swapped", second, replace=True)  # mid-run, by anyone
        return make_mean_pool(config, data)

    def second(config, data):
        built.append("second")
        return make_mean_pool(config, data)

    register_benchmark_model("swapped", first)
    gnnbenchmark.main(quick("--models", "swapped"))
    assert built == ["first"] * 3  # the check before training, then both seeds


def test_a_checkpoint_is_resumed_only_by_the_factory_that_trained_it(tmp_path):
    def other(config, data):  # the same model, from another factory
        return make_mean_pool(config, data)

    register_benchmark_model("meanpool", make_mean_pool)
    argv = quick("--models", "meanpool", "--seeds", "0", "--checkpoint-dir",
                 str(tmp_path / "checkpoints"))
    first = gnnbenchmark.main(argv)
    again = gnnbenchmark.main([*argv, "--resume"])  # its own checkpoint: resumed
    assert again["models"]["meanpool"]["mae"] == first["models"]["meanpool"]["mae"]
    register_benchmark_model("meanpool", other, replace=True)
    with pytest.raises(ValueError, match=r"another configuration \(now: .*factory=.*\.other"):
        gnnbenchmark.main([*argv, "--resume"])


PLUGIN = '''
from torch import nn
from torch_geometric.nn import global_add_pool

from et_graph.baselines.gnnbenchmark_baselines import InputEncoder
from et_graph.protocols.benchmark_models import register_benchmark_model


class Pooled(nn.Module):
    def __init__(self, data):
        super().__init__()
        self.encode = InputEncoder(8, num_types=data.num_node_types, in_dim=data.node_dim)
        self.head = nn.Linear(8, data.num_outputs)

    def forward(self, x, edge_index, batch, edge_attr=None, rw_pe=None):
        return self.head(global_add_pool(self.encode(x), batch))


register_benchmark_model("{name}", lambda config, data: Pooled(data),
                         search_space=lambda trial: {{"train": {{
                             "lr": trial.suggest_float("lr", 1e-3, 1e-2, log=True)}}}})
'''


def write_plugin(folder, name):
    return helpers.write_plugin(folder, name, PLUGIN)


def test_the_plugin_flag_loads_a_file_before_the_models_are_read(tmp_path, capsys):
    plugin = write_plugin(tmp_path, "pooled")
    out = tmp_path / "run"
    argv = ["gnnbenchmark", *quick("--models", "et,pooled", "--seeds", "0", "--out", str(out))]
    assert console_main(argv) == 2  # not loaded: refused, naming the flag
    assert "--plugin MODULE" in capsys.readouterr().err
    assert cli_main([*argv, "--plugin", str(plugin)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert list(results["models"]) == ["et", "pooled"]
    plugins = results["meta"]["plugins"]
    assert plugins["loaded"] == [{"module": "pooled_plugin", "path": str(plugin.resolve())}]
    assert plugins["benchmark_models"]["pooled"]["path"] == str(plugin.resolve())
    assert "| pooled |" in (out / "results.md").read_text(encoding="utf-8")


def test_plugins_come_from_the_environment_and_the_help_names_the_flag(tmp_path, monkeypatch):
    from et_graph.cli import build_parser
    from et_graph.plugins import PLUGINS_ENV
    from et_graph.tuning.cli import build_parser as tune_parser

    assert "register_benchmark_model" in build_parser("gnnbenchmark").format_help()
    assert "register_benchmark_model" in tune_parser("gnnbenchmark").format_help()
    first, second = write_plugin(tmp_path, "first"), write_plugin(tmp_path, "second")
    monkeypatch.setenv(PLUGINS_ENV, str(second))
    monkeypatch.setattr(gnnbenchmark, "run", lambda config: config)
    chosen = gnnbenchmark.main(["--plugin", str(first), "--models", "first,second,gin"])
    assert chosen.protocol.model_names == ["first", "second", "gin"]


def test_a_plugin_that_fails_leaves_none_of_its_models_registered(tmp_path):
    """A benchmark model and a graph model registered before the plugin failed are both
    removed, so that a retry fails the same way, not with "registered already"."""
    from et_graph.plugins import load_plugins

    failing = write_plugin(tmp_path, "half")
    failing.write_text(failing.read_text(encoding="utf-8") + textwrap.dedent('''
        from et_graph.protocols.graph_models import register_graph_model
        register_graph_model("half_graph", lambda config, info: None)
        raise RuntimeError("late")
        '''), encoding="utf-8")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="late"):
            load_plugins([str(failing)])
        assert "half" not in registered_benchmark_models()
        assert "half_graph" not in registered_graph_models()


def test_no_flag_is_called_unread_on_a_registered_models_account(monkeypatch):
    """Its factory is given the whole config: the baselines' width, or ET's, may be what it
    reads; the tuner's check says the same."""
    from et_graph.tuning.cli import warn_flags_of_tuning

    monkeypatch.setattr(gnnbenchmark, "run", lambda config: config)
    with pytest.warns(ConfigWarning, match="et.blocks: no model of this run"):
        gnnbenchmark.main(["--models", "gin", "--blocks", "3"])
    register_benchmark_model("meanpool", make_mean_pool, search_space=mean_pool_space)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gnnbenchmark.main(["--models", "gin,meanpool", "--blocks", "3"])
        config = parse(GNNBenchmarkConfig, ["--models", "meanpool", "--blocks", "3"])
        assert warn_flags_of_tuning("gnnbenchmark", config, {"et.blocks"}) == []


# ----------------------------------------------------------------------------------------------
# Tuning
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zinc():
    config = parse(GNNBenchmarkConfig, quick())
    return config, load_benchmark(config.data)


def test_a_registered_search_space_tunes_the_model_and_its_preset_reproduces(tmp_path, zinc):
    pytest.importorskip("optuna")
    from et_graph.tuning import TuneBudget
    from et_graph.tuning.cli import tune_gnnbenchmark
    from et_graph.tuning.gnnbenchmark import GNNBenchmarkObjective

    config, data = zinc
    seen = []

    def factory(config, data):
        seen.append(config.baselines.baseline_dropout)
        return make_mean_pool(config, data)

    register_benchmark_model("meanpool", factory, search_space=mean_pool_space)
    result = tune_gnnbenchmark(config, ["gin", "meanpool"], TuneBudget(trials=2),
                               f"sqlite:///{tmp_path}/s.db", tmp_path, data=data)
    summary = result["models"]["meanpool"]
    # the same budget as GIN's, in the metric's direction
    assert summary["trial_numbers"] == result["models"]["gin"]["trial_numbers"] == [0, 1]
    assert summary["direction"] == "minimize"
    # built once from the base config (its kind checked), then with each trial's suggestion
    assert seen[0] == config.baselines.baseline_dropout and len(set(seen[1:])) == 2
    preset = load_file(result["presets"]["meanpool"])
    assert preset["protocol"]["models"] == "meanpool"
    assert preset["baselines"]["baseline_dropout"] == summary["best_params"]["dropout"]
    assert 'plugin = "test_benchmark_plugins"' in (tmp_path / "best_meanpool.toml").read_text(
        encoding="utf-8")  # registered from this module, not by a --plugin
    value = GNNBenchmarkObjective(merge(GNNBenchmarkConfig(), preset), "meanpool", data)()
    assert value == pytest.approx(summary["best_value"], abs=1e-12)


def test_tuning_a_registered_model_without_a_space_is_refused(tmp_path, zinc):
    pytest.importorskip("optuna")
    from et_graph.tuning import TuneBudget
    from et_graph.tuning.cli import tune_gnnbenchmark

    config, data = zinc
    register_benchmark_model("meanpool", make_mean_pool)
    with pytest.raises(ValueError, match="benchmark model 'meanpool' has no search space.*"
                                         "register it with search_space=space"):
        tune_gnnbenchmark(config, ["gin", "meanpool"], TuneBudget(trials=1), None, tmp_path,
                          data=data)
    assert not (tmp_path / "best_gin.toml").exists()  # refused before any study ran


def test_the_tune_command_loads_plugins(tmp_path):
    pytest.importorskip("optuna")
    plugin = write_plugin(tmp_path, "pooled")
    out = tmp_path / "tune"
    assert cli_main(["tune", "gnnbenchmark", "--plugin", str(plugin), *quick(),
                     "--models", "pooled", "--trials", "1",
                     "--storage", f"sqlite:///{tmp_path}/t.db", "--out", str(out)]) == 0
    assert load_file(out / "best_pooled.toml")["protocol"]["models"] == "pooled"
    assert f'plugin = "{plugin.resolve()}"' in (out / "best_pooled.toml").read_text(
        encoding="utf-8")
    report = json.loads((out / "study_report.json").read_text(encoding="utf-8"))
    assert report["meta"]["plugins"]["loaded"][0]["path"] == str(plugin.resolve())
    # the preset runs the model, with its plugin
    results = cli_main(["gnnbenchmark", "--plugin", str(plugin), "--config",
                        str(out / "best_pooled.toml"), *quick("--seeds", "0")])
    assert results == 0


def test_the_example_plugin_serves_every_task_of_the_benchmark():
    """Regression (ZINC), node classification (PATTERN) and graph classification (a toy set
    in MNIST's layout: float features, one label per graph)."""
    from et_graph.plugins import load_plugins

    load_plugins([str(ROOT / "examples" / "benchmark_plugin.py")])
    entry = registered_benchmark_models()["sage_bench"]
    assert entry.search_space is not None
    for dataset in ("ZINC", "PATTERN"):
        config = parse(GNNBenchmarkConfig, quick("--dataset", dataset, "--rw-pe-dim", "3"))
        data = load_benchmark(config.data)
        add_random_walk_encoding(data, 3, progress=False)
        assert entry.check(config, data) == "SAGEBenchmarkModel"
    graphs = [Data(x=torch.rand(6, 3), edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]),
                   y=torch.tensor([7])) for _ in range(3)]
    data = BenchmarkData("MNIST", "official", {"train": graphs, "val": graphs, "test": graphs},
                         task="classification", metric="accuracy", num_outputs=10, node_dim=3)
    assert entry.check(parse(GNNBenchmarkConfig, quick()), data) == "SAGEBenchmarkModel"
