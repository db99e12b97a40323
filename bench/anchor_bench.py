"""Against the original: every stage of ours beside the original knowlyr, same work, same machine.

The original is the PyPI packages knowlyr-core, knowlyr-recorder, knowlyr-reward and
knowlyr-hub 0.1.2, installed into their own venv (``.bench/anchor-venv``, created with pip
when missing; never a dependency of this project). The workload is generated here,
deterministically (``bench/_anchor_workload.py``): 20-step OpenHands coding logs with
500-character outputs (one ``.jsonl`` of events per run), the format both recorders read. Each
side converts them with its own converter into its own trajectory format; the later stages
read those (the first N of them). Every measurement is its own process
(``bench/_anchor_run.py`` in that side's venv, or the side's CLI), so imports, peak RSS
(largest process of the job, ``wait4``) and CPU seconds (the job and its workers) are per job.
Rounds interleave original and ours; the table gives medians, min-max and the ratio
ours / original of each round (for times and bytes: original / ours, so > 1 is always better
for ours).

Stages (``--stages a,b``; default all):

* ``convert-1p``: logs -> trajectory JSONL, one process (original: ``Recorder.convert_batch``
  + one ``model_dump_json`` line each; ours: ``write_jsonl(workers=1)``);
* ``convert-2w``: ours with 2 workers (``knowlyr record convert``'s default on 2 CPUs) against
  the same original run (it has no workers);
* ``convert-models``: logs -> models in memory (original: ``convert_batch``; ours:
  ``iter_records``);
* ``cli-convert``: ``knowlyr-recorder batch DIR -f openhands -o OUT`` vs ``knowlyr record
  convert DIR -f openhands -o OUT``, whole processes;
* ``reward-engine``: the rule layer through each side's reward engine on ``--reward-n``
  trajectories (loading them is timed apart and not counted); ``reward-file``: loading the
  JSONL plus the engine, ours what ``knowlyr reward score FILE`` runs (``reward.stream.
  score_files``: JSON documents in batches, no models, the rewards JSON written as it goes;
  the original has no file path: its load + engine in one process); ``score-rules``: the rules
  alone (original: its four ``check_*`` functions; ours: ``score_rules``);
* ``store-add`` / ``store-readd`` / ``store-bytes``: ``--store-n`` trajectories into a fresh
  store, again (all duplicates), bytes per trajectory on disk. The original ships no store;
  its baseline is TARGETS.md's: SQLite, one row per trajectory, COMMIT per row;
* ``export-file``: ``knowlyr-hub export --format sft -t FILE`` vs ``knowlyr export sft FILE``
  on ``--export-n`` trajectories, whole processes; ``export-store``: the original's exporter
  over its SQLite store vs ``knowlyr export sft --store``, whole processes;
* ``cli-help``: ``knowlyr-hub --help`` vs ``knowlyr --help``, a new process each time.

The SFT trainer's tokens/s against plain TRL is not here: ``bench/train_bench.py`` measures it
(both sides are ours and TRL, not the original).

Usage:
    python bench/anchor_bench.py [--rounds 3] [--stages convert-1p,store-add] [--quick]
        [--scale 1.0] [--convert-n 10000] [--reward-n 50000] [--store-n 20000]
        [--export-n 20000] [--quiet-load 0.5] [--quiet-timeout 120] [--work DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _anchor_workload as workload  # noqa: E402
from _anchor_run import hub_row  # noqa: E402

ORIGINAL_PACKAGES = ("knowlyr-core", "knowlyr-recorder", "knowlyr-reward", "knowlyr-hub")
RUNNER = HERE / "_anchor_run.py"
QUICK = {"convert_n": 400, "reward_n": 1000, "store_n": 500, "export_n": 500}
DEFAULTS = {"convert_n": 10_000, "reward_n": 50_000, "store_n": 20_000, "export_n": 20_000}


# -- the two sides ------------------------------------------------------------------------------


def ensure_original(venv: Path, version: str) -> Path:
    """The original's venv, created with pip (from PyPI) when missing; returns its python."""
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import agentrecorder, agentreward, trajectoryhub, knowlyrcore"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    print(f"installing the original ({', '.join(ORIGINAL_PACKAGES)} {version}) into {venv}")
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pins = [f"{p}=={version}" for p in ORIGINAL_PACKAGES]
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", *pins], check=True)
    if subprocess.run(probe, capture_output=True).returncode != 0:
        raise SystemExit(f"{venv}: the original's packages do not import after pip install")
    return py


