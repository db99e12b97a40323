"""What the Prefect UI shows: count tables, reward statistics, progress, plots and reports.

Artifacts are reports and pointers (they live in the Prefect database); the data stays in the
store. Plots are small hand-written SVGs embedded in markdown as data URIs, so a report
needs no plotting library and renders offline; the same SVG is written next to the run's
other files when a report directory is given.

A cached stage task publishes what it published when it ran: every table and markdown
artifact a stage task publishes is also written beside its cached result
(``<cache key>.artifacts.json`` in the result storage), and the :func:`republish_cached` hook
publishes them again, described "Cached from run X: ...", when the task is a cache hit.
Numbers in tables are rounded for reading (:func:`readable`).
"""

from __future__ import annotations

import base64
import logging
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from html import escape
from pathlib import Path
from typing import Any

import orjson
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

__all__ = [
    "artifact_key",
    "counts_table",
    "in_run",
    "markdown_image",
    "progress",
    "publish_markdown",
    "publish_table",
    "readable",
    "republish_cached",
    "reward_stats",
    "short_path",
    "svg_bars",
    "svg_curves",
    "svg_histogram",
    "svg_line",
]

_KEY_BAD = re.compile(r"[^a-z0-9-]+")


def artifact_key(*parts: Any) -> str:
    """A valid artifact key (lowercase letters, digits, dashes) from free-form parts.

    Example:
        >>> artifact_key("collect", "knowlyr/sandbox", "Counts")
        'collect-knowlyr-sandbox-counts'
    """
    key = _KEY_BAD.sub("-", "-".join(str(p) for p in parts if p not in (None, "")).lower())
    key = re.sub("-{2,}", "-", key).strip("-")
    if not key:
        raise ValueError(f"artifact key parts {parts!r} contain no letters or digits")
    return key


def in_run() -> bool:
    """Whether a flow or task run is active (artifacts only exist inside runs; a stage
    function called directly, e.g. ``task.fn(...)``, publishes nothing)."""
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def readable(value: Any) -> Any:
    """A table cell for reading: floats to 4 significant digits, floating-point noise
    (``|x| < 1e-12``, e.g. ``2.7755575615628914e-17``) to 0; other values unchanged.

    Example:
        >>> readable(0.123456), readable(2.7755575615628914e-17), readable(1234.5678)
        (0.1235, 0.0, 1235.0)
    """
    if isinstance(value, float) and math.isfinite(value):
        return 0.0 if abs(value) < 1e-12 else float(f"{value:.4g}")
    return value


def publish_table(key: str, rows: list[dict[str, Any]], description: str) -> None:
    """A table artifact under ``key`` (one row per dict, numbers :func:`readable`), inside a run."""
    if in_run():
        rows = [{k: readable(v) for k, v in row.items()} for row in rows]
        create_table_artifact(rows, key=artifact_key(key), description=description)
        _remember("table", artifact_key(key), rows, description)


def publish_markdown(key: str, markdown: str, description: str) -> None:
    """A markdown artifact under ``key``, inside a run."""
    if in_run():
        create_markdown_artifact(markdown, key=artifact_key(key), description=description)
        _remember("markdown", artifact_key(key), markdown, description)


_RECORD_SUFFIX = ".artifacts.json"
_PUBLISHED: dict[str, list[dict[str, Any]]] = {}


def _remember(kind: str, key: str, data: Any, description: str) -> None:
    """Inside a cached task: add the artifact to the record beside the task's result."""
    from prefect.context import TaskRunContext
    from prefect.runtime import flow_run
    from prefect.transactions import get_transaction

    txn = get_transaction()
    if TaskRunContext.get() is None or txn is None or txn.store is None:
        return
    storage = txn.store.result_storage
    if storage is None:
        return
    origin = f"{flow_run.name} ({str(flow_run.id)[:8]})"
    published = _PUBLISHED.setdefault(txn.key, [])
    published.append(
        {"kind": kind, "key": key, "data": data, "description": description, "origin": origin}
    )
    storage.write_path(f"{txn.key}{_RECORD_SUFFIX}", orjson.dumps(published))


