"""The viewer over real HTTP on loopback: list filters, trajectory and pair pages, bad input,
blobs, and that browsing never changes the store."""

from __future__ import annotations

import html
import re

import orjson
import polars as pl
import pytest

from tests.view.conftest import Served, tree
from tests.view.demo_store import JUDGEMENTS

_ROW_ID = re.compile(r'<td class="mono"><a href="/t/([0-9a-f]{64})')


def listed(client, **params) -> list[str]:
    """Trajectory ids on the list page for ``params``, in order."""
    r = client.get("/", params=params)
    assert r.status_code == 200, r.text
    return _ROW_ID.findall(r.text)


def text(r) -> str:
    """The page's text with tags dropped and entities unescaped (whitespace collapsed)."""
    body = r.text.split("</head>", 1)[-1]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def test_list_shows_every_trajectory_and_filters(http, demo):
    index = demo.store.read("trajectories", columns=["id", "task_id", "agent", "success"])
    assert sorted(listed(http)) == sorted(index["id"].to_list())
    calc = {demo.fixed.id, demo.rewrite.id, demo.gave_up.id}
    assert set(listed(http, task="calc-add")) == calc
    assert listed(http, task="calc-add", outcome="success") == [demo.fixed.id]
    assert set(listed(http, task="calc", outcome="failure")) == calc - {demo.fixed.id}
    unknown = index.filter(pl.col("success").is_null())["id"].to_list()
    assert unknown and sorted(listed(http, outcome="unknown")) == sorted(unknown)
    # agent matches names and models
    assert listed(http, agent="gpt-4o-mini") == [demo.rewrite.id]
    swe = index.filter(pl.col("agent").str.contains("swe-agent"))["id"].to_list()
    assert sorted(listed(http, agent="swe-agent")) == sorted(swe)  # mini-swe-agent too
    assert len(swe) > len(index.filter(pl.col("agent") == "swe-agent"))
    # a run: the collect run added the demo's four trajectories, ingest the real logs
    assert set(listed(http, run=demo.collect_run)) == calc | {demo.browser.id}
    assert set(listed(http, run=demo.ingest_run[:10])) == set(index["id"]) - calc - {
        demo.browser.id
    }
    # store version: the ingest was version 0
    v0 = demo.store.read("trajectories", version=0, columns=["id"])["id"].to_list()
    assert sorted(listed(http, version="0")) == sorted(v0) and len(v0) < index.height


def test_list_reward_filter_sort_and_pages(http, demo):
    rewards = (
        demo.store.read("rewards", columns=["trajectory_id", "total", "created_at"])
        .sort("created_at")
        .group_by("trajectory_id")
        .last()
    )
    latest = dict(zip(rewards["trajectory_id"], rewards["total"], strict=True))
    by_reward = sorted(latest, key=lambda i: (-latest[i], i))
    assert listed(http, sort="-reward") == by_reward
    assert listed(http, sort="reward") == sorted(latest, key=lambda i: (latest[i], i))
    # the calc attempts show their newest reward (rules + judge), not the rules-only one
    assert latest[demo.fixed.id] > latest[demo.gave_up.id] > latest[demo.rewrite.id]
    lo, hi = 0.4, 0.95
    assert listed(http, reward_min=lo, reward_max=hi, sort="-reward") == [
        i for i in by_reward if lo <= latest[i] <= hi
    ]
    pages = [listed(http, sort="-reward", per_page=5, page=p) for p in (1, 2, 3)]
    assert [len(p) for p in pages] == [5, 5, len(latest) - 10]
    assert [i for p in pages for i in p] == by_reward
    r = http.get("/", params={"sort": "-reward", "per_page": 5, "page": 2})
    assert "page 2 of 3" in text(r) and "?sort=-reward&amp;page=3&amp;per_page=5" in r.text
    assert listed(http, sort="-reward", per_page=5, page=9) == []


