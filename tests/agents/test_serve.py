"""A trained checkpoint served by ``transformers serve`` answers over HTTP like the in-process bridge.

The checkpoint is a tiny Qwen2 given a brief SFT (~30 s) on expert ``order_status`` episodes, so
it writes well-formed ``<tool_call>`` turns and succeeds on some held-out tasks. It is served
through :func:`~knowlyr.agents.serve.serve_checkpoint` on a free loopback port and called with
the official ``openai`` SDK, and by :class:`~knowlyr.agents.OpenAIAgent` in whole episodes.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi", reason="transformers serve needs fastapi: knowlyr-gym[serve]")
pytest.importorskip("uvicorn", reason="transformers serve needs uvicorn: knowlyr-gym[serve]")

from knowlyr.agents import ExpertAgent  # noqa: E402
from knowlyr.agents.action_format import (  # noqa: E402
    INVALID_ACTION_TOOL,
    action_to_message,
    parse_action_text,
    render_action,
)
from knowlyr.agents.inference import AgentInference, read_marker  # noqa: E402
from knowlyr.agents.openai_agent import OpenAIAgent  # noqa: E402
from knowlyr.agents.serve import (  # noqa: E402
    reply_action,
    serve_checkpoint,
    server_command,
    start_server,
)
from knowlyr.agents.spec import agent_factory  # noqa: E402
from knowlyr.errors import ConfigError, ServeError  # noqa: E402
from knowlyr.rollout import collect  # noqa: E402
from knowlyr.trajectory import Trajectory  # noqa: E402

ENV = "knowlyr/conversation"
SYSTEM = "You answer customers' questions about their orders."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny Qwen2 after 300 SFT steps: the tool-call format mostly learned and order ids
    copied, the status mostly guessed (2 of the 16 held-out episodes below succeed, and 7 have
    a reply that is no valid call)."""

    from knowlyr.export import export_sft
    from knowlyr.train.models import build_tiny_model_for
    from knowlyr.train.run import train_sft
    from knowlyr.train.sft_config import KnowlyrSFTConfig

    trajs = collect(
        ENV, ExpertAgent, 200, seed=0, env_kwargs={"family": "order_status", "split": "train"}
    )
    ds = export_sft(trajs, system_prompt=SYSTEM).dataset
    model, tok = build_tiny_model_for(ds, seed=0)
    config = KnowlyrSFTConfig(
        output_dir=str(tmp_path_factory.mktemp("serve") / "sft"),
        learning_rate=3e-3,
        per_device_train_batch_size=16,
        max_steps=300,
        logging_steps=1000,
        disable_tqdm=True,
        seed=0,
    )
    return train_sft(ds, model, tok, config).path  # one torch thread: see knowlyr._threads


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False


def test_served_checkpoint_acts_like_the_inference_bridge_and_stops(checkpoint):
    marker = read_marker(checkpoint)
    bridge = AgentInference.from_pretrained(checkpoint, max_new_tokens=64)
    episodes = collect(
        ENV, ExpertAgent, 3, seed=50_000, env_kwargs={"family": "order_status", "split": "heldout"}
    )
    started = time.perf_counter()
    with serve_checkpoint(checkpoint) as served:
        startup_s = time.perf_counter() - started
        assert served.model == str(checkpoint.resolve())
        assert served.base_url.startswith("http://127.0.0.1:") and served.base_url.endswith("/v1")
        assert served.policy == f"openai:{served.model}@{served.base_url}"
        client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
        pid, health = served.process.pid, served.base_url[: -len("/v1")] + "/health"
        tool_calls = 0
        for ep in episodes:
            # the first two turns of the episode, as the in-process agent builds its messages;
            # over HTTP a past assistant turn goes back as its text (render_action): the server
            # drops the content (the thought) of an assistant message that has tool_calls
            local = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": ep.task.instruction},
            ]
            wire = list(local)
            for turn in range(2):
                want = parse_action_text(bridge.generate(local))
                try:
                    reply = client.chat.completions.create(
                        model=served.model,
                        messages=wire,
                        tools=marker["tools"],
                        temperature=0,
                        max_tokens=64,
                    )
                except openai.InternalServerError:  # a tool call transformers serve cannot parse
                    assert want["tool"] == INVALID_ACTION_TOOL
                    break
                message = reply.choices[0].message
                got = reply_action(message)
                assert got == want, f"turn {turn} of {ep.task.task_id}: {got} != {want}"
                if message.tool_calls:
                    tool_calls += 1
                    assert reply.choices[0].finish_reason == "tool_calls"
                if want["tool"] == INVALID_ACTION_TOOL or turn == 1:
                    break
                observation = ep.steps[0].observation.output
                local.append(action_to_message(want))
                local.append({"role": "tool", "name": want["tool"], "content": observation})
                wire.append({"role": "assistant", "content": render_action(want)})
                wire.append({"role": "tool", "tool_call_id": "call_0", "content": observation})
        assert tool_calls >= 3, "the served model should answer with parsed tool calls"
        assert _answers(health)
    assert served.process.returncode is not None and _gone(pid)
    assert not _answers(health)
    assert served.log_path is not None and not served.log_path.exists()  # temporary log removed
    print(f"\nserved: healthy after {startup_s:.1f} s, {tool_calls} tool-call replies matched")


