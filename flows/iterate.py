"""``iterate``: the nightly loop collect -> reward -> export -> train -> evaluate -> promote.

Run once on embedded defaults (Prefect's ephemeral API, a local store, the local
conversation env and a tiny model trained from scratch)::

    python -m flows.iterate            # prints held-out success before/after and where things are
    python -m flows.iterate --small    # a seconds-long smoke run
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from flows._common import resolve_store, run_namer
from flows.collect import CollectParams, CollectReport, run_collect
from flows.evaluate import EvalParams, run_evaluation
from flows.report import iteration_report
from flows.train import run_training
from tasks.evaluate import ComparisonSummary, Decision, promote_checkpoint
from tasks.export import DatasetRef, ExportParams, export_dataset
from tasks.reward import RewardParams, RewardSummary, score_trajectories
from tasks.train import Checkpoint, TrainParams

__all__ = ["IterateParams", "IterateReport", "iterate", "main"]


class IterateParams(BaseModel):
    """Parameters of one iteration; every stage's parameters are a nested model."""

    store_url: str | None = Field(None, description="store root (default .knowlyr/store)")
    seed: int | None = Field(
        0, description="collection seed; null derives it from the run's scheduled date (nightly)"
    )
    collect: CollectParams = Field(
        default_factory=lambda: CollectParams(episodes=2000, shards=2),
        description="which episodes to collect (its seed and store_url are the iteration's)",
    )
    reward: RewardParams = Field(default_factory=RewardParams)
    export: ExportParams = Field(default_factory=ExportParams)
    train: TrainParams = Field(default_factory=TrainParams)
    evaluate: EvalParams = Field(default_factory=EvalParams)

    @classmethod
    def small(cls, **overrides: Any) -> IterateParams:
        """Seconds-long parameters (tests, the CI deployment run, screenshots)."""
        base = cls(
            collect=CollectParams(episodes=48, shards=2),
            train=TrainParams(epochs=1, batch_size=16, restarts=2),
            evaluate=EvalParams(episodes=6, max_new_tokens=24, max_steps=2),
        )
        return base.model_copy(update=overrides)


class IterateReport(BaseModel):
    """Everything one iteration produced (manifests and decisions, no data)."""

    store_url: str
    seed: int
    collect: CollectReport
    rewards: list[RewardSummary]
    dataset: DatasetRef
    init: Checkpoint
    candidate: Checkpoint
    comparison: ComparisonSummary
    decision: Decision
    report_dir: str


def _nightly_seed() -> int:
    from prefect.runtime import flow_run

    when = flow_run.scheduled_start_time or datetime.now(UTC)
    return int(when.strftime("%Y%m%d"))


def _describe(p: Any) -> str:
    get = p.get if isinstance(p, dict) else lambda k, d=None: getattr(p, k, d)
    c = get("collect") or {}
    cget = c.get if isinstance(c, dict) else lambda k, d=None: getattr(c, k, d)
    seed = get("seed", 0)
    return f"{cget('env_id', 'knowlyr/conversation')}-{cget('episodes', 2000)}ep-seed{'auto' if seed is None else seed}"


@flow(name="iterate", flow_run_name=run_namer("iterate", _describe))
def iterate(params: IterateParams = IterateParams()) -> IterateReport:
    """One nightly iteration: collect, reward, export, train, evaluate, promote."""
    store_url = resolve_store(params.store_url)
    seed = params.seed if params.seed is not None else _nightly_seed()

    collected = run_collect(params.collect.model_copy(update={"seed": seed}), store_url)
    trajectories = collected.trajectories.ref
    n = params.reward.shards
    rewards = [
        score_trajectories.submit(trajectories, params.reward, shard=i, n_shards=n)
        for i in range(n)
    ]
    dataset = export_dataset(trajectories, rewards, params.export)
    init, candidate = run_training(dataset, params.train)
    evaluation = run_evaluation(
        store_url,
        params.evaluate,
        env_id=params.collect.env_id,
        suite=params.collect.suite,
        family=params.collect.family,
        init=init,
        candidate=candidate,
    )
    decision = promote_checkpoint(
        store_url, candidate, evaluation, min_improvement=params.evaluate.min_improvement
    )
    rewards = [r.result() for r in rewards]
    report_dir = iteration_report(
        store_url, seed, collected, rewards, dataset, candidate, evaluation, decision
    )
    get_run_logger().info(
        f"held-out success before training {evaluation.success('untrained'):.1%} -> after "
        f"training {evaluation.success('candidate'):.1%} ({params.evaluate.episodes} tasks); "
        f"{'PROMOTED' if decision.promoted else 'not promoted'}: {decision.reason}"
    )
    get_run_logger().info(f"store: {store_url}  checkpoint: {candidate.path}  report: {report_dir}")
    return IterateReport(
        store_url=store_url,
        seed=seed,
        collect=collected,
        rewards=rewards,
        dataset=dataset,
        init=init,
        candidate=candidate,
        comparison=evaluation,
        decision=decision,
        report_dir=report_dir,
    )


@contextmanager
def _patient_ephemeral_server() -> Iterator[None]:
    """Give Prefect's temporary local server more than its default 20 s to start (a busy
    2-core machine needs it); an explicit setting or a configured server wins."""
    import os

    from prefect.settings import (
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    # The temporary server logs tracebacks of its own services cancelled at shutdown; they say
    # nothing about the run, so keep its log to critical messages (the subprocess reads env).
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    if "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in os.environ:
        yield
        return
    with temporary_settings({PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 120}):
        yield


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.iterate``: one iteration on embedded defaults; prints the outcome."""
    ap = argparse.ArgumentParser(description="Run one knowlyr-gym iteration (Prefect flow).")
    ap.add_argument("--store", default=None, help="store root (default .knowlyr/store)")
    ap.add_argument("--small", action="store_true", help="tiny parameters: a smoke run")
    ap.add_argument("--seed", type=int, default=0, help="collection seed")
    args = ap.parse_args(argv)
    params = IterateParams.small() if args.small else IterateParams()
    params = params.model_copy(update={"store_url": args.store, "seed": args.seed})
    with _patient_ephemeral_server():
        report = iterate(params)
    before = report.comparison.success("untrained")
    after = report.comparison.success("candidate")
    print()
    print(f"Held-out success ({params.collect.env_id}, {params.evaluate.episodes} tasks):")
    print(f"  before training (untrained model): {before:.1%}")
    print(f"  after training  (SFT checkpoint):  {after:.1%}")
    print(
        f"  decision: {'promoted' if report.decision.promoted else 'kept the baseline'} ({report.decision.reason})"
    )
    print("Artifacts:")
    print(f"  store (Delta tables + blobs): {report.store_url}")
    print(f"  checkpoint:                   {report.candidate.path}")
    print(f"  iteration report:             {Path(report.report_dir) / 'report.md'}")
    print("  Prefect artifacts: `prefect artifact ls` (or the UI, `make server`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
