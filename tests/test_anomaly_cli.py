"""End-to-end: `et-graph anomaly` on a small generated graph writes every output; presets and
--quick; 2-process DDP."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import record_calls

from et_graph.cli import main as cli_main
from et_graph.config import parse, write_preset
from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.exceptions import ConfigWarning, ETGraphWarning
from et_graph.experiments import anomaly
from et_graph.protocols.anomaly_config import AnomalyConfig
from et_graph.transforms import prepare_detection_data

OUTPUTS = ("results.json", "results.md", "roc_pr.png", "training_curves.png", "energy_steps.png")
MODELS = ("et", "et_energy_trained", "mlp", "gcn", "gat", "gbt")


pytestmark = pytest.mark.usefixtures("one_thread")


def config(*argv):
    return parse(AnomalyConfig, ["--no-progress", *argv])


def test_cli_smoke_run_writes_all_outputs(tmp_path, capsys):
    graph = tmp_path / "planted.pt"
    torch.save(planted_anomaly_graph(300, seed=2), graph)
    out = tmp_path / "run"
    code = cli_main([
        "anomaly", "--data", str(graph), "--epochs", "3", "--seeds", "2", "--hidden", "16",
        "--out", str(out), "--no-progress", "--steps", "2",
    ])
    assert code == 0
    printed = capsys.readouterr().out  # --no-progress hides the bars, not the result
    assert "| et |" in printed and "auroc" in printed
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 0, name
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["dataset"] == "planted"
    # the training-curve figure's numbers beside it, tied to the run (an output audit)
    drawn = json.loads((out / "training_curves.json").read_text(encoding="utf-8"))
    assert drawn["run_id"] == results["meta"]["run_id"]
    assert all(len(drawn["models"][m]) == 2 and len(drawn["models"][m][0]["loss"]) == 3
               for m in ("et", "mlp"))
    assert drawn["models"]["et"][0]["best_epoch"] == results["per_seed"][0]["et"]["best_epoch"]
    assert "stratified" in results["protocol"]
    assert set(results["models"]) == set(MODELS)
    for stats in results["models"].values():
        for metric in ("auroc", "auprc", "f1_macro", "rec_at_k"):
            assert set(stats[metric]) >= {"mean", "std"}
            assert len(stats[metric]["values"]) == 2
    table = (out / "results.md").read_text(encoding="utf-8")
    for model in MODELS:
        assert f"| {model} |" in table, model
    meta = results["meta"]
    assert meta["config"]["train"]["epochs"] == 3 and meta["config"]["et"]["steps"] == 2
    assert meta["et_graph_version"] and meta["git_commit"]
    machine = meta["machine"]
    assert machine["processor"] and machine["cpu_capability"]
    assert machine["threads"] == torch.get_num_threads()
    energy = json.loads((out / "energy_steps.json").read_text(encoding="utf-8"))
    assert len(energy["all"]) >= 3
    # scores.npz: every row's scores on the scored nodes per seed, the table's figures
    import numpy as np
    from sklearn.metrics import roc_auc_score

    stored = np.load(out / "scores.npz")
    for seed in range(2):
        labels = stored[f"labels__seed{seed}"]
        assert len(stored[f"nodes__seed{seed}"]) == len(labels) == results["per_seed"][seed][
            "split_sizes"][2]
        for model in MODELS:
            assert roc_auc_score(labels, stored[f"{model}__seed{seed}"]) == pytest.approx(
                results["models"][model]["auroc"]["values"][seed], abs=1e-12), model
    # ET minus each baseline (not ET's own energy row), Welch over the seeds of one split
    differences = results["differences"]
    assert {(d["second"], d["metric"]) for d in differences} == {
        (m, metric) for m in ("mlp", "gcn", "gat", "gbt") for metric in ("auroc", "auprc")}
    assert {d["design"] for d in differences} == {"seeds"}
    assert "Welch's t-test over 2 seeds scoring the same test set" in table
    assert "| et − gbt | auroc |" in table and "| et − gbt | auroc |" in printed
    # and AUROC paired over the test nodes (DeLong) and the seeds, from the stored scores
    from et_graph.protocols.significance import node_difference

    nodes = {d["second"]: d for d in results["node_differences"]}
    assert set(nodes) == {"mlp", "gcn", "gat", "gbt"}
    expected = node_difference(stored["labels__seed0"], [stored[f"et__seed{s}"] for s in (0, 1)],
                               [stored[f"gbt__seed{s}"] for s in (0, 1)])
    assert (nodes["gbt"]["low"], nodes["gbt"]["high"]) == pytest.approx(
        (expected.low, expected.high))
    assert nodes["gbt"]["mean"] == pytest.approx(
        results["models"]["et"]["auroc"]["mean"] - results["models"]["gbt"]["auroc"]["mean"])
    assert "paired over the scored nodes (DeLong)" in table


def test_run_subgraph_mode_gadbench_masks_and_options():
    data = planted_anomaly_graph(300, seed=4)
    masks = torch.zeros(300, 2, dtype=torch.bool)
    data.train_mask, data.val_mask, data.test_mask = masks.clone(), masks.clone(), masks.clone()
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(0))
    for s in range(2):
        order = perm.roll(100 * s)
        data.train_mask[order[:120], s] = True
        data.val_mask[order[120:180], s] = True
        data.test_mask[order[180:], s] = True
    cfg = config(
        "--protocol", "gadbench", "--seeds", "2", "--epochs", "2", "--hidden", "16",
        "--subgraph-ratio", "0.3", "--positional", "--models", "et,mlp",
        "--feature-norm", "standard",
    )
    results = anomaly.run(cfg, data=data)
    assert set(results["models"]) == {"et", "et_energy_trained", "mlp"}
    assert "GADBench" in results["protocol"]
    sizes = [seed["split_sizes"] for seed in results["per_seed"]]
    assert sizes == [[120, 60, 120], [120, 60, 120]]
    # two different masks: ET and the MLP pair up over them, corrected for the overlap of
    # their training sets (120 test nodes per 120 training nodes)
    [auroc, auprc] = results["differences"]
    assert (auroc["second"], auroc["design"], auroc["metric"]) == ("mlp", "folds", "auroc")
    assert auroc["test_train_ratio"] == pytest.approx(1.0) and sum(auroc["wins"]) == 2
    assert "seeds' own splits (test nodes)" in results["differences_design"]
    assert "node_differences" not in results  # the seeds scored different nodes


def test_seed_ensemble_averages_each_models_seeds_on_their_shared_split(monkeypatch):
    """``NAME_ensemble`` is the mean of the model's per-seed scores, thresholded on validation;
    the deterministic trees' ensemble equals each of their seeds; test labels move no
    threshold; seeds on different splits are refused."""
    from et_graph.protocols.anomaly import choose_threshold, evaluate, seed_ensemble

    data = planted_anomaly_graph(300, seed=2)
    detectors = record_calls(monkeypatch, anomaly, "make_detector")
    results = anomaly.run(config("--models", "mlp,gbt", "--seeds", "2", "--epochs", "3",
                                 "--hidden", "16", "--seed-ensemble", "--no-energy-row"),
                          data=data)
    assert set(results["models"]) == {"mlp", "gbt", "mlp_ensemble", "gbt_ensemble"}
    assert "NAME_ensemble" in results["protocol"]
    split = anomaly.make_splits(data, "paper", 1)[0]
    y, val, test = data.y.numpy(), split.val.numpy(), split.test.numpy()
    mlp = [d.decision_score_.double().numpy() for d in detectors[0::2]]
    assert not (mlp[0] == mlp[1]).all()  # two seeds, two models
    mean = (mlp[0] + mlp[1]) / 2
    expected = evaluate(y[test], mean[test], choose_threshold(y[val], mean[val])[0])
    got = results["seed_ensembles"]["mlp_ensemble"]
    assert {m: got[m] for m in expected} == pytest.approx(expected)
    assert results["models"]["mlp_ensemble"]["auroc"]["values"] == [got["auroc"]]
    gbt = results["models"]["gbt"]
    for metric, stat in results["models"]["gbt_ensemble"].items():
        assert stat["values"] == [gbt[metric]["values"][0]] == [gbt[metric]["values"][1]]
    scrambled = y.copy()
    scrambled[test] = 1 - scrambled[test]
    assert seed_ensemble(scrambled, mlp, split)[1:] == seed_ensemble(y, mlp, split)[1:]
    with pytest.raises(ValueError, match="different splits"):
        anomaly.run(config("--models", "gbt", "--seeds", "2", "--vary-split",
                           "--seed-ensemble"), data=data)


def test_roc_plot_draws_every_row_with_the_tables_rank_metrics(monkeypatch, tmp_path):
    """roc_pr.png left out the seed-ensemble rows (and any model outside its fixed order), and
    drew the energy row from its validation-quantile map, whose ties gave another AUROC than
    the table's. Every scored row is now drawn, from the score its table row ranks."""
    from et_graph.plots import anomaly as plots
    from et_graph.protocols.anomaly import evaluate

    drawn = {}
    real = plots.plot_curves

    def capture(out, curves, data, split, scored="test"):
        drawn.update(curves["prob"])
        drawn["_split"], drawn["_scored"] = split, scored
        return real(out, curves, data, split, scored)

    monkeypatch.setattr(plots, "plot_curves", capture)
    data = planted_anomaly_graph(300, seed=2)
    results = anomaly.run(config("--models", "et,mlp", "--seeds", "2", "--epochs", "2",
                                 "--hidden", "16", "--seed-ensemble",
                                 "--out", str(tmp_path / "run")), data=data)
    split = drawn.pop("_split")
    assert drawn.pop("_scored") == "test"
    assert set(drawn) == set(results["models"]) == {
        "et", "et_energy_trained", "mlp", "et_ensemble", "mlp_ensemble"}
    assert plots.plotted_models(drawn) == [
        "et", "et_ensemble", "et_energy_trained", "mlp", "mlp_ensemble"]
    y, test = data.y.numpy(), split.test.numpy()
    for name, score in drawn.items():
        for metric in ("auroc", "auprc"):
            assert evaluate(y[test], score[test], 0.5)[metric] == pytest.approx(
                results["models"][name][metric]["values"][0], abs=1e-12), (name, metric)
    assert plots.plotted_models({"zeta": 0, "et": 0, "alpha_ensemble": 0}) == [
        "et", "alpha_ensemble", "zeta"]


