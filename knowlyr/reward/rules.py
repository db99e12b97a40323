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
    1 when the action's parameters contain a salient token (an e-mail address, a file name,
    dotted or snake_case identifier, an id with digits, an upper-case id such as an order id
    ``KPUAU``, a number of 3+ digits: :data:`TOKEN_PATTERN`) that the task
    instruction or an earlier observation of the trajectory revealed; 0 when such tokens
    were revealed and the action uses none of them; ``None`` when nothing was revealed yet
    or the action has no salient token.
``efficiency``
    With reference length ``L`` (``TaskInfo.metadata["reference_steps"]`` or a task field
    ``reference_steps``; else the median length of the batch's trajectories of the same task
    when there are at least two, counting only those that succeeded when any did): 1 for
    step index ``i < L``, ``L / (i + 1)`` beyond it;
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

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from knowlyr._gc import paused
from knowlyr._switching import fine_gil_switching
from knowlyr.core.profile import DomainProfile, get_profile
from knowlyr.reward.actions import REGION, REPLACE, UNDO
from knowlyr.reward.commands import (
    ACT_EDIT,
    ACT_INVALID,
    ACT_RUN,
    FAILURE_PATTERN,
    SETBACK_PATTERN,
)
from knowlyr.reward.steps import (
    TOKEN_PATTERN,
    Scan,
    StepExtractor,
    extend_facets,
    reference_steps,
    step_table,
    table_plan,
)
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
    "score_documents",
    "score_rules",
    "step_table",
]

#: The rubrics that read what happened in a run (see the module docstring).
PROGRESS_COLUMNS = (
    "command_success",
    "no_repeated_failure",
    "edit_tested",
    "last_test_passed",
    "reproduced_first",
    "within_limits",
    "valid_format",
    "no_setback",
)
RULE_COLUMNS = (
    "non_redundancy",
    "non_regression",
    "info_utilization",
    "efficiency",
    *PROGRESS_COLUMNS,
)


# polars engines: one table on its own gets both cores from the streaming engine; the chunks
# of score_rules share them with the Python scan, where the in-memory engine costs less CPU.
_ENGINE = "auto"
_CHUNK_ENGINE = "in-memory"
_WORKERS = 2  # chunks of score_rules scored at once
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

    first = table.filter(pl.col("step") == 0)
    references = _references(first.select("task", "n_steps", "ref_steps", "success"))
    per_traj = pl.Series(
        "reference", [None] * (int(table["traj"].max()) + 1 if table.height else 0)
    )
    per_traj = per_traj.cast(pl.Float64).scatter(first.get_column("traj"), references)
    return _with_efficiency(_rubrics(table), per_traj)


