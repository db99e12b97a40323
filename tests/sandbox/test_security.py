"""What a hostile command can do to the host: nothing. Run against both backends.

Each test attacks from inside a sandbox and then checks the host directly: files it tried to
write or read, a real TCP listener on the host's loopback, the host's process table, and a
fingerprint of host directories taken before and after.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from knowlyr.sandbox.local import LocalSandbox

SYSTEM_DIRS = ["/usr", "/usr/bin", "/usr/local/bin", "/etc", "/"]


def _fingerprint() -> dict[str, tuple[int, int, frozenset[str]]]:
    out = {}
    for d in SYSTEM_DIRS:
        st = os.stat(d)
        out[d] = (st.st_mtime_ns, st.st_mode, frozenset(os.listdir(d)))
    st = os.stat("/root")
    out["/root"] = (
        0,
        st.st_mode,
        frozenset(p for p in os.listdir("/root") if "knowlyr-test-secret" not in p),
    )
    return out


@pytest.fixture
def host_unchanged():
    """Fails the test if host system directories (or /root's listing) changed while it ran."""
    before = _fingerprint()
    yield
    assert _fingerprint() == before


def _sandbox_processes(sb) -> list[str]:
    """Processes still running for the sandbox: host /proc for local, `ps` for containers."""
    if isinstance(sb, LocalSandbox):
        pids = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    if p.stat().st_uid == sb.uid:
                        pids.append(f"{p.name}:{(p / 'cmdline').read_bytes()!r}")
                except OSError:
                    pass
        return pids
    # in the container only the init process and its `sleep infinity` (both root) may remain
    r = sb.exec('ps -eo user=,pid=,args= | awk \'$1 != "root" && $3 != "ps" && $3 !~ /bash|awk/\'')
    assert r.exit_code == 0, r  # `ps` itself ran (a full pids limit would stop it)
    return [line for line in r.stdout.splitlines() if line.strip()]


def test_cannot_write_outside_the_workspace(make_sandbox, host_unchanged):
    sb = make_sandbox()
    name = f"knowlyr-pwned-{uuid.uuid4().hex[:8]}"
    attacks = [
        f"echo x > /usr/{name}",
        f"echo x > /etc/{name}",
        f"echo x > /{name}",
        f"echo x > /usr/bin/{name}",
        f"cp /bin/true /usr/local/bin/{name}",
        "mount -o remount,rw /usr",
        f"mount -o remount,rw /usr && echo x > /usr/{name}",
        "echo x > /proc/sys/kernel/hostname",
    ]
    for cmd in attacks:
        r = sb.exec(cmd)
        assert r.exit_code != 0, f"{cmd!r} succeeded: {r}"
    for p in (
        f"/usr/{name}",
        f"/etc/{name}",
        f"/{name}",
        f"/usr/bin/{name}",
        f"/usr/local/bin/{name}",
    ):
        assert not os.path.exists(p), f"the sandbox wrote {p} on the host"
    assert sb.exec(f"touch ok-{name}").exit_code == 0  # the workspace itself is writable


def test_cannot_read_host_files_that_are_not_mounted(
    make_sandbox, tmp_path, monkeypatch, host_unchanged
):
    secret = f"SECRET-{uuid.uuid4().hex}"
    files = [tmp_path / "secret.txt"]
    root_secret = Path("/root") / f".knowlyr-test-secret-{uuid.uuid4().hex[:8]}"
    if os.access("/root", os.W_OK):
        files.append(root_secret)
    for f in files:
        f.write_text(secret)
    monkeypatch.setenv("KNOWLYR_TEST_SECRET", secret)  # the host environment does not leak either
    try:
        sb = make_sandbox()
        for f in files:
            r = sb.exec(f"cat {f}")
            assert r.exit_code != 0 and secret not in r.output, r
        r = sb.exec(
            f"env; ls -la /root {tmp_path} 2>&1; grep -rs {secret} /etc /tmp /root 2>/dev/null"
        )
        assert secret not in r.output
        assert "KNOWLYR_TEST_SECRET" not in r.output
        r = sb.exec("cat /etc/shadow")
        assert r.exit_code != 0
    finally:
        root_secret.unlink(missing_ok=True)


def test_cannot_reach_a_listener_on_the_host_loopback(make_sandbox, host_unchanged):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(addr)
            conn.sendall(b"hello from the host\n")
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        # the listener really works from the host
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            assert c.recv(100) == b"hello from the host\n"
        assert len(accepted) == 1
        sb = make_sandbox()
        code = (
            "import socket,sys\n"
            "for host in ('127.0.0.1', 'localhost', '10.0.2.2', '172.17.0.1', '8.8.8.8'):\n"
            "    try:\n"
            f"        s = socket.create_connection((host, {port}), timeout=1); print('CONNECTED', host, s.recv(100))\n"
            "    except OSError as e:\n"
            "        print('refused', host, type(e).__name__)\n"
        )
        r = sb.exec("python3 -", stdin=code, timeout=20)
        assert "CONNECTED" not in r.output, r
        assert r.output.count("refused") == 5, r
        r = sb.exec('python3 -c "import socket; print(socket.if_nameindex())"')
        assert "eth" not in r.stdout and "lo" in r.stdout  # only a loopback of its own
        assert len(accepted) == 1  # nothing from the sandbox reached the host listener
    finally:
        stop.set()
        t.join(timeout=5)
        server.close()


def test_fork_bomb_is_contained(make_sandbox, host_unchanged):
    sb = make_sandbox(max_processes=64)
    start = time.monotonic()
    r = sb.exec("bomb() { bomb | bomb & }; bomb; sleep 1.5", timeout=5)
    assert time.monotonic() - start < 30
    assert "Resource temporarily unavailable" in r.stderr, r  # the process limit was hit
    time.sleep(0.5)
    assert _sandbox_processes(sb) == []
    assert sb.exec("echo still-usable").stdout == "still-usable\n"


def test_a_command_holding_every_pid_past_its_deadline_is_killed(make_sandbox, host_unchanged):
    # no process can start in the sandbox until its deadline: the kill comes from outside
    sb = make_sandbox(max_processes=32)
    sb.write_file("keep.txt", "kept\n")
    r = sb.exec("while :; do sleep 60 & done", timeout=3)
    assert r.timed_out and r.exit_code == 124, r
    assert "Resource temporarily unavailable" in r.stderr, r
    assert _sandbox_processes(sb) == []
    assert sb.exec("cat keep.txt").stdout == "kept\n"  # the files stay


@pytest.mark.parametrize(
    "cmd",
    [
        "python3 -c 'a = bytearray(2 * 1024**3); print(len(a))'",
        "python3 -c 'x = []\nwhile True: x.append(bytearray(10 * 1024**2))'",
    ],
    ids=["one-big-allocation", "gradual"],
)
def test_memory_bomb_is_contained(make_sandbox, host_unchanged, cmd):
    sb = make_sandbox(memory_mb=256)
    r = sb.exec(cmd, timeout=30)
    assert r.exit_code != 0 and not r.timed_out, r
    assert str(2 * 1024**3) not in r.stdout
    assert sb.exec("echo still-usable").stdout == "still-usable\n"


def test_cpu_loop_is_killed_by_the_wall_clock(make_sandbox, host_unchanged):
    sb = make_sandbox()
    start = time.monotonic()
    r = sb.exec("while :; do :; done", timeout=1)
    assert r.timed_out and time.monotonic() - start < 10
    time.sleep(0.3)
    assert _sandbox_processes(sb) == []


def test_cpu_time_rlimit_stops_a_busy_process(make_sandbox, host_unchanged):
    sb = make_sandbox(cpu_time_s=1)
    start = time.monotonic()
    r = sb.exec("python3 -c 'while True: pass'", timeout=20)
    assert not r.timed_out and r.exit_code != 0, r  # SIGXCPU, well before the wall clock
    assert time.monotonic() - start < 15


def test_file_size_rlimit(make_sandbox, host_unchanged):
    sb = make_sandbox(max_file_mb=1)
    r = sb.exec("head -c 5000000 /dev/zero > big.bin; echo rc=$?; stat -c %s big.bin")
    assert "rc=0" not in r.stdout, r
    assert int(r.stdout.split()[-1]) <= 1024 * 1024


def test_setsid_grandchild_dies_with_the_timeout(make_sandbox, host_unchanged):
    sb = make_sandbox()
    cmd = "setsid bash -c 'sleep 1.5; echo escaped > escaped.txt' > /dev/null 2>&1 < /dev/null & sleep 30"
    start = time.monotonic()
    r = sb.exec(cmd, timeout=0.5)
    assert r.timed_out and time.monotonic() - start < 10
    assert _sandbox_processes(sb) == []
    time.sleep(max(0.0, 2.0 - (time.monotonic() - start)))  # past the moment it would have written
    assert sb.exec("test -e escaped.txt").exit_code == 1, "a setsid grandchild outlived the timeout"


def test_setsid_grandchild_holding_the_pipe_does_not_hang(make_sandbox, host_unchanged):
    sb = make_sandbox()
    start = time.monotonic()
    r = sb.exec("setsid sleep 60 & echo parent-done", timeout=20)
    assert time.monotonic() - start < 10, "a grandchild holding stdout kept the command alive"
    assert r.stdout == "parent-done\n" and not r.timed_out


def test_nothing_is_left_on_the_host_after_close(backend, make_sandbox, host_unchanged):
    sb = make_sandbox()
    sb.exec("sleep 1000 > /dev/null 2>&1 &")
    sb.snapshot()
    if isinstance(sb, LocalSandbox):
        root, uid = sb.root, sb.uid
        sb.close()
        assert not root.exists()
        assert _sandbox_processes(sb) == [] and uid
    else:
        client, name = sb._client, sb.name
        sb.close()
        assert client.containers.list(all=True, filters={"label": f"knowlyr.sandbox={name}"}) == []
        assert [t for img in client.images.list() for t in img.tags if name in t] == []
