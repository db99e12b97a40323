"""SFT on a GPU: tokens/s, MFU and peak memory of plain TRL vs ours, interleaved in one run.

Issue #37's bench. Models are random-initialised Qwen2 shapes built from configs (no
downloaded weights, no network): 0.5B (hidden 896, 24 layers, 14 heads, 2 kv heads, MLP
4,864), 1.5B (1,536, 28, 12, 2, 8,960) and a 7B shape (3,584, 28, 28, 4, 18,944) trained with
LoRA r=16 on a bf16 base. The tokenizer is a byte-level BPE trained on the rows (vocabulary
``--vocab``, the model's embedding padded to it). Rows are expert episodes of knowlyr's
conversation env exported as SFT (``--episodes``), or, with ``--runs DIR``, real agent logs
(mini-swe-agent runs, as the issue's figures used) converted and exported with
``max_steps_per_row=6``, or, with ``--rows FOLDER``, an export folder (or its parquet) made
beforehand, which is how the rows reach a GPU machine that cannot read the logs. Expert
episodes are short (p50 ~200 tokens), so padding costs plain TRL less there than on real runs
(p50 4,132).

Per shape, four trainers on the same rows and the same initial weights, one after another
in an order rotated every round and shape (``--rounds``):

- **plain TRL**: ``trl.SFTTrainer`` with ``SFTConfig`` defaults (its activation checkpointing,
  bf16 where supported, no packing), only ``max_length``, batch size and steps set;
- **ours**: ``KnowlyrSFTTrainer`` with ``KnowlyrSFTConfig`` defaults (observation masking,
  step-weighted loss, activation checkpointing on CUDA);
- **ours + packing**: the same with ``packing=True`` (rows packed into ``max_length``
  budgets, padding-free);
- **ours + liger**: ours with ``use_liger_kernel=True`` (Liger's RMSNorm / RoPE / SwiGLU
  kernels; the loss stays TRL's chunked fused LM head with our step weights). Skipped, with
  the reason in its row, without the liger-kernel package or without CUDA (so in the smoke run
  here).

Each runs ``--warmup`` steps, then ``--steps`` timed ones (the clock starts at the end of the
last warm-up step, after a CUDA synchronise). Tokens are non-padding tokens (TRL's
``num_tokens``); MFU is ``6 * parameters * tokens/s / peak`` with the peak from
``--peak-tflops`` (989: H100 bf16 dense; parameters counted once, tied embeddings too, and
with LoRA all of them, though frozen weights get no weight gradients); memory is
``torch.cuda.max_memory_allocated``.

Figure and baseline: ours and ours + packing against plain TRL of the same shape, in the
same run (the ``vs TRL`` column). Issue #37's targets on one H100 80GB: ours >= 1.5x plain
TRL's tokens/s at <= its peak memory (0.5B and 1.5B), MFU >= 35% at 1.5B, and the 7B shape
trains with LoRA at 8,192 tokens per row without running out of memory.

On a machine without CUDA (or with ``--smoke``) it runs a seconds-long version: a tiny shape
(and the same with LoRA), a 1,024-token vocabulary, 1 warm-up and 2 timed steps each, the
same table (memory "n/a"; MFU "n/a" unless ``--peak-tflops`` is given). Plain TRL gets
``bf16=False, use_cpu=True`` there (its bf16 default is ~27x slower on CPUs without bf16).

    .venv/bin/python bench/gpu_train_bench.py                  # GPU: 0.5b, 1.5b, 7b-lora
    .venv/bin/python bench/gpu_train_bench.py --shapes 1.5b --rounds 2 --runs RUNS_DIR
    .venv/bin/python bench/gpu_train_bench.py --rows EXPORT_FOLDER --kinds "plain TRL,ours"
    .venv/bin/python bench/gpu_train_bench.py --smoke          # CPU, seconds
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5's renamed options


@dataclass(frozen=True)
class Shape:
    """A Qwen2 shape and how the bench trains it."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    tie: bool = True
    lora: bool = False
    max_length: int = 4096
    batch: int = 4


