"""Learning reliability: how many seed pairs a tiny-model SFT recipe learns the task for.

TARGETS.md's learning row: a tiny policy trained from scratch by SFT on expert conversation
episodes reaches >= 80% held-out success. Whether one training run gets there depends on the
seeds (the "ids copied, status guessed" plateau), so a single run says little. This bench
trains one model per (model seed, collection seed) pair for each recipe and counts the pairs
that learned, side by side:

- ``2x64``: the recipe of earlier versions (the baseline);
- ``2x128``: the width ``tasks.train.TrainParams`` uses now.

Each run: 2,000 expert ``order_status`` episodes collected with the collection seed, exported,
a Qwen2 built with the model seed, trained 10 epochs (lr 3e-3, batch 16, one torch thread),
evaluated greedily on 30 held-out tasks. No restarts here: this measures one run's odds,
which the flow's restarts then multiply. Runs go two at a time (``--jobs``), ~70 s (2x64) and
~125 s (2x128) each on this machine.

    .venv/bin/python bench/learning_bench.py                       # 6 pairs, both recipes
    .venv/bin/python bench/learning_bench.py --pairs 10,0 11,1     # chosen pairs
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

RECIPES = {"2x64": {"hidden_size": 64}, "2x128": {"hidden_size": 128}}
SYSTEM = "You answer customers' questions about their orders."
LEARNED = 0.8


def run(recipe: str, model_seed: int, collect_seed: int) -> tuple[str, int, int, float, float]:
    """One training run; returns (recipe, seeds, held-out success, seconds)."""
    import datasets
    import torch
    import transformers

    torch.set_num_threads(1)
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    from knowlyr.agents import ExpertAgent
    from knowlyr.agents.inference import AgentInference
    from knowlyr.export import export_sft
    from knowlyr.rollout import collect
    from knowlyr.train.evaluation import evaluate_agent
    from knowlyr.train.models import build_tiny_model_for
    from knowlyr.train.run import train_sft
    from knowlyr.train.sft_config import KnowlyrSFTConfig

    started = time.perf_counter()
    kw = {"family": "order_status"}
    trajs = collect(
        "knowlyr/conversation",
        ExpertAgent,
        2000,
        seed=collect_seed,
        env_kwargs={**kw, "split": "train"},
    )
    ds = export_sft(trajs, system_prompt=SYSTEM).dataset
    model, tok = build_tiny_model_for(ds, seed=model_seed, **RECIPES[recipe])
    with tempfile.TemporaryDirectory() as out:
        config = KnowlyrSFTConfig(
            output_dir=out,
            learning_rate=3e-3,
            per_device_train_batch_size=16,
            num_train_epochs=10,
            logging_steps=10_000,
            disable_tqdm=True,
            seed=model_seed,
            report_to=[],
        )
        result = train_sft(ds, model, tok, config)
        agent = AgentInference.from_pretrained(result.path, max_new_tokens=48).create_agent()
        ev = evaluate_agent(
            "knowlyr/conversation",
            agent,
            n_episodes=30,
            seed=50_000,
            max_steps=3,
            env_kwargs={**kw, "split": "heldout"},
        )
    return recipe, model_seed, collect_seed, ev.success_rate, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--pairs",
        nargs="+",
        default=["10,0", "11,1", "12,2", "13,0", "14,1", "15,2"],
        help="MODEL_SEED,COLLECT_SEED pairs",
    )
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (one thread each)")
    args = ap.parse_args(argv)
    pairs = [tuple(int(x) for x in p.split(",")) for p in args.pairs]
    jobs = [(r, m, c) for m, c in pairs for r in args.recipes]
    print(f"{len(jobs)} runs ({len(pairs)} seed pairs x {len(args.recipes)} recipes), "
          f"{args.jobs} at a time; load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    results: dict[tuple[str, int, int], tuple[float, float]] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for recipe, m, c, success, seconds in pool.map(run, *zip(*jobs, strict=True)):
            results[recipe, m, c] = (success, seconds)
            print(f"  {recipe:6} model seed {m:3} collection seed {c:3}: "
                  f"{success:5.0%} held-out ({seconds:.0f} s)", flush=True)  # fmt: skip
    print(f"\n{'pair':>10}  " + "  ".join(f"{r:>8}" for r in args.recipes))
    for m, c in pairs:
        cells = "  ".join(f"{results[r, m, c][0]:8.0%}" for r in args.recipes)
        print(f"{m:>4},{c:<5}  {cells}")
    for r in args.recipes:
        learned = sum(results[r, m, c][0] >= LEARNED for m, c in pairs)
        print(f"{r}: learned (>= {LEARNED:.0%} held-out) for {learned} of {len(pairs)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
