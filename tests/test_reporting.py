"""Results as files: strict JSON, honest mean ± std strings, the std named in every table."""
import json
import math

import numpy as np
import torch

from et_graph.reporting import format_stat, json_text, summarize, write_results


def _strict_load(text):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_results_are_strict_json_with_null_for_non_finite_values(tmp_path):
    """From an audit: json.dumps wrote NaN (a mean over no values is NaN), which JSON parsers
    other than Python's refuse."""
    results = {"dataset": "d", "models": {"a": {"auroc": summarize([])},
                                          "b": {"auroc": summarize([0.5, float("inf")])}},
               "scalars": [np.float32(1.5), torch.tensor(2.0), np.int64(3), (1, float("nan"))]}
    json_path, md_path = write_results(tmp_path, results, ["auroc"])
    loaded = _strict_load(json_path.read_text(encoding="utf-8"))
    assert loaded["models"]["a"]["auroc"] == {"mean": None, "std": None, "values": []}
    assert loaded["models"]["b"]["auroc"]["values"] == [0.5, None]
    assert loaded["scalars"] == [1.5, 2.0, 3, [1, None]]
    assert _strict_load(json_text({"x": float("-inf")}, indent=None)) == {"x": None}
    assert "population standard deviation" in md_path.read_text(
        encoding="utf-8")  # which std, said once
    _, md_path = write_results(tmp_path / "b", results, ["auroc"],
                               notes=["accuracy: mean ± std (population) over the folds"])
    assert md_path.read_text(encoding="utf-8").count("population") == 1


def test_format_stat_hides_neither_a_failed_run_nor_a_tiny_spread():
    """From an audit: one NaN seed among good ones printed a bare 'n/a', an inf 'inf ± nan',
    and a spread of 2e-5 '± 0.0000', the measured zero spread the function avoids for n = 1."""
    assert format_stat(summarize([0.5, float("nan")])) == "n/a (1 of 2 runs not finite)"
    assert format_stat(summarize([float("inf"), 1.0])) == "n/a (1 of 2 runs not finite)"
    assert format_stat(summarize([0.64449, 0.64451])) == "0.6445 ± <0.0001"
    assert format_stat(summarize([0.5, 0.5])) == "0.5000 ± 0.0000"  # a real zero spread
    assert format_stat(summarize([0.5])) == "0.5000 (n = 1)"
    assert format_stat(summarize([])) == "n/a" and format_stat(None) == "n/a"
    assert math.isnan(summarize([]).get("mean"))


def test_a_failed_run_removes_the_output_folders_it_made_empty_and_keeps_others(tmp_path):
    import pytest

    from et_graph.reporting import output_folder

    with pytest.raises(ValueError, match="bad data"):
        with output_folder(tmp_path / "runs" / "new"):
            raise ValueError("bad data")
    assert not (tmp_path / "runs").exists()  # both folders it made, and nothing else
    (tmp_path / "kept").mkdir()
    with pytest.raises(ValueError):
        with output_folder(tmp_path / "kept" / "run"):
            (tmp_path / "kept" / "run" / "partial.json").write_text("{}", encoding="utf-8")
            raise ValueError("late failure")
    assert (tmp_path / "kept" / "run" / "partial.json").is_file()  # a folder holding files stays
    with output_folder(tmp_path / "ok"):
        pass
    assert (tmp_path / "ok").is_dir()


def test_two_runs_cannot_write_into_one_output_folder_at_once(tmp_path):
    # (from an audit) two runs into one --out removed each other's partial fold files and the
    # first to finish kept a mix of both, with no message
    import subprocess
    import sys

    import pytest

    from et_graph.reporting import output_folder

    with output_folder(tmp_path / "out"):
        with pytest.raises(ValueError, match="another et-graph run is writing to"):
            with output_folder(tmp_path / "out"):
                pass
        other = subprocess.run(  # another process, as a second job would be
            [sys.executable, "-c", "from et_graph.reporting import output_folder\n"
             f"with output_folder({str(tmp_path / 'out')!r}): pass"],
            capture_output=True, text=True, timeout=120)
        assert other.returncode != 0 and "another et-graph run" in other.stderr
    # the lock goes with the run; its status stays, the refused runs' never written
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["run_status.json"]
    assert '"finished"' in (tmp_path / "out" / "run_status.json").read_text(encoding="utf-8")
    with output_folder(tmp_path / "out"):  # free again
        pass


