"""CLI cold start: ``knowlyr --help`` vs the original packages' commands.

The baseline is the original knowlyr CLIs (``knowlyr-hub``, ``knowlyr-recorder``,
``knowlyr-reward`` from the PyPI packages knowlyr-core/-recorder/-reward/-hub 0.1.2), run
with ``--help`` from their own virtual environment (``.bench/anchor-venv``, see README). Each
run is a fresh process (the console script, as a user starts it), wall time from spawn to
exit. The commands run interleaved, the order rotated every round, so a change of load on a
shared machine hits all of them; the figures are medians over the rounds, and the ratio is
also taken per round (each round's runs are close in time). A ratio above 1 means
``knowlyr --help`` is faster.

Budget: ``knowlyr --help`` at least as fast as the original's (>= 1x).

    .venv/bin/python bench/cli_bench.py [ROUNDS] [ANCHOR_VENV]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def once(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    anchor = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / ".bench" / "anchor-venv"
    ours = Path(sys.executable).parent / "knowlyr"
    cmds = {"knowlyr --help (ours)": [str(ours), "--help"]}
    for name in ("knowlyr-hub", "knowlyr-recorder", "knowlyr-reward"):
        if (anchor / "bin" / name).is_file():
            cmds[f"{name} --help (original)"] = [str(anchor / "bin" / name), "--help"]
    if len(cmds) == 1:
        sys.exit(f"no original CLI under {anchor}/bin: build the anchor venv first (README)")
    names = list(cmds)
    for argv in cmds.values():  # warm-up: .pyc files and the page cache
        once(argv)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(once(cmds[name]))
    print(f"CLI cold start, {rounds} interleaved rounds, medians (load {os.getloadavg()[0]:.1f})")
    ours_t = times[names[0]]
    print(f"  {names[0]:36s} {statistics.median(ours_t) * 1e3:7.1f} ms")
    for name in names[1:]:
        base = times[name]
        ratio = statistics.median(base) / statistics.median(ours_t)
        paired = statistics.median(b / o for b, o in zip(base, ours_t, strict=True))
        print(
            f"  {name:36s} {statistics.median(base) * 1e3:7.1f} ms   ours is {ratio:.2f}x as fast "
            f"(paired per round: {paired:.2f}x)"
        )
    print("  budget: knowlyr --help >= 1x the original's")


if __name__ == "__main__":
    main()
