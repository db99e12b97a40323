"""One Prefect test harness for the whole session, with results kept in a fresh folder.

The harness (a temporary Prefect server on SQLite) takes ~10 s to start, so every flow test
shares it. Results and cache records go to a session-temporary folder, so cached results never
leak between test sessions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temporary Prefect API for the session; yields the result storage folder."""
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    results = tmp_path_factory.mktemp("prefect-results")
    with (
        temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: results}),
        prefect_test_harness(server_startup_timeout=60),
    ):
        yield results


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A fresh local store root for one test."""
    return str(tmp_path / "store")