def score_rules(
    trajectories: Sequence[Trajectory],
    profile: DomainProfile | str = "generic",
    *,
    population: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Rule scores for a whole batch: :func:`rule_scores` of :func:`step_table`.

    Large batches go through in chunks of about :data:`CHUNK_STEPS` steps, the polars part of
    each chunk running on worker threads (two chunks at once) while Python reads the next (the
    rubrics other than efficiency are per trajectory; efficiency's batch medians are taken over
    the whole batch, or over ``population``: see :func:`score_documents`).
    Meanwhile the interpreter's GIL switch interval is at most 0.2 ms (restored after).

    Example:
        >>> df = score_rules(trajectories, "coding")  # doctest: +SKIP
        >>> df.columns
        ['traj', 'step', 'non_redundancy', 'non_regression', 'info_utilization', 'efficiency', 'reference']
    """
    profile = get_profile(profile)
    extractor = StepExtractor(profile)
    lengths = [len(t.steps) for t in trajectories]
    return _score(trajectories, lengths, profile, extractor, extractor.scan, population=population)


def score_documents(
    documents: Sequence[dict[str, Any]],
    profile: DomainProfile | str = "generic",
    *,
    population: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """:func:`score_rules` of trajectories given as JSON documents (see
    :meth:`~knowlyr.reward.steps.StepExtractor.scan_documents`): the same frame, with no
    model built per trajectory or step.

    Args:
        documents: the batch.
        profile: a DomainProfile or a built-in profile name.
        population: ``task``, ``n_steps``, ``success`` of the trajectories whose lengths give
            the batch medians of efficiency's reference length (None: the batch's own), so
            that a large set scored batch by batch gets the numbers of one batch.
    """
    profile = get_profile(profile)
    extractor = StepExtractor(profile)
    lengths = [len(d.get("steps") or ()) for d in documents]
    return _score(
        documents, lengths, profile, extractor, extractor.scan_documents, population=population
    )


def _score(
    batch: Sequence[Any],
    lengths: list[int],
    profile: DomainProfile,
    extractor: StepExtractor,
    scan: Callable[[Sequence[Any]], Scan],
    *,
    population: pl.DataFrame | None = None,
) -> pl.DataFrame:
    import polars as pl

    chunks = _chunks(batch, lengths, CHUNK_STEPS)
    worker = _ChunkWorker()
    # of each chunk's scan only its per-trajectory frame is kept: the scans hold every step's
    # output and thought (~1 KB a step), freed as soon as the chunk is scored
    per_trajs = []
    with paused():
        if len(chunks) <= 1:
            first = scan(batch)
            per_trajs.append(first.per_traj)
            parts = [worker.score(first, worker.extend(extractor.facets_plan()))]
            del first
        else:
            from concurrent.futures import ThreadPoolExecutor

            futures = []
            # the workers need the GIL briefly between their long polars calls: hand it over
            # within 0.2 ms rather than the default 5 ms, or their polars threads sit idle
            with (
                fine_gil_switching(2e-4),
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="facets") as extend,
                ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="rules") as pool,
            ):
                for chunk in chunks:
                    scanned = scan(chunk)
                    per_trajs.append(scanned.per_traj)
                    # the facets grow chunk after chunk; the tables and rubrics of two chunks
                    # can be worked on at once (what keeps both cores busy once Python is done)
                    facets = extend.submit(worker.extend, extractor.facets_plan())
                    futures.append(pool.submit(worker.score_when, scanned, facets))
                    del scanned
                parts = [f.result() for f in futures]
    offset = 0
    for i, (part, frame) in enumerate(zip(parts, per_trajs, strict=True)):
        if offset:
            parts[i] = part.with_columns(pl.col("traj") + offset)
        offset += frame.height
    per_traj = pl.concat(per_trajs)
    references = _references(per_traj, profile.reference_steps, population)
    return _with_efficiency(pl.concat(parts), references)


#: Steps per chunk of :func:`score_rules`.
CHUNK_STEPS = 1 << 16


def _chunks(trajectories: Sequence[Any], lengths: list[int], size: int) -> list[Sequence[Any]]:
    """Consecutive runs of trajectories of about ``size`` steps each."""
    out, start, steps = [], 0, 0
    for i, n in enumerate(lengths):
        steps += n
        if steps >= size:
            out.append(trajectories[start : i + 1])
            start, steps = i + 1, 0
    if start < len(trajectories) or not out:
        out.append(trajectories[start:])
    return out


class _ChunkWorker:
    """The polars side of :func:`score_rules`: the facets of the calls new in each chunk
    (:meth:`extend`, chunk after chunk), then each chunk's step table and rubrics
    (:meth:`score`). Each is one long stretch without the GIL."""

    def __init__(self) -> None:
        self.facets: pl.DataFrame | None = None

    def extend(self, facets_plan: pl.LazyFrame | None) -> pl.DataFrame:
        self.facets = extend_facets(self.facets, facets_plan, engine=_CHUNK_ENGINE)
        return self.facets

    def score(self, scan: Scan, facets: pl.DataFrame) -> pl.DataFrame:
        table = table_plan(scan, facets).drop("task", "ref_steps", "act_text", "success")
        return _rubrics(table.collect(engine=_CHUNK_ENGINE), engine=_CHUNK_ENGINE)

    def score_when(self, scan: Scan, facets: Future[pl.DataFrame]) -> pl.DataFrame:
        return self.score(scan, facets.result())


def _rubrics(table: pl.DataFrame, engine: str = _ENGINE) -> pl.DataFrame:
    """``traj``, ``step`` and the three per-trajectory rubrics of a step table."""
    import numpy as np
    import polars as pl

    lf = table.lazy().with_row_index("_row")
    redundant, regressing, used, tokened, revealed, progress, repeats, last_runs = pl.collect_all(
        [_redundant(lf), _regressing(lf), *_informed(lf), *_progress(lf)], engine=engine
    )
    n = table.height

    def flags(rows: pl.DataFrame) -> pl.Series:
        out = np.zeros(n, dtype=bool)
        out[rows.get_column("_row").to_numpy()] = True
        return pl.Series(out)

    n_traj = int(table["traj"].max()) + 1 if n else 0
    reveal = pl.Series([None] * n_traj, dtype=pl.Int64)
    if revealed.height:
        reveal = reveal.scatter(revealed.get_column("traj"), revealed.get_column("_reveal"))
    traj = table.get_column("traj")
    step = table.get_column("step")
    # applicable when the action has a salient token and something was revealed before
    informed = flags(tokened) & (reveal.gather(traj) < step).fill_null(False)
    out = pl.DataFrame(
        {
            "traj": traj,
            "step": step,
            "non_redundancy": np.where(flags(redundant).to_numpy(), 0.0, 1.0),
            "non_regression": np.where(flags(regressing).to_numpy(), 0.0, 1.0),
            "info_utilization": pl.select(
                pl.when(pl.lit(informed)).then(pl.lit(flags(used)).cast(pl.Float64))
            ).to_series(),
        }
    ).hstack(progress)
    sparse = [
        _scattered(n, repeats, "no_repeated_failure"),
        _scattered(n, last_runs, "last_test_passed"),
    ]
    return out.with_columns(sparse).select("traj", "step", *RULE_COLUMNS[:3], *PROGRESS_COLUMNS)


def _scattered(n: int, rows: pl.DataFrame, name: str) -> pl.Series:
    """A Float64 column of ``n`` nulls with ``rows``' values at their ``_row``."""
    import polars as pl

    out = pl.Series(name, [None] * n, dtype=pl.Float64)
    if rows.height:
        out = out.scatter(rows.get_column("_row"), rows.get_column(name))
    return out


