"""SFT training throughput: KnowlyrSFTTrainer (enhancements on) vs plain TRL SFTTrainer.

Same data (expert ``order_status`` episodes exported by knowlyr, whose step weights are not
uniform, so the weighted loss really runs), same tiny model init, same seed and so the same
batches (same padding, same real tokens), batch size 16, no packing, the same single torch
thread (intra- and inter-op) for both. Tokens are the non-padding tokens of every training
batch (``attention_mask.sum()``, TRL's own ``num_tokens``), checked equal for both.

Two measurements, both robust on a shared, noisy machine:

- **per step** (:func:`step_breakdown`): the two trainers alternate step by step over one
  epoch of the same batches, each step timed in parts (collator, forward + loss, backward,
  optimizer); medians per part, and the ratio taken step by step on the same batch, in wall
  and in CPU time of the thread. This is what our trainer adds per step, with load that
  changes from second to second hitting both alike.
- **whole runs** (``trainer.train()``, so the Trainer loop, callbacks and dataloader count):
  the first optimizer step of every run is a warm-up and not counted (the clock runs from the
  end of step 1 to the end of training, so setup and tokenization are excluded); one short
  warm-up run first; then the trainers run interleaved, ``ROUNDS`` times, the order rotated
  every round (A B C, B C A, C A B, ...); medians over the rounds of tokens per wall second
  and per CPU second (``process_time``: it barely moves when other processes take the
  cores), and the per-round ratios. The curriculum run reads the rows in another order, so
  its batches (and their padding) differ.

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


def build(kind: str, ds, tok, seed: int = 0):
    """The trainer of ``kind`` on a freshly initialised tiny model (the same init for all)."""
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
        return SFTTrainer(
            model=model,
            args=args,
            train_dataset=ds.select_columns(["messages", "tools"]),
            processing_class=tok,
        )
    args = KnowlyrSFTConfig(
        **common, step_weighted_loss=True, curriculum=kind == "knowlyr+curriculum"
    )
    return KnowlyrSFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)


def run(kind: str, ds, tok, seed: int = 0) -> dict[str, float]:
    """One whole ``trainer.train()``; steady-state figures from the end of step 1."""
    return measure(build(kind, ds, tok, seed))


def measure(trainer) -> dict[str, float]:
    """Train ``trainer`` once; tokens per wall and CPU second from the end of step 1 (TRL's
    non-padding ``num_tokens``), ms per step and the collator's share."""
    from transformers import TrainerCallback

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