def test_run_rejects_bad_options_and_data():
    with pytest.raises(ValueError, match="unknown models"):
        anomaly.run(config("--models", "svm"), data=planted_anomaly_graph(100))
    bad = planted_anomaly_graph(100)
    bad.x[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        anomaly.run(config("--models", "gbt"), data=bad)
    bad = planted_anomaly_graph(100)
    bad.y[0] = 2
    with pytest.raises(ValueError, match="binary"):
        anomaly.run(config("--models", "gbt"), data=bad)
    bad = planted_anomaly_graph(100)
    bad.edge_index[0, 0] = 100
    with pytest.raises(ValueError, match="outside"):
        anomaly.run(config("--models", "gbt"), data=bad)
    bad = planted_anomaly_graph(100)
    del bad.edge_index
    with pytest.raises(ValueError, match="edge_index"):
        anomaly.run(config("--models", "gbt"), data=bad)
    with pytest.raises(ValueError, match="torchrun"):
        env = {k: os.environ.pop(k) for k in ("RANK",) if k in os.environ}
        try:
            anomaly.run(config("--ddp"), data=planted_anomaly_graph(100))
        finally:
            os.environ.update(env)
    with pytest.raises(SystemExit):  # argparse: not an integer
        config("--epochs", "ten")


def test_quick_caps_lists_and_numbers_but_keeps_other_values():
    from et_graph.config import quick_overrides
    from et_graph.experiments.gnnbenchmark import GNNBenchmarkConfig

    base = GNNBenchmarkConfig()
    assert quick_overrides(base, {"protocol.seeds": "0,1", "data.generated_sizes": "16,8,8",
                                  "train.epochs": 2, "data.train_limit": 48}) == {
        "protocol.seeds": "0,1", "data.generated_sizes": "16,8,8", "train.epochs": 2,
        "data.train_limit": 48}  # defaults: 3 seeds, big sizes, no limit
    small = parse(GNNBenchmarkConfig, ["--seeds", "4", "--generated-sizes", "10,30,5",
                                       "--epochs", "1"])
    assert quick_overrides(small, {"protocol.seeds": "0,1", "data.generated_sizes": "16,8,8",
                                   "train.epochs": 2}) == {
        "protocol.seeds": "4", "data.generated_sizes": "10,8,5", "train.epochs": 1}
    # a seed list keeps its own first seeds (an element-wise minimum gave "0,0" from "3,0")
    other = parse(GNNBenchmarkConfig, ["--seeds", "3,0,7"])
    assert quick_overrides(other, {"protocol.seeds": "0,1"}) == {"protocol.seeds": "3,0"}


def test_quick_preset_file_and_flags_resolve_in_order(tmp_path):
    assert config("--quick").train.epochs == AnomalyConfig.QUICK["train.epochs"]
    assert config("--quick", "--seeds", "3").protocol.seeds == 3  # explicit flags win
    preset = write_preset(AnomalyConfig(), tmp_path / "p.toml")
    text = preset.read_text(encoding="utf-8").replace("epochs = 100", "epochs = 7").replace(
        'dataset = "tolokers"', 'dataset = "reddit"')
    preset.write_text(text, encoding="utf-8")
    from_file = config("--config", str(preset))
    assert from_file.train.epochs == 7 and from_file.data.dataset == "reddit"
    assert config("--config", str(preset), "--epochs", "9").train.epochs == 9
    # --quick caps a preset's settings, never raises them (it used to set 7 epochs to 10)
    assert config("--config", str(preset), "--quick").train.epochs == 7
    preset.write_text(text.replace("epochs = 7", "epochs = 30").replace("seeds = 5", "seeds = 1"),
                      encoding="utf-8")
    quick = config("--config", str(preset), "--quick")
    assert (quick.train.epochs, quick.protocol.seeds) == (10, 1)
    (tmp_path / "bad.toml").write_text("[train]\nepochz = 3\n", encoding="utf-8")
    with pytest.raises(ValueError, match="epochz"):
        config("--config", str(tmp_path / "bad.toml"))
    (tmp_path / "bad_value.toml").write_text('[train]\nepochs = "three"\nlr = "fast"\n',
                                             encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.(epochs must be an integer|lr must be a number)"):
        config("--config", str(tmp_path / "bad_value.toml"))
    (tmp_path / "p.yaml").write_text("train:\n  epochs: 4\n", encoding="utf-8")
    assert config("--config", str(tmp_path / "p.yaml")).train.epochs == 4


DDP_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, torch
    import torch.distributed as dist
    from et_graph.config import parse
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.detectors.neural import NeuralDetector
    from et_graph.experiments import anomaly

    torch.set_num_threads(1)
    config = parse(anomaly.CONFIG, sys.argv[1:])
    seen = {}
    fit = NeuralDetector._fit

    def spy(self, *args):
        fit(self, *args)
        flat = torch.cat([p.detach().flatten() for p in self.model_.parameters()])
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, float(flat.double().sum()))
        seen["checksums"] = gathered
        seen["world"] = dist.get_world_size()

    NeuralDetector._fit = spy
    anomaly.run(config, data=planted_anomaly_graph(200, seed=5))
    # One file per rank: two ranks printing to one pipe can interleave their lines.
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ["RANK"])
    with open(os.path.join(os.environ["RESULT_DIR"], f"rank{rank}.json"), "w") as out:
        json.dump(seen, out)
    """
)


def test_ddp_two_processes(tmp_path):
    script = tmp_path / "ddp_run.py"
    script.write_text(DDP_SCRIPT, encoding="utf-8")
    out = tmp_path / "ddp_out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path.cwd()),
           "RESULT_DIR": str(tmp_path)}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
        "--standalone", str(script), "--ddp", "--epochs", "3", "--seeds", "1",
        "--hidden", "16", "--models", "et,mlp", "--out", str(out), "--no-progress",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads((tmp_path / f"rank{rank}.json").read_text(
        encoding="utf-8")) for rank in (0, 1)]
    for line in lines:
        assert line["world"] == 2
        # DDP keeps the replicas identical: both ranks end with the same weights.
        assert line["checksums"][0] == pytest.approx(line["checksums"][1], rel=1e-6)
    assert (out / "results.json").exists()
    # the process count, which moves a mini-batch result, is said (a DDP audit: nowhere)
    protocol = json.loads((out / "results.json").read_text(encoding="utf-8"))["protocol"]
    assert "data-parallel over 2 processes" in protocol


def test_prepare_data_feature_options_are_label_free():
    data = planted_anomaly_graph(200, num_features=3, seed=6)
    plain = prepare_detection_data(data)
    assert torch.equal(plain.x, data.x)
    rich = prepare_detection_data(data, "quantile", degree_feature=True)
    assert rich.x.shape == (200, 4)
    degree = torch.bincount(data.edge_index[1], minlength=200).float()
    order = torch.argsort(degree.log1p(), stable=True)
    assert bool((rich.x[order, 3].diff() >= -1e-6).all())  # monotone in the degree
    assert abs(float(rich.x.mean())) < 0.05
    flipped = data.clone()
    flipped.y = 1 - data.y
    assert torch.equal(prepare_detection_data(flipped, "quantile", True).x, rich.x)
    # A graph without labels (to score, or for the unsupervised detector, whose warning about
    # raw features advises this call) was refused: "the graph needs a binary node label y".
    unlabelled = data.clone()
    del unlabelled.y
    bare = prepare_detection_data(unlabelled, "quantile", True)
    assert torch.equal(bare.x, rich.x) and getattr(bare, "y", None) is None
    with pytest.raises(ValueError, match="feature_norm"):
        prepare_detection_data(data, "minmax")
    with pytest.raises(ValueError, match="binary"):
        prepare_detection_data(type(data)(x=data.x, edge_index=data.edge_index, y=data.y + 1))


def test_machine_metadata_records_the_numerics_environment(monkeypatch):
    from et_graph.config import machine_metadata

    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    machine = machine_metadata()
    assert machine["environment"]["MKL_CBWR"] == "COMPATIBLE"
    assert "ATEN_CPU_CAPABILITY" not in machine["environment"]
    assert isinstance(machine["mkl"], bool)


def test_provenance_note_names_the_machine_and_the_numerics_environment():
    from et_graph.reporting import provenance_note

    meta = {"et_graph_version": "1.2", "git_commit": "abc",
            "machine": {"processor": "CPU X", "cpu_capability": "AVX2", "threads": 1,
                        "cuda_device": None, "environment": {"MKL_CBWR": "COMPATIBLE"}}}
    note = provenance_note(meta)
    assert note == "et-graph 1.2, commit abc; CPU X (AVX2), 1 thread(s), MKL_CBWR=COMPATIBLE"
    assert provenance_note({"et_graph_version": "1.2", "git_commit": "abc"}) == (
        "et-graph 1.2, commit abc")  # results written before the machine was recorded
    # the process's peak memory (a scale audit: no run recorded its memory)
    meta = {"et_graph_version": "1.2", "git_commit": "abc",
            "peak_memory": {"rss_bytes": 3 * 2 ** 29, "gpu_bytes": None}}
    assert provenance_note(meta) == ("et-graph 1.2, commit abc; peak memory of the process: "
                                     "resident 1.50 GiB")


def test_run_metadata_records_the_process_peak_memory():
    import torch

    from et_graph.config import run_metadata

    before = run_metadata()["peak_memory"]["rss_bytes"]
    if before is None:
        pytest.skip("no peak resident set on this platform (Windows)")
    block = torch.ones(64 * 2 ** 20, dtype=torch.uint8)  # 64 MiB held and touched
    after = run_metadata()["peak_memory"]
    assert before > 0 and after["rss_bytes"] >= before
    assert after["gpu_bytes"] is None or after["gpu_bytes"] >= 0
    del block


def test_a_trees_only_run_says_it_has_no_training_curves(tmp_path):
    """It wrote blank axes (and matplotlib's 'No artists with labels' warning)."""
    import warnings

    graph = tmp_path / "planted.pt"
    torch.save(planted_anomaly_graph(300, seed=2), graph)
    out = tmp_path / "trees"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert cli_main(["anomaly", "--data", str(graph), "--models", "gbt", "--seeds", "1",
                         "--max-iter", "10", "--out", str(out), "--no-progress"]) == 0
    assert (out / "training_curves.png").stat().st_size > 0


def test_torchrun_without_ddp_and_ddp_without_torchrun_are_refused(monkeypatch):
    """Under torchrun without --ddp every process ran the whole job into the same folder."""
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="ddp needs torchrun"):
        cli_main(["anomaly", "--dataset", "reddit", "--quick", "--ddp", "--no-progress"])
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="without --ddp"):
        cli_main(["anomaly", "--dataset", "reddit", "--quick", "--no-progress"])
    # the other tasks ran the whole job once per process, into one folder (a DDP audit)
    for task in (["tudataset", "--dataset", "MUTAG"], ["unsupervised"], ["gnnbenchmark"],
                 ["image"]):
        with pytest.raises(ValueError, match="this task is not data-parallel"):
            cli_main([*task, "--quick", "--no-progress"])