def test_an_output_folder_that_cannot_be_written_is_named_before_the_run(tmp_path,
                                                                         monkeypatch):
    # (from an audit) a read-only --out was found after the whole training, at results.json,
    # as a traceback (root ignores chmod, so the refusal of the lock file is simulated)
    import contextlib

    import pytest

    from et_graph.datasets import locking
    from et_graph.reporting import OUTPUT_LOCK, output_folder

    @contextlib.contextmanager
    def read_only(folder, name):
        raise OSError(30, "Read-only file system", str(folder / f".{name}.lock"))
        yield

    monkeypatch.setattr(locking, "exclusive_folder", read_only)
    ran = []
    with pytest.raises(ValueError, match=r"cannot be written \(Read-only file system\)"):
        with output_folder(tmp_path / "ro"):
            ran.append(True)
    assert not ran and OUTPUT_LOCK


def test_compare_refuses_scores_of_another_run_and_names_a_cut_file(tmp_path):
    # (from an audit) a rerun killed between its results.json and its scores.npz left the new
    # table beside the old scores, and compare paired them without a word
    import pytest

    from et_graph.compare_cli import join, read_scores
    from et_graph.reporting import write_scores

    def run(folder, run_id, scores_id):
        write_results(folder, {"dataset": "d", "models": {"a": {"auroc": summarize([0.5])}},
                               "meta": {"run_id": run_id}}, ["auroc"])
        write_scores(folder / "scores.npz", {"a": [np.zeros(3)]}, [0], [np.arange(3)],
                     [np.array([0, 1, 0])], scores_id)
        return folder / "results.json"

    def picks(path):  # as compare joins the file: its kept models and its run id
        return join([str(path)])[2]

    assert read_scores(picks(run(tmp_path / "same", "r1", "r1"))) is not None
    with pytest.raises(ValueError, match="belongs to another run"):
        read_scores(picks(run(tmp_path / "mixed", "r2", "r1")))
    assert read_scores(picks(run(tmp_path / "old", "r3", None))) is not None
    cut = tmp_path / "same" / "scores.npz"
    cut.write_bytes(cut.read_bytes()[:40])
    with pytest.raises(ValueError, match="cannot be read .* cut short"):
        read_scores(picks(tmp_path / "same" / "results.json"))


def test_a_run_says_where_it_wrote(tmp_path, capsys, monkeypatch):
    from types import SimpleNamespace

    from et_graph.reporting import checks_output_folder

    @checks_output_folder()
    def run(config):
        (tmp_path / "out" / "results.json").write_text("{}", encoding="utf-8")

    run(SimpleNamespace(run=SimpleNamespace(out=str(tmp_path / "out"), checkpoint_dir=None)))
    assert capsys.readouterr().out.strip().endswith(f"Written to {(tmp_path / 'out').resolve()}")
    monkeypatch.chdir(tmp_path)  # a relative --out is said absolute (an SRE audit: a
    run(SimpleNamespace(run=SimpleNamespace(out="out", checkpoint_dir=None)))  # log's folder)
    assert capsys.readouterr().out.strip().endswith(f"Written to {(tmp_path / 'out').resolve()}")


def test_a_runner_gives_back_the_callers_threads_switches_and_random_streams(tmp_path):
    # (from an audit of library embedding) tudataset.run(TUDatasetConfig()) pinned the caller's
    # process to one thread, a run with native_attention left the kernels on, and every
    # runner reseeded the caller's random streams
    import random
    from types import SimpleNamespace

    from et_graph import native
    from et_graph.reporting import checks_output_folder

    @checks_output_folder()
    def run(config):
        torch.set_num_threads(1)
        native._state["random"] = not native._state["random"]
        torch.manual_seed(0)
        np.random.seed(0)
        random.seed(0)
        raise RuntimeError("and failed")

    from et_graph.training import seed_everything

    threads, switch = torch.get_num_threads(), native._state["random"]
    torch.set_num_threads(2)
    seed_everything(7)
    expected = (torch.rand(2), np.random.rand(), random.random())
    seed_everything(7)
    try:
        import pytest

        with pytest.raises(RuntimeError, match="and failed"):
            run(SimpleNamespace(run=SimpleNamespace(out=None, checkpoint_dir=None)))
        assert torch.get_num_threads() == 2 and native._state["random"] == switch
        drawn = (torch.rand(2), np.random.rand(), random.random())
        assert torch.equal(drawn[0], expected[0]) and drawn[1:] == expected[1:]
    finally:
        torch.set_num_threads(threads)


