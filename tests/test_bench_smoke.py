"""The benchmark script runs and prints every ratio row (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import benchmark_module

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_etconv.py"


def test_quick_benchmark_prints_ratio_rows(tmp_path):
    out_json = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--sizes", "150x1200", "--threads", "1",
         "--json", str(out_json)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    for label in (
        "ETConv / TransformerConv time",
        "ETConv / GATConv time",
        "ETConv / TransformerConv peak memory",
        "analytic / autograd time",
        "torch.compile speed-up",
    ):
        row = next(line for line in done.stdout.splitlines() if line.startswith(f"| {label}"))
        cells = [cell.strip() for cell in row.strip("|").split("|")[1:]]
        assert len(cells) == 1
        if "compile" not in label:  # --quick skips compilation and says so
            assert float(cells[0]) > 0
    assert "torch.compile: skipped in --quick" in done.stdout
    report = json.loads(out_json.read_text(encoding="utf-8"))
    (result,) = report["results"]
    assert (result["num_nodes"], result["num_edges"]) == (150, 1200)
    assert result["memory"]["etconv"]["peak_delta_bytes"] > 0
    assert set(result["time"]) == {"etconv", "etconv_autograd", "transformer", "gat"}
    assert report["machine_details"]["processor"]  # by name, not only x86_64


SCALE = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_scale.py"


def test_scale_benchmark_quick_minibatch_epoch_and_chunked_inference(tmp_path):
    out_json = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, str(SCALE), "--quick", "--cases", "tsocial", "--threads", "1",
         "--batch-size", "256", "--chunk-size", "500", "--json", str(out_json)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "| ET / GraphSAGE epoch time (model part) |" in done.stdout
    report = json.loads(out_json.read_text(encoding="utf-8"))
    by_model = {r["model"]: r for r in report["results"]}
    assert set(by_model) == {"et", "sage", "et_inference"}
    et, sage, scoring = by_model["et"], by_model["sage"], by_model["et_inference"]
    assert not any("error" in r for r in by_model.values())
    # The same batches for both models (same sampler seed).
    assert (et["batches"], et["mean_batch_edges"]) == (sage["batches"], sage["mean_batch_edges"])
    assert scoring["inference_finite"] and scoring["inference_s"] > 0
    assert 0 < scoring["inference_peak_rss_bytes"] < 4 * 1024 ** 3


def test_scale_benchmark_reports_a_model_over_the_memory_cap(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCALE), "--quick", "--cases", "tfinance", "--threads", "1",
         "--memory-cap-gb", "0.05"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("killed: resident memory passed the 0.05 GiB cap") == 3


def test_scale_benchmark_full_batch_at_tsocial_size_and_the_stored_gpu_report(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCALE), "--quick", "--cases", "tsocial_full", "--threads", "1",
         "--json", str(tmp_path / "full.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "## T-Social size, full batch (3,000 nodes, 30,000 edges)" in done.stdout
    rows = json.loads((tmp_path / "full.json").read_text(encoding="utf-8"))["results"]
    assert {r["model"] for r in rows} == {"et", "gcn", "gat"}
    assert all(r["inference_finite"] and r["step_s"] > 0 for r in rows)
    assert "peak_gpu_bytes" not in rows[0]  # on the CPU: no GPU column
    # The stored H200 run (docs/measured/cuda) renders with its GPU memory column.
    stored = Path(__file__).resolve().parents[1] / "docs" / "measured" / "cuda" / "scale.json"
    rendered = subprocess.run([sys.executable, str(SCALE), "--render", str(stored)],
                              capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    assert "| et | 0.246 | 0.101 | 1.92 | 33.84 |" in rendered.stdout
    assert rendered.stdout.strip() == (stored.with_suffix(".md")).read_text(
        encoding="utf-8").strip()
    # The plot, also of the CPU run where GATConv did not fit (no bar, named instead).
    cpu = stored.parents[1] / "scale" / "tfinance.json"
    for report in (stored, cpu):
        png = tmp_path / f"{report.parent.name}.png"
        drawn = subprocess.run([sys.executable, str(SCALE), "--render", str(report), "--plot",
                                str(png)], capture_output=True, text=True, timeout=60)
        assert drawn.returncode == 0, drawn.stderr
        assert png.stat().st_size > 10_000


def test_tuned_cv_table_tunes_each_model_with_the_same_budget_then_cross_validates(tmp_path):
    pytest.importorskip("optuna")  # the tuning scripts (as the tuning tests)
    script = SCRIPT.parent / "tu_tuned_cv.py"
    done = subprocess.run(
        [sys.executable, str(script), "--dataset", "MUTAG", "--trials", "2",
         "--timeout-minutes", "5", "--tune-folds", "1", "--epochs", "1", "--folds", "3",
         "--hidden", "16", "--out", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "MUTAG" / "table.json").read_text(encoding="utf-8"))
    assert set(report["models"]) == {"et", "gin", "structure_agnostic"}
    for name, row in report["models"].items():
        assert row["trials"]["complete"] + row["trials"]["pruned"] == 2  # the same budget
        assert len(row["test_accuracy"]["values"]) == 3  # every fold of the CV
        assert 0.0 <= row["best_validation"] <= 1.0
        assert (tmp_path / "MUTAG" / f"cv_{name}" / "MUTAG" / "results.json").exists()
    assert "| et |" in (tmp_path / "MUTAG" / "table.md").read_text(encoding="utf-8")
    assert report["meta"]["machine"]["processor"]  # what the rounding depends on
    summary = subprocess.run(
        [sys.executable, str(script), "--summarize", str(tmp_path / "MUTAG" / "table.json")],
        capture_output=True, text=True, timeout=120,
    )
    (row,) = [line for line in summary.stdout.splitlines() if line.startswith("| MUTAG")]
    assert row.count("**") == 2 and "| 2 |" in row  # one winner in bold; the trial budget


def test_anomaly_tuned_table_tunes_each_model_with_the_same_budget_then_runs_seeds(tmp_path):
    pytest.importorskip("optuna")  # the tuning scripts (as the tuning tests)
    script = SCRIPT.parent / "anomaly_tuned.py"
    done = subprocess.run(
        [sys.executable, str(script), "--dataset", "reddit", "--tune-models", "et,mlp",
         "--trials", "2", "--timeout-minutes", "5", "--epochs", "1", "--seeds", "2",
         "--hidden", "16", "--out", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "reddit" / "table.json").read_text(encoding="utf-8"))
    assert list(report["models"]) == ["et", "mlp"]
    for row in report["models"].values():
        assert row["trials"]["complete"] + row["trials"]["pruned"] == 2  # the same budget
        assert len(row["test"]["auroc"]["values"]) == 2  # every seed
    assert "| mlp |" in (tmp_path / "reddit" / "table.md").read_text(encoding="utf-8")


def test_general_preset_ranks_configurations_by_mean_rank_over_datasets():
    pytest.importorskip("optuna")  # the tuning scripts (as the tuning tests)
    module = benchmark_module("tu_general_preset")
    a, b, c = '{"h": 1}', '{"h": 2}', '{"h": 3}'
    rows = module.rank_configurations({
        "D1": {a: (0, 0.90), b: (1, 0.80), c: (2, 0.70)},
        "D2": {a: (0, 0.50), b: (1, 0.60), c: (2, 0.60), '{"h": 4}': (3, 0.99)},
    })
    # h=4 did not finish on D1, so it cannot be general; ties share the average rank
    assert [r["params"]["h"] for r in rows] == [2, 1, 3]
    assert [r["mean_rank"] for r in rows] == [1.75, 2.0, 2.25]
    assert rows[1]["validation"] == {"D1": 0.90, "D2": 0.50}

    with pytest.raises(ValueError, match="every dataset"):
        module.rank_configurations({"D1": {a: (0, 0.9)}, "D2": {b: (0, 0.9)}})


def test_general_preset_ranks_nested_studies_fold_by_fold(tmp_path, capsys):
    """--nested ranks every outer fold's study on its own, counts the folds whose study chose
    each configuration (the tuner's tie rule) and the ties at the best, within --trials."""
    optuna = pytest.importorskip("optuna")
    from optuna.distributions import IntDistribution
    from optuna.trial import create_trial

    from et_graph.tuning.study import VALIDATION_LOSS

    module = benchmark_module("tu_general_preset")
    storage = f"sqlite:///{tmp_path / 'nested.db'}"
    values = {0: [0.8, 0.9, 0.9, 0.99], 1: [0.7, 0.6, 0.5, 0.4]}  # h = 1, 2, 3, 4 per fold
    for fold, scores in values.items():
        study = optuna.create_study(study_name=f"nested-D-et-fold{fold}", storage=storage,
                                    direction="maximize")
        for h, value in enumerate(scores, start=1):
            study.add_trial(create_trial(params={"h": h},
                                         distributions={"h": IntDistribution(1, 4)},
                                         value=value,
                                         user_attrs={VALIDATION_LOSS: 1.0 if h == 2 else 0.5}))
    rows = module.main(["--nested", f"D={storage}", "--folds", "2", "--trials", "3"])
    # h = 4 lies beyond the 3-trial budget; fold 0 ties h = 2 and 3 (3 has the lower loss)
    assert [r["params"]["h"] for r in rows] == [2, 1, 3]
    assert [r["mean_rank"] for r in rows] == [1.75, 2.0, 2.25]
    assert {r["params"]["h"]: r["chosen_folds"] for r in rows} == {
        1: ["D/fold1"], 2: [], 3: ["D/fold0"]}
    assert rows[1]["by_dataset"]["D"] == {"mean_rank": 2.0, "mean_validation": 0.75}
    assert "trials tied for the best validation accuracy per fold: [2, 1]" in (
        capsys.readouterr().out)
    alone = module.main(["--nested", f"D={storage}", "--folds", "2", "--exclude", "D/fold1"])
    assert [r["params"]["h"] for r in alone] == [4, 2, 3, 1]  # fold 0 alone, every trial
    with pytest.raises(SystemExit):
        module.main(["--nested", f"D={storage}", "--folds", "2", "--exclude", "D/fold7"])
    with pytest.raises(SystemExit):
        module.main(["--nested", f"D={storage}", "--folds", "3"])  # no fold-2 study
    with pytest.raises(SystemExit):
        module.main(["--nested", f"D={storage}", "--datasets", "D"])


def test_rank_across_datasets_refuses_different_candidates():
    from et_graph.reporting import rank_across_datasets

    ranked = rank_across_datasets({"D1": {"x": 0.9, "y": 0.9}, "D2": {"y": 0.5, "x": 0.4}})
    assert list(ranked) == ["x", "y"]
    assert ranked["x"]["rank"] == {"D1": 1.5, "D2": 2.0}
    assert ranked["y"]["mean_rank"] == 1.25 and ranked["y"]["mean_score"] == pytest.approx(0.7)
    with pytest.raises(ValueError, match="other candidates"):
        rank_across_datasets({"D1": {"x": 0.9}, "D2": {"y": 0.9}})
    with pytest.raises(ValueError, match="no datasets"):
        rank_across_datasets({})


def _gnnbenchmark_results(folder, val: dict, test: dict, dataset: str = "ZINC proxy") -> None:
    def stat(v):
        return {"mean": v, "std": 0.0, "values": [v]}

    folder.mkdir(parents=True)
    models = {m: {"mae": stat(test[m]), "val_mae": stat(val[m]), "params": 10, "seeds": [0]}
              for m in val}
    (folder / "results.json").write_text(json.dumps({
        "dataset": dataset, "metric": "mae", "lower_is_better": True,
        "split_sizes": {"train": 8, "val": 2, "test": 4}, "models": models}), encoding="utf-8")


def test_gnnbenchmark_select_chooses_on_validation_only(tmp_path):
    """Each model keeps its variant with the lower holdout MAE, even where the other variant has
    the lower test MAE; runs on other splits cannot be mixed."""

    module = benchmark_module("gnnbenchmark_select")
    _gnnbenchmark_results(tmp_path / "a", {"et": 0.5, "gin": 0.4}, {"et": 0.3, "gin": 0.5})
    _gnnbenchmark_results(tmp_path / "b", {"et": 0.4, "gin": 0.45}, {"et": 0.6, "gin": 0.2})
    out = tmp_path / "sel.json"
    selection = module.main([str(tmp_path / "a"), str(tmp_path / "b"), "--names", "base,rw",
                             "--json", str(out)])
    assert selection["models"]["et"]["selected"] == "rw"  # val 0.4 < 0.5; its test is worse
    assert selection["models"]["gin"]["selected"] == "base"
    assert json.loads(out.read_text(encoding="utf-8"))["models"]["et"]["selected"] == "rw"
    # one seed each: written as n = 1, not as a measured zero spread
    assert "| et | 2 | rw | 0.6000 (n = 1) |" in out.with_suffix(".md").read_text(encoding="utf-8")
    # a run of one model (a tuned preset) is one more variant of that model only
    _gnnbenchmark_results(tmp_path / "t", {"et": 0.35}, {"et": 0.9})
    selection = module.main([str(tmp_path / p) for p in "abt"] + ["--names", "base,rw,tuned",
                                                                    "--json", str(out)])
    assert selection["models"]["et"]["selected"] == "tuned"
    assert selection["models"]["gin"]["selected"] == "base"
    assert list(selection["models"]["gin"]["variants"]) == ["base", "rw"]
    table = out.with_suffix(".md").read_text(encoding="utf-8")
    assert "| gin | 2 | base | 0.5000 (n = 1) | 0.4000 (n = 1) |" in table
    assert table.count(" – |") == 1  # gin did not run the tuned variant
    _gnnbenchmark_results(tmp_path / "c", {"et": 0.1}, {"et": 0.1}, dataset="PATTERN")
    with pytest.raises(SystemExit, match="another dataset"):
        module.main([str(tmp_path / "a"), str(tmp_path / "c")])
    with pytest.raises(SystemExit, match="one distinct name"):
        module.main([str(tmp_path / "a"), str(tmp_path / "b"), "--names", "x,x"])


def _tu_results(folder: Path, val: dict, test: dict, seed: int = 0) -> None:
    """An et-graph tudataset results.json (OUT/DATASET/results.json) with two folds."""
    stat = lambda v: {"mean": v, "std": 0.0, "values": [v, v]}  # noqa: E731
    models = {m: {"accuracy": stat(test[m]), "val_accuracy": stat(val[m]), "best_epoch": [1, 2]}
              for m in val}
    folds = [{"fold": k, "train": 8, "val": 1, "test": 3, "models": {}} for k in range(2)]
    (folder / "MUTAG").mkdir(parents=True)
    (folder / "MUTAG" / "results.json").write_text(json.dumps({
        "dataset": "MUTAG", "models": models, "folds": folds,
        "meta": {"config": {"protocol": {"seed": seed, "val_fraction": 0.1}}}}), encoding="utf-8")


def test_variant_selection_reads_tu_cross_validations(tmp_path):
    """TU runs are selected on the mean inner-validation accuracy (higher is better), never on
    the test folds, and only between runs on the same folds."""
    module = benchmark_module("gnnbenchmark_select")
    _tu_results(tmp_path / "plain", {"et": 0.80, "gin": 0.82}, {"et": 0.79, "gin": 0.70})
    _tu_results(tmp_path / "sums", {"et": 0.81, "gin": 0.81}, {"et": 0.70, "gin": 0.90})
    selection = module.main([str(tmp_path / "plain"), str(tmp_path / "sums")])
    assert selection["metric"] == "accuracy" and not selection["lower_is_better"]
    assert selection["models"]["et"]["selected"] == "sums"  # higher val; its test is lower
    assert selection["models"]["gin"]["selected"] == "plain"
    _tu_results(tmp_path / "other", {"et": 0.9}, {"et": 0.9}, seed=1)
    with pytest.raises(SystemExit, match="another dataset, split"):
        module.main([str(tmp_path / "plain"), str(tmp_path / "other")])


def score_study_on_true_and_scrambled_labels(tmp_path, *flags):
    """The planted-anomaly study run on one small graph saved twice, its own labels as they
    are and reversed: ``(module, first result, second result)``."""
    import torch

    from et_graph.datasets.synthetic import planted_anomaly_graph

    module = benchmark_module("unsupervised_score_study")
    graph = planted_anomaly_graph(num_nodes=200, seed=0)
    results = []
    for name, y in (("a", graph.y), ("b", graph.y.flip(0))):
        path = tmp_path / f"{name}.pt"
        torch.save({"x": graph.x, "edge_index": graph.edge_index, "y": y}, path)
        results.append(module.main(["--data", str(path), "--seeds", "1", "--num-cliques", "2",
                                    "--clique-size", "5", "--num-contextual", "10",
                                    "--candidates", "20", *flags]))
    return (module, *results)


def test_unsupervised_score_study_reads_only_the_planted_labels(tmp_path):
    """Every candidate is scored against the planted anomalies; the graph's own labels (here
    scrambled in a second file) change nothing."""
    _, first, second = score_study_on_true_and_scrambled_labels(tmp_path, "--epochs", "2")
    assert first["rows"] == [dict(row, seconds=a["seconds"]) for row, a in
                             zip(second["rows"], first["rows"])]
    assert {"reconstruction", "energy", "structure_sum", "max_rank(reconstruction, "
            "structure_mean)"} <= set(first["means"])
    assert {"max_z(reconstruction, structure_sum)", "sum_z(reconstruction, structure_max)"
            } <= set(first["means"])
    assert first["best"] == max(first["means"], key=lambda n: first["means"][n]["all"])
    assert first["winners"]["auroc"] == first["best"] and first["criterion"] == "auroc"
    means = first["means"]
    assert first["winners"]["all_metrics"] == max(
        means, key=lambda n: means[n]["all"] + means[n]["auprc"] + means[n]["rec_at_k"])
    assert all(0.0 <= row["auprc"] <= 1.0 and 0.0 <= row["rec_at_k"] <= 1.0
               for row in first["rows"])


def test_unsupervised_score_study_chooses_each_baseline_among_its_own_settings(tmp_path):
    """--models lof,iforest: the baselines get ET's selection (planted anomalies, the same
    criterion), each among its own 18 settings, and the choice is a valid [baselines] preset."""
    from et_graph.protocols.unsupervised import UnsupervisedBaselineConfig

    module, first, second = score_study_on_true_and_scrambled_labels(
        tmp_path, "--models", "lof,iforest", "--criterion", "all_metrics")
    assert [{k: v for k, v in row.items() if k != "seconds"} for row in first["rows"]] == \
        [{k: v for k, v in row.items() if k != "seconds"} for row in second["rows"]]
    assert "best" not in first  # ET's keys only when ET was scored
    means = first["means"]
    for model, grid in module.BASELINE_CANDIDATES.items():
        assert len(grid) == 18
        chosen = first["model_winners"][model]["all_metrics"]
        assert chosen == max(grid, key=lambda n: means[n]["all"] + means[n]["auprc"]
                             + means[n]["rec_at_k"])
        assert first["baseline_settings"][model] == grid[chosen]
    settings = {k: v for part in first["baseline_settings"].values() for k, v in part.items()}
    UnsupervisedBaselineConfig(**settings)  # a valid preset section


def test_merge_unsupervised_seeds_joins_disjoint_seeds_and_refuses_overlaps(tmp_path):

    module = benchmark_module("merge_unsupervised_seeds")

    def run(name, seeds, dataset="reddit", epochs=100, baselines=None, nodes=400):
        per_seed = [{"seed": s, "metrics": {"dominant": {"auroc": 0.5 + s / 100, "auprc": 0.1,
                                                         "rec_at_k": 0.2},
                                            "lof": {"auroc": 0.6, "auprc": 0.1,
                                                    "rec_at_k": 0.2}}} for s in seeds]
        config = {"protocol": {"seed": seeds[0], "seeds": len(seeds), "models": name},
                  "train": {"epochs": epochs}, "run": {"out": f"runs/{name}"}}
        if baselines is not None:
            config["baselines"] = baselines
        path = tmp_path / f"{name}.json"
        protocol = f"...; all {nodes} nodes scored and evaluated (30 anomalies, K = 30); ..."
        path.write_text(json.dumps({"dataset": dataset, "per_seed": per_seed,
                                    "protocol": protocol,
                                    "models": {"dominant": {}, "lof": {}},
                                    "meta": {"git_commit": f"c-{name}", "config": config}}),
                                        encoding="utf-8")
        return str(path)

    merged = module.main([run("a", [0, 1]), run("b", [2, 3, 4]), "--models", "dominant",
                          "--json", str(tmp_path / "m.json")])
    row = merged["models"]["dominant"]
    assert row["seeds"] == [0, 1, 2, 3, 4]
    assert row["auroc"]["values"] == [0.5, 0.51, 0.52, 0.53, 0.54]
    assert abs(row["auroc"]["mean"] - 0.52) < 1e-12
    assert abs(row["auroc"]["std"] - 0.0141421356) < 1e-9  # population std, as the runner
    assert set(json.loads((tmp_path / "m.json").read_text(
        encoding="utf-8"))["models"]) == {"dominant"}
    with pytest.raises(SystemExit, match="share seeds"):
        module.main([run("c", [0, 1]), run("d", [1, 2])])
    with pytest.raises(SystemExit, match="different graphs"):
        module.main([run("e", [0]), run("f", [1], dataset="inj_amazon")])
    # one file name in two folders: two graphs under one name (an unsupervised audit)
    with pytest.raises(SystemExit, match=r"different sizes under one name 'reddit'"):
        module.main([run("e2", [0]), run("f2", [1], nodes=500)])
    with pytest.raises(SystemExit, match="not in every run"):
        module.main([run("g", [0]), run("h", [1]), "--models", "cola"])
    assert merged["commits"] == ["c-a", "c-b"]  # recorded (a wrong key once gave None)
    with pytest.raises(SystemExit, match=r"differ in \['train.epochs'\]"):
        module.main([run("i", [0]), run("j", [1], epochs=50)])
    # From an audit: a piece from before a setting existed ran at its default; one that set
    # it otherwise is another protocol, and one at the default joins.
    with pytest.raises(SystemExit, match=r"differ in \['baselines.lof_neighbour_stats'\]"):
        module.main([run("k", [0]), run("l", [1], baselines={"lof_neighbour_stats": "mean"})])
    module.main([run("m", [0]), run("n", [1], baselines={"lof_neighbour_stats": "none"})])


def test_numerics_sensitivity_control_repeats_and_a_changed_fold_is_counted(tmp_path):
    sensitivity = benchmark_module("numerics_sensitivity")
    preset = (SCRIPT.parents[1] / "configs" / "tudataset" / "tuned16" / "MUTAG-gin.toml")
    text = preset.read_text(encoding="utf-8").replace("epochs = 80", "epochs = 2")
    assert text != preset.read_text(encoding="utf-8")
    tiny = tmp_path / "tiny-gin.toml"
    tiny.write_text(text, encoding="utf-8")
    report = sensitivity.main(["--config", str(tiny), "--setting", "first=",
                               "--setting", "again=", "--max-folds", "2",
                               "--out", str(tmp_path / "out")])
    first, again = report["presets"]["tiny-gin"]
    assert again["against_first"] == {"folds": 2, "accuracy_changed": 0, "epoch_changed": 0,
                                      "max_val_loss_change": 0.0}  # a run repeats itself
    assert again["machine"]["processor"] and first["model"] == "gin"
    assert "| tiny-gin | again |" in (tmp_path / "out" / "sensitivity.md").read_text(
        encoding="utf-8")
    moved = [dict(row) for row in first["folds"]]
    moved[1]["best_epoch"] += 1
    moved[1]["test_accuracy"] += 0.05
    assert sensitivity.compare(first["folds"], moved)["accuracy_changed"] == 1
    assert sensitivity.compare(first["folds"], moved)["epoch_changed"] == 1
    assert sensitivity.parse_setting("cbwr=MKL_CBWR=COMPATIBLE") == (
        "cbwr", {"MKL_CBWR": "COMPATIBLE"})


def test_tu_reassess_averages_runs_per_fold_and_keeps_run_zero(tmp_path):
    presets = tmp_path / "presets"
    presets.mkdir()
    source = SCRIPT.parents[1] / "configs" / "tudataset" / "tuned16" / "MUTAG-gin.toml"
    text = source.read_text(encoding="utf-8").replace("epochs = 80", "epochs = 2").replace(
        'max_folds = "none"', "max_folds = 2")
    assert "epochs = 2" in text and "max_folds = 2" in text
    (presets / "MUTAG-gin.toml").write_text(text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "tu_reassess.py"), "--datasets", "MUTAG",
         "--presets", str(presets), "--models", "gin", "--runs-per-fold", "2",
         "--label-smoothing", "0.1", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "MUTAG" / "reassess.json").read_text(encoding="utf-8"))
    row = report["models"]["gin"]
    assert row["label_smoothing"] == 0.1  # --label-smoothing reaches the trainings
    cv = json.loads((tmp_path / "out" / "MUTAG" / "cv_gin" / "MUTAG" / "results.json").read_text(
        encoding="utf-8"))
    assert cv["models"]["gin"]["config"]["label_smoothing"] == 0.1
    assert [len(runs) for runs in row["fold_runs"]] == [2, 2]
    means = [sum(runs) / 2 for runs in row["fold_runs"]]
    assert row["test_accuracy"]["values"] == means
    assert row["run0_accuracy"]["values"] == [runs[0] for runs in row["fold_runs"]]
    assert "3 trainings" not in row["protocol"] and "2 trainings per fold" in row["protocol"]
    assert [0.0 <= acc <= 1.0 for acc in row["ensemble_accuracy"]["values"]] == [True, True]
    assert len(row["ensemble_val_accuracy"]["values"]) == 2
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("| MUTAG")]
    # bold: the best mean of the runs, and the best ensemble (the last cells)
    assert "| 2 |" in line and line.count("**") == 4
    ensemble = 100 * row["ensemble_accuracy"]["mean"]
    assert line.rstrip(" |").split("|")[-2].strip() == f"**{ensemble:.1f} ± " + (
        f"{100 * row['ensemble_accuracy']['std']:.1f}**")


