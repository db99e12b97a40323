"""SFT export throughput: knowlyr.export.export_sft vs a naive per-row baseline.

Workload (TARGETS.md): 20-step coding trajectories with ~500-character outputs. The baseline
is what a straightforward exporter does: per trajectory, build the chat messages with
``Trajectory.to_messages`` (JSON-string arguments), json-dump them, collect row dicts and
``datasets.Dataset.from_list``. Ours is the whole export, end to end: Trajectory objects in,
filters, inferred tool schemas, step weights, ``datasets.Dataset`` and dataset card out.
Budget: >= 32,000 rows/s (original knowlyr: 3,200 rows/s).

The two run interleaved (A B A B ...) after a warm-up, so load changes hit both; rows/s is
wall time, best and median of the repeats. CPU time per row (``process_time``: all threads of
the process) is printed too: it is far less sensitive to other load than wall time. Before
timing, the bench checks that a row is exactly the format module's conversation (nothing
truncated).

    .venv/bin/python bench/export_bench.py [N] [REPEATS]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time


def make(n: int):
    from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory

    out = []
    for i in range(n):
        steps = [
            Step(
                index=j,
                thought=f"Inspect file {j} for the failing assertion.",
                action=ToolCall(tool="bash", params={"command": f"sed -n 1,40p src/mod_{j}.py"}),
                observation=Observation(output=(f"line {j}: " + "x" * 60 + "\n") * 7, exit_code=0),
                reward=0.5,
            )
            for j in range(20)
        ]
        out.append(
            Trajectory(
                task=TaskInfo(
                    task_id=f"task-{i % 1000}", instruction="Fix the failing test in mod."
                ),
                steps=steps,
                outcome=Outcome(success=True, score=1.0),
            )
        )
    return out


def baseline(trajs):
    from datasets import Dataset

    rows = []
    for t in trajs:
        if not t.outcome.success:
            continue
        rows.append(
            {
                "messages": json.dumps(t.to_messages(system_prompt="You are an agent.")),
                "task_id": t.task.task_id,
                "reward": t.outcome.score,
            }
        )
    return Dataset.from_list(rows)


def ours(trajs):
    from knowlyr.export import export_sft

    return export_sft(trajs, system_prompt="You are an agent.").dataset


def timed(fn, trajs) -> tuple[int, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    ds = fn(trajs)
    return len(ds), time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    from knowlyr.agents.action_format import trajectory_to_messages

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    trajs = make(n)
    first = ours(trajs[:50])[0]["messages"]  # warm imports; check one row in full
    assert first == trajectory_to_messages(trajs[0], system_prompt="You are an agent."), first
    baseline(trajs[:50])
    runs: dict[str, list[tuple[float, float]]] = {"baseline": [], "ours": []}
    for _ in range(repeats):
        for name, fn in (("baseline", baseline), ("ours", ours)):
            rows, wall, cpu = timed(fn, trajs)
            assert rows == n, (name, rows)
            runs[name].append((wall, cpu))

    def figures(name: str) -> tuple[float, float, float]:
        walls = [w for w, _ in runs[name]]
        cpus = [c for _, c in runs[name]]
        return n / min(walls), n / statistics.median(walls), statistics.median(cpus) / n * 1e6

    (rb, rb_med, cb), (ro, ro_med, co) = figures("baseline"), figures("ours")
    print(
        f"SFT export, {n} trajectories x 20 steps, ~500-char outputs, {repeats} interleaved "
        f"repeats (load {os.getloadavg()[0]:.1f})"
    )
    print(
        f"  naive per-row baseline: {rb:10,.0f} rows/s best, {rb_med:10,.0f} median;"
        f" CPU {cb:6.1f} us/row"
    )
    print(
        f"  knowlyr export_sft:     {ro:10,.0f} rows/s best, {ro_med:10,.0f} median;"
        f" CPU {co:6.1f} us/row   ({ro / rb:.1f}x baseline; budget 32,000 rows/s)"
    )


if __name__ == "__main__":
    main()
