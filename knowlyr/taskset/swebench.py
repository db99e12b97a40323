"""Load SWE-bench-format instances (JSONL) as coding tasks for the container backend.

Each line holds ``instance_id``, ``repo``, ``base_commit``, ``patch`` (the gold fix),
``test_patch``, ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (lists, or JSON strings of lists as in
the Hugging Face dataset) and optionally ``problem_statement``, ``image`` and ``test_cmd``.
The repository is read at ``base_commit`` from a local clone (``repos`` maps ``owner/name``
to a path; no network), its files become ``task.files``, and the episode runs in the
container backend (``task.data["sandbox"]``). After ``submit`` the env applies
``test_patch`` and runs the ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` tests; the task succeeds
when every one of them passes.

Example:
    >>> loaded = load_swebench("instances.jsonl", repos={"me/calc": "/src/calc"})  # doctest: +SKIP
    >>> loaded.tasks[0].data["FAIL_TO_PASS"], loaded.rejected  # doctest: +SKIP
    (['tests/test_calc.py::test_add'], [])
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from knowlyr.errors import ConfigError
from knowlyr.taskset.coding import HIDDEN_DIR
from knowlyr.taskset.suite import register_tasks, split_of
from knowlyr.taskset.task import Task
from knowlyr.taskset.testrunner import runner_source

__all__ = [
    "DEFAULT_TEST_COMMAND",
    "REQUIRED_FIELDS",
    "Rejected",
    "SWEBenchLoad",
    "apply_patch",
    "load_swebench",
    "parse_test_results",
    "patch_paths",
]

REQUIRED_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
DEFAULT_TEST_COMMAND = f"python3 {HIDDEN_DIR}/run_tests.py {{tests}}"
_RESULT = re.compile(r"^(PASSED|FAILED|ERROR)\s+(\S+)", re.M)
_DIFF_PATH = re.compile(r"^(?:---|\+\+\+) (?:[ab]/)?(\S+)", re.M)


@dataclass
class Rejected:
    """A JSONL line that could not become a task, and why."""

    line: int
    instance_id: str | None
    reason: str

    @property
    def task_id(self) -> str | None:
        """The record's id (``instance_id`` for SWE-bench, ``task_id`` for Task JSONL)."""
        return self.instance_id


@dataclass
class SWEBenchLoad:
    """What :func:`load_swebench` read: good tasks and rejected lines (never silently dropped)."""

    tasks: list[Task] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)

    def __iter__(self):
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)


def jsonl_lines(path: str | Path, what: str) -> list[tuple[int, bytes]]:
    """``(line number, bytes)`` of the non-blank lines of a JSONL file.

    Raises:
        ConfigError: the file cannot be read (the message names ``what`` and the path).
    """
    p = Path(path)
    try:
        lines = p.read_bytes().splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read {what} {p}: {e.strerror}") from e
    return [(n, raw) for n, raw in enumerate(lines, start=1) if raw.strip()]


def _test_list(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value) if value.strip() else []
        except orjson.JSONDecodeError as e:
            raise ValueError(f"{name} is a string but not a JSON list: {e}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of test ids, got {type(value).__name__}")
    return value


