"""What a small night costs on a populated store: the export's replay window vs the whole store.

Night 0 (the warm-up) and a first champion night run on a fresh store; then ``--older``
trajectories recorded as earlier checkpoint rollouts arrive in ``--older-versions`` commits
(stand-ins for earlier nights: expert episodes relabelled ``checkpoint:older-nights``, since
nothing but their number and agent matters to the export). The next small night runs three
times, from copies of the same store: with the small preset's replay window (0: the night's
own collection), with the nightly's (``export.replay_versions``, 2) and, as the baseline, with
``replay_versions: null`` (every trajectory in the store, the old behaviour). Every night
exports all attempts (``only_success: false``: the small warm-up is rarely right, and scope
is what is measured). Printed: seconds of the night, exported rows and the ``dataset_rows`` rows
written (a row an earlier export stored is not stored again).

    .venv/bin/python bench/scope_bench.py --work /tmp/scope-bench
    .venv/bin/python bench/scope_bench.py --work /tmp/scope-bench --older 2000 --older-versions 5

Runs against Prefect's ephemeral API with a fresh PREFECT_HOME, like ``make run``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from _prefect_env import isolate

isolate("knowlyr-scope-bench-")


def _promote(store_url: str, report) -> None:
    """Make the night's candidate the champion (promotion on evidence is not the point here)."""
    from knowlyr.store import Store
    from knowlyr.train.promotion import PromotionDecision, record_promotion

    cand = report.candidate
    record_promotion(
        Store.open(store_url),
        PromotionDecision(True, "scope_bench: promoted by hand", 0.0, 0.0, 1.0),
        checkpoint=cand.blob,
        checkpoint_json=cand.model_dump_json(),
        baseline="untrained",
        evaluations_version=10_000 + report.seed,
    )


def _add_older(store_url: str, n: int, versions: int) -> None:
    from knowlyr.agents import ExpertAgent
    from knowlyr.rollout import collect
    from knowlyr.store import Store
    from knowlyr.taskset import sample

    store = Store.open(store_url)
    for v in range(versions):
        k = n // versions
        ids = [t.task_id for t in sample("conversation", k, seed=1000 + v, split="train",
                                          family="order_status")]  # fmt: skip
        trajs = collect("knowlyr/conversation", ExpertAgent, k, tasks=ids, seed=1000 + v)
        for t in trajs:
            t.agent.name = "checkpoint:older-nights"
        store.add_trajectories(trajs)


def _night(store_url: str, seed: int, replay: int | None):
    from flows.iterate import IterateParams, iterate
    from knowlyr.store import Store

    p = IterateParams.small(store_url=store_url, seed=seed)
    # every attempt is exported (the small warm-up is rarely right; scope is what is measured)
    export = p.export.model_copy(update={"replay_versions": replay, "only_success": False})
    p = p.model_copy(update={"export": export})
    before = Store.open(store_url).count("dataset_rows")
    t0 = time.perf_counter()
    report = iterate(p)
    seconds = time.perf_counter() - t0
    return report, seconds, Store.open(store_url).count("dataset_rows") - before


def main(argv: list[str] | None = None) -> int:
    from flows.iterate import REPLAY, IterateParams, _patient_ephemeral_server

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the stores (emptied)")
    ap.add_argument("--older", type=int, default=2000, help="older checkpoint trajectories")
    ap.add_argument("--older-versions", type=int, default=5, help="commits they arrive in")
    args = ap.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    base = str(args.work / "base")
    with _patient_ephemeral_server():
        night0, s0, _ = _night(base, 0, REPLAY)
        _promote(base, night0)
        night1, s1, rows1 = _night(base, 1, REPLAY)
        print(f"fresh store: warm-up night {s0:.1f} s; first champion night {s1:.1f} s, "
              f"{night1.dataset.rows} rows exported, {rows1} new dataset rows stored")  # fmt: skip
        _add_older(base, args.older, args.older_versions)
        small = IterateParams.small().export.replay_versions
        for name, replay in (
            (f"the small preset's replay window {small}", small),
            (f"the nightly's replay window {REPLAY}", REPLAY),
            ("whole store (baseline)", None),
        ):
            store = str(args.work / f"night2-{replay}")
            shutil.copytree(base, store)
            night2, s2, rows2 = _night(store, 2, replay)
            print(f"+{args.older} older trajectories, {name}: night {s2:.1f} s, "
                  f"{night2.dataset.rows} rows exported, {rows2} new dataset rows stored")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
