"""OpenAI and Anthropic agents in real episodes, through the official SDKs, against a real local
HTTP server (:class:`knowlyr.agents.testing.ModelServer`) speaking both wire formats."""

from __future__ import annotations

import json
import re
import time

import pytest

from knowlyr.agents import AnthropicAgent, ModelCallError, OpenAIAgent
from knowlyr.agents.api import price_for, split_base_url
from knowlyr.agents.spec import agent_factory
from knowlyr.agents.testing import ModelReply, ModelRequest, ModelServer
from knowlyr.errors import ConfigError
from knowlyr.rollout import collect
from knowlyr.trajectory import INVALID_ACTION_TOOL, Trajectory

APIS = ["openai", "anthropic"]
ENV = "knowlyr/conversation"
FAMILY = {"family": "order_status"}
TASK = "conversation-order_status-06311"  # "What is the status of order D62H0?" -> pending
TOOLS = ["query_stats", "web_search", "send_message", "respond"]


def expert(req: ModelRequest) -> ModelReply:
    """What a good model does in an order_status episode: look the order up, then answer."""
    m = re.search(r"order (\w{5}): (\w+)", " ".join(req.tool_results))
    if m:
        return ModelReply.call(
            "respond", {"text": f"Order {m[1]} is {m[2]}."}, text="Answer from the lookup.",
            input_tokens=300, output_tokens=25,
        )  # fmt: skip
    oid = re.findall(r"\b[A-Z0-9]{5}\b", req.instruction)[-1]
    return ModelReply.call("query_stats", {"order_id": oid}, text=f"Look up order {oid}.")


@pytest.fixture(scope="module")
def server():
    with ModelServer(policy=expert) as s:
        yield s


@pytest.fixture
def fresh(server):
    server.clear()
    yield server
    assert not server.errors, server.errors


def _factory(server: ModelServer, api: str, model: str = "gpt-4o-mini", **kw):
    cls = OpenAIAgent if api == "openai" else AnthropicAgent
    url = server.openai_url if api == "openai" else server.anthropic_url
    kw = {"api_key": "test-key", "timeout": 5.0, "backoff_base": 0.01, **kw}
    return lambda: cls(model, base_url=url, **kw)


def _run(server, api, n=1, **kw) -> list[Trajectory]:
    collect_kw = {k: kw.pop(k) for k in ("concurrency", "tasks", "max_steps") if k in kw}
    return collect(ENV, _factory(server, api, **kw), n, env_kwargs=FAMILY, **collect_kw)


@pytest.mark.parametrize("api", APIS)
def test_an_episode_with_correct_tool_calls_succeeds(fresh, api):
    [t] = _run(fresh, api)
    assert t.outcome.success is True and t.outcome.reason == "respond"
    assert [s.tool for s in t.steps] == ["query_stats", "respond"]
    oid = t.steps[0].action.params["order_id"]
    assert t.task.instruction.endswith(f"order {oid}?")
    assert t.steps[0].thought == f"Look up order {oid}."
    assert t.steps[1].action.params["text"].startswith(f"Order {oid} is ")
    assert t.agent.name == api and t.agent.model == "gpt-4o-mini"
    # each step carries the id of the call it answers, as the server issued it
    prefix = "call_" if api == "openai" else "toolu_"
    assert [s.action.call_id for s in t.steps] == [f"{prefix}0000_0", f"{prefix}0001_0"]
    # the model saw the system prompt, the instruction, the env's tools, then its own call
    # answered by the tool result
    first, second = fresh.view(0), fresh.view(1)
    assert first.messages[0][0] == "system" and "call respond" in first.messages[0][1]
    assert first.messages[1] == ("user", t.task.instruction)
    assert first.tools == TOOLS
    assert second.tool_results == [t.steps[0].observation.output]
    roles = [role for role, _ in second.messages]  # the assistant's thought, then its call
    assert roles == ["system", "user", "assistant", "assistant", "tool"]
    assert second.messages[2][1] == t.steps[0].thought


