"""CI: a real Prefect server on loopback, the process work pool, every deployment in
prefect.yaml (and the automation it declares) and a process worker:

1. parameter strings: a documented one creates a run, a wrong one is refused naming the key;
2. the smoke deployment started twice at once: the second waits for the first (concurrency
   limit 1, ENQUEUE), then finds every stage in the cache; training goes to the `train/ad-hoc`
   deployment through `run_deployment` (the GPU-pool path);
3. a flow-run process killed (`kill -9`) mid-training: the worker marks the run Crashed, the
   `mark-crashed/reaper` automation marks its training task run Crashed, and a retry of the
   run completes, every stage before training from the cache; the failure notification
   (turned on by `deployments.notify`) posts the crash to a webhook.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from uuid import UUID

import pytest

from deployments.server import REPO_ROOT, local_server, prefect_bin
from flows.iterate import IterateParams
from tasks.train import TrainParams

STAGES = {"sample", "collect", "dedup", "reward", "export", "init", "train", "select", "evaluate",
          "compare", "promote"}  # fmt: skip


def _logs(client, flow_run_id) -> str:
    """The flow run's log lines, for an assertion message."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    logs = client.read_logs(
        log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
    )
    return "\n".join(f"{log.name}: {log.message}" for log in logs)[-6000:]


def _run_id(out: str) -> str:
    return re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)


