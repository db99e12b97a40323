"""``knowlyr reward score | preferences | calibrate | leaderboard | rubrics``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

reward_app = typer.Typer(
    help="Process reward: rule and LLM-judge scores, calibration, preference pairs, leaderboards.",
    no_args_is_help=True,
)


def install(app: typer.Typer) -> None:
    app.add_typer(reward_app, name="reward")


def _fail(e: Exception) -> typer.Exit:
    """``error: ...``; exit 2 for a ConfigError (bad option, unknown profile, unreadable
    input), else 1 (see :func:`knowlyr.cli.fail`)."""
    from knowlyr.cli import fail

    return fail(e)


def _require(paths: list[Path], param: str, fix: str) -> None:
    """A usage error (exit 2) naming the first of ``paths`` that does not exist: checked
    before anything is read or written."""
    from knowlyr.cli import fail

    for path in paths:
        if not path.exists():
            raise fail(f"{param}: {path} does not exist; {fix}", usage=True)


def _write(data: bytes | str, out: Path | None) -> None:
    raw = data.encode() if isinstance(data, str) else data
    if out is None:
        sys.stdout.buffer.write(raw + (b"" if raw.endswith(b"\n") else b"\n"))
        sys.stdout.flush()
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(raw)
        typer.echo(f"wrote {out}", err=True)


def _score_streaming(
    paths: list[Path], engine: Any, format: str | None, store: Any, out: Path | None, workers: int
) -> tuple[int, list[dict[str, Any]]]:
    """The rule layer in batches (:func:`knowlyr.reward.stream.score_files`), the document
    written as it goes: to ``out`` through a temporary name renamed at the end (an error
    leaves no partial file), or to stdout."""
    from knowlyr.reward.stream import score_files

    if out is None:
        res = score_files(paths, engine, sys.stdout.buffer, format=format, store=store,
                          workers=workers, on_reject=_report_rejected)  # fmt: skip
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
        return res.scored, res.rejected
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(f".{out.name}.part")
    try:
        with open(part, "wb") as f:
            res = score_files(paths, engine, f, format=format, store=store,
                              workers=workers, on_reject=_report_rejected)  # fmt: skip
        if res.scored:  # nothing scored: no file (the caller exits 1)
            os.replace(part, out)
    finally:
        part.unlink(missing_ok=True)
    if res.scored:
        typer.echo(f"wrote {out}", err=True)
    return res.scored, res.rejected


def _weights(spec: str | None) -> dict[str, float] | None:
    if not spec:
        return None
    try:
        if spec.lstrip().startswith("{"):
            return {k: float(v) for k, v in json.loads(spec).items()}
        return {k.strip(): float(v) for k, v in (kv.split("=", 1) for kv in spec.split(","))}
    except (ValueError, AttributeError) as e:
        raise typer.BadParameter(
            f"--weights {spec!r}: use name=weight,name=weight or a JSON object ({e})"
        ) from e


def _read(paths: list[Path], format: str | None) -> tuple[list, list]:
    """The converted trajectories of ``paths`` and the rejected records (each also reported
    on stderr)."""
    from knowlyr._gc import paused
    from knowlyr.recorder import Converted, iter_records

    out, rejected = [], []
    with paused():  # every trajectory is kept: see knowlyr._gc
        for r in iter_records(paths, format=format):
            if isinstance(r, Converted):
                out.append(r.trajectory)
            else:
                rejected.append({"path": r.path, "line": r.line, "reason": r.reason})
                _report_rejected(rejected[-1])
    return out, rejected


def _report_rejected(r: dict[str, Any]) -> None:
    where = r["path"] if not r["line"] else f"{r['path']}:{r['line']}"
    typer.echo(f"rejected {where}: {r['reason']}", err=True)


@reward_app.command("score")
def score(
    paths: list[Path] | None = typer.Argument(
        None,
        help="Agent logs (any recorder format) or our Trajectory JSONL. None, with --store: "
        "the store's own trajectories.",
    ),
    domain: str | None = typer.Option(
        None,
        "--domain",
        "-d",
        help="Domain profile name or profile file (default: 'generic' for PATHS; each "
        "trajectory's own domain for a store's trajectories, as the reward flow).",
    ),
    judge: str | None = typer.Option(
        None, "--judge", help="Add the LLM judge: anthropic:MODEL, openai:MODEL or hf:PATH."
    ),
    judge_base_url: str | None = typer.Option(
        None, help="Base URL for the judge API (proxy or local server)."
    ),
    concurrency: int = typer.Option(16, help="Judge calls in flight."),
    judge_cache: Path | None = typer.Option(
        None, help="JSONL file caching judge answers across runs."
    ),
    weights: str | None = typer.Option(
        None, help="Override rubric weights: name=w,name=w or JSON."
    ),
    calibration: str | None = typer.Option(
        None,
        help="A calibration from `reward calibrate`: its JSON file, or the id of one stored "
        "in --store (outcome calibrations put P(success) in the total).",
    ),
    outcome_weight: float | None = typer.Option(
        None, help="Weight of the outcome (success) in the total (default: the profile's)."
    ),
    format: str | None = typer.Option(None, "--format", "-f", help="Force a recorder format."),
    store: str | None = typer.Option(
        None,
        "--store",
        "-s",
        help="Append the rewards to this store; trajectories it holds are scored with its "
        "outcomes (evaluation labels included). Without PATHS: score the store's own "
        "trajectories that have no reward under the config yet (what the reward flow runs).",
    ),
    version: int | None = typer.Option(
        None, "--version", help="Trajectories version of --store to score (default: latest)."
    ),
    out: Path | None = typer.Option(
        None, "-o", "--output", help="Write the JSON here instead of stdout."
    ),
    workers: int = typer.Option(
        0,
        "-w",
        "--workers",
        help="Processes scoring batches of the rule layer (0 = one per CPU; one batch stays in "
        "this process).",
    ),
) -> None:
    """Per-step and total rewards for every trajectory in PATHS (or in --store), as JSON.

    A total depends on the config (its hash: profile, layers, weights, judge, calibration,
    outcome weight) and on the trajectory's outcome, which each reward records as
    `success`: a store's labels win over a log's own outcome, so one config hash gives one
    total per trajectory, here and in the reward flow."""
    from knowlyr.errors import KnowlyrError
    from knowlyr.reward.engine import RewardEngine, dump_rewards

    if not paths:
        if not store:
            raise typer.BadParameter(
                "give PATHS (agent logs or trajectory JSONL) to score, or --store S to score "
                "the store's own trajectories"
            )
        _score_store(store, version, domain, judge, judge_base_url, concurrency, judge_cache,
                     weights, calibration, outcome_weight, out)  # fmt: skip
        return
    if version is not None:
        raise typer.BadParameter("--version picks the store's trajectories: give it without PATHS")
    if workers < 0:
        raise typer.BadParameter(f"must be >= 0, got {workers}", param_hint="--workers")
    _require(paths, "PATHS", "give agent logs or trajectory JSONL")
    domain = domain or "generic"
    lacking = 0
    try:
        cal = None
        if calibration is not None:
            from knowlyr.reward.store_io import load_calibration
            from knowlyr.store import Store

            cal = load_calibration(calibration, store=Store.open(store) if store else None)
        judge_obj = _judge(judge, judge_base_url, domain, concurrency, judge_cache)
        engine = RewardEngine(
            domain,
            layers=("rules", "judge") if judge_obj else ("rules",),
            weights=_weights(weights),
            judge=judge_obj,
            calibration=cal,
            outcome_weight=outcome_weight,
        )
        sink = None
        if store:
            from knowlyr.store import Store

            sink = Store.open(store)
        # the rule layer streams JSON documents in batches (no models, memory one batch);
        # the judge and an outcome calibration read the trajectories' models
        if not judge and getattr(cal, "level", None) != "outcome":
            scored, rejected = _score_streaming(paths, engine, format, sink, out, workers)
        else:
            trajs, rejected = _read(paths, format)
            if sink is not None:
                trajs = _with_stored_outcomes(sink, trajs)
            rewards = engine.score(trajs)
            if sink is not None:
                engine.save(sink, rewards)
            usage = judge_obj.usage.to_dict() if judge_obj else None
            if rewards or out is None:  # nothing scored: no file (exits 1 below)
                _write(dump_rewards(rewards, config=engine.config, config_hash=engine.config_hash,
                                    judge_usage=usage, rejected=rejected), out)  # fmt: skip
            scored = len(rewards)
            lacking = sum(1 for r in rewards if "judge" in r.missing_layers)
    except (KnowlyrError, ValueError, OSError) as e:
        raise _fail(e) from e
    typer.echo(
        f"scored {scored} trajectories, {len(rejected)} rejected, config {engine.config_hash}",
        err=True,
    )
    if lacking:
        typer.echo(
            f"warning: {lacking} totals lack the judge layer on some steps (the judge call "
            "failed: see judge_errors); those steps hold the rule scores only",
            err=True,
        )
    if not scored:
        typer.echo(
            f"error: nothing was scored: {len(rejected)} input(s) rejected (reasons above); "
            "give agent logs or trajectory JSONL",
            err=True,
        )
        raise typer.Exit(1)


def _judge(
    spec: str | None, base_url: str | None, domain: str, concurrency: int, cache: Path | None
) -> Any:
    """The LLM judge of ``--judge`` (None without one)."""
    if not spec:
        return None
    from knowlyr.cli import did_you_mean, fail
    from knowlyr.reward.judge import LLMJudge, make_backend

    provider = spec.partition(":")[0]
    providers = ("anthropic", "openai", "hf")
    if provider not in providers:
        raise fail(
            f"--judge {spec!r}: unknown provider {provider!r}.{did_you_mean(provider, providers)} "
            "Use anthropic:MODEL, openai:MODEL or hf:PATH",
            usage=True,
        )

    kw = {"base_url": base_url} if base_url and not spec.startswith("hf:") else {}
    return LLMJudge(make_backend(spec, **kw), profile=domain, concurrency=concurrency, cache=cache)


def _with_stored_outcomes(store: Any, trajs: list) -> list:
    """``trajs`` with the outcome the store holds (labels included) for those it holds."""
    from knowlyr.reward.store_io import stored_outcomes
    from knowlyr.trajectory import Outcome

    outcomes = stored_outcomes(store, [t.id for t in trajs])
    return [
        t.model_copy(update={"outcome": Outcome.model_validate(outcomes[t.id])})
        if t.id in outcomes
        else t
        for t in trajs
    ]


def _score_store(
    url: str,
    version: int | None,
    domain: str | None,
    judge: str | None,
    judge_base_url: str | None,
    concurrency: int,
    judge_cache: Path | None,
    weights: str | None,
    calibration: str | None,
    outcome_weight: float | None,
    out: Path | None,
) -> None:
    """``reward score --store S`` without paths: :func:`~knowlyr.reward.store_io.score_unscored`
    (the reward flow's task), then the rewards of every trajectory of the version under the
    config, as the JSON document of files."""
    import polars as pl

    from knowlyr.errors import KnowlyrError
    from knowlyr.reward.store_io import engine_for, load_calibration, score_unscored
    from knowlyr.reward.stream import RewardsWriter, reward_dicts
    from knowlyr.store import Store

    try:
        store = Store.open(url)
        v = store.version("trajectories") if version is None else version
        if v is None:
            raise KnowlyrError(
                f"the store {store.url} has no trajectories yet: run `knowlyr ingest LOGS "
                f"--store {url}` first, or give PATHS"
            )
        cal = load_calibration(calibration, store=store) if calibration else None
        judge_obj = _judge(judge, judge_base_url, domain or "generic", concurrency, judge_cache)
        res = score_unscored(
            store,
            trajectories_version=v,
            profile=domain,
            layers=("rules", "judge") if judge_obj else ("rules",),
            judge=judge_obj,
            weights=_weights(weights),
            outcome_weight=outcome_weight,
            calibration=cal,
        )
        ids = store.read("trajectories", version=v, columns=["id", "domain"])
        rows = (
            store.read("rewards", filter=pl.col("config_hash").is_in(res.config_hashes))
            .join(ids.select("id"), left_on="trajectory_id", right_on="id", how="semi")
            .sort("task_id", "trajectory_id")
        )
        configs = {
            e.config_hash: e.config
            for e in (
                engine_for(d, profile=domain, layers=("rules", "judge") if judge_obj else ("rules",),
                           judge=judge_obj, weights=_weights(weights),
                           outcome_weight=outcome_weight, calibration=cal)
                for d in ids["domain"].unique().to_list()
            )
        }  # fmt: skip
        one = len(configs) == 1
        extra = {
            "config": next(iter(configs.values())) if one else None,
            "config_hash": next(iter(configs)) if one else None,
            "configs": configs,
            "store": store.url,
            "trajectories_version": v,
            "judge_usage": judge_obj.usage.to_dict() if judge_obj else None,
            "rejected": [],
        }
        if out is None:
            writer = RewardsWriter(sys.stdout.buffer, **extra)
            writer.add(reward_dicts(rows))
            writer.close()
            sys.stdout.buffer.write(b"\n")
            sys.stdout.flush()
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "wb") as f:
                writer = RewardsWriter(f, **extra)
                writer.add(reward_dicts(rows))
                writer.close()
            typer.echo(f"wrote {out}", err=True)
    except (KnowlyrError, ValueError, OSError) as e:
        raise _fail(e) from e
    new = len(res.trajectory_ids)
    replaced = f", {res.replaced} of them again as their outcome changed" if res.replaced else ""
    typer.echo(
        f"scored {new} trajectories of {store.url} trajectories@{v}{replaced} "
        f"({rows.height - new} already scored), config {', '.join(res.config_hashes)}",
        err=True,
    )


_REWARDS_FIX = "give the rewards JSON that `knowlyr reward score -o FILE` writes"


@reward_app.command("preferences")
def preferences(
    rewards_file: Path = typer.Argument(
        ..., help="Rewards JSON written by `knowlyr reward score`."
    ),
    min_margin: float = typer.Option(0.05, help="Smallest total-reward margin for a pair."),
    max_pairs_per_task: int | None = typer.Option(None, help="Keep the widest N pairs per task."),
    store: str | None = typer.Option(
        None, "--store", "-s", help="Also append the pairs to this store."
    ),
    out: Path | None = typer.Option(None, "-o", "--output"),
) -> None:
    """Preference pairs (chosen / rejected, rewards, margin, reason) per task, as JSON."""
    from knowlyr.errors import KnowlyrError
    from knowlyr.reward.engine import load_rewards
    from knowlyr.reward.preferences import build_preferences, preferences_frame

    _require([rewards_file], "REWARDS_FILE", _REWARDS_FIX)
    try:
        pairs = build_preferences(load_rewards(rewards_file), min_margin=min_margin,
                                  max_pairs_per_task=max_pairs_per_task)  # fmt: skip
        if store:
            from knowlyr.store import Store

            Store.open(store).append("preferences", preferences_frame(pairs))
    except (KnowlyrError, ValueError, OSError) as e:
        raise _fail(e) from e
    from dataclasses import asdict

    _write(json.dumps([asdict(p) for p in pairs], indent=2), out)
    typer.echo(f"{len(pairs)} preference pairs", err=True)


@reward_app.command("calibrate")
def calibrate_cmd(
    rewards_file: Path | None = typer.Argument(
        None, help="Rewards JSON written by `knowlyr reward score` (human calibration)."
    ),
    annotations: Path | None = typer.Argument(
        None, help="Human scores: CSV or JSONL (trajectory_id, step_index, score, annotator)."
    ),
    outcomes: list[Path] | None = typer.Option(
        None,
        "--outcomes",
        help="Fit P(success | facets) on these labelled runs instead (agent logs or "
        "trajectory JSONL; repeatable). Labels: --results, else each run's own outcome.",
    ),
    results: list[Path] | None = typer.Option(
        None, "--results", "-r", help="Evaluation results labelling --outcomes (repeatable)."
    ),
    from_store: bool = typer.Option(
        False,
        "--from-store",
        help="Fit on the labelled trajectories of --store (see `knowlyr store label`).",
    ),
    domain: str = typer.Option("coding", "--domain", "-d", help="Domain profile of the rules."),
    method: str = typer.Option("sigmoid", help="'sigmoid' (Platt) or 'isotonic' (outcomes)."),
    folds: int = typer.Option(5, help="k of the k-fold cross-validation (outcomes)."),
    plot: Path | None = typer.Option(None, help="Write the reliability diagram (PNG) here."),
    store: str | None = typer.Option(
        None, "--store", "-s", help="Store the fitted outcome calibration (with lineage) here."
    ),
    format: str | None = typer.Option(None, "--format", "-f", help="Force a recorder format."),
    level: str = typer.Option("trajectory", help="'trajectory' (totals) or 'step' (step rewards)."),
    n_boot: int = typer.Option(1000, help="Bootstrap resamples for the confidence intervals."),
    out: Path | None = typer.Option(
        None, "-o", "--output", help="Write the calibration JSON here."
    ),
    report: Path | None = typer.Option(None, help="Write the report JSON here."),
) -> None:
    """Fit a calibration: P(success | trajectory facets) on labelled runs (--outcomes or
    --from-store), or an isotonic map from automatic to human scores (REWARDS_FILE
    ANNOTATIONS). Prints the cross-validated quality."""
    if outcomes or from_store:
        _calibrate_outcomes(outcomes or [], results or [], from_store, domain, method, folds,
                            plot, store, format, out, report)  # fmt: skip
        return
    if rewards_file is None or annotations is None:
        raise typer.BadParameter(
            "give REWARDS_FILE and ANNOTATIONS (human calibration), or --outcomes LOGS / "
            "--from-store (calibration against outcomes)"
        )
    from knowlyr.errors import KnowlyrError
    from knowlyr.reward.calibration import calibrate, load_annotations
    from knowlyr.reward.engine import load_rewards

    if level not in ("trajectory", "step"):
        raise typer.BadParameter(f"--level must be 'trajectory' or 'step', got {level!r}")
    _require([rewards_file], "REWARDS_FILE", _REWARDS_FIX)
    _require([annotations], "ANNOTATIONS", "give a CSV or JSONL of human scores")
    try:
        anns = load_annotations(annotations)
        for msg in anns.rejected:
            typer.echo(f"rejected {msg}", err=True)
        res = calibrate(load_rewards(rewards_file), anns.items, level=level, n_boot=n_boot)  # type: ignore[arg-type]
    except (KnowlyrError, ValueError, OSError) as e:
        raise _fail(e) from e
    typer.echo(f"matched {res.n_matched} annotated items ({res.n_unmatched} unmatched)")
    typer.echo("before:\n" + res.before.table())
    typer.echo("after (in-sample):\n" + res.after.table())
    if res.after_cv is not None:
        typer.echo("after (5-fold cross-validated):\n" + res.after_cv.table())
    typer.echo(f"calibration map version {res.map.version}")
    if out is not None:
        res.map.save(out)
        typer.echo(f"wrote {out}", err=True)
    if report is not None:
        report.write_text(json.dumps(res.to_dict(), indent=2))


def _calibrate_outcomes(
    paths: list[Path],
    results: list[Path],
    from_store: bool,
    domain: str,
    method: str,
    folds: int,
    plot: Path | None,
    store: str | None,
    format: str | None,
    out: Path | None,
    report: Path | None,
) -> None:
    """``reward calibrate --outcomes`` / ``--from-store``."""
    from knowlyr.errors import KnowlyrError
    from knowlyr.reward.outcome_calibration import plot_reliability

    if method not in ("sigmoid", "isotonic"):
        raise typer.BadParameter(f"--method must be 'sigmoid' or 'isotonic', got {method!r}")
    if from_store and not store:
        raise typer.BadParameter("--from-store needs --store URL")
    _require(paths, "--outcomes", "give agent logs or trajectory JSONL")
    _require(results, "--results", "give evaluation results files")
    try:
        if from_store:
            from knowlyr.reward.store_io import calibrate_from_store
            from knowlyr.store import Store

            fit = calibrate_from_store(
                Store.open(store), profile=domain, method=method, folds=folds
            )
            res = fit.result
            typer.echo(f"{fit.unlabelled} trajectories without a label were left out", err=True)
        else:
            res = _fit_on_logs(paths, results, domain, method, folds, format)
            if store:
                from knowlyr.reward.store_io import save_calibration
                from knowlyr.store import Store

                save_calibration(Store.open(store), res, profile=domain,
                                 params={"method": method, "logs": [str(p) for p in paths]})  # fmt: skip
    except (KnowlyrError, ValueError, OSError) as e:
        raise _fail(e) from e
    typer.echo(res.summary())
    typer.echo("reliability (held-out): predicted -> observed (runs)")
    for pred, obs, n in res.reliability:
        typer.echo(f"  {pred:.2f} -> {obs:.2f} ({n})")
    typer.echo(f"calibration {res.model.version}" + (f" stored in {store}" if store else ""))
    if out is not None:
        res.model.save(out)
        typer.echo(f"wrote {out}", err=True)
    if plot is not None:
        plot_reliability(res, plot)
        typer.echo(f"wrote {plot}", err=True)
    if report is not None:
        report.write_text(json.dumps(res.to_dict(), indent=2))


def _fit_on_logs(
    paths: list[Path],
    results: list[Path],
    domain: str,
    method: str,
    folds: int,
    format: str | None,
) -> Any:
    from knowlyr._gc import paused
    from knowlyr.labels import load_labels
    from knowlyr.recorder import Converted, iter_records
    from knowlyr.reward.engine import RewardEngine
    from knowlyr.reward.outcome_calibration import fit_outcome_calibration

    labels = load_labels(results) if results else {}
    runs, ys, unlabelled = [], [], 0
    with paused():
        for r in iter_records(paths, format=format):
            if not isinstance(r, Converted):
                typer.echo(
                    f"rejected {r.path}{f':{r.line}' if r.line else ''}: {r.reason}", err=True
                )
                continue
            t = r.trajectory
            lab = labels.get(t.task.task_id)
            y = lab.resolved if lab is not None else t.outcome.resolved
            y = t.outcome.success if y is None else y
            if y is None:
                unlabelled += 1
                continue
            runs.append(t)
            ys.append(y)
        if unlabelled:
            typer.echo(f"{unlabelled} runs without a label were left out", err=True)
        if labels:
            unknown = set(labels) - {t.task.task_id for t in runs}
            if unknown:
                typer.echo(f"{len(unknown)} labels name instances with no run: "
                           f"{', '.join(sorted(unknown)[:5])}{'...' if len(unknown) > 5 else ''}",
                           err=True)  # fmt: skip
        rewards = RewardEngine(domain, outcome_weight=0.0).score(runs)
    return fit_outcome_calibration(runs, rewards, ys, method=method, folds=folds)


@reward_app.command("leaderboard")
def leaderboard_cmd(
    rewards_file: Path = typer.Argument(
        ..., help="Rewards JSON written by `knowlyr reward score`."
    ),
    by: str = typer.Option("agent", help="Group by: agent, model or agent,model."),
    confidence: float = typer.Option(0.95, help="Confidence level of the intervals."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Mean reward and success rate per agent/model with confidence intervals."""
    from knowlyr.errors import KnowlyrError
    from knowlyr.reward.engine import load_rewards
    from knowlyr.reward.preferences import leaderboard

    _require([rewards_file], "REWARDS_FILE", _REWARDS_FIX)
    try:
        rows = leaderboard(load_rewards(rewards_file), by=[b.strip() for b in by.split(",")],
                           confidence=confidence)  # fmt: skip
    except (KnowlyrError, ValueError, OSError) as e:
        raise _fail(e) from e
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    pct = f"{confidence:.0%}"
    typer.echo(
        f"{'rank':>4}  {'group':30} {'n':>5}  {'mean reward':>11}  {pct + ' CI':>17}  {'success':>7}  {pct + ' CI':>15}"
    )
    for i, r in enumerate(rows, 1):
        group = ", ".join(f"{v}" for v in r.key.values())
        succ = f"{r.success_rate:7.1%}" if r.success_rate is not None else f"{'-':>7}"
        sci = f"[{r.success_low:.2f}, {r.success_high:.2f}]" if r.success_low is not None else "-"
        typer.echo(
            f"{i:>4}  {group[:30]:30} {r.n:>5}  {r.mean_reward:11.3f}  [{r.reward_low:.3f}, {r.reward_high:.3f}]  {succ}  {sci:>15}"
        )


@reward_app.command("rubrics")
def rubrics_cmd(
    domain_arg: str | None = typer.Argument(
        None, metavar="[DOMAIN]", help="Domain profile name or profile file."
    ),
    domain: str = typer.Option(
        "generic", "--domain", "-d", help="Domain profile name or profile file."
    ),
) -> None:
    """The rubrics of a domain: layer, normalised weight and what each measures."""
    domain = domain_arg or domain
    from knowlyr.core import get_profile
    from knowlyr.errors import KnowlyrError
    from knowlyr.reward.rubrics import RUBRIC_VERSION, all_rubrics

    try:
        prof = get_profile(domain)
        weights = prof.normalized_weights()
    except (KnowlyrError, ValueError) as e:
        raise _fail(e) from e
    typer.echo(
        f"domain {prof.domain} (rubric version {RUBRIC_VERSION}); weights from the profile, normalised"
    )
    for r in all_rubrics(prof):
        typer.echo(f"{r.name:20} {r.layer:6} {weights.get(r.name, 0.0):6.3f}  {r.description}")
