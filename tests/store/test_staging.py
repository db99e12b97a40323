"""Staging episodes as raw blobs and adding them to the trajectories table."""

from __future__ import annotations

from knowlyr.agents.spec import agent_factory
from knowlyr.rollout import collect
from knowlyr.store import Store
from knowlyr.store.staging import StagedBlob, add_staged, stage_trajectories


def test_staged_episodes_dedup_keep_their_source_and_reject_bad_lines(tmp_path) -> None:
    store = Store.open(str(tmp_path / "store"))
    trajs = collect("knowlyr/conversation", agent_factory("expert"), 4, seed=0)
    blob = stage_trajectories(store, trajs)
    assert store.get_blob(blob).count(b"\n") == 4
    bad = store.put_blob(store.get_blob(blob).splitlines()[0] + b"\n{not json}\n")
    res = add_staged(
        store, [StagedBlob(blob, "collect:conv:expert"), StagedBlob(bad, "collect:conv:bad")]
    )
    assert res.read == 5 and res.trajectories.new == 4 and res.trajectories.duplicates == 1
    assert [r["line"] for r in res.rejected] == [2]
    assert res.rejected[0]["reason"].startswith("invalid trajectory:")
    assert store.read("rejected")["reason"].to_list() == [res.rejected[0]["reason"]]
    assert store.get_blob(res.rejected[0]["raw_blob"]) == b"{not json}"
    t = store.get_trajectory(trajs[2].id)
    assert (t.source.blob, t.source.line, t.source.path) == (blob, 3, "collect:conv:expert")
    run = store.runs(stage="collect")[-1]
    assert run.params == {"raw_blobs": [blob, bad], "episodes": 5}
    again = add_staged(store, [StagedBlob(blob, "x")], stage="collect")
    assert again.trajectories.new == 0 and again.trajectories.version == res.trajectories.version