def _repo_files(repo_dir: Path, commit: str) -> dict[str, str]:
    """Text files of ``repo_dir`` at ``commit`` (via ``git archive``; binary files skipped)."""
    proc = subprocess.run(
        ["git", "-C", str(repo_dir), "archive", "--format=tar", commit],
        capture_output=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise ValueError(
            f"git archive {commit} in {repo_dir} failed: "
            f"{proc.stderr.decode(errors='replace').strip()}"
        )
    files: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            data = tar.extractfile(member).read()
            try:
                files[member.name] = data.decode()
            except UnicodeDecodeError:
                continue
    return files


def patch_paths(patch: str) -> list[str]:
    """Files a unified diff touches (``/dev/null`` excluded)."""
    return sorted({p for p in _DIFF_PATH.findall(patch) if p != "/dev/null"})


def apply_patch(files: dict[str, str], patch: str) -> dict[str, str | None]:
    """Apply a unified diff to ``files`` with ``git apply`` in a scratch directory.

    Returns the new text of every touched file (``None`` for a deleted file).

    Raises:
        ValueError: the patch does not apply, with git's message.
    """
    touched = patch_paths(patch)
    with tempfile.TemporaryDirectory(prefix="knowlyr-patch-") as tmp:
        root = Path(tmp)
        for p in touched:
            if p in files:
                (root / p).parent.mkdir(parents=True, exist_ok=True)
                (root / p).write_text(files[p])
        (root / ".patch").write_text(patch if patch.endswith("\n") else patch + "\n")
        proc = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", ".patch"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ValueError(f"patch does not apply: {proc.stderr.strip()}")
        return {p: (root / p).read_text() if (root / p).exists() else None for p in touched}


def parse_test_results(output: str) -> dict[str, str]:
    """``{test_id: "PASSED" | "FAILED" | "ERROR"}`` from runner or ``pytest -rA`` output."""
    results: dict[str, str] = {}
    for status, test_id in _RESULT.findall(output):
        results[test_id] = status
    return results


def load_swebench(
    path: str | Path,
    *,
    repos: dict[str, str | Path] | None = None,
    image: str = "knowlyr-sandbox:latest",
    test_command: str | None = None,
    register: bool = True,
) -> SWEBenchLoad:
    """Read SWE-bench JSONL into :class:`Task` objects for the container backend.

    Args:
        path: the JSONL file.
        repos: ``repo`` name (``owner/name``) -> local clone holding ``base_commit``.
        image: container image for instances without an ``image`` field.
        test_command: shell template with ``{tests}`` (the quoted test ids) for instances
            without ``test_cmd``; the default runs the dependency-free runner
            (``path::name`` ids), which needs only ``python3`` in the image.
        register: make the tasks findable by id (:func:`knowlyr.taskset.get_task`), which
            the scripted experts use.

    Returns:
        :class:`SWEBenchLoad` with ``tasks`` and ``rejected`` (line, instance id, reason).

    Raises:
        ConfigError: the file cannot be read.
    """
    out = SWEBenchLoad()
    for n, raw in jsonl_lines(path, "SWE-bench file"):
        iid = None
        try:
            rec = orjson.loads(raw)
            if not isinstance(rec, dict):
                raise ValueError("line is not a JSON object")
            iid = rec.get("instance_id")
            missing = [f for f in REQUIRED_FIELDS if f not in rec]
            if missing:
                raise ValueError(f"missing field(s) {missing}")
            f2p = _test_list(rec["FAIL_TO_PASS"], "FAIL_TO_PASS")
            p2p = _test_list(rec["PASS_TO_PASS"], "PASS_TO_PASS")
            repo_dir = (repos or {}).get(rec["repo"])
            if repo_dir is None:
                raise ValueError(
                    f"no local clone for repo {rec['repo']!r}: "
                    f"pass repos={{{rec['repo']!r}: '/path'}}"
                )
            files = _repo_files(Path(repo_dir), rec["base_commit"])
            tests = " ".join(shlex.quote(t) for t in f2p + p2p)
            cmd = (rec.get("test_cmd") or test_command or DEFAULT_TEST_COMMAND).replace(
                "{tests}", tests
            )
            statement = rec.get("problem_statement") or f"Fix the issue of {rec['repo']} ({iid})."
            out.tasks.append(
                Task(
                    task_id=str(iid),
                    domain="coding",
                    suite="swebench",
                    family=rec["repo"].replace("/", "__").replace("-", "_"),
                    split=split_of(str(iid)),
                    instruction=f"{statement}\n\nEdit the repository, then call submit.",
                    metadata={"repo": rec["repo"], "base_commit": rec["base_commit"]},
                    files=files,
                    hidden_tests={f"{HIDDEN_DIR}/run_tests.py": runner_source()},
                    test_command=cmd,
                    reference_length=len(patch_paths(rec["patch"])) + 1,
                    data={
                        "swebench": True,
                        "patch": rec["patch"],
                        "test_patch": rec["test_patch"],
                        "FAIL_TO_PASS": f2p,
                        "PASS_TO_PASS": p2p,
                        "sandbox": {"backend": "container", "image": rec.get("image") or image},
                    },
                )
            )
        except (ValueError, orjson.JSONDecodeError, subprocess.TimeoutExpired) as e:
            out.rejected.append(Rejected(n, iid, str(e)))
    if register:
        register_tasks(out.tasks)
    return out
