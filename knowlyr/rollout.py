"""``collect``: run an agent in an environment for many episodes and return Trajectories.

Each worker thread owns one environment (made from the registry) wrapped in
:class:`~knowlyr.core.wrappers.RecorderWrapper` and one agent, and pulls episode numbers
from a shared counter, so ``concurrency=k`` runs ``k`` episodes at once. Sandbox commands
run in subprocesses (the GIL is released while waiting on them), so threads overlap the
sandbox's work. Episode ``i`` runs ``tasks[i % len(tasks)]`` when ``tasks`` is given, else
the env draws a task with seed ``seed + i``, so the same call returns the same episodes in
the same order at any concurrency.

A bad rollout is data, not a crash: an exception from the agent or the env ends that
episode and it is recorded with ``outcome.success = False`` and ``outcome.reason =
"error: ..."``; an episode cut off by ``max_steps`` is recorded as truncated and failed.
Configuration errors (an unknown family, no sandbox backend) are raised: they are not
rollouts. A model API call that failed for good (:class:`~knowlyr.agents.api.ModelCallError`,
after the agent's retries) is recorded as one more step, an ``invalid_action`` whose
observation is the error, before the episode ends that way.

Agents get the env's tool schemas (its ``tool_schemas()``) in the reset ``info["tools"]`` and
the episode's seed in ``info["seed"]``. Every trajectory records those schemas in
``metadata["tools"]`` (OpenAI function format, as the env gives them; failed episodes too,
where the env has them), so an export declares the tools the agent really had
(:func:`knowlyr.export.messages.declared_tools`); the episodes of one env share one list.
An agent that sets ``last_usage`` (a :class:`~knowlyr.trajectory.Usage`) in ``act`` has it
stored as that step's ``usage``, and an action's ``call_id`` is kept on its ``ToolCall``.

Example:
    >>> from knowlyr.agents import ExpertAgent
    >>> kw = {"family": "order_status"}
    >>> trajs = collect("knowlyr/conversation", ExpertAgent, 4, seed=0, env_kwargs=kw)
    >>> len(trajs), all(t.outcome.success for t in trajs)
    (4, True)
"""

from __future__ import annotations

import itertools
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from knowlyr.agents.api import ModelCallError
from knowlyr.agents.base import Agent
from knowlyr.core.env import Action, AgentEnv, TimeStep
from knowlyr.core.registry import make, spec
from knowlyr.core.wrappers import RecorderWrapper, RewardWrapper
from knowlyr.errors import BackendUnavailableError, ConfigError, EnvServerError
from knowlyr.trajectory import (
    INVALID_ACTION_TOOL,
    Observation,
    Outcome,
    Source,
    Step,
    TaskInfo,
    ToolCall,
    Trajectory,
    Usage,
)

__all__ = ["DEFAULT_MAX_STEPS", "collect", "run_episode"]

DEFAULT_MAX_STEPS = 50

AgentSpec = Agent | type[Agent] | Callable[[], Agent]


def _agent_factory(agent: AgentSpec, concurrency: int) -> Callable[[], Agent]:
    if isinstance(agent, Agent):
        if concurrency > 1:
            raise ConfigError(
                "agents keep per-episode state, so one agent instance cannot run concurrent "
                "episodes: "
                "pass its class or a factory (e.g. lambda: MyAgent(...)) with concurrency > 1"
            )
        return lambda: agent
    if callable(agent):
        return agent  # a class or a factory
    raise ConfigError(
        f"agent must be an Agent, an Agent class or a factory returning one, got {agent!r:.100}"
    )


def run_episode(
    env: RecorderWrapper, agent: Agent, *, task: Any = None, seed: int | None = None
) -> Trajectory:
    """Run one episode of ``agent`` in a recording env and return its trajectory.

    An exception from the agent or the env ends the episode; it is recorded as a failed
    trajectory whose ``outcome.reason`` starts with ``error:`` and whose metadata holds the
    traceback. The env's tool schemas (the agent's reset ``info["tools"]``) are recorded in
    the trajectory's ``metadata["tools"]``.

    Raises:
        ConfigError, BackendUnavailableError: ``reset`` cannot start any episode (a bad
            task, family or split; no sandbox backend). These are not rollouts to record.
        EnvServerError: the env server of a remote env died or lost the episode, at any
            step: the episode is lost, not failed, and is to be run again.
    """
    ts: TimeStep | None = None
    try:
        ts = env.reset(task=task, seed=seed)
    except (ConfigError, BackendUnavailableError):
        raise  # a misconfigured env or a missing backend: no episode can run
    except Exception as e:  # a bad rollout is data
        return _with_tools(env, _failed(env, agent, task, e), _env_tools(env))
    tools: Any = None
    try:
        info = _reset_info(env, ts, seed)
        tools = info.get("tools")
        agent.reset(info)
        while not ts.done:
            action: Action = agent.act(ts.observation, ts.info)
            ts = env.step(action)
            _annotate_step(env, agent, action)
    except EnvServerError:
        raise  # the env's server went away: not the agent's rollout
    except ModelCallError as e:  # the model API failed for good: a last, failed step
        return _with_tools(env, _failed(env, agent, task, e, model_call_failed=True), tools)
    except Exception as e:  # a bad rollout is data
        return _with_tools(env, _failed(env, agent, task, e), tools)
    traj = env.trajectory
    if ts.truncated and not ts.terminated and traj.outcome.success is None:
        _fill_truncated(env, traj)
    return _with_tools(env, traj, tools)


