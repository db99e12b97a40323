"""No progress bars from ``datasets`` and ``transformers`` (tokenizing, loading and writing
weights) where knowlyr works with small models many times in a run: one bar per call buried
the flow's own progress (``make run`` printed hundreds)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["quiet_progress"]


_lock = threading.Lock()
_users = 0
_saved: tuple[bool, bool] = (True, True)


@contextmanager
def quiet_progress() -> Iterator[None]:
    """No ``datasets`` / ``transformers`` progress bars inside (process-wide; nested and
    concurrent users share one save / restore)."""
    import datasets
    import transformers

    global _users, _saved
    bars = transformers.utils.logging
    with _lock:
        if _users == 0:
            _saved = (datasets.is_progress_bar_enabled(), bars.is_progress_bar_enabled())
            datasets.disable_progress_bars()
            bars.disable_progress_bar()
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                if _saved[0]:
                    datasets.enable_progress_bars()
                if _saved[1]:
                    bars.enable_progress_bar()