def test_openai_wire_format(fresh):
    [t] = _run(fresh, "openai")
    api, body = fresh.requests[1]
    assert api == "openai" and body["model"] == "gpt-4o-mini"
    assert body["tools"][0]["type"] == "function"
    assert body["tools"][0]["function"]["parameters"]["properties"]["order_id"]["type"] == "string"
    system, user, assistant, tool = body["messages"]
    assert system["role"] == "system" and user == {"role": "user", "content": t.task.instruction}
    [call] = assistant["tool_calls"]
    assert call["id"] == "call_0000_0" and call["function"]["name"] == "query_stats"
    assert json.loads(call["function"]["arguments"]) == t.steps[0].action.params
    assert tool == {
        "role": "tool",
        "tool_call_id": "call_0000_0",
        "content": t.steps[0].observation.output,
    }
    assert "max_completion_tokens" not in body and "max_tokens" not in body  # server default
    _run(fresh, "openai", max_tokens=64, temperature=0.0)
    body = fresh.requests[-1][1]  # a compatible server gets the field they all know
    assert (body["max_tokens"], body["temperature"]) == (64, 0.0)
    assert "max_completion_tokens" not in body


def test_anthropic_wire_format_uses_tool_use_and_tool_result_blocks(fresh):
    [t] = _run(fresh, "anthropic", max_tokens=256)
    api, body = fresh.requests[1]
    assert api == "anthropic" and body["max_tokens"] == 256
    assert isinstance(body["system"], str) and "call respond" in body["system"]
    tool = body["tools"][0]
    assert tool["name"] == "query_stats" and tool["input_schema"]["type"] == "object"
    user, assistant, result = body["messages"]
    assert user == {"role": "user", "content": t.task.instruction}
    assert assistant["role"] == "assistant"
    text, use = assistant["content"]
    assert text == {"type": "text", "text": t.steps[0].thought}
    assert use == {"type": "tool_use", "id": "toolu_0000_0", "name": "query_stats",
                   "input": t.steps[0].action.params}  # fmt: skip
    assert result == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_0000_0",
                "content": t.steps[0].observation.output,
            }
        ],
    }


@pytest.mark.parametrize("api", APIS)
def test_usage_and_cost_are_recorded_per_step(fresh, api):
    [t] = _run(fresh, api)
    u0, u1 = t.steps[0].usage, t.steps[1].usage
    assert (u0.prompt_tokens, u0.completion_tokens) == (120, 40)
    assert (u1.prompt_tokens, u1.completion_tokens) == (300, 25)
    assert u0.cost_usd == pytest.approx((120 * 0.15 + 40 * 0.60) / 1e6)  # gpt-4o-mini's price
    # the usage survives the trajectory's JSON (what the store and --out keep)
    assert Trajectory.from_json(t.to_json()).steps[1].usage == u1
    # a model without a known price has tokens but no invented cost; prices= sets one
    [t] = _run(fresh, api, model="local-model")
    assert t.steps[0].usage.prompt_tokens == 120 and t.steps[0].usage.cost_usd is None
    [t] = _run(fresh, api, model="local-model", prices={"local-model": (1.0, 2.0)})
    assert t.steps[0].usage.cost_usd == pytest.approx((120 * 1.0 + 40 * 2.0) / 1e6)


def test_price_table_matches_snapshots_not_other_models():
    assert price_for("claude-sonnet-4-5-20250929") == price_for("claude-sonnet-4-5") == (3.0, 15.0)
    assert price_for("gpt-4o-2024-08-06") == (2.5, 10.0)
    assert price_for("gpt-4o-mini") == (0.15, 0.60)  # not gpt-4o's
    assert price_for("claude-sonnet-4-7") is None  # a new version is not an old one's price
    assert price_for("gpt-4o", {"gpt-4o": (1.0, 1.0)}) == (1.0, 1.0)


@pytest.mark.parametrize("api", APIS)
def test_rate_limit_waits_as_long_as_retry_after_says(fresh, api):
    fresh.script(ModelReply.rate_limited(retry_after=0.5))
    [t] = _run(fresh, api)
    assert t.outcome.success is True and len(t.steps) == 2
    assert len(fresh.requests) == 3 and fresh.requests[0][1] == fresh.requests[1][1]
    waited = fresh.arrivals[1] - fresh.arrivals[0]
    assert 0.5 <= waited < 1.5, waited  # the header, not the 0.01 s backoff


