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
        ("I think the order shipped.", "no <tool_call>"),
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