def test_tu_reassess_summary_joins_models_run_apart_and_refuses_duplicates():
    tu_reassess = benchmark_module("tu_reassess")
    stat = {"mean": 0.8, "std": 0.01}

    def report(models, mean=0.8):
        row = {"test_accuracy": {**stat, "mean": mean}, "run0_accuracy": stat, "run_spread": 0.02}
        return {"dataset": "NCI1", "runs_per_fold": 3, "models": {m: row for m in models}}

    text = tu_reassess.summary_table([report(["et"], 0.79), report(["gin"], 0.81)])
    (line,) = [x for x in text.splitlines() if x.startswith("| NCI1")]
    assert "79.0 ± 1.0" in line and "**81.0 ± 1.0**" in line  # one row, GIN in bold
    with pytest.raises(ValueError, match="two reports"):
        tu_reassess.summary_table([report(["et"]), report(["et"])])


def test_tu_reassess_refuses_to_join_reports_of_other_folds():
    # (s57's open item) separately run files were joined whatever folds they ran on, and their
    # per-fold values then paired across different test sets
    tu_reassess = benchmark_module("tu_reassess")
    stat = {"mean": 0.8, "std": 0.01}

    def report(model, seed, key="protocol"):
        row = {"test_accuracy": stat, "run0_accuracy": stat, "run_spread": 0.02}
        folds = f"stratified 10-fold CV (seed {seed})"
        if key == "protocol":
            row["protocol"] = folds + "; in each training fold ..."
        return {"dataset": "NCI1", "runs_per_fold": 3, "models": {model: row},
                **({"folds": folds} if key == "folds" else {})}

    assert tu_reassess.summary_table([report("et", 0), report("gin", 0)])
    with pytest.raises(ValueError, match=r"other outer folds.*seed 0.*seed 1"):
        tu_reassess.summary_table([report("et", 0), report("gin", 1)])
    with pytest.raises(ValueError, match="other outer folds"):  # tu_fold_select.py's field
        tu_reassess.summary_table([report("et", 0, "folds"), report("gin", 1)])
    # a report that names no folds (a selection written before it recorded them) still joins
    unnamed = report("gin", 1, key=None)
    assert tu_reassess.summary_table([report("et", 0), unnamed])


