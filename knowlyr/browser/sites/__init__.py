"""The three local sites of the browser env: ``shop``, ``docs`` and ``admin``.

Each module holds one :class:`~knowlyr.browser.server.Site` (its seeded state, pages and
outcome) and its task families (``FAMILIES``: family -> ``seed -> task spec``).
"""

from __future__ import annotations

__all__ = ["SITE_MODULES"]

#: site name -> the module that defines it and its task families.
SITE_MODULES = {
    "shop": "knowlyr.browser.sites.shop",
    "docs": "knowlyr.browser.sites.docs",
    "admin": "knowlyr.browser.sites.admin",
}
