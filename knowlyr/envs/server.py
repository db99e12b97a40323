"""``knowlyr env serve``: any registered environment over HTTP, many episodes at once.

As in AgentGym, an environment lives in a server process and rollout workers or trainers on
other machines step it over HTTP; :func:`knowlyr.make` with the server's URL gives them an
:class:`~knowlyr.core.remote.RemoteEnv` client. Each client opens an *episode slot*: its own
env instance here (built by :func:`knowlyr.make` with the client's arguments, so its own
sandbox), kept across its resets until it closes it.

Routes (JSON bodies; ``ENV`` is the served id, e.g. ``knowlyr/conversation``)::

    GET    /health                               status, slots open, limits (no token needed)
    GET    /ENV                                  the env's spec: max_steps, description, domain
    POST   /ENV/episodes                         open a slot: {kwargs, max_steps, check_actions}
    POST   /ENV/episodes/ID/reset                {task, seed, options} -> TimeStep
    POST   /ENV/episodes/ID/step                 {action} -> TimeStep
    POST   /ENV/episodes/ID/outcome_if_truncated {} -> the outcome of an episode cut off now
    DELETE /ENV/episodes/ID                      close the slot and its sandbox

Limits and reclaiming: at most ``max_episodes`` slots (another is refused with 503); a slot
left idle for ``idle_timeout_s`` is closed with its sandbox, which is how the slots of a client
that died are reclaimed; one call at a time per slot (a second gets 409); every slot is closed
when the server stops. ``env.step`` and ``reset`` run in worker threads, so slots step in
parallel (sandbox commands release the GIL).

Refusals, before anything is read or built:

- a ``Host`` that is not the server's bind address (DNS rebinding): 421; a POST or DELETE
  whose ``Origin`` is another site: 403 (:mod:`knowlyr._http_guard`);
- with a ``token``, every route but ``/health`` needs ``Authorization: Bearer TOKEN`` (401).
  ``knowlyr env serve`` generates and prints one unless it is given one or ``--no-token``
  (loopback only); :func:`serve` refuses a non-loopback address without one;
- a body over ``max_body_bytes`` (16 MB): 413, as soon as its ``Content-Length`` says so or
  the bytes read pass the limit;
- a body that is not a JSON object, an unknown field, or a field of the wrong type or range:
  400 naming the field and what it takes.

Example:
    >>> app = create_app("knowlyr/conversation", max_episodes=64)  # doctest: +SKIP
    >>> serve("knowlyr/conversation", host="127.0.0.1", port=8400)   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import threading
import time
import traceback
import uuid
from collections.abc import Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from knowlyr._http_guard import HostGuard, HostGuardMiddleware, is_loopback
from knowlyr.core.env import AgentEnv, TimeStep
from knowlyr.core.registry import make, spec
from knowlyr.errors import (
    ActionError,
    BackendUnavailableError,
    ConfigError,
    KnowlyrError,
    UnknownEnvError,
)

__all__ = ["EpisodePool", "check_bind", "create_app", "is_loopback", "new_token", "serve"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 << 20
SERVER_ONLY_KWARGS = frozenset({"sandbox"})  # isolation settings are the server's, never a client's


class _Refused(Exception):
    """An answer other than 200: status, error kind and a message naming the fix."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


@dataclass
class _Slot:
    id: str
    env: AgentEnv
    last_used: float
    lock: threading.Lock = field(default_factory=threading.Lock)


