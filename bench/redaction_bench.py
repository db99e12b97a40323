"""Secret redaction on real agent runs: what it changes, what it catches, what it costs.

Runs the redaction of this checkout and a baseline (``knowlyr/recorder/redact.py`` as it was
at ``--baseline REV``, loaded from git into a temp file) side by side and prints, for each:

* on the runs under PATH (mini-swe-agent ``*.traj.json``, e.g. ``../shared/data/
  mini_swe_agent_verified``; none of them holds a real credential, so every redaction there
  is a false positive): placeholders in the raw logs (``raw``) and in the trajectories
  (``in traj``: the raw log repeats the model's replies), and the trajectories, steps, agent
  actions and submitted patches that come out different from the same log converted without
  redaction;
* recall on the repository's corpus (``tests/data/redaction/corpus.json``: planted secrets,
  each in every encoding of :mod:`tests.recorder.redaction_corpus`) and the look-alikes it
  keeps;
* speed: ``redact_bytes`` over the runs' raw bytes (MB/s, best of ``--repeat``).

The redaction is applied to the raw bytes and the result converted with redaction off, which
is what the recorder does (it redacts every log before parsing it).

Usage:
    .venv/bin/python bench/redaction_bench.py ../shared/data/mini_swe_agent_verified
    .venv/bin/python bench/redaction_bench.py PATH --baseline 95da248 --show 20
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the last commit of redact.py before the keyed-placeholder / code-aware rewrite
DEFAULT_BASELINE = "95da2484e7dcc524f4cc43e4c72b8fa4b23caad2"


def load_baseline(rev: str) -> ModuleType:
    """``knowlyr/recorder/redact.py`` at ``rev`` as a module of its own."""
    src = subprocess.run(
        ["git", "show", f"{rev}:knowlyr/recorder/redact.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="redact_baseline_")) / "redact_baseline.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location("redact_baseline", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["redact_baseline"] = mod
    spec.loader.exec_module(mod)
    return mod


def _convert(data: bytes, name: str):
    from knowlyr.recorder import Converted, iter_bytes

    (r,) = list(iter_bytes(data, path=name, redact=False))
    if not isinstance(r, Converted):
        raise SystemExit(f"{name}: not converted ({r.reason})")
    return r.trajectory


def changes_on_runs(files: list[Path], redact, show: int) -> dict[str, int]:
    """What ``redact`` (a ``redact_bytes``) changes in the trajectories of ``files``."""
    n = {"raw": 0, "located": 0, "trajectories": 0, "steps": 0, "actions": 0, "submissions": 0}
    shown = 0
    for p in files:
        data = p.read_bytes()
        clean, hits = redact(data)
        n["raw"] += len(hits)
        if not hits:
            continue
        before, after = _convert(data, p.name), _convert(clean, p.name)
        n["located"] += after.to_json().count(b"[REDACTED:")
        if before.to_json() != after.to_json():
            n["trajectories"] += 1
        for a, b in zip(before.steps, after.steps, strict=True):
            if a != b:
                n["steps"] += 1
                n["actions"] += a.action != b.action
        n["submissions"] += before.outcome.submission != after.outcome.submission
        if shown < show:
            for pos in _placeholders(clean)[: show - shown]:
                print(f"  {p.name}: ...{clean[max(0, pos - 60) : pos + 40]!r}...")
                shown += 1
    return n


def _placeholders(data: bytes) -> list[int]:
    out, i = [], data.find(b"[REDACTED:")
    while i >= 0:
        out.append(i)
        i = data.find(b"[REDACTED:", i + 1)
    return out


def corpus_recall(redact) -> tuple[int, int, int, int, list[str]]:
    """(secret cases caught, secret cases, look-alike cases kept, look-alike cases, misses) on
    the repository's corpus, every case in every encoding and form it lists."""
    from tests.recorder.redaction_corpus import load_corpus

    secrets, _files, lookalikes = load_corpus()
    caught = total = kept = seen = 0
    misses: list[str] = []
    for case in secrets:
        for enc in case.encodings:
            total += 1
            out, hits = redact(case.encode(enc))
            if hits and not case.leaked(out, enc):
                caught += 1
            else:
                misses.append(f"{case.name} / {enc}")
    for case in lookalikes:
        for enc in case.encodings:
            data = case.encode(enc)
            seen += 1
            if redact(data)[0] == data:
                kept += 1
            else:
                misses.append(f"look-alike redacted: {case.name} / {enc}")
    return caught, total, kept, seen, misses


def speed(datas: list[bytes], sides: list[tuple[str, object]], repeat: int) -> dict[str, float]:
    """MB/s of CPU time of each side's ``redact_bytes`` over ``datas``: best of ``repeat``
    runs, the sides interleaved so that a busy machine slows them alike."""
    size = sum(map(len, datas))
    best = {name: float("inf") for name, _fn in sides}
    for _ in range(repeat):
        for name, fn in sides:
            t0 = time.process_time()
            for d in datas:
                fn(d)  # type: ignore[operator]
            best[name] = min(best[name], time.process_time() - t0)
    return {name: size / t / 1e6 for name, t in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", type=Path, help="a folder of mini-swe-agent *.traj.json runs")
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision of redact.py")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--show", type=int, default=0, help="print N redactions in context")
    args = ap.parse_args()
    files = sorted(args.path.glob("*.traj.json"))
    if not files:
        raise SystemExit(f"no *.traj.json under {args.path}")

    from knowlyr.recorder import redact_bytes

    base = load_baseline(args.baseline)
    sides = [
        (f"baseline ({args.baseline[:7]})", base.redact_bytes),
        ("this checkout", redact_bytes),
    ]
    print(f"{len(files)} runs under {args.path}; every redaction there is of test data")
    rows = []
    for name, fn in sides:
        if args.show:
            print(f"{name}:")
        rows.append((name, changes_on_runs(files, fn, args.show), corpus_recall(fn)))
    print(
        f"\n{'':22} {'raw':>5} {'in traj':>7} {'trajs':>6} {'steps':>6} {'actions':>7} "
        f"{'patches':>7} | {'corpus recall':>16} {'look-alikes kept':>17}"
    )
    for name, n, (caught, total, kept, seen, _m) in rows:
        print(
            f"{name:22} {n['raw']:>5} {n['located']:>7} {n['trajectories']:>6} {n['steps']:>6} "
            f"{n['actions']:>7} {n['submissions']:>7} | {caught:>5}/{total:<4} "
            f"{caught / total:>5.1%} {kept:>7}/{seen:<4}{kept / seen:>5.0%}"
        )
    for name, _n, (*_, misses) in rows:
        print(f"{name}: {len(misses)} corpus misses" + (": " if misses else ""))
        for m in misses[:12]:
            print(f"    {m}")
        if len(misses) > 12:
            print(f"    ... {len(misses) - 12} more")
    datas = [p.read_bytes() for p in files]
    mb = sum(map(len, datas)) / 1e6
    print(
        f"\nspeed, redact_bytes over the runs' {mb:.1f} MB (CPU time, best of {args.repeat}, interleaved):"
    )
    for name, v in speed(datas, sides, args.repeat).items():
        print(f"  {name:22} {v:8.1f} MB/s")


if __name__ == "__main__":
    main()
