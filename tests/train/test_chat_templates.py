"""Training chat templates: each family's template masks exactly the assistant's tokens.

Every family the project names gets a template with {% generation %} markers (found or built),
checked here token by token on a conversation with a thought, tool calls and tool results: a
token is trained on exactly when it lies inside the text the model itself wrote (its turn's
output and end token), written out below in the family's own format.
"""

from __future__ import annotations

import pytest

from knowlyr.errors import TrainError
from knowlyr.train.chat_templates import (
    assistant_spans,
    has_generation_markers,
    training_chat_template,
)
from knowlyr.train.models import build_tiny_tokenizer, chat_template

pytest.importorskip("trl")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "query_order",
            "description": "Look an order up.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "respond",
            "description": "Answer the customer.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    },
]


def _call(name: str, args: dict, cid: str) -> list[dict]:
    return [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]


MESSAGES = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": "Where is order K3Z9Q?"},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": _call("query_order", {"order_id": "K3Z9Q"}, "call_0"),
    },
    {"role": "tool", "tool_call_id": "call_0", "name": "query_order", "content": "shipped"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": _call("respond", {"text": "It has shipped."}, "call_1"),
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "respond", "content": "ok"},
    {"role": "assistant", "content": "Done."},
]

QUERY = '{"name": "query_order", "arguments": {"order_id": "K3Z9Q"}}'
RESPOND = '{"name": "respond", "arguments": {"text": "It has shipped."}}'
THINK = "<think>\n\n</think>\n\n"

SMOLLM2_ORIGINAL = chat_template("smollm2")
PLAIN_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# family -> (the model's own template, expected family, source, the assistant outputs in order)
FAMILIES = {
    "smollm2": (
        SMOLLM2_ORIGINAL,
        "knowlyr",
        [
            f"Let me look.\n<tool_call>[\n{QUERY}\n]</tool_call><|im_end|>\n",
            f"<tool_call>[\n{RESPOND}\n]</tool_call><|im_end|>\n",
            "Done.<|im_end|>\n",
        ],
    ),
    "chatml": (
        PLAIN_CHATML,
        "knowlyr",
        [
            f"Let me look.\n<tool_call>\n{QUERY}\n</tool_call><|im_end|>\n",
            f"<tool_call>\n{RESPOND}\n</tool_call><|im_end|>\n",
            "Done.<|im_end|>\n",
        ],
    ),
    "qwen2_5": (
        chat_template("qwen2_5"),
        "trl",
        [
            f"\nLet me look.\n<tool_call>\n{QUERY}\n</tool_call><|im_end|>\n",
            f"\n<tool_call>\n{RESPOND}\n</tool_call><|im_end|>\n",
            "\nDone.<|im_end|>\n",
        ],
    ),
    "qwen3": (
        chat_template("qwen3"),
        "trl",
        [
            f"{THINK}Let me look.\n<tool_call>\n{QUERY}\n</tool_call><|im_end|>\n",
            f"{THINK}<tool_call>\n{RESPOND}\n</tool_call><|im_end|>\n",
            f"{THINK}Done.<|im_end|>\n",
        ],
    ),
    # Llama 3.1 / 3.2 write a call as bare JSON with "parameters" (their template drops the thought)
    "llama3_1": (
        chat_template("llama3_1"),
        "knowlyr",
        [
            '{"name": "query_order", "parameters": {"order_id": "K3Z9Q"}}<|eot_id|>',
            '{"name": "respond", "parameters": {"text": "It has shipped."}}<|eot_id|>',
            "Done.<|eot_id|>",
        ],
    ),
    "llama3_2": (
        chat_template("llama3_2"),
        "knowlyr",
        [
            '{"name": "query_order", "parameters": {"order_id": "K3Z9Q"}}<|eot_id|>',
            '{"name": "respond", "parameters": {"text": "It has shipped."}}<|eot_id|>',
            "Done.<|eot_id|>",
        ],
    ),
}

SPECIALS = [
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
    "<think>",
    "</think>",
]


@pytest.fixture(scope="module")
def tokenizer():
    """A small byte-level tokenizer with every family's special tokens (the masks are computed
    from character offsets, so any tokenizer that keeps the special tokens whole will do)."""
    tok = build_tiny_tokenizer(None)
    tok.add_special_tokens({"additional_special_tokens": SPECIALS})
    tok.bos_token = "<|begin_of_text|>"
    return tok


