"""``SandboxEnv`` (``knowlyr/sandbox``): coding tasks in an isolated workspace.

The agent works with the coding tools (``read_file``, ``write_file``, ``edit_file``,
``bash``, ``grep``, ``git``, ``think``, ``submit``) on a workspace holding the task's files.
``submit`` ends the episode: the hidden tests are written into the workspace only then and
run inside the sandbox, and the outcome carries ``tests_passed`` / ``tests_failed``. For a
SWE-bench instance the ``test_patch`` is applied first and every ``FAIL_TO_PASS`` and
``PASS_TO_PASS`` test must pass.

Resets restore a per-task workspace snapshot (:class:`~knowlyr.envs.workspace.WorkspaceCache`),
so running many episodes of the same tasks costs one restore each.

Example:
    >>> import knowlyr
    >>> env = knowlyr.make("knowlyr/sandbox", split="heldout")  # doctest: +SKIP
    >>> ts = env.reset(seed=0)  # doctest: +SKIP
    >>> run = {"tool": "bash", "params": {"command": "python3 run_tests.py tests"}}
    >>> env.step(run).info["exit_code"]  # doctest: +SKIP
    1
    >>> env.step({"tool": "submit", "params": {}}).info["outcome"]["tests_failed"]  # doctest: +SKIP
    2
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowlyr.core.profile import DomainProfile
from knowlyr.core.tools import Toolbox, ToolResult
from knowlyr.envs.base import TaskEnv
from knowlyr.envs.conversation import think
from knowlyr.envs.workspace import WorkspaceCache, sandbox_config
from knowlyr.errors import SandboxError
from knowlyr.sandbox import Sandbox, SandboxConfig, coding_toolbox
from knowlyr.taskset import Split, Suite, Task
from knowlyr.taskset.coding import HIDDEN_DIR
from knowlyr.taskset.swebench import apply_patch, parse_test_results, patch_paths
from knowlyr.taskset.testrunner import parse_summary

__all__ = ["SandboxEnv", "grade_in_sandbox"]


def grade_in_sandbox(task: Task, sb: Sandbox, *, timeout_s: float = 20.0) -> dict[str, Any]:
    """Write the hidden tests into ``sb``, run ``task.test_command`` there and judge it.

    Returns:
        ``success``, ``score`` (share of tests passed), ``tests_passed``, ``tests_failed``,
        ``test_output`` (the tail of the run) and ``timed_out``.
    """
    swe = bool(task.data.get("swebench"))
    n_expected = (
        len(task.data["FAIL_TO_PASS"]) + len(task.data["PASS_TO_PASS"])
        if swe
        else int(task.data.get("n_hidden", 0)) or 1
    )

    def fail(reason: str) -> dict[str, Any]:
        return {
            "success": False,
            "score": 0.0,
            "tests_passed": 0,
            "tests_failed": n_expected,
            "reason": reason,
        }

    try:
        sb.exec(f"rm -rf {HIDDEN_DIR}")  # nothing the agent left there is run
        files = dict(task.hidden_tests)
        if swe:
            test_patch = task.data["test_patch"]
            current: dict[str, str] = {}
            for p in patch_paths(test_patch):
                try:
                    current[p] = sb.read_file(p).decode("utf-8", "replace")
                except (OSError, SandboxError):
                    continue  # missing (or made unreadable by the agent): the patch decides
            try:
                patched = apply_patch(current, test_patch)
            except ValueError as e:
                return fail(f"test_patch: {e}")
            files.update({p: text for p, text in patched.items() if text is not None})
        for path, text in files.items():
            sb.write_file(path, text)
    except (OSError, SandboxError) as e:  # the agent broke the workspace: a failed episode
        return fail(f"could not set up the hidden tests: {type(e).__name__}: {e}")
    try:
        r = sb.exec(task.test_command, timeout=timeout_s)
    except SandboxError as e:
        return fail(f"the hidden tests could not run: {e}")
    if swe:
        results = parse_test_results(r.stdout)
        wanted = task.data["FAIL_TO_PASS"] + task.data["PASS_TO_PASS"]
        passed = sum(results.get(t) == "PASSED" for t in wanted)
        failed = len(wanted) - passed
        expected = len(wanted)
    else:
        summary = parse_summary(r.stdout)
        expected = int(task.data.get("n_hidden", 0)) or None
        if summary is None:
            passed, failed = 0, expected or 1
        else:
            passed, failed = summary
    total = passed + failed
    success = (
        failed == 0 and passed > 0 and (expected is None or passed == expected) and not r.timed_out
    )
    return {
        "success": success,
        "score": round(passed / total, 4) if total else 0.0,
        "tests_passed": passed,
        "tests_failed": failed,
        "test_output": r.output[-2000:],
        "timed_out": r.timed_out,
    }


class SandboxEnv(TaskEnv):
    """Coding tasks in a sandbox; the outcome is the hidden tests run after ``submit``.

    Args:
        suite: default ``coding``; tasks may also come from :func:`knowlyr.taskset.load_swebench`
            (pass ``tasks=``), which run in the container backend.
        family, split, tasks, profile: see :class:`~knowlyr.envs.base.TaskEnv`.
        sandbox: a :class:`~knowlyr.sandbox.SandboxConfig` or a dict of its fields
            (default: local backend, default limits).
        test_timeout_s: wall-clock limit of the hidden test run.
        snapshot_cache: how many task workspaces to keep snapshots of.
        git: make each workspace a git repository (commits with fixed dates).
    """

    domain = "coding"

    def __init__(
        self,
        *,
        suite: str | Suite | None = None,
        family: str | Sequence[str] | None = None,
        split: Split | None = None,
        tasks: Sequence[Task] | None = None,
        profile: str | DomainProfile | None = None,
        sandbox: SandboxConfig | dict[str, Any] | None = None,
        test_timeout_s: float = 20.0,
        snapshot_cache: int = 256,
        git: bool = True,
    ):
        super().__init__(suite=suite, family=family, split=split, tasks=tasks, profile=profile)
        self.sandbox_config = sandbox_config(sandbox)
        self.test_timeout_s = test_timeout_s
        self.workspaces = WorkspaceCache(self.sandbox_config, size=snapshot_cache, git=git)
        self.sandbox: Sandbox | None = None

    def _build_toolbox(self) -> Toolbox:
        return Toolbox([*coding_toolbox(), think])

    def _start(self, task: Task) -> None:
        self.sandbox = self.workspaces.prepare(task)

    def _context(self) -> dict[str, Any]:
        return {"sandbox": self.sandbox}

    def _outcome(self, tool: str, result: ToolResult) -> dict[str, Any]:
        return grade_in_sandbox(self.task, self.sandbox, timeout_s=self.test_timeout_s)

    def _final_observation(self, output: str, outcome: dict[str, Any]) -> str:
        if "tests_passed" not in outcome:
            return output
        passed, failed = outcome["tests_passed"], outcome["tests_failed"]
        return f"{output} Hidden tests: {passed} passed, {failed} failed."

    def _truncated_outcome(self) -> dict[str, Any]:
        return {"success": False, "score": 0.0, "reason": "not submitted"}

    def close(self) -> None:
        self.workspaces.close()
        self.sandbox = None
