from __future__ import annotations

from knowlyr.agents.action_format import INVALID_ACTION_TOOL, parse_action_text
from knowlyr.agents.inference import AgentInference
from knowlyr.export import export_sft
from knowlyr.train.models import build_tiny_model_for, load_model, save_model
from knowlyr.trajectory import Observation, Outcome, Step, TaskInfo, ToolCall, Trajectory


def _trajs(n=6):
    out = []
    for i in range(n):
        oid = f"K{i}Z9Q"
        out.append(
            Trajectory(
                task=TaskInfo(task_id=f"t{i}", instruction=f"What is the status of order {oid}?"),
                outcome=Outcome(success=True, score=1.0),
                steps=[
                    Step(
                        index=0,
                        thought=f"Look up order {oid}.",
                        action=ToolCall(tool="query_stats", params={"order_id": oid}),
                        observation=Observation(output=f"order {oid}: shipped"),
                    ),
                    Step(
                        index=1,
                        action=ToolCall(
                            tool="respond", params={"text": f"Order {oid} is shipped."}
                        ),
                        observation=Observation(output="Reply sent."),
                    ),
                ],
            )
        )
    return out


def test_exported_conversation_round_trips_through_the_template_and_parser(tmp_path):
    ds = export_sft(_trajs(), system_prompt="S").dataset
    model, tok = build_tiny_model_for(ds)
    save_model(model, tok, tmp_path / "m")
    _, tok2 = load_model(tmp_path / "m")
    for row in ds:
        msgs = row["messages"]
        for k, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            prompt = tok2.apply_chat_template(
                msgs[:k], tools=row["tools"], tokenize=False, add_generation_prompt=True
            )
            full = tok2.apply_chat_template(msgs[: k + 1], tools=row["tools"], tokenize=False)
            # the ids of the full text decode to the same text (one char per id token survives reload)
            ids = tok2(full, add_special_tokens=False)["input_ids"]
            assert tok2.decode(ids, skip_special_tokens=False) == full
            action = parse_action_text(full[len(prompt) :])
            call = m["tool_calls"][0]["function"]
            assert (action["tool"], action["params"], action["thought"]) == (
                call["name"],
                call["arguments"],
                m["content"],
            )
    assert (
        tok2("K3Z9Q", add_special_tokens=False)["input_ids"]
        == tok("K3Z9Q", add_special_tokens=False)["input_ids"]
    )
    assert len(tok2("K3Z9Q", add_special_tokens=False)["input_ids"]) == 5


def test_agent_history_resets_every_episode_and_uses_the_saved_prompt(tmp_path):
    ds = export_sft(_trajs(), system_prompt="Be brief.").dataset
    model, tok = build_tiny_model_for(ds)
    save_model(model, tok, tmp_path / "m", tools=ds[0]["tools"], system_prompt="Be brief.")
    bridge = AgentInference.from_pretrained(tmp_path / "m", max_new_tokens=8)
    agent = bridge.create_agent()
    agent.reset({"task": {"instruction": "What is the status of order AAAAA?"}})
    a1 = agent.act("What is the status of order AAAAA?", {})
    assert set(a1) >= {"tool", "params"}
    agent.act("some observation", {})
    assert [m["role"] for m in agent.messages][:3] == ["system", "user", "assistant"]
    assert agent.messages[0]["content"] == "Be brief."
    if a1["tool"] == INVALID_ACTION_TOOL:  # an untrained model: it is told what was wrong
        assert agent.messages[3]["role"] == "user"
        assert agent.messages[3]["content"].startswith(f"Error: {a1['params']['error']}")
    else:
        assert agent.messages[3] == {
            "role": "tool",
            "name": a1["tool"],
            "content": "some observation",
        }
    agent.reset({"task": {"instruction": "Where is order BBBBB?"}})
    assert agent.messages == []
    agent.act("Where is order BBBBB?", {})
    assert [m["role"] for m in agent.messages] == ["system", "user", "assistant"]
    assert agent.messages[1]["content"] == "Where is order BBBBB?"