@pytest.mark.parametrize(
    ("params", "status", "says"),
    [
        ({"reward_min": "high"}, 400, "reward_min='high' is not a number"),
        ({"reward_min": "0.9", "reward_max": "0.1"}, 400, "reward_min=0.9 is above reward_max=0.1"),
        ({"outcome": "maybe"}, 400, "outcome='maybe': expected one of success, failure, unknown"),
        ({"sort": "colour"}, 400, "sort='colour': expected one of"),
        ({"page": "0"}, 400, "page=0 is out of range"),
        ({"per_page": "5000"}, 400, "per_page=5000 is out of range: it must be between 1 and 200"),
        ({"version": "v2"}, 400, "version='v2' is not a whole number"),
        ({"colour": "red"}, 400, "unknown list parameter(s) 'colour'"),
        ({"run": "nosuchrun"}, 404, "no run 'nosuchrun'"),
        ({"version": "99"}, 404, "has no trajectories version 99 (latest: 1)"),
    ],
)
def test_bad_list_filters_answer_a_clear_page(http, params, status, says):
    r = http.get("/", params=params)
    assert r.status_code == status
    assert r.headers["content-type"].startswith("text/html")
    assert says in text(r) and "Traceback" not in r.text


def test_trajectory_page_steps_rewards_and_rationale(http, demo):
    t = demo.fixed
    r = http.get(f"/t/{t.id}")
    assert r.status_code == 200
    page = text(r)
    assert t.task.instruction in page
    for s in t.steps:  # each step's thought and tool
        assert s.thought in page
        assert f"step {s.index} {s.action.tool}" in page
    # the newest reward row (rules + judge) gives each step's reward, facets and rationale
    row = (
        demo.store.read("rewards", filter=pl.col("trajectory_id") == t.id)
        .sort("created_at")
        .row(-1, named=True)
    )
    assert row["judge"] == "openai:demo-judge"
    step_rubrics = orjson.loads(row["step_rubrics"])
    for i, (reward, facets) in enumerate(zip(row["per_step"], step_rubrics, strict=True)):
        block = page.split(f"step {i} {t.steps[i].action.tool}", 1)[1]
        block = block.split(f"step {i + 1} ", 1)[0]
        assert block.startswith(f" reward {reward:.3f}")
        for name, v in facets.items():  # not applicable (None): left out
            assert (f"{name} {v:.2f}" in block) if v is not None else f"{name} " not in block
    for needle, _, why in JUDGEMENTS:  # every step's rationale, none of the other attempt's
        assert (why in page) == (needle != "abs(a - b)"), needle
    assert f"{row['total']:.3f}" in page and row["config_hash"][:12] in page
    # the edit as a diff, the long pytest output folded, the outcome and its source
    assert '<div class="del">-    return a - b</div>' in r.text
    assert '<div class="add">+    return a + b</div>' in r.text
    assert "<details><summary>output: 44 lines" in r.text
    assert "success score 1.00 · source: env" in page
    # lineage: the collect run, the SFT dataset it went into, its preference pairs
    assert f"/?run={demo.collect_run}" in r.text and "collect" in page
    assert demo.dataset in page
    pairs = demo.store.read("preferences", filter=pl.col("chosen_id") == t.id)
    assert pairs.height == 2
    for pid in pairs["pair_id"]:
        assert f'href="/pair/{pid}"' in r.text
    assert f'href="/compare/{t.id}/{demo.rewrite.id}"' in r.text


def test_trajectory_page_of_an_ingested_log_links_its_raw_log(http, demo):
    row = demo.store.read(
        "trajectories",
        filter=pl.col("source_format") == "swe_agent",
        columns=["id", "source_blob", "n_steps"],
    ).row(0, named=True)
    r = http.get(f"/t/{row['id'][:10]}")  # a prefix works
    assert r.status_code == 200 and row["id"] in r.text
    assert r.text.count('<div class="step">') == row["n_steps"]
    assert f'href="/blob/{row["source_blob"]}"' in r.text
    raw = http.get(f"/blob/{row['source_blob']}")
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/plain")
    assert raw.content == demo.store.get_blob(row["source_blob"])
    assert f"/?run={demo.ingest_run}" in r.text


def test_browser_step_shows_its_screenshot(http, demo):
    r = http.get(f"/t/{demo.browser.id}")
    assert f'<img class="shot" src="/blob/{demo.screenshot}"' in r.text
    img = http.get(f"/blob/{demo.screenshot}")
    assert img.headers["content-type"] == "image/png"
    assert img.content == demo.store.get_blob(demo.screenshot)


