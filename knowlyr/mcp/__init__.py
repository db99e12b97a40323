"""knowlyr's pipeline as Model Context Protocol tools, for Claude Desktop, Claude Code or any
MCP client (``knowlyr mcp serve``; needs ``pip install 'knowlyr-gym[mcp]'``).

Nineteen tools, each a typed input (:mod:`knowlyr.mcp.models`) and a typed result
(:mod:`knowlyr.mcp.results`) around one library call:

- sandbox: ``create_sandbox``, ``execute_tool``, ``reset_sandbox``, ``replay_trajectory``,
  ``sandbox_snapshot`` (persistent sandboxes by id, :mod:`knowlyr.sandbox.persistent`);
- recorder: ``convert_logs``, ``validate_logs``, ``get_schema``, ``recorder_diff``;
- reward: ``score_trajectory``, ``build_preferences``, ``calibrate_reward``, ``list_rubrics``,
  ``reward_leaderboard``;
- pipeline: ``run_pipeline``, ``export_dataset``, ``process_log``, ``process_logs_batch``,
  ``pipeline_status`` (Prefect flow runs, through :mod:`flows.runs`).

Every path is checked against the server's allowed roots (:class:`Roots`).

Example:
    >>> from knowlyr.mcp import ServerSettings, serve
    >>> serve(ServerSettings(roots=["/srv/agent-logs"]), transport="http", port=8765)  # doctest: +SKIP
"""

from __future__ import annotations

from knowlyr.mcp.roots import OutsideRootsError, Roots
from knowlyr.mcp.server import TOOLS, ServerSettings, ServerState, ToolSpec, create_server, serve

__all__ = [
    "TOOLS",
    "OutsideRootsError",
    "Roots",
    "ServerSettings",
    "ServerState",
    "ToolSpec",
    "create_server",
    "serve",
]
