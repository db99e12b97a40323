"""Bad calls get MCP tool errors that say what was wrong, and the server keeps serving; nothing
outside the allowed roots is reachable; eight clients at once keep to their own sandboxes;
run_pipeline uses a deployment when the Prefect server has one."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.mcp.conftest import (
    REPO,
    Session,
    free_port,
    sandbox_root,
    serve_args,
    server_env,
    wait_listening,
)


def still_serving(session: Session) -> None:
    sid = session.ok("create_sandbox", {})["id"]
    out = session.ok(
        "execute_tool", {"sandbox_id": sid, "tool": "bash", "params": {"command": "echo alive"}}
    )
    assert out["output"] == "alive\n"


def test_unknown_sandbox_id(session: Session):
    for tool, extra in [("execute_tool", {"tool": "bash", "params": {"command": "ls"}}),
                        ("reset_sandbox", {}), ("sandbox_snapshot", {}),
                        ("replay_trajectory", {"trajectory": {"task": {"task_id": "t"}}})]:  # fmt: skip
        msg = session.error(tool, {"sandbox_id": "sb-000000000000", **extra})
        assert "no open sandbox 'sb-000000000000'" in msg and "create_sandbox" in msg
    sid = session.ok("create_sandbox", {})["id"]
    msg = session.error("reset_sandbox", {"sandbox_id": sid, "snapshot_id": "snap-99"})
    assert "has no snapshot 'snap-99'" in msg
    still_serving(session)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("validate_logs", {"paths": ["/etc/passwd"]}),
        ("validate_logs", {"paths": ["../outside/secret.jsonl"]}),
        ("validate_logs", {"paths": ["escape/secret.jsonl"]}),  # a symlink inside leading out
        ("convert_logs", {"paths": ["logs/swe_agent"], "output": "escape/stolen.jsonl"}),
        ("recorder_diff", {"a": "logs/swe_agent/pydicom__pydicom-1458.traj", "b": "/etc/hostname"}),
        (
            "score_trajectory",
            {"paths": ["logs/swe_agent"], "output": "OUTSIDE/rewards.json"},  # absolute
        ),
        ("score_trajectory", {"paths": ["logs/swe_agent"], "domain": "escape/profile.json"}),
        ("score_trajectory", {"paths": ["logs/swe_agent"], "judge": "hf:/usr/share"}),
        ("build_preferences", {"rewards": "escape/secret.jsonl"}),
        ("reward_leaderboard", {"rewards": "/etc/passwd"}),
        ("calibrate_reward", {"rewards": "/etc/passwd", "annotations": "/etc/passwd"}),
        ("export_dataset", {"paths": ["logs/swe_agent"], "output": "../outside/ds"}),
        (
            "process_log",
            {"path": "logs/swe_agent/pydicom__pydicom-1458.traj", "store": "s3://bucket/store"},
        ),
        ("process_logs_batch", {"paths": ["logs"], "store": "escape/store"}),
        ("run_pipeline", {"logs": ["/etc"]}),
        ("replay_trajectory", {"sandbox_id": "sb-000000000000", "path": "escape/secret.jsonl"}),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_paths_outside_the_roots_are_refused(session: Session, root: Path, tool: str, args: dict):
    outside = root.parent / "outside"
    if tool == "replay_trajectory":  # needs a real sandbox, so the path is what fails
        args = {**args, "sandbox_id": session.ok("create_sandbox", {})["id"]}
    if args.get("output", "").startswith("OUTSIDE/"):  # an absolute path outside the roots
        args = {**args, "output": str(outside / args["output"].removeprefix("OUTSIDE/"))}
    msg = session.error(tool, args)
    assert "outside the allowed roots" in msg or "not a local directory" in msg, msg
    assert sorted(p.name for p in outside.iterdir()) == ["secret.jsonl"]  # nothing written there


def test_malformed_trajectories(session: Session, root: Path):
    msg = session.error("score_trajectory", {"trajectory": "{not json"})
    assert "`trajectory` is not a Trajectory" in msg
    msg = session.error(
        "score_trajectory", {"trajectory": {"task": {"task_id": 5}, "steps": "many"}}
    )
    assert "not a Trajectory" in msg and "task.task_id" in msg
    sid = session.ok("create_sandbox", {})["id"]
    msg = session.error("replay_trajectory", {"sandbox_id": sid, "trajectory": '{"steps": []'})
    assert "not a Trajectory" in msg
    (root / "broken.jsonl").write_text('{"task": {"task_id": "x"}, "steps": [\n')
    msg = session.error("replay_trajectory", {"sandbox_id": sid, "path": "broken.jsonl"})
    assert "no record 0" in msg and "broken.jsonl" in msg
    msg = session.error("score_trajectory", {"paths": ["broken.jsonl"]})
    assert "nothing to score" in msg
    # arguments the input model refuses name the field
    msg = session.error("execute_tool", {"sandbox_id": sid, "tool": "rm -rf", "params": {}})
    assert "tool" in msg and "bash" in msg
    msg = session.error("replay_trajectory", {"sandbox_id": sid})
    assert "exactly one of `trajectory`" in msg
    still_serving(session)


def test_a_10_mb_argument_is_a_tool_error(session: Session):
    sid = session.ok("create_sandbox", {})["id"]
    big = "x" * (10 * 1024 * 1024)
    msg = session.error("execute_tool", {"sandbox_id": sid, "tool": "write_file",
                                         "params": {"path": "big.txt", "content": big}})  # fmt: skip
    assert "more than this server's limit of 5,242,880" in msg
    msg = session.error("score_trajectory", {"trajectory": big})
    assert "limit" in msg
    ls = session.ok(
        "execute_tool", {"sandbox_id": sid, "tool": "bash", "params": {"command": "ls"}}
    )
    assert ls["output"] == ""  # nothing was written
    still_serving(session)


def test_eight_clients_at_once_keep_to_their_own_sandboxes(session: Session):
    if session.transport != "http":
        pytest.skip("eight separate client sessions of one server: the HTTP transport")
    url = session.url
    assert url is not None
    seen: dict[int, dict] = {}

    async def one(n: int) -> None:
        async with Client(url, read_timeout_seconds=120) as c:

            async def ok(tool: str, args: dict) -> dict:
                r = await c.call_tool(tool, args)
                assert not r.is_error, r.content[0].text
                return json.loads(r.content[0].text)

            sid = (await ok("create_sandbox", {"files": {"me.txt": f"client {n}\n"}}))["id"]
            for i in range(3):  # interleaved with the other clients' calls
                await ok("execute_tool", {"sandbox_id": sid, "tool": "bash",
                                          "params": {"command": f"echo {n}-{i} >> log.txt"}})  # fmt: skip
            snap = (await ok("sandbox_snapshot", {"sandbox_id": sid}))["snapshot_id"]
            await ok(
                "execute_tool",
                {"sandbox_id": sid, "tool": "bash", "params": {"command": "rm log.txt"}},
            )
            await ok("reset_sandbox", {"sandbox_id": sid, "snapshot_id": snap})
            out = await ok("execute_tool", {"sandbox_id": sid, "tool": "bash",
                                            "params": {"command": "cat me.txt log.txt; ls"}})  # fmt: skip
            seen[n] = {"id": sid, "output": out["output"]}

    async def all_of_them() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(one, n)

    session.portal.call(all_of_them)
    assert len({v["id"] for v in seen.values()}) == 8
    for n, v in seen.items():
        assert v["output"] == f"client {n}\n{n}-0\n{n}-1\n{n}-2\nlog.txt\nme.txt\n"
    still_serving(session)


def test_run_pipeline_starts_a_deployment_when_the_server_has_one(
    session: Session, prefect_api: str
):
    from prefect.client.orchestration import get_client

    from flows.reward import reward

    with get_client(sync_client=True) as client:
        name = "reward/ad-hoc"
        try:
            client.read_deployment_by_name(name)
        except Exception:
            flow_id = client.create_flow(reward)
            client.create_deployment(
                flow_id=flow_id, name="ad-hoc", entrypoint="flows/reward.py:reward"
            )
    run = session.ok("run_pipeline", {"pipeline": "reward"})
    assert (run["how"], run["deployment"]) == ("deployment", "reward/ad-hoc")
    status = session.ok("pipeline_status", {"flow_run_id": run["flow_run_id"]})["flow_run"]
    assert status["state"] == "SCHEDULED" and status["deployment_id"]  # waits for a worker
    msg = session.error("pipeline_status", {"flow_run_id": "00000000-0000-0000-0000-000000000000"})
    assert "Prefect has no flow run" in msg
    assert "not a flow run id" in session.error("pipeline_status", {"flow_run_id": "nope"})


def test_count_limit_and_sandboxes_of_a_killed_server_reaped_at_the_next_start(
    root: Path, prefect_api: str, tmp_path: Path
):
    sandboxes = sandbox_root()
    env = server_env(prefect_api, tmp_path, sandboxes)

    def start() -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        log = tmp_path / f"server-{port}.log"
        args = serve_args(root, "--transport", "http", "--port", str(port), "--max-sandboxes", "1")
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, *args],
                                    env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        wait_listening(proc, port, log)
        return proc, f"http://127.0.0.1:{port}/mcp"

    async def create(url: str) -> str:
        async with Client(url) as c:
            r = await c.call_tool("create_sandbox", {})
            assert not r.is_error
            over = await c.call_tool("create_sandbox", {})  # --max-sandboxes 1
            assert over.is_error and "the limit is 1" in over.content[0].text
            return json.loads(r.content[0].text)["id"]

    proc, url = start()
    try:
        anyio.run(create, url)
        assert len(list(sandboxes.glob("knowlyr-sb-*"))) == 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(list(sandboxes.glob("knowlyr-sb-*"))) == 1  # killed: it could not close it
    proc, url = start()  # the next start reaps it
    try:
        assert list(sandboxes.glob("knowlyr-sb-*")) == []
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(sandboxes, ignore_errors=True)