def test_a_ddp_run_leaves_the_callers_process_group_alone(monkeypatch):
    """anomaly.run(--ddp) destroyed a process group its caller had made, whose next collective
    then failed, and a second run in the process could not start (a DDP audit)."""
    import torch.distributed as dist

    destroyed = []
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 1)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: destroyed.append(True))
    anomaly.run(config("--ddp", "--models", "gbt", "--seeds", "1", "--max-iter", "5"),
                data=planted_anomaly_graph(100))
    assert destroyed == []


def test_the_protocol_counts_anomalies_per_split_and_few_test_anomalies_warn():
    """On a 20-node graph with 3 anomalies the split put one in each part; the report named
    only node counts and printed an AUROC of 0 or 1 from a single test anomaly, unremarked."""
    small = planted_anomaly_graph(40, seed=2)
    small.y[:] = 0
    small.y[:6] = 1
    with pytest.warns(RuntimeWarning, match="a test split holds only 3 anomalous node"):
        results = anomaly.run(config("--models", "mlp", "--seeds", "1", "--epochs", "1",
                                     "--hidden", "8", "--no-energy-row"), data=small)
    assert "train/val/test nodes (2/1/3 anomalous)" in results["protocol"], results["protocol"]


def test_a_files_own_masks_replaced_by_the_paper_split_are_named(tmp_path):
    graph = planted_anomaly_graph(200, seed=2)
    graph.train_mask = torch.arange(200) < 80
    graph.val_mask = (torch.arange(200) >= 80) & (torch.arange(200) < 120)
    graph.test_mask = torch.arange(200) >= 120
    path = tmp_path / "masked.pt"
    torch.save(graph, path)
    argv = ["--data", str(path), "--models", "mlp", "--seeds", "1", "--epochs", "1",
            "--hidden", "8", "--no-energy-row"]
    with pytest.warns(ConfigWarning, match="carries its own train/val/test masks"):
        anomaly.run(config(*argv))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        anomaly.run(config(*argv, "--protocol", "gadbench"))  # the masks are used: no word


