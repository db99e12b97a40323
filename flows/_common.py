"""Helpers shared by the flows: the store URL, run names and the fan-out task runner."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from knowlyr.store import default_url

__all__ = ["DASK_ADDRESS_ENV", "resolve_store", "run_namer", "task_runner"]

DASK_ADDRESS_ENV = "KNOWLYR_DASK_ADDRESS"


def resolve_store(url: str | None) -> str:
    """The store URL a flow passes to its tasks: absolute for local paths (so a cache key does
    not depend on the working directory), unchanged for object-store URLs."""
    url = url or default_url()
    if "://" in url and not url.startswith("file://"):
        return url.rstrip("/")
    path = url[len("file://") :] if url.startswith("file://") else url
    return os.path.abspath(os.path.expanduser(path))


def _field(params: Any, name: str) -> Any:
    if isinstance(params, dict):
        return params.get(name)
    return getattr(params, name, None)


def run_namer(prefix: str, describe: Callable[[Any], str]) -> Callable[[], str]:
    """A ``flow_run_name`` callable: ``prefix-<what the parameters say>``, e.g.
    ``collect-knowlyr/conversation-64ep``."""

    def name() -> str:
        from prefect.runtime import flow_run

        params = flow_run.parameters.get("params")
        try:
            what = describe(params) if params is not None else ""
        except (AttributeError, KeyError, TypeError, ValueError):
            what = ""
        return f"{prefix}-{what}" if what else prefix

    return name


def task_runner(address: str | None = None) -> Any:
    """The task runner of the fan-out flows (collect, reward, ingest).

    With a Dask scheduler address (``address``, else ``$KNOWLYR_DASK_ADDRESS`` when the flow
    module is imported, e.g. a deployment's job variable), prefect-dask's ``DaskTaskRunner``
    on that cluster: rollout shards, reward shards and the record task run on its workers,
    which need ``PREFECT_API_URL`` pointing at the same Prefect server and this package
    installed. Without one, Prefect's ``ThreadPoolTaskRunner`` (its default) in this process.

    Example:
        >>> collect.with_options(task_runner=task_runner("tcp://10.0.0.5:8786"))(params)  # doctest: +SKIP

    Raises:
        ValueError: an address is given and prefect-dask is not installed.
    """
    address = address or os.environ.get(DASK_ADDRESS_ENV)
    if not address:
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner()
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ValueError(
            f"a Dask scheduler address ({address}) needs prefect-dask: "
            "pip install 'knowlyr-gym[dask]', or unset $KNOWLYR_DASK_ADDRESS to run in threads"
        ) from None
    return DaskTaskRunner(address=address)