def _texts(agent, episodes=3):
    out = []
    for _ in range(episodes):
        agent.reset({"task": {"instruction": "What is the status of order K1Z9Q?"}})
        agent.act("What is the status of order K1Z9Q?", {})
        out.append(agent.last_text)
    return out


def test_sampling_is_seeded_per_episode_and_greedy_at_temperature_zero(tmp_path):
    import pytest

    from knowlyr.errors import ConfigError

    ds = export_sft(_trajs(), system_prompt="S").dataset
    model, tok = build_tiny_model_for(ds, seed=0)  # untrained: a flat, varied distribution
    save_model(model, tok, tmp_path / "m")
    sampled = AgentInference.from_pretrained(tmp_path / "m", max_new_tokens=8, temperature=1.0)
    a = _texts(sampled.create_agent(seed=1))
    # the same seed gives the same episodes; attempts at one task differ; another seed differs
    assert a == _texts(sampled.create_agent(seed=1))
    assert len(set(a)) == 3
    assert _texts(sampled.create_agent(seed=2)) != a
    greedy = AgentInference.from_pretrained(tmp_path / "m", max_new_tokens=8)
    g = _texts(greedy.create_agent(seed=1))
    assert len(set(g)) == 1 and g == _texts(greedy.create_agent(seed=2))
    with pytest.raises(ConfigError, match="temperature"):
        AgentInference.from_pretrained(tmp_path / "m", temperature=-1)


def test_a_tiny_model_decodes_on_one_thread_and_restores_the_setting(tmp_path):
    import torch

    from knowlyr import _threads

    ds = export_sft(_trajs(), system_prompt="S").dataset
    model, tok = build_tiny_model_for(ds, seed=0)
    bridge = AgentInference(model, tok, max_new_tokens=4)
    seen = []
    forward = model.forward

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return forward(*args, **kwargs)

    model.forward = spy
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        bridge.generate([{"role": "user", "content": "hi"}])
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2 and _threads.TORCH_THREADS.users == 0
    finally:
        torch.set_num_threads(before)


