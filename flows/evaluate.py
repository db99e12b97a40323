"""``evaluate``: a checkpoint against a baseline on held-out tasks, with statistics."""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows._common import resolve_store, run_namer
from flows.collect import TaskSource
from knowlyr.train.promotion import success_p, success_test_name
from tasks.collect import sample_tasks
from tasks.evaluate import (
    ComparisonSummary,
    EvalSummary,
    compare_policies,
    current_champion,
    evaluate_policy,
    merge_summaries,
)
from tasks.train import Checkpoint

__all__ = ["EvalParams", "EvaluateParams", "evaluate", "run_evaluation"]


class EvalParams(BaseModel):
    """How policies are evaluated and when a candidate is promoted."""

    model_config = ConfigDict(extra="forbid")

    episodes: int = Field(100, gt=0, description="held-out tasks (one episode each)")
    seed: int = Field(50_000, description="held-out sample seed (fixed: comparable across nights)")
    max_steps: int = Field(3, gt=0, description="step limit per evaluation episode")
    max_new_tokens: int = Field(
        96,
        gt=0,
        description="generation limit per turn (the mix's longest expert turn is ~80 tiny-model "
        "tokens: a lower limit cuts correct answers off)",
    )
    temperature: float = Field(
        0.0, ge=0, description="0: greedy; > 0: the sampled policy, e.g. the collection's 1.0"
    )
    alpha: float = Field(0.01, gt=0, lt=1, description="significance level (Bonferroni-adjusted)")
    min_improvement: float = Field(0.0, ge=0, description="success-rate gain needed to promote")


def evaluate_on(
    policies: dict[str, Checkpoint], sources: list[TaskSource], p: EvalParams
) -> list[EvalSummary]:
    """Each policy (greedy, or sampled at ``p.temperature``) on the same held-out tasks: ``p.episodes`` split evenly over the
    task sources, one evaluation task run per policy and source (fanned out)."""
    runs: dict[str, list] = {name: [] for name in policies}
    for j, src in enumerate(sources):
        n = p.episodes // len(sources) + (j < p.episodes % len(sources))
        if n == 0:
            continue
        heldout = sample_tasks(src.suite, n, p.seed + j, split="heldout", family=src.family)
        for name, ckpt in policies.items():
            runs[name].append(
                evaluate_policy.submit(
                    name, ckpt, heldout, src.env_id, n, p.seed + j,
                    max_steps=p.max_steps, max_new_tokens=p.max_new_tokens,
                    temperature=p.temperature,
                )
            )  # fmt: skip
    if len(sources) == 1:
        return [f for fs in runs.values() for f in fs]  # futures: the comparison waits on them
    return [merge_summaries(name, [f.result() for f in fs]) for name, fs in runs.items()]


def run_evaluation(
    store_url: str,
    p: EvalParams,
    *,
    sources: list[TaskSource],
    init: Checkpoint,
    candidate: Checkpoint,
) -> ComparisonSummary:
    """Evaluate the initial policy, the candidate and the current champion on held-out tasks
    (fanned out), then compare against the champion (or the untrained model when there is
    none yet). An init that is the champion (a night that trains on from it) runs once."""
    champion = current_champion(store_url, excluding=candidate.blob)
    policies = {"candidate": candidate}
    if champion is None or champion.blob != init.blob:
        policies["untrained" if not init.trained else "init"] = init
    if champion is not None:
        policies["champion"] = champion
    baseline = "champion" if champion is not None else "untrained"
    evals = evaluate_on(policies, sources, p)
    return compare_policies(store_url, evals, "candidate", baseline, alpha=p.alpha)


class EvaluateParams(BaseModel):
    """Parameters of :func:`evaluate`: a checkpoint folder against a baseline folder."""

    model_config = ConfigDict(extra="forbid")

    candidate: str = Field(..., description="checkpoint folder to evaluate")
    baseline: str | None = Field(None, description="baseline folder (default: the champion)")
    env_id: str = Field("knowlyr/conversation")
    suite: str = Field("conversation")
    family: str | None = Field("order_status")
    mix: list[TaskSource] = Field(
        default_factory=list, description="several task sources (replaces env_id/suite/family)"
    )
    store_url: str | None = Field(None, description="store root (default .knowlyr/store)")
    evaluate: EvalParams = Field(default_factory=EvalParams)


def _describe(p) -> str:
    get = p.get if isinstance(p, dict) else lambda k, d=None: getattr(p, k, d)
    return f"{get('env_id', 'knowlyr/conversation')}"


@flow(name="evaluate", flow_run_name=run_namer("evaluate", _describe))
def evaluate(params: EvaluateParams) -> ComparisonSummary:
    """Evaluate a checkpoint against a baseline on held-out tasks."""
    from tasks.train import register_checkpoint

    store_url = resolve_store(params.store_url)
    p = params.evaluate
    sources = params.mix or [
        TaskSource(env_id=params.env_id, suite=params.suite, family=params.family)
    ]
    cand = register_checkpoint(store_url, params.candidate)
    base = (
        register_checkpoint(store_url, params.baseline)
        if params.baseline
        else current_champion(store_url, excluding=cand.blob)
    )
    if base is None:
        raise ValueError(
            "no baseline: pass params.baseline (a checkpoint folder) or promote one first"
        )
    evals = evaluate_on({"candidate": cand, "baseline": base}, sources, p)
    summary = compare_policies(store_url, evals, "candidate", "baseline", alpha=p.alpha)
    c = summary.of("candidate")
    get_run_logger().info(
        f"held-out success: baseline {c['baseline_success_rate']:.1%} -> candidate "
        f"{c['success_rate']:.1%} ({success_test_name(c)} adj {success_p(c)}, "
        f"significant={c['significant']})"
    )
    return summary