def _expected_mask(tok, text: str, outputs: list[str]) -> tuple[list[int], list[int]]:
    spans, at = [], 0
    for out in outputs:
        start = text.index(out, at)
        spans.append((start, start + len(out)))
        at = start + len(out)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = []
    for a, b in enc["offset_mapping"]:
        inside = [s <= a and b <= e for s, e in spans]
        crossing = [a < e and s < b for s, e in spans]
        assert any(inside) or not any(crossing), f"token {text[a:b]!r} straddles a span edge"
        mask.append(int(any(inside)))
    return enc["input_ids"], mask


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_training_template_masks_exactly_the_assistant_tokens(tokenizer, family):
    own, source, outputs = FAMILIES[family]
    tokenizer.chat_template = own
    choice = training_chat_template(tokenizer)
    assert (choice.family, choice.source) == (family, source)
    assert has_generation_markers(choice.template) and choice.renders_tools

    text = tokenizer.apply_chat_template(
        MESSAGES, tools=TOOLS, chat_template=choice.template, tokenize=False
    )
    ids, mask = assistant_spans(tokenizer, MESSAGES, choice.template, tools=TOOLS)
    want_ids, want_mask = _expected_mask(tokenizer, text, outputs)
    assert ids == want_ids
    for i, (got, want) in enumerate(zip(mask, want_mask, strict=True)):
        assert got == want, f"token {i} {tokenizer.decode([ids[i]])!r}: mask {got}, expected {want}"
    trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained == "".join(outputs)
    # the tools, the tool results and the user's words are shown, never trained on
    assert "query_order" in text and "shipped" in text and "K3Z9Q?" not in trained


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_training_template_renders_plain_chats_like_the_model(tokenizer, family):
    own, _, _ = FAMILIES[family]
    tokenizer.chat_template = own
    choice = training_chat_template(tokenizer)
    for messages, gen in [
        ([*MESSAGES[:2], {"role": "assistant", "content": "Hi."}], False),
        ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}], False),
        ([{"role": "user", "content": "Hi"}], True),
    ]:
        want = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        got = tokenizer.apply_chat_template(
            messages, chat_template=choice.template, tokenize=False, add_generation_prompt=gen
        )
        assert got == want


def test_chatml_default_system_turn_is_kept(tokenizer):
    own = PLAIN_CHATML.replace(
        "{% for message in messages %}",
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are Zed.<|im_end|>\\n' }}{% endif %}",
    )
    tokenizer.chat_template = own
    choice = training_chat_template(tokenizer)
    assert choice.family == "chatml"
    text = tokenizer.apply_chat_template(
        MESSAGES[1:], tools=TOOLS, chat_template=choice.template, tokenize=False
    )
    assert text.startswith("<|im_start|>system\nYou are Zed.\n\n# Tools")


def test_template_with_markers_is_used_as_it_is(tokenizer):
    tokenizer.chat_template = chat_template("compact_tools")
    choice = training_chat_template(tokenizer)
    assert (choice.source, choice.template) == ("own", chat_template("compact_tools"))


def test_unknown_template_is_one_clear_error(tokenizer):
    tokenizer.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    with pytest.raises(TrainError, match=r"chat_template=.*assistant_only_loss=False"):
        training_chat_template(tokenizer)


def test_given_template_needs_markers(tokenizer):
    tokenizer.chat_template = PLAIN_CHATML
    with pytest.raises(TrainError, match="no \\{% generation %\\} markers"):
        training_chat_template(tokenizer, PLAIN_CHATML)
    assert training_chat_template(tokenizer, "chatml_training").source == "given"


def test_plain_llama3_trains_only_without_tool_calls(tokenizer):
    """TRL's Llama 3 training template renders no tool calls: rows with them are an error."""
    from datasets import Dataset

    from knowlyr.train.sft_config import KnowlyrSFTConfig
    from knowlyr.train.sft_trainer import use_training_template

    tokenizer.chat_template = chat_template("llama3")
    choice = training_chat_template(tokenizer)
    assert (choice.family, choice.renders_tools) == ("llama3", False)
    config = KnowlyrSFTConfig(output_dir="unused", report_to="none")
    rows = Dataset.from_list([{"messages": MESSAGES}])
    with pytest.raises(TrainError, match="does not render tool calls"):
        use_training_template(tokenizer, rows, config)


def test_the_trainer_puts_a_built_template_on_the_tokenizer(tokenizer):
    """SmolLM2's own template renders no tool calls: training (and the saved model) use the
    training template, with assistant-only loss or without it."""
    from datasets import Dataset

    from knowlyr.train.sft_config import KnowlyrSFTConfig
    from knowlyr.train.sft_trainer import use_training_template

    rows = Dataset.from_list([{"messages": MESSAGES, "tools": TOOLS}])
    for only_assistant in (True, False):
        tokenizer.chat_template = SMOLLM2_ORIGINAL
        config = KnowlyrSFTConfig(output_dir="unused", assistant_only_loss=only_assistant)
        choice = use_training_template(tokenizer, rows, config)
        assert choice.family == "smollm2"
        assert tokenizer.chat_template == chat_template("smollm2_training")
    # a template TRL patches is left for TRL to swap in; an unknown one is an error only when
    # assistant-only loss needs markers
    tokenizer.chat_template = chat_template("qwen2_5")
    config = KnowlyrSFTConfig(output_dir="unused")
    assert use_training_template(tokenizer, rows, config).source == "trl"
    assert tokenizer.chat_template == chat_template("qwen2_5")
    tokenizer.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with pytest.raises(TrainError, match="assistant_only_loss=False"):
        use_training_template(tokenizer, rows, config)
    config = KnowlyrSFTConfig(output_dir="unused", assistant_only_loss=False)
    assert use_training_template(tokenizer, rows, config) is None