def test_a_small_amazon_layout_file_runs_with_its_own_unlabelled_prefix(tmp_path):
    """The 3,305 unlabelled leading nodes of Amazon.mat were fixed: a smaller file in the same
    layout (a subsample, a user's own graph) could not be run from the command line."""
    import numpy as np
    import scipy.io
    import scipy.sparse as sp

    graph = planted_anomaly_graph(300, seed=2)
    n = graph.num_nodes
    src, dst = graph.edge_index.numpy()
    relations = {name: sp.csc_matrix((np.ones(part.sum()), (src[part], dst[part])), shape=(n, n))
                 for name, part in zip(("net_upu", "net_usu", "net_uvu"),
                                       np.eye(3, dtype=bool)[np.arange(src.size) % 3].T)}
    homo = sum(relations.values())
    path = tmp_path / "Amazon.mat"
    scipy.io.savemat(str(path), {"features": sp.csc_matrix(graph.x.numpy()), "homo": homo,
                                 "label": graph.y.numpy()[None], **relations})
    argv = ["anomaly", "--data", str(path), "--models", "mlp", "--seeds", "1", "--epochs", "1",
            "--hidden", "8", "--no-energy-row", "--no-progress"]
    with pytest.raises(ValueError, match=r"--unlabelled-prefix 0"):
        cli_main(argv)  # the default 3,305 exceeds the 300 nodes, and the error names the flag
    out = tmp_path / "run"
    assert cli_main([*argv, "--unlabelled-prefix", "50", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert "100/50/100 train/val/test nodes" in results["protocol"]  # 250 labelled of 300
    data = anomaly.load_data(config("--data", str(path), "--unlabelled-prefix", "50").data)
    assert int(data.label_mask.sum()) == 250 and not data.label_mask[:50].any()
    with pytest.raises(ValueError, match="only applies to yelpchi and amazon"):
        anomaly.load_data(config("--dataset", "reddit", "--unlabelled-prefix", "5").data)


def test_a_rerun_into_a_used_out_folder_names_what_it_replaces_and_what_it_left(tmp_path):
    """A second run into the same --out replaced results.json without a word and left the
    earlier run's other files beside it, to be read as the new run's."""
    import warnings

    graph = tmp_path / "planted.pt"
    torch.save(planted_anomaly_graph(200, seed=2), graph)
    out = tmp_path / "run"
    argv = ["anomaly", "--data", str(graph), "--models", "mlp", "--seeds", "1", "--epochs", "1",
            "--baseline-hidden", "8", "--no-energy-row", "--no-progress", "--out", str(out)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a new folder: not a word
        warnings.simplefilter("error", ETGraphWarning)
        assert cli_main(argv) == 0
    (out / "gat_curve.png").write_bytes(b"an earlier run's plot")
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "state.pt").write_bytes(b"kept for --resume")
    with pytest.warns(RuntimeWarning) as caught:
        assert cli_main([*argv, "--checkpoint-dir", str(out / "checkpoints")]) == 0
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any("holds an earlier run's results" in m for m in messages), messages
    # (a user audit read "replaces them" before a refused flag left them as they were)
    assert any("one that stops before, on an error say, leaves them" in m for m in messages)
    # named the line in reporting.py (a frame short: the context manager's __enter__)
    assert {w.filename for w in caught if "earlier run" in str(w.message)} == {__file__}
    left = [m for m in messages if "come from an earlier run" in m]
    assert len(left) == 1 and "1 file(s)" in left[0] and "gat_curve.png" in left[0], left
    assert "state.pt" not in left[0]  # the checkpoint folder is the run's own, not a leftover
    assert (out / "gat_curve.png").exists()  # reported, never deleted


def test_the_protocol_declares_inputs_that_differ_between_models():
    """From an audit: the label trick (an input no baseline gets) and GBT's neighbourhood
    columns appeared only in the resolved config, not in the table's protocol line."""
    graph = planted_anomaly_graph(200, seed=2)
    argv = ["--models", "et,mlp,gbt", "--seeds", "1", "--epochs", "1", "--hidden", "8",
            "--max-iter", "5", "--no-energy-row"]
    text = anomaly.run(config(*argv, "--label-trick"), data=graph)["protocol"]
    assert "GBT reads x ‖ the mean of its neighbours' x ‖ the mean of their means" in text
    assert "ET also reads its neighbours' training labels" in text
    assert "an input no baseline gets" in text
    plain = anomaly.run(config(*argv, "--features", "x"), data=graph)["protocol"]
    assert "GBT reads x only" in plain and "label trick" not in plain
    both = anomaly.run(config(*argv, "--label-trick", "--gbt-label-trick"),
                       data=graph)["protocol"]
    assert ("GBT reads x ‖ the mean of its neighbours' x ‖ the mean of their means ‖ its "
            "neighbours' training labels") in both
    assert "an input GBT gets too" in both and "no baseline" not in both


def test_the_plots_mark_the_kept_epoch_and_draw_precision_recall_as_steps(monkeypatch, tmp_path):
    """From an audit: the validation-AUROC panel did not mark the epoch the checkpoint kept
    (chosen on another metric, macro-F1); the PR curve joined its points by straight lines,
    enclosing another area than the legend's AUPRC; the energy panels mixed node sets
    unlabelled."""
    import numpy as np

    from et_graph.plots.figures import OwnFigures

    figures = []
    monkeypatch.setattr(OwnFigures, "close", staticmethod(lambda fig=None: figures.append(fig)))
    data = planted_anomaly_graph(300, seed=2)
    results = anomaly.run(config("--models", "et", "--seeds", "1", "--epochs", "3",
                                 "--hidden", "16", "--out", str(tmp_path / "run")), data=data)
    roc_pr, curves, energy = figures[:3]
    pr_line = roc_pr.axes[1].get_lines()[0]
    assert pr_line.get_drawstyle() == "steps-post"
    recall, precision = (np.asarray(v) for v in pr_line.get_data())
    area = float(np.sum(-np.diff(recall) * precision[:-1]))  # the area of the drawn steps
    assert area == pytest.approx(results["models"]["et"]["auprc"]["values"][0], abs=1e-9)
    val_ax = curves.axes[1]
    assert "kept on validation f1_macro" in val_ax.get_title()
    star = [line for line in val_ax.get_lines()  # (one empty line: the legend's entry)
            if line.get_marker() == "*" and len(line.get_xdata())]
    kept = results["per_seed"][0]["et"]["best_epoch"]
    assert len(star) == 1 and star[0].get_xdata()[0] == kept + 1  # (drawn from epoch 1)
    assert "all nodes" in energy.axes[0].get_title()
    assert "validation nodes only" in energy.axes[1].get_title()


def test_every_anomaly_preset_that_runs_et_names_its_readout():
    """From an audit: four Tolokers presets had no readout key, so when the default became
    ego_neighbour they silently stopped reproducing their first_last tables."""
    from et_graph.config import load_file

    presets = sorted(Path(__file__).resolve().parents[1].glob("configs/anomaly/*.toml"))
    missing = []
    for path in presets:
        data = load_file(path)
        models = data.get("protocol", {}).get("models", AnomalyConfig().protocol.models)
        if "et" in [m.strip() for m in str(models).split(",")] and "et" in data \
                and "readout" not in data["et"]:
            missing.append(path.name)
    assert not missing, missing


def test_bootstrap_rounds_add_auprc_over_the_nodes_and_refuse_too_few():
    """--bootstrap-rounds adds AUPRC rows to the DeLong table: the seeds' mean AUPRC
    difference, its interval from the paired bootstrap of the stored per-node scores."""
    data = planted_anomaly_graph(300, seed=5)
    results = anomaly.run(config("--seeds", "2", "--epochs", "2", "--hidden", "16",
                                 "--models", "et,mlp", "--no-energy-row",
                                 "--bootstrap-rounds", "100"), data=data)
    rows = {(d["second"], d["metric"]): d for d in results["node_differences"]}
    assert set(rows) == {("mlp", "auroc"), ("mlp", "auprc")}
    auprc = results["models"]["et"]["auprc"]["mean"] - results["models"]["mlp"]["auprc"]["mean"]
    assert rows[("mlp", "auprc")]["mean"] == pytest.approx(auprc)
    assert "bootstrap (100 draws, seed 0)" in results["node_differences_design"]
    with pytest.raises(ValueError, match="bootstrap_rounds must be 0"):
        config("--bootstrap-rounds", "50")


def test_flags_no_chosen_model_reads_are_named(monkeypatch):
    """``--label-trick --models gbt`` ran GBT unchanged without a word (an audit): ET's flags,
    the neural baselines' and the trees' are named when none of their models runs; flags of
    the shared sections and of a chosen model are not."""
    from helpers import assert_unread_flags_named

    from et_graph.experiments import anomaly as runner

    assert_unread_flags_named(runner, monkeypatch, [
        (["--models", "gbt", "--label-trick", "--epochs", "2"],
         r"flags for et\.label_trick, train\.epochs: no"),
        # ... and the ET's learning rate beside the MLP alone, which reads baselines.baseline_lr
        # (a tuning audit: --models mlp --lr 0.5 and --lr 0.0001 gave identical results).
        (["--models", "mlp", "--lr", "0.5", "--epochs", "2"], r"flags for train\.lr: no model"),
        (["--models", "et", "--max-iter", "50"], r"gbt\.max_iter"),
    ], ["--models", "et,gbt", "--label-trick", "--max-iter", "50", "--epochs", "2"])


def test_the_printout_states_the_protocol_above_the_table(capsys):
    """From an examples audit: the anomaly and unsupervised printouts gave the table without
    the title and protocol line that results.md and the other tasks' printouts have."""
    graph = planted_anomaly_graph(200, seed=2)
    anomaly.run(parse(anomaly.CONFIG, ["--models", "gbt", "--seeds", "1", "--no-progress",
                                       "--no-energy-row"]), data=graph)
    out = capsys.readouterr().out
    assert out.index("Anomaly detection: ") < out.index("paper/BWGNN: stratified split") < (
        out.index("| model |"))


def test_an_installed_package_inside_a_users_repository_records_no_commit(tmp_path, monkeypatch):
    # A virtual environment inside the user's own git project: its commit is not et-graph's.
    import subprocess

    from et_graph import paths
    from et_graph.config import git_commit

    site = tmp_path / "project" / ".venv" / "site-packages"
    (site / "et_graph").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(tmp_path / "project")], check=True)
    subprocess.run(["git", "-C", str(tmp_path / "project"), "-c", "user.name=u", "-c",
                    "user.email=u@x", "commit", "-q", "--allow-empty", "-m", "init"], check=True)
    monkeypatch.setattr(paths, "PACKAGE_DIR", site / "et_graph")
    assert git_commit() == "unknown"
    assert git_commit(tmp_path / "project") not in ("unknown", "")  # a path given still works