def test_tu_reassess_summary_reads_per_fold_selection_reports():
    tu_reassess = benchmark_module("tu_reassess")
    stat = {"mean": 0.8, "std": 0.01}
    fixed = {"dataset": "NCI1", "runs_per_fold": 3,
             "models": {"et": {"test_accuracy": stat, "run0_accuracy": stat, "run_spread": 0.02}}}
    # tu_fold_select.py's JSON: a grid, no spread between runs
    chosen = {"dataset": "NCI1", "runs_per_fold": 3, "candidates": ["preset", "ls0.1"],
              "models": {"et": {"test_accuracy": {**stat, "mean": 0.81}, "run0_accuracy": stat}}}
    text = tu_reassess.summary_table([chosen])
    header, _, row = text.splitlines()
    assert "selected per fold among" in header and "spread" not in header
    assert row.startswith("| NCI1 | 3 | 2 (preset, ls0.1) | **81.0 ± 1.0** |")
    assert header.count("|") == row.count("|")
    # beside a fixed-preset report of the same dataset: two rows, not merged
    text = tu_reassess.summary_table([fixed, chosen])
    rows = [x for x in text.splitlines() if x.startswith("| NCI1")]
    assert rows[0].startswith("| NCI1 | 3 | – (fixed preset) |")
    assert rows[0].endswith("| 2.0 / – / – |")
    assert rows[1].startswith("| NCI1 | 3 | 2 (preset, ls0.1) |")
    assert rows[1].endswith("| – / – / – |")


