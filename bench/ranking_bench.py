"""Does the rule-layer reward rank the scripted agents as they deserve, in every built-in env?

For each env (knowlyr/sandbox, engineering, conversation, advisory, discussion) the expert,
the noisy expert and the random agent run the same ``--episodes`` tasks (episode ``i`` draws
its task with seed ``--seed + i``). All runs of an env are scored in one batch by
``RewardEngine(<the env's domain>)``: rules only, no network, the profile's weights and
outcome weight, as a store version holding the three agents' runs is scored. Per env it
prints the success rate and mean total per agent, whether the means rank expert > noisy >
random, and the same-task pairs (same task, same seed) of expert and noisy runs: expert
ahead / tie / behind. The noisy expert makes at least ``--min-noise`` flaws per episode (1 by
default): a noisy run without a flaw is the expert's own run, which can only tie; such runs
(none with ``--min-noise 1``) are counted as ``identical`` and left out of the pairs, while a
tie between different runs counts against the reward (a flaw it did not notice).

Columns, measured in the same run on the same trajectories (the baseline is reproduced by
swapping the two rule internals back for the scoring, nothing else):

- ``before``: the setting of the issue: outcome weight 0, the previous salient-token pattern
  (no e-mail addresses, no upper-case ids without digits) and the previous efficiency
  reference (the median length of all of a task's runs in the batch, failed ones included);
- ``ow only``: the profile's outcome weight (0.5) with the previous tokens and reference;
- ``now``: the defaults.

``--batch agent`` scores each agent's runs on their own instead: no other run of a task is
in the batch, so efficiency has no reference from the batch (see the printed figures).
``--per-kind`` adds, per env and flaw kind, runs with exactly one flaw of that kind (before
the expert's final action) and the rubrics that cost those runs something.

Usage::

    .venv/bin/python bench/ranking_bench.py [--episodes 40] [--noise 0.3] [--seed 0]
    .venv/bin/python bench/ranking_bench.py --episodes 20 --per-kind
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from knowlyr.agents import NOISE_KINDS, ExpertAgent, NoisyExpert, RandomAgent
from knowlyr.reward.engine import RewardEngine
from knowlyr.rollout import collect
from knowlyr.trajectory import Trajectory

ENVS = (
    "knowlyr/sandbox",
    "knowlyr/engineering",
    "knowlyr/conversation",
    "knowlyr/advisory",
    "knowlyr/discussion",
)
AGENTS = ("expert", "noisy", "random")

#: The salient-token pattern before e-mail addresses and upper-case ids were added.
PREVIOUS_TOKEN_PATTERN = (
    r"[A-Za-z0-9_][\w\-]*(?:\.[A-Za-z_][\w\-]*)+|[A-Za-z_]\w*_\w+|[A-Za-z]+\d\w*|\d{3,}"
)


def _previous_references(per_traj, default=None):
    """The efficiency reference as it was: the median length of all of a task's runs."""
    import polars as pl

    median = (
        per_traj.filter(pl.col("n_steps") > 0)
        .group_by("task")
        .agg(_med=pl.col("n_steps").median(), _cnt=pl.len())
        .filter(pl.col("_cnt") >= 2)
    )
    return (
        per_traj.join(median, on="task", how="left", maintain_order="left")
        .select(reference=pl.coalesce("ref_steps", "_med", pl.lit(default, pl.Float64)))
        .to_series()
    )


@contextmanager
def previous_rules() -> Iterator[None]:
    """Score with the previous token pattern and efficiency reference (restored after)."""
    from knowlyr.reward import facets, rules

    saved = facets.TOKEN_PATTERN, rules.TOKEN_PATTERN, rules._references
    facets.TOKEN_PATTERN = rules.TOKEN_PATTERN = PREVIOUS_TOKEN_PATTERN
    rules._references = _previous_references
    try:
        yield
    finally:
        facets.TOKEN_PATTERN, rules.TOKEN_PATTERN, rules._references = saved


@dataclass(frozen=True)
class Setting:
    label: str
    outcome_weight: float | None  # None: the profile's
    previous_rules: bool


SETTINGS = (
    Setting("before", 0.0, True),
    Setting("ow only", None, True),
    Setting("now", None, False),
)


