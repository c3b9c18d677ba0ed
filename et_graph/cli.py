"""``et-graph`` console command: one sub-command per experiment module, plus ``tune``.

Each experiment module exposes ``CONFIG`` (its typed config dataclass) and ``run(config)``. The
flags of a sub-command are generated from ``CONFIG`` (:mod:`et_graph.config`), so the CLI, the
presets in ``configs/`` and the library share one set of defaults; the scripts in ``examples/``
call the same modules, so they cannot drift apart.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

# Nothing here imports torch (the package imports it on first use): `et-graph --version`
# and the list of commands answer without it; the task modules import it when run.
from . import __version__
from .plugins import PluginError

#: Set (to anything) to see the whole traceback of a bad-input error instead of its one line.
TRACEBACK_ENV = "ET_GRAPH_TRACEBACK"

SUBCOMMANDS = {
    "anomaly": ("et_graph.experiments.anomaly", "graph anomaly detection (node level)"),
    "unsupervised": ("et_graph.experiments.unsupervised_anomaly",
                     "unsupervised node anomaly detection (no labels until scoring)"),
    "tudataset": ("et_graph.experiments.tudataset", "TUDataset graph classification, k-fold CV"),
    "gnnbenchmark": ("et_graph.experiments.gnnbenchmark", "GNNBenchmark runner"),
    "image": ("et_graph.experiments.image_completion", "masked image completion (dense ET)"),
    "tune": ("et_graph.tuning.cli", "hyperparameter search with Optuna (validation data only)"),
    "native": ("et_graph.native_cli",
               "build the opt-in compiled CPU kernels now and check them"),
    "compare": ("et_graph.compare_cli",
                "ET minus each baseline with confidence intervals, from stored runs"),
}


def build_parser(command: str) -> argparse.ArgumentParser:
    """The argument parser of ``et-graph COMMAND`` (its options, as ``--help`` prints them)."""
    module_name, help_text = SUBCOMMANDS[command]
    module = importlib.import_module(module_name)
    if not hasattr(module, "CONFIG"):
        return module.build_parser()
    from .config import add_config_arguments

    parser = argparse.ArgumentParser(prog=f"et-graph {command}", description=help_text,
                                     allow_abbrev=False)
    add_config_arguments(parser, module.CONFIG)
    if hasattr(module, "add_arguments"):  # the task's flags beside its config's (--plugin)
        module.add_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``et-graph COMMAND [options]``: run the command on ``argv`` (``sys.argv[1:]`` by default);
    returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--version":
        print(f"et-graph {__version__}")
        return 0
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        print(f"et-graph: unknown command {argv[0]!r}", file=sys.stderr)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        lines = [f"  {name:<14}{help_text}" for name, (_, help_text) in SUBCOMMANDS.items()]
        asked = bool(argv) and argv[0] in ("-h", "--help")
        # asked for: on standard output; as an error's usage: on standard error, as argparse
        # does (a CLI audit: `et-graph bogus > out` wrote the listing into out)
        print("usage: et-graph COMMAND [options]   (et-graph COMMAND --help: its options)\n"
              "       et-graph --version\n\ncommands:\n" + "\n".join(lines),
              file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    command = argv[0]
    module = importlib.import_module(SUBCOMMANDS[command][0])
    if not hasattr(module, "CONFIG"):  # tune, native: their own parsers
        result = module.main(argv[1:])
        return result if isinstance(result, int) and not isinstance(result, bool) else 0
    # Through the task's own main, as the examples go: its checks of the given flags (those
    # no chosen model reads) ran for the examples only, never for `et-graph`.
    module.main(argv[1:], prog=f"et-graph {command}")
    return 0


#: Errors that report bad input in their message (see :func:`exit_on_bad_input`).
BAD_INPUT_ERRORS = (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
                    PermissionError, PluginError)


#: Errors of the machine rather than the code, reported in one line like bad input: a full
#: disk, a quota, a read-only file system (a locked-down runtime audit: tracebacks).
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES})

#: Of those, the ones another machine or a later try may not meet: they exit with
#: :data:`MACHINE_ERROR_STATUS`, so that a scheduler's requeue tells them from bad input
#: (both exited 2: an SRE audit). A permission refused is the user's path: bad input.
RETRYABLE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT})

#: The exit status of a retryable machine error (sysexits' EX_IOERR).
MACHINE_ERROR_STATUS = 74


def traceback_wanted() -> bool:
    """Whether ``ET_GRAPH_TRACEBACK`` asks for tracebacks (``1``, ``yes``, ...; ``0``, ``no``,
    ``off``, ``false`` and empty do not: ``0`` turned them on, a locked-down runtime audit)."""
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() not in ("", "0", "no", "off",
                                                                      "false")


def bad_input_errors() -> tuple[type[BaseException], ...]:
    """:data:`BAD_INPUT_ERRORS`, and the compiled kernels' build error once their module is
    loaded (only then can it be raised): importing that module imports torch, which
    ``et-graph --version`` does without."""
    native = sys.modules.get(f"{__package__}.native")
    return BAD_INPUT_ERRORS + ((native.NativeBuildError,) if native is not None else ())


def exit_on_bad_input(call: Callable[[], object], prog: str) -> int:
    """Run ``call()``; report bad input (a ``ValueError``, or a path that is missing, of the
    wrong kind or not permitted, which the library and the OS name in their message) as one
    line on stderr and return exit status 2 instead of a traceback; a full disk, a quota or
    a read-only file system the same way with status 74 (:data:`MACHINE_ERROR_STATUS`).
    ``ET_GRAPH_TRACEBACK=1`` lets the exception through. Otherwise the exit status is
    ``call()``'s own when it returns an int (0 for anything else)."""
    try:
        result = call()
    except Exception as error:
        # bad input (bad_input_errors(), evaluated once an error comes), or the machine's;
        # not an error raised while a stop unwound (console_main says that stop)
        machine = isinstance(error, OSError) and error.errno in ENVIRONMENT_ERRNOS
        if (not (machine or isinstance(error, bad_input_errors())) or traceback_wanted()
                or _stopped_by(error) is not None):
            raise
        print(f"{prog}: error: {error}\n({TRACEBACK_ENV}=1 shows the traceback)", file=sys.stderr)
        retryable = isinstance(error, OSError) and error.errno in RETRYABLE_ERRNOS
        return MACHINE_ERROR_STATUS if retryable else 2
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def run_example(call: Callable[[], object], script: str) -> None:
    """An ``examples/`` script's entry: ``call()`` under :func:`exit_on_bad_input`, exiting
    (status 2, or 74 for the machine's errors) only on bad input, so that a successful run
    returns normally (the tests run the examples in-process with ``runpy``). Its streams print
    the tables' symbols whatever their encoding, as the ``et-graph`` command's do (a
    portability audit: an example redirected on Windows, cp1252, lost its printed table and
    exited 2 on "'charmap' codec can't encode '\u2016'")."""
    printable_streams()
    status = exit_on_bad_input(call, Path(script).name)
    if status:
        raise SystemExit(status)


