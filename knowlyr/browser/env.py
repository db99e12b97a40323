"""``BrowserEnv`` (``knowlyr/browser``): web tasks on local sites in a real headless Chromium.

Each episode runs one task of the ``browser`` suite on its site (shop, docs wiki or admin
panel), served by the env from a loopback port. ``reset`` rebuilds the site's state for the
task's seed, lets the browser reach only that site's origin, opens a fresh tab (a new browser
context: no cookies or storage of an earlier episode) on the start page and returns the
instruction followed by the page as text. The outcome is the site's state after ``submit``
(or when the episode is cut off).

The browser is started on the first reset and kept across episodes (a reset costs a new
context and one page load, not a browser start). If it dies during an episode (crashed,
killed), the step that notices it reports it and ends the episode as truncated and failed;
the next reset starts a new browser. A page that does not finish loading within
``step_timeout`` seconds makes that step fail with exit code 124 and the episode goes on.

Example:
    >>> import knowlyr
    >>> env = knowlyr.make("knowlyr/browser", family="docs_default")  # doctest: +SKIP
    >>> ts = env.reset(seed=0)  # doctest: +SKIP
    >>> ts.observation.splitlines()[2]  # doctest: +SKIP
    'Page: Home - Platform Docs (/)'
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from knowlyr.browser.chromium import Chromium
from knowlyr.browser.server import SiteServer, get_site
from knowlyr.browser.tools import BROWSER_TOOLS, BrowserSession, page_text
from knowlyr.core.env import Action, TimeStep
from knowlyr.core.profile import DomainProfile
from knowlyr.core.tools import Toolbox, ToolResult
from knowlyr.envs.base import TaskEnv
from knowlyr.errors import BrowserError, ConfigError
from knowlyr.taskset import Split, Suite, Task

__all__ = ["BrowserEnv"]


class BrowserEnv(TaskEnv):
    """Web tasks in a headless Chromium against the project's local sites.

    Args:
        browser: a running :class:`~knowlyr.browser.chromium.Chromium` to use (the caller
            keeps owning it; one episode at a time); default: the env starts its own.
        step_timeout: seconds a step may wait for a page (loads, clicks, scripts).
        store: the store whose blobs keep screenshots (default ``$KNOWLYR_STORE`` or
            ``.knowlyr/store``).
        executable: the Chromium binary (default: Debian's ``chromium``).
        window: the viewport ``(width, height)`` of a browser the env starts.
        family, split, tasks, suite, profile: see :class:`~knowlyr.envs.base.TaskEnv`.

    Raises:
        ConfigError: a non-positive ``step_timeout``.
    """

    domain = "browser"

    def __init__(
        self,
        *,
        suite: str | Suite | None = None,
        family: str | Sequence[str] | None = None,
        split: Split | None = None,
        tasks: Sequence[Task] | None = None,
        profile: str | DomainProfile | None = None,
        browser: Chromium | None = None,
        step_timeout: float = 10.0,
        store: str | None = None,
        executable: str | None = None,
        window: tuple[int, int] = (1280, 800),
    ):
        if not step_timeout > 0:
            raise ConfigError(f"step_timeout must be positive (seconds), got {step_timeout!r}")
        super().__init__(suite=suite, family=family, split=split, tasks=tasks, profile=profile)
        self.browser = browser
        self._owns_browser = browser is None
        self.step_timeout = float(step_timeout)
        self.store_url = store
        self.executable = executable
        self.window = tuple(window)
        self.servers: dict[str, SiteServer] = {}
        self.session: BrowserSession | None = None

    def _build_toolbox(self) -> Toolbox:
        return Toolbox(BROWSER_TOOLS)

    # -- episode --------------------------------------------------------------------------

    def _ensure_browser(self) -> Chromium:
        if self.browser is not None and self.browser.alive:
            return self.browser
        if self.browser is not None and not self._owns_browser:
            raise BrowserError(
                "the Chromium passed as browser= is no longer running; pass a running one "
                "or let the env start its own (browser=None)"
            )
        if self.browser is not None:
            self.browser.close()  # reap what is left of the dead one
        self.browser = Chromium(self.executable, window=self.window)
        return self.browser

    def _server(self, site: str) -> SiteServer:
        if site not in self.servers:
            self.servers[site] = SiteServer(get_site(site))
        return self.servers[site]

    def _start(self, task: Task) -> None:
        site = task.data.get("site")
        if not isinstance(site, str):
            raise ConfigError(f"task {task.task_id!r} names no site in data['site']")
        self._close_tab()
        server = self._server(site)
        server.site.reset(int(task.data.get("seed", 0)))
        browser = self._ensure_browser()
        browser.allow(server.origin)
        tab = browser.new_tab()
        self.session = BrowserSession(
            task=task, tab=tab, server=server, timeout=self.step_timeout, store_url=self.store_url
        )
        tab.navigate(server.origin + task.data.get("start", "/"), timeout=self.step_timeout)

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        """Start an episode: the task's site reset, a fresh tab on its start page.

        The observation is the instruction, then the start page as text.
        """
        ts = super().reset(task=task, seed=seed, options=options)
        s = self.session
        text, s.lines = page_text(s.tab.snapshot(timeout=self.step_timeout), s.server.origin)
        ts.observation = f"{ts.observation}\n\n{text}"
        return ts

    def _context(self) -> dict[str, Any]:
        return {"session": self.session}

    def step(self, action: Action) -> TimeStep:
        if self.session is not None:
            self.session.screenshot = None
        ts = super().step(action)
        s = self.session
        if s is not None and s.screenshot:
            ts.info["step_metadata"] = {"screenshot": s.screenshot}
        if (
            self.task is not None
            and not ts.done
            and self.browser is not None
            and not self.browser.alive
        ):
            reason = (
                f"the browser exited ({self.browser.conn.close_reason}); the episode cannot go on"
            )
            ts.observation = f"Error: {reason}"
            ts.truncated = True
            ts.info.update(
                exit_code=1,
                error="browser crashed",
                truncated_by="browser crashed",
                outcome={"success": False, "score": 0.0, "reason": f"error: {reason}"},
            )
            self._done = True
        return ts

    def _outcome(self, tool: str, result: ToolResult) -> dict[str, Any]:
        s = self.session
        return s.server.site.outcome(s.task.data["goal"], s.answer)

    def _truncated_outcome(self) -> dict[str, Any]:
        s = self.session
        if s is None:
            return {"success": False, "score": 0.0}
        return s.server.site.outcome(s.task.data["goal"], None)

    # -- teardown -------------------------------------------------------------------------

    def _close_tab(self) -> None:
        if self.session is not None:
            self.session.tab.close()
            self.session = None

    def close(self) -> None:
        """Close the tab, the browser (if the env started it) and the sites' servers."""
        with contextlib.suppress(BrowserError):
            self._close_tab()
        if self.browser is not None and self._owns_browser:
            self.browser.close()
            self.browser = None
        for server in self.servers.values():
            server.close()
        self.servers = {}
