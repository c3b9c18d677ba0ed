"""Presets as a user edits them: layered validation, YAML and TOML pitfalls, round trips."""
from __future__ import annotations

import warnings

import pytest

from et_graph.config import load_file, merge, parse, write_preset
from et_graph.protocols.anomaly_config import AnomalyConfig
from et_graph.protocols.gnnbenchmark_config import GNNBenchmarkConfig
from et_graph.protocols.tudataset_config import TUDatasetConfig


def test_a_preset_is_checked_together_with_the_flags_and_later_presets(tmp_path):
    # resume = true in the file, its --checkpoint-dir as a flag: refused before ("needs
    # --checkpoint-dir"), since each layer was validated alone
    preset = tmp_path / "resume.toml"
    preset.write_text("[run]\nresume = true\n", encoding="utf-8")
    config = parse(AnomalyConfig, ["--config", str(preset), "--checkpoint-dir", "ck"])
    assert config.run.resume and config.run.checkpoint_dir == "ck"
    sampler = tmp_path / "sampler.toml"
    sampler.write_text('[train]\nneighbor_sampler = "builtin"\nnum_neighbors = "10,5"\n',
                       encoding="utf-8")
    later = tmp_path / "batch.toml"
    later.write_text("[train]\nbatch_size = 512\n", encoding="utf-8")
    config = parse(AnomalyConfig, ["--config", str(sampler), "--config", str(later)])
    assert config.train.batch_size == 512 and config.train.num_neighbors == "10,5"
    with pytest.raises(ValueError, match="needs batch_size"):  # still checked, once joined
        parse(AnomalyConfig, ["--config", str(sampler)])


