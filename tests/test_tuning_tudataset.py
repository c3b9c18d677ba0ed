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
    report = (tmp_path / "o" / "study_report.md").read_text(encoding="utf-8")
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


# --- --tune-bonds: each model's one switch for reading the bond types -------------------------
BOND_SMALL = ["--dataset", "MUTAG", "--epochs", "2", "--no-progress", "--pe-dim", "0",
              "--rw-pe-dim", "0"]


@pytest.fixture(scope="module")
def mutag_bonds():
    """MUTAG as loaded, with its one-hot bond types kept as edge features."""
    from et_graph.experiments.tudataset import load_graphs

    return load_graphs(parse(TUDatasetConfig, BOND_SMALL).data)


class _CountingTrial:
    """Answers every suggestion with its first choice and records the parameter names."""

    def __init__(self):
        self.names = []

    def suggest_categorical(self, name, choices):
        self.names.append(name)
        return choices[0]

    def suggest_int(self, name, low, high, **kwargs):
        self.names.append(name)
        return low

    def suggest_float(self, name, low, high, **kwargs):
        self.names.append(name)
        return low


@pytest.mark.parametrize("model,switch", [("et", "et.message_passing_edges"),
                                          ("gin", "baselines.gin_edges"),
                                          ("structure_agnostic", "data.incident_edge_sums")])
def test_bond_tuning_adds_exactly_one_switch_to_every_space(model, switch):
    from et_graph.tuning.tudataset import TU_SEARCH_SPACES, with_bond_switch

    plain, bonds = _CountingTrial(), _CountingTrial()
    TU_SEARCH_SPACES[model](plain)
    with_bond_switch(model)(bonds)
    section, name = switch.split(".")
    assert bonds.names == plain.names + [name]  # the same budget: one more choice each
    first_choices = _CountingTrial()
    overrides = with_bond_switch(model)(first_choices)
    assert overrides[section][name] is False  # the off state is the first choice


def test_bond_trials_build_models_that_read_the_bonds(mutag_bonds):
    from optuna.trial import FixedTrial

    from et_graph.experiments.tudataset import model_factories

    graphs, info = mutag_bonds
    config = parse(TUDatasetConfig, BOND_SMALL)
    et = TUObjective(config, "et", 1, graphs, info, bonds=True)
    trial = FixedTrial({"hidden": 32, "blocks": 1, "steps": 1, "alpha": 0.3, "dropout": 0.0,
                        "readout": "cls", "lr": 1e-3, "message_passing_edges": True})
    model = model_factories(et.trial_config(trial), info)["et"]()
    assert info["edge_features"] > 0 and model.message_passing.edge_linears is not None
    plain = et.trial_config(FixedTrial({**trial.params, "message_passing_edges": False}))
    assert model_factories(plain, info)["et"]().message_passing.edge_linears is None
    gin = TUObjective(config, "gin", 1, graphs, info, bonds=True)
    trial = FixedTrial({"gin_hidden": 32, "gin_layers": 2, "baseline_dropout": 0.0, "lr": 1e-3,
                        "gin_edges": True})
    assert gin.trial_config(trial).baselines.gin_edges is True


def test_the_mlps_bond_trial_trains_on_what_loading_with_the_sums_gives(mutag_bonds):
    """Switching data.incident_edge_sums on in a trial must train the MLP on the summed bond
    columns (not silently on the plain features): the same accuracy as a config that loads the
    graphs with the sums."""
    from optuna.trial import FixedTrial

    from et_graph.experiments.tudataset import load_graphs

    graphs, info = mutag_bonds
    config = parse(TUDatasetConfig, BOND_SMALL)
    params = {"gin_hidden": 32, "baseline_dropout": 0.0, "lr": 3e-3}
    tuned = TUObjective(config, "structure_agnostic", 2, graphs, info, bonds=True)
    with_sums = tuned(FixedTrial({**params, "incident_edge_sums": True}))
    without = tuned(FixedTrial({**params, "incident_edge_sums": False}))
    loaded_config = parse(TUDatasetConfig, [*BOND_SMALL, "--incident-edge-sums"])
    loaded = TUObjective(loaded_config, "structure_agnostic", 2, *load_graphs(loaded_config.data))
    assert with_sums == loaded(FixedTrial(params))
    assert tuned.graphs_for(tuned.trial_config(FixedTrial(
        {**params, "incident_edge_sums": True})))[1]["node_feature_width"] == \
        info["node_feature_width"] + info["edge_features"]
    assert without == TUObjective(config, "structure_agnostic", 2, graphs, info)(
        FixedTrial(params))


