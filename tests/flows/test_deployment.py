"""CI: a real Prefect server on loopback, the process work pool, every deployment in
prefect.yaml, `prefect deployment run` for the nightly iteration, and a process worker that
runs it and the training deployment it starts with `run_deployment` (the GPU-pool path)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

from deployments.server import REPO_ROOT, local_server, prefect_bin
from flows.iterate import IterateParams


def _logs(client, flow_run_id) -> str:
    """The flow run's log lines, for an assertion message."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    logs = client.read_logs(
        log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
    )
    return "\n".join(f"{log.name}: {log.message}" for log in logs)[-6000:]


def test_nightly_deployment_runs_on_a_process_worker(tmp_path):
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with local_server(tmp_path / "prefect") as server:
        server.run("work-pool", "create", "knowlyr-process", "--type", "process")
        out = server.run("--no-prompt", "deploy", "--all", timeout=240)
        for name in ("iterate/nightly", "collect/ad-hoc", "ingest/ad-hoc", "reward/ad-hoc", "export/ad-hoc",
                     "train/ad-hoc", "evaluate/ad-hoc"):  # fmt: skip
            assert f"Deployment '{name}' successfully created" in out, out[-2000:]

        # Small parameters; training goes to the `train/ad-hoc` deployment, as it would to a
        # GPU work pool: iterate starts it with run_deployment and waits for its checkpoint.
        params = IterateParams.small(store_url=str(tmp_path / "store"), seed=3)
        params.warmup.train.deployment = "train/ad-hoc"  # the first night trains the warm-up
        out = server.run(
            "deployment", "run", "iterate/nightly",
            "--param", f"params={json.dumps(params.model_dump(mode='json'))}",
        )  # fmt: skip
        run_id = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)

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
                deadline = time.monotonic() + 300
                while True:
                    run = client.read_flow_run(run_id)
                    if run.state is not None and run.state.is_final():
                        break
                    assert time.monotonic() < deadline, f"iterate still {run.state} after 300 s"
                    time.sleep(2)
                assert run.state.is_completed(), _logs(client, run.id)
                assert run.name.startswith("iterate-knowlyr/conversation-24ep-seed3")

                deployment = client.read_deployment_by_name("iterate/nightly")
                assert deployment.schedules[0].schedule.cron == "0 2 * * *"
                assert "prefect.deployments.steps.set_working_directory" in deployment.pull_steps[0]
                train_dep = client.read_deployment_by_name("train/ad-hoc")
                trains = [r for r in client.read_flow_runs() if r.deployment_id == train_dep.id]
                assert len(trains) == 1 and trains[0].state.is_completed(), trains
                assert trains[0].parent_task_run_id is not None  # linked to the iterate run
                arts = client.read_artifacts(
                    artifact_filter=ArtifactFilter(
                        flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])
                    )
                )
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
        keys = {a.key for a in arts}
        assert {"collect-counts", "evaluation", "iteration-report"} <= keys, keys
        report = next(a for a in arts if a.key == "iteration-report")
        assert "Held-out evaluation" in report.data
        assert (tmp_path / "store" / "tables" / "checkpoints").is_dir()
        assert (tmp_path / "store" / "tables" / "promotions").is_dir()
