"""The installed ``et-graph`` command: version, unknown commands and one-line bad-input errors."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from et_graph import __version__
from et_graph.cli import TRACEBACK_ENV, console_main, main
from et_graph.exceptions import ConfigWarning


def test_version(capsys):
    assert console_main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"et-graph {__version__}"


def test_unknown_command_is_named(capsys):
    assert console_main(["tudatset"]) == 2
    captured = capsys.readouterr()
    assert "unknown command 'tudatset'" in captured.err
    # the list of commands follows, on standard error as an error's usage (it went to
    # standard output: a CLI audit)
    assert "tudataset" in captured.err and captured.out == ""
    assert console_main([]) == 2 and "commands:" in capsys.readouterr().err
    assert console_main(["--help"]) == 0 and "commands:" in capsys.readouterr().out


def test_bad_input_is_one_line_without_traceback(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    argv = ["tudataset", "--dataset", "NOPE", "--root", str(tmp_path)]
    assert console_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("et-graph tudataset: error: no TU raw files at")
    assert "Traceback" not in err and TRACEBACK_ENV in err
    # Library callers (and ET_GRAPH_TRACEBACK=1) get the exception itself.
    with pytest.raises(ValueError, match="no TU raw files"):
        main(argv)
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    with pytest.raises(ValueError, match="no TU raw files"):
        console_main(argv)


def test_a_path_of_the_wrong_kind_is_one_line(capsys, monkeypatch, tmp_path):
    """A folder where a file belongs (and a file where a folder belongs) is bad input like a
    missing file: one line, exit status 2, no traceback."""
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x", encoding="utf-8")
    for argv, message in [
        (["anomaly", "--config", str(tmp_path)], "is a folder, not a file"),
        (["tudataset", "--quick", "--cache", str(a_file)], "Not a directory"),
    ]:
        assert console_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


def test_ctrl_c_is_one_line_and_status_130(capsys, monkeypatch):
    """An interrupted command printed a full KeyboardInterrupt traceback (an audit)."""
    import et_graph.cli as cli

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    monkeypatch.setattr(cli, "main", interrupted)
    assert console_main(["anomaly", "--quick"]) == 130
    assert capsys.readouterr().err.strip() == "et-graph anomaly: interrupted"
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    with pytest.raises(KeyboardInterrupt):
        console_main(["anomaly", "--quick"])


@pytest.mark.parametrize("device, message", [
    ("gpu", "device must be auto, cpu, cuda"),
    ("cuda:99", "cuda:99"),
    ("xpu", "xpu is not available here"),  # (a raw AssertionError traceback)
    ("meta", "holds no values"),
])
def test_a_device_the_machine_lacks_is_one_line(capsys, monkeypatch, device, message):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    assert console_main(["anomaly", "--dataset", "reddit", "--quick", "--device", device]) == 2
    err = capsys.readouterr().err
    assert err.startswith("et-graph anomaly: error:") and message in err
    assert "Traceback" not in err


def test_device_auto_takes_the_gpu_where_there_is_one_and_records_what_it_took(monkeypatch):
    import torch

    from et_graph.config import RunConfig, resolve_device
    from et_graph.detectors import ETDetector

    assert resolve_device("cpu") == "cpu" and resolve_device("cuda:1") == "cuda:1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    # Resolved at construction: the config (and so results.json) names the device, not "auto".
    assert RunConfig(device="auto").device == "cpu"
    assert ETDetector(device="auto").device == torch.device("cpu")


def test_out_naming_a_file_is_refused_before_training(tmp_path, capsys, monkeypatch):
    """--out pointing at a file trained the whole run, then ended in a raw FileExistsError."""
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    existing = tmp_path / "afile"
    existing.write_text("hi", encoding="utf-8")
    assert console_main(["anomaly", "--dataset", "reddit", "--quick", "--out",
                         str(existing)]) == 2
    assert f"out {str(existing)!r} is a file, not a folder" in capsys.readouterr().err


@pytest.mark.parametrize("argv, row", [
    (["tudataset", "--quick", "--models", "structure_agnostic"], "| structure_agnostic |"),
    (["image", "--quick", "--seeds", "1", "--epochs", "1"], "| mean_patch |"),
])
def test_the_table_is_printed_without_out_and_without_progress(capsys, argv, row):
    assert console_main([*argv, "--no-progress", "--out", "none", "--threads", "1"]) == 0
    assert row in capsys.readouterr().out


def test_python_dash_m_runs_the_command():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "et_graph", "--version"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"et-graph {__version__}"


def test_version_and_the_command_list_answer_without_importing_torch():
    # `et-graph --version` took about 3 s: importing the CLI imported torch and PyG
    import subprocess
    import sys

    code = ("import sys\n"
            "from et_graph.cli import console_main\n"
            "assert console_main(['--version']) == 0\n"
            "assert console_main(['--help']) == 0\n"
            "heavy = sorted(name for name in ('torch', 'torch_geometric', 'numpy') "
            "if name in sys.modules)\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"et-graph {__version__}\n")


def test_help_lists_version_and_the_commands(capsys):
    assert console_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "et-graph --version" in out and "tudataset" in out


def test_tune_help_writes_placeholders_as_the_task_flags_do(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "anomaly", "--help"])
    out = capsys.readouterr().out
    assert "--trials INT" in out and "--timeout-minutes FLOAT" in out
    assert "--epochs INT" in out  # a task flag, written the same way
    assert "TRIALS" not in out and "TIMEOUT_MINUTES" not in out


def test_script_defaults_replace_the_dataclass_defaults_below_presets_and_flags(tmp_path):
    from et_graph.config import parse
    from et_graph.protocols.anomaly_config import AnomalyConfig

    own = {"data.dataset": "yelpchi"}
    assert parse(AnomalyConfig, [], defaults=own).data.dataset == "yelpchi"
    assert parse(AnomalyConfig, []).data.dataset == "tolokers"
    assert parse(AnomalyConfig, ["--dataset", "reddit"], defaults=own).data.dataset == "reddit"
    preset = tmp_path / "p.toml"
    preset.write_text('[data]\ndataset = "amazon"\n', encoding="utf-8")
    assert parse(AnomalyConfig, ["--config", str(preset)], defaults=own).data.dataset == "amazon"
    with pytest.raises(ValueError, match="nope"):
        parse(AnomalyConfig, [], defaults={"data.nope": 1})


def test_presets_given_twice_apply_in_order(tmp_path):
    """``--config a --config b`` kept only b, silently dropping a's settings."""
    from et_graph.config import parse
    from et_graph.protocols.anomaly_config import AnomalyConfig

    data = tmp_path / "data.toml"
    data.write_text('[data]\ndataset = "reddit"\n[train]\nepochs = 7\n', encoding="utf-8")
    model = tmp_path / "model.toml"
    model.write_text('[train]\nepochs = 9\n[et]\nhidden = 16\n', encoding="utf-8")
    config = parse(AnomalyConfig, ["--config", str(data), "--config", str(model)])
    assert (config.data.dataset, config.train.epochs, config.et.hidden) == ("reddit", 9, 16)
    reverse = parse(AnomalyConfig, ["--config", str(model), "--config", str(data)])
    assert (reverse.train.epochs, reverse.et.hidden) == (7, 16)
    flags = parse(AnomalyConfig, ["--config", str(data), "--config", str(model), "--epochs", "3"])
    assert flags.train.epochs == 3
    bad = tmp_path / "bad.toml"
    bad.write_text('[train]\nnope = 1\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.toml: unknown key"):  # which file is wrong
        parse(AnomalyConfig, ["--config", str(data), "--config", str(bad)])


def test_flag_help_shows_plain_text_not_sphinx_markup():
    """From a benchmark audit: --rw-pe-dim's help read ':class:`~et_graph.transforms.
    RandomWalkPE`'."""
    from et_graph.config import field_docs, plain_text
    from et_graph.datasets.gnnbenchmark import GNNBenchmarkDataConfig

    assert plain_text("see :class:`~et_graph.transforms.RandomWalkPE` and ``x``") == (
        "see RandomWalkPE and x")
    assert plain_text(":func:`load_zinc`") == "load_zinc"
    helps = field_docs(GNNBenchmarkDataConfig)
    assert "RandomWalkPE" in helps["rw_pe_dim"]
    assert not any(":class:" in text or "``" in text for text in helps.values())


@pytest.mark.parametrize("command", ["anomaly", "unsupervised"])
def test_a_commands_description_shows_plain_text_too(command, capsys):
    """(a CLI audit) the anomaly and unsupervised --help showed their module docstrings'
    ``:mod:`` and ``:func:`` roles and double backquotes."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = capsys.readouterr().out
    assert "usage:" in shown and not re.search(r":(mod|func|class):|``", shown)


@pytest.mark.parametrize("command, argv, pattern", [
    ("unsupervised", ["--models", "lof", "--epochs", "3"], r"train\.epochs: no model"),
    ("anomaly", ["--models", "gbt", "--label-trick"], r"et\.label_trick: no model"),
    ("tudataset", ["--models", "gin", "--blocks", "3"], r"et\.blocks: no model"),
    ("gnnbenchmark", ["--models", "gin", "--blocks", "3"], r"et\.blocks: no model"),
    ("image", ["--lr-patience", "3"], r"train\.lr_patience \(read by lr_schedule='plateau'"),
    # (a CLI audit) flags read only beside another setting, or by one baseline
    ("anomaly", ["--protocol", "gadbench", "--split-seed", "5"],
     r"protocol\.split_seed \(read by protocol='paper', this run's is 'gadbench'\)"),
    ("anomaly", ["--ple-bins", "4"], r"data\.ple_bins \(read by feature_norm='ple'"),
    ("anomaly", ["--label-trick-share", "0.75"], r"et\.label_trick_share \(read by label_trick"),
    ("anomaly", ["--models", "mlp", "--gat-heads", "2"], r"baselines\.gat_heads: no model"),
])
def test_the_command_checks_its_flags_as_the_examples_do(command, argv, pattern, monkeypatch):
    """From an audit: `et-graph` parsed and ran the task itself, so the checks of the given
    flags (those no chosen model reads, a schedule's flag beside another schedule) ran for the
    example scripts only."""
    import importlib

    from et_graph.cli import SUBCOMMANDS

    module = importlib.import_module(SUBCOMMANDS[command][0])
    monkeypatch.setattr(module, "run", lambda config: config)
    with pytest.warns(ConfigWarning, match=pattern):
        assert main([command, *argv]) == 0


@pytest.mark.parametrize("argv, hint", [
    (["anomaly", "--hiden", "8"], "did you mean --hidden?"),
    (["tudataset", "--epoch=3"], "did you mean --epochs?"),
    (["tune", "anomaly", "--trails", "3"], "did you mean --trials?"),
])
def test_a_misspelled_flag_gets_one_usage_line_and_the_closest_flag(argv, hint, capsys):
    # (CLI audit) the error came last after a 45-line usage dump, with no suggestion
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: " in err and hint in err
    assert len(err.strip().splitlines()) == 2  # usage and the error


def test_the_command_shows_warnings_as_lines_and_says_how_to_resume(monkeypatch, capsys):
    # (CLI audit) warnings showed a source path and a line of code ("__main__.py:4: ...
    # raise SystemExit(console_main())"); an interrupted run with checkpoints did not say
    # how to go on
    import importlib
    import warnings

    from et_graph.cli import SUBCOMMANDS, console_main, resume_hint

    module = importlib.import_module(SUBCOMMANDS["anomaly"][0])
    shown = []
    monkeypatch.setattr(module, "run", lambda config: shown.append(warnings.formatwarning(
        "flags for et.label_trick: no model", RuntimeWarning, "/x/__main__.py", 4,
        "raise SystemExit(console_main())")))
    before = warnings.formatwarning
    assert console_main(["anomaly", "--models", "gbt"]) == 0
    assert shown == ["et-graph anomaly: RuntimeWarning: flags for et.label_trick: no model\n"]
    assert warnings.formatwarning is before  # restored after the command

    def interrupted(config):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "run", interrupted)
    assert console_main(["anomaly", "--checkpoint-dir", "ck"]) == 130
    assert ("interrupted; its checkpoints are in ck: run the same command with --resume"
            in capsys.readouterr().err)
    assert resume_hint(["--checkpoint-dir=ck", "--resume"]).endswith(
        "run the same command to continue from the last one")
    assert resume_hint(["--epochs", "3"]) == ""
    # a tuning run keeps its finished trials in its storage (a CLI audit: no word of it)
    assert "kept in sqlite:///runs/tune.db: run the same command" in resume_hint(
        ["tune", "anomaly"])
    assert "kept in sqlite:///t.db" in resume_hint(["tune", "anomaly", "--storage",
                                                    "sqlite:///t.db"])
    assert "kept in sqlite:///u.db" in resume_hint(["tune", "anomaly", "--storage=sqlite:///u.db"])


def test_a_piped_standard_output_is_written_line_by_line():
    # (CLI audit) through a pipe every line of a run came at its end (block buffering)
    import io

    from et_graph.cli import line_buffered

    piped = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    assert not piped.line_buffering
    line_buffered(piped)
    assert piped.line_buffering


def test_a_redirected_stream_without_the_tables_symbols_prints_escapes():
    """Python writes a redirected stdout in the locale's encoding (cp1252 on Windows, ASCII
    under LANG=C); a finished run crashed printing '−' or '‖'."""
    import io
    import os
    import subprocess
    import sys

    from et_graph.cli import keep_printable

    narrow = io.TextIOWrapper(io.BytesIO(), encoding="cp1252")
    keep_printable(narrow)
    narrow.write("ET − GIN ‖ ±1")
    narrow.flush()
    assert narrow.buffer.getvalue() == "ET \\u2212 GIN \\u2016 ±1".encode("cp1252")
    wide = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    keep_printable(wide)
    assert wide.errors == "strict"  # a stream that can print them is left alone
    result = subprocess.run([sys.executable, "-m", "et_graph", "tudataset", "--help"],
                            capture_output=True, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0 and b"\\xd7" in result.stdout  # the help's "×"


def test_an_available_mps_is_accepted_on_older_torch(monkeypatch):
    """The catch-all device check asked torch.mps.is_available, which torch < 2.5 lacks: a
    Mac with a working GPU was told MPS is not available."""
    import torch

    from et_graph.config import check_device

    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.delattr(torch.mps, "is_available", raising=False)
    check_device("mps")  # no error
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match="MPS is not available"):
        check_device("mps")


@pytest.mark.parametrize("command, dest", [
    ("anomaly", "data.data_root"),
    ("unsupervised", "data.data_root"),
    ("tudataset", "data.root"),
    ("gnnbenchmark", "data.root"),
    ("tune anomaly", "data.data_root"),
    ("tune tudataset", "data.root"),
    ("tune gnnbenchmark", "data.root"),
])
def test_the_dataset_folder_flag_takes_both_spellings(command, dest):
    # (CLI audit) the folder was --data-root in the anomaly tasks and --root in the graph
    # tasks; the other spelling was refused as an unknown flag
    from et_graph.cli import build_parser
    from et_graph.tuning.cli import build_parser as tune_parser

    name, _, task = command.partition(" ")
    parser = tune_parser(task) if name == "tune" else build_parser(name)
    before = [task] if task else []  # the tuner's parser reads its task as an argument
    values = {vars(parser.parse_args([*before, flag, "data/here"]))[dest]
              for flag in ("--data-root", "--root")}
    assert values == {"data/here"}


def test_a_reader_that_leaves_ends_the_command_quietly():
    """`et-graph --help | head -1` printed a BrokenPipeError traceback (a packaging audit); a
    broken pipe that is not the output's still raises."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        closed = subprocess.run([sys.executable, "-m", "et_graph", "--help"], stdout=write_end,
                                stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert closed.returncode == 141 and closed.stderr == b""
    other = subprocess.run(
        [sys.executable, "-c", "import et_graph.cli as cli\n"
         "def broken(argv):\n    raise BrokenPipeError('a pipe of the run')\n"
         "cli.main = broken\nraise SystemExit(cli.console_main(['--version']))"],
        capture_output=True, timeout=120)
    assert other.returncode == 1 and b"a pipe of the run" in other.stderr


def test_a_lost_reader_on_windows_reports_einval_and_still_ends_quietly():
    """From a portability audit: on Windows a write to a closed pipe is often OSError(EINVAL),
    not BrokenPipeError, and ended in a traceback. Elsewhere EINVAL is raised as it came."""
    import subprocess
    import sys

    def run(windows: bool, filename: str = ""):
        error = "OSError(errno.EINVAL, 'Invalid argument'" + (f", {filename!r})" if filename
                                                               else ")")
        return subprocess.run(
            [sys.executable, "-c", "import errno, et_graph.cli as cli\n"
             f"cli._WINDOWS = {windows}\ncli._reader_gone = lambda stream: True\n"
             f"def broken(argv):\n    raise {error}\n"
             "cli.main = broken\nraise SystemExit(cli.console_main(['--version']))"],
            capture_output=True, timeout=120)

    assert run(True).returncode == 141
    elsewhere = run(False)
    assert elsewhere.returncode == 1 and b"Invalid argument" in elsewhere.stderr
    # a file's EINVAL (a name Windows refuses) is the run's own error, not a lost reader (a
    # review: it ended silently with 141)
    named = run(True, "results?.json")
    assert named.returncode == 1 and b"results?.json" in named.stderr


def test_an_example_prints_its_tables_to_a_stream_without_their_symbols():
    """From a portability audit: the examples' entry lacked the et-graph command's fallback, so
    an example redirected on Windows (cp1252) lost its printed table and exited 2 on
    "'charmap' codec can't encode character '\\u2016'"."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "from et_graph.cli import run_example\n"
         "run_example(lambda: print('ET \\u2016 GBT \\u2212 0.01'), 'example.py')"],
        capture_output=True, timeout=120, env={**os.environ, "PYTHONIOENCODING": "cp1252"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == b"ET \\u2016 GBT \\u2212 0.01"


def test_the_machines_errors_are_one_line_and_the_traceback_switch_reads_no_as_no(
        monkeypatch, capsys):
    """From a locked-down runtime audit: a full disk or a read-only file system gave a
    traceback, and ET_GRAPH_TRACEBACK=0 turned tracebacks on."""
    import errno

    from et_graph.cli import exit_on_bad_input, traceback_wanted

    def full_disk():
        raise OSError(errno.ENOSPC, "No space left on device", "out/results.json")

    monkeypatch.delenv("ET_GRAPH_TRACEBACK", raising=False)
    # a full disk is retryable elsewhere: 74, not bad input's 2 (an SRE audit)
    assert exit_on_bad_input(full_disk, "et-graph anomaly") == 74
    assert "et-graph anomaly: error: [Errno 28] No space left on device" in capsys.readouterr().err

    def refused():
        raise PermissionError(errno.EACCES, "Permission denied", "/root/out")

    assert exit_on_bad_input(refused, "et-graph anomaly") == 2  # the user's path: bad input
    for value, wanted in (("0", False), ("no", False), ("", False), ("1", True), ("yes", True)):
        monkeypatch.setenv("ET_GRAPH_TRACEBACK", value)
        assert traceback_wanted() is wanted

    def other():
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setenv("ET_GRAPH_TRACEBACK", "0")
    with pytest.raises(OSError, match="Bad file descriptor"):  # (not the machine's: raised)
        exit_on_bad_input(other, "et-graph")


def test_a_job_started_with_its_output_closed_gets_the_null_device(tmp_path):
    """From a locked-down runtime audit: with stdout and stderr closed (`>&- 2>&-`) the kernel
    build failed on sys.stdout.flush(), and the run's files would take descriptors 1 and 2."""
    import subprocess
    import sys

    script = ("from et_graph.cli import null_for_closed_streams\n"
              "null_for_closed_streams()\n"
              "import sys\nsys.stdout.flush(); print('lost'); sys.stderr.write('lost')\n"
              f"handle = open({str(tmp_path / 'f.txt')!r}, 'w')\n"
              "raise SystemExit(0 if handle.fileno() > 2 else 3)")
    done = subprocess.run([sys.executable, "-c", script], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, close_fds=True, timeout=120,
                          preexec_fn=lambda: (__import__("os").close(1),
                                              __import__("os").close(2)))
    assert done.returncode == 0


def test_quiet_silences_the_calling_thread_only(capsys):
    """run.quiet redirected sys.stdout for the whole process: another thread's lines (a
    service's heartbeats) were lost while a run went on (a logging audit)."""
    import threading

    from et_graph.reporting import this_thread_silent

    with this_thread_silent():
        print("the run's own table")
        other = threading.Thread(target=lambda: print("heartbeat", flush=True))
        other.start()
        other.join()
    print("after")
    out = capsys.readouterr().out
    assert "heartbeat" in out and "after" in out and "the run's own table" not in out


def test_nothing_fails_without_a_standard_error(monkeypatch):
    """A daemon whose fd 2 is closed has sys.stderr None: a TU load wrote its (empty) stderr
    there and failed, and so did a progress bar (a logging audit)."""
    from et_graph.datasets.locking import quiet_processing
    from et_graph.progress import DisabledBar, progress_bar

    monkeypatch.setattr(sys, "stderr", None)
    with quiet_processing():
        pass
    assert isinstance(progress_bar(range(3)), DisabledBar)


def test_quiet_runs_overlapping_in_two_threads_give_standard_output_back(capsys):
    """(a review) one stand-in per quiet run stacked up when two threads ran quietly at once,
    and the first run's stayed on sys.stdout for good, silencing its thread."""
    import threading

    from et_graph.reporting import this_thread_silent

    real = sys.stdout
    inside, go = threading.Event(), threading.Event()

    def worker():
        with this_thread_silent():
            inside.set()
            go.wait(30)

    with this_thread_silent():
        other = threading.Thread(target=worker)
        other.start()
        assert inside.wait(30)
        sys.stdout.writelines(["dropped\n"])  # the silenced thread's writelines too
    print("main after its own run")
    go.set()
    other.join()
    print("main after both runs")
    assert sys.stdout is real
    out = capsys.readouterr().out
    assert "main after its own run" in out and "main after both runs" in out
    assert "dropped" not in out


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name == "nt",
                    reason="POSIX signals")