def test_plots_leave_the_callers_matplotlib_backend(tmp_path):
    # (from an audit of library embedding) matplotlib.use("Agg") in every plot turned a
    # notebook's inline backend off for good
    import subprocess
    import sys

    code = (
        "import matplotlib\n"
        "matplotlib.use('svg')\n"
        "import numpy as np\n"
        "from et_graph.plots.anomaly import plot_roc_pr\n"
        f"plot_roc_pr({str(tmp_path / 'roc.png')!r}, np.array([0, 1, 0, 1]),\n"
        "            {'a': np.array([0.1, 0.9, 0.2, 0.7])}, 'title')\n"
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "roc.png").read_bytes()[:4] == b"\x89PNG"


def test_the_output_lock_survives_its_removal_race_and_lockless_filesystems(tmp_path,
                                                                           monkeypatch):
    # (from a review of this change) a run that opened the lock file just before the holder
    # removed it could lock the removed file while a third run locked a new one; and a
    # filesystem without locks refused every run as "busy"
    import errno
    import warnings

    import pytest

    from et_graph.datasets import locking

    real = locking._acquire
    held = []

    def raced(handle, blocking=True):
        if not held:  # meanwhile the holder removed the file and another run locked a new one
            path = tmp_path / ".run.lock"
            path.unlink()
            other = open(path, "a+b")
            real(other, blocking=False)
            held.append(other)
        real(handle, blocking)

    monkeypatch.setattr(locking, "_acquire", raced)
    (tmp_path / ".run.lock").write_bytes(b"")
    with pytest.raises(locking.FolderBusy):
        with locking.exclusive_folder(tmp_path, "run"):
            pass
    held[0].close()

    def lockless(handle, blocking=True):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(locking, "_acquire", lockless)
    ran = []
    with pytest.warns(RuntimeWarning, match="cannot be locked"):
        with locking.exclusive_folder(tmp_path, "run"):
            ran.append(True)
    assert ran
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monkeypatch.setattr(locking, "_acquire", real)
        with locking.exclusive_folder(tmp_path, "run"):
            pass


def test_a_blocked_windows_lock_is_waited_for(monkeypatch):
    """msvcrt's blocking lock gave up after ten one-second tries: a second job died while the
    first processed a dataset. The non-blocking lock is tried again until it is free."""
    import errno

    import pytest

    from et_graph.datasets import locking

    monkeypatch.setattr(locking, "RETRY_S", 0.0)
    tries = []

    def held_three_times():
        tries.append(1)
        if len(tries) <= 3:
            raise OSError(errno.EACCES, "held")

    locking._wait_for_lock(held_three_times, blocking=True)
    assert len(tries) == 4
    tries.clear()
    with pytest.raises(OSError):  # exclusive_folder names a held lock at once
        locking._wait_for_lock(held_three_times, blocking=False)

    def broken():
        raise OSError(errno.EBADF, "bad file descriptor")

    with pytest.raises(OSError):  # not a held lock: no endless wait
        locking._wait_for_lock(broken, blocking=True)


def test_results_md_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A write that failed half-way (a full disk; on Windows, a character its code page
    lacked) left results.md cut or empty beside a whole results.json."""
    import pathlib

    import pytest

    results = {"dataset": "toy", "models": {"et": {"auroc": summarize([0.9, 0.8])}}}
    _, md_path = write_results(tmp_path, results, ["auroc"])
    before = md_path.read_text(encoding="utf-8")
    original = pathlib.Path.write_text

    def full_disk(self, text, *args, **kwargs):  # full once results.json is written
        if not self.name.endswith((".md", ".md.partial")):
            return original(self, text, *args, **kwargs)
        original(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    with pytest.raises(OSError):
        write_results(tmp_path, {**results, "dataset": "other"}, ["auroc"])
    monkeypatch.undo()
    assert md_path.read_text(encoding="utf-8") == before


def test_summaries_use_the_population_std_and_round_small_spreads_normally():
    # (a mutation audit: the sample std was caught only by a benchmark's smoke test, and a
    # cut-off of 1e-4 instead of 0.5e-4 for "< 0.0001" passed)
    stats = summarize([0.5, 0.51])
    assert stats["mean"] == 0.505 and math.isclose(stats["std"], 0.005)
    assert format_stat({"mean": 0.5, "std": 0.00007, "values": [0.5, 0.5]}) == "0.5000 ± 0.0001"
    assert format_stat({"mean": 0.5, "std": 0.00004, "values": [0.5, 0.5]}) == (
        "0.5000 ± <0.0001")


def test_the_output_folder_says_whether_its_run_is_running_finished_or_failed(tmp_path):
    """A program polling a folder saw results.json before the run had written its scores and
    plots, and a crashed run's folder looked finished (an output audit)."""
    import pytest

    from et_graph.reporting import RUN_STATUS, output_folder

    def status(folder):
        return _strict_load((folder / RUN_STATUS).read_text(encoding="utf-8"))

    out = tmp_path / "run"
    with output_folder(out):
        during = status(out)
        (out / "results.json").write_text("{}", encoding="utf-8")
    assert during["status"] == "running" and "ended_at" not in during
    after = status(out)
    assert after["status"] == "finished" and after["started_at"] == during["started_at"]
    assert after["ended_at"] >= after["started_at"]
    with pytest.raises(ValueError):
        with output_folder(out):
            (out / "results.json").write_text("{}", encoding="utf-8")
            raise ValueError("bad data")
    assert status(out)["status"] == "failed" and status(out)["error"] == "ValueError"
    with pytest.raises(KeyboardInterrupt):
        with output_folder(out):
            (out / "results.json").write_text("{}", encoding="utf-8")
            raise KeyboardInterrupt
    assert status(out)["status"] == "interrupted"
    with pytest.raises(ValueError):  # a folder it made, left empty, still goes whole
        with output_folder(tmp_path / "fresh"):
            raise ValueError("bad flag")
    assert not (tmp_path / "fresh").exists()
    with pytest.raises(ValueError):  # one it made and wrote into stays, and says it failed
        with output_folder(tmp_path / "partial"):
            (tmp_path / "partial" / "a.png").write_bytes(b"")
            raise ValueError("late")
    assert status(tmp_path / "partial")["status"] == "failed"