SHAPES = {
    "0.5b": Shape(896, 24, 14, 2, 4864),
    "1.5b": Shape(1536, 28, 12, 2, 8960),
    "7b-lora": Shape(3584, 28, 28, 4, 18944, tie=False, lora=True, max_length=8192, batch=2),
    "tiny": Shape(64, 2, 4, 2, 128, max_length=512, batch=2),
    "tiny-lora": Shape(64, 2, 4, 2, 128, lora=True, max_length=512, batch=2),
}
KINDS = ("plain TRL", "ours", "ours + packing", "ours + liger")


def rows(args):
    """The SFT rows: ``--rows`` (an export folder), ``--runs`` agent logs, or expert episodes."""
    if args.rows:
        from knowlyr.train.run import load_dataset_dir

        return load_dataset_dir(args.rows)
    from knowlyr.export import export_sft

    if args.runs:
        from knowlyr.recorder import convert

        report = convert([args.runs], workers=0)
        if not report.trajectories:
            raise SystemExit(f"--runs {args.runs}: no trajectories ({report.rejected} rejected)")
        return export_sft(report.trajectories, only_success=False, max_steps_per_row=6).dataset
    from knowlyr.agents import ExpertAgent
    from knowlyr.rollout import collect

    return export_sft(collect("knowlyr/conversation", ExpertAgent, args.episodes, seed=0)).dataset


def build_model(shape: Shape, tok, vocab: int, device: str, attn: str, seed: int = 0):
    """A random-initialised Qwen2 of ``shape`` on ``device`` (bf16 base for LoRA on CUDA)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=max(len(tok), vocab),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=32768,
        tie_word_embeddings=shape.tie,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it trains: seconds, not minutes, for 7B
        model = Qwen2ForCausalLM._from_config(config, attn_implementation=attn)
    if shape.lora and device == "cuda":
        model = model.to(torch.bfloat16)  # a frozen base: the adapter trains in fp32
    return model


def build_trainer(kind: str, shape: Shape, ds, tok, model, args, out_dir: str):
    from trl import SFTConfig, SFTTrainer

    from knowlyr.train._defaults import lora_config
    from knowlyr.train.sft_config import KnowlyrSFTConfig
    from knowlyr.train.sft_trainer import KnowlyrSFTTrainer

    common = {
        "output_dir": out_dir,
        "per_device_train_batch_size": args.batch_size or shape.batch,
        "max_length": args.max_length or shape.max_length,
        "max_steps": args.warmup + args.steps,
        "learning_rate": 1e-4,
        "logging_steps": 10_000,
        "disable_tqdm": True,
        "report_to": "none",
        "save_strategy": "no",
        "seed": 0,
    }
    if kind == "plain TRL":
        cpu = {} if args.cuda else {"bf16": False, "use_cpu": True}
        peft = {"peft_config": lora_config(16)} if shape.lora else {}
        return SFTTrainer(
            model=model,
            args=SFTConfig(**common, **cpu),
            train_dataset=ds.select_columns(["messages", "tools"]),
            processing_class=tok,
            **peft,
        )
    config = KnowlyrSFTConfig(
        **common,
        step_weighted_loss=True,
        lora_r=16 if shape.lora else None,
        packing=kind == "ours + packing",
        use_liger_kernel=kind == "ours + liger",
    )
    return KnowlyrSFTTrainer(model=model, args=config, train_dataset=ds, processing_class=tok)


def run(kind: str, shape: Shape, ds, tok, args) -> dict[str, float | str]:
    """One trainer's warm-up and timed steps: tokens/s, parameters, peak memory."""
    import torch
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from knowlyr.errors import TrainError

    gc.collect()
    if args.cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = build_model(shape, tok, args.vocab, "cuda" if args.cuda else "cpu", args.attn)
    n_params = sum(p.numel() for p in model.parameters())
    marks: list[tuple[float, int]] = []

    class Clock(TrainerCallback):
        def on_step_end(self, targs, state, control, **kw):
            if state.global_step in (args.warmup, args.warmup + args.steps):
                if args.cuda:
                    torch.cuda.synchronize()
                marks.append((time.perf_counter(), trainer._total_train_tokens))

    with tempfile.TemporaryDirectory(prefix="knowlyr-gpu-bench-") as out_dir:
        try:
            trainer = build_trainer(kind, shape, ds, tok, model, args, out_dir)
            trainer.remove_callback(PrinterCallback)  # the final metrics dict: not ours to print
            trainer.add_callback(Clock())
            trainer.train()
        except (TrainError, torch.cuda.OutOfMemoryError) as e:
            return {"error": str(e).splitlines()[0][:160], "params": n_params}
        finally:
            peak = torch.cuda.max_memory_allocated() if args.cuda else None
            model = trainer = None  # freed before the next run
            gc.collect()
    (t0, n0), (t1, n1) = marks[0], marks[-1]
    return {"tokens_per_s": (n1 - n0) / (t1 - t0), "params": n_params, "peak": peak}


