"""Shared test fixtures."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Run a test on one torch thread: small graphs run fastest and steadiest that way, and the
    suite shares 2 cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
