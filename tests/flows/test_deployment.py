"""CI: a real Prefect server on loopback, the process work pool, every deployment in
prefect.yaml, `prefect deployment run` for the nightly iteration and a worker that runs it."""

from __future__ import annotations

import json

from deployments.server import local_server
from flows.iterate import IterateParams


def test_nightly_deployment_runs_on_a_process_worker(tmp_path):
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with local_server(tmp_path / "prefect") as server:
        server.run("work-pool", "create", "knowlyr-process", "--type", "process")
        out = server.run("--no-prompt", "deploy", "--all", timeout=240)
        for name in ("iterate/nightly", "collect/ad-hoc", "ingest/ad-hoc", "export/ad-hoc",
                     "train/ad-hoc", "evaluate/ad-hoc"):  # fmt: skip
            assert f"Deployment '{name}' successfully created" in out, out[-2000:]

        params = IterateParams.small(store_url=str(tmp_path / "store"), seed=3)
        server.run(
            "deployment", "run", "iterate/nightly",
            "--param", f"params={json.dumps(params.model_dump(mode='json'))}",
        )  # fmt: skip
        server.run("worker", "start", "--pool", "knowlyr-process", "--run-once", timeout=300)

        with SyncPrefectClient(server.api_url) as client:
            deployment = client.read_deployment_by_name("iterate/nightly")
            assert deployment.schedules and deployment.schedules[0].schedule.cron == "0 2 * * *"
            assert deployment.pull_steps[0]["prefect.deployments.steps.set_working_directory"]
            runs = [r for r in client.read_flow_runs() if r.deployment_id == deployment.id]
            done = [r for r in runs if r.state is not None and r.state.is_completed()]
            assert len(done) == 1, [(r.name, r.state) for r in runs]
            run = done[0]
            assert run.name.startswith("iterate-knowlyr/conversation-48ep-seed3")
            arts = client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
            )
        keys = {a.key for a in arts}
        assert {"collect-counts", "evaluation", "iteration-report"} <= keys, keys
        report = next(a for a in arts if a.key == "iteration-report")
        assert "Held-out evaluation" in report.data
        assert (tmp_path / "store" / "tables" / "promotions").is_dir()
