"""A dependency-free test runner, copied into sandboxes as ``run_tests.py``.

Sandboxes run the system Python, which has no pytest. This file is both a module (the suite
code reads its source with :func:`runner_source` and parses results with
:func:`parse_summary`) and the script itself: ``python3 run_tests.py tests/`` imports every
``test_*.py`` file given (or found under a directory; ``path::name`` selects one test),
calls each ``test_*`` function, prints
``PASSED``/``FAILED`` lines and ends with a ``N passed, M failed`` summary. A test file that
does not import counts every test in it as failed. Only the standard library is used.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
import traceback
from pathlib import Path

__all__ = ["parse_summary", "run_paths", "runner_source"]

_SUMMARY = re.compile(r"^=+ (\d+) passed, (\d+) failed =+$", re.M)
_PYTEST = re.compile(r"^=+ (?:.*?\d+ (?:passed|failed|errors?)).* in [\d.]+s.*=+$", re.M)


def runner_source() -> str:
    """This file's source, to write into a workspace as ``run_tests.py``."""
    return Path(__file__).read_text()


def parse_summary(output: str) -> tuple[int, int] | None:
    """``(passed, failed)`` from the last summary line, or ``None`` if there is none.

    Reads this runner's ``== N passed, M failed ==`` and pytest's final line
    (``== 1 failed, 4 passed, 1 error in 0.05s ==``; errors count as failures).
    """
    found = _SUMMARY.findall(output)
    if found:
        p, f = found[-1]
        return int(p), int(f)
    lines = _PYTEST.findall(output)
    if not lines:
        return None
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|errors?)", lines[-1])}
    failed = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
    return counts.get("passed", 0), failed


def _test_names(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, OSError, UnicodeDecodeError):
        return ["<module>"]
    return [
        n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    ]


def _files(args: list[str], out) -> list[tuple[Path, set[str] | None]]:
    """Test files to run, each with the test names selected by ``path::name`` (None: all)."""
    found: dict[Path, set[str] | None] = {}
    for a in args or ["tests"]:
        path, _, name = a.partition("::")
        p = Path(path)
        if p.is_dir():
            for f in sorted(p.rglob("test*.py")):
                found[f] = None
        elif p.exists():
            if name and found.get(p, set()) is not None:
                found.setdefault(p, set()).add(name)
            elif not name:
                found[p] = None
        else:
            print(f"ERROR {a}: no such file or directory", file=out)
    return list(found.items())


def run_paths(args: list[str], *, out=None) -> tuple[int, int]:
    """Run the tests in ``args`` (files or directories); print results to ``out``."""
    out = out or sys.stdout
    root = str(Path.cwd())
    if root not in sys.path:
        sys.path.insert(0, root)
    passed = failed = 0
    files = _files(args, out)
    if not files:
        failed += 1
    for i, (path, selected) in enumerate(files):
        names = _test_names(path)
        if selected is not None:
            missing = sorted(selected - set(names))
            for name in missing:
                print(f"FAILED {path}::{name} - no such test", file=out)
            failed += len(missing)
            names = [n for n in names if n in selected]
        spec = importlib.util.spec_from_file_location(f"_knowlyr_test_{i}_{path.stem}", path)
        try:
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            for name in names:
                print(f"FAILED {path}::{name} - import failed: {type(e).__name__}: {e}", file=out)
            failed += len(names)
            continue
        for name in names:
            fn = getattr(mod, name, None)
            try:
                fn()
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt):
                    raise
                tb = traceback.extract_tb(e.__traceback__)
                line = tb[-1].lineno if tb else "?"
                print(f"FAILED {path}::{name} (line {line}) - {type(e).__name__}: {e}", file=out)
                failed += 1
            else:
                print(f"PASSED {path}::{name}", file=out)
                passed += 1
    print(f"========== {passed} passed, {failed} failed ==========", file=out)
    return passed, failed


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    _, n_failed = run_paths(sys.argv[1:])
    sys.exit(1 if n_failed else 0)