def _env_tools(env: AgentEnv) -> list[dict[str, Any]] | None:
    """The env's tool schemas, ``None`` when it has none or cannot say (a broken env)."""
    schemas = getattr(env.unwrapped, "tool_schemas", None)
    if not callable(schemas):
        return None
    try:
        return schemas()
    except Exception:  # an env whose reset failed may not answer either: no tools recorded
        return None


def _with_tools(env: RecorderWrapper, traj: Trajectory, tools: Any) -> Trajectory:
    """``traj`` with ``tools`` (the schemas the agent was given) in ``metadata["tools"]``, unless
    they are no list of schemas or the metadata has tools already.

    Tools equal to those an earlier episode of ``env`` recorded are recorded as that same list
    (an env builds its schemas anew at each call): one list per env, shared by its episodes,
    not copied."""
    if not (isinstance(tools, list) and tools and all(isinstance(t, dict) for t in tools)):
        return traj
    last = getattr(env, "_recorded_tools", None)
    if last is not None and last == tools:
        tools = last
    else:
        env._recorded_tools = tools  # type: ignore[attr-defined]
    traj.metadata.setdefault("tools", tools)
    return traj


def _reset_info(env: AgentEnv, ts: TimeStep, seed: int | None) -> dict[str, Any]:
    """The reset info for the agent: the env's, with its tool schemas under ``"tools"`` and
    the episode's seed under ``"seed"`` (what a sampling agent derives its draws from)."""
    info = dict(ts.info)
    schemas = getattr(env.unwrapped, "tool_schemas", None)
    if "tools" not in info and callable(schemas):
        info["tools"] = schemas()
    if seed is not None:
        info.setdefault("seed", seed)
    return info


def _annotate_step(env: RecorderWrapper, agent: Agent, action: Action) -> None:
    """Put the agent's ``last_usage`` and the action's ``call_id`` on the step just recorded."""
    usage = getattr(agent, "last_usage", None)
    call_id = action.get("call_id") if isinstance(action, dict) else None
    steps = getattr(env, "_steps", None)
    if not steps or (usage is None and not call_id):
        return
    step = steps[-1]  # the same object as in the finished trajectory
    if usage is not None:
        step.usage = usage if isinstance(usage, Usage) else Usage.model_validate(usage)
    if call_id and step.action is not None and step.action.call_id is None:
        step.action.call_id = str(call_id)


def _fill_truncated(env: AgentEnv, traj: Trajectory) -> None:
    judge = getattr(env.unwrapped, "outcome_if_truncated", None)
    extra: dict[str, Any] = {}
    if callable(judge):
        try:
            extra = dict(judge())
        except Exception as e:  # judging a cut-off episode must not lose it
            extra = {"judge_error": f"{type(e).__name__}: {e}"}
    traj.outcome.success = False
    if extra.get("score") is not None:
        traj.outcome.score = float(extra["score"])
    for key in ("tests_passed", "tests_failed"):
        if extra.get(key) is not None:
            setattr(traj.outcome, key, extra[key])
    traj.metadata.update({k: v for k, v in extra.items() if k not in Outcome.model_fields})


def _failed(
    env: RecorderWrapper,
    agent: Agent,
    task: Any,
    e: Exception,
    *,
    model_call_failed: bool = False,
) -> Trajectory:
    task_info = getattr(env, "_task", None)
    if task_info is None or not getattr(env, "_open", False):
        task_info = _fallback_task(task, env)
        steps = []
    else:
        steps = list(getattr(env, "_steps", []))
        if model_call_failed:
            steps.append(_failed_call_step(len(steps), str(e)))
    reason = f"error: {type(e).__name__}: {e}"
    env._open = False  # the recorder must not finish this episode later
    return Trajectory(
        task=task_info,
        agent=agent.agent_info,
        steps=steps,
        outcome=Outcome(success=False, terminated=False, truncated=True, reason=reason[:500]),
        source=Source(format=env.source_format),
        metadata={"error": reason, "traceback": traceback.format_exc()[-4000:]},
    )


