"""Sandbox benchmark: per-command latency and episode reset, both backends, with baselines.

Budgets (shared/TARGETS.md): command p50 <= 15 ms local, <= 120 ms container; episode reset
(workspace restore) <= 100 ms local, <= 500 ms container, on a ~1,000-file workspace.

Baselines measured in the same run (latencies interleaved with ours, so load hits both alike):
  * local command: a bare ``bwrap ... /bin/true`` as an unprivileged uid (the floor);
  * container command: a bare ``exec_run("true")`` through the docker SDK (the API floor);
  * local reset: ``rm -rf`` + ``tar -x`` of the same workspace (the usual tar approach);
  * container reset: starting (and removing) a bare container from the image.

Usage:
    .venv/bin/python bench/sandbox_bench.py [--n 200] [--files 1000] [--backend local|container|both]
(the container part starts ``podman system service`` when DOCKER_HOST is unset).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from knowlyr.sandbox import SandboxConfig, create_sandbox

EPISODE = (  # what a short coding episode does to the workspace: edit 10 files, add 5, delete 3
    "for i in 0 1 2 3 4 5 6 7 8 9; do echo '# edited' >> pkg0/mod_$i.py; done; "
    "mkdir -p new && for i in 1 2 3 4 5; do echo new > new/f$i.py; done; "
    "rm pkg1/mod_100.py pkg2/mod_200.py pkg3/mod_300.py"
)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] * 1000


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def interleaved(fns: dict[str, Callable[[], object]], n: int) -> dict[str, list[float]]:
    """Time several callables in alternation (random order), so load changes hit them alike."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    rng = random.Random(0)
    for _ in range(n):
        items = list(fns.items())
        rng.shuffle(items)
        for k, fn in items:
            t = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t)
    return out


def line(
    label: str, xs: list[float], budget: float | None = None, base: list[float] | None = None
) -> None:
    p50, p95 = pct(xs, 0.5), pct(xs, 0.95)
    extra = ""
    if base is not None:
        extra += f"  {p50 / pct(base, 0.5):.2f}x baseline"
    if budget is not None:
        extra += f"  (budget {budget:g} ms: {'OK' if p50 <= budget else 'OVER'})"
    print(f"  {label:<50} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms{extra}")


def workspace_files(n: int) -> dict[str, str]:
    return {f"pkg{i // 100}/mod_{i}.py": f"# module {i}\n" + "x = 1\n" * 80 for i in range(n)}


