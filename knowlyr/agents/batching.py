"""Batched generation: requests from concurrent episodes meet in one decode loop.

Episodes in flight each ask for one assistant turn at a time. A :class:`BatchedGenerator`
owns the model and one scheduler thread: callers submit token ids and wait; the scheduler
takes the requests that are waiting (up to ``max_batch``), left-pads them into one batch and
decodes them together with a KV cache, each row greedy or sampled with its own seeded
``torch.Generator``. A caller sees one request at a time, and what it gets does not depend
on what it was batched with: greedy rows give the tokens they give alone (the tests compare
them token by token, and with ``model.generate``), and a sampled row draws only from its own
generator.

Example:
    >>> gen = BatchedGenerator(model, eos_token_ids=[tok.eos_token_id],
    ...                        pad_token_id=tok.pad_token_id)  # doctest: +SKIP
    >>> gen.generate(tok("Hello")["input_ids"], max_new_tokens=8)  # doctest: +SKIP
    [311, 1045, ...]
    >>> gen.close()  # doctest: +SKIP
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from knowlyr._threads import one_thread, small_cpu_model
from knowlyr.errors import ConfigError

__all__ = ["BatchedGenerator", "check_sampling", "resolve_device", "resolve_dtype"]


def check_sampling(max_new_tokens: int, temperature: float, top_p: float) -> None:
    """Raise a :class:`ConfigError` naming the first bad generation setting."""
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be positive, got {max_new_tokens}")
    if temperature < 0:
        raise ConfigError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ConfigError(f"top_p must be in (0, 1], got {top_p}")


def resolve_device(device: str | None = "auto") -> str:
    """``"auto"`` (or ``None``) is ``"cuda"`` when torch sees a GPU, else ``"cpu"``; any other
    value is returned as given."""
    if device not in (None, "auto"):
        return str(device)
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


_DTYPES = {
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "float32": "float32", "fp32": "float32", "float": "float32",
}  # fmt: skip


def resolve_dtype(dtype: Any = "auto", device: str = "cpu") -> Any:
    """The ``torch.dtype`` to act in on ``device`` (a resolved device such as ``"cuda:0"``).

    ``"auto"`` (or ``None``): bf16 on a CUDA GPU that supports it
    (``torch.cuda.is_bf16_supported()``), fp16 on an older one (what vLLM picks there too; pass
    ``"float32"`` for a model whose activations overflow fp16), fp32 on the CPU (CPUs without
    bf16 units run bf16 many times slower). A ``torch.dtype`` or a name (``"bfloat16"``,
    ``"bf16"``, ``"float16"``, ``"fp16"``, ``"float32"``, ``"fp32"``) is taken as given.

    Example:
        >>> resolve_dtype("auto", "cpu")
        torch.float32
    """
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        if str(device).startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    name = _DTYPES.get(str(dtype).lower().removeprefix("torch."))
    if name is None:
        raise ConfigError(
            f"dtype must be 'auto', 'bfloat16', 'float16' or 'float32', got {dtype!r}"
        )
    return getattr(torch, name)


@dataclass
class _Request:
    ids: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int
    done: threading.Event = field(default_factory=threading.Event)
    result: list[int] | None = None
    error: BaseException | None = None


class BatchedGenerator:
    """One model, many callers: a scheduler thread decodes waiting requests as one batch.

    Args:
        model: a ``transformers`` causal LM (on the device it should run on).
        eos_token_ids: token ids that end a turn (the id is kept in the output).
        pad_token_id: id fed at padded positions (never attended to).
        max_batch: most requests decoded together.
        gather_s: how long the scheduler waits for more requests after the first one
            arrives, unless as many as the last batch held are already waiting (episodes
            return between turns at about the same time; stragglers join the next batch).
    """

    def __init__(
        self,
        model: Any,
        *,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        max_batch: int = 32,
        gather_s: float = 0.01,
    ):
        if max_batch < 1:
            raise ConfigError(f"max_batch must be positive, got {max_batch}")
        if gather_s < 0:
            raise ConfigError(f"gather_s must be >= 0, got {gather_s}")
        if not eos_token_ids:
            raise ConfigError("eos_token_ids must name at least one token")
        self.model = model
        self.eos = set(int(t) for t in eos_token_ids)
        self.pad = int(pad_token_id)
        self.max_batch = max_batch
        self.gather_s = gather_s
        self._small = small_cpu_model(model)
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._last_batch = 1
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: batch sizes decoded so far (for benchmarks and tests)
        self.batch_sizes: list[int] = []

    # -- callers --------------------------------------------------------------------------

    def generate(
        self,
        input_ids: Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[int]:
        """The generated ids for ``input_ids`` (the end-of-turn id included when reached).

        Greedy when ``temperature`` is 0, else sampled from this request's own generator
        seeded with ``seed``. Blocks until the batch holding the request is decoded.
        """
        check_sampling(max_new_tokens, temperature, top_p)
        if not len(input_ids):
            raise ConfigError("input_ids must not be empty")
        req = _Request(list(map(int, input_ids)), max_new_tokens, temperature, top_p, seed)
        self._start()
        self._queue.put(req)
        req.done.wait()
        if req.error is not None:
            raise req.error
        assert req.result is not None
        return req.result

    def close(self) -> None:
        """Stop the scheduler thread (requests already queued are decoded first)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def __enter__(self) -> BatchedGenerator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise ConfigError("this BatchedGenerator is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="knowlyr-generate", daemon=True
                )
                self._thread.start()

    # -- scheduler ------------------------------------------------------------------------

    def _gather(self, first: _Request) -> tuple[list[_Request], bool]:
        batch, stop = [first], False
        want = min(self.max_batch, max(self._last_batch, 1))
        deadline = time.monotonic() + self.gather_s
        while len(batch) < self.max_batch:
            try:
                if len(batch) >= want:
                    nxt = self._queue.get_nowait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    nxt = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if nxt is None:
                stop = True
                break
            batch.append(nxt)
        return batch, stop

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = self._gather(first)
            self._last_batch = len(batch)
            self.batch_sizes.append(len(batch))
            try:
                outs = self.decode(batch)
            except BaseException as e:  # every caller of the batch gets the error
                for r in batch:
                    r.error = e
                    r.done.set()
            else:
                for r, out in zip(batch, outs, strict=True):
                    r.result = out
                    r.done.set()
            if stop:
                return

    def decode(self, batch: Sequence[_Request]) -> list[list[int]]:
        """Decode ``batch`` together: left-padded prefill, then one token per row per step."""
        import torch

        model, dev = self.model, self.model.device
        n, width = len(batch), max(len(r.ids) for r in batch)
        ids = torch.full((n, width), self.pad, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, width - len(r.ids) :] = torch.tensor(r.ids)
            mask[i, width - len(r.ids) :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        gens = [
            torch.Generator(device=dev).manual_seed(int(r.seed)) if r.temperature > 0 else None
            for r in batch
        ]
        outs: list[list[int]] = [[] for _ in batch]
        live = [True] * n
        steps = max(r.max_new_tokens for r in batch)
        cache = _new_cache(model)
        kv = {_cache_kwarg(model): cache}
        with torch.inference_mode(), one_thread() if self._small else nullcontext():
            out = model(
                input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                logits_to_keep=1, **kv,
            )  # fmt: skip
            for _ in range(steps):
                nxt = self._choose(out.logits[:, -1, :].float(), batch, gens)
                chosen = nxt.tolist()
                for i, r in enumerate(batch):
                    if live[i]:
                        outs[i].append(chosen[i])
                        if chosen[i] in self.eos or len(outs[i]) >= r.max_new_tokens:
                            live[i] = False
                if not any(live):
                    break
                feed = torch.tensor(
                    [c if live[i] else self.pad for i, c in enumerate(chosen)], device=dev
                )
                mask = torch.cat([mask, mask.new_ones((n, 1))], dim=1)
                pos = pos[:, -1:] + 1
                out = model(
                    input_ids=feed[:, None], attention_mask=mask, position_ids=pos,
                    use_cache=True, logits_to_keep=1, **kv,
                )  # fmt: skip
        return outs

    @staticmethod
    def _choose(logits: Any, batch: Sequence[_Request], gens: list[Any]) -> Any:
        """Each row's next token: argmax for greedy rows, a draw from the row's own
        generator (temperature, then nucleus ``top_p``) for sampled ones."""
        import torch

        nxt = logits.argmax(-1)
        for i, r in enumerate(batch):
            if r.temperature <= 0:
                continue
            probs = torch.softmax(logits[i] / r.temperature, dim=-1)
            if r.top_p < 1.0:
                sorted_p, order = probs.sort(descending=True)
                keep = sorted_p.cumsum(-1) - sorted_p < r.top_p  # always keeps the top token
                probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
            nxt[i] = torch.multinomial(probs, 1, generator=gens[i])[0]
        return nxt


def _cache_kwarg(model: Any) -> str:
    """``cache`` (transformers >= 5.24) or ``past_key_values`` (before it)."""
    import inspect

    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older transformers
        return DynamicCache()
