"""Sandboxes that outlive a command: one small keeper process per sandbox, reached by id.

``knowlyr sandbox create`` starts a keeper (``python -m knowlyr.sandbox.keeper``): a detached
process that opens one sandbox through a :class:`~knowlyr.sandbox.persistent.SandboxManager`,
answers requests on a Unix socket in a private state directory, and exits, closing the
sandbox, when it is removed (``knowlyr sandbox rm``), sent SIGTERM, or left idle past its
timeout. A keeper killed outright (``kill -9``) cannot close its sandbox: its owner lock is
released by the kernel, so the next sandbox start or ``knowlyr sandbox gc`` reaps the sandbox,
and the next :func:`list_keepers` removes the dead keeper's socket and state file.

The state directory is ``<sandbox root>/knowlyr-sandboxes`` (mode 0700: only its owner can
reach the sockets); the sandbox root is ``$KNOWLYR_SANDBOX_ROOT`` or the system temp dir.

Example:
    >>> info = start_keeper(files={"a.py": "print(1)"})  # doctest: +SKIP
    >>> call(info["id"], "exec", tool="bash", params={"command": "python3 a.py"})["output"]  # doctest: +SKIP
    '1\\n'
    >>> call(info["id"], "close")  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from knowlyr.errors import SandboxError
from knowlyr.sandbox._owner import owner_dead, owner_labels
from knowlyr.sandbox.base import SandboxConfig
from knowlyr.sandbox.persistent import SandboxManager, UnknownSandboxError

__all__ = ["call", "keeper_dir", "list_keepers", "start_keeper"]

_MAX_MESSAGE = 64 * 1024 * 1024
_START_TIMEOUT_S = 60.0


def keeper_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """The private directory holding the keepers' sockets and state files."""
    from knowlyr.sandbox.local import _sandbox_base

    d = _sandbox_base(root) / "knowlyr-sandboxes"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def _dir_lock(d: Path) -> Iterator[None]:
    """Serialises keeper starts (the count limit) and stale-file cleanup in ``d``."""
    fd = os.open(d / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_state(d: Path, sandbox_id: str) -> None:
    # the socket first: from then on a new request is refused instead of left unanswered
    for suffix in (".sock", ".json", ".log"):
        with contextlib.suppress(FileNotFoundError):
            (d / f"{sandbox_id}{suffix}").unlink()


def _live_states(d: Path) -> list[dict[str, Any]]:
    """State of every keeper in ``d`` whose process is alive; dead keepers' files are removed."""
    out = []
    for f in sorted(d.glob("*.json")):
        try:
            state = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if owner_dead(state.get("owner")):
            _remove_state(d, state.get("id") or f.stem)
            continue
        out.append(state)
    return out


def start_keeper(
    config: SandboxConfig | None = None,
    *,
    files: Mapping[str, str] | None = None,
    idle_timeout_s: float = 3600.0,
    max_sandboxes: int = 8,
    root: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Start a keeper process with a new sandbox; returns its state (``id``, ``pid``, ...).

    Raises:
        SandboxError: ``max_sandboxes`` keepers are running already, or the sandbox could
            not be made (the keeper's own error message).
    """
    d = keeper_dir(root)
    with _dir_lock(d):
        live = _live_states(d)
        if len(live) >= max_sandboxes:
            raise SandboxError(
                f"{len(live)} sandboxes are open, the limit is {max_sandboxes}: remove one with "
                "`knowlyr sandbox rm ID` (list them with `knowlyr sandbox ls`) or pass a higher "
                "--max-sandboxes"
            )
        env = dict(os.environ)
        if root is not None:
            env["KNOWLYR_SANDBOX_ROOT"] = os.fspath(root)
        proc = subprocess.Popen(
            [sys.executable, "-m", "knowlyr.sandbox.keeper", "--dir", str(d),
             "--idle-timeout", str(idle_timeout_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not killed with the shell that ran `knowlyr sandbox create`
            env=env,
        )  # fmt: skip
        request = {"config": (config or SandboxConfig()).model_dump(), "files": dict(files or {})}
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at once: its exit code says so below
        line = _read_line(proc.stdout.fileno(), _START_TIMEOUT_S)
        proc.stdout.close()
    if line is None:
        proc.kill()
        raise SandboxError(f"the sandbox keeper did not start within {_START_TIMEOUT_S:g}s")
    try:
        reply = json.loads(line) if line.strip() else {}
    except ValueError:
        reply = {}
    if "error" in reply or "id" not in reply:
        raise SandboxError(
            reply.get("error") or f"the sandbox keeper exited with {proc.returncode}"
        )
    return reply


def _read_line(fd: int, timeout: float) -> str | None:
    """One line from ``fd`` ('' at EOF), or None after ``timeout`` seconds. Only the line: the
    keeper's sandbox processes may hold the pipe open after it (they were forked from it)."""
    import selectors
    import time

    buf = bytearray()
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
    return buf.split(b"\n", 1)[0].decode(errors="replace")


def list_keepers(root: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The open sandboxes: each keeper's state with its sandbox's live info (idle time, busy)."""
    d = keeper_dir(root)
    with _dir_lock(d):
        states = _live_states(d)
    out = []
    for s in states:
        try:
            out.append({**s, **call(s["id"], "info", root=root)})
        except UnknownSandboxError:
            continue
    return out


def call(
    sandbox_id: str, op: str, *, root: str | os.PathLike[str] | None = None, **args: Any
) -> Any:
    """Send ``op`` (``info``, ``exec``, ``reset``, ``snapshot``, ``replay``, ``close``) to the
    keeper of ``sandbox_id``; returns its result.

    Raises:
        UnknownSandboxError: no keeper with that id is running.
        SandboxError: the keeper refused the request (its message).
    """
    d = keeper_dir(root)
    if not sandbox_id or "/" in sandbox_id or sandbox_id.startswith("."):
        raise UnknownSandboxError(
            f"{sandbox_id!r} is not a sandbox id; list them with `knowlyr sandbox ls`"
        )
    path = d / f"{sandbox_id}.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            s.connect(os.fspath(path))
        except OSError:
            with _dir_lock(d):
                _live_states(d)  # a dead keeper's files go now
            raise UnknownSandboxError(
                f"no open sandbox {sandbox_id!r} (never created, removed, closed after its idle "
                "timeout, or its keeper died); list them with `knowlyr sandbox ls`"
            ) from None
        data = bytearray()
        lost: OSError | None = None
        try:
            s.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
            s.shutdown(socket.SHUT_WR)
            while chunk := s.recv(1 << 16):
                data += chunk
        except OSError as e:  # reset or broken pipe: the keeper went away mid-request
            lost = e
    finally:
        s.close()
    if lost is not None or not data:  # no answer, whether the keeper reset or just closed
        if not path.exists():  # it was closing (`rm`, its idle timeout)
            raise UnknownSandboxError(
                f"no open sandbox {sandbox_id!r}: it closed while the request was sent; "
                "list them with `knowlyr sandbox ls`"
            )
        why = f": {lost}" if lost is not None else ""
        raise SandboxError(
            f"the keeper of {sandbox_id} closed the connection without answering{why}"
        )
    reply = json.loads(data)
    if reply.get("ok"):
        return reply.get("result")
    cls = UnknownSandboxError if reply.get("type") == "UnknownSandboxError" else SandboxError
    raise cls(reply.get("error", "unknown error"))


# -- the keeper process ------------------------------------------------------------------


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        raw = self.rfile.readline(_MAX_MESSAGE)
        try:
            result = self.server.dispatch(json.loads(raw))
            reply = {"ok": True, "result": result}
        except Exception as e:  # every error goes back to the caller; the keeper keeps serving
            reply = {"ok": False, "error": str(e) or type(e).__name__, "type": type(e).__name__}
        self.wfile.write(json.dumps(reply).encode())


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = False  # server_close() waits for the handlers: a reply is never cut off
    block_on_close = True

    def __init__(self, path: Path, manager: SandboxManager, sandbox_id: str):
        self.manager = manager
        self.sandbox_id = sandbox_id
        self.dir = path.parent
        self.stop = threading.Event()
        super().__init__(os.fspath(path), _Handler)

    def dispatch(self, req: dict[str, Any]) -> Any:
        from knowlyr.trajectory import Trajectory

        op, sid, mgr = req.get("op"), self.sandbox_id, self.manager
        if op == "info":
            return mgr.info(sid).to_dict()
        if op == "exec":
            return mgr.execute(sid, req["tool"], req.get("params") or {}).to_dict()
        if op == "reset":
            return mgr.reset(sid, req.get("snapshot"))
        if op == "snapshot":
            return mgr.snapshot(sid)
        if op == "replay":
            traj = Trajectory.model_validate(req["trajectory"])
            return mgr.replay(sid, traj, reset=req.get("reset", True)).to_dict()
        if op == "close":
            mgr.remove(sid)
            self.stop.set()
            _remove_state(self.dir, sid)  # before the reply: the caller's next request is refused
            return None
        raise SandboxError(f"unknown keeper request {op!r}")


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Keep one sandbox open and serve it on a socket.")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--idle-timeout", type=float, default=3600.0)
    args = ap.parse_args(argv)
    d = Path(args.dir)
    req = json.loads(sys.stdin.buffer.read() or b"{}")
    # One line of reply on the original stdout; 0-2 are /dev/null for everything else.
    reply = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    mgr = SandboxManager(max_sandboxes=1, idle_timeout_s=args.idle_timeout)
    try:
        info = mgr.create(SandboxConfig(**req.get("config", {})), files=req.get("files") or {})
    except Exception as e:
        reply.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        reply.close()
        mgr.close_all()
        return 1
    sid = info.id
    sock = d / f"{sid}.sock"
    server = _Server(sock, mgr, sid)
    signal.signal(signal.SIGTERM, lambda *_: server.stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the creating shell is not for us
    server.timeout = 0.25
    os.chmod(sock, 0o600)
    state = {
        "id": sid,
        "pid": os.getpid(),
        "owner": owner_labels(),
        "backend": info.backend,
        "created_at": info.created_at,
        "idle_timeout_s": args.idle_timeout,
        "socket": os.fspath(sock),
    }
    tmp = d / f".{sid}.json"
    tmp.write_text(json.dumps(state))
    tmp.rename(d / f"{sid}.json")
    reply.write(json.dumps(state) + "\n")
    reply.close()
    try:
        while not server.stop.is_set() and len(mgr):
            server.handle_request()
    finally:
        _remove_state(d, sid)
        mgr.close_all()  # first: a command still running in it ends now
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
