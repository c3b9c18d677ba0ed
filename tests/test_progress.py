"""Progress bars: in place on a terminal, plain whole lines in a redirected log."""
import io
import re
import types

import et_graph.progress as progress
from et_graph.progress import progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _nested_run(stream: io.StringIO, **options) -> None:
    for _fold in progress_bar(range(3), desc="folds", file=stream, **options):
        for _epoch in progress_bar(range(4), desc="epochs", leave=False, file=stream,
                                   **options):
            pass


def test_log_gets_whole_lines_without_redraw_codes():
    log = io.StringIO()
    _nested_run(log, mininterval=0, delay=0)
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines and all(line == line.rstrip() and line for line in lines)
    assert any(line.startswith("epochs:") for line in lines)
    assert lines[-1].startswith("folds: 100%")  # leave=True keeps the final state
    # a redraw of an unchanged line is not repeated
    assert all(a != b for a, b in zip(lines, lines[1:]))


def test_log_stays_quiet_for_short_work():
    log = io.StringIO()
    _nested_run(log)  # the defaults: nothing before LOG_INTERVAL_S has passed
    assert log.getvalue().strip() == ""


def test_terminal_keeps_tqdm_in_place_drawing():
    terminal = _Terminal()
    _nested_run(terminal, mininterval=0)
    assert "\r" in terminal.getvalue()


def test_disabled_bar_writes_nothing():
    log = io.StringIO()
    assert list(progress_bar(range(3), disable=True, file=log)) == [0, 1, 2]
    assert log.getvalue() == ""


def test_default_stream_is_stderr(capsys):
    list(progress_bar(range(2), desc="work", mininterval=0, delay=0))
    err = capsys.readouterr().err
    assert re.search(r"^work: 100%", err, re.MULTILINE) and "\r" not in err
    assert progress.LOG_INTERVAL_S > 0


def test_a_caller_may_set_the_log_options_itself():
    """position, ncols and the like were passed twice in a log: a TypeError."""
    log = io.StringIO()
    assert list(progress_bar(range(2), file=log, position=0, ncols=60, delay=0,
                             mininterval=0)) == [0, 1]
    assert "\r" not in log.getvalue()


def test_a_disabled_bar_starts_no_monitor_thread(monkeypatch):
    """A disabled tqdm bar draws nothing, but creating one started tqdm's monitor thread
    (a daemon waking every 10 s for the rest of the process)."""
    import threading

    from tqdm._monitor import TMonitor

    # as in a fresh process: no monitor yet (an earlier enabled bar may have started one)
    monkeypatch.setattr(progress.tqdm, "monitor", None)
    before = set(threading.enumerate())
    with progress_bar(range(3), desc="quiet", disable=True) as bar:
        assert list(bar) == [0, 1, 2]
        bar.set_postfix(loss="0.1", refresh=False)  # as the training engine calls it
        bar.update()
    started = [thread for thread in set(threading.enumerate()) - before
               if isinstance(thread, TMonitor)]
    assert not started


def test_a_bar_draws_nothing_from_what_it_wraps():
    """tqdm.auto's class (the asyncio variant) called iter() on what it wrapped: over a
    shuffled DataLoader that drew one more shuffle seed from the loader's generator, so showing
    progress changed every result (a reproducibility audit)."""
    import io

    import torch
    from torch.utils.data import DataLoader

    from et_graph.progress import progress_bar

    generator = torch.Generator().manual_seed(0)
    loader = DataLoader(list(range(10)), batch_size=3, shuffle=True, generator=generator)
    before = generator.get_state().clone()
    for stream in (io.StringIO(), None):  # a log, and standard error as it is
        bar = progress_bar(loader, desc="x", total=len(loader),
                           **({"file": stream} if stream is not None else {}))
        bar.close()
        assert torch.equal(generator.get_state(), before)


