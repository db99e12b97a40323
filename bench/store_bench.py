"""Store benchmark: add / re-add realistic 20-step trajectories, against per-row SQLite.

Workload (TARGETS.md): 20-step coding trajectories with ~500-character tool outputs. Each
task has a "repository" (a 30 KB slice of real Python source: the stdlib) and every output is
a 500-character window of its task's repository, the way agents working on one issue keep
reading the same files; thoughts are 80-200 characters of prose-like source, instructions 300.
Every trajectory is distinct (distinct content hash).

Ours: ``Store.add_trajectories`` in batches (one Delta transaction each), then the same
trajectories again (all duplicates). Baseline: the original knowlyr approach, one SQLite row
per trajectory keyed on its hash, existence check + INSERT + COMMIT per row (default
journal/synchronous settings), measured on a subset because it is slow. Trajectory
construction is not timed for either side; serialisation and writing are.

``--memory 5000,20000`` measures peak memory instead: for each N, a trajectories JSONL file
of N lines is added to a fresh store by a fresh process, as a list of N models (every line
validated into a Trajectory first, then one ``add_trajectories``: what a caller holding its
trajectories does) and streamed (``add_trajectories`` over a generator that validates line by
line: the add writes its one commit batch by batch). Peak RSS is the process's own.
With ``--s3`` the stores are in a bucket of a local S3-compatible server (moto's server mode,
the tests' ``tests/store/s3_server.py``; needs the dev extra): there the streamed add spools
its rows to a local file, which the MERGE reads.

Run:  .venv/bin/python bench/store_bench.py [--n 100000] [--batch 10000] [--baseline-n 5000]
      .venv/bin/python bench/store_bench.py --memory 5000,20000 [--s3]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from knowlyr.store import Store
from knowlyr.trajectory import (
    AgentInfo,
    Observation,
    Outcome,
    Source,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
)

TOOLS = ["bash", "read_file", "edit_file", "grep", "write_file"]


def _corpus() -> str:
    d = Path(sysconfig.get_paths()["stdlib"])
    return "".join(p.read_text(errors="replace") for p in sorted(d.glob("*.py"))[:80])


class Workload:
    """Deterministic realistic trajectories: chunk ``k`` is the same every time it is made."""

    def __init__(self, n_tasks: int = 500, seed: int = 0):
        self.corpus = _corpus()
        rng = random.Random(seed)
        self.tasks = []
        for i in range(n_tasks):
            r = rng.randrange(len(self.corpus) - 31_000)
            instr = " ".join(self.corpus[r : r + 300].split())
            self.tasks.append((f"repo-{i % 40}__issue-{i}", instr, r))

    def chunk(self, k: int, size: int) -> list[Trajectory]:
        rng = random.Random(1_000_003 * (k + 1))
        c = self.corpus
        out = []
        for _ in range(size):
            task_id, instr, r = self.tasks[rng.randrange(len(self.tasks))]
            steps = []
            for i in range(20):
                tool = TOOLS[rng.randrange(len(TOOLS))]
                if tool == "bash":
                    params = {
                        "command": f"python -m pytest tests/test_{rng.randrange(60)}.py -x -q"
                    }
                else:
                    params = {"path": f"src/pkg/mod_{rng.randrange(60)}.py"}
                j = r + rng.randrange(30_000)
                t = rng.randrange(len(c) - 200)
                steps.append(
                    Step(
                        index=i,
                        thought=" ".join(c[t : t + rng.randrange(80, 200)].split()),
                        action=ToolCall(tool=tool, params=params, call_id=f"call_{i}"),
                        observation=Observation(
                            output=c[j : j + 500], exit_code=rng.choice((0, 0, 0, 1))
                        ),
                    )
                )
            out.append(
                Trajectory(
                    task=TaskInfo(
                        task_id=task_id, domain="coding", suite="swe-mini", instruction=instr
                    ),
                    agent=AgentInfo(name="openhands", model="claude-x"),
                    steps=steps,
                    outcome=Outcome(
                        success=rng.random() < 0.3, score=rng.random(), terminated=True
                    ),
                    source=Source(format="openhands", path=f"runs/{task_id}.json"),
                )
            )
        return out


def _du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(path) for f in fs)


def bench_store(wl: Workload, root: str, n: int, batch: int) -> dict[str, float]:
    store = Store.open(root)
    import deltalake  # noqa: F401  (one-time import cost, outside the timings)
    import polars  # noqa: F401
    import pyarrow  # noqa: F401

    store.version("trajectories")
    add_s = add_cpu = 0.0
    for k in range(0, n // batch):
        trajs = wl.chunk(k, batch)
        t0, c0 = time.perf_counter(), time.process_time()
        m = store.add_trajectories(trajs)
        dt = time.perf_counter() - t0
        add_s += dt
        add_cpu += time.process_time() - c0
        assert m.new == batch, m
        print(f"  add batch {k}: {batch / dt:,.0f}/s -> trajectories@{m.version}", flush=True)
    readd_s = readd_cpu = 0.0
    fresh = Store.open(root)  # a new process's view: ids are read from the table once
    for k in range(0, n // batch):
        trajs = wl.chunk(k, batch)
        t0, c0 = time.perf_counter(), time.process_time()
        m = fresh.add_trajectories(trajs)
        readd_s += time.perf_counter() - t0
        readd_cpu += time.process_time() - c0
        assert m.new == 0 and m.duplicates == batch, m
    rows = store.count("trajectories")
    assert rows == n
    size = _du(os.path.join(root, "tables", "trajectories"))
    return {
        "add": n / add_s,
        "readd": n / readd_s,
        "bytes": size / rows,
        "add_cpu": n / add_cpu,
        "readd_cpu": n / readd_cpu,
    }


def bench_sqlite(wl: Workload, path: str, n: int) -> dict[str, float]:
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE trajectories (id TEXT PRIMARY KEY, task_id TEXT, agent TEXT, model TEXT,"
        " n_steps INTEGER, success INTEGER, score REAL, data TEXT)"
    )
    db.commit()
    trajs = wl.chunk(0, n)

    def add_all() -> int:
        added = 0
        for t in trajs:
            if db.execute("SELECT 1 FROM trajectories WHERE id = ?", (t.id,)).fetchone():
                continue
            db.execute(
                "INSERT INTO trajectories VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    t.id,
                    t.task.task_id,
                    t.agent.name,
                    t.agent.model,
                    len(t.steps),
                    t.outcome.success,
                    t.outcome.score,
                    t.to_json().decode(),
                ),
            )
            db.commit()
            added += 1
        return added

    t0, c0 = time.perf_counter(), time.process_time()
    assert add_all() == n
    add_s, add_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    assert add_all() == 0
    readd_s, readd_cpu = time.perf_counter() - t0, time.process_time() - c0
    db.close()
    return {
        "add": n / add_s,
        "readd": n / readd_s,
        "bytes": os.path.getsize(path) / n,
        "add_cpu": n / add_cpu,
        "readd_cpu": n / readd_cpu,
    }


def _memory_child(mode: str, path: str, root: str) -> None:
    """One add of ``path`` (trajectory JSONL) into a fresh store at ``root``; prints JSON."""
    import json
    import resource

    import deltalake  # noqa: F401  (imports outside the timings)
    import polars  # noqa: F401
    import pyarrow  # noqa: F401

    store = Store.open(root)
    t0, c0 = time.perf_counter(), time.process_time()
    with open(path, "rb") as f:
        if mode == "list":
            trajs = [Trajectory.model_validate_json(line) for line in f]
        else:
            trajs = (Trajectory.model_validate_json(line) for line in f)
        m = store.add_trajectories(trajs)
    out = {
        "new": m.new,
        "wall": time.perf_counter() - t0,
        "cpu": time.process_time() - c0,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(out))


def bench_memory(wl: Workload, work: str, sizes: list[int], s3: bool = False) -> None:
    import contextlib

    with contextlib.ExitStack() as stack:
        server = None
        if s3:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.store.s3_server import s3_server

            server = stack.enter_context(s3_server(Path(work)))
            print(f"stores in a bucket of a local S3 server at {server.endpoint}")
        _bench_memory(wl, work, sizes, server)


def _bench_memory(wl: Workload, work: str, sizes: list[int], server: Any) -> None:
    import json
    import subprocess

    env = {**os.environ, **(server.env if server is not None else {})}
    print(f"{'N':>8}{'mode':>8}{'traj/s':>10}{'traj/CPU-s':>12}{'peak RSS':>11}")
    for n in sizes:
        path = os.path.join(work, f"trajectories-{n}.jsonl")
        with open(path, "wb") as f:
            for k in range(0, n, 1000):
                for t in wl.chunk(k, min(1000, n - k)):
                    f.write(t.to_json() + b"\n")
        for mode in ("list", "stream"):
            root = os.path.join(work, f"store-{mode}-{n}")
            if server is not None:
                root = server.url(f"store-{mode}-{n}")
            argv = [sys.executable, __file__, "--memory-child", mode, path, root]
            done = subprocess.run(argv, capture_output=True, env=env)
            if done.returncode:
                sys.exit(f"the {mode} add of {n} failed:\n{done.stderr.decode()[-3000:]}")
            r = json.loads(done.stdout)
            assert r["new"] == n, r
            print(
                f"{n:>8,}{mode:>8}{n / r['wall']:>10,.0f}{n / r['cpu']:>12,.0f}"
                f"{r['rss_mb']:>8,.0f} MB",
                flush=True,
            )
            if server is None:
                shutil.rmtree(root, ignore_errors=True)
        os.unlink(path)
    print("(the trajectories are validated from JSON inside the timing in both modes)")


def main() -> None:
    if sys.argv[1:2] == ["--memory-child"]:
        _memory_child(*sys.argv[2:5])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--baseline-n", type=int, default=5_000)
    ap.add_argument("--dir", default=None, help="Work directory (default: a temp dir, removed).")
    ap.add_argument(
        "--memory",
        default=None,
        help="Comma-separated sizes: peak memory of list vs streamed adds.",
    )
    ap.add_argument(
        "--s3", action="store_true", help="--memory: stores in a local S3 server's bucket."
    )
    a = ap.parse_args()
    if a.memory:
        work = a.dir or tempfile.mkdtemp(prefix="knowlyr-store-bench-")
        os.makedirs(work, exist_ok=True)
        try:
            bench_memory(Workload(), work, [int(x) for x in a.memory.split(",")], a.s3)
        finally:
            if a.dir is None:
                shutil.rmtree(work, ignore_errors=True)
        return
    if a.n % a.batch:
        sys.exit(f"--n must be a multiple of --batch, got {a.n} and {a.batch}")
    work = a.dir or tempfile.mkdtemp(prefix="knowlyr-store-bench-")
    os.makedirs(work, exist_ok=True)
    try:
        wl = Workload()
        sample = wl.chunk(0, 200)
        avg = sum(len(t.to_json()) for t in sample) / len(sample)
        print(f"workload: 20-step trajectories, {avg / 1000:.1f} KB of JSON each; work dir {work}")
        print(f"knowlyr store: {a.n:,} trajectories in batches of {a.batch:,}")
        ours = bench_store(wl, os.path.join(work, "store"), a.n, a.batch)
        print(f"baseline SQLite (commit per row): {a.baseline_n:,} trajectories")
        base = bench_sqlite(wl, os.path.join(work, "baseline.sqlite"), a.baseline_n)
        targets = {"add": (">=", 6_700), "readd": (">=", 90_000), "bytes": ("<=", 3_300)}
        print()
        print(
            f"{'metric':<26}{'knowlyr store':>16}{'SQLite baseline':>18}{'ratio':>9}{'target':>12}"
        )
        for key, label, unit in [
            ("add", "add", "traj/s"),
            ("readd", "re-add", "traj/s"),
            ("bytes", "on disk", "B/traj"),
        ]:
            op, tv = targets[key]
            ratio = ours[key] / base[key] if key != "bytes" else base[key] / ours[key]
            ok = ours[key] >= tv if op == ">=" else ours[key] <= tv
            print(
                f"{label + ' (' + unit + ')':<26}{ours[key]:>16,.0f}{base[key]:>18,.0f}"
                f"{ratio:>8.1f}x{op + f'{tv:,}':>10} {'ok' if ok else 'MISSED'}"
            )
        print("(ratio for on-disk size: baseline bytes / ours)")
        print(
            f"CPU-time rates (the 2 cores are shared; per CPU-second of this process): "
            f"ours add {ours['add_cpu']:,.0f}/s, re-add {ours['readd_cpu']:,.0f}/s; "
            f"SQLite add {base['add_cpu']:,.0f}/s, re-add {base['readd_cpu']:,.0f}/s"
        )
        print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        if a.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