def bench_local(n: int, nfiles: int) -> None:
    print(f"local backend (bubblewrap): {n} commands, {nfiles}-file workspace")
    bwrap = [
        "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--proc", "/proc", "--dev", "/dev", "/bin/true",
    ]  # fmt: skip
    if os.geteuid() == 0:
        bwrap = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *bwrap]

    def run_floor() -> None:
        subprocess.run(bwrap, stdin=subprocess.DEVNULL, capture_output=True, check=True)

    with create_sandbox(SandboxConfig(backend="local"), files=workspace_files(nfiles)) as sb:
        r = interleaved({"floor": run_floor, "ours": lambda: sb.exec("true")}, n)
        print("  command latency")
        line("baseline: bare `bwrap /bin/true` (unprivileged)", r["floor"])
        line("LocalSandbox.exec('true')", r["ours"], 15, r["floor"])
        line(
            "LocalSandbox.exec('python3 -c pass')",
            timed(lambda: sb.exec("python3 -c pass"), max(n // 10, 10)),
        )
        sid = sb.snapshot()
        snap = timed(sb.snapshot, 5)
        resets, full = [], []
        for _ in range(max(n // 10, 20)):
            sb.exec(EPISODE)
            t = time.perf_counter()
            sb.restore(sid)
            resets.append(time.perf_counter() - t)
        for _ in range(5):
            sb.exec("rm -rf ./*")
            t = time.perf_counter()
            sb.restore(sid)
            full.append(time.perf_counter() - t)
        assert sb.exec("ls pkg0 | wc -l").stdout.strip() == "100"
        assert sb.exec("test -e new").exit_code == 1
        # baseline: a tar snapshot of the same workspace, restored by rm -rf + extract
        tmp = Path(tempfile.mkdtemp(prefix="knowlyr-bench-"))
        try:
            tar_path = tmp / "snap.tar"
            with tarfile.open(tar_path, "w") as tar:
                tar.add(sb.workspace, arcname=".")
            tar_base = []
            for _ in range(10):
                sb.exec(EPISODE)
                t = time.perf_counter()
                for child in sb.workspace.iterdir():
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
                subprocess.run(["tar", "-xf", str(tar_path), "-C", str(sb.workspace)], check=True)
                tar_base.append(time.perf_counter() - t)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"  episode reset ({nfiles} files; the episode edits 10, adds 5, deletes 3)")
        line("baseline: rm -rf + tar -x of the workspace", tar_base)
        line("LocalSandbox.restore (after an episode)", resets, 100, tar_base)
        line("LocalSandbox.restore (whole workspace deleted)", full, None, tar_base)
        line("LocalSandbox.snapshot", snap)


def bench_container(n: int, nfiles: int) -> None:
    if os.environ.get("DOCKER_HOST"):
        bench_container_at(n, nfiles)
        return
    from knowlyr.sandbox.engine import podman_service

    with podman_service() as host:
        os.environ["DOCKER_HOST"] = host
        try:
            bench_container_at(n, nfiles)
        finally:
            os.environ.pop("DOCKER_HOST", None)


def bench_container_at(n: int, nfiles: int) -> None:
    from knowlyr.sandbox.container import _client

    client = _client()
    cfg = SandboxConfig(backend="container")
    print(f"container backend ({os.environ['DOCKER_HOST']}): {n} commands, {nfiles}-file workspace")

    def start_bare() -> None:
        client.containers.run(
            cfg.image, ["sleep", "infinity"], detach=True, network_mode="none"
        ).remove(force=True)

    start_base = timed(start_bare, 5)
    t = time.perf_counter()
    sb = create_sandbox(cfg, files=workspace_files(nfiles))
    created = time.perf_counter() - t
    bare = client.containers.run(cfg.image, ["sleep", "infinity"], detach=True, network_mode="none")
    try:
        with sb:
            r = interleaved(
                {"floor": lambda: bare.exec_run(["true"]), "ours": lambda: sb.exec("true")}, n
            )
            print("  command latency")
            line("baseline: bare exec_run('true') via the docker SDK", r["floor"])
            line("ContainerSandbox.exec('true')", r["ours"], 120, r["floor"])
            print(f"  create with {nfiles} files: {created * 1000:.0f} ms")
            snap = timed(sb.snapshot, 3)
            sid = sb.snapshot()
            warm, cold = [], []
            for _ in range(max(n // 20, 10)):
                sb.exec(EPISODE)
                for _ in range(9):  # the rest of a 10-step episode
                    sb.exec("true")
                t = time.perf_counter()
                sb.restore(sid)
                warm.append(time.perf_counter() - t)
                assert sb.exec("test -e new").exit_code == 1
            sb.warm_restore = False
            sb._drop_standby()
            for _ in range(5):
                sb.exec(EPISODE)
                t = time.perf_counter()
                sb.restore(sid)
                cold.append(time.perf_counter() - t)
            assert sb.exec("ls pkg0 | wc -l").stdout.strip() == "100"
            print(f"  episode reset ({nfiles} files; 10-step episode)")
            line("baseline: start + remove a bare container", start_base)
            line("ContainerSandbox.restore (standby container)", warm, 500, start_base)
            line("ContainerSandbox.restore (warm_restore=False)", cold, 500, start_base)
            line("ContainerSandbox.snapshot (commit)", snap)
    finally:
        bare.remove(force=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="commands per latency measurement")
    ap.add_argument("--files", type=int, default=1000, help="files in the workspace")
    ap.add_argument("--backend", choices=["local", "container", "both"], default="both")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    if args.backend in ("local", "both"):
        bench_local(args.n, args.files)
    if args.backend in ("container", "both"):
        bench_container(args.n, args.files)


if __name__ == "__main__":
    main()