def keep_printable(stream: Any) -> None:
    """Let ``stream`` print the tables' ``±``, ``×``, ``−`` and ``‖`` whatever its encoding.

    Python writes a redirected stdout in the locale's encoding (cp1252 on Windows, ASCII under
    ``LANG=C``), which has no ``−`` or ``‖``: a finished run crashed while printing its table.
    Such a stream now writes a character it cannot encode as an escape (``\\u2212``)."""
    encoding = getattr(stream, "encoding", None)
    reconfigure = getattr(stream, "reconfigure", None)
    if not encoding or reconfigure is None:
        return
    try:
        "±×−‖≤".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        reconfigure(errors="backslashreplace")


def printable_streams() -> None:
    """Closed standard streams reopened on the null device, :func:`keep_printable` on stdout and
    stderr, and stdout line by line: what a command's or an example's entry does first."""
    null_for_closed_streams()
    for stream in (sys.stdout, sys.stderr):
        keep_printable(stream)
    line_buffered(sys.stdout)


def null_for_closed_streams() -> None:
    """Standard descriptors 0-2 that are closed, reopened on the null device, and Python's
    ``sys.stdout``/``sys.stderr`` given a writer where they are ``None``: a job started with
    them closed (``>&- 2>&-``) failed in torch's kernel build on ``sys.stdout.flush()``, and
    the run's own files would take descriptors 1 and 2 (a locked-down runtime audit)."""
    for descriptor in (0, 1, 2):
        try:
            os.fstat(descriptor)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != descriptor:
                os.dup2(null, descriptor)
                os.close(null)
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115