@dataclass
class Sides:
    original_py: Path
    ours_py: Path

    def bin(self, side: str, name: str) -> str:
        py = self.original_py if side == "original" else self.ours_py
        path = py.parent / name
        if not path.exists():
            raise SystemExit(f"{path} is missing: reinstall that side's venv")
        return str(path)

    def runner(self, side: str, *args: Any) -> list[str]:
        py = self.original_py if side == "original" else self.ours_py
        return [str(py), str(RUNNER), side, *map(str, args)]


@dataclass
class Result:
    """One job: the whole process (wall, CPU of it and its reaped workers, largest RSS, peak
    PSS of all its processes together) and what it printed."""

    wall: float
    cpu: float
    rss_mb: float
    out: dict[str, Any]
    load: float
    tree_mb: float = 0.0


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from ``/proc/PID/task/TID/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
            except OSError:
                pass
    return out


def _pss_kb(pid: int) -> int:
    """The process's proportional set size (shared pages divided among their processes)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class _TreeMemory:
    """Samples the PSS summed over a process and its descendants every 0.1 s (the memory the
    whole job holds, its workers included, shared pages counted once); ``peak_mb``."""

    def __init__(self, pid: int):
        import threading

        self.pid, self.peak_kb, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak_kb = max(self.peak_kb, sum(map(_pss_kb, _tree(self.pid))))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kb / 1024


def _wait4(
    argv: list[str], *, cwd: Path, env: dict[str, str]
) -> tuple[bytes, bytes, int, Any, float]:
    """Run ``argv``, read both pipes, reap it with ``os.wait4``: (stdout, stderr, exit code,
    rusage of it and the workers it waited for, peak PSS of the process tree in MB)."""
    import selectors

    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tree = _TreeMemory(p.pid)
    bufs: dict[int, list[bytes]] = {p.stdout.fileno(): [], p.stderr.fileno(): []}
    sel = selectors.DefaultSelector()
    for f in (p.stdout, p.stderr):
        sel.register(f, selectors.EVENT_READ)
    while sel.get_map():
        for key, _ in sel.select():
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                bufs[key.fd].append(chunk)
            else:
                sel.unregister(key.fileobj)
    out, err = b"".join(bufs[p.stdout.fileno()]), b"".join(bufs[p.stderr.fileno()])
    p.stdout.close()
    p.stderr.close()
    tree_mb = tree.stop()  # before the reaping: a reaped pid could be another process's
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = code = os.waitstatus_to_exitcode(status)
    return out, err, code, ru, tree_mb


def run_job(argv: list[str], *, cwd: Path) -> Result:
    """Run ``argv`` to the end as its own process and measure it."""
    load = os.getloadavg()[0]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("VIRTUAL_ENV", None)
    t0 = time.perf_counter()
    out, err, code, ru, tree_mb = _wait4(argv, cwd=cwd, env=env)
    wall = time.perf_counter() - t0
    text = out.decode(errors="replace")
    if code != 0:
        tail = (err.decode(errors="replace") or text).strip().splitlines()[-15:]
        raise SystemExit(f"{' '.join(argv)} exited with {code}:\n" + "\n".join(tail))
    parsed: dict[str, Any] = {}
    if len(argv) > 1 and argv[1] == str(RUNNER):
        try:
            parsed = json.loads(text.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            raise SystemExit(f"{' '.join(argv)} printed no result line:\n{text[-2000:]}") from None
    parsed["stdout"] = text[-2000:]
    return Result(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, parsed, load, tree_mb)


# -- the workload, prepared once per size (cached under --work) --------------------------------


@dataclass
class Data:
    """The prepared inputs: logs, each side's trajectories, the export files and stores."""

    root: Path
    convert_logs: Path  # exactly convert_n logs, flat (the original's batch does not recurse)
    original_all: Path  # the original's recorder trajectories, one JSON line each
    ours_all: Path  # ours, same order
    original_export: Path  # the first export_n as the original hub's trajectory lines
    ours_export: Path
    original_store: Path  # SQLite with the first export_n
    ours_store: Path
    info: dict[str, Any]


