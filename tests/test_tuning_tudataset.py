"""`et-graph tune tudataset`: inner-validation objective, test folds never read, presets."""
import pytest

from et_graph.cli import main as cli_main
from et_graph.config import load_file, merge, parse
from et_graph.datasets.tudataset import load_tudataset
from et_graph.experiments.tudataset import TUDatasetConfig
from et_graph.protocols.graph_cv import graph_labels, stratified_folds
from et_graph.tuning import TuneBudget
from et_graph.tuning.cli import tune_tudataset
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
    info = {**info, "edge_features": 0}
    return graphs, info


def test_scrambled_test_folds_leave_the_objective_unchanged(mutag, tmp_path):
    graphs, info = mutag
    config = parse(TUDatasetConfig, SMALL)
    splits = stratified_folds(graph_labels(graphs), 10, 0)
    # Scramble the test fold of the one tuning fold. (With two tuning folds, each fold's test
    # graphs are training graphs of the other, so scrambling both would rightly change it.)
    scrambled = [g.clone() for g in graphs]
    for i in splits[0][1]:
        scrambled[i].y = 1 - scrambled[i].y
    values = []
    for data in (graphs, scrambled):
        objective = TUObjective(config, "gin", tune_folds=1, graphs=data, info=info,
                                splits=splits)
        values.append(objective())
    assert values[0] == values[1]
    leaky = [g.clone() for g in graphs]  # the same scrambling on validation graphs must show
    from et_graph.protocols.graph_cv import inner_split

    _, val = inner_split(splits[0][0], graph_labels(graphs), 0.1, 0)
    for i in val:
        leaky[i].y = leaky[i].y * 0  # every validation graph relabelled as class 0
    assert TUObjective(config, "gin", 1, leaky, info, splits)() != values[0]


def test_tune_writes_presets_that_reproduce_the_best_trial(mutag, tmp_path):
    graphs, info = mutag
    config = parse(TUDatasetConfig, SMALL)
    result = tune_tudataset(config, ["et", "gin"], TuneBudget(trials=2),
                            f"sqlite:///{tmp_path}/tu.db", tmp_path, tune_folds=2,
                            graphs=graphs, info=info)
    for model in ("et", "gin"):
        preset = merge(TUDatasetConfig(), load_file(result["presets"][model]))
        assert preset.protocol.models == model
        value = TUObjective(preset, model, 2, graphs, info)()
        assert value == pytest.approx(result["models"][model]["best_value"], abs=1e-12)
    assert (tmp_path / "study_report.md").exists()


def test_tune_tudataset_cli(tmp_path):
    code = cli_main(["tune", "tudataset", *SMALL, "--models", "structure_agnostic",
                     "--trials", "1", "--tune-folds", "1", "--storage",
                     f"sqlite:///{tmp_path}/c.db", "--out", str(tmp_path / "o")])
    assert code == 0 and (tmp_path / "o" / "best_structure_agnostic.toml").exists()
    # one pruner step per fold: with 1 tuned fold no trial can be pruned, and the report says so
    report = (tmp_path / "o" / "study_report.md").read_text()
    assert "no pruning" in report and "epochs" not in report.split("Budget")[1].split(".")[0]
    with pytest.raises(ValueError, match="exceeds the 10 outer folds"):
        cli_main(["tune", "tudataset", *SMALL, "--models", "structure_agnostic",
                  "--trials", "1", "--tune-folds", "50", "--storage",
                  f"sqlite:///{tmp_path}/e.db", "--out", str(tmp_path / "q")])
    with pytest.raises(ValueError, match="--metric applies to `tune anomaly`"):
        cli_main(["tune", "tudataset", *SMALL, "--models", "structure_agnostic",
                  "--metric", "auprc", "--trials", "1", "--tune-folds", "1"])
    with pytest.raises(ValueError, match="per-fold grid"):
        cli_main(["tune", "tudataset", *SMALL, "--models", "structure_agnostic",
                  "--grid", "fast: train.lr=0.03", "--trials", "1", "--tune-folds", "1",
                  "--storage", f"sqlite:///{tmp_path}/d.db", "--out", str(tmp_path / "p")])


def test_the_mlp_trials_set_the_mlps_own_width_and_dropout():
    from optuna.trial import FixedTrial

    from et_graph.experiments.tudataset import model_factories
    from et_graph.tuning.tudataset import agnostic_space

    # recorded under GIN's names, as MLP studies always were
    trial = FixedTrial({"gin_hidden": 32, "baseline_dropout": 0.25, "lr": 1e-3})
    config = merge(parse(TUDatasetConfig, ["--models", "structure_agnostic"]),
                   {f"{section}.{key}": value
                    for section, values in agnostic_space(trial).items()
                    for key, value in values.items()})
    mlp = model_factories(config, {"node_feature_width": 7, "classes": 2})["structure_agnostic"]()
    assert (mlp.head[0].out_features, mlp.head[2].p) == (32, 0.25)
