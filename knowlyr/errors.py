"""The one exception tree of knowlyr.

Exceptions are for configuration and programming errors. A failed tool call, a crashed
sandbox command or a model that answers nonsense is *data*: it is recorded on the
trajectory as an observation, never raised out of an environment.

::

    KnowlyrError
    ├── ConfigError                 bad parameter, profile or config file
    │   ├── UnknownEnvError         make()/spec() with an id nobody registered
    │   └── LabelError              a results / labels file that cannot be read (file, key, fix)
    ├── ActionError                 an action that is not {"tool": str, "params": dict}
    ├── SandboxError                a sandbox backend failed (not a command inside it)
    │   ├── BackendUnavailableError bubblewrap / Docker API missing (message has the fix)
    │   │   └── EnvServerError      an env server (knowlyr env serve) is unreachable or lost the episode
    │   ├── SandboxTimeoutError     a command ran past its wall-clock limit
    │   └── WorkspacePathError      a path that leaves the sandbox workspace (also a ValueError)
    ├── RecordError                 a log could not be converted (names file, line, reason)
    │   └── UnknownFormatError      no adapter recognised the log
    ├── StoreError                  the store could not read or write
    │   ├── BlobCorruptedError      a blob's content no longer matches its hash
    │   └── NotFoundError           no such trajectory / version / blob
    ├── RewardError                 the reward engine was misconfigured
    │   └── JudgeError              a judge call failed after every retry
    ├── ExportError                 a dataset could not be exported
    ├── TrainError                  a trainer could not be configured or run
    ├── ServeError                  a model server did not start or answer (ends with its log)
    └── BrowserError                the browser env's Chromium did not start, died or stopped answering
"""

from __future__ import annotations

__all__ = [
    "ActionError",
    "BackendUnavailableError",
    "BlobCorruptedError",
    "BrowserError",
    "ConfigError",
    "EnvServerError",
    "ExportError",
    "JudgeError",
    "KnowlyrError",
    "LabelError",
    "NotFoundError",
    "RecordError",
    "RewardError",
    "SandboxError",
    "SandboxTimeoutError",
    "ServeError",
    "StoreError",
    "TrainError",
    "UnknownEnvError",
    "UnknownFormatError",
    "WorkspacePathError",
    "first_error",
]


class KnowlyrError(Exception):
    """Base class of every error knowlyr raises on purpose."""


class ConfigError(KnowlyrError, ValueError):
    """A parameter, profile or config file is invalid; the message names it and the fix."""


class UnknownEnvError(ConfigError, KeyError):
    """No environment is registered under the requested id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class LabelError(ConfigError):
    """A results or labels file (an evaluation's verdicts) could not be read.

    Attributes:
        path: the file.
        key: the key (or ``line N``) that is wrong, when one is.
        reason: what is wrong and how to fix it.
    """

    def __init__(self, reason: str, *, path: str | None = None, key: str | None = None):
        self.reason = reason
        self.path = path
        self.key = key
        where = path or "<input>"
        if key is not None:
            where = f"{where}: {key}"
        super().__init__(f"{where}: {reason}")


class ActionError(KnowlyrError, ValueError):
    """An action is malformed (not ``{"tool": str, "params": dict}``)."""


class SandboxError(KnowlyrError):
    """A sandbox backend failed to create, run or tear down."""


class BackendUnavailableError(SandboxError):
    """The sandbox backend is not installed or not reachable; the message says how to fix it."""


class EnvServerError(BackendUnavailableError):
    """An env server (``knowlyr env serve``) cannot be reached, stopped answering mid-call, or
    no longer holds the episode. Not a bad rollout: ``collect`` raises it, so the task that ran
    the rollout fails and is retried.

    Attributes:
        expired: the server answered that it holds no such episode (expired while idle, or
            the server restarted).
    """

    def __init__(self, message: str, *, expired: bool = False):
        super().__init__(message)
        self.expired = expired


class SandboxTimeoutError(SandboxError):
    """A sandbox operation ran past its wall-clock limit."""


class WorkspacePathError(SandboxError, ValueError):
    """A file path points outside the sandbox workspace (``..``, an absolute path, a symlink)."""


class RecordError(KnowlyrError):
    """A log could not be converted into a trajectory.

    Attributes:
        path: the file the record came from.
        line: 1-based line number for line-oriented formats (JSONL), else ``None``.
        reason: what is wrong, in words a user can act on.
    """

    def __init__(self, reason: str, *, path: str | None = None, line: int | None = None):
        self.reason = reason
        self.path = path
        self.line = line
        where = path or "<input>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {reason}")


class UnknownFormatError(RecordError):
    """No adapter recognised the log's format."""


class StoreError(KnowlyrError):
    """The store could not be read or written."""


class BlobCorruptedError(StoreError):
    """A blob's bytes no longer hash to its address."""


class NotFoundError(StoreError, KeyError):
    """A trajectory, table version or blob does not exist."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RewardError(KnowlyrError):
    """The reward engine is misconfigured."""


class JudgeError(RewardError):
    """An LLM judge call failed after every retry."""


class ExportError(KnowlyrError):
    """A dataset could not be exported."""


class TrainError(KnowlyrError):
    """A trainer could not be configured or run."""


class ServeError(KnowlyrError):
    """A model server did not start or become healthy; the message ends with its log tail."""


class BrowserError(KnowlyrError):
    """The browser env's Chromium did not start, exited, or stopped answering the DevTools
    protocol (inside an episode this becomes an observation, not an exception)."""


def first_error(e: BaseException) -> str:
    """The first line of an error, for a message that names what was wrong: a pydantic
    ``ValidationError``'s first failing field and why (``task.task_id: Field required``)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or '<root>'}: {first['msg']}"
    return str(e).splitlines()[0] if str(e) else type(e).__name__
