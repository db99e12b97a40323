"""``RemoteEnv``: an :class:`~knowlyr.core.env.AgentEnv` served by ``knowlyr env serve``.

``make("http://HOST:PORT/ENV_ID")`` returns one. Each client holds one episode slot on the
server (its own env instance there, and so its own sandbox) from construction to
:meth:`RemoteEnv.close`, across any number of resets; ``reset`` and ``step`` are one HTTP
request each and return the served env's :class:`~knowlyr.core.env.TimeStep`. Wrappers,
:class:`~knowlyr.core.wrappers.RecorderWrapper` and :func:`knowlyr.rollout.collect` take it
like any env: the server applies the registered ``max_steps`` and action check (pass
``max_steps=`` / ``check_actions=`` to ``make`` to change them there).

Errors:

- the server is unreachable at construction: retried for ``connect_timeout_s`` (a server
  being restarted), then :class:`~knowlyr.errors.EnvServerError`;
- the server dies or stops answering during a call, or the episode expired (left idle past
  the server's ``--idle-timeout``) mid-episode: :class:`~knowlyr.errors.EnvServerError`,
  which :func:`knowlyr.rollout.run_episode` raises rather than recording it, so a Prefect
  task that runs the rollout fails and is retried. A reset after the episode expired gets a
  new one transparently;
- a bad env id, task or argument: :class:`~knowlyr.errors.ConfigError` (the server's
  message); a missing or wrong token: ``ConfigError`` naming ``token=`` / ``$KNOWLYR_ENV_TOKEN``;
- the served env raised inside ``step``: :class:`~knowlyr.errors.KnowlyrError` with the
  server's message (a bad rollout, recorded as failed by ``collect``).

Example:
    >>> env = make("http://127.0.0.1:8400/knowlyr/conversation", family="order_status")  # doctest: +SKIP
    >>> env.reset(seed=0).observation  # doctest: +SKIP
    'What is the status of order 7KQ2M?'
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import orjson

from knowlyr.core.env import Action, AgentEnv, TimeStep, parse_action
from knowlyr.errors import (
    BackendUnavailableError,
    ConfigError,
    EnvServerError,
    KnowlyrError,
    UnknownEnvError,
)

__all__ = ["TOKEN_ENV", "RemoteEnv", "is_remote", "remote_spec", "split_url"]

TOKEN_ENV = "KNOWLYR_ENV_TOKEN"


def is_remote(env_id: str) -> bool:
    """Whether ``env_id`` is an env server URL rather than a registered id."""
    return isinstance(env_id, str) and env_id.startswith(("http://", "https://"))


def split_url(url: str) -> tuple[str, str]:
    """``(base URL, env id)`` of ``http://HOST:PORT[/PREFIX]/NAMESPACE/NAME``.

    Raises:
        ConfigError: the URL does not end in an env id.
    """
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if parts.scheme not in ("http", "https") or not parts.netloc or len(segments) < 2:
        raise ConfigError(
            f"env server URL must look like http://HOST:PORT/NAMESPACE/NAME "
            f"(e.g. http://127.0.0.1:8400/knowlyr/conversation), got {url!r}"
        )
    prefix = "/".join(segments[:-2])
    base = f"{parts.scheme}://{parts.netloc}" + (f"/{prefix}" if prefix else "")
    return base, "/".join(segments[-2:])


_CLIENTS: dict[str, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(base_url: str) -> Any:
    """One pooled ``httpx.Client`` per server and process, shared by every RemoteEnv (and
    thread) that talks to it: a client is costly to build (its TLS context) and keeps
    connections alive between calls."""
    import httpx

    with _CLIENTS_LOCK:
        client = _CLIENTS.get(base_url)
        if client is None or client.is_closed:
            limits = httpx.Limits(max_connections=512, max_keepalive_connections=128)
            client = _CLIENTS[base_url] = httpx.Client(base_url=base_url, limits=limits)
        return client


def _json(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def _dumps(body: Any) -> bytes:
    return orjson.dumps(body, default=_json, option=orjson.OPT_NON_STR_KEYS)


def _task_arg(task: Any) -> Any:
    """A task as JSON: ids, indices and dicts as they are; a Task / TaskInfo model whole,
    tagged with its class, so the server rebuilds it (tasks that are in no suite work too)."""
    if task is None or isinstance(task, str | int | dict):
        return task
    if hasattr(task, "model_dump"):
        return {"__model__": type(task).__name__, "data": task.model_dump(mode="json")}
    raise ConfigError(
        f"a remote env's task must be a Task, TaskInfo, task id, index or dict, got {task!r:.100}"
    )


class RemoteEnv(AgentEnv):
    """An env served over HTTP by ``knowlyr env serve`` (see the module docstring).

    Args:
        url: ``http://HOST:PORT/NAMESPACE/NAME``.
        max_steps: the server-side step limit (default: the registered one).
        check_actions: the server-side action check (default: the registered setting).
        token: the server's bearer token (default ``$KNOWLYR_ENV_TOKEN``).
        timeout_s: how long one call may take (a sandboxed test run, a browser page).
        connect_timeout_s: how long to keep trying to reach the server to open an episode.
        **kwargs: the env's own arguments (``family=``, ``split=``...), as JSON.
    """

    def __init__(
        self,
        url: str,
        *,
        max_steps: int | None = None,
        check_actions: bool | None = None,
        token: str | None = None,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 15.0,
        **kwargs: Any,
    ):
        import httpx

        self.url = url
        self.base_url, self.env_id = split_url(url)
        self.connect_timeout_s = connect_timeout_s
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._http = _client(self.base_url)
        self._headers = headers
        self._timeout = httpx.Timeout(timeout_s, connect=min(5.0, timeout_s))
        self._create_body = {
            "kwargs": kwargs,
            "max_steps": max_steps,
            "check_actions": check_actions,
        }
        self.episode_id: str | None = None
        self._schemas: list[dict[str, Any]] = []
        self.available_tools = []
        self._open()

    # -- the protocol ---------------------------------------------------------------------

    def reset(
        self, *, task: Any = None, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> TimeStep:
        body = {"task": _task_arg(task), "seed": seed, "options": options}
        if self.episode_id is None:
            self._open()
        try:
            data = self._call("reset", body)
        except EnvServerError as e:
            if not e.expired:
                raise
            self._open()  # left idle too long between episodes: a new slot, same arguments
            data = self._call("reset", body)
        return self._timestep(data)

    def step(self, action: Action) -> TimeStep:
        if self.episode_id is None:
            raise EnvServerError(f"{self!r} is closed; make a new env to run more episodes")
        return self._timestep(self._call("step", {"action": action}))

    def parse_action(self, action: Any) -> tuple[str, dict[str, Any]]:
        """The action's shape only: the served env knows its tools and their aliases."""
        return parse_action(action, None)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The served env's tool schemas (OpenAI function format; empty if it has none)."""
        return list(self._schemas)

    def outcome_if_truncated(self) -> dict[str, Any]:
        """The served env's judgement of an episode cut off now (see ``collect``)."""
        return self._call("outcome_if_truncated", {})

    def close(self) -> None:
        """Give the episode slot back (its sandbox is closed on the server). Idempotent; a
        server that is gone already reclaimed it."""
        eid, self.episode_id = self.episode_id, None
        if eid is not None:
            import httpx

            with contextlib.suppress(httpx.HTTPError):
                self._http.delete(
                    f"/{self.env_id}/episodes/{eid}", headers=self._headers, timeout=self._timeout
                )

    def __repr__(self) -> str:
        return f"<RemoteEnv {self.url} episode={self.episode_id} domain={self.domain!r}>"

    # -- transport ------------------------------------------------------------------------

    def _open(self) -> None:
        """Open an episode slot, waiting up to ``connect_timeout_s`` for the server."""
        import httpx

        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            try:
                r = self._http.post(
                    f"/{self.env_id}/episodes",
                    content=_dumps(self._create_body),
                    headers=self._headers,
                    timeout=self._timeout,
                )
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                if time.monotonic() >= deadline:
                    raise EnvServerError(
                        f"no env server answered at {self.base_url} for "
                        f"{self.connect_timeout_s:g} s ({e}); start one with "
                        f"`knowlyr env serve {self.env_id} --port PORT`"
                    ) from None
                time.sleep(0.2)
            except httpx.HTTPError as e:
                raise EnvServerError(f"env server {self.base_url}: {e}") from None
        info = self._decode(r, "create")
        self.episode_id = info["episode_id"]
        self.domain = info.get("domain", "generic")  # type: ignore[misc]
        self.available_tools = list(info.get("available_tools") or [])
        self._schemas = list(info.get("tool_schemas") or [])

    def _call(self, what: str, body: dict[str, Any]) -> Any:
        import httpx

        try:
            r = self._http.post(
                f"/{self.env_id}/episodes/{self.episode_id}/{what}",
                content=_dumps(body),
                headers=self._headers,
                timeout=self._timeout,
            )
        except httpx.HTTPError as e:
            raise EnvServerError(
                f"env server {self.base_url} stopped answering during {what} of episode "
                f"{self.episode_id} ({type(e).__name__}: {e}); the episode is lost: run it "
                "again (a flow's task retry does)"
            ) from None
        return self._decode(r, what)

    def _decode(self, r: Any, what: str) -> Any:
        try:
            data = orjson.loads(r.content) if r.content else {}
        except orjson.JSONDecodeError:
            data = {}
        if r.status_code < 400:
            return data
        kind = data.get("error", "") if isinstance(data, dict) else ""
        msg = data.get("message") if isinstance(data, dict) else None
        msg = msg or f"HTTP {r.status_code}: {r.text[:300]}"
        where = f"env server {self.base_url} ({what})"
        if r.status_code == 401:
            raise ConfigError(
                f"{where}: {msg}; pass token= to make() or set ${TOKEN_ENV} to the token the "
                "server was started with"
            )
        if kind == "UnknownEnvError":
            raise UnknownEnvError(f"{where}: {msg}")
        if kind in ("ConfigError", "ActionError") or r.status_code in (400, 422):
            raise ConfigError(f"{where}: {msg}")
        if kind == "BackendUnavailableError":
            raise BackendUnavailableError(f"{where}: {msg}")
        if kind == "EnvError":
            raise KnowlyrError(f"{where}: the served env raised {msg}")
        raise EnvServerError(f"{where}: {msg}", expired=kind == "EpisodeNotFound")

    @staticmethod
    def _timestep(data: dict[str, Any]) -> TimeStep:
        return TimeStep(
            observation=data["observation"],
            reward=float(data.get("reward", 0.0)),
            terminated=bool(data.get("terminated")),
            truncated=bool(data.get("truncated")),
            info=data.get("info") or {},
        )


