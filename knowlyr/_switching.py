"""A shorter GIL switch interval while a pipelined worker thread runs.

The export and the rule layer hand batches to a worker thread that spends most of its time
in Arrow / polars / numpy calls that release the GIL, but needs it back briefly between them.
With CPython's default 5 ms switch interval the worker waits up to 5 ms for each hand-over
while the main thread runs Python, and falls behind. :func:`fine_gil_switching` lowers the
interval for as long as any such pipeline runs (reference-counted across threads) and
restores the caller's value when the last one ends.

Example:
    >>> import sys
    >>> before = sys.getswitchinterval()
    >>> with fine_gil_switching(1e-4):
    ...     sys.getswitchinterval() <= 1e-4
    True
    >>> sys.getswitchinterval() == before
    True
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from knowlyr._setting import SharedSetting

__all__ = ["fine_gil_switching"]

_SWITCHING = SharedSetting(sys.getswitchinterval, sys.setswitchinterval)


@contextmanager
def fine_gil_switching(interval: float = 1e-4) -> Iterator[None]:
    """Run the block with the GIL switch interval at most ``interval`` seconds."""
    if interval <= 0:
        raise ValueError(f"interval must be positive, got {interval}")
    with _SWITCHING.held(lambda now: min(now, interval)):
        yield
