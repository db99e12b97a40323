"""Pausing Python's cyclic garbage collector while many acyclic objects are built.

A trajectory is a tree of ~80 pydantic models, dicts and lists: reference counting frees it,
it never needs the cyclic collector. But the collector runs every few hundred allocations,
and each older-generation pass re-traverses every object still alive: building thousands of
trajectories into a list with it running costs ~6x what building them costs (decoding
2,000 stored 20-step trajectories here: 456 us each with it, 73 us without). Code that
builds or walks many trajectories at once pauses it for the duration.

Example:
    >>> from knowlyr._gc import paused
    >>> with paused():
    ...     rows = [{"i": i} for i in range(3)]
    >>> len(rows)
    3
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused"]


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic GC inside the block (it is switched back on after, if it was on before);
    only for code that builds no reference cycles, which refcounting alone frees."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
