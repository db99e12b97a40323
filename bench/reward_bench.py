"""Reward benchmarks: the rule layer over 1,000,000 steps and LLM-judge throughput.

Run by hand::

    .venv/bin/python bench/reward_bench.py                 # both parts
    .venv/bin/python bench/reward_bench.py --steps 200000  # smaller rule run
    .venv/bin/python bench/reward_bench.py --skip-rules    # judge part only

Rule layer: 20-step coding trajectories with ~500-character outputs (TARGETS.md workload).
We time (1) the vectorised rules on the flat step table (:func:`rule_scores`), (2) the
extraction of that table from Trajectory objects (:func:`step_table`), and the figure the
budget names, the whole layer from Trajectory objects as ``RewardEngine`` runs it in
rule-only mode (:func:`score_rules`, which pipelines (2) and (1) chunk by chunk over two
threads), ``--repeat`` times interleaved (medians printed, wall and CPU time of all threads),
against a per-step pure-Python loop computing the same four rules the way the original did
(one step at a time, Python sets and regexes), timed on ``--baseline-steps`` steps (100k by
default). Budget: <= 2 us/step over 1M steps; original baseline: 26.4 us/step.

Judge: ``LLMJudge`` with the official Anthropic and OpenAI SDKs against the local
:class:`knowlyr.reward.testing.JudgeServer` answering every call after 200 ms, at
concurrency 1 and 16. Budget: >= 60 calls/s at 16 in flight; sequential baseline 5 calls/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import string
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from knowlyr.core import get_profile
from knowlyr.reward.actions import REGION, REPLACE, UNDO, action_facets
from knowlyr.reward.rules import (
    TOKEN_PATTERN,
    reference_steps,
    rule_scores,
    score_rules,
    step_table,
)
from knowlyr.trajectory import Observation, Step, TaskInfo, ToolCall, Trajectory


def make_trajectories(n_steps: int, *, seed: int = 0, steps_per_traj: int = 20) -> list[Trajectory]:
    """Synthetic 20-step coding trajectories with ~500-character outputs."""
    rng = random.Random(seed)
    words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "else"]
    out: list[Trajectory] = []
    n_traj = max(1, n_steps // steps_per_traj)
    for t in range(n_traj):
        files = [f"src/mod_{rng.randrange(50)}/file_{rng.randrange(1000)}.py" for _ in range(4)]
        steps = []
        for i in range(steps_per_traj):
            kind = rng.random()
            f = rng.choice(files)
            if kind < 0.35:
                call = ToolCall(tool="read_file", params={"path": f})
            elif kind < 0.55:
                a, b = rng.sample(words, 2)
                call = ToolCall(tool="edit_file", params={"path": f, "old": a, "new": b})
            elif kind < 0.8:
                call = ToolCall(tool="bash", params={"command": f"python -m pytest {f} -q"})
            elif kind < 0.95:
                call = ToolCall(tool="grep", params={"pattern": rng.choice(words), "path": "src"})
            else:
                call = ToolCall(tool="submit", params={})
            body = " ".join(rng.choice(words) for _ in range(60))
            ident = "".join(rng.choices(string.ascii_lowercase, k=6))
            output = (f"{f}:{rng.randrange(300)}: {body} {ident}_{i} ok")[:500].ljust(500)
            steps.append(
                Step(index=i, action=call, observation=Observation(output=output, exit_code=0))
            )
        meta = {"reference_steps": 12} if t % 2 else {}
        out.append(
            Trajectory(
                id=f"t{t}", task=TaskInfo(task_id=f"task{t % 500}", metadata=meta), steps=steps
            )
        )
    return out


_TOKEN = re.compile(TOKEN_PATTERN)


def baseline_rules(
    trajectories: list[Trajectory], profile
) -> list[tuple[float, float, float | None, float | None]]:
    """The same four rules, one step at a time in pure Python (how the original computed them)."""
    lengths: dict[str, list[int]] = {}
    for t in trajectories:
        lengths.setdefault(t.task.task_id, []).append(len(t.steps))
    medians = {}
    for k, v in lengths.items():
        if len(v) >= 2:
            s = sorted(v)
            m = len(s) // 2
            medians[k] = s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2
    out = []
    for t in trajectories:
        ref = reference_steps(t.task) or medians.get(t.task.task_id)
        seen: dict[str, int] = {}  # signature -> state counter after it
        xcount = wcount = 0
        wfile: dict[str, int] = {}
        applied: set[tuple] = set()
        regions: dict[tuple, list] = {}
        revealed: set[str] = set()
        open_file = None
        for i, s in enumerate(t.steps):
            a = s.action
            f = action_facets(profile, a.tool, a.params, open_file)
            if f.category == "read" and f.target:
                open_file = f.target
            ok = s.observation is None or s.observation.exit_code in (None, 0)
            sig = repr((f.tool, a.tool, sorted(a.params.items()), f.target))
            before = xcount + (
                wfile.get(f.target, 0) if f.category == "read" and f.target else wcount
            )
            red = 0.0 if seen.get(sig) == before else 1.0
            is_w = f.category == "write" and ok
            is_x = f.category == "execute"
            seen[sig] = before + int(is_w) + int(is_x)
            reg = 1.0
            if is_w and f.edit_kind == REPLACE:
                if (f.target, f.new, f.old) in applied:
                    reg = 0.0
                applied.add((f.target, f.old, f.new))
            elif is_w and f.edit_kind == REGION:
                hist = regions.setdefault((f.target, f.old), [])
                if hist and hist[-1] != f.new and f.new in hist:
                    reg = 0.0
                hist.append(f.new)
            elif is_w and f.edit_kind == UNDO:
                reg = 0.0
            toks = set(_TOKEN.findall(" ".join(str(v) for v in a.params.values())))
            info = (1.0 if toks & revealed else 0.0) if toks and revealed else None
            eff = None if ref is None else (1.0 if i + 1 <= ref else ref / (i + 1))
            out.append((red, reg, info, eff))
            xcount += is_x
            wcount += is_w
            if is_w and f.target:
                wfile[f.target] = wfile.get(f.target, 0) + 1
            if s.observation is not None:
                revealed.update(_TOKEN.findall(s.observation.output))
    return out


def _timed(fn):
    """(result, wall seconds, CPU seconds of this process: all its threads)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def bench_rules(n_steps: int, baseline_steps: int, repeat: int) -> None:
    profile = get_profile("coding")
    t0 = time.perf_counter()
    trajs = make_trajectories(n_steps)
    n = sum(len(t.steps) for t in trajs)
    print(f"built {len(trajs):,} trajectories ({n:,} steps) in {time.perf_counter() - t0:.1f} s")
    score_rules(trajs[:500], profile)  # warm-up: imports, regex compilation, thread pools
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average before timing: {load} on {os.cpu_count()} CPUs; {repeat} runs each")
    runs: dict[str, list[tuple[float, float]]] = {"table": [], "rules": [], "layer": []}
    for _ in range(repeat):  # interleaved, so that load changes hit all three alike
        table, w, c = _timed(partial(step_table, trajs, profile))
        runs["table"].append((w, c))
        scores, w, c = _timed(partial(rule_scores, table))
        runs["rules"].append((w, c))
        layer, w, c = _timed(partial(score_rules, trajs, profile))
        runs["layer"].append((w, c))
        assert layer.equals(scores), "score_rules and rule_scores(step_table) disagree"
    base = trajs[: max(1, baseline_steps // 20)]
    nb = sum(len(t.steps) for t in base)
    ref, w_base, c_base = _timed(lambda: baseline_rules(base, profile))
    ours_small = score_rules(base, profile)
    columns = ("non_redundancy", "non_regression", "info_utilization", "efficiency")
    agree = sum(
        1
        for r, row in zip(ref, ours_small.select(columns).iter_rows(), strict=True)
        if tuple(r) == row
    )

    def med(key: str, i: int) -> float:
        return statistics.median(x[i] for x in runs[key]) / n * 1e6

    print(f"{'median of the runs':34}{'wall us/step':>14}{'CPU us/step':>14}")
    for label, key in (
        ("rules on the step table (1)", "rules"),
        ("step-table extraction (2)", "table"),
        ("(1)+(2), one after the other", None),
        ("whole rule layer: score_rules", "layer"),
    ):
        if key is None:
            w, c = med("rules", 0) + med("table", 0), med("rules", 1) + med("table", 1)
        else:
            w, c = med(key, 0), med(key, 1)
        print(f"{label:34}{w:14.2f}{c:14.2f}")
    wb, cb = w_base / nb * 1e6, c_base / nb * 1e6
    print(f"{'pure-Python per-step baseline':34}{wb:14.2f}{cb:14.2f}   over {nb:,} steps")
    w, c = med("layer", 0), med("layer", 1)
    print(f"ratio baseline / whole layer   : wall {wb / w:5.1f}x  CPU {cb / c:5.1f}x")
    verdict = lambda x: "MET" if x <= 2.0 else "MISSED"  # noqa: E731
    print(
        f"budget <= 2 us/step over {n:,} steps (original 26.4): whole layer wall {w:.2f} "
        f"{verdict(w)}, CPU {c:.2f} {verdict(c)}"
    )
    print(f"baseline and score_rules agree on all four rubrics for {agree:,}/{nb:,} steps")


async def _judge_run(kind: str, url: str, concurrency: int, n_calls: int) -> float:
    from knowlyr.reward.judge import LLMJudge, make_backend

    backend = make_backend(f"{kind}:bench-model", base_url=url, api_key="test")
    judge = LLMJudge(backend, profile="coding", concurrency=concurrency, max_retries=0)
    trajs = make_trajectories(
        n_calls, steps_per_traj=n_calls if n_calls < 20 else 20, seed=concurrency
    )
    t0 = time.perf_counter()
    results = await judge.ajudge(trajs)
    dt = time.perf_counter() - t0
    ok = sum(1 for r in results for s in r if s.scores is not None)
    if ok != n_calls:
        raise SystemExit(f"{kind}: only {ok}/{n_calls} calls succeeded")
    return n_calls / dt


def _serve(latency: float, q) -> None:  # runs in a child process, like a remote API
    from knowlyr.reward.testing import JudgeServer

    with JudgeServer(latency=latency) as server:
        q.put(server.port)
        q.get()  # block until the parent says stop


def bench_judge(latency: float) -> None:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(latency, q), daemon=True)
    proc.start()
    port = q.get(timeout=60)
    try:
        for kind, url in (
            ("anthropic", f"http://127.0.0.1:{port}"),
            ("openai", f"http://127.0.0.1:{port}/v1"),
        ):
            seq = asyncio.run(_judge_run(kind, url, 1, 20))
            par = asyncio.run(_judge_run(kind, url, 16, 320))
            print(
                f"judge {kind:9} latency {latency * 1000:.0f} ms: concurrency 1 {seq:5.1f} calls/s, "
                f"16 {par:6.1f} calls/s ({par / seq:4.1f}x); budget >= 60 at 16: {'MET' if par >= 60 else 'MISSED'}"
            )
    finally:
        q.put("stop")
        proc.join(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--baseline-steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each rule-layer part")
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--skip-rules", action="store_true")
    ap.add_argument("--skip-judge", action="store_true")
    args = ap.parse_args()
    if not args.skip_rules:
        bench_rules(args.steps, args.baseline_steps, args.repeat)
    if not args.skip_judge:
        bench_judge(args.latency)


if __name__ == "__main__":
    main()
