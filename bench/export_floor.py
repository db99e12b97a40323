"""What one trajectory costs in each piece of ``knowlyr export sft FILE``, on one core.

The pieces of the file export (:mod:`knowlyr.export.sft_parallel`), each timed alone on the
first N lines of a JSONL file of trajectories (best of 3, CPU time of this process): reading
and splitting the lines, validating each (``validate_line``; ``orjson.loads`` alone beside it
for reference), gathering the kept trajectories' fields (``_Rows.add``), assembling the Arrow
columns of 256-row batches, spilling them to a file and reading them back, and writing the
folder's Arrow file and ``data.parquet``. With the process's fixed start (imports, the
validator) they bound the whole export: every piece up to the spill runs on every core, the
parquet file is written by one process at the end.

    .venv/bin/python bench/export_floor.py [FILE] [N]

(FILE defaults to the anchor workload's ``ours_export.jsonl``, N to 4,000.)
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANCHOR = ROOT / ".bench/anchor-work/data-s0-c10000-n50000-e20000/ours_export.jsonl"


def best(fn, reps: int = 3) -> tuple[float, object]:
    out, least = None, float("inf")
    for _ in range(reps):
        t = time.process_time()
        out = fn()
        least = min(least, time.process_time() - t)
    return least, out


def main(path: Path, n: int) -> None:
    import orjson
    import pyarrow as pa

    from knowlyr.export import sft
    from knowlyr.export.folder import write_folder
    from knowlyr.export.sft_parallel import _lines
    from knowlyr.store._documents import validate_line

    gc.disable()  # as the export runs (knowlyr._gc.paused)
    sft._BATCH_ROWS = 1 << 30  # gather() cuts the batches itself: _Rows.add never assembles
    end = 0
    with open(path, "rb") as f:
        for i, line in enumerate(f):
            end += len(line)
            if i + 1 == n:
                break
    t_read, lines = best(lambda: [line for _, line in _lines(str(path), 0, end) if line.strip()])
    n = len(lines)
    t_loads, _ = best(lambda: [None for line in lines if orjson.loads(line) is None])
    t_valid, _ = best(lambda: [None for line in lines if validate_line(line) is None])
    docs = [validate_line(line) for line in lines]

    def gather(batch_rows: int) -> list[tuple]:
        jobs, rows = [], sft._Rows("system", None, 1, 0.5, True, None, threaded=False)
        for i, d in enumerate(docs):
            if d["outcome"].get("success") and d["steps"]:
                rows.add(d["id"], d["task"], d["outcome"], d["steps"], None)
            if len(rows.row_steps) >= batch_rows or (i == len(docs) - 1 and rows.row_steps):
                jobs.append((rows.texts, rows.odd_steps, rows.tool_names, rows.params,
                             rows.step_rewards, rows.traj_weights, rows.row_steps, rows.meta,
                             True, 0.5))  # fmt: skip
                rows._reset()
        return jobs

    t_add, _ = best(lambda: gather(1 << 30))
    jobs = gather(sft._SPILL_BATCH_ROWS)
    n_rows = sum(len(j[6]) for j in jobs)
    t_asm, batches = best(lambda: [b for j in jobs for b in sft._assemble_batch(*j)])
    tools = [orjson.dumps({"type": "function", "function": {"name": "tool"}})]
    full = [sft._with_tools(b, tools) for b in batches]
    card = sft.DatasetCard(kind="sft", rows=n_rows, trajectories=n, tasks=0)
    with tempfile.TemporaryDirectory() as tmp:
        spill = os.path.join(tmp, "rows.arrow")

        def spill_and_read() -> None:
            with pa.ipc.new_stream(spill, sft._schema(tools=False)) as w:
                for b in batches:
                    w.write_batch(b)
            with pa.OSFile(spill) as f:
                for _ in pa.ipc.open_stream(f):
                    pass

        t_spill, _ = best(spill_and_read)
        t_write, _ = best(lambda: write_folder(tmp, sft._schema(), full, card, fingerprint="x"))
        t_arrow, _ = best(
            lambda: write_folder(tmp, sft._schema(), full, card, fingerprint="x", parquet=False)
        )
    per = n_rows / n
    print(f"{path.name}: {n:,} trajectories, {n_rows:,} rows ({per:.2f} per trajectory)")
    print("us per trajectory, one core:")
    rows = [
        ("read + split lines", t_read / n),
        ("validate_line", t_valid / n),
        ("  (orjson.loads alone)", t_loads / n),
        ("gather (_Rows.add)", t_add / n),
        ("assemble Arrow columns", t_asm / n),
        ("spill write + read", t_spill / n),
        ("write Arrow file", t_arrow / n),
        ("write data.parquet", (t_write - t_arrow) / n),
    ]
    for name, sec in rows:
        print(f"  {name:24s} {sec * 1e6:7.1f}")
    parallel = (t_read + t_valid + t_add + t_asm + t_spill) / n
    print(f"  {'on every core (sum)':24s} {parallel * 1e6:7.1f}")


if __name__ == "__main__":
    main(
        Path(sys.argv[1]) if len(sys.argv) > 1 else ANCHOR,
        int(sys.argv[2]) if len(sys.argv) > 2 else 4000,
    )
