"""Scoring the store's trajectories and pairing them, on a real store of real episodes."""

from __future__ import annotations

import pytest

from knowlyr.agents import ExpertAgent, RandomAgent
from knowlyr.reward.store_io import engine_for, preferences_from_store, score_unscored
from knowlyr.rollout import collect
from knowlyr.store import Store
from knowlyr.taskset import sample


@pytest.fixture
def store(tmp_path) -> Store:
    ids = [t.task_id for t in sample("conversation", 6, seed=0, family="order_status")]
    store = Store.open(str(tmp_path / "store"))
    store.add_trajectories(
        collect("knowlyr/conversation", ExpertAgent, 6, tasks=ids, seed=0)
        + collect("knowlyr/conversation", lambda: RandomAgent(seed=1), 6, tasks=ids, seed=1)
    )
    return store


def test_scores_only_what_is_unscored_and_records_the_config(store: Store) -> None:
    v = store.version("trajectories")
    first = score_unscored(store, trajectories_version=v)
    assert len(first.rewards) == 12 and first.manifest is not None
    assert first.config_hashes == [engine_for("conversation").config_hash]
    stored = store.read("rewards")
    assert stored.height == 12 and set(stored["config_hash"]) == set(first.config_hashes)
    again = score_unscored(store, trajectories_version=v)
    assert again.rewards == [] and again.manifest is None
    assert again.config_hashes == first.config_hashes
    other = score_unscored(store, trajectories_version=v, outcome_weight=0.9)
    assert len(other.rewards) == 12 and other.config_hashes != first.config_hashes


def test_shards_partition_the_trajectories(store: Store) -> None:
    parts = [score_unscored(store, shard=s, n_shards=3) for s in range(3)]
    ids = [r.trajectory_id for p in parts for r in p.rewards]
    assert len(ids) == len(set(ids)) == 12
    with pytest.raises(ValueError, match="shard must be in"):
        score_unscored(store, shard=3, n_shards=3)


def test_unknown_domain_profile_falls_back_to_generic() -> None:
    assert engine_for("no-such-domain").config["profile"] == engine_for("generic").config["profile"]


def test_preferences_pair_expert_over_random_runs_of_one_task(store: Store) -> None:
    res = score_unscored(store)
    m = preferences_from_store(store, reward_config_hashes=res.config_hashes, min_margin=0.05)
    assert m is not None
    prefs = store.read("preferences")
    assert prefs.height > 0
    chosen = store.read("rewards").select("trajectory_id", "agent")
    agents = prefs.join(chosen, left_on="chosen_id", right_on="trajectory_id")["agent"]
    assert set(agents.to_list()) == {"expert"}
    assert preferences_from_store(store, reward_config_hashes=["nope"]) is None
    assert store.read("preferences").height == prefs.height