def _published_when_computed(state: Any) -> list[dict[str, Any]] | None:
    """What a cached task run's state published when it was computed (None: not a cache hit,
    or it ran before records were kept, or its storage has none)."""
    from prefect.results import ResultRecord, get_result_store

    if state.name != "Cached" or not isinstance(state.data, ResultRecord):
        return None
    storage = get_result_store().result_storage
    name = str(state.data.metadata.storage_key).rstrip("/").rsplit("/", 1)[-1]
    try:
        return orjson.loads(storage.read_path(f"{name}{_RECORD_SUFFIX}"))
    except (OSError, ValueError):
        return None


def cached_origin(state: Any) -> str | None:
    """The flow run (``name (id prefix)``) that computed a cached task run's result, or None
    when the state is not a cache hit or the run is not known."""
    published = _published_when_computed(state)
    return published[0]["origin"] if published else None


class _QuietHook(logging.Filter):
    """Drops the task engine's two INFO lines around every run of :func:`republish_cached`
    ("Running hook 'republish_cached' in response to entering state 'Completed'", "Hook ...
    finished running successfully"): every stage task runs it, so each task's log had two
    lines about bookkeeping. Its errors are still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        message = record.getMessage()
        return not (
            message.startswith("Running hook 'republish_cached'")
            or message.startswith("Hook 'republish_cached' finished")
        )


logging.getLogger("prefect.task_runs").addFilter(_QuietHook())


def republish_cached(task: Any, task_run: Any, state: Any) -> None:
    """``on_completion`` hook of stage tasks: a cache hit publishes the artifacts the task
    published when it ran, described "Cached from run X: ..."."""
    for art in _published_when_computed(state) or []:
        description = f"Cached from run {art['origin']}: {art['description']}"
        if art["kind"] == "table":
            create_table_artifact(art["data"], key=art["key"], description=description)
        else:
            create_markdown_artifact(art["data"], key=art["key"], description=description)


def counts_table(
    stage: str,
    *,
    incoming: int,
    new: int,
    duplicates: int,
    rejected: int,
    version: int | None = None,
    table: str | None = None,
) -> dict[str, Any]:
    """One row of the counts table every writing stage publishes."""
    return {
        "stage": stage,
        "in": incoming,
        "new": new,
        "duplicate": duplicates,
        "rejected": rejected,
        "table": table or "",
        "version": "" if version is None else version,
    }


def reward_stats(values: Sequence[float]) -> dict[str, Any]:
    """Count, mean, std, min, quartiles and max of rewards (empty input gives count 0)."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return {"count": 0}
    n = len(xs)
    mean = sum(xs) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / n)

    def q(p: float) -> float:
        pos = p * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return {
        "count": n,
        "mean": round(mean, 4),
        "std": round(std, 4),
        "min": round(xs[0], 4),
        "p25": round(q(0.25), 4),
        "median": round(q(0.5), 4),
        "p75": round(q(0.75), 4),
        "max": round(xs[-1], 4),
    }


@contextmanager
def progress(key: str, description: str) -> Iterator[Any]:
    """A progress artifact for a long stage; call the yielded function with 0..1 fractions.

    Example:
        >>> with progress("collect-progress", "episodes") as report:  # doctest: +SKIP
        ...     report(0.5)
    """
    artifact_id = (
        create_progress_artifact(0.0, key=artifact_key(key), description=description)
        if in_run()
        else None
    )

    def report(fraction: float) -> None:
        if artifact_id is not None:
            update_progress_artifact(artifact_id, max(0.0, min(100.0, 100.0 * fraction)))

    yield report
    report(1.0)


# --- plots -------------------------------------------------------------------------------

_W, _H, _PAD = 460, 240, 52
_STYLE = "font-family:sans-serif;font-size:11px"
_LABEL_CHARS = 16


