"""Orchestration overhead: one iteration through the library directly vs through the flow,
a fully cached re-run, and the per-task cost of Prefect with the stage cache policy.

    .venv/bin/python bench/flow_bench.py            # small iteration (~1-2 minutes)
    .venv/bin/python bench/flow_bench.py --episodes 2000 --epochs 10 --heldout 100   # make run's

Budgets (TARGETS.md): <= 10 ms per task (baseline ~5 ms measured by Prefect's own trivial
tasks here), fully cached nightly re-run <= 20 s. Runs against Prefect's ephemeral API with a
fresh PREFECT_HOME, like ``make run``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _prefect_env import isolate

isolate("knowlyr-flow-bench-")


def direct_iteration(p, store_url: str) -> float:
    """The iteration's stage functions called directly (``task.fn``): the library, no Prefect,
    with the same fan-out (threads) as the flow."""
    from tasks.collect import collect_episodes, dedup_trajectories, sample_tasks
    from tasks.evaluate import compare_policies, evaluate_policy, promote_checkpoint
    from tasks.export import export_dataset
    from tasks.reward import score_trajectories
    from tasks.train import build_policy, train_policy

    c, t, e = p.collect, p.train, p.evaluate
    t0 = time.perf_counter()
    sample = sample_tasks.fn(c.suite, c.episodes, p.seed, split=c.split, family=c.family)
    size = -(-len(sample.task_ids) // c.shards)
    chunks = [sample.task_ids[i : i + size] for i in range(0, len(sample.task_ids), size)]
    with ThreadPoolExecutor() as pool:  # the same fan-out as the flow's thread task runner
        staged = list(pool.map(
            lambda ich: collect_episodes.fn(store_url, c.env_id, c.agent, ich[1], len(ich[1]),
                                            p.seed + ich[0] * size, shard=ich[0]),
            enumerate(chunks),
        ))  # fmt: skip
    ref = dedup_trajectories.fn(store_url, staged, n_shards=len(staged)).ref
    rewards = [score_trajectories.fn(ref, p.reward)]
    dataset = export_dataset.fn(ref, rewards, p.export)
    init = build_policy.fn(dataset, t.model, t.hidden_size, t.num_layers, t.seed)
    cand = train_policy.fn(dataset, init, t)
    heldout = sample_tasks.fn(c.suite, e.episodes, e.seed, split="heldout", family=c.family)
    with ThreadPoolExecutor() as pool:
        evals = list(pool.map(
            lambda nck: evaluate_policy.fn(nck[0], nck[1], heldout, c.env_id, e.episodes, e.seed,
                                           max_steps=e.max_steps, max_new_tokens=e.max_new_tokens),
            [("untrained", init), ("candidate", cand)],
        ))  # fmt: skip
    cmp = compare_policies.fn(store_url, evals, "candidate", "untrained", alpha=e.alpha)
    promote_checkpoint.fn(store_url, cand, cmp, e.min_improvement)
    return time.perf_counter() - t0


def trivial_tasks(n: int) -> tuple[float, float]:
    """Seconds per task for ``n`` sequential trivial tasks: no cache, and the stage cache."""
    from prefect import flow, task

    from tasks._cache import STAGE_CACHE

    @task
    def plain(i: int) -> int:
        return i + 1

    @task(cache_policy=STAGE_CACHE)
    def cached(i: int) -> int:
        return i + 1

    @flow
    def many(use_cache: bool) -> float:
        fn = cached if use_cache else plain
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        return time.perf_counter() - t0

    return many(False) / n, many(True) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--epochs", type=float, default=1)
    ap.add_argument("--heldout", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per path (min is kept)")
    ap.add_argument("--trivial", type=int, default=200, help="trivial tasks for the per-task cost")
    args = ap.parse_args()

    t0 = time.perf_counter()
    from prefect import flow

    from flows.iterate import IterateParams, iterate

    import_s = time.perf_counter() - t0
    # Import the heavy libraries once before timing either path, so neither pays for them.
    import datasets  # noqa: F401
    import torch  # noqa: F401
    import trl  # noqa: F401

    import knowlyr.agents.inference
    import knowlyr.export
    import knowlyr.train.run  # noqa: F401

    p = IterateParams.small()
    p = p.model_copy(
        update={
            "collect": p.collect.model_copy(update={"episodes": args.episodes}),
            "train": p.train.model_copy(update={"epochs": args.epochs}),
            "evaluate": p.evaluate.model_copy(update={"episodes": args.heldout}),
        }
    )
    work = Path(tempfile.mkdtemp(prefix="knowlyr-flow-bench-store-"))
    # Untimed warm-up: the first iteration in a process pays one-off costs (torch's first
    # backward, tokenizer training, lazy imports) that neither path should be charged for.
    direct_iteration(p, str(work / "warm-up"))
    direct_s = min(direct_iteration(p, str(work / f"direct-{k}")) for k in range(args.repeat))

    empty = flow(lambda: None, name="empty")
    t0 = time.perf_counter()
    empty()  # starts the ephemeral server once
    server_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    empty()
    empty_s = time.perf_counter() - t0  # a flow run with no task: the fixed cost per flow run
    flow_s = float("inf")
    for k in range(args.repeat):  # a fresh store and seed each time: a cold cache
        p = p.model_copy(update={"store_url": str(work / f"flow-{k}"), "seed": k})
        t0 = time.perf_counter()
        state = iterate(p, return_state=True)
        flow_s = min(flow_s, time.perf_counter() - t0)
    t0 = time.perf_counter()
    iterate(p)
    cached_s = time.perf_counter() - t0

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        n_tasks = len(
            client.read_task_runs(
                flow_run_filter=FlowRunFilter(
                    id=FlowRunFilterId(any_=[state.state_details.flow_run_id])
                )
            )
        )
    plain_s, cached_task_s = trivial_tasks(args.trivial)

    per_task = (flow_s - direct_s) / n_tasks
    print(
        f"iteration: {args.episodes} episodes, {args.epochs} epochs, {args.heldout} held-out tasks, {n_tasks} task runs"
    )
    print(f"  library directly (task.fn, no Prefect) : {direct_s:8.2f} s   (baseline)")
    print(
        f"  through the flow (cold cache)          : {flow_s:8.2f} s   ratio {flow_s / direct_s:.3f}"
    )
    print(
        f"  orchestration overhead                 : {flow_s - direct_s:8.2f} s = {1000 * per_task:.0f} ms per"
        f" task all-in, of which {empty_s:.2f} s is the fixed cost of a flow run (an empty flow)"
    )
    print(
        f"  fully cached re-run                    : {cached_s:8.2f} s   (budget 20 s; {direct_s / cached_s:.0f}x faster than recomputing)"
    )
    print(
        f"  one-off: import prefect+flows {import_s:.1f} s, ephemeral server start {server_s:.1f} s"
    )
    print(f"trivial tasks ({args.trivial} sequential): {1000 * plain_s:.1f} ms/task without cache "
          f"(Prefect baseline), {1000 * cached_task_s:.1f} ms/task with the stage cache policy")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