def _steps_kb(path: Path, key: str = "steps", n: int = 200) -> float:
    sizes = []
    with open(path, "rb") as f:
        for line in f:
            if len(sizes) == n:
                break
            sizes.append(len(json.dumps(json.loads(line)[key])))
    return sum(sizes) / len(sizes) / 1000


def prepare(work: Path, sides: Sides, *, seed: int, sizes: dict[str, int]) -> Data:
    """Generate the logs, convert them with both sides and check both got the same runs."""
    n_all = max(sizes.values())
    cn, en = sizes["convert_n"], sizes["export_n"]
    root = work / f"data-s{seed}-c{cn}-n{n_all}-e{en}"
    data = Data(
        root,
        root / "logs" / "convert",
        root / "original_all.jsonl",
        root / "ours_all.jsonl",
        root / "original_export.jsonl",
        root / "ours_export.jsonl",
        root / "original_store.sqlite",
        root / "ours_store",
        {},
    )
    ready = root / "ready.json"
    if ready.exists():
        data.info = json.loads(ready.read_text())
        return data
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    print(f"preparing the workload under {root} ({n_all:,} logs, seed {seed})...", flush=True)
    size = workload.write_logs(data.convert_logs, 0, cn, seed=seed)
    rest = root / "logs" / "rest"
    if n_all > cn:
        size += workload.write_logs(rest, cn, n_all, seed=seed)
    dirs = [data.convert_logs] + ([rest] if n_all > cn else [])
    run_job(sides.runner("original", "prep-convert", data.original_all, *dirs), cwd=root)
    run_job(sides.runner("ours", "prep-convert", data.ours_all, *dirs), cwd=root)
    info = check_same_runs(data.original_all, data.ours_all, n_all)
    with (
        open(data.original_all, "rb") as fo,
        open(data.ours_all, "rb") as fu,
        open(data.original_export, "w") as go,
        open(data.ours_export, "wb") as gu,
    ):
        for _ in range(en):
            go.write(json.dumps(hub_row(json.loads(fo.readline())), ensure_ascii=False) + "\n")
            gu.write(fu.readline())
    run_job(
        sides.runner("original", "prep-store", data.original_all, en, data.original_store), cwd=root
    )
    run_job(sides.runner("ours", "prep-store", data.ours_all, en, data.ours_store), cwd=root)
    shutil.rmtree(rest, ignore_errors=True)  # only the convert logs are read again
    info.update(
        seed=seed,
        logs=n_all,
        log_kb=size / n_all / 1000,
        original_steps_kb=_steps_kb(data.original_all),
        ours_steps_kb=_steps_kb(data.ours_all),
        prepare_s=time.perf_counter() - t0,
    )
    ready.write_text(json.dumps(info, indent=1))
    data.info = info
    print(f"prepared in {info['prepare_s']:.0f} s", flush=True)
    return data


def check_same_runs(original: Path, ours: Path, n: int) -> dict[str, Any]:
    """Both conversions hold the same runs in the same order: same count, task ids and
    outcomes; steps: the original's 20, ours the same plus the finish action."""
    counts = {"original_steps": 0, "ours_steps": 0, "successes": 0}
    with open(original, "rb") as fo, open(ours, "rb") as fu:
        for i in range(n):
            lo, lu = fo.readline(), fu.readline()
            if not lo or not lu:
                raise SystemExit(
                    f"the conversions hold fewer than {n} trajectories ({original}: "
                    f"{'short' if not lo else 'ok'}, {ours}: {'short' if not lu else 'ok'}); "
                    "a converter rejected logs: delete the folder and look at its output"
                )
            o, u = json.loads(lo), json.loads(lu)
            if (o["task"]["task_id"], o["outcome"]["success"]) != (
                u["task"]["task_id"],
                u["outcome"]["success"],
            ) or len(u["steps"]) - len(o["steps"]) not in (0, 1):
                raise SystemExit(
                    f"trajectory {i} differs between the sides: original "
                    f"{o['task']['task_id']}/{o['outcome']['success']}/{len(o['steps'])} steps, "
                    f"ours {u['task']['task_id']}/{u['outcome']['success']}/{len(u['steps'])}"
                )
            counts["original_steps"] += len(o["steps"])
            counts["ours_steps"] += len(u["steps"])
            counts["successes"] += bool(o["outcome"]["success"])
    return counts