def table(results: dict, args) -> None:
    gib = 1024**3
    device = "cuda" if args.cuda else "cpu"
    if args.cuda:
        import torch

        device = torch.cuda.get_device_name()
    print(
        f"SFT on {device}, attention {args.attn}, {args.n_rows} rows ({args.source}), "
        f"vocab {args.vocab:,}, {args.warmup} warm-up + {args.steps} timed steps, "
        f"{args.rounds} round(s), medians"
    )
    head = (
        f"| {'run':<44} | {'tokens/s':>10} | {'vs TRL':>6} | {'MFU':>5} | {'peak GPU memory':>15} |"
    )
    print(head)
    print("|" + "|".join("-" * (len(c) + 0) for c in head.split("|")[1:-1]) + "|")
    for name, shape in args.shape_list:
        base = None
        n_params = results[name][args.kinds[0]][0]["params"]
        size = f"{n_params / 1e9:.2f}B" if n_params >= 1e8 else f"{n_params / 1e6:.1f}M"
        lora = ", LoRA r=16" if shape.lora else ""
        for kind in KINDS:
            label = f"{name} ({size}{lora}): {kind}"
            if kind not in args.kinds:
                print(f"| {label:<44} | skipped: {args.skipped[kind]}")
                continue
            runs = results[name][kind]
            errors = [r["error"] for r in runs if "error" in r]
            if errors:
                print(f"| {label:<44} | failed: {errors[0]}")
                continue
            tps = statistics.median(r["tokens_per_s"] for r in runs)
            base = tps if kind == "plain TRL" else base
            ratio = f"{tps / base:.2f}x" if base else "-"
            mfu = (
                f"{6 * runs[0]['params'] * tps / (args.peak_tflops * 1e12):.0%}"
                if args.cuda or args.peak_given
                else "n/a"
            )
            peak = (
                f"{max(r['peak'] for r in runs) / gib:.1f} GiB" if runs[0]["peak"] is not None
                else "n/a"
            )  # fmt: skip
            print(f"| {label:<44} | {tps:>10,.0f} | {ratio:>6} | {mfu:>5} | {peak:>15} |")
    if not args.cuda:
        print("smoke run: it checks the path end to end; figures of 2 steps on a CPU are noise")
    print(
        "targets (issue #37, H100 80GB): ours >= 1.5x plain TRL tokens/s at <= its peak memory; "
        "MFU >= 35% at 1.5B; 7B LoRA at 8,192 tokens per row fits"
    )


def skipped_kinds(cuda: bool) -> dict[str, str]:
    """Runs this machine cannot do, with the reason: Liger needs its package and CUDA."""
    from knowlyr.errors import TrainError
    from knowlyr.train._defaults import resolve_liger_kernel

    try:
        resolve_liger_kernel(True, on_gpu=cuda)
    except TrainError as e:
        return {"ours + liger": str(e).split("; ")[0].replace("use_liger_kernel=True ", "")}
    return {}


