"""Functional behaviour of both backends through the Sandbox protocol."""

from __future__ import annotations

import time

import pytest

from knowlyr.errors import SandboxError, WorkspacePathError


def test_exec_stdout_stderr_exit_code(make_sandbox):
    sb = make_sandbox()
    r = sb.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert not r.ok and not r.timed_out and r.duration_s > 0
    assert r.output == "out\nerr\n"
    ok = sb.exec("true")
    assert ok.ok and ok.exit_code == 0 and ok.stdout == ""
    assert sb.exec("exit 0 | false").exit_code == 1
    assert sb.exec("no-such-command-xyz").exit_code == 127


def test_exec_runs_in_workspace_as_unprivileged_user(make_sandbox):
    sb = make_sandbox(files={"hello.py": "import os\nprint(os.getcwd(), os.getuid() != 0)\n"})
    r = sb.exec("python3 hello.py")
    assert r.stdout == f"{sb.config.workdir} True\n", r
    r = sb.exec("git init -q && git add -A && git commit -qm init && git log --format=%s")
    assert r.stdout == "init\n", r


def test_stdin_is_passed(make_sandbox):
    sb = make_sandbox()
    assert sb.exec("tr a-z A-Z", stdin="hello\nworld\n").stdout == "HELLO\nWORLD\n"
    big = "x" * 300_000 + "\n"
    assert sb.exec("wc -c", stdin=big).stdout.strip() == str(len(big))
    assert sb.exec("cat").stdout == ""  # no stdin: end of file at once


def test_timeout_kills_and_reports(make_sandbox):
    sb = make_sandbox()
    start = time.monotonic()
    r = sb.exec("echo started; sleep 30", timeout=1)
    assert time.monotonic() - start < 10
    assert r.timed_out and r.exit_code == 124 and not r.ok
    assert r.stdout == "started\n"
    assert "timed out after 1s" in r.stderr
    assert sb.exec("echo alive").stdout == "alive\n"  # the sandbox survives a timeout


def test_default_timeout_comes_from_config(make_sandbox):
    sb = make_sandbox(timeout_s=1)
    assert sb.exec("sleep 20").timed_out
    with pytest.raises(ValueError, match="timeout"):
        sb.exec("true", timeout=0)


def test_background_processes_do_not_outlive_the_command(make_sandbox):
    sb = make_sandbox()
    r = sb.exec("(sleep 1; echo late > late.txt) > /dev/null 2>&1 & echo done")
    assert r.stdout == "done\n" and not r.timed_out
    time.sleep(1.5)
    assert sb.exec("ls late.txt").exit_code != 0


def test_output_is_truncated_with_a_marker(make_sandbox):
    sb = make_sandbox(max_output_chars=1000)
    r = sb.exec("seq 1 100000")
    assert r.truncated and not r.timed_out and r.exit_code == 0
    assert len(r.stdout) < 1100
    assert r.stdout.startswith("1\n2\n3\n")
    assert r.stdout.rstrip().endswith("100000")  # the tail is kept
    assert "characters truncated" in r.stdout
    small = sb.exec("seq 1 10")
    assert not small.truncated and small.stdout == "".join(f"{i}\n" for i in range(1, 11))


def test_write_and_read_files(make_sandbox):
    sb = make_sandbox(files={"pkg/mod.py": "X = 1\n", "data.bin": b"\x00\x01\xff"})
    assert sb.read_file("pkg/mod.py") == b"X = 1\n"
    assert sb.read_file(f"{sb.config.workdir}/data.bin") == b"\x00\x01\xff"
    sb.write_file("deep/er/new.txt", "héllo")
    assert sb.exec("cat deep/er/new.txt").stdout == "héllo"
    sb.exec("echo from-inside > inside.txt")
    assert sb.read_file("inside.txt") == b"from-inside\n"
    sb.exec("echo more >> deep/er/new.txt")  # files written from outside stay writable inside
    assert sb.read_file("deep/er/new.txt") == "héllomore\n".encode()
    with pytest.raises(FileNotFoundError):
        sb.read_file("missing.txt")
    with pytest.raises(IsADirectoryError):
        sb.read_file("deep")


@pytest.mark.parametrize(
    "path", ["../outside.txt", "/etc/passwd", "a/../../x", "/workspace/../etc/passwd"]
)
def test_paths_outside_the_workspace_are_refused(make_sandbox, path):
    sb = make_sandbox()
    with pytest.raises(WorkspacePathError):
        sb.write_file(path, "x")
    with pytest.raises(WorkspacePathError):
        sb.read_file(path)