def test_tu_reassess_reports_et_minus_each_baseline_paired_over_the_folds(tmp_path):
    """The differences read the stored fold values in order (a shuffled baseline changes
    them), use 10-fold CV's correction, and a tu_tuned_cv.py table (one training, no run 0
    column) is read too."""
    import numpy as np

    from et_graph.protocols.significance import fold_difference
    from et_graph.reporting import summarize

    tu_reassess = benchmark_module("tu_reassess")
    et = [0.80, 0.82, 0.79, 0.81, 0.83, 0.78, 0.84, 0.80, 0.81, 0.82]
    gin = [v - 0.03 + 0.002 * i for i, v in enumerate(et)]
    mlp = [0.70] * 10

    def row(values):
        return {"test_accuracy": summarize(values)}

    report = {"dataset": "NCI1", "models": {"et": row(et), "gin": row(gin),
                                            "structure_agnostic": row(mlp)}}
    path = tmp_path / "table.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    out = tu_reassess.main(["--summarize", str(path), "--json", str(tmp_path / "out.json")])
    by_model = {r["second"]: r for r in out["differences"]}
    expected = fold_difference(et, gin, test_train_ratio=1 / 9)
    assert by_model["gin"]["mean"] == pytest.approx(0.03 - 0.009)
    assert (by_model["gin"]["low"], by_model["gin"]["high"]) == pytest.approx(
        (expected.low, expected.high))
    assert by_model["gin"]["wins"] == [10, 0, 0] and by_model["gin"]["runs_per_fold"] == 1
    stored = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert stored["differences"] == json.loads(json.dumps(out["differences"]))
    shuffled = {**report, "runs_per_fold": 1, "models": {**report["models"],
                                     "gin": row(list(np.roll(gin, 3)))}}
    moved = {r["second"]: r for r in tu_reassess.differences([shuffled])}["gin"]
    assert moved["mean"] == pytest.approx(by_model["gin"]["mean"])  # same mean, other pairs
    assert moved["high"] - moved["low"] > by_model["gin"]["high"] - by_model["gin"]["low"]
    table = tu_reassess.differences_table(out["differences"])
    (line,) = [x for x in table.splitlines() if x.startswith("| NCI1")]
    assert line.startswith("| NCI1 | one training | **+2.1 [")
    assert "p < 0.001 (Holm < 0.001), 10/0/0**" in line  # the MLP trails in every fold


