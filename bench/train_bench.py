"""SFT training throughput: KnowlyrSFTTrainer (enhancements on) vs plain TRL SFTTrainer.

Same data (expert ``order_status`` episodes exported by knowlyr), same tiny model init, same
batch size, the same single torch thread (intra- and inter-op) for both. Tokens are counted
identically for both trainers: the non-padding tokens of every training batch
(``attention_mask.sum()``, TRL's own ``num_tokens``).

Robust on a shared, noisy machine:

- the first optimizer step of every run is a warm-up and not counted (the clock runs from the
  end of step 1 to the end of training, so trainer setup and tokenization are excluded too);
- one short warm-up run first (first-run costs of the process); then the trainers run
  interleaved, ``ROUNDS`` times, the order rotated every round (A B C, B C A, C A B, ...) so
  each takes every position equally often and a change of load hits all of them;
- the figures are medians over the rounds: tokens per wall second, and tokens per CPU second
  (``process_time`` of the process: it barely moves when other processes take the cores),
  plus the median of the per-round ratios (each round's runs are close in time);
- the data collator's time per step is measured for both, to show what the enhancements cost
  outside the model's forward/backward.

Budget: ours >= 0.95x plain TRL.

    .venv/bin/python bench/train_bench.py [EPISODES] [ROUNDS]
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

KINDS = ("trl", "knowlyr", "knowlyr+curriculum")


def run(kind: str, ds, tok, seed: int = 0) -> dict[str, float]:
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from knowlyr.train.models import build_tiny_model
    from knowlyr.train.sft_config import KnowlyrSFTConfig
    from knowlyr.train.sft_trainer import KnowlyrSFTTrainer

    model, _ = build_tiny_model(tokenizer=tok, seed=seed)
    common = {
        "output_dir": f"/tmp/knowlyr-train-bench-{kind}",
        "per_device_train_batch_size": 16,
        "num_train_epochs": 1,
        "learning_rate": 3e-3,
        "logging_steps": 1000,
        "disable_tqdm": True,
        "report_to": "none",
        "save_strategy": "no",
        "seed": seed,
    }
    if kind == "trl":
        args = SFTConfig(
            **common,
            bf16=False,
            use_cpu=True,
            activation_checkpointing=False,
            assistant_only_loss=True,
            max_length=None,
        )
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=ds.select_columns(["messages", "tools"]),
            processing_class=tok,
        )
    else:
        args = KnowlyrSFTConfig(
            **common, step_weighted_loss=True, curriculum=kind == "knowlyr+curriculum"
        )
        trainer = KnowlyrSFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)

    marks: list[tuple[float, float, int, float]] = []
    collate = [0.0]
    collator = trainer.data_collator

    def timed_collator(examples):
        t0 = time.perf_counter()
        out = collator(examples)
        collate[0] += time.perf_counter() - t0
        return out

    trainer.data_collator = timed_collator

    def mark() -> None:
        marks.append(
            (time.perf_counter(), time.process_time(), trainer._total_train_tokens, collate[0])
        )

    class Clock(TrainerCallback):  # steady state: from the end of step 1 to the end of training
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 1:
                mark()

        def on_train_end(self, args, state, control, **kw):
            mark()

    trainer.add_callback(Clock())
    gc.collect()
    trainer.train()
    (w1, c1, n1, k1), (w2, c2, n2, k2) = marks[0], marks[-1]
    steps = trainer.state.global_step - 1
    return {
        "tokens_per_s": (n2 - n1) / (w2 - w1),
        "tokens_per_cpu_s": (n2 - n1) / (c2 - c1),
        "ms_per_step": (w2 - w1) / steps * 1e3,
        "collate_ms_per_step": (k2 - k1) / steps * 1e3,
        "tokens": n2 - n1,
    }


def main() -> None:
    import torch

    from knowlyr.agents import ExpertAgent
    from knowlyr.export import export_sft
    from knowlyr.rollout import collect
    from knowlyr.train.models import build_tiny_model_for

    torch.set_num_threads(1)  # identical for both; the CPU is shared
    torch.set_num_interop_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 800
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    trajs = collect(
        "knowlyr/conversation", ExpertAgent, n, seed=0, env_kwargs={"family": "order_status"}
    )
    ds = export_sft(trajs, system_prompt="You answer questions about orders.").dataset
    _, tok = build_tiny_model_for(ds)
    run("trl", ds.select(range(64)), tok)  # warm-up: first-run costs of the process
    results: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
    for r in range(rounds):  # interleaved, the order rotated each round (A B C, B C A, ...)
        for kind in KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)]:
            results[kind].append(run(kind, ds, tok))

    def med(kind: str, key: str) -> float:
        return statistics.median(x[key] for x in results[kind])

    def paired(kind: str, key: str) -> float:
        return statistics.median(
            o[key] / t[key] for o, t in zip(results[kind], results["trl"], strict=True)
        )

    print(
        f"SFT training, tiny Qwen2 (2 layers / 64), {n} episodes x 1 epoch, batch 16, "
        f"1 torch thread, {rounds} interleaved rounds, medians (load {os.getloadavg()[0]:.1f})"
    )
    labels = {
        "trl": "plain TRL SFTTrainer (assistant_only_loss)",
        "knowlyr": "KnowlyrSFTTrainer (masking + step-weighted loss)",
        "knowlyr+curriculum": "KnowlyrSFTTrainer (+ curriculum order)",
    }
    for kind in KINDS:
        line = (
            f"  {labels[kind]:50s} {med(kind, 'tokens_per_s'):8,.0f} tokens/s "
            f"{med(kind, 'tokens_per_cpu_s'):8,.0f} tokens/CPU-s  "
            f"{med(kind, 'ms_per_step'):6.1f} ms/step (collator {med(kind, 'collate_ms_per_step'):.2f})"
        )
        if kind != "trl":
            line += (
                f"\n  {'':50s} ratio to TRL: {med(kind, 'tokens_per_s') / med('trl', 'tokens_per_s'):.2f}x"
                f" wall, {med(kind, 'tokens_per_cpu_s') / med('trl', 'tokens_per_cpu_s'):.2f}x CPU"
                f" (paired per round: {paired(kind, 'tokens_per_s'):.2f}x wall, "
                f"{paired(kind, 'tokens_per_cpu_s'):.2f}x CPU)"
                f"\n  {'':50s} rounds (CPU): "
                + " ".join(
                    f"{o['tokens_per_cpu_s'] / t['tokens_per_cpu_s']:.2f}"
                    for o, t in zip(results[kind], results["trl"], strict=True)
                )
            )
        print(line)
    print("  budget: KnowlyrSFTTrainer >= 0.95x plain TRL (tokens per second, same model and data)")


if __name__ == "__main__":
    main()
