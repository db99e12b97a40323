"""The links reports (the Prefect artifacts) make into the viewer: best, worst, most changed."""

from __future__ import annotations

import polars as pl

from knowlyr.view.links import added_ids, highlights, highlights_markdown, trajectory_url


def latest_rewards(store) -> dict[str, float]:
    df = (
        store.read("rewards", columns=["trajectory_id", "total", "created_at"])
        .sort("created_at")
        .group_by("trajectory_id")
        .last()
    )
    return dict(zip(df["trajectory_id"], df["total"], strict=True))


def test_highlights_of_a_batch(demo):
    batch = [demo.fixed.id, demo.rewrite.id, demo.gave_up.id, demo.browser.id]
    rewards = latest_rewards(demo.store)
    h = highlights(demo.store, batch)
    assert h.scored == 4
    assert h.best["id"] == max(batch, key=rewards.get)
    assert h.worst["id"] == min(batch, key=rewards.get) == demo.rewrite.id
    # no task of the batch was seen before it: the widest gap between attempts, worse first
    assert h.changed_kind == "between two attempts at the same task"
    assert [r["id"] for r in h.changed] == [demo.rewrite.id, demo.fixed.id]


def test_most_changed_against_earlier_trajectories_of_the_task(demo):
    h = highlights(demo.store, [demo.gave_up.id])
    assert h.changed_kind == "against an earlier trajectory of the same task"
    rewards = latest_rewards(demo.store)
    before, after = h.changed
    assert after["id"] == demo.gave_up.id
    gap = {t.id: abs(rewards[t.id] - rewards[demo.gave_up.id]) for t in (demo.fixed, demo.rewrite)}
    assert before["id"] == max(gap, key=gap.get)


def test_markdown_links_pages_and_embeds_the_steps_that_differ(demo, monkeypatch):
    monkeypatch.setenv("KNOWLYR_VIEW_URL", "http://127.0.0.1:9999/")
    md = highlights_markdown(demo.store, [demo.fixed.id, demo.rewrite.id, demo.gave_up.id])
    assert f"- best: [`{demo.fixed.id[:12]}`](http://127.0.0.1:9999/t/{demo.fixed.id})" in md
    assert f"- worst: [`{demo.rewrite.id[:12]}`]({trajectory_url(demo.rewrite.id)})" in md
    assert f"(http://127.0.0.1:9999/compare/{demo.fixed.id}/{demo.rewrite.id})" in md
    assert f"knowlyr view --store {demo.store.url}" in md
    # the two attempts share step 0; from step 1 they differ, and those steps are inline
    assert "They are the same up to step 1; from there:" in md
    assert "- step 1 · **read_file** `calc.py` · → exit 0 `def add(a, b): ⏎" in md
    assert "- step 1 · **write_file** `calc.py`" in md
    assert "- step 2 · **edit_file** `calc.py`" in md and "… 1 more steps" in md
    assert "  - edit: `-    return a - b` `+    return a + b`" in md  # the diff, inline
    assert "**worse**: [`" in md and "**better**: [`" in md
    per_step = (
        demo.store.read("rewards", filter=pl.col("trajectory_id") == demo.fixed.id)
        .sort("created_at")["per_step"][-1]
        .to_list()
    )
    assert f"reward {per_step[2]:.2f}" in md.split("**edit_file**", 1)[1].split("\n")[0]


def test_markdown_without_rewards_and_added_ids(demo):
    assert "No trajectory of this batch has a reward yet." in highlights_markdown(
        demo.store, ["f" * 64]
    )
    assert "No new trajectory in this batch." in highlights_markdown(demo.store, [])
    one = highlights_markdown(demo.store, [demo.browser.id])  # its task has no other
    assert (
        "- most changed: none, no two trajectories of one task differ in reward (1 scored)" in one
    )
    assert "- worst:" not in one
    v1 = demo.store.read("trajectories", columns=["id"])["id"].to_list()
    v0 = demo.store.read("trajectories", version=0, columns=["id"])["id"].to_list()
    assert sorted(added_ids(demo.store, 1)) == sorted(set(v1) - set(v0))
    assert sorted(added_ids(demo.store, 0)) == sorted(v0) and added_ids(demo.store, -1) == []


def test_a_best_and_a_worst_that_tie_are_one_line_that_says_so(demo, monkeypatch):
    import knowlyr.view.links as links

    real = highlights(demo.store, [demo.fixed.id, demo.rewrite.id])
    tied = dict(real.worst, reward=real.best["reward"])
    monkeypatch.setattr(
        links,
        "highlights",
        lambda store, ids: links.Highlights(scored=2, best=real.best, worst=tied),
    )
    md = highlights_markdown(demo.store, [demo.fixed.id, demo.rewrite.id])
    assert "- best and worst: every scored trajectory of the batch (2) has reward" in md
    assert "- best:" not in md and "- worst:" not in md
