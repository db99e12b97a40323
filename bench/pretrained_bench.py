"""SmolLM2-135M-Instruct as the policy: training speed beside plain TRL, acting, learning.

Three parts (``--part``, repeatable; default: all three):

- **training**: our trainer (``KnowlyrSFTTrainer`` defaults: assistant-only loss, the
  step-weighted loss) against plain TRL ``SFTTrainer`` (``assistant_only_loss=True``) on the
  same SmolLM2 weights, the same rows (expert episodes over the nightly mix, exported by
  knowlyr) and the same training template (the one ``training_chat_template`` picks for
  SmolLM2: ``smollm2_training``), the same seed and so the same batches. ``--steps`` optimizer
  steps per run, ``--rounds`` interleaved rounds (the order alternating); tokens are TRL's
  non-padding ``num_tokens``, counted from the end of step 1. Budget: ours within 10% of
  plain TRL (issue 35).
- **acting**: ``bench/serve_bench.py`` on the SmolLM2 checkpoint: episodes per second at 1, 8
  and 32 episodes in flight, in process (batched decoding) and served (``transformers
  serve``, with and without continuous batching). Budget: 32 in flight >= 8x one at a time.
- **learning**: ``bench/loop_bench.py`` with SmolLM2 as the warm-up's base: the untrained
  policy (SmolLM2 zero-shot), the warm-up on ``--warmup`` expert episodes over the mix and
  ``--nights - 1`` loop nights on its own rollouts, per family with Wilson 95% intervals and
  Fisher tests, beside SFT on as many expert episodes.

On this 2-core CPU a 135M model trains at ~100 tokens/s and reads prompts at ~300 tokens/s,
so the acting and learning parts take hours at their default sizes: run them on a GPU
(``--device`` is the inference device; training uses the GPU when torch sees one).

    .venv/bin/python bench/pretrained_bench.py --part training --steps 6 --rounds 2
    .venv/bin/python bench/pretrained_bench.py --part acting --episodes 32
    .venv/bin/python bench/pretrained_bench.py --part learning --warmup 500 --nights 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from train_bench import measure  # noqa: E402


def mix_rows(per_family: int, seed: int = 0):
    """Expert episodes of every family of the nightly mix (train split) as SFT rows."""
    from flows.iterate import NIGHTLY_MIX
    from knowlyr.agents import ExpertAgent
    from knowlyr.export import export_sft
    from knowlyr.rollout import collect
    from tasks.export import DEFAULT_SYSTEM_PROMPT

    trajs = []
    for source in NIGHTLY_MIX:  # one source per family
        trajs += collect(
            source.env_id,
            ExpertAgent,
            per_family,
            seed=seed,
            concurrency=4,
            env_kwargs={"family": source.family, "split": "train"},
        )
    return export_sft(trajs, system_prompt=DEFAULT_SYSTEM_PROMPT).dataset


def build(kind: str, ds, base: Path, steps: int, batch: int):
    """A trainer of ``kind`` ("trl" or "knowlyr") on a fresh load of the SmolLM2 weights."""
    import torch
    from trl import SFTConfig, SFTTrainer

    from knowlyr.train.chat_templates import training_chat_template
    from knowlyr.train.models import load_model
    from knowlyr.train.sft_config import KnowlyrSFTConfig
    from knowlyr.train.sft_trainer import KnowlyrSFTTrainer

    model, tok = load_model(base)
    tok.chat_template = training_chat_template(tok).template  # the same template for both
    common = {
        "output_dir": tempfile.mkdtemp(prefix=f"knowlyr-pretrained-bench-{kind}-"),
        "per_device_train_batch_size": batch,
        "max_steps": steps,
        "learning_rate": 5e-5,
        "logging_steps": 1000,
        "disable_tqdm": True,
        "report_to": "none",
        "save_strategy": "no",
        "seed": 0,
        "bf16": torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
    }
    if kind == "trl":
        args = SFTConfig(**common, assistant_only_loss=True, max_length=None)
        return SFTTrainer(
            model=model,
            args=args,
            train_dataset=ds.select_columns(["messages", "tools"]),
            processing_class=tok,
        )
    args = KnowlyrSFTConfig(**common, step_weighted_loss=True, chat_template=tok.chat_template)
    return KnowlyrSFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)


def training(args: argparse.Namespace, base: Path) -> None:
    import torch

    ds = mix_rows(args.per_family)
    print(f"{len(ds)} rows ({args.per_family} expert episodes per family of the nightly mix)")
    results: dict[str, list[dict[str, float]]] = {"trl": [], "knowlyr": []}
    for r in range(args.rounds):  # interleaved, the order alternating
        for kind in ("trl", "knowlyr") if r % 2 == 0 else ("knowlyr", "trl"):
            results[kind].append(measure(build(kind, ds, base, args.steps, args.batch)))
            print(f"  round {r} {kind}: {results[kind][-1]['tokens_per_s']:,.1f} tokens/s",
                  flush=True)  # fmt: skip

    def med(kind: str, key: str) -> float:
        return statistics.median(x[key] for x in results[kind])

    paired = statistics.median(
        o["tokens_per_s"] / t["tokens_per_s"]
        for o, t in zip(results["knowlyr"], results["trl"], strict=True)
    )
    device = "cuda" if torch.cuda.is_available() else f"cpu, {torch.get_num_threads()} threads"
    print(
        f"\nSFT of SmolLM2-135M-Instruct ({device}), batch {args.batch}, {args.steps} steps "
        f"per run, {args.rounds} interleaved rounds, medians from the end of step 1:"
    )
    for kind, label in (
        ("trl", "plain TRL SFTTrainer (assistant_only_loss)"),
        ("knowlyr", "KnowlyrSFTTrainer defaults (step-weighted loss)"),
    ):
        print(f"  {label:50s} {med(kind, 'tokens_per_s'):9,.1f} tokens/s "
              f"{med(kind, 'tokens_per_cpu_s'):9,.1f} tokens/CPU-s "
              f"{med(kind, 'ms_per_step'):9,.0f} ms/step")  # fmt: skip
    print(f"  ours / TRL: {med('knowlyr', 'tokens_per_s') / med('trl', 'tokens_per_s'):.2f}x "
          f"(paired per round {paired:.2f}x); budget >= 0.90x")  # fmt: skip


def acting(args: argparse.Namespace, base: Path) -> None:
    cmd = [sys.executable, str(HERE / "serve_bench.py"), "--checkpoint", str(base)]
    subprocess.run([*cmd, "--episodes", str(args.episodes)], check=True)


def learning(args: argparse.Namespace, base: Path) -> None:
    params = {
        "warmup": {
            "episodes": args.warmup,
            "train": {
                "model": str(base),
                "epochs": args.epochs,
                "learning_rate": args.lr,
                "batch_size": args.batch,
                "restarts": 1,
                "target_eval_loss": None,
                "validation_fraction": 0,
            },
        },
        "train": {"learning_rate": args.lr, "epochs": 1, "batch_size": args.batch},
        "collect": {"episodes": args.collect, "attempts": 4},
        "evaluate": {"episodes": args.eval},
    }
    cmd = [sys.executable, str(HERE / "loop_bench.py"), "--nights", str(args.nights)]
    cmd += ["--final-eval", str(args.final_eval), "--params", json.dumps(params)]
    print(" ".join(cmd[1:3]), "...", flush=True)
    subprocess.run(cmd, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", action="append", choices=("training", "acting", "learning"))
    ap.add_argument("--model", default="smollm2-135m", help="a checkpoint folder or smollm2-135m")
    ap.add_argument("--per-family", type=int, default=4, help="training: rows per family")
    ap.add_argument("--steps", type=int, default=6, help="training: optimizer steps per run")
    ap.add_argument("--rounds", type=int, default=2, help="training: interleaved rounds")
    ap.add_argument("--batch", type=int, default=4, help="per-device batch size")
    ap.add_argument("--episodes", type=int, default=32, help="acting: episodes per cell")
    ap.add_argument("--warmup", type=int, default=500, help="learning: expert episodes")
    ap.add_argument("--nights", type=int, default=2, help="learning: nights, warm-up included")
    ap.add_argument("--epochs", type=float, default=2, help="learning: warm-up epochs")
    ap.add_argument("--lr", type=float, default=5e-5, help="learning: learning rate")
    ap.add_argument("--collect", type=int, default=400, help="learning: episodes a loop night")
    ap.add_argument("--eval", type=int, default=150, help="learning: promotion episodes")
    ap.add_argument("--final-eval", type=int, default=300, help="learning: held-out tasks")
    args = ap.parse_args()

    from knowlyr.train.models import smollm2_checkpoint

    base = smollm2_checkpoint() if args.model.lower().startswith("smollm2") else Path(args.model)
    for part in args.part or ("training", "acting", "learning"):
        print(f"\n== {part} ==", flush=True)
        {"training": training, "acting": acting, "learning": learning}[part](args, base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
