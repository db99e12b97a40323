"""The engine's formula one trajectory and one step at a time, with per-step dicts: the
specification the batch computation of :mod:`knowlyr.reward.combine` must reproduce bit for
bit (rules layer, human calibration maps; the judge layer has its own tests)."""

from __future__ import annotations

from collections.abc import Sequence

from knowlyr.reward.engine import RewardEngine
from knowlyr.reward.rules import RULE_COLUMNS, score_rules
from knowlyr.trajectory import Trajectory


def _mean(xs):
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def reference_rewards(engine: RewardEngine, trajectories: Sequence[Trajectory]) -> list[dict]:
    """Per trajectory: total, total_raw, process, step_rewards, rubric_scores, step_rubrics."""
    per_step = [[{} for _ in t.steps] for t in trajectories]
    refs = {}
    df = score_rules(trajectories, engine.profile)
    for ti, ref in zip(df["traj"].to_list(), df["reference"].to_list(), strict=True):
        refs[ti] = ref
    cols = [df[c].to_list() for c in RULE_COLUMNS]
    for row, (ti, si) in enumerate(zip(df["traj"].to_list(), df["step"].to_list(), strict=True)):
        for name, col in zip(RULE_COLUMNS, cols, strict=True):
            per_step[ti][si][name] = col[row]
    cal, w, out = engine.calibration, engine.weights, []
    for ti, t in enumerate(trajectories):
        steps_r = []
        for d in per_step[ti]:
            num = den = 0.0
            for name, s in d.items():
                if s is not None and w.get(name, 0.0) > 0:
                    num += w[name] * s
                    den += w[name]
            r = num / den if den > 0 else None
            if r is not None and cal is not None and cal.level == "step":
                r = cal.apply_one(r)
            steps_r.append(r)
        scored = [r for r in steps_r if r is not None]
        process = None
        if scored:
            length = refs.get(ti) or len(scored)
            process = max(0.0, 1.0 - sum(1.0 - r for r in scored) / length)
        o = t.outcome
        success = o.success if o.success is not None else o.resolved
        total_raw = process
        if process is not None and engine.outcome_weight and success is not None:
            ow = engine.outcome_weight
            total_raw = (1 - ow) * process + ow * float(success)
        total = total_raw
        if total is not None and cal is not None and cal.level == "trajectory":
            total = cal.apply_one(total)
        means = {n: _mean([d.get(n) for d in per_step[ti]]) for n in engine.rubrics}
        out.append(
            {
                "total": total,
                "total_raw": total_raw,
                "process": process,
                "step_rewards": steps_r,
                "rubric_scores": {k: v for k, v in means.items() if v is not None},
                "step_rubrics": per_step[ti],
                "success": success,
            }
        )
    return out
