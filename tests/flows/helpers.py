"""Read back what a flow run did through the Prefect client: task run states and artifacts."""

from __future__ import annotations

import time
from uuid import UUID


def task_states(flow_run_id: UUID | str, *, timeout: float = 30) -> dict[str, str]:
    """``{task run name: state name}`` ("Completed", "Cached", ...) for every task of a run.

    Task run states reach the server as events, recorded asynchronously: wait until every
    task run of the (finished) flow run shows a final state.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(str(flow_run_id))]))
            )
            if all(tr.state is not None and tr.state.is_final() for tr in runs):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    return {tr.name: tr.state.name for tr in runs if tr.state is not None}


def artifacts(flow_run_id: UUID | str) -> list:
    """The artifacts a flow run (or its tasks) created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        return client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(str(flow_run_id))])
            )
        )


def artifact_keys(flow_run_id: UUID | str) -> set[str]:
    """Keys of the artifacts a flow run (or its tasks) created."""
    return {a.key for a in artifacts(flow_run_id) if a.key}


def flow_run_name(state) -> str:
    """The name the server has for the flow run of ``state`` (after any rename)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(state.state_details.flow_run_id).name
