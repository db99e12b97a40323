"""The default reward ranks the scripted agents as they deserve, in every built-in env.

The expert, the noisy expert and the random agent run the same tasks (episode ``i`` draws
its task with seed ``i``), and all runs of an env are scored in one batch by
``RewardEngine(<the env's domain>)``: rules only, no network, no overrides (as a store
version holding the three agents' runs is scored). The means must rank expert > noisy >
random, and the expert must be ahead of the noisy expert on >= 95% of the same-task pairs.

Ties. A noisy episode into which chance injected no flaw is the expert's own run: the two
are identical and can only tie, which says nothing about the reward. The noisy expert here
makes at least one flaw per episode (``min_noise=1``), so every pair compares a clean run
with a flawed run of the same task, and a tie counts against the reward like a loss: it
did not notice the flaw. (bench/ranking_bench.py prints ties and losses separately.)

``bench/ranking_bench.py`` shows these figures side by side with the previous setting
(outcome weight 0, the previous salient tokens and efficiency reference), under which the
random agent outranks the noisy expert in two envs and the expert is ahead on 70-85% of
the pairs: this test fails there.
"""

from __future__ import annotations

import statistics

import pytest

from knowlyr.agents import ExpertAgent, NoisyExpert, RandomAgent
from knowlyr.reward.engine import RewardEngine
from knowlyr.reward.rules import score_rules
from knowlyr.rollout import collect
from knowlyr.sandbox import backend_available
from knowlyr.trajectory import Outcome, TaskInfo, Trajectory
from tests.reward.helpers import call, traj

_NO_SANDBOX = backend_available("local")
_sandboxed = pytest.mark.skipif(_NO_SANDBOX is not None, reason=f"no sandbox: {_NO_SANDBOX}")

ENVS = [
    pytest.param("knowlyr/sandbox", 20, marks=_sandboxed),
    pytest.param("knowlyr/engineering", 20, marks=_sandboxed),
    ("knowlyr/conversation", 60),
    ("knowlyr/advisory", 60),
    ("knowlyr/discussion", 60),
]


@pytest.mark.parametrize(("env_id", "n"), ENVS)
def test_expert_outranks_noisy_expert_outranks_random_agent(env_id, n):
    agents = {
        "expert": ExpertAgent,
        "noisy": lambda: NoisyExpert(noise=0.3, seed=1, min_noise=1),
        "random": lambda: RandomAgent(seed=1),
    }
    runs = {name: collect(env_id, a, n, seed=0, concurrency=2) for name, a in agents.items()}
    tasks = [t.task.task_id for t in runs["expert"]]
    assert all([t.task.task_id for t in ts] == tasks for ts in runs.values())
    domain = runs["expert"][0].task.domain
    scored = RewardEngine(domain).score([t for ts in runs.values() for t in ts])
    totals = {name: [r.total for r in scored[i * n : (i + 1) * n]] for i, name in enumerate(runs)}

    mean = {name: statistics.fmean(xs) for name, xs in totals.items()}
    assert mean["expert"] > mean["noisy"] > mean["random"], mean

    # every noisy run has a flaw, so no pair is the expert's run twice
    assert all(e.id != o.id for e, o in zip(runs["expert"], runs["noisy"], strict=True))
    pairs = list(zip(totals["expert"], totals["noisy"], strict=True))
    ahead = sum(e > o for e, o in pairs)
    ties = sum(e == o for e, o in pairs)
    assert ahead >= 0.95 * n, f"expert ahead in {ahead}/{n} pairs ({ties} ties)"


def test_a_wrong_or_random_id_uses_nothing_revealed():
    """An order id without digits, an e-mail address: a lookup of a wrong one scores 0 on
    info_utilization, the right one 1; a search in plain words is not judged by it."""

    def lookup(**params):
        return call("query_stats", output="order KPUAU: status=shipped, user=U1126", **params)

    t = traj(
        [
            lookup(order_id="KPUAU"),
            lookup(order_id="KPUAV"),  # one character off, no digit in either
            lookup(email="lena.voss@example.com"),
            lookup(email="lena.vass@example.com"),
            lookup(order_id="QXZWB"),  # a random id
            call("web_search", query="shipping policy"),  # plain words: not salient
        ]
    )
    t.task.instruction = "Hi, I'm lena.voss@example.com. Please cancel order KPUAU."
    info = score_rules([t], "conversation")["info_utilization"].to_list()
    assert info == [1.0, 0.0, 1.0, 0.0, 0.0, None]


def _run(task_id: str, n_steps: int, success: bool | None) -> Trajectory:
    steps = [call("read_file", path=f"f{i}.py") for i in range(n_steps)]
    return Trajectory(task=TaskInfo(task_id=task_id), steps=steps, outcome=Outcome(success=success))


def test_failed_runs_do_not_set_the_efficiency_reference():
    """A task's reference length is the median of its runs that succeeded: a random run
    that wandered for 10 steps must not make a padded successful run look efficient."""
    batch = [_run("a", 2, True), _run("a", 4, True), _run("a", 10, False), _run("a", 1, False)]
    batch += [_run("b", 3, False), _run("b", 7, None)]  # none succeeded: all runs count
    df = score_rules(batch, "conversation")
    first = df.filter(df["step"] == 0)["reference"].to_list()
    assert first == [3.0, 3.0, 3.0, 3.0, 5.0, 5.0]
    padded = df.filter(df["traj"] == 1)["efficiency"].to_list()
    assert padded == [1.0, 1.0, 1.0, 0.75]
