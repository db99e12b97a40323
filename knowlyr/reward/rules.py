"""Layer 1: deterministic rule rewards, computed over whole batches of steps at once.

The rules run as polars expressions over one flat *step table* holding every step of every
trajectory in the batch (:func:`step_table`); a Python pass only extracts each step's facets
(canonical tool, category, target, edit payload, signature hash), everything else is
vectorised. Four rubrics, each a score in [0, 1] per step (``None`` = not applicable):

``non_redundancy``
    0 when the step repeats an identical earlier call of the same trajectory with no state
    change in between. A state change is an applied write (a write whose observation reports
    no failure) or a command execution; for a read or query of a target (a file, a record id)
    only writes *to that target* (and executions) count, so re-reading a file nobody changed
    is redundant.
``non_regression``
    0 when an applied edit undoes an earlier applied edit of the same file: a replacement
    ``old -> new`` after ``new -> old`` (our ``edit_file``, OpenHands ``str_replace_editor``
    ``old_str/new_str``, agentskills ``edit_file_by_replace``, SWE-agent ``edit 'a' 'b'``), a
    region or whole-file edit that restores content the region had before a different edit
    (SWE-agent ``edit 4:4``, OpenHands ``edit``, ``create``), or an explicit ``undo_edit``.
``info_utilization``
    1 when the action's parameters contain a salient token (a file name, dotted or
    snake_case identifier, an id with digits, a number of 3+ digits) that the task
    instruction or an earlier observation of the trajectory revealed; 0 when such tokens
    were revealed and the action uses none of them; ``None`` when nothing was revealed yet
    or the action has no salient token.
``efficiency``
    With reference length ``L`` (``TaskInfo.metadata["reference_steps"]`` or a task field
    ``reference_steps``; else the median length of the batch's trajectories of the same task
    when there are at least two): 1 for step index ``i < L``, ``L / (i + 1)`` beyond it;
    ``None`` without a reference.

Example:
    >>> from knowlyr.core import get_profile
    >>> from knowlyr.trajectory import Step, ToolCall, Observation
    >>> steps = [Step(index=i, action=ToolCall(tool="read_file", params={"path": "a.py"}),
    ...               observation=Observation(output="x = 1")) for i in range(2)]
    >>> redundancy_reward(steps, profile=get_profile("coding"))
    [1.0, 0.0]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from knowlyr.core.profile import DomainProfile, get_profile
from knowlyr.reward.actions import NO_EDIT, REGION, REPLACE, UNDO, ToolResolver, action_facets
from knowlyr.trajectory import Step, TaskInfo, Trajectory

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "RULE_COLUMNS",
    "TOKEN_PATTERN",
    "efficiency_reward",
    "info_utilization_reward",
    "redundancy_reward",
    "reference_steps",
    "regression_reward",
    "rule_scores",
    "score_rules",
    "step_table",
]

RULE_COLUMNS = ("non_redundancy", "non_regression", "info_utilization", "efficiency")

#: Salient tokens: file names / dotted names, snake_case identifiers, ids with digits, numbers.
TOKEN_PATTERN = r"[A-Za-z0-9_][\w\-]*(?:\.[A-Za-z_][\w\-]*)+|[A-Za-z_]\w*_\w+|[A-Za-z]+\d\w*|\d{3,}"

_FAILURE = re.compile(
    r"Your proposed edit has introduced new syntax error|No exact match found|"
    r"No replacement was performed|did not appear verbatim|^ERROR:|^Error:|"
    r"is not a valid|No such file or directory"
)
_OBS_CAP = 20_000
_ENGINE = "auto"
_MIX = 0x2545F4914F6CDD1D  # odd 63-bit multiplier spreading trajectory ids over the key
_CMD_KEYS = {
    "command",
    "cmd",
    "args",
    "input",
}  # SWE-agent commands may depend on the open file  # characters of an observation scanned for tokens


def reference_steps(task: TaskInfo) -> float | None:
    """The task's reference length: ``metadata["reference_steps"]`` or a ``reference_steps``
    task field; ``None`` when absent or not a positive number."""
    ref = task.metadata.get("reference_steps")
    if ref is None and task.model_extra:
        ref = task.model_extra.get("reference_steps")
    try:
        value = float(ref) if ref is not None else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and value > 0 else None


def _text_of(params: dict[str, Any]) -> str:
    parts = []
    for v in params.values():
        if isinstance(v, str):
            parts.append(v)
        elif v is not None and not isinstance(v, bool):
            parts.append(orjson.dumps(v).decode() if isinstance(v, dict | list) else str(v))
    return "\n".join(parts).replace("end_of_edit", "")


def step_table(trajectories: Sequence[Trajectory], profile: DomainProfile | str) -> pl.DataFrame:
    """One row per step of every trajectory: the flat table the rules run on.

    Columns: ``traj`` (position in ``trajectories``), ``step`` (position in the trajectory),
    ``task``, ``n_steps``, ``ref_steps``, ``cat`` (category, ``""`` for a message step),
    ``target``, ``sig`` (hash of canonical tool + parameters), ``ok`` (the observation reports
    no failure), ``edit_kind``, ``fwd``/``rev`` (hashes of a replacement and its inverse),
    ``region``/``content`` (hashes of a region edit), ``act_text``, ``obs_text``,
    ``instruction`` (the task instruction on each trajectory's first row, else empty).

    Args:
        trajectories: the batch.
        profile: a DomainProfile or a built-in profile name; tools it does not know fall back
            to the generic name heuristic.
    """
    import polars as pl

    prof = ToolResolver(get_profile(profile))
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "traj", "step", "task", "n_steps", "ref_steps", "cat", "target", "sig", "ok",
            "edit_kind", "fwd", "rev", "region", "content", "act_text", "obs_text", "instruction",
        )
    }  # fmt: skip
    (c_traj, c_step, c_task, c_n, c_ref, c_cat, c_target, c_sig, c_ok, c_kind, c_fwd, c_rev,
     c_region, c_content, c_act, c_obs, c_instr) = cols.values()  # fmt: skip
    memo: dict[tuple[str, bytes, str | None], Any] = {}
    dumps = orjson.dumps
    sort = orjson.OPT_SORT_KEYS
    for t_i, traj in enumerate(trajectories):
        n = len(traj.steps)
        ref = reference_steps(traj.task)
        task_id = traj.task.task_id
        open_file: str | None = None
        instruction = traj.task.instruction[:_OBS_CAP]
        for s_i, step in enumerate(traj.steps):
            c_instr.append("" if s_i else instruction)
            c_traj.append(t_i)
            c_step.append(s_i)
            c_task.append(task_id)
            c_n.append(n)
            c_ref.append(ref)
            obs = step.observation
            out = obs.output if obs is not None else ""
            c_obs.append(out if len(out) <= _OBS_CAP else out[:_OBS_CAP])
            action = step.action
            if action is None:
                c_cat.append("")
                c_target.append(None)
                c_sig.append(None)
                c_ok.append(True)
                c_kind.append(NO_EDIT)
                c_fwd.append(None)
                c_rev.append(None)
                c_region.append(None)
                c_content.append(None)
                c_act.append("")
                continue
            params = action.params
            dumped = dumps(params, option=sort)
            key = (action.tool, dumped, open_file if _CMD_KEYS & params.keys() else None)
            hit = memo.get(key)
            if hit is None:
                f = action_facets(prof, action.tool, params, open_file)
                hit = (f, hash((f.tool, action.tool, dumped, f.target)), _text_of(params))
                if len(memo) > 200_000:
                    memo.clear()
                memo[key] = hit
            f, sig, act_text = hit
            if (f.category == "read" and f.target is not None) or (
                f.tool == "write_file" and f.target is not None
            ):
                open_file = f.target
            ok = obs is None or (
                (obs.exit_code is None or obs.exit_code == 0) and obs.error is None
            )
            if ok and f.category == "write" and _FAILURE.search(out[:2000]):
                ok = False
            c_cat.append(f.category)
            c_target.append(f.target)
            c_sig.append(sig)
            c_ok.append(ok)
            c_kind.append(f.edit_kind)
            if f.edit_kind == REPLACE:
                c_fwd.append(hash((f.target, f.old, f.new)))
                c_rev.append(hash((f.target, f.new, f.old)))
            else:
                c_fwd.append(None)
                c_rev.append(None)
            if f.edit_kind == REGION:
                c_region.append(hash((f.target, f.old)))
                c_content.append(hash(f.new))
            else:
                c_region.append(None)
                c_content.append(None)
            c_act.append(act_text)
    schema = {
        "traj": pl.UInt32, "step": pl.UInt32, "task": pl.String, "n_steps": pl.UInt32,
        "ref_steps": pl.Float64, "cat": pl.String, "target": pl.String, "sig": pl.Int64,
        "ok": pl.Boolean, "edit_kind": pl.UInt8, "fwd": pl.Int64, "rev": pl.Int64,
        "region": pl.Int64, "content": pl.Int64, "act_text": pl.String, "obs_text": pl.String,
        "instruction": pl.String,
    }  # fmt: skip
    return pl.DataFrame(cols, schema=schema)


def rule_scores(table: pl.DataFrame) -> pl.DataFrame:
    """The four rule rubrics for every row of a :func:`step_table` (vectorised).

    The table must be ordered by trajectory then step (as :func:`step_table` builds it).

    Returns:
        ``traj``, ``step``, one Float64 column per rubric in :data:`RULE_COLUMNS`
        (null = not applicable) and ``reference`` (the reference length used for
        efficiency, null without one), in the table's row order.
    """
    import polars as pl

    base = table.lazy().with_row_index("_row")
    first = pl.col("step") == 0
    cat = pl.col("cat")
    is_x = (cat == "execute").cast(pl.Int32)
    is_w = ((cat == "write") & pl.col("ok")).cast(pl.Int32)
    read_t = cat.is_in(["read", "query"]) & pl.col("target").is_not_null()

    def before(flag: pl.Expr) -> pl.Expr:
        """Count of ``flag`` in earlier steps of the same trajectory (no group window)."""
        run = flag.cum_sum() - flag  # global count before this row
        return run - pl.when(first).then(run).otherwise(None).forward_fill()

    df = base.with_columns(
        _before=before(is_x)
        + pl.when(read_t)
        .then(is_w.cum_sum().over("traj", "target") - is_w)
        .otherwise(before(is_w)),
        _self=is_x + is_w,
    ).with_columns(
        # one Int64 key for (trajectory, signature): a single-key window is ~2x cheaper
        _prev_after=(pl.col("_before") + pl.col("_self"))
        .shift(1)
        .over(pl.col("sig") ^ (pl.col("traj").cast(pl.Int64) * _MIX))
    )
    redundancy = pl.when(
        pl.col("sig").is_not_null()
        & pl.col("_prev_after").is_not_null()
        & (pl.col("_before") == pl.col("_prev_after"))
    ).then(0.0)

    # Regression: replacements reversing an earlier applied replacement, region edits restoring
    # earlier content, explicit undos.
    applied = base.filter(pl.col("ok") & (pl.col("edit_kind") == REPLACE))
    first_fwd = applied.group_by("traj", "fwd").agg(_first=pl.col("step").min())
    rev_hit = (
        applied.select("_row", "traj", "step", "rev")
        .join(first_fwd, left_on=["traj", "rev"], right_on=["traj", "fwd"], how="inner")
        .filter(pl.col("_first") < pl.col("step"))
        .select("_row")
    )
    region = (
        base.filter(pl.col("ok") & (pl.col("edit_kind") == REGION))
        .with_columns(
            _prev=pl.col("content").shift(1).over("traj", "region"),
            _first=pl.col("step").min().over("traj", "region", "content"),
        )
        .filter(
            pl.col("_prev").is_not_null()
            & (pl.col("_prev") != pl.col("content"))
            & (pl.col("_first") < pl.col("step"))
        )
        .select("_row")
    )
    undo = base.filter(pl.col("ok") & (pl.col("edit_kind") == UNDO)).select("_row")
    regress = pl.concat([rev_hit, region, undo]).unique().with_columns(_regress=pl.lit(True))

    # Information utilization: salient action tokens first revealed by an earlier observation.
    obs_tok = (
        pl.concat(
            [
                base.select("traj", "step", tok=pl.col("obs_text").str.extract_all(TOKEN_PATTERN)),
                # the task instruction counts as an observation before step 0
                base.filter(first & (pl.col("instruction") != "")).select(
                    "traj",
                    step=pl.lit(-1, pl.Int64),
                    tok=pl.col("instruction").str.extract_all(TOKEN_PATTERN),
                ),
            ],
            how="vertical_relaxed",
        )
        .explode("tok")
        .drop_nulls("tok")
    )
    first_seen = obs_tok.group_by("traj", "tok").agg(_seen=pl.col("step").min())
    first_reveal = obs_tok.group_by("traj").agg(_reveal=pl.col("step").min())
    used = (
        base.filter(pl.col("cat") != "")
        .select("_row", "traj", "step", tok=pl.col("act_text").str.extract_all(TOKEN_PATTERN))
        .explode("tok")
        .drop_nulls("tok")
        .join(first_seen, on=["traj", "tok"], how="left")
        .group_by("_row")
        .agg(_used=(pl.col("_seen") < pl.col("step")).any())
    )

    # Efficiency against the task's reference length (else the batch median for the task).
    batch_ref = (
        base.filter(first)
        .group_by("task")
        .agg(_med=pl.col("n_steps").median(), _cnt=pl.len())
        .filter(pl.col("_cnt") >= 2)
        .select("task", "_med")
    )
    i1 = pl.col("step").cast(pl.Float64) + 1.0
    ref = pl.coalesce("ref_steps", "_med").alias("reference")
    out = (
        df.join(regress, on="_row", how="left", maintain_order="left")
        .join(used, on="_row", how="left", maintain_order="left")
        .join(first_reveal, on="traj", how="left", maintain_order="left")
        .join(batch_ref, on="task", how="left", maintain_order="left")
        .select(
            "traj",
            "step",
            non_redundancy=redundancy.otherwise(1.0),
            non_regression=pl.when(pl.col("_regress")).then(0.0).otherwise(1.0),
            info_utilization=pl.when(
                pl.col("_used").is_not_null()
                & pl.col("_reveal").is_not_null()
                & (pl.col("_reveal") < pl.col("step"))
            ).then(pl.col("_used").cast(pl.Float64)),
            efficiency=pl.when(ref.is_null())
            .then(None)
            .when(i1 <= ref)
            .then(1.0)
            .otherwise(ref / i1),
            reference=ref,
        )
    )
    return out.collect(engine=_ENGINE)


def score_rules(
    trajectories: Sequence[Trajectory], profile: DomainProfile | str = "generic"
) -> pl.DataFrame:
    """Rule scores for a whole batch: :func:`rule_scores` of :func:`step_table`.

    Example:
        >>> df = score_rules(trajectories, "coding")  # doctest: +SKIP
        >>> df.columns
        ['traj', 'step', 'non_redundancy', 'non_regression', 'info_utilization', 'efficiency', 'reference']
    """
    return rule_scores(step_table(trajectories, profile))


def _one(steps: Sequence[Step], profile: DomainProfile | str, column: str, task: TaskInfo | None):
    traj = Trajectory(task=task or TaskInfo(task_id="_"), steps=list(steps))
    return score_rules([traj], profile)[column].to_list()


def redundancy_reward(
    steps: Sequence[Step], *, profile: DomainProfile | str = "generic"
) -> list[float]:
    """``non_redundancy`` per step of one trajectory (1 = not redundant)."""
    return _one(steps, profile, "non_redundancy", None)


def regression_reward(
    steps: Sequence[Step], *, profile: DomainProfile | str = "generic"
) -> list[float]:
    """``non_regression`` per step of one trajectory (0 = undoes an earlier edit)."""
    return _one(steps, profile, "non_regression", None)


def info_utilization_reward(
    steps: Sequence[Step], *, profile: DomainProfile | str = "generic"
) -> list[float | None]:
    """``info_utilization`` per step of one trajectory (``None`` = not applicable)."""
    return _one(steps, profile, "info_utilization", None)


def efficiency_reward(
    steps: Sequence[Step], *, reference_steps: float, profile: DomainProfile | str = "generic"
) -> list[float]:
    """``efficiency`` per step of one trajectory against ``reference_steps``."""
    if reference_steps <= 0:
        raise ValueError(f"reference_steps must be positive, got {reference_steps}")
    task = TaskInfo(task_id="_", metadata={"reference_steps": reference_steps})
    return _one(steps, profile, "efficiency", task)
