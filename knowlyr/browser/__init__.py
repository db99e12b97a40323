"""Web tasks in a real headless Chromium, on local sites the project serves.

- :class:`~knowlyr.browser.env.BrowserEnv` (``knowlyr/browser``): the env; tools
  ``navigate``, ``click``, ``type_text``, ``scroll``, ``screenshot``, ``read_page``, ``submit``.
- :class:`~knowlyr.browser.chromium.Chromium`: Debian's Chromium driven over the DevTools
  protocol (:mod:`knowlyr.browser.cdp`), with every request outside the episode's site
  blocked.
- :mod:`knowlyr.browser.sites`: the shop, the docs wiki and the admin panel
  (:class:`~knowlyr.browser.server.Site`), served by :class:`~knowlyr.browser.server.SiteServer`.
- :class:`~knowlyr.browser.suite.BrowserSuite`: the ``browser`` task suite.

Submodules are imported on first use, so ``import knowlyr`` starts no browser and loads no
websocket client.
"""

from __future__ import annotations

import importlib

__all__ = ["BrowserEnv", "BrowserSuite", "Chromium", "Site", "SiteServer", "register_site"]

_WHERE = {
    "BrowserEnv": "knowlyr.browser.env",
    "BrowserSuite": "knowlyr.browser.suite",
    "Chromium": "knowlyr.browser.chromium",
    "Site": "knowlyr.browser.server",
    "SiteServer": "knowlyr.browser.server",
    "register_site": "knowlyr.browser.server",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'knowlyr.browser' has no attribute {name!r}")
