"""Viewer benchmark: list-page requests over a store of 100,000 trajectories.

Builds (or reuses) a synthetic store: ``--n`` trajectories of 2-8 steps over 2,000 tasks and
five agents, added in ten runs (``sightings`` + ``runs``), each with a rules-like reward row
(total, per-step rewards, rubric means); a dataset and preference pairs over some of them.
Then it starts ``knowlyr view``'s app on a loopback port and times real HTTP requests of the
list page (several filter / sort / page combinations, each repeated) and prints p50 / p95.

Beside it, measured in the same run over the same store and requests:

* ``pushdown``: the same query without the viewer's cached index, i.e. a lazy polars scan
  of the Delta tables per request (projection without ``data``, filters, sort, limit);
* ``naive``: load everything per request (every trajectory decoded from ``data``, filtered,
  sorted and sliced in Python), on fewer repetitions because it is slow.

Run:  .venv/bin/python bench/view_bench.py [--store PATH] [--n 100000] [--repeat 20]
(without ``--store`` the store is built in a temporary directory and removed afterwards; with
it, a store already there is reused, so a second run skips the build).
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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

AGENTS = [("expert", None), ("gpt", "gpt-4o-mini"), ("claude", "claude-sonnet-4-5"),
          ("champion", "ckpt-7"), ("random", None)]  # fmt: skip
RUNS = 10

#: the list-page requests timed (query strings), each several times
QUERIES = [
    "",
    "sort=-reward",
    "sort=n_steps&page=40",
    "outcome=success&sort=-reward",
    "task=task-01&sort=task_id",
    "agent=claude&reward_min=0.5&reward_max=0.9",
    "outcome=failure&agent=gpt&sort=-n_steps&page=3",
    "run=RUN&sort=-reward",
    "version=4&sort=-created_at",
]


def _trajectory(i: int, rng: random.Random) -> Trajectory:
    agent, model = AGENTS[i % len(AGENTS)]
    task = f"task-{rng.randrange(2000):04d}"
    steps = []
    for k in range(rng.randint(2, 8)):
        if k % 3 == 2:
            action = ToolCall(
                tool="edit_file",
                params={"path": f"src/m{k}.py", "old_str": f"x = {k}\n", "new_str": f"x = {i}\n"},
            )
        else:
            action = ToolCall(tool="bash", params={"command": f"pytest -q tests/t{k}.py"})
        steps.append(
            Step(
                index=k,
                thought=f"step {k} of attempt {i}: check the failing test",
                action=action,
                observation=Observation(output=f"{k} passed, {i % 5} failed\n" * 3, exit_code=0),
            )
        )
    ok = rng.random() < 0.4
    return Trajectory(
        task=TaskInfo(task_id=task, domain="coding", suite="synthetic", instruction=f"fix {task}"),
        agent=AgentInfo(name=agent, model=model),
        steps=steps,
        outcome=Outcome(success=ok, score=float(ok), label_source="env"),
        source=Source(format="knowlyr"),
    )


def build_store(path: str, n: int, *, seed: int = 0) -> Store:
    """The synthetic store of the module docstring at ``path`` (``n`` trajectories)."""
    import polars as pl

    rng = random.Random(seed)
    store = Store.open(path)
    per_run = math.ceil(n / RUNS)
    for r in range(RUNS):
        trajs = [_trajectory(i, rng) for i in range(r * per_run, min(n, (r + 1) * per_run))]
        run_id = f"run-{r:02d}"
        m = store.add_trajectories(trajs, run_id=run_id)
        store.record_run("collect", outputs={"trajectories": m}, run_id=run_id)
        rows = []
        for t in trajs:
            per_step = [rng.random() for _ in t.steps]
            total = 0.5 * sum(per_step) / len(per_step) + 0.5 * float(bool(t.outcome.success))
            rows.append(
                {
                    "trajectory_id": t.id,
                    "config_hash": "cfg-rules",
                    "total": total,
                    "per_step": per_step,
                    "per_rubric": '{"efficiency": 0.7, "redundancy": 0.9}',
                    "rationale": "[]",
                    "task_id": t.task.task_id,
                    "agent": t.agent.name,
                    "success": t.outcome.success,
                }
            )
        store.append("rewards", pl.DataFrame(rows))
        print(f"  built run {r + 1}/{RUNS}: trajectories@{m.version}", file=sys.stderr)
    return store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, math.ceil(0.95 * len(xs)) - 1)]
    return statistics.median(xs), p95


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", help="store path (built there when empty; default: a temp dir)")
    ap.add_argument("--n", type=int, default=100_000, help="trajectories to build")
    ap.add_argument("--repeat", type=int, default=20, help="requests per query (viewer)")
    ap.add_argument("--naive-repeat", type=int, default=1, help="requests per query (naive)")
    args = ap.parse_args()

    tmp = None if args.store else tempfile.mkdtemp(prefix="view-bench-")
    path = args.store or str(Path(tmp) / "store")
    try:
        if not (Path(path) / "tables" / "trajectories").is_dir():
            t0 = time.perf_counter()
            print(f"building a store of {args.n:,} trajectories at {path} ...", file=sys.stderr)
            build_store(path, args.n)
            print(f"  built in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        run(path, args.repeat, args.naive_repeat)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def pushdown_page(store: Store, q) -> tuple[int, int]:
    """Baseline 1: the viewer's query on lazy Delta scans, no cached index."""
    from knowlyr.view.query import index_frame, run_query

    rewards = store.scan("rewards")
    index = index_frame(store.scan("trajectories", version=q.version), rewards)
    run_ids = None
    if q.run:
        import polars as pl

        run_ids = store.scan("sightings").filter(pl.col("run_id") == q.run).select("trajectory_id")
    rows, total = run_query(index, q, run_ids=run_ids)
    return rows.height, total


