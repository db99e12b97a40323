"""How ``knowlyr train`` reports a run: a progress bar on a terminal, the ``knowlyr.train``
logger's lines on a pipe, nothing under ``--quiet`` or in CI, and a summary line that names
the losses before the metrics JSON."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import typer

__all__ = ["progress", "report"]


class _StderrLines(logging.StreamHandler):
    """Log lines to whatever ``sys.stderr`` is when they are written (a test runner swaps it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def progress(config: Any, quiet: bool) -> list:
    """How a training run reports: on a terminal a rich progress bar on stderr (step /
    steps, the last logged loss, steps per second, elapsed and ETA), returned as a
    ``TrainerCallback``; on a pipe or in a log file the ``step N/M: loss=...`` lines of the
    ``knowlyr.train`` logger on stderr; nothing under ``--quiet`` or in CI. transformers' own
    tqdm bar and printed log dicts are off in every case (``disable_tqdm``)."""
    import os

    from knowlyr.cli.rollout import progress_bar, shows_progress

    config.disable_tqdm = True  # knowlyr.train.run then logs through knowlyr.train instead
    if not shows_progress(quiet):
        if not quiet and not os.environ.get("CI"):
            log = logging.getLogger("knowlyr.train")
            if not any(isinstance(h, _StderrLines) for h in log.handlers):
                handler = _StderrLines()
                handler.setFormatter(logging.Formatter("%(message)s"))
                log.addHandler(handler)
            log.setLevel(logging.INFO)
        return []
    from transformers import TrainerCallback

    class RichProgress(TrainerCallback):
        bar: Any = None
        task = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.bar = progress_bar("training", "steps, {task.fields[loss]}, {task.fields[rate]}")
            self.bar.start()
            self.task = self.bar.add_task("train", total=state.max_steps, loss="loss -", rate="-")

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                elapsed = self.bar.tasks[0].elapsed or 0.0
                rate = f"{state.global_step / elapsed:.2f} steps/s" if elapsed else "-"
                self.bar.update(self.task, completed=state.global_step, rate=rate)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.bar is not None and logs and isinstance(logs.get("loss"), int | float):
                self.bar.update(self.task, loss=f"loss {logs['loss']:.4g}")

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.stop()

    return [RichProgress()]


def report(result) -> None:
    """One readable line on stderr (steps, time, the losses by their names), then the
    metrics as JSON on stdout."""
    metrics = {k: v for k, v in result.metrics.items() if isinstance(v, int | float)}
    losses = [h["loss"] for h in result.log_history if isinstance(h.get("loss"), int | float)]
    steps = max((h.get("step", 0) for h in result.log_history), default=0)
    named = [
        f"{what} {v:.4g}"
        for what, v in (
            ("last logged loss", losses[-1] if losses else None),
            ("mean train loss", metrics.get("train_loss")),
            ("eval loss", metrics.get("eval_loss")),
        )
        if v is not None
    ]
    typer.echo(
        f"trained {steps} steps in {result.seconds:.0f} s"
        + (f": {', '.join(named)}" if named else "")
        + f"; model in {result.path}",
        err=True,
    )
    typer.echo(
        json.dumps(
            {"model": str(result.path), "seconds": round(result.seconds, 1), **metrics}, indent=2
        )
    )
