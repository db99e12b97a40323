"""Calibration against outcomes: fit, cross-validation, JSON, the engine, the store, the CLI."""

from __future__ import annotations

import random

import orjson
import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.errors import ConfigError, RewardError
from knowlyr.reward.engine import RewardEngine
from knowlyr.reward.outcome_calibration import (
    CalibrationDataError,
    OutcomeCalibration,
    facet_names,
    fit_outcome_calibration,
    plot_reliability,
    trajectory_facets,
)
from knowlyr.reward.store_io import (
    calibrate_from_store,
    load_calibration,
    score_unscored,
)
from knowlyr.store import Store
from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory


def _runs(n: int = 160, seed: int = 0) -> tuple[list[Trajectory], list[bool]]:
    """Coding runs (read, edit, eight test runs) whose success depends on how many of the
    test runs after the edit fail (plus noise): a fit on the facets must find it."""
    rng = random.Random(seed)
    runs, labels = [], []
    for i in range(n):
        failing = rng.randrange(0, 8)
        steps = [Step(index=0, action=ToolCall(tool="read_file", params={"path": "src/app.py"}),
                      observation=Observation(output="def f(): pass", exit_code=0)),
                 Step(index=1, action=ToolCall(tool="edit_file", params={
                     "path": "src/app.py", "old": "pass", "new": f"return {i}"}),
                      observation=Observation(output="edited", exit_code=0))]  # fmt: skip
        for j in range(8):
            bad = j < failing
            steps.append(
                Step(
                    index=len(steps),
                    thought="Run the tests again.",
                    action=ToolCall(tool="bash", params={"command": f"python -m pytest -q t{j}"}),
                    observation=Observation(
                        output="1 failed" if bad else "3 passed", exit_code=1 if bad else 0
                    ),
                )
            )
        success = rng.random() < (0.95 if failing < 3 else 0.15)
        runs.append(Trajectory(task=TaskInfo(task_id=f"task-{i}", domain="coding"), steps=steps,
                               outcome=Outcome(resolved=success, label_source="test")))  # fmt: skip
        labels.append(success)
    return runs, labels


@pytest.fixture(scope="module")
def fitted():
    runs, labels = _runs()
    rewards = RewardEngine("coding", outcome_weight=0.0).score(runs)
    return runs, labels, rewards, fit_outcome_calibration(runs, rewards, labels, seed=1)


def test_fit_finds_the_signal_and_reports_held_out_quality(fitted):
    runs, labels, rewards, res = fitted
    assert res.cv_auc > 0.85  # failures decide success in these runs
    assert 0.0 < res.cv_brier < 0.2
    assert len(res.cv_probabilities) == len(runs) and res.labels == labels
    assert sum(n for _, _, n in res.reliability) == len(runs)
    assert set(res.baseline_auc) == {"process reward", "steps"}
    assert "5-fold cross-validated: AUC" in res.summary()
    model = res.model
    assert model.features == facet_names(model.rubrics)
    assert model.meta["n"] == len(runs) and model.meta["positives"] == sum(labels)
    # the runs with fewer failing commands get the higher probabilities
    p = model.predict(runs, rewards)
    good = [pi for pi, y in zip(p, labels, strict=True) if y]
    bad = [pi for pi, y in zip(p, labels, strict=True) if not y]
    assert sum(good) / len(good) > sum(bad) / len(bad) + 0.3


def test_json_round_trip_and_version(fitted, tmp_path):
    runs, _, rewards, res = fitted
    path = res.model.save(tmp_path / "cal.json")
    back = OutcomeCalibration.load(path)
    assert back.version == res.model.version
    assert back.predict(runs[:10], rewards[:10]) == pytest.approx(
        res.model.predict(runs[:10], rewards[:10])
    )
    changed = OutcomeCalibration.from_json(path.read_bytes())
    changed.coef[0] += 1.0
    assert changed.version != res.model.version
    with pytest.raises(RewardError, match="not an outcome calibration"):
        OutcomeCalibration.from_json(b'{"kind": "isotonic"}')
    with pytest.raises(RewardError, match="expects"):
        res.model.probability([[0.0, 1.0]])


def test_isotonic_method_is_monotone(fitted):
    runs, labels, rewards, _ = fitted
    res = fit_outcome_calibration(runs, rewards, labels, method="isotonic")
    m = res.model
    assert m.method == "isotonic" and m.knots_x == sorted(m.knots_x)
    assert m.knots_y == sorted(m.knots_y)
    assert res.cv_auc > 0.75  # a step function: ties cost it a little AUC


def test_too_few_labels_and_mismatches_are_clear_errors(fitted):
    runs, labels, rewards, _ = fitted
    with pytest.raises(CalibrationDataError, match="at least 5 runs of each"):
        fit_outcome_calibration(runs[:20], rewards[:20], [True] * 20)
    with pytest.raises(CalibrationDataError, match="one label per run"):
        fit_outcome_calibration(runs, rewards, labels[:-1])
    with pytest.raises(RewardError, match="one reward per trajectory"):
        trajectory_facets(runs, rewards[:-1], ["command_success"])
    with pytest.raises(RewardError, match="is for trajectory"):
        trajectory_facets(runs[:2], rewards[1:3], ["command_success"])


