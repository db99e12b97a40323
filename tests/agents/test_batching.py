"""Batched generation: concurrent callers share one decode loop and get what they get alone."""

from __future__ import annotations

import threading

import pytest
import torch

from knowlyr.agents.batching import BatchedGenerator, resolve_device, resolve_dtype
from knowlyr.agents.inference import AgentInference
from knowlyr.errors import ConfigError
from knowlyr.rollout import collect
from knowlyr.train.models import build_tiny_model

TEXTS = [
    "order K3Z9Q has shipped",
    "What is the status of order AB12C? It is pending.",
    "user U4497: name=Eli Voss, orders: 6SOS6 (2026-03-04, cancelled)",
] * 4


@pytest.fixture(scope="module")
def tiny():
    model, tok = build_tiny_model(TEXTS, hidden_size=64, seed=3)
    model.eval()
    return model, tok


@pytest.fixture(scope="module")
def prompts(tiny):
    _, tok = tiny
    words = ["order", "K3Z9Q", "status", "pending", "Eli", "U4497", "2026", "shipped", "the"]
    # lengths from 2 to ~40 tokens: rows of one batch need different amounts of left padding
    return [tok(" ".join(words[: 1 + i % 9] * (1 + i // 3)))["input_ids"] for i in range(14)]


def _generator(tiny, **kw):
    model, tok = tiny
    return BatchedGenerator(
        model, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id, **kw
    )


def _concurrently(fn, n):
    out = [None] * n

    def run(i):
        out[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_greedy_batched_equals_one_at_a_time_and_model_generate(tiny, prompts):
    model, tok = tiny
    with _generator(tiny) as gen:
        alone = [gen.generate(p, max_new_tokens=24) for p in prompts]
        together = _concurrently(
            lambda i: gen.generate(prompts[i], max_new_tokens=24), len(prompts)
        )
        assert max(gen.batch_sizes) > 1  # the concurrent calls really shared batches
    assert together == alone
    for p, got in zip(prompts, alone, strict=True):
        ref = model.generate(
            torch.tensor([p]),
            max_new_tokens=24,
            do_sample=False,
            eos_token_id=[tok.eos_token_id],
            pad_token_id=tok.pad_token_id,
        )[0, len(p) :].tolist()
        assert got == ref


def test_a_sampled_row_draws_from_its_own_seed_whatever_its_batch(tiny, prompts):
    with _generator(tiny) as gen:
        alone = [gen.generate(p, max_new_tokens=16, temperature=1.0, seed=11) for p in prompts]
        together = _concurrently(
            lambda i: gen.generate(prompts[i], max_new_tokens=16, temperature=1.0, seed=11),
            len(prompts),
        )
        other_seed = gen.generate(prompts[5], max_new_tokens=16, temperature=1.0, seed=12)
        mixed = _concurrently(  # sampled and greedy rows in one batch
            lambda i: gen.generate(
                prompts[i], max_new_tokens=16, temperature=1.0 if i % 2 else 0.0, seed=11
            ),
            len(prompts),
        )
        greedy = [gen.generate(p, max_new_tokens=16) for p in prompts]
    assert together == alone
    assert other_seed != alone[5]
    assert mixed == [alone[i] if i % 2 else greedy[i] for i in range(len(prompts))]


def test_max_new_tokens_is_per_request(tiny, prompts):
    _, tok = tiny
    with _generator(tiny) as gen:
        outs = _concurrently(
            lambda i: gen.generate(prompts[i], max_new_tokens=1 + 3 * i, temperature=0.0), 6
        )
    # each row stops at its own limit, or earlier only by ending its turn
    for i, out in enumerate(outs):
        assert len(out) == 1 + 3 * i or (len(out) < 1 + 3 * i and out[-1] == tok.eos_token_id)
    assert len({len(o) for o in outs}) > 1


def test_bad_requests_are_refused_naming_the_parameter(tiny):
    with _generator(tiny) as gen:
        with pytest.raises(ConfigError, match="max_new_tokens"):
            gen.generate([1, 2], max_new_tokens=0)
        with pytest.raises(ConfigError, match="temperature"):
            gen.generate([1, 2], max_new_tokens=2, temperature=-1)
        with pytest.raises(ConfigError, match="top_p"):
            gen.generate([1, 2], max_new_tokens=2, top_p=0)
        with pytest.raises(ConfigError, match="input_ids"):
            gen.generate([], max_new_tokens=2)
    with pytest.raises(ConfigError, match="max_batch"):
        _generator(tiny, max_batch=0)
    with pytest.raises(ConfigError, match="closed"):
        gen.generate([1, 2], max_new_tokens=2)


def test_a_failing_batch_fails_each_of_its_callers_and_the_generator_goes_on(tiny, prompts):
    _, tok = tiny
    with _generator(tiny) as gen:
        bad = len(tok)  # an id past the embedding table
        errors = _concurrently(
            lambda i: _error_of(lambda: gen.generate([bad, bad], max_new_tokens=2)), 3
        )
        assert all(isinstance(e, IndexError) for e in errors)
        assert gen.generate(prompts[0], max_new_tokens=4)  # still serving


def _error_of(fn):
    try:
        fn()
    except Exception as e:
        return e
    return None


def test_resolve_device_picks_the_gpu_only_when_there_is_one():
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device(None) == resolve_device("auto")
    assert resolve_device("cpu") == "cpu"


def test_resolve_dtype_acts_in_fp32_on_the_cpu():
    assert not torch.cuda.is_available()  # what this machine is
    assert resolve_dtype("auto", resolve_device("auto")) is torch.float32
    assert resolve_dtype(None, "cpu") is torch.float32
    assert resolve_dtype("bf16", "cpu") is torch.bfloat16  # a choice wins
    assert resolve_dtype("torch.float16", "cpu") is torch.float16
    assert resolve_dtype(torch.float64, "cpu") is torch.float64
    with pytest.raises(ConfigError, match=r"dtype must be 'auto'.*got 'int8'"):
        resolve_dtype("int8", "cpu")


@pytest.mark.parametrize(("bf16", "expected"), [(True, "bfloat16"), (False, "float16")])
def test_resolve_dtype_on_a_gpu_prefers_bf16_where_supported(monkeypatch, bf16, expected):
    """The choice logic of the GPU branch, with CUDA faked (no GPU is touched)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    where = resolve_device("auto")
    assert where == "cuda"
    assert resolve_dtype("auto", where) is getattr(torch, expected)
    assert resolve_dtype("auto", "cuda:1") is getattr(torch, expected)
    assert resolve_dtype("auto", "cpu") is torch.float32  # GPU there, not used
    assert resolve_dtype("float32", where) is torch.float32


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_concurrent_episodes_are_the_episodes_run_one_at_a_time(tiny, temperature):
    """collect() at concurrency 8 with agents of one AgentInference: the same trajectories
    (greedy, and sampled: each turn's seed comes from its episode) as one at a time."""
    model, tok = tiny
    bridge = AgentInference(model, tok, max_new_tokens=12, temperature=temperature)
    kw = {"family": "order_status"}
    try:
        one = collect("knowlyr/conversation", lambda: bridge.create_agent(seed=4), 10, seed=7,
                      max_steps=2, env_kwargs=kw)  # fmt: skip
        many = collect("knowlyr/conversation", lambda: bridge.create_agent(seed=4), 10, seed=7,
                       max_steps=2, env_kwargs=kw, concurrency=8)  # fmt: skip
    finally:
        bridge.close()
    assert [t.id for t in many] == [t.id for t in one]
    assert max(bridge.batcher.batch_sizes) > 1
