"""Built-in log format adapters, one module per format family; importing registers them."""

from __future__ import annotations

from knowlyr.recorder.adapters import openhands

__all__ = ["openhands"]
