"""The local sandbox's seccomp filter: what a container's default profile denies fails with
EPERM inside, and ordinary work (threads, subprocesses, git, background jobs) still runs."""

from __future__ import annotations

import pyseccomp
import pytest

from knowlyr.sandbox import SandboxConfig
from knowlyr.sandbox.local import LocalSandbox, local_available
from knowlyr.sandbox.seccomp import filter_bpf

# python3 inside the sandbox: each system call's return value and errno name
_PROBE = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def show(name, rc):
    err = ctypes.get_errno()
    print(name, rc, errno.errorcode.get(err, err) if rc == -1 else "ok")
os.makedirs("/tmp/m", exist_ok=True)
show("mount", libc.mount(b"none", b"/tmp/m", b"tmpfs", 0, None))
show("ptrace", libc.ptrace(0, 0, 0, 0))  # PTRACE_TRACEME
show("keyctl", libc.syscall(NR_KEYCTL, 0, -3, 0))  # KEYCTL_GET_KEYRING_ID, the session keyring
show("unshare", libc.unshare(0x10000000))  # CLONE_NEWUSER
show("bpf", libc.syscall(NR_BPF, 0, 0, 0))
"""
# this machine's numbers for the calls without a C library wrapper
_NR = {n: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, n) for n in ("keyctl", "bpf")}


@pytest.fixture
def sandbox():
    reason = local_available()
    if reason:
        pytest.fail(f"the local backend cannot run: {reason}")
    sb = LocalSandbox(SandboxConfig(timeout_s=20))
    yield sb
    sb.close()


def _probe(sb: LocalSandbox) -> dict[str, str]:
    probe = _PROBE.replace("NR_KEYCTL", str(_NR["keyctl"])).replace("NR_BPF", str(_NR["bpf"]))
    r = sb.exec(f"python3 - <<'EOF'\n{probe}\nEOF")
    assert r.exit_code == 0, r
    return {line.split()[0]: line.split()[2] for line in r.stdout.splitlines()}


def test_seccomp_denies_namespaces_mounts_ptrace_and_the_keyring(sandbox):
    assert _probe(sandbox) == {
        "mount": "EPERM",
        "ptrace": "EPERM",
        "keyctl": "EPERM",
        "unshare": "EPERM",
        "bpf": "EPERM",
    }
    r = sandbox.exec("unshare -U true")
    assert r.exit_code != 0 and "Operation not permitted" in r.stderr
    r = sandbox.exec("unshare -Urm sh -c 'mount -t tmpfs none /tmp && echo mounted'")
    assert r.exit_code != 0 and "mounted" not in r.stdout
    assert "Seccomp:\t2" in sandbox.exec("cat /proc/self/status").stdout


def test_ordinary_commands_still_work_under_the_filter(sandbox):
    cmd = (
        "python3 -c 'import threading, subprocess; t = threading.Thread(target=print, "
        'args=("thread",)); t.start(); t.join(); '
        'print(subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip())\''
        " && (sleep 0.05 & wait) && echo background"
        " && git init -q r && cd r && echo x > f && git add f && git commit -qm m && git log --oneline | wc -l"
    )
    r = sandbox.exec(cmd)
    assert r.exit_code == 0, r
    assert r.stdout.split() == ["thread", "child", "background", "1"]


def test_seccomp_can_be_turned_off_for_tasks_that_need_a_debugger():
    with LocalSandbox(SandboxConfig(seccomp=False)) as sb:
        assert _probe(sb)["ptrace"] == "ok"


def test_the_filter_is_libseccomp_bpf():
    bpf = filter_bpf()
    assert bpf and len(bpf) % 8 == 0  # struct sock_filter instructions
