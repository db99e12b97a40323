"""The fan-out flows on a real Dask cluster: a ``dask scheduler`` and two ``dask worker``
processes on loopback (started once for the module), writing to a store in a local S3 server
(moto's server mode) or on disk; and collect through an env server that is killed mid-episode."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("prefect_dask")

import tests.envs.slow_env  # noqa: F401  registers tests/slow-conversation here too
from flows._common import task_runner
from flows.collect import CollectParams, collect
from flows.ingest import IngestParams, ingest
from flows.reward import RewardFlowParams, reward
from knowlyr.store import Store
from tasks.reward import RewardParams
from tests.envs.server_proc import REPO, free_port, start_server
from tests.flows.helpers import task_states
from tests.store.s3_server import S3Server, aws_env, s3_server

# a real Dask cluster (scheduler and worker processes), an S3 server and env servers: ~1.5
# minutes, so `make test-all` (CI) runs them and `make test` does not
pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.slow]


@dataclass
class Cluster:
    address: str
    scheduler: subprocess.Popen
    workers: dict[str, subprocess.Popen]  # worker address -> process


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("s3")) as server, aws_env(server.env):
        yield server


@pytest.fixture(scope="module")
def cluster(prefect_harness: Path, s3: S3Server, tmp_path_factory) -> Iterator[Cluster]:
    """A scheduler and two single-process workers (no nanny: a killed worker stays dead)."""
    from distributed import Client
    from prefect.settings import PREFECT_API_URL

    logs = tmp_path_factory.mktemp("dask")
    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or "dask"
    env = {
        **os.environ,
        **s3.env,
        "PYTHONPATH": str(REPO),
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(prefect_harness),
        "PREFECT_HOME": str(logs / "prefect-home"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    address = f"tcp://127.0.0.1:{free_port()}"
    procs: list[subprocess.Popen] = []

    def spawn(name: str, *args: str) -> subprocess.Popen:
        with open(logs / f"{name}.log", "wb") as log:
            p = subprocess.Popen([dask, *args], stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        return p

    sched = spawn("scheduler", "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard")  # fmt: skip
    workers = {}
    for i in range(2):
        port = free_port()
        workers[f"tcp://127.0.0.1:{port}"] = spawn(
            f"worker{i}",
            "worker", address, "--host", "127.0.0.1", "--worker-port", str(port), "--no-nanny",
            "--nthreads", "2", "--no-dashboard", "--preload", "tests.envs.slow_env",
        )  # fmt: skip
    try:
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield Cluster(address, sched, workers)
    finally:
        for p in procs:
            p.kill()  # throwaway processes: no graceful shutdown to wait for
            p.wait(10)


def _content(url: str) -> tuple[list[str], list[tuple[str, float]]]:
    store = Store.open(url)
    ids = store.read("trajectories", columns=["id"])["id"].to_list()
    rewards = store.read("rewards", columns=["trajectory_id", "total"]).rows()
    return sorted(ids), sorted((t, round(x, 6)) for t, x in rewards)


def test_the_cluster_gives_the_store_the_local_runner_gives(cluster, s3, tmp_path, fixtures_dir):
    from distributed import Client, get_task_stream

    def run(url: str, runner) -> None:
        p = CollectParams(episodes=8, shards=2, seed=11, agent="noisy:0.5", store_url=url)
        collect.with_options(task_runner=runner)(p)
        scored = RewardParams(shards=2)  # two shards commit rewards at once
        reward.with_options(task_runner=runner)(RewardFlowParams(store_url=url, reward=scored))
        logs = IngestParams(logs=[str(fixtures_dir / "openhands")], store_url=url, reward=scored)
        ingest.with_options(task_runner=runner)(logs)

    local = str(tmp_path / "local-store")
    run(local, task_runner(None))
    remote = s3.url("dask-store")
    with Client(cluster.address) as client, get_task_stream(client) as stream:
        run(remote, task_runner(cluster.address))
    ran_on = {t["worker"] for t in stream.data}
    assert ran_on and ran_on <= set(cluster.workers)  # the stages ran in the worker processes

    ids, rewards = _content(local)
    assert len(ids) >= 8 and len(set(ids)) == len(ids)
    assert _content(remote) == (ids, rewards)  # same trajectories, same rewards
    store = Store.open(remote)
    assert all(store.has_blob(t.source.blob) for t in store.read_trajectories())  # workers' blobs


def test_a_worker_killed_mid_flow_loses_and_duplicates_nothing(cluster, tmp_path):
    from distributed import Client

    params = CollectParams(
        env_id="tests/slow-conversation", episodes=8, shards=4, seed=21, store_url=""
    )
    local = params.model_copy(update={"store_url": str(tmp_path / "local")})
    expected = sorted(t.id for t in Store.open(collect(local).store_url).read_trajectories())

    on_dask = params.model_copy(update={"store_url": str(tmp_path / "dask")})
    flow = collect.with_options(task_runner=task_runner(cluster.address))
    outcome: list[object] = []
    t = threading.Thread(target=lambda: outcome.append(_try(flow, on_dask)))
    killed = None
    with Client(cluster.address) as client:
        t.start()
        deadline = time.monotonic() + 120
        while killed is None and time.monotonic() < deadline and t.is_alive():
            busy = [w for w, keys in client.processing().items() if keys]
            if busy:
                killed = busy[0]
                cluster.workers[killed].kill()  # SIGKILL, mid-rollout
            time.sleep(0.05)
        t.join(180)
    assert killed is not None, "no worker ever had a rollout to kill"
    cluster.workers[killed].wait(10)
    again = flow(on_dask)  # the re-run completes whatever the first run's fate
    assert again.episodes == 8
    store = Store.open(on_dask.store_url)
    ids = store.read("trajectories", columns=["id"])["id"].to_list()
    assert sorted(ids) == expected  # nothing lost, nothing twice


def _try(flow, params):
    try:
        return flow(params)
    except Exception as e:  # the first run may fail when its worker dies: the re-run counts
        return e


def test_an_env_server_killed_mid_episode_fails_the_task_and_its_retry_completes(
    tmp_path, store_url
):
    server = start_server("tests/slow-conversation", tmp_path, "--import", "tests.envs.slow_env")
    try:
        params = CollectParams(env_id=server.url, episodes=4, shards=1, seed=5, store_url=store_url)
        state: list[object] = []
        t = threading.Thread(target=lambda: state.append(collect(params, return_state=True)))
        t.start()
        deadline = time.monotonic() + 60
        while server.health()["steps"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.kill()  # mid-episode: the client's call dies with it
        restarted = start_server(
            "tests/slow-conversation",
            tmp_path,
            "--import",
            "tests.envs.slow_env",
            port=server.port,
            wait=False,
        )  # fmt: skip  (a supervisor bringing it back)
        server = restarted
        t.join(120)
        report = state[0].result()
        assert report.episodes == 4 and report.successes == 4
        run_id = state[0].state_details.flow_run_id
        assert set(task_states(run_id).values()) == {"Completed"}
        assert _run_counts(run_id)["collect"] == 2  # failed with the server, then retried
        assert server.health()["opened"] >= 1  # the retry ran on the restarted server
        assert Store.open(store_url).count("trajectories") == 4  # no failed episode recorded
    finally:
        server.stop()


def _run_counts(flow_run_id) -> dict[str, int]:
    """``{task name prefix: run_count}`` of a flow run's task runs (2 = it was retried once)."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(str(flow_run_id))]))
        )
    return {tr.name.split("-", 1)[0]: tr.run_count for tr in runs}
