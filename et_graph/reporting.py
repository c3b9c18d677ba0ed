"""Results as JSON plus a readable Markdown table: mean +- std over seeds or folds."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional, Union

from .callers import user_stacklevel
from .exceptions import OutputWarning
from .paths import write_text_whole


def counted(n: int, noun: str) -> str:
    """``"1 seed"``, ``"5 seeds"``: a count and its noun, plural unless one."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """``{"mean", "std", "values"}`` with the population std (0 for a single value)."""
    values = [float(v) for v in values]
    if not values:
        return {"mean": float("nan"), "std": float("nan"), "values": []}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {"mean": mean, "std": std, "values": values}


def format_stat(stat: Optional[Mapping[str, Any]], digits: int = 4) -> str:
    """``mean ± std``; a single value is written as ``value (n = 1)``, since ``± 0`` under a
    mean ± std caption would read as a measured zero spread, and a spread that rounds to zero
    as ``± <0.0001``. A mean that is not finite names how many runs were (``n/a (1 of 5
    runs not finite)``) rather than hiding the others."""
    if stat is None or stat.get("mean") is None:
        return "n/a"
    values = [float(v) for v in stat.get("values") or () if v is not None]
    if not math.isfinite(stat["mean"]):
        bad = sum(not math.isfinite(v) for v in values)
        return f"n/a ({bad} of {len(values)} runs not finite)" if bad else "n/a"
    if len(values) == 1:
        return f"{stat['mean']:.{digits}f} (n = 1)"
    std = stat.get("std")
    if std is not None and 0 < std < 0.5 * 10 ** -digits:
        return f"{stat['mean']:.{digits}f} ± <{10 ** -digits:.{digits}f}"
    return f"{stat['mean']:.{digits}f} ± {std:.{digits}f}"


def provenance_note(meta: Mapping[str, Any]) -> str:
    """One line for a results table from ``run_metadata()``: the package version and commit, and
    the machine (processor, CPU instruction set, threads) that decided the rounding, and the
    process's peak memory where the run recorded it."""
    note = f"et-graph {meta.get('et_graph_version')}, commit {meta.get('git_commit')}"
    machine = meta.get("machine")
    if machine:
        note += (f"; {machine.get('processor')} ({machine.get('cpu_capability')}), "
                 f"{machine.get('threads')} thread(s)")
        if machine.get("cuda_device"):
            note += f", GPU {machine['cuda_device']}"
        if machine.get("environment"):
            note += ", " + ", ".join(f"{k}={v}" for k, v in machine["environment"].items())
    peak = meta.get("peak_memory") or {}
    shown = [f"{label} {peak[key] / 2 ** 30:.2f} GiB" for key, label in
             (("rss_bytes", "resident"), ("gpu_bytes", "GPU")) if peak.get(key) is not None]
    if shown:  # (a scale audit: no run recorded its memory)
        note += "; peak memory of the process: " + ", ".join(shown)
    return note


def markdown_table(
    models: Mapping[str, Mapping[str, Any]], metrics: Sequence[str], digits: int = 4
) -> str:
    """One row per model, one column per metric (each a ``summarize`` dict)."""
    header = "| model | " + " | ".join(metrics) + " |"
    rule = "|---|" + "---|" * len(metrics)
    rows = [
        f"| {name} | " + " | ".join(format_stat(stats.get(m), digits) for m in metrics) + " |"
        for name, stats in models.items()
    ]
    return "\n".join([header, rule, *rows])


def _strict(value: Any) -> Any:
    """``value`` with every non-finite float as ``None``, NumPy and torch scalars as Python
    numbers, and tuples as lists: what strict JSON allows."""
    if isinstance(value, Mapping):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()  # a NumPy or torch scalar
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_text(value: Any, indent: Optional[int] = 2,
              default: Callable[[Any], Any] = float) -> str:
    """Strict JSON of results: NaN and infinities become ``null`` (Python's default writes
    ``NaN``, which JSON parsers other than Python's refuse; a mean over no values is NaN).
    ``default`` converts what JSON has no type for (``str`` for reports holding paths)."""
    return json.dumps(_strict(value), indent=indent, allow_nan=False, default=default)