@dataclass
class Figures:
    """One env under one setting."""

    means: dict[str, float]
    wins: int
    ties: int
    losses: int
    identical: int
    unscored: int

    @property
    def pairs(self) -> int:
        return self.wins + self.ties + self.losses

    @property
    def ranked(self) -> bool:
        m = self.means
        return m["expert"] > m["noisy"] > m["random"]

    @property
    def win_rate(self) -> float:
        return self.wins / self.pairs if self.pairs else float("nan")


def run_agents(
    env_id: str, factories: dict[str, Callable], n: int, seed: int
) -> dict[str, list[Trajectory]]:
    runs = {name: collect(env_id, f, n, seed=seed, concurrency=2) for name, f in factories.items()}
    ids = {name: [t.task.task_id for t in ts] for name, ts in runs.items()}
    first = next(iter(ids.values()))
    if any(v != first for v in ids.values()):
        raise RuntimeError(f"{env_id}: the agents did not run the same tasks")
    return runs


def totals(
    runs: dict[str, list[Trajectory]], domain: str, setting: Setting, batch: str
) -> dict[str, list[float | None]]:
    engine = RewardEngine(domain, outcome_weight=setting.outcome_weight)
    with previous_rules() if setting.previous_rules else _nothing():
        if batch == "env":
            every = [t for ts in runs.values() for t in ts]
            scored = [r.total for r in engine.score(every)]
            out, i = {}, 0
            for name, ts in runs.items():
                out[name] = scored[i : i + len(ts)]
                i += len(ts)
            return out
        return {name: [r.total for r in engine.score(ts)] for name, ts in runs.items()}


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def figures(runs: dict[str, list[Trajectory]], scores: dict[str, list[float | None]]) -> Figures:
    means = {
        name: statistics.fmean([x for x in xs if x is not None] or [float("nan")])
        for name, xs in scores.items()
    }
    wins = ties = losses = identical = 0
    for e, o, te, to in zip(
        scores["expert"], scores["noisy"], runs["expert"], runs["noisy"], strict=True
    ):
        if te.id == to.id:
            identical += 1
        elif e is None or o is None or e == o:
            ties += 1
        elif e > o:
            wins += 1
        else:
            losses += 1
    unscored = sum(x is None for xs in scores.values() for x in xs)
    return Figures(means, wins, ties, losses, identical, unscored)


def report_env(env_id: str, runs: dict[str, list[Trajectory]], batch: str) -> dict[str, Figures]:
    domain = runs["expert"][0].task.domain
    figs = {s.label: figures(runs, totals(runs, domain, s, batch)) for s in SETTINGS}
    success = {
        name: sum(bool(t.outcome.success) for t in ts) / len(ts) for name, ts in runs.items()
    }
    w = 30
    print(f"{'':{w}}" + "".join(f"{s.label:>16}" for s in SETTINGS))
    for name in AGENTS:
        print(
            f"{'mean total ' + name:{w}}"
            + "".join(f"{figs[s.label].means[name]:16.3f}" for s in SETTINGS)
            + f"   success {success[name]:.0%}"
        )
    print(
        f"{'expert > noisy > random':{w}}"
        + "".join(f"{'yes' if figs[s.label].ranked else 'NO':>16}" for s in SETTINGS)
    )
    print(
        f"{'expert ahead of noisy':{w}}"
        + "".join(
            f"{f'{f.wins}/{f.pairs} {f.win_rate:.0%}':>16}"
            for f in (figs[s.label] for s in SETTINGS)
        )
    )
    print(
        f"{'ties / noisy ahead':{w}}"
        + "".join(f"{f'{f.ties} / {f.losses}':>16}" for f in (figs[s.label] for s in SETTINGS))
    )
    now = figs["now"]
    print(f"{'identical runs (left out)':{w}}{now.identical:16d}")
    if any(f.unscored for f in figs.values()):
        print(f"{'unscored runs (no step)':{w}}{now.unscored:16d}")
    return figs


_TOLERANCE = 1e-9