@pytest.mark.parametrize("api", APIS)
def test_server_error_is_retried_with_backoff(fresh, api):
    fresh.script(ModelReply.server_error(500), ModelReply.server_error(503))
    [t] = _run(fresh, api, backoff_base=0.1)
    assert t.outcome.success is True and len(t.steps) == 2 and len(fresh.requests) == 4
    first, second = (fresh.arrivals[i + 1] - fresh.arrivals[i] for i in range(2))
    assert 0.05 <= first < 0.5 and 0.1 <= second < 0.8  # base * 2**attempt, equal jitter


@pytest.mark.parametrize("api", APIS)
def test_when_retries_run_out_the_step_fails_and_collect_goes_on(fresh, api):
    fresh.script(
        ModelReply.call("query_stats", {"order_id": "D62H0"}),
        *[ModelReply.server_error(503)] * 3,
    )
    first, second = _run(fresh, api, n=2, max_attempts=3, tasks=[TASK])
    assert [s.tool for s in first.steps] == ["query_stats", INVALID_ACTION_TOOL]
    failed = first.steps[1]
    assert "HTTP 503" in failed.action.params["error"] and "3 attempts" in failed.observation.error
    assert failed.observation.output.startswith("Error: ") and failed.metadata["model_call_failed"]
    assert first.outcome.success is False and first.outcome.reason.startswith(
        "error: ModelCallError"
    )
    assert second.outcome.success is True  # the next episode ran normally
    assert len(fresh.requests) == 1 + 3 + 2


def test_a_non_retryable_error_fails_at_once(fresh):
    fresh.script(ModelReply.server_error(400))
    [t] = _run(fresh, "openai", max_attempts=5)
    assert len(fresh.requests) == 1 and [s.tool for s in t.steps] == [INVALID_ACTION_TOOL]
    assert "not retryable" in t.steps[0].observation.error and "HTTP 400" in t.outcome.reason


def test_a_request_past_its_timeout_is_retried(fresh):
    # the timeout leaves the normal replies that follow room on a loaded CI machine
    fresh.script(ModelReply.slow(10.0))
    start = time.monotonic()
    [t] = _run(fresh, "openai", timeout=3.0)
    assert t.outcome.success is True and len(fresh.requests) == 3
    assert time.monotonic() - start < 9.0  # it did not wait for the slow answer


def test_model_call_error_carries_attempts_and_status(fresh):
    fresh.script(*[ModelReply.rate_limited(retry_after=0)] * 2)
    agent = _factory(fresh, "openai", max_attempts=2, tools=[{"name": "respond"}])()
    agent.reset({"task": {"instruction": "hi"}})
    with pytest.raises(ModelCallError, match="no attempt left") as e:
        agent.act("hi", {})
    assert (e.value.attempts, e.value.status) == (2, 429)


@pytest.mark.parametrize("api", APIS)
def test_malformed_replies_are_invalid_actions_and_the_episode_goes_on(fresh, api):
    fresh.script(
        ModelReply.say("The order is probably pending."),
        ModelReply.say(""),
        ModelReply.call("query_stats", '{"order_id": "D62H0"', text="broken JSON"),
        ModelReply.call("lookup_order", {"order_id": "D62H0"}),
        ModelReply.call("query_stats", ["D62H0"]),
    )
    [t] = _run(fresh, api, tasks=[TASK])
    assert [s.tool for s in t.steps] == [INVALID_ACTION_TOOL] * 5 + ["query_stats", "respond"]
    errors = [s.action.params["error"] for s in t.steps[:5]]
    assert errors[0] == "the reply holds no tool call" and errors[1] == "the reply is empty"
    assert errors[2].startswith("the arguments of query_stats are not valid JSON")
    assert errors[3] == "unknown tool 'lookup_order'"
    assert errors[4] == "the arguments of query_stats must be a JSON object, got list"
    assert t.steps[0].action.params["raw"] == "The order is probably pending."
    assert json.loads(t.steps[3].action.params["raw"])["name"] == "lookup_order"
    assert t.steps[2].thought == "broken JSON"
    # the env answered each with an error observation, and the model was told what was wrong
    assert all(s.observation.exit_code != 0 for s in t.steps[:5])
    assert fresh.view(1).messages[-1] == (
        "user",
        "Error: the reply holds no tool call. Reply with a call to one of the tools: "
        + ", ".join(TOOLS)
        + ".",
    )
    assert fresh.view(4).tool_results[-1].startswith("Error: unknown tool 'lookup_order'")
    assert t.outcome.success is True  # it recovered and answered right


