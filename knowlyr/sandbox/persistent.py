"""Sandboxes that live across calls, by id: create, run tools, reset, snapshot, replay, remove.

:class:`SandboxManager` keeps sandboxes open between calls (an MCP server's clients, the
``knowlyr sandbox`` keeper process) under two limits: how many may be open at once, and how
long one may sit unused before it is closed. Every sandbox is snapshotted when it is made, so
:meth:`~SandboxManager.reset` puts it back to that state. :meth:`~SandboxManager.close_all`
closes every one of them; an owner killed before it could (``kill -9``) leaves sandboxes that
the next sandbox start, or ``knowlyr sandbox gc``, reaps by their owner lock
(:func:`knowlyr.sandbox.reap_orphans`).

Calls on one sandbox run one at a time; calls on different sandboxes run in parallel.

Example:
    >>> mgr = SandboxManager(max_sandboxes=4, idle_timeout_s=600)
    >>> info = mgr.create(files={"a.py": "print(6 * 7)"})  # doctest: +SKIP
    >>> mgr.execute(info.id, "bash", {"command": "python3 a.py"}).output  # doctest: +SKIP
    '42\\n'
    >>> mgr.close_all()
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from knowlyr.errors import ConfigError, SandboxError
from knowlyr.sandbox.base import Sandbox, SandboxConfig

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from knowlyr.core.tools import ToolResult
    from knowlyr.sandbox.replay import ReplayReport
    from knowlyr.trajectory import Trajectory

__all__ = ["SandboxInfo", "SandboxManager", "UnknownSandboxError"]

log = logging.getLogger("knowlyr.sandbox")


class UnknownSandboxError(SandboxError, KeyError):
    """No open sandbox has this id (never made, removed, or closed after its idle timeout)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(slots=True)
class SandboxInfo:
    """What a caller sees of one open sandbox."""

    id: str
    backend: str
    created_at: float
    last_used: float
    initial_snapshot: str
    snapshots: list[str] = field(default_factory=list)
    busy: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "backend": self.backend,
            "created_at": self.created_at,
            "last_used": self.last_used,
            "idle_s": round(time.time() - self.last_used, 3),
            "initial_snapshot": self.initial_snapshot,
            "snapshots": list(self.snapshots),
            "busy": self.busy,
        }


@dataclass(slots=True)
class _Entry:
    sandbox: Sandbox
    info: SandboxInfo
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0  # calls holding or waiting for the lock: never closed as idle meanwhile


