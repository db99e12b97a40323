"""Per-step latency and reset time of the browser env, beside a fresh-browser-per-episode baseline.

The env keeps one Chromium across episodes: a reset is a site state rebuild, a new browser
context and one page load. The baseline starts a new Chromium for every episode (what a
driver without context reuse does). The scripted expert plays the episodes; each text step
(navigate, click, type_text, read_page, submit) is timed, and a screenshot step is taken
after every expert step. Budget: p50 <= 150 ms for a text step, <= 1 s for a reset.

    python bench/browser_bench.py --episodes 36 --store /tmp/browser-bench-store
"""

from __future__ import annotations

import argparse
import statistics
import time

import knowlyr
from knowlyr.agents import ExpertAgent
from knowlyr.taskset import sample


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def run(tasks, store: str, *, fresh_browser: bool, screenshots: bool) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"reset": [], "text": [], "screenshot": []}
    env = None
    for task in tasks:
        if env is None or fresh_browser:
            if env is not None:
                env.close()
            env = knowlyr.make("knowlyr/browser", store=store, max_steps=100)
        t0 = time.perf_counter()
        ts = env.reset(task=task)
        times["reset"].append(time.perf_counter() - t0)
        agent = ExpertAgent()
        agent.reset(ts.info)
        while not ts.done:
            action = agent.act(ts.observation, ts.info)
            if screenshots and action["tool"] != "submit":
                t0 = time.perf_counter()
                env.step({"tool": "screenshot", "params": {}})
                times["screenshot"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ts = env.step(action)
            times["text"].append(time.perf_counter() - t0)
            if ts.done and not ts.info.get("outcome", {}).get("success"):
                raise SystemExit(f"the expert failed {task.task_id}: {ts.info.get('outcome')}")
    env.close()
    return times


def row(name: str, xs: list[float]) -> str:
    if not xs:
        return f"| {name} | - | - | - |"
    return (
        f"| {name} | {len(xs)} | {1000 * pct(xs, 0.5):.0f} ms | {1000 * pct(xs, 0.95):.0f} ms |"
        f" {1000 * statistics.fmean(xs):.0f} ms |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=36, help="held-out tasks played")
    ap.add_argument("--baseline-episodes", type=int, default=9, help="episodes of the baseline")
    ap.add_argument("--store", required=True, help="store whose blobs keep the screenshots")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    tasks = sample("browser", args.episodes, seed=args.seed, split="heldout")
    shared = run(tasks, args.store, fresh_browser=False, screenshots=True)
    base = run(tasks[: args.baseline_episodes], args.store, fresh_browser=True, screenshots=False)
    print(f"browser env, {len(tasks)} held-out expert episodes (baseline: {len(base['reset'])})")
    print("| measure | n | p50 | p95 | mean |")
    print("|---|---|---|---|---|")
    print(row("text step (one browser, reused)", shared["text"]))
    print(row("screenshot step (PNG to the store)", shared["screenshot"]))
    print(row("reset (one browser, new context)", shared["reset"]))
    print(row("baseline: text step (fresh browser per episode)", base["text"]))
    print(row("baseline: reset (fresh browser per episode)", base["reset"]))
    ok_text = pct(shared["text"], 0.5) <= 0.150
    ok_reset = pct(shared["reset"], 0.5) <= 1.0
    print(
        f"budget: text step p50 <= 150 ms {'met' if ok_text else 'MISSED'}, "
        f"reset p50 <= 1 s {'met' if ok_reset else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
