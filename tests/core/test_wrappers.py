from __future__ import annotations

import time

import pytest

from knowlyr.core import (
    EpisodeStatisticsWrapper,
    MaxStepsWrapper,
    ObservationTruncateWrapper,
    RecorderWrapper,
    RewardWrapper,
    TimeoutWrapper,
    TimeStep,
)
from knowlyr.core.wrappers import truncate_middle
from knowlyr.trajectory import AgentInfo
from tests.core.stub_env import CounterEnv

ADD = {"tool": "add", "params": {"n": 1}}


def test_max_steps_truncates_exactly_at_the_limit(env):
    w = MaxStepsWrapper(env, 2)
    w.reset()
    assert not w.step(ADD).truncated
    ts = w.step(ADD)
    assert ts.truncated and not ts.terminated and ts.info["truncated_by"] == "max_steps"
    w.reset()
    assert not w.step(ADD).truncated  # counter resets with the episode


def test_max_steps_does_not_mark_a_terminated_step_truncated(env):
    w = MaxStepsWrapper(env, 1)
    w.reset()
    ts = w.step({"tool": "submit"})
    assert ts.terminated and not ts.truncated


@pytest.mark.parametrize("bad", [0, -1, 1.5, None])
def test_max_steps_validates(env, bad):
    with pytest.raises(ValueError, match=f"max_steps must be a positive int, got {bad!r}"):
        MaxStepsWrapper(env, bad)


def test_timeout_truncates_after_wall_clock_limit(env):
    now = [100.0]
    w = TimeoutWrapper(env, 2.5, clock=lambda: now[0])
    w.reset()
    now[0] += 2.0
    assert not w.step(ADD).truncated
    now[0] += 1.0
    ts = w.step(ADD)
    assert ts.truncated and ts.info["truncated_by"] == "timeout"
    w.reset()  # the clock restarts with the episode
    assert not w.step(ADD).truncated


@pytest.mark.parametrize("bad", [0, -3, "5"])
def test_timeout_validates(env, bad):
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        TimeoutWrapper(env, bad)


def test_reward_wrapper_replaces_or_adds():
    env = CounterEnv(reward_per_step=0.5)
    w = RewardWrapper(env, lambda action, ts: -0.1)
    w.reset()
    assert w.step(ADD).reward == pytest.approx(-0.1)
    w = RewardWrapper(CounterEnv(reward_per_step=0.5), lambda a, ts: 1.0, mode="add")
    w.reset()
    assert w.step(ADD).reward == pytest.approx(1.5)
    with pytest.raises(ValueError, match="mode must be"):
        RewardWrapper(env, lambda a, t: 0.0, mode="mul")
    with pytest.raises(ValueError, match="reward_fn must be callable"):
        RewardWrapper(env, 3)


def test_observation_truncate_keeps_head_and_tail_with_marker(env):
    w = ObservationTruncateWrapper(env, 100)
    w.reset()
    ts = w.step({"tool": "read", "params": {"size": 1000}})
    assert len(ts.observation) <= 100
    assert "900 characters truncated" in ts.observation
    assert truncate_middle("short", 100) == "short"
    with pytest.raises(ValueError, match="max_chars must be an int >= 64"):
        ObservationTruncateWrapper(env, 10)


def test_episode_statistics(env):
    w = EpisodeStatisticsWrapper(env)
    w.reset()
    for _ in range(3):
        assert "episode" not in w.step(ADD).info
    ts = w.step({"tool": "submit"})
    assert ts.info["episode"]["r"] == 1.0 and ts.info["episode"]["l"] == 4
    assert w.episodes == [ts.info["episode"]]