class EpisodePool:
    """The open episode slots of one served env: create, use one at a time, expire, close.

    Args:
        env_id: the registered env to serve.
        max_episodes: slots open at once.
        idle_timeout_s: a slot unused this long is closed (its sandbox with it).
        env_kwargs: arguments every slot's env gets (a client's own override them, except
            the server-only ``sandbox``).
        clock: seconds since some origin (tests pass a fake).
    """

    def __init__(
        self,
        env_id: str,
        *,
        max_episodes: int = 64,
        idle_timeout_s: float = 300.0,
        env_kwargs: dict[str, Any] | None = None,
        clock: Any = time.monotonic,
    ):
        if not isinstance(max_episodes, int) or max_episodes < 1:
            raise ConfigError(f"max_episodes must be a positive int, got {max_episodes!r}")
        if not isinstance(idle_timeout_s, int | float) or idle_timeout_s <= 0:
            raise ConfigError(f"idle_timeout_s must be a positive number, got {idle_timeout_s!r}")
        self.spec = spec(env_id)  # UnknownEnvError with "Did you mean" before anything starts
        self.env_id = env_id
        self.max_episodes = max_episodes
        self.idle_timeout_s = float(idle_timeout_s)
        self.env_kwargs = dict(env_kwargs or {})
        self._clock = clock
        self._slots: dict[str, _Slot] = {}
        self._guard = threading.Lock()
        self._reserved = 0
        self.counts = {"opened": 0, "closed": 0, "expired": 0, "resets": 0, "steps": 0}

    def __len__(self) -> int:
        return len(self._slots)

    def open(self, body: dict[str, Any]) -> dict[str, Any]:
        """Build an env for a new slot; returns what the client needs to know about it."""
        kwargs = body.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise ConfigError(f"'kwargs' must be an object of env arguments, got {kwargs!r:.100}")
        fixed = sorted(SERVER_ONLY_KWARGS & set(kwargs))
        if fixed:
            raise ConfigError(
                f"{fixed} are set by the server, not by clients: start the server with "
                f"`knowlyr env serve {self.env_id} --env-kwargs '{{...}}'`"
            )
        with self._guard:
            if len(self._slots) + self._reserved >= self.max_episodes:
                raise _Refused(
                    503,
                    "Capacity",
                    f"the server holds {self.max_episodes} episodes already (--max-episodes "
                    f"{self.max_episodes}); close some, wait for idle ones to expire "
                    f"({self.idle_timeout_s:g} s), or start it with a larger --max-episodes",
                )
            self._reserved += 1
        try:
            env = make(
                self.env_id,
                max_steps=body.get("max_steps"),
                check_actions=body.get("check_actions"),
                **{**self.env_kwargs, **kwargs},
            )
        except (TypeError, ValueError) as e:  # an argument it does not take, or a bad value
            raise ConfigError(
                f"{self.env_id} refused 'kwargs' {kwargs!r:.200} ({type(e).__name__}: {e}): "
                "check each argument's name and type against the env's documentation"
            ) from None
        finally:
            with self._guard:
                self._reserved -= 1
        slot = _Slot(id=f"ep-{uuid.uuid4().hex[:16]}", env=env, last_used=self._clock())
        with self._guard:
            self._slots[slot.id] = slot
            self.counts["opened"] += 1
        schemas = getattr(env.unwrapped, "tool_schemas", None)
        return {
            "episode_id": slot.id,
            "env_id": self.env_id,
            "domain": env.domain,
            "available_tools": list(env.available_tools),
            "tool_schemas": schemas() if callable(schemas) else [],
            "idle_timeout_s": self.idle_timeout_s,
        }

    @contextmanager
    def use(self, slot_id: str) -> Iterator[AgentEnv]:
        """The slot's env for one call (409 while another call holds it)."""
        with self._guard:
            slot = self._slots.get(slot_id)
        if slot is None:
            raise _Refused(
                404,
                "EpisodeNotFound",
                f"no episode {slot_id} on this server: it was closed, expired after "
                f"{self.idle_timeout_s:g} s idle (--idle-timeout), or the server restarted",
            )
        if not slot.lock.acquire(blocking=False):
            raise _Refused(
                409, "Busy", f"episode {slot_id} is running another call: one call at a time"
            )
        try:
            slot.last_used = self._clock()
            yield slot.env
        finally:
            slot.last_used = self._clock()
            slot.lock.release()

    def close(self, slot_id: str) -> bool:
        with self._guard:
            slot = self._slots.pop(slot_id, None)
        if slot is None:
            return False
        with slot.lock:  # a call still running on it finishes first
            _close_quietly(slot)
        self.counts["closed"] += 1
        return True

    def expire(self) -> list[str]:
        """Close the slots idle for ``idle_timeout_s`` or longer; returns their ids."""
        now = self._clock()
        with self._guard:
            idle = [
                s
                for s in self._slots.values()
                if now - s.last_used >= self.idle_timeout_s and not s.lock.locked()
            ]
            for s in idle:
                del self._slots[s.id]
        for s in idle:
            with s.lock:
                _close_quietly(s)
            log.info("episode %s expired after %.0f s idle", s.id, now - s.last_used)
        self.counts["expired"] += len(idle)
        return [s.id for s in idle]

    def close_all(self) -> None:
        with self._guard:
            slots, self._slots = list(self._slots.values()), {}
        for s in slots:
            _close_quietly(s)

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "env_id": self.env_id,
            "episodes": len(self._slots),
            "max_episodes": self.max_episodes,
            "idle_timeout_s": self.idle_timeout_s,
            **self.counts,
        }


