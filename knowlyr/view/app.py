"""The viewer's web app (FastAPI, server-rendered Jinja pages, no front-end build).

Routes::

    GET /                  the trajectory list (query parameters: knowlyr.view.query.ListQuery)
    GET /t/{id}            one trajectory (?version=N: time travel, ?config=HASH: which reward)
    GET /compare/{a}/{b}   two trajectories of one task side by side, as a preference pair
    GET /pair/{pair_id}    a stored preference pair
    GET /blob/{sha256}     a blob (raw log, screenshot), hash verified

A request whose ``Host`` is not the server's bind address (a DNS-rebinding page) answers
421 before anything is read (:mod:`knowlyr._http_guard`, as ``knowlyr env serve`` and
``knowlyr mcp serve`` do). Bad input answers an HTML page with 400 (a malformed id or filter, naming the parameter) or
404 (an unknown trajectory, pair, blob or version; a store that does not exist), never a
traceback. On start, a thread reads the list's column index and compiles the templates,
so the first page is as fast as the next (``app.state.warmed`` is set when it is done).
The app only reads the store (:class:`~knowlyr.view.reader.StoreReader`); a store
that does not exist yet is looked for again on the next request.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException

from knowlyr._http_guard import HostGuard, HostGuardMiddleware
from knowlyr.errors import ConfigError, KnowlyrError, NotFoundError
from knowlyr.view.query import SORTS, ListQuery
from knowlyr.view.reader import StoreReader, blob_type
from knowlyr.view.render import ServerLinks, compile_templates, render

__all__ = ["create_app"]

log = logging.getLogger(__name__)
_LINKS = ServerLinks()
_TITLES = {
    400: "Bad request",
    403: "Forbidden",
    404: "Not found",
    421: "Misdirected request",
    500: "Internal error",
}


class _Lazy:
    """The store's reader, opened on first use (and retried while the store is missing)."""

    def __init__(self, store: str | os.PathLike[str] | StoreReader):
        self.url = store.url if isinstance(store, StoreReader) else os.fspath(store)
        self._reader = store if isinstance(store, StoreReader) else None
        self._lock = threading.Lock()

    def get(self) -> StoreReader:
        if self._reader is None:
            with self._lock:
                if self._reader is None:
                    self._reader = StoreReader(self.url)
        return self._reader


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if value < 0:
        raise ConfigError(f"{name}={value} must be >= 0")
    return value


def _check_params(request: Request, allowed: tuple[str, ...]) -> None:
    extra = sorted(k for k in request.query_params if k not in allowed)
    if extra:
        raise ConfigError(
            f"unknown parameter(s) {', '.join(map(repr, extra))}: this page takes "
            f"{', '.join(allowed) or 'none'}"
        )


