"""One real headless Chromium for the browser tests, and an env driving it.

The browser starts once per session (~0.5 s); every env built from ``browser_env`` shares it,
one episode at a time. Tests that kill a browser make their own env (which starts its own).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from knowlyr.errors import BackendUnavailableError


@pytest.fixture(scope="session")
def chromium() -> Iterator:
    from knowlyr.browser.chromium import Chromium, find_chromium

    try:
        find_chromium()
    except BackendUnavailableError as e:
        pytest.skip(str(e))
    with Chromium() as browser:
        yield browser


@pytest.fixture(scope="session")
def browser_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("browser-store") / "store")


@pytest.fixture(scope="module")
def browser_env(chromium, browser_store) -> Iterator:
    """A ``knowlyr/browser`` env (recorded) on the shared browser; 5 s per step."""
    import knowlyr

    env = knowlyr.make("knowlyr/browser", browser=chromium, store=browser_store, step_timeout=5)
    yield env
    env.close()
