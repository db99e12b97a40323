"""``collect``: episodes fanned out through the task runner, deduplicated into the store."""

from __future__ import annotations

import pytest

from flows.collect import CollectParams, collect
from knowlyr.store import Store
from tests.flows.helpers import artifact_keys, task_states

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_collect_fans_out_shards_and_a_new_seed_recollects(store_url):
    params = CollectParams(episodes=12, shards=3, store_url=store_url)
    state = collect(params, return_state=True)
    report = state.result()
    assert report.episodes == 12 and report.successes == 12  # the scripted expert
    assert report.trajectories.new == 12
    states = task_states(state.state_details.flow_run_id)
    assert sorted(n for n in states if n.startswith("collect-")) == [
        f"collect-knowlyr/conversation-expert-4ep-s{i}" for i in range(3)
    ]
    assert set(states.values()) == {"Completed"}
    assert "collect-counts" in artifact_keys(state.state_details.flow_run_id)
    # Every stored trajectory points back to the raw episode log it was recorded from.
    store = Store.open(report.store_url)
    trajs = store.read_trajectories()
    assert len(trajs) == 12 and all(store.has_blob(t.source.blob) for t in trajs)

    # Another seed samples other tasks: everything downstream of sampling recomputes.
    other = collect(params.model_copy(update={"seed": 1}), return_state=True)
    assert set(task_states(other.state_details.flow_run_id).values()) == {"Completed"}
    assert store.count("trajectories") == 12 + other.result().trajectories.new


def test_a_store_deleted_and_recreated_at_the_same_path_is_not_served_stale_cache(store_url):
    import shutil

    params = CollectParams(episodes=4, shards=2, seed=3, store_url=store_url)
    first = collect(params, return_state=True)
    again = collect(params, return_state=True)
    states = task_states(again.state_details.flow_run_id)
    assert states and set(states.values()) == {"Cached"}, states

    # `rm -rf .knowlyr/store && make run`: the cached manifests point at versions that are
    # gone, so the stages that read or write the store run again into the new one.
    shutil.rmtree(store_url)
    fresh = collect(params, return_state=True)
    states = task_states(fresh.state_details.flow_run_id)
    assert {n: s for n, s in states.items() if not n.startswith("sample-")} and all(
        s == "Completed" for n, s in states.items() if not n.startswith("sample-")
    ), states
    report = fresh.result()
    assert report.trajectories.new == 4 == Store.open(store_url).count("trajectories")
    assert report.trajectories.version == first.result().trajectories.version == 0


def test_a_mix_splits_tasks_over_sources_and_repeats_each_task_per_attempt(store_url):
    from flows.collect import TaskSource

    mix = [
        TaskSource(env_id="knowlyr/conversation", suite="conversation", family="order_status"),
        TaskSource(env_id="knowlyr/advisory", suite="advisory"),
    ]
    params = CollectParams(mix=mix, episodes=12, attempts=2, shards=1, store_url=store_url)
    report = collect(params, return_state=True).result()
    assert [len(s.task_ids) for s in report.samples] == [3, 3]
    assert [s.suite for s in report.samples] == ["conversation", "advisory"]
    assert report.episodes == 12 and report.successes == 12
    # the greedy expert's two attempts at a task are the same trajectory: one row, deduplicated
    assert report.trajectories.new == 6 and report.trajectories.duplicates == 6

    # weighted sources (iterate's frontier curriculum) share the tasks by weight
    heavy = [mix[0].model_copy(update={"weight": 0.5}), mix[1].model_copy(update={"weight": 2.5})]
    weighted = collect(params.model_copy(update={"mix": heavy, "seed": 7}), return_state=True)
    assert [len(s.task_ids) for s in weighted.result().samples] == [1, 5]


def test_the_champion_agent_needs_a_promoted_checkpoint(store_url):
    from flows.collect import resolve_agent

    assert resolve_agent("expert", store_url) == "expert"
    with pytest.raises(ValueError, match="no checkpoint was promoted"):
        resolve_agent("champion", store_url)
