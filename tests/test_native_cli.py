"""``et-graph native``: builds the compiled kernels ahead of time, checks them against their
references, and says so by its exit status."""

from __future__ import annotations

import json
import sys

import pytest
import torch

import et_graph.native as native
from et_graph import cli

pytestmark = pytest.mark.usefixtures("native_switch_off")


def test_the_command_builds_checks_and_reports(built, tmp_path, capsys):
    path = tmp_path / "native.json"
    assert cli.main(["native", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert native.extension_name() in out and out.rstrip().endswith("ok")
    report = json.loads(path.read_text())
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
    assert not json.loads((tmp_path / "n.json").read_text())["ok"]


def test_a_failed_build_is_reported(monkeypatch, tmp_path, capsys):
    def cannot_build():
        raise RuntimeError("the native kernels could not be built (no compiler)")

    monkeypatch.setattr(native, "load_native_attention", cannot_build)
    assert cli.main(["native", "--json", str(tmp_path / "n.json")]) == 1
    assert "no compiler" in capsys.readouterr().err
    report = json.loads((tmp_path / "n.json").read_text())
    assert not report["ok"] and "no compiler" in report["error"]


def test_the_command_is_listed(capsys):
    assert cli.main(["--help"]) == 0
    assert "native" in capsys.readouterr().out
