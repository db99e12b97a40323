"""The sandbox protocol: every backend implements :class:`Sandbox`.

``exec`` never raises for a failing command: a non-zero exit, a timeout or a killed process
is reported in the :class:`ExecResult`. Exceptions (:class:`~knowlyr.errors.SandboxError`)
are for a backend that cannot create or reach its sandbox.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ExecResult", "Sandbox", "SandboxConfig", "past_deadline"]


@dataclass(slots=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str = ""
    duration_s: float = 0.0
    timed_out: bool = False
    truncated: bool = False

    @property
    def output(self) -> str:
        """stdout and stderr as one text, the way a terminal would show them."""
        if self.stderr and self.stdout:
            return f"{self.stdout.rstrip(chr(10))}\n{self.stderr}"
        return self.stdout or self.stderr

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SandboxConfig(BaseModel):
    """Limits and backend choice for a sandbox. Every field has a default."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "container"] = Field(
        "local", description="'local' (bubblewrap) or 'container' (Docker API)."
    )
    image: str = Field(
        "knowlyr-sandbox:latest", description="Container image (container backend only)."
    )
    timeout_s: float = Field(30.0, gt=0, description="Default wall-clock limit of one command.")
    cpus: float = Field(
        1.0, gt=0, description="CPU cores a container may use (container backend: nano_cpus)."
    )
    cpu_time_s: int = Field(60, gt=0, description="CPU-seconds rlimit per command.")
    memory_mb: int = Field(1024, gt=0, description="Address-space / memory limit.")
    max_processes: int = Field(256, gt=0, description="Process-count limit.")
    max_file_mb: int = Field(64, gt=0, description="Largest file a command may write.")
    disk_mb: int | None = Field(
        1024,
        gt=0,
        description="Disk quota of the sandbox's writable directories (workspace and /tmp, in a "
        "container also /var/tmp) together: a file system of this size (a loop-mounted ext4 "
        "image, needs root; skipped with a logged reason elsewhere). A command that fills it "
        "fails with 'No space left on device' and its result says the quota is full. "
        "None: no quota (the host disk's free space is the limit).",
    )
    max_output_chars: int = Field(
        20_000, gt=0, description="Longer command output is truncated with a marker."
    )
    workdir: str = Field("/workspace", description="Workspace path inside the sandbox.")
    seccomp: bool = Field(
        True,
        description="Local backend: a seccomp filter denies namespaces, mounts, the keyring, "
        "ptrace and kernel-level system calls (knowlyr.sandbox.seccomp); turn it off only for "
        "tasks that need e.g. a debugger. Containers use their engine's default profile.",
    )


class Sandbox(abc.ABC):
    """An isolated workspace where an agent's commands run.

    ``deadline`` (a ``time.monotonic()`` instant, or None) bounds every :meth:`exec`, whatever
    its own timeout: a command still running then is killed like one that ran past its
    timeout, and one started after it returns at once as timed out, without running.
    :class:`~knowlyr.core.wrappers.TimeoutWrapper` sets it from another thread to pre-empt a
    step. File operations, snapshots and restores ignore it.
    """

    config: SandboxConfig
    deadline: float | None = None

    @abc.abstractmethod
    def exec(
        self, cmd: str, *, timeout: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        """Run ``cmd`` with ``bash -lc`` in the workspace; never raises for a failing command."""

    @abc.abstractmethod
    def read_file(self, path: str) -> bytes:
        """Bytes of a workspace file (``path`` relative to the workspace or absolute inside it)."""

    @abc.abstractmethod
    def write_file(self, path: str, data: bytes | str) -> None:
        """Create or overwrite a workspace file, creating parent directories."""

    @abc.abstractmethod
    def snapshot(self) -> str:
        """Save the workspace; returns an id that :meth:`restore` takes."""

    @abc.abstractmethod
    def restore(self, snapshot_id: str) -> None:
        """Put the workspace back exactly as it was at ``snapshot``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Destroy the sandbox and everything in it. Idempotent."""

    def _limit(self, timeout: float | None) -> float:
        """An exec's wall-clock limit: ``timeout`` (or the config's), capped by ``deadline``;
        <= 0 when the deadline has passed."""
        limit = self.config.timeout_s if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        deadline = self.deadline
        if deadline is not None:
            limit = min(limit, deadline - time.monotonic())
        return limit

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def past_deadline() -> ExecResult:
    """What :meth:`Sandbox.exec` returns for a command started after the sandbox's deadline."""
    return ExecResult(
        124,
        "",
        "[not run: the sandbox's deadline had passed (the step's time ran out)]\n",
        0.0,
        True,
    )
