"""Links into the viewer for reports (the Prefect artifacts): URLs and a markdown section.

The viewer serves one store at a base URL: ``$KNOWLYR_VIEW_URL``, else
``http://127.0.0.1:8321`` (``knowlyr view``'s default). :func:`highlights_markdown` is what
the reward and iteration artifacts show: links to the pages of the best, the worst and the
most-changed trajectories of a batch, and the steps where the most-changed pair differs,
inline, so the Prefect UI alone shows what changed.

*Most changed*: the new trajectory whose reward differs most from an earlier trajectory of
the same task (one not in the batch: e.g. last night's champion on that task); when no task
of the batch was seen before, the two attempts at one task whose rewards differ most.

Example:
    >>> trajectory_url("3f2a9c1e", base="http://127.0.0.1:8321")
    'http://127.0.0.1:8321/t/3f2a9c1e'
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from knowlyr.store import Store
    from knowlyr.trajectory import Step, Trajectory
    from knowlyr.view.pages import FileDiff

__all__ = [
    "DEFAULT_URL",
    "Highlights",
    "added_ids",
    "compare_url",
    "highlights",
    "highlights_markdown",
    "trajectory_url",
    "view_url",
]

DEFAULT_URL = "http://127.0.0.1:8321"
_CELL = 90  # characters of a thought / command / output shown inline


def view_url(base: str | None = None) -> str:
    """The viewer's base URL: ``base``, else ``$KNOWLYR_VIEW_URL``, else :data:`DEFAULT_URL`."""
    return (base or os.environ.get("KNOWLYR_VIEW_URL") or DEFAULT_URL).rstrip("/")


def trajectory_url(id: str, *, base: str | None = None) -> str:
    """The URL of trajectory ``id``'s page."""
    return f"{view_url(base)}/t/{id}"


def compare_url(a: str, b: str, *, base: str | None = None) -> str:
    """The URL of the page that shows trajectories ``a`` and ``b`` side by side as a pair."""
    return f"{view_url(base)}/compare/{a}/{b}"


def added_ids(store: Store, version: int) -> list[str]:
    """Ids of the trajectories that ``trajectories@version`` added (none for version -1)."""
    if version < 0:
        return []
    lf = store.scan("trajectories", version=version).select("id")
    if version > 0:
        lf = lf.join(
            store.scan("trajectories", version=version - 1).select("id"), on="id", how="anti"
        )
    return lf.collect()["id"].to_list()


@dataclass
class Highlights:
    """The best, worst and most-changed trajectories of a batch (rows of the list's index:
    id, task_id, agent, model, n_steps, success, reward...).

    ``changed`` is ``(before, after)``; ``changed_kind`` says what they are.
    """

    scored: int
    best: dict[str, Any] | None = None
    worst: dict[str, Any] | None = None
    changed: tuple[dict[str, Any], dict[str, Any]] | None = None
    changed_kind: str = ""


def highlights(store: Store, ids: Sequence[str]) -> Highlights:
    """The :class:`Highlights` of trajectories ``ids`` by their newest reward totals."""
    import polars as pl

    from knowlyr.view.query import index_frame

    rewards = store.scan("rewards") if store.version("rewards") is not None else None
    index = index_frame(store.scan("trajectories"), rewards).filter(pl.col("reward").is_not_null())
    batch = index.filter(pl.col("id").is_in(list(ids))).collect()
    out = Highlights(scored=batch.height)
    if not batch.height:
        return out
    ranked = batch.sort(["reward", "id"], descending=[True, False])
    out.best = ranked.row(0, named=True)
    if ranked.height > 1:
        out.worst = ranked.row(-1, named=True)
    earlier = index.filter(
        pl.col("task_id").is_in(batch["task_id"].unique().to_list())
        & ~pl.col("id").is_in(list(ids))
    ).collect()
    pair = _widest(earlier, batch) if earlier.height else None
    if pair is not None:
        out.changed, out.changed_kind = pair, "against an earlier trajectory of the same task"
    else:
        pair = _widest(batch, batch)
        if pair is not None:
            out.changed, out.changed_kind = pair, "between two attempts at the same task"
    return out


