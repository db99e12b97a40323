"""The MCP server: knowlyr's pipeline as 19 tools, over stdio or streamable HTTP.

:func:`create_server` builds an :class:`mcp.server.mcpserver.MCPServer` whose tools are the
functions of :mod:`knowlyr.mcp.pipeline_tools` and :mod:`knowlyr.mcp.data_tools`, each with a
typed input (:mod:`knowlyr.mcp.models`, the tool's inputSchema) and a typed result
(:mod:`knowlyr.mcp.results`, its outputSchema). Around every call the server:

- refuses arguments larger than ``max_argument_bytes`` (as JSON) before anything runs;
- validates them against the input model;
- runs the library call on a worker thread (so other clients are served meanwhile), with a
  progress callback that becomes MCP progress notifications when the client asked for them;
- checks the result against the result model and sends it as compact JSON text and as
  ``structuredContent`` (timestamps in ISO 8601 UTC);
- turns every exception into an MCP tool error (``isError``) of one line that says what was
  wrong and how to fix it (bad arguments name the argument and its allowed values): a bad
  call never takes the server down.

Every path a tool reads or writes goes through :class:`~knowlyr.mcp.roots.Roots`. Sandboxes
live in a :class:`~knowlyr.sandbox.persistent.SandboxManager` closed when the server stops
(SIGTERM and Ctrl-C included); sandboxes of a server that was killed outright are reaped at
the next start.

Example:
    >>> from knowlyr.mcp import ServerSettings, serve
    >>> serve(ServerSettings(roots=["."]), transport="stdio")  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import inspect
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

import anyio
import anyio.from_thread
import anyio.to_thread
import orjson
from pydantic import BaseModel, ValidationError

from knowlyr.errors import ConfigError, KnowlyrError
from knowlyr.mcp import data_tools as dt
from knowlyr.mcp import models as m
from knowlyr.mcp import pipeline_tools as pt
from knowlyr.mcp import results as r
from knowlyr.mcp.roots import Roots
from knowlyr.sandbox.base import SandboxConfig
from knowlyr.sandbox.persistent import SandboxManager

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from knowlyr.store import Store

__all__ = ["TOOLS", "ServerSettings", "ServerState", "ToolSpec", "create_server", "serve"]

log = logging.getLogger("knowlyr.mcp")

Impl = Callable[["ServerState", Any, dt.Progress], dict[str, Any]]


class ToolSpec(NamedTuple):
    """One tool: its input model (the inputSchema), its result model (the outputSchema), the
    library call and whether it only reads."""

    input: type[BaseModel]
    result: type[BaseModel]
    impl: Impl
    read_only: bool


TOOLS: dict[str, ToolSpec] = {
    "create_sandbox": ToolSpec(m.CreateSandboxInput, r.SandboxResult, pt.create_sandbox, False),
    "execute_tool": ToolSpec(m.ExecuteToolInput, r.ToolCallResult, pt.execute_tool, False),
    "reset_sandbox": ToolSpec(m.ResetSandboxInput, r.ResetSandboxResult, pt.reset_sandbox, False),
    "replay_trajectory": ToolSpec(
        m.ReplayTrajectoryInput, r.ReplayTrajectoryResult, pt.replay_trajectory, False
    ),
    "sandbox_snapshot": ToolSpec(
        m.SandboxSnapshotInput, r.SandboxSnapshotResult, pt.sandbox_snapshot, False
    ),
    "convert_logs": ToolSpec(m.ConvertLogsInput, r.ConvertLogsResult, dt.convert_logs, False),
    "validate_logs": ToolSpec(m.ValidateLogsInput, r.ValidateLogsResult, dt.validate_logs, True),
    "get_schema": ToolSpec(m.GetSchemaInput, r.GetSchemaResult, dt.get_schema, True),
    "recorder_diff": ToolSpec(m.RecorderDiffInput, r.RecorderDiffResult, dt.recorder_diff, True),
    "score_trajectory": ToolSpec(
        m.ScoreTrajectoryInput, r.ScoreTrajectoryResult, dt.score_trajectory, False
    ),
    "build_preferences": ToolSpec(
        m.BuildPreferencesInput, r.BuildPreferencesResult, dt.build_preferences, False
    ),
    "calibrate_reward": ToolSpec(
        m.CalibrateRewardInput, r.CalibrateRewardResult, dt.calibrate_reward, False
    ),
    "list_rubrics": ToolSpec(m.ListRubricsInput, r.ListRubricsResult, dt.list_rubrics, True),
    "reward_leaderboard": ToolSpec(
        m.RewardLeaderboardInput, r.RewardLeaderboardResult, dt.reward_leaderboard, True
    ),
    "run_pipeline": ToolSpec(m.RunPipelineInput, r.RunPipelineResult, pt.run_pipeline, False),
    "export_dataset": ToolSpec(
        m.ExportDatasetInput, r.ExportDatasetResult, dt.export_dataset, False
    ),
    "process_log": ToolSpec(m.ProcessLogInput, r.ProcessLogResult, pt.process_log, False),
    "process_logs_batch": ToolSpec(
        m.ProcessLogsBatchInput, r.ProcessLogResult, pt.process_logs_batch, False
    ),
    "pipeline_status": ToolSpec(
        m.PipelineStatusInput, r.PipelineStatusResult, pt.pipeline_status, True
    ),
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


def _value(v: Any) -> str:
    text = repr(v)
    return " ".join(text.split()) if len(text) <= 60 else " ".join(text[:57].split()) + "..."


def _problem(err: Any, fields: dict[str, Any] | None) -> str:
    """One pydantic error as a clause: the argument, what it must be, and what came."""
    loc = ".".join(str(x) for x in err["loc"])
    kind, msg, got = err["type"], err["msg"], err.get("input")
    if kind == "missing":
        desc = fields[loc].description if fields and loc in fields else None
        return f"`{loc}` is required" + (f" ({desc.rstrip('.')})" if desc else "")
    if kind == "extra_forbidden":
        return _unknown(loc, fields) if fields else f"`{loc}` is not a known field"
    if kind in ("literal_error", "enum"):
        return f"`{loc}` must be one of {err['ctx']['expected']}, got {_value(got)}"
    if kind.startswith(("value_error", "assertion_error")) or not loc:
        return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return f"`{loc}`: {msg[0].lower()}{msg[1:]}, got {_value(got)}"


def _unknown(arg: str, fields: dict[str, Any]) -> str:
    close = difflib.get_close_matches(arg, fields, n=1)
    hint = f"did you mean `{close[0]}`? " if close else ""
    return f"`{arg}` is not an argument of this tool ({hint}it takes {', '.join(fields)})"


def _invalid(e: ValidationError, fields: dict[str, Any] | None = None) -> str:
    """A validation error as one line: each bad argument (three at most) and its fix."""
    errors = e.errors()
    parts = [_problem(err, fields) for err in errors[:3]]
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    fix = "fix them and call again" if len(errors) > 1 else "fix it and call again"
    return "invalid arguments: " + "; ".join(parts) + more + "; " + fix


def _message(e: BaseException, fields: dict[str, Any] | None = None) -> str:
    """An exception as the one line a client reads: what was wrong, the field, the fix."""
    if isinstance(e, ValidationError):
        return _invalid(e, fields)
    if isinstance(e, KnowlyrError | ValueError | OSError | KeyError | LookupError):
        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        cause = e.__cause__
        if isinstance(cause, ValidationError) and str(cause) in text:  # e.g. a flow's params
            text = text.replace(str(cause), _invalid(cause).removeprefix("invalid arguments: "))
        text = text or type(e).__name__
    else:
        text = f"{type(e).__name__}: {e}"
    return " ".join(text.split())


def _tool_function(state: ServerState, name: str, spec: ToolSpec) -> Any:
    """An async function whose signature is the input model's fields and whose return
    annotation is the result model (so the SDK publishes both schemas) that validates, runs
    the library call on a worker thread, checks the result against its model and sends it as
    compact JSON; every error becomes a one-line tool error."""
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, TextContent

    limit = state.settings.max_argument_bytes
    model, result = spec.input, spec.result

    async def call(**kwargs: Any) -> CallToolResult:
        ctx: Context = kwargs.pop("ctx")
        size = len(orjson.dumps(kwargs, default=str))
        if size > limit:
            raise ToolError(
                f"arguments are {size:,} bytes, more than this server's limit of {limit:,} "
                "(--max-argument-mb): pass large content as a file inside the allowed roots"
            )

        def progress(done: float, total: float | None = None, message: str | None = None) -> None:
            anyio.from_thread.run(ctx.report_progress, done, total, message)

        def run() -> CallToolResult:
            out = spec.impl(state, model.model_validate(kwargs), progress)
            # NaN (an undefined statistic) becomes null on the way through JSON
            text = orjson.dumps(result.model_validate(out).model_dump(mode="json"))
            return CallToolResult(
                content=[TextContent(type="text", text=text.decode())],
                structured_content=orjson.loads(text),
            )

        try:
            return await anyio.to_thread.run_sync(run)
        except Exception as e:
            if not isinstance(e, KnowlyrError | ValidationError | ValueError | OSError | KeyError):
                log.exception("tool %s failed", name)
            raise ToolError(_message(e, model.model_fields)) from e

    params = [
        inspect.Parameter(
            fname, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[f.annotation, f]
        )
        for fname, f in model.model_fields.items()
    ]
    params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    call.__signature__ = inspect.Signature(params, return_annotation=result)  # type: ignore[attr-defined]
    call.__annotations__ = {"ctx": Context, "return": result}
    call.__name__ = call.__qualname__ = name
    call.__doc__ = inspect.getdoc(spec.impl)
    return call


def create_server(state: ServerState, *, name: str = "knowlyr") -> MCPServer:
    """The MCP server with every tool of :data:`TOOLS` bound to ``state``.

    Each tool's inputSchema is its input model's JSON Schema (so the rules between arguments,
    e.g. "``paths`` when no ``trajectory``", are in it) and its outputSchema its result
    model's.
    """
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.tools import Tool
    from mcp.types import ToolAnnotations

    from knowlyr import __version__

    class Server(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            spec = TOOLS.get(name)
            unknown = [k for k in arguments if spec and k not in spec.input.model_fields]
            if spec and unknown:  # the SDK would drop them silently
                problems = "; ".join(_unknown(k, spec.input.model_fields) for k in unknown)
                raise ToolError(f"Error executing tool {name}: invalid arguments: {problems}")
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as e:
                # arguments the SDK refused before the tool ran: one line, not pydantic's dump
                if isinstance(e.__cause__, ValidationError) and name in TOOLS:
                    fields = TOOLS[name].input.model_fields
                    raise ToolError(
                        f"Error executing tool {name}: {_message(e.__cause__, fields)}"
                    ) from e.__cause__
                raise

    tools = []
    for tool_name, spec in TOOLS.items():
        tool = Tool.from_function(
            _tool_function(state, tool_name, spec),
            name=tool_name,
            annotations=ToolAnnotations(read_only_hint=spec.read_only, open_world_hint=False),
        )
        tool.parameters = spec.input.model_json_schema()
        tools.append(tool)
    server: MCPServer = Server(
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
        tools=tools,
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
        # a SIGTERM now (a stdio client sends one 2 s after closing stdin) must not cut the
        # close short: closing many sandboxes on a busy machine takes seconds
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            state.close()
        finally:
            signal.signal(signal.SIGTERM, previous)
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