def main(argv: list[str] | None = None) -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=None, help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--smoke", action="store_true", help="the seconds-long CPU version")
    p.add_argument("--runs", default=None, help="agent logs to export instead of expert episodes")
    p.add_argument(
        "--rows",
        default=None,
        help="rows to train on: an export folder (knowlyr export sft -o FOLDER) or its .parquet",
    )
    p.add_argument(
        "--kinds", default=None, help=f"comma-separated runs, of {', '.join(KINDS)} (default all)"
    )
    p.add_argument("--episodes", type=int, default=None, help="expert episodes (400; smoke 24)")
    p.add_argument("--vocab", type=int, default=None, help="BPE vocabulary (32,000; smoke 1,024)")
    p.add_argument("--max-length", type=int, default=None, help="tokens per row (per shape)")
    p.add_argument("--batch-size", type=int, default=None, help="rows per step (per shape)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps (3; smoke 1)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (30; smoke 2)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds (medians)")
    p.add_argument("--peak-tflops", type=float, default=None, help="peak FLOP/s (989: H100 bf16)")
    p.add_argument("--attn", default=None, help="attn_implementation (flash_attention_2 if found)")
    args = p.parse_args(argv)

    import importlib.util

    args.cuda = torch.cuda.is_available() and not args.smoke
    small = not args.cuda
    args.shapes = args.shapes or ("tiny,tiny-lora" if small else "0.5b,1.5b,7b-lora")
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        p.error(f"--shapes: unknown {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    args.shape_list = [(s, SHAPES[s]) for s in args.shapes.split(",")]
    wanted = args.kinds.split(",") if args.kinds else list(KINDS)
    if [k for k in wanted if k not in KINDS] or "plain TRL" not in wanted:
        p.error(
            f"--kinds: of {', '.join(KINDS)}, comma-separated, plain TRL included (the baseline)"
        )
    if args.rows and args.runs:
        p.error("--rows and --runs: give one")
    args.episodes = args.episodes or (24 if small else 400)
    args.vocab = args.vocab or (1024 if small else 32000)
    args.warmup = args.warmup if args.warmup is not None else (1 if small else 3)
    args.steps = args.steps if args.steps is not None else (2 if small else 30)
    if args.warmup < 1 or args.steps < 1:
        p.error("--warmup and --steps must be at least 1 (the clock starts after a warm-up step)")
    args.peak_given = args.peak_tflops is not None
    args.peak_tflops = args.peak_tflops or 989.0
    if args.attn is None:
        flash = args.cuda and importlib.util.find_spec("flash_attn") is not None
        args.attn = "flash_attention_2" if flash else "sdpa"
    if not args.cuda:
        torch.set_num_threads(min(4, os.cpu_count() or 1))

    from knowlyr._progress import quiet_progress
    from knowlyr.train.models import build_tiny_tokenizer, dataset_texts

    with quiet_progress():
        ds = rows(args)
        tok = build_tiny_tokenizer(dataset_texts(ds, limit=400), vocab_size=args.vocab)
    args.n_rows = len(ds)
    args.source = args.rows or args.runs or "expert episodes, knowlyr/conversation"
    args.skipped = skipped_kinds(args.cuda)
    for kind in set(KINDS) - set(wanted):
        args.skipped.setdefault(kind, "not asked for (--kinds)")
    args.kinds = tuple(k for k in KINDS if k not in args.skipped)
    results = {name: {k: [] for k in args.kinds} for name, _ in args.shape_list}
    for r in range(args.rounds):
        for i, (name, shape) in enumerate(args.shape_list):
            turn = (r + i) % len(args.kinds)  # the order rotated every round and shape
            for kind in args.kinds[turn:] + args.kinds[:turn]:
                with quiet_progress():
                    results[name][kind].append(run(kind, shape, ds, tok, args))
                print(f"{name}: {kind}: {results[name][kind][-1]}", file=sys.stderr, flush=True)
    table(results, args)


if __name__ == "__main__":
    sys.exit(main())