def _widest(
    before: pl.DataFrame, after: pl.DataFrame
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The (before, after) rows of one task whose rewards differ most (ids differ)."""
    import polars as pl

    j = before.join(after, on="task_id", suffix="_after").filter(
        pl.col("id") < pl.col("id_after") if before is after else pl.col("id") != pl.col("id_after")
    )
    if not j.height:
        return None
    j = j.with_columns((pl.col("reward_after") - pl.col("reward")).abs().alias("_gap"))
    top = j.sort(["_gap", "id", "id_after"], descending=[True, False, False]).row(0, named=True)
    if top["_gap"] == 0:
        return None
    a = {k: top[k] for k in before.columns}
    b = {k: top[f"{k}_after"] if k != "task_id" else top[k] for k in after.columns}
    if before is after and a["reward"] > b["reward"]:
        a, b = b, a  # between attempts: lower first, so "after" is the better one
    return a, b


def _cell(text: str | None) -> str:
    text = " ⏎ ".join((text or "").split("\n")).replace("`", "'").strip()
    text = text if len(text) <= _CELL else text[: _CELL - 1] + "…"
    return f"`{text}`" if text else ""


def _describe(row: dict[str, Any], base: str | None) -> str:
    outcome = {True: "success", False: "failure", None: "outcome unknown"}[row["success"]]
    who = row["agent"] + (f" / {row['model']}" if row.get("model") else "")
    return (
        f"[`{row['id'][:12]}`]({trajectory_url(row['id'], base=base)}) task `{row['task_id']}`, "
        f"{who}, reward **{row['reward']:.3f}**, {outcome}, {row['n_steps']} steps"
    )


def _step_line(step: Step, reward: float | None, edits: list[FileDiff]) -> str:
    parts = [f"step {step.index}"]
    if step.action is not None:
        cmd = next((v for v in step.action.params.values() if isinstance(v, str)), "")
        parts.append(f"**{step.action.tool}** {_cell(cmd)}".rstrip())
    elif step.message is not None:
        parts.append(f"says {_cell(step.message)}")
    if step.observation is not None:
        code = step.observation.exit_code
        parts.append(("→ " if code is None else f"→ exit {code} ") + _cell(step.observation.output))
    if reward is not None:
        parts.append(f"reward {reward:.2f}")
    lines = [f"- {' · '.join(parts)}"]
    if step.thought:
        lines.append(f"  - thought: {_cell(step.thought)}")
    changed = [text for d in edits for kind, text in d.lines if kind in ("add", "del")]
    if changed:
        lines.append(f"  - edit: {' '.join(_cell(x) for x in changed[:4])}")
    return "\n".join(lines)


def _first_difference(a: Trajectory, b: Trajectory) -> int:
    from knowlyr.view.pages import same_step

    for i, (x, y) in enumerate(zip(a.steps, b.steps, strict=False)):
        if not same_step(x, y):
            return i
    return min(len(a.steps), len(b.steps))


def _step_rewards(store: Store, id: str) -> list[float | None]:
    import polars as pl

    df = store.read(
        "rewards", filter=pl.col("trajectory_id") == id, columns=["per_step", "created_at"]
    )
    if not df.height:
        return []
    per = df.sort("created_at", nulls_last=False)["per_step"][-1]
    return [None if x is None or x != x else x for x in (per.to_list() if per is not None else [])]


def highlights_markdown(
    store: Store, ids: Sequence[str], *, base: str | None = None, steps: int = 3
) -> str:
    """A markdown section linking the viewer pages of the batch's best, worst and
    most-changed trajectories, with ``steps`` steps of the most-changed pair from where they
    differ (see the module docstring). ``store`` must be the store the viewer serves."""
    from knowlyr.view.pages import step_diffs

    h = highlights(store, ids)
    start = f"`knowlyr view --store {store.url}`"
    head = f"Pages of the [trajectory viewer]({view_url(base)}/) (start it with {start})."
    if not ids:
        return f"{head}\n\nNo new trajectory in this batch."
    if h.best is None:
        return f"{head}\n\nNo trajectory of this batch has a reward yet."
    lines = [head, ""]
    if h.worst is not None and h.worst["reward"] == h.best["reward"]:
        # a best and a worst that tie would point at two pages as if they differed
        lines.append(
            f"- best and worst: every scored trajectory of the batch ({h.scored}) has reward "
            f"{h.best['reward']:.3f}; one of them: {_describe(h.best, base)}"
        )
    else:
        lines.append(f"- best: {_describe(h.best, base)}")
        if h.worst is not None:
            lines.append(f"- worst: {_describe(h.worst, base)}")
    if h.changed is None:
        lines.append(
            f"- most changed: none, no two trajectories of one task differ in reward "
            f"({h.scored} scored)"
        )
    else:
        before, after = h.changed
        gap = after["reward"] - before["reward"]
        url = compare_url(after["id"], before["id"], base=base)
        lines.append(f"- most changed ({h.changed_kind}): reward {gap:+.3f}, [side by side]({url})")
        ta = store.get_trajectory(before["id"])
        tb = store.get_trajectory(after["id"])
        first = _first_difference(ta, tb)
        lines += [
            "",
            f"They are the same up to step {first}; from there:"
            if first
            else "From the first step:",
        ]
        labels = ("earlier", "new") if h.changed_kind.startswith("against") else ("worse", "better")
        for label, row, t in ((labels[0], before, ta), (labels[1], after, tb)):
            rewards = _step_rewards(store, t.id)
            edits = step_diffs(t)
            lines += ["", f"**{label}**: {_describe(row, base)}", ""]
            shown = t.steps[first : first + steps]
            for s in shown:
                r = rewards[s.index] if s.index < len(rewards) else None
                lines.append(_step_line(s, r, edits[s.index]))
            if not shown:
                lines.append("- (no more steps)")
            elif len(t.steps) > first + steps:
                lines.append(f"- … {len(t.steps) - first - steps} more steps")
    return "\n".join(lines)
