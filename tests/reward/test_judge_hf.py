"""The local Hugging Face judge backend with a tiny randomly initialised model built here."""

from __future__ import annotations

import pytest

from knowlyr.reward.judge import LLMJudge, make_backend
from tests.reward.helpers import call, traj


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [
        '{"scores": {"goal_progress": 7}, "rationale": "reads the file"}',
        "TASK: fix the bug",
    ]
    tok.train_from_iterator(corpus * 20, trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    cfg = Qwen2Config(
        vocab_size=len(hf_tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=8192,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-judge")
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    hf_tok.save_pretrained(path)
    return path


def test_random_model_answers_are_recorded_as_failures(tiny_model_dir):
    backend = make_backend(f"hf:{tiny_model_dir}")
    judge = LLMJudge(backend, profile="coding", max_retries=1, max_tokens=16)
    t = traj([call("read_file", path="a.py", output="x = 1"), call("submit")])
    out = judge.judge([t])
    assert [len(r) for r in out] == [2]
    for j in out[0]:
        assert j.scores is None  # garbage is a failure, not a score
        assert "unparsable answer" in j.error and j.attempts == 2
        assert j.input_tokens > 0 and j.output_tokens > 0  # tokens were generated and counted
    assert judge.usage.failures == 2 and judge.usage.requests == 4
    assert judge.model.startswith("hf:")


def test_batched_answers_equal_one_at_a_time_answers(tiny_model_dir):
    backend = make_backend(f"hf:{tiny_model_dir}", batch_size=4)
    prompts = [
        backend._prompt_ids("You judge steps.", p)
        for p in ["TASK: fix the bug", "reads the file " * 9, "x", "goal_progress 7 " * 4]
    ]
    limits = [12, 5, 12, 9]
    alone = [backend.generate([p], [m])[0] for p, m in zip(prompts, limits, strict=True)]
    together = backend.generate(prompts, limits)
    assert backend.batches == [1, 1, 1, 1, 4]
    assert [(c.text, c.input_tokens, c.output_tokens) for c in together] == [
        (c.text, c.input_tokens, c.output_tokens) for c in alone
    ]
    assert [c.output_tokens for c in together] == limits  # no eos in a random model's answers


def test_concurrent_judge_calls_share_generate_calls(tiny_model_dir):
    backend = make_backend(f"hf:{tiny_model_dir}", batch_size=8)
    judge = LLMJudge(backend, profile="coding", max_retries=0, max_tokens=8, concurrency=8)
    steps = [call("read_file", path=f"m{i}.py", output=f"x = {i}") for i in range(15)]
    out = judge.judge([traj([*steps, call("submit")])])
    assert len(out[0]) == 16 and judge.usage.requests == 16
    assert sum(backend.batches) == 16
    assert max(backend.batches) > 1  # requests that arrived while the model was busy were batched
    assert len(backend.batches) < 16


def test_batch_size_must_be_positive(tiny_model_dir):
    from knowlyr.errors import ConfigError

    with pytest.raises(ConfigError, match="batch_size must be >= 1"):
        make_backend(f"hf:{tiny_model_dir}", batch_size=0)
