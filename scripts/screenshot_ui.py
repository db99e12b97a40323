"""Screenshot a flow run page of the Prefect UI with headless Chromium.

Two ways to use it:

* against a running server (``make server``) and a flow run it already has::

      python scripts/screenshot_ui.py --ui-url http://127.0.0.1:4200 --out docs/flow-run.png

  (the newest ``iterate`` run, or ``--flow-run-id ID``);
* self-contained: ``--start-server`` starts a throwaway server on a free port, runs
  ``iterate`` with small parameters against it, and screenshots that run::

      python scripts/screenshot_ui.py --start-server --out docs/iterate-flow-run.png

Needs the Debian package ``chromium`` (``apt-get install chromium``). The UI renders offline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deployments.server import local_server  # noqa: E402

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--hide-scrollbars",
]


def latest_flow_run(api_url: str, flow_name: str) -> str:
    """The id of the newest run of ``flow_name`` on the server at ``api_url``."""
    body = json.dumps(
        {"flows": {"name": {"any_": [flow_name]}}, "sort": "START_TIME_DESC", "limit": 1}
    ).encode()
    req = urllib.request.Request(
        f"{api_url}/flow_runs/filter", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        runs = json.load(r)
    if not runs:
        raise SystemExit(
            f"no run of flow {flow_name!r} on {api_url}: run it first or pass --flow-run-id"
        )
    return runs[0]["id"]


def report_artifact(api_url: str, flow_run_id: str, key: str = "iteration-report") -> str:
    """The id of the ``key`` artifact the flow run published."""
    body = json.dumps(
        {"artifacts": {"key": {"any_": [key]}, "flow_run_id": {"any_": [flow_run_id]}}, "limit": 1}
    ).encode()
    req = urllib.request.Request(
        f"{api_url}/artifacts/filter", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        arts = json.load(r)
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
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    if not out.exists():
        raise SystemExit(f"chromium wrote no screenshot for {url}")
    return out


def run_small_iteration(env: dict[str, str], store: Path) -> str:
    """Run ``iterate`` with small parameters against the server in ``env``; its flow run id."""
    code = (
        "import json, sys; from flows.iterate import iterate, IterateParams;"
        "p = IterateParams.small(store_url=sys.argv[1]);"
        "s = iterate(p, return_state=True); print(json.dumps(str(s.state_details.flow_run_id)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(store)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"iterate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ui-url", default="http://127.0.0.1:4200", help="UI of a running server")
    ap.add_argument("--flow-run-id", help="the run to show (default: the newest run of --flow)")
    ap.add_argument("--flow", default="iterate", help="flow whose newest run is shown")
    ap.add_argument(
        "--start-server", action="store_true", help="start a server, run iterate, shoot"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "iterate-flow-run.png")
    ap.add_argument(
        "--report-out", type=Path, help="also shoot the run's iteration-report artifact"
    )
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1100)
    args = ap.parse_args(argv)

    if args.start_server:
        with (
            tempfile.TemporaryDirectory(prefix="knowlyr-ui-") as tmp,
            local_server(Path(tmp) / "prefect") as server,
        ):
            env = dict(server.env, PREFECT_LOGGING_LEVEL="WARNING")
            run_id = args.flow_run_id or run_small_iteration(env, Path(tmp) / "store")
            url = f"{server.ui_url}/runs/flow-run/{run_id}"
            screenshot(url, args.out, width=args.width, height=args.height)
            if args.report_out:
                art = report_artifact(server.api_url, run_id)
                screenshot(f"{server.ui_url}/artifacts/artifact/{art}", args.report_out,
                           width=args.width, height=2400)  # fmt: skip
                print(f"report -> {args.report_out}")
    else:
        run_id = args.flow_run_id or latest_flow_run(f"{args.ui_url}/api", args.flow)
        url = f"{args.ui_url}/runs/flow-run/{run_id}"
        screenshot(url, args.out, width=args.width, height=args.height)
    print(f"{url} -> {args.out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    raise SystemExit(main())
