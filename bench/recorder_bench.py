"""Recorder throughput: trajectories/s and peak memory converting a large corpus of agent logs.

Corpus (written to a temp dir, or --dir): N realistic 20-step OpenHands event-list logs
(bash / str_replace_editor / run_ipython actions with ~500-character outputs, tool-call
metadata with usage, timestamps, a finish), plus the real fixtures of ../shared/fixtures
replicated, so at least 10,000 logs in all. Each variant runs in a fresh process (peak RSS is
that process's own):

* ``baseline``: what a straightforward converter does (the original knowlyr recorder
  measured 1,071 trajectories/s here): per record ``json.loads``, ``re.sub`` of a secret
  pattern over every string, and pydantic validation (once) of every Step / ToolCall /
  Observation and of the Trajectory.
* ``knowlyr``: ``knowlyr.recorder.iter_records`` (byte-level redaction, orjson, models built
  from already-checked values), one process and ``--workers`` processes (knowlyr.recorder.pool):
  Trajectory objects in the caller.
* ``encoded``: ``knowlyr.recorder.iter_encoded``, the trajectories' JSON written to a JSONL
  file, as ``knowlyr record convert DIR -o OUT`` does (workers serialise, the caller writes;
  the OpenHands adapters give each record as its JSON document, so no models are built).
* with ``--ingest``: ``knowlyr.store.ingest`` into a fresh store (raw blobs, one Delta commit),
  and, as its baseline, the straightforward ingest: ``iter_records`` with every Trajectory
  kept, blobs written by the caller, one ``add_trajectories`` at the end.

The last lines print the figure the budget names for both corpora, median of ``--repeat``
interleaved runs, next to the baseline, with peak memory. The baseline only builds the
objects (it writes nothing), so the ``encoded`` rows do more work than it does.
``--profile`` adds where the CPU time of one log goes, part by part, next to the floor (what
any converter does: read, redact, hash, parse, write); ``--profile-logs DIR`` prints only
that, for the logs in DIR (the anchor bench's workload: ``.bench/anchor-work/*/logs/convert``).

Usage:
    .venv/bin/python bench/recorder_bench.py [--n 10000] [--workers 2] [--repeat 3] [--profile] [--ingest]
    .venv/bin/python bench/recorder_bench.py --profile-logs DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures"

_WORDS = [
    "def",
    "class",
    "return",
    "import",
    "self",
    "value",
    "result",
    "error",
    "test",
    "assert",
    "file",
    "path",
    "line",
    "module",
    "function",
    "print",
    "data",
    "list",
    "dict",
    "None",
    "True",
    "False",
    "config",
    "parse",
    "check",
    "update",
    "write",
    "read",
]


def _text(rng: random.Random, n: int) -> str:
    out, size = [], 0
    while size < n:
        w = rng.choice(_WORDS)
        out.append(w)
        size += len(w) + 1
        if rng.random() < 0.08:
            out.append("\n")
    return " ".join(out)[:n]


def _tcm(i: int, fn: str, call_id: str, args: dict, thought: str, rng: random.Random) -> dict:
    return {
        "function_name": fn,
        "tool_call_id": call_id,
        "model_response": {
            "id": f"chatcmpl-{i:06d}",
            "created": 1738046713 + i,
            "model": "claude-3-5-sonnet-20241022",
            "object": "chat.completion",
            "choices": [
                {
                    "finish_reason": "tool_calls",
                    "index": 0,
                    "message": {
                        "content": thought,
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "index": 1,
                                "function": {"arguments": json.dumps(args), "name": fn},
                                "id": call_id,
                                "type": "function",
                            }
                        ],
                    },
                }
            ],
            "usage": {
                "completion_tokens": rng.randint(40, 400),
                "prompt_tokens": rng.randint(2000, 30000),
            },
        },
        "total_calls_in_response": 1,
    }


def openhands_log(seed: int, steps: int = 20, out_chars: int = 500) -> list[dict]:
    """A realistic OpenHands event list: instruction, ``steps - 1`` tool actions, finish."""
    rng = random.Random(seed)
    ts = 1738046700.0 + seed
    ev: list[dict] = []

    def stamp() -> str:
        nonlocal ts
        ts += rng.uniform(0.5, 8.0)
        return (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{rng.randint(0, 999999):06d}"
        )

    ev.append(
        {
            "id": 0,
            "timestamp": stamp(),
            "source": "user",
            "message": f"Fix issue #{seed}: {_text(rng, 300)}",
            "action": "message",
            "args": {
                "content": f"Fix issue #{seed}: {_text(rng, 300)}",
                "image_urls": None,
                "wait_for_response": False,
            },
            "timeout": 120,
        }
    )
    eid = 1
    for k in range(steps - 1):
        thought = _text(rng, 120)
        call_id = f"toolu_{seed:06d}_{k:02d}"
        kind = rng.random()
        if kind < 0.5:
            cmd = f"cd /workspace && python -m pytest tests/test_{rng.choice(_WORDS)}.py -q -k {rng.choice(_WORDS)}"
            args = {
                "command": cmd,
                "is_input": False,
                "thought": thought,
                "blocking": False,
                "hidden": False,
                "confirmation_state": "confirmed",
            }
            ev.append(
                {
                    "id": eid,
                    "timestamp": stamp(),
                    "source": "agent",
                    "message": f"Running command: {cmd}",
                    "action": "run",
                    "tool_call_metadata": _tcm(
                        eid, "execute_bash", call_id, {"command": cmd}, thought, rng
                    ),
                    "args": args,
                    "timeout": 120,
                }
            )
            code = rng.choice([0, 0, 0, 1, 2])
            ev.append(
                {
                    "id": eid + 1,
                    "timestamp": stamp(),
                    "source": "agent",
                    "message": f"Command `{cmd}` executed with exit code {code}.",
                    "cause": eid,
                    "observation": "run",
                    "content": _text(rng, out_chars),
                    "extras": {
                        "command": cmd,
                        "metadata": {
                            "exit_code": code,
                            "pid": -1,
                            "username": "root",
                            "hostname": "runtime",
                            "working_dir": "/workspace",
                            "py_interpreter_path": "/usr/bin/python",
                            "prefix": "",
                            "suffix": f"\n[The command completed with exit code {code}.]",
                        },
                        "hidden": False,
                    },
                    "success": code == 0,
                }
            )
        elif kind < 0.85:
            path = f"/workspace/src/{rng.choice(_WORDS)}_{rng.choice(_WORDS)}.py"
            old, new = _text(rng, 80), _text(rng, 90)
            targs = {"command": "str_replace", "path": path, "old_str": old, "new_str": new}
            ev.append(
                {
                    "id": eid,
                    "timestamp": stamp(),
                    "source": "agent",
                    "message": "",
                    "action": "edit",
                    "tool_call_metadata": _tcm(
                        eid, "str_replace_editor", call_id, targs, thought, rng
                    ),
                    "args": {
                        **targs,
                        "file_text": None,
                        "insert_line": None,
                        "content": "",
                        "start": 1,
                        "end": -1,
                        "thought": thought,
                        "impl_source": "oh_aci",
                    },
                    "timeout": 120,
                }
            )
            ev.append(
                {
                    "id": eid + 1,
                    "timestamp": stamp(),
                    "source": "agent",
                    "message": f"I edited the file {path}.",
                    "cause": eid,
                    "observation": "edit",
                    "content": _text(rng, out_chars),
                    "extras": {
                        "path": path,
                        "prev_exist": True,
                        "old_content": old,
                        "new_content": new,
                        "impl_source": "oh_aci",
                        "diff": f"--- {path}\n+++ {path}\n",
                    },
                }
            )
        else:
            code = f"print(open('/workspace/{rng.choice(_WORDS)}.txt').read())"
            ev.append(
                {
                    "id": eid,
                    "timestamp": stamp(),
                    "source": "agent",
                    "message": "",
                    "action": "run_ipython",
                    "tool_call_metadata": _tcm(
                        eid, "execute_ipython_cell", call_id, {"code": code}, thought, rng
                    ),
                    "args": {
                        "code": code,
                        "thought": thought,
                        "include_extra": True,
                        "confirmation_state": "confirmed",
                        "kernel_init_code": "",
                    },
                    "timeout": 120,
                }
            )
            ev.append(
                {
                    "id": eid + 1,
                    "timestamp": stamp(),
                    "source": "agent",
                    "message": "Code executed in IPython cell.",
                    "cause": eid,
                    "observation": "run_ipython",
                    "content": _text(rng, out_chars),
                    "extras": {"code": code, "image_urls": None},
                }
            )
        eid += 2
    fin = _text(rng, 200)
    ev.append(
        {
            "id": eid,
            "timestamp": stamp(),
            "source": "agent",
            "message": fin,
            "action": "finish",
            "tool_call_metadata": _tcm(eid, "finish", f"toolu_{seed:06d}_fin", {}, fin, rng),
            "args": {"final_thought": fin, "task_completed": "true", "outputs": {}, "thought": ""},
        }
    )
    return ev


def output_row(seed: int, steps: int = 20, out_chars: int = 500) -> dict:
    """An OpenHands resolver / evaluation ``output.jsonl`` row: flat events, no tool-call metadata."""
    rng = random.Random(seed)
    hist: list[dict] = [
        {
            "action": "message",
            "content": f"Fix issue #{seed}: {_text(rng, 300)}",
            "images_urls": [],
            "wait_for_response": False,
        }
    ]
    costs = []
    for _ in range(steps - 1):
        thought = _text(rng, 120)
        if rng.random() < 0.6:
            cmd = f"cd /workspace && python -m pytest tests/test_{rng.choice(_WORDS)}.py -q"
            hist.append(
                {
                    "command": cmd,
                    "thought": thought,
                    "keep_prompt": True,
                    "action": "run",
                    "is_confirmed": "confirmed",
                    "action_risk": None,
                }
            )
            hist.append(
                {
                    "content": _text(rng, out_chars),
                    "command_id": -1,
                    "command": cmd,
                    "exit_code": rng.choice([0, 0, 1]),
                    "observation": "run",
                }
            )
        else:
            code = f"edit_file_by_replace('/workspace/src/{rng.choice(_WORDS)}.py', to_replace={_text(rng, 60)!r}, new_content={_text(rng, 70)!r})"
            hist.append(
                {
                    "code": code,
                    "thought": thought,
                    "action": "run_ipython",
                    "is_confirmed": "confirmed",
                    "action_risk": None,
                    "kernel_init_code": "from agentskills import *",
                }
            )
            hist.append(
                {"content": _text(rng, out_chars), "code": code, "observation": "run_ipython"}
            )
        costs.append(round(rng.uniform(0.01, 0.09), 6))
    hist.append({"outputs": {}, "thought": _text(rng, 200), "action": "finish"})
    costs.append(0.02)
    return {
        "issue": {"owner": "acme", "repo": "widgets", "number": seed, "title": _text(rng, 40)},
        "issue_type": "issue",
        "instruction": hist[0]["content"],
        "base_commit": "",
        "git_patch": _text(rng, 400),
        "history": hist,
        "metrics": {"accumulated_cost": round(sum(costs), 6), "costs": costs},
        "success": rng.random() < 0.5,
        "comment_success": None,
        "result_explanation": _text(rng, 150),
        "error": None,
    }


def build_corpus(root: Path, n: int) -> tuple[int, int]:
    """Write ``n`` logs: the fixture files replicated (~10%) and generated 20-step OpenHands logs."""
    gen = root / "openhands"
    gen.mkdir(parents=True, exist_ok=True)
    fixtures = sorted(
        p
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.suffix in (".json", ".traj") and p.name != "browser_profile.json"
    )
    n_fix = min(n // 10, 1000) if fixtures else 0
    rep = root / "fixtures"
    rep.mkdir(exist_ok=True)
    for i in range(n_fix):
        src = fixtures[i % len(fixtures)]
        shutil.copyfile(src, rep / f"{i:05d}_{src.name}")
    size = 0
    for i in range(n - n_fix):
        data = json.dumps(openhands_log(i)).encode()
        size += len(data)
        (gen / f"{i // 1000:03d}").mkdir(exist_ok=True)
        (gen / f"{i // 1000:03d}" / f"log_{i:06d}.json").write_bytes(data)
    return n, size // max(n - n_fix, 1)


def build_jsonl(path: Path, n: int) -> int:
    """One ``output.jsonl`` of ``n`` rows; returns the average row size."""
    size = 0
    with open(path, "wb") as f:
        for i in range(n):
            line = json.dumps(output_row(i)).encode() + b"\n"
            size += len(line)
            f.write(line)
    return size // n


# -- the baseline: straightforward per-record conversion --------------------------------------

_SECRET = re.compile(
    r"sk-ant-[A-Za-z0-9_\-]{16,}|sk-[A-Za-z0-9_\-]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{22,}|xox[abposr]-[A-Za-z0-9\-]{10,}|(?i:bearer)\s+[A-Za-z0-9_\-.=+/~]{16,}"
    r"|(?i:password|passwd|secret|api_key|token)\s*[:=]\s*\S{4,}"
)


def _scrub(x):
    if isinstance(x, str):
        return _SECRET.sub("[REDACTED]", x)
    if isinstance(x, dict):
        return {k: _scrub(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_scrub(v) for v in x]
    return x


def baseline_convert(path: Path):
    return baseline_events(path.read_bytes(), str(path))


def baseline_events(raw: bytes, path: str, line: int | None = None):
    from knowlyr.trajectory import (
        AgentInfo,
        Observation,
        Outcome,
        Source,
        Step,
        TaskInfo,
        ToolCall,
        Trajectory,
    )

    events = _scrub(json.loads(raw))
    if isinstance(events, dict):
        events = events.get("history")
    if not isinstance(events, list):  # not an OpenHands log: the baseline only knows that format
        return None
    steps: list = []
    by_id: dict = {}
    instruction = ""
    for e in events:
        if "action" in e:
            args = e.get("args") or {}
            if not e.get("args"):  # flat (resolver) events
                args = {
                    k: v for k, v in e.items() if k not in ("action", "id", "timestamp", "source")
                }
            if e["action"] == "message" and e.get("source", "user") == "user":
                instruction = instruction or args.get("content", "")
                continue
            name = e["action"]
            tool = {"run": "bash"}.get(name, name)
            params = {
                k: v
                for k, v in args.items()
                if k != "thought" and isinstance(v, str | int | float | list | dict)
            }
            u = ((e.get("tool_call_metadata") or {}).get("model_response") or {}).get("usage") or {}
            s = Step(
                index=len(steps),
                thought=args.get("thought") or "",
                action=ToolCall(tool=tool, params=params),
                timestamp=e.get("timestamp"),
                usage={
                    "prompt_tokens": u.get("prompt_tokens"),
                    "completion_tokens": u.get("completion_tokens"),
                },
            )
            steps.append(s)
            by_id[e.get("id", len(steps) - 1)] = s
        elif "observation" in e and e.get("cause", len(steps) - 1) in by_id:
            extras = e.get("extras") or {}
            md = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else {}
            code = md.get("exit_code", e.get("exit_code"))
            by_id[e.get("cause", len(steps) - 1)].observation = Observation(
                output=e.get("content", ""), exit_code=code
            )
    t = Trajectory(
        task=TaskInfo(
            task_id=hashlib.sha256(instruction.encode()).hexdigest()[:16], instruction=instruction
        ),
        agent=AgentInfo(name="openhands"),
        steps=steps,
        outcome=Outcome(terminated=True),
        source=Source(
            format="openhands", path=path, line=line, blob=hashlib.sha256(raw).hexdigest()
        ),
    )
    return t


def _run_variant(variant: str, corpus: Path, workers: int) -> dict:
    files = sorted(p for p in corpus.rglob("*") if p.is_file()) if corpus.is_dir() else [corpus]
    import knowlyr.recorder.adapters
    import knowlyr.trajectory  # noqa: F401

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = r0.ru_utime + r0.ru_stime
    t0 = time.perf_counter()
    n_ok = n_rej = steps = 0
    if variant == "baseline" and corpus.suffix == ".jsonl":
        with open(corpus, "rb") as f:
            for i, line in enumerate(f, 1):
                t = baseline_events(line, str(corpus), i)
                n_ok += t is not None
                n_rej += t is None
                steps += len(t.steps) if t is not None else 0
    elif variant == "baseline":
        for p in files:
            t = baseline_convert(p)
            if t is None:
                n_rej += 1
            else:
                n_ok += 1
                steps += len(t.steps)
    elif variant in ("ingest", "ingest-objects"):  # into a fresh store, blobs and Delta table
        from knowlyr.store import Store

        with tempfile.TemporaryDirectory() as tmp:
            store = Store.open(str(Path(tmp) / "store"))
            if variant == "ingest":  # knowlyr.store.ingest (what `knowlyr ingest` runs)
                from knowlyr.store.ingest import ingest

                res = ingest(store, [corpus], workers=workers)
                n_ok, n_rej = res.read - res.n_rejected, res.n_rejected
            else:  # the straightforward way: every Trajectory kept, then one add
                from knowlyr.recorder import Converted, iter_records

                kept = []
                for r in iter_records([corpus], workers=workers):
                    if isinstance(r, Converted):
                        store.blobs.put(r.raw, digest=r.trajectory.source.blob)
                        kept.append(r.trajectory)
                    else:
                        n_rej += 1
                store.add_trajectories(kept)
                n_ok = len(kept)
            steps = -1
    elif variant == "encoded":  # what `knowlyr record convert DIR -o OUT` does
        from knowlyr.recorder import Encoded, iter_encoded

        with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "out.jsonl", "wb") as out:
            for r in iter_encoded([corpus], workers=workers):
                if isinstance(r, Encoded):
                    n_ok += 1
                    out.write(r.json + b"\n")
                else:
                    n_rej += 1
            steps = -1  # not parsed back
    else:
        from knowlyr.recorder import Converted, iter_records

        for r in iter_records([corpus], workers=workers):
            if isinstance(r, Converted):
                n_ok += 1
                steps += len(r.trajectory.steps)
            else:
                n_rej += 1
    dt = time.perf_counter() - t0
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime - cpu0
    return {
        "variant": variant,
        "workers": workers,
        "files": len(files),
        "converted": n_ok,
        "rejected": n_rej,
        "steps": steps,
        "seconds": dt,
        "rate": (n_ok + n_rej) / dt,
        "cpu": cpu,
        "cpu_rate": (n_ok + n_rej) / cpu,
        "rss_mb": me.ru_maxrss / 1024,  # this process's peak
        "worker_rss_mb": kids.ru_maxrss / 1024 if workers > 1 else 0.0,  # the largest worker's
    }


# -- where the time goes (--profile) ----------------------------------------------------------


def profile_stages(files: list[Path]) -> None:
    """Per-log CPU time of each part of converting ``files`` (OpenHands event logs: JSON
    arrays, or one event per line) into trajectory JSONL, best of 5, and the floor: what any
    converter of these logs does however little logic it has (read, redact, hash the raw log,
    parse, content hash, write the JSON)."""
    import gc
    import hashlib

    import orjson

    from knowlyr.recorder import write_jsonl
    from knowlyr.recorder.adapters.openhands import convert_events
    from knowlyr.recorder.base import get_adapter
    from knowlyr.recorder.redact import redaction_policy
    from knowlyr.store.tables import document_row
    from knowlyr.trajectory import document_id

    adapter = get_adapter("openhands")
    loads = orjson.loads

    def parse(data: bytes, path: Path):
        if path.suffix == ".jsonl":  # a session: one event per line
            return [loads(x) for x in data.split(b"\n") if x and not x.isspace()]
        return loads(data)

    datas = [p.read_bytes() for p in files]
    events = [parse(d, p) for d, p in zip(datas, files, strict=True)]
    docs = [adapter.document(e) for e in events]
    for d, p in zip(docs, files, strict=True):
        d["source"] = {"format": adapter.name, "path": str(p), "blob": "0" * 64}
    rows = [document_row(d) for d in docs]
    policy = redaction_policy(True)
    gc.collect()
    gc.freeze()

    def us(fn, xs) -> float:
        best = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            for x in xs:
                fn(x)
            best = min(best, time.process_time() - t0)
        return best / len(xs) * 1e6

    def read(p: Path) -> bytes:
        with open(p, "rb") as f:
            return f.read()

    def content_hash(d: dict) -> str:
        return document_id(d["task"]["task_id"], d["task"]["instruction"], d["steps"])

    with open(os.devnull, "wb", buffering=1 << 20) as sink:
        floor = [
            ("read the file", us(read, files)),
            ("redact (one scan of the raw bytes)", us(policy.redact_bytes, datas)),
            (
                "sha256 of the raw log (source.blob)",
                us(lambda d: hashlib.sha256(d).digest(), datas),
            ),
            (
                "parse (orjson, per line for .jsonl)",
                us(lambda i: parse(datas[i], files[i]), range(len(files))),
            ),
            ("content hash (canonical JSON + sha256)", us(content_hash, docs)),
            ("the document's JSON (orjson.dumps)", us(document_row, docs)),
            ("write the line", us(lambda r: sink.write(r[12] + b"\n"), rows)),
        ]
    logic = [
        ("events -> steps (convert_events)", us(convert_events, events)),
        ("task, agent, outcome, step documents", us(adapter.document, events)),
    ]
    # adapter.document = convert_events + the rest + the content hash (a floor row)
    logic[1] = (logic[1][0], logic[1][1] - logic[0][1] - floor[4][1])
    out = Path(tempfile.mkdtemp(prefix="recorder_profile_")) / "out.jsonl"
    e2e = us(lambda _: list(write_jsonl(files, out, workers=1)), [0]) / len(files)
    shutil.rmtree(out.parent, ignore_errors=True)
    total_floor = sum(v for _, v in floor)
    print(f"\nwhere the CPU time of one log goes ({len(files):,} logs, best of 5, us per log):")
    for name, v in floor:
        print(f"  floor  {name:42} {v:7.1f}")
    print(f"  = the floor{'':37} {total_floor:7.1f}")
    for name, v in logic:
        print(f"  logic  {name:42} {v:7.1f}")
    rest = e2e - total_floor - sum(v for _, v in logic)
    print(f"  other  {'walk, paths, generators, records (the rest)':42} {rest:7.1f}")
    print(
        f"  = write_jsonl, one process, end to end{'':10} {e2e:7.1f}  ({e2e / total_floor:.2f}x the floor)"
    )


def _median(rs: list[dict]) -> dict:
    rs = sorted(rs, key=lambda r: r["rate"])
    return rs[len(rs) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=10_000, help="logs in the corpus (default 10,000)")
    ap.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="processes for the parallel run (default: one per CPU)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs of each variant (median kept)")
    ap.add_argument("--profile", action="store_true", help="also print where the time goes")
    ap.add_argument(
        "--profile-logs",
        type=Path,
        metavar="DIR",
        help="only print where the time goes, on the first 2,000 OpenHands event logs in DIR "
        "(e.g. the anchor bench's .bench/anchor-work/data-*/logs/convert)",
    )
    ap.add_argument(
        "--ingest",
        action="store_true",
        help="also time ingesting into a fresh store (knowlyr.store.ingest, raw blobs and the "
        "Delta table) against keeping every Trajectory and adding them at the end",
    )
    ap.add_argument("--dir", type=Path, help="keep the corpus here instead of a temp dir")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(_run_variant(args.run, args.corpus, args.workers)))
        return
    if args.profile_logs:
        profile_stages(sorted(args.profile_logs.rglob("*.json*"))[:2000])
        return
    tmp = None
    root = args.dir
    if root is None:
        tmp = tempfile.mkdtemp(prefix="recorder_bench_")
        root = Path(tmp)
    try:
        t0 = time.perf_counter()
        n, avg = build_corpus(root / "files", args.n)
        avg_row = build_jsonl(root / "output.jsonl", args.n)
        print(
            f"built in {time.perf_counter() - t0:.1f}s under {root}; {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f} (other work on the machine slows every figure)"
        )

        def run(variant: str, corpus: Path, workers: int) -> dict:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--run",
                    variant,
                    "--corpus",
                    str(corpus),
                    "--workers",
                    str(workers),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            return json.loads(out.stdout.strip().splitlines()[-1])

        corpora = [
            (
                f"A: {n:,} log files: 20-step OpenHands event lists with full tool-call metadata "
                f"({avg / 1024:.1f} KiB each; 10% are the real fixtures replicated)",
                root / "files",
            ),
            (
                f"B: one output.jsonl of {args.n:,} rows: 20-step OpenHands resolver rows, ~500-char outputs "
                f"({avg_row / 1024:.1f} KiB each)",
                root / "output.jsonl",
            ),
        ]
        variants = [("baseline", 1), ("knowlyr", 1)]
        if args.workers > 1:
            variants.append(("knowlyr", args.workers))
        variants += [("encoded", 1)] + ([("encoded", args.workers)] if args.workers > 1 else [])
        if args.ingest:
            variants += [("ingest-objects", 1), ("ingest", 1)]
            variants += [("ingest", args.workers)] if args.workers > 1 else []
        summaries: list[tuple[str, list, list[dict]]] = []
        for title, corpus in corpora:
            runs: dict[tuple[str, int], list[dict]] = {v: [] for v in variants}
            for _ in range(args.repeat):  # interleaved, so a busy spell hits every variant
                for v in variants:
                    runs[v].append(run(v[0], corpus, v[1]))
            results = [_median(runs[v]) for v in variants]
            base = results[0]["rate"]
            print(f"\n{title}")
            print(
                f"{'variant':10} {'workers':>7} {'converted':>9} {'rejected':>8} {'steps':>7} {'wall s':>7} "
                f"{'traj/s':>8} {'(min-max)':>15} {'vs base':>8} {'CPU s':>7} {'traj/CPU-s':>10} "
                f"{'peak RSS':>9} {'per worker':>10}"
            )
            for v, r in zip(variants, results, strict=True):
                lo, hi = min(x["rate"] for x in runs[v]), max(x["rate"] for x in runs[v])
                print(
                    f"{r['variant']:10} {r['workers']:>7} {r['converted']:>9} {r['rejected']:>8} {r['steps']:>7} "
                    f"{r['seconds']:>7.2f} {r['rate']:>8,.0f} {f'({lo:,.0f}-{hi:,.0f})':>15} "
                    f"{r['rate'] / base:>7.1f}x {r['cpu']:>7.2f} {r['cpu_rate']:>10,.0f} "
                    f"{r['rss_mb']:>7.0f}MB "
                    + (f"{r['worker_rss_mb']:>8.0f}MB" if r["workers"] > 1 else f"{'-':>10}")
                )
            summaries.append((title.split(":")[0], variants, results))
        from knowlyr.recorder.pipeline import auto_workers

        default = auto_workers(encoded=True)  # what `knowlyr record convert` uses here
        print(
            f"\nlog conversion, OpenHands 20-step logs (median of {args.repeat}); budget "
            "(TARGETS.md) >= 10,000 trajectories/s, original knowlyr 1,071/s:"
        )
        for corpus_name, variants_, results in summaries:
            base = results[0]
            print(f"corpus {corpus_name} (baseline in this run {base['rate']:,.0f}/s):")
            for (variant, workers), r in zip(variants_[1:], results[1:], strict=True):
                rss = f"{r['rss_mb']:.0f} MB"
                if workers > 1:
                    rss += f" + {workers} workers of at most {r['worker_rss_mb']:.0f} MB each"
                if variant == "encoded":
                    what = f"iter_encoded(paths, workers={workers}) -> trajectory JSONL file"
                    if workers == default:
                        what += " = `knowlyr record convert` on this machine"
                elif variant == "ingest":
                    what = f"ingest(store, paths, workers={workers}) -> store (blobs + Delta)"
                    if workers == default:
                        what += " = `knowlyr ingest` on this machine"
                elif variant == "ingest-objects":
                    what = (
                        "iter_records -> every Trajectory kept -> add_trajectories (naive ingest)"
                    )
                else:
                    what = f"iter_records(paths, workers={workers}) -> Trajectory objects"
                if variant.startswith("ingest"):  # conversion + blobs + Delta: not the budget's
                    verdict = "(conversion, raw blobs and the Delta commit)"
                elif r["rate"] >= 10_000:
                    verdict = "budget MET"
                else:
                    verdict = f"budget MISSED ({r['rate'] / 1e4:.0%})"
                print(
                    f"  {what}:\n    {r['rate']:,.0f} trajectories/s wall, {r['cpu_rate']:,.0f} "
                    f"per CPU-second, {r['rate'] / base['rate']:.1f}x the baseline, peak RSS "
                    f"{rss}; {verdict}"
                )
        print(
            "traj/s is wall clock (what a user waits); traj/CPU-s divides by the CPU time the run used "
            "(its own and its workers'), so it depends less on what else the machine is doing."
        )
        if args.profile:
            profile_stages(sorted((root / "files" / "openhands").rglob("*.json"))[:2000])
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