def test_threads_loading_one_checkpoint_at_once_all_get_its_weights(tmp_path):
    """Two collection shards load the champion at the same moment; without the load lock one of
    them got an lm_head left on the meta device (and the process's default device stuck)."""
    import threading

    import torch

    from knowlyr.agents.spec import agent_factory

    ds = export_sft(_trajs(), system_prompt="S").dataset
    model, tok = build_tiny_model_for(ds, seed=0)
    save_model(model, tok, tmp_path / "m")
    expected = {n: p.clone() for n, p in model.named_parameters()}
    factory = agent_factory(f"checkpoint:{tmp_path / 'm'}")
    for _ in range(3):
        agents: list = []
        threads = [threading.Thread(target=lambda a=agents: a.append(factory())) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(agents) == 4
        for a in agents:
            params = dict(a.inference.model.named_parameters())
            assert not any(p.is_meta for p in params.values())
            assert all(torch.equal(params[n], w) for n, w in expected.items())
    assert str(torch.get_default_device()) == "cpu"


def test_a_checkpoint_acts_in_the_dtype_resolved_for_the_device(tmp_path, caplog):
    """dtype="auto" is fp32 on the CPU (bf16 on a GPU, see test_batching) whatever the folder
    was saved in, on every path that loads a checkpoint: the bridge, the collect stage's
    ``checkpoint:<path>`` agent and the evaluation stage's evaluate_checkpoint."""
    import logging

    import torch

    from knowlyr.agents.spec import agent_factory
    from knowlyr.taskset import get_suite
    from knowlyr.train.promotion import evaluate_checkpoint

    assert not torch.cuda.is_available()  # what this machine is
    ds = export_sft(_trajs(), system_prompt="S").dataset
    model, tok = build_tiny_model_for(ds, seed=0)
    save_model(model.to(torch.bfloat16), tok, tmp_path / "m")  # saved in bf16
    with caplog.at_level(logging.INFO, logger="knowlyr.agents"):
        assert AgentInference.from_pretrained(tmp_path / "m").model.dtype is torch.float32
        chosen = AgentInference.from_pretrained(tmp_path / "m", dtype="bfloat16")
        assert chosen.model.dtype is torch.bfloat16
        make = agent_factory(f"checkpoint:{tmp_path / 'm'}", max_new_tokens=4)
        assert make().inference.model.dtype is torch.float32
        make.close()
        caplog.clear()
        task = get_suite("conversation").tasks(split="train", family="order_status")[0]
        res = evaluate_checkpoint(
            str(tmp_path / "m"), "knowlyr/conversation", [task.task_id], 1, name="m",
            max_steps=1, max_new_tokens=4,
        )  # fmt: skip
    assert len(res.successes) == 1
    assert f"acting with {tmp_path / 'm'} on cpu in float32" in caplog.text


def _tools_of(env_id: str) -> list[dict]:
    from knowlyr.core.registry import make

    env = make(env_id)
    try:
        return env.unwrapped.tool_schemas()
    finally:
        env.close()


def _prompt_spy(tok) -> list[tuple]:
    """Record the tools of each prompt the tokenizer renders, and the prompt's text."""
    seen: list[tuple] = []
    render = tok.apply_chat_template

    def spy(messages, **kwargs):
        text = render(
            messages, tools=kwargs.get("tools"), tokenize=False, add_generation_prompt=True
        )
        seen.append((kwargs.get("tools"), text))
        return render(messages, **kwargs)

    tok.apply_chat_template = spy
    return seen


def test_an_agent_without_fixed_tools_shows_each_episode_its_env_tools():
    """A checkpoint trained on several tool sets saves none (dataset_prompt_info): its agent
    shows each episode the tools its env gives at reset, not one suite's."""
    from knowlyr.rollout import collect
    from knowlyr.train.models import build_tiny_model

    model, tok = build_tiny_model(None, hidden_size=16, num_layers=1, num_heads=2)
    seen = _prompt_spy(tok)
    bridge = AgentInference(model, tok, max_new_tokens=4)
    try:
        agent = bridge.create_agent()
        assert agent.tools is None
        collect("knowlyr/conversation", agent, 1, max_steps=2)
        conv = list(seen)
        seen.clear()
        collect("knowlyr/discussion", agent, 1, max_steps=1)
        disc = list(seen)
    finally:
        bridge.close()
    conv_tools, disc_tools = _tools_of("knowlyr/conversation"), _tools_of("knowlyr/discussion")
    assert len(conv) == 2 and all(tools == conv_tools for tools, _ in conv)
    assert "Tools: query_stats web_search send_message respond<|im_end|>" in conv[0][1]
    assert "knowledge_base" not in conv[0][1]
    # four tokens make no tool call: the correction names the episode's tools
    assert "one of the tools: query_stats, web_search, send_message, respond" in conv[1][1]
    assert len(disc) == 1 and disc[0][0] == disc_tools
    assert "Tools: knowledge_base" in disc[0][1] and "query_stats" not in disc[0][1]


def test_an_agent_with_fixed_tools_keeps_them_in_every_episode(tmp_path):
    from knowlyr.rollout import collect
    from knowlyr.train.models import build_tiny_model

    model, tok = build_tiny_model(None, hidden_size=16, num_layers=1, num_heads=2)
    fixed = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "The one tool it was trained with.",
                "parameters": {"type": "object", "properties": {}, "required": []},
            },
        }
    ]
    save_model(model, tok, tmp_path / "m", tools=fixed, system_prompt="S")  # as a marker does
    bridge = AgentInference.from_pretrained(tmp_path / "m", max_new_tokens=4)
    seen = _prompt_spy(bridge.tokenizer)
    try:
        collect("knowlyr/conversation", bridge.create_agent(), 1, max_steps=1)
        collect("knowlyr/discussion", bridge.create_agent(), 1, max_steps=1)
        given = _tools_of("knowlyr/conversation")[:1]
        collect("knowlyr/discussion", bridge.create_agent(tools=given), 1, max_steps=1)
    finally:
        bridge.close()
    assert [tools for tools, _ in seen] == [fixed, fixed, given]
    assert "Tools: lookup<|im_end|>" in seen[0][1] and "query_stats" not in seen[0][1]