def _references(
    per_traj: pl.DataFrame, default: float | None = None, population: pl.DataFrame | None = None
) -> pl.Series:
    """Each trajectory's reference length: its own (``ref_steps``), else the median length of
    the batch's trajectories of its task when there are at least two (``task``, ``n_steps``;
    trajectories without steps do not count), of those that succeeded when any did
    (``success``): a failed run, one that wandered until a step limit or gave up at once,
    says nothing about how long the task takes; else ``default`` (the profile's). With a
    ``population`` (``task``, ``n_steps``, ``success``) the medians are taken over it."""
    import polars as pl

    n_steps, won = pl.col("n_steps"), pl.col("success").fill_null(False)
    median = (
        (per_traj if population is None else population)
        .filter(n_steps > 0)
        .group_by("task")
        .agg(_med=n_steps.filter(won).median().fill_null(n_steps.median()), _cnt=pl.len())
        .filter(pl.col("_cnt") >= 2)
    )
    return (
        per_traj.join(median, on="task", how="left", maintain_order="left")
        .select(reference=pl.coalesce("ref_steps", "_med", pl.lit(default, pl.Float64)))
        .to_series()
    )


def _with_efficiency(rubrics: pl.DataFrame, reference: pl.Series) -> pl.DataFrame:
    """Add ``efficiency`` and ``reference`` from each trajectory's reference length."""
    import polars as pl

    ref = pl.col("reference")
    i1 = pl.col("step").cast(pl.Float64) + 1.0
    return rubrics.with_columns(reference.gather(rubrics.get_column("traj"))).select(
        "traj",
        "step",
        *RULE_COLUMNS[:3],
        pl.when(ref.is_null())
        .then(None)
        .when(i1 <= ref)
        .then(1.0)
        .otherwise(ref / i1)
        .alias("efficiency"),
        *PROGRESS_COLUMNS,
        ref.alias("reference"),
    )


