"""``ingest`` on the real agent logs in tests/data/fixtures, under the session Prefect harness."""

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


def test_ingest_with_results_labels_outcomes_and_a_new_results_file_recomputes(tmp_path):
    from tests.store._labels import chat_log, write_jsonl, write_summary

    logs = write_jsonl(
        tmp_path / "logs" / "runs.jsonl",
        [chat_log("inst-a", "run_1"), chat_log("inst-a", "run_2"), chat_log("inst-b", "run_1")],
    )
    summary = write_summary(tmp_path / "m.run1.json", resolved_ids=["inst-a"])
    params = IngestParams(
        logs=[str(logs)], store_url=str(tmp_path / "store"), results=[str(summary)]
    )
    state = ingest(params, return_state=True)
    rec = state.result().record
    assert rec.new == 3 and rec.labels is not None
    assert (rec.labels.applied, rec.labels.unknown) == (2, [])
    store = Store.open(rec.trajectories.store)
    resolved = {t.outcome.resolved for t in store.read_trajectories() if t.task.task_id == "inst-a"}
    assert resolved == {True} and store.version("trajectories") == 0
    assert "label-counts" in artifact_keys(state.state_details.flow_run_id)

    # labels that arrive later are a changed input: the record stage runs again and labels the
    # stored trajectories (one new version) without adding any
    later = write_summary(tmp_path / "m.run2.json", unresolved_ids=["inst-b", "inst-z"])
    params2 = params.model_copy(update={"results": [str(summary), str(later)]})
    rec2 = ingest(params2)
    assert rec2.record.new == 0 and rec2.record.labels is not None
    assert (rec2.record.labels.applied, rec2.record.labels.unchanged) == (1, 2)
    assert rec2.record.labels.unknown == ["inst-z"]
    assert rec2.record.version == 1 == store.version("trajectories")