def _frame(
    title: str, body: str, *, top: float | None = None, xlabel: str = "", ylabel: str = ""
) -> str:
    """The plot's frame: title, axes, y ticks at 0, top/2 and top with grid lines, axis titles."""
    ticks = ""
    if top is not None:
        plot_h = _H - _PAD - 30
        for frac in (0.0, 0.5, 1.0):
            y = _H - _PAD - plot_h * frac
            ticks += (
                f'<line x1="{_PAD - 4}" y1="{y:.1f}" x2="{_W - 10}" y2="{y:.1f}" '
                f'stroke="{"#444" if frac == 0 else "#ddd"}"/>'
                f'<text x="{_PAD - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(top * frac)}</text>'
            )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" style="{_STYLE}">'
        f'<rect width="{_W}" height="{_H}" fill="white"/>'
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-weight="bold">{escape(title)}</text>'
        f"{ticks}"
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - 10}" y2="{_H - _PAD}" stroke="#444"/>'
        f'<line x1="{_PAD}" y1="26" x2="{_PAD}" y2="{_H - _PAD}" stroke="#444"/>'
        f'<text x="{(_PAD + _W - 10) / 2}" y="{_H - 8}" text-anchor="middle">{escape(xlabel)}</text>'
        f'<text x="12" y="{(_H - _PAD + 26) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 12 {(_H - _PAD + 26) / 2})">{escape(ylabel)}</text>'
        f"{body}</svg>"
    )


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _short(label: Any) -> str:
    """A tick label that fits its slot (long names end in an ellipsis)."""
    text = str(label)
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


def svg_bars(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    ymax: float | None = None,
    xlabel: str = "",
    ylabel: str = "",
) -> str:
    """A bar chart (e.g. success rate per policy), values on the bars, a y scale to ``ymax``
    (default: the largest value)."""
    if len(labels) != len(values):
        raise ValueError(f"svg_bars needs one label per value, got {len(labels)} and {len(values)}")
    top = ymax if ymax is not None else max([1e-9, *[float(v) for v in values]])
    plot_w, plot_h = _W - _PAD - 10, _H - _PAD - 30
    slot = plot_w / max(1, len(values))
    parts = []
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        h = plot_h * float(value) / top
        x = _PAD + i * slot + slot * 0.15
        y = _H - _PAD - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
            f'fill="#4c78a8"/><text x="{x + slot * 0.35:.1f}" y="{y - 3:.1f}" '
            f'text-anchor="middle">{_fmt(float(value))}</text>'
            f'<text x="{x + slot * 0.35:.1f}" y="{_H - _PAD + 14}" '
            f'text-anchor="middle">{escape(_short(label))}</text>'
        )
    return _frame(title, "".join(parts), top=top, xlabel=xlabel, ylabel=ylabel)


