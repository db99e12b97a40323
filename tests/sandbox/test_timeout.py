"""TimeoutWrapper pre-empts a step that runs a sandbox command: the step returns when the
episode's time runs out and the command (every process of it) is killed (issue #17)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import knowlyr
from knowlyr.core import AgentEnv, TimeoutWrapper, TimeStep
from knowlyr.sandbox import Sandbox
from knowlyr.sandbox.local import LocalSandbox


class ShellEnv(AgentEnv):
    """Runs each action's ``command`` in ``self.sandbox`` (as coding envs do)."""

    available_tools = ["bash"]  # noqa: RUF012

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    def reset(self, *, task: Any = None, seed: int | None = None, options: Any = None) -> TimeStep:
        return TimeStep(observation="go")

    def step(self, action: dict[str, Any]) -> TimeStep:
        r = self.sandbox.exec(action["params"]["command"])
        return TimeStep(observation=r.output, info={"exit_code": r.exit_code})


def _running(sb: Sandbox, marker: str) -> bool:
    if isinstance(sb, LocalSandbox):
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    if marker.encode() in (p / "cmdline").read_bytes():
                        return True
                except OSError:
                    pass
        return False
    return marker in sb.exec("ps -eo args=").stdout


def test_a_2s_sandbox_step_under_a_half_second_timeout_is_cut_off_and_killed(make_sandbox):
    marker = f"knowlyr-timeout-{uuid.uuid4().hex}"
    sb = make_sandbox(timeout_s=30)
    w = TimeoutWrapper(ShellEnv(sb), 0.5)
    w.reset()
    # a tree: the sleeping python and a setsid'd grandchild
    cmd = f"setsid sleep 30 {marker} & python3 -c 'import time; time.sleep(2)' {marker}; echo done"
    t0 = time.monotonic()
    ts = w.step({"tool": "bash", "params": {"command": cmd}})
    took = time.monotonic() - t0
    assert took < 1.5, f"a 2 s step under a 0.5 s timeout took {took:.2f} s"
    assert ts.truncated and ts.info["truncated_by"] == "timeout" and ts.info["exit_code"] == 124
    assert "done" not in ts.observation
    w.reset()  # waits for the cut-off step, clears the deadline
    assert sb.deadline is None
    end = time.monotonic() + 2
    while _running(sb, marker) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _running(sb, marker), "the command outlived its cut-off step"
    assert sb.exec("echo again").stdout == "again\n"  # the sandbox itself is fine


def test_a_command_started_after_the_deadline_does_not_run(make_sandbox):
    sb = make_sandbox()
    sb.deadline = time.monotonic() - 1
    r = sb.exec("echo ran > ran.txt")
    assert r.timed_out and r.exit_code == 124 and "deadline" in r.stderr
    sb.deadline = None
    assert sb.exec("ls ran.txt").exit_code != 0


def test_sandbox_env_bash_is_pre_empted():
    env = TimeoutWrapper(knowlyr.make("knowlyr/sandbox"), 0.5)
    try:
        env.reset(seed=0)
        t0 = time.monotonic()
        ts = env.step({"tool": "bash", "params": {"command": "sleep 2; echo done"}})
        assert time.monotonic() - t0 < 1.5
        assert ts.truncated and ts.info["truncated_by"] == "timeout"
        assert "done" not in ts.observation
    finally:
        env.close()
