"""MCP benchmark: per-call latency of ``execute_tool`` over stdio and over streamable HTTP,
beside the same call made directly in Python.

Three ways of running one coding tool in one persistent sandbox, measured in the same run:

* ``direct``: :meth:`knowlyr.sandbox.persistent.SandboxManager.execute` in this process (the
  baseline: what the server itself does per call);
* ``stdio``: ``knowlyr mcp serve`` as a subprocess of the MCP SDK's stdio client;
* ``http``: ``knowlyr mcp serve --transport http`` as a process on a loopback port, through the
  SDK's streamable HTTP client.

Each mode creates its sandbox, warms up, then times ``--calls`` calls of the tool and prints
p50 / p95 / mean, and the overhead of each transport over ``direct`` (p50 difference).

Run:  .venv/bin/python bench/mcp_bench.py --root DIR [--calls 200] [--tool bash|read_file]
(``--root`` is the server's allowed root: any directory; nothing is written there.)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio
from mcp import Client, StdioServerParameters

from knowlyr.sandbox.persistent import SandboxManager

REPO = Path(__file__).resolve().parents[1]
CALLS = {
    "bash": {"command": "echo hello"},
    "read_file": {"path": "hello.txt"},
}
FILES = {"hello.txt": "hello\n" * 20}


def summary(name: str, xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    p = {
        "p50": statistics.median(xs) * 1e3,
        "p95": xs[min(len(xs) - 1, int(0.95 * len(xs)))] * 1e3,
        "mean": statistics.fmean(xs) * 1e3,
    }
    print(
        f"{name:8} p50 {p['p50']:7.2f} ms   p95 {p['p95']:7.2f} ms   mean {p['mean']:7.2f} ms   ({len(xs)} calls)"
    )
    return p


def direct(tool: str, calls: int, warmup: int) -> list[float]:
    with SandboxManager() as mgr:
        sid = mgr.create(files=FILES).id
        for _ in range(warmup):
            mgr.execute(sid, tool, CALLS[tool])
        out = []
        for _ in range(calls):
            t = time.perf_counter()
            r = mgr.execute(sid, tool, CALLS[tool])
            out.append(time.perf_counter() - t)
            assert r.exit_code == 0, r.output
        return out


async def through(target: object, tool: str, calls: int, warmup: int) -> list[float]:
    async with Client(target, read_timeout_seconds=60) as c:  # type: ignore[arg-type]
        r = await c.call_tool("create_sandbox", {"files": FILES})
        assert not r.is_error, r.content
        sid = json.loads(r.content[0].text)["id"]  # type: ignore[union-attr]
        args = {"sandbox_id": sid, "tool": tool, "params": CALLS[tool]}
        for _ in range(warmup):
            await c.call_tool("execute_tool", args)
        out = []
        for _ in range(calls):
            t = time.perf_counter()
            r = await c.call_tool("execute_tool", args)
            out.append(time.perf_counter() - t)
            assert not r.is_error, r.content
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="The server's allowed root (any directory).")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--tool", choices=sorted(CALLS), default="bash")
    args = ap.parse_args()
    sandboxes = Path(tempfile.mkdtemp(prefix="knowlyr-mcp-bench-"))
    sandboxes.chmod(0o711)
    os.environ["KNOWLYR_SANDBOX_ROOT"] = str(sandboxes)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    serve = [sys.executable, "-m", "knowlyr.cli", "mcp", "serve", "--root", args.root]
    print(
        f"execute_tool {args.tool} {CALLS[args.tool]}: {args.calls} calls each after {args.warmup} warm-up"
    )
    res = {"direct": summary("direct", direct(args.tool, args.calls, args.warmup))}
    stdio = StdioServerParameters(command=serve[0], args=serve[1:], env=env, cwd=str(REPO))
    res["stdio"] = summary("stdio", anyio.run(through, stdio, args.tool, args.calls, args.warmup))
    port = free_port()
    proc = subprocess.Popen([*serve, "--transport", "http", "--port", str(port)], env=env, cwd=REPO,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the http server did not start") from None
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        res["http"] = summary("http", anyio.run(through, url, args.tool, args.calls, args.warmup))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        sandboxes.rmdir()
    base = res["direct"]["p50"]
    for mode in ("stdio", "http"):
        print(f"{mode} overhead over direct: p50 +{res[mode]['p50'] - base:.2f} ms "
              f"({res[mode]['p50'] / base:.1f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