def test_tu_reassess_plot_draws_the_summary(tmp_path):
    tu_reassess = benchmark_module("tu_reassess")
    stat = {"mean": 0.8, "std": 0.01}
    with_ensemble = {"test_accuracy": stat, "run0_accuracy": stat, "run_spread": 0.02,
                     "ensemble_accuracy": {"mean": 0.82, "std": 0.01}}
    reports = [
        {"dataset": "NCI1", "runs_per_fold": 3, "models": {"et": with_ensemble}},
        {"dataset": "NCI1", "runs_per_fold": 3, "models": {"gin": with_ensemble}},
        {"dataset": "MUTAG", "runs_per_fold": 1,  # no ensemble, and a model missing
         "models": {"gin": {k: with_ensemble[k] for k in ("test_accuracy", "run0_accuracy",
                                                           "run_spread")}}},
    ]
    files = []
    for i, report in enumerate(reports):
        files.append(tmp_path / f"r{i}.json")
        files[-1].write_text(json.dumps(report), encoding="utf-8")
    plot = tmp_path / "summary.png"
    out = tu_reassess.main(["--summarize", *map(str, files), "--plot", str(plot)])
    assert "| NCI1 | 3 |" in out["summary"]
    # FILE@models keeps those models: GIN's row of file 1 alone, so ET's cells are empty
    (line,) = [x for x in tu_reassess.main(["--summarize", f"{files[1]}@gin"])["summary"]
               .splitlines() if x.startswith("| NCI1")]
    assert line.startswith("| NCI1 | 3 | – | **80.0 ± 1.0** |")
    with pytest.raises(ValueError, match="holds no model"):
        tu_reassess.read_report(f"{files[0]}@gin")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no reports"):
        tu_reassess.plot_summary([], tmp_path / "none.png")
    # two means that print alike are both the best: one in bold read as a win
    tie = {"dataset": "MUTAG", "runs_per_fold": 3, "models": {
        "et": {**with_ensemble, "test_accuracy": {"mean": 0.8551, "std": 0.06}},
        "gin": {**with_ensemble, "test_accuracy": {"mean": 0.8549, "std": 0.07}}}}
    files.append(tmp_path / "tie.json")
    files[-1].write_text(json.dumps(tie), encoding="utf-8")
    (line,) = [x for x in tu_reassess.main(["--summarize", str(files[-1])])["summary"]
               .splitlines() if x.startswith("| MUTAG")]
    assert line.startswith("| MUTAG | 3 | **85.5 ± 6.0** | **85.5 ± 7.0** |")


def test_gnnbenchmark_holdout_probe_scores_the_tuning_objective_per_seed(tmp_path):
    """Each seed's value is a tuning trial's (test split dropped); their mean is the objective
    with as many tuning seeds."""
    from et_graph.config import parse
    from et_graph.experiments.gnnbenchmark import GNNBenchmarkConfig
    from et_graph.tuning.gnnbenchmark import GNNBenchmarkObjective

    module = benchmark_module("gnnbenchmark_holdout_probe")
    flags = "--quick --models gin --rw-pe-dim 4"
    report = module.main(["--seeds", "2", "--variant", f"plain={flags}",
                          "--json", str(tmp_path / "p.json")])
    values = report["variants"]["plain"]["models"]["gin"]["values"]
    assert len(values) == 2 and values[0] != values[1]
    config = parse(GNNBenchmarkConfig, flags.split() + ["--no-progress"])
    assert GNNBenchmarkObjective(config, "gin", tune_seeds=2)() == pytest.approx(
        sum(values) / 2, abs=1e-12)
    assert "| plain | gin |" in (tmp_path / "p.md").read_text(encoding="utf-8")
    with pytest.raises(SystemExit, match="NAME=FLAGS"):
        module.main(["--variant", "no-flags"])
    with pytest.raises(SystemExit, match="twice"):
        module.main(["--seeds", "1", "--variant", "x=--quick --models gin --rw-pe-dim 4",
                     "--variant", "x=--quick --models gin"])


