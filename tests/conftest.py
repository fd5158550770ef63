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


@pytest.fixture
def loads(monkeypatch, translator) -> list[dict]:
    """Replace the CLI's model loader by the test module's ``translator`` fixture; records each call's arguments."""
    from simulmt import cli

    calls: list[dict] = []

    def load(**kwargs):
        calls.append(kwargs)
        return translator

    monkeypatch.setattr(cli, "_load_translator", load)
    return calls
