"""The coding suite: enough distinct tasks, and every bug is caught by the hidden tests."""

from __future__ import annotations

import hashlib
import io
import os
import sys
from pathlib import Path

import pytest

from knowlyr.taskset import Task, get_suite
from knowlyr.taskset.coding import PACKAGES
from knowlyr.taskset.testrunner import parse_summary, run_paths


def _run(root: Path, files: dict[str, str], args: list[str]) -> tuple[tuple[int, int], str]:
    """Write ``files`` under ``root`` and run the runner there, in this process."""
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for mod in [m for m in sys.modules if m.split(".")[0] in PACKAGES]:
        del sys.modules[mod]
    old = os.getcwd()
    os.chdir(root)
    out = io.StringIO()
    try:
        result = run_paths(args, out=out)
    finally:
        os.chdir(old)
        if str(root) in sys.path:
            sys.path.remove(str(root))
        for mod in [m for m in sys.modules if m.split(".")[0] in PACKAGES]:
            del sys.modules[mod]
    return result, out.getvalue()


def test_suite_has_at_least_200_distinct_tasks():
    suite = get_suite("coding")
    tasks = [suite.task(i) for i in range(len(suite))]
    assert len(tasks) >= 200
    assert len({t.task_id for t in tasks}) == len(tasks)
    fingerprints = {
        hashlib.sha256((t.instruction + "".join(sorted(t.files.values()))).encode()).hexdigest()
        for t in tasks
    }
    assert len(fingerprints) == len(tasks)
    assert len({t.family for t in tasks}) >= 20
    assert {t.metadata["bug_kind"] for t in tasks} > {"missing", "off_by_one", "wrong_comparison"}
    assert len({t.metadata["function"] for t in tasks}) >= 60


def test_every_task_fails_before_the_fix_and_passes_after(tmp_path):
    suite = get_suite("coding")
    for i in range(len(suite)):
        t = suite.task(i)
        (_bp, bf), out = _run(
            tmp_path / f"b{i}", {**t.files, **t.hidden_tests}, [".knowlyr_hidden"]
        )
        assert bf > 0, f"{t.task_id}: the hidden tests do not catch the bug\n{out}"
        fixed = {**t.files, **t.hidden_tests, t.data["module_path"]: t.data["fixed_source"]}
        (fp, ff), out = _run(tmp_path / f"f{i}", fixed, [".knowlyr_hidden"])
        assert ff == 0 and fp == t.data["n_hidden"], f"{t.task_id}: the reference fails\n{out}"
        (vp, vf), out = _run(tmp_path / f"f{i}", fixed, ["tests"])
        assert vf == 0 and vp >= 1, out


def test_hidden_tests_are_not_in_the_workspace_files():
    t = get_suite("coding").task(5)
    assert not set(t.hidden_tests) & set(t.files)
    assert not any(".knowlyr_hidden" in p for p in t.files)
    assert t.test_command.startswith("python3 .knowlyr_hidden/run_tests.py")
    assert isinstance(t, Task) and t.split in ("train", "heldout")


def test_runner_selects_tests_and_counts_import_failures(tmp_path):
    files = {
        "tests/test_a.py": "def test_ok():\n    assert True\n\ndef test_bad():\n    assert 1 == 2\n",
        "tests/test_b.py": "import no_such_module\n\ndef test_x():\n    pass\n\ndef test_y():\n    pass\n",
    }
    (p, f), out = _run(tmp_path, files, ["tests"])
    assert (p, f) == (1, 3)
    assert "FAILED tests/test_a.py::test_bad" in out and "import failed" in out
    assert parse_summary(out) == (1, 3)
    (p, f), out = _run(tmp_path, {}, ["tests/test_a.py::test_ok", "tests/test_a.py::test_gone"])
    assert (p, f) == (1, 1) and "no such test" in out


@pytest.mark.parametrize("text", ["", "no summary here", "1 passed"])
def test_parse_summary_without_a_summary_is_none(text):
    assert parse_summary(text) is None