def write_results(
    out_dir: str | Path,
    results: Mapping[str, Any],
    metrics: Sequence[str],
    title: str = "",
    notes: Sequence[str] = (),
    sections: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Write ``results.json`` and ``results.md`` (title, protocol, table, ``sections``: more
    Markdown blocks such as a difference table, then notes) to ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "results.json"
    write_text_whole(json_path, json_text(results))
    lines = [f"# {title or results.get('dataset', 'results')}", ""]
    if results.get("protocol"):
        lines += [f"Protocol: {results['protocol']}", ""]
    lines += [markdown_table(results["models"], metrics), ""]
    lines += [line for section in sections if section for line in (section, "")]
    if not any("population" in note for note in notes):  # which std, where it is not said
        notes = [*notes, "± is the population standard deviation (divisor n) over the runs"]
    lines += [f"- {note}" for note in notes]
    md_path = out / "results.md"
    write_text_whole(md_path, "\n".join(lines).rstrip() + "\n")
    return json_path, md_path


#: A run's per-node scores, beside its results.json (``et-graph anomaly`` and ``unsupervised``).
SCORES_FILE = "scores.npz"


def write_plot_data(path: str | Path, data: Mapping[str, Any],
                    run_id: Optional[str] = None) -> Path:
    """The numbers a figure draws, in a file beside it (``NAME.json`` for ``NAME.png``;
    strict JSON, NaN as null, with the results file's ``run_id``): per-epoch curves were in
    no file, only in their PNGs (an output audit)."""
    return write_text_whole(Path(path), json_text({"run_id": run_id, **data}) + "\n")


def write_scores(path: str | Path, scores: Mapping[str, Sequence[Any]], seeds: Sequence[int],
                 nodes: Sequence[Any], labels: Sequence[Any], run_id: Optional[str] = None
                 ) -> Path:
    """``scores.npz``: for seed ``seeds[i]``, ``ROW__seed{s}`` (``scores[ROW][i]``, the row's
    scores of the scored nodes), ``nodes__seed{s}`` (``nodes[i]``, their ids) and
    ``labels__seed{s}`` (``labels[i]``), and ``run_id`` (the results file's ``meta.run_id``).
    :func:`load_scores` reads it back, :func:`scores_run_id` its run id."""
    import numpy as np

    arrays: dict[str, Any] = {} if run_id is None else {"run_id": np.array(run_id)}
    for index, seed in enumerate(seeds):
        arrays[f"nodes__seed{seed}"] = nodes[index]
        arrays[f"labels__seed{seed}"] = labels[index]
        arrays.update({f"{row}__seed{seed}": per_seed[index]
                       for row, per_seed in scores.items()})
    np.savez_compressed(path, **arrays)
    return Path(path)


def load_scores(path: str | Path) -> tuple[list[int], list[Any], list[Any], dict[str, list[Any]]]:
    """``(seeds, nodes per seed, labels per seed, {row: scores per seed})`` of a
    :func:`write_scores` file; a row missing for some seed is left out."""
    import numpy as np

    stored = np.load(path)
    seeds = sorted(int(key.split("__seed")[1]) for key in stored.files
                   if key.startswith("nodes__seed"))
    rows = {key.split("__seed")[0] for key in stored.files
            if "__seed" in key} - {"nodes", "labels"}
    scores = {row: [stored[f"{row}__seed{seed}"] for seed in seeds] for row in sorted(rows)
              if all(f"{row}__seed{seed}" in stored.files for seed in seeds)}
    return (seeds, [stored[f"nodes__seed{seed}"] for seed in seeds],
            [stored[f"labels__seed{seed}"] for seed in seeds], scores)


def scores_run_id(path: str | Path) -> Optional[str]:
    """The ``run_id`` a :func:`write_scores` file was written with (``None`` in files written
    before it was kept)."""
    import numpy as np

    stored = np.load(path)
    return str(stored["run_id"]) if "run_id" in stored.files else None


def rank_across_datasets(scores: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, Any]]:
    """Rank the same candidates on several datasets and summarise: how one configuration is
    chosen for every dataset (a default, a general preset).

    ``scores`` is ``{dataset: {candidate: score}}``, higher is better, every dataset scoring the
    same candidates. Returns ``{candidate: {"rank": {dataset: rank}, "mean_rank",
    "mean_score"}}`` in the first dataset's order; rank 1 is the best score on that dataset and
    equal scores share their average rank."""
    from scipy.stats import rankdata

    if not scores:
        raise ValueError("no datasets to rank on")
    candidates = list(next(iter(scores.values())))
    for dataset, values in scores.items():
        if set(values) != set(candidates):
            raise ValueError(f"{dataset} scores other candidates than {candidates}")
    out: dict[str, dict[str, Any]] = {name: {"rank": {}} for name in candidates}
    for dataset, values in scores.items():
        for name, rank in zip(candidates, rankdata([-values[name] for name in candidates])):
            out[name]["rank"][dataset] = float(rank)
    for name, entry in out.items():
        entry["mean_rank"] = math.fsum(entry["rank"].values()) / len(scores)
        entry["mean_score"] = math.fsum(values[name] for values in scores.values()) / len(scores)
    return out


