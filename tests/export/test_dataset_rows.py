"""Dataset rows are stored once and named by manifests: exports that overlap share rows."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from knowlyr.agents import ExpertAgent, RandomAgent
from knowlyr.errors import StoreError
from knowlyr.export import export_sft
from knowlyr.export.store_io import export_from_store, load_dataset
from knowlyr.reward.store_io import score_unscored
from knowlyr.rollout import collect
from knowlyr.store import Store
from knowlyr.taskset import sample
from knowlyr.view.reader import StoreReader


def _episodes(n: int, seed: int, agent=ExpertAgent) -> list:
    ids = [t.task_id for t in sample("conversation", n, seed=seed, family="order_status")]
    return collect("knowlyr/conversation", agent, n, tasks=ids, seed=seed)


@pytest.fixture(scope="module")
def nights() -> tuple[list, list]:
    return _episodes(6, 0), _episodes(6, 1)


def test_a_second_export_over_the_same_trajectories_adds_only_its_new_rows(tmp_path, nights):
    first, second = nights
    store = Store.open(str(tmp_path / "store"))
    store.add_trajectories(first)
    one = export_from_store(
        store,
        trajectories_version=None,
        reward_config_hashes=score_unscored(store).config_hashes,
        split=None,
    )
    stored = store.count("dataset_rows")
    assert stored == one.rows > 0 and store.count("datasets") == 1

    store.add_trajectories(second)  # the next night exports everything again, plus its own
    two = export_from_store(
        store,
        trajectories_version=None,
        reward_config_hashes=score_unscored(store).config_hashes,
        split=None,
    )
    assert two.name != one.name and two.rows > one.rows
    assert store.count("dataset_rows") == two.rows  # the first night's rows were not copied
    assert store.count("datasets") == 2

    # each version still loads as exactly its own rows, in export order
    assert load_dataset(store, one.name).to_list() == one.result.dataset.to_list()
    at_two = load_dataset(store, two.name, version=two.manifest.version)
    assert at_two.to_list() == two.result.dataset.to_list()
    with pytest.raises(Exception, match="no dataset"):
        load_dataset(store, two.name, version=one.manifest.version)  # not there yet

    # lineage of the dataset version names the trajectories behind its rows, no others
    lin = store.lineage(f"datasets@{two.manifest.version}")
    assert set(lin.trajectory_ids) == set(at_two["trajectory_id"])


def test_preference_rows_name_both_sides(tmp_path, nights):
    store = Store.open(str(tmp_path / "store"))
    good = nights[0]
    ids = [t.task.task_id for t in good]
    bad = collect("knowlyr/conversation", lambda: RandomAgent(seed=2), len(ids), tasks=ids, seed=0)
    store.add_trajectories(good + bad)
    out = export_from_store(
        store,
        trajectories_version=None,
        reward_config_hashes=score_unscored(store).config_hashes,
        kind="dpo",
        split=None,
    )
    rows = out.result.dataset.to_list()
    assert rows
    manifest = store.read("datasets").row(0, named=True)
    sides = {r["chosen_id"] for r in rows} | {r["rejected_id"] for r in rows}
    assert set(manifest["trajectory_ids"]) == sides and manifest["n_rows"] == len(rows)


def test_a_store_written_before_manifests_still_loads_and_takes_new_exports(tmp_path, nights):
    store = Store.open(str(tmp_path / "store"))
    old_trajs = nights[0]
    store.add_trajectories(old_trajs)
    legacy = export_sft(old_trajs).dataset.to_list()
    old = []
    for i, row in enumerate(legacy):  # the layout earlier versions wrote: one row per row
        data = orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
        old.append(
            {
                "dataset": "sft-legacy",
                "row_id": f"{i}:{hashlib.sha256(data).hexdigest()[:16]}",
                "kind": "sft",
                "split": "train",
                "trajectory_id": row["trajectory_id"],
                "data": data.decode(),
            }
        )
    store.append("datasets", old[::-1])  # physical order must not matter
    assert load_dataset(store, "sft-legacy").to_list() == legacy

    store.add_trajectories(nights[1])
    new = export_from_store(
        store,
        trajectories_version=None,
        reward_config_hashes=score_unscored(store).config_hashes,
        split=None,
    )
    assert load_dataset(store, new.name).to_list() == new.result.dataset.to_list()
    assert load_dataset(store, "sft-legacy").to_list() == legacy
    assert store.count("datasets") == len(legacy) + 1

    tid = legacy[0]["trajectory_id"]
    seen = StoreReader(str(tmp_path / "store")).datasets(tid)
    assert {(d["dataset"], d["rows"]) for d in seen} == {("sft-legacy", 1), (new.name, 1)}
    assert set(store.lineage(f"datasets@{new.manifest.version}").trajectory_ids) == {
        r["trajectory_id"] for r in new.result.dataset.to_list()
    }


def test_a_manifest_naming_rows_the_store_lacks_is_a_clear_error(tmp_path, nights):
    store = Store.open(str(tmp_path / "store"))
    store.append(
        "datasets",
        [{"dataset": "sft-broken", "rows_hash": "x", "kind": "sft", "split": "train",
          "n_rows": 1, "row_hashes": ["ab" * 32], "trajectory_ids": []}],
    )  # fmt: skip
    with pytest.raises(StoreError, match=r"dataset 'sft-broken' names 1 row.*dataset_rows"):
        load_dataset(store, "sft-broken")
