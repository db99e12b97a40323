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


# The slowest files (2-2.5 min each, a minute or less for every other) go to the workers first:
# with `--dist loadfile` a worker takes one file at a time, and one of these picked up last
# leaves the other worker idle until it ends. The Makefile passes --no-loadscope-reorder, which
# keeps this order (xdist would otherwise sort files by their number of tests, putting these
# one-test files last).
_SLOWEST_FIRST = (
    "tests/train/test_closed_loop.py",
    "tests/train/test_grpo_learning.py",
    "tests/flows/test_deployment.py",
    "tests/flows/test_iterate.py",
    "tests/train/test_grpo_reward.py",
    "tests/agents/test_serve.py",
    # ~40 s, ~2 min on a fresh machine (converts SmolLM2's GGUF into the cache first)
    "tests/train/test_smollm2.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(_SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
