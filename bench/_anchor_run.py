"""One measurement of the anchor bench, run as its own process inside one side's venv.

``python _anchor_run.py SIDE JOB [ARGS...]`` with SIDE ``original`` (the PyPI packages
knowlyr-core/-recorder/-reward/-hub 0.1.2 in ``.bench/anchor-venv``) or ``ours`` (this
checkout's venv). Prints one JSON line: the seconds of each timed section and the counts the
harness checks (trajectories, steps, rows). Only the standard library is imported at the top;
each job imports its side's packages itself, so the parent sees imports, peak RSS and CPU
seconds per job (it waits for this process with ``os.wait4``).

Jobs (``ARGS`` in brackets):

* ``convert`` [LOG_DIR OUT]: logs -> trajectory JSONL. Original: ``Recorder(OpenHandsAdapter())
  .convert_batch`` (models, section ``models``), then one ``model_dump_json`` line each
  (section ``write``). Ours ``convert-1p`` / ``convert-2w``: ``write_jsonl`` (what
  ``knowlyr record convert`` runs) with 1 / 2 workers (section ``convert``);
  ``convert-models``: ``iter_records`` with 1 worker, every Trajectory built (section
  ``models``, nothing written).
* ``reward`` [TRAJ_JSONL N]: the first N trajectories loaded (section ``load``; the process's
  RSS then is ``loaded_rss_mb``), scored by the
  rule layer through the reward engine (``engine``), then by the rules alone (``rules``).
  Original: ``RewardEngine(RewardConfig(rule_weight=1, model_weight=0))`` on the dicts its hub
  pipeline builds; rules = ``check_redundancy`` + ``check_regression`` +
  ``check_info_utilization`` + ``check_efficiency``. Ours: ``RewardEngine("coding").score``;
  rules = ``score_rules``. Both warm up on 10 trajectories first.
* ``reward-documents`` [TRAJ_JSONL N] (ours): what ``knowlyr reward score FILE`` runs on the
  first N trajectories (copied to a file first, untimed): ``reward.stream.score_files``, the
  file converted and spooled, then scored in batches and the rewards JSON written as it goes
  (section ``engine``: the whole; warmed up on 10 trajectories).
* ``store`` [TRAJ_JSONL N STORE_DIR]: the first N trajectories loaded (``load``), added to a
  fresh store (``add``), added again from a fresh handle (``readd``); ``bytes`` on disk.
  Original (it ships no store; TARGETS.md's baseline): SQLite, one row per trajectory keyed on
  the sha256 of its JSON, existence check + INSERT + COMMIT per row. Ours:
  ``Store.add_trajectories`` (one call with all N).
* ``export-store`` [STORE OUT]: the whole process is the measurement. Original: its rows read
  back from SQLite, mapped to hub trajectories and exported by ``DatasetExporter.export_sft``
  (ours is the ``knowlyr export sft --store`` CLI, run by the harness directly).
* ``model-memory`` [TRAJ_JSONL N]: KB per trajectory held as the side's models (and, for the
  original, as its reward engine's dicts), by tracemalloc; nothing timed.
* ``prep-convert`` [OUT DIR...]: conversion for the other stages' inputs (streamed);
  ``prep-store`` [TRAJ_JSONL N STORE]: the store ``export-store`` reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

_T0 = time.perf_counter()


def _rss_mb() -> float:
    """This process's resident memory now (MB; Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise SystemExit("no VmRSS in /proc/self/status")


def _lines(path: str, n: int) -> list[bytes]:
    out = []
    with open(path, "rb") as f:
        for line in f:
            if len(out) == n:
                break
            if line.strip():
                out.append(line)
    if len(out) < n:
        raise SystemExit(f"{path}: {len(out)} trajectories, {n} needed (rebuild the workload)")
    return out


def _head(path: str, n: int, out: str) -> None:
    """The first ``n`` trajectory lines of ``path`` into ``out``, streamed (nothing kept)."""
    k = 0
    with open(path, "rb") as src, open(out, "wb") as dst:
        for line in src:
            if k == n:
                break
            if line.strip():
                dst.write(line)
                k += 1
    if k < n:
        raise SystemExit(f"{path}: {k} trajectories, {n} needed (rebuild the workload)")


