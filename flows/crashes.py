"""``mark-crashed``: end the task runs a crashed flow run left behind.

A flow run whose process is killed (``kill -9``, the machine lost) is marked Crashed by its
worker, but its task runs stay Running forever: nothing in that process is left to report
them. Prefect's automations cannot change a task run's state, so the ``crashed/reaper``
deployment in ``prefect.yaml`` carries a trigger (an automation created by ``prefect deploy``)
that runs this flow for every ``prefect.flow-run.Crashed`` event; it marks the crashed run's
Pending and Running task runs as Crashed. Run it by hand for an older crash::

    prefect deployment run 'mark-crashed/reaper' --param flow_run_id=<UUID>
"""

from __future__ import annotations

from uuid import UUID

from prefect import flow, get_run_logger

__all__ = ["mark_crashed"]

_RESOURCE_PREFIX = "prefect.flow-run."


def _run_id(flow_run_id: str) -> UUID:
    text = flow_run_id.removeprefix(_RESOURCE_PREFIX)
    try:
        return UUID(text)
    except ValueError:
        raise ValueError(
            f"flow_run_id {flow_run_id!r} is not a flow run id: pass its UUID (or the event "
            f"resource id {_RESOURCE_PREFIX}<UUID>)"
        ) from None


@flow(name="mark-crashed", flow_run_name="mark-crashed-{flow_run_id}")
def mark_crashed(flow_run_id: str) -> list[str]:
    """Mark the Pending / Running task runs of a crashed flow run as Crashed; returns their names."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        TaskRunFilter,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    run_id = _run_id(flow_run_id)
    log = get_run_logger()
    marked: list[str] = []
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
        if run.state is None or run.state.type != StateType.CRASHED:
            log.info(
                f"flow run {run.name} is {run.state and run.state.name}, not Crashed: nothing to do"
            )
            return marked
        orphans = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])),
            task_run_filter=TaskRunFilter(
                state=TaskRunFilterState(
                    type=TaskRunFilterStateType(any_=[StateType.RUNNING, StateType.PENDING])
                )
            ),
        )
        for tr in orphans:
            client.set_task_run_state(
                tr.id,
                Crashed(message=f"its flow run {run.name} crashed: {run.state.message}"),
                force=True,
            )
            marked.append(tr.name)
    log.info(f"flow run {run.name} crashed: marked {len(marked)} task runs Crashed {marked}")
    return marked
