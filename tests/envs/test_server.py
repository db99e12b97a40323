"""``knowlyr env serve`` as real processes on loopback, driven through ``knowlyr.make(URL)``."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

import knowlyr
from knowlyr.agents import ExpertAgent
from knowlyr.core import EpisodeStatisticsWrapper, RecorderWrapper, spec
from knowlyr.errors import ConfigError, EnvServerError, UnknownEnvError
from knowlyr.rollout import collect
from knowlyr.sandbox import backend_available
from tests.envs.server_proc import REPO, start_server

ORDERS = {"family": "order_status"}


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return tmp_path_factory.mktemp("env-servers")


@pytest.fixture(scope="module")
def conversation(logs):
    server = start_server("knowlyr/conversation", logs, "--max-episodes", "9")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def guarded(logs):
    """The slow env behind a bearer token, with slots expiring after 1 s idle."""
    server = start_server(
        "tests/slow-conversation",
        logs,
        "--import",
        "tests.envs.slow_env",
        "--token",
        "s3cret",
        "--idle-timeout",
        "1",
        "--env-kwargs",
        '{"delay_s": 0.05}',
    )
    yield server
    server.stop()


def test_collect_through_the_server_gives_the_in_process_trajectories(conversation):
    local = collect("knowlyr/conversation", ExpertAgent, 12, seed=3, env_kwargs=ORDERS)
    remote = collect(conversation.url, ExpertAgent, 12, seed=3, concurrency=8, env_kwargs=ORDERS)
    assert [t.id for t in remote] == [t.id for t in local]  # same content hashes, same order
    assert all(t.outcome.success for t in remote)
    assert remote[0].task.task_id == local[0].task.task_id and remote[0].steps[0].action.tool
    assert spec(conversation.url).max_steps == spec("knowlyr/conversation").max_steps
    health = conversation.health()
    assert health["episodes"] == 0 and health["opened"] == health["closed"] >= 8


def test_wrappers_and_recording_work_on_the_client_unchanged(conversation):
    env = RecorderWrapper(
        EpisodeStatisticsWrapper(knowlyr.make(conversation.url, max_steps=2, **ORDERS))
    )
    try:
        ts = env.reset(seed=0)
        assert ts.info["task"]["domain"] == "conversation" and "order" in ts.observation
        bad = env.step({"tool": "no_such_tool", "params": {}})  # the server's action check
        assert bad.info["exit_code"] != 0 and "unknown tool" in bad.observation
        last = env.step({"tool": "query_order", "params": {"order_id": "ZZZZZ"}})  # an alias
        assert last.truncated and last.info["truncated_by"] == "max_steps"  # the server's limit
        assert last.info["episode"]["l"] == 2  # EpisodeStatisticsWrapper on this side
        traj = env.trajectory
        assert len(traj.steps) == 2 and traj.outcome.truncated and not traj.outcome.terminated
        assert env.unwrapped.tool_schemas()[0]["function"]["name"] == "query_stats"
        assert "respond" in env.available_tools and env.domain == "conversation"
    finally:
        env.close()


def test_bad_requests_are_clear_errors_and_slots_are_limited(conversation):
    other = conversation.url.replace("knowlyr/conversation", "knowlyr/advisory")
    with pytest.raises(UnknownEnvError, match="serves 'knowlyr/conversation'"):
        knowlyr.make(other)
    with pytest.raises(ConfigError, match="family"):
        knowlyr.make(conversation.url, family="no_such_family")
    with pytest.raises(ConfigError, match="set by the server"):
        knowlyr.make(conversation.url, sandbox={"backend": "local"})
    with pytest.raises(ConfigError, match="http://HOST:PORT/NAMESPACE/NAME"):
        knowlyr.make("http://127.0.0.1:1/conversation")
    envs = [knowlyr.make(conversation.url) for _ in range(9)]
    try:
        with pytest.raises(EnvServerError, match="--max-episodes 9"):
            knowlyr.make(conversation.url)
        envs.pop().close()  # a closed slot is free again
        envs.append(knowlyr.make(conversation.url))
    finally:
        for e in envs:
            e.close()


def test_the_token_is_required_and_idle_episodes_expire(guarded, monkeypatch):
    monkeypatch.delenv("KNOWLYR_ENV_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="KNOWLYR_ENV_TOKEN"):
        knowlyr.make(guarded.url)
    with pytest.raises(ConfigError, match="token"):
        knowlyr.make(guarded.url, token="wrong")
    assert guarded.health()["status"] == "ok"  # health needs no token

    monkeypatch.setenv("KNOWLYR_ENV_TOKEN", "s3cret")
    env = knowlyr.make(guarded.url, **ORDERS)
    try:
        env.reset(seed=1)
        first = env.episode_id
        deadline = time.monotonic() + 30
        while guarded.health()["expired"] == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert guarded.health()["expired"] >= 1 and guarded.health()["episodes"] == 0
        with pytest.raises(EnvServerError, match="expired") as err:  # mid-episode: lost
            env.step({"tool": "respond", "params": {"message": "hi"}})
        assert err.value.expired
        assert env.reset(seed=1).observation  # between episodes: a new slot, transparently
        assert env.episode_id != first
    finally:
        env.close()


def test_a_server_killed_mid_step_is_a_clear_error(logs):
    server = start_server(
        "tests/slow-conversation", logs, "--import", "tests.envs.slow_env", "--idle-timeout", "60"
    )
    try:
        env = knowlyr.make(server.url, delay_s=5.0, **ORDERS)
        env.reset(seed=0)
        raised: list[BaseException] = []

        def step() -> None:
            try:
                env.step({"tool": "query_stats", "params": {"order_id": "ABCDE"}})
            except BaseException as e:
                raised.append(e)

        t = threading.Thread(target=step)
        t.start()
        deadline = time.monotonic() + 20
        while server.health()["episodes"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the step is sleeping inside the server now
        server.kill()
        t.join(30)
        assert raised and isinstance(raised[0], EnvServerError)
        assert "stopped answering during step" in str(raised[0])
        env.close()  # the server is gone: closing is still fine
        with pytest.raises(EnvServerError, match="knowlyr env serve tests/slow-conversation"):
            knowlyr.make(server.url, connect_timeout_s=0.5)
    finally:
        server.stop()


def test_a_non_loopback_bind_needs_a_token():
    cmd = ["env", "serve", "knowlyr/conversation", "--host", "0.0.0.0", "--port", "0", "--no-token"]
    out = subprocess.run(
        [sys.executable, "-m", "knowlyr.cli", *cmd],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert out.returncode == 2
    assert "--token" in out.stderr and "KNOWLYR_ENV_TOKEN" in out.stderr


@pytest.mark.skipif(bool(backend_available("local")), reason="no local sandbox backend")
def test_sandbox_episodes_each_get_their_own_sandbox(logs):
    server = start_server("knowlyr/sandbox", logs, "--max-episodes", "4")
    try:
        a, b = knowlyr.make(server.url), knowlyr.make(server.url)
        try:
            a.reset(seed=0)
            b.reset(seed=0)
            a.step({"tool": "write_file", "params": {"path": "mine.txt", "content": "a"}})
            seen = b.step({"tool": "bash", "params": {"command": "ls mine.txt"}})
            assert seen.info["exit_code"] != 0  # b's workspace does not have a's file
        finally:
            a.close()
            b.close()
        trajs = collect(server.url, ExpertAgent, 2, seed=5, concurrency=2)
        assert all(t.outcome.success and t.outcome.tests_passed for t in trajs)
        assert server.health()["episodes"] == 0
    finally:
        server.stop()
