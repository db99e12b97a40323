"""Outcome labels from evaluations: reading results files, joining at ingest, attaching later."""

from __future__ import annotations

import hashlib
import json
import re

import polars as pl
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.errors import ConfigError, LabelError
from knowlyr.labels import Label, label_outcome, load_labels, read_labels
from knowlyr.store import Store
from knowlyr.store.ingest import ingest
from knowlyr.trajectory import Outcome, Step, TaskInfo, ToolCall, Trajectory
from tests.store._labels import (
    chat_log,
    report,
    write_jsonl,
    write_report_tree,
    write_summary,
)
from tests.store.conftest import make_traj

runner = CliRunner()


# -- reading each kind of results file ---------------------------------------------------------


def test_report_tree_gives_verdicts_and_test_counts(tmp_path) -> None:
    run = write_report_tree(
        tmp_path,
        {
            "a__a-1": report(True, f2p=(2, 0), p2p=(5, 0)),
            "b__b-2": report(False, f2p=(0, 1), p2p=(3, 1)),
            "c__c-3": report(False, applied=False),  # the patch did not apply: no tests ran
        },
    )
    labels = {lab.instance_id: lab for lab in read_labels(run)}
    assert {k: v.resolved for k, v in labels.items()} == {
        "a__a-1": True,
        "b__b-2": False,
        "c__c-3": False,
    }
    assert (labels["a__a-1"].tests_passed, labels["a__a-1"].tests_failed) == (7, 0)
    assert (labels["b__b-2"].tests_passed, labels["b__b-2"].tests_failed) == (3, 2)
    assert labels["c__c-3"].tests_passed is None and labels["c__c-3"].tests_failed is None
    one = run / "openai__gpt-4o" / "b__b-2" / "report.json"
    assert labels["b__b-2"].source == f"swebench-report:{one}"
    assert labels["b__b-2"].kind == "swebench-report"
    assert read_labels(one) == [labels["b__b-2"]]  # a single report.json reads the same


def test_run_summary_labels_each_list_as_the_harness_scores_it(tmp_path) -> None:
    path = write_summary(
        tmp_path / "openai__gpt-4o.run1.json",
        resolved_ids=["r1", "r2"],
        unresolved_ids=["u1"],
        error_ids=["e1"],
        empty_patch_ids=["p1"],
        incomplete_ids=["i1"],
    )
    labels = {lab.instance_id: lab for lab in read_labels(path)}
    assert {k: v.resolved for k, v in labels.items()} == {
        "r1": True,
        "r2": True,
        "u1": False,
        "e1": False,
        "p1": False,
    }  # incomplete instances were not run: no label
    assert labels["e1"].source == f"swebench-summary/error_ids:{path}"
    assert labels["r1"].source == f"swebench-summary/resolved_ids:{path}"
    assert all(lab.tests_passed is None for lab in labels.values())


@pytest.mark.parametrize(
    ("name", "content", "kind"),
    [
        ("labels.json", {"resolved": {"x-1": True, "x-2": False}}, "resolved-map"),
        ("plain.json", {"x-1": True, "x-2": False}, "map"),
        (
            "labels.jsonl",
            '{"instance_id": "x-1", "resolved": true}\n\n{"instance_id": "x-2", "resolved": false}\n',
            "jsonl",
        ),
        (  # JSON lines without the .jsonl suffix
            "labels.txt",
            '{"instance_id": "x-1", "resolved": true}\n{"instance_id": "x-2", "resolved": false}\n',
            "jsonl",
        ),
    ],
)
def test_maps_and_jsonl(tmp_path, name, content, kind) -> None:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    labels = read_labels(path)
    assert [(lab.instance_id, lab.resolved, lab.kind) for lab in labels] == [
        ("x-1", True, kind),
        ("x-2", False, kind),
    ]
    if kind == "jsonl":
        assert [lab.line for lab in labels] == [1, 3 if name.endswith(".jsonl") else 2]
        assert labels[0].source == f"jsonl:{path}:1"


def test_one_line_jsonl_is_one_label(tmp_path) -> None:
    path = tmp_path / "one.json"
    path.write_text('{"instance_id": "x-1", "resolved": false}\n')
    assert [(lab.instance_id, lab.resolved) for lab in read_labels(path)] == [("x-1", False)]