def _du(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# -- the original ----------------------------------------------------------------------------


def hub_step(s: dict) -> dict:
    """A recorder step as the original hub keeps it, with the ``action`` / ``observation``
    text its SFT exporter reads (its pipeline writes ``output``; the exporter reads
    ``observation``: the text is given once, under the name the exporter reads)."""
    tc, tr = s["tool_call"], s.get("tool_result") or {}
    return {
        "thought": s["thought"],
        "tool": tc["name"],
        "params": tc["parameters"],
        "action": f"{tc['name']} {json.dumps(tc['parameters'], ensure_ascii=False)}",
        "observation": tr.get("output", ""),
        "exit_code": tr.get("exit_code", 0),
    }


def hub_row(d: dict) -> dict:
    """A recorder trajectory (dict) as the original hub pipeline writes it
    (``Pipeline._recorder_to_hub_trajectory``, no reward: the rule layer is timed apart)."""
    steps = [hub_step(s) for s in d["steps"]]
    o = d["outcome"]
    return {
        "task_id": d["task"]["task_id"],
        "agent_framework": d["agent"],
        "agent_model": d["model"],
        "steps": steps,
        "total_steps": len(steps),
        "success": o["success"],
        "reward": 0.0,
        "step_rewards": [],
        "duration_seconds": 0.0,
        "metadata": {
            "task_description": d["task"]["description"],
            "outcome_tests_passed": o["tests_passed"],
            "outcome_tests_failed": o["tests_failed"],
            "outcome_total_tokens": o["total_tokens"],
            **d["metadata"],
        },
    }


def _engine_dict(t) -> dict:
    """What the original's ``Pipeline._score_trajectory`` hands its reward engine."""
    return {
        "task": t.task.description,
        "steps": [
            {
                "tool": s.tool_call.name,
                "params": s.tool_call.parameters,
                "output": s.tool_result.output if s.tool_result else "",
            }
            for s in t.steps
        ],
        "outcome": {
            "success": t.outcome.success,
            "tests_passed": t.outcome.tests_passed,
            "tests_total": t.outcome.tests_passed + t.outcome.tests_failed,
        },
    }


def model_memory(side: str, args: list[str]) -> dict:
    """``model-memory`` [TRAJ_JSONL N]: what N trajectories held in memory take (tracemalloc,
    KB per trajectory, the lines not counted): as the side's trajectory models, and for the
    original also as the dicts its reward engine takes (built from those models)."""
    import gc
    import tracemalloc

    lines = _lines(args[0], int(args[1]))
    if side == "original":
        from agentrecorder.schema import Trajectory

        load = Trajectory.model_validate_json
    else:
        from knowlyr.trajectory import Trajectory

        load = Trajectory.from_json
    load(lines[0])  # imports, validators built
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    models = [load(line) for line in lines]
    held = tracemalloc.get_traced_memory()[0]
    out = {"trajectories": len(models), "model_kb": (held - base) / len(models) / 1024}
    if side == "original":
        dicts = [_engine_dict(t) for t in models]
        del models
        gc.collect()
        out["engine_input_kb"] = (tracemalloc.get_traced_memory()[0] - base) / len(dicts) / 1024
    return out


def original(job: str, args: list[str]) -> dict:
    if job == "convert":
        from agentrecorder.adapters.openhands import OpenHandsAdapter
        from agentrecorder.recorder import Recorder

        t0 = time.perf_counter()
        trajs = Recorder(OpenHandsAdapter()).convert_batch(args[0])
        t1 = time.perf_counter()
        with open(args[1], "w", encoding="utf-8") as f:
            for t in trajs:
                f.write(t.model_dump_json() + "\n")
        t2 = time.perf_counter()
        return {
            "sections": {"models": t1 - t0, "write": t2 - t1, "convert": t2 - t0},
            "trajectories": len(trajs),
            "steps": sum(len(t.steps) for t in trajs),
        }
    if job == "prep-convert":
        from agentrecorder.adapters.openhands import OpenHandsAdapter

        adapter, n = OpenHandsAdapter(), 0
        with open(args[0], "w", encoding="utf-8") as f:
            for d in args[1:]:
                for p in sorted(Path(d).glob("*")):
                    if p.is_file() and adapter.validate(str(p)):
                        f.write(adapter.parse(str(p)).model_dump_json() + "\n")
                        n += 1
        return {"trajectories": n}
    if job == "reward":
        from agentrecorder.schema import Trajectory
        from agentreward.config import RewardConfig
        from agentreward.reward import RewardEngine
        from agentreward.rules import (
            check_efficiency,
            check_info_utilization,
            check_redundancy,
            check_regression,
        )
        from knowlyrcore.domain import get_domain_profile

        n = int(args[1])
        t0 = time.perf_counter()
        dicts = [_engine_dict(Trajectory.model_validate_json(line)) for line in _lines(args[0], n)]
        t1 = time.perf_counter()
        loaded = _rss_mb()
        profile = get_domain_profile("coding")
        engine = RewardEngine(RewardConfig(rule_weight=1.0, model_weight=0.0), profile=profile)
        engine.score_batch(dicts[:10])
        t2 = time.perf_counter()
        scores = engine.score_batch(dicts)
        t3 = time.perf_counter()
        for d in dicts:
            s = d["steps"]
            check_redundancy(s, profile)
            check_regression(s, profile)
            check_info_utilization(s, profile)
            check_efficiency(s, len(s))
        t4 = time.perf_counter()
        return {
            "sections": {"load": t1 - t0, "engine": t3 - t2, "rules": t4 - t3},
            "loaded_rss_mb": loaded,
            "trajectories": len(scores),
            "steps": sum(len(r.step_rewards) for r in scores),
        }
    if job in ("store", "prep-store"):
        import sqlite3

        from agentrecorder.schema import Trajectory

        n = int(args[1])
        t0 = time.perf_counter()
        trajs = [Trajectory.model_validate_json(line) for line in _lines(args[0], n)]
        t1 = time.perf_counter()
        db = sqlite3.connect(args[2])
        db.execute(
            "CREATE TABLE IF NOT EXISTS trajectories (id TEXT PRIMARY KEY, task_id TEXT,"
            " agent TEXT, model TEXT, n_steps INTEGER, success INTEGER, data TEXT)"
        )
        db.commit()

        def add() -> int:
            added = 0
            for t in trajs:
                data = t.model_dump_json()
                key = hashlib.sha256(data.encode()).hexdigest()
                if db.execute("SELECT 1 FROM trajectories WHERE id = ?", (key,)).fetchone():
                    continue
                db.execute(
                    "INSERT INTO trajectories VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (key, t.task.task_id, t.agent, t.model, len(t.steps), t.outcome.success, data),
                )
                db.commit()
                added += 1
            return added

        t2 = time.perf_counter()
        new = add()
        t3 = time.perf_counter()
        if job == "prep-store":
            return {"trajectories": new}
        db.close()
        db = sqlite3.connect(args[2])
        t4 = time.perf_counter()
        again = add()
        t5 = time.perf_counter()
        rows = db.execute("SELECT COUNT(*) FROM trajectories").fetchone()[0]
        db.close()
        return {
            "sections": {"load": t1 - t0, "add": t3 - t2, "readd": t5 - t4},
            "trajectories": len(trajs),
            "new": new,
            "duplicates": len(trajs) - again,
            "rows": rows,
            "bytes": _du(args[2]),
            "steps": sum(len(t.steps) for t in trajs),
        }
    if job == "export-store":
        import sqlite3

        from trajectoryhub.exporter import DatasetExporter

        class SQLiteExporter(DatasetExporter):
            """The hub's exporter over the SQLite store instead of a JSONL file."""

            def _load_trajectories(self):
                db = sqlite3.connect(str(self.trajectories_dir))
                try:
                    rows = db.execute("SELECT data FROM trajectories ORDER BY rowid")
                    return [hub_row(json.loads(r[0])) for r in rows]
                finally:
                    db.close()

        t0 = time.perf_counter()
        r = SQLiteExporter(args[0]).export_sft(args[1])
        if not r.success:
            raise SystemExit(f"original export failed: {r.error}")
        return {"sections": {"export": time.perf_counter() - t0}, "rows": r.total_records}
    raise SystemExit(f"unknown job for the original: {job}")


# -- ours -------------------------------------------------------------------------------------


def ours(job: str, args: list[str]) -> dict:
    if job in ("convert-1p", "convert-2w", "prep-convert"):
        from knowlyr.recorder import Written, write_jsonl

        paths = args[1:] if job == "prep-convert" else [args[0]]
        out = args[0] if job == "prep-convert" else args[1]
        workers = 1 if job == "convert-1p" else 2
        n = rejected = 0
        t0 = time.perf_counter()
        for r in write_jsonl(paths, out, format="openhands", workers=workers):
            if isinstance(r, Written):
                n += 1
            else:
                rejected += 1
        t1 = time.perf_counter()
        return {"sections": {"convert": t1 - t0}, "trajectories": n, "rejected": rejected}
    if job == "convert-models":
        from knowlyr.recorder import Converted, iter_records

        n = steps = rejected = 0
        t0 = time.perf_counter()
        for r in iter_records([args[0]], format="openhands", workers=1):
            if isinstance(r, Converted):
                n += 1
                steps += len(r.trajectory.steps)
            else:
                rejected += 1
        t1 = time.perf_counter()
        return {
            "sections": {"models": t1 - t0},
            "trajectories": n,
            "steps": steps,
            "rejected": rejected,
        }
    if job == "reward":
        from knowlyr.reward import RewardEngine
        from knowlyr.reward.rules import score_rules
        from knowlyr.trajectory import Trajectory

        n = int(args[1])
        t0 = time.perf_counter()
        trajs = [Trajectory.from_json(line) for line in _lines(args[0], n)]
        t1 = time.perf_counter()
        loaded = _rss_mb()
        engine = RewardEngine("coding")
        engine.score(trajs[:10])
        t2 = time.perf_counter()
        scores = engine.score(trajs)
        t3 = time.perf_counter()
        score_rules(trajs, "coding")
        t4 = time.perf_counter()
        return {
            "sections": {"load": t1 - t0, "engine": t3 - t2, "rules": t4 - t3},
            "loaded_rss_mb": loaded,
            "trajectories": len(scores),
            "steps": sum(len(t.steps) for t in trajs),
        }
    if job == "reward-documents":  # what `knowlyr reward score FILE` runs: streamed batches
        import tempfile

        from knowlyr.reward import RewardEngine
        from knowlyr.reward.stream import score_files

        n = int(args[1])
        with tempfile.TemporaryDirectory(prefix="anchor-reward-") as tmp:  # private scratch
            src, warm, out = (os.path.join(tmp, f) for f in ("in.jsonl", "warm.jsonl", "out"))
            _head(args[0], n, src)
            _head(args[0], 10, warm)
            engine = RewardEngine("coding")
            with open(out, "wb") as f:
                score_files([warm], engine, f)
            t0 = time.perf_counter()
            with open(out, "wb") as f:
                res = score_files([src], engine, f, workers=0)  # the CLI default
            t1 = time.perf_counter()
            size = os.path.getsize(out)
        return {  # reading and scoring interleave: the whole is under "engine"
            "sections": {"load": 0.0, "engine": t1 - t0},
            "trajectories": res.scored,
            "steps": res.steps,
            "rejected": len(res.rejected),
            "output_bytes": size,
        }
    if job in ("store", "prep-store"):
        from knowlyr.store import Store
        from knowlyr.trajectory import Trajectory

        n = int(args[1])
        t0 = time.perf_counter()
        trajs = [Trajectory.from_json(line) for line in _lines(args[0], n)]
        t1 = time.perf_counter()
        store = Store.open(args[2])
        t2 = time.perf_counter()
        m = store.add_trajectories(trajs)
        t3 = time.perf_counter()
        if job == "prep-store":
            return {"trajectories": m.new}
        again = Store.open(args[2])  # a new handle: known ids are read back from the table
        t4 = time.perf_counter()
        m2 = again.add_trajectories(trajs)
        t5 = time.perf_counter()
        return {
            "sections": {"load": t1 - t0, "add": t3 - t2, "readd": t5 - t4},
            "trajectories": len(trajs),
            "new": m.new,
            "duplicates": m2.duplicates,
            "rows": again.count("trajectories"),
            "bytes": _du(os.path.join(args[2], "tables", "trajectories")),
            "store_bytes": _du(args[2]),
            "steps": sum(len(t.steps) for t in trajs),
        }
    raise SystemExit(f"unknown job for ours: {job}")


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] not in ("original", "ours"):
        raise SystemExit("usage: _anchor_run.py original|ours JOB [ARGS...]")
    side, job, args = argv[0], argv[1], argv[2:]
    if job == "model-memory":
        result = model_memory(side, args)
    else:
        result = original(job, args) if side == "original" else ours(job, args)
    result["process_s"] = time.perf_counter() - _T0
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
