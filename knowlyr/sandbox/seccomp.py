"""The local sandbox's seccomp filter, built with libseccomp (through ``pyseccomp``).

bubblewrap loads the filter (``--seccomp FD``) into the sandbox's first process, after it has
set up the namespaces, so everything the command starts inherits it. Like a container
engine's default profile it allows every system call except those a sandboxed command has no
business making, which fail with ``EPERM``:

* new namespaces: ``unshare``, ``clone`` with a ``CLONE_NEW*`` flag, ``setns`` (a nested
  user namespace would hand the command full capabilities over its own mounts);
  ``clone3``, whose flags a filter cannot read, fails with ``ENOSYS`` so that the C
  library falls back to ``clone`` (what container engines do);
* mounts: ``mount``, ``umount2``, ``pivot_root``, ``chroot`` and the new mount API;
* the kernel keyring: ``keyctl``, ``add_key``, ``request_key``;
* other processes' memory: ``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``,
  ``pidfd_getfd``;
* the kernel itself: modules, ``kexec_*``, ``reboot``, swap, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, ``io_uring_*``, clocks, ``syslog``, ``acct``, quotas, I/O ports, file
  handles, ``vhangup`` and obsolete calls.

System calls of another ABI than the interpreter's (32-bit x86 from an x86-64 host) kill the
thread: the rules are written for the native one.

The filter is built by libseccomp, not written by hand: :func:`filter_bpf` asks it to
export the BPF program. ``pyseccomp`` is a ctypes binding (pure Python) to the system's
``libseccomp.so.2`` (Debian: ``libseccomp2``, present wherever apt is).
"""

from __future__ import annotations

import functools
import os
import tempfile

from knowlyr.errors import BackendUnavailableError

__all__ = ["DENIED", "NAMESPACE_FLAGS", "filter_bpf", "seccomp_available"]

INSTALL_HINT = (
    "the local sandbox's seccomp filter needs libseccomp and its Python binding: "
    "apt-get install -y libseccomp2 && pip install pyseccomp "
    "(or opt out with SandboxConfig(seccomp=False))"
)

# <linux/sched.h>
NAMESPACE_FLAGS = {
    "CLONE_NEWTIME": 0x00000080,  # unshare only: in clone's flags these bits are the exit signal
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}

DENIED: tuple[str, ...] = (
    # namespaces (unshare and clone: only with a CLONE_NEW* flag, see below)
    "setns",
    # mounts
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    # the kernel keyring
    "keyctl",
    "add_key",
    "request_key",
    # other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    # the kernel
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "get_kernel_syms",
    "query_module",
    "reboot",
    "swapon",
    "swapoff",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "stime",
    "syslog",
    "acct",
    "quotactl",
    "quotactl_fd",
    "iopl",
    "ioperm",
    "open_by_handle_at",
    "name_to_handle_at",
    "lookup_dcookie",
    "fanotify_init",
    "vhangup",
    "nfsservctl",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "vm86",
    "vm86old",
)


def _binding():
    """The ``pyseccomp`` module (raises BackendUnavailableError with the fix)."""
    try:
        import pyseccomp
    except (ImportError, OSError, AttributeError, TypeError) as e:  # no module, or no libseccomp
        raise BackendUnavailableError(f"{INSTALL_HINT} ({type(e).__name__}: {e})") from e
    return pyseccomp


@functools.cache
def filter_bpf() -> bytes:
    """The filter as a BPF program (what ``bwrap --seccomp FD`` reads), built once per process.

    Raises:
        BackendUnavailableError: libseccomp or ``pyseccomp`` is missing (the message says how
            to install them).
    """
    sc = _binding()
    eperm = sc.ERRNO(1)
    f = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED:
        nr = sc.resolve_syscall(sc.Arch.NATIVE, name)
        if nr == -1:  # libseccomp does not know it at all
            continue
        try:
            f.add_rule(eperm, nr)
        except OSError:  # not a system call of this architecture
            continue
    for flag in NAMESPACE_FLAGS.values():
        f.add_rule(eperm, "unshare", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        if flag != NAMESPACE_FLAGS["CLONE_NEWTIME"]:
            f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(38), "clone3")  # ENOSYS: the C library falls back to clone
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def seccomp_available() -> str | None:
    """``None`` when the filter can be built here, else the reason and the fix."""
    try:
        filter_bpf()
    except BackendUnavailableError as e:
        return str(e)
    except OSError as e:
        return (
            f"libseccomp could not build the filter ({os.strerror(e.errno or 0)}); {INSTALL_HINT}"
        )
    return None
