"""The per-iteration report: a markdown artifact with plots, also written next to the store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from knowlyr.store import Store
from knowlyr.train.promotion import success_p, success_test_name
from knowlyr.view.links import added_ids, highlights_markdown
from tasks._artifacts import (
    markdown_image,
    publish_markdown,
    short_path,
    svg_bars,
    svg_curves,
    svg_histogram,
    svg_line,
)

__all__ = ["iteration_report", "success_history"]


def success_history(store_url: str) -> list[tuple[str, float]]:
    """(date, held-out success of the candidate) for every recorded promotion decision."""
    store = Store.open(store_url)
    if store.version("promotions") is None:
        return []
    rows = store.read("promotions", columns=["created_at", "success_after"]).sort("created_at")
    return [(r[0].strftime("%m-%d %H:%M"), float(r[1])) for r in rows.iter_rows()]


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2g}"


def _table(rows: list[tuple[str, Any]], header: tuple[str, str]) -> str:
    return "\n".join(
        [f"| {header[0]} | {header[1]} |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
    )


def iteration_report(
    store_url: str,
    seed: int,
    collected: Any,
    rewards: list[Any],
    dataset: Any,
    candidate: Any,
    evaluation: Any,
    decision: Any,
    *,
    data_cached: str | None = None,
    outcome: str = "",
) -> str:
    """Publish the ``iteration-report`` artifact and write ``report.md`` + SVGs; returns the
    folder. ``data_cached``: the flow run whose dataset (and so the collection and rewards it
    was made of) this run found in the cache; the report names it. A night that trained
    nothing passes None for ``candidate``, ``evaluation`` and ``decision``; ``outcome`` is
    the night's one-line result (its headline)."""
    from prefect.runtime import flow_run

    totals = [t for r in rewards for t in r.totals]
    scored = sum(r.scored for r in rewards)
    history = success_history(store_url)
    plots = {
        "rewards.svg": svg_histogram(
            totals,
            title=f"Reward of {len(totals)} newly scored trajectories",
            xlabel="reward (total)",
            ylabel="trajectories",
        ),
    }
    if evaluation is not None:
        board = evaluation.leaderboard
        plots["success.svg"] = svg_bars(
            [r["agent"] for r in board],
            [r["success_rate"] for r in board],
            title="Held-out success rate",
            ymax=1.0,
            xlabel="policy",
            ylabel="success rate",
        )
    if history or evaluation is not None:
        plots["history.svg"] = svg_line(
            [d for d, _ in history] or ["now"],
            [s for _, s in history] or [evaluation.success("candidate")],
            title="Candidate held-out success across iterations",
            ymax=1.0,
            xlabel="iteration (UTC)",
            ylabel="success rate",
        )
    if candidate is not None and candidate.curve:
        plots["loss.svg"] = svg_curves(
            candidate.curve, title="Training loss by step", xlabel="optimizer step", ylabel="loss"
        )
    t = collected.trajectories
    versions = [
        (
            "trajectories",
            f"`trajectories@{t.version}` ({t.rows} rows, {t.new} new, {t.duplicates} duplicates)",
        ),
        (
            "rewards",
            ", ".join(f"`rewards@{r.rewards.version}`" for r in rewards if r.rewards)
            or "unchanged",
        ),
        (
            "dataset",
            f"`{dataset.name}` = `datasets@{dataset.datasets.version}` ({dataset.rows} rows)",
        ),
    ]
    if candidate is not None:
        versions += [
            (
                "checkpoint",
                f"blob `{candidate.blob[:16]}…` at `{short_path(candidate.path, store_url)}`",
            ),
            (
                "evaluations",
                f"`evaluations@{evaluation.evaluations.version}`" if evaluation.evaluations else "",
            ),
            ("promotions", f"`promotions@{decision.promotions.version}`"),
        ]
    versions.append(("store", f"`{store_url}`"))
    store = Store.open(store_url)
    trajectories = highlights_markdown(store, added_ids(store, t.version) if t.new else [])
    md = "\n\n".join(
        [
            f"# Iteration (seed {seed})",
            *(
                [
                    f"*The collection, rewards and dataset below come from the cache: run "
                    f"{data_cached} computed them with the same inputs (their tables in this "
                    "run's Artifacts tab are that run's).*"
                ]
                if data_cached
                else []
            ),
            _headline(decision, outcome),
            "## Counts",
            _table(
                [
                    ("episodes collected", collected.episodes),
                    ("successful episodes", collected.successes),
                    ("new trajectories", t.new),
                    ("duplicates", t.duplicates),
                    ("trajectories scored", scored),
                    ("dataset rows", dataset.rows),
                    ("rejected at export", dataset.rejected),
                ],
                ("count", "value"),
            ),
            *(_evaluation_section(evaluation, plots) if evaluation is not None else []),
            "## Rewards",
            markdown_image(plots["rewards.svg"], "reward distribution"),
            "## Tonight's trajectories: best, worst, most changed",
            trajectories,
            *(
                ["## Across iterations", markdown_image(plots["history.svg"], "success history")]
                if "history.svg" in plots
                else []
            ),
            "## Store versions",
            _table(versions, ("table", "version")),
            *(_training_section(candidate, plots) if candidate is not None else []),
            *([] if candidate is not None else ["No training tonight."]),
        ]
    )
    publish_markdown("iteration-report", md, f"Iteration report (seed {seed})")
    folder = _report_dir(store_url, str(flow_run.id or "local"))
    folder.mkdir(parents=True, exist_ok=True)
    for name, svg in plots.items():
        (folder / name).write_text(svg, encoding="utf-8")
    (folder / "report.md").write_text(md, encoding="utf-8")
    return str(folder)


