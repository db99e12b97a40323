"""SFT export throughput: knowlyr.export.export_sft vs a naive per-row baseline.

Workload (TARGETS.md): 20-step coding trajectories with ~500-character outputs. The baseline
is what a straightforward exporter does: per trajectory, build the chat messages with
``Trajectory.to_messages`` (JSON-string arguments), json-dump them, collect row dicts and
``datasets.Dataset.from_list``. Ours is the whole export, end to end: Trajectory objects in,
filters, inferred tool schemas, step weights, ``datasets.Dataset`` and dataset card out.
Budget: >= 32,000 rows/s (original knowlyr: 3,200 rows/s).

Also timed, the columnar paths: ``export_sft`` of the trajectories' JSON documents as the store
keeps them (``validated=True``: no models), and ``save_sft`` of those documents into an export
folder (streamed, the ``datasets`` library unused) beside ``export_sft(models).save(...)``.
The side-by-side with the original knowlyr (file and store to folder, whole processes) is
``bench/anchor_bench.py --stages export-file,export-store``.

The two run interleaved (A B A B ...) after a warm-up, so load changes hit both; rows/s is
wall time, best and median of the repeats. CPU time per row (``process_time``: all threads of
the process) is printed too: it is far less sensitive to other load than wall time. Before
timing, the bench checks that a row is exactly the conversation the exports write
(``knowlyr.export.messages.trajectory_messages``: call ids, tool answers naming them), nothing
truncated.

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


def ours_documents(docs):
    from knowlyr.export import export_sft

    return export_sft(iter(docs), system_prompt="You are an agent.", validated=True).dataset


def saved_models(trajs):
    """export_sft of the models, saved as a folder (returns the row count)."""
    import tempfile

    from knowlyr.export import export_sft

    res = export_sft(trajs, system_prompt="You are an agent.")
    with tempfile.TemporaryDirectory() as d:
        res.save(d)
    return [None] * len(res)


def saved_documents(docs):
    """save_sft of the documents into a folder (returns the row count)."""
    import tempfile

    from knowlyr.export import save_sft

    with tempfile.TemporaryDirectory() as d:
        res = save_sft(iter(docs), f"{d}/out", system_prompt="You are an agent.", validated=True)
    return [None] * res.card.rows


def timed(fn, trajs) -> tuple[int, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    ds = fn(trajs)
    return len(ds), time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    from knowlyr.export.messages import trajectory_messages

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    import orjson

    trajs = make(n)
    docs = [orjson.loads(t.to_json()) for t in trajs]  # as the store keeps them
    first = ours(trajs[:50])[0]["messages"]  # warm imports; check one row in full
    assert first == trajectory_messages(trajs[0], system_prompt="You are an agent."), first
    assert ours_documents(docs[:50])[0]["messages"] == first
    baseline(trajs[:50])
    saved_documents(docs[:50])
    sides = (
        ("baseline", baseline, trajs),
        ("ours", ours, trajs),
        ("documents", ours_documents, docs),
        ("saved models", saved_models, trajs),
        ("saved documents", saved_documents, docs),
    )
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in sides}
    for _ in range(repeats):
        for name, fn, data in sides:
            rows, wall, cpu = timed(fn, data)
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
    for name, label in (
        ("documents", "export_sft of documents"),
        ("saved models", "models -> saved folder"),
        ("saved documents", "save_sft of documents"),
    ):
        r, r_med, c = figures(name)
        print(
            f"  {label + ':':24}{r:10,.0f} rows/s best, {r_med:10,.0f} median; CPU {c:6.1f} us/row"
        )


if __name__ == "__main__":
    main()
