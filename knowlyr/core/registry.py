"""The environment registry: ``register(id, entry_point, **defaults)``, ``make``, ``spec``, ``list_envs``.

Ids look like ``namespace/name`` (``knowlyr/sandbox``, ``my-project/my-env``). An entry point
is a callable returning an :class:`~knowlyr.core.env.AgentEnv` or a ``"module:Class"`` string
that is imported on first ``make``.

Example:
    >>> register("my-project/my-env", "my_project.envs:MyEnv", max_steps=20)  # doctest: +SKIP
    >>> env = make("my-project/my-env", difficulty="hard")  # doctest: +SKIP
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from knowlyr.core.env import AgentEnv
from knowlyr.errors import ConfigError, UnknownEnvError

__all__ = ["EnvSpec", "list_envs", "make", "register", "registry", "spec"]

_ID = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


@dataclass
class EnvSpec:
    """How to build an environment; round-trips through JSON when the entry point is a string.

    Attributes:
        id: ``namespace/name``.
        entry_point: ``"module:Class"`` or a callable.
        kwargs: defaults passed to the entry point (``make`` kwargs override them).
        max_steps: if set, ``make`` wraps the env in a ``MaxStepsWrapper``.
        check_actions: if true, ``make`` wraps the env in an ``ActionCheckWrapper``.
        description: one line shown by ``knowlyr envs``.
    """

    id: str
    entry_point: str | Callable[..., AgentEnv]
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    check_actions: bool = True
    description: str = ""

    @property
    def namespace(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.id.split("/", 1)[1]

    def to_json(self) -> str:
        if not isinstance(self.entry_point, str):
            raise ConfigError(
                f"EnvSpec {self.id!r} has a callable entry point and cannot be serialised; "
                "register it as a 'module:Class' string instead"
            )
        return orjson.dumps(asdict(self)).decode()

    @classmethod
    def from_json(cls, data: str | bytes) -> EnvSpec:
        return cls(**orjson.loads(data))

    def load(self) -> Callable[..., AgentEnv]:
        if callable(self.entry_point):
            return self.entry_point
        mod_name, _, attr = self.entry_point.partition(":")
        if not attr:
            raise ConfigError(
                f"entry_point for {self.id!r} must look like 'module:Class', got {self.entry_point!r}"
            )
        try:
            module = importlib.import_module(mod_name)
        except ImportError as e:
            raise ConfigError(
                f"entry_point {self.entry_point!r} of {self.id!r} cannot be imported: {e}"
            ) from e
        try:
            return getattr(module, attr)
        except AttributeError as e:
            raise ConfigError(
                f"module {mod_name!r} has no {attr!r} (entry_point of {self.id!r})"
            ) from e


registry: dict[str, EnvSpec] = {}


def register(
    id: str,
    entry_point: str | Callable[..., AgentEnv],
    *,
    max_steps: int | None = None,
    check_actions: bool = True,
    description: str = "",
    override: bool = False,
    **kwargs: Any,
) -> EnvSpec:
    """Register an environment under ``id``; extra kwargs become its default arguments.

    Raises:
        ConfigError: bad id, or the id is taken and ``override`` is false.
    """
    if not isinstance(id, str) or not _ID.match(id):
        raise ConfigError(f"env id must look like 'namespace/name', got {id!r}")
    if not (callable(entry_point) or isinstance(entry_point, str)):
        raise ConfigError(f"entry_point must be a callable or 'module:Class', got {entry_point!r}")
    if max_steps is not None and (not isinstance(max_steps, int) or max_steps <= 0):
        raise ConfigError(f"max_steps must be a positive int, got {max_steps!r}")
    if id in registry and not override:
        old = registry[id]
        if old.entry_point == entry_point and old.kwargs == kwargs:
            return old  # re-registering the same thing (module re-import) is harmless
        raise ConfigError(f"env id {id!r} is already registered; pass override=True to replace it")
    s = EnvSpec(id, entry_point, dict(kwargs), max_steps, check_actions, description)
    registry[id] = s
    return s


def spec(id: str) -> EnvSpec:
    """The :class:`EnvSpec` registered under ``id``.

    An env server URL (``http://HOST:PORT/NAMESPACE/NAME``) gives the spec that server
    reports (:func:`knowlyr.core.remote.remote_spec`).

    Raises:
        UnknownEnvError: with "Did you mean ...?" when a registered id is close.
    """
    from knowlyr.core.remote import is_remote, remote_spec

    if is_remote(id):
        return remote_spec(id)
    try:
        return registry[id]
    except KeyError:
        close = _close_ids(id)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        known = ", ".join(sorted(registry)) or "none"
        raise UnknownEnvError(
            f"no environment registered as {id!r}.{hint} Registered: {known}"
        ) from None


def _close_ids(id: str) -> list[str]:
    """Registered ids close to ``id``, as a whole or by name alone (a missing or mistyped
    namespace); ids that share only the namespace are not close."""
    close = difflib.get_close_matches(id, registry, n=3, cutoff=0.75)
    by_name: dict[str, list[str]] = {}
    for known in registry:
        by_name.setdefault(known.split("/", 1)[1], []).append(known)
    for name in difflib.get_close_matches(id.rsplit("/", 1)[-1], by_name, n=3, cutoff=0.75):
        close += [k for k in by_name[name] if k not in close]
    return close[:3]


def make(
    id: str, *, max_steps: int | None = None, check_actions: bool | None = None, **kwargs: Any
) -> AgentEnv:
    """Build the environment registered as ``id`` (kwargs override the registered defaults).

    ``id`` may also be an env server URL, ``http://HOST:PORT/NAMESPACE/NAME`` (``knowlyr env
    serve``): the result is a :class:`~knowlyr.core.remote.RemoteEnv` whose episodes run on
    that server, which applies ``max_steps``, ``check_actions`` and ``kwargs`` itself.
    """
    from knowlyr.core.remote import RemoteEnv, is_remote
    from knowlyr.core.wrappers import ActionCheckWrapper, MaxStepsWrapper

    if is_remote(id):
        return RemoteEnv(id, max_steps=max_steps, check_actions=check_actions, **kwargs)

    s = spec(id)
    env = s.load()(**{**s.kwargs, **kwargs})
    if not isinstance(env, AgentEnv):
        raise ConfigError(f"entry point of {id!r} returned {type(env).__name__}, not an AgentEnv")
    if check_actions if check_actions is not None else s.check_actions:
        env = ActionCheckWrapper(env)
    steps = max_steps if max_steps is not None else s.max_steps
    if steps is not None:
        env = MaxStepsWrapper(env, steps)
    return env


def list_envs(namespace: str | None = None) -> list[str]:
    """Registered ids, sorted; only those in ``namespace`` when given."""
    return sorted(i for i in registry if namespace is None or i.split("/", 1)[0] == namespace)
