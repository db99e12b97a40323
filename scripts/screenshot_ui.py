"""Screenshot a completed flow run in the Prefect UI with headless Chromium: its page (logs),
its Artifacts tab and its iteration report.

Two ways to use it:

* against a running server (``make server``) that already has a completed run::

      python scripts/screenshot_ui.py --ui-url http://127.0.0.1:4200 --out docs/iterate-flow-run.png \\
          --artifacts-out docs/iterate-artifacts.png --report-out docs/iteration-report.png

  (the newest *completed* run of ``--flow``, or ``--flow-run-id ID``);
* self-contained: ``--start-server`` starts a throwaway server, deploys ``prefect.yaml``,
  runs the ``iterate/nightly`` deployment (``--deployment iterate/smoke`` for a quick one)
  on a process worker into a temporary store, and shoots that run::

      python scripts/screenshot_ui.py --start-server --out docs/iterate-flow-run.png \\
          --artifacts-out docs/iterate-artifacts.png --report-out docs/iteration-report.png

Needs the Debian package ``chromium`` (``apt-get install chromium``). The UI renders offline.
Look at every PNG before committing it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deployments.server import local_server, prefect_bin  # noqa: E402

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--hide-scrollbars",
]


def _post(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def latest_completed_run(api_url: str, flow_name: str) -> str:
    """The id of the newest completed run of ``flow_name`` (never a scheduled future one)."""
    runs = _post(
        f"{api_url}/flow_runs/filter",
        {
            "flows": {"name": {"any_": [flow_name]}},
            "flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}},
            "sort": "END_TIME_DESC",
            "limit": 1,
        },
    )
    if not runs:
        raise SystemExit(
            f"no completed run of flow {flow_name!r} on {api_url}: run it first or pass --flow-run-id"
        )
    return runs[0]["id"]


def report_artifact(api_url: str, flow_run_id: str, key: str = "iteration-report") -> str:
    """The id of the ``key`` artifact the flow run published."""
    arts = _post(
        f"{api_url}/artifacts/filter",
        {"artifacts": {"key": {"any_": [key]}, "flow_run_id": {"any_": [flow_run_id]}}, "limit": 1},
    )
    if not arts:
        raise SystemExit(f"flow run {flow_run_id} has no {key!r} artifact")
    return arts[0]["id"]


def screenshot(
    url: str, out: Path, *, width: int = 1600, height: int = 1100, wait_ms: int = 20000
) -> Path:
    """Load ``url`` in headless Chromium and save a PNG screenshot to ``out``."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed: apt-get install chromium")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="knowlyr-chromium-") as profile:
        cmd = [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--virtual-time-budget={wait_ms}",
            f"--screenshot={out.resolve()}",
            url,
        ]
        subprocess.run(cmd, check=True, capture_output=True, timeout=180)
    if not out.exists():
        raise SystemExit(f"chromium wrote no screenshot for {url}")
    return out


def screenshot_tab(url: str, tab: str, out: Path, *, width: int = 1600, height: int = 1100) -> Path:
    """Load ``url``, click the page tab labelled ``tab`` (the UI resets a ``?tab=`` link while
    the run loads) and save a PNG of the viewport; through knowlyr's DevTools client."""
    from knowlyr.browser.chromium import Chromium

    with Chromium(window=(width, height)) as browser:
        browser.allow(url)
        page = browser.new_tab()
        page.navigate(url, timeout=60)
        click = (
            "(() => { const el = [...document.querySelectorAll('*')].find(e =>"
            f" e.children.length === 0 && e.textContent.trim() === {json.dumps(tab)});"
            " if (!el) return false;"
            " (el.closest('button, a, [role=tab], li') || el).click(); return true; })()"
        )
        deadline = time.monotonic() + 30
        while not page.evaluate(click):
            if time.monotonic() > deadline:
                raise SystemExit(f"no {tab!r} tab on {url}")
            time.sleep(0.5)
        time.sleep(5)  # the tab's content loads from the API
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(page.screenshot())
    return out