@pytest.mark.parametrize("traceback", ["0", "1"])
def test_sigterm_ends_the_command_as_an_interruption_with_status_143(tmp_path, traceback):
    """A batch system's SIGTERM killed the command where it stood: no folder lock released,
    a tuning study's trials left marked running (a tuning audit)."""
    process = _started_command(tmp_path, traceback, [], ["anomaly", "--checkpoint-dir", "ck"])
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert out.strip() == "cleaned up"  # the finally blocks ran (communicate reads the pipe)
    if traceback == "1":  # the traceback asked for, and still 143 (it exited 1: a review)
        assert "Traceback" in err and "Terminated" in err
        return
    assert err.strip() == ("et-graph anomaly: terminated (SIGTERM); its checkpoints are in ck: "
                           "run the same command with --resume to continue from the last one")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_sigterm_handling_is_the_commands_alone():
    """Outside the command SIGTERM keeps its default action, and a child forked during it (a
    worker) dies of SIGTERM as before instead of raising in the child."""
    from et_graph.cli import Terminated, terminate_as_interrupt

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with terminate_as_interrupt():
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        ready, told = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child
            os.write(told, b"x")  # (a signal before CPython's after-fork reset is dropped)
            time.sleep(30)
            os._exit(0)
        os.read(ready, 1)
        time.sleep(0.2)
        os.kill(child, signal.SIGTERM)
        _, status = os.waitpid(child, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at the next bytecode
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1") or os.name == "nt", reason="POSIX signals")
@pytest.mark.parametrize("name", ["SIGTERM", "SIGUSR1"])
def test_a_stop_signal_twice_and_a_cleanup_that_fails_still_end_as_a_stop(tmp_path, name):
    """An SRE audit: two SIGTERMs 5 ms apart broke the cleanup into a traceback and status 1;
    a library's cleanup failing while the stop unwound did the same; Slurm's --signal=USR1
    killed the run with no cleanup at all."""
    process = _started_command(tmp_path, "0", [
        "time.sleep(0.5)  # a second signal arrives during the cleanup",
        "raise ValueError('the cleanup failed')"], ["anomaly"])
    number = getattr(signal, name)
    process.send_signal(number)
    time.sleep(0.1)
    process.send_signal(number)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + number, err
    assert out.strip() == "cleaned up"
    assert err.strip() == f"et-graph anomaly: terminated ({name})"


def test_the_stop_in_an_errors_chain_is_found():
    from et_graph.cli import Terminated, _stopped_by

    try:
        try:
            raise Terminated(15)
        finally:
            raise ValueError("cleanup")  # noqa: B012
    except ValueError as error:
        found = _stopped_by(error)
    assert isinstance(found, Terminated) and found.name == "SIGTERM"
    assert _stopped_by(ValueError("alone")) is None


def test_a_stop_whose_stderr_reader_is_gone_keeps_its_status(monkeypatch):
    """`et-graph ... 2>&1 | tee` in one process group: tee died of the same SIGTERM, the
    closing line's print raised BrokenPipeError, and the status became 1 (an SRE audit)."""
    import et_graph.cli as cli
    from et_graph.cli import Terminated

    class Gone:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    def stopped(argv):
        raise Terminated(15)

    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    monkeypatch.setattr(cli, "main", stopped)
    monkeypatch.setattr(cli, "printable_streams", lambda: None)
    monkeypatch.setattr(sys, "stderr", Gone())
    assert console_main(["anomaly"]) == 143


def _started_command(tmp_path, traceback, cleanup, argv):
    """``et-graph ARGV`` in a child whose run sleeps until a signal; its cleanup prints
    "cleaned up" after the ``cleanup`` lines of Python, the last of which may raise.
    Returned once the run has started."""
    lines = ["import sys, time, et_graph.cli as cli",
             "def slow(argv):",
             "    try:",
             "        print('started', flush=True)",
             "        time.sleep(60)",
             "    finally:",
             *(f"        {line}" for line in cleanup[:-1]),
             "        print('cleaned up', flush=True)",
             *(f"        {line}" for line in cleanup[-1:]),
             "cli.main = slow",
             f"sys.exit(cli.console_main({argv!r}))"]
    env = {**os.environ, TRACEBACK_ENV: traceback}
    process = subprocess.Popen([sys.executable, "-c", "\n".join(lines) + "\n"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=tmp_path, env=env)
    assert process.stdout.readline().strip() == "started"
    return process


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name == "nt", reason="POSIX signals")
def test_a_later_stop_signal_stops_again_and_an_exit_keeps_its_status(monkeypatch):
    """A review: after a first stop swallowed (raised inside a __del__, which Python drops),
    every later signal was ignored for good; sys.exit(n) inside a Ctrl-C handler became 130."""
    import et_graph.cli as cli
    from et_graph.cli import Terminated, _stopped_by, terminate_as_interrupt

    with terminate_as_interrupt():
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        os.kill(os.getpid(), signal.SIGTERM)  # a repeat within the window: unheard
        time.sleep(0.05)
        monkeypatch.setattr(cli, "STOP_REPEAT_SECONDS", 0.0)
        with pytest.raises(Terminated):  # later: stops again
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemExit(3)  # noqa: B904
    except SystemExit as error:
        assert _stopped_by(error) is None
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ValueError("unrelated") from None
    except ValueError as error:
        assert _stopped_by(error) is None
