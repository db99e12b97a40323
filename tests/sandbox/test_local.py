"""Local-backend specifics: uid, limits, cgroup, /tmp, snapshots on disk, missing bubblewrap."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from knowlyr.errors import BackendUnavailableError
from knowlyr.sandbox import LocalSandbox, SandboxConfig, create_sandbox
from knowlyr.sandbox._util import OutputCapture, truncate_text
from knowlyr.sandbox.snapshot import WorkspaceSnapshots


@pytest.fixture
def sb():
    with LocalSandbox(SandboxConfig(memory_mb=512, max_processes=100)) as s:
        yield s


def test_runs_as_the_sandbox_uid_with_no_capabilities(sb):
    r = sb.exec("id -u; grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status")
    lines = r.stdout.split()
    assert lines[0] == str(sb.uid) and sb.uid != 0
    assert lines[1:] == [
        "CapPrm:",
        "0000000000000000",
        "CapEff:",
        "0000000000000000",
        "CapBnd:",
        "0000000000000000",
    ]


def test_rlimits_follow_the_config(sb):
    r = sb.exec("ulimit -t; ulimit -v; ulimit -u; ulimit -c")
    assert r.stdout.split() == ["60", str(512 * 1024), "100", "0"]


def test_memory_cgroup_exists_while_open_and_goes_with_close(sb):
    if os.geteuid() != 0 or not sb._cgroup.dirs:
        pytest.skip("no writable cgroup hierarchy on this machine (the sandbox logs why)")
    d = sb._cgroup.dirs[0]
    limit_file = (
        d / "memory.limit_in_bytes" if (d / "memory.limit_in_bytes").exists() else d / "memory.max"
    )
    assert int(limit_file.read_text()) == 512 * 1024 * 1024
    assert sb.exec("sleep 0.3 & cat /proc/self/cgroup").ok
    sb.close()
    assert not d.exists()


def test_workspace_belongs_to_the_sandbox_user_on_the_host(sb):
    sb.write_file("from_host.txt", "x")
    sb.exec("mkdir made_inside && echo y > made_inside/f")
    for p in ("", "from_host.txt", "made_inside", "made_inside/f"):
        assert (sb.workspace / p).stat().st_uid == sb.uid


def test_tmp_is_private_and_kept_between_commands(sb):
    sb.exec("echo kept > /tmp/note")
    assert sb.exec("cat /tmp/note").stdout == "kept\n"
    with LocalSandbox() as other:
        assert other.exec("cat /tmp/note").exit_code != 0


def test_root_is_read_only_and_home_is_the_workspace(sb):
    assert "Read-only file system" in sb.exec("touch /newfile").stderr
    assert (
        sb.exec("echo $HOME; cd ~ && pwd").stdout == f"{sb.config.workdir}\n{sb.config.workdir}\n"
    )


def test_missing_bubblewrap_is_backend_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap anywhere
    with pytest.raises(BackendUnavailableError, match="apt-get install -y bubblewrap"):
        create_sandbox(SandboxConfig(backend="local"))


def test_failed_creation_leaves_nothing_behind(tmp_path):
    with pytest.raises(ValueError):
        LocalSandbox(files={"../escape": "x"}, root=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_concurrent_sandboxes_do_not_share_process_limits():
    a, b = (
        LocalSandbox(SandboxConfig(max_processes=40)),
        LocalSandbox(SandboxConfig(max_processes=40)),
    )
    try:
        assert a.uid != b.uid
        import threading

        t = threading.Thread(target=a.exec, args=("for i in $(seq 30); do sleep 2 & done; wait",))
        t.start()
        time.sleep(0.7)
        r = b.exec("for i in $(seq 30); do sleep 0.1 & done; wait; echo ok")
        t.join()
        assert r.stdout == "ok\n" and "Resource temporarily unavailable" not in r.stderr
    finally:
        a.close()
        b.close()


# -- WorkspaceSnapshots on a plain directory -------------------------------------------


def _tree(root: Path) -> dict[str, tuple[int, bytes | str | None]]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        rel = str(p.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = (stat.S_IFLNK, os.readlink(p))
        elif p.is_dir():
            out[rel] = (stat.S_IMODE(st.st_mode), None)
        else:
            out[rel] = (stat.S_IMODE(st.st_mode), p.read_bytes())
    return out


def test_snapshots_restore_every_kind_of_change(tmp_path):
    ws, store = tmp_path / "ws", tmp_path / "store"
    ws.mkdir()
    (ws / "a").mkdir()
    (ws / "a" / "f.txt").write_text("one")
    (ws / "b.txt").write_text("two")
    (ws / "exe.sh").write_text("#!/bin/sh\n")
    (ws / "exe.sh").chmod(0o755)
    (ws / "link").symlink_to("b.txt")
    snaps = WorkspaceSnapshots(ws, store)
    sid = snaps.snapshot()
    before = _tree(ws)
    assert snaps.restore(sid) == 0  # nothing changed: nothing touched
    # every kind of change
    (ws / "a" / "f.txt").write_text("ONE")  # content
    (ws / "b.txt").unlink()  # deletion
    (ws / "b.txt").mkdir()  # ...replaced by a directory
    (ws / "exe.sh").chmod(0o600)  # mode
    (ws / "link").unlink()
    (ws / "link").symlink_to("/etc/passwd")  # retargeted link
    (ws / "new").mkdir()
    (ws / "new" / "deep.txt").write_text("x")  # new tree
    assert snaps.restore(sid) > 0
    assert _tree(ws) == before
    snaps.restore(
        sid
    )  # files it just rewrote are copied again (their ctime is too recent to trust)
    assert _tree(ws) == before


def test_snapshot_copies_are_independent_of_the_workspace(tmp_path):
    ws, store = tmp_path / "ws", tmp_path / "store"
    ws.mkdir()
    (ws / "f").write_text("original")
    snaps = WorkspaceSnapshots(ws, store)
    sid = snaps.snapshot()
    with open(ws / "f", "r+") as fh:  # in-place write (same inode): a hard link would follow it
        fh.write("MODIFIED")
    snaps.restore(sid)
    assert (ws / "f").read_text() == "original"
    snaps.drop(sid)
    assert not (store / sid).exists() and sid not in snaps


# -- output truncation ------------------------------------------------------------------


def test_truncate_text_keeps_head_and_tail():
    text = "".join(f"{i}\n" for i in range(1000))
    out, cut = truncate_text(text, 100)
    assert cut and out.startswith("0\n1\n") and out.endswith("998\n999\n")
    assert f"[... {len(text) - 100} characters truncated ...]" in out
    assert truncate_text("short", 100) == ("short", False)


def test_output_capture_bounds_memory_and_counts_what_it_dropped():
    cap = OutputCapture(1000)
    chunk = b"y\n" * 5000
    for _ in range(200):  # 2 MB in
        cap.feed(chunk)
    assert cap.total == 2_000_000
    assert len(cap._head) + sum(map(len, cap._tail)) < 20_000
    text, cut = cap.text(1000)
    assert cut and len(text) < 1100
    omitted = int(text.split("[... ")[1].split(" ")[0])
    assert omitted == 2_000_000 - 1000
    full = OutputCapture(0)
    full.feed(b"a" * 100_000)
    assert full.data() == b"a" * 100_000


def test_spawner_is_restarted_if_it_dies(sb):
    assert sb.exec("echo one").stdout == "one\n"
    sb._spawner._proc.kill()
    sb._spawner._proc.wait()
    assert sb.exec("echo two").stdout == "two\n"


def test_many_sandboxes_in_threads():
    from concurrent.futures import ThreadPoolExecutor

    boxes = [LocalSandbox(files={"id.txt": str(i)}) for i in range(4)]
    try:

        def work(i: int) -> list[str]:
            return [boxes[i].exec(f"cat id.txt; echo -{j}").stdout for j in range(8)]

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(work, range(4)))
        assert results == [[f"{i}-{j}\n" for j in range(8)] for i in range(4)]
    finally:
        for b in boxes:
            b.close()


def test_commands_die_when_the_host_process_dies():
    import shutil
    import subprocess
    import sys

    code = (
        "from knowlyr.sandbox.local import LocalSandbox\n"
        "sb = LocalSandbox()\n"
        "print(sb.uid, sb.root, flush=True)\n"
        "sb.exec('sleep 100', timeout=200)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    uid, root = p.stdout.readline().split()
    time.sleep(0.5)
    p.kill()
    p.wait()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = []
            for d in Path("/proc").iterdir():
                try:
                    if (
                        d.name.isdigit()
                        and d.stat().st_uid == int(uid)
                        and (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
                    ):
                        alive.append(d.name)
                except OSError:
                    pass
            if not alive:
                break
            time.sleep(0.1)
        assert alive == [], "the sandboxed command outlived the process that started it"
    finally:
        shutil.rmtree(root, ignore_errors=True)
