"""Test-wide settings."""

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """Tiny models gain nothing from threads, and lose much when other processes share the CPUs."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
