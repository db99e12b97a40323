"""Persistent sandboxes (issue #18): SandboxManager (ids, reset to the creation snapshot,
snapshots, replay, count and idle limits, close_all) and `knowlyr sandbox create / exec /
reset / snapshot / replay / ls / rm` over keeper processes, including a keeper killed outright."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowlyr.cli import app
from knowlyr.errors import SandboxError
from knowlyr.sandbox import backend_available
from knowlyr.sandbox.persistent import SandboxManager, UnknownSandboxError
from knowlyr.trajectory import Trajectory

runner = CliRunner()


@pytest.fixture(autouse=True)
def _local_backend() -> None:
    reason = backend_available("local")
    if reason:
        pytest.fail(f"the local backend cannot run: {reason}")


@pytest.fixture
def manager() -> Iterator[SandboxManager]:
    mgr = SandboxManager(max_sandboxes=3, idle_timeout_s=None)
    yield mgr
    mgr.close_all()


def sh(mgr: SandboxManager, sid: str, cmd: str) -> str:
    return mgr.execute(sid, "bash", {"command": cmd}).output


def test_reset_and_snapshots(manager: SandboxManager):
    info = manager.create(files={"a.txt": "one\n"})
    sid = info.id
    sh(manager, sid, "echo two >> a.txt && touch b.txt")
    snap = manager.snapshot(sid)
    sh(manager, sid, "rm a.txt && mkdir -p d && echo x > d/c.txt")
    assert sh(manager, sid, "find . -type f | sort") == "./b.txt\n./d/c.txt\n"
    assert manager.reset(sid, snap) == snap
    assert sh(manager, sid, "cat a.txt; ls") == "one\ntwo\na.txt\nb.txt\n"
    assert manager.reset(sid) == info.initial_snapshot
    assert sh(manager, sid, "ls; cat a.txt") == "a.txt\none\n"
    with pytest.raises(SandboxError, match="has no snapshot 'snap-42'"):
        manager.reset(sid, "snap-42")
    assert manager.info(sid).snapshots == [snap]


def test_unknown_ids_count_limit_and_remove(manager: SandboxManager):
    ids = [manager.create().id for _ in range(3)]
    assert len(set(ids)) == 3 and [i.id for i in manager.list()] == ids
    with pytest.raises(SandboxError, match="the limit is 3"):
        manager.create()
    roots = [manager._entries[i].sandbox.root for i in ids]  # type: ignore[attr-defined]
    manager.remove(ids[0])
    assert not roots[0].exists()
    with pytest.raises(UnknownSandboxError, match=f"no open sandbox '{ids[0]}'"):
        manager.execute(ids[0], "bash", {"command": "ls"})
    manager.create()  # room again
    manager.close_all()
    assert not any(r.exists() for r in roots)
    with pytest.raises(SandboxError, match="closed"):
        manager.create()


def test_idle_sandboxes_are_closed():
    with SandboxManager(idle_timeout_s=1.0) as mgr:
        # no reaping until both exist: on a stalled machine the first was gone before its root
        # was read (KeyError), and creating one took 0.27 s on a loaded one
        mgr.idle_timeout_s = None
        idle = mgr.create().id
        root = mgr._entries[idle].sandbox.root  # type: ignore[attr-defined]
        busy = mgr.create().id
        mgr.idle_timeout_s = 1.0
        deadline = time.monotonic() + 30
        # the reaper takes the sandbox off the list, then closes it (outside the manager's lock)
        while (idle in {i.id for i in mgr.list()} or root.exists()) and time.monotonic() < deadline:
            sh(mgr, busy, "true")  # keeps `busy` in use
            time.sleep(0.05)
        assert [i.id for i in mgr.list()] == [busy]
        assert not root.exists()
        with pytest.raises(UnknownSandboxError, match="idle"):
            mgr.reset(idle)


def test_replay_reports_where_observations_differ(manager: SandboxManager):
    sid = manager.create(files={"n.txt": "3\n"}).id
    steps = []
    for i, cmd in enumerate(["cat n.txt", "echo 4 > n.txt", "cat n.txt", "cat missing.txt"]):
        r = manager.execute(sid, "bash", {"command": cmd})
        steps.append({"index": i, "action": {"tool": "bash", "params": {"command": cmd}},
                      "observation": {"output": r.output, "exit_code": r.exit_code}})  # fmt: skip
    steps.insert(2, {"index": 9, "message": "thinking aloud"})
    steps[3]["observation"]["output"] = "5\n"  # the recorded run saw something else
    traj = Trajectory.model_validate({"task": {"task_id": "t"}, "steps": steps})
    seen = []
    rep = manager.replay(sid, traj, progress=lambda done, total: seen.append((done, total)))
    assert (len(rep.steps), rep.skipped, rep.differing, rep.first_divergence) == (4, 1, 1, 2)
    assert rep.steps[3].exit_code == 1 and rep.steps[3].matches  # same failure, same output
    assert "-5" in rep.steps[2].diff and "+4" in rep.steps[2].diff
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    # without the reset, n.txt already holds 4: the first step differs now
    assert manager.replay(sid, traj, reset=False).first_divergence == 0


@pytest.fixture
def sandbox_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="knowlyr-keeper-test-"))
    d.chmod(0o711)  # the sandbox user traverses it
    monkeypatch.setenv("KNOWLYR_SANDBOX_ROOT", str(d))
    yield d
    runner.invoke(app, ["sandbox", "rm", "--all"])
    import shutil

    shutil.rmtree(d, ignore_errors=True)


def cli(*args: str) -> str:
    r = runner.invoke(app, ["sandbox", *args])
    assert r.exit_code == 0, f"knowlyr sandbox {' '.join(args)} -> {r.exit_code}: {r.output}"
    return r.output


def test_cli_keeps_a_sandbox_across_commands(sandbox_root: Path, tmp_path: Path):
    src = tmp_path / "hello.py"
    src.write_text("print('hello')\n")
    sid = cli("create", "--file", f"app.py={src}").strip()
    assert sid.startswith("sb-")
    assert cli("exec", sid, "python3 app.py && echo v1 > state.txt") == "hello\n"
    snap = cli("snapshot", sid).strip()
    cli("exec", sid, "echo v2 > state.txt")
    r = runner.invoke(app, ["sandbox", "exec", sid, "cat state.txt; exit 7"])
    assert (r.exit_code, r.output) == (7, "v2\n")  # the command's exit code
    cli("reset", sid, "--snapshot", snap)
    assert cli("exec", sid, "--tool", "read_file", "--params", '{"path": "state.txt"}').endswith(
        "v1\n"
    )
    cli("reset", sid)
    assert cli("exec", sid, "ls") == "app.py\n"
    listing = cli("ls")
    assert sid in listing and snap in listing
    traj = Trajectory.model_validate({"task": {"task_id": "t"}, "steps": [
        {"index": 0, "action": {"tool": "bash", "params": {"command": "python3 app.py"}},
         "observation": {"output": "hello\n", "exit_code": 0}},
        {"index": 1, "action": {"tool": "bash", "params": {"command": "ls"}},
         "observation": {"output": "other.py\n", "exit_code": 0}}]})  # fmt: skip
    (tmp_path / "t.jsonl").write_bytes(traj.to_json() + b"\n")
    out = cli("replay", sid, str(tmp_path / "t.jsonl"))
    assert "same step   0" in out and "DIFF step   1" in out and "1 differ (first at step 1)" in out
    assert cli("rm", sid) == f"removed {sid}\n"
    assert cli("ls") == "no open sandboxes\n"
    r = runner.invoke(app, ["sandbox", "exec", sid, "ls"])
    assert r.exit_code == 2 and "no open sandbox" in r.output  # an unknown id: a usage error
    assert not list(sandbox_root.glob("knowlyr-sb-*"))


def test_cli_limit_and_a_killed_keeper(sandbox_root: Path):
    a = cli("create", "--max-sandboxes", "1").strip()
    r = runner.invoke(app, ["sandbox", "create", "--max-sandboxes", "1"])
    assert r.exit_code == 1 and "the limit is 1" in r.output
    pid = int(next(line for line in cli("ls").splitlines() if a in line).split("pid")[1].split()[0])
    os.kill(pid, signal.SIGKILL)  # the keeper cannot close its sandbox
    os.waitpid(pid, 0)  # started from this process by the in-process CLI: collect it
    assert len(list(sandbox_root.glob("knowlyr-sb-*"))) == 1
    assert cli("ls") == "no open sandboxes\n"  # its state files go
    b = cli("create", "--max-sandboxes", "1").strip()  # the next start reaps the orphan
    assert [p.name for p in sandbox_root.glob("knowlyr-sb-*")] != [] and b != a
    assert len(list(sandbox_root.glob("knowlyr-sb-*"))) == 1
    assert not list((sandbox_root / "knowlyr-sandboxes").glob(f"{a}.*"))


@pytest.mark.parametrize("closing", [True, False], ids=["closing", "broken"])
def test_a_keeper_that_goes_away_with_the_request_unanswered(tmp_path: Path, closing: bool):
    import socket
    import threading

    from knowlyr.sandbox.keeper import call, keeper_dir

    path = keeper_dir(tmp_path) / "sb-gone.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def leave() -> None:  # takes the connection, then goes without reading or answering
        conn, _ = server.accept()
        time.sleep(0.2)  # the request is in its buffer, unread: the caller sees a reset (or EOF)
        if closing:
            path.unlink()  # as a keeper does on `rm` or its idle timeout
        conn.close()
        server.close()

    t = threading.Thread(target=leave)
    t.start()
    try:
        with pytest.raises(SandboxError) as e:
            call("sb-gone", "exec", root=tmp_path, tool="bash", params={"command": "ls"})
    finally:
        t.join()
    if closing:
        assert isinstance(e.value, UnknownSandboxError)
        assert "no open sandbox 'sb-gone'" in str(e.value) and "closed" in str(e.value)
    else:
        assert not isinstance(e.value, UnknownSandboxError)
        assert "the keeper of sb-gone closed the connection without answering" in str(e.value)