def _task_runs(client, flow_run_id, *, final: bool = True) -> list:
    """The flow run's task runs; with ``final``, once every one shows a final state (task run
    states reach the server as events, recorded asynchronously)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    def read():
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(str(flow_run_id))]))
        )
        return runs if not final or all(t.state and t.state.is_final() for t in runs) else None

    return _wait(f"task runs of {flow_run_id}", read, timeout=60)


def _wait(what: str, check, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not after {timeout:.0f} s"
        time.sleep(0.5)
    return value


def _final(client, run_id, timeout: float = 300):
    def done():
        run = client.read_flow_run(run_id)
        return run if run.state is not None and run.state.is_final() else None

    return _wait(f"flow run {run_id} final", done, timeout)


def _flow_run_pid(flow_run_id: str) -> int | None:
    """The process a worker started for the flow run (its environment names the run)."""
    needle = f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "environ").read_bytes().split(b"\0"):
                    return int(proc.name)
            except OSError:
                continue
    return None


@contextmanager
def _webhook() -> Iterator[tuple[str, list[dict]]]:
    """An HTTP server on loopback that keeps the JSON bodies posted to it."""
    received: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", received
    finally:
        server.shutdown()


@pytest.mark.slow
def test_deployments_on_a_process_worker(tmp_path, monkeypatch):
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import AwaitingRetry

    from deployments.notify import enable_failure_notifications

    # a flow run that found the deployment's slot taken is looked at again after 2 s (not 30)
    monkeypatch.setenv("PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS", "2")
    with local_server(tmp_path / "prefect") as server, _webhook() as (hook_url, posted):
        server.run("work-pool", "create", "knowlyr-process", "--type", "process")
        out = server.run("--no-prompt", "deploy", "--all", timeout=240)
        for name in ("iterate/nightly", "iterate/smoke", "mark-crashed/reaper", "collect/ad-hoc",
                     "ingest/ad-hoc", "reward/ad-hoc", "export/ad-hoc", "train/ad-hoc",
                     "evaluate/ad-hoc"):  # fmt: skip
            assert f"Deployment '{name}' successfully created" in out, out[-2000:]

        # 1. A documented parameter string starts a run; a wrong one is refused, naming the key.
        doc = server.run(
            "deployment", "run", "iterate/nightly",
            "-p", 'params={"seed": null, "collect": {"attempts": 4}, "train": {"method": "dpo"}}',
        )  # fmt: skip
        documented = _run_id(doc)
        wrong = server.run(
            "deployment", "run", "iterate/nightly", "-p", 'params={"episodes": 64}', check=False
        )
        assert "'episodes' was unexpected" in wrong and "UUID:" not in wrong, wrong

        with SyncPrefectClient(server.api_url) as client:
            run = client.read_flow_run(documented)
            assert run.parameters["params"]["seed"] is None
            assert run.parameters["params"]["train"] == {"method": "dpo"}
            client.delete_flow_run(run.id)  # not run here: a whole night
            nightly = client.read_deployment_by_name("iterate/nightly")
            assert nightly.schedules[0].schedule.cron == "0 2 * * *"
            assert nightly.parameters["params"] == IterateParams(seed=None).model_dump(mode="json")
            assert nightly.global_concurrency_limit.limit == 1
            assert nightly.concurrency_options.collision_strategy == "ENQUEUE"
            assert nightly.pull_steps == [{"flows.steps.set_checkout_directory": {}}]
            [automation] = client.read_automations_by_name("mark-crashed-task-runs")
            assert automation.enabled
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            enable_failure_notifications(hook_url)  # off by default: turned on here

        # 2. The smoke deployment twice at once (nothing promoted: the second is the same night).
        store = tmp_path / "store"
        params = IterateParams.small(store_url=str(store), seed=3)
        params.evaluate.min_improvement = 1.0
        params.warmup.train.deployment = "train/ad-hoc"  # training as its own deployment
        arg = f"params={json.dumps(params.model_dump(mode='json'))}"
        first = _run_id(server.run("deployment", "run", "iterate/smoke", "-p", arg))
        second = _run_id(server.run("deployment", "run", "iterate/smoke", "-p", arg))

        env = dict(server.env, PREFECT_WORKER_QUERY_SECONDS="2")
        worker = subprocess.Popen(
            [prefect_bin(), "worker", "start", "--pool", "knowlyr-process"],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            with SyncPrefectClient(server.api_url) as client:
                a, b = _final(client, first), _final(client, second)
                assert a.state.is_completed(), _logs(client, a.id)
                assert b.state.is_completed(), _logs(client, b.id)
                a, b = sorted([a, b], key=lambda r: r.start_time)
                assert b.start_time >= a.end_time  # never both running
                waited = [s.name for s in client.read_flow_run_states(b.id)]
                assert "AwaitingConcurrencySlot" in waited, waited
                # named from the parameters, then renamed once the night knew what it ran
                assert a.name == b.name == "iterate-warmup-48x-expert-seed3", (a.name, b.name)
                # every stage from the cache; the task run that starts `train/ad-hoc` again
                states_b = {tr.name: tr.state.name for tr in _task_runs(client, b.id)}
                stages = {n: s for n, s in states_b.items() if n.split("-")[0] in STAGES}
                assert set(stages.values()) == {"Cached"} and len(states_b) - len(stages) == 1
                train_dep = client.read_deployment_by_name("train/ad-hoc")
                trains = [r for r in client.read_flow_runs() if r.deployment_id == train_dep.id]
                assert len(trains) == 2 and all(t.state.is_completed() for t in trains), trains
                assert all(t.parent_task_run_id is not None for t in trains)  # linked
                arts = client.read_artifacts(
                    artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[a.id]))
                )
                keys = {art.key for art in arts}
                assert {"collect-counts", "evaluation", "iteration-report"} <= keys, keys
                report = next(art for art in arts if art.key == "iteration-report")
                assert "Held-out evaluation" in report.data
                assert (store / "tables" / "checkpoints").is_dir()
                assert (store / "tables" / "promotions").is_dir()

                # 3. kill -9 mid-training: Crashed, the reaper, a retry from the cache.
                slow = IterateParams.small(
                    store_url=str(tmp_path / "crash-store"),
                    seed=4,
                    warmup=params.warmup.model_copy(
                        update={"train": TrainParams(epochs=60, restarts=1, induction_steps=0,
                                                     target_eval_loss=None, validation_fraction=0)}
                    ),
                )  # fmt: skip
                crash = _run_id(
                    server.run(
                        "deployment", "run", "iterate/smoke",
                        "-p", f"params={json.dumps(slow.model_dump(mode='json'))}",
                    )
                )  # fmt: skip

                def training():
                    runs = _task_runs(client, crash, final=False)
                    return next(
                        (t for t in runs if t.name.startswith("train-") and t.state.is_running()),
                        None,
                    )

                victim = _wait("training running", training)
                pid = _wait("flow-run process", lambda: _flow_run_pid(crash))
                os.kill(pid, signal.SIGKILL)
                run = _final(client, crash, timeout=120)
                assert run.state.name == "Crashed", run.state
                reaped = _wait(
                    "training task run marked Crashed",
                    lambda: (tr := client.read_task_run(victim.id)).state.name == "Crashed" and tr,
                    timeout=180,
                )
                assert "crashed" in reaped.state.message
                note = _wait(
                    "failure notification", lambda: [p for p in posted if run.name in p["text"]]
                )
                assert "Crashed" in note[0]["text"], posted

                client.set_flow_run_state(crash, AwaitingRetry(), force=True)
                run = _final(client, crash)
                assert run.state.is_completed(), _logs(client, run.id)
                by_state: dict[str, set[str]] = {}
                for t in _task_runs(client, crash):
                    by_state.setdefault(t.state.name, set()).add(t.name.split("-")[0])
                assert {"sample", "collect", "dedup", "reward", "export"} <= by_state["Cached"]
                assert "train" in by_state["Completed"] and "train" in by_state["Crashed"]
                # the killed attempt's checkpoint folder is gone: every folder holds a model
                folders = list((tmp_path / "crash-store" / "checkpoints").iterdir())
                saved = [next(p.glob("**/config.json"), None) for p in folders]
                assert folders and all(saved), folders
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
