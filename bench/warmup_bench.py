"""Can a warm-up recipe learn the nightly mix? Held-out success per family as training goes.

Collects expert demonstrations for every family of the nightly mix (``--per-family`` each,
train split; ``--boost FAMILY:N`` gives one family N), trains a tiny model from scratch by
SFT with the given recipe, saves a checkpoint every ``--save-every`` steps, and evaluates
each checkpoint greedily on ``--eval`` held-out tasks per family (batched, 32 episodes at
once). The baseline beside it is the untrained model: 0% on every family.

    .venv/bin/python bench/warmup_bench.py --per-family 250 --epochs 8 --save-every 375
    .venv/bin/python bench/warmup_bench.py --per-family 150 --boost order_status:1500 --epochs 8
    .venv/bin/python bench/warmup_bench.py --per-family 150 --epochs 6 --induction-steps 1000
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import shutil
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from flows.iterate import NIGHTLY_MIX


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-family", type=int, default=250, help="expert episodes per family")
    ap.add_argument("--boost", default="", help="FAMILY:N: N episodes of that family instead")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument(
        "--induction-steps", type=int, default=0,
        help="copy pretraining steps before SFT (knowlyr.train.induction; 0: none)",
    )  # fmt: skip
    ap.add_argument(
        "--induction-batch", type=int, default=32, help="rows per induction pretraining step"
    )
    ap.add_argument(
        "--induction-target", type=float, default=0.98,
        help="stop induction pretraining at this copy accuracy (0: train every step)",
    )  # fmt: skip
    ap.add_argument(
        "--families", default="", help="comma-separated families of the mix (default: all 13)"
    )
    ap.add_argument("--epochs", type=float, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument(
        "--schedule", default="linear", help="lr_scheduler_type (e.g. constant_with_warmup)"
    )
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument(
        "--sampler", default="random", help="train_sampling_strategy (e.g. group_by_length)"
    )
    ap.add_argument("--max-steps", type=int, default=5, help="tool calls per evaluation episode")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="generation limit per turn")
    ap.add_argument(
        "--save-every", type=int, default=0, help="checkpoint every N steps (0: end only)"
    )
    ap.add_argument("--eval", type=int, default=20, help="held-out tasks per family")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: knowlyr's choice)")
    args = ap.parse_args()

    import torch

    from knowlyr.agents import ExpertAgent
    from knowlyr.agents.inference import MARKER_FILE, AgentInference
    from knowlyr.export import export_sft
    from knowlyr.rollout import collect
    from knowlyr.train.evaluation import evaluate_agent
    from knowlyr.train.induction import induction_pretrain
    from knowlyr.train.models import build_tiny_model, dataset_texts
    from knowlyr.train.run import train_sft
    from knowlyr.train.sft_config import KnowlyrSFTConfig
    from tasks.export import DEFAULT_SYSTEM_PROMPT

    if args.threads:  # tiny models otherwise train and decode on one thread (knowlyr._threads)
        import knowlyr._threads

        knowlyr._threads.SMALL_MODEL_PARAMS = 0 if args.threads > 1 else 10**12
        torch.set_num_threads(args.threads)
    boost_family, _, boost_n = args.boost.partition(":")
    families = [(s.env_id, s.family) for s in NIGHTLY_MIX]
    if args.families:
        wanted = args.families.split(",")
        unknown = sorted(set(wanted) - {f for _, f in families})
        if unknown:
            ap.error(f"--families: {unknown} not in the mix ({', '.join(f for _, f in families)})")
        families = [(e, f) for e, f in families if f in wanted]
    t0, trajs = time.perf_counter(), []
    for env_id, family in families:
        n = int(boost_n) if family == boost_family else args.per_family
        trajs += collect(env_id, ExpertAgent, n, seed=args.seed, concurrency=8,
                         env_kwargs={"family": family, "split": "train"})  # fmt: skip
    ds = export_sft(trajs, system_prompt=DEFAULT_SYSTEM_PROMPT).dataset
    order = list(range(len(ds)))
    random.Random(args.seed).shuffle(order)
    model, tok = build_tiny_model(dataset_texts(ds.select(order), limit=300),
                                  hidden_size=args.hidden, num_layers=args.layers,
                                  num_heads=args.heads, seed=args.seed)  # fmt: skip
    print(f"{len(ds)} expert rows collected in {time.perf_counter() - t0:.0f} s; "
          f"{sum(p.numel() for p in model.parameters()):,} parameters", flush=True)  # fmt: skip
    if args.induction_steps:
        done = induction_pretrain(
            model, tok, steps=args.induction_steps, batch_size=args.induction_batch,
            seed=args.seed, target_accuracy=args.induction_target or None,
        )  # fmt: skip
        print(f"induction pretraining: {done.steps} of up to {args.induction_steps} steps in {done.seconds:.0f} s, "
              f"copy accuracy {done.copy_accuracy:.0%}", flush=True)  # fmt: skip
    out = tempfile.mkdtemp(prefix="knowlyr-warmup-bench-")
    config = KnowlyrSFTConfig(
        output_dir=out, learning_rate=args.lr, per_device_train_batch_size=args.batch,
        num_train_epochs=args.epochs, logging_steps=max(1, len(ds) // args.batch),
        disable_tqdm=True, seed=args.seed, lr_scheduler_type=args.schedule,
        warmup_steps=args.warmup_steps, save_strategy="steps" if args.save_every else "no",
        save_steps=args.save_every or 500, train_sampling_strategy=args.sampler,
    )  # fmt: skip
    t0 = time.perf_counter()
    result = train_sft(ds, model, tok, config)
    print(f"trained in {time.perf_counter() - t0:.0f} s: {result.metrics}", flush=True)
    folders = sorted(glob.glob(f"{out}/checkpoint-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
    print(f"\n{'checkpoint':<18}{'overall':>9}" + "".join(f"{f[:9]:>10}" for _, f in families))
    for folder in [*folders, result.path]:
        if folder != result.path:
            shutil.copy(os.path.join(result.path, MARKER_FILE), folder)
        bridge = AgentInference.from_pretrained(folder, max_new_tokens=args.max_new_tokens)
        cells, wins, n = [], 0, 0
        for env_id, family in families:
            ev = evaluate_agent(env_id, lambda b=bridge: b.create_agent(), n_episodes=args.eval,
                                seed=50_000, max_steps=args.max_steps, concurrency=32,
                                env_kwargs={"family": family, "split": "heldout"})  # fmt: skip
            cells.append(f"{ev.success_rate:>10.0%}")
            wins, n = wins + sum(ev.successes), n + ev.n
        bridge.close()
        name = os.path.basename(folder) if folder != result.path else "final"
        print(f"{name:<18}{wins / n:>9.1%}" + "".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
