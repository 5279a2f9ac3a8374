"""Shared test setup: one CPU thread (the test machine is shared) and a fixed seed per test."""

from __future__ import annotations

import pytest
import torch

import background_runs
import docs_build
from ci_strict import pytest_runtest_makereport, pytest_terminal_summary

__all__ = ["pytest_runtest_makereport", "pytest_terminal_summary"]  # hooks: skips fail under CI
pytest_plugins = ["pytester", "mlflow_server"]  # mlflow_server: the tracker tests' MLflow server

torch.set_num_threads(1)


@pytest.hookimpl(trylast=True)  # after -k / -m deselected theirs: start only what the selected tests need
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The docs tests run last, and the site they check starts building now, in the background
    (tests/docs_build.py): executing the tutorials overlaps the rest of the suite. Before them, the tests whose runs
    go in the background after the build (``@pytest.mark.background``, tests/background_runs.py)."""
    docs = [item for item in items if item.path.parent.name == "docs" and item.path.parent.parent.name == "tests"]
    waiting = [item for item in items if item.get_closest_marker("background") and item not in docs]
    if docs or waiting:
        items[:] = [item for item in items if item not in docs and item not in waiting] + waiting + docs
    if docs:
        docs_build.start()
    if waiting:
        background_runs.start([str(item.get_closest_marker("background").args[0]) for item in waiting])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    docs_build.stop()
    background_runs.stop()


@pytest.fixture(autouse=True)
def _seed_torch() -> None:
    """Every test starts from the same torch RNG state, so failures reproduce."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _token_cache_in_a_temporary_folder(tmp_path_factory: pytest.TempPathFactory):
    """Token caches (attnkit.data.cache) go to a temporary folder, never to ~/.cache/attnkit; the
    environment variable reaches the processes that tests start."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTNKIT_CACHE", str(tmp_path_factory.mktemp("attnkit-cache")))
    yield
    mp.undo()
