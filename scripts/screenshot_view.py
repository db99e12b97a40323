"""Screenshot ``knowlyr view``'s list, trajectory and pair pages with headless Chromium.

Builds the tests' demo store (real SWE-agent / OpenHands logs from ``tests/data/fixtures``
plus three scored attempts at one coding task, see ``tests/view/demo_store.py``) in a
temporary folder, or uses ``--store``, serves it on a free loopback port and writes::

    docs/view-list.png  docs/view-trajectory.png  docs/view-pair.png
    docs/view-mini-swe-agent.png  (a real 27-step mini-swe-agent run: totals and outline)

Run:  python scripts/screenshot_view.py [--store PATH] [--out docs]
Needs the Debian package ``chromium`` (``scripts/setup-system.sh --screenshots``).
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from screenshot_ui import screenshot  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    from knowlyr.view import create_app

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", help="an existing store (default: build the demo store)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the PNGs")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="knowlyr-view-shots-") as tmp:
        if args.store:
            store_url, pages = args.store, {"view-list.png": "/"}
        else:
            from tests.view.demo_store import CALC_TASK, build_demo_store

            demo = build_demo_store(Path(tmp) / "store", ROOT / "tests" / "data" / "fixtures")
            store_url = demo.store.url
            pages = {
                "view-list.png": "/?sort=-reward",
                "view-trajectory.png": f"/t/{demo.fixed.id}",
                "view-pair.png": f"/compare/{demo.fixed.id}/{demo.rewrite.id}",
                "view-mini-swe-agent.png": f"/t/{demo.mini_swe_agent['django__django-15277'].id}",
            }
            print(f"demo store with task {CALC_TASK} at {store_url}", file=sys.stderr)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = uvicorn.Config(
            create_app(store_url), host="127.0.0.1", port=port, log_level="warning"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        try:
            sizes = {
                "view-trajectory.png": (1400, 3450),
                "view-pair.png": (1600, 1500),
                "view-mini-swe-agent.png": (1400, 2000),
            }
            for name, path in pages.items():
                width, height = sizes.get(name, (1500, 900))
                out = screenshot(
                    f"http://127.0.0.1:{port}{path}",
                    args.out / name,
                    width=width,
                    height=height,
                    wait_ms=2000,
                )
                print(out)
        finally:
            server.should_exit = True
            thread.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