def test_a_missing_preset_path_says_where_the_shipped_presets_are(tmp_path, monkeypatch):
    from et_graph import paths
    from et_graph.config import load_file

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="the shipped preset is .*configs/anomaly/tolokers"):
        load_file("configs/anomaly/tolokers.toml")
    monkeypatch.setattr(paths, "PACKAGE_DIR", tmp_path / "site-packages" / "et_graph")
    with pytest.raises(FileNotFoundError, match="wheel does not hold"):
        load_file("configs/anomaly/tolokers.toml")


def test_own_detectors_run_as_rows_beside_the_configured_models():
    """A researcher's own detector could only join the runner's tables by patching its
    registries; rows named et_... were left out of the differences without a word."""
    from et_graph.detectors import GBTDetector, MLPDetector

    data = planted_anomaly_graph(300, seed=2)
    made = []

    def wide_mlp(seed):
        made.append(seed)
        return MLPDetector(hidden=16, epochs=2, seed=seed)

    results = anomaly.run(
        config("--models", "et,gbt", "--seeds", "2", "--epochs", "2", "--hidden", "16",
               "--no-energy-row"), data=data,
        detectors={"wide_mlp": wide_mlp, "et_trees": lambda seed: GBTDetector(seed=seed)})
    assert made == [0, 0, 1]  # once before any training (its kind checked), then per seed
    assert set(results["models"]) == {"et", "gbt", "wide_mlp", "et_trees"}
    assert "own detectors (passed from Python" in results["protocol"]
    assert "wide_mlp = MLPDetector" in results["protocol"]
    rivals = {d["second"] for d in results["differences"]}
    assert {"gbt", "wide_mlp", "et_trees"} <= rivals  # et_trees is not one of ET's own rows
    # the built-in gbt row and the own row of the same trees agree (same splits, same seeds)
    assert (results["models"]["gbt"]["auroc"]["values"]
            == results["models"]["et_trees"]["auroc"]["values"])
    for taken in ("gbt", "et_energy_trained", "mlp_ensemble", ""):
        with pytest.raises(ValueError, match="empty or taken"):
            anomaly.run(config("--models", "gbt"), data=data,
                        detectors={taken: lambda seed: GBTDetector()})
    with pytest.raises(TypeError, match="not a detector"):
        anomaly.run(config("--models", "gbt"), data=data, detectors={"x": lambda seed: 1})


