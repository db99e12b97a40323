from __future__ import annotations

import pytest

from knowlyr.agents.action_format import (
    INVALID_ACTION_TOOL,
    action_to_message,
    parse_action_text,
    render_action,
)


@pytest.mark.parametrize(
    "action",
    [
        {"tool": "respond", "params": {"text": "done"}},
        {"tool": "query_stats", "params": {"order_id": "K3Z9Q"}, "thought": "check the order"},
        {"tool": "bash", "params": {"command": 'echo "a\\nb" | grep -c a', "timeout": 5}},
        {"tool": "noop", "params": {}},
        {
            "tool": "write_file",
            "params": {"path": "é.txt", "content": "<tool_call> inside </tool_call>?"},
        },
    ],
)
def test_render_then_parse_gives_back_the_action(action):
    parsed = parse_action_text(render_action(action) + "<|im_end|>")
    assert parsed["tool"] == action["tool"]
    assert parsed["params"] == action["params"]
    assert parsed["thought"] == action.get("thought", "")


def test_render_matches_the_chat_template_text_exactly():
    from transformers import PreTrainedTokenizerFast  # noqa: F401  (template rendering needs transformers)

    from knowlyr.train.models import build_tiny_tokenizer

    tok = build_tiny_tokenizer(None)
    action = {"tool": "query_stats", "params": {"order_id": "K3Z9Q"}, "thought": "Look it up."}
    msgs = [{"role": "user", "content": "hi"}, action_to_message(action)]
    text = tok.apply_chat_template(msgs, tokenize=False)
    prompt = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    assert text.startswith(prompt)
    assert text[len(prompt) :] == render_action(action) + "<|im_end|>\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I think the order shipped.", "no tool call"),
        ('My answer: {"name": "Ann", "age": 3}', "no tool call"),
        ("```python\nprint(1)\n```", "no tool call"),
        ('```json\n{"name": "respond", "arguments": \n```', "fenced tool call is not valid JSON"),
        ("<tool_call>[]</tool_call>", "list is empty"),
        ('<tool_call>\n{"name": "respond", "arguments": {"text": \n</tool_call>', "not valid JSON"),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', "needs"),
        ('<tool_call>\n{"name": "x", "arguments": [1]}\n</tool_call>', "must be an object"),
    ],
)
def test_unparseable_text_becomes_an_invalid_action_not_an_exception(text, reason):
    a = parse_action_text(text)
    assert a["tool"] == INVALID_ACTION_TOOL
    assert reason in a["params"]["error"]


def test_plain_text_can_go_to_a_text_tool_and_string_arguments_are_decoded():
    assert parse_action_text("It shipped.", text_tool="respond") == {
        "tool": "respond",
        "params": {"text": "It shipped."},
        "thought": "",
    }
    a = parse_action_text(
        '<tool_call>{"name": "r", "arguments": "{\\"x\\": 1}"}</tool_call><|im_end|>junk'
    )
    assert a["params"] == {"x": 1}


CALL = {"tool": "query_order", "params": {"order_id": "K3Z9Q"}}


@pytest.mark.parametrize(
    ("text", "thought"),
    [
        # Qwen / Hermes / knowlyr
        (
            'Look it up.\n<tool_call>\n{"name": "query_order", "arguments": {"order_id": "K3Z9Q"}}\n</tool_call><|im_end|>',
            "Look it up.",
        ),
        # SmolLM2: a list in <tool_call>
        (
            '<tool_call>[\n{"name": "query_order", "arguments": {"order_id": "K3Z9Q"}}\n]</tool_call><|im_end|>',
            "",
        ),
        # Llama 3.1 / 3.2: a bare object with "parameters", possibly after <|python_tag|>
        ('{"name": "query_order", "parameters": {"order_id": "K3Z9Q"}}<|eot_id|>', ""),
        (
            '<|python_tag|>{"name": "query_order", "parameters": {"order_id": "K3Z9Q"}}<|eom_id|>',
            "",
        ),
        # a bare object after some words
        ('Checking. {"name": "query_order", "arguments": {"order_id": "K3Z9Q"}}', "Checking."),
        # fenced blocks
        (
            'Sure:\n```json\n{"name": "query_order", "arguments": {"order_id": "K3Z9Q"}}\n```',
            "Sure:",
        ),
        ('```\n[{"name": "query_order", "arguments": "{\\"order_id\\": \\"K3Z9Q\\"}"}]\n```', ""),
        # an OpenAI tool-call object written as text
        (
            '{"type": "function", "function": {"name": "query_order", "arguments": {"order_id": "K3Z9Q"}}}',
            "",
        ),
    ],
)
def test_each_reply_format_parses(text, thought):
    assert parse_action_text(text) == {**CALL, "thought": thought}


@pytest.mark.parametrize(
    "message",
    [
        # a server with a tool parser: OpenAI's tool_calls fields (arguments as a JSON string)
        {
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "query_order", "arguments": '{"order_id": "K3Z9Q"}'},
                }
            ],
        },
        # the older function_call field
        {
            "content": None,
            "function_call": {"name": "query_order", "arguments": '{"order_id": "K3Z9Q"}'},
        },
        # a server without a parser: the call in the text, in the model's own format
        {"content": '{"name": "query_order", "parameters": {"order_id": "K3Z9Q"}}'},
        {
            "content": '<tool_call>[{"name": "query_order", "arguments": {"order_id": "K3Z9Q"}}]</tool_call>'
        },
    ],
)
def test_openai_compatible_reply_fields_parse(message):
    from knowlyr.agents.serve import reply_action

    assert reply_action(message) == {**CALL, "thought": ""}


def test_a_format_error_is_a_step_the_model_is_told_about():
    from knowlyr.agents.inference import ModelAgent

    class Scripted:
        model = None
        replies = iter(
            ["I would look it up.", '{"name": "query_order", "arguments": {"order_id": "K3Z9Q"}}']
        )

        def generate(self, messages, tools=None, seed=None):
            return next(self.replies)

    tools = [{"type": "function", "function": {"name": "query_order", "parameters": {}}}]
    agent = ModelAgent(Scripted(), system_prompt=None, tools=tools)
    agent.reset({"task": {"instruction": "Where is K3Z9Q?"}})
    first = agent.act("Where is K3Z9Q?", {})
    assert first["tool"] == INVALID_ACTION_TOOL
    assert first["params"] == {"raw": "I would look it up.", "error": first["params"]["error"]}
    assert "no tool call" in first["params"]["error"]
    second = agent.act("unknown tool 'invalid_action'", {})
    told = agent.messages[-2]
    assert told["role"] == "user" and told["content"].startswith("Error: no tool call")
    assert "query_order" in told["content"]
    assert second == {**CALL, "thought": ""}