def _anomaly_results(folder: Path, val: list, test: list, split_seed: int = 2) -> None:
    """An et-graph anomaly results.json with one ET row per seed (its kept checkpoint's
    validation AUROC as ``best_score``, and a test AUROC the probe must not copy)."""
    per_seed = [{"seed": k, "split_sizes": [40, 20, 40],
                 "et": {"auroc": t, "best_score": v, "best_epoch": 3}}
                for k, (v, t) in enumerate(zip(val, test))]
    config = {"protocol": {"protocol": "paper", "train_ratio": 0.4, "split_seed": split_seed,
                           "vary_split": False},
              "train": {"select_metric": "auroc"}}
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "dataset": "tolokers", "per_seed": per_seed, "epoch_seconds_median": {"et": 1.0},
        "meta": {"git_commit": "abc", "config": config}}), encoding="utf-8")


def test_anomaly_validation_probe_keeps_validation_only(tmp_path):
    module = benchmark_module("anomaly_validation_probe")
    _anomaly_results(tmp_path / "a", [0.80, 0.82], [0.123456, 0.234567])
    _anomaly_results(tmp_path / "b", [0.81, 0.83], [0.345678, 0.456789])
    out = tmp_path / "probe.json"
    payload = module.main(["--run", f"preset={tmp_path / 'a'}",
                           "--run", f"two hop={tmp_path / 'b'}",
                           "--what", "w", "--machine", "m", "--out", str(out)])
    assert [row["mean_validation"] for row in payload["runs"]] == pytest.approx([0.81, 0.82])
    text = out.read_text(encoding="utf-8") + out.with_suffix(".md").read_text(encoding="utf-8")
    assert all(digits not in text for digits in ("123456", "234567", "345678", "456789"))
    assert "| two hop | 0.8100 / 0.8300 | **0.8200** |" in text
    # a kept results.json serves as the reference, cut to the probe's seeds
    _anomaly_results(tmp_path / "five", [0.80, 0.82, 0.7, 0.7, 0.7], [0.5] * 5)
    payload = module.main(["--run", f"kept={tmp_path / 'five' / 'results.json'}",
                           "--run", f"b={tmp_path / 'b'}", "--seeds", "2",
                           "--what", "w", "--machine", "m", "--out", str(out)])
    assert payload["runs"][0]["validation"] == [0.80, 0.82]
    with pytest.raises(SystemExit, match="not comparable"):
        module.main(["--run", f"kept={tmp_path / 'five'}", "--run", f"b={tmp_path / 'b'}",
                     "--what", "w", "--machine", "m", "--out", str(out)])
    _anomaly_results(tmp_path / "c", [0.9, 0.9], [0.9, 0.9], split_seed=3)
    with pytest.raises(SystemExit, match="not comparable"):
        module.main(["--run", f"a={tmp_path / 'a'}", "--run", f"c={tmp_path / 'c'}",
                     "--what", "w", "--machine", "m", "--out", str(out)])
    # the trees keep no checkpoint: their fit's validation AUROC is read, never the test's
    for name, val in (("gbt_a", 0.84), ("gbt_b", 0.85)):
        _anomaly_results(tmp_path / name, [val], [0.567891])
        stored = json.loads((tmp_path / name / "results.json").read_text(encoding="utf-8"))
        stored["per_seed"][0]["gbt"] = {"auroc": 0.567891, "val_auroc": val}
        del stored["per_seed"][0]["et"]
        stored["meta"]["config"]["train"]["select_metric"] = "f1_macro"  # the neural models'
        (tmp_path / name / "results.json").write_text(json.dumps(stored), encoding="utf-8")
    payload = module.main(["--run", f"w={tmp_path / 'gbt_a'}", "--run", f"n={tmp_path / 'gbt_b'}",
                           "--model", "gbt", "--what", "w", "--machine", "m", "--out", str(out)])
    assert [row["validation"] for row in payload["runs"]] == [[0.84], [0.85]]
    assert "567891" not in out.read_text(
        encoding="utf-8") and payload["runs"][0]["select_metric"] == "auroc"


def _tu_probe_results(folder: Path, val: list[float], test: list[float], seed: int = 0,
                      dataset: str = "MUTAG") -> None:
    folds = [{"fold": i, "train": 90, "val": 10, "test": 11,
              "models": {"et": {"test_accuracy": t, "best_epoch": 3 + i, "val_accuracy": v,
                                "val_loss": 0.5, "epochs_run": 9, "epoch_seconds": 0.25}}}
             for i, (v, t) in enumerate(zip(val, test))]
    config = {"protocol": {"folds": 10, "seed": seed, "val_fraction": 0.1}}
    (folder / dataset).mkdir(parents=True)
    (folder / dataset / "results.json").write_text(json.dumps(
        {"dataset": dataset, "folds": folds, "meta": {"config": config, "git_commit": "x"}}),
            encoding="utf-8")


def test_tu_validation_probe_keeps_validation_only(tmp_path):
    module = benchmark_module("tu_validation_probe")
    _tu_probe_results(tmp_path / "a", [0.8, 0.9], [0.123456, 0.234567])
    _tu_probe_results(tmp_path / "b", [0.7, 0.9], [0.345678, 0.456789])
    out = tmp_path / "probe.json"
    payload = module.main(["--run", f"K = 128={tmp_path / 'a'}", "--run", f"32={tmp_path / 'b'}",
                           "--what", "w", "--machine", "m", "--out", str(out)])
    assert [row["mean_val_accuracy"] for row in payload["runs"]] == pytest.approx([0.85, 0.8])
    assert payload["runs"][0]["variant"] == "K = 128"
    text = out.read_text(encoding="utf-8") + out.with_suffix(".md").read_text(encoding="utf-8")
    assert all(digits not in text for digits in ("123456", "234567", "345678", "456789"))
    assert "| K = 128 | 80.00 / 90.00 | **85.00** | 3, 4 | 0.25 |" in text
    # the same number of correct graphs is a tie, even where the float means differ in the
    # last bit: both are marked
    _tu_probe_results(tmp_path / "d", [83 / 101, 84 / 101], [0.5, 0.5])
    _tu_probe_results(tmp_path / "e", [82 / 101, 85 / 101], [0.5, 0.5])
    module.main(["--run", f"d={tmp_path / 'd'}", "--run", f"e={tmp_path / 'e'}",
                 "--what", "w", "--machine", "m", "--out", str(out)])
    assert out.with_suffix(".md").read_text(encoding="utf-8").count("**82.67**") == 2
    _tu_probe_results(tmp_path / "c", [0.9, 0.9], [0.9, 0.9], seed=1)
    with pytest.raises(SystemExit, match="not comparable"):
        module.main(["--run", f"a={tmp_path / 'a'}", "--run", f"c={tmp_path / 'c'}",
                     "--what", "w", "--machine", "m", "--out", str(out)])
    with pytest.raises(SystemExit, match="found 0"):
        module.main(["--run", f"a={tmp_path}", "--what", "w", "--machine", "m",
                     "--out", str(out)])