class SandboxManager:
    """Open sandboxes by id, with a count limit and an idle timeout.

    Args:
        max_sandboxes: most sandboxes open at once; :meth:`create` beyond it is refused.
        idle_timeout_s: a sandbox unused this long is closed (checked by a background thread
            and on every :meth:`create`); ``0`` or ``None`` keeps them until removed.
        default_config: the config of sandboxes made without one.
    """

    def __init__(
        self,
        *,
        max_sandboxes: int = 8,
        idle_timeout_s: float | None = 900.0,
        default_config: SandboxConfig | None = None,
    ):
        if max_sandboxes < 1:
            raise ConfigError(f"max_sandboxes must be >= 1, got {max_sandboxes}")
        if idle_timeout_s is not None and idle_timeout_s < 0:
            raise ConfigError(f"idle_timeout_s must be >= 0, got {idle_timeout_s}")
        self.max_sandboxes = max_sandboxes
        self.idle_timeout_s = idle_timeout_s or None
        self.default_config = default_config or SandboxConfig()
        self._entries: dict[str, _Entry] = {}
        self._pending = 0  # creations under way (they count against the limit)
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None
        if self.idle_timeout_s:
            self._reaper = threading.Thread(
                target=self._reap_loop, name="knowlyr-sandbox-idle-reaper", daemon=True
            )
            self._reaper.start()

    # -- lifecycle -----------------------------------------------------------------------
    def create(
        self,
        config: SandboxConfig | None = None,
        *,
        files: Mapping[str, str | bytes] | None = None,
    ) -> SandboxInfo:
        """Open a sandbox with ``files`` in its workspace and snapshot it; returns its info.

        Raises:
            SandboxError: the manager is closed, or ``max_sandboxes`` are open already
                (remove one, or wait for an idle one to be closed).
            BackendUnavailableError: the backend cannot run here (the message has the fix).
        """
        from knowlyr.sandbox import create_sandbox

        self.reap_idle()
        with self._lock:
            self._check_open()
            if len(self._entries) + self._pending >= self.max_sandboxes:
                idle = (
                    f", wait until one has been idle {self.idle_timeout_s:g}s (it is closed then)"
                    if self.idle_timeout_s
                    else ""
                )
                raise SandboxError(
                    f"{len(self._entries) + self._pending} sandboxes are open, the limit is "
                    f"{self.max_sandboxes}: close one (`knowlyr sandbox rm ID`){idle}, or raise "
                    "the limit (--max-sandboxes)"
                )
            self._pending += 1
        try:
            sb = create_sandbox(config or self.default_config, files=dict(files or {}))
            try:
                initial = sb.snapshot()
            except BaseException:
                sb.close()
                raise
        finally:
            with self._lock:
                self._pending -= 1
        now = time.time()
        info = SandboxInfo(
            id=f"sb-{secrets.token_hex(6)}",
            backend=sb.config.backend,
            created_at=now,
            last_used=now,
            initial_snapshot=initial,
        )
        with self._lock:
            if self._closed:  # closed while it was being made
                sb.close()
                self._check_open()
            self._entries[info.id] = _Entry(sb, info)
        log.info("opened sandbox %s (%s)", info.id, info.backend)
        return info

    def remove(self, sandbox_id: str) -> None:
        """Close sandbox ``sandbox_id`` (after the call running in it, if any) and forget it."""
        entry = self._claim(sandbox_id)
        try:
            with entry.lock:
                with self._lock:
                    self._entries.pop(sandbox_id, None)
                entry.sandbox.close()
        finally:
            self._release(entry)
        log.info("closed sandbox %s", sandbox_id)

    def close_all(self) -> None:
        """Close every sandbox and refuse new ones. Idempotent."""
        self._stop.set()
        with self._lock:
            self._closed = True
            entries = list(self._entries.values())
            self._entries.clear()
        for e in entries:
            try:
                e.sandbox.close()
            except Exception as exc:  # close the others anyway
                log.warning("closing sandbox %s failed: %s", e.info.id, exc)

    def reap_idle(self) -> list[str]:
        """Close the sandboxes unused for longer than the idle timeout; returns their ids."""
        if not self.idle_timeout_s:
            return []
        cutoff = time.time() - self.idle_timeout_s
        with self._lock:
            idle = [
                self._entries.pop(sid)
                for sid, e in list(self._entries.items())
                if e.users == 0 and e.info.last_used < cutoff
            ]
        for e in idle:
            e.sandbox.close()
            log.info("closed sandbox %s: idle for %.0fs", e.info.id, self.idle_timeout_s)
        return [e.info.id for e in idle]

    # -- calls on one sandbox -------------------------------------------------------------
    def info(self, sandbox_id: str) -> SandboxInfo:
        """The info of an open sandbox (does not count as a use)."""
        with self._lock:
            e = self._entries.get(sandbox_id)
            if e is None:
                raise self._unknown(sandbox_id)
            e.info.busy = e.lock.locked()
            return e.info

    def list(self) -> list[SandboxInfo]:
        """The open sandboxes, oldest first."""
        with self._lock:
            for e in self._entries.values():
                e.info.busy = e.lock.locked()
            return sorted((e.info for e in self._entries.values()), key=lambda i: i.created_at)

    def execute(
        self, sandbox_id: str, tool: str, params: Mapping[str, Any] | None = None
    ) -> ToolResult:
        """Run one coding tool (``bash``, ``read_file``, ``write_file``, ``edit_file``,
        ``grep``, ``git``, ``submit``) in the sandbox. A failing tool is a result, not an error."""
        from knowlyr.sandbox.tools import coding_toolbox

        return self._with(
            sandbox_id, lambda sb: coding_toolbox().call(tool, dict(params or {}), sandbox=sb)
        )

    def reset(self, sandbox_id: str, snapshot: str | None = None) -> str:
        """Put the workspace back as it was at ``snapshot`` (default: when it was made);
        returns the snapshot restored."""

        def run(sb: Sandbox) -> str:
            target = snapshot or self._entries_info(sandbox_id).initial_snapshot
            info = self._entries_info(sandbox_id)
            if target != info.initial_snapshot and target not in info.snapshots:
                known = ", ".join([info.initial_snapshot, *info.snapshots])
                raise SandboxError(
                    f"sandbox {sandbox_id} has no snapshot {target!r}; its snapshots: {known}"
                )
            sb.restore(target)
            return target

        return self._with(sandbox_id, run)

    def snapshot(self, sandbox_id: str) -> str:
        """Save the workspace as it is now; returns the snapshot id :meth:`reset` takes."""

        def run(sb: Sandbox) -> str:
            sid = sb.snapshot()
            self._entries_info(sandbox_id).snapshots.append(sid)
            return sid

        return self._with(sandbox_id, run)

    def replay(
        self,
        sandbox_id: str,
        trajectory: Trajectory,
        *,
        reset: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> ReplayReport:
        """Re-run ``trajectory``'s actions in the sandbox (after a :meth:`reset` to its
        creation snapshot unless ``reset=False``) and compare the observations step by step."""
        from knowlyr.sandbox.replay import replay_trajectory

        def run(sb: Sandbox) -> ReplayReport:
            if reset:
                sb.restore(self._entries_info(sandbox_id).initial_snapshot)
            return replay_trajectory(sb, trajectory, progress=progress)

        return self._with(sandbox_id, run)

    # -- internals -----------------------------------------------------------------------
    def _unknown(self, sandbox_id: str) -> UnknownSandboxError:
        idle = f" or closed after {self.idle_timeout_s:g}s idle" if self.idle_timeout_s else ""
        return UnknownSandboxError(  # other callers' ids are not listed: an id is a capability
            f"no open sandbox {sandbox_id!r} (never created, removed{idle}); "
            "create one with create_sandbox / `knowlyr sandbox create`"
        )

    def _entries_info(self, sandbox_id: str) -> SandboxInfo:
        with self._lock:
            return self._entries[sandbox_id].info

    def _claim(self, sandbox_id: str) -> _Entry:
        with self._lock:
            self._check_open()
            e = self._entries.get(sandbox_id)
            if e is None:
                raise self._unknown(sandbox_id)
            e.users += 1
            return e

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.users -= 1
            entry.info.last_used = time.time()

    def _with(self, sandbox_id: str, fn: Callable[[Sandbox], Any]) -> Any:
        entry = self._claim(sandbox_id)
        try:
            with entry.lock:
                with self._lock:
                    if self._entries.get(sandbox_id) is not entry:  # removed while we waited
                        raise self._unknown(sandbox_id)
                return fn(entry.sandbox)
        finally:
            self._release(entry)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox manager is closed; make a new SandboxManager")

    def _reap_loop(self) -> None:
        assert self.idle_timeout_s
        period = min(max(self.idle_timeout_s / 4, 0.05), 30.0)
        while not self._stop.wait(period):
            try:
                self.reap_idle()
            except Exception as e:  # keep reaping later
                log.warning("closing idle sandboxes failed: %s", e)

    def __enter__(self) -> SandboxManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