# -- stages -------------------------------------------------------------------------------------


@dataclass
class Stage:
    """A row of the table: which job of each side, the count both must agree on, the cost
    per item (the ratio is original cost / ours) and how the value is shown."""

    name: str
    original: str
    ours: str
    n_key: str  # which size
    items: Callable[[Result], float]
    cost: Callable[[Result], float]  # per item; ratio = original / ours
    show: Callable[[Result], float]
    unit: str
    budget: float | None
    what: str
    items_name: str = "trajectories"


def _sec(name: str) -> Callable[[Result], float]:
    return lambda r: r.out["sections"][name]


def _traj(r: Result) -> float:
    return r.out["trajectories"]


def _rows(r: Result) -> float:
    return r.out["rows"]


def _per(items: Callable[[Result], float], t: Callable[[Result], float]):
    return lambda r: t(r) / items(r)


def _rate(items: Callable[[Result], float], t: Callable[[Result], float]):
    return lambda r: items(r) / t(r)


def _us_step(t: Callable[[Result], float]):
    return lambda r: t(r) / r.out["steps"] * 1e6


def _load_and_engine(r: Result) -> float:
    return r.out["sections"]["load"] + r.out["sections"]["engine"]


def _wall(r: Result) -> float:
    return r.wall


STAGES = [
    Stage("convert-1p", "convert", "convert-1p", "convert_n", _traj,
          _per(_traj, _sec("convert")), _rate(_traj, _sec("convert")), "traj/s", 10,
          "logs -> trajectory JSONL, 1 process"),
    Stage("convert-2w", "convert", "convert-2w", "convert_n", _traj,
          _per(_traj, _sec("convert")), _rate(_traj, _sec("convert")), "traj/s", 10,
          "logs -> trajectory JSONL, ours 2 workers"),
    Stage("convert-models", "convert", "convert-models", "convert_n", _traj,
          _per(_traj, _sec("models")), _rate(_traj, _sec("models")), "traj/s", None,
          "logs -> models in memory, 1 process"),
    Stage("cli-convert", "cli-convert", "cli-convert", "convert_n", _traj,
          _per(_traj, _wall), _rate(_traj, _wall), "traj/s", 10,
          "convert CLI, whole process"),
    Stage("reward-engine", "reward", "reward", "reward_n", _traj,
          _per(_traj, _sec("engine")), _us_step(_sec("engine")), "us/step", 10,
          "rule layer through the reward engine"),
    Stage("score-rules", "reward", "reward", "reward_n", _traj,
          _per(_traj, _sec("rules")), _us_step(_sec("rules")), "us/step", None,
          "the rules alone"),
    Stage("reward-file", "reward", "reward-documents", "reward_n", _traj,
          _per(_traj, _load_and_engine), _us_step(_load_and_engine), "us/step", 10,
          "trajectory JSONL -> rule rewards: loading + engine; ours as JSON documents"),
    Stage("store-add", "store", "store", "store_n", _traj,
          _per(_traj, _sec("add")), _rate(_traj, _sec("add")), "traj/s", 10,
          "add to a fresh store"),
    Stage("store-readd", "store", "store", "store_n", _traj,
          _per(_traj, _sec("readd")), _rate(_traj, _sec("readd")), "traj/s", 10,
          "the same again (all duplicates)"),
    Stage("store-bytes", "store", "store", "store_n", _rows,
          lambda r: r.out["bytes"] / r.out["rows"], lambda r: r.out["bytes"] / r.out["rows"],
          "B/traj", 5, "bytes per trajectory on disk", "rows"),
    Stage("export-file", "export-file", "export-file", "export_n", _rows,
          _per(_rows, _wall), _rate(_rows, _wall), "rows/s", 10,
          "SFT export of a JSONL file, CLI whole process", "SFT rows"),
    Stage("export-store", "export-store", "export-store", "export_n", _rows,
          _per(_rows, _wall), _rate(_rows, _wall), "rows/s", 10,
          "SFT export from the store, whole process", "SFT rows"),
    Stage("cli-help", "cli-help", "cli-help", "convert_n", lambda r: 1.0,
          _wall, _wall, "s", 1, "`--help`, a new process", ""),
]  # fmt: skip
BY_NAME = {s.name: s for s in STAGES}