class Terminated(KeyboardInterrupt):
    """A stop signal (SIGTERM: a batch system's notice before its kill, ``timeout``, ``kill``;
    SIGHUP; SIGUSR1 and SIGUSR2, which Slurm's ``--signal`` sends ahead of a time limit)
    raised in the command's main thread, as Ctrl-C raises ``KeyboardInterrupt``: the run then
    ends as an interrupted one, releasing its folder locks, keeping its checkpoints and a
    tuning study's spent time and unfinished trials, instead of dying where it stood (its
    trials stayed marked running: a tuning audit). ``signum`` is the signal's number."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


#: Seconds after a stop signal in which another is taken as its repeat (a process group's
#: copies, a double Ctrl-C of a user) and left unheard while the run cleans up.
STOP_REPEAT_SECONDS = 2.0

#: The signals the command ends on as on Ctrl-C, where their action is still the default.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGUSR1",
                                                        "SIGUSR2") if hasattr(signal, name))


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within: each of :data:`STOP_SIGNALS` raises :class:`Terminated` in this process's main
    thread. Another within :data:`STOP_REPEAT_SECONDS` of the last is taken as its repeat and
    left unheard while the run cleans up (two SIGTERMs to a process group, 5 ms apart, broke
    the cleanup into a traceback and status 1: an SRE audit); a later one stops again (a
    scheduler's SIGKILL still ends it). Only signals whose action is still the default (a
    caller's own handler is kept), and only in this process: a child forked meanwhile (a
    worker) that gets one dies of it as before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = [number for number in STOP_SIGNALS
               if signal.getsignal(number) is signal.SIG_DFL]
    owner = os.getpid()
    raised: list[float] = []

    def terminated(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a forked worker: the default action, as before
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        now = time.monotonic()
        if raised and now - raised[-1] < STOP_REPEAT_SECONDS:
            return  # (the run is stopping already: a repeat sent with the first)
        # (a later one stops again: the first may have been swallowed, raised inside a
        # __del__ say, which Python drops with "Exception ignored": a review)
        raised.append(now)
        raise Terminated(signum)

    for number in handled:
        signal.signal(number, terminated)
    try:
        yield
    finally:
        for number in handled:
            signal.signal(number, signal.SIG_DFL)


def _stopped_by(error: BaseException) -> Optional[KeyboardInterrupt]:
    """The Ctrl-C or :class:`Terminated` in ``error``'s chain of causes, if any: a library's
    cleanup that fails while a stop unwinds (Optuna's, say) raised its own error in its
    place, a traceback and status 1 (an SRE audit)."""
    if isinstance(error, SystemExit):  # (an exit asked for, sys.exit(n), keeps its n)
        return None
    seen: set[int] = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return current
        seen.add(id(current))
        current = current.__cause__ or (None if current.__suppress_context__
                                        else current.__context__)
    return None


def console_main(argv: Optional[Sequence[str]] = None) -> int:
    """The installed ``et-graph`` command: :func:`main` under :func:`exit_on_bad_input`. Library
    callers of :func:`main` get the exception itself. Ctrl-C ends it with one line and exit
    status 130 (the shell's for SIGINT), not a traceback; with ``--checkpoint-dir`` the run
    resumes from its last checkpoint under ``--resume``. SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2
    end it the same way, with status 128 + the signal's number (143 for SIGTERM;
    :class:`Terminated`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = f"et-graph {argv[0]}" if argv and argv[0] in SUBCOMMANDS else "et-graph"
    printable_streams()
    shown = warnings.formatwarning
    warnings.formatwarning = lambda message, category, *rest: (
        f"{prog}: {category.__name__}: {message}\n")
    try:
        with terminate_as_interrupt():
            return exit_on_bad_input(lambda: main(argv), prog)
    except BaseException as error:
        stop = _stopped_by(error)
        if stop is None:
            if isinstance(error, OSError):
                return _lost_reader(error)
            raise
        terminated = stop if isinstance(stop, Terminated) else None
        status = 128 + terminated.signum if terminated is not None else 130
        if traceback_wanted():
            if terminated is None and stop is error:
                raise
            # (raised on, a Terminated exits 1: Python's exit by signal is Ctrl-C's alone)
            import traceback

            traceback.print_exc()
            return status
        # (a reader of stderr gone with the signal, `| tee` in one process group: the line
        # is lost, the status kept; it was 1, from the print's BrokenPipeError: an SRE audit)
        how = f"terminated ({terminated.name})" if terminated is not None else "interrupted"
        with contextlib.suppress(OSError):
            print(f"\n{prog}: {how}{resume_hint(argv)}", file=sys.stderr)
        return status
    finally:
        warnings.formatwarning = shown


def _lost_reader(error: OSError) -> int:
    """``console_main``'s answer to an ``OSError``: status 141 where the reader of the output
    left, else the error raised as it came."""
    # The reader of the output left (`et-graph --help | head -1`): a traceback said
    # nothing. Another pipe's error (one the run itself used) is raised as it came. On
    # Windows a write to a closed pipe is often EINVAL, not EPIPE (CPython #79935: a
    # portability audit).
    # (EINVAL of a file, e.g. a name with '?' on Windows, is the run's own error)
    lost = isinstance(error, BrokenPipeError) or (
        _WINDOWS and error.errno == errno.EINVAL and error.filename is None)
    if not lost or traceback_wanted() or not _reader_gone(sys.stdout):
        raise error
    # further output goes nowhere, so that Python's flush at exit does not raise again
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141  # the shell's status for SIGPIPE


#: Windows' pipes report a lost reader as EINVAL too (a module constant, for the tests).
_WINDOWS = os.name == "nt"


def _reader_gone(stream: Any) -> bool:
    """Whether the pipe that ``stream`` writes to has lost its reader (its write end polls as an
    error); where that cannot be asked (no ``poll``: Windows), taken as so."""
    try:
        import select

        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return True


def line_buffered(stream: Any) -> None:
    """Write ``stream`` line by line: piped (``| tee log``), Python buffers whole blocks, and
    a run's lines all came at its end."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None and not getattr(stream, "line_buffering", True):
        try:
            reconfigure(line_buffering=True)
        except (ValueError, OSError):  # a stream that cannot change (closed, detached)
            pass


def resume_hint(argv: Sequence[str]) -> str:
    """What an interrupted command with checkpoints runs next (``--checkpoint-dir DIR`` or
    ``--checkpoint-dir=DIR`` among ``argv``; a tuning run's studies, in its storage), or
    ``""``."""
    if argv and argv[0] == "tune":
        storage = _flag_value(argv, "--storage")
        storage = "sqlite:///runs/tune.db" if storage is None else storage
        return (f"; the finished trials are kept in {storage}: run the same command to "
                "continue the studies")
    folder = _flag_value(argv, "--checkpoint-dir")
    if folder:
        again = "" if "--resume" in argv else " with --resume"
        return (f"; its checkpoints are in {folder}: run the same command{again} to "
                "continue from the last one")
    return ""


def _flag_value(argv: Sequence[str], flag: str) -> Optional[str]:
    """The first value given to ``flag`` in ``argv`` (``FLAG VALUE`` or ``FLAG=VALUE``)."""
    for i, token in enumerate(argv):
        if token.startswith(f"{flag}="):
            return token.partition("=")[2]
        if token == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


if __name__ == "__main__":
    raise SystemExit(console_main())