def create_app(
    store: str | os.PathLike[str] | StoreReader,
    *,
    host: str = "127.0.0.1",
    allowed_hosts: Iterable[str] = (),
) -> FastAPI:
    """The viewer app over ``store`` (a path / fsspec URL, or an open :class:`StoreReader`).

    Args:
        store: the store to show.
        host: the address the server is bound to; a request's ``Host`` must name it (a
            loopback one: any loopback name; ``0.0.0.0``: this machine's names and addresses).
        allowed_hosts: other names a request's ``Host`` may give (a DNS name, a proxy's).

    Raises:
        ConfigError: an ``allowed_hosts`` entry that is not a host name or address.

    Example:
        >>> import uvicorn                                                    # doctest: +SKIP
        >>> uvicorn.run(create_app(".knowlyr/store"), host="127.0.0.1", port=8321)  # doctest: +SKIP
    """
    try:
        guard = HostGuard.for_bind(host, allowed_hosts)
    except ValueError as e:
        raise ConfigError(f"--allowed-host: {e}") from None
    state = _Lazy(store)
    warmed = threading.Event()

    def warm() -> None:
        """Read the latest column index and compile the templates ahead of the first
        request (~0.3 s over 100,000 trajectories); a missing store is left to the pages."""
        try:
            reader = state.get()
            reader.index()
            reader.runs()
            compile_templates()
        except KnowlyrError:
            pass
        finally:
            warmed.set()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        threading.Thread(target=warm, name="knowlyr-view-warm", daemon=True).start()
        yield

    app = FastAPI(
        title="knowlyr view", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )
    app.state.warmed = warmed

    def page(template: str, code: int = 200, **context) -> HTMLResponse:
        context.setdefault("store_url", state.url)
        context.setdefault("version", None)
        return HTMLResponse(render(template, _LINKS, **context), status_code=code)

    def error(status: int, message: str) -> HTMLResponse:
        return page("error.jinja", status, status=status, title=_TITLES[status], message=message)

    app.add_middleware(HostGuardMiddleware, guard=guard, respond=error)

    @app.exception_handler(ConfigError)
    async def _bad(request: Request, e: ConfigError) -> HTMLResponse:
        return error(400, str(e))

    @app.exception_handler(NotFoundError)
    async def _missing(request: Request, e: NotFoundError) -> HTMLResponse:
        return error(404, str(e))

    @app.exception_handler(KnowlyrError)
    async def _failed(request: Request, e: KnowlyrError) -> HTMLResponse:
        return error(500, f"{type(e).__name__}: {e}")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError) -> HTMLResponse:
        where = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
        return error(400, f"malformed request: {where}")

    @app.exception_handler(HTTPException)
    async def _http(request: Request, e: HTTPException) -> HTMLResponse:
        if e.status_code == 404:
            return error(
                404,
                f"no page {request.url.path}: the viewer has /, /t/ID, "
                "/compare/A/B, /pair/ID and /blob/SHA256",
            )
        status = e.status_code if e.status_code in _TITLES else 400
        return error(status, str(e.detail))

    @app.exception_handler(Exception)
    async def _crash(request: Request, e: Exception) -> HTMLResponse:
        log.exception("knowlyr view: %s failed", request.url.path)
        return error(500, f"{type(e).__name__}: {e} (the server log has the details)")

    @app.get("/", response_class=HTMLResponse)
    def trajectories(request: Request) -> HTMLResponse:
        q = ListQuery.parse(dict(request.query_params))
        reader = state.get()
        result = reader.list(q)
        return page(
            "list.jinja",
            page=result,
            latest=reader.version("trajectories"),
            version=result.version,
            runs=reader.runs(),
            sorts=SORTS,
            store_url=reader.url,
        )

    @app.get("/t/{id}", response_class=HTMLResponse)
    def trajectory(id: str, request: Request) -> HTMLResponse:
        from knowlyr.view.pages import trajectory_view

        _check_params(request, ("version", "config", "steps"))
        steps = request.query_params.get("steps", "").strip() or "all"
        if steps not in ("all", "failed"):
            raise ConfigError(
                f"steps={steps!r}: expected 'failed' (only the steps that failed) or 'all'"
            )
        reader = state.get()
        view = trajectory_view(
            reader,
            id,
            version=_int_param(request, "version"),
            config=request.query_params.get("config") or None,
            only_failed=steps == "failed",
        )
        same = reader.same_task(view.traj.task.task_id, exclude=view.traj.id)
        return page(
            "trajectory.jinja",
            view=view,
            same_task=same,
            version=view.version,
            store_url=reader.url,
        )

    @app.get("/compare/{a}/{b}", response_class=HTMLResponse)
    def compare(a: str, b: str, request: Request) -> HTMLResponse:
        from knowlyr.view.pages import pair_view

        _check_params(request, ())
        reader = state.get()
        return page("pair.jinja", pair=pair_view(reader, a, b), store_url=reader.url)

    @app.get("/pair/{pair_id}", response_class=HTMLResponse)
    def pair(pair_id: str, request: Request) -> HTMLResponse:
        from knowlyr.view.pages import stored_pair_view

        _check_params(request, ())
        reader = state.get()
        return page("pair.jinja", pair=stored_pair_view(reader, pair_id), store_url=reader.url)

    @app.get("/blob/{digest}")
    def blob(digest: str) -> Response:
        data = state.get().blob(digest)
        return Response(
            data,
            media_type=blob_type(data)[0],
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "max-age=86400"},
        )

    return app
