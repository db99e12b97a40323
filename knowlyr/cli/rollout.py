"""Commands for task suites and rollouts: ``knowlyr tasks``, ``knowlyr task``, ``knowlyr rollout``.

Examples::

    knowlyr tasks                                  # the suites, their sizes and families
    knowlyr tasks conversation --family order_status --split heldout -n 3
    knowlyr task coding-gcd-0064 --full            # one task as JSON (--full: with the solution)
    knowlyr rollout knowlyr/sandbox --agent expert -n 20 --concurrency 2 --out trajs.jsonl
    knowlyr rollout knowlyr/sandbox --tasks my_tasks.jsonl -n 5   # your own tasks
    knowlyr rollout knowlyr/conversation --agent openai:gpt-4o-mini -n 20 --concurrency 8
    knowlyr rollout knowlyr/conversation --agent openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1
    knowlyr rollout knowlyr/conversation --agent anthropic:claude-sonnet-4-5 -n 20 --concurrency 4
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

__all__ = ["install", "make_agent"]


def install(app: typer.Typer) -> None:
    app.command("tasks")(tasks)
    app.command("task")(show)
    app.command("rollout")(rollout)


def make_agent(agent: str, *, seed: int = 0):
    """A zero-argument factory for an agent spec (see :func:`knowlyr.agents.spec.agent_factory`)."""
    from knowlyr.agents.spec import agent_factory
    from knowlyr.cli import did_you_mean
    from knowlyr.errors import ConfigError

    try:
        return agent_factory(agent, seed=seed)
    except ConfigError:
        raise  # e.g. no API key: reported like any configuration error
    except ValueError as e:
        kind = agent.partition(":")[0]
        hint = "" if kind in AGENT_KINDS else did_you_mean(kind, AGENT_KINDS)
        raise typer.BadParameter(f"{e}.{hint}" if hint else str(e), param_hint="--agent") from None


# the kinds of agent spec (knowlyr.agents.spec.agent_factory), for "Did you mean ...?"
AGENT_KINDS = ("expert", "noisy", "random", "checkpoint", "openai", "anthropic")


def tasks(
    suite: str = typer.Argument(None, help="Suite to sample from; omit to list the suites."),
    family: str = typer.Option(None, help="Only this family (e.g. order_status)."),
    split: str = typer.Option(None, help="train or heldout."),
    n: int = typer.Option(5, "-n", help="How many tasks to show."),
    seed: int = typer.Option(0, help="Sampling seed."),
) -> None:
    """List the suites, or sample tasks of one."""
    from knowlyr.cli import did_you_mean, fail
    from knowlyr.errors import ConfigError
    from knowlyr.taskset import get_suite, list_suites, sample

    if suite is None:
        for name in list_suites():
            s = get_suite(name)
            held = len(s.select(split="heldout"))
            typer.echo(
                f"{name:14} {len(s):6} tasks ({held} held out)  families: {', '.join(s.families)}"
            )
        return
    if split not in (None, "train", "heldout"):
        raise typer.BadParameter(
            f"split must be train or heldout, got {split!r}", param_hint="--split"
        )
    if suite not in list_suites():
        raise fail(
            f"unknown task suite {suite!r}.{did_you_mean(suite, list_suites())} "
            f"Suites: {', '.join(list_suites())}",
            usage=True,
        )
    if family is not None and family not in get_suite(suite).families:
        families = get_suite(suite).families
        raise fail(
            f"--family: suite {suite!r} has no family {family!r}.{did_you_mean(family, families)} "
            f"Families: {', '.join(families)}",
            usage=True,
        )
    try:
        picked = sample(suite, n, seed=seed, split=split, family=family, replace=False)
    except ConfigError as e:
        raise fail(e) from None
    for t in picked:
        typer.echo(f"{t.task_id:36} {t.split:8} {t.instruction.splitlines()[0][:100]}")


def show(
    task_id: str = typer.Argument(..., help="A task id, e.g. conversation-order_status-00042."),
    full: bool = typer.Option(
        False, "--full", help="Include files, hidden tests and the reference solution."
    ),
) -> None:
    """Print one task as JSON."""
    from knowlyr.cli import fail
    from knowlyr.errors import ConfigError
    from knowlyr.taskset import get_task

    try:
        t = get_task(task_id)
    except ConfigError as e:
        raise fail(e) from None
    typer.echo(json.dumps(t.model_dump(mode="json") if full else t.public_info(), indent=2))


def rollout(
    env_id: str = typer.Argument(..., help="Registered env id, e.g. knowlyr/conversation."),
    agent: str = typer.Option(
        "expert",
        help="expert, noisy[:p], random, checkpoint:PATH, openai:MODEL[@BASE_URL] "
        "(OpenAI or an OpenAI-compatible server) or anthropic:MODEL.",
    ),
    n: int = typer.Option(10, "-n", help="Episodes."),
    concurrency: int = typer.Option(1, help="Episodes at once."),
    seed: int = typer.Option(0, help="Episode i uses seed + i."),
    max_steps: int = typer.Option(None, help="Step limit per episode (default: the env's)."),
    family: str = typer.Option(None, help="Only tasks of this family."),
    split: str = typer.Option(None, help="train or heldout."),
    out: Path = typer.Option(
        None, help="Write the trajectories here as JSONL (default: stdout summary only)."
    ),
    tasks_file: Path = typer.Option(
        None, "--tasks", help="Run your own tasks: a Task JSONL file (cycled)."
    ),
    quiet: bool = typer.Option(
        False,
        "-q",
        "--quiet",
        help="No progress bar (there is none either when stderr is not a terminal or $CI is set).",
    ),
) -> None:
    """Run an agent in an env and report (and optionally save) the trajectories."""
    from knowlyr.cli import fail
    from knowlyr.core import spec
    from knowlyr.errors import KnowlyrError
    from knowlyr.rollout import collect
    from knowlyr.taskset import load_tasks

    env_kwargs = {k: v for k, v in (("family", family), ("split", split)) if v is not None}
    tasks = None
    if tasks_file is not None and not tasks_file.is_file():
        why = "is not a file" if tasks_file.exists() else "does not exist"
        raise fail(f"--tasks: {tasks_file} {why}; give a Task JSONL file", usage=True)
    try:
        spec(env_id)  # an unknown id: "Did you mean ...?" before an agent is built
        factory = make_agent(agent, seed=seed)
        if tasks_file is not None:
            loaded = load_tasks(tasks_file)
            for r in loaded.rejected:
                typer.echo(f"{tasks_file}:{r.line}: rejected ({r.task_id}): {r.reason}", err=True)
            if not loaded.tasks:
                raise fail(f"--tasks: no valid task in {tasks_file} (reasons above)", usage=True)
            tasks = loaded.tasks
        with episode_progress(n, f"{env_id} {agent}", quiet=quiet) as on_episode:
            trajs = collect(
                env_id,
                factory,
                n,
                max_steps=max_steps,
                seed=seed,
                concurrency=concurrency,
                env_kwargs=env_kwargs,
                tasks=tasks,
                on_episode=on_episode,
            )
    except KnowlyrError as e:  # a ConfigError exits 2, a sandbox or model failure 1
        raise fail(e) from None
    if out is not None:
        with open(out, "wb") as f:
            for t in trajs:
                f.write(t.to_json() + b"\n")
    ok = sum(bool(t.outcome.success) for t in trajs)
    steps = sum(len(t.steps) for t in trajs) / max(len(trajs), 1)
    errors = sum(1 for t in trajs if (t.outcome.reason or "").startswith("error:"))
    typer.echo(
        f"{env_id}: {len(trajs)} episodes, {ok} successful ({ok / max(len(trajs), 1):.0%}), "
        f"{steps:.1f} steps on average, {errors} errored"
        + _usage_summary(trajs)
        + (f"; wrote {out}" if out else ""),
        file=sys.stdout,
    )


def shows_progress(quiet: bool = False) -> bool:
    """Whether to draw a progress bar: not under ``--quiet``, in CI (``$CI``) or when stderr
    is not a terminal (a pipe or a log file gets the summary line only)."""
    return not quiet and not os.environ.get("CI") and sys.stderr.isatty()


def progress_bar(label: str, counts: str) -> Any:
    """A rich ``Progress`` on stderr: ``label``, a bar, done/total, ``counts`` (a
    ``TextColumn`` format over the task's fields), elapsed time and ETA."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(counts),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )


@contextmanager
def episode_progress(total: int, what: str, *, quiet: bool = False) -> Iterator[Any]:
    """A rich progress bar on stderr for ``total`` episodes (done / total, successes so far,
    episodes per second, elapsed and ETA); yields the ``on_episode`` callback for
    :func:`~knowlyr.rollout.collect`, or None when no bar is shown."""
    if not shows_progress(quiet):
        yield None
        return
    columns = ("{task.description}", "episodes, {task.fields[ok]} successful, {task.fields[rate]}")
    started = time.monotonic()
    with progress_bar(*columns) as bar:
        task = bar.add_task(what, total=total, ok=0, rate="-")
        ok = 0

        def on_episode(traj: Any) -> None:
            nonlocal ok
            ok += bool(traj.outcome.success)
            done = bar.tasks[0].completed + 1
            rate = done / max(time.monotonic() - started, 1e-9)
            bar.update(task, advance=1, ok=ok, rate=f"{rate:.2f}/s")

        yield on_episode


def _usage_summary(trajs) -> str:
    """``", N tokens ($C)"`` over the steps that report usage (cost only when every one has it)."""
    usages = [s.usage for t in trajs for s in t.steps if s.usage is not None]
    if not usages:
        return ""
    tokens = sum((u.prompt_tokens or 0) + (u.completion_tokens or 0) for u in usages)
    costs = [u.cost_usd for u in usages]
    cost = f" (${sum(costs):.4f})" if all(c is not None for c in costs) else ""
    return f", {tokens} tokens{cost}"
