"""No progress bars from ``datasets`` and ``transformers`` (tokenizing, loading and writing
weights) where knowlyr works with small models many times in a run: one bar per call buried
the flow's own progress (``make run`` printed hundreds)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from knowlyr._setting import SharedSetting

__all__ = ["quiet_progress"]


def _get() -> tuple[bool, bool]:
    import datasets
    import transformers

    return datasets.is_progress_bar_enabled(), transformers.utils.logging.is_progress_bar_enabled()


def _put(enabled: tuple[bool, bool]) -> None:
    import datasets
    import transformers

    bars = transformers.utils.logging
    datasets.enable_progress_bars() if enabled[0] else datasets.disable_progress_bars()
    bars.enable_progress_bar() if enabled[1] else bars.disable_progress_bar()


_BARS = SharedSetting(_get, _put)


@contextmanager
def quiet_progress() -> Iterator[None]:
    """No ``datasets`` / ``transformers`` progress bars inside (process-wide, shared by
    concurrent users)."""
    with _BARS.held(lambda _: (False, False)):
        yield