def _lines_in(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _rows_printed(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("sft: ") and " rows" in line:
            return int(line.split()[1].replace(",", ""))
    raise SystemExit(f"`knowlyr export sft` printed no row count:\n{text[-800:]}")


def run_side(
    job: str, side: str, sides: Sides, data: Data, sizes: dict[str, int], tmp: Path
) -> Result:
    """One job of one side, in a fresh scratch folder (removed after)."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if job in ("convert", "convert-1p", "convert-2w"):
            return run_job(sides.runner(side, job, data.convert_logs, tmp / "out.jsonl"), cwd=tmp)
        if job == "convert-models":
            return run_job(sides.runner(side, job, data.convert_logs), cwd=tmp)
        if job in ("reward", "reward-documents"):
            src = data.original_all if side == "original" else data.ours_all
            return run_job(sides.runner(side, job, src, sizes["reward_n"]), cwd=tmp)
        if job == "store":
            src = data.original_all if side == "original" else data.ours_all
            dest = tmp / ("store.sqlite" if side == "original" else "store")
            return run_job(sides.runner(side, job, src, sizes["store_n"], dest), cwd=tmp)
        if job == "cli-convert":
            out = tmp / "out.jsonl"
            if side == "original":
                argv = [sides.bin(side, "knowlyr-recorder"), "batch", str(data.convert_logs)]
                argv += ["-f", "openhands", "-o", str(out)]
            else:
                argv = [sides.bin(side, "knowlyr"), "record", "convert", str(data.convert_logs)]
                argv += ["-f", "openhands", "-o", str(out)]
            r = run_job(argv, cwd=tmp)
            r.out["trajectories"] = _lines_in(out)
            return r
        if job in ("export-file", "export-store"):
            if side == "original" and job == "export-file":
                argv = [sides.bin(side, "knowlyr-hub"), "export", "--format", "sft"]
                argv += ["-t", str(data.original_export), "-o", str(tmp / "sft.jsonl")]
            elif side == "original":
                argv = sides.runner(side, job, data.original_store, tmp / "sft.jsonl")
            else:
                src = [str(data.ours_export)] if job == "export-file" else []
                src += [] if job == "export-file" else ["--store", str(data.ours_store)]
                argv = [sides.bin(side, "knowlyr"), "export", "sft", *src, "-o", str(tmp / "sft")]
            r = run_job(argv, cwd=tmp)
            if side == "original":
                r.out["rows"] = _lines_in(tmp / "sft.jsonl")
            else:
                r.out["rows"] = _rows_printed(r.out["stdout"])
            return r
        if job == "cli-help":
            cli = "knowlyr-hub" if side == "original" else "knowlyr"
            return run_job([sides.bin(side, cli), "--help"], cwd=tmp)
        raise ValueError(f"unknown job {job!r}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_round(
    stages: list[Stage], got: dict[tuple[str, str], Result], sizes: dict[str, int]
) -> None:
    """Stop when the sides did not do the same work (counts differ)."""
    for st in stages:
        o, u = got[("original", st.original)], got[("ours", st.ours)]
        a, b = st.items(o), st.items(u)
        if a != b:
            raise SystemExit(
                f"stage {st.name}: the original produced {a:,.0f} and ours {b:,.0f} "
                f"{'rows' if st.items is _rows else 'trajectories'}; the sides did not do the "
                "same work (a converter or exporter dropped some): see their output"
            )
        want = sizes[st.n_key]
        if st.items is _traj and a != want:
            raise SystemExit(f"stage {st.name}: {a:,.0f} trajectories, {want:,} expected")
        if st.name.startswith("store"):
            for side, r in (("original", o), ("ours", u)):
                if (r.out["new"], r.out["duplicates"], r.out["rows"]) != (want, want, want):
                    raise SystemExit(
                        f"stage {st.name}, {side}: new {r.out['new']}, duplicates on re-add "
                        f"{r.out['duplicates']}, rows {r.out['rows']}; expected {want} each"
                    )
        so, su = o.out.get("steps"), u.out.get("steps")
        if so and su and not 0.9 <= su / so <= 1.1:
            raise SystemExit(f"stage {st.name}: steps differ, original {so:,} vs ours {su:,}")


def wait_quiet(threshold: float, timeout: float) -> tuple[float, float]:
    """Wait until the 1-minute load average is below ``threshold`` (at most ``timeout`` s);
    returns (seconds waited, load when going on)."""
    t0 = time.monotonic()
    load = os.getloadavg()[0]
    while load >= threshold and time.monotonic() - t0 < timeout:
        time.sleep(min(5.0, max(0.0, timeout - (time.monotonic() - t0))))
        load = os.getloadavg()[0]
    return time.monotonic() - t0, load


# -- main -----------------------------------------------------------------------------------------


def compile_ours(python: Path) -> None:
    """Byte-compile our package, as ``pip install`` does for the original's packages. Ours is
    an editable install, so without it a machine that sets ``PYTHONDONTWRITEBYTECODE`` (this
    one does) compiles every module ours imports in every process it starts."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [str(python), "-m", "compileall", "-q", str(ROOT / "knowlyr")],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def main(argv: list[str] | None = None) -> None:
    from _anchor_report import render, summarize

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--stages", default=",".join(BY_NAME), help="comma-separated stage names")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every size by this")
    for key, n in DEFAULTS.items():
        flag = "--" + key.replace("_", "-")
        ap.add_argument(
            flag, type=int, default=None, help=f"default {n:,} ({QUICK[key]} with --quick)"
        )
    ap.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    ap.add_argument(
        "--quiet-load",
        type=float,
        default=0.5,
        help="wait before each round until the 1-minute load average is below this",
    )
    ap.add_argument(
        "--quiet-timeout",
        type=float,
        default=120.0,
        help="seconds to wait for a quiet machine, then go on with a warning",
    )
    ap.add_argument(
        "--work",
        type=Path,
        default=ROOT / ".bench" / "anchor-work",
        help="folder for the generated workload and scratch (default .bench/anchor-work)",
    )
    ap.add_argument(
        "--original-venv",
        type=Path,
        default=ROOT / ".bench" / "anchor-venv",
        help="the original's venv (created with pip when missing)",
    )
    ap.add_argument("--original-version", default="0.1.2")
    ap.add_argument(
        "--ours-python",
        type=Path,
        default=ROOT / ".venv" / "bin" / "python",
        help="our side's interpreter (default .venv/bin/python)",
    )
    ap.add_argument("--json", type=Path, help="write every measurement here")
    a = ap.parse_args(argv)

    names = [x.strip() for x in a.stages.split(",") if x.strip()]
    unknown = [x for x in names if x not in BY_NAME]
    if unknown:
        ap.error(f"--stages: unknown {', '.join(unknown)}; choose from {', '.join(BY_NAME)}")
    if a.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {a.rounds}")
    base = QUICK if a.quick else DEFAULTS
    sizes = {}
    for key in DEFAULTS:
        given = getattr(a, key)
        sizes[key] = given if given is not None else max(1, round(base[key] * a.scale))
        if sizes[key] < 1:
            ap.error(f"--{key.replace('_', '-')} must be positive, got {sizes[key]}")
    if not a.ours_python.exists():
        ap.error(f"--ours-python {a.ours_python} does not exist: run `make install` first")
    stages = [BY_NAME[x] for x in names]
    sides = Sides(ensure_original(a.original_venv, a.original_version), a.ours_python)
    compile_ours(a.ours_python)
    a.work.mkdir(parents=True, exist_ok=True)
    data = prepare(a.work, sides, seed=a.seed, sizes=sizes)
    info = data.info

    jobs: list[tuple[str, str]] = []
    for st in stages:
        for key in (("original", st.original), ("ours", st.ours)):
            if key not in jobs:
                jobs.append(key)
    rounds: list[dict[tuple[str, str], Result]] = []
    waits: list[str] = []
    t0 = time.perf_counter()
    for k in range(a.rounds):
        waited, load = wait_quiet(a.quiet_load, a.quiet_timeout)
        if load >= a.quiet_load:
            waits.append(f"round {k + 1}: load {load:.2f} after waiting {waited:.0f} s")
        got: dict[tuple[str, str], Result] = {}
        for side, job in jobs:
            print(f"round {k + 1}/{a.rounds}: {side:8} {job:15}", end=" ", flush=True)
            got[(side, job)] = r = run_side(job, side, sides, data, sizes, a.work / "scratch")
            print(f"{r.wall:7.2f} s  {r.rss_mb:6.0f} MB  load {r.load:.2f}", flush=True)
        check_round(stages, got, sizes)
        rounds.append(got)
    rows = [summarize(st, rounds, sizes[st.n_key]) for st in stages]
    header = [
        f"## Against the original (knowlyr 0.1.2 from PyPI), {a.rounds} interleaved rounds",
        "",
        f"Workload: {info['logs']:,} generated OpenHands logs (seed {info['seed']}), "
        f"20 tool steps each with 500-character outputs, {info['log_kb']:.1f} KB per log; "
        f"steps per trajectory {info['original_steps_kb']:.1f} KB of JSON as the original "
        f"keeps them, {info['ours_steps_kb']:.1f} KB as ours does (ours also keeps the finish "
        f"action as a 21st step); {info['successes']:,} of {info['logs']:,} runs succeeded.",
        f"Sizes: convert {sizes['convert_n']:,} logs, reward {sizes['reward_n']:,}, store "
        f"{sizes['store_n']:,}, export {sizes['export_n']:,} trajectories. "
        f"{os.cpu_count()} CPUs; {time.perf_counter() - t0:.0f} s of measuring.",
    ]
    if waits:
        header.append(
            f"WARNING: the machine was not quiet (1-minute load ≥ {a.quiet_load}): "
            + "; ".join(waits)
            + ". Other work slows both sides; the ratios of a round are fairer than its times."
        )
    text = render(rows, header)
    loads = []
    for job in ("reward", "store"):
        if ("ours", job) in jobs:
            o, u = (
                statistics.median(r[(side, job)].out["sections"]["load"] for r in rounds)
                for side in ("original", "ours")
            )
            loads.append(f"{job} original {o:.1f} s, ours {u:.1f} s")
    if loads:
        text += (
            "\nReading the trajectory JSONL into each side's models before the timed part (not "
            "in the ratios): " + "; ".join(loads) + " (medians)."
        )
    if ("ours", "reward") in jobs:
        held, above = [], []
        for side in ("original", "ours"):
            rs = [r[(side, "reward")] for r in rounds]
            held.append(statistics.median(r.out["loaded_rss_mb"] for r in rs))
            above.append(statistics.median(r.rss_mb - r.out["loaded_rss_mb"] for r in rs))
        text += (
            f"\nThe reward job's memory: RSS with its input loaded (the lines, and what each "
            f"side's engine takes: the original's dicts, our models), original {held[0]:,.0f} MB, "
            f"ours {held[1]:,.0f} MB; above that at the job's peak (the engine, its rewards, the "
            f"rules pass), original {above[0]:,.0f} MB, ours {above[1]:,.0f} MB (medians)."
        )
        k = min(2000, sizes["reward_n"])
        mem = {
            side: run_job(sides.runner(side, "model-memory", src, k), cwd=data.root).out
            for side, src in (("original", data.original_all), ("ours", data.ours_all))
        }
        text += (
            f"\nA trajectory held in memory (tracemalloc over the first {k:,}): as the "
            f"original's model {mem['original']['model_kb']:.1f} KB, as ours "
            f"{mem['ours']['model_kb']:.1f} KB; as the dicts the original's engine takes "
            f"{mem['original']['engine_input_kb']:.1f} KB."
        )
    if "store-bytes" in names:
        whole = [r[("ours", "store")].out["store_bytes"] / sizes["store_n"] for r in rounds]
        text += (
            f"\nstore-bytes counts ours' trajectories table (as bench/store_bench.py does); the "
            f"whole store folder, sightings table and logs included: {max(whole):,.0f} B/traj."
        )
    print()
    print(text)
    if a.json:
        a.json.write_text(
            json.dumps(
                {"sizes": sizes, "workload": info, "warnings": waits, "stages": rows}, indent=1
            )
        )
        print(f"\nwrote {a.json}")


if __name__ == "__main__":
    main()
