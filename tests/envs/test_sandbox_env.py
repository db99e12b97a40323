"""SandboxEnv and EngineeringEnv: real sandboxes, hidden tests, fast resets, faithful replay."""

from __future__ import annotations

import pytest

import knowlyr
from knowlyr.agents import ExpertAgent, NoisyExpert, RandomAgent
from knowlyr.core import RecorderWrapper
from knowlyr.rollout import collect
from knowlyr.sandbox import backend_available
from knowlyr.taskset import get_suite, sample

if backend_available("local"):
    pytest.fail(f"the local sandbox backend cannot run: {backend_available('local')}")


@pytest.fixture(scope="module")
def coding_env():
    env = knowlyr.make("knowlyr/sandbox")
    yield env
    env.close()


def _task(kind: str):
    suite = get_suite("coding")
    return next(t for t in suite.tasks(split="heldout") if t.metadata["bug_kind"] == kind)


def test_reset_shows_the_task_and_hides_the_hidden_tests(coding_env):
    task = _task("off_by_one")
    ts = coding_env.reset(task=task)
    assert ts.observation == task.instruction and ts.info["task"]["task_id"] == task.task_id
    ls = coding_env.step({"tool": "bash", "params": {"command": "ls -A"}})
    assert ls.info["exit_code"] == 0
    assert "run_tests.py" in ls.observation and ".knowlyr_hidden" not in ls.observation
    run = coding_env.step({"tool": "bash", "params": {"command": "python3 run_tests.py tests"}})
    assert "passed" in run.observation


def test_submit_without_a_fix_fails_with_test_counts(coding_env):
    task = _task("wrong_comparison")
    coding_env.reset(task=task)
    ts = coding_env.step({"tool": "submit", "params": {}})
    out = ts.info["outcome"]
    assert ts.terminated and ts.reward == 0.0 and out["success"] is False
    assert (
        out["tests_failed"] > 0
        and out["tests_passed"] + out["tests_failed"] >= task.data["n_hidden"]
    )


def test_tool_errors_are_observations(coding_env):
    coding_env.reset(task=_task("missing"))
    ts = coding_env.step(
        {"tool": "edit_file", "params": {"path": "nope.py", "old_str": "a", "new_str": "b"}}
    )
    assert ts.info["exit_code"] != 0 and ts.observation.startswith("Error:") and not ts.done
    ts = coding_env.step({"tool": "read_file", "params": {"path": "../../etc/passwd"}})
    assert ts.info["exit_code"] != 0 and "root:" not in ts.observation
    ts = coding_env.step({"tool": "bash", "params": {"command": "exit 3"}})
    assert ts.info["exit_code"] == 3


def test_reset_restores_the_workspace(coding_env):
    task = _task("missing")
    coding_env.reset(task=task)
    path = task.data["module_path"]
    coding_env.step({"tool": "write_file", "params": {"path": path, "content": "broken = True\n"}})
    coding_env.step({"tool": "bash", "params": {"command": "touch stray.txt && git add -A"}})
    coding_env.reset(task=task)
    ts = coding_env.step({"tool": "read_file", "params": {"path": path}})
    assert "broken" not in ts.observation
    status = coding_env.step({"tool": "git", "params": {"args": "status --porcelain"}})
    assert status.info["exit_code"] == 0 and status.observation.strip() == ""


def test_planted_files_in_the_hidden_dir_do_not_count(coding_env):
    task = _task("off_by_one")
    coding_env.reset(task=task)
    pkg = task.data["module_path"].split("/")[0]
    fake = f"def {task.data['function']}(*a, **k):\n    return None\n"
    coding_env.step(
        {
            "tool": "write_file",
            "params": {"path": f".knowlyr_hidden/{pkg}/__init__.py", "content": ""},
        }
    )
    mod = task.data["module_path"].split("/")[1]
    coding_env.step(
        {"tool": "write_file", "params": {"path": f".knowlyr_hidden/{pkg}/{mod}", "content": fake}}
    )
    extra = "def test_free():\n    pass\n"
    coding_env.step(
        {"tool": "write_file", "params": {"path": ".knowlyr_hidden/test_free.py", "content": extra}}
    )
    ts = coding_env.step({"tool": "submit", "params": {}})
    assert ts.info["outcome"]["success"] is False


def test_experts_random_and_noisy_on_heldout_coding():
    tasks = sample("coding", 40, seed=0, split="heldout")
    expert = collect("knowlyr/sandbox", ExpertAgent, len(tasks), tasks=tasks, concurrency=2)
    rate = sum(bool(t.outcome.success) for t in expert) / len(tasks)
    assert rate >= 0.95, [t.metadata.get("test_output") for t in expert if not t.outcome.success]
    assert all(
        t.outcome.tests_failed == 0 and t.outcome.tests_passed > 0
        for t in expert
        if t.outcome.success
    )
    assert all(s.thought for t in expert for s in t.steps)
    rand = collect("knowlyr/sandbox", RandomAgent, 12, tasks=tasks[:12], max_steps=6, concurrency=2)
    assert sum(bool(t.outcome.success) for t in rand) == 0
    noisy = collect(
        "knowlyr/sandbox",
        lambda: NoisyExpert(noise=0.6, seed=1),
        12,
        tasks=tasks[:12],
        concurrency=2,
    )
    assert sum(len(t.steps) for t in noisy) > sum(len(t.steps) for t in expert[:12])
    assert sum(bool(t.outcome.success) for t in noisy) >= 10