def test_load_labels_merges_agreeing_files_and_refuses_disagreeing_ones(tmp_path) -> None:
    summary = write_summary(tmp_path / "s.json", resolved_ids=["a"], unresolved_ids=["b"])
    run = write_report_tree(tmp_path, {"a": report(True, f2p=(1, 0), p2p=(1, 0))})
    merged = load_labels([summary, run])
    assert merged["a"].source.startswith("swebench-summary/resolved_ids:")  # the first file's
    assert (merged["a"].tests_passed, merged["a"].tests_failed) == (2, 0)  # counts from a later
    assert merged["b"].resolved is False
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"b": True}))
    with pytest.raises(LabelError, match=r"other\.json: 'b': says resolved=True, but .*s\.json"):
        load_labels([summary, other])


@pytest.mark.parametrize(
    ("name", "content", "expect"),
    [
        ("bad.json", "{not json", r"bad\.json: is not JSON"),
        ("list.json", "[1, 2]", r"list\.json: holds a JSON list, not an object"),
        ("empty.json", "{}", r"empty\.json: is an empty object"),
        (
            "report.json",
            {"a__a-1": {"patch_exists": True, "resolved": "yes"}},
            r"report\.json: a__a-1\.resolved: is a string \('yes'\).*true or false",
        ),
        (
            "report.json",
            {"a__a-1": {"resolved": True, "tests_status": {"FAIL_TO_PASS": {"success": 3}}}},
            r"report\.json: a__a-1\.tests_status\.FAIL_TO_PASS\.success: is a number, not a list",
        ),
        (
            "summary.json",
            {"resolved_ids": "a,b", "unresolved_ids": []},
            r"summary\.json: resolved_ids: is a string \('a,b'\); a run summary lists",
        ),
        (
            "summary.json",
            {"resolved_ids": ["a"], "error_ids": ["a"]},
            r"summary\.json: error_ids: lists 'a', which resolved_ids lists too",
        ),
        ("map.json", {"a": True, "b": 1}, r"map\.json: 'b': is a number, which no results file"),
        (
            "labels.json",
            {"resolved": {"a": True, "b": "false"}},
            r"labels\.json: resolved\.b: is a string \('false'\); write true or false",
        ),
        (
            "labels.jsonl",
            '{"instance_id": "a", "resolved": true}\n{"instance_id": "b"}\n',
            r"labels\.jsonl: line 2: 'resolved' is null; write true or false",
        ),
        (
            "labels.jsonl",
            '{"instance_id": "a", "resolved": true}\n{"instance_id": 7, "resolved": true}\n',
            r"labels\.jsonl: line 2: 'instance_id' is a number",
        ),
    ],
)
def test_bad_files_name_the_file_the_key_and_the_fix(tmp_path, name, content, expect) -> None:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(LabelError, match=expect) as info:
        read_labels(path)
    assert isinstance(info.value, ConfigError) and info.value.path == str(path)


