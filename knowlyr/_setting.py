"""A process-wide setting held changed while any thread needs it.

Several of knowlyr's speed and noise settings are global to the process (the GIL switch
interval, torch's intra-op threads, library progress bars) but are needed only while some
block runs, possibly in several threads at once. :class:`SharedSetting` reference-counts its
users: the first one in saves the value it finds, every one applies its change, and the last
one out restores the saved value, whatever order the threads leave in.

Example:
    >>> import sys
    >>> switching = SharedSetting(sys.getswitchinterval, sys.setswitchinterval)
    >>> before = sys.getswitchinterval()
    >>> with switching.held(lambda now: min(now, 1e-4)):
    ...     sys.getswitchinterval() <= 1e-4
    True
    >>> sys.getswitchinterval() == before
    True
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["SharedSetting"]


class SharedSetting:
    """A setting read by ``get`` and written by ``put``, changed while any user holds it."""

    def __init__(self, get: Callable[[], Any], put: Callable[[Any], None]):
        self._get, self._put = get, put
        self._lock = threading.Lock()
        self._users = 0
        self._saved: Any = None

    @property
    def users(self) -> int:
        """How many blocks hold the setting now."""
        return self._users

    @contextmanager
    def held(self, change: Callable[[Any], Any]) -> Iterator[None]:
        """Run the block with the setting at ``change(current value)``."""
        with self._lock:
            current = self._get()
            if self._users == 0:
                self._saved = current
            self._users += 1
            self._put(change(current))
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    self._put(self._saved)
