"""Evaluate agents on held-out tasks and compare them with proper statistics.

:func:`evaluate_agent` runs episodes through :func:`knowlyr.rollout.collect` and keeps the
per-episode success, reward and length. :func:`compare_agents` tests each agent against a
baseline on the same episodes:

- success rate: McNemar's exact test when both ran the same tasks in the same order (paired
  outcomes), Fisher's exact test otherwise, and the two-proportion z-test;
- reward: Welch's t-test, the paired t-test (when both ran the same tasks in the same order),
  the Mann-Whitney U test, and a bootstrap confidence interval of the difference in means;
- Bonferroni correction over the number of comparisons.

Example:
    >>> base = evaluate_agent("knowlyr/conversation", RandomAgent(), tasks, n_episodes=1)  # doctest: +SKIP
    >>> tuned = evaluate_agent("knowlyr/conversation", model_agent, tasks)  # doctest: +SKIP
    >>> report = compare_agents([base, tuned])  # doctest: +SKIP
    >>> report.comparisons[0].fisher_p < 0.01  # doctest: +SKIP
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from knowlyr.agents.base import Agent
from knowlyr.errors import ConfigError
from knowlyr.trajectory import Trajectory

__all__ = [
    "Comparison",
    "ComparisonReport",
    "EvalResult",
    "bootstrap_ci",
    "compare_agents",
    "evaluate_agent",
    "fisher_greater",
    "leaderboard_from_store",
    "mcnemar_exact",
    "wilson_interval",
]


@dataclass
class EvalResult:
    """Per-episode results of one agent on one env."""

    agent: str
    env_id: str
    task_ids: list[str]
    successes: list[bool]
    rewards: list[float]
    steps: list[int]
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)
    seeds: list[int] = field(default_factory=list)
    checkpoint: str | None = None

    @property
    def n(self) -> int:
        return len(self.successes)

    @property
    def success_rate(self) -> float:
        return sum(self.successes) / self.n if self.n else 0.0

    @property
    def mean_reward(self) -> float:
        return sum(self.rewards) / self.n if self.n else 0.0

    def success_ci(self, *, level: float = 0.95) -> tuple[float, float]:
        """Wilson score interval of the success rate."""
        return wilson_interval(sum(self.successes), self.n, level=level)

    def by_family(self) -> dict[str, EvalResult]:
        """This result split by the task family of each episode (families in first-seen order;
        a task id the task sets do not know counts under ``"?"``)."""
        from knowlyr.taskset import get_task

        groups: dict[str, list[int]] = {}
        for i, tid in enumerate(self.task_ids):
            try:
                family = get_task(tid).family or "?"
            except ConfigError:  # not a task of any suite or loaded set
                family = "?"
            groups.setdefault(family, []).append(i)

        def pick(xs: list[Any], idx: list[int]) -> list[Any]:
            return [xs[i] for i in idx] if xs else []

        return {
            fam: EvalResult(
                agent=self.agent,
                env_id=self.env_id,
                task_ids=pick(self.task_ids, idx),
                successes=pick(self.successes, idx),
                rewards=pick(self.rewards, idx),
                steps=pick(self.steps, idx),
                seeds=pick(self.seeds, idx),
            )
            for fam, idx in groups.items()
        }

    def to_rows(self, eval_id: str) -> list[dict[str, Any]]:
        """One ``evaluations`` row per episode (the store's declared columns)."""
        import json

        seeds = self.seeds or list(range(self.n))
        ids = (
            [t.id for t in self.trajectories]
            if len(self.trajectories) == self.n
            else [None] * self.n
        )
        return [
            {
                "eval_id": eval_id,
                "task_id": self.task_ids[i],
                "agent": self.agent,
                "seed": seeds[i],
                "checkpoint": self.checkpoint,
                "trajectory_id": ids[i],
                "success": self.successes[i],
                "score": self.rewards[i],
                "n_steps": self.steps[i],
                "metrics": json.dumps({"env_id": self.env_id}),
            }
            for i in range(self.n)
        ]

    def to_store(self, store: Any, *, eval_id: str) -> Any:
        """Append the episodes to the store's ``evaluations`` table; returns the manifest."""
        return store.append("evaluations", self.to_rows(eval_id))

    def summary(self) -> dict[str, Any]:
        lo, hi = self.success_ci()
        return {
            "agent": self.agent,
            "env_id": self.env_id,
            "episodes": self.n,
            "success_rate": self.success_rate,
            "success_ci_low": lo,
            "success_ci_high": hi,
            "mean_reward": self.mean_reward,
            "mean_steps": sum(self.steps) / self.n if self.n else 0.0,
        }


def evaluate_agent(
    env_id: str,
    agent: Agent | Callable[[], Agent],
    tasks: Sequence[Any] | None = None,
    n_episodes: int | None = None,
    *,
    max_steps: int | None = None,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    name: str | None = None,
    keep_trajectories: bool = True,
    concurrency: int = 1,
) -> EvalResult:
    """Run ``agent`` in ``env_id`` and record success, reward and length per episode.

    Args:
        env_id: a registered env id.
        agent: the agent (an instance; its history is reset every episode), or an Agent
            class or factory, one agent per concurrent episode.
        tasks: tasks or task ids, cycled; ``None`` lets the env draw (seeded) tasks.
        n_episodes: episodes to run (default: one per task; required when ``tasks`` is None).
        max_steps: step limit per episode (default: the env's).
        seed: episode ``i`` uses seed ``seed + i``, so two agents see the same episodes.
        env_kwargs: extra env arguments (e.g. ``{"family": "order_status", "split": "heldout"}``).
        name: label in reports (default ``agent.name``).
        keep_trajectories: keep the trajectories on the result.
        concurrency: episodes run at once (needs a class or factory above 1). Agents of one
            :class:`~knowlyr.agents.inference.AgentInference` share its batched generator.

    The reward of an episode is ``outcome.score`` when the env sets it, else the sum of the
    step rewards; a failed or cut-off episode counts as a failure.
    """
    from knowlyr.rollout import collect

    if n_episodes is None:
        if tasks is None:
            raise ConfigError("pass n_episodes, or tasks to run one episode per task")
        n_episodes = len(tasks)
    if n_episodes < 1:
        raise ConfigError(f"n_episodes must be positive, got {n_episodes}")
    trajs = collect(
        env_id,
        agent,
        n_episodes,
        max_steps=max_steps,
        tasks=tasks,
        seed=seed,
        env_kwargs=env_kwargs,
        concurrency=concurrency,
    )
    label = name or getattr(agent, "name", None) or (trajs[0].agent.name if trajs else "agent")
    return EvalResult(
        agent=label,
        env_id=env_id,
        task_ids=[t.task.task_id for t in trajs],
        successes=[bool(t.outcome.success) for t in trajs],
        rewards=[_reward(t) for t in trajs],
        steps=[len(t.steps) for t in trajs],
        trajectories=trajs if keep_trajectories else [],
        seeds=[int(t.metadata.get("seed", seed + i)) for i, t in enumerate(trajs)],
    )


def wilson_interval(k: int, n: int, *, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials.

    Example:
        >>> [round(x, 3) for x in wilson_interval(45, 100)]
        [0.356, 0.548]
    """
    from scipy.stats import norm

    if n <= 0:
        return (0.0, 1.0)
    z = float(norm.ppf(0.5 + level / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact(before: Sequence[bool], after: Sequence[bool]) -> float:
    """Two-sided exact McNemar p-value for paired successes (the same tasks, in order): a
    binomial test of the tasks only ``after`` solved against those only ``before`` solved.

    Example:
        >>> round(mcnemar_exact([False] * 17 + [True] * 8, [True] * 17 + [False] * 8), 3)
        0.108
        >>> mcnemar_exact([True, False], [True, False])
        1.0
    """
    from scipy.stats import binomtest

    if len(before) != len(after):
        raise ConfigError(
            f"mcnemar_exact needs paired outcomes, got {len(before)} and {len(after)}"
        )
    gained = sum(bool(b) and not a for a, b in zip(before, after, strict=True))
    lost = sum(bool(a) and not b for a, b in zip(before, after, strict=True))
    if gained + lost == 0:
        return 1.0
    return float(binomtest(gained, gained + lost, 0.5).pvalue)


def fisher_greater(a: Sequence[bool], b: Sequence[bool]) -> float:
    """One-sided Fisher exact p-value that ``a``'s success rate is above ``b``'s.

    Example:
        >>> fisher_greater([True] * 30 + [False] * 10, [True] * 10 + [False] * 30) < 1e-4
        True
    """
    from scipy.stats import fisher_exact

    table = [[sum(a), len(a) - sum(a)], [sum(b), len(b) - sum(b)]]
    return float(fisher_exact(table, alternative="greater")[1])


def _reward(t: Trajectory) -> float:
    if t.outcome.score is not None:
        return float(t.outcome.score)
    return t.total_reward


def bootstrap_ci(
    a: Sequence[float],
    b: Sequence[float] | None = None,
    *,
    level: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    paired: bool = False,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``mean(a)`` or of ``mean(b) - mean(a)``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    xa = np.asarray(a, dtype=float)
    if len(xa) == 0:
        return (math.nan, math.nan)
    if b is None:
        idx = rng.integers(0, len(xa), size=(n_resamples, len(xa)))
        stats = xa[idx].mean(axis=1)
    else:
        xb = np.asarray(b, dtype=float)
        if len(xb) == 0:
            return (math.nan, math.nan)
        if paired:
            d = xb - xa
            stats = d[rng.integers(0, len(d), size=(n_resamples, len(d)))].mean(axis=1)
        else:
            ia = rng.integers(0, len(xa), size=(n_resamples, len(xa)))
            ib = rng.integers(0, len(xb), size=(n_resamples, len(xb)))
            stats = xb[ib].mean(axis=1) - xa[ia].mean(axis=1)
    alpha = (1 - level) / 2
    return (float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha)))


@dataclass
class Comparison:
    """One agent against the baseline. ``*_p_adj`` are Bonferroni-corrected p-values."""

    agent: str
    baseline: str
    n_agent: int
    n_baseline: int
    success_rate: float
    baseline_success_rate: float
    success_diff: float
    fisher_odds_ratio: float
    fisher_p: float
    ztest_z: float
    ztest_p: float
    reward_diff: float
    reward_diff_ci: tuple[float, float]
    welch_t: float
    welch_p: float
    paired: bool
    paired_t: float
    paired_p: float
    mannwhitney_u: float
    mannwhitney_p: float
    cohens_d: float
    n_comparisons: int
    fisher_p_adj: float
    welch_p_adj: float
    mannwhitney_p_adj: float
    paired_p_adj: float
    significant: bool
    mcnemar_p: float = math.nan
    mcnemar_p_adj: float = math.nan
    success_test: str = "fisher"
    success_p_adj: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ComparisonReport:
    """Pairwise comparisons against a baseline and the leaderboard."""

    results: list[EvalResult]
    baseline: str
    comparisons: list[Comparison]
    alpha: float

    @property
    def leaderboard(self) -> list[dict[str, Any]]:
        """One row per agent, best success rate (then mean reward) first, with 1-based rank."""
        rows = sorted(
            (r.summary() for r in self.results),
            key=lambda s: (-s["success_rate"], -s["mean_reward"]),
        )
        by_agent = {c.agent: c for c in self.comparisons}
        for i, row in enumerate(rows, 1):
            row["rank"] = i
            c = by_agent.get(row["agent"])
            row["vs_baseline_p_adj"] = c.success_p_adj if c else None
            row["significant"] = c.significant if c else None
        return rows

    def to_markdown(self) -> str:
        lines = [
            "| rank | agent | episodes | success (95% CI) | mean reward | p vs baseline (Bonferroni) |",
            "|---|---|---|---|---|---|",
        ]
        for r in self.leaderboard:
            p = "baseline" if r["agent"] == self.baseline else f"{r['vs_baseline_p_adj']:.3g}"
            lines.append(
                f"| {r['rank']} | {r['agent']} | {r['episodes']} | {r['success_rate']:.1%} "
                f"({r['success_ci_low']:.1%}-{r['success_ci_high']:.1%}) | {r['mean_reward']:.3f} | {p} |"
            )
        return "\n".join(lines) + "\n"

    def to_store(self, store: Any, *, eval_id: str) -> Any:
        """Append every agent's episodes to the ``evaluations`` table (one transaction).

        The leaderboard can then be rebuilt from the store with :func:`leaderboard_from_store`.
        """
        rows = [row for r in self.results for row in r.to_rows(eval_id)]
        return store.append("evaluations", rows)


def leaderboard_from_store(store: Any, *, eval_id: str | None = None) -> Any:
    """The leaderboard (a polars frame) from the store's ``evaluations`` table.

    One row per (eval_id, agent, checkpoint): episodes, success rate, mean score and mean steps,
    best success rate first.
    """
    import polars as pl

    df = store.read("evaluations")
    if eval_id is not None:
        df = df.filter(pl.col("eval_id") == eval_id)
    return (
        df.group_by("eval_id", "agent", "checkpoint")
        .agg(
            pl.len().alias("episodes"),
            pl.col("success").cast(pl.Float64).mean().alias("success_rate"),
            pl.col("score").mean().alias("mean_score"),
            pl.col("n_steps").mean().alias("mean_steps"),
        )
        .sort(["success_rate", "mean_score"], descending=True)
    )


def _safe(x: Any) -> float:
    x = float(x)
    return x if math.isfinite(x) else math.nan


def compare_agents(
    results: Sequence[EvalResult],
    *,
    baseline: int | str = 0,
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> ComparisonReport:
    """Compare every agent with the baseline on success rate and reward.

    Args:
        results: one :class:`EvalResult` per agent (two or more).
        baseline: index or agent name of the baseline (default: the first).
        alpha: significance level after Bonferroni correction (``significant`` uses
            ``success_test`` on success when success rates differ: McNemar's exact test when
            both agents ran the same task ids in the same order, else Fisher's exact test;
            Welch's t on reward when they do not differ).
        n_resamples: bootstrap resamples for the reward-difference CI.
        seed: bootstrap seed.

    The paired t-test runs only when both agents ran the same task ids in the same order
    (e.g. both evaluated with the same ``tasks`` and ``seed``); otherwise its fields are NaN.
    Tests with no variance at all (e.g. both agents always 0) report NaN t and p = 1.
    """
    from scipy import stats

    if len(results) < 2:
        raise ConfigError(f"compare_agents needs at least two results, got {len(results)}")
    names = [r.agent for r in results]
    if len(set(names)) != len(names):
        raise ConfigError(
            f"agent names must be unique to compare them, got {names}; pass name= to evaluate_agent"
        )
    base = results[names.index(baseline)] if isinstance(baseline, str) else results[baseline]
    others = [r for r in results if r is not base]
    m = len(others)
    out: list[Comparison] = []
    for r in others:
        if not r.n or not base.n:
            raise ConfigError(
                f"cannot compare empty results ({r.agent}: {r.n}, {base.agent}: {base.n})"
            )
        s1, n1, s0, n0 = sum(r.successes), r.n, sum(base.successes), base.n
        odds, fisher_p = stats.fisher_exact([[s1, n1 - s1], [s0, n0 - s0]])
        pooled = (s1 + s0) / (n1 + n0)
        se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n0))
        z = (s1 / n1 - s0 / n0) / se if se > 0 else math.nan
        zp = float(2 * stats.norm.sf(abs(z))) if se > 0 else 1.0
        ra, rb = base.rewards, r.rewards
        var_zero = _var(ra) == 0 and _var(rb) == 0
        if var_zero:
            welch_t, welch_p = math.nan, 1.0 if _mean(ra) == _mean(rb) else math.nan
        else:
            w = stats.ttest_ind(rb, ra, equal_var=False)
            welch_t, welch_p = _safe(w.statistic), _safe(w.pvalue)
        paired = r.task_ids == base.task_ids and n1 == n0
        paired_t = paired_p = mcnemar_p = math.nan
        if paired:
            mcnemar_p = mcnemar_exact(base.successes, r.successes)
            diffs = [b - a for a, b in zip(ra, rb, strict=True)]
            if _var(diffs) == 0:
                paired_p = 1.0 if _mean(diffs) == 0 else math.nan
            else:
                pt = stats.ttest_rel(rb, ra)
                paired_t, paired_p = _safe(pt.statistic), _safe(pt.pvalue)
        if var_zero and _mean(ra) == _mean(rb):
            mw_u, mw_p = math.nan, 1.0
        else:
            mw = stats.mannwhitneyu(rb, ra, alternative="two-sided")
            mw_u, mw_p = _safe(mw.statistic), _safe(mw.pvalue)
        pooled_sd = math.sqrt((_var(ra) + _var(rb)) / 2)
        d = (_mean(rb) - _mean(ra)) / pooled_sd if pooled_sd > 0 else math.nan
        adj = lambda p: min(1.0, p * m) if not math.isnan(p) else math.nan  # noqa: E731
        # success on the same tasks is paired data: McNemar's exact test reads only the tasks
        # whose outcome changed, where Fisher's treats the two samples as independent
        success_test, success_p = ("mcnemar", mcnemar_p) if paired else ("fisher", fisher_p)
        primary = adj(success_p) if s1 / n1 != s0 / n0 else adj(welch_p)
        out.append(
            Comparison(
                agent=r.agent,
                baseline=base.agent,
                n_agent=n1,
                n_baseline=n0,
                success_rate=s1 / n1,
                baseline_success_rate=s0 / n0,
                success_diff=s1 / n1 - s0 / n0,
                fisher_odds_ratio=_safe(odds),
                fisher_p=float(fisher_p),
                ztest_z=z,
                ztest_p=zp,
                reward_diff=_mean(rb) - _mean(ra),
                reward_diff_ci=bootstrap_ci(
                    ra, rb, n_resamples=n_resamples, seed=seed, paired=paired
                ),
                welch_t=welch_t,
                welch_p=welch_p,
                paired=paired,
                paired_t=paired_t,
                paired_p=paired_p,
                mannwhitney_u=mw_u,
                mannwhitney_p=mw_p,
                cohens_d=d,
                n_comparisons=m,
                fisher_p_adj=adj(float(fisher_p)),
                welch_p_adj=adj(welch_p),
                mannwhitney_p_adj=adj(mw_p),
                paired_p_adj=adj(paired_p),
                significant=bool(not math.isnan(primary) and primary < alpha),
                mcnemar_p=mcnemar_p,
                mcnemar_p_adj=adj(mcnemar_p),
                success_test=success_test,
                success_p_adj=adj(success_p),
            )
        )
    return ComparisonReport(
        results=list(results), baseline=base.agent, comparisons=out, alpha=alpha
    )


def _mean(x: Sequence[float]) -> float:
    return sum(x) / len(x) if len(x) else math.nan


def _var(x: Sequence[float]) -> float:
    if len(x) < 2:
        return 0.0
    mu = _mean(x)
    return sum((v - mu) ** 2 for v in x) / (len(x) - 1)
