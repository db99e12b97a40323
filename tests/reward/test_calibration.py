"""Human calibration: annotation import, agreement with CIs, isotonic map, before/after."""

from __future__ import annotations

import json

import numpy as np
import pytest

from knowlyr.errors import RewardError
from knowlyr.reward.calibration import (
    Annotation,
    AnnotationError,
    CalibrationMap,
    agreement,
    auto_scores,
    calibrate,
    load_annotations,
)
from knowlyr.reward.engine import RewardEngine
from tests.reward.helpers import call, traj


def test_load_csv_keeps_good_rows_and_names_bad_ones(tmp_path):
    p = tmp_path / "labels.csv"
    p.write_text(
        "trajectory_id,step_index,score,annotator\n"
        "t1,,0.8,ann\n"
        "t1,2,0.5,bob\n"
        "t2,x,0.4,ann\n"
        ",1,0.3,ann\n"
        "t3,1,high,ann\n"
    )
    anns = load_annotations(p)
    assert anns.items == [Annotation("t1", None, 0.8, "ann"), Annotation("t1", 2, 0.5, "bob")]
    assert len(anns.rejected) == 3
    assert anns.rejected[0].startswith(f"{p}:4: field 'step_index'")
    assert anns.rejected[1].startswith(f"{p}:5: field 'trajectory_id'")
    assert anns.rejected[2] == f"{p}:6: field 'score': 'high' is not a number"
    with pytest.raises(AnnotationError, match=r"labels.csv:4: field 'step_index'"):
        load_annotations(p, strict=True)


def test_load_jsonl_and_header_errors(tmp_path):
    p = tmp_path / "labels.jsonl"
    p.write_text(
        json.dumps({"trajectory_id": "t1", "score": 1}) + "\n"
        "{broken\n" + json.dumps({"trajectory_id": "t2", "step_index": 0, "score": 0.25}) + "\n"
    )
    anns = load_annotations(p)
    assert [a.trajectory_id for a in anns.items] == ["t1", "t2"]
    assert anns.items[1].step_index == 0 and anns.items[0].annotator == "unknown"
    assert anns.rejected[0].startswith(f"{p}:2: not valid JSON")
    bad = tmp_path / "bad.csv"
    bad.write_text("id,value\nt1,1\n")
    with pytest.raises(AnnotationError, match="header lacks column"):
        load_annotations(bad)
    (tmp_path / "x.txt").write_text("t1 1\n")
    with pytest.raises(AnnotationError, match=r"use \.csv or \.jsonl"):
        load_annotations(tmp_path / "x.txt")


def test_agreement_metrics_and_intervals():
    rng = np.random.default_rng(1)
    human = rng.uniform(0, 1, 60)
    auto = human + rng.normal(0, 0.1, 60)
    rep = agreement(auto, human, n_boot=300)
    assert rep.n == 60
    assert 0.8 < rep.spearman.value <= 1 and rep.kendall.value > 0.6
    for m in (rep.pearson, rep.spearman, rep.kendall, rep.pairwise_accuracy, rep.mae):
        assert m.low <= m.value <= m.high
    assert rep.pairwise_accuracy.value > 0.8 and rep.mae.value < 0.15
    perfect = agreement([0.1, 0.2, 0.3], [1, 2, 3], n_boot=50)
    assert perfect.pairwise_accuracy.value == 1.0 and perfect.kendall.value == pytest.approx(1.0)
    reversed_ = agreement([0.3, 0.2, 0.1], [1, 2, 3], n_boot=50)
    assert reversed_.pairwise_accuracy.value == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        agreement([1.0], [1.0])


def test_isotonic_map_is_monotone_and_round_trips(tmp_path):
    m = CalibrationMap.fit([0.1, 0.2, 0.3, 0.4, 0.5], [0.0, 0.5, 0.3, 0.9, 1.0])
    out = m.apply([0.0, 0.1, 0.25, 0.35, 0.6])
    assert out == sorted(out) and out[0] == pytest.approx(0.0) and out[-1] == pytest.approx(1.0)
    assert m.y[1] == pytest.approx(0.4) and m.y[2] == pytest.approx(0.4)  # pooled violators
    p = m.save(tmp_path / "cal.json")
    again = CalibrationMap.load(p)
    assert again == m and again.version == m.version
    doc = json.loads(p.read_text())
    assert doc["kind"] == "isotonic" and doc["format_version"] == 1 and doc["version"] == m.version
    doc["y"][0] = 0.5
    p.write_text(json.dumps(doc))
    with pytest.raises(RewardError, match="does not match its content"):
        CalibrationMap.load(p)


def test_map_as_store_blob(tmp_path):
    import knowlyr.store as store_mod

    store = store_mod.Store(str(tmp_path / "store"))
    m = CalibrationMap.fit([0, 1], [0.2, 0.7])
    digest = m.save_to_store(store)
    assert CalibrationMap.load_from_store(store, digest) == m


def test_calibrate_improves_agreement_and_applies_on_later_scoring():
    # trajectories with 0..k redundant re-reads: rules score them lower the more they repeat
    trajs = []
    for i in range(30):
        steps = [call("read_file", path="a.py", output="x") for _ in range(1 + i % 6)]
        steps.append(call("edit_file", path="a.py", old="x", new="y"))
        trajs.append(traj(steps, task_id=f"task{i}"))
    eng = RewardEngine("coding")
    rewards = eng.score(trajs)
    # humans: a harsher, nonlinear view of the same ordering
    anns = [Annotation(r.trajectory_id, None, round(r.total_raw**3, 4), "ann") for r in rewards]
    anns.append(Annotation("unknown-trajectory", None, 0.5, "ann"))
    res = calibrate(rewards, anns, level="trajectory", folds=5, n_boot=200)
    assert res.n_matched == 30 and res.n_unmatched == 1
    assert res.after.mae.value < res.before.mae.value
    assert res.after_cv is not None and res.after_cv.mae.value < res.before.mae.value
    assert res.after.spearman.value >= res.before.spearman.value - 1e-9  # monotone: order kept
    calibrated = RewardEngine("coding", calibration=res.map).score(trajs)
    assert all(
        c.total_raw == pytest.approx(r.total_raw) for c, r in zip(calibrated, rewards, strict=True)
    )
    err_before = np.mean([abs(r.total_raw - a.score) for r, a in zip(rewards, anns, strict=False)])
    err_after = np.mean([abs(c.total - a.score) for c, a in zip(calibrated, anns, strict=False)])
    assert err_after < err_before
    assert RewardEngine("coding", calibration=res.map).config_hash != eng.config_hash


def test_step_level_calibration_keys():
    t = traj([call("read_file", path="a.py"), call("read_file", path="a.py")], task_id="s")
    rewards = RewardEngine("coding").score([t])
    keys = auto_scores(rewards, level="step")
    assert set(keys) == {(t.id, 0), (t.id, 1)}
    anns = [Annotation(t.id, 0, 1.0), Annotation(t.id, 1, 0.0), Annotation(t.id, None, 0.3)]
    res = calibrate(rewards, anns, level="step", n_boot=20)
    assert res.n_matched == 2 and res.map.level == "step" and res.after_cv is None
    with pytest.raises(ValueError, match="at least 2 step-level"):
        calibrate(rewards, anns[:1], level="step")