def test_anthropic_tool_results_of_invalid_calls_are_marked_as_errors(fresh):
    fresh.script(ModelReply.call("lookup_order", {"order_id": "D62H0"}))
    _run(fresh, "anthropic", tasks=[TASK])
    [block] = fresh.requests[1][1]["messages"][-1]["content"]
    assert block["type"] == "tool_result" and block["is_error"] is True


def test_text_tool_sends_plain_text_to_respond(fresh):
    fresh.script(
        ModelReply.call("query_stats", {"order_id": "D62H0"}),
        ModelReply.say("Order D62H0 is pending."),
    )
    [t] = _run(fresh, "openai", tasks=[TASK], text_tool="respond")
    assert [s.tool for s in t.steps] == ["query_stats", "respond"]
    assert t.steps[1].action.params == {"text": "Order D62H0 is pending."}
    assert t.outcome.success is True


@pytest.mark.parametrize("api", APIS)
def test_several_calls_in_one_reply_run_in_order_before_the_next_request(fresh, api):
    fresh.script(
        ModelReply(
            text="Two lookups.",
            calls=[("query_stats", {"order_id": "D62H0"}), ("web_search", {"query": "status"})],
        )
    )
    [t] = _run(fresh, api, tasks=[TASK])
    assert [s.tool for s in t.steps] == ["query_stats", "web_search", "respond"]
    assert t.steps[0].thought == "Two lookups." and t.steps[1].thought == ""
    assert t.steps[0].usage.prompt_tokens == 120 and t.steps[1].usage is None  # one call
    assert len(fresh.requests) == 2
    second = fresh.view(1)
    assert second.tool_results == [t.steps[0].observation.output, t.steps[1].observation.output]
    messages = fresh.requests[1][1]["messages"]
    if api == "openai":
        assert [m["role"] for m in messages[-2:]] == ["tool", "tool"]
    else:
        assert [b["tool_use_id"] for b in messages[-1]["content"]] == [
            "toolu_0000_0",
            "toolu_0000_1",
        ]


@pytest.mark.parametrize("api", APIS)
def test_episodes_in_flight_at_once(api):
    with ModelServer(latency=0.3, policy=expert) as server:
        trajs = _run(server, api, n=4, concurrency=4)
        assert [t.outcome.success for t in trajs] == [True] * 4
        assert server.max_in_flight >= 3, server.max_in_flight  # overlapping requests
        assert len(server.requests) == 8 and not server.errors
    # each episode kept its own conversation
    assert len({t.task.task_id for t in trajs}) == 4
    assert all(t.steps[1].action.params["text"].split()[1] ==
               t.steps[0].action.params["order_id"] for t in trajs)  # fmt: skip