def report_kinds(env_id: str, n: int, seed: int, expert: list[Trajectory], rnd: list[Trajectory]):
    """One flaw of each kind per run: which rubrics cost the flawed runs something."""
    domain = expert[0].task.domain
    for kind in NOISE_KINDS:

        def flawed(kind=kind):
            return NoisyExpert(noise=0.0, seed=seed, kinds=(kind,), min_noise=1, max_noise=1)

        noisy = collect(env_id, flawed, n, seed=seed, concurrency=2)
        pairs = [(e, o) for e, o in zip(expert, noisy, strict=True) if e.id != o.id]
        if not pairs:
            print(f"  {kind:13} not usable here")
            continue
        line = f"  {kind:13} {len(pairs):3d} runs"
        for setting in (SETTINGS[1], SETTINGS[2]):
            engine = RewardEngine(domain, outcome_weight=setting.outcome_weight)
            with previous_rules() if setting.previous_rules else _nothing():
                scored = engine.score(expert + noisy + rnd)
            re_, rn = scored[:n], scored[n : 2 * n]
            ahead, hit = 0, {}
            for (e, o), a, b in zip(zip(expert, noisy, strict=True), re_, rn, strict=True):
                if e.id == o.id:
                    continue
                ahead += a.total > b.total
                for name, v in b.rubric_scores.items():
                    if v < a.rubric_scores.get(name, 1.0) - _TOLERANCE:
                        hit[name] = hit.get(name, 0) + 1
            rubrics = ", ".join(f"{k} {v}" for k, v in sorted(hit.items(), key=lambda kv: -kv[1]))
            line += (
                f" | {setting.label}: expert ahead {ahead}/{len(pairs)}; lower: {rubrics or '-'}"
            )
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--episodes", type=int, default=40, help="episodes per agent and env")
    ap.add_argument("--noise", type=float, default=0.3, help="the noisy expert's noise")
    ap.add_argument("--seed", type=int, default=0, help="episode i draws its task with seed+i")
    ap.add_argument(
        "--min-noise", type=int, default=1, help="flaws per noisy episode at least (0: by chance)"
    )
    ap.add_argument("--batch", choices=("env", "agent"), default="env",
                    help="score all runs of an env in one batch, or each agent's alone")  # fmt: skip
    ap.add_argument("--per-kind", action="store_true", help="also one flaw of each kind")
    ap.add_argument("--envs", nargs="*", default=list(ENVS), help="env ids (default: all five)")
    args = ap.parse_args()
    if args.episodes < 1:
        ap.error(f"--episodes must be positive, got {args.episodes}")

    n, seed = args.episodes, args.seed
    factories = {
        "expert": ExpertAgent,
        "noisy": lambda: NoisyExpert(noise=args.noise, seed=seed + 1, min_noise=args.min_noise),
        "random": lambda: RandomAgent(seed=seed + 1),
    }
    print(
        f"{n} episodes per agent and env, seed {seed}, noise {args.noise}, min_noise "
        f"{args.min_noise}, one batch per {args.batch}; rules only, default profiles"
    )
    summary = {}
    for env_id in args.envs:
        t0 = time.perf_counter()
        runs = run_agents(env_id, factories, n, seed)
        print(f"\n{env_id} ({time.perf_counter() - t0:.1f} s to run {3 * n} episodes)")
        summary[env_id] = report_env(env_id, runs, args.batch)
        if args.per_kind:
            print(
                " one flaw of a kind per run (same tasks; scored with the expert and random runs):"
            )
            report_kinds(env_id, n, seed, runs["expert"], runs["random"])

    print(f"\n{'summary':24}" + "".join(f"{s.label:>22}" for s in SETTINGS))
    for env_id, figs in summary.items():
        cells = "".join(
            f"{('ranked' if f.ranked else 'NOT ranked') + f', {f.win_rate:.0%} ahead':>22}"
            for f in (figs[s.label] for s in SETTINGS)
        )
        print(f"{env_id:24}{cells}")
    done = all(f["now"].ranked and f["now"].win_rate >= 0.95 for f in summary.values())
    print(
        "done when (every env: expert > noisy > random, expert ahead in >= 95% of pairs): "
        + ("met" if done else "NOT met")
    )


if __name__ == "__main__":
    main()
