"""The viewer's first pages are rendered by several server threads at once: highlighting must not
depend on who imports Pygments first (its lazy ``pygments.formatters`` module raced: HTTP 500
"cannot import name 'HtmlFormatter'")."""

import subprocess
import sys

RACE = """
import threading
from knowlyr.view import render
errors, start = [], threading.Barrier(16)
def page():
    start.wait()
    try:
        assert "hl" in render._code_css() and "<span" in str(render.source_html("ls -la", "bash"))
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=page) for _ in range(16)]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors)
"""


def test_highlighting_from_many_threads_at_first_import():
    # a fresh interpreter each time, so Pygments is imported by the racing threads; with the lazy
    # import a quarter of such runs failed here
    for _ in range(8):
        out = subprocess.run(
            [sys.executable, "-c", RACE], capture_output=True, text=True, timeout=120, check=True
        )
        assert out.stdout.strip() == "[]", out.stdout + out.stderr
