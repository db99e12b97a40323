"""Judge backends: the official Anthropic and OpenAI SDKs, and a local Hugging Face model.

Each backend answers ``complete(system, prompt, max_tokens=...)`` with a :class:`Completion`
(text and token usage) and names its model in ``name`` (part of the judge cache key).
SDK-level retries are off: :class:`~knowlyr.reward.judge.LLMJudge` retries with its own
backoff, honouring ``retry-after``.

Example:
    >>> backend = make_backend("openai:gpt-4o-mini", base_url="http://127.0.0.1:8000/v1")  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from knowlyr.errors import ConfigError

__all__ = [
    "AnthropicBackend",
    "Completion",
    "HFBackend",
    "JudgeBackend",
    "OpenAIBackend",
    "make_backend",
]


@dataclass
class Completion:
    """One model answer and its token usage."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0


class JudgeBackend(Protocol):
    """Anything that answers a (system, prompt) pair; ``name`` identifies the model for caching."""

    name: str

    async def complete(self, system: str, prompt: str, *, max_tokens: int) -> Completion: ...


class _PerLoop:
    """One SDK client per event loop: an async HTTP client must not outlive its loop."""

    def __init__(self, make: Any):
        self._make = make
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None

    def get(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._client, self._loop = self._make(), loop
        return self._client

    async def aclose(self) -> None:
        """Close this loop's client (its connections die with the loop otherwise)."""
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.close()
        self._client = self._loop = None


class AnthropicBackend:
    """Claude through the official SDK (``AsyncAnthropic``); SDK retries are off (we retry).

    Args:
        model: the model id, e.g. ``"claude-sonnet-4-5"``.
        api_key / base_url: passed to the client (``base_url`` points it at a proxy or at
            :class:`knowlyr.reward.testing.JudgeServer`).
        timeout: seconds per request.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
    ):
        import anthropic

        self.model = model
        self.name = f"anthropic:{model}"
        self._make = lambda: anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
        )
        self._make()  # fail now (e.g. no API key) rather than at the first call
        self._clients = _PerLoop(self._make)

    async def complete(self, system: str, prompt: str, *, max_tokens: int) -> Completion:
        r = await self._clients.get().messages.create(
            model=self.model,
            max_tokens=max_tokens,
            system=system,
            messages=[{"role": "user", "content": prompt}],
        )
        text = "".join(getattr(b, "text", "") for b in r.content)
        return Completion(text, r.usage.input_tokens or 0, r.usage.output_tokens or 0)

    async def aclose(self) -> None:
        await self._clients.aclose()


class OpenAIBackend:
    """An OpenAI-compatible chat model through the official SDK (``AsyncOpenAI``).

    Args:
        model: the model id, e.g. ``"gpt-4o-mini"``.
        api_key / base_url: passed to the client (any OpenAI-compatible server works).
        timeout: seconds per request.
        temperature: sampling temperature (``None`` leaves it out, for models that refuse it).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        temperature: float | None = 0.0,
    ):
        import openai

        self.model = model
        self.temperature = temperature
        self.name = f"openai:{model}"
        self._make = lambda: openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
        )
        self._make()  # fail now (e.g. no API key) rather than at the first call
        self._clients = _PerLoop(self._make)

    async def complete(self, system: str, prompt: str, *, max_tokens: int) -> Completion:
        extra = {} if self.temperature is None else {"temperature": self.temperature}
        r = await self._clients.get().chat.completions.create(
            model=self.model,
            max_completion_tokens=max_tokens,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            **extra,
        )
        text = (r.choices[0].message.content or "") if r.choices else ""
        usage = r.usage
        return Completion(
            text, usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0
        )

    async def aclose(self) -> None:
        await self._clients.aclose()


