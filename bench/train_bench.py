"""SFT training throughput: KnowlyrSFTTrainer (enhancements on) vs plain TRL SFTTrainer.

Same data (expert ``order_status`` episodes exported by knowlyr), same tiny model init, same
batch size, one torch thread each (the CPU is shared). Tokens/s counts real (non-padding)
tokens per second of steady-state training (from the end of step 1 to the end of training, so
trainer setup and the garbage collection inside ``train()`` are not counted). Budget: ours
>= 0.95x plain TRL.

    .venv/bin/python bench/train_bench.py [EPISODES] [ROUNDS]
"""

from __future__ import annotations

import gc
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def run(kind: str, ds, tok, seed: int = 0) -> float:
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
    from transformers import TrainerCallback

    marks: list[tuple[float, int]] = []

    class Clock(TrainerCallback):  # steady state: from the end of step 1 to the end of training
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 1:
                marks.append((time.perf_counter(), trainer._total_train_tokens))

        def on_train_end(self, args, state, control, **kw):
            marks.append((time.perf_counter(), trainer._total_train_tokens))

    trainer.add_callback(Clock())
    gc.collect()
    trainer.train()
    (t1, n1), (t2, n2) = marks[0], marks[-1]
    return (n2 - n1) / (t2 - t1)


def main() -> None:
    import torch

    from knowlyr.agents import ExpertAgent
    from knowlyr.export import export_sft
    from knowlyr.rollout import collect
    from knowlyr.train.models import build_tiny_model_for

    torch.set_num_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 800
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    trajs = collect(
        "knowlyr/conversation", ExpertAgent, n, seed=0, env_kwargs={"family": "order_status"}
    )
    ds = export_sft(trajs, system_prompt="You answer questions about orders.").dataset
    _, tok = build_tiny_model_for(ds)
    kinds = ("trl", "knowlyr", "knowlyr+curriculum")
    results: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(rounds):  # alternate, so load changes hit all
        for kind in kinds:
            results[kind].append(run(kind, ds, tok))
    trl, ours, cur = (max(results[k]) for k in kinds)
    print(
        f"SFT training, tiny Qwen2 (2 layers / 64), {n} episodes x 1 epoch, batch 16, best of {rounds} "
        f"(load {os.getloadavg()[0]:.1f})"
    )
    print(f"  plain TRL SFTTrainer (assistant_only_loss):                  {trl:9,.0f} tokens/s")
    print(
        f"  KnowlyrSFTTrainer (masking + step-weighted loss):             {ours:9,.0f} tokens/s "
        f"({ours / trl:.2f}x; budget >= 0.95x)"
    )
    print(
        f"  KnowlyrSFTTrainer (+ curriculum, length-sorted batches):      {cur:9,.0f} tokens/s "
        f"({cur / trl:.2f}x)"
    )


if __name__ == "__main__":
    main()
