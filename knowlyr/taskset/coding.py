"""The ``coding`` suite: procedurally generated Python repair and implementation tasks.

Every task is a small package with one function that has a bug (a wrong comparison, an
off-by-one, a wrong constant...) or is missing, a visible test under ``tests/`` and hidden
tests the agent never sees. 22 function families x (3 bug kinds + "missing") x 3 names =
264 distinct tasks. The outcome is decided by running the hidden tests inside the sandbox
after ``submit`` (``task.test_command`` prints ``N passed, M failed``).

Example:
    >>> from knowlyr.taskset import get_suite
    >>> suite = get_suite("coding")
    >>> t = suite.task(0)
    >>> sorted(t.files)[:2]
    ['numeric/__init__.py', 'numeric/numeric.py']
    >>> t.test_command
    'python3 .knowlyr_hidden/run_tests.py .knowlyr_hidden'
"""

from __future__ import annotations

import hashlib
import random
import re
from functools import cache

from knowlyr.taskset.coding_families import FAMILIES, Family
from knowlyr.taskset.suite import Suite
from knowlyr.taskset.task import Task
from knowlyr.taskset.testrunner import runner_source

__all__ = ["HIDDEN_DIR", "RUN_TESTS", "TEST_COMMAND", "CodingSuite"]

HIDDEN_DIR = ".knowlyr_hidden"
RUN_TESTS = "python3 run_tests.py tests"
TEST_COMMAND = f"python3 {HIDDEN_DIR}/run_tests.py {HIDDEN_DIR}"
PACKAGES = ("numeric", "toolbox", "helpers", "utilkit", "corelib", "common", "pyhelp", "snippets")
KINDS_PER_FAMILY = 4  # "missing" + three mutations
NAMES_PER_FAMILY = 3

_TEST_HEADER = '''"""Tests for {pkg}.{module}.{fn}."""

from {pkg}.{module} import {fn}


def _raises(exc, f, *args):
    try:
        f(*args)
    except exc:
        return True
    return False
'''


@cache
def _runner() -> str:
    return runner_source()


def _seed(task_id: str) -> int:
    return int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big")


def _tests(fn: str, pkg: str, module: str, exprs: tuple[str, ...], tag: str) -> str:
    out = [_TEST_HEADER.format(pkg=pkg, module=module, fn=fn)]
    for i, expr in enumerate(exprs):
        body = expr.replace("{fn}", fn)
        out.append(f"\ndef test_{fn}_{tag}_{i}():\n    assert {body}\n")
    return "".join(out)


def _signature(fam: Family, fn: str) -> str:
    m = re.search(r"^def \{fn\}\((.*?)\):", fam.body, re.M)
    return f"{fn}({m.group(1)})" if m else f"{fn}(...)"


class CodingSuite(Suite):
    """264 Python repair / implementation tasks; outcome = hidden tests passing."""

    name = "coding"
    domain = "coding"
    families = tuple(f.key for f in FAMILIES)

    def _ids(self) -> list[str]:
        n = len(FAMILIES) * KINDS_PER_FAMILY * NAMES_PER_FAMILY
        return [self._id(i) for i in range(n)]

    @staticmethod
    def _split_index(index: int) -> tuple[Family, int, int]:
        per = KINDS_PER_FAMILY * NAMES_PER_FAMILY
        fam = FAMILIES[index // per]
        rem = index % per
        return fam, rem // NAMES_PER_FAMILY, rem % NAMES_PER_FAMILY

    def _id(self, index: int) -> str:
        fam, _, _ = self._split_index(index)
        return f"coding-{fam.key}-{index:04d}"

    def _build(self, index: int) -> Task:
        fam, kind_idx, variant = self._split_index(index)
        task_id = self._id(index)
        rng = random.Random(_seed(task_id))
        fn, module = fam.names[variant], fam.modules[variant]
        pkg = rng.choice(PACKAGES)
        decoy = FAMILIES[
            (FAMILIES.index(fam) + 1 + rng.randrange(len(FAMILIES) - 1)) % len(FAMILIES)
        ]
        decoy_src = decoy.body.replace("{fn}", decoy.names[0])
        correct = fam.body.replace("{fn}", fn)
        header = f'"""{module}: part of the {pkg} package."""\n\n\n'
        fixed_source = header + decoy_src + "\n\n" + correct
        if kind_idx == 0:
            kind = "missing"
            target_buggy = ""
            buggy_source = header + decoy_src
            instruction = (
                f"Add a function `{_signature(fam, fn)}` to {pkg}/{module}.py "
                f"that should {fam.doc}. "
                f"Check with `{RUN_TESTS}`, then call submit."
            )
        else:
            kind, old, new = fam.mutations[kind_idx - 1]
            old, new = old.replace("{fn}", fn), new.replace("{fn}", fn)
            if correct.count(old) != 1:
                raise AssertionError(f"family {fam.key}: mutation {kind!r} must match exactly once")
            target_buggy = correct.replace(old, new)
            buggy_source = header + decoy_src + "\n\n" + target_buggy
            instruction = (
                f"`{fn}` in {pkg}/{module}.py has a bug: it should {fam.doc}. "
                f"Fix it so that `{RUN_TESTS}` passes, then call submit."
            )
        module_path = f"{pkg}/{module}.py"
        visible_path = f"tests/test_{module}.py"
        files = {
            f"{pkg}/__init__.py": f'"""{pkg}: small helpers."""\n',
            module_path: buggy_source,
            visible_path: _tests(fn, pkg, module, fam.visible, "visible"),
            "run_tests.py": _runner(),
        }
        hidden = {
            f"{HIDDEN_DIR}/test_{module}_hidden.py": _tests(fn, pkg, module, fam.hidden, "hidden"),
            f"{HIDDEN_DIR}/run_tests.py": _runner(),
        }
        if kind == "missing":
            fix = {"tool": "write_file", "params": {"path": module_path, "content": fixed_source}}
        else:
            fix = {
                "tool": "edit_file",
                "params": {"path": module_path, "old_str": target_buggy, "new_str": correct},
            }
        solution = [
            {"tool": "read_file", "params": {"path": module_path}},
            fix,
            {"tool": "bash", "params": {"command": RUN_TESTS}},
            {"tool": "submit", "params": {}},
        ]
        return Task(
            task_id=task_id,
            domain="coding",
            suite=self.name,
            family=fam.key,
            instruction=instruction,
            metadata={"bug_kind": kind, "function": fn, "module": module_path},
            files=files,
            hidden_tests=hidden,
            test_command=TEST_COMMAND,
            reference_solution=solution,
            reference_length=len(solution),
            data={
                "module_path": module_path,
                "visible_test": visible_path,
                "function": fn,
                "target_buggy": target_buggy,
                "target_fixed": correct,
                "fixed_source": fixed_source,
                "n_hidden": len(fam.hidden),
            },
        )
