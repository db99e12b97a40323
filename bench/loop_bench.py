"""Does the nightly loop make its policy better? Nights 0..N-1 of ``iterate``, measured apart.

Runs the real ``iterate`` flow (Prefect's ephemeral API) night after night on a fresh store,
with the ``iterate/nightly`` deployment's own parameters (``IterateParams()``; ``--params``
changes stages the way ``prefect deployment run -p params=...`` does), the seed being the
night's number:

- **night 0** is the warm-up: expert demonstrations over the task mix train the first policy
  (SFT); it is promoted only when it beats the untrained model significantly;
- **nights 1..N-1** collect with the champion only, score, train on from it with the
  night's method on its own rollouts, and promote on a significant held-out gain. No expert
  data after night 0.

Then every policy is evaluated on an **independent** held-out sample (``--final-eval``
tasks spread evenly over the task sources, from a seed the promotion decisions never saw),
greedily and sampled at the collection's temperature, per family and overall, with Wilson
95% intervals:

- the untrained policy (night 0's initial model);
- each night's champion;
- **"just imitate more"**: a warm-up night on a fresh store with as many expert
  demonstrations as the loop used in all (the warm-up's plus every later night's rollouts),
  trained with the same recipe.

It prints one-sided Fisher tests of the last champion against night 0's and against the
imitation baseline, whether any family of the last champion fell below its night-0 95%
interval, and each night's wall time by stage (from the flow run's task runs).

Usage::

    .venv/bin/python bench/loop_bench.py                        # the nightly defaults, 4 nights
    .venv/bin/python bench/loop_bench.py --nights 2 --final-eval 120 \\
        --params '{"collect": {"attempts": 4}, "train": {"method": "dpo"}}'
    .venv/bin/python bench/loop_bench.py --evaluate night0=STORE/checkpoints/.../final
    .venv/bin/python bench/loop_bench.py --store STORE --start 11 --nights 3  # go on from STORE
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

from flows.collect import TaskSource
from flows.iterate import IterateParams, _merged, _patient_ephemeral_server
from flows.iterate import iterate as iterate_flow

FINAL_SEED = 90_000  # the promotion evaluations use EvalParams.seed (50,000): never this
#: task-run name prefixes of each stage of a night
STAGES = {
    "collect": ("sample-", "collect-", "dedup-"),
    "reward": ("reward-",),
    "export": ("export-",),
    "train": ("init-", "train-", "select-"),
    "evaluate": ("evaluate-", "compare-"),
    "promote": ("promote-",),
}


def final_sample(sources: list[TaskSource], n: int) -> list[tuple[TaskSource, list[str]]]:
    """``n`` held-out task ids split evenly over the sources, from the independent seed."""
    from knowlyr.taskset import sample

    out = []
    for j, src in enumerate(sources):
        k = n // len(sources) + (j < n % len(sources))
        tasks = sample(src.suite, k, seed=FINAL_SEED + j, split="heldout", family=src.family)
        out.append((src, [t.task_id for t in tasks]))
    return out


def evaluate_folder(
    path: str, tasks: list[tuple[TaskSource, list[str]]], max_steps: int, temperature: float
) -> dict[str, list[bool]]:
    """Successes of a checkpoint folder on the final sample, by family (greedy when
    ``temperature`` is 0, else sampled with seeded turns)."""
    from knowlyr.train.promotion import evaluate_checkpoint

    out: dict[str, list[bool]] = defaultdict(list)
    for j, (src, ids) in enumerate(tasks):
        res = evaluate_checkpoint(path, src.env_id, ids, len(ids), name="final",
                                  max_steps=max_steps, seed=FINAL_SEED + j, max_new_tokens=96,
                                  temperature=temperature)  # fmt: skip
        for family, part in res.by_family().items():
            out[family] += part.successes
    return dict(out)


def stage_seconds(flow_run_id: Any) -> dict[str, float]:
    """Wall time of each stage of a finished flow run: first start to last end of its task
    runs (shards overlap), plus ``night`` (the flow run itself)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
        flow_run = client.read_flow_run(flow_run_id)
    out = stage_spans(runs)
    if flow_run.start_time and flow_run.end_time:
        out["night"] = (flow_run.end_time - flow_run.start_time).total_seconds()
    return out


