"""Scale-out throughput in one run: collect through env servers and on a Dask cluster, and the
ingest rate into a local store and into an S3 store.

Collect (the scripted expert; episodes per second, higher is better), on ``knowlyr/sandbox``
and ``knowlyr/conversation``:
- in-process ``collect()`` at 1, 8 and 32 episodes in flight (the baseline);
- through ``knowlyr env serve`` (a separate process on loopback), ``collect("http://...")``
  at 1, 8 and 32 in flight;
- the ``collect`` flow (rollout shards, staging, dedup into a fresh store) with Prefect's
  thread runner (the baseline) and with ``DaskTaskRunner`` on a ``dask scheduler`` with 1 and
  2 ``dask worker`` processes, against a throwaway Prefect server.

Ingest (trajectories per second): ``knowlyr.store.ingest.ingest`` of one JSONL log (``--logs``,
default: conversation episodes collected here) into a local store and into a bucket of a local
S3 server (moto's server mode, plain HTTP on loopback: no network latency, so a real bucket
is slower per request).

Every process shares this machine's cores, so the cluster and server figures measure
overhead, not added hardware: on N cores, 2 workers can at best match what the cores give.

Usage: .venv/bin/python bench/scale_bench.py [--episodes 64] [--sandbox-episodes 16]
       [--ingest 2000] [--logs FILE.jsonl] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

ENVS = {"knowlyr/conversation": "conversation", "knowlyr/sandbox": "coding"}
BIN = Path(sys.executable).parent


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)


@contextmanager
def running(proc: subprocess.Popen):
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout} s")


def rate(fn, n: int) -> float:
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    if out is not None and len(out) != n:
        raise RuntimeError(f"expected {n} episodes, got {len(out)}")
    return n / dt


def collect_rates(work: Path, episodes: dict[str, int]) -> dict[tuple[str, str], float]:
    from knowlyr.agents import ExpertAgent
    from knowlyr.rollout import collect

    res = {}
    for env_id, n in episodes.items():
        collect(env_id, ExpertAgent, 2, seed=99)  # warm caches (imports, first workspaces)
        for k in (1, 8, 32):
            res[(env_id, f"in-process, {k} in flight")] = rate(
                lambda env_id=env_id, n=n, k=k: collect(
                    env_id, ExpertAgent, n, seed=0, concurrency=k
                ),
                n,
            )
            print(f"  {env_id} in-process {k}: {res[(env_id, f'in-process, {k} in flight')]:.1f}/s")
        port = free_port()
        log = work / f"env-server-{env_id.replace('/', '-')}.log"
        cmd = [str(BIN / "knowlyr"), "env", "serve", env_id, "--port", str(port), "--no-token"]
        with running(spawn([*cmd, "--max-episodes", "40"], log)) as proc:
            wait_http(f"http://127.0.0.1:{port}/health", proc, log)
            url = f"http://127.0.0.1:{port}/{env_id}"
            collect(url, ExpertAgent, 2, seed=99)
            for k in (1, 8, 32):
                key = (env_id, f"env server, {k} in flight")
                res[key] = rate(
                    lambda url=url, n=n, k=k: collect(url, ExpertAgent, n, seed=0, concurrency=k),
                    n,
                )
                print(f"  {env_id} env server {k}: {res[key]:.1f}/s")
    return res


def flow_rates(work: Path, episodes: dict[str, int]) -> dict[tuple[str, str], float]:
    from deployments.server import local_server

    res = {}
    with local_server(work / "prefect-home") as server:
        os.environ["PREFECT_API_URL"] = server.api_url
        from flows._common import task_runner
        from flows.collect import CollectParams, collect

        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PREFECT_API_URL": server.api_url,
            "PREFECT_HOME": str(work / "prefect-home"),
        }
        for n_workers in (0, 1, 2):
            with ExitStack() as stack:
                runner = task_runner(None)
                label = "flow, thread runner (baseline)"
                if n_workers:
                    address = f"tcp://127.0.0.1:{free_port()}"
                    sched = [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1"]
                    sched += ["--port", address.rsplit(":", 1)[1], "--no-dashboard"]
                    stack.enter_context(running(spawn(sched, work / "scheduler.log", env)))
                    for i in range(n_workers):
                        cmd = [str(BIN / "dask"), "worker", address, "--host", "127.0.0.1"]
                        cmd += ["--nthreads", "8", "--no-dashboard"]
                        stack.enter_context(running(spawn(cmd, work / f"worker{i}.log", env)))
                    from distributed import Client

                    with Client(address, timeout=60) as client:
                        client.wait_for_workers(n_workers, timeout=120)
                    runner = task_runner(address)
                    label = f"flow, Dask cluster, {n_workers} worker{'s' * (n_workers > 1)}"
                flow = collect.with_options(task_runner=runner)
                for env_id, n in episodes.items():
                    suite = ENVS[env_id]
                    warm = CollectParams(
                        env_id=env_id, suite=suite, family=None, episodes=2, shards=1, seed=7,
                        store_url=str(work / f"warm-{n_workers}-{suite}"),
                    )  # fmt: skip
                    flow(warm)  # worker imports, first workspaces
                    p = warm.model_copy(
                        update={
                            "episodes": n,
                            "shards": 8,
                            "store_url": str(work / f"flow-{n_workers}-{suite}"),
                        }
                    )
                    t0 = time.perf_counter()
                    report = flow(p)
                    res[(env_id, label)] = report.episodes / (time.perf_counter() - t0)
                    print(f"  {env_id} {label}: {res[(env_id, label)]:.1f}/s")
    return res


def ingest_rates(work: Path, logs: Path | None, n: int) -> dict[str, float]:
    from knowlyr.store import Store
    from knowlyr.store.ingest import ingest

    if logs is None:
        import orjson

        from knowlyr.agents import ExpertAgent
        from knowlyr.rollout import collect

        logs = work / "episodes.jsonl"
        trajs = collect("knowlyr/conversation", ExpertAgent, n, seed=1000, concurrency=4)
        logs.write_bytes(b"".join(orjson.dumps(t.model_dump(mode="json")) + b"\n" for t in trajs))
    res = {}
    t0 = time.perf_counter()
    got = ingest(Store.open(work / "ingest-local"), [logs])
    res["local store"] = got.read / (time.perf_counter() - t0)
    print(f"  ingest local: {res['local store']:.0f}/s ({got.new} new)")

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    aws = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    cmd = [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    with running(spawn(cmd, work / "moto.log")) as proc:
        wait_http(endpoint, proc, work / "moto.log")
        os.environ.update(aws)
        import boto3

        boto3.client("s3").create_bucket(Bucket="knowlyr-bench")
        t0 = time.perf_counter()
        got = ingest(Store.open("s3://knowlyr-bench/store"), [logs])
        res["S3 store (moto server, loopback)"] = got.read / (time.perf_counter() - t0)
        print(f"  ingest S3: {res['S3 store (moto server, loopback)']:.0f}/s ({got.new} new)")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=64, help="conversation episodes per figure")
    ap.add_argument("--sandbox-episodes", type=int, default=16, help="sandbox episodes per figure")
    ap.add_argument("--ingest", type=int, default=2000, help="episodes to collect for ingest")
    ap.add_argument("--logs", type=Path, help="a log file or folder to ingest instead")
    ap.add_argument("--workdir", type=Path, help="where stores and logs go (default: temporary)")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="knowlyr-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    episodes = {"knowlyr/sandbox": args.sandbox_episodes, "knowlyr/conversation": args.episodes}
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}; workdir {work}")
    print("collect, in-process and through an env server:")
    res = collect_rates(work, episodes)
    print("collect flow, thread runner and Dask cluster:")
    res.update(flow_rates(work, episodes))
    print("ingest:")
    ing = ingest_rates(work, args.logs, args.ingest)

    print("\n| collect (episodes/s) | knowlyr/sandbox | knowlyr/conversation |\n|---|---|---|")
    for label in dict.fromkeys(label for _, label in res):
        row = [res.get((e, label)) for e in episodes]
        print(f"| {label} | " + " | ".join(f"{v:.1f}" if v else "-" for v in row) + " |")
    for env_id in episodes:
        base = res[(env_id, "in-process, 8 in flight")]
        served = res[(env_id, "env server, 8 in flight")]
        print(f"{env_id}: env server / in-process at 8 in flight = {served / base:.2f}x")
    print("\n| ingest (trajectories/s) | rate |\n|---|---|")
    for label, v in ing.items():
        print(f"| {label} | {v:.0f} |")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
