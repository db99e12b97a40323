"""Does the nightly loop learn from its own rollouts? N nights of ``iterate`` from a warm-up.

Runs the real ``iterate`` flow (Prefect's ephemeral API) night after night on a fresh store:

- **night 0** is the warm-up: ``--warmup`` demonstrations of ``--warmup-agent`` (the expert,
  or logs of mixed quality such as ``noisy:0.25:give_up`` cloned whole with ``--warmup-all``)
  train a tiny model from scratch (SFT); it is promoted when it beats the untrained model:
  the first champion;
- **nights 1..N-1** collect with the champion only (``--episodes`` per night: tasks x
  ``--attempts`` sampled at temperature 1.0), score with the reward model, train on from the
  champion with ``--method`` on the champion's own rollouts, and promote on a significant
  held-out improvement. No expert data after night 0.

Then every night's champion is evaluated greedily on an **independent** held-out sample
(``--final-eval`` tasks, a seed the promotion decisions never saw, so the winner's curse of
promoting on the decision sample does not inflate the figures), with Wilson 95% intervals and
a one-sided Fisher exact test of the last night's champion against night 0's.

Beside it, in the same run and on the same final sample:

- **SFT on the warm-up only**: the first champion is exactly that policy (night 0's, or the
  next night's when the first warm-up was never right and so was not promoted);
- **SFT on expert data of the loop's size**: a tiny model trained from scratch on as many
  expert episodes as the loop collected rollouts (the same task sources, train split), with
  the warm-up's training settings.

Usage::

    .venv/bin/python bench/loop_bench.py                       # the nightly mix, 4 nights
    # the README's run: a warm-up cloned from 2,000 logs of mixed quality (a quarter of the
    # episodes give up), the sampled policy evaluated (about 45 minutes here)
    .venv/bin/python bench/loop_bench.py --family order_status --warmup 2000 \
        --warmup-agent noisy:0.25:give_up --warmup-all --warmup-epochs 20 --episodes 800 \
        --epochs 3 --lr 1e-3 --eval 200 --final-eval 300 --eval-temperature 1.0
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

from flows.collect import CollectParams, TaskSource
from flows.evaluate import EvalParams
from flows.iterate import NIGHTLY_MIX, IterateParams, WarmupParams, _patient_ephemeral_server
from flows.iterate import iterate as iterate_flow
from tasks.export import ExportParams
from tasks.train import TrainParams

FINAL_SEED = 90_000  # the promotion evaluations use EvalParams.seed (50,000): never this


def final_sample(sources: list[TaskSource], n: int) -> list[tuple[TaskSource, list[str]]]:
    """``n`` held-out task ids split evenly over the sources, from the independent seed."""
    from knowlyr.taskset import sample

    out = []
    for j, src in enumerate(sources):
        k = n // len(sources) + (j < n % len(sources))
        ids = [t.task_id for t in sample(src.suite, k, seed=FINAL_SEED + j, split="heldout",
                                         family=src.family)]  # fmt: skip
        out.append((src, ids))
    return out


def evaluate_folder(
    path: str, tasks: list[tuple[TaskSource, list[str]]], max_steps: int, temperature: float = 0.0
) -> list[bool]:
    """Successes of a checkpoint folder on the final sample, source by source: greedy, or the
    sampled policy at ``temperature`` (seeded)."""
    from knowlyr.train.promotion import evaluate_checkpoint

    out: list[bool] = []
    for j, (src, ids) in enumerate(tasks):
        res = evaluate_checkpoint(path, src.env_id, ids, len(ids), name="final",
                                  max_steps=max_steps, seed=FINAL_SEED + j, max_new_tokens=96,
                                  temperature=temperature)  # fmt: skip
        out += res.successes
    return out


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of k successes in n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def fisher_greater(a: list[bool], b: list[bool]) -> float:
    """One-sided Fisher exact p that ``a``'s success rate is higher than ``b``'s."""
    from scipy.stats import fisher_exact

    table = [[sum(a), len(a) - sum(a)], [sum(b), len(b) - sum(b)]]
    return float(fisher_exact(table, alternative="greater")[1])


def expert_baseline(store_url: str, sources: list[TaskSource], episodes: int,
                    train: TrainParams, max_steps: int, seed: int) -> str:  # fmt: skip
    """A tiny model trained from scratch on ``episodes`` expert episodes; its folder."""
    from knowlyr.agents.spec import agent_factory
    from knowlyr.export import export_sft
    from knowlyr.rollout import collect
    from knowlyr.store import Store
    from knowlyr.taskset import sample
    from knowlyr.train.checkpoints import init_policy, train_sft_checkpoint
    from knowlyr.train.selection import validation_split

    trajs = []
    for j, src in enumerate(sources):
        k = episodes // len(sources) + (j < episodes % len(sources))
        ids = [
            t.task_id for t in sample(src.suite, k, seed=seed + j, split="train", family=src.family)
        ]
        trajs += collect(src.env_id, agent_factory("expert"), len(ids), tasks=ids,
                         max_steps=max_steps, seed=seed + j)  # fmt: skip
    from tasks.export import DEFAULT_SYSTEM_PROMPT

    ds = export_sft(trajs, system_prompt=DEFAULT_SYSTEM_PROMPT).dataset
    store = Store.open(store_url)
    init = init_policy(store, ds, dataset_name=f"expert-{episodes}", hidden_size=train.hidden_size,
                       num_layers=train.num_layers, seed=train.seed)  # fmt: skip
    rows, val = validation_split(ds, train.validation_fraction)
    out = train_sft_checkpoint(store, rows, init=init.path, eval_dataset=val,
                               output_dir=Path(store_url) / "bench-expert-sft",
                               learning_rate=train.learning_rate, batch_size=train.batch_size,
                               epochs=train.epochs, seed=train.seed)  # fmt: skip
    return str(out.path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", default=None, help="store root (default: a fresh temporary one)")
    ap.add_argument("--nights", type=int, default=4, help="nights, warm-up included")
    ap.add_argument(
        "--family",
        default=None,
        help="one conversation family instead of the nightly mix (e.g. order_status)",
    )
    ap.add_argument("--warmup", type=int, default=50, help="expert demonstrations on night 0")
    ap.add_argument("--warmup-epochs", type=float, default=30)
    ap.add_argument(
        "--warmup-agent",
        default="expert",
        help="the demonstrator (e.g. noisy:0.25:give_up: logs of mixed quality)",
    )
    ap.add_argument(
        "--warmup-all",
        action="store_true",
        help="clone every demonstration, failed ones too (default: successes only)",
    )
    ap.add_argument(
        "--eval-temperature",
        type=float,
        default=0.0,
        help="0: greedy policies; e.g. 1.0: the sampled policy the loop collects with",
    )
    ap.add_argument("--episodes", type=int, default=400, help="rollouts per later night")
    ap.add_argument("--attempts", type=int, default=4, help="sampled attempts per task")
    ap.add_argument("--method", choices=("sft", "dpo"), default="sft")
    ap.add_argument("--epochs", type=float, default=3, help="training epochs of a later night")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate of a later night")
    ap.add_argument("--eval", type=int, default=120, help="held-out tasks of each promotion")
    ap.add_argument("--final-eval", type=int, default=300, help="independent held-out tasks")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--no-expert-baseline", action="store_true")
    args = ap.parse_args()

    store_url = args.store or tempfile.mkdtemp(prefix="knowlyr-loop-bench-")
    if args.family:
        sources = [
            TaskSource(env_id="knowlyr/conversation", suite="conversation", family=args.family)
        ]
    else:
        sources = NIGHTLY_MIX
    train = TrainParams(method=args.method, epochs=args.epochs, learning_rate=args.lr, restarts=1,
                        target_eval_loss=None, validation_fraction=0)  # fmt: skip
    warm_train = TrainParams(epochs=args.warmup_epochs, restarts=1, target_eval_loss=None)
    temp = args.eval_temperature
    params = IterateParams(
        store_url=store_url,
        warmup=WarmupParams(episodes=args.warmup, agent=args.warmup_agent,
                            only_success=not args.warmup_all, train=warm_train),
        collect=CollectParams(mix=sources, agent="champion", episodes=args.episodes,
                              attempts=args.attempts, temperature=1.0, max_steps=args.max_steps,
                              shards=2),
        export=ExportParams(suite=None, family=None),
        train=train,
        evaluate=EvalParams(episodes=args.eval, max_steps=args.max_steps, temperature=temp),
    )  # fmt: skip
    where = ", ".join(str(s) for s in sources)
    print(f"store {store_url}; tasks: {where}; {args.nights} nights, warm-up {args.warmup} "
          f"{args.warmup_agent} episodes{' (all cloned)' if args.warmup_all else ''}, then {args.episodes} rollouts/night ({args.attempts} attempts/task), "
          f"method {args.method}")  # fmt: skip

    nights = []
    with _patient_ephemeral_server():
        for night in range(args.nights):
            t0 = time.perf_counter()
            rep = iterate_flow(params.model_copy(update={"seed": night}))
            from tasks.evaluate import current_champion

            champ = current_champion(store_url)
            nights.append({
                "night": night, "warmup": rep.warmup, "collected": rep.collect.episodes,
                "successes": rep.collect.successes, "rows": rep.dataset.rows,
                "promoted": rep.decision.promoted, "reason": rep.decision.reason,
                "champion": champ, "seconds": time.perf_counter() - t0,
            })  # fmt: skip
            print(f"night {night}: collected {rep.collect.episodes} ({rep.collect.successes} "
                  f"successful), {rep.dataset.rows} rows, "
                  f"{'PROMOTED' if rep.decision.promoted else 'kept'}: {rep.decision.reason} "
                  f"[{nights[-1]['seconds']:.0f} s]", flush=True)  # fmt: skip

    from tasks.train import checkpoint_path

    final = final_sample(sources, args.final_eval)
    results: dict[str, list[bool]] = {}
    rows = []
    for n in nights:
        label = f"night {n['night']} champion" + (" (after a warm-up night)" if n["warmup"] else "")
        if n["champion"] is None:
            rows.append((label, None))
            continue
        blob = n["champion"].blob
        if blob not in results:
            results[blob] = evaluate_folder(checkpoint_path(n["champion"]), final, args.max_steps,
                                            temp)  # fmt: skip
        rows.append((label, results[blob]))
    loop_rollouts = sum(n["collected"] for n in nights if not n["warmup"])
    if not args.no_expert_baseline and loop_rollouts:
        t0 = time.perf_counter()
        folder = expert_baseline(store_url, sources, args.warmup + loop_rollouts, warm_train,
                                 args.max_steps, seed=70_000)  # fmt: skip
        rows.append((f"SFT on {args.warmup + loop_rollouts} expert episodes",
                     evaluate_folder(folder, final, args.max_steps, temp)))  # fmt: skip
        print(f"expert baseline trained and evaluated in {time.perf_counter() - t0:.0f} s")

    print()
    how = "greedy" if temp == 0 else f"sampled at temperature {temp:g}"
    print(f"Held-out success on {args.final_eval} independent tasks ({where}), {how}:")
    print(f"{'policy':<44} {'success':>8}  95% CI")
    for name, succ in rows:
        if succ is None:
            print(f"{name:<44} {'-':>8}  (nothing promoted)")
            continue
        lo, hi = wilson(sum(succ), len(succ))
        print(f"{name:<44} {sum(succ) / len(succ):>8.1%}  {lo:.1%}–{hi:.1%}")
    print(
        "(a champion after a warm-up night is SFT on the warm-up's demonstrations only; a warm-up"
    )
    print(" whose policy was never right is not promoted, and the next night warms up again)")
    champs = [
        (n["night"], results[n["champion"].blob]) for n in nights if n["champion"] is not None
    ]
    if len(champs) >= 2:
        (first, a), (last, b) = champs[0], champs[-1]
        rates = [sum(s) / len(s) for _, s in champs]
        never_drops = all(y >= x for x, y in itertools.pairwise(rates))
        print(f"night {last} champion vs night {first}: one-sided Fisher p = {fisher_greater(b, a):.2g}; "
              f"champion success never drops: {never_drops}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