def stage_spans(runs: list[Any], stages: dict[str, tuple[str, ...]] = STAGES) -> dict[str, float]:
    """Wall time of each of ``stages`` (name -> task-run name prefixes) over ``runs``: first
    start to last end of its task runs (shards overlap)."""
    out = {}
    for stage in stages:
        mine = [
            r for r in runs if _stage_of(r.name, stages) == stage and r.start_time and r.end_time
        ]
        if mine:
            start = min(r.start_time for r in mine)
            out[stage] = (max(r.end_time for r in mine) - start).total_seconds()
    return out


def _stage_of(task_run: str, stages: dict[str, tuple[str, ...]] = STAGES) -> str | None:
    """The stage a task run belongs to (the held-out sample is the evaluation's)."""
    if task_run.startswith("sample-") and "-heldout-" in task_run:
        return "evaluate"
    return next((s for s, pre in stages.items() if task_run.startswith(pre)), None)


def run_night(params: IterateParams, night: int) -> dict[str, Any]:
    from tasks.evaluate import current_champion

    t0 = time.perf_counter()
    state = iterate_flow(params.model_copy(update={"seed": night}), return_state=True)
    rep = state.result()
    seconds = stage_seconds(state.state_details.flow_run_id)
    champion = current_champion(params.store_url)
    print(f"night {night}: collected {rep.collect.episodes} ({rep.collect.successes} "
          f"successful), {rep.dataset.rows} rows; {rep.outcome} "
          f"[{time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()) + "]", flush=True)  # fmt: skip
    return {"night": night, "report": rep, "champion": champion, "seconds": seconds}


def fmt(successes: list[bool]) -> str:
    from knowlyr.train.evaluation import wilson_interval

    k, n = sum(successes), len(successes)
    lo, hi = wilson_interval(k, n)
    return f"{k / n:6.1%} ({lo:4.0%}–{hi:4.0%})" if n else "-"


def table(rows: list[tuple[str, dict[str, list[bool]]]], families: list[str]) -> None:
    width = max(len(name) for name, _ in rows) + 2
    print(f"{'policy':<{width}}{'overall':>22}" + "".join(f"{f[:20]:>22}" for f in families))
    for name, by_family in rows:
        every = [s for f in families for s in by_family.get(f, [])]
        cells = "".join(f"{fmt(by_family.get(f, [])):>22}" for f in families)
        print(f"{name:<{width}}{fmt(every):>22}{cells}")


def evaluate_all(
    policies: list[tuple[str, str]],
    final: list[tuple[TaskSource, list[str]]],
    steps: int,
    temp: float,
) -> dict[str, dict[str, dict[str, list[bool]]]]:
    """Each (label, folder) greedy and, when ``temp`` > 0, sampled on the final sample."""
    results = {}
    for name, path in policies:
        results[name] = {"greedy": evaluate_folder(path, final, steps, 0.0)}
        if temp > 0:
            results[name]["sampled"] = evaluate_folder(path, final, steps, temp)
    return results


def print_results(
    results: dict[str, dict[str, dict[str, list[bool]]]],
    n_tasks: int,
    temp: float,
    last: str,
    against: list[str],
) -> None:
    """Per mode, the table of every policy by family, then ``last`` against each of
    ``against``: one-sided Fisher p, and the families where ``last`` falls below the other's
    95% interval."""
    from knowlyr.train.evaluation import fisher_greater, wilson_interval

    families = sorted({f for r in results.values() for f in r["greedy"]})
    flat = lambda r: [s for f in families for s in r.get(f, [])]  # noqa: E731
    for mode in ("greedy", "sampled"):
        rows = [(name, r[mode]) for name, r in results.items() if mode in r]
        if not rows:
            continue
        how = "greedy" if mode == "greedy" else f"sampled at temperature {temp:g}"
        print(f"\nHeld-out success on {n_tasks} independent tasks, {how} "
              "(95% Wilson intervals):")  # fmt: skip
        table(rows, families)
        mine = results[last][mode]
        for other in against:
            theirs = results[other][mode]
            below = [f for f in families if mine.get(f) and theirs.get(f) and
                     sum(mine[f]) / len(mine[f]) < wilson_interval(sum(theirs[f]), len(theirs[f]))[0]]  # fmt: skip
            print(f"{last} vs {other}: one-sided Fisher p = "
                  f"{fisher_greater(flat(mine), flat(theirs)):.2g}; families below its 95% "
                  f"interval: {', '.join(below) or 'none'}")  # fmt: skip