def _training_section(candidate: Any, plots: dict[str, str]) -> list[str]:
    """The training time and losses by their right names: TRL's ``train_loss`` is the mean
    over the run, not the loss the model ended with."""
    m = candidate.metrics
    losses = [
        ("last logged step", m.get("last_loss")),
        ("mean over the run (TRL's train_loss)", m.get("train_loss")),
        ("held-back rows (eval_loss)", m.get("eval_loss")),
    ]
    rows = [(what, f"{v:.4g}") for what, v in losses if v is not None]
    return [
        "## Training",
        f"{candidate.seconds:.0f} s.",
        *([_table(rows, ("loss", "value"))] if rows else []),
        *([markdown_image(plots["loss.svg"], "loss by step")] if "loss.svg" in plots else []),
    ]


def _headline(decision: Any, outcome: str) -> str:
    if decision is None:
        return f"**Decision: no training tonight** — {outcome}"
    verdict = "promoted" if decision.promoted else "not promoted"
    return f"**Decision: {verdict}** — {decision.reason}"


def _evaluation_section(evaluation: Any, plots: dict[str, str]) -> list[str]:
    c = evaluation.of("candidate")
    return [
        "## Held-out evaluation",
        evaluation_table(evaluation.leaderboard),
        f"Candidate vs `{evaluation.baseline}`: success {c['success_diff']:+.1%}, "
        f"{success_test_name(c)} (Bonferroni) = {_p(success_p(c))}, "
        f"reward diff {c['reward_diff']:+.3f} "
        f"(95% CI {_interval(c['reward_diff_ci'])}), alpha = {evaluation.alpha}.",
        markdown_image(plots["success.svg"], "held-out success"),
    ]


def _interval(ci: Any) -> str:
    """A confidence interval as ``[low, high]`` at 3 decimals (not 17)."""
    low, high = ci
    return f"[{low:+.3f}, {high:+.3f}]"


def evaluation_table(board: list[dict[str, Any]]) -> str:
    """The leaderboard as a markdown table."""
    lines = [
        "| rank | policy | episodes | success (95% CI) | mean reward |",
        "|---|---|---|---|---|",
    ]
    for r in board:
        lines.append(
            f"| {r['rank']} | {r['agent']} | {r['episodes']} | {r['success_rate']:.1%} "
            f"({r['success_ci_low']:.1%}–{r['success_ci_high']:.1%}) | {r['mean_reward']:.3f} |"
        )
    return "\n".join(lines)


def _report_dir(store_url: str, run_id: str) -> Path:
    store = Store.open(store_url)
    base = Path(store.root) if store.local else Path.home() / ".cache" / "knowlyr"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return base / "reports" / f"iteration-{stamp}-{run_id[:8]}"
