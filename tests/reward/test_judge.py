"""LLM judge against a real local HTTP server, through the official Anthropic and OpenAI SDKs."""

from __future__ import annotations

import json

import pytest

from knowlyr.core import DomainProfile, get_profile
from knowlyr.reward.judge import (
    JudgeCache,
    LLMJudge,
    build_prompt,
    make_backend,
    parse_judgement,
)
from knowlyr.reward.rubrics import judge_rubrics
from knowlyr.reward.testing import JudgeServer, Reply
from tests.reward.helpers import call, load_fixture, traj

APIS = ["anthropic", "openai"]
RUBRICS = ["goal_progress", "tool_selection", "param_correctness"]


@pytest.fixture(scope="module")
def server():
    with JudgeServer() as s:
        yield s


@pytest.fixture
def fresh(server):
    server._script.clear()
    server.requests.clear()
    return server


def _judge(server: JudgeServer, api: str, **kw) -> LLMJudge:
    url = server.anthropic_url if api == "anthropic" else server.openai_url
    timeout = kw.pop("timeout", 5.0)
    backend = make_backend(f"{api}:judge-test", base_url=url, api_key="test-key", timeout=timeout)
    kw.setdefault("backoff_base", 0.01)
    return LLMJudge(backend, profile="coding", **kw)


def _one_step():
    return [traj([call("read_file", path="a.py", output="x = 1")], task_id="one")]


@pytest.mark.parametrize("api", APIS)
def test_success_scores_rationale_and_usage(fresh, api):
    fresh.script(Reply.scores({"goal_progress": 8, "tool_selection": 10, "param_correctness": 5},
                              rationale="reads the right file", input_tokens=300, output_tokens=50))  # fmt: skip
    judge = _judge(fresh, api, price_per_mtok=(3.0, 15.0))
    [[j]] = judge.judge(_one_step())
    assert j.scores == {"goal_progress": 0.8, "tool_selection": 1.0, "param_correctness": 0.5}
    assert j.rationale == "reads the right file" and j.error is None and j.attempts == 1
    assert (j.input_tokens, j.output_tokens) == (300, 50)
    assert judge.usage.cost_usd == pytest.approx((300 * 3 + 50 * 15) / 1e6)
    api_seen, body = fresh.requests[0]
    assert api_seen == api and body["model"] == "judge-test"
    text = json.dumps(body)
    assert "RUBRICS: goal_progress, tool_selection, param_correctness" in text
    assert "CURRENT STEP [0]" in text


@pytest.mark.parametrize("api", APIS)
def test_malformed_json_is_retried_then_recorded_as_failure(fresh, api):
    fresh.script(Reply.malformed(), Reply.malformed('{"scores": {"goal_progress": 7}}'),
                 Reply.malformed("```json\n{not json}\n```"))  # fmt: skip
    judge = _judge(fresh, api, max_retries=2)
    [[j]] = judge.judge(_one_step())
    assert j.scores is None  # never a made-up 0.5
    assert "unparsable answer" in j.error and "after 3 attempts" in j.error
    assert j.attempts == 3 and len(fresh.requests) == 3
    assert judge.usage.failures == 1
    # a failure is not cached: the next run asks again and can succeed
    [[again]] = judge.judge(_one_step())
    assert again.scores is not None and not again.cached


@pytest.mark.parametrize("api", APIS)
def test_malformed_then_valid_answer_succeeds(fresh, api):
    fresh.script(Reply.malformed(), Reply.scores(dict.fromkeys(RUBRICS, 6)))
    [[j]] = _judge(fresh, api).judge(_one_step())
    assert j.scores == dict.fromkeys(RUBRICS, 0.6) and j.attempts == 2


@pytest.mark.parametrize("api", APIS)
def test_rate_limit_waits_for_retry_after(fresh, api):
    fresh.script(Reply.rate_limited(retry_after=0.3))
    judge = _judge(fresh, api, backoff_base=0.001)
    import time

    t0 = time.perf_counter()
    [[j]] = judge.judge(_one_step())
    waited = time.perf_counter() - t0
    assert j.scores is not None and j.attempts == 2 and judge.usage.retries == 1
    assert waited >= 0.3  # the retry-after header, not the 1 ms backoff


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_are_retried(fresh, api, status):
    fresh.script(Reply.server_error(status), Reply.server_error(status))
    [[j]] = _judge(fresh, api).judge(_one_step())
    assert j.scores is not None and j.attempts == 3


@pytest.mark.parametrize("api", APIS)
def test_persistent_errors_become_failures(fresh, api):
    fresh.script(*[Reply.server_error(500)] * 3)
    [[j]] = _judge(fresh, api, max_retries=2).judge(_one_step())
    assert j.scores is None and "HTTP 500" in j.error


@pytest.mark.parametrize("api", APIS)
def test_client_error_is_not_retried(fresh, api):
    fresh.script(Reply(status=400))
    [[j]] = _judge(fresh, api).judge(_one_step())
    assert j.scores is None and "HTTP 400" in j.error and len(fresh.requests) == 1


@pytest.mark.parametrize("api", APIS)
def test_timeout_is_retried_then_fails(fresh, api):
    fresh.script(Reply.slow(2.5), Reply.slow(2.5))
    [[j]] = _judge(fresh, api, timeout=0.8, max_retries=1).judge(_one_step())
    assert j.scores is None and "Timeout" in j.error
    # the retry's timeout must leave a normal reply room on a loaded CI machine: 0.2 s did
    # not once, nor did 0.8 s beside the training tests on 2 cores
    fresh.script(Reply.slow(8.0))
    [[ok]] = _judge(fresh, api, timeout=4.0, max_retries=1).judge(_one_step())
    assert ok.scores is not None and ok.attempts == 2, ok.error


