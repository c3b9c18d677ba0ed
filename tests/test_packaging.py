"""The source distribution holds what the repository's tests, examples and docs read.

MANIFEST.in said that ``pytest`` runs from an unpacked sdist, but the sdist lacked
``docs/measured``, ``docs/hooks`` and ``mkdocs.yml``, so eight tests failed there (a packaging
audit). The sdist is built from a copy of the tracked files and must hold every one of them
but CI's own script and the git metadata."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Tracked files that a source distribution need not carry.
NOT_SHIPPED = {".ci/run", ".gitignore"}


def _tracked_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist has no file list to compare)")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode("utf-8")
    # (a file deleted in the working tree but not yet in git's index is not there to ship)
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


def _copy(tracked: list[str], source: Path) -> Path:
    for name in tracked:
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return source


def test_the_sdist_holds_every_tracked_file(tmp_path):
    tracked = _tracked_files()
    source = _copy(tracked, tmp_path / "src")
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir",
                    str(tmp_path / "dist")], cwd=source, check=True, capture_output=True)
    (archive,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(archive) as sdist:
        shipped = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    missing = sorted(set(tracked) - shipped - NOT_SHIPPED)
    assert not missing, f"{len(missing)} tracked files not in the sdist, e.g. {missing[:5]}"


def test_the_wheel_holds_every_file_of_the_package(tmp_path):
    """The compiled kernels are built at first use from et_graph/csrc, and py.typed marks the
    API as typed: a wheel without them installs and fails later."""
    tracked = _tracked_files()
    source = _copy(tracked, tmp_path / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path / "wheel"), str(source)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    package = {name for name in tracked if name.startswith("et_graph/")}
    assert {"et_graph/py.typed", "et_graph/csrc/bindings.cpp"} <= package
    assert not sorted(package - shipped), sorted(package - shipped)[:5]