def test_missing_paths_and_empty_directories(tmp_path) -> None:
    with pytest.raises(LabelError, match="no such results file"):
        read_labels(tmp_path / "nope.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LabelError, match=r"empty: no report\.json under this directory"):
        read_labels(tmp_path / "empty")


# -- what a label does to an outcome -----------------------------------------------------------


def _lab(resolved: bool, source: str = "map:/r.json", passed=None, failed=None) -> Label:
    return Label("t", resolved, passed, failed, source, "/r.json")


def test_label_outcome_rules() -> None:
    unknown = Outcome().model_dump(exclude_none=True)
    d = label_outcome(unknown, _lab(False, passed=3, failed=1))
    assert d.status == "applied" and d.outcome is not None
    assert Outcome.model_validate(d.outcome) == Outcome(
        success=False, resolved=False, tests_passed=3, tests_failed=1, label_source="map:/r.json"
    )
    # the log said success; an agreeing label adds resolved and its source
    d = label_outcome({"success": True}, _lab(True))
    assert d.status == "applied" and d.outcome == {
        "success": True,
        "resolved": True,
        "label_source": "map:/r.json",
    }
    # a disagreeing one changes nothing unless overridden
    d = label_outcome({"success": True}, _lab(False))
    assert (d.status, d.outcome, d.stored, d.stored_source) == ("contradicting", None, True, "log")
    d = label_outcome({"success": True}, _lab(False), override=True)
    assert d.status == "overridden" and d.outcome is not None
    assert (d.outcome["success"], d.outcome["resolved"]) == (False, False)
    # an earlier label is what a new one is compared with, and keeps its source when agreeing
    labelled = {"success": True, "resolved": True, "label_source": "map:/first.json"}
    assert label_outcome(labelled, _lab(True, "jsonl:/second.jsonl:1")).status == "unchanged"
    d = label_outcome(labelled, _lab(False, "jsonl:/second.jsonl:1"))
    assert (d.status, d.stored_source) == ("contradicting", "map:/first.json")
    d = label_outcome(labelled, _lab(True, "swebench-report:/r/report.json", 4, 0))
    assert d.status == "applied" and d.outcome is not None
    assert (d.outcome["tests_passed"], d.outcome["label_source"]) == (4, "map:/first.json")


# -- attaching labels to a store ---------------------------------------------------------------


def _unlabelled(n: int = 14) -> list[Trajectory]:
    """``n`` trajectories over tasks t-0..t-6 (t-k has runs k and k+7), outcomes unknown but
    t-0's runs, whose log says success."""
    trajs = [make_traj(i) for i in range(n)]
    for t in trajs:
        t.outcome = Outcome(success=True) if t.task.task_id == "t-0" else Outcome()
    return trajs


def test_later_labels_are_one_new_version_and_time_travel_shows_the_old_outcome(
    store: Store, tmp_path
) -> None:
    trajs = _unlabelled()
    store.add_trajectories(trajs)
    run = write_report_tree(
        tmp_path,
        {
            "t-1": report(True, f2p=(1, 0), p2p=(4, 0)),
            "t-2": report(False, f2p=(0, 2), p2p=(4, 1)),
        },
    )
    rep = store.attach_labels([run])
    # a label applies to every run of its instance: t-1 and t-2 have two trajectories each
    assert (rep.labels, rep.applied, rep.unchanged, rep.contradicting, rep.unknown) == (
        2,
        4,
        0,
        0,
        [],
    )
    assert rep.trajectories is not None and rep.trajectories.version == 1
    assert store.version("trajectories") == 1 and store.count("trajectories") == len(trajs)
    assert store.history("trajectories", limit=1)[0]["operation"] == "MERGE"

    df = store.read("trajectories", columns=["id", "task_id", "success"])
    by_task = dict(zip(df["task_id"], df["success"], strict=True))
    assert by_task["t-1"] is True and by_task["t-2"] is False and by_task["t-3"] is None
    for t in trajs:
        now, then = store.get_trajectory(t.id), store.get_trajectory(t.id, version=0)
        assert now.id == t.id and then == t  # the id is the content hash: the outcome is not in it
        if t.task.task_id == "t-2":
            src = f"swebench-report:{run / 'openai__gpt-4o' / 't-2' / 'report.json'}"
            assert now.outcome == Outcome(
                success=False, resolved=False, tests_passed=4, tests_failed=3, label_source=src
            )
            assert then.outcome == Outcome()
        elif t.task.task_id != "t-1":
            assert now == t

    # lineage: a "label" run with the results files (kept as blobs) as inputs
    (label_run,) = store.runs(stage="label")
    assert label_run.run_id == rep.run_id and label_run.outputs == {"trajectories": 1}
    files = sorted(run.rglob("report.json"))
    assert label_run.inputs == {
        f"results:{f}": hashlib.sha256(f.read_bytes()).hexdigest() for f in files
    }
    assert all(
        store.get_blob(h) == f.read_bytes()
        for f, h in zip(files, label_run.inputs.values(), strict=True)
    )
    assert label_run.params["applied"] == 4
    assert store.gc(dry_run=True, min_age_s=0).unreferenced == []

    # idempotent: the same labels again change nothing and commit nothing
    runs_v = store.version("runs")
    again = store.attach_labels([run])
    assert (again.applied, again.unchanged, again.trajectories, again.run_id) == (0, 4, None, None)
    assert store.version("trajectories") == 1 and store.version("runs") == runs_v


def test_unknown_instances_are_counted_and_listed(store: Store, tmp_path) -> None:
    store.add_trajectories(_unlabelled())
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"resolved": {"t-3": True, "zeta": False, "alpha": True}}))
    rep = store.attach_labels(path)
    assert (rep.applied, rep.unknown) == (2, ["alpha", "zeta"])
    assert rep.problems()[0] == "2 labels name instances with no trajectory: alpha, zeta"
    assert "rejected" not in store.tables()  # unknown instances may be ingested later