def naive_page(store: Store, q) -> tuple[int, int]:
    """Baseline 2: load everything (every trajectory's JSON decoded, all rewards), then
    filter, sort and slice in Python."""
    rewards = {
        r["trajectory_id"]: r["total"]
        for r in store.read("rewards", columns=["trajectory_id", "total"]).iter_rows(named=True)
    }
    seen = None
    if q.run:
        df = store.read("sightings", columns=["trajectory_id", "run_id"])
        seen = {t for t, r in df.iter_rows() if r == q.run}
    rows = []
    for t in store.iter_trajectories(version=q.version):
        reward = rewards.get(t.id)
        ok = t.outcome.success
        if q.task and q.task not in t.task.task_id:
            continue
        if q.agent and q.agent not in t.agent.name and q.agent not in (t.agent.model or ""):
            continue
        if q.outcome and q.outcome != {True: "success", False: "failure", None: "unknown"}[ok]:
            continue
        if q.reward_min is not None and (reward is None or reward < q.reward_min):
            continue
        if q.reward_max is not None and (reward is None or reward > q.reward_max):
            continue
        if seen is not None and t.id not in seen:
            continue
        rows.append((t, reward))
    key = q.sort.lstrip("-")
    value = {
        "reward": lambda x: x[1] if x[1] is not None else -1e9,
        "n_steps": lambda x: len(x[0].steps),
        "task_id": lambda x: x[0].task.task_id,
        "agent": lambda x: x[0].agent.name,
        "score": lambda x: x[0].outcome.score or 0.0,
        "created_at": lambda x: x[0].id,  # not in the model: any stable order
    }[key]
    rows.sort(key=value, reverse=q.sort.startswith("-"))
    start = (q.page - 1) * q.per_page
    return len(rows[start : start + q.per_page]), len(rows)


def run(path: str, repeat: int, naive_repeat: int) -> None:
    import httpx
    import uvicorn

    from knowlyr.view import create_app
    from knowlyr.view.query import ListQuery

    store = Store.open(path)
    rows = store.count("trajectories")
    run_id = store.runs(stage="collect")[3].run_id
    queries = [q.replace("RUN", run_id) for q in QUERIES]

    port = _free_port()
    app = create_app(path)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    t0 = time.perf_counter()
    thread.start()
    while not server.started:
        time.sleep(0.05)
    app.state.warmed.wait(120)  # the start-up read of the latest index, as a user would wait
    print(f"viewer started and warmed in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    viewer: list[float] = []
    first: list[float] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            for q in queries:
                for k in range(repeat + 1):
                    t0 = time.perf_counter()
                    r = client.get(f"/?{q}")
                    dt = time.perf_counter() - t0
                    if r.status_code != 200:
                        raise SystemExit(f"GET /?{q}: HTTP {r.status_code}\n{r.text[:2000]}")
                    (first if k == 0 else viewer).append(dt)
    finally:
        server.should_exit = True
        thread.join()

    push: list[float] = []
    naive: list[float] = []
    for q in queries:
        lq = ListQuery.parse(dict(p.split("=", 1) for p in q.split("&") if p))
        for _ in range(max(1, repeat // 4)):
            t0 = time.perf_counter()
            pushdown_page(store, lq)
            push.append(time.perf_counter() - t0)
        for _ in range(naive_repeat):
            t0 = time.perf_counter()
            naive_page(store, lq)
            naive.append(time.perf_counter() - t0)

    print(f"list page over {rows:,} trajectories, {len(queries)} filter/sort/page combinations")
    print(f"{'approach':50} {'requests':>8} {'p50 ms':>9} {'p95 ms':>9}")
    for name, xs in [
        ("viewer: HTTP request, cached column index", viewer),
        ("viewer: first request of each combination", first),
        ("baseline: same query, lazy Delta scan per request", push),
        ("baseline: load everything per request (naive)", naive),
    ]:
        p50, p95 = _percentiles(xs)
        print(f"{name:50} {len(xs):>8} {p50 * 1000:>9.1f} {p95 * 1000:>9.1f}")


if __name__ == "__main__":
    main()
