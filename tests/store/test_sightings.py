"""Dedup keeps every sighting: which agent and which run produced each trajectory id."""

from __future__ import annotations

from knowlyr.store import Store
from knowlyr.store.staging import StagedBlob, add_staged, stage_trajectories
from knowlyr.trajectory import AgentInfo, Source
from tests.store.conftest import make_traj


def _as(agent: str, path: str, ts: list) -> list:
    return [
        t.model_copy(update={"agent": AgentInfo(name=agent), "source": Source(path=path)})
        for t in ts
    ]


def test_same_trajectories_from_two_runs_are_one_row_and_two_sightings(store: Store) -> None:
    base = [make_traj(i) for i in range(3)]
    a = store.add_trajectories(_as("claude", "runs/a.jsonl", base), run_id="run-a")
    b = store.add_trajectories(_as("gpt", "runs/b.jsonl", base), run_id="run-b")
    assert (a.new, b.new, b.duplicates) == (3, 0, 3)
    assert store.count("trajectories") == 3  # content is stored once, under the first agent
    tid = base[0].rehash().id
    seen = store.sightings(tid)
    assert seen.select("run_id", "agent", "source_path").rows() == [
        ("run-a", "claude", "runs/a.jsonl"),
        ("run-b", "gpt", "runs/b.jsonl"),
    ]
    assert seen["version"].to_list() == [0, 0]  # both left trajectories@0
    assert store.sightings().height == 6


def test_a_run_that_adds_twice_sees_a_trajectory_once(store: Store) -> None:
    ts = [make_traj(i) for i in range(4)]
    store.add_trajectories(ts[:3], run_id="r")
    store.add_trajectories(ts[2:], run_id="r")  # an ingest's next batch repeats ts[2]
    store.add_trajectories(ts[:1])  # no run id: a sighting of its own
    assert sorted(store.sightings()["run_id"].value_counts()["count"].to_list()) == [1, 4]
    # one agent twice within an add is one sighting; two agents are two
    two = [make_traj(9), make_traj(9), *_as("other", "x", [make_traj(9)])]
    store.add_trajectories(two, run_id="s")
    assert sorted(store.sightings(two[0].rehash().id)["agent"].to_list()) == ["other", "scripted"]


def test_staged_collects_name_their_run(store: Store) -> None:
    ts = [make_traj(i) for i in range(2)]
    res = [
        add_staged(store, [StagedBlob(stage_trajectories(store, _as(agent, "", ts)), src)])
        for agent, src in (("expert", "collect:env:expert"), ("random", "collect:env:random"))
    ]
    assert [r.trajectories.new for r in res] == [2, 0]
    runs = {r.run_id: r for r in store.runs(stage="collect")}
    seen = store.sightings()
    assert seen.height == 4 and set(seen["run_id"]) == set(runs)
    assert set(seen["agent"]) == {"expert", "random"}
    assert set(seen["source_path"]) == {"collect:env:expert", "collect:env:random"}


def test_each_ingest_of_the_same_logs_is_a_sighting_under_its_run(
    store: Store, fixtures_dir
) -> None:
    from knowlyr.store.ingest import ingest

    first = ingest(store, [fixtures_dir])
    again = ingest(store, [fixtures_dir])
    assert first.new > 0 and again.new == 0
    seen = store.sightings()
    per_run = dict(seen["run_id"].value_counts().iter_rows())
    assert set(per_run) == {first.run_id, again.run_id} == {r.run_id for r in store.runs()}
    assert per_run[first.run_id] == per_run[again.run_id] == seen["trajectory_id"].n_unique()
    assert set(seen["trajectory_id"]) == store.trajectory_ids()
    assert seen["source_path"].null_count() == 0