def test_bond_tuning_refuses_where_a_switch_cannot_act(mutag, mutag_bonds):
    graphs, info = mutag  # the fixture drops the edge features
    config = parse(TUDatasetConfig, SMALL)
    with pytest.raises(ValueError, match="needs edge features, and MUTAG has none"):
        TUObjective(config, "gin", 1, graphs, info, bonds=True)
    graphs, info = mutag_bonds
    with pytest.raises(ValueError, match="needs message-passing layers"):
        TUObjective(parse(TUDatasetConfig, [*BOND_SMALL, "--message-passing-layers", "0"]),
                    "et", 1, graphs, info, bonds=True)
    with pytest.raises(ValueError, match="needs it off in the config"):
        TUObjective(parse(TUDatasetConfig, [*BOND_SMALL, "--incident-edge-sums"]),
                    "structure_agnostic", 1, graphs, info, bonds=True)
    with pytest.raises(ValueError, match="--tune-bonds applies to `tune tudataset`"):
        cli_main(["tune", "gnnbenchmark", "--tune-bonds", "--trials", "1"])
    # each task's own budget flag: given to another task it is refused, not ignored
    with pytest.raises(ValueError, match="--tune-folds applies to `tune tudataset`"):
        cli_main(["tune", "anomaly", "--tune-folds", "5", "--trials", "1"])
    with pytest.raises(ValueError, match="--tune-seeds applies to `tune gnnbenchmark`"):
        cli_main(["tune", "tudataset", "--tune-seeds", "3", "--trials", "1"])


def test_tune_bonds_help_names_every_switch_the_tuner_adds(monkeypatch):
    from et_graph.tuning import cli, tudataset

    help_text = " ".join(cli.build_parser("tudataset").format_help().split())
    for model, (section, name) in tudataset.BOND_SWITCHES.items():
        assert f"{model}: {section}.{name}" in help_text
    # The help is read from the table, not written beside it.
    monkeypatch.setitem(tudataset.BOND_SWITCHES, "gin", ("baselines", "renamed_switch"))
    assert "gin: baselines.renamed_switch" in " ".join(
        cli.build_parser("tudataset").format_help().split())


def test_tune_bonds_cli_names_its_studies_apart(tmp_path):
    code = cli_main(["tune", "tudataset", *BOND_SMALL, "--models", "structure_agnostic",
                     "--tune-bonds", "--trials", "2", "--tune-folds", "1", "--storage",
                     f"sqlite:///{tmp_path}/b.db", "--out", str(tmp_path / "o")])
    assert code == 0
    report = (tmp_path / "o" / "study_report.md").read_text(encoding="utf-8")
    assert "incident_edge_sums" in report
    import json

    summary = json.loads((tmp_path / "o" / "study_report.json").read_text(encoding="utf-8"))
    assert summary["models"]["structure_agnostic"]["study"].endswith("-bonds")
    preset = merge(TUDatasetConfig(), load_file(tmp_path / "o" / "best_structure_agnostic.toml"))
    best = summary["models"]["structure_agnostic"]["best_params"]["incident_edge_sums"]
    assert preset.data.incident_edge_sums is best


def test_the_objective_takes_graphs_and_info_together(mutag):
    graphs, info = mutag
    config = parse(TUDatasetConfig, SMALL)
    with pytest.raises(ValueError, match="pass graphs and info together"):
        TUObjective(config, "gin", 1, graphs=graphs)  # failed in the trial: None["..."]
    with pytest.raises(ValueError, match="pass graphs and info together"):
        TUObjective(config, "gin", 1, info=info)  # was replaced by the loaded info, silently
