"""The export's replay window: the exported version's trajectories plus a bounded number of
earlier versions', never the whole store (unless asked for)."""

from __future__ import annotations

import pytest

from knowlyr.agents import ExpertAgent
from knowlyr.reward.store_io import score_unscored
from knowlyr.rollout import collect
from knowlyr.store import Store, TableRef
from knowlyr.taskset import sample
from tasks.export import ExportParams, export_dataset
from tasks.reward import RewardSummary


@pytest.fixture(scope="module")
def three_nights(tmp_path_factory) -> tuple[Store, list[set[str]], list[str]]:
    """A store whose trajectories came in three versions (three nights' collections)."""
    store = Store.open(str(tmp_path_factory.mktemp("window") / "store"))
    nights = []
    for night in range(3):
        ids = [
            t.task_id
            for t in sample("conversation", 4, seed=night, split="train", family="order_status")
        ]
        trajs = collect("knowlyr/conversation", ExpertAgent, len(ids), tasks=ids, seed=night)
        store.add_trajectories(trajs)
        nights.append({t.id for t in trajs})
    return store, nights, score_unscored(store).config_hashes


@pytest.mark.parametrize(("window", "nights"), [(0, [2]), (1, [1, 2]), (None, [0, 1, 2])])
def test_export_takes_the_version_and_its_replay_window(three_nights, window, nights):
    store, added, hashes = three_nights
    v = store.version("trajectories")
    ref = TableRef(
        store=store.url, table="trajectories", version=v, rows=store.count("trajectories")
    )
    rewards = [
        RewardSummary(rewards=None, trajectories=ref, scored=0, config_hashes=hashes, stats={})
    ]
    params = ExportParams(only_success=False, replay_versions=window)
    out = export_dataset.fn(ref, rewards, params)
    manifest = store.read("datasets").filter(store.read("datasets")["dataset"] == out.name)
    expected = set().union(*(added[n] for n in nights))
    assert set(manifest["trajectory_ids"].explode()) == expected
    assert out.rows == len(expected)
