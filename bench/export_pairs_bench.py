"""DPO and GRPO export of a JSONL file: `knowlyr export dpo|grpo FILE` against the model path.

Ours is the command as users run it, a whole process: it streams the file's lines as validated
JSON documents into the exporter (no model built). The baseline is the model path the command
took before, as a script (a whole process too, without the CLI's imports): every line into a
``Trajectory`` (``Trajectory.from_json``, the cyclic GC paused as the command paused it), then
the same exporter given the models, and the folder written. Both write the same folder: the
bench stops when their datasets or cards differ.

Workload: 20-step coding trajectories with 500-character outputs, 40 per task, three in four
successful (the shape of the anchor's export workload, ``bench/anchor_bench.py``, generated
here), generated deterministically into ``--work`` once. Runs interleave (baseline, ours, ...); the table gives
the median wall time, CPU seconds and peak RSS of each and the median of the per-round ratios.

    .venv/bin/python bench/export_pairs_bench.py [--n 20000] [--rounds 3] [--kinds dpo,grpo]
        [--input FILE.jsonl] [--work .bench/pairs]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_BASELINE = """
import sys
from pathlib import Path
from knowlyr._gc import paused
from knowlyr.export import DEFAULT_SYSTEM_PROMPT, export_dpo, export_grpo
from knowlyr.trajectory import Trajectory
kind, src, out = sys.argv[1:4]
with paused():
    with open(src, "rb") as f:
        trajs = [Trajectory.from_json(line) for line in f if line.strip()]
    export = export_dpo if kind == "dpo" else export_grpo
    export(trajs, system_prompt=DEFAULT_SYSTEM_PROMPT).save(Path(out))
"""


def make(path: Path, n: int, *, seed: int = 0) -> None:
    """``n`` trajectories, 40 per task, 20 steps of ~500-character outputs each."""
    from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory

    rng = random.Random(seed)
    words = [
        "path",
        "line",
        "else",
        "write",
        "config",
        "module",
        "error",
        "import",
        "test",
        "value",
        "function",
        "result",
    ]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        for i in range(n):
            steps = []
            for j in range(20):
                target = f"src/mod_{rng.randrange(40)}/file_{rng.randrange(1000)}.py"
                steps.append(
                    Step(
                        index=j,
                        thought=f"Look at {target} for step {j}: "
                        + " ".join(rng.choices(words, k=8)),
                        action=ToolCall(tool="bash", params={"command": f"sed -n 1,40p {target}"}),
                        observation=Observation(
                            output=" ".join(rng.choices(words, k=90))[:500], exit_code=0
                        ),
                    )
                )
            ok = rng.random() < 0.75
            traj = Trajectory(
                task=TaskInfo(task_id=f"task-{i // 40:04d}", instruction=f"Fix issue {i // 40}."),
                steps=steps,
                outcome=Outcome(success=ok, score=rng.choice([0.25, 0.5, 1.0]) if ok else 0.0),
            )
            f.write(traj.to_json() + b"\n")
    tmp.rename(path)


def same_folders(a: Path, b: Path) -> None:
    import pyarrow.parquet as pq

    if not pq.read_table(a / "data.parquet").equals(pq.read_table(b / "data.parquet")):
        raise SystemExit(f"{a} and {b}: the datasets (data.parquet) differ")
    ca, cb = json.loads((a / "card.json").read_text()), json.loads((b / "card.json").read_text())
    if ca != cb:
        raise SystemExit(f"{a} and {b}: the cards differ:\n{ca}\n{cb}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default="dpo,grpo")
    ap.add_argument("--input", type=Path, help="a JSONL of trajectories instead of generating")
    ap.add_argument("--work", type=Path, default=ROOT / ".bench" / "pairs")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    src = args.input or args.work / f"trajectories-{args.n}.jsonl"
    if not src.exists():
        t0 = time.perf_counter()
        make(src, args.n)
        print(f"generated {args.n} trajectories into {src} in {time.perf_counter() - t0:.0f} s")
    with open(src, "rb") as f:
        n = sum(1 for line in f if line.strip())
    py = sys.executable
    rows = []
    for kind in args.kinds.split(","):
        got: dict[str, list[tuple[float, float, float]]] = {"baseline": [], "ours": []}
        for r in range(args.rounds):
            outs = {}
            for side in ("baseline", "ours"):
                out = args.work / f"out-{kind}-{side}"
                shutil.rmtree(out, ignore_errors=True)
                if side == "baseline":
                    argv = [py, "-c", _BASELINE, kind, str(src), str(out)]
                else:
                    argv = [py, "-m", "knowlyr.cli", "export", kind, str(src), "-o", str(out)]
                got[side].append(_measured(argv))
                outs[side] = out
            same_folders(outs["baseline"], outs["ours"])
            b, o = got["baseline"][-1], got["ours"][-1]
            print(f"{kind} round {r + 1}: baseline {b[0]:.2f} s, ours {o[0]:.2f} s, "
                  f"{b[0] / o[0]:.2f}x; peak {b[2]:.0f} / {o[2]:.0f} MB", flush=True)  # fmt: skip
        rows.append((kind, got))
    print(f"\n{n:,} trajectories from {src.name}; median of {args.rounds} interleaved rounds\n")
    print("| export | baseline: models in, s | ours: documents in, s | ratio (per round) "
          "| CPU s, baseline / ours | peak RSS MB, baseline / ours |")  # fmt: skip
    print("|---|--:|--:|---|--:|--:|")
    for kind, got in rows:
        med = {s: [statistics.median(x[i] for x in v) for i in range(3)] for s, v in got.items()}
        ratios = [b[0] / o[0] for b, o in zip(got["baseline"], got["ours"], strict=True)]
        print(
            f"| `{kind}` | {med['baseline'][0]:.2f} | {med['ours'][0]:.2f} | "
            f"**{statistics.median(ratios):.2f}x** ({', '.join(f'{x:.2f}' for x in ratios)}) | "
            f"{med['baseline'][1]:.1f} / {med['ours'][1]:.1f} | "
            f"{med['baseline'][2]:,.0f} / {med['ours'][2]:,.0f} |"
        )


def _measured(argv: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS MB of ``argv``, run under a fresh parent
    process of its own (``RUSAGE_CHILDREN``'s peak is the largest child's so far)."""
    probe = (
        "import json, sys, resource, subprocess, time\n"
        "t0 = time.perf_counter()\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "wall = time.perf_counter() - t0\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps([wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024]))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, env=env,
                       capture_output=True, text=True)  # fmt: skip
    if p.returncode:
        raise SystemExit(f"{' '.join(argv[:6])} failed:\n{p.stderr[-3000:]}")
    wall, cpu, rss = json.loads(p.stdout.strip().splitlines()[-1])
    return wall, cpu, rss


if __name__ == "__main__":
    main()
