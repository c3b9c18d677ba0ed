"""Progress bars that suit both a terminal and a log file.

On a terminal (or in a notebook) these are tqdm's bars as they are. When standard error is
redirected (``nohup ... 2> run.log``, a batch scheduler's log), tqdm would still redraw its bar
in place with carriage returns and, for nested bars, cursor-up escape codes, which leave a log
full of half-overwritten lines. There each bar instead writes whole plain lines: nothing for
work shorter than :data:`LOG_INTERVAL_S`, then at most one line per interval.
"""
from __future__ import annotations

import re
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import IO, Any, Generic, TypeVar, Union

from tqdm import TqdmExperimentalWarning

# tqdm.autonotebook, not tqdm.auto: tqdm.auto's class is the asyncio variant, whose constructor
# calls iter() on what it wraps, so a bar over a shuffled DataLoader drew one more shuffle seed
# from the loader's generator, and showing progress changed every result (a reproducibility
# audit: the ZINC proxy's figures moved with --no-progress). In a notebook its import warns
# that it chose the notebook bar, which is the choice wanted here (tqdm.auto silences it too).
# The runners take tqdm from here (their tqdm.write), so that this is its one import.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", TqdmExperimentalWarning)
    from tqdm.autonotebook import tqdm
    from tqdm.autonotebook import tqdm as notebook_or_plain_tqdm

__all__ = ["LOG_INTERVAL_S", "DeferredBar", "DisabledBar", "interactive", "progress_bar"]

T = TypeVar("T")

#: Seconds between a redirected bar's lines (and before its first one).
LOG_INTERVAL_S = 30.0

_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class _LineWriter:
    """A file for tqdm that turns its in-place redraws into whole lines.

    tqdm writes ``"\\r" + bar`` for every redraw and blank padding or escape codes to clear a
    line; only the text between those is kept, once per distinct line.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.last = ""

    def write(self, text: str) -> int:
        for piece in re.split(r"[\r\n]", _ESCAPE.sub("", text)):
            line = piece.rstrip()
            if line and line != self.last and not self._finished_again(line):
                self.stream.write(line + "\n")
                self.last = line
        return len(text)

    def _finished_again(self, line: str) -> bool:
        """Whether ``line`` repeats a finished bar's last line with only its timing changed
        (a bar kept on screen wrote ``2/2 [00:04<00:00, 2.33s/it]`` and then ``2.35s/it]``:
        a notebook audit); an unfinished bar's repeated count stays, as a sign of life."""
        head, _, _ = line.rpartition(" [")
        # the count itself complete: tqdm shows 996/1000 as 100% too (a review)
        done = re.search(r"(\d+)/(\d+)$", head)
        return (done is not None and done[1] == done[2]
                and head == self.last.rpartition(" [")[0])

    def flush(self) -> None:
        self.stream.flush()


class DisabledBar(Generic[T]):
    """The bar of ``progress_bar(..., disable=True)``: it iterates ``iterable`` and takes the
    tqdm calls the library makes (``set_postfix``, ``update``, ``close``, ``with``) without
    drawing anything. A disabled tqdm bar draws nothing either, but creating one starts tqdm's
    monitor thread, which then wakes every 10 s for the rest of the process."""

    disable = True

    def __init__(self, iterable: Iterable[T], total: int | None = None) -> None:
        self.iterable = iterable
        self.total = total
        self.n = 0

    def __iter__(self) -> Iterator[T]:
        return iter(self.iterable)

    def __enter__(self) -> DisabledBar[T]:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        return None

    def _ignore(self, *args: Any, **kwargs: Any) -> None:
        return None

    update = close = refresh = set_postfix = set_postfix_str = _ignore
    set_description = set_description_str = _ignore


def _passed_on(name: str) -> Any:
    """A :class:`DeferredBar` method that passes tqdm's call on once the bar exists (the calls
    the library makes; a bar not yet built ignores them, as :class:`DisabledBar` does)."""
    def method(self: Any, *args: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            getattr(self.bar, name)(*args, **kwargs)
    method.__name__ = name
    return method


class DeferredBar(Generic[T]):
    """A notebook bar with a ``delay``: iterates ``iterable`` and builds the widget only once
    ``delay`` seconds have passed. tqdm's notebook bar builds its widgets when it is created
    and only shows them after the delay, and never frees them: a bar over each epoch's batches
    left about ten hidden widgets per epoch in the kernel and in the saved notebook (a notebook
    audit: 4.7 MB of widget state for five tiny runs)."""

    def __init__(self, iterable: Iterable[T], delay: float, **options: Any) -> None:
        self.iterable, self.delay, self.options = iterable, delay, options
        self.total = options.get("total")
        self.n = 0
        self.bar: Any = None

    def __iter__(self) -> Iterator[T]:
        start = time.monotonic()
        try:
            for item in self.iterable:
                yield item
                self.n += 1
                if self.bar is not None:
                    self.bar.update(1)
                elif time.monotonic() - start >= self.delay:
                    self.bar = tqdm(initial=self.n, **self.options)
        finally:
            self.close()

    def __enter__(self) -> DeferredBar[T]:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    update = _passed_on("update")
    refresh = _passed_on("refresh")
    set_postfix = _passed_on("set_postfix")
    set_postfix_str = _passed_on("set_postfix_str")
    set_description = _passed_on("set_description")
    set_description_str = _passed_on("set_description_str")


def interactive(stream: IO[str]) -> bool:
    """Whether ``stream`` shows tqdm's in-place bars: a terminal, or a notebook's widget."""
    # tqdm.autonotebook picks its notebook widget inside a Jupyter kernel, whose stderr is not a
    # terminal either; the widget draws no text, so it stays as it is.
    if notebook_or_plain_tqdm.__module__ == "tqdm.notebook":
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def progress_bar(iterable: Iterable[T], *, desc: str | None = None, leave: bool = True,
                 disable: bool = False, total: int | None = None,
                 **options: Any) -> Union[tqdm, DisabledBar[T], DeferredBar[T]]:
    """tqdm over ``iterable``, drawn in place on a terminal and as plain lines in a log
    (``disable=True``: a :class:`DisabledBar`, which starts no thread).

    Takes tqdm's own keywords (``options``); in a log ``mininterval`` and ``delay`` default
    to :data:`LOG_INTERVAL_S` and the bar is drawn in ASCII.
    """
    stream = options.pop("file", None) or sys.stderr
    if disable or stream is None:  # (no stderr at all, a daemon's: nowhere to draw)
        return DisabledBar(iterable, total)
    if interactive(stream):
        if options.get("delay") and notebook_or_plain_tqdm.__module__ == "tqdm.notebook":
            return DeferredBar(iterable, options.pop("delay"), desc=desc, leave=leave,
                               total=total, file=stream, **options)
        return tqdm(iterable, desc=desc, leave=leave, total=total, file=stream, **options)
    # position 0: a nested bar placed lower would move the cursor up with escape codes
    # (maxinterval: tqdm's monitor thread redrew every 10 s otherwise)
    for name, value in (("mininterval", LOG_INTERVAL_S), ("maxinterval", LOG_INTERVAL_S),
                        ("delay", LOG_INTERVAL_S),
                        ("ascii", True), ("position", 0), ("dynamic_ncols", False),
                        ("ncols", 100)):
        options.setdefault(name, value)
    return tqdm(iterable, desc=desc, leave=leave, total=total, file=_LineWriter(stream),
                **options)