def test_engine_puts_the_probability_in_the_total_and_keeps_step_rewards(fitted):
    runs, _, _, res = fitted
    plain = RewardEngine("coding")
    cal = RewardEngine("coding", calibration=res.model)
    assert cal.config_hash != plain.config_hash
    unlabelled = [Trajectory(task=t.task, steps=t.steps) for t in runs[:20]]
    r_plain, r_cal = plain.score(unlabelled), cal.score(unlabelled)
    probs = res.model.predict(unlabelled, r_plain)
    for a, b, p in zip(r_plain, r_cal, probs, strict=True):
        assert b.total == pytest.approx(p)  # no outcome known: the probability alone
        assert b.total_raw == pytest.approx(a.total_raw)
        assert b.step_rewards == a.step_rewards  # the process reward per step is untouched
    # a failing command still scores below the passing ones of the same run
    i = next(i for i, t in enumerate(unlabelled) if t.steps[2].observation.exit_code)
    assert r_cal[i].step_rewards[2] < r_cal[i].step_rewards[0]
    # where the outcome is known, it keeps its weight
    known = cal.score(runs[:5])
    for t, rr, p in zip(runs[:5], known, probs[:5], strict=True):
        w = cal.outcome_weight
        assert rr.total == pytest.approx((1 - w) * p + w * float(t.outcome.resolved))


def test_fit_and_apply_through_the_store(tmp_path):
    runs, _ = _runs(80, seed=3)
    for t in runs:  # the label reached the store as `knowlyr store label` leaves it
        t.outcome.success = t.outcome.resolved
    store = Store.open(str(tmp_path / "store"))
    store.add_trajectories(runs)
    fit = calibrate_from_store(store, profile="coding")
    assert fit.unlabelled == 0 and fit.calibration_id == fit.result.model.version
    row = store.read("calibrations").row(0, named=True)
    assert row["calibration_id"] == fit.calibration_id and row["n"] == 80
    assert row["cv_auc"] == pytest.approx(fit.result.cv_auc)
    (run,) = store.runs(stage="calibrate")
    assert run.inputs == {"trajectories": store.version("trajectories")}
    assert run.outputs["calibrations"] == fit.manifest.version
    assert run.outputs["calibration"] == row["blob"]  # the blob is referenced: gc keeps it
    model = load_calibration(fit.calibration_id, store=store)
    assert isinstance(model, OutcomeCalibration) and model.version == fit.calibration_id
    with pytest.raises(ConfigError, match="stored calibrations: " + fit.calibration_id):
        load_calibration("0123456789abcdef", store=store)
    plain = score_unscored(store)
    calibrated = score_unscored(store, calibration=model)
    assert plain.config_hashes != calibrated.config_hashes
    assert len(calibrated.rewards) == 80


def test_cli_calibrate_outcomes_and_score_with_it(tmp_path):
    runs, labels = _runs(100, seed=5)
    logs = tmp_path / "runs.jsonl"
    # the logs do not know the verdicts: a results file gives them
    logs.write_bytes(
        b"\n".join(Trajectory(task=t.task, steps=t.steps).to_json() for t in runs) + b"\n"
    )
    results = tmp_path / "results.json"
    results.write_bytes(
        orjson.dumps({t.task.task_id: y for t, y in zip(runs, labels, strict=True)})
    )
    out, plot = tmp_path / "cal.json", tmp_path / "cal.png"
    store = tmp_path / "store"
    res = CliRunner().invoke(app, [
        "reward", "calibrate", "--outcomes", str(logs), "--results", str(results),
        "-o", str(out), "--plot", str(plot), "--store", str(store),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "100 labelled runs" in res.output and "AUC" in res.output and "Brier" in res.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    model = OutcomeCalibration.load(out)
    assert f"calibration {model.version} stored in" in res.output
    scored = tmp_path / "scored.json"
    res = CliRunner().invoke(app, [
        "reward", "score", str(logs), "-d", "coding", "--calibration", model.version,
        "--store", str(store), "-o", str(scored),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    totals = [r["total"] for r in orjson.loads(scored.read_bytes())["rewards"]]
    assert all(0.0 <= t <= 1.0 for t in totals) and len(set(totals)) > 2
    res = CliRunner().invoke(app, ["reward", "calibrate", "--outcomes", str(logs)])
    assert res.exit_code == 1 and "a 5-fold fit needs at least 5 runs of each" in res.output
    res = CliRunner().invoke(app, ["reward", "calibrate"])
    assert res.exit_code != 0 and "--outcomes" in res.output


def test_reliability_plot_is_a_png(fitted, tmp_path):
    *_, res = fitted
    p = plot_reliability(res, tmp_path / "sub" / "plot.png")
    assert p.read_bytes()[:4] == b"\x89PNG"