def test_recorder_yields_a_trajectory(env):
    w = RecorderWrapper(env, agent=AgentInfo(name="scripted"))
    w.reset()
    w.step({"tool": "add", "params": {"n": 3}, "thought": "add all at once"})
    w.step({"tool": "submit", "params": {}})
    traj = w.trajectory
    assert traj.task.task_id == "count-3" and traj.task.instruction == "Count to 3."
    assert [s.tool for s in traj.steps] == ["add", "submit"]
    assert traj.steps[0].thought == "add all at once"
    assert traj.steps[0].observation.output == "count=3"
    assert traj.outcome.success is True and traj.outcome.terminated
    assert traj.agent.name == "scripted"
    assert traj.id == traj.content_hash()


def test_recorder_records_truncation_reason(env):
    w = RecorderWrapper(MaxStepsWrapper(env, 2))
    w.reset()
    w.step(ADD)
    w.step(ADD)
    assert w.trajectory.outcome.truncated and w.trajectory.outcome.reason == "max_steps"


ORDERS = [
    lambda e: RecorderWrapper(
        MaxStepsWrapper(ObservationTruncateWrapper(EpisodeStatisticsWrapper(e), 64), 10)
    ),
    lambda e: EpisodeStatisticsWrapper(
        ObservationTruncateWrapper(MaxStepsWrapper(RecorderWrapper(e), 10), 64)
    ),
    lambda e: MaxStepsWrapper(
        RewardWrapper(RecorderWrapper(TimeoutWrapper(e, 60)), lambda a, t: t.reward), 10
    ),
]


@pytest.mark.parametrize("compose", ORDERS)
def test_wrappers_compose_in_any_order(compose):
    env = compose(CounterEnv())
    env.reset()
    for _ in range(3):
        env.step(ADD)
    ts = env.step({"tool": "submit"})
    assert ts.terminated and ts.reward == 1.0
    assert env.unwrapped.count == 3
    rec = env
    while not isinstance(rec, RecorderWrapper):
        rec = rec.env
    assert len(rec.trajectory.steps) == 4 and rec.trajectory.outcome.success


class _SlowEnv(CounterEnv):
    """``sleep`` sleeps ``s`` seconds (pure Python: nothing to kill); ``boom`` raises."""

    available_tools = ["add", "sleep", "boom", "submit"]  # noqa: RUF012

    def step(self, action):
        if action.get("tool") == "sleep":
            time.sleep(action["params"]["s"])
            self.count += 1
            return TimeStep(observation="slept")
        if action.get("tool") == "boom":
            raise RuntimeError("the env broke")
        return super().step(action)


def test_timeout_cuts_off_a_step_still_running_when_the_time_runs_out():
    env = _SlowEnv()
    w = TimeoutWrapper(env, 0.5)
    w.reset()
    t0 = time.monotonic()
    ts = w.step({"tool": "sleep", "params": {"s": 2.0}})
    took = time.monotonic() - t0
    assert took < 1.5, f"a 2 s step under a 0.5 s timeout took {took:.2f} s"
    assert ts.truncated and not ts.terminated and ts.info["truncated_by"] == "timeout"
    assert ts.info["exit_code"] == 124 and "time limit ran out" in ts.observation
    # the next step is not run; reset waits for the cut-off step, then all is as before
    assert w.step(ADD).truncated and env.count == 0
    w.reset()
    assert env.count == 0 and w.step(ADD).observation == "count=1"


def test_timeout_passes_a_deadline_to_the_env_sandbox_and_clears_it():
    seen = []

    class Box:
        deadline = None

    class SandboxedEnv(CounterEnv):
        sandbox = Box()

        def step(self, action):
            seen.append(self.sandbox.deadline)
            return super().step(action)

    env = SandboxedEnv()
    w = TimeoutWrapper(env, 10)
    w.reset()
    before = time.monotonic()
    w.step(ADD)
    assert seen[0] is not None and before + 9 < seen[0] <= time.monotonic() + 10
    assert env.sandbox.deadline is None


def test_timeout_reraises_an_env_error():
    w = TimeoutWrapper(_SlowEnv(), 5)
    w.reset()
    with pytest.raises(RuntimeError, match="the env broke"):
        w.step({"tool": "boom"})
