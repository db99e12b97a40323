"""The browser env against the real Chromium and the real local sites: every tool, resets,
the network guard, a killed browser and a page that never finishes loading."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import knowlyr
from knowlyr.agents import ExpertAgent
from knowlyr.browser.expert import find_element
from knowlyr.browser.server import Response, Site, register_site
from knowlyr.core import RecorderWrapper
from knowlyr.store import Store
from knowlyr.taskset import Task, get_suite


def _id(obs: str, role: str, name: str) -> int:
    """The element's id on the page an observation shows (not in its "Clicked [i]" echo)."""
    found = find_element(obs[obs.find("Page: ") :], role, name)
    assert found is not None, f'no {role} "{name}" in:\n{obs}'
    return found


def _step(env, tool: str, **params):
    return env.step({"tool": tool, "params": params})


def _solve(env, task_id: str):
    ts = env.reset(task=task_id)
    agent = ExpertAgent()
    agent.reset(ts.info)
    while not ts.done:
        ts = env.step(agent.act(ts.observation, ts.info))
    return ts


def test_every_tool_on_the_shop(browser_env, browser_store):
    env = RecorderWrapper(browser_env)
    ts = env.reset(task="browser-shop_buy-0003")
    assert ts.observation.startswith("In the shop, buy")
    assert "Page: Home - Acme Home Shop (/)" in ts.observation  # paths, never the port

    page = _step(env, "read_page").observation
    assert page.startswith("Page: Home") and '[4] textbox "Search products"' in page

    ts = _step(env, "type_text", element_id=_id(page, "textbox", "Search products"), text="lamp")
    assert ts.observation == "Typed 'lamp' into [4] textbox \"Search products\"."
    ts = _step(env, "click", element_id=_id(page, "button", "Search"))
    assert "(/search?q=lamp)" in ts.observation and "products found" in ts.observation
    lamp = re.search(r'\[(\d+)\] link "([^"]+ Lamp)"', ts.observation)
    ts = _step(env, "click", element_id=int(lamp.group(1)))
    assert f"# {lamp.group(2)}" in ts.observation and "Add to cart" in ts.observation

    ts = _step(env, "scroll", direction="down", amount=200)
    assert ts.observation.startswith("Scrolled down: showing 0-800 of 800 px")  # a short page

    ts = _step(env, "screenshot")
    digest = re.search(r"blob sha256:([0-9a-f]{64})", ts.observation).group(1)
    png = Store.open(browser_store).get_blob(digest)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and ts.info["exit_code"] == 0

    ts = _step(env, "navigate", url="/cart")
    assert "Your cart is empty." in ts.observation
    ts = _step(env, "click", element_id=999)
    assert ts.info["exit_code"] == 1 and "no such element" in ts.observation
    ts = _step(env, "navigate", url="file:///etc/passwd")
    assert ts.info["exit_code"] == 2 and "only http(s)" in ts.observation

    ts = _step(env, "submit")
    assert ts.terminated and ts.info["outcome"]["success"] is False  # no order was placed
    traj = env.trajectory
    assert [s.tool for s in traj.steps].count("screenshot") == 1
    shot = next(s for s in traj.steps if s.tool == "screenshot")
    assert shot.metadata == {"screenshot": digest}  # the step refers to the PNG blob


@pytest.mark.parametrize(
    "task_id",
    ["browser-shop_buy-0001", "browser-docs_feedback-0001", "browser-admin_delete-0004"],
)
def test_a_reset_restores_the_site_and_the_expert_checks_out_by_state(browser_env, task_id):
    env = browser_env.unwrapped
    ts = _solve(browser_env, task_id)
    assert ts.info["outcome"]["success"] is True
    site = env.session.server.site
    fresh = site.build(site.seed)
    assert site.state != fresh  # the episode changed the site's state

    browser_env.reset(task=task_id)
    assert site.state == fresh
    # Submitting right away fails: the outcome is the state, which the reset put back.
    ts = _step(browser_env, "submit", answer="")
    assert ts.info["outcome"]["success"] is False


def test_the_docs_answer_is_checked_against_the_site_data(browser_env):
    task = get_suite("browser").get("browser-docs_default-0002")
    ts = browser_env.reset(task=task)
    page = ts.observation
    ts = _step(browser_env, "submit", answer="definitely-wrong")
    out = ts.info["outcome"]
    assert out["success"] is False and out["expected"]
    assert "definitely-wrong" not in page
    browser_env.reset(task=task)
    ts = _step(browser_env, "submit", answer=out["expected"])
    assert ts.info["outcome"]["success"] is True