def _failed_call_step(index: int, error: str) -> Step:
    """The step of a model call that failed for good: an invalid action whose answer is the error."""
    return Step(
        index=index,
        action=ToolCall(tool=INVALID_ACTION_TOOL, params={"raw": "", "error": error}),
        observation=Observation(output=f"Error: {error}", exit_code=1, error=error),
        timestamp=datetime.now(UTC),
        metadata={"model_call_failed": True},
    )


def _fallback_task(task: Any, env: AgentEnv) -> TaskInfo:
    if isinstance(task, TaskInfo):
        return TaskInfo.model_validate(task.model_dump(include=set(TaskInfo.model_fields)))
    tid = task if isinstance(task, str) else getattr(task, "task_id", None) or "unknown"
    return TaskInfo(task_id=str(tid), domain=env.domain)


def collect(
    env_id: str,
    agent: AgentSpec,
    n_episodes: int,
    *,
    max_steps: int | None = None,
    tasks: Sequence[Any] | None = None,
    seed: int = 0,
    reward_fn: Callable[[Action, TimeStep], float] | None = None,
    concurrency: int = 1,
    env_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Run ``n_episodes`` episodes of ``agent`` in ``env_id`` and return their trajectories.

    Args:
        env_id: a registered env id (``knowlyr/sandbox``, ``knowlyr/conversation``...).
        agent: an :class:`~knowlyr.agents.Agent` (only with ``concurrency=1``), an Agent
            class, or a zero-argument factory; each worker gets its own instance.
        n_episodes: how many episodes.
        max_steps: step limit per episode (default: the env's registered limit, else 50).
        tasks: tasks (Task objects or ids) to run, cycled; default: the env draws them.
        seed: episode ``i`` is reset with seed ``seed + i`` (task draw and env randomness).
        reward_fn: ``(action, timestep) -> float`` replacing each step's reward.
        concurrency: episodes run at once (threads, one env and agent each).
        env_kwargs: extra arguments for the env (e.g. ``{"family": "order_status"}``).
        on_episode: called with each finished trajectory, as episodes end (from the worker
            threads, one call at a time): progress bars, live counts.

    Returns:
        The trajectories in episode order; failed episodes are included, not raised.

    Raises:
        ConfigError: bad arguments or an env that cannot be built.

    Example:
        >>> from knowlyr.agents import RandomAgent
        >>> trajs = collect("knowlyr/discussion", RandomAgent, 3, max_steps=5, concurrency=2)
        >>> [t.outcome.success for t in trajs]
        [False, False, False]
    """
    if not isinstance(n_episodes, int) or n_episodes < 0:
        raise ConfigError(f"n_episodes must be a non-negative int, got {n_episodes!r}")
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be a positive int, got {concurrency!r}")
    if max_steps is not None and (not isinstance(max_steps, int) or max_steps <= 0):
        raise ConfigError(f"max_steps must be a positive int, got {max_steps!r}")
    if tasks is not None and not len(tasks):
        raise ConfigError("tasks must not be empty; pass tasks=None to let the env draw tasks")
    if reward_fn is not None and not callable(reward_fn):
        raise ConfigError(f"reward_fn must be callable, got {reward_fn!r}")
    if on_episode is not None and not callable(on_episode):
        raise ConfigError(f"on_episode must be callable, got {on_episode!r}")
    steps = max_steps or spec(env_id).max_steps or DEFAULT_MAX_STEPS
    factory = _agent_factory(agent, concurrency)
    results: list[Trajectory | None] = [None] * n_episodes
    counter = itertools.count()
    lock = threading.Lock()

    def worker() -> None:
        env: AgentEnv = make(env_id, max_steps=steps, **(env_kwargs or {}))
        try:
            if reward_fn is not None:
                env = RewardWrapper(env, reward_fn)
            a = factory()
            if not isinstance(a, Agent):
                raise ConfigError(f"the agent factory returned {type(a).__name__}, not an Agent")
            rec = RecorderWrapper(env, agent=a.agent_info)
            while True:
                with lock:
                    i = next(counter)
                if i >= n_episodes:
                    return
                task = tasks[i % len(tasks)] if tasks is not None else None
                traj = run_episode(rec, a, task=task, seed=seed + i)
                rec.trajectories.clear()  # collect keeps them in order itself
                traj.metadata.update({"env_id": env_id, "episode": i, "seed": seed + i})
                results[i] = traj
                if on_episode is not None:
                    with lock:
                        on_episode(traj)
        finally:
            env.close()

    if n_episodes == 0:
        return []
    n_workers = min(concurrency, n_episodes)
    if n_workers == 1:
        worker()
    else:
        with ThreadPoolExecutor(
            max_workers=n_workers, thread_name_prefix="knowlyr-collect"
        ) as pool:
            for f in [pool.submit(worker) for _ in range(n_workers)]:
                f.result()
    return [t for t in results if t is not None]