def test_tu_validation_probe_ranks_variants_across_datasets(tmp_path):
    module = benchmark_module("tu_validation_probe")
    # MUTAG prefers a, PROTEINS b: both have mean rank 1.5, and a's higher mean accuracy
    # (77.5 against 77.0) breaks the tie; c is last on both
    for name, val_a, val_b, val_c in (("MUTAG", [0.8, 0.9], [0.7, 0.9], [0.5, 0.5]),
                                      ("PROTEINS", [0.7, 0.7], [0.74, 0.74], [0.6, 0.6])):
        _tu_probe_results(tmp_path / f"{name}-a", val_a, [0.123456] * 2, dataset=name)
        _tu_probe_results(tmp_path / f"{name}-b", val_b, [0.234567] * 2, dataset=name)
        _tu_probe_results(tmp_path / f"{name}-c", val_c, [0.345678] * 2, dataset=name)
    out = tmp_path / "defaults.json"
    runs = [arg for label in "abc" for arg in ("--run", f"{label}={tmp_path}/{{dataset}}-{label}")]
    payload = module.main(["--datasets", "MUTAG,PROTEINS", *runs, "--what", "w",
                           "--machine", "m", "--out", str(out)])
    ranking = {entry["variant"]: entry for entry in payload["ranking"]}
    assert ranking["a"]["rank"] == {"MUTAG": 1.0, "PROTEINS": 2.0}
    assert ranking["b"]["rank"] == {"MUTAG": 2.0, "PROTEINS": 1.0}
    assert [ranking[label]["mean_rank"] for label in "abc"] == [1.5, 1.5, 3.0]
    assert [ranking[label]["best"] for label in "abc"] == [True, False, False]
    assert payload["datasets"] == ["MUTAG", "PROTEINS"]
    assert {row["dataset"] for row in payload["runs"]} == {"MUTAG", "PROTEINS"}
    text = out.read_text(encoding="utf-8") + out.with_suffix(".md").read_text(encoding="utf-8")
    assert all(digits not in text for digits in ("123456", "234567", "345678"))
    assert "| a | 85.00 (1) | 70.00 (2) | **77.50** | **1.50** |" in text
    with pytest.raises(SystemExit, match="labels must differ"):
        module.main(["--datasets", "MUTAG", *runs[:2], *runs[:2], "--what", "w",
                     "--machine", "m", "--out", str(out)])
    with pytest.raises(SystemExit, match="must hold"):
        module.main(["--datasets", "MUTAG", "--run", f"a={tmp_path / 'MUTAG-a'}",
                     "--what", "w", "--machine", "m", "--out", str(out)])
    # a path that resolves to another dataset's run is refused
    _tu_probe_results(tmp_path / "x-PROTEINS", [0.8, 0.8], [0.5, 0.5], dataset="MUTAG")
    with pytest.raises(SystemExit, match="not PROTEINS"):
        module.main(["--datasets", "PROTEINS", "--run",
                     f"a={tmp_path}/x-{{dataset}}/MUTAG/results.json",
                     "--what", "w", "--machine", "m", "--out", str(out)])


def _candidate_report(models, val, test, dataset="PROTEINS", runs=3, seed=0):
    """A stored tu_reassess report whose every model has these per-fold figures."""
    def stat(values):
        return {"mean": sum(values) / len(values), "std": 0.0, "values": list(values)}

    row = {"val_accuracy": stat(val), "test_accuracy": stat(test),
           "run0_accuracy": stat(test), "ensemble_accuracy": stat(test),
           "fold_runs": [[t] * runs for t in test], "preset": "p.toml",
           "protocol": f"stratified {len(val)}-fold CV (seed {seed}); in each training fold"}
    return {"dataset": dataset, "runs_per_fold": runs, "models": {m: row for m in models}}


def test_tu_fold_select_picks_on_validation_per_fold(tmp_path):
    select = benchmark_module("tu_fold_select")

    def write(name, report):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report), encoding="utf-8")
        return str(path)

    preset = write("preset", _candidate_report(["et", "gin"], [0.8, 0.7, 0.6], [0.1, 0.2, 0.3]))
    other_et = write("other_et", _candidate_report(["et"], [0.9, 0.7, 0.5], [0.4, 0.5, 0.6]))
    other_gin = write("other_gin", _candidate_report(["gin"], [0.7, 0.75, 0.6], [0.7, 0.8, 0.9]))
    args = ["--candidate", f"preset={preset}", "--candidate", f"other={other_et}",
            "--candidate", f"other={other_gin}", "--json", str(tmp_path / "s.json")]
    report = select.main(args)
    et, gin = report["models"]["et"], report["models"]["gin"]
    # fold 1 is a tie: the first candidate keeps it
    assert et["chosen"] == ["other", "preset", "preset"]
    assert et["test_accuracy"]["values"] == [0.4, 0.2, 0.3]
    assert gin["chosen"] == ["preset", "other", "preset"]
    assert gin["times_chosen"] == {"preset": 2, "other": 1}
    assert gin["ensemble_accuracy"]["values"] == [0.1, 0.8, 0.3]
    written = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert written["candidates"] == ["preset", "other"]
    assert written["folds"] == "stratified 3-fold CV (seed 0)"  # for tu_reassess's join
    # the test figures never move the choice: scramble them and the choice stays
    scrambled = write("scrambled", _candidate_report(["et"], [0.9, 0.7, 0.5], [0.9, 0.0, 0.0]))
    again = select.main(["--candidate", f"preset={preset}@et",
                         "--candidate", f"other={scrambled}"])
    assert again["models"]["et"]["chosen"] == et["chosen"]
    # an unequal grid, other folds or another dataset are refused
    for bad in ([f"preset={preset}", f"other={other_et}"],
                [f"preset={preset}@et", "other=" + write(
                    "seed1", _candidate_report(["et"], [0.9] * 3, [0.1] * 3, seed=1))],
                [f"preset={preset}@et", "other=" + write(
                    "nci1", _candidate_report(["et"], [0.9] * 3, [0.1] * 3, dataset="NCI1"))],
                [f"preset={preset}@et", f"preset={other_et}"]):
        with pytest.raises(SystemExit):
            select.main([x for c in bad for x in ("--candidate", c)])


def test_sbm_statistics_prints_the_generated_graphs_statistics(capsys):
    stats = benchmark_module("sbm_statistics").main(["CLUSTER", "3"])
    assert stats["graphs"] == 3 and abs(sum(stats["label_fractions"]) - 1) < 1e-9
    assert '"dataset": "CLUSTER"' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        benchmark_module("sbm_statistics").main(["PATTERN", "0"])


def test_descent_check_finds_the_known_rise_and_none_for_the_concave_hopfield_energy():
    """docs/derivation.md: a discrete step can raise the attention energy (the smallest known
    case), while the Hopfield energies, concave in g, descend for any step size."""
    import torch

    module = benchmark_module("descent_check")
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        trace = module.counterexample()
        hopfield = [module.count(5, 4, 1000.0, None, edges=False, hopfield=kind)
                    for kind in ("relu", "softmax")]
    finally:
        torch.set_default_dtype(default)
    assert trace[1] > trace[0] + 10  # 1.40 -> 11.5
    assert [row["rising"] for row in hopfield] == [0, 0]