def test_quiet_runs_print_nothing(capsys, tmp_path):
    """A notebook got every runner's protocol, tables and "Written to" in its cell, with no
    way to turn them off short of redirect_stdout."""
    data = planted_anomaly_graph(200, seed=2)
    results = anomaly.run(config("--models", "gbt", "--seeds", "1", "--quiet",
                                 "--out", str(tmp_path / "run")), data=data)
    assert capsys.readouterr().out == ""
    assert "gbt" in results["models"] and (tmp_path / "run" / "results.md").exists()
    anomaly.run(config("--models", "gbt", "--seeds", "1"), data=data)
    assert "| gbt |" in capsys.readouterr().out  # printed by default


def test_quiet_without_out_is_refused_on_the_command_line(capsys):
    # (CLI audit) `et-graph anomaly --quiet` ran every model, printed nothing, kept nothing
    # and exited 0; a script calling run() reads the returned results, so only the CLI refuses
    from et_graph.cli import console_main
    from et_graph.cli import main as cli_main

    # (tudataset and image write to a default folder)
    for command in ("anomaly", "unsupervised", "gnnbenchmark"):
        with pytest.raises(ValueError, match="--quiet prints nothing and no --out folder"):
            cli_main([command, "--quick", "--quiet"])
    assert console_main(["anomaly", "--quick", "--quiet"]) == 2  # one line, exit status 2
    assert "error: --quiet prints nothing" in capsys.readouterr().err


