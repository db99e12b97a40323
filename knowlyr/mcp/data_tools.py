"""The recorder, reward and export tools of the MCP server: each one calls the library.

Every function takes the server state, its typed input and a progress callback, and returns
plain JSON data; errors are raised (the server turns them into MCP tool errors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import orjson

from knowlyr.errors import ConfigError, first_error
from knowlyr.mcp import models as m

if TYPE_CHECKING:
    from knowlyr.mcp.server import ServerState
    from knowlyr.trajectory import Trajectory

Progress = Callable[[float, float | None, str | None], None]

__all__ = [
    "build_preferences",
    "calibrate_reward",
    "convert_logs",
    "export_dataset",
    "get_schema",
    "list_rubrics",
    "load_trajectory",
    "recorder_diff",
    "reward_leaderboard",
    "score_trajectory",
    "validate_logs",
]


def parse_trajectory(value: dict[str, Any] | str) -> Trajectory:
    """A Trajectory from its JSON object or text; a bad one is a ConfigError naming the field."""
    from knowlyr.trajectory import Trajectory

    try:
        if isinstance(value, str):
            return Trajectory.from_json(value)
        return Trajectory.model_validate(value)
    except ValueError as e:
        raise ConfigError(
            f"`trajectory` is not a Trajectory ({first_error(e)}); pass the JSON that "
            "get_schema describes, or a file through `path`"
        ) from None


def _convert(state: ServerState, paths: list[str], fmt: str | None) -> Any:
    from knowlyr.recorder import convert

    return convert(state.roots.paths(paths), format=fmt)


def load_trajectory(
    state: ServerState, trajectory: dict[str, Any] | str | None, path: str | None, index: int = 0
) -> Trajectory:
    """The trajectory given inline, or record ``index`` of the file at ``path``."""
    if trajectory is not None:
        return parse_trajectory(trajectory)
    assert path is not None
    rep = _convert(state, [path], None)
    if index >= len(rep.trajectories):
        why = "; ".join(str(r) for r in rep.rejected_records[:3]) or "no records"
        raise ConfigError(
            f"{path} has {len(rep.trajectories)} readable record(s), no record {index}"
            + (f" (rejected: {why})" if rep.rejected_records or not rep.trajectories else "")
        )
    return rep.trajectories[index]


# -- recorder ---------------------------------------------------------------------------
def convert_logs(state: ServerState, inp: m.ConvertLogsInput, progress: Progress) -> dict[str, Any]:
    """Convert agent logs (OpenHands, SWE-agent, chat, ATIF...) into a trajectory JSONL file."""
    from knowlyr.recorder import Encoded, iter_encoded, iter_files

    paths = state.roots.paths(inp.paths)
    out = state.roots.output(inp.output)
    rejected_file = out.with_name(out.name.removesuffix(".jsonl") + ".rejected.jsonl")
    files = list(iter_files(paths))
    done = [0]

    def advance(_p: object) -> None:
        done[0] += 1
        progress(done[0], len(files), f"converted {done[0]}/{len(files)} files")

    counts = {"read": 0, "converted": 0, "rejected": 0}
    formats: dict[str, int] = {}
    reasons: list[str] = []
    with open(out, "wb") as f, open(rejected_file, "wb") as rej:
        for r in iter_encoded(
            files, format=inp.format, redact=inp.redact, workers=1, progress=advance
        ):
            counts["read"] += 1
            if isinstance(r, Encoded):
                counts["converted"] += 1
                formats[r.format] = formats.get(r.format, 0) + 1
                f.write(r.json + b"\n")
            else:
                counts["rejected"] += 1
                rej.write(orjson.dumps(r.to_dict()) + b"\n")
                if len(reasons) < 10:
                    reasons.append(str(r))
    if not counts["rejected"]:
        rejected_file.unlink()
    return {
        **counts,
        "formats": formats,
        "output": str(out),
        "rejected_file": str(rejected_file) if counts["rejected"] else None,
        "rejections": reasons,
    }


def validate_logs(
    state: ServerState, inp: m.ValidateLogsInput, progress: Progress
) -> dict[str, Any]:
    """Convert and check every record of the logs; list each problem."""
    from knowlyr.recorder import Converted, iter_records
    from knowlyr.recorder.inspect import validate_trajectory

    problems: list[dict[str, Any]] = []
    n = bad = 0
    for r in iter_records(state.roots.paths(inp.paths), format=inp.format):
        n += 1
        if not isinstance(r, Converted):
            bad += 1
            problems.append({"path": r.path, "line": r.line, "problem": f"rejected: {r.reason}"})
            continue
        found = validate_trajectory(r.trajectory)
        bad += bool(found)
        src = r.trajectory.source
        problems += [{"path": src.path, "line": src.line, "problem": p} for p in found]
    return {"records": n, "ok": n - bad, "with_problems": bad, "problems": problems[:200]}


def get_schema(state: ServerState, inp: m.GetSchemaInput, progress: Progress) -> dict[str, Any]:
    """The JSON Schema of the Trajectory model (and the log formats the recorder reads)."""
    from knowlyr.trajectory import Trajectory

    out: dict[str, Any] = {"trajectory": Trajectory.model_json_schema()}
    if inp.include_formats:
        from knowlyr.recorder.base import adapters

        out["formats"] = [
            {
                "name": a.name,
                "kind": "session" if a.session else "record",
                "description": a.description,
            }
            for a in adapters()
        ]
    return out


def recorder_diff(
    state: ServerState, inp: m.RecorderDiffInput, progress: Progress
) -> dict[str, Any]:
    """Compare two trajectories (logs or trajectory files): steps, tools used, outcome, first divergence."""
    from knowlyr.recorder.inspect import diff_trajectories

    a = load_trajectory(state, None, inp.a)
    b = load_trajectory(state, None, inp.b)
    d = diff_trajectories(a, b)
    return {"a": {"id": a.id, "task_id": a.task.task_id}, "b": {"id": b.id, "task_id": b.task.task_id},
            **d.to_dict(), "rows": [list(r) for r in d.rows[:200]]}  # fmt: skip


# -- reward -----------------------------------------------------------------------------
def score_trajectory(
    state: ServerState, inp: m.ScoreTrajectoryInput, progress: Progress
) -> dict[str, Any]:
    """Per-step and total process rewards (rule layer; LLM judge with `judge`) of trajectories."""
    from knowlyr.reward.engine import RewardEngine

    trajs, rejected = [], []
    if inp.trajectory is not None:
        trajs.append(parse_trajectory(inp.trajectory))
    if inp.paths:
        rep = _convert(state, inp.paths, None)
        trajs += rep.trajectories
        rejected = [str(r) for r in rep.rejected_records]
    if not trajs:
        raise ConfigError(f"nothing to score: every input was rejected ({'; '.join(rejected[:3])})")
    out = state.roots.output(inp.output) if inp.output else None
    store = state.open_store(inp.store) if inp.store else None
    domain = state.domain(inp.domain)
    judge = None
    if inp.judge:
        from knowlyr.reward.judge import LLMJudge, make_backend

        judge = LLMJudge(make_backend(state.judge_spec(inp.judge)), profile=domain)
    engine = RewardEngine(domain, layers=("rules", "judge") if judge else ("rules",),
                          weights=inp.weights, judge=judge)  # fmt: skip
    rewards = engine.score(trajs)
    if out is not None:
        from knowlyr.reward.engine import dump_rewards

        out.write_bytes(dump_rewards(rewards, config=engine.config, config_hash=engine.config_hash))
    if store is not None:
        engine.save(store, rewards)
    return {
        "config_hash": engine.config_hash,
        "rewards": [r.to_dict() for r in rewards],
        "rejected": rejected,
        "output": str(out) if out else None,
    }


def build_preferences(
    state: ServerState, inp: m.BuildPreferencesInput, progress: Progress
) -> dict[str, Any]:
    """Preference pairs (chosen / rejected, margin, reason) per task from scored trajectories."""
    from knowlyr.reward.engine import load_rewards
    from knowlyr.reward.preferences import build_preferences as build
    from knowlyr.reward.preferences import preferences_frame

    rewards = load_rewards(state.roots.path(inp.rewards, must_exist=True))
    pairs = build(rewards, min_margin=inp.min_margin, max_pairs_per_task=inp.max_pairs_per_task)
    if inp.store:
        state.open_store(inp.store).append("preferences", preferences_frame(pairs))
    return {"pairs": [asdict(p) for p in pairs]}


def calibrate_reward(
    state: ServerState, inp: m.CalibrateRewardInput, progress: Progress
) -> dict[str, Any]:
    """Fit an isotonic map from automatic to human scores; agreement before and after."""
    from knowlyr.reward.calibration import calibrate, load_annotations
    from knowlyr.reward.engine import load_rewards

    rewards = load_rewards(state.roots.path(inp.rewards, must_exist=True))
    anns = load_annotations(state.roots.path(inp.annotations, must_exist=True))
    res = calibrate(rewards, anns.items, level=inp.level, n_boot=inp.n_boot)
    out = None
    if inp.output:
        out = state.roots.output(inp.output)
        res.map.save(out)
    return {**res.to_dict(), "version": res.map.version, "rejected_annotations": anns.rejected,
            "output": str(out) if out else None}  # fmt: skip


def list_rubrics(state: ServerState, inp: m.ListRubricsInput, progress: Progress) -> dict[str, Any]:
    """The rubrics of a domain profile: layer, normalised weight and what each measures."""
    from knowlyr.core import get_profile
    from knowlyr.reward.rubrics import RUBRIC_VERSION, all_rubrics

    prof = get_profile(state.domain(inp.domain))
    weights = prof.normalized_weights()
    return {
        "domain": prof.domain,
        "rubric_version": RUBRIC_VERSION,
        "rubrics": [
            {
                "name": r.name,
                "layer": r.layer,
                "weight": weights.get(r.name, 0.0),
                "description": r.description,
            }
            for r in all_rubrics(prof)
        ],
    }


def reward_leaderboard(
    state: ServerState, inp: m.RewardLeaderboardInput, progress: Progress
) -> dict[str, Any]:
    """Mean reward and success rate per agent / model with confidence intervals."""
    from knowlyr.reward.engine import load_rewards
    from knowlyr.reward.preferences import leaderboard

    rewards = load_rewards(state.roots.path(inp.rewards, must_exist=True))
    rows = leaderboard(rewards, by=list(inp.by), confidence=inp.confidence)
    return {"rows": [r.to_dict() for r in rows]}


# -- export -----------------------------------------------------------------------------
def export_dataset(
    state: ServerState, inp: m.ExportDatasetInput, progress: Progress
) -> dict[str, Any]:
    """Export trajectories as an SFT, DPO or GRPO dataset folder (Hugging Face datasets + card).

    The trajectories come from `paths`, from `store`, or (neither given) from the server's
    store."""
    from pathlib import Path

    from knowlyr.export import DEFAULT_SYSTEM_PROMPT, export_dpo, export_grpo, export_sft
    from knowlyr.export.sft_parallel import store_documents

    trajs: list[Any] = []  # the logs' trajectories, then the store's validated documents
    if inp.paths:
        trajs += _convert(state, inp.paths, None).trajectories
    store = None
    if inp.store is not None or not inp.paths:
        store = state.roots.store(inp.store)
        if not Path(store).is_dir():
            raise ConfigError(
                f"no store at {store}: fill it with process_log / process_logs_batch, or give "
                "`paths` (trajectory files or agent logs)"
            )
        trajs += store_documents(state.open_store(store).url)
    if not trajs:
        where = " and ".join(x for x in ("`paths`" if inp.paths else "", store or "") if x)
        raise ConfigError(
            f"no trajectories in {where}: give `paths` holding some, or fill the store first"
        )
    out = state.roots.output(inp.output)
    if inp.kind == "sft":
        result = export_sft(trajs, system_prompt=DEFAULT_SYSTEM_PROMPT, validated=True,
                            only_success=not inp.include_failed, min_reward=inp.min_reward)  # fmt: skip
    elif inp.kind == "dpo":
        result = export_dpo(trajs, system_prompt=DEFAULT_SYSTEM_PROMPT, validated=True,
                            min_margin=inp.min_margin)  # fmt: skip
    else:
        result = export_grpo(trajs, system_prompt=DEFAULT_SYSTEM_PROMPT, validated=True,
                             min_group_size=inp.min_group_size)  # fmt: skip
    card = result.card
    if card.rows == 0:
        raise ConfigError(
            f"the {inp.kind} export of {len(trajs)} trajectories has no rows, nothing written "
            f"(rejected: {dict(card.rejected)}); sft keeps successful ones unless include_failed, "
            "dpo needs two trajectories of a task whose rewards differ by min_margin"
        )
    result.save(out)
    return {"kind": card.kind, "rows": card.rows, "trajectories": card.trajectories,
            "rejected": dict(card.rejected), "output": str(out), "store": store}  # fmt: skip
