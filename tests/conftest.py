"""Suite-wide settings: offline model loading, no telemetry, the real agent logs in tests/data/fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = ROOT / "tests" / "data" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """tests/data/fixtures: real agent logs from public projects (origins in its README)."""
    if not SHARED_FIXTURES.is_dir():
        pytest.fail(
            f"{SHARED_FIXTURES} is missing: the tests read real agent logs from tests/data/fixtures"
        )
    return SHARED_FIXTURES