def test_server_is_stopped_when_the_block_raises(checkpoint):
    with pytest.raises(RuntimeError, match="boom"), serve_checkpoint(checkpoint) as served:
        pid = served.process.pid
        assert not _gone(pid)
        raise RuntimeError("boom")
    assert served.process.returncode is not None and _gone(pid)


def test_a_server_that_cannot_load_the_folder_fails_with_its_log(tmp_path, checkpoint):
    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    with pytest.raises(ServeError) as err:
        start_server(broken, timeout=60)
    msg = str(err.value)
    assert "exited with code 1" in msg and "safetensors" in msg.lower()  # the server's log tail


def test_bad_arguments_are_config_errors(tmp_path, checkpoint):
    with pytest.raises(ConfigError, match=r"no config\.json"):
        start_server(tmp_path)
    with pytest.raises(ConfigError, match="backend must be one of"):
        server_command(checkpoint, backend="tgi")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(ConfigError, match="in use"):
            start_server(checkpoint, port=busy.getsockname()[1])
    cmd = server_command(checkpoint, port=8123, continuous_batching=True)
    assert cmd[1:4] == ["-m", "transformers.cli.transformers", "serve"]
    assert cmd[4] == str(checkpoint.resolve()) and "--continuous-batching" in cmd
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ConfigError, match="pip install vllm"):
            server_command(checkpoint, backend="vllm")


