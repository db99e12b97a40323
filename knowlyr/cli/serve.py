"""``knowlyr serve CHECKPOINT``: an OpenAI-compatible server for a checkpoint, until Ctrl-C.

Examples::

    knowlyr serve runs/sft/final                       # transformers serve on 127.0.0.1:8000
    knowlyr serve runs/sft/final --port 0 --continuous-batching   # a free port, batched requests
    knowlyr serve runs/sft/final --backend vllm --host 0.0.0.0    # vLLM on a GPU machine
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import typer

__all__ = ["install"]


def install(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    checkpoint: Path = typer.Argument(..., help="A local checkpoint folder (save_pretrained)."),
    port: int = typer.Option(8000, help="Port to listen on; 0 picks a free one."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    backend: str = typer.Option("transformers", help="transformers (CPU or GPU) or vllm (GPU)."),
    device: str = typer.Option("auto", help="transformers serve --device: auto, cpu, cuda:0..."),
    dtype: str = typer.Option(
        "auto",
        help="Model dtype: auto = bf16 on a GPU that supports it, fp16 on an older GPU, fp32 on "
        "the CPU; or bfloat16, float16, float32.",
    ),
    continuous_batching: bool = typer.Option(
        False, help="Batch concurrent requests (transformers serve --continuous-batching)."
    ),
    timeout: float = typer.Option(300.0, help="Seconds to wait until the server is healthy."),
    log: Path = typer.Option(
        None, help="Write the server's output here (default: a temporary file)."
    ),
) -> None:
    """Serve CHECKPOINT over an OpenAI-compatible API and print the policy spec to collect with."""
    from knowlyr.agents.serve import BACKENDS, serve_checkpoint
    from knowlyr.cli import did_you_mean, fail
    from knowlyr.errors import ConfigError, ServeError

    if backend not in BACKENDS:
        raise fail(
            f"--backend must be {' or '.join(BACKENDS)}, got {backend!r}."
            + did_you_mean(backend, BACKENDS),
            usage=True,
        )

    def stop(signum, frame):  # SIGTERM / SIGHUP: leave the with-block like Ctrl-C does
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    started = time.perf_counter()
    typer.echo(f"starting {backend} server for {checkpoint} ...", err=True)
    try:
        with serve_checkpoint(
            checkpoint,
            port or None,
            host=host,
            backend=backend,
            device=device,
            dtype=dtype,
            continuous_batching=continuous_batching,
            timeout=timeout,
            log_path=log,
        ) as served:
            typer.echo(
                f"healthy after {time.perf_counter() - started:.1f} s "
                f"(pid {served.process.pid}, log {served.log_path})",
                err=True,
            )
            typer.echo(f"base URL: {served.base_url}")
            typer.echo(f"model:    {served.model}")
            typer.echo(f"policy:   {served.policy}")
            typer.echo("Ctrl-C stops the server.", err=True)
            sys.stdout.flush()
            code = served.process.wait()
            tail = served.log_tail()
            raise fail(f"the server exited by itself (code {code}); log:\n{tail}", usage=False)
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)
    except (ConfigError, ServeError) as e:
        raise fail(e) from None