def test_chunk_edges_memory_benchmark_runs_both_settings_and_compares_outputs(tmp_path):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "chunk_edges_memory.py"
    out_json = tmp_path / "chunk_edges.json"
    done = subprocess.run(
        [sys.executable, str(script), "--nodes", "3000", "--edges", "12000",
         "--chunk-size", "500", "--chunk-edges", "800", "--json", str(out_json)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out_json.read_text(encoding="utf-8"))
    assert set(report["settings"]) == {"nodes_only", "edge_capped"}
    assert report["hub_in_edges"] == 2999
    assert report["max_abs_difference"] < 1e-4
    assert all(s["peak_rss_mib"] >= s["rss_after_graph_mib"] > 0
               for s in report["settings"].values())


def test_cuda_checks_script_parses_and_names_every_output():
    """benchmarks/cuda_checks.sh runs only where a GPU is lent; here: its syntax, and that it
    runs the CUDA tests and writes the files docs/measured/cuda/README.md lists."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "cuda_checks.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text(encoding="utf-8")
    for part in ("tests/test_cuda.py", "bench_scale.py --device", "bench_etconv.py --device",
                 "bench_graph_epoch.py --device", "scale.json", "bench_etconv.json",
                 "graph_epoch.json", "junit.xml"):
        assert part in text, part


def test_the_ablation_resumes_only_rows_of_its_own_settings(tmp_path):
    """From an audit: an interrupted ablation resumed by variant name only, so rows of another
    dataset, seed count or epoch budget joined the table silently."""
    module = benchmark_module("anomaly_ablation")
    out = str(tmp_path / "ablation")
    argv = ["--dataset", "reddit", "--seeds", "1", "--epochs", "1", "--no-gbt",
            "--variants", "et (default)", "--out", out]
    module.main(argv)
    table = (tmp_path / "ablation" / "ablation.md").read_text(encoding="utf-8")
    assert "(n = 1)" in table and "± 0.0000" not in table  # one seed is not a zero spread
    module.main(argv)  # the same settings: the stored row is reused
    with pytest.raises(SystemExit, match="holds rows of"):
        module.main([*argv[:2], "--seeds", "2", *argv[4:]])


def test_every_ablation_variant_is_a_valid_command_line():
    """A variant's flags are only parsed when its row runs, maybe an hour into an ablation: a
    misspelt or removed flag must fail here instead."""
    from et_graph.config import parse
    from et_graph.experiments import anomaly

    module = benchmark_module("anomaly_ablation")
    default = parse(anomaly.CONFIG, [])
    unchanged = {name for name, flags in module.VARIANTS.items()
                 if flags and parse(anomaly.CONFIG, flags) == default}
    # The readout's row predates ego_neighbour as the default; it is kept so that its stored
    # tables resume, and equals the default row now. Any other variant must change something.
    assert unchanged == {"+ ego/neighbour readout"}
    layers = parse(anomaly.CONFIG, module.VARIANTS["+ 2 message-passing layers"])
    assert layers.et.message_passing_layers == 2


def test_correct_and_smooth_propagates_training_labels_only():
    import torch

    module = benchmark_module("anomaly_correct_smooth_probe")
    # a path 0 - 1 - 2 - 3, both directions; node 0 is the only training node (an anomaly)
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    adjacency = module.normalised_adjacency(edge_index, 4)
    score = torch.full((4,), 0.2, dtype=torch.float64)
    train = torch.tensor([True, False, False, False])
    y_train = torch.tensor([1.0], dtype=torch.float64)
    assert torch.equal(module.correct_and_smooth(adjacency, score, y_train, train, 0, 0, 0),
                       score)  # both steps off: the scores themselves
    smoothed = module.correct_and_smooth(adjacency, score, y_train, train, 0, 0, 0.5)
    assert smoothed[1] > smoothed[2] > smoothed[3]  # the label spreads, fading with hops
    corrected = module.correct_and_smooth(adjacency, score, y_train, train, 0.8, 1.0, 0)
    assert corrected[0] > 0.2 and corrected[1] > corrected[3]  # the residual +0.8 spreads


def test_the_tree_score_column_reads_training_labels_only(tmp_path):
    """The stacked ET's input column (benchmarks/anomaly_tree_score_probe.py): scrambling every
    label outside the training nodes changes no node's value, and it lies in the graph's order."""
    import torch
    from helpers import planted_graph_with_masks

    from et_graph.config import parse
    from et_graph.protocols.anomaly_config import AnomalyConfig

    module = benchmark_module("anomaly_tree_score_probe")
    graph = planted_graph_with_masks(200, seed=5)
    scrambled = graph.clone()
    outside = ~graph.train_mask
    scrambled.y[outside] = scrambled.y[outside][torch.randperm(int(outside.sum()))].flip(0)
    columns = []
    for name, data in (("graph", graph), ("scrambled", scrambled)):
        torch.save(data, tmp_path / f"{name}.pt")
        config = parse(AnomalyConfig, ["--data", str(tmp_path / f"{name}.pt"), "--protocol",
                                       "gadbench", "--seeds", "1", "--max-iter", "20",
                                       "--threads", "1", "--no-progress"])
        column, quality = module.tree_log_odds(config, folds=3)
        columns.append(column)
    assert not torch.equal(graph.y, scrambled.y)
    assert torch.equal(columns[0], columns[1]) and columns[0].shape == (200,)
    assert 0.0 <= quality["train_auroc_out_of_fold"] <= 1.0


def test_the_rank_blend_reads_a_stored_run(capsys):
    module = benchmark_module("anomaly_rank_blend")
    stored = Path(__file__).resolve().parents[1] / "docs/measured/anomaly/tolokers40_v5/scores.npz"
    module.main([str(stored), "--models", "et,gbt"])
    assert "rank average of et and gbt, 5 seeds: auroc 0.8568" in capsys.readouterr().out


def test_energy_degree_correlates_each_score_with_the_in_degree_without_labels(tmp_path):
    """benchmarks/energy_degree.py fits the unsupervised ET and correlates its scores with the
    in-degree; the graph's labels (scrambled in a second file) change nothing."""
    import torch
    from torch_geometric.data import Data

    from et_graph.datasets.synthetic import planted_anomaly_graph

    energy_degree = benchmark_module("energy_degree")
    graph = planted_anomaly_graph(200, seed=2)
    rows = []
    for name, y in (("true", graph.y), ("scrambled", graph.y.flip(0))):
        path = tmp_path / f"{name}.pt"
        torch.save(Data(x=graph.x, edge_index=graph.edge_index, y=y), path)
        result = energy_degree.main(["--data", str(path), "--quick", "--seeds", "1",
                                     "--no-progress", "--threads", "1",
                                     "--json", str(tmp_path / f"{name}.json")])
        rows.append(result["rows"])
    assert rows[0] == rows[1]
    assert {row["score"] for row in rows[0]} == {"et_energy", "et_reconstruction"}
    assert all(-1.0 <= row["spearman_with_in_degree"] <= 1.0 for row in rows[0])
    energy = next(row for row in rows[0] if row["score"] == "et_energy")
    assert -1.0 <= energy["spearman_after_log_degree_removed"] <= 1.0
    stored = json.loads((tmp_path / "true.json").read_text(encoding="utf-8"))
    assert stored["rows"] == rows[0] and stored["meta"]["data_digest"]


def test_edge_feature_products_time_every_layout_and_agree(tmp_path):
    """benchmarks/edge_feature_products.py (docs/benchmarks.md): each product read in place
    must equal the sorted copy's (the script checks); every row is timed and stored."""
    module = benchmark_module("edge_feature_products")
    out = tmp_path / "products.json"
    result = module.main(["--nodes", "60", "--edges", "400", "--edge-dim", "5", "--repeats", "1",
                          "--json", str(out)])
    stored = json.loads(out.read_text(encoding="utf-8"))
    assert stored["median_ms"] == result["median_ms"]
    assert len(stored["median_ms"]) == 6 and all(ms > 0 for ms in stored["median_ms"].values())
    assert stored["edges"] < 400  # self-loops dropped
    with pytest.raises(SystemExit):
        module.main(["--repeats", "0"])
