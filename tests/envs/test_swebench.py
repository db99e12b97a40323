"""SWE-bench-format instances from a local git repository, run in the container backend."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from knowlyr.agents import ExpertAgent
from knowlyr.rollout import collect
from knowlyr.taskset import get_task
from knowlyr.taskset.swebench import apply_patch, load_swebench, parse_test_results

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
OLD_TEST = "from calc.ops import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"
NEW_TEST = "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "HOME": str(repo),
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="module")
def instance(tmp_path_factory) -> tuple[Path, Path]:
    """A repo with a bug at base_commit, plus a JSONL with its instance (and bad lines)."""
    root = tmp_path_factory.mktemp("swe")
    repo = root / "calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text(BUGGY)
    (repo / "tests" / "test_basic.py").write_text(OLD_TEST)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc" / "ops.py").write_text(FIXED)
    patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", ".")
    (repo / "tests" / "test_add.py").write_text(NEW_TEST)
    _git(repo, "add", "-N", "tests/test_add.py")
    test_patch = _git(repo, "diff")
    _git(repo, "reset", "-q")
    (repo / "tests" / "test_add.py").unlink()
    rec = {
        "instance_id": "me__calc-1",
        "repo": "me/calc",
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": orjson.dumps(["tests/test_add.py::test_add"]).decode(),
        "PASS_TO_PASS": ["tests/test_basic.py::test_sub"],
        "problem_statement": "add() subtracts instead of adding.",
    }
    lines = [
        orjson.dumps(rec),
        b"{not json",
        orjson.dumps({k: v for k, v in rec.items() if k != "patch"} | {"instance_id": "no-patch"}),
        orjson.dumps(rec | {"instance_id": "other-repo", "repo": "me/unknown"}),
        orjson.dumps(rec | {"instance_id": "bad-commit", "base_commit": "f" * 40}),
    ]
    path = root / "instances.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return repo, path


def test_loader_keeps_good_instances_and_explains_rejected_ones(instance):
    repo, path = instance
    loaded = load_swebench(path, repos={"me/calc": repo})
    assert [t.task_id for t in loaded.tasks] == ["me__calc-1"]
    t = loaded.tasks[0]
    assert t.files["calc/ops.py"] == BUGGY and "tests/test_add.py" not in t.files
    assert t.data["FAIL_TO_PASS"] == ["tests/test_add.py::test_add"]
    assert t.data["sandbox"]["backend"] == "container" and t.split in ("train", "heldout")
    assert get_task("me__calc-1") is t
    reasons = {r.line: r.reason for r in loaded.rejected}
    assert set(reasons) == {2, 3, 4, 5}
    assert "patch" in reasons[3] and "me/unknown" in reasons[4] and "git archive" in reasons[5]


def test_patches_apply_outside_the_sandbox(instance):
    repo, path = instance
    t = load_swebench(path, repos={"me/calc": repo}).tasks[0]
    assert apply_patch(t.files, t.data["patch"]) == {"calc/ops.py": FIXED}
    assert apply_patch({}, t.data["test_patch"]) == {"tests/test_add.py": NEW_TEST}
    with pytest.raises(ValueError, match="does not apply"):
        apply_patch({"calc/ops.py": "something else\n"}, t.data["patch"])
    out = "PASSED a.py::x\nFAILED b.py::y (line 3) - AssertionError\n"
    assert parse_test_results(out) == {"a.py::x": "PASSED", "b.py::y": "FAILED"}


@pytest.mark.container
def test_instance_runs_in_the_container_backend(instance, docker_host):
    repo, path = instance
    tasks = load_swebench(path, repos={"me/calc": repo}).tasks

    class SubmitAtOnce(ExpertAgent):
        def act(self, observation, info):
            return {"tool": "submit", "params": {}}

    solved, unsolved = collect("knowlyr/sandbox", ExpertAgent, 1, tasks=tasks)[0], None
    unsolved = collect("knowlyr/sandbox", SubmitAtOnce, 1, tasks=tasks)[0]
    assert solved.outcome.success is True, solved.metadata
    assert (solved.outcome.tests_passed, solved.outcome.tests_failed) == (2, 0)
    assert [s.action.tool for s in solved.steps] == ["write_file", "submit"]
    assert unsolved.outcome.success is False
    assert (unsolved.outcome.tests_passed, unsolved.outcome.tests_failed) == (1, 1)


@pytest.mark.container
def test_container_workspace_is_a_git_repo_and_resets(instance, docker_host):
    import knowlyr

    repo, path = instance
    task = load_swebench(path, repos={"me/calc": repo}).tasks[0]
    env = knowlyr.make("knowlyr/sandbox", tasks=[task])
    try:
        env.reset(task=task)
        env.step({"tool": "write_file", "params": {"path": "calc/ops.py", "content": FIXED}})
        diff = env.step({"tool": "git", "params": {"args": "diff --stat"}})
        assert diff.info["exit_code"] == 0 and "calc/ops.py" in diff.observation
        env.reset(task=task)
        clean = env.step({"tool": "git", "params": {"args": "status --porcelain"}})
        assert clean.info["exit_code"] == 0 and clean.observation.strip() == ""
    finally:
        env.close()
