"""`knowlyr reward ...` end to end through typer's CliRunner on the real fixture logs."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.reward.testing import JudgeServer
from tests.reward.helpers import FIXTURES

runner = CliRunner()


def _score(tmp_path, *extra, env=None):
    out = tmp_path / "rewards.json"
    res = runner.invoke(
        app,
        ["reward", "score", str(FIXTURES / "swe_agent"), str(FIXTURES / "openhands"),
         "--domain", "coding", "-o", str(out), *extra],
        env=env,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out, json.loads(out.read_text())


def test_score_fixture_logs_rules_only(tmp_path):
    _, doc = _score(tmp_path)
    assert doc["config"]["layers"] == ["rules"] and len(doc["config_hash"]) == 16
    by_task = {r["task_id"]: r for r in doc["rewards"]}
    pydicom = by_task["pydicom__pydicom-1458"]
    assert len(pydicom["step_rewards"]) == 12
    assert pydicom["step_rubrics"][7]["non_redundancy"] == 0.0  # the repeated failing edit
    assert all(0 <= r["total"] <= 1 for r in doc["rewards"])


def test_score_with_judge_against_local_server(tmp_path):
    with JudgeServer() as server:
        _, doc = _score(
            tmp_path, "--judge", "openai:judge-test", "--judge-base-url", server.openai_url,
            "--judge-cache", str(tmp_path / "cache.jsonl"), env={"OPENAI_API_KEY": "test"},
        )  # fmt: skip
        n_calls = len(server.requests)
        _score(tmp_path, "--judge", "openai:judge-test", "--judge-base-url", server.openai_url,
               "--judge-cache", str(tmp_path / "cache.jsonl"), env={"OPENAI_API_KEY": "test"})  # fmt: skip
        assert len(server.requests) == n_calls  # second run: all answers from the disk cache
    assert doc["config"]["judge_model"] == "openai:judge-test"
    assert doc["judge_usage"]["requests"] == n_calls > 0
    r = doc["rewards"][0]
    assert r["step_rubrics"][0]["goal_progress"] == 0.7 and r["rationales"][0] == "default answer"


def test_preferences_leaderboard_calibrate_rubrics(tmp_path):
    out, doc = _score(tmp_path)
    res = runner.invoke(app, ["reward", "preferences", str(out), "--min-margin", "0"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["reward", "leaderboard", str(out), "--json"])
    rows = json.loads(res.stdout)
    assert {r["key"]["agent"] for r in rows} >= {"openhands"}
    ann = tmp_path / "labels.csv"
    lines = ["trajectory_id,step_index,score,annotator"]
    lines += [f"{r['trajectory_id']},,{r['total'] ** 2:.4f},ann" for r in doc["rewards"]]
    lines.append("nope,,abc,ann")
    ann.write_text("\n".join(lines) + "\n")
    cal = tmp_path / "map.json"
    res = runner.invoke(
        app, ["reward", "calibrate", str(out), str(ann), "-o", str(cal), "--n-boot", "50"]
    )
    assert res.exit_code == 0, res.output
    assert (
        "before:" in res.stdout
        and "after (in-sample):" in res.stdout
        and "pairwise_accuracy" in res.stdout
    )
    assert "field 'score'" in res.output
    _, calibrated = _score(tmp_path, "--calibration", str(cal))
    assert calibrated["config"]["calibration"] == json.loads(cal.read_text())["version"]
    assert calibrated["config_hash"] != doc["config_hash"]
    res = runner.invoke(app, ["reward", "rubrics", "--domain", "coding"])
    assert res.exit_code == 0 and "goal_progress" in res.stdout and "non_redundancy" in res.stdout
    res = runner.invoke(app, ["reward", "rubrics", "conversation"])  # the domain as an argument
    assert res.exit_code == 0 and res.stdout.startswith("domain conversation")


def test_bad_input_errors(tmp_path):
    # usage errors (issue #39): a missing input, an unknown profile, a bad option exit 2
    res = runner.invoke(app, ["reward", "score", str(tmp_path / "missing.json"), "-d", "coding"])
    assert res.exit_code == 2 and "missing.json does not exist" in res.output
    res = runner.invoke(app, ["reward", "leaderboard", str(tmp_path / "missing.json")])
    assert res.exit_code == 2 and "missing.json does not exist" in res.output
    res = runner.invoke(app, ["reward", "score", str(FIXTURES / "swe_agent"), "-d", "nope"])
    assert res.exit_code == 2 and "unknown domain profile" in res.output
    res = runner.invoke(app, ["reward", "score", str(FIXTURES / "swe_agent"), "--workers", "-1"])
    assert res.exit_code == 2 and "must be >= 0, got -1" in res.output
    # a file that is there but holds nothing scorable is a failure: exit 1
    (tmp_path / "junk.jsonl").write_text("not json\n")
    res = runner.invoke(app, ["reward", "score", str(tmp_path / "junk.jsonl")])
    assert res.exit_code == 1 and "nothing was scored" in res.output


def test_score_without_paths_or_store_says_what_to_give(tmp_path):
    res = runner.invoke(app, ["reward", "score"])
    assert res.exit_code == 2
    assert "give PATHS" in res.output and "--store" in res.output
    res = runner.invoke(app, ["reward", "score", "--store", str(tmp_path / "empty")])
    assert res.exit_code == 1
    assert "has no trajectories yet" in res.output and "knowlyr ingest" in res.output
