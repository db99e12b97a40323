"""fine_gil_switching: lowered while any pipeline runs, restored when the last one ends."""

from __future__ import annotations

import sys

import pytest

from knowlyr._switching import fine_gil_switching


def test_overlapping_uses_restore_the_callers_interval_in_any_exit_order():
    before = sys.getswitchinterval()
    a, b = fine_gil_switching(2e-4), fine_gil_switching(1e-4)
    a.__enter__()
    assert sys.getswitchinterval() == pytest.approx(2e-4)
    b.__enter__()
    assert sys.getswitchinterval() == pytest.approx(1e-4)
    a.__exit__(None, None, None)  # the first one ends while the other still runs
    assert sys.getswitchinterval() == pytest.approx(1e-4)
    b.__exit__(None, None, None)
    assert sys.getswitchinterval() == before


def test_restored_after_an_exception():
    before = sys.getswitchinterval()
    with pytest.raises(RuntimeError), fine_gil_switching():
        raise RuntimeError("boom")
    assert sys.getswitchinterval() == before


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval must be positive"), fine_gil_switching(0):
        pass