def test_contradictions_are_kept_in_rejected_unless_overridden(store: Store, tmp_path) -> None:
    store.add_trajectories(_unlabelled())
    path = write_summary(tmp_path / "m.run1.json", resolved_ids=["t-4"], unresolved_ids=["t-0"])
    rep = store.attach_labels(path)
    # t-0's log says success; the evaluation says unresolved: both runs contradict
    assert (rep.applied, rep.contradicting, rep.overridden) == (2, 2, 0)
    c = rep.contradictions[0]
    assert (c.instance_id, c.stored, c.stored_source, c.label) == ("t-0", True, "log", False)
    assert c.label_source == f"swebench-summary/unresolved_ids:{path}"
    rows = store.read("rejected")
    assert rows.height == 2 and set(rows["format"]) == {"labels:swebench-summary"}
    assert set(rows["path"]) == {str(path)}
    assert all(
        "says resolved=True (log)" in r and "says resolved=False" in r for r in rows["reason"]
    )
    assert set(rows["raw_blob"]) == {hashlib.sha256(path.read_bytes()).hexdigest()}
    for t in store.read_trajectories(filter=pl.col("task_id") == "t-0"):
        assert t.outcome == Outcome(success=True)  # not applied
    v = store.version("trajectories")

    again = store.attach_labels(path)  # still reported, nothing new written
    assert (again.contradicting, again.applied) == (2, 0)
    assert again.rejected is not None and not again.rejected.committed
    assert store.read("rejected").height == 2 and store.version("trajectories") == v

    forced = store.attach_labels(path, override=True)
    assert (forced.applied, forced.contradicting, forced.overridden) == (2, 2, 2)
    assert store.version("trajectories") == v + 1
    for t in store.read_trajectories(filter=pl.col("task_id") == "t-0"):
        assert (t.outcome.success, t.outcome.resolved) == (False, False)
        assert t.outcome.label_source == f"swebench-summary/unresolved_ids:{path}"
    assert store.read("trajectories", filter=pl.col("task_id") == "t-0")["success"].to_list() == [
        False,
        False,
    ]

    # now an earlier label is what a later file contradicts
    later = tmp_path / "later.json"
    later.write_text(json.dumps({"t-0": True}))
    rep = store.attach_labels(later)
    assert rep.contradicting == 2
    assert rep.contradictions[0].stored_source == f"swebench-summary/unresolved_ids:{path}"


def test_the_data_json_is_rewritten_exactly(store: Store, tmp_path) -> None:
    big = 2**64 - 1  # the largest integer a trajectory can hold (orjson, the content hash)
    t = Trajectory(
        task=TaskInfo(task_id="big-1", instruction="count"),
        steps=[Step(index=0, action=ToolCall(tool="calc", params={"n": big}))],
    )
    store.add_trajectories([t])
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"big-1": True}))
    assert store.attach_labels(path).applied == 1
    got = store.get_trajectory(t.id)
    assert got.steps[0].action.params["n"] == big and got.outcome.resolved is True
    t.outcome = got.outcome
    assert store.read("trajectories")["data"][0] == t.to_json().decode()  # as pydantic writes it


# -- joining at ingest -------------------------------------------------------------------------


def _logs(tmp_path):
    """Chat logs: two runs of inst-a (the log does not know), inst-b (its log says resolved),
    inst-c (unlabelled)."""
    return write_jsonl(
        tmp_path / "logs" / "runs.jsonl",
        [
            chat_log("inst-a", "run_1"),
            chat_log("inst-a", "run_2"),
            chat_log("inst-b", "run_1", resolved=True),
            chat_log("inst-c", "run_1"),
        ],
    )


def test_ingest_labels_records_before_they_are_stored(store: Store, tmp_path) -> None:
    logs = _logs(tmp_path)
    summary = write_summary(
        tmp_path / "m.run1.json", resolved_ids=["inst-a"], unresolved_ids=["inst-b", "inst-d"]
    )
    res = ingest(store, logs, results=[summary])
    assert (res.new, res.n_rejected) == (4, 0)
    rep = res.labels
    assert rep is not None
    assert (rep.applied, rep.unchanged, rep.contradicting, rep.unknown) == (2, 0, 1, ["inst-d"])
    assert store.version("trajectories") == 0  # labelled before they were stored: one version
    by_task = {}
    for t in store.read_trajectories():
        by_task.setdefault(t.task.task_id, []).append(t.outcome)
    src = f"swebench-summary/resolved_ids:{summary}"
    assert by_task["inst-a"] == [Outcome(success=True, resolved=True, label_source=src)] * 2
    assert by_task["inst-b"][0].success is True and by_task["inst-b"][0].resolved is None
    assert by_task["inst-c"][0].resolved is None
    rej = store.read("rejected")
    assert rej.height == 1 and "inst-b" in rej["reason"][0]
    (run,) = store.runs(stage="ingest")
    assert run.inputs == {f"results:{summary}": hashlib.sha256(summary.read_bytes()).hexdigest()}
    assert run.params["labels"]["applied"] == 2 and run.outputs["trajectories"] == 0

    again = ingest(store, logs, results=[summary])  # duplicates, already labelled
    assert again.new == 0 and again.labels is not None
    assert (again.labels.applied, again.labels.unchanged, again.labels.contradicting) == (0, 2, 1)
    assert store.version("trajectories") == 0 and store.read("rejected").height == 1


