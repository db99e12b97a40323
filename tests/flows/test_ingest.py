"""``ingest`` on the real agent logs in ../shared/fixtures, under the session Prefect harness."""

from __future__ import annotations

import shutil

import pytest

from flows.ingest import IngestParams, ingest
from knowlyr.store import Store
from tests.flows.helpers import artifact_keys, task_states

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_ingest_fixture_logs_then_rerun_is_cached_and_new_log_recomputes(fixtures_dir, tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(fixtures_dir / "openhands", logs / "openhands")
    shutil.copytree(fixtures_dir / "swe_agent", logs / "swe_agent")
    params = IngestParams(logs=[str(logs)], store_url=str(tmp_path / "store"))

    state = ingest(params, return_state=True)
    report = state.result()
    rec = report.record
    assert rec.new >= 5 and rec.duplicates == 0
    store = Store.open(report.store_url)
    assert store.count("trajectories") == rec.new
    assert report.rewards[0].scored == rec.new == store.count("rewards")
    run_id = state.state_details.flow_run_id
    assert set(task_states(run_id).values()) == {"Completed"}
    assert {"record-counts", "reward-stats"} <= artifact_keys(run_id)

    again = ingest(params, return_state=True)
    assert set(task_states(again.state_details.flow_run_id).values()) == {"Cached"}
    assert again.result().record == rec

    # A new log in the directory changes the input version: the record stage runs again and
    # the already-stored trajectories are duplicates.
    shutil.copytree(fixtures_dir / "knowlyr", logs / "knowlyr")
    third = ingest(params, return_state=True)
    assert set(task_states(third.state_details.flow_run_id).values()) == {"Completed"}
    rec3 = third.result().record
    assert rec3.duplicates == rec.new and rec3.new >= 1
    assert store.count("trajectories") == rec.new + rec3.new
    # Only the new trajectories are scored: the others already have a reward under this config.
    assert third.result().rewards[0].scored == rec3.new