def svg_histogram(
    values: Sequence[float], *, title: str, bins: int = 20, xlabel: str = "", ylabel: str = "count"
) -> str:
    """A histogram of ``values`` (e.g. the reward distribution of one iteration)."""
    xs = [float(v) for v in values]
    if not xs:
        return _frame(title, f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle">no data</text>')
    lo, hi = min(xs), max(xs)
    if hi == lo:  # one bar says nothing a sentence would not
        return _frame(
            title,
            f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle">all {len(xs)} values '
            f"are {_fmt(lo)}: nothing to tell apart</text>",
            xlabel=xlabel,
        )
    counts = [0] * bins
    for x in xs:
        counts[min(bins - 1, int((x - lo) / (hi - lo) * bins))] += 1
    top = max(counts)
    plot_w, plot_h = _W - _PAD - 10, _H - _PAD - 30
    bw = plot_w / bins
    parts = [
        f'<rect x="{_PAD + i * bw:.1f}" y="{_H - _PAD - plot_h * c / top:.1f}" '
        f'width="{bw - 1:.1f}" height="{plot_h * c / top:.1f}" fill="#f58518"/>'
        for i, c in enumerate(counts)
        if c
    ]
    parts.append(f'<text x="{_PAD}" y="{_H - _PAD + 14}" text-anchor="middle">{_fmt(lo)}</text>')
    parts.append(f'<text x="{_W - 10}" y="{_H - _PAD + 14}" text-anchor="end">{_fmt(hi)}</text>')
    return _frame(title, "".join(parts), top=top, xlabel=xlabel, ylabel=ylabel)


def svg_line(
    xs: Sequence[Any],
    ys: Sequence[float],
    *,
    title: str,
    ymax: float | None = None,
    xlabel: str = "",
    ylabel: str = "",
) -> str:
    """A line with points (e.g. held-out success rate across iterations)."""
    if len(xs) != len(ys):
        raise ValueError(f"svg_line needs one x per y, got {len(xs)} and {len(ys)}")
    if not ys:
        return _frame(title, f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle">no data</text>')
    top = ymax if ymax is not None else max(1e-9, *[float(y) for y in ys])
    plot_w, plot_h = _W - _PAD - 20, _H - _PAD - 30
    step = plot_w / max(1, len(ys) - 1)
    pts = [
        (_PAD + 10 + i * step if len(ys) > 1 else _PAD + plot_w / 2, _H - _PAD - plot_h * y / top)
        for i, y in enumerate(float(y) for y in ys)
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    parts = [f'<polyline points="{path}" fill="none" stroke="#54a24b" stroke-width="2"/>']
    every = max(1, math.ceil(len(ys) / 5))  # at most ~5 labelled points: labels never overlap
    for i, ((px, py), x, y) in enumerate(zip(pts, xs, ys, strict=True)):
        parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="#54a24b"/>')
        if i % every == 0 or i == len(ys) - 1:
            parts.append(
                f'<text x="{px:.1f}" y="{py - 6:.1f}" text-anchor="middle">{_fmt(float(y))}</text>'
                f'<text x="{px:.1f}" y="{_H - _PAD + 14}" text-anchor="middle">'
                f"{escape(_short(x))}</text>"
            )
    return _frame(title, "".join(parts), top=top, xlabel=xlabel, ylabel=ylabel)


_CURVE_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756")


def svg_curves(
    curves: dict[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    xlabel: str = "",
    ylabel: str = "",
) -> str:
    """Lines over a numeric x axis with a legend (e.g. train and eval loss by step). Each
    curve is its ``(x, y)`` points; a curve with one point is drawn as a dot."""
    curves = {name: [(float(x), float(y)) for x, y in pts] for name, pts in curves.items() if pts}
    if not curves:
        return _frame(title, f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle">no data</text>')
    xs = [x for pts in curves.values() for x, _ in pts]
    ys = [y for pts in curves.values() for _, y in pts]
    x0, x1 = min(xs), max(xs)
    top = max(1e-9, *ys)
    plot_w, plot_h = _W - _PAD - 20, _H - _PAD - 30
    span = (x1 - x0) or 1.0

    def at(x: float, y: float) -> tuple[float, float]:
        return _PAD + 10 + plot_w * (x - x0) / span, _H - _PAD - plot_h * y / top

    parts = []
    for i, (name, pts) in enumerate(curves.items()):
        color = _CURVE_COLORS[i % len(_CURVE_COLORS)]
        dots = [at(x, y) for x, y in pts]
        if len(dots) > 1:
            line = " ".join(f"{px:.1f},{py:.1f}" for px, py in dots)
            parts.append(
                f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2"/>'
            )
        if len(dots) <= 30:
            parts += [
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="{color}"/>' for px, py in dots
            ]
        last_y = pts[-1][1]
        legend_y = 34 + 14 * i
        parts.append(
            f'<rect x="{_W - 150}" y="{legend_y - 8}" width="10" height="10" fill="{color}"/>'
            f'<text x="{_W - 136}" y="{legend_y + 1}">{escape(_short(name))} {_fmt(last_y)}</text>'
        )
    parts.append(
        f'<text x="{_PAD + 10}" y="{_H - _PAD + 14}" text-anchor="middle">{_fmt(x0)}</text>'
    )
    parts.append(f'<text x="{_W - 10}" y="{_H - _PAD + 14}" text-anchor="end">{_fmt(x1)}</text>')
    return _frame(title, "".join(parts), top=top, xlabel=xlabel, ylabel=ylabel)


def short_path(path: str, store_url: str) -> str:
    """``path`` relative to a local store's root (``checkpoints/...``), else as it is."""
    from knowlyr.store import Store

    store = Store.open(store_url)
    if store.local:
        try:
            return str(Path(path).resolve().relative_to(Path(store.root).resolve()))
        except ValueError:
            pass
    return path


def markdown_image(svg: str, alt: str) -> str:
    """Markdown that embeds ``svg`` as a data URI image."""
    data = base64.b64encode(svg.encode()).decode()
    return f"![{alt}](data:image/svg+xml;base64,{data})"