def test_ingest_with_results_labels_trajectories_stored_earlier(store: Store, tmp_path) -> None:
    logs = _logs(tmp_path)
    first = ingest(store, logs)
    assert first.labels is None and store.version("trajectories") == 0
    path = tmp_path / "labels.jsonl"
    path.write_text('{"instance_id": "inst-c", "resolved": false}\n')
    res = ingest(store, logs, results=path)
    assert res.new == 0 and res.labels is not None and res.labels.applied == 1
    assert res.trajectories.version == 1 and res.trajectories.committed
    (c,) = store.read_trajectories(filter=pl.col("task_id") == "inst-c")
    assert (c.outcome.success, c.outcome.resolved, c.outcome.label_source) == (
        False,
        False,
        f"jsonl:{path}:1",
    )


def test_a_bad_results_file_fails_before_anything_is_written(store: Store, tmp_path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"inst-a": "yes"}))
    with pytest.raises(LabelError, match=r"r\.json: 'inst-a'"):
        ingest(store, _logs(tmp_path), results=[bad])
    assert store.tables() == {}


# -- the command line --------------------------------------------------------------------------


def test_cli_ingest_with_results_and_store_label_later(tmp_path) -> None:
    url = str(tmp_path / "store")
    logs = _logs(tmp_path)
    run = write_report_tree(tmp_path, {"inst-a": report(True), "inst-b": report(False)})
    res = runner.invoke(
        app, ["ingest", str(logs), "--store", url, "--results", str(run), "-w", "1"]
    )
    assert res.exit_code == 0, res.output
    assert "2 labels: 2 applied, 0 unchanged, 1 contradicting, 0 unknown instances" in res.output
    assert re.search(
        r"contradiction: trajectory \w+ \(task inst-b\) says resolved=True \(log\)", res.output
    )
    assert "pass --override to apply them" in res.output
    assert "trajectories@0 (new version" in res.output

    later = tmp_path / "later.json"
    later.write_text(json.dumps({"inst-c": True, "inst-b": False, "ghost": True}))
    out = runner.invoke(app, ["store", "label", str(later), "--store", url])
    assert out.exit_code == 0, out.output
    assert "1 applied, 0 unchanged, 1 contradicting, 1 unknown instances" in out.output
    assert "1 labels name instances with no trajectory: ghost" in out.output
    assert "trajectories@1 (new version, 1 rows updated)" in out.output
    again = runner.invoke(app, ["store", "label", str(later), "--store", url])
    assert "0 applied, 1 unchanged, 1 contradicting" in again.output
    assert "trajectories@1 (unchanged)" in again.output
    forced = runner.invoke(app, ["store", "label", str(later), "--store", url, "--override"])
    assert "1 applied, 1 unchanged, 1 contradicting (1 overridden)" in forced.output
    assert "trajectories@2 (new version" in forced.output

    store = Store.open(url)
    (b,) = store.read_trajectories(filter=pl.col("task_id") == "inst-b")
    show = runner.invoke(app, ["store", "show", b.id, "--store", url])
    assert f"label    resolved=False source=map:{later}" in show.output


def test_cli_bad_results_file_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "report.json"
    bad.write_text(json.dumps({"inst-a": {"resolved": None}}))
    out = runner.invoke(app, ["store", "label", str(bad), "--store", str(tmp_path / "s")])
    assert out.exit_code == 1
    assert f"error: {bad}: inst-a.resolved: is null" in out.output
    help_ = runner.invoke(app, ["store", "label", "--help"], env={"COLUMNS": "200"})
    words = " ".join(help_.output.split())
    assert "Every trajectory whose task id is a labelled instance id" in words
    assert "--override" in words and "run summary" in words


def test_labels_given_as_objects(store: Store) -> None:
    store.add_trajectories(_unlabelled())
    rep = store.attach_labels({"t-5": Label("t-5", True, source="eval:nightly-7")})
    assert (rep.applied, rep.inputs) == (2, {})
    (run,) = store.runs(stage="label")
    assert run.outputs == {"trajectories": 1} and run.inputs == {}
    outcomes = {
        t.outcome.label_source for t in store.read_trajectories(filter=pl.col("task_id") == "t-5")
    }
    assert outcomes == {"eval:nightly-7"}
