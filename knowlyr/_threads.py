"""Small models on one torch thread: their per-token matrix products are too small to split.

Splitting a tiny model's work across cores only adds synchronisation, and several threads
decoding or training at once oversubscribe the cores. Measured on this project's 2-core
machine while other work ran: ten advisory episodes of a 2x128 model took 21.2 s with torch's
2 threads and 3.6 s with 1; SFT of the same model on 400 order_status episodes (10 epochs)
took 188 s with 2 threads and 65 s with 1, to the same loss.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from knowlyr._setting import SharedSetting

__all__ = ["SMALL_MODEL_PARAMS", "one_thread", "small_cpu_model"]

#: Models below this many parameters run on one CPU thread.
SMALL_MODEL_PARAMS = 20_000_000


def _get() -> int:
    import torch

    return torch.get_num_threads()


def _put(n: int) -> None:
    import torch

    torch.set_num_threads(n)


TORCH_THREADS = SharedSetting(_get, _put)


def small_cpu_model(model: Any) -> bool:
    """Whether ``model`` is on the CPU and has fewer than :data:`SMALL_MODEL_PARAMS` parameters."""
    if not str(getattr(model, "device", "cpu")).startswith("cpu"):
        return False
    params = getattr(model, "parameters", None)
    return callable(params) and sum(p.numel() for p in params()) < SMALL_MODEL_PARAMS


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread while the block runs (process-wide, shared by concurrent
    users: the last one out puts back what the first one in found)."""
    with TORCH_THREADS.held(lambda _: 1):
        yield
