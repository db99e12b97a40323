"""Export from a real store of scored episodes, and load the stored dataset back."""

from __future__ import annotations

import datasets
import pytest

from knowlyr.agents import ExpertAgent, RandomAgent
from knowlyr.errors import ExportError, NotFoundError
from knowlyr.export import export_sft
from knowlyr.export.rewards import store_rewards
from knowlyr.export.store_io import dataset_name, export_from_store, load_dataset, train_filter
from knowlyr.reward.store_io import score_unscored
from knowlyr.rollout import collect
from knowlyr.store import Store
from knowlyr.taskset import sample, split_of
from tests.export.test_cli_documents import rewarded


@pytest.fixture
def scored(tmp_path) -> tuple[Store, list[str]]:
    ids = [t.task_id for t in sample("conversation", 10, seed=0, family="order_status")]
    ids += [t.task_id for t in sample("conversation", 4, seed=0, family="refund")]
    store = Store.open(str(tmp_path / "store"))
    store.add_trajectories(
        collect("knowlyr/conversation", ExpertAgent, len(ids), tasks=ids, seed=0)
        + collect("knowlyr/conversation", lambda: RandomAgent(seed=1), len(ids), tasks=ids, seed=1)
    )
    return store, score_unscored(store).config_hashes


def test_sft_export_keeps_train_split_of_the_family_and_round_trips(scored) -> None:
    store, hashes = scored
    v = store.version("trajectories")
    out = export_from_store(
        store,
        trajectories_version=v,
        reward_config_hashes=hashes,
        kind="sft",
        suite="conversation",
        family="order_status",
    )
    assert out.name == f"sft-conversation-order_status-t{v}-{hashes[0][:8]}"
    trajs = store.read_trajectories(version=v)
    expected = [
        t for t in trajs
        if t.task.task_id.startswith("conversation-order_status-")
        and split_of(t.task.task_id) == "train"
    ]  # fmt: skip
    assert 0 < out.n_in == len(expected) < len(trajs)
    assert out.rows == sum(bool(t.outcome.success) for t in expected) > 0
    assert out.rows + out.rejected == out.n_in
    ds = load_dataset(store, out.name, version=out.manifest.version)
    assert isinstance(ds, datasets.Dataset) and len(ds) == out.rows
    assert ds.to_list() == out.result.dataset.to_list()
    msgs = ds[0]["messages"]
    assert msgs[0]["role"] == "system" and "tool_calls" in msgs[2]
    run = store.runs(stage="export")[-1]
    assert run.params["name"] == out.name and run.params["reward_configs"] == hashes


def test_rewards_of_the_given_configs_reach_the_rows(scored) -> None:
    store, hashes = scored
    out = export_from_store(
        store, trajectories_version=None, reward_config_hashes=hashes, kind="grpo", split=None
    )
    totals = dict(store.read("rewards").select("trajectory_id", "total").iter_rows())
    rows = out.result.dataset.to_list()
    assert rows and all(r["rewards"] == [totals[i] for i in r["trajectory_ids"]] for r in rows)
    per_step = dict(store.read("rewards").select("trajectory_id", "per_step").iter_rows())
    assert all(r["step_rewards"] == [per_step[i] for i in r["trajectory_ids"]] for r in rows)
    assert out.result.card.params["rewards"] == {
        "source": "store", "store": store.url, "trajectories_version": 0,
        "rewards_version": store.version("rewards"), "config_hashes": hashes,
    }  # fmt: skip
    assert store.runs(stage="export")[-1].inputs["rewards"] == store.version("rewards")
    # no config chosen: no trajectory has a reward, which is an error naming the fix
    with pytest.raises(
        ExportError, match=r"have no reward in rewards@0 under no config.*reward score"
    ):
        export_from_store(
            store, trajectories_version=None, reward_config_hashes=[], kind="sft", min_reward=0.1
        )


def test_same_export_as_the_exporter_called_directly(scored) -> None:
    store, hashes = scored
    out = export_from_store(store, trajectories_version=None, reward_config_hashes=hashes)
    trajs = sorted(store.read_trajectories(filter=train_filter()), key=lambda t: t.id)
    assert out.name == dataset_name(
        "sft", trajectories_version=store.version("trajectories"), reward_config_hashes=hashes
    )
    source = store_rewards(store, config_hashes=hashes)
    direct = export_sft(rewarded(trajs, source), rewards=source.totals)
    assert out.result.dataset.to_list() == direct.dataset.to_list()


def test_export_order_does_not_depend_on_the_order_rows_were_written(tmp_path) -> None:
    ids = [t.task_id for t in sample("conversation", 12, seed=3, family="order_status")]
    trajs = collect("knowlyr/conversation", ExpertAgent, len(ids), tasks=ids, seed=0)
    exports = []
    for name, order in (("fwd", trajs), ("rev", trajs[::-1])):
        store = Store.open(str(tmp_path / name))
        for t in order:  # one commit each: the table's row order follows the writes
            store.add_trajectories([t])
        hashes = score_unscored(store).config_hashes
        out = export_from_store(store, trajectories_version=None, reward_config_hashes=hashes)
        exports.append(load_dataset(store, out.name)["trajectory_id"])
    assert exports[0] == exports[1] == sorted(exports[0]) and len(exports[0]) > 1


def test_bad_kind_and_unknown_dataset_name_the_fix(scored) -> None:
    store, hashes = scored
    with pytest.raises(ValueError, match="kind must be one of sft, dpo, grpo"):
        export_from_store(store, trajectories_version=None, reward_config_hashes=hashes, kind="ppo")
    out = export_from_store(store, trajectories_version=None, reward_config_hashes=hashes)
    with pytest.raises(NotFoundError, match=f"no dataset 'sft-typo'.*known: {out.name}"):
        load_dataset(store, "sft-typo")
