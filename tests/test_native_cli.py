"""``et-graph native``: builds the compiled kernels ahead of time, checks them against their
references, and says so by its exit status."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import et_graph.native as native
from et_graph import cli
from et_graph.exceptions import ConfigWarning

pytestmark = pytest.mark.usefixtures("native_switch_off")


def test_the_command_builds_checks_and_reports(built, tmp_path, capsys):
    path = tmp_path / "native.json"
    assert cli.main(["native", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert native.extension_name() in out and out.rstrip().endswith("ok")
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report["ok"] and report["name"] == native.extension_name()
    assert report["file"] == built.__file__
    assert all(value < 1e-10 for key, value in report["errors"].items()
               if not key.startswith("normals"))
    if sys.platform.startswith("linux"):
        assert report["threads_used"] == torch.get_num_threads()
    assert not native.native_attention_enabled()  # the check leaves the switch as it was


def test_a_kernel_that_disagrees_fails_the_command(built, monkeypatch, tmp_path, capsys):
    """A Gram-entry kernel off by a thousandth must fail the check (exit status 1)."""
    exact = native.gram_entries
    monkeypatch.setattr(native, "gram_entries", lambda *args: exact(*args) * 1.001)
    assert cli.main(["native", "--json", str(tmp_path / "n.json")]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert not json.loads((tmp_path / "n.json").read_text(encoding="utf-8"))["ok"]


def test_a_failed_build_is_reported(monkeypatch, tmp_path, capsys):
    def cannot_build():
        raise RuntimeError("the native kernels could not be built (no compiler)")

    monkeypatch.setattr(native, "load_native_attention", cannot_build)
    assert cli.main(["native", "--json", str(tmp_path / "n.json")]) == 1
    assert "no compiler" in capsys.readouterr().err
    report = json.loads((tmp_path / "n.json").read_text(encoding="utf-8"))
    assert not report["ok"] and "no compiler" in report["error"]


def test_the_command_is_listed(capsys):
    assert cli.main(["--help"]) == 0
    assert "native" in capsys.readouterr().out


def test_a_failed_build_under_a_task_is_one_line_and_a_left_lock_is_named(monkeypatch, tmp_path,
                                                                          capsys):
    """From an examples audit: a build that failed under `et-graph anomaly --native-attention`
    ended in three chained tracebacks; a build killed mid-way left torch's lock file, and every
    later run waited on it for ever without a word."""
    import types

    def cannot_build(**kwargs):
        raise OSError("no compiler here")

    monkeypatch.setattr(native, "_state", {**native._state, "module": None})
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = tmp_path / native.extension_name() / "lock"
    lock.parent.mkdir()
    lock.write_text("", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "torch.utils.cpp_extension",
                        types.SimpleNamespace(load=cannot_build,
                                              get_default_build_root=lambda: str(tmp_path)))
    with pytest.raises(native.NativeBuildError, match="no compiler here"):
        native.load_native_attention()
    assert f"{lock} exists: another process is building" in capsys.readouterr().err
    def failed_build(on):
        raise native.NativeBuildError("the native kernels could not be built (no compiler)")

    monkeypatch.setattr(native, "set_native_attention", failed_build)
    assert cli.console_main(["image", "--quick", "--native-attention", "--out",
                             str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "et-graph image: error: " in err and "Traceback" not in err


def test_a_lock_left_beside_built_kernels_is_named_and_an_old_one_refused(monkeypatch, tmp_path,
                                                                           capsys):
    """From a CLI audit: with the kernels built, a killed build's lock made `et-graph native`
    and every --native-attention run wait for ever without a word (torch takes the lock on
    every load; the hint was printed only before a first build)."""
    import os
    import types

    loads = []
    monkeypatch.setattr(native, "_state", {**native._state, "module": None})
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build = tmp_path / native.extension_name()
    build.mkdir()
    (build / f"{native.extension_name()}.so").write_text("", encoding="utf-8")  # built
    lock = build / "lock"
    lock.write_text("", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "torch.utils.cpp_extension",
                        types.SimpleNamespace(load=lambda **kwargs: loads.append(1) or "module",
                                              get_default_build_root=lambda: str(tmp_path)))
    assert native.load_native_attention() == "module"  # a fresh lock: said, and waited for
    assert f"{lock} exists: another process is building" in capsys.readouterr().err
    monkeypatch.setattr(native, "_state", {**native._state, "module": None})
    old = lock.stat().st_mtime - native.STALE_LOCK_S - 60
    os.utime(lock, (old, old))
    with pytest.raises(native.NativeBuildError, match="minutes old: a build that was killed"):
        native.load_native_attention()
    assert loads == [1]  # torch's loader is not entered on a stale lock


def test_only_the_lock_torch_waits_on_is_read(monkeypatch, tmp_path):
    """From a review: another interpreter's (or device's) stale lock was refused as ours,
    though torch waits only on its own build folder's."""
    from torch.utils import cpp_extension

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setattr(cpp_extension, "get_default_build_root", lambda: str(tmp_path))
    name = native.extension_name()
    other = tmp_path / "py39_cu118" / name / "lock"
    other.parent.mkdir(parents=True)
    other.write_text("", encoding="utf-8")
    own = Path(cpp_extension._get_build_directory(name, False)) / "lock"
    assert own.parent.parent != other.parent.parent
    assert native.build_locks(name) == []
    own.write_text("", encoding="utf-8")
    assert native.build_locks(name) == [own]


def test_an_unreadable_environment_switch_does_not_break_the_import(tmp_path):
    """From an examples audit: ET_GRAPH_NATIVE_ATTENTION=maybe raised at import, so every
    command (--version too) ended in a traceback; a task refuses it in one line."""
    import os
    import subprocess

    env = {**os.environ, "ET_GRAPH_NATIVE_ATTENTION": "maybe"}
    version = subprocess.run([sys.executable, "-m", "et_graph", "--version"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and "et-graph" in version.stdout, version.stderr
    task = subprocess.run([sys.executable, "-m", "et_graph", "anomaly", "--quick", "--models",
                           "gbt", "--out", str(tmp_path / "a")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert task.returncode == 2 and "must be 1/0" in task.stderr and "Traceback" not in (
        task.stderr)


def test_the_environment_beside_no_native_attention_and_unused_kernels_are_named(monkeypatch):
    """From an examples audit: --no-native-attention lost to ET_GRAPH_NATIVE_ATTENTION=1
    without a word; --native-attention on the dense image ET (which calls no kernel) or on a
    trees-only anomaly run was accepted silently."""
    from et_graph.config import parse
    from et_graph.experiments import anomaly, image_completion

    monkeypatch.setenv("ET_GRAPH_NATIVE_ATTENTION", "1")
    with pytest.warns(ConfigWarning, match="whatever --no-native-attention says"):
        parse(anomaly.CONFIG, ["--no-native-attention"])
    monkeypatch.delenv("ET_GRAPH_NATIVE_ATTENTION")
    for module, argv in ((image_completion, ["--native-attention"]),
                         (anomaly, ["--models", "gbt", "--native-attention"])):
        monkeypatch.setattr(module, "run", lambda config: config)
        with pytest.warns(ConfigWarning, match=r"run\.native_attention: no model"):
            module.main(argv)