def step_breakdown(ds, tok, steps: int) -> dict[str, dict[str, float]]:
    """Per-step cost of each part, plain TRL vs ours, the two alternating step by step.

    Both trainers read their own train dataloader, shuffled with the same seed: the same
    batches in the same order. Each step is timed in parts: the data collator, forward + loss
    (``compute_loss``), backward, optimizer step (the same AdamW for both). Alternating every
    step (the order swapped each time) puts both under the same load, so the difference is
    what our trainer adds; the ratio is taken step by step, on the same batch.
    """
    import torch

    kinds = ("trl", "knowlyr")
    trainers = {k: build(k, ds, tok) for k in kinds}
    batches, optimizers = {}, {}
    for kind, tr in trainers.items():
        collate = tr.data_collator
        tr.data_collator = list  # raw examples: collated below, under the clock
        torch.manual_seed(0)  # the shuffle: the same batches for both
        batches[kind] = iter(tr.get_train_dataloader())
        tr.data_collator = collate
        tr.model.train()
        optimizers[kind] = torch.optim.AdamW(tr.model.parameters(), lr=tr.args.learning_rate)
    parts = ("collator", "forward+loss", "backward", "optimizer")
    times = {k: {p: [] for p in (*parts, "step", "step_cpu")} for k in kinds}
    tokens = dict.fromkeys(kinds, 0)
    for i in range(steps):
        for kind in kinds if i % 2 else kinds[::-1]:
            tr, opt = trainers[kind], optimizers[kind]
            examples = [dict(ex) for ex in next(batches[kind])]
            c0, t0 = time.thread_time(), time.perf_counter()
            inputs = tr._prepare_inputs(tr.data_collator(examples))
            t1 = time.perf_counter()
            loss = tr.compute_loss(tr.model, inputs)
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            opt.step()
            opt.zero_grad()
            t4, c4 = time.perf_counter(), time.thread_time()
            tokens[kind] += int(inputs["attention_mask"].sum())
            spans = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0, c4 - c0)
            for part, dt in zip(times[kind], spans, strict=True):
                times[kind][part].append(dt)
    if tokens["trl"] != tokens["knowlyr"]:
        raise SystemExit(f"the trainers saw different tokens: {tokens}")
    out = {k: {p: statistics.median(v) * 1e3 for p, v in times[k].items()} for k in kinds}
    # speed of ours relative to TRL, step by step on the same batch (TRL's time / ours)
    out["ratio"] = {
        key: statistics.median(
            t / o for t, o in zip(times["trl"][key], times["knowlyr"][key], strict=True)
        )
        for key in ("step", "step_cpu")
    }
    out["tokens"] = {"per_run": tokens["trl"]}
    return out


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
    steps = step_breakdown(ds, tok, len(ds) // 16)
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
        f"1 torch thread (load {os.getloadavg()[0]:.1f})"
    )
    parts = ("collator", "forward+loss", "backward", "optimizer", "step", "step_cpu")
    print(
        f"  per step, the two alternating step by step on the same batches, medians (ms):\n"
        f"  {'':50s}" + "".join(f"{p:>13s}" for p in parts)
    )
    for kind, label in (("trl", "plain TRL SFTTrainer"), ("knowlyr", "KnowlyrSFTTrainer")):
        print(f"  {label:50s}" + "".join(f"{steps[kind][p]:13.2f}" for p in parts))
    print(
        f"  {'':50s} ours vs TRL, step by step: {steps['ratio']['step']:.2f}x wall, "
        f"{steps['ratio']['step_cpu']:.2f}x CPU ({steps['tokens']['per_run']:,} real tokens each)"
    )
    print(f"  whole runs (trainer.train()), {rounds} interleaved rounds, medians:")
    labels = {
        "trl": "plain TRL SFTTrainer (assistant_only_loss)",
        "knowlyr": "KnowlyrSFTTrainer (masking + step-weighted loss)",
        "knowlyr+curriculum": "KnowlyrSFTTrainer (+ curriculum: other batches)",
    }
    for kind in KINDS:
        line = (
            f"  {labels[kind]:50s} {med(kind, 'tokens_per_s'):8,.0f} tokens/s "
            f"{med(kind, 'tokens_per_cpu_s'):8,.0f} tokens/CPU-s  "
            f"{med(kind, 'ms_per_step'):6.1f} ms/step (collator {med(kind, 'collate_ms_per_step'):.2f})"
            f"  {med(kind, 'tokens'):,.0f} tokens"
        )
        if kind != "trl":
            line += (
                f"\n  {'':50s} ratio to TRL: {med(kind, 'tokens_per_s') / med('trl', 'tokens_per_s'):.2f}x"
                f" wall, {med(kind, 'tokens_per_cpu_s') / med('trl', 'tokens_per_cpu_s'):.2f}x CPU"
                f" (paired per round: {paired(kind, 'tokens_per_s'):.2f}x wall, "
                f"{paired(kind, 'tokens_per_cpu_s'):.2f}x CPU)"
            )
            for key, name in (("tokens_per_s", "wall"), ("tokens_per_cpu_s", "CPU")):
                line += f"\n  {'':50s} rounds ({name}): " + " ".join(
                    f"{o[key] / t[key]:.2f}"
                    for o, t in zip(results[kind], results["trl"], strict=True)
                )
        print(line)
    print("  budget: KnowlyrSFTTrainer >= 0.95x plain TRL (tokens per second, same model and data)")


if __name__ == "__main__":
    main()
