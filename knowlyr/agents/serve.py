"""Serve a checkpoint behind an OpenAI-compatible HTTP server, so collection reaches it over HTTP.

:func:`serve_checkpoint` starts ``transformers serve`` (CPU or GPU) or vLLM (GPU) as a child
process on a loopback port, waits until it answers ``/health``, yields a :class:`ServedModel`
and always stops the server's whole process group. ``knowlyr serve CHECKPOINT`` does the same
from the command line and prints the policy spec to collect with: ``openai:<folder>@<url>``,
an :class:`~knowlyr.agents.OpenAIAgent` that prompts the checkpoint as it was trained (its saved
system prompt and tools, past calls sent as text) and so acts like in-process inference
(``AgentInference.from_pretrained(folder).create_agent()``) with greedy decoding.

Example:
    >>> from openai import OpenAI
    >>> from knowlyr.agents.serve import serve_checkpoint
    >>> with serve_checkpoint("runs/sft/final") as served:  # doctest: +SKIP
    ...     client = OpenAI(base_url=served.base_url, api_key="none")
    ...     reply = client.chat.completions.create(model=served.model, messages=[...], tools=[...])
    >>> served.policy  # doctest: +SKIP
    'openai:/abs/runs/sft/final@http://127.0.0.1:40123/v1'

What ``transformers serve`` (transformers 5.23) does with a local checkpoint, checked here on
CPU with the tiny Qwen2 checkpoints of :mod:`knowlyr.train.models`:

- ``transformers serve PATH --host H --port P --device cpu|auto --dtype auto`` preloads the
  folder (``PATH`` is the "force model"; processor via ``AutoProcessor``, model via the class in
  ``config.json``) *before* uvicorn starts, so ``GET /health`` -> ``{"status": "ok"}`` means
  ready. A tiny model is healthy ~3-4 s after the start (mostly imports); SIGTERM shuts it
  down gracefully in ~2 s. It needs fastapi, uvicorn, pydantic and openai
  (``pip install 'knowlyr-gym[serve]'``, i.e. ``transformers[serving]``) and no network for a
  local folder.
- The request's ``model`` must be exactly ``PATH`` as given on the command line (anything
  else: HTTP 400 "Server is pinned to ..."); replies report it as ``PATH@main``. A ``PATH``
  containing ``@`` is misread as ``repo@revision``. ``GET /v1/models`` lists only models in the
  Hugging Face hub cache, never the served folder (HTTP 500 when there is no cache dir).
- ``POST /v1/chat/completions`` (streaming and not) applies the folder's chat template with
  the request's ``tools``. For ``model_type`` qwen2/qwen3 (our checkpoints) it parses the
  generation with a built-in Qwen response template: ``<tool_call>{json}</tool_call>`` blocks
  become ``message.tool_calls`` (``arguments`` a JSON string), the text before them is
  ``message.content`` (the thought), ``finish_reason`` is ``"tool_calls"``; a reply without a
  tool call is plain ``content``. A tool call whose JSON does not parse (malformed, or cut by
  ``max_tokens``) makes the non-streaming request fail with **HTTP 500** (the text is lost;
  streaming drops the tail or breaks the connection): a client must count that as an invalid
  action (not retry it: greedy decoding fails the same way) and give ``max_tokens`` room; the
  next request on a pooled connection may then fail to connect once (retry that).
  :class:`~knowlyr.agents.OpenAIAgent` does both: the plain-text 500 becomes an invalid-action
  step, the connection error is retried. For other
  model types (e.g. llama) nothing is parsed: ``content`` is the raw generation decoded with
  ``skip_special_tokens=True``, which keeps our ``<tool_call>`` tags (they are added, not
  special, tokens), and :func:`knowlyr.agents.action_format.parse_action_text` turns it into
  the action.
- In the request, an assistant message's ``content`` is dropped when it has ``tool_calls``, and
  a tool message keeps only ``role``, ``content`` and ``tool_call_id``. To show the model
  exactly the text it was trained on (thought included), send a past assistant turn as plain
  ``content = render_action(action, thought=...)``: the chat template renders that
  byte-identically to the ``tool_calls`` form. :class:`~knowlyr.agents.OpenAIAgent` does so
  for a served knowlyr checkpoint (``calls_as_text``): without it the tiny checkpoint of the
  tests, which writes a thought before each call, fell from 5/10 held-out successes in-process
  to 0/10 served (its second turns became unparseable tool calls); with it both give the same
  actions (7/16 successes each way, ``tests/agents/test_serve.py``).
- ``temperature=0`` means greedy; without it the checkpoint's generation config decides.
  ``max_tokens`` defaults to 1024 when the generation config says less.
- Requests are served one at a time by default (one generate thread). ``--continuous-batching``
  (paged attention) works on CPU too and batches concurrent requests: with the tiny model here
  ~2.5 -> 26 -> 93 requests/s at 1 / 8 / 32 in flight, against 5.5 -> 9 -> 13 without it.

vLLM (``backend="vllm"``) runs ``python -m vllm.entrypoints.openai.api_server`` with the hermes
tool-call parser (Qwen-style ``<tool_call>`` JSON) and the folder path as the served model name;
it needs the vllm package and a CUDA GPU. It was not run here (no GPU machine with vllm).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowlyr.agents.action_format import TOOL_CALL_END, TOOL_CALL_START, parse_action_text
from knowlyr.agents.batching import resolve_device, resolve_dtype
from knowlyr.errors import ConfigError, ServeError

__all__ = [
    "BACKENDS",
    "ServeError",
    "ServedModel",
    "free_port",
    "reply_action",
    "serve_checkpoint",
    "server_command",
    "start_server",
    "stop_server",
]

BACKENDS = ("transformers", "vllm")
_LOOPBACK = "127.0.0.1"


@dataclass
class ServedModel:
    """A running OpenAI-compatible server for one checkpoint.

    Attributes:
        base_url: what to pass as the OpenAI SDK's ``base_url`` (``http://HOST:PORT/v1``).
        model: the ``model`` name requests must carry (the checkpoint's absolute path).
        process: the server process (leader of its own process group).
        backend: ``"transformers"`` or ``"vllm"``.
        log_path: the server's combined stdout and stderr.
    """

    base_url: str
    model: str
    process: subprocess.Popen
    backend: str = "transformers"
    log_path: Path | None = None
    _own_log: bool = field(default=False, repr=False)

    @property
    def policy(self) -> str:
        """The policy spec for collection: ``openai:<model>@<base_url>``."""
        return f"openai:{self.model}@{self.base_url}"

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the server's log ("" when there is none)."""
        return _tail(self.log_path, lines)


def free_port(host: str = _LOOPBACK) -> int:
    """A TCP port on ``host`` that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _checkpoint(path: str | os.PathLike[str]) -> Path:
    p = Path(path).expanduser().resolve()
    if not (p / "config.json").is_file():
        raise ConfigError(
            f"{p} is not a model folder (no config.json); pass a folder written by save_pretrained"
        )
    return p


def server_command(
    path: str | os.PathLike[str],
    *,
    host: str = _LOOPBACK,
    port: int = 8000,
    backend: str = "transformers",
    device: str = "auto",
    dtype: str = "auto",
    continuous_batching: bool = False,
) -> list[str]:
    """The command line that serves checkpoint ``path`` (checked, not started).

    Args:
        path: a local checkpoint folder (``config.json``, weights, tokenizer, chat template).
        host, port: where the server listens.
        backend: ``"transformers"`` (``transformers serve``, CPU or GPU) or ``"vllm"`` (GPU).
        device: ``transformers serve --device`` (``auto``, ``cpu``, ``cuda:0``...).
        dtype: model dtype; ``auto`` is resolved here as :class:`~knowlyr.agents.AgentInference`
            resolves it (bf16 on a GPU that supports it, fp16 on an older GPU, fp32 on the CPU:
            :func:`~knowlyr.agents.batching.resolve_dtype`), whatever the checkpoint was saved
            in; a name (``bfloat16``, ``float16``, ``float32``) is passed as given.
        continuous_batching: batch concurrent requests (``transformers serve
            --continuous-batching``; vLLM always does).
    """
    ckpt = _checkpoint(path)
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not 0 < port < 65536:
        raise ConfigError(f"port must be in 1..65535, got {port}")
    if dtype == "auto":
        where = resolve_device(device if backend == "transformers" else "auto")
        dtype = str(resolve_dtype("auto", where)).removeprefix("torch.")
    if backend == "transformers":
        missing = [m for m in ("transformers", "fastapi", "uvicorn", "openai") if not _has(m)]
        if missing:
            raise ConfigError(
                f"transformers serve needs {', '.join(missing)}: pip install 'knowlyr-gym[serve]'"
            )
        if "@" in str(ckpt):
            raise ConfigError(
                f"transformers serve reads '@' in {ckpt} as a revision; move the checkpoint to "
                "a path without '@'"
            )
        cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(ckpt)]
        cmd += ["--host", host, "--port", str(port), "--device", device, "--dtype", dtype]
        if continuous_batching:
            cmd.append("--continuous-batching")
        return cmd
    _check_vllm()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(ckpt)]
    cmd += ["--served-model-name", str(ckpt), "--host", host, "--port", str(port)]
    cmd += ["--dtype", dtype, "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    return cmd


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _check_vllm() -> None:
    if not _has("vllm"):
        raise ConfigError(
            "backend 'vllm' needs the vllm package on a machine with an NVIDIA GPU: "
            "pip install vllm (or use backend 'transformers', which also runs on CPU)"
        )
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            "backend 'vllm' needs a CUDA GPU and torch sees none here; "
            "use backend 'transformers' (CPU) instead"
        )


def _parent_death_signal() -> Callable[[], None] | None:
    """Linux: a child hook so the server gets SIGTERM if the thread that started it dies."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl  # loaded before the fork
    except (OSError, AttributeError):
        return None

    def hook() -> None:  # pragma: no cover - runs in the child
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG

    return hook


def start_server(
    path: str | os.PathLike[str],
    *,
    port: int | None = None,
    host: str = _LOOPBACK,
    backend: str = "transformers",
    device: str = "auto",
    dtype: str = "auto",
    continuous_batching: bool = False,
    timeout: float = 300.0,
    log_path: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
) -> ServedModel:
    """Start a server for ``path`` and return once it is healthy; prefer :func:`serve_checkpoint`.

    The server runs in its own process group (stop it with :func:`stop_server`) and, on Linux,
    receives SIGTERM if the thread that started it exits. ``HF_HUB_OFFLINE`` and
    ``TRANSFORMERS_OFFLINE`` default to 1 in its environment: a local folder needs no network.

    Args:
        path: a local checkpoint folder.
        port: the port to listen on; ``None`` picks a free one.
        host: the address to listen on (requests go to 127.0.0.1 when it is ``0.0.0.0``).
        backend, device, dtype, continuous_batching: see :func:`server_command`.
        timeout: seconds to wait for ``/health``; the server is stopped if it is not healthy
            by then.
        log_path: where the server's output goes (default: a temporary file, removed on stop).
        env: extra environment variables for the server.

    Raises:
        ConfigError: a bad argument, a busy port, or a backend that cannot run here.
        ServeError: the server exited or did not become healthy (with its log tail).
    """
    if timeout <= 0:
        raise ConfigError(f"timeout must be positive, got {timeout}")
    if port is not None and _port_in_use(host, port):
        raise ConfigError(
            f"port {port} on {host} is in use; pick another or omit it for a free one"
        )
    connect = _LOOPBACK if host in ("0.0.0.0", "", "::") else host
    attempts = 3 if port is None else 1  # a picked port can be taken before the server binds it
    for attempt in range(attempts):
        use_port = port if port is not None else free_port(host)
        cmd = server_command(
            path,
            host=host,
            port=use_port,
            backend=backend,
            device=device,
            dtype=dtype,
            continuous_batching=continuous_batching,
        )
        own_log = log_path is None
        if own_log:
            fd, name = tempfile.mkstemp(prefix="knowlyr-serve-", suffix=".log")
            os.close(fd)
            log = Path(name)
        else:
            log = Path(log_path)
            log.parent.mkdir(parents=True, exist_ok=True)
        child_env = {**os.environ, **(env or {})}
        for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONUNBUFFERED"):
            child_env.setdefault(key, "1")
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env,
                start_new_session=True,
                preexec_fn=_parent_death_signal(),
            )
        served = ServedModel(
            base_url=f"http://{connect}:{use_port}/v1",
            model=str(_checkpoint(path)),
            process=proc,
            backend=backend,
            log_path=log,
            _own_log=own_log,
        )
        try:
            _wait_healthy(served, f"http://{connect}:{use_port}/health", timeout)
            return served
        except BaseException as e:  # also Ctrl-C while waiting: never leave it running
            tail = served.log_tail()
            stop_server(served)
            if (
                isinstance(e, ServeError)
                and attempt + 1 < attempts
                and "address already in use" in tail.lower()
            ):
                continue
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _wait_healthy(served: ServedModel, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        code = served.process.poll()
        if code is not None:
            raise ServeError(
                f"the {served.backend} server for {served.model} exited with code {code} "
                f"before it was healthy; its log ({served.log_path}) ends with:\n"
                f"{served.log_tail()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200 and served.process.poll() is None:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise ServeError(
                f"the {served.backend} server for {served.model} was not healthy at {url} "
                f"after {timeout:g} s; its log ({served.log_path}) ends with:\n"
                f"{served.log_tail()}"
            )
        time.sleep(0.1)


def _exited(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` s for child ``pid`` to exit *without reaping it*: while the zombie
    stays, its pid (the process group id) cannot be reused, so the group kill below is safe."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # already reaped
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def stop_server(served: ServedModel, *, timeout: float = 15.0) -> int | None:
    """Stop the server's whole process group: SIGTERM, then SIGKILL after ``timeout`` seconds.

    Returns the server's exit code. Safe to call twice. A temporary log is removed.
    """
    proc = served.process
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        if not _exited(proc.pid, timeout):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            _exited(proc.pid, timeout)
        # the leader is gone but not reaped yet: what is left of its group (vLLM workers) goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if served._own_log and served.log_path is not None:
        served.log_path.unlink(missing_ok=True)
    return proc.returncode


@contextlib.contextmanager
def serve_checkpoint(
    path: str | os.PathLike[str],
    port: int | None = None,
    *,
    host: str = _LOOPBACK,
    backend: str = "transformers",
    device: str = "auto",
    dtype: str = "auto",
    continuous_batching: bool = False,
    timeout: float = 300.0,
    log_path: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[ServedModel]:
    """Serve checkpoint ``path`` for the duration of a ``with`` block.

    Starts the server (see :func:`start_server` for the arguments), waits until it is healthy,
    yields a :class:`ServedModel` and stops the server's process group when the block exits,
    also when it raises.

    Example:
        >>> with serve_checkpoint("runs/sft/final", continuous_batching=True) as s:  # doctest: +SKIP
        ...     print(s.policy)
        openai:/abs/runs/sft/final@http://127.0.0.1:40123/v1
    """
    served = start_server(
        path,
        port=port,
        host=host,
        backend=backend,
        device=device,
        dtype=dtype,
        continuous_batching=continuous_batching,
        timeout=timeout,
        log_path=log_path,
        env=env,
    )
    try:
        yield served
    finally:
        stop_server(served)


def reply_action(message: Any, *, text_tool: str | None = None) -> dict[str, Any]:
    """The env action in a chat-completion reply ``message`` of a served checkpoint.

    ``transformers serve`` returns a Qwen-type checkpoint's ``<tool_call>`` as ``tool_calls``
    (the text before it as ``content``) and other types' generation as raw ``content``
    (read in the model's own format, see
    :func:`~knowlyr.agents.action_format.parse_action_text`); an older server's
    ``function_call`` field is read like one tool call. Either
    way the generation is put back together and parsed by
    :func:`~knowlyr.agents.action_format.parse_action_text`, so the action (thought included)
    is the one the in-process bridge would take; the first tool call wins.

    Args:
        message: ``reply.choices[0].message`` (an OpenAI SDK object or its dict).
        text_tool: see :func:`~knowlyr.agents.action_format.parse_action_text`.
    """
    content = _field(message, "content") or ""
    calls = _field(message, "tool_calls") or []
    legacy = _field(message, "function_call")  # the API's field before tool_calls
    if not calls and legacy is None:
        return parse_action_text(content, text_tool=text_tool)
    fn = (_field(calls[0], "function") or {}) if calls else legacy
    name, args = _field(fn, "name") or "", _field(fn, "arguments")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {}, ensure_ascii=False)
    call = (
        f'{TOOL_CALL_START}\n{{"name": {json.dumps(name, ensure_ascii=False)}, '
        f'"arguments": {args.strip() or "{}"}}}\n{TOOL_CALL_END}'
    )
    return parse_action_text(f"{content}\n{call}" if content.strip() else call)


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _tail(path: Path | None, lines: int) -> str:
    if path is None or not path.is_file():
        return ""
    data = path.read_bytes()[-20_000:].decode("utf-8", "replace")
    return "\n".join(data.splitlines()[-lines:])