def evaluate_only(args: argparse.Namespace) -> int:
    """``--evaluate``: the given folders on the final sample of the parameters' mix; the last
    one is compared with each of the others."""
    base = IterateParams.small() if args.small else IterateParams()
    params = IterateParams.model_validate(_merged(base.model_dump(), json.loads(args.params)))
    final = final_sample(params.collect.sources(), args.final_eval)
    steps, temp = params.evaluate.max_steps, params.collect.temperature
    policies = [(label, path) for label, _, path in (i.partition("=") for i in args.evaluate)]
    results = evaluate_all(policies, final, steps, temp)
    print_results(results, args.final_eval, temp, policies[-1][0], [p for p, _ in policies[:-1]])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", default=None, help="store root (default: a fresh temporary one)")
    ap.add_argument("--nights", type=int, default=4, help="nights, warm-up included")
    ap.add_argument(
        "--start", type=int, default=0,
        help="the first night's number (its seed): go on from an earlier run's --store with "
        "seeds its nights did not use",
    )  # fmt: skip
    ap.add_argument("--params", default="{}", help="IterateParams as JSON (partial stages)")
    ap.add_argument("--final-eval", type=int, default=300, help="independent held-out tasks")
    ap.add_argument("--no-expert-baseline", action="store_true")
    ap.add_argument("--small", action="store_true", help="IterateParams.small(): a smoke run")
    ap.add_argument(
        "--evaluate", nargs="+", metavar="LABEL=FOLDER", default=None,
        help="run no nights: evaluate these checkpoint folders (e.g. the champions of an earlier "
        "run's store) on the independent sample of the mix, greedy and sampled",
    )  # fmt: skip
    args = ap.parse_args()
    if args.evaluate:
        return evaluate_only(args)

    from tasks.train import checkpoint_path

    store_url = args.store or tempfile.mkdtemp(prefix="knowlyr-loop-bench-")
    base = IterateParams.small() if args.small else IterateParams()
    given = {**_merged(base.model_dump(), json.loads(args.params)), "store_url": store_url}
    params = IterateParams.model_validate(given)
    sources = params.collect.sources()
    print(
        f"store {store_url}; {args.nights} nights of {params.model_dump_json(exclude={'store_url'})}"
    )
    with _patient_ephemeral_server():
        nights = [run_night(params, n) for n in range(args.start, args.start + args.nights)]
        loop_episodes = params.warmup.episodes + sum(
            n["report"].collect.episodes for n in nights if not n["report"].warmup
        )
        baseline = None
        if not args.no_expert_baseline:
            fresh = params.model_copy(
                update={
                    "store_url": tempfile.mkdtemp(prefix="knowlyr-imitate-more-"),
                    "warmup": params.warmup.model_copy(update={"episodes": loop_episodes}),
                }
            )
            t0 = time.perf_counter()
            baseline = iterate_flow(fresh.model_copy(update={"seed": 0})).candidate
            print(f"imitate-more baseline ({loop_episodes} expert episodes) trained in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip

    final = final_sample(sources, args.final_eval)
    steps, temp = params.evaluate.max_steps, params.collect.temperature
    policies: list[tuple[str, str]] = []
    night0 = nights[0]["report"]
    if night0.warmup and night0.init is not None:  # with --start on a store: no warm-up run
        policies.append(("untrained", checkpoint_path(night0.init)))
    seen: dict[str, str] = {}
    for n in nights:
        if n["champion"] is not None:
            label = seen.setdefault(n["champion"].blob, f"night {n['night']} champion")
            policies.append((label, checkpoint_path(n["champion"])))
    if baseline is not None:
        policies.append((f"SFT on {loop_episodes} expert episodes", checkpoint_path(baseline)))
    policies = list(dict(policies).items())  # a champion kept over nights is evaluated once
    results = evaluate_all(policies, final, steps, temp)
    champs = [name for name in results if "champion" in name]
    last = champs[-1] if champs else policies[-1][0]
    against = champs[:1] + ([policies[-1][0]] if baseline is not None else [])
    print_results(results, args.final_eval, temp, last, [a for a in against if a != last])
    print("\nWall time by stage (seconds):")
    stages = [*STAGES, "night"]
    print(f"{'night':<8}" + "".join(f"{s:>10}" for s in stages))
    for n in nights:
        print(f"{n['night']:<8}" + "".join(f"{n['seconds'].get(s, 0):>10.0f}" for s in stages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
