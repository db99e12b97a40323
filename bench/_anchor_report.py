"""The anchor bench's table: medians, spreads and per-round ratios of each stage (stdlib only)."""

from __future__ import annotations

import statistics
from typing import Any


def _fmt(v: float, unit: str) -> str:
    if unit in ("s",):
        return f"{v:.2f}"
    if unit == "us/step":
        return f"{v:.1f}"
    return f"{v:,.0f}"


def _spread(vs: list[float], unit: str) -> str:
    med = statistics.median(vs)
    if len(vs) == 1:
        return f"{_fmt(med, unit)} {unit}"
    return f"{_fmt(med, unit)} ({_fmt(min(vs), unit)}–{_fmt(max(vs), unit)}) {unit}"


def summarize(stage: Any, rounds: list[dict[tuple[str, str], Any]], n: int) -> dict[str, Any]:
    """One stage over the rounds: each side's shown values, the ratio per round
    (original cost / ours cost: > 1 is better for ours), peak RSS and CPU seconds."""
    out: dict[str, Any] = {"stage": stage.name, "what": stage.what, "n": n, "unit": stage.unit}
    ratios = []
    for side, job in (("original", stage.original), ("ours", stage.ours)):
        rs = [r[(side, job)] for r in rounds]
        out[side] = {
            "values": [stage.show(r) for r in rs],
            "wall_s": [r.wall for r in rs],
            "rss_mb": [r.rss_mb for r in rs],
            "tree_mb": [r.tree_mb for r in rs],
            "cpu_s": [r.cpu for r in rs],
            "load": [r.load for r in rs],
            "steps": rs[0].out.get("steps"),
            "sections": [r.out.get("sections") for r in rs],
        }
    for r in rounds:
        ratios.append(
            stage.cost(r[("original", stage.original)]) / stage.cost(r[("ours", stage.ours)])
        )
    first = rounds[0]
    out["items"] = stage.items(first[("original", stage.original)])
    out["items_name"] = stage.items_name
    out["ratios"] = ratios
    out["ratio"] = statistics.median(ratios)
    out["budget"] = stage.budget
    return out


def render(rows: list[dict[str, Any]], header: list[str]) -> str:
    """The table (Markdown, so the README can quote it) under ``header`` lines."""
    lines = list(header)
    lines.append("")
    lines.append(
        "| stage | n | original: median (min–max) | ours: median (min–max) "
        "| ours ÷ original, per round | median | budget "
        "| process wall s, original / ours | peak RSS MB, original / ours "
        "| all processes, peak PSS MB, original / ours | CPU s, original / ours |"
    )
    lines.append("|---|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|")
    for s in rows:
        o, u, unit = s["original"], s["ours"], s["unit"]
        per_round = ", ".join(f"{x:.2f}" for x in s["ratios"])
        budget = "—" if s["budget"] is None else f"≥{s['budget']:g}×"
        n = f"{s['n']:,}" if s["items_name"] else "—"
        verdict = "" if s["budget"] is None else (" ✓" if s["ratio"] >= s["budget"] else " ✗")
        lines.append(
            f"| {s['stage']} | {n} | {_spread(o['values'], unit)} "
            f"| {_spread(u['values'], unit)} | {per_round} | **{s['ratio']:.2f}×**{verdict} "
            f"| {budget} | {statistics.median(o['wall_s']):.1f} / "
            f"{statistics.median(u['wall_s']):.1f} | {statistics.median(o['rss_mb']):,.0f} / "
            f"{statistics.median(u['rss_mb']):,.0f} | {statistics.median(o['tree_mb']):,.0f} / "
            f"{statistics.median(u['tree_mb']):,.0f} | {statistics.median(o['cpu_s']):.2f} / "
            f"{statistics.median(u['cpu_s']):.2f} |"
        )
    lines.append("")
    work, seen = [], set()
    for s in rows:
        steps = (s["original"]["steps"], s["ours"]["steps"])
        text = f"{s['items']:,.0f} {s['items_name']}"
        if all(steps):
            text += f" (steps: original {steps[0]:,}, ours {steps[1]:,})"
        if s["items_name"] and (s["stage"].split("-")[0], text) not in seen:
            seen.add((s["stage"].split("-")[0], text))
            work.append(f"{s['stage']} {text}")
    lines.append(
        "Work done by each side, checked equal every round: " + "; ".join(work) + ". Ours "
        "keeps the finish action as a step (21 per run), the original drops it (20)."
    )
    lines.append("")
    lines.append(
        "Ratios: ours ÷ original for rates; original ÷ ours for times per step, seconds and "
        "bytes, so above 1 is always better for ours. Process wall s is the whole job, start to "
        "exit (the rates of in-process stages time only their part). Peak RSS is the job's "
        "largest process (ours with 2 workers: each worker has its own); all processes is the "
        "peak of the job's PSS summed over its process and workers (shared pages counted once; "
        "sampled every 0.1 s, so a shorter spike can be missed). CPU s counts the job's process "
        "and its workers, imports included. Each cell is a separate process."
    )
    return "\n".join(lines)
