"""``collect`` on ``knowlyr/browser``: the flow reaches the browser env through the registry."""

from __future__ import annotations

import pytest

from flows.collect import CollectParams, collect
from knowlyr.store import Store

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_collect_runs_browser_episodes_into_the_store(store_url, monkeypatch):
    from knowlyr.browser.chromium import find_chromium
    from knowlyr.errors import BackendUnavailableError

    try:
        find_chromium()
    except BackendUnavailableError as e:
        pytest.skip(str(e))
    monkeypatch.setenv("KNOWLYR_STORE", store_url)  # where a deployment's env keeps screenshots
    params = CollectParams(
        env_id="knowlyr/browser",
        suite="browser",
        family="docs_default",
        split="heldout",
        episodes=3,
        shards=1,
        store_url=store_url,
    )
    report = collect(params)
    assert report.episodes == 3 and report.successes == 3
    trajs = Store.open(store_url).read_trajectories()
    assert len(trajs) == 3 and {t.task.domain for t in trajs} == {"browser"}
    assert all(t.steps[-1].tool == "submit" for t in trajs)


def test_envs_that_keep_blobs_get_the_collections_store():
    from tasks.collect import with_store

    assert with_store("knowlyr/browser", "/s", None) == {"store": "/s"}
    assert with_store("knowlyr/browser", "/s", {"store": "/t"}) == {"store": "/t"}
    assert with_store("knowlyr/conversation", "/s", {"family": "x"}) == {"family": "x"}
    assert with_store("http://127.0.0.1:1/knowlyr/conversation", "/s", None) == {}