def _before(flag: pl.Expr) -> pl.Expr:
    """Count of ``flag`` in earlier steps of the same trajectory (no group window)."""
    import polars as pl

    run = flag.cum_sum() - flag  # global count before this row
    return run - pl.when(pl.col("step") == 0).then(run).otherwise(None).forward_fill()


def _redundant(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Rows repeating the trajectory's previous identical call with no state change between.

    "Earlier rows of the same group" comes from stable sorts on one integer key, several
    times cheaper here than group windows (``.over``). Keys mix the trajectory
    into a 64-bit hash (a collision is negligible at these sizes).
    """
    import polars as pl

    cat = pl.col("cat")
    is_x = (cat == "execute").cast(pl.Int32)
    is_w = ((cat == "write") & pl.col("ok")).cast(pl.Int32)
    read_t = cat.is_in(["read", "query"]) & pl.col("target").is_not_null()
    mix = pl.col("traj").cast(pl.UInt64) * _MIX
    w = pl.col("_w")
    new_t = (pl.col("_k") != pl.col("_k").shift(1)).fill_null(True)
    run_w = w.cum_sum() - w  # in key order: applied writes before this row, all groups
    return (
        lf.select(
            "_row",
            _k=pl.col("target").hash() ^ mix,
            _s=pl.col("sig") ^ mix,  # null for a message step (no signature)
            _w=is_w,
            _self=is_x + is_w,
            _rt=read_t,
            # state changes before the row, but for a read's writes to its target (below)
            _b0=_before(is_x) + pl.when(read_t).then(0).otherwise(_before(is_w)),
        )
        .sort("_k", maintain_order=True)
        # writes to this row's target earlier in its trajectory
        .select(
            "_row",
            "_s",
            "_self",
            _before=pl.col("_b0")
            + pl.when(pl.col("_rt"))
            .then(run_w - pl.when(new_t).then(run_w).otherwise(None).forward_fill())
            .otherwise(0),
        )
        # identical calls have the same target, so in target order they are already in row
        # order: a stable sort on the signature puts each right after the previous one
        .sort("_s", maintain_order=True)
        # the state counter is where the previous identical call of the trajectory left it
        .filter(
            pl.col("_s").is_not_null()
            & (pl.col("_s") == pl.col("_s").shift(1))
            & (pl.col("_before") == (pl.col("_before") + pl.col("_self")).shift(1))
        )
        .select("_row")
    )


def _regressing(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Replacements reversing an earlier applied replacement, region edits restoring earlier
    content, explicit undos (all applied)."""
    import polars as pl

    ok = pl.col("ok")
    applied = lf.filter(ok & (pl.col("edit_kind") == REPLACE))
    first_fwd = applied.group_by("traj", "fwd").agg(_first=pl.col("step").min())
    rev_hit = (
        applied.select("_row", "traj", "step", "rev")
        .join(first_fwd, left_on=["traj", "rev"], right_on=["traj", "fwd"], how="inner")
        .filter(pl.col("_first") < pl.col("step"))
        .select("_row")
    )
    region = (
        lf.filter(ok & (pl.col("edit_kind") == REGION))
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
    undo = lf.filter(ok & (pl.col("edit_kind") == UNDO)).select("_row")
    return pl.concat([rev_hit, region, undo])


def _informed(lf: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame, pl.LazyFrame]:
    """Info utilization: (rows using a token an earlier observation revealed, rows with a
    salient token, each trajectory's first step after which something was revealed)."""
    import polars as pl

    step = pl.col("step")
    obs = pl.concat(
        [
            # a trajectory's last observation precedes no action: skip its tokens
            lf.filter(step + 1 < pl.col("n_steps")).select(
                "traj", "step", tok=pl.col("obs_text").str.extract_all(TOKEN_PATTERN)
            ),
            # the task instruction counts as an observation before step 0
            lf.filter((step == 0) & (pl.col("instruction") != "")).select(
                "traj",
                step=pl.lit(-1, pl.Int64),
                tok=pl.col("instruction").str.extract_all(TOKEN_PATTERN),
            ),
        ],
        how="vertical_relaxed",
    )
    obs_tok = obs.explode("tok").drop_nulls("tok")
    # one UInt64 key per (trajectory, token): single-key integer grouping and joins (a 64-bit
    # hash collision could at worst mark one token as revealed: negligible)
    mix = pl.col("traj").cast(pl.UInt64) * _MIX
    act_tok = (
        lf.filter(pl.col("cat") != "")
        .select("_row", "traj", "step", "act_keys")
        .explode("act_keys")
        .drop_nulls("act_keys")
        .select("_row", "step", _k=pl.col("act_keys") ^ mix)
    )
    # only observation tokens some action uses matter: filter before grouping them
    first_seen = (
        obs_tok.select("step", _k=pl.col("tok").hash() ^ mix)
        .join(act_tok.select("_k"), on="_k", how="semi")
        .group_by("_k")
        .agg(_seen=step.min())
    )
    used = (
        act_tok.join(first_seen, on="_k", how="inner").filter(pl.col("_seen") < step).select("_row")
    )
    revealed = obs_tok.group_by("traj").agg(_reveal=step.min())
    return used, act_tok.select("_row"), revealed


def _progress(lf: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame, pl.LazyFrame]:
    """The rubrics that read what happened (see the module docstring): failed commands,
    repeated failures, untested edits, the last run's result, a reproduction before the first
    edit, a stop by a limit, format errors, setbacks.

    Returns three queries: the dense rubrics, one row per step in table order; the rows that
    repeat a call which failed earlier in their trajectory (``_row``, ``no_repeated_failure``);
    the last run of each trajectory (``_row``, ``last_test_passed``). The two sparse ones look
    only at the few rows concerned (output text is searched on last runs alone).
    """
    import polars as pl

    kind = pl.col("act_kind")
    step, traj = pl.col("step"), pl.col("traj")
    action = pl.col("cat") != ""
    run = (kind & ACT_RUN) != 0
    edit = (kind & ACT_EDIT) != 0
    invalid = (kind & ACT_INVALID) != 0
    failed = pl.col("failed")
    run_i, edit_i = run.cast(pl.Int32), edit.cast(pl.Int32)
    runs_before = _before(run_i)
    edits_before = _before(edit_i)
    # runs after this row: the trajectory's total (at its last row, carried back) minus
    # those up to here
    last = step + 1 == pl.col("n_steps")
    total_runs = pl.when(last).then(runs_before + run_i).backward_fill()
    runs_after = total_runs - runs_before - run_i
    setback = pl.col("thought").str.contains(SETBACK_PATTERN)

    def score(ok: pl.Expr) -> pl.Expr:
        return ok.cast(pl.Float64)

    dense = lf.select(
        # runs before the first edit reproduce the problem: they are expected to fail; a
        # search that finds nothing (grep's exit code 1) is an answer, not a failure
        command_success=pl.when(
            action & ~invalid & (pl.col("cat") != "search") & ~(run & (edits_before == 0))
        ).then(score(~failed)),
        edit_tested=pl.when(edit).then(score(runs_after > 0)),
        reproduced_first=pl.when(edit & (edits_before == 0)).then(score(runs_before > 0)),
        within_limits=pl.when(last).then(score(~pl.col("stopped"))),
        valid_format=pl.when(action).then(score(~invalid)),
        # the agent's own next thought says this step went wrong
        no_setback=pl.when(action & ~last).then(score(~setback.shift(-1))),
    )
    # an identical call of the trajectory failed before (one 64-bit key per trajectory and
    # call): the first failure of each failing key, then the later rows of those keys
    keyed = lf.select("_row", "step", "failed", _k=pl.col("sig") ^ (traj.cast(pl.UInt64) * _MIX))
    first_fail = keyed.filter("failed").group_by("_k").agg(_first=step.min())
    repeats = (
        keyed.join(first_fail, on="_k", how="inner")
        .filter(step > pl.col("_first"))
        .select("_row", no_repeated_failure=score(~failed))
    )
    last_runs = (
        lf.with_columns(_after=runs_after)
        .filter(run & (pl.col("_after") == 0))
        .select(
            "_row",
            last_test_passed=score(~failed & ~pl.col("obs_text").str.contains(FAILURE_PATTERN)),
        )
    )
    return dense, repeats, last_runs


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
