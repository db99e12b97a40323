"""Reward quality on real runs: does the reward tell resolved SWE-bench runs from failed ones?

Run by hand (the data is not in the repository)::

    .venv/bin/python bench/reward_quality.py ../shared/data/mini_swe_agent_verified

The folder holds mini-swe-agent ``*.traj.json`` runs and a ``labels.json`` of SWE-bench
``resolved`` verdicts (any results file :func:`knowlyr.labels.load_labels` reads works, via
``--results``). The runs go through the recorder (``mini_swe_agent`` adapter) and the rule
layer of the default ``coding`` profile, as ``knowlyr record convert`` + ``knowlyr reward
score -d coding`` run them; labels are never shown to the rules (the outcome term is 0 for
every run: none of them knows it was resolved).

It prints the AUC of each score against ``resolved``:

- **the new rules alone**: the trajectory total of the default coding profile;
- **rules + calibration**: :func:`~knowlyr.reward.outcome_calibration.fit_outcome_calibration`
  (rubric means, process reward and run size -> P(success)), k-fold cross-validated: every
  run's probability comes from a model that never saw it; repeated over ``--seeds`` fold
  shufflings (mean and range);
- baselines: the number of steps (fewer = better), the total cost (lower = better), and the
  previous default rules (the four rubrics non_redundancy, non_regression, info_utilization,
  efficiency with the previous coding weights and no typical run length).

Targets (TARGETS.md): >= 0.75 with calibration; the rules alone above the number of steps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from knowlyr.core import get_profile
from knowlyr.labels import load_labels
from knowlyr.recorder import Converted, iter_records
from knowlyr.reward.engine import RewardEngine
from knowlyr.reward.outcome_calibration import fit_outcome_calibration, plot_reliability

#: The coding profile's rule weights before the rules that read what happened.
PREVIOUS_WEIGHTS = {
    "info_utilization": 0.10,
    "non_redundancy": 0.15,
    "non_regression": 0.10,
    "efficiency": 0.05,
}


def auc(labels: list[bool], scores: list[float]) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


def cost(t) -> float:
    steps = [s.usage.cost_usd for s in t.steps if s.usage and s.usage.cost_usd is not None]
    if steps:
        return sum(steps)
    stats = t.metadata.get("model_stats") or {}
    return float(stats.get("instance_cost") or 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", type=Path, help="folder of mini-swe-agent runs")
    ap.add_argument(
        "--results", type=Path, nargs="*", help="results files (default: LOGS/labels.json)"
    )
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=10, help="fold shufflings for the calibrated AUC")
    ap.add_argument("--method", default="sigmoid", choices=["sigmoid", "isotonic"])
    ap.add_argument("--plot", type=Path, help="write the reliability diagram (PNG) here")
    args = ap.parse_args()

    t0 = time.perf_counter()
    runs = [r.trajectory for r in iter_records([args.logs]) if isinstance(r, Converted)]
    labels_by_id = load_labels(args.results or [args.logs / "labels.json"])
    runs = [t for t in runs if t.task.task_id in labels_by_id]
    y = [labels_by_id[t.task.task_id].resolved for t in runs]
    t_convert = time.perf_counter() - t0
    print(f"{len(runs)} labelled runs ({sum(y)} resolved), converted in {t_convert:.1f} s")

    t0 = time.perf_counter()
    engine = RewardEngine("coding", outcome_weight=0.0)
    rewards = engine.score(runs)
    t_rules = time.perf_counter() - t0
    previous = RewardEngine(
        get_profile("coding").model_copy(update={"reference_steps": None}),
        weights=PREVIOUS_WEIGHTS,
        outcome_weight=0.0,
    ).score(runs)

    rows = [
        ("new rules alone (coding profile total)", auc(y, [r.total for r in rewards])),
    ]
    cal_aucs, briers, result = [], [], None
    t0 = time.perf_counter()
    for seed in range(args.seeds):
        res = fit_outcome_calibration(
            runs, rewards, y, method=args.method, folds=args.folds, seed=seed
        )
        cal_aucs.append(res.cv_auc)
        briers.append(res.cv_brier)
        result = result or res
    t_cal = (time.perf_counter() - t0) / args.seeds
    base_rate = sum(y) / len(y)
    rows += [
        (
            f"rules + calibration ({args.folds}-fold CV, mean of {args.seeds} shufflings)",
            statistics.mean(cal_aucs),
        ),
        ("baseline: number of steps (fewer = better)", auc(y, [-len(t.steps) for t in runs])),
        ("baseline: total cost (lower = better)", auc(y, [-cost(t) for t in runs])),
        ("baseline: previous default rules", auc(y, [r.total for r in previous])),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"\n{'score':<{width}}  AUC vs resolved")
    for name, value in rows:
        print(f"{name:<{width}}  {value:.3f}")
    print(
        f"\ncalibrated AUC over {args.seeds} shufflings: {min(cal_aucs):.3f}-{max(cal_aucs):.3f}; "
        f"Brier {statistics.mean(briers):.3f} (always predicting the base rate "
        f"{base_rate:.2f}: {base_rate * (1 - base_rate):.3f})"
    )
    model = result.model
    weights = sorted(zip(model.features, model.coef, strict=True), key=lambda p: -abs(p[1]))
    print("largest standardised coefficients (fit on all runs): " + ", ".join(
        f"{n} {c:+.2f}" for n, c in weights[:6] if c
    ))  # fmt: skip
    print(
        f"time: convert {t_convert:.1f} s, rules {t_rules:.2f} s "
        f"({t_rules / sum(len(t.steps) for t in runs) * 1e6:.1f} us/step), "
        f"one calibration fit + CV {t_cal:.1f} s"
    )
    new_ok = rows[0][1] > rows[2][1]
    cal_ok = statistics.mean(cal_aucs) >= 0.75
    print(
        f"targets: calibration >= 0.75 {'met' if cal_ok else 'MISSED'}; "
        f"rules alone above number of steps {'met' if new_ok else 'MISSED'}"
    )
    if args.plot:
        plot_reliability(result, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
