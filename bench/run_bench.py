"""Does ``make run`` learn without relying on restarts? Its night, seed after seed.

``make run`` is one night of the ``iterate`` flow with ``IterateParams.one_night()`` on a
fresh store: expert demonstrations of ``order_status``, a tiny model trained from scratch
(induction pretraining, then SFT, restarted with the next seed while its validation loss is
above the target), evaluated against the untrained model on held-out tasks. This bench runs
that night on a fresh store per seed, through the real flow (Prefect's ephemeral API), with
the seed changing both the collection (``params.seed``: other tasks) and the model
(``warmup.train.seed``: other initial weights and data order), and prints per seed:

- whether the **first** restart reached the target validation loss (no restart needed),
  the validation loss of every restart, and the restarts trained;
- held-out success of the untrained model (the baseline beside it) and of the trained one,
  the decision and its p-value;
- the night's wall time and its stages (collect, reward, export, train, evaluate).

Usage::

    .venv/bin/python bench/run_bench.py --seeds 0-9
    .venv/bin/python bench/run_bench.py --seeds 0,1,2 --params '{"warmup": {"episodes": 1000}}'

``--params`` changes ``one_night()``'s stages the way ``prefect deployment run -p params=...``
changes a deployment's (partial stages). The venv build ``make run`` also does on a fresh clone
is not part of these times.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time

from _prefect_env import isolate

isolate("knowlyr-run-bench-")
logging.getLogger("knowlyr").setLevel(logging.WARNING)  # per-step training logs

from loop_bench import stage_spans  # noqa: E402

from flows.iterate import IterateParams, _merged, _patient_ephemeral_server  # noqa: E402
from flows.iterate import iterate as iterate_flow  # noqa: E402

#: the stages this bench times, by task-run name prefix (bench/loop_bench.py's, with the
#: initial policy's induction pretraining apart from training)
STAGES = {
    "collect": ("sample-", "collect-", "dedup-"),
    "reward": ("reward-",),
    "export": ("export-",),
    "induction": ("init-",),
    "train": ("train-", "select-"),
    "evaluate": ("evaluate-", "compare-"),
}


def seeds_arg(text: str) -> list[int]:
    """``0-9`` or ``0,3,5`` (or a mix: ``0-2,7``)."""
    out: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
    return out


def task_runs(flow_run_id: object) -> list[object]:
    """The task runs of a finished flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        return client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )


def run_seed(base: IterateParams, seed: int) -> dict[str, object]:
    """One ``make run`` night on a fresh store with collection and model seed ``seed``."""
    store = tempfile.mkdtemp(prefix=f"knowlyr-run-bench-s{seed}-")
    warmup = base.warmup.model_copy(
        update={"train": base.warmup.train.model_copy(update={"seed": seed})}
    )
    params = base.model_copy(update={"store_url": store, "seed": seed, "warmup": warmup})
    t0 = time.perf_counter()
    state = iterate_flow(params, return_state=True)
    report = state.result()
    wall = time.perf_counter() - t0
    runs = task_runs(state.state_details.flow_run_id)
    trained = sorted(r.name for r in runs if r.name.startswith("train-"))
    target = warmup.train.target_eval_loss
    losses = [float(x) for x in _restart_losses(runs)]
    first_ok = bool(losses) and target is not None and losses[0] <= target
    cmp = report.comparison
    return {
        "seed": seed,
        "restarts": len(trained),
        "losses": losses,
        "first_try": first_ok,
        "before": cmp.success(cmp.baseline) if cmp else float("nan"),
        "after": cmp.success("candidate") if cmp else float("nan"),
        "p": report.decision.p_value if report.decision else float("nan"),
        "promoted": bool(report.decision and report.decision.promoted),
        "outcome": report.outcome,
        "wall": wall,
        "stages": stage_spans(runs, STAGES),
    }


def _restart_losses(runs: list[object]) -> list[float]:
    """Each restart's validation loss, in restart order, from its train task run's result."""
    out = []
    for r in sorted(
        (r for r in runs if r.name.startswith("train-")), key=lambda r: r.start_time or 0
    ):
        result = r.state.result(raise_on_failure=False) if r.state else None
        loss = getattr(result, "metrics", {}).get("eval_loss") if result is not None else None
        out.append(float("nan") if loss is None else loss)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=seeds_arg, default=seeds_arg("0-9"), help="e.g. 0-9 or 0,4")
    ap.add_argument("--params", default="{}", help="changes to one_night() as JSON (partial)")
    args = ap.parse_args()
    base = IterateParams.one_night()
    base = IterateParams.model_validate(_merged(base.model_dump(), json.loads(args.params)))
    w = base.warmup
    print(f"make run's night: {w.episodes} expert episodes, {w.train.epochs:g} epochs, up to "
          f"{w.train.restarts} restarts until validation loss <= {w.train.target_eval_loss}; "
          f"{base.evaluate.episodes} held-out tasks", flush=True)  # fmt: skip
    rows = []
    with _patient_ephemeral_server():
        for seed in args.seeds:
            row = run_seed(base, seed)
            rows.append(row)
            stages = ", ".join(f"{k} {v:.0f}" for k, v in row["stages"].items())
            losses = ", ".join(f"{x:.2g}" for x in row["losses"])
            print(f"seed {seed}: first try {'yes' if row['first_try'] else 'no'} (validation "
                  f"loss {losses}); held-out {row['before']:.1%} -> {row['after']:.1%}, "
                  f"{'promoted' if row['promoted'] else 'NOT promoted'} (p = {row['p']:.2g}); {row['wall']:.0f} s "
                  f"[{stages} s]", flush=True)  # fmt: skip
    print()
    print(
        "| seed | first try | restarts | validation loss | untrained | trained | p | promoted | night |"
    )
    print("|--:|---|--:|---|--:|--:|--:|---|--:|")
    for r in rows:
        losses = ", ".join(f"{x:.2g}" for x in r["losses"])
        print(f"| {r['seed']} | {'yes' if r['first_try'] else 'no'} | {r['restarts']} | {losses} "
              f"| {r['before']:.1%} | {r['after']:.1%} | {r['p']:.2g} | {'yes' if r['promoted'] else 'no'} "
              f"| {r['wall'] / 60:.1f} min |")  # fmt: skip
    walls = [r["wall"] for r in rows]
    first = sum(r["first_try"] for r in rows)
    print(f"\nfirst try: {first} of {len(rows)} seeds; promoted: "
          f"{sum(r['promoted'] for r in rows)} of {len(rows)}; night wall time median "
          f"{statistics.median(walls) / 60:.1f} min, max {max(walls) / 60:.1f} min")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