def test_own_detectors_of_a_kind_the_runner_cannot_fit_are_refused_before_training():
    """An UnsupervisedETDetector failed after seed 0's trainings (it refuses masks); a fitted
    detector was refitted in the caller's hands; a "|" in a name added a table column; an own
    "ET" took the built-in et's colour."""
    from et_graph.detectors import GBTDetector, UnsupervisedETDetector

    data = planted_anomaly_graph(200, seed=2)
    fitted = GBTDetector().fit(data, *anomaly.make_splits(data, "paper", 1)[0].masks(200)[:2])
    cases = {"unsup": (lambda seed: UnsupervisedETDetector(), TypeError, "unsupervised"),
             "done": (lambda seed: fitted, ValueError, "fitted detector"),
             "a|b": (lambda seed: GBTDetector(), ValueError, "letters, digits"),
             "ET": (lambda seed: GBTDetector(), ValueError, "taken")}
    for name, (factory, error, message) in cases.items():
        with pytest.raises(error, match=message):
            anomaly.run(config("--models", "gbt", "--seeds", "1"), data=data,
                        detectors={name: factory})


def test_results_say_their_layout_task_and_time_of_writing():
    """A program reading results.json guessed the task from which keys were there, and no
    file said when it was written (an output audit)."""
    import datetime
    import importlib

    from et_graph.cli import SUBCOMMANDS
    from et_graph.config import RESULTS_FORMAT, run_metadata

    tasks = {name: importlib.import_module(module).CONFIG
             for name, (module, _) in SUBCOMMANDS.items()
             if hasattr(importlib.import_module(module), "CONFIG")}
    assert set(tasks) == {"anomaly", "unsupervised", "tudataset", "gnnbenchmark", "image"}
    for task, config in tasks.items():  # every task's results name it as its command does
        meta = run_metadata(config())
        assert meta["task"] == task and meta["results_format"] == RESULTS_FORMAT
        written = datetime.datetime.fromisoformat(meta["written_at"])
        assert written.utcoffset() == datetime.timedelta(0)
        assert abs((datetime.datetime.now(datetime.timezone.utc) - written).total_seconds()) < 60
    assert "task" not in run_metadata()