def _close_quietly(slot: _Slot) -> None:
    try:
        slot.env.close()
    except Exception:  # closing must never take the server down
        log.exception("closing episode %s failed", slot.id)


def _default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _timestep(ts: TimeStep) -> dict[str, Any]:
    return {
        "observation": ts.observation,
        "reward": ts.reward,
        "terminated": ts.terminated,
        "truncated": ts.truncated,
        "info": ts.info,
    }


def _task(arg: Any) -> Any:
    """A client's task argument: a tagged Task / TaskInfo model is rebuilt, the rest as sent."""
    if isinstance(arg, dict) and "__model__" in arg:
        from knowlyr.taskset import Task
        from knowlyr.trajectory import TaskInfo

        cls = {"Task": Task, "TaskInfo": TaskInfo}.get(arg["__model__"])
        if cls is None:
            raise ConfigError(f"unknown task model {arg['__model__']!r}: send Task or TaskInfo")
        try:
            return cls.model_validate(arg.get("data") or {})
        except ValueError as e:
            raise ConfigError(f"the task is not a valid {cls.__name__}: {e}") from None
    return arg


def _optional(check: Any) -> Any:
    return lambda v: v is None or check(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# Each call's body fields: (accepts the value, what it takes). RemoteEnv sends exactly these.
_FIELDS: dict[str, dict[str, tuple[Any, str]]] = {
    "open": {
        "kwargs": (_optional(lambda v: isinstance(v, dict)), 'an object such as {"family": "x"}'),
        "max_steps": (
            _optional(lambda v: _is_int(v) and v > 0),
            "a positive whole number, or null for the env's own limit",
        ),
        "check_actions": (
            _optional(lambda v: isinstance(v, bool)),
            "true or false, or null for the env's own setting",
        ),
    },
    "reset": {
        "task": (lambda v: True, ""),
        "seed": (_optional(_is_int), "a whole number, or null"),
        "options": (_optional(lambda v: isinstance(v, dict)), "an object, or null"),
    },
    "step": {"action": (lambda v: True, "")},
    "outcome_if_truncated": {},
}


def _check_fields(call: str, body: dict[str, Any]) -> None:
    """400 naming the first unknown or bad field of a ``call`` body."""
    fields = _FIELDS[call]
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise _Refused(
            400,
            "ConfigError",
            f"unknown field(s) {', '.join(map(repr, unknown))} in the {call} body: it takes "
            f"{', '.join(fields) or 'an empty object'}",
        )
    for name, (ok, takes) in fields.items():
        if name in body and not ok(body[name]):
            raise _Refused(400, "ConfigError", f"{name!r} must be {takes}, got {body[name]!r:.100}")


def new_token() -> str:
    """A fresh bearer token (32 random bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def create_app(
    env_id: str,
    *,
    max_episodes: int = 64,
    idle_timeout_s: float = 300.0,
    token: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
    allowed_hosts: Iterable[str] = (),
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Any:
    """The FastAPI app serving ``env_id`` (see the module docstring for routes and limits).

    Args:
        env_id: the registered env to serve.
        max_episodes: episode slots open at once.
        idle_timeout_s: a slot unused this long is closed.
        token: the bearer token every route but ``/health`` needs (None: none).
        env_kwargs: arguments every slot's env gets.
        host: the address the server is bound to; a request's ``Host`` must name it (a
            loopback one: any loopback name).
        allowed_hosts: other names a request's ``Host`` may give (a proxy's, a DNS name).
        max_body_bytes: the largest request body; a larger one is refused (413) while read.
    """
    import anyio

    if not _is_int(max_body_bytes) or max_body_bytes < 1:
        raise ConfigError(f"max_body_bytes must be a positive int, got {max_body_bytes!r}")
    try:
        guard = HostGuard.for_bind(host, allowed_hosts)
    except ValueError as e:
        raise ConfigError(f"--allowed-host: {e}") from None

    pool = EpisodePool(
        env_id, max_episodes=max_episodes, idle_timeout_s=idle_timeout_s, env_kwargs=env_kwargs
    )
    limiter = anyio.CapacityLimiter(max_episodes + 8)
    ns, name = env_id.split("/", 1)

    async def reaper() -> None:
        interval = min(max(pool.idle_timeout_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            await anyio.to_thread.run_sync(pool.expire)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            await anyio.to_thread.run_sync(pool.close_all)

    app = FastAPI(title=f"knowlyr env server: {env_id}", lifespan=lifespan, docs_url=None)
    app.state.pool = pool

    def answer(data: Any, status: int = 200) -> Response:
        body = orjson.dumps(data, default=_default, option=orjson.OPT_NON_STR_KEYS)
        return Response(body, status_code=status, media_type="application/json")

    def refuse(status: int, kind: str, message: str) -> Response:
        return answer({"error": kind, "message": message}, status)

    def served(namespace: str, env: str) -> None:
        if (namespace, env) != (ns, name):
            raise _Refused(
                404,
                "UnknownEnvError",
                f"this server serves {env_id!r}, not {namespace}/{env!r}: use "
                f"http://HOST:PORT/{env_id}",
            )

    too_large = _Refused(
        413,
        "ConfigError",
        f"request body over the server's limit of {max_body_bytes:,} bytes: send less",
    )

    async def body_of(request: Request, call: str) -> dict[str, Any]:
        """The JSON object of the request, read up to ``max_body_bytes`` and checked."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            raise too_large  # before reading a byte of it
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body_bytes:
                raise too_large  # the rest is never read
            chunks.append(chunk)
        raw = b"".join(chunks)
        try:
            data = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError as e:
            raise _Refused(
                400, "ConfigError", f"request body is not JSON ({e}): send a JSON object"
            ) from None
        if not isinstance(data, dict):
            raise _Refused(
                400,
                "ConfigError",
                f"request body must be a JSON object, got {type(data).__name__}",
            )
        _check_fields(call, data)
        return data

    async def run(fn: Any, *args: Any) -> Response:
        try:
            return answer(await anyio.to_thread.run_sync(fn, *args, limiter=limiter))
        except _Refused as e:
            return refuse(e.status, e.kind, e.message)
        except UnknownEnvError as e:
            return refuse(404, "UnknownEnvError", str(e))
        except (ConfigError, ActionError) as e:
            return refuse(400, type(e).__name__, str(e))
        except BackendUnavailableError as e:
            return refuse(503, "BackendUnavailableError", str(e))
        except Exception as e:  # the env raised: the client records a failed rollout
            log.warning("env %s raised: %s", env_id, traceback.format_exc())
            kind = "" if isinstance(e, KnowlyrError) else f"{type(e).__name__}: "
            return refuse(500, "EnvError", f"{kind}{e}")

    async def authenticate(request: Request, call_next: Any) -> Response:
        if request.url.path != "/health":
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return refuse(
                    401, "Unauthorized", "missing or wrong bearer token (Authorization header)"
                )
        return await call_next(request)

    if token is not None:
        app.middleware("http")(authenticate)
    # added last, so it runs first: a foreign Host / Origin is refused before the token check
    app.add_middleware(
        HostGuardMiddleware,
        guard=guard,
        respond=lambda status, msg: refuse(status, "ConfigError", msg),
    )

    @app.get("/health")
    async def health() -> Response:
        return answer(pool.health())

    @app.get("/{namespace}/{env}")
    async def describe(namespace: str, env: str) -> Response:
        try:
            served(namespace, env)
        except _Refused as e:
            return refuse(e.status, e.kind, e.message)
        s = pool.spec
        return answer({"id": env_id, "max_steps": s.max_steps, "description": s.description})

    @app.post("/{namespace}/{env}/episodes")
    async def open_episode(namespace: str, env: str, request: Request) -> Response:
        try:
            served(namespace, env)
            body = await body_of(request, "open")
        except _Refused as e:
            return refuse(e.status, e.kind, e.message)
        return await run(pool.open, body)

    def reset(slot_id: str, body: dict[str, Any]) -> dict[str, Any]:
        with pool.use(slot_id) as e:
            ts = e.reset(
                task=_task(body.get("task")), seed=body.get("seed"), options=body.get("options")
            )
        pool.counts["resets"] += 1
        return _timestep(ts)

    def step(slot_id: str, body: dict[str, Any]) -> dict[str, Any]:
        if "action" not in body:
            raise ConfigError('a step needs {"action": {"tool": ..., "params": {...}}}')
        with pool.use(slot_id) as e:
            ts = e.step(body["action"])
        pool.counts["steps"] += 1
        return _timestep(ts)

    def truncated_outcome(slot_id: str, body: dict[str, Any]) -> dict[str, Any]:
        with pool.use(slot_id) as e:
            judge = getattr(e.unwrapped, "outcome_if_truncated", None)
            return dict(judge()) if callable(judge) else {}

    calls = {"reset": reset, "step": step, "outcome_if_truncated": truncated_outcome}

    @app.post("/{namespace}/{env}/episodes/{slot_id}/{call}")
    async def call_episode(
        namespace: str, env: str, slot_id: str, call: str, request: Request
    ) -> Response:
        try:
            served(namespace, env)
            fn = calls.get(call)
            if fn is None:
                raise _Refused(404, "NotFound", f"no call {call!r}: use {', '.join(calls)}")
            body = await body_of(request, call)
        except _Refused as e:
            return refuse(e.status, e.kind, e.message)
        return await run(fn, slot_id, body)

    @app.delete("/{namespace}/{env}/episodes/{slot_id}")
    async def close_episode(namespace: str, env: str, slot_id: str) -> Response:
        try:
            served(namespace, env)
        except _Refused as e:
            return refuse(e.status, e.kind, e.message)
        closed = await anyio.to_thread.run_sync(pool.close, slot_id, limiter=limiter)
        return answer({"closed": closed})

    return app


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without a token.

    Raises:
        ConfigError: naming --token / $KNOWLYR_ENV_TOKEN.
    """
    if not token and not is_loopback(host):
        raise ConfigError(
            f"--host {host} is reachable from other machines: leave out --no-token (a token is "
            "generated and printed) or set one with --token or $KNOWLYR_ENV_TOKEN (clients "
            "pass the same one), or bind 127.0.0.1"
        )


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8400,
    max_episodes: int = 64,
    idle_timeout_s: float = 300.0,
    token: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    allowed_hosts: Iterable[str] = (),
    log_level: str = "warning",
) -> None:
    """Serve ``env_id`` on ``host:port`` until interrupted.

    ``token=None`` serves without one (loopback only); ``knowlyr env serve`` passes a
    generated :func:`new_token` unless told ``--no-token``.

    Raises:
        ConfigError: a non-loopback ``host`` without a ``token``; an unknown env id; a
            malformed ``allowed_hosts`` entry.
    """
    import uvicorn

    check_bind(host, token)
    app = create_app(
        env_id,
        max_episodes=max_episodes,
        idle_timeout_s=idle_timeout_s,
        token=token or None,
        env_kwargs=env_kwargs,
        host=host,
        allowed_hosts=allowed_hosts,
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