def test_misspelt_keys_name_the_file_and_the_closest_key(tmp_path):
    preset = tmp_path / "typo.toml"
    preset.write_text("[train]\nepoch = 3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"typo.toml: unknown key.*'epoch' -> 'epochs'"):
        parse(AnomalyConfig, ["--config", str(preset)])
    other = tmp_path / "other.toml"
    other.write_text("[gbt]\nmax_iter = 3\n", encoding="utf-8")
    with pytest.raises(ValueError, match="another task"):
        parse(TUDatasetConfig, ["--config", str(other)])


def test_yaml_duplicates_and_syntax_errors_are_named(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("train:\n  epochs: 3\ntrain:\n  lr: 0.5\n",
                     encoding="utf-8")  # the first block vanished
    with pytest.raises(ValueError, match="twice.yaml: key 'train' is given twice"):
        load_file(twice)
    broken = tmp_path / "broken.yaml"
    broken.write_text("train:\n  epochs: [3\n",
                      encoding="utf-8")  # a raw yaml.ParserError traceback
    with pytest.raises(ValueError, match="broken.yaml"):
        load_file(broken)
    toml = tmp_path / "broken.toml"
    toml.write_text("[train]\nepochs = 3\nepochs = 4\n", encoding="utf-8")
    with pytest.raises(ValueError, match="broken.toml"):
        load_file(toml)
    commented = tmp_path / "commented.yaml"
    commented.write_text("train:\n  # epochs: 3\n",
                         encoding="utf-8")  # a section whose keys are commented out
    assert parse(AnomalyConfig, ["--config", str(commented)]).train == AnomalyConfig().train


def test_written_presets_load_back_whatever_their_strings_and_meta_keys(tmp_path):
    config = merge(AnomalyConfig(), {"run": {"out": 'résultats/😀 "q"\nx\x7f'}})
    path = write_preset(config, tmp_path / "p.toml", meta={"my key": "😀", "plain": 1})
    assert parse(AnomalyConfig, ["--config", str(path)]) == config  # TOML refused the file


@pytest.mark.parametrize("cls, argv, name", [
    (AnomalyConfig, ["--baseline-dropout", "nan"], "baselines.baseline_dropout"),
    (AnomalyConfig, ["--baseline-lr", "0"], "baselines.baseline_lr"),
    (TUDatasetConfig, ["--mlp-hidden", "-3"], "baselines.mlp_hidden"),
    (TUDatasetConfig, ["--gin-layers", "0"], "baselines.gin_layers"),
    (TUDatasetConfig, ["--mlp-dropout", "1.5"], "baselines.mlp_dropout"),
    (GNNBenchmarkConfig, ["--baseline-dropout", "nan"], "baselines.baseline_dropout"),
])
def test_baseline_settings_are_checked_when_parsed_under_their_own_names(cls, argv, name):
    # they failed inside torch after the data had loaded, or named train.lr
    with pytest.raises(ValueError, match=name):
        parse(cls, argv)


def test_a_text_setting_given_a_table_is_refused(tmp_path):
    preset = tmp_path / "table.toml"
    preset.write_text("[data]\nrelation = {a = 1}\n",
                      encoding="utf-8")  # became the text "{'a': 1}"
    with pytest.raises(ValueError, match="data.relation must be text"):
        parse(AnomalyConfig, ["--config", str(preset)])


def test_a_preset_and_a_study_report_cut_while_written_keep_the_earlier_files(tmp_path,
                                                                             monkeypatch):
    """(session 70) presets and study reports were written in place: a tuning run killed, or a
    full disk, while writing left a cut preset that the next --config read as a shorter one."""
    import errno
    from pathlib import Path

    from et_graph.tuning.study import TuneBudget, write_report

    preset = write_preset(AnomalyConfig(), tmp_path / "best_et.toml")
    before = preset.read_text(encoding="utf-8")
    write_report(tmp_path, "anomaly", "planted", "auroc", TuneBudget(trials=1), {}, {},
                 parse(AnomalyConfig, []))
    reports = {name: (tmp_path / name).read_text(encoding="utf-8")
               for name in ("study_report.json", "study_report.md")}
    plain = Path.write_text

    def cut_when(written: str):
        def cut(self, text, *args, **kwargs):  # the disk fills while this file is written
            if written not in self.name:
                return plain(self, text, *args, **kwargs)
            plain(self, text[:10], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device")
        return cut

    monkeypatch.setattr(Path, "write_text", cut_when("best_et.toml"))
    with pytest.raises(OSError):
        write_preset(merge(AnomalyConfig(), {"train": {"epochs": 7}}), preset)
    monkeypatch.undo()
    assert preset.read_text(encoding="utf-8") == before
    for written in reports:  # each report file on its own: the one cut keeps its old text
        monkeypatch.setattr(Path, "write_text", cut_when(written))
        with pytest.raises(OSError):
            write_report(tmp_path, "tudataset", "MUTAG", "accuracy", TuneBudget(trials=2), {},
                         {}, parse(AnomalyConfig, []))
        monkeypatch.undo()
        assert (tmp_path / written).read_text(encoding="utf-8") == reports[written]
    assert not list(tmp_path.glob(".*.partial"))


def test_quick_caps_a_presets_runs_per_fold(tmp_path):
    preset = tmp_path / "three.toml"
    preset.write_text("[protocol]\nruns_per_fold = 3\n",
                      encoding="utf-8")  # a smoke run trained each fold 3 times
    assert parse(TUDatasetConfig, ["--config", str(preset), "--quick"]).protocol.runs_per_fold == 1
    assert parse(TUDatasetConfig, ["--config", str(preset), "--quick", "--runs-per-fold", "2"]
                 ).protocol.runs_per_fold == 2  # a flag still wins


def test_abbreviated_flags_are_refused(capsys):
    with pytest.raises(SystemExit):  # "--ep 7" set epochs
        parse(AnomalyConfig, ["--ep", "7"])
    # (a notebook audit) from Python the usage named the interpreter's script
    assert "parse(AnomalyConfig): error" in capsys.readouterr().err


def test_every_parser_in_the_repository_refuses_abbreviated_flags():
    # the benchmark, example and helper scripts too: "--seed 3" on a script with only
    # --seeds ran three seeds instead of failing
    import ast
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True,
                            text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    lenient = []
    for name in listed.stdout.split():
        tree = ast.parse((root / name).read_text(encoding="utf-8"), filename=name)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "ArgumentParser"):
                if not any(k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant)
                           and k.value.value is False for k in node.keywords):
                    lenient.append(f"{name}:{node.lineno}")
    assert not lenient, f"parsers accepting abbreviated flags: {lenient}"


def test_a_syntax_error_names_its_file_once(tmp_path):
    # (from a CLI audit) "bad.toml: bad.toml: Expected ']' ..."
    preset = tmp_path / "bad.toml"
    preset.write_text("[train\n", encoding="utf-8")
    with pytest.raises(ValueError) as error:
        parse(AnomalyConfig, ["--config", str(preset)])
    assert str(error.value).count(str(preset)) == 1


def test_a_results_file_reruns_its_run(tmp_path, monkeypatch):
    """`--config OUT/results.json` takes the settings a run recorded: the rerun repeats its
    figures, writes where its own flags say (never over the file it reruns), and names a
    results file written by other code."""
    import json

    from et_graph import config as config_module
    from et_graph.experiments import image_completion

    first = tmp_path / "first"
    image_completion.main(["--quick", "--epochs", "1", "--mask-ratio", "0.25", "--no-progress",
                           "--out", str(first), "--checkpoint-dir", str(tmp_path / "ckpt")])
    stored = json.loads((first / "results.json").read_text(encoding="utf-8"))
    settings = load_file(first / "results.json")
    assert settings["model"]["mask_ratio"] == 0.25 and settings["train"]["epochs"] == 1
    assert not {"out", "checkpoint_dir", "resume"} & set(settings["run"])
    # (a security audit) nor where its data were cached: a crafted file chose that folder
    (tmp_path / "tu.json").write_text(json.dumps({"meta": {"config": {
        "data": {"dataset": "MUTAG", "cache": str(tmp_path / "victim")}}}}), encoding="utf-8")
    assert load_file(tmp_path / "tu.json") == {"data": {"dataset": "MUTAG"}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same code: no warning
        again = parse(image_completion.CONFIG, ["--config", str(first / "results.json")])
    assert again.run.out == image_completion.CONFIG().run.out and again.run.checkpoint_dir is None
    second = tmp_path / "second"
    image_completion.main(["--config", str(first / "results.json"), "--out", str(second)])
    rerun = json.loads((second / "results.json").read_text(encoding="utf-8"))
    assert rerun["per_seed"] and [r["mse"] for r in rerun["per_seed"]] == [
        r["mse"] for r in stored["per_seed"]]
    # the same images, as their digest says (a determinism audit: no digest was recorded)
    assert rerun["meta"]["data_digest"] == stored["meta"]["data_digest"]
    monkeypatch.setattr(config_module, "_COMMIT_AT_IMPORT", "0" * 40)
    with pytest.warns(UserWarning, match="was written at commit"):
        load_file(first / "results.json")
    (tmp_path / "other.json").write_text('{"meta": {}}', encoding="utf-8")
    with pytest.raises(ValueError, match="not a results file"):
        load_file(tmp_path / "other.json")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="not JSON"):
        load_file(tmp_path / "broken.json")


def test_a_rerun_from_results_takes_the_thread_count_and_names_other_versions(tmp_path,
                                                                             monkeypatch):
    """A rerun on another core count, or with other library versions, summed in other orders
    without a word (a determinism audit): the recorded count is taken where the run left it to
    torch, and other versions or another instruction set are named."""
    import json as json_module

    from et_graph import config as config_module

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(config_module, "available_cores", lambda: 8)
    meta = config_module.run_metadata()
    meta["git_commit"] = config_module._COMMIT_AT_IMPORT or config_module.git_commit()
    meta["config"] = {"run": {"threads": None, "out": "x"}}
    meta["machine"]["threads"] = 3
    path = tmp_path / "results.json"
    path.write_text(json_module.dumps({"meta": meta}), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same versions and machine: no warning
        assert load_file(path)["run"] == {"threads": 3}
    # not beyond this machine's cores, nor over the user's OMP_NUM_THREADS (a review: 64
    # threads forced on 2 cores), and said
    meta["machine"]["threads"] = 16
    path.write_text(json_module.dumps({"meta": meta}), encoding="utf-8")
    with pytest.warns(UserWarning, match="ran on 16 threads; this rerun takes this machine's "
                                         "8 cores"):
        assert load_file(path)["run"] == {"threads": 8}
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    meta["machine"]["threads"] = 3
    path.write_text(json_module.dumps({"meta": meta}), encoding="utf-8")
    with pytest.warns(UserWarning, match="ran on 3 threads; this rerun takes OMP_NUM_THREADS=1"):
        assert load_file(path)["run"] == {"threads": None}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the same count: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_file(path)["run"] == {"threads": 3}
    monkeypatch.delenv("OMP_NUM_THREADS")
    meta["config"]["run"]["threads"] = 2  # a count the run chose itself stays
    meta["torch"], meta["machine"]["cpu_capability"] = "1.0.0", "NOPE"
    path.write_text(json_module.dumps({"meta": meta}), encoding="utf-8")
    with pytest.warns(UserWarning, match=r"written with torch 1\.0\.0 \(now .*cpu_capability "
                                         r"NOPE"):
        assert load_file(path)["run"] == {"threads": 2}


def test_results_record_a_digest_of_the_graph_they_read():
    """A data file changed on disk between a run and its rerun showed nowhere in the results
    (a determinism audit)."""
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.experiments import anomaly

    data = planted_anomaly_graph(120, seed=1)
    config = parse(AnomalyConfig, ["--models", "gbt", "--seeds", "1", "--no-progress",
                                   "--max-iter", "5", "--quiet"])
    first = anomaly.run(config, data=data)["meta"]["data_digest"]
    assert anomaly.run(config, data=data.clone())["meta"]["data_digest"] == first
    changed = data.clone()
    changed.x[0, 0] += 1.0
    assert anomaly.run(config, data=changed)["meta"]["data_digest"] != first


def test_every_stored_results_file_loads_as_its_tasks_preset():
    """README: every results.json under docs/measured reruns from itself (--config), so each
    must load under today's configs; a renamed setting would refuse one."""
    import warnings
    from pathlib import Path

    from et_graph.experiments import (
        anomaly,
        gnnbenchmark,
        image_completion,
        tudataset,
        unsupervised_anomaly,
    )

    configs = [module.CONFIG for module in (anomaly, tudataset, gnnbenchmark, image_completion,
                                            unsupervised_anomaly)]
    stored = sorted((Path(__file__).resolve().parents[1] / "docs" / "measured").rglob(
        "results.json"))
    assert len(stored) >= 64
    refused = []
    for path in stored:
        errors = []
        for config in configs:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # written at other commits
                    parse(config, ["--config", str(path)])
                break
            except ValueError as error:
                errors.append(str(error))
        else:
            refused.append((path, errors))
    assert not refused, refused[:2]


def test_files_from_others_cannot_steer_writes_or_expand(tmp_path):
    """(a security audit) a checkpoint part ".." (a data file named "...npz") left
    checkpoint_dir; a results file was written through a link planted at its fixed temporary
    name; a YAML alias chain made a 413-byte preset a 72 MB error message."""
    import os
    from pathlib import Path

    from et_graph.config import RunConfig
    from et_graph.paths import write_text_whole

    run = RunConfig(checkpoint_dir=str(tmp_path / "ck"))
    for part in ("..", ".", "..."):
        folder = Path(run.checkpoint(part, "et", "seed0").checkpoint_dir).resolve()
        assert (tmp_path / "ck").resolve() in folder.parents
    victim = tmp_path / "victim.txt"
    victim.write_text("kept", encoding="utf-8")
    os.symlink(victim, tmp_path / ".results.md.partial")  # the old fixed temporary name
    write_text_whole(tmp_path / "results.md", "table")
    assert victim.read_text(encoding="utf-8") == "kept"
    assert (tmp_path / "results.md").read_text(encoding="utf-8") == "table"
    # no temporary file left beside it (but the planted link)
    assert [p.name for p in tmp_path.glob(".*.partial")] == [".results.md.partial"]
    mask = os.umask(0o022)
    os.umask(mask)
    assert (tmp_path / "results.md").stat().st_mode & 0o777 == 0o666 & ~mask
    preset = tmp_path / "laughs.yaml"
    preset.write_text("meta:\n  a: &a [1, 2]\n  b: [*a, *a]\ntrain:\n  epochs: 3\n",
                      encoding="utf-8")
    with pytest.raises(ValueError, match="aliases"):
        load_file(preset)
    plain = tmp_path / "anchor.yaml"
    plain.write_text("meta:\n  a: &a 1\ntrain:\n  epochs: 3\n", encoding="utf-8")
    assert load_file(plain) == {"train": {"epochs": 3}}  # an anchor alone is harmless


def test_resume_names_a_checkpoint_left_in_the_layout_before_the_dataset_folder(tmp_path):
    """(a compat audit) anomaly, unsupervised and image checkpoints written before session 56
    (DIR/<model>/seed<k>) were silently trained again under --resume."""
    from et_graph.config import RunConfig

    (tmp_path / "et" / "seed0").mkdir(parents=True)
    (tmp_path / "et" / "seed0" / "last.pt").write_bytes(b"old")
    with pytest.warns(UserWarning, match=r"mkdir -p .*tolokers/et/seed0 && mv "
                                          r".*et/seed0/last.pt .*tolokers/et/seed0/\)"):
        RunConfig(checkpoint_dir=str(tmp_path), resume=True).checkpoint("tolokers", "et", "seed0")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # without --resume, or once moved: nothing to say
        RunConfig(checkpoint_dir=str(tmp_path)).checkpoint("tolokers", "et", "seed0")
        (tmp_path / "tolokers" / "et").mkdir(parents=True)
        (tmp_path / "et" / "seed0").rename(tmp_path / "tolokers" / "et" / "seed0")
        RunConfig(checkpoint_dir=str(tmp_path), resume=True).checkpoint("tolokers", "et", "seed0")


def _cgroup(tmp_path, v2=None, v1=None):
    """A fake /proc/self/cgroup and cgroup mount: v2 ``cpu.max`` texts by cgroup path, or v1
    ``(quota, period)`` by path."""
    root = tmp_path / "cgroup"
    tmp_path.mkdir(parents=True, exist_ok=True)
    if v2 is not None:
        (tmp_path / "self").write_text("0::/kube/pod\n", encoding="utf-8")
        for path, text in v2.items():
            (root / path).mkdir(parents=True, exist_ok=True)
            (root / path / "cpu.max").write_text(text, encoding="utf-8")
    else:
        (tmp_path / "self").write_text("4:memory:/x\n2:cpu,cpuacct:/docker/abc\n",
                                       encoding="utf-8")
        for path, (quota, period) in v1.items():
            folder = root / "cpu,cpuacct" / path
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "cpu.cfs_quota_us").write_text(f"{quota}\n", encoding="utf-8")
            (folder / "cpu.cfs_period_us").write_text(f"{period}\n", encoding="utf-8")
    return root, tmp_path / "self"


def test_the_cores_a_container_may_use_follow_its_cgroup_quota(tmp_path, monkeypatch):
    """A container given 2 CPUs of a many-core host saw every core (its affinity says all),
    and torch's default ran that many threads on 2 CPUs."""
    from et_graph import config as config_module

    monkeypatch.setattr(config_module.os, "sched_getaffinity", lambda pid: set(range(64)),
                        raising=False)
    root, proc = _cgroup(tmp_path / "a", v2={"kube/pod": "150000 100000\n",
                                              "kube": "max 100000\n"})
    assert config_module.cgroup_cpu_quota(root, proc) == 1.5
    assert config_module.available_cores(root, proc) == 2  # rounded up
    root, proc = _cgroup(tmp_path / "b", v2={"kube/pod": "max 100000\n",
                                              "kube": "400000 100000\n"})
    assert config_module.available_cores(root, proc) == 4  # a parent's quota binds too
    root, proc = _cgroup(tmp_path / "c", v1={"docker/abc": (200000, 100000)})
    assert config_module.available_cores(root, proc) == 2
    root, proc = _cgroup(tmp_path / "d", v1={"docker/abc": (-1, 100000)})
    assert config_module.cgroup_cpu_quota(root, proc) is None
    assert config_module.available_cores(root, proc) == 64
    assert config_module.cgroup_cpu_quota(tmp_path / "none", tmp_path / "none") is None


def test_the_default_thread_count_stops_at_the_cores_it_may_use(monkeypatch):
    import torch

    from et_graph import config as config_module
    from et_graph.config import RunConfig

    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        torch.set_num_threads(8)
        monkeypatch.setattr(config_module, "available_cores", lambda: 2)
        RunConfig().apply_threads()
        assert torch.get_num_threads() == 2
        RunConfig(threads=3).apply_threads()  # asked for: taken as it is
        assert torch.get_num_threads() == 3
        monkeypatch.setenv("OMP_NUM_THREADS", "6")  # the user's own count: left alone
        torch.set_num_threads(6)
        RunConfig().apply_threads()
        assert torch.get_num_threads() == 6
    finally:
        torch.set_num_threads(before)


def test_no_home_at_all_falls_back_to_a_private_temp_cache(monkeypatch, tmp_path):
    """HOME unset and a user id without a passwd entry (a container's runAsUser): Path.home()
    raised RuntimeError, and every run that needed the cache failed (an SRE audit)."""
    from pathlib import Path

    from et_graph import paths

    monkeypatch.delenv("ET_GRAPH_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = paths.cache_dir()
    assert folder.is_dir() and folder.parent == tmp_path and "et_graph_cache" in folder.name
