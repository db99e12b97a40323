"""Built-in environments, registered under ``knowlyr/*`` when ``knowlyr`` is imported.

Registration uses ``"module:Class"`` entry points, so importing this package starts nothing.
"""

from __future__ import annotations
