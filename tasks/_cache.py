"""The stage cache policy: stage + parameters + input store versions + library version.

The stores themselves count by identity (a store deleted and re-created at the same path is
a new store), so a cached manifest never points into a store that is gone.

Every stage task takes small, JSON-able inputs: parameters (pydantic models, numbers,
strings) and the *manifests* of the store versions it reads (table name, version, row
count, ids). Hashing those inputs therefore hashes the input versions, never the data, and a
re-run with unchanged inputs is a cache hit; when an upstream stage writes a new version, its
manifest changes and every task downstream of it recomputes, while stages upstream stay
cached. The library version and the task's own source are part of the key, so a release or
an edited task never serves a stale result.

Stage runs are isolated (``SERIALIZABLE``, Prefect's cache locking): two flow runs that reach
the same stage with the same key, e.g. two identical runs of a deployment, never compute it
twice; the second waits for the first's lock and reads its result. Locks are files under
``$PREFECT_HOME/locks`` (shared by the flow-run processes of one machine); a lock whose holder
process died (``kill -9``) is broken by the next run that needs it.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import socket
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePath
from typing import Any

import orjson
from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext
from prefect.locking.filesystem import FileSystemLockManager

import knowlyr

__all__ = [
    "STAGE_CACHE",
    "StageCachePolicy",
    "StageLockManager",
    "canonical",
    "stage_key",
    "store_urls",
]


def canonical(value: Any) -> Any:
    """A JSON-able, order-independent form of a task input (pydantic models, paths, enums)."""
    if hasattr(value, "model_dump"):
        return canonical(value.model_dump(mode="json"))
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(canonical(v) for v in value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Enum):
        return canonical(value.value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(
        f"task input of type {type(value).__name__} cannot be part of a cache key: pass "
        "parameters and store manifests to stage tasks, not live objects or data"
    )


_STORE_KEYS = ("store", "store_url")


def store_urls(value: Any) -> set[str]:
    """The store URLs in canonical task inputs: ``store_url`` parameters and the ``store`` of
    every manifest."""
    out: set[str] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, item in v.items():
                if k in _STORE_KEYS and isinstance(item, str) and item:
                    out.add(item)
                else:
                    stack.append(item)
        elif isinstance(v, list):
            stack.extend(v)
    return out


def stage_key(stage: str, inputs: dict[str, Any], *, source: str = "") -> str:
    """The cache key of ``stage`` run on ``inputs`` with this library version.

    Every store the inputs name counts by its :attr:`~knowlyr.store.Store.identity`, not
    only its URL: a store deleted and created again at the same path is a different store,
    and results cached against the old one (manifests of versions that are gone) are not
    served for it.

    Example:
        >>> stage_key("export", {"kind": "sft"}) == stage_key("export", {"kind": "sft"})
        True
    """
    from knowlyr.store import Store

    canon = canonical(inputs)
    payload = {
        "stage": stage,
        "inputs": canon,
        "stores": {url: Store.open(url).identity for url in sorted(store_urls(canon))},
        "knowlyr": knowlyr.__version__,
        "source": hashlib.sha256(source.encode()).hexdigest() if source else "",
    }
    digest = hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"{stage}-{digest[:40]}"


_SOURCES: dict[int, str] = {}


def _task_source(task_ctx: TaskRunContext) -> str:
    fn = task_ctx.task.fn
    key = id(fn)
    if key not in _SOURCES:
        try:
            _SOURCES[key] = inspect.getsource(fn)
        except (OSError, TypeError):
            _SOURCES[key] = fn.__code__.co_code.hex()
    return _SOURCES[key]


@dataclass
class StageCachePolicy(CachePolicy):
    """Cache a stage task on its name, inputs (parameters + manifests), source and knowlyr version.

    Unlike Prefect's ``INPUTS`` alone, two different stages given equal inputs never share a
    result, because the stage name and source are part of the key.
    """

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        if task_ctx is None:
            return None
        return stage_key(task_ctx.task.name, inputs or {}, source=_task_source(task_ctx))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class StageLockManager(FileSystemLockManager):
    """Prefect's file lock manager under ``$PREFECT_HOME/locks`` (read when a lock is taken, so
    a test's temporary settings apply), which also records the holder's host and process and
    breaks a lock whose holder process on this host is gone."""

    def __init__(self) -> None:
        self._locks = {}

    @property
    def lock_files_directory(self) -> Path:
        from prefect.settings import PREFECT_HOME

        return Path(PREFECT_HOME.value()).expanduser().resolve() / "locks"

    @lock_files_directory.setter
    def lock_files_directory(self, value: Path) -> None:  # the base class assigns it
        pass

    def _lock_path_for_key(self, key: str) -> Path:
        return self.lock_files_directory.joinpath(key).with_suffix(".lock")

    def acquire_lock(self, key, holder, acquire_timeout=None, hold_timeout=None) -> bool:
        if not super().acquire_lock(key, holder, acquire_timeout, hold_timeout):
            return False
        info = self._locks[key]
        expiration = info["expiration"]
        info.update(host=socket.gethostname(), pid=os.getpid())
        self._lock_path_for_key(key).write_bytes(
            orjson.dumps(
                {"holder": holder, "expiration": None if expiration is None else str(expiration),
                 "host": info["host"], "pid": info["pid"]}
            )
        )  # fmt: skip
        return True

    def is_locked(self, key: str, use_cache: bool = False) -> bool:
        info = self._get_lock_info(key, use_cache=use_cache)
        if info is None:
            return False
        if info.get("host") == socket.gethostname() and not _alive(int(info.get("pid") or 0)):
            Path(info["path"]).unlink(missing_ok=True)  # the holder was killed: a stale lock
            self._locks.pop(key, None)
            return False
        return super().is_locked(key, use_cache=use_cache)


STAGE_CACHE = StageCachePolicy().configure(
    isolation_level="SERIALIZABLE", lock_manager=StageLockManager()
)