@pytest.mark.parametrize("api", APIS)
def test_cache_judges_nothing_twice(fresh, api, tmp_path):
    t = traj([call("read_file", path="a.py", output="x"), call("bash", command="pytest")])
    path = tmp_path / "judge-cache.jsonl"
    judge = _judge(fresh, api, cache=path)
    first = judge.judge([t, t])  # the same trajectory twice in one batch
    assert len(fresh.requests) == 2 and judge.usage.cache_hits == 2
    assert [j.cached for j in first[1]] == [True, True]
    judge.judge([t])
    assert len(fresh.requests) == 2
    # a new judge with the on-disk cache asks nothing either
    again = _judge(fresh, api, cache=JudgeCache(path)).judge([t])
    assert len(fresh.requests) == 2 and all(j.cached and j.scores for j in again[0])
    # another model is another cache key
    other = make_backend(f"{api}:other-model", base_url=judge.backend._make().base_url, api_key="k")
    LLMJudge(other, profile="coding", cache=JudgeCache(path)).judge([t])
    assert len(fresh.requests) == 4


@pytest.mark.parametrize("api", APIS)
def test_fixture_log_judged_with_many_calls_in_flight(fresh, api):
    trajs = load_fixture("openhands/resolver_output.jsonl")
    n = sum(len(t.steps) for t in trajs)
    fresh.latency = 0.05
    try:
        out = _judge(fresh, api, concurrency=8).judge(trajs)
    finally:
        fresh.latency = 0.0
    assert [len(r) for r in out] == [len(t.steps) for t in trajs]
    assert all(j.scores is not None for r in out for j in r)
    assert len(fresh.requests) == n


def test_profile_rubric_additions_are_judged(fresh):
    prof = DomainProfile(domain="x", rubric_weights={"goal_progress": 1.0, "safety": 0.5})
    assert [r.name for r in judge_rubrics(prof)][-1] == "safety"
    backend = make_backend("openai:judge-test", base_url=fresh.openai_url, api_key="k")
    [[j]] = LLMJudge(backend, profile=prof).judge(_one_step())
    assert set(j.scores) == {"goal_progress", "tool_selection", "param_correctness", "safety"}


def test_long_trajectory_prompt_is_truncated_but_keeps_current_step():
    steps = [call("bash", command=f"echo {i}", output="y" * 5000) for i in range(200)]
    t = traj(steps)
    _system, prompt = build_prompt(t, 199, judge_rubrics(get_profile("coding")), history_chars=3000)
    assert len(prompt) < 12_000
    assert "older steps omitted" in prompt and "CURRENT STEP [199]" in prompt
    assert "[198] bash" in prompt and "[0] bash" not in prompt
    assert "chars truncated" in prompt


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (
            '{"scores": {"goal_progress": 7, "tool_selection": 3, "param_correctness": 0}, "rationale": "r"}',
            True,
        ),
        (
            'Sure!\n```json\n{"scores": {"goal_progress": 7, "tool_selection": 3, "param_correctness": 10}, "rationale": ""}\n```',
            True,
        ),
        (
            '{"scores": {"goal_progress": 11, "tool_selection": 3, "param_correctness": 0}, "rationale": "r"}',
            False,
        ),
        (
            '{"scores": {"goal_progress": "high", "tool_selection": 3, "param_correctness": 0}, "rationale": "r"}',
            False,
        ),
        ('{"scores": {"goal_progress": 7, "tool_selection": 3, "param_correctness": 0}}', False),
        ("no json at all", False),
    ],
)
def test_parse_judgement(text, ok):
    if ok:
        scores, _ = parse_judgement(text, RUBRICS)
        assert set(scores) == set(RUBRICS) and all(0 <= v <= 1 for v in scores.values())
    else:
        with pytest.raises(ValueError):
            parse_judgement(text, RUBRICS)


def test_make_backend_errors():
    with pytest.raises(ValueError, match="PROVIDER:MODEL"):
        make_backend("anthropic")
    with pytest.raises(ValueError, match="unknown provider"):
        make_backend("cohere:x")
    with pytest.raises(ValueError, match="does not exist"):
        make_backend("hf:/nonexistent/model")


def test_prompt_shows_a_coding_step_as_command_exit_code_and_output():
    out = "E   AssertionError: 1 != 2\n" + "x" * 5000 + "\n===== 1 failed in 0.2s ====="
    t = traj([
        call("read_file", path="src/app.py", output="def f(): return 1"),
        call("bash", command="python -m pytest -q tests/test_app.py", output=out, exit_code=1),
    ])  # fmt: skip
    _system, prompt = build_prompt(t, 1, judge_rubrics(get_profile("coding")))
    current = prompt.split("CURRENT STEP [1]:")[1]
    assert "$ python -m pytest -q tests/test_app.py" in current  # the command as written
    assert "exit code 1 (FAILED)" in current
    # an excerpt of the output: its head and its tail, and how much was cut
    assert "AssertionError: 1 != 2" in current and "1 failed in 0.2s" in current
    assert "chars truncated" in current
    assert "exit code 0\n" in prompt.split("CURRENT STEP")[0]  # the history step too