def test_cli_serves_until_interrupted(checkpoint):
    proc = subprocess.Popen(
        [sys.executable, "-m", "knowlyr.cli", "serve", str(checkpoint), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = {}
        while "policy" not in lines:
            line = proc.stdout.readline()
            assert line, f"knowlyr serve ended early: {proc.communicate()[1]}"
            key, _, value = line.partition(":")
            lines[key.strip()] = value.strip()
        client = openai.OpenAI(base_url=lines["base URL"], api_key="none", max_retries=0)
        # the prompt the checkpoint was trained on (its system prompt and tools), so that it
        # answers with a whole, parseable tool call: an unparseable one is an HTTP 500
        marker = read_marker(checkpoint)
        reply = client.chat.completions.create(
            model=lines["model"],
            messages=[
                {"role": "system", "content": marker["system_prompt"]},
                {"role": "user", "content": "Where is order K3Z9Q?"},
            ],
            tools=marker["tools"],
            max_tokens=96,
        )
        assert reply.choices[0].message is not None
        assert lines["policy"] == f"openai:{lines['model']}@{lines['base URL']}"
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    server_pid = int(err.split("(pid ", 1)[1].split(",", 1)[0])
    assert _gone(server_pid) and "stopped" in err


def _actions(t: Trajectory) -> list[tuple[str, dict, str]]:
    return [(s.tool, s.action.params if s.action else {}, s.thought) for s in t.steps]


@pytest.mark.slow
def test_openai_agent_on_the_served_checkpoint_succeeds_like_in_process_inference(checkpoint):
    heldout = {"family": "order_status", "split": "heldout"}
    bridge = AgentInference.from_pretrained(checkpoint)
    started = time.perf_counter()
    local = collect(ENV, lambda: bridge.create_agent(), 16, seed=7, env_kwargs=heldout)
    local_s = time.perf_counter() - started
    tasks = [t.task.task_id for t in local]
    with serve_checkpoint(checkpoint) as served:
        started = time.perf_counter()
        remote = collect(ENV, agent_factory(served.policy), 16, tasks=tasks, env_kwargs=heldout)
        remote_s = time.perf_counter() - started
    assert [t.task.task_id for t in remote] == tasks
    assert all((t.agent.name, t.agent.model) == ("openai", served.model) for t in remote)
    # every reply the server sent carries its usage (a tool call it could not parse is an
    # HTTP 500 without a reply, see the next test)
    assert all(
        s.usage is not None and s.usage.prompt_tokens
        for t in remote
        for s in t.steps
        if "could not parse" not in (s.action.params.get("error", "") if s.action else "")
    )
    wins = [t.outcome.success for t in local]
    assert 0 < sum(wins) < len(wins), "the checkpoint should succeed on some tasks, not all"
    # Greedy both ways, the same prompt (the checkpoint's system prompt and tools) and the same
    # history (past calls with their thoughts): the same actions, up to and including the
    # first reply that is no valid call. After it each bridge tells the model what was wrong
    # in its own words (and the server has no text to give back for a tool call that is not
    # JSON), so the conversations part there.
    whole = 0
    for a, b in zip(local, remote, strict=True):
        first = next((i for i, s in enumerate(a.steps) if s.tool == INVALID_ACTION_TOOL), None)
        if first is None:
            assert _actions(a) == _actions(b) and a.outcome.success == b.outcome.success
            whole += 1
        else:
            assert _actions(a)[:first] == _actions(b)[:first], a.task.task_id
            assert b.steps[first].tool == INVALID_ACTION_TOOL, a.task.task_id
    assert whole >= len(local) // 2, f"only {whole} episodes without a format error"
    print(
        f"\n{sum(wins)}/{len(wins)} successes in process, {whole} episodes without a format "
        f"error acted alike throughout; in-process {local_s:.1f} s, served {remote_s:.1f} s"
    )


def test_an_unparseable_tool_call_on_the_real_server_is_an_invalid_action(checkpoint):
    env_kwargs = {"family": "order_status", "split": "heldout"}
    with serve_checkpoint(checkpoint) as served:
        # 16 tokens cut the tool call after the thought short: transformers serve answers 500
        agent = functools.partial(
            OpenAIAgent, served.model, base_url=served.base_url, max_tokens=16, max_attempts=2
        )
        [t] = collect(ENV, agent, 1, max_steps=3, env_kwargs=env_kwargs)
        assert served.process.poll() is None
    first = t.steps[0]
    assert first.tool == INVALID_ACTION_TOOL and "could not parse" in first.action.params["error"]
    assert first.observation.exit_code != 0
    # the episode went on by the env's rules: no failed model call, no error outcome
    assert len(t.steps) == 3 and t.outcome.success is False
    assert not any(s.metadata.get("model_call_failed") for s in t.steps)
    assert not (t.outcome.reason or "").startswith("error")


def _dtype_arg(cmd: list[str]) -> str:
    return cmd[cmd.index("--dtype") + 1]


@pytest.mark.parametrize(("gpu", "bf16", "expected"), [
    (False, False, "float32"), (True, True, "bfloat16"), (True, False, "float16"),
], ids=["cpu", "cuda-bf16", "cuda-older"])  # fmt: skip
def test_served_dtype_auto_is_the_one_agent_inference_acts_in(
    monkeypatch, tmp_path, gpu, bf16, expected
):
    """transformers serve's own --dtype auto keeps the saved dtype (fp32 for our checkpoints,
    slow on a GPU): knowlyr resolves it per device first. CUDA is faked, no GPU is touched."""
    import torch

    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    assert _dtype_arg(server_command(tmp_path)) == expected
    assert _dtype_arg(server_command(tmp_path, device="cpu")) == "float32"
    assert _dtype_arg(server_command(tmp_path, dtype="float16")) == "float16"  # a choice wins
