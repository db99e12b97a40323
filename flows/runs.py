"""Start a stage's flow run and read its state back from Prefect (the MCP server's
``run_pipeline`` and ``pipeline_status``).

A run is started from the stage's deployment (``<flow>/ad-hoc`` in prefect.yaml) when a Prefect
server is configured (``PREFECT_API_URL``) and the deployment exists there: a worker runs it.
Otherwise the flow run is created through the API Prefect has here (the configured server, or
the ephemeral local one) and executed in this process, on a background thread. Either way the
caller gets the flow run id at once, and the state lives only in Prefect.

Example:
    >>> run = start_flow_run("ingest", {"logs": ["tests/data/fixtures/swe_agent"]})  # doctest: +SKIP
    >>> flow_run_status(run["flow_run_id"])["state"]  # doctest: +SKIP
    'RUNNING'
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from knowlyr.errors import ConfigError, NotFoundError

__all__ = ["FLOWS", "flow_run_status", "start_flow_run"]

# stage -> (module, flow function, its parameter model); deployments are "<flow>/ad-hoc"
FLOWS: dict[str, tuple[str, str, str]] = {
    "ingest": ("flows.ingest", "ingest", "IngestParams"),
    "reward": ("flows.reward", "reward", "RewardFlowParams"),
    "export": ("flows.export", "export", "ExportFlowParams"),
}
DEPLOYMENT = "ad-hoc"


def _load(stage: str) -> tuple[Any, type[BaseModel]]:
    import importlib

    if stage not in FLOWS:
        raise ConfigError(f"unknown pipeline {stage!r}; choose one of: {', '.join(FLOWS)}")
    module, fn, params = FLOWS[stage]
    mod = importlib.import_module(module)
    return getattr(mod, fn), getattr(mod, params)


def _deployment_id(client: Any, name: str) -> UUID | None:
    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_deployment_by_name(name).id
    except ObjectNotFound:
        return None


def start_flow_run(stage: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """Start a flow run of ``stage`` (``ingest``, ``reward`` or ``export``) with ``parameters``
    (its parameter model's fields); returns ``flow_run_id``, ``name``, ``how`` and ``deployment``.

    Raises:
        ConfigError: an unknown stage, or parameters its model refuses (names the field).
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    flow, model = _load(stage)
    try:
        params = model.model_validate(parameters)
    except ValueError as e:
        raise ConfigError(f"parameters of the {stage} pipeline: {e}") from e
    payload = {"params": params.model_dump(mode="json")}
    with get_client(sync_client=True) as client:
        name = f"{flow.name}/{DEPLOYMENT}"
        dep = _deployment_id(client, name) if PREFECT_API_URL.value() else None
        if dep is not None:
            from prefect.deployments import run_deployment

            fr = run_deployment(name, parameters=payload, timeout=0, as_subflow=False)
            return {
                "flow_run_id": str(fr.id),
                "name": fr.name,
                "how": "deployment",
                "deployment": name,
            }
        fr = client.create_flow_run(flow, parameters=payload)
    # a daemon thread: an in-process run lives as long as this process (start a worker and
    # deploy the stages, `make deploy`, for runs that outlive it)
    threading.Thread(
        target=_run_here, args=(flow, fr), name=f"flow-run-{fr.id}", daemon=True
    ).start()
    return {"flow_run_id": str(fr.id), "name": fr.name, "how": "in-process", "deployment": None}


def _run_here(flow: Any, flow_run: Any) -> None:
    from prefect.flow_engine import run_flow

    # a failure is the run's state in Prefect; there is nothing to add here
    with contextlib.suppress(BaseException):
        run_flow(flow, flow_run=flow_run, return_type="state")


def flow_run_status(flow_run_id: str) -> dict[str, Any]:
    """The state of a flow run and of each of its task runs, as Prefect has them.

    Raises:
        NotFoundError: Prefect has no flow run with that id (or it is not a UUID).
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import TaskRunSort
    from prefect.exceptions import ObjectNotFound

    try:
        rid = UUID(flow_run_id)
    except ValueError:
        raise NotFoundError(
            f"{flow_run_id!r} is not a flow run id (a UUID from run_pipeline)"
        ) from None
    with get_client(sync_client=True) as client:
        try:
            fr = client.read_flow_run(rid)
        except ObjectNotFound:
            raise NotFoundError(
                f"Prefect has no flow run {flow_run_id} (at {client.api_url}); run_pipeline returns ids"
            ) from None
        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[rid])),
            sort=TaskRunSort.EXPECTED_START_TIME_ASC,
        )
    state = fr.state
    return {
        "flow_run_id": str(fr.id),
        "name": fr.name,
        "state": state.type.value if state else None,
        "state_name": state.name if state else None,
        "message": state.message if state else None,
        "final": bool(state and state.is_final()),
        "start_time": fr.start_time.isoformat() if fr.start_time else None,
        "end_time": fr.end_time.isoformat() if fr.end_time else None,
        "deployment_id": str(fr.deployment_id) if fr.deployment_id else None,
        "task_runs": [
            {
                "name": t.name,
                "state": t.state.type.value if t.state else None,
                "state_name": t.state.name if t.state else None,
                "start_time": t.start_time.isoformat() if t.start_time else None,
                "end_time": t.end_time.isoformat() if t.end_time else None,
            }
            for t in tasks
        ],
    }