def test_the_admin_delete_needs_the_dialog_confirmed(browser_env):
    task = get_suite("browser").get("browser-admin_delete-0000")
    name = task.data["plan"]["name"]
    ts = browser_env.reset(task=task)
    page = _step(browser_env, "click", element_id=_id(ts.observation, "link", "Users")).observation
    for _ in range(8):
        if find_element(page, "button", f"Delete {name}") is not None:
            break
        page = _step(browser_env, "click", element_id=_id(page, "link", "Next page")).observation
    delete = _id(page, "button", f"Delete {name}")
    ts = _step(browser_env, "click", element_id=delete)
    assert "a dialog opened" in ts.observation and f"Delete {name}?" in ts.observation
    assert '[1] button "OK"' in ts.observation and '[2] button "Cancel"' in ts.observation
    ts = _step(browser_env, "type_text", element_id=1, text="x")
    assert ts.info["exit_code"] == 1 and "a dialog is open" in ts.observation

    ts = _step(browser_env, "click", element_id=2)  # Cancel: nothing is deleted
    site = browser_env.unwrapped.session.server.site
    assert any(u["name"] == name for u in site.state["users"])
    assert f"Delete {name}" in ts.observation  # back on the list

    _step(browser_env, "click", element_id=delete)
    ts = _step(browser_env, "click", element_id=1)
    assert "User deleted." in ts.observation
    assert not any(u["name"] == name for u in site.state["users"])
    assert _step(browser_env, "submit").info["outcome"]["success"] is True


class _Counting(BaseHTTPRequestHandler):
    hits: list[str] = []  # noqa: RUF012 - shared by the decoy's handler threads

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def decoy():
    """Another server on another loopback port, counting every request it gets."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    _Counting.hits = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Counting.hits
    server.shutdown()
    server.server_close()


def test_the_browser_reaches_only_the_episode_site(browser_env, decoy, chromium):
    url, hits = decoy
    ts = browser_env.reset(task="browser-docs_default-0000")
    env = browser_env.unwrapped
    for target in (f"{url}/navigate", "http://example.com/", env._server("shop").origin):
        ts = _step(browser_env, "navigate", url=target)
        assert ts.info["exit_code"] == 1 and "ERR_BLOCKED_BY_CLIENT" in ts.observation, target

    # The page itself tries: a link it is given, a script's navigation, fetch() and an image.
    assert _step(browser_env, "navigate", url="/").info["exit_code"] == 0
    tab = env.session.tab
    tab.evaluate(
        f"document.body.insertAdjacentHTML('afterbegin', '<a href=\"{url}/link\">away</a>"
        f"<img src=\"{url}/img.png\">'); fetch('{url}/fetch').catch(() => null); 1"
    )
    page = _step(browser_env, "read_page").observation
    _step(browser_env, "click", element_id=_id(page, "link", "away"))
    tab.evaluate(f"setTimeout(() => location.href = '{url}/script', 0); 1")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not any("/script" in b for b in chromium.blocked):
        time.sleep(0.05)
    assert {"/navigate", "/link", "/img.png", "/fetch", "/script"} <= {
        "/" + b.rsplit("/", 1)[1] for b in chromium.blocked if b.startswith(url)
    }
    assert hits == []  # the other port never saw a request

    # The docs site itself is still reachable.
    ts = _step(browser_env, "navigate", url="/search?q=cache")
    assert ts.info["exit_code"] == 0 and "pages found" in ts.observation


def test_a_killed_browser_ends_the_episode_and_the_next_reset_recovers():
    env = RecorderWrapper(knowlyr.make("knowlyr/browser", step_timeout=5))
    try:
        env.reset(task="browser-docs_since-0000")
        browser = env.unwrapped.browser
        old_pid = browser.pid
        os.kill(old_pid, signal.SIGKILL)
        browser.process.wait(timeout=10)
        ts = _step(env, "read_page")
        assert ts.truncated and not ts.terminated
        assert ts.info["error"] == "browser crashed" and "browser exited" in ts.observation
        assert env.trajectory.outcome.success is False
        assert env.trajectory.outcome.reason.startswith("error: the browser exited")

        ts = _solve(env, "browser-docs_since-0000")  # a new browser, the same task
        assert env.unwrapped.browser.pid != old_pid
        assert ts.info["outcome"]["success"] is True
    finally:
        env.close()


class StallSite(Site):
    """A page whose body never finishes (until the next reset), and one that is fine."""

    name = "stall"
    title = "Stall"

    def build(self, seed: int) -> dict:
        return {}

    def routes(self):
        return {("GET", "/"): self.home, ("GET", "/slow"): self.slow}

    def home(self, req):
        return self.render("Home", "<h1>Home</h1><a href='/slow'>Slow page</a>")

    def slow(self, req):
        stopped = self.stopped

        def body():
            yield b"<!doctype html><title>Slow</title><h1>Loading"
            stopped.wait(60)

        return Response(stream=body())

    def outcome(self, goal, answer):
        return {"success": False, "score": 0.0}


def test_a_page_that_never_finishes_loading_times_out_the_step(chromium, browser_store):
    register_site("stall", StallSite, override=True)
    task = Task(task_id="stall-1", domain="browser", instruction="Wait.", data={"site": "stall"})
    env = knowlyr.make(
        "knowlyr/browser", tasks=[task], browser=chromium, store=browser_store, step_timeout=1
    )
    try:
        ts = env.reset()
        ts = _step(env, "navigate", url="/slow")
        assert ts.info["exit_code"] == 124 and "did not finish loading within 1 s" in ts.observation
        assert not ts.done
        ts = _step(env, "navigate", url="/")  # the tab is usable again
        assert ts.info["exit_code"] == 0 and "# Home" in ts.observation
        ts = _step(env, "click", element_id=_id(ts.observation, "link", "Slow page"))
        assert ts.info["exit_code"] == 124
        assert env.reset().observation.startswith("Wait.")
    finally:
        env.close()
