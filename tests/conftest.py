"""Test-wide settings."""

import os
import sys
from pathlib import Path

import pytest
import torch

# SimulEval 1.1.4 lives in its own folder (setup.sh installs it there, beside the venv, so that its pinned old
# requirements cannot touch the venv's tools). Appended, not prepended: the venv's packages win.
SIMULEVAL_DIR = Path(__file__).resolve().parents[1] / ".simuleval"
if SIMULEVAL_DIR.is_dir() and str(SIMULEVAL_DIR) not in sys.path:
    sys.path.append(str(SIMULEVAL_DIR))


# The project's data folder (../shared/data beside the repository): tests marked ``data`` read it. A clone without it
# leaves them out of the run (deselected, and said at the end), rather than skipping them one by one.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def pytest_collection_modifyitems(config, items):
    if SHARED_DATA.is_dir():
        return
    kept, left = [], []
    for item in items:
        (left if item.get_closest_marker("data") else kept).append(item)
    if left:
        config._simulmt_leaving_data = True  # (pytest_deselected below: not the default's slow tests)
        config.hook.pytest_deselected(items=left)
        config._simulmt_leaving_data = False
        items[:] = kept
        config._simulmt_left_out = len(left)


# Tests marked ``slow`` (a packaged real model, or minutes of CPU) are left out by default (pyproject.toml's
# ``-m "not slow"``), so that a plain ``pytest`` stays well under 15 minutes; ``-m "slow or not slow"`` runs
# everything, as CI does (.ci/run). The run says how many the default left out (not counted: a run with its own
# ``-m`` or ``-k``, and the ``data`` tests left out above).
SLOW_LEFT_OUT = pytest.StashKey[int]()


def pytest_deselected(items):
    config = items[0].config if items else None
    if (config is None or config.getoption("markexpr") != "not slow" or config.getoption("keyword")
            or getattr(config, "_simulmt_leaving_data", False)):
        return
    config.stash[SLOW_LEFT_OUT] = config.stash.get(SLOW_LEFT_OUT, 0) + sum(
        1 for item in items if item.get_closest_marker("slow"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    left = getattr(config, "_simulmt_left_out", 0)
    if left:
        terminalreporter.write_line(f"{left} test{'s' if left != 1 else ''} marked `data` left out: no {SHARED_DATA} beside this clone")
    slow = config.stash.get(SLOW_LEFT_OUT, 0)
    if slow:
        terminalreporter.write_line(f"{slow} test{'s' if slow != 1 else ''} marked `slow` left out (the default): "
                                    f"-m \"slow or not slow\" runs everything, as CI does")


def without_simuleval(reason: str) -> None:
    """Skip a test that needs SimulEval, where it is missing; in CI (``CI`` set) fail instead: there setup.sh has
    installed it, and a test that can only skip in CI is a defect."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run this test (setup.sh installs SimulEval 1.1.4 into {SIMULEVAL_DIR})",
                    pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def simuleval():
    """SimulEval 1.1.4's instances and latency scorers (``scorers["AL"]`` ...), for cross-checks."""
    import types

    try:
        from simuleval.evaluator import instance
        from simuleval.evaluator.scorers import latency_scorer
    except Exception as exc:  # not installed (setup.sh puts it in .simuleval/, apart from the venv it would break)
        without_simuleval(f"simuleval is not importable ({type(exc).__name__}: {exc}); run setup.sh, which installs "
                          "SimulEval 1.1.4 into .simuleval/")
    return types.SimpleNamespace(instance=instance, scorers=latency_scorer.LATENCY_SCORERS_DICT)


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
