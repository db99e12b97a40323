"""Layer 2: an LLM judge scoring every step on rubrics, with a JSON answer and a rationale.

Backends (:mod:`knowlyr.reward.backends`, re-exported here): :class:`AnthropicBackend`
(official ``anthropic`` SDK, ``AsyncAnthropic``), :class:`OpenAIBackend` (official ``openai``
SDK, ``AsyncOpenAI``) and :class:`HFBackend` (a local Hugging Face causal LM). :class:`LLMJudge` runs many calls at once (``concurrency``,
default 16, an ``asyncio.Semaphore``), retries rate limits (honouring ``retry-after``),
server errors, timeouts and unparsable answers with exponential backoff and jitter, caches
answers by (model, rubric version, prompt) in memory and optionally on disk, and accounts
tokens and cost. The prompt holds the task, a truncated history (newest steps first to
survive the budget) and the current step, so long trajectories fit a context window.

An answer that still cannot be parsed after every retry is recorded as a **failure**
(``scores=None`` and ``error``), never as a made-up score.

Example:
    >>> judge = LLMJudge(make_backend("anthropic:claude-sonnet-4-5"), profile="coding")  # doctest: +SKIP
    >>> results = judge.judge(trajectories)  # doctest: +SKIP
    >>> results[0][0].scores, results[0][0].rationale  # one StepJudgement per step  # doctest: +SKIP
    ({'goal_progress': 0.7, 'tool_selection': 0.9, 'param_correctness': 0.8}, '...')
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import random
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from knowlyr.core.profile import DomainProfile, get_profile
from knowlyr.errors import ConfigError
from knowlyr.reward.backends import (
    AnthropicBackend,
    Completion,
    HFBackend,
    JudgeBackend,
    OpenAIBackend,
    make_backend,
)
from knowlyr.reward.rubrics import RUBRIC_VERSION, Rubric, judge_rubrics
from knowlyr.trajectory import Step, Trajectory

__all__ = [
    "AnthropicBackend",
    "Completion",
    "HFBackend",
    "JudgeBackend",
    "JudgeCache",
    "JudgeParseError",
    "JudgeUsage",
    "LLMJudge",
    "OpenAIBackend",
    "StepJudgement",
    "build_prompt",
    "make_backend",
    "parse_judgement",
]

SCALE = 10.0  # the judge answers 0..10; scores are stored divided by SCALE


# -- prompt -----------------------------------------------------------------------------------

_SYSTEM = """You are a strict process reward judge for tool-using AI agents.
Score ONLY the CURRENT step (its action and what it achieved), using the history for context.
Score each rubric with an integer from 0 (very bad) to 10 (excellent).
{rubric_lines}
RUBRICS: {names}
Answer with exactly one JSON object and nothing else:
{{"scores": {{{example}}}, "rationale": "<one or two sentences explaining the scores>"}}"""


def _cut(text: str, limit: int) -> str:
    """``text`` if short enough, else its head and tail around a marker saying what was cut."""
    if len(text) <= limit:
        return text
    half = max(limit // 2 - 20, 0)
    return f"{text[:half]}\n...[{len(text) - 2 * half} chars truncated]...\n{text[-half:]}"


def _action_text(step: Step, limit: int) -> str:
    if step.action is None:
        return f"message: {_cut(step.message or '', limit)}"
    params = step.action.params
    cmd = params.get("command")
    if isinstance(cmd, str) and len(params) <= 2:
        # a shell command: shown as the agent wrote it, not as escaped JSON
        rest = {k: v for k, v in params.items() if k != "command"}
        extra = f" {orjson.dumps(rest).decode()}" if rest else ""
        return f"{step.action.tool}{extra}\n$ {_cut(cmd, limit)}"
    return f"{step.action.tool} {_cut(orjson.dumps(params).decode(), limit)}"


def _obs_text(step: Step, limit: int) -> str:
    o = step.observation
    if o is None:
        return "(no observation)"
    head = (
        f"exit code {o.exit_code}{' (FAILED)' if o.exit_code else ''}\n"
        if o.exit_code is not None
        else ""
    )
    err = f"error: {_cut(o.error, 200)}\n" if o.error else ""
    return f"{head}{err}{_cut(o.output, limit)}"


def build_prompt(
    traj: Trajectory,
    index: int,
    rubrics: Sequence[Rubric],
    *,
    history_chars: int = 6000,
    step_chars: int = 4000,
) -> tuple[str, str]:
    """(system, user) prompt to judge step ``index`` of ``traj``.

    The history is filled newest step first until ``history_chars`` is used (each earlier
    step's action and observation cut to a few hundred characters) and says how many older
    steps were left out; the current step gets ``step_chars``.
    """
    names = [r.name for r in rubrics]
    system = _SYSTEM.format(
        rubric_lines="\n".join(f"- {r.name}: {r.description}" for r in rubrics),
        names=", ".join(names),
        example=", ".join(f'"{n}": <0-10>' for n in names),
    )
    lines: list[str] = []
    used = 0
    omitted = 0
    for j in range(index - 1, -1, -1):
        s = traj.steps[j]
        line = f"[{j}] {_action_text(s, 240)}\n    -> {_obs_text(s, 240)}"
        if used + len(line) > history_chars:
            omitted = j + 1
            break
        lines.append(line)
        used += len(line)
    lines.reverse()
    history = "\n".join(lines) if lines else "(none)"
    if omitted:
        history = f"({omitted} older steps omitted)\n{history}"
    step = traj.steps[index]
    prompt = (
        f"TASK:\n{_cut(traj.task.instruction or traj.task.task_id, 3000)}\n\n"
        f"HISTORY ({index} earlier steps):\n{history}\n\n"
        f"CURRENT STEP [{index}]:\n"
        f"thought: {_cut(step.thought, 1000)}\n"
        f"action: {_action_text(step, step_chars // 2)}\n"
        f"observation: {_obs_text(step, step_chars // 2)}\n"
    )
    return system, prompt


class JudgeParseError(ValueError):
    """The judge's answer is not the JSON object asked for."""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def parse_judgement(text: str, rubrics: Sequence[str]) -> tuple[dict[str, float], str]:
    """Scores (divided by 10, in [0, 1]) and rationale from a judge answer.

    Raises:
        JudgeParseError: no JSON object, a missing or non-numeric rubric, a score outside
            0..10, or no string rationale.
    """
    m = _FENCE.search(text)
    body = m.group(1) if m else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        raise JudgeParseError(f"no JSON object in the answer: {text[:120]!r}")
    try:
        data = orjson.loads(body[start : end + 1])
    except orjson.JSONDecodeError as e:
        raise JudgeParseError(f"answer is not valid JSON ({e}): {text[:120]!r}") from e
    scores = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(scores, dict):
        raise JudgeParseError("answer has no 'scores' object")
    out: dict[str, float] = {}
    for name in rubrics:
        v = scores.get(name)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise JudgeParseError(f"answer has no numeric score for rubric {name!r}")
        if not 0 <= v <= SCALE:
            raise JudgeParseError(f"score for {name!r} is {v}, outside 0..{SCALE:g}")
        out[name] = float(v) / SCALE
    rationale = data.get("rationale")
    if not isinstance(rationale, str):
        raise JudgeParseError("answer has no string 'rationale'")
    return out, rationale


# -- results, cache, usage ----------------------------------------------------------------------


@dataclass
class StepJudgement:
    """The judge's verdict on one step; ``scores is None`` means the judge failed (see ``error``)."""

    trajectory_id: str
    step_index: int
    scores: dict[str, float] | None
    rationale: str | None = None
    error: str | None = None
    model: str = ""
    attempts: int = 0
    cached: bool = False
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class JudgeUsage:
    """Token and cost accounting over a judge's lifetime."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class JudgeCache:
    """Answers keyed by (model, rubric version, prompt): in memory, and appended to ``path``
    (JSON lines) when given, so a later run judges nothing twice. Only successes are kept."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self._mem: dict[str, dict[str, Any]] = {}
        if self.path is not None and self.path.exists():
            for line in self.path.read_bytes().splitlines():
                try:
                    rec = orjson.loads(line)
                    self._mem[rec["key"]] = rec
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue  # a torn last line from a crash: that answer is judged again

    @staticmethod
    def key(model: str, rubric_version: str, system: str, prompt: str) -> str:
        h = hashlib.sha256()
        for part in (model, rubric_version, system, prompt):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        return self._mem.get(key)

    def put(self, key: str, record: dict[str, Any]) -> None:
        rec = {"key": key, **record}
        self._mem[key] = rec
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as f:
                f.write(orjson.dumps(rec) + b"\n")

    def __len__(self) -> int:
        return len(self._mem)


def _retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` / ``retry-after``), if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return float(ra)
    except ValueError:
        when = email.utils.parsedate_to_datetime(ra) if ra else None
        return max(0.0, when.timestamp() - time.time()) if when else None


def _retryable(exc: BaseException) -> bool:
    status = getattr(exc, "status_code", None)
    if status is not None:
        return status in (408, 409, 425, 429) or status >= 500
    name = type(exc).__name__
    return name in ("APITimeoutError", "APIConnectionError", "TimeoutError") or isinstance(
        exc, TimeoutError | ConnectionError
    )


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    return f"HTTP {status}: {exc}" if status is not None else f"{type(exc).__name__}: {exc}"


class LLMJudge:
    """Rubric-based per-step judge over a :class:`JudgeBackend`.

    Args:
        backend: a backend or a spec string for :func:`make_backend`.
        profile: the DomainProfile whose judge rubrics are scored (defaults + its additions).
        rubrics: override the rubric list.
        concurrency: calls in flight at once.
        max_retries: retries per step after the first try (rate limits, 5xx, timeouts,
            unparsable answers); then the step is recorded as a failure.
        backoff_base / backoff_max: exponential backoff ``base * 2**attempt`` capped at
            ``max``, with equal jitter; a ``retry-after`` header wins when present.
        cache: a :class:`JudgeCache`, a path for an on-disk one, or ``None`` for in-memory.
        history_chars / step_chars: prompt budgets (see :func:`build_prompt`).
        max_tokens: answer budget.
        price_per_mtok: ``(input, output)`` USD per million tokens for cost accounting.
    """

    def __init__(
        self,
        backend: JudgeBackend | str,
        *,
        profile: DomainProfile | str = "generic",
        rubrics: Sequence[Rubric] | None = None,
        concurrency: int = 16,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        cache: JudgeCache | str | Path | None = None,
        history_chars: int = 6000,
        step_chars: int = 4000,
        max_tokens: int = 512,
        price_per_mtok: tuple[float, float] | None = None,
    ):
        if concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
        self.backend = make_backend(backend) if isinstance(backend, str) else backend
        self.profile = get_profile(profile)
        self.rubrics = list(rubrics) if rubrics is not None else judge_rubrics(self.profile)
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.cache = cache if isinstance(cache, JudgeCache) else JudgeCache(cache)
        self.history_chars = history_chars
        self.step_chars = step_chars
        self.max_tokens = max_tokens
        self.price_per_mtok = price_per_mtok
        self.usage = JudgeUsage(cost_usd=0.0 if price_per_mtok else None)

    @property
    def model(self) -> str:
        return self.backend.name

    @property
    def rubric_version(self) -> str:
        """Hash of the rubric names, descriptions and :data:`RUBRIC_VERSION` (cache and config key)."""
        doc = [RUBRIC_VERSION, [(r.name, r.description) for r in self.rubrics]]
        return hashlib.sha256(orjson.dumps(doc)).hexdigest()[:16]

    def _account(self, c: Completion) -> None:
        self.usage.input_tokens += c.input_tokens
        self.usage.output_tokens += c.output_tokens
        if self.price_per_mtok is not None and self.usage.cost_usd is not None:
            pin, pout = self.price_per_mtok
            self.usage.cost_usd += (c.input_tokens * pin + c.output_tokens * pout) / 1e6

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, 120.0) + random.uniform(0, 0.05 * max(retry_after, 0.1))
        cap = min(self.backoff_max, self.backoff_base * 2**attempt)
        return cap / 2 + random.uniform(0, cap / 2)

    async def _call(self, key: str, system: str, prompt: str) -> dict[str, Any]:
        """Judge one prompt with retries; returns the record (success or failure)."""
        names = [r.name for r in self.rubrics]
        tokens_in = tokens_out = 0
        error = "no attempt"
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.usage.retries += 1
            self.usage.requests += 1
            wait: float | None = None
            try:
                c = await self.backend.complete(system, prompt, max_tokens=self.max_tokens)
            except Exception as e:
                error = _describe(e)
                if not _retryable(e):
                    return {
                        "scores": None,
                        "error": error,
                        "attempts": attempt + 1,
                        "input_tokens": tokens_in,
                        "output_tokens": tokens_out,
                    }
                wait = self._backoff(attempt, _retry_after(e))
            else:
                self._account(c)
                tokens_in += c.input_tokens
                tokens_out += c.output_tokens
                try:
                    scores, rationale = parse_judgement(c.text, names)
                except JudgeParseError as e:
                    error = f"unparsable answer: {e}"
                    wait = 0.0  # a parse failure is not the server's load: retry at once
                else:
                    rec = {"scores": scores, "rationale": rationale, "error": None, "attempts": attempt + 1,
                           "input_tokens": tokens_in, "output_tokens": tokens_out}  # fmt: skip
                    self.cache.put(key, rec)
                    return rec
            if attempt < self.max_retries and wait:
                await asyncio.sleep(wait)
        return {"scores": None, "error": f"{error} (after {self.max_retries + 1} attempts)", "attempts": self.max_retries + 1,
                "input_tokens": tokens_in, "output_tokens": tokens_out}  # fmt: skip

    async def ajudge(self, trajectories: Sequence[Trajectory]) -> list[list[StepJudgement]]:
        """Judge every step of every trajectory (async). Failures are recorded, never raised."""
        sem = asyncio.Semaphore(self.concurrency)
        inflight: dict[str, asyncio.Task[dict[str, Any]]] = {}
        rv = self.rubric_version

        async def run(key: str, system: str, prompt: str) -> dict[str, Any]:
            async with sem:
                return await self._call(key, system, prompt)

        plan: list[list[tuple[str, bool, asyncio.Task[dict[str, Any]] | dict[str, Any]]]] = []
        for t in trajectories:
            row = []
            for i in range(len(t.steps)):
                system, prompt = build_prompt(
                    t, i, self.rubrics, history_chars=self.history_chars, step_chars=self.step_chars
                )
                key = JudgeCache.key(self.model, rv, system, prompt)
                hit = self.cache.get(key)
                if hit is not None:
                    self.usage.cache_hits += 1
                    row.append((key, True, hit))
                elif key in inflight:  # the same step twice in one batch: judged once
                    self.usage.cache_hits += 1
                    row.append((key, True, inflight[key]))
                else:
                    task = asyncio.ensure_future(run(key, system, prompt))
                    inflight[key] = task
                    row.append((key, False, task))
            plan.append(row)
        try:
            if inflight:
                await asyncio.gather(*inflight.values())
        finally:
            close = getattr(self.backend, "aclose", None)
            if close is not None:
                await close()
        out: list[list[StepJudgement]] = []
        for t, row in zip(trajectories, plan, strict=True):
            res = []
            for i, (_, cached, item) in enumerate(row):
                rec = item.result() if isinstance(item, asyncio.Task) else item
                if rec["scores"] is None and not cached:
                    self.usage.failures += 1
                res.append(
                    StepJudgement(
                        trajectory_id=t.id,
                        step_index=t.steps[i].index,
                        scores=rec["scores"],
                        rationale=rec.get("rationale"),
                        error=rec.get("error"),
                        model=self.model,
                        attempts=0 if cached else rec.get("attempts", 0),
                        cached=cached,
                        input_tokens=0 if cached else rec.get("input_tokens", 0),
                        output_tokens=0 if cached else rec.get("output_tokens", 0),
                    )
                )
            out.append(res)
        return out

    def judge(self, trajectories: Sequence[Trajectory]) -> list[list[StepJudgement]]:
        """Synchronous :meth:`ajudge` (runs its own event loop, in a thread if one is running)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.ajudge(trajectories))
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["r"] = asyncio.run(self.ajudge(trajectories))
            except BaseException as e:  # re-raised in the caller's thread
                box["e"] = e

        th = threading.Thread(target=target)
        th.start()
        th.join()
        if "e" in box:
            raise box["e"]
        return box["r"]


def judgement_rows(results: Sequence[Sequence[StepJudgement]]) -> list[dict[str, Any]]:
    """Flat dict rows (one per step) for reports or a table."""
    return [asdict(j) for row in results for j in row]