def test_showing_progress_never_changes_a_training():
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from et_graph.training import TrainConfig, Trainer, Validation

    class Task:
        def __init__(self):
            self.generator = torch.Generator().manual_seed(1)
            data = torch.randn(40, 3, generator=torch.Generator().manual_seed(2))
            self.loader = DataLoader(data, batch_size=8, shuffle=True, generator=self.generator)

        def batches(self, epoch):
            return self.loader  # as the graph tasks return theirs

        def loss(self, model, batch):
            return model(batch).pow(2).mean()

        def validate(self, model):
            return Validation(0.0, 0.0)

    weights = []
    for shown in (False, True):
        torch.manual_seed(0)
        model, task = nn.Linear(3, 1), Task()
        Trainer(TrainConfig(epochs=3, lr=0.1), progress=shown,
                generators=[task.generator]).fit(model, task)
        weights.append(model.weight.detach().clone())
    assert torch.equal(*weights)


def test_a_delayed_notebook_bar_builds_no_widget_for_short_work(monkeypatch):
    """tqdm's notebook bar builds its widgets when created, whatever its delay, and never frees
    them: a bar over each epoch's batches left about ten hidden widgets per epoch in the kernel
    and the saved notebook (a notebook audit). A delayed bar there is built once the delay has
    passed, counting what came before."""
    built = []

    class Widget:
        __module__ = "tqdm.notebook"

        def __init__(self, *args, **kwargs):
            built.append(kwargs)
            self.updates = 0
            self.closed = False

        def update(self, count):
            self.updates += count

        def close(self):
            self.closed = True

    clock = iter([0.0, 0.5, 1.0, 3.0, 3.5, 4.0, 4.5])
    monkeypatch.setattr(progress, "notebook_or_plain_tqdm", Widget)
    monkeypatch.setattr(progress, "tqdm", Widget)
    stream = io.StringIO()
    assert list(progress_bar(range(3), desc="short", file=stream, delay=1e9)) == [0, 1, 2]
    assert built == []  # never built
    # the module's clock only (the global time.monotonic is every other caller's too)
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    bar = progress_bar(range(6), desc="long", file=stream, delay=2.0, total=6)
    assert list(bar) == list(range(6))
    assert len(built) == 1 and built[0]["initial"] == 3 and built[0]["total"] == 6
    assert "delay" not in built[0] and built[0]["desc"] == "long"
    # (a review) the tqdm calls the library makes, as on any bar
    with progress_bar(range(2), file=stream, delay=1e9) as quiet:
        quiet.set_postfix(loss=1.0)
        quiet.update(1)
        assert quiet.n == 0 and quiet.total is None


def test_a_finished_bar_writes_its_last_line_once():
    """(a notebook audit) a bar kept on screen wrote its final line twice in a log, the second
    time with another rate; an unfinished count repeated later is kept (a sign of life)."""
    log = io.StringIO()
    writer = progress._LineWriter(log)
    writer.write("\rseeds: 100%|##| 2/2 [00:04<00:00, 2.33s/it]")
    writer.write("\rseeds: 100%|##| 2/2 [00:04<00:00, 2.35s/it]\n")
    writer.write("\repochs:  30%|#  | 3/10 [00:30<01:10, 10.0s/it]")
    writer.write("\repochs:  30%|#  | 3/10 [01:00<02:20, 20.0s/it]")
    assert log.getvalue().splitlines() == [
        "seeds: 100%|##| 2/2 [00:04<00:00, 2.33s/it]",
        "epochs:  30%|#  | 3/10 [00:30<01:10, 10.0s/it]",
        "epochs:  30%|#  | 3/10 [01:00<02:20, 20.0s/it]"]


def test_an_unfinished_bar_shown_as_100_percent_keeps_its_signs_of_life():
    # (a review) tqdm rounds 996/1000 to 100%: such a line repeated later is not a finished bar
    log = io.StringIO()
    writer = progress._LineWriter(log)
    writer.write("\rwork: 100%|##| 996/1000 [00:30<00:00, 33.2it/s]")
    writer.write("\rwork: 100%|##| 996/1000 [01:00<00:00, 16.6it/s]")
    assert len(log.getvalue().splitlines()) == 2