#: Folders holding more files than this are not inventoried (``--out runs`` by mistake).
MAX_INVENTORIED_FILES = 20_000


def _inventory(folder: Path, skip: Sequence[Path]) -> dict[Path, int]:
    """``{file: mtime_ns}`` below ``folder``, without the files below ``skip``."""
    found: dict[Path, int] = {}
    if not folder.is_dir():
        return found
    skipped = [path.resolve() for path in skip]
    for path in folder.rglob("*"):
        if len(found) >= MAX_INVENTORIED_FILES:
            break
        resolved = path.resolve()
        if path.is_file() and not any(resolved.is_relative_to(s) for s in skipped):
            found[path] = path.stat().st_mtime_ns
    return found


@contextmanager
def output_folder(out: Optional[Union[str, Path]], skip: Sequence[Union[str, Path, None]] = (),
                  enabled: bool = True) -> Iterator[None]:
    """Around a run writing into ``out``: an ``OutputWarning`` at the start when ``out`` holds
    an earlier run's ``results.json`` (it is about to be replaced), and at the end one naming
    the earlier files that this run did not rewrite (plots of a model no longer run, another
    model's curves), which would otherwise be read as this run's. Nothing is deleted: the
    folder may hold the user's own files. ``skip`` (e.g. a checkpoint folder inside ``out``)
    is left out."""
    if not out or not enabled:
        yield
        return
    folder = Path(out)
    # The folders this run makes, deepest first: a run that fails (bad data, a wrong flag)
    # removes those it left empty rather than leaving a results folder that holds nothing.
    made = [path for path in [folder, *folder.parents] if not path.exists()]
    try:  # made now: a folder that cannot be (under a file, not permitted) failed after training
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        reason = error.strerror or str(error)
        raise ValueError(f"the output folder {folder} cannot be created ({reason}): choose "
                         "another --out") from None
    from .datasets.locking import FolderBusy, exclusive_folder

    lock = folder / f".{OUTPUT_LOCK}.lock"
    try:
        with exclusive_folder(folder, OUTPUT_LOCK):
            yield from _writing_into(folder, skip, lock)
    except BaseException as error:
        if made:  # (Windows cannot remove the lock file while it is open: closed by now)
            with contextlib.suppress(OSError):
                lock.unlink()
        for path in made:
            try:
                path.rmdir()  # only when empty
            except OSError:
                break
        if isinstance(error, FolderBusy):
            # (two runs into one --out removed each other's partial files, mixed their results)
            raise ValueError(f"another et-graph run is writing to {folder} (it holds {lock}): "
                             "wait for it, or choose another --out") from None
        if isinstance(error, OSError) and error.filename is not None and \
                Path(error.filename) == lock:
            # a read-only folder was found only after the whole training, at results.json
            raise ValueError(f"the output folder {folder} cannot be written "
                             f"({error.strerror or error}): choose another --out") from None
        raise


#: The lock a run holds on its output folder (``.et-graph-run.lock``, removed when it ends).
OUTPUT_LOCK = "et-graph-run"

#: The files whose presence in an output folder means an earlier run's results are there.
RESULT_FILES = ("results.json", "study_report.json")

#: The file that says whether the run writing a folder is running, finished or failed: a
#: program polling the folder saw results.json before the run had written its scores and
#: plots, and a crashed run's folder looked like a finished one (an output audit).
RUN_STATUS = "run_status.json"


