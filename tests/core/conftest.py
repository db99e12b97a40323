from __future__ import annotations

import pytest

from tests.core.stub_env import CounterEnv


@pytest.fixture
def env() -> CounterEnv:
    return CounterEnv()
