"""SFT export throughput: knowlyr.export.export_sft vs a naive per-row baseline.

Workload (TARGETS.md): 20-step coding trajectories with ~500-character outputs. The baseline
is what a straightforward exporter does: per trajectory, build the chat messages with
``Trajectory.to_messages`` (JSON-string arguments), json-dump them, collect row dicts and
``datasets.Dataset.from_list``. Budget: >= 32,000 rows/s (original knowlyr: 3,200 rows/s).

    .venv/bin/python bench/export_bench.py [N]
"""

from __future__ import annotations

import json
import os
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


def best_of(fn, trajs, repeat=3):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        ds = fn(trajs)
        times.append(time.perf_counter() - t0)
    return len(ds), min(times)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    trajs = make(n)
    ours(trajs[:10]), baseline(trajs[:10])  # warm imports
    rows_b, tb = best_of(baseline, trajs)
    rows_o, to = best_of(ours, trajs)
    assert rows_o == rows_b == n
    rb, ro = rows_b / tb, rows_o / to
    print(
        f"SFT export, {n} trajectories x 20 steps, ~500-char outputs (load {os.getloadavg()[0]:.1f})"
    )
    print(f"  naive per-row baseline: {rb:10,.0f} rows/s")
    print(
        f"  knowlyr export_sft:     {ro:10,.0f} rows/s   ({ro / rb:.1f}x baseline; budget 32,000 rows/s)"
    )


if __name__ == "__main__":
    main()