def _write_status(folder: Path, status: str, started: str, **extra: Any) -> None:
    """Best effort: a status that cannot be written (a read-only or full folder, a reader
    holding the file open on Windows) never fails the run it describes."""
    import socket

    from .config import utc_now

    # (the host too: a pid alone cannot be checked on a shared file system)
    record = {"status": status, "started_at": started, "host": socket.gethostname(),
              "pid": os.getpid(), **extra}
    if status != "running":
        record["ended_at"] = utc_now()
    with contextlib.suppress(OSError):
        write_text_whole(folder / RUN_STATUS, json_text(record) + "\n")


def _parsed(text: Optional[str]) -> Any:
    """A status file's earlier record (its text where it is not JSON; ``None`` without one)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _files_besides(folder: Path, own: Sequence[Path]) -> Optional[dict[Path, int]]:
    """``folder``'s files but ``own``, as :func:`_inventory` gives them; ``None`` where they
    cannot be read (a lookup's error must not replace the run's own)."""
    try:
        return {path: stamp for path, stamp in _inventory(folder, []).items()
                if path not in own}
    except OSError:
        return None


def _writing_into(folder: Path, skip: Sequence[Union[str, Path, None]], lock: Path
                  ) -> Iterator[None]:
    """:func:`output_folder`'s warnings around the run, once the folder is made and locked, and
    its :data:`RUN_STATUS`: ``running`` from the start, ``finished`` once the run's files are
    written (before the closing warnings, which a filter may turn into errors), ``failed``
    or ``interrupted`` (with the error's type) when the run stops on an exception; a killed
    run leaves ``running`` (and its lock). A run that stops before writing anything says
    ``wrote_nothing`` and keeps the earlier run's record under ``previous`` (the folder's
    files are that run's, intact), and a folder this run made is removed as before, status
    and all, where nothing else is in it."""
    from .config import utc_now

    skipped = [Path(p) for p in skip if p]
    earlier = _inventory(folder, skipped)
    earlier.pop(lock, None)
    status_file = folder / RUN_STATUS
    try:
        previous: Optional[str] = status_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        previous = None
    earlier.pop(status_file, None)  # (rewritten by every run)
    started = utc_now()
    _write_status(folder, "running", started)
    finished = False
    try:
        # (a tuning's report too: a tune into its own earlier --out said nothing)
        results = [path for path in earlier if path.name in RESULT_FILES]
        if results:
            written = time.strftime("%Y-%m-%d %H:%M",
                                    time.localtime(earlier[results[0]] / 1e9))
            warnings.warn(f"{folder} holds an earlier run's results ({results[0]}, written "
                          f"{written}); this run's files replace those of the same names "
                          "when it writes them (one that stops before, on an error say, "
                          "leaves them as they are)", OutputWarning,
                          stacklevel=user_stacklevel())
        yield
        _write_status(folder, "finished", started)
        finished = True
        left = sorted(str(path.relative_to(folder)) for path, stamp in earlier.items()
                      if path.is_file() and path.stat().st_mtime_ns == stamp)
        if left:
            shown = ", ".join(left[:8]) + (f" and {len(left) - 8} more"
                                           if len(left) > 8 else "")
            warnings.warn(f"{len(left)} file(s) in {folder} come from an earlier run and were "
                          f"not rewritten by this one: {shown}. Remove them, or write each "
                          "run to a new --out, so that they are not read as this run's.",
                          OutputWarning, stacklevel=user_stacklevel())
    except BaseException as error:
        if finished:  # (a closing warning made an error by a filter: the run's files stand)
            raise
        stopped = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
        now = _files_besides(folder, (status_file, lock))
        if now is None or any(earlier.get(path) != stamp for path, stamp in now.items()):
            # (written since the start, or cannot tell: say the run wrote)
            _write_status(folder, stopped, started, error=type(error).__name__)
        elif previous is None and not now:
            with contextlib.suppress(OSError):  # (a folder it made, left empty, goes whole)
                status_file.unlink()
        else:
            # The folder's files are an earlier run's, intact: the status says this attempt
            # stopped (a requeue must see it: an SRE audit) and keeps the record of the run
            # whose files they are (not a chain of every attempt since: a review)
            earlier_record = _parsed(previous)
            if isinstance(earlier_record, dict) and earlier_record.get("wrote_nothing"):
                earlier_record = earlier_record.get("previous")
            _write_status(folder, stopped, started, error=type(error).__name__,
                          wrote_nothing=True, previous=earlier_record)
        raise


class _SilentThreads:
    """The one ``sys.stdout`` stand-in of the process while any thread runs quietly: it drops
    what the silenced threads write and passes the rest to the stream it stands in for (whose
    other attributes it shows). One for all threads, with a count per thread, so that quiet
    runs overlapping in two threads cannot leave a stand-in behind (one per run stacked up,
    and the first run's stayed for good: a review)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.silenced: dict[int, int] = {}

    def _passes(self) -> bool:
        return threading.get_ident() not in self.silenced and self.stream is not None

    def write(self, text: str) -> int:
        return self.stream.write(text) if self._passes() else len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._passes():
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, ... of the stream
        return getattr(self.stream, name)


_SILENT_LOCK = threading.Lock()


@contextlib.contextmanager
def this_thread_silent() -> Iterator[None]:
    """Nothing the calling thread prints to ``sys.stdout`` inside the block reaches it; other
    threads' lines pass. The stream is put back when the last quiet block of the process ends
    (unless someone replaced ``sys.stdout`` meanwhile)."""
    me = threading.get_ident()
    with _SILENT_LOCK:
        current = sys.stdout
        if isinstance(current, _SilentThreads):
            stand_in = current
        else:
            stand_in = sys.stdout = _SilentThreads(current)
        stand_in.silenced[me] = stand_in.silenced.get(me, 0) + 1
    try:
        yield
    finally:
        with _SILENT_LOCK:
            stand_in.silenced[me] -= 1
            if not stand_in.silenced[me]:
                del stand_in.silenced[me]
            if not stand_in.silenced and sys.stdout is stand_in:
                sys.stdout = stand_in.stream


def refuse_one_process_task_under_torchrun(config: Any) -> None:
    """``ValueError`` under torchrun (``WORLD_SIZE`` > 1) for a run that is not data-parallel
    (only ``et-graph anomaly --ddp`` is): every process ran the whole job and wrote the same
    folder (a DDP audit: only the anomaly runner refused)."""
    from .training.engine import launched_world_size

    if launched_world_size() <= 1:
        return
    protocol: Any = getattr(config, "protocol", None)  # (any runner's config)
    if hasattr(protocol, "ddp"):
        if not protocol.ddp:
            raise ValueError("launched by torchrun with WORLD_SIZE > 1 but without --ddp: "
                             "every process would run the whole job; add --ddp, or run it "
                             "once without torchrun")
        return
    raise ValueError("launched by torchrun with WORLD_SIZE > 1, but this task is not "
                     "data-parallel (without --ddp: only et-graph anomaly has it): every "
                     "process would run the whole job into the same folder; run it once "
                     "without torchrun (a job that runs it on one rank on purpose unsets "
                     "WORLD_SIZE there)")


def checks_output_folder(folder: Callable[[Any], Any] = lambda config: config.run.out
                         ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a runner ``run(config, ...)`` with :func:`output_folder` around
    ``folder(config)`` (default ``config.run.out``), its checkpoint folder skipped (under
    ``torchrun`` only rank 0, the one that writes, checks), and with
    :func:`~et_graph.config.process_state_kept`: the caller's threads, kernel switches and
    random states come back. With ``config.run.quiet`` nothing reaches standard output."""
    def decorate(run: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(run)
        def checked(config: Any, *args: Any, **kwargs: Any) -> Any:
            from .config import process_state_kept

            refuse_one_process_task_under_torchrun(config)
            out, writes = folder(config), os.environ.get("RANK", "0") == "0"
            quiet = bool(getattr(config.run, "quiet", False))
            # (the runners print with print and tqdm.write, both to sys.stdout; silenced for
            # this thread only: a redirect of sys.stdout swallowed every other thread's lines
            # too, a service's heartbeats among them: a logging audit)
            printing = this_thread_silent() if quiet else contextlib.nullcontext()
            with process_state_kept(), printing, output_folder(
                    out, [config.run.checkpoint_dir], enabled=writes):
                result = run(config, *args, **kwargs)
            if out and writes and not quiet:  # no command said where its results went
                # (absolute: a scheduler's log does not say the working folder, an SRE audit)
                print(f"\nWritten to {Path(out).resolve()}", flush=True)
            return result
        return checked
    return decorate
