"""``EngineeringEnv`` (``knowlyr/engineering``): questions about a repository and a knowledge base.

The task's repository is a real workspace in a sandbox (a git repository on the local
backend): the agent inspects it with ``read_file``, ``grep``, ``git`` and ``bash``, searches
the team's ``knowledge_base`` and ends with ``respond``. The answer is checked like every
knowledge task (:func:`knowlyr.taskset.knowledge.evaluate_knowledge`).

Example:
    >>> import knowlyr
    >>> env = knowlyr.make("knowlyr/engineering", family="config_lookup")  # doctest: +SKIP
    >>> ts = env.reset(seed=0)  # doctest: +SKIP
    >>> grep = {"tool": "grep", "params": {"pattern": "^port:"}}
    >>> env.step(grep).observation.count("config.yaml")  # doctest: +SKIP
    4
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowlyr.core.profile import DomainProfile
from knowlyr.envs.conversation import KnowledgeEnv
from knowlyr.envs.workspace import WorkspaceCache, sandbox_config
from knowlyr.sandbox import Sandbox, SandboxConfig
from knowlyr.sandbox import tools as sandbox_tools
from knowlyr.taskset import Split, Suite, Task

__all__ = ["EngineeringEnv"]


class EngineeringEnv(KnowledgeEnv):
    """A repository in a sandbox plus a knowledge base; answer with ``respond``.

    Args:
        sandbox: a :class:`~knowlyr.sandbox.SandboxConfig` or a dict of its fields.
        snapshot_cache: how many task workspaces to keep snapshots of.
        family, split, tasks, suite, profile: see :class:`~knowlyr.envs.base.TaskEnv`.
    """

    domain = "engineering"
    _by_name = {  # noqa: RUF012 - class-level tool table
        **KnowledgeEnv._by_name,
        "read_file": sandbox_tools.read_file,
        "grep": sandbox_tools.grep,
        "git": sandbox_tools.git,
        "bash": sandbox_tools.bash,
    }

    def __init__(
        self,
        *,
        suite: str | Suite | None = None,
        family: str | Sequence[str] | None = None,
        split: Split | None = None,
        tasks: Sequence[Task] | None = None,
        profile: str | DomainProfile | None = None,
        sandbox: SandboxConfig | dict[str, Any] | None = None,
        snapshot_cache: int = 256,
    ):
        super().__init__(suite=suite, family=family, split=split, tasks=tasks, profile=profile)
        self.workspaces = WorkspaceCache(sandbox_config(sandbox), size=snapshot_cache, git=True)
        self.sandbox: Sandbox | None = None

    def _start(self, task: Task) -> None:
        super()._start(task)
        self.sandbox = self.workspaces.prepare(task)

    def _context(self) -> dict[str, Any]:
        return {"state": self.state, "sandbox": self.sandbox}

    def close(self) -> None:
        self.workspaces.close()
        self.sandbox = None