def test_cli_rollout_with_an_openai_compatible_server(fresh, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from knowlyr.cli import app

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local server needs no key
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    out = tmp_path / "f.jsonl"
    args = ["rollout", ENV, "--agent", f"openai:m@{fresh.openai_url}", "-n", "2",
            "--concurrency", "2", "--family", "order_status", "--out", str(out)]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "2 episodes, 2 successful" in r.output and "0 errored, 970 tokens;" in r.output
    trajs = [Trajectory.from_json(line) for line in out.read_bytes().splitlines()]
    assert [(t.agent.name, t.agent.model) for t in trajs] == [("openai", "m")] * 2
    assert all(s.usage is not None and s.usage.prompt_tokens for t in trajs for s in t.steps)
    assert fresh.requests[0][1]["model"] == "m"


def test_cli_rollout_without_a_key_says_how_to_fix_it(monkeypatch):
    from typer.testing import CliRunner

    from knowlyr.cli import app

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    r = CliRunner().invoke(app, ["rollout", ENV, "--agent", "openai:gpt-4o-mini", "-n", "1"])
    assert r.exit_code == 2 and "OPENAI_API_KEY" in r.output
    r = CliRunner().invoke(app, ["rollout", ENV, "--agent", "openai:", "-n", "1"])
    assert r.exit_code == 2 and "openai:<model>" in r.output


def test_agent_specs_and_the_anthropic_base_url_from_the_environment(fresh, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fresh.anthropic_url)
    [t] = collect(ENV, agent_factory("anthropic:claude-haiku-4-5"), 1, env_kwargs=FAMILY)
    assert t.outcome.success is True and (t.agent.name, t.agent.model) == (
        "anthropic",
        "claude-haiku-4-5",
    )
    assert t.steps[0].usage.cost_usd == pytest.approx((120 * 1.0 + 40 * 5.0) / 1e6)
    agent = agent_factory(f"openai:org/model:v1@{fresh.openai_url}")()
    assert (agent.model, agent.base_url) == ("org/model:v1", fresh.openai_url)
    assert split_base_url("claude-sonnet-4-5@20250929") == ("claude-sonnet-4-5@20250929", None)
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        agent_factory("anthropic:claude-haiku-4-5")


def test_by_hand_the_agent_needs_the_tools(fresh):
    import knowlyr

    env = knowlyr.make(ENV, **FAMILY)
    ts = env.reset(task=TASK)
    agent = _factory(fresh, "openai")()
    agent.reset(ts.info)
    with pytest.raises(ConfigError, match="tool_schemas"):
        agent.act(ts.observation, ts.info)
    agent = _factory(fresh, "openai", tools=env.unwrapped.tool_schemas())()
    agent.reset(ts.info)
    while not ts.done:
        action = agent.act(ts.observation, ts.info)
        ts = env.step(action)  # the action (call_id included) is a valid env action
    assert ts.info["outcome"]["success"] is True
    agent.close()


def test_the_collect_flows_task_takes_an_api_agent_spec(fresh, tmp_path):
    from knowlyr.store import Store
    from tasks.collect import collect_episodes

    spec = f"openai:m@{fresh.openai_url}"
    staged = collect_episodes.fn(str(tmp_path / "store"), ENV, spec, [TASK], 2, 0)
    assert (staged.episodes, staged.successes, staged.agent) == (2, 2, spec)
    assert Store.open(staged.store).has_blob(staged.blob) and len(fresh.requests) == 4


# -- OpenAI-compatible servers: transformers serve's habits, servers without a tool parser ------


def test_a_tool_call_the_server_cannot_parse_is_an_invalid_action_not_a_retry(fresh):
    # transformers serve answers a malformed <tool_call> with a plain-text HTTP 500
    fresh.script(ModelReply.unparsed())
    [t] = _run(fresh, "openai", tasks=[TASK])
    assert [s.tool for s in t.steps] == [INVALID_ACTION_TOOL, "query_stats", "respond"]
    assert t.outcome.success is True and len(fresh.requests) == 3  # asked again, not retried
    error = t.steps[0].action.params["error"]
    assert error.startswith("the server could not parse the reply (HTTP 500")
    assert t.steps[0].observation.exit_code != 0 and t.steps[0].usage is None
    # the text is lost: no assistant turn for it, the model is told what happened
    assert [role for role, _ in fresh.view(1).messages] == ["system", "user", "user"]
    assert fresh.view(1).messages[-1][1].startswith(f"Error: {error}. Reply with a call")


def test_other_server_errors_are_still_retried(fresh):
    fresh.script(
        ModelReply(status=503, body="Service Unavailable"),
        ModelReply.server_error(500),  # a JSON error body: the server's own fault
        ModelReply.rate_limited(retry_after=0.2),
    )
    [t] = _run(fresh, "openai", tasks=[TASK])
    assert [s.tool for s in t.steps] == ["query_stats", "respond"] and t.outcome.success is True
    assert len(fresh.requests) == 5 and fresh.arrivals[3] - fresh.arrivals[2] >= 0.2


def test_a_tool_call_written_as_text_is_parsed(fresh):
    # a server without a tool parser returns the model's <tool_call> block as plain content
    fresh.script(
        ModelReply.say(
            'Look up D62H0.\n<tool_call>\n{"name": "query_stats", "arguments": '
            '{"order_id": "D62H0"}}\n</tool_call>'
        ),
        ModelReply.say('<tool_call>\n{"name": "respond", "arguments": {"text": "pending"\n'),
    )
    [t] = _run(fresh, "openai", tasks=[TASK], text_tool="respond")
    assert [s.tool for s in t.steps] == ["query_stats", INVALID_ACTION_TOOL, "respond"]
    assert t.steps[0].action.params == {"order_id": "D62H0"}
    assert t.steps[0].thought == "Look up D62H0." and t.steps[0].action.call_id == "call_1_0"
    # a broken call is an invalid action even with text_tool, with the parser's reason
    assert t.steps[1].action.params["error"].startswith("tool call is not valid JSON")
    assert t.outcome.success is True
    # the reply goes back as the text the model wrote, answered by a tool message
    *_, assistant, tool = fresh.requests[1][1]["messages"]
    assert assistant == {"role": "assistant", "content": fresh.view(1).messages[2][1]}
    assert assistant["content"].startswith("Look up D62H0.\n<tool_call>")
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_1_0"


def test_calls_written_in_the_models_own_format_are_parsed(fresh):
    # a server without a tool parser: Llama 3.1's bare JSON, SmolLM2's list, a fenced block
    fresh.script(
        ModelReply.say('{"name": "query_stats", "parameters": {"order_id": "D62H0"}}'),
        ModelReply.say('<tool_call>[{"name": "query_stats", "arguments": {"order_id": "D62H0"}}]</tool_call>'),
        ModelReply.say('Done:\n```json\n{"name": "respond", "arguments": {"text": "pending"}}\n```'),
    )  # fmt: skip
    [t] = _run(fresh, "openai", tasks=[TASK])
    assert [s.tool for s in t.steps] == ["query_stats", "query_stats", "respond"]
    assert t.steps[0].action.params == {"order_id": "D62H0"} and t.steps[2].thought == "Done:"
    assert t.outcome.success is True


def _checkpoint_folder(path, system_prompt):
    tools = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object",
         "properties": {arg: {"type": "string"}}}}}
        for name, arg in (("query_stats", "order_id"), ("respond", "text"))
    ]  # fmt: skip
    path.mkdir()
    marker = {"tools": tools, "system_prompt": system_prompt}
    (path / "knowlyr_model.json").write_text(json.dumps(marker), encoding="utf-8")
    return str(path)