def test_noisy_expert_undoes_and_redoes_edits(coding_env):
    task = _task("off_by_one")
    agent = NoisyExpert(noise=1.0, seed=0, kinds=("undo_edit",), max_noise=1)
    ts = coding_env.reset(task=task)
    agent.reset(ts.info)
    tools = []
    while not ts.done:
        action = agent.act(ts.observation, ts.info)
        tools.append(action["tool"])
        ts = coding_env.step(action)
    assert tools.count("edit_file") == 3 and ts.info["outcome"]["success"]


@pytest.mark.parametrize("env_id", ["knowlyr/sandbox", "knowlyr/engineering"])
def test_replay_in_a_fresh_sandbox_reproduces_observations(env_id):
    rec = RecorderWrapper(knowlyr.make(env_id), agent=NoisyExpert().agent_info)
    agent = NoisyExpert(noise=0.5, seed=3)
    try:
        ts = rec.reset(seed=5)
        agent.reset(ts.info)
        while not ts.done:
            ts = rec.step(agent.act(ts.observation, ts.info))
    finally:
        rec.close()
    traj = rec.trajectory
    assert len(traj.steps) >= 3
    fresh = knowlyr.make(env_id)
    try:
        fresh.reset(task=traj.task.task_id)
        replayed = [
            fresh.step({"tool": s.action.tool, "params": s.action.params}) for s in traj.steps
        ]
    finally:
        fresh.close()
    assert [r.observation for r in replayed] == [s.observation.output for s in traj.steps]
    assert [r.info.get("exit_code") for r in replayed] == [
        s.observation.exit_code for s in traj.steps
    ]
    assert replayed[-1].info["outcome"]["success"] == traj.outcome.success


def test_engineering_expert_and_repository_tools():
    tasks = sample("engineering", 30, seed=0, split="heldout")
    expert = collect("knowlyr/engineering", ExpertAgent, len(tasks), tasks=tasks, concurrency=2)
    assert sum(bool(t.outcome.success) for t in expert) / len(tasks) >= 0.95
    rand = collect("knowlyr/engineering", RandomAgent, 10, tasks=tasks[:10], max_steps=6)
    assert sum(bool(t.outcome.success) for t in rand) == 0
    env = knowlyr.make("knowlyr/engineering", family="config_lookup")
    try:
        ts = env.reset(seed=0)
        svc = ts.observation.split(" does ")[1].split()[0]
        grep = env.step({"tool": "grep", "params": {"pattern": "^port:"}})
        assert grep.observation.count("config.yaml") == 4
        log = env.step({"tool": "git", "params": {"args": "log --oneline"}})
        assert log.info["exit_code"] == 0 and "Initial import" in log.observation
        kb = env.step({"tool": "knowledge_base", "params": {"query": f"{svc} ownership"}})
        assert f"{svc} is owned by" in kb.observation
    finally:
        env.close()


def test_engineering_history_is_a_real_git_log():
    env = knowlyr.make("knowlyr/engineering", family="change_history")
    try:
        ts = env.reset(seed=1)
        task = env.unwrapped.task
        log = env.step({"tool": "git", "params": {"args": "log --format=%s"}})
        messages = log.observation.strip().splitlines()
        assert messages[-1] == "Initial import" and len(messages) == 1 + len(task.data["history"])
        assert all("OPS-" in m for m in messages[:-1])
        ts = env.step(
            {"tool": "respond", "params": {"text": "OPS-0000 changed it; it was 0 before."}}
        )
        assert ts.info["outcome"]["success"] is False
    finally:
        env.close()


def test_a_small_snapshot_cache_still_gives_each_task_its_own_files():
    a, b = _task("missing"), _task("off_by_one")
    env = knowlyr.make("knowlyr/sandbox", snapshot_cache=1)
    try:
        for task in (a, b, a, b):
            env.reset(task=task)
            ts = env.step({"tool": "bash", "params": {"command": "git ls-files | sort | head -5"}})
            assert sorted(ts.observation.split()) == sorted(task.files)
            other = b if task is a else a
            if other.data["module_path"] != task.data["module_path"]:
                assert other.data["module_path"] not in ts.observation
    finally:
        env.close()


def test_a_workspace_the_agent_broke_is_a_failed_episode_not_a_crash(coding_env):
    task = _task("missing")
    coding_env.reset(task=task)
    coding_env.step({"tool": "bash", "params": {"command": "ln -s /etc .knowlyr_hidden"}})
    ts = coding_env.step({"tool": "bash", "params": {"command": "chmod 000 . || true"}})
    ts = coding_env.step({"tool": "submit", "params": {}})
    assert ts.terminated and ts.info["outcome"]["success"] is False
    coding_env.reset(task=task)  # and the next episode starts clean
    ls = coding_env.step({"tool": "bash", "params": {"command": "ls"}})
    assert ls.info["exit_code"] == 0 and "run_tests.py" in ls.observation
