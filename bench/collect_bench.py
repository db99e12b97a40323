"""Episodes per second of ``collect`` at concurrency 1, 2 and 4 (coding and conversation envs).

Baselines measured in the same run:
- a plain single-threaded loop (``env.reset`` / ``agent.act`` / ``env.step``, no recorder,
  no collect): what collect's bookkeeping costs;
- ``collect`` at concurrency 1: what threads buy (the ratio column).

Also prints the sandbox env's reset time (p50 / p95) for a task whose workspace snapshot is
cached (a restore) and for a first visit (files + git init + snapshot).

Usage: .venv/bin/python bench/collect_bench.py [--episodes 60] [--tasks 12]
"""

from __future__ import annotations

import argparse
import statistics
import time

import knowlyr
from knowlyr.agents import ExpertAgent
from knowlyr.rollout import collect
from knowlyr.taskset import sample


def plain_loop(env_id: str, tasks, n: int) -> float:
    env = knowlyr.make(env_id)
    agent = ExpertAgent()
    try:
        t0 = time.perf_counter()
        for i in range(n):
            ts = env.reset(task=tasks[i % len(tasks)])
            agent.reset(ts.info)
            while not ts.done:
                ts = env.step(agent.act(ts.observation, ts.info))
        return n / (time.perf_counter() - t0)
    finally:
        env.close()


def collect_rate(env_id: str, tasks, n: int, concurrency: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    trajs = collect(env_id, ExpertAgent, n, tasks=tasks, concurrency=concurrency)
    rate = n / (time.perf_counter() - t0)
    return rate, sum(bool(t.outcome.success) for t in trajs) / n


def reset_times(tasks) -> tuple[list[float], list[float]]:
    env = knowlyr.make("knowlyr/sandbox")
    first, cached = [], []
    try:
        for t in tasks:
            t0 = time.perf_counter()
            env.reset(task=t)
            first.append(time.perf_counter() - t0)
        for _ in range(3):
            for t in tasks:
                env.step(
                    {"tool": "write_file", "params": {"path": "scratch.txt", "content": "x" * 100}}
                )
                t0 = time.perf_counter()
                env.reset(task=t)
                cached.append(time.perf_counter() - t0)
    finally:
        env.close()
    return first, cached


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=60, help="episodes per measurement")
    ap.add_argument("--tasks", type=int, default=12, help="distinct tasks, cycled")
    args = ap.parse_args()
    print(f"{'env':22} {'runner':22} {'episodes/s':>11} {'vs conc. 1':>10} {'success':>8}")
    for env_id, suite in (("knowlyr/sandbox", "coding"), ("knowlyr/conversation", "conversation")):
        tasks = sample(suite, args.tasks, seed=0, split="heldout")
        n = args.episodes if suite == "coding" else args.episodes * 20
        collect_rate(env_id, tasks, min(n, 2 * len(tasks)), 1)  # warm imports and caches
        base = plain_loop(env_id, tasks, n)
        print(f"{env_id:22} {'plain loop (baseline)':22} {base:11.1f} {'':>10} {'':>8}")
        one = None
        for c in (1, 2, 4):
            rate, ok = collect_rate(env_id, tasks, n, c)
            one = one or rate
            print(
                f"{env_id:22} {f'collect concurrency={c}':22} {rate:11.1f} "
                f"{rate / one:9.2f}x {ok:8.0%}"
            )
    first, cached = reset_times(sample("coding", args.tasks, seed=1))
    print(
        f"\nknowlyr/sandbox reset: cached snapshot p50 {pct(cached, 0.5):.1f} ms, "
        f"p95 {pct(cached, 0.95):.1f} ms; "
        f"first visit p50 {pct(first, 0.5):.1f} ms (mean {statistics.mean(first) * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    main()