def test_other_reward_config_and_time_travel(http, demo):
    rules = demo.store.read(
        "rewards", filter=(pl.col("trajectory_id") == demo.fixed.id) & pl.col("judge").is_null()
    ).row(0, named=True)
    r = http.get(f"/t/{demo.fixed.id}", params={"config": rules["config_hash"][:8]})
    page = text(r)
    assert r.status_code == 200 and "judge's rationale" not in page
    assert f"step 2 edit_file reward {rules['per_step'][2]:.3f}" in page
    old = demo.store.read("trajectories", version=0, columns=["id"])["id"][0]
    assert http.get(f"/t/{old}", params={"version": 0}).status_code == 200
    r = http.get(f"/t/{demo.fixed.id}", params={"version": 0})  # added at version 1
    assert r.status_code == 404 and "in trajectories@0 of" in text(r)


def test_pair_pages(http, demo):
    r = http.get(f"/compare/{demo.rewrite.id}/{demo.fixed.id}")
    assert r.status_code == 200
    page = text(r)
    stored = demo.store.read(
        "preferences",
        filter=(pl.col("chosen_id") == demo.fixed.id) & (pl.col("rejected_id") == demo.rewrite.id),
    ).row(0, named=True)
    # chosen is the successful fix whichever way round it was asked for; margin and reason
    # come from the stored pair
    assert f"chosen {demo.fixed.id[:12]} · expert" in page
    assert f"rejected {demo.rewrite.id[:12]} · gpt" in page
    assert f"margin {stored['margin']:.3f}" in page and stored["reason"] in page
    assert (
        "chosen succeeded, rejected failed" in page and f"stored pair {stored['pair_id']}" in page
    )
    assert "first difference step 1" in page
    assert '<tr class="first-diff">' in r.text and "abs(a - b)" in page
    assert http.get(f"/pair/{stored['pair_id']}").text == r.text
    # a pair the reward stage did not store is decided by its rule on the newest rewards
    swe = demo.store.read("trajectories", columns=["id", "task_id"]).filter(
        pl.col("task_id").str.contains("test-repo-i1")
    )
    a, b = swe["id"].to_list()
    assert swe["task_id"][0] != swe["task_id"][1]  # two tasks: refused
    r = http.get(f"/compare/{a}/{b}")
    assert r.status_code == 400 and "a pair compares two trajectories of one task" in text(r)


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/t/" + "0" * 64, 404, "no trajectory 0000000000000000"),
        ("/t/not-a-hash", 400, "is not a content hash"),
        ("/t/abc123", 400, "too short: give at least 8 characters"),
        ("/t/{fixed}?color=1", 400, "unknown parameter(s) 'color'"),
        ("/t/{fixed}?version=-1", 400, "version=-1 must be >= 0"),
        ("/t/{fixed}?config=ffff", 400, "has no reward under that config"),
        ("/compare/{fixed}/{fixed}", 400, "two different trajectories"),
        ("/pair/" + "1" * 24, 404, "no preference pair"),
        ("/blob/" + "2" * 64, 404, "no blob"),
        ("/blob/xyz", 400, "not a sha256 hex digest"),
        ("/no/such/page", 404, "no page /no/such/page"),
    ],
)
def test_bad_ids_answer_404_or_400_pages(http, demo, path, status, says):
    r = http.get(path.format(fixed=demo.fixed.id))
    assert r.status_code == status
    assert r.headers["content-type"].startswith("text/html")
    assert says in text(r) and "Traceback" not in r.text


def test_a_store_that_does_not_exist_is_a_404_page(tmp_path):
    from knowlyr.view import create_app

    missing = tmp_path / "nowhere"
    app = create_app(str(missing))
    with Served(app) as client:
        assert app.state.warmed.wait(10)  # the start-up warm-up survives a missing store
        for path in ("/", "/t/" + "a" * 64):
            r = client.get(path)
            assert r.status_code == 404
            assert f"no store at {missing}" in text(r) and "Traceback" not in r.text
    assert not missing.exists()  # and nothing was created


def test_browsing_never_writes_the_store(http, demo, demo_files):
    """Every kind of page (and blob) was served by now and again here: no file changed."""
    for path in (
        "/",
        "/?sort=-reward&outcome=success",
        f"/t/{demo.fixed.id}",
        f"/compare/{demo.fixed.id}/{demo.gave_up.id}",
        f"/blob/{demo.screenshot}",
    ):
        assert http.get(path).status_code == 200
    assert tree(demo.store.root) == demo_files