def test_the_run_status_survives_warnings_made_errors_and_runs_that_wrote_nothing(tmp_path):
    """A review: the start and closing warnings, turned into errors by a filter, left
    "running" for good. A rerun that fails before writing anything says so and keeps the
    earlier run's record (a review; an SRE audit then found that restoring the earlier
    "finished" hid the stop from a requeue)."""
    import warnings

    import pytest

    from et_graph.exceptions import OutputWarning
    from et_graph.reporting import RUN_STATUS, output_folder

    out = tmp_path / "run"
    with output_folder(out):
        (out / "results.json").write_text("{}", encoding="utf-8")
    finished = (out / RUN_STATUS).read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="missing data"):  # fails before writing anything
        with output_folder(out):
            raise ValueError("missing data")
    stopped = _strict_load((out / RUN_STATUS).read_text(encoding="utf-8"))
    assert stopped["status"] == "failed" and stopped["wrote_nothing"] is True
    assert stopped["previous"] == _strict_load(finished)  # the files' own run
    with warnings.catch_warnings():
        warnings.simplefilter("error", OutputWarning)
        with pytest.raises(OutputWarning, match="holds an earlier run's results"):
            with output_folder(out):
                pass
        assert _strict_load((out / RUN_STATUS).read_text(encoding="utf-8"))["status"] == \
            "failed"  # (stopped by the warning made an error, before writing anything)
    (out / "old.png").write_bytes(b"")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutputWarning)  # (the start warning)
        warnings.filterwarnings("error", message=".*were not rewritten", category=OutputWarning)
        with pytest.raises(OutputWarning, match="were not rewritten"):
            with output_folder(out):
                (out / "results.json").write_text("{}", encoding="utf-8")
    assert '"finished"' in (out / RUN_STATUS).read_text(encoding="utf-8")


def test_a_tuning_into_its_own_earlier_folder_is_named_too(tmp_path):
    """The earlier-results warning looked for results.json alone: a tune into its own earlier
    --out said nothing (a docs check)."""
    import pytest

    from et_graph.exceptions import OutputWarning
    from et_graph.reporting import output_folder

    (tmp_path / "study_report.json").write_text("{}", encoding="utf-8")
    with pytest.warns(OutputWarning, match=r"study_report\.json, written"):
        with output_folder(tmp_path):
            (tmp_path / "study_report.json").write_text("{}", encoding="utf-8")


def test_attempts_that_write_nothing_keep_one_earlier_record(tmp_path):
    """A review: each attempt nested the record before it, so a requeue loop grew the file
    without bound."""
    import pytest

    from et_graph.reporting import RUN_STATUS, output_folder

    out = tmp_path / "run"
    with output_folder(out):
        (out / "results.json").write_text("{}", encoding="utf-8")
    finished = _strict_load((out / RUN_STATUS).read_text(encoding="utf-8"))
    for _ in range(3):
        with pytest.raises(ValueError):
            with output_folder(out):
                raise ValueError("again")
    status = _strict_load((out / RUN_STATUS).read_text(encoding="utf-8"))
    assert status["previous"] == finished  # the files' own run, not a chain of attempts
