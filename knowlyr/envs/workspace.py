"""Fast episode resets: one sandbox per env, one workspace snapshot per task.

The first episode of a task writes its files into the sandbox (and commits them into a git
repository with fixed dates, then replays the commits of ``task.data["history"]``, so
``git diff`` / ``git log`` work and commit ids are the same in every run), then snapshots
the workspace. Every later episode of
that task restores the snapshot instead: a reset costs one ``restore``. A task whose
``data["sandbox"]`` asks for another backend or image gets a fresh sandbox.
"""

from __future__ import annotations

import os
import shlex
from collections import OrderedDict
from typing import Any

from knowlyr.errors import ConfigError, SandboxError
from knowlyr.sandbox import Sandbox, SandboxConfig, create_sandbox
from knowlyr.taskset import Task

__all__ = ["GIT_INIT", "WorkspaceCache", "sandbox_config"]

_GIT_ENV = (
    "export GIT_AUTHOR_NAME=knowlyr GIT_COMMITTER_NAME=knowlyr "
    "GIT_AUTHOR_EMAIL=knowlyr@example.com GIT_COMMITTER_EMAIL=knowlyr@example.com"
)
GIT_INIT = (
    f"{_GIT_ENV} GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z; "
    "git init -q -b main . && git add -A && git commit -qm 'Initial import'"
)


def sandbox_config(config: SandboxConfig | dict[str, Any] | None) -> SandboxConfig:
    """A :class:`SandboxConfig` from a config, a dict of its fields, or ``None`` (defaults)."""
    if config is None:
        return SandboxConfig()
    if isinstance(config, SandboxConfig):
        return config
    if isinstance(config, dict):
        try:
            return SandboxConfig(**config)
        except Exception as e:
            raise ConfigError(f"sandbox config {config!r} is invalid: {e}") from e
    raise ConfigError(
        f"sandbox must be a SandboxConfig or a dict of its fields, got {type(config).__name__}"
    )


def _fix_root_mode(sb: Sandbox) -> None:
    """Give the workspace root back its mode after a restore.

    The local backend's restore puts back the files but not the root directory's own mode, so
    an agent that ran ``chmod 000 .`` would lock every later episode out of the workspace.
    This is a one-syscall workaround on the host path until the backend restores it itself.
    """
    root = getattr(sb, "workspace", None)
    if root is None:
        return
    try:
        if os.stat(root).st_mode & 0o777 != 0o755:
            os.chmod(root, 0o755)
    except OSError:
        pass


class WorkspaceCache:
    """A sandbox plus a snapshot per task (least recently used beyond ``size`` are forgotten).

    Args:
        config: the sandbox config; a task's ``data["sandbox"]`` overrides its fields.
        size: how many task snapshots to keep.
        git: initialise a git repository in each new workspace.
    """

    def __init__(self, config: SandboxConfig, *, size: int = 256, git: bool = True):
        if size < 1:
            raise ConfigError(f"snapshot cache size must be >= 1, got {size}")
        self.config = config
        self.size = size
        self.git = git
        self.sandbox: Sandbox | None = None
        self._key: tuple[Any, ...] | None = None
        self._snapshots: OrderedDict[str, str] = OrderedDict()
        self._empty: str | None = None

    def _config_for(self, task: Task) -> SandboxConfig:
        override = task.data.get("sandbox") or {}
        return self.config.model_copy(update=override) if override else self.config

    def prepare(self, task: Task) -> Sandbox:
        """The sandbox, its workspace holding exactly ``task``'s initial files."""
        cfg = self._config_for(task)
        key = (cfg.backend, cfg.image, cfg.workdir)
        if self.sandbox is None or key != self._key:
            self.close()
            if cfg.backend == "container":
                # a container gets the task's files in one go; its snapshot is per task
                self.sandbox = create_sandbox(cfg, files=task.files)
                self._key = key
                self._init_git(self.sandbox, task)
                self._snapshots[task.task_id] = self.sandbox.snapshot()
                return self.sandbox
            self.sandbox = create_sandbox(cfg)
            self._key = key
            self._empty = self.sandbox.snapshot()
        sb = self.sandbox
        sid = self._snapshots.get(task.task_id)
        if sid is not None:
            sb.restore(sid)
            _fix_root_mode(sb)
            self._snapshots.move_to_end(task.task_id)
            return sb
        if cfg.backend == "container":
            self.close()
            return self.prepare(task)
        sb.restore(self._empty)
        _fix_root_mode(sb)
        for path, text in task.files.items():
            sb.write_file(path, text)
        self._init_git(sb, task)
        self._snapshots[task.task_id] = sb.snapshot()
        while len(self._snapshots) > self.size:
            self._snapshots.popitem(last=False)
        return sb

    def _init_git(self, sb: Sandbox, task: Task) -> None:
        """Commit the initial files, then each commit of ``task.data["history"]`` in order."""
        if not (self.git and task.files):
            return
        self._git(sb, task, GIT_INIT)
        for i, commit in enumerate(task.data.get("history") or [], start=1):
            for path, text in commit["files"].items():
                sb.write_file(path, text)
            date = f"2026-01-{1 + i:02d}T00:00:00Z"
            self._git(
                sb,
                task,
                f"{_GIT_ENV} GIT_AUTHOR_DATE={date} GIT_COMMITTER_DATE={date}; "
                f"git commit -qam {shlex.quote(commit['message'])}",
            )

    @staticmethod
    def _git(sb: Sandbox, task: Task, cmd: str) -> None:
        r = sb.exec(cmd)
        if not r.ok:
            raise SandboxError(
                f"git setup of the workspace of {task.task_id} failed: {r.output.strip()}"
            )

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        self.sandbox = None
        self._key = None
        self._empty = None
        self._snapshots.clear()
