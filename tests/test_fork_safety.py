"""A process forked while another thread fits or scores (a fork Pool, a forking server beside a
training thread) must not wait for that thread, which does not exist in the child (a
multiprocessing audit: the child's fit or score hung for good)."""
from __future__ import annotations

import os
import signal
import threading
import warnings

import pytest
import torch

from et_graph.training.engine import private_rng
from et_graph.training.modes import evaluation_mode

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")


@pytest.mark.parametrize("busy", ["fit", "score"])
def test_a_child_forked_beside_a_busy_thread_does_not_wait_for_it(busy):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))

    def block():
        return private_rng(1) if busy == "fit" else evaluation_mode(model)

    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with block():
            inside.set()
            release.wait(60)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert inside.wait(30)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # (3.12: fork with threads)
            pid = os.fork()
        if pid == 0:  # the child: a hang ends by the alarm's signal, a failure by status 1
            signal.alarm(20)
            try:
                with block():
                    pass
                with block():  # and again: the child's own hold ends as usual
                    pass
            except BaseException:
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        release.set()
        thread.join()


def test_a_child_forked_inside_a_fit_keeps_the_forking_threads_hold():
    """A DataLoader's workers fork inside a fit: the forking thread holds the lock in the child
    too and releases it there as usual."""
    with private_rng(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            signal.alarm(20)
            try:
                with private_rng(3):  # re-entrant: this thread holds it
                    pass
                from et_graph.training.engine import _PRIVATE_RNG_LOCK

                _PRIVATE_RNG_LOCK.release()  # still its own: a freed lock refuses this
            except BaseException:
                os._exit(1)
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
