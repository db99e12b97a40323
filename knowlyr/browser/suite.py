"""The ``browser`` task suite: 9 families over the three local sites, 20 tasks each.

Task ``browser-<family>-<n>`` runs on its family's site with the site's state for seed
``1000 * family_index + n``; its ``data`` holds the site, that seed, the start path, the goal
the outcome is checked against (the site's state, never the page text) and the plan the
scripted expert follows. Splits come from :class:`~knowlyr.taskset.Suite` (by instruction
text, 20% held out per family).

Example:
    >>> from knowlyr.taskset import get_suite
    >>> suite = get_suite("browser")
    >>> len(suite), suite.get("browser-shop_buy-0003").data["site"]
    (180, 'shop')
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from knowlyr.browser.sites import SITE_MODULES
from knowlyr.taskset import Suite, Task

__all__ = ["FAMILY_SITES", "TASKS_PER_FAMILY", "BrowserSuite"]

TASKS_PER_FAMILY = 20

#: family -> site, in suite order.
FAMILY_SITES = {
    "shop_buy": "shop",
    "shop_filter": "shop",
    "shop_cart": "shop",
    "docs_default": "docs",
    "docs_since": "docs",
    "docs_feedback": "docs",
    "admin_edit": "admin",
    "admin_delete": "admin",
    "admin_create": "admin",
}
# steps of a typical expert episode, per family (the reward's efficiency reference)
_LENGTH = {
    "shop_buy": 12,
    "shop_filter": 14,
    "shop_cart": 8,
    "docs_default": 4,
    "docs_since": 4,
    "docs_feedback": 6,
    "admin_edit": 6,
    "admin_delete": 5,
    "admin_create": 7,
}


@cache
def _builder(family: str):
    module = importlib.import_module(SITE_MODULES[FAMILY_SITES[family]])
    return module.FAMILIES[family]


class BrowserSuite(Suite):
    """Web tasks on the shop, the docs wiki and the admin panel."""

    name = "browser"
    domain = "browser"
    families = tuple(FAMILY_SITES)

    def _ids(self) -> list[str]:
        return [f"browser-{f}-{n:04d}" for f in self.families for n in range(TASKS_PER_FAMILY)]

    def _build(self, index: int) -> Task:
        fi, n = divmod(index, TASKS_PER_FAMILY)
        family = self.families[fi]
        seed = 1000 * fi + n
        spec: dict[str, Any] = _builder(family)(seed)
        return Task(
            task_id=self.ids[index],
            domain="browser",
            suite="browser",
            family=family,
            instruction=spec["instruction"],
            metadata={"site": FAMILY_SITES[family]},
            reference_length=_LENGTH[family],
            data={
                "site": FAMILY_SITES[family],
                "seed": seed,
                "start": "/",
                "goal": spec["goal"],
                "plan": spec["plan"],
            },
        )