def remote_spec(
    url: str, *, token: str | None = None, timeout_s: float = 30.0, connect_timeout_s: float = 15.0
) -> Any:
    """The :class:`~knowlyr.core.registry.EnvSpec` a server reports for its env (its
    registered ``max_steps`` and description), waiting up to ``connect_timeout_s`` for the
    server as :class:`RemoteEnv` does; building it makes a :class:`RemoteEnv`."""
    import functools

    import httpx

    from knowlyr.core.registry import EnvSpec

    base, env_id = split_url(url)
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + connect_timeout_s
    while True:
        try:
            r = httpx.get(f"{base}/{env_id}", headers=headers, timeout=timeout_s)
            break
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            if time.monotonic() >= deadline:
                raise EnvServerError(
                    f"no env server answered at {base} for {connect_timeout_s:g} s ({e}); "
                    f"start one with `knowlyr env serve {env_id} --port PORT`"
                ) from None
            time.sleep(0.2)
        except httpx.HTTPError as e:
            raise EnvServerError(f"env server {base}: {type(e).__name__}: {e}") from None
    if r.status_code == 401:
        raise ConfigError(
            f"env server {base}: it needs a bearer token; pass token= or set ${TOKEN_ENV}"
        )
    if r.status_code == 404:
        raise UnknownEnvError(f"env server {base}: {orjson.loads(r.content).get('message')}")
    if r.status_code >= 400:
        raise EnvServerError(f"env server {base}: HTTP {r.status_code}: {r.text[:300]}")
    info = orjson.loads(r.content)
    return EnvSpec(
        id=url,
        entry_point=functools.partial(RemoteEnv, url, token=token),
        max_steps=info.get("max_steps"),
        check_actions=False,
        description=info.get("description", ""),
    )