def test_a_served_knowlyr_checkpoint_is_prompted_as_it_was_trained(fresh, tmp_path):
    model = _checkpoint_folder(tmp_path / "ckpt", "You answer questions about orders.")
    [t] = collect(ENV, agent_factory(f"openai:{model}@{fresh.openai_url}"), 1, tasks=[TASK])
    assert [s.tool for s in t.steps] == ["query_stats", "respond"] and t.outcome.success is True
    first, second = fresh.view(0), fresh.view(1)
    # its saved system prompt and tools, not the env's
    assert first.messages[0] == ("system", "You answer questions about orders.")
    assert first.tools == ["query_stats", "respond"]
    # its past call goes back as the text it generated, thought included (transformers serve
    # drops the content of an assistant message that has tool_calls)
    assistant = fresh.requests[1][1]["messages"][2]
    assert assistant == {
        "role": "assistant",
        "content": 'Look up order D62H0.\n<tool_call>\n{"name": "query_stats", "arguments": '
        '{"order_id": "D62H0"}}\n</tool_call>',
    }
    assert second.tool_results == [t.steps[0].observation.output]
    # trained without a system prompt: none is sent; calls_as_text=False keeps tool_calls
    fresh.clear()
    bare = _checkpoint_folder(tmp_path / "bare", None)
    [t] = _run(fresh, "openai", model=bare, tasks=[TASK], calls_as_text=False)
    assert t.outcome.success is True
    assert [m["role"] for m in fresh.requests[1][1]["messages"]] == ["user", "assistant", "tool"]
    assert fresh.requests[1][1]["messages"][1]["tool_calls"][0]["id"] == "call_0000_0"


@pytest.mark.parametrize("api", APIS)
def test_a_reply_that_is_not_the_wire_format_is_retried_then_fails_the_step(fresh, api):
    # e.g. a proxy's error page with status 200: the SDK hands it back as text
    fresh.script(ModelReply(body="<html>502 Bad Gateway</html>"))
    [t] = _run(fresh, api, tasks=[TASK])
    assert [s.tool for s in t.steps] == ["query_stats", "respond"] and t.outcome.success is True
    assert len(fresh.requests) == 3
    fresh.clear()
    fresh.script(*[ModelReply(body="not json")] * 2)
    [t] = _run(fresh, api, tasks=[TASK], max_attempts=2)
    [failed] = t.steps
    assert failed.tool == INVALID_ACTION_TOOL and failed.metadata["model_call_failed"]
    assert "UnreadableReply" in failed.action.params["error"] and "'not json'" in t.outcome.reason
    assert len(fresh.requests) == 2