class HFBackend:
    """A local Hugging Face causal LM, greedy decoding, with requests batched on the fly.

    Calls that arrive while the model is busy queue up; one worker thread takes up to
    ``batch_size`` of them at a time and answers them with a single left-padded ``generate``.
    Greedy decoding makes each answer the one the request would get alone (a request asking
    for fewer tokens gets the prefix of the longer generation, which is what greedy decoding
    produces), so batching changes throughput, not answers.

    Args:
        model: a folder with a saved model (and tokenizer), or a loaded ``PreTrainedModel``.
        tokenizer: the tokenizer when ``model`` is an object (else loaded from the folder).
        max_input_tokens: the prompt is cut from the left to this many tokens.
        batch_size: the most requests answered by one ``generate`` call.
        device: where the model runs.

    Example:
        >>> backend = HFBackend("./judge-model", batch_size=8)  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_input_tokens: int = 4096,
        batch_size: int = 8,
        device: str = "cpu",
    ):
        if batch_size < 1:
            raise ConfigError(f"hf judge: batch_size must be >= 1, got {batch_size}")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if isinstance(model, str | Path):
            path = Path(model)
            if not path.is_dir():
                raise ConfigError(
                    f"hf judge: model folder {path} does not exist (pass a local folder; nothing is downloaded)"
                )
            self.name = f"hf:{path.resolve()}"
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path)
        else:
            if tokenizer is None:
                raise ConfigError("hf judge: pass tokenizer= when model is an object")
            self.name = f"hf:{getattr(model.config, '_name_or_path', '') or type(model).__name__}"
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.max_input_tokens = max_input_tokens
        self.batch_size = batch_size
        self.batches: list[int] = []  # size of every generate call, for inspection
        self._pending: list[tuple[list[int], int, asyncio.Future, asyncio.AbstractEventLoop]] = []
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    def _prompt_ids(self, system: str, prompt: str) -> list[int]:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(
                [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
                add_generation_prompt=True,
                return_dict=True,
            )["input_ids"]
        else:
            ids = tok(f"{system}\n\n{prompt}\n")["input_ids"]
        return list(ids)[-self.max_input_tokens :]

    def generate(self, prompts: list[list[int]], max_tokens: list[int]) -> list[Completion]:
        """Answer token-id prompts with one greedy ``generate`` (left padding).

        Args:
            prompts: the prompts' token ids.
            max_tokens: the most new tokens for each prompt.
        """
        import torch

        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        eos = self.model.generation_config.eos_token_id
        stop = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                max_new_tokens=max(max_tokens),
                do_sample=False,
                pad_token_id=pad,
            )
        self.batches.append(len(prompts))
        answers = []
        for i, (p, limit) in enumerate(zip(prompts, max_tokens, strict=True)):
            new = out[i, width:].tolist()[:limit]
            for j, t in enumerate(new):
                if t in stop:  # alone, generation would have stopped here
                    new = new[: j + 1]
                    break
            answers.append(Completion(tok.decode(new, skip_special_tokens=True), len(p), len(new)))
        return answers

    def _serve(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._worker = None
                    return
                batch = self._pending[: self.batch_size]
                del self._pending[: self.batch_size]
            try:
                answers: list[Any] = self.generate([b[0] for b in batch], [b[1] for b in batch])
            except Exception as e:  # every caller in the batch gets the error
                answers = [e] * len(batch)
            for (_, _, fut, loop), a in zip(batch, answers, strict=True):
                loop.call_soon_threadsafe(_settle, fut, a)

    async def complete(self, system: str, prompt: str, *, max_tokens: int) -> Completion:
        loop = asyncio.get_running_loop()
        ids = self._prompt_ids(system, prompt)
        fut = loop.create_future()
        with self._lock:
            self._pending.append((ids, max_tokens, fut, loop))
            if self._worker is None:
                self._worker = threading.Thread(target=self._serve, name="hf-judge", daemon=True)
                self._worker.start()
        return await fut


def _settle(fut: asyncio.Future, answer: Any) -> None:
    if fut.cancelled():
        return
    if isinstance(answer, BaseException):
        fut.set_exception(answer)
    else:
        fut.set_result(answer)


def make_backend(spec: str, **kwargs: Any) -> JudgeBackend:
    """A backend from ``"anthropic:MODEL"``, ``"openai:MODEL"`` or ``"hf:PATH"``.

    Raises:
        ConfigError: an unknown provider or an empty model.
    """
    provider, _, model = spec.partition(":")
    if not model:
        raise ConfigError(
            f"judge {spec!r}: expected PROVIDER:MODEL, e.g. anthropic:claude-sonnet-4-5, openai:gpt-4o-mini or hf:./model"
        )
    if provider == "anthropic":
        return AnthropicBackend(model, **kwargs)
    if provider == "openai":
        return OpenAIBackend(model, **kwargs)
    if provider == "hf":
        return HFBackend(model, **kwargs)
    raise ConfigError(
        f"judge {spec!r}: unknown provider {provider!r}; use anthropic:, openai: or hf:"
    )
