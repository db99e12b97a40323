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

from collections.abc import Sequence
from typing import TYPE_CHECKING

from knowlyr.core.profile import DomainProfile
from knowlyr.reward.actions import REGION, REPLACE, UNDO
from knowlyr.reward.steps import reference_steps, step_table
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

_ENGINE = "auto"
_MIX = 0x2545F4914F6CDD1D  # odd 63-bit multiplier spreading trajectory ids over a key


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

    # Redundancy on a narrow frame. "Earlier rows of the same group" comes from a stable sort
    # on one integer key (and back by row), ~5x cheaper here than group windows (``.over``).
    # Keys mix the trajectory into a 64-bit hash (a collision is negligible at these sizes).
    key_t = pl.col("target").hash() ^ (pl.col("traj").cast(pl.UInt64) * _MIX)
    key_s = pl.col("sig") ^ (pl.col("traj").cast(pl.UInt64) * _MIX)
    w = pl.col("_w")
    new_t = (pl.col("_k") != pl.col("_k").shift(1)).fill_null(True)
    run_w = w.cum_sum() - w  # in key order: applied writes before this row, all groups
    red = (
        base.select(
            "_row",
            _k=key_t,
            _s=key_s,  # null for a message step (no signature)
            _w=is_w,
            _self=is_x + is_w,
            _rt=read_t,
            # state changes before the row, but for a read's writes to its target (below)
            _b0=before(is_x) + pl.when(read_t).then(0).otherwise(before(is_w)),
        )
        .sort("_k", maintain_order=True)
        # writes to this row's target earlier in its trajectory
        .with_columns(_wt=run_w - pl.when(new_t).then(run_w).otherwise(None).forward_fill())
        .sort("_row")
        .select(
            "_row",
            "_s",
            _before=pl.col("_b0") + pl.when(pl.col("_rt")).then("_wt").otherwise(0),
            _self="_self",
        )
        .sort("_s", maintain_order=True)
        # state counter after the previous identical call of the trajectory
        .select(  # in signature order: joined back on the row
            "_row",
            non_redundancy=pl.when(
                pl.col("_s").is_not_null()
                & (pl.col("_s") == pl.col("_s").shift(1))
                & (pl.col("_before") == (pl.col("_before") + pl.col("_self")).shift(1))
            )
            .then(0.0)
            .otherwise(1.0),
        )
    )

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
                # a trajectory's last observation precedes no action: skip its tokens
                base.filter(pl.col("step") + 1 < pl.col("n_steps")).select(
                    "traj", "step", tok=pl.col("obs_text").str.extract_all(TOKEN_PATTERN)
                ),
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
    # one UInt64 key per (trajectory, token): single-key integer grouping and joins (a 64-bit
    # hash collision could at worst mark one token as revealed: negligible)
    tkey = pl.col("tok").hash() ^ (pl.col("traj").cast(pl.UInt64) * _MIX)
    first_reveal = obs_tok.group_by("traj").agg(_reveal=pl.col("step").min())
    act_tok = (
        base.filter(pl.col("cat") != "")
        .select("_row", "traj", "step", tok=pl.col("act_text").str.extract_all(TOKEN_PATTERN))
        .explode("tok")
        .drop_nulls("tok")
        .select("_row", "step", _k=tkey)
    )
    # only observation tokens some action uses matter: filter before grouping them
    first_seen = (
        obs_tok.select("step", _k=tkey)
        .join(act_tok.select("_k"), on="_k", how="semi")
        .group_by("_k")
        .agg(_seen=pl.col("step").min())
    )
    used = (
        act_tok.join(first_seen, on="_k", how="left")
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
        base.join(regress, on="_row", how="left", maintain_order="left")
        .join(used, on="_row", how="left", maintain_order="left")
        .join(first_reveal, on="traj", how="left", maintain_order="left")
        .join(batch_ref, on="task", how="left", maintain_order="left")
        .select(
            "_row",
            "traj",
            "step",
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
    out = out.join(red, on="_row", how="left", maintain_order="left").select(
        "traj", "step", *RULE_COLUMNS, "reference"
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