def test_symlinks_out_of_the_workspace_are_refused(make_sandbox):
    sb = make_sandbox()
    sb.exec(
        "ln -s /etc/passwd pw && ln -s /etc etcdir && ln -s target.txt inside-link && echo t > target.txt"
    )
    with pytest.raises(WorkspacePathError):
        sb.read_file("pw")
    with pytest.raises(WorkspacePathError):
        sb.read_file("etcdir/hostname")
    with pytest.raises(WorkspacePathError):
        sb.write_file("etcdir/evil", "x")
    assert sb.read_file("inside-link") == b"t\n"  # a link that stays inside is fine


def test_snapshot_and_restore(make_sandbox):
    files = {f"src/m{i}.py": f"V = {i}\n" for i in range(20)}
    sb = make_sandbox(files={**files, "keep.txt": "keep\n"})
    sid = sb.snapshot()
    sb.exec(
        "rm src/m1.py && echo changed > src/m2.py && echo new > new.txt && mkdir -p extra/d && chmod 600 keep.txt"
    )
    sb.write_file("src/m3.py", "V = 33\n")
    sb.restore(sid)
    listing = sb.exec("find . -type f | sort").stdout.split()
    assert listing == sorted(f"./{p}" for p in [*files, "keep.txt"])
    assert sb.read_file("src/m1.py") == b"V = 1\n"
    assert sb.read_file("src/m2.py") == b"V = 2\n"
    assert sb.read_file("src/m3.py") == b"V = 3\n"
    assert sb.exec("stat -c %a keep.txt").stdout.strip() == "644"
    # a second episode from the same snapshot, then a later snapshot
    sb.exec("echo again > src/m2.py")
    sb.restore(sid)
    assert sb.read_file("src/m2.py") == b"V = 2\n"
    sb.exec("echo two > second.txt")
    sid2 = sb.snapshot()
    sb.restore(sid)
    assert sb.exec("test -e second.txt").exit_code == 1
    sb.restore(sid2)
    assert sb.read_file("second.txt") == b"two\n"
    with pytest.raises(SandboxError, match="unknown snapshot"):
        sb.restore("nope")


def test_same_size_rewrite_right_after_restore_is_caught(make_sandbox):
    sb = make_sandbox(files={"f.txt": "aaaa\n"})
    sid = sb.snapshot()
    for _ in range(3):
        sb.write_file("f.txt", "bbbb\n")  # same size, same second: only ctime can tell
        sb.restore(sid)
        assert sb.read_file("f.txt") == b"aaaa\n"


def test_close_is_idempotent_and_final(make_sandbox):
    sb = make_sandbox()
    sb.close()
    sb.close()
    with pytest.raises(SandboxError, match="closed"):
        sb.exec("true")
    with pytest.raises(SandboxError, match="closed"):
        sb.read_file("x")


def test_context_manager_closes(make_sandbox):
    with make_sandbox() as sb:
        assert sb.exec("echo hi").stdout == "hi\n"
    with pytest.raises(SandboxError):
        sb.exec("true")


def test_restore_repairs_the_workspace_directory_itself(make_sandbox):
    sb = make_sandbox(files={"f.txt": "x"})
    sid = sb.snapshot()
    sb.exec("chmod 000 .")
    sb.restore(sid)
    assert sb.exec("cat f.txt").stdout == "x"
    assert sb.exec("stat -c %a .").stdout.strip() == "755"


def test_fifos_do_not_hang_file_access(make_sandbox):
    sb = make_sandbox()
    sb.exec("mkfifo pipe")
    start = time.monotonic()
    with pytest.raises(WorkspacePathError, match="not a regular file"):
        sb.read_file("pipe")
    with pytest.raises(WorkspacePathError, match="not a regular file"):
        sb.write_file("pipe", "x")
    assert time.monotonic() - start < 10


def test_too_long_command_is_an_error_result(make_sandbox):
    sb = make_sandbox()
    r = sb.exec("echo " + "x" * 200_000)
    assert r.exit_code == 126 and "write it to a file" in r.stderr
    r = sb.exec("cat > big.txt; wc -c < big.txt", stdin="y" * 500_000)  # long input goes by stdin
    assert r.stdout.strip() == "500000"


def test_stdin_with_a_command_that_writes_before_reading(make_sandbox):
    sb = make_sandbox(max_output_chars=1000)
    data = "z" * 2_000_000
    r = sb.exec("head -c 3000000 /dev/zero | tr '\\0' a; cat | wc -c", stdin=data, timeout=60)
    assert not r.timed_out and r.stdout.rstrip().endswith("2000000"), r


def test_the_usual_coding_tools_are_there(make_sandbox):
    sb = make_sandbox()
    r = sb.exec(
        "for t in python3 git awk sed grep find diff patch tar gzip xargs sort; do command -v $t >/dev/null || echo missing $t; done; "
        "python3 -c 'import json, sqlite3, ssl, unittest, subprocess, venv' && echo py-ok"
    )
    assert r.stdout == "py-ok\n", r
