"""`et-graph tune gnnbenchmark`: holdout objective (MAE minimised), test split never read,
presets that reproduce their trial."""
import copy
from pathlib import Path

import pytest

from et_graph.cli import main as cli_main
from et_graph.config import load_file, merge, parse
from et_graph.datasets.gnnbenchmark import load_benchmark
from et_graph.experiments.gnnbenchmark import GNNBenchmarkConfig
from et_graph.tuning import TuneBudget
from et_graph.tuning.cli import tune_gnnbenchmark
from et_graph.tuning.gnnbenchmark import GNNBenchmarkObjective
from et_graph.tuning.study import run_study

pytest.importorskip("optuna")
pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = ["--quick", "--no-progress", "--rw-pe-dim", "4"]


@pytest.fixture(scope="module")
def zinc():
    config = parse(GNNBenchmarkConfig, QUICK)
    return config, load_benchmark(config.data)


def _with_targets(data, split, value):
    changed = copy.deepcopy(data)
    for graph in changed.splits[split]:
        graph.y = graph.y * 0 + value
    return changed


def test_objective_never_reads_the_test_split(zinc):
    config, data = zinc
    objective = GNNBenchmarkObjective(config, "gin", data)
    assert objective.direction == "minimize" and "test" not in objective.data.splits
    value = objective()
    assert GNNBenchmarkObjective(config, "gin", _with_targets(data, "test", 99.0))() == value
    # the same change on the validation split must show: the objective can fail
    assert GNNBenchmarkObjective(config, "gin", _with_targets(data, "val", 99.0))() != value
    # and the encodings went onto copies: the caller's graphs are untouched
    assert not hasattr(data.splits["train"][0], "rw_pe")


def test_tune_minimises_mae_and_writes_presets_that_reproduce_the_best_trial(zinc, tmp_path):
    config, data = zinc
    result = tune_gnnbenchmark(config, ["et", "gatedgcn"], TuneBudget(trials=3),
                               f"sqlite:///{tmp_path}/z.db", tmp_path, data=data)
    for model in ("et", "gatedgcn"):
        summary = result["models"][model]
        assert summary["direction"] == "minimize"
        assert summary["best_value"] == min(value for _, value in summary["history"])
        preset = merge(GNNBenchmarkConfig(), load_file(result["presets"][model]))
        assert preset.protocol.models == model
        again = GNNBenchmarkObjective(preset, model, data)()
        assert again == pytest.approx(summary["best_value"], abs=1e-12)
    assert "mae (lower is better)" in (tmp_path / "study_report.md").read_text(encoding="utf-8")


def test_tune_gnnbenchmark_cli(tmp_path):
    code = cli_main(["tune", "gnnbenchmark", *QUICK, "--models", "gin", "--trials", "1",
                     "--storage", f"sqlite:///{tmp_path}/c.db", "--out", str(tmp_path / "o")])
    assert code == 0 and (tmp_path / "o" / "best_gin.toml").exists()


def test_run_study_refuses_an_unknown_direction(tmp_path):
    with pytest.raises(ValueError, match="direction"):
        run_study("s", lambda trial: 0.0, TuneBudget(trials=1), f"sqlite:///{tmp_path}/d.db",
                  direction="down")


def test_no_trial_is_pruned_before_the_warmup(zinc, tmp_path):
    config, data = zinc  # 2 epochs per trial: a warm-up of 2 leaves the pruner nothing to stop
    result = tune_gnnbenchmark(config, ["gin"], TuneBudget(trials=6, prune_warmup=2),
                               f"sqlite:///{tmp_path}/w.db", tmp_path, data=data)
    assert result["models"]["gin"]["trials"] == {"complete": 6, "pruned": 0, "fail": 0,
                                                 "running": 0, "interrupted": 0,
                                                 "stopped_by_time_limit": 0}
    assert "median pruning after 2 epochs" in (tmp_path / "study_report.md").read_text(
        encoding="utf-8")
    with pytest.raises(ValueError, match="prune_warmup"):
        TuneBudget(prune_warmup=-1)


def test_several_tuning_seeds_score_the_mean_of_their_runs(zinc, tmp_path):
    from et_graph.protocols.gnnbenchmark import train_one

    config, data = zinc
    objective = GNNBenchmarkObjective(config, "gin", data, tune_seeds=2)
    single = [train_one("gin", objective.data, seed, config.train, config.et, config.baselines,
                        progress=False, evaluate_test=False)["val"] for seed in (0, 1)]
    assert single[0] != single[1]  # two seeds, two scores: the mean is not one of them
    assert objective() == pytest.approx(sum(single) / 2, abs=1e-12)
    with pytest.raises(ValueError, match="tune_seeds"):
        GNNBenchmarkObjective(config, "gin", data, tune_seeds=0)
    result = tune_gnnbenchmark(config, ["gin"], TuneBudget(trials=1), f"sqlite:///{tmp_path}/s.db",
                               tmp_path, data=data, tune_seeds=2)
    assert "mean of model seeds 0-1" in Path(result["presets"]["gin"]).read_text(encoding="utf-8")
    assert result["models"]["gin"]["study"] == "gnnbenchmark-ZINC-gin-seeds2"
