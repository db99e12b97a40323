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
    """A local Hugging Face causal LM (greedy decoding, one generation at a time, in a thread).

    Args:
        model: a folder with a saved model (and tokenizer), or a loaded ``PreTrainedModel``.
        tokenizer: the tokenizer when ``model`` is an object (else loaded from the folder).
        max_input_tokens: the prompt is cut from the left to this many tokens.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        max_input_tokens: int = 4096,
        device: str = "cpu",
    ):
        if isinstance(model, str | Path) and not Path(model).is_dir():
            raise ConfigError(
                f"hf judge: model folder {model} does not exist (pass a local folder; nothing is downloaded)"
            )
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
        self._lock = threading.Lock()

    def _generate(self, system: str, prompt: str, max_tokens: int) -> Completion:
        import torch

        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(
                [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
                add_generation_prompt=True,
                return_tensors="pt",
                return_dict=True,
            )["input_ids"]
        else:
            ids = tok(f"{system}\n\n{prompt}\n", return_tensors="pt")["input_ids"]
        ids = ids[:, -self.max_input_tokens :].to(self.device)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        with self._lock, torch.no_grad():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
        new = out[0, ids.shape[1] :]
        return Completion(
            tok.decode(new, skip_special_tokens=True), int(ids.shape[1]), int(new.shape[0])
        )

    async def complete(self, system: str, prompt: str, *, max_tokens: int) -> Completion:
        return await asyncio.to_thread(self._generate, system, prompt, max_tokens)


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