def run_deployment_on_a_worker(server, deployment: str, store: Path, timeout: float) -> str:
    """Deploy ``prefect.yaml``, run ``deployment`` into ``store`` on a process worker until it
    completes; returns its flow run id."""
    server.run("work-pool", "create", "knowlyr-process", "--type", "process")
    server.run("--no-prompt", "deploy", "--all", timeout=300)
    params = json.dumps({"seed": None, "store_url": str(store)})
    out = server.run("deployment", "run", deployment, "-p", f"params={params}")
    run_id = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)
    worker = subprocess.Popen(
        [prefect_bin(), "worker", "start", "--pool", "knowlyr-process"],
        env=dict(server.env, PREFECT_WORKER_QUERY_SECONDS="2"),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            with urllib.request.urlopen(f"{server.api_url}/flow_runs/{run_id}", timeout=10) as r:
                state = json.load(r)["state"]
            if state and state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{deployment} run {run_id} still {state} after {timeout:.0f} s")
            time.sleep(3)
    finally:
        _stop(worker)
    if state["type"] != "COMPLETED":
        raise SystemExit(f"{deployment} run {run_id} ended {state['name']}: {state['message']}")
    return run_id


def _stop(worker: subprocess.Popen) -> None:
    """Stop the worker's process group: SIGTERM, then SIGKILL if it has not exited within 30
    s (a busy machine can take longer to shut its runner down; the run is over by then and
    must not be lost to a timeout here)."""
    os.killpg(worker.pid, signal.SIGTERM)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)


def shoot(ui_url: str, api_url: str, run_id: str, args: argparse.Namespace) -> None:
    run_url = f"{ui_url}/runs/flow-run/{run_id}"
    screenshot(run_url, args.out, width=args.width, height=args.height)
    print(f"{run_url} -> {args.out}")
    if args.artifacts_out:
        screenshot_tab(
            run_url, "Artifacts", args.artifacts_out, width=args.width, height=args.height
        )
        print(f"{run_url} (Artifacts tab) -> {args.artifacts_out}")
    if args.report_out:
        art = f"{ui_url}/artifacts/artifact/{report_artifact(api_url, run_id)}"
        screenshot(art, args.report_out, width=args.width, height=2600)
        print(f"{art} -> {args.report_out}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ui-url", default="http://127.0.0.1:4200", help="UI of a running server")
    ap.add_argument("--flow-run-id", help="the run to show (default: newest completed of --flow)")
    ap.add_argument("--flow", default="iterate", help="flow whose newest completed run is shown")
    ap.add_argument(
        "--start-server", action="store_true", help="start a server, run a deployment, shoot"
    )
    ap.add_argument("--deployment", default="iterate/nightly", help="with --start-server")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds the run may take")
    ap.add_argument(
        "--home",
        type=Path,
        help="with --start-server: the server's PREFECT_HOME and the run's store (kept, so a "
        "later --start-server --home DIR --flow-run-id ID shoots the same run again)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "iterate-flow-run.png")
    ap.add_argument("--artifacts-out", type=Path, help="also shoot the run's Artifacts tab")
    ap.add_argument("--report-out", type=Path, help="also shoot its iteration-report artifact")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1100)
    args = ap.parse_args(argv)

    if args.start_server:
        with tempfile.TemporaryDirectory(prefix="knowlyr-ui-") as tmp:
            home = args.home or Path(tmp)
            with local_server(home / "prefect") as server:
                run_id = args.flow_run_id or run_deployment_on_a_worker(
                    server, args.deployment, home / "store", args.timeout
                )
                shoot(server.ui_url, server.api_url, run_id, args)
    else:
        api = f"{args.ui_url}/api"
        shoot(args.ui_url, api, args.flow_run_id or latest_completed_run(api, args.flow), args)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    raise SystemExit(main())
