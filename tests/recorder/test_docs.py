"""The examples in the recorder's docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "knowlyr.recorder.base",
    "knowlyr.recorder.redact",
    "knowlyr.recorder.pipeline",
    "knowlyr.recorder.jsonl",
    "knowlyr.recorder.inspect",
    "knowlyr.recorder.transfer",
    "knowlyr.recorder.adapters.swe_agent",
    "knowlyr.recorder.adapters.agentgym",
    "knowlyr.recorder.text_actions",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
