"""The MCP server: knowlyr's pipeline as 19 tools, over stdio or streamable HTTP.

:func:`create_server` builds an :class:`mcp.server.mcpserver.MCPServer` whose tools are the
functions of :mod:`knowlyr.mcp.pipeline_tools` and :mod:`knowlyr.mcp.data_tools`, each with a
typed input (:mod:`knowlyr.mcp.models`) that clients see as its JSON Schema. Around every
call the server:

- refuses arguments larger than ``max_argument_bytes`` (as JSON) before anything runs;
- validates them against the input model;
- runs the library call on a worker thread (so other clients are served meanwhile), with a
  progress callback that becomes MCP progress notifications when the client asked for them;
- turns every exception into an MCP tool error (``isError``) whose text says what was wrong:
  a bad call never takes the server down.

Every path a tool reads or writes goes through :class:`~knowlyr.mcp.roots.Roots`. Sandboxes
live in a :class:`~knowlyr.sandbox.persistent.SandboxManager` closed when the server stops
(SIGTERM and Ctrl-C included); sandboxes of a server that was killed outright are reaped at
the next start.

Example:
    >>> from knowlyr.mcp import ServerSettings, serve
    >>> serve(ServerSettings(roots=["."]), transport="stdio")  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
import anyio.from_thread
import anyio.to_thread
import orjson
from pydantic import BaseModel, ValidationError

from knowlyr.errors import ConfigError, KnowlyrError
from knowlyr.mcp import data_tools as dt
from knowlyr.mcp import models as m
from knowlyr.mcp import pipeline_tools as pt
from knowlyr.mcp.roots import Roots
from knowlyr.sandbox.base import SandboxConfig
from knowlyr.sandbox.persistent import SandboxManager

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from knowlyr.store import Store

__all__ = ["TOOLS", "ServerSettings", "ServerState", "create_server", "serve"]

log = logging.getLogger("knowlyr.mcp")

Impl = Callable[["ServerState", Any, dt.Progress], dict[str, Any]]

# name -> (input model, implementation, read-only?)
TOOLS: dict[str, tuple[type[BaseModel], Impl, bool]] = {
    "create_sandbox": (m.CreateSandboxInput, pt.create_sandbox, False),
    "execute_tool": (m.ExecuteToolInput, pt.execute_tool, False),
    "reset_sandbox": (m.ResetSandboxInput, pt.reset_sandbox, False),
    "replay_trajectory": (m.ReplayTrajectoryInput, pt.replay_trajectory, False),
    "sandbox_snapshot": (m.SandboxSnapshotInput, pt.sandbox_snapshot, False),
    "convert_logs": (m.ConvertLogsInput, dt.convert_logs, False),
    "validate_logs": (m.ValidateLogsInput, dt.validate_logs, True),
    "get_schema": (m.GetSchemaInput, dt.get_schema, True),
    "recorder_diff": (m.RecorderDiffInput, dt.recorder_diff, True),
    "score_trajectory": (m.ScoreTrajectoryInput, dt.score_trajectory, False),
    "build_preferences": (m.BuildPreferencesInput, dt.build_preferences, False),
    "calibrate_reward": (m.CalibrateRewardInput, dt.calibrate_reward, False),
    "list_rubrics": (m.ListRubricsInput, dt.list_rubrics, True),
    "reward_leaderboard": (m.RewardLeaderboardInput, dt.reward_leaderboard, True),
    "run_pipeline": (m.RunPipelineInput, pt.run_pipeline, False),
    "export_dataset": (m.ExportDatasetInput, dt.export_dataset, False),
    "process_log": (m.ProcessLogInput, pt.process_log, False),
    "process_logs_batch": (m.ProcessLogsBatchInput, pt.process_logs_batch, False),
    "pipeline_status": (m.PipelineStatusInput, pt.pipeline_status, True),
}


@dataclass
class ServerSettings:
    """How the server is configured (``knowlyr mcp serve`` options).

    Attributes:
        roots: the directories tools may read and write (at least one).
        max_argument_bytes: the largest arguments of one call, as JSON.
        max_sandboxes: most sandboxes open at once (all clients together).
        idle_timeout_s: a sandbox unused this long is closed (0: never).
        sandbox: the config of new sandboxes (backend, limits).
    """

    roots: list[str]
    max_argument_bytes: int = 5 * 1024 * 1024
    max_sandboxes: int = 16
    idle_timeout_s: float = 1800.0
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


class ServerState:
    """What the tools share: the allowed roots and the open sandboxes."""

    def __init__(self, settings: ServerSettings):
        if settings.max_argument_bytes < 1:
            raise ConfigError(
                f"max_argument_bytes must be positive, got {settings.max_argument_bytes}"
            )
        self.settings = settings
        self.roots = Roots(settings.roots)
        self.sandboxes = SandboxManager(
            max_sandboxes=settings.max_sandboxes,
            idle_timeout_s=settings.idle_timeout_s,
            default_config=settings.sandbox,
        )

    def open_store(self, url: str | None) -> Store:
        """The store at ``url`` (a directory inside the roots; default under the first root)."""
        from knowlyr.store import Store

        return Store.open(self.roots.store(url))

    def domain(self, name: str) -> str:
        """A domain profile name as is; a profile file only from inside the roots."""
        from knowlyr.core.profile import BUILTIN_PROFILES

        if name in BUILTIN_PROFILES:
            return name
        if "/" in name or name.endswith((".json", ".yaml", ".yml")):
            return str(self.roots.path(name, must_exist=True))
        return name  # get_profile names the built-ins in its error

    def judge_spec(self, spec: str) -> str:
        """A judge spec; a local model folder (``hf:PATH``) only from inside the roots."""
        provider, _, model = spec.partition(":")
        if provider == "hf" and model:
            return f"hf:{self.roots.path(model, must_exist=True)}"
        return spec

    def close(self) -> None:
        self.sandboxes.close_all()


def _message(e: BaseException) -> str:
    """An exception as the text a client reads: what was wrong, the field, the fix."""
    if isinstance(e, ValidationError):
        parts = []
        for err in e.errors()[:5]:
            loc = ".".join(str(x) for x in err["loc"])
            parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
        return "invalid arguments: " + "; ".join(parts)
    if isinstance(e, KnowlyrError | ValueError | OSError | KeyError | LookupError):
        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        return text or type(e).__name__
    return f"{type(e).__name__}: {e}"


def _tool_function(state: ServerState, name: str, model: type[BaseModel], impl: Impl) -> Any:
    """An async function whose signature is ``model``'s fields (so the SDK publishes the
    model's schema) that validates, runs ``impl`` on a worker thread and maps errors."""
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError

    limit = state.settings.max_argument_bytes

    async def call(**kwargs: Any) -> dict[str, Any]:
        ctx: Context = kwargs.pop("ctx")
        size = len(orjson.dumps(kwargs, default=str))
        if size > limit:
            raise ToolError(
                f"arguments are {size:,} bytes, more than this server's limit of {limit:,} "
                "(--max-argument-mb): pass large content as a file inside the allowed roots"
            )

        def progress(done: float, total: float | None = None, message: str | None = None) -> None:
            anyio.from_thread.run(ctx.report_progress, done, total, message)

        def run() -> dict[str, Any]:
            return impl(state, model.model_validate(kwargs), progress)

        try:
            return await anyio.to_thread.run_sync(run)
        except Exception as e:
            if not isinstance(e, KnowlyrError | ValidationError | ValueError | OSError | KeyError):
                log.exception("tool %s failed", name)
            raise ToolError(_message(e)) from e

    params = [
        inspect.Parameter(
            fname, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[f.annotation, f]
        )
        for fname, f in model.model_fields.items()
    ]
    params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    call.__signature__ = inspect.Signature(params, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    call.__annotations__ = {"ctx": Context, "return": dict[str, Any]}
    call.__name__ = call.__qualname__ = name
    call.__doc__ = inspect.getdoc(impl)
    return call


def create_server(state: ServerState, *, name: str = "knowlyr") -> MCPServer:
    """The MCP server with every tool of :data:`TOOLS` bound to ``state``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from knowlyr import __version__

    server: MCPServer = MCPServer(
        name,
        version=__version__,
        instructions="knowlyr-gym's pipeline: persistent sandboxes (create_sandbox, then "
        "execute_tool / reset_sandbox / sandbox_snapshot / replay_trajectory by id), the recorder "
        "(convert_logs, validate_logs, get_schema, recorder_diff), the process reward model "
        "(score_trajectory, build_preferences, calibrate_reward, list_rubrics, "
        "reward_leaderboard) and the pipeline (process_log, process_logs_batch, export_dataset, "
        "run_pipeline + pipeline_status). Paths must lie inside the server's allowed roots: "
        + ", ".join(map(str, state.roots.roots)),
        log_level="WARNING",
    )
    for tool_name, (model, impl, read_only) in TOOLS.items():
        server.add_tool(
            _tool_function(state, tool_name, model, impl),
            name=tool_name,
            annotations=ToolAnnotations(read_only_hint=read_only, open_world_hint=False),
        )
    return server


def serve(
    settings: ServerSettings,
    *,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    path: str = "/mcp",
) -> None:
    """Run the server until stdin closes (stdio) or until SIGTERM / Ctrl-C (both); every
    sandbox is closed on the way out.

    Raises:
        ConfigError: a root that is not a directory, or a bad limit.
    """
    from knowlyr.sandbox import reap_orphans

    state = ServerState(settings)
    try:  # sandboxes of a server that was killed before it could close them
        reaped = reap_orphans(settings.sandbox.backend)
        if any(reaped.values()):
            log.warning("reaped sandboxes left by a dead owner: %s", reaped)
    except KnowlyrError as e:
        log.warning("could not look for orphaned sandboxes: %s", e)
    server = create_server(state)

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # unwinds the event loop; the finally below closes the sandboxes

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        if transport == "stdio":
            anyio.run(server.run_stdio_async)
        else:
            anyio.run(lambda: _serve_http(server, host, port, path, settings.max_argument_bytes))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        state.close()
        print("knowlyr mcp: stopped; every sandbox closed", file=sys.stderr)


async def _serve_http(
    server: MCPServer, host: str, port: int, path: str, max_argument_bytes: int
) -> None:
    import uvicorn

    # The body limit sits well above the argument limit, so an oversized argument reaches the
    # tool and comes back as a tool error naming the limit, not as a bare HTTP 413.
    app = server.streamable_http_app(
        streamable_http_path=path,
        host=host,
        max_request_body_size=max(4 * max_argument_bytes, 64 * 1024 * 1024),
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
