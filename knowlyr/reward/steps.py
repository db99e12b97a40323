"""The step table: one row per step of every trajectory of a batch, what the rules run on.

Extraction is the one part of the rule layer that has to touch Python objects, so it does as
little per step as it can (:meth:`StepExtractor.scan`): one pass reads each step's tool,
parameters, output and status and keys the call by a hash of ``(tool, orjson of the parameters)``.
Facets (canonical tool, category, target, edit payload) are worked out once per *distinct*
call (:mod:`knowlyr.reward.facets`). Everything per row (gathering the facets, the SWE-agent
open-file state, failure checks on write outputs, hashes) is polars (:func:`table_plan`, one
lazy query), which can run on another thread while Python scans the next batch.

The SWE-agent open file is the one sequential dependency: a call like ``edit 4:4`` or
``scroll_down`` acts on the file the session has open. Such calls are recognised once per
distinct call (their facets come out with the open file as their target), and their target
is filled in afterwards, vectorised, from the last earlier read (or ``write_file``) of the
same trajectory that named a file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from knowlyr._gc import paused
from knowlyr.core.profile import DomainProfile, get_profile
from knowlyr.reward.actions import ToolResolver
from knowlyr.reward.commands import LIMIT_PATTERN, TRACEBACK
from knowlyr.reward.facets import TOKEN_PATTERN, extend_facets, facet_frame
from knowlyr.trajectory import Outcome, TaskInfo, Trajectory

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

__all__ = [
    "STEP_COLUMNS",
    "TOKEN_PATTERN",
    "Scan",
    "StepExtractor",
    "assemble",
    "reference_steps",
    "step_table",
    "stopped_by_limit",
    "table_plan",
]

STEP_COLUMNS = (
    "traj", "step", "task", "n_steps", "ref_steps", "cat", "target", "sig", "ok", "edit_kind",
    "fwd", "rev", "region", "content", "act_text", "act_keys", "obs_text", "instruction",
    "act_kind", "failed", "stopped", "thought", "success",
)  # fmt: skip

_LIMIT = re.compile(LIMIT_PATTERN)

#: Characters of a thought scanned for a setback.
THOUGHT_CAP = 2_000
#: Characters of an observation (and of the task instruction) scanned for tokens.
OBS_CAP = 20_000
# A write whose output starts with one of these, or names one of these in its first 400
# characters, wrote nothing (OpenHands / SWE-agent / our tools' edit errors).
_FAILURE_PREFIXES = ("ERROR:", "Error:", "[Error", "error:")
_FAILURE_TEXT = [
    "No exact match found",
    "Your proposed edit has introduced new syntax error",
    "No replacement was performed",
    "did not appear verbatim",
    "No such file or directory",
    "is not a valid",
]


def stopped_by_limit(outcome: Outcome) -> bool:
    """Whether a run was cut off by a limit (steps, cost, time, context window) rather than
    ending by itself: ``truncated``, or an exit status / reason naming a limit, on a run
    that did not succeed."""
    return _stopped(outcome.success, outcome.truncated, outcome.reason)


def _stopped(success: bool | None, truncated: bool, reason: str | None) -> bool:
    if success:
        return False
    if truncated:
        return True
    return bool(reason) and _LIMIT.search(reason) is not None


def reference_steps(task: TaskInfo) -> float | None:
    """The task's reference length: ``metadata["reference_steps"]`` or a ``reference_steps``
    task field; ``None`` when absent or not a positive number."""
    ref = task.metadata.get("reference_steps")
    if ref is None and task.model_extra:
        ref = task.model_extra.get("reference_steps")
    return _positive(ref)


def _positive(ref: Any) -> float | None:
    try:
        value = float(ref) if ref is not None else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and value > 0 else None


def step_table(trajectories: Sequence[Trajectory], profile: DomainProfile | str) -> pl.DataFrame:
    """One row per step of every trajectory: the flat table the rules run on.

    Columns (:data:`STEP_COLUMNS`): ``traj`` (position in ``trajectories``), ``step``
    (position in the trajectory), ``task``, ``n_steps``, ``ref_steps``, ``cat`` (category,
    ``""`` for a message step), ``target``, ``sig`` (hash of canonical tool, tool, parameters
    and target; null for a message step), ``ok`` (the observation reports no failure),
    ``edit_kind``, ``fwd``/``rev`` (hashes of a replacement and its inverse),
    ``region``/``content`` (hashes of a region edit), ``act_text`` (the parameters' values
    as one text), ``act_keys`` (hashes of its :data:`TOKEN_PATTERN` tokens), ``obs_text``,
    ``instruction`` (the task instruction on each trajectory's first row, else empty).

    Args:
        trajectories: the batch.
        profile: a DomainProfile or a built-in profile name; tools it does not know fall back
            to the generic name heuristic.

    Example:
        >>> table = step_table(trajectories, "coding")  # doctest: +SKIP
        >>> table.select("traj", "step", "cat", "target").row(0)  # doctest: +SKIP
        (0, 0, 'read', 'src/app.py')
    """
    extractor = StepExtractor(profile)
    with paused():
        scan = extractor.scan(trajectories)
        facets = extractor.facets()
    return assemble(scan, facets)


class Scan(NamedTuple):
    """What the Python pass over a batch read, as columns (see :meth:`StepExtractor.scan`)."""

    ids: pl.Series  # UInt32 distinct-call id per step (0: a message step)
    outs: pl.Series  # String observation output per step ("" without one)
    thoughts: pl.Series  # String thought per step
    bad: np.ndarray  # rows whose exit code or error reports a failure
    per_traj: pl.DataFrame  # task, n_steps, ref_steps, instruction per trajectory


class StepExtractor:
    """The Python side of :func:`step_table`, reusable across batches.

    :meth:`scan` reads each step once and keys its call by a 64-bit hash of ``(tool, orjson
    of the parameters)``; :meth:`facets` parses each distinct call of a batch once (a call
    that recurs in a later batch is parsed again there: cheaper than looking every call up
    among all those ever seen); :func:`assemble` (pure polars) builds the table from both.
    Two distinct calls of one batch with the same hash would share facets: for the ~10^5
    distinct calls of a batch the chance is ~10^-9.
    """

    def __init__(self, profile: DomainProfile | str):
        self._resolver = ToolResolver(get_profile(profile))
        self._pending: list[tuple[str, dict[str, Any]]] = [("", {})]  # id 0: a message step
        self._facets: pl.DataFrame | None = None
        self._planned = 0  # calls (and the message step) whose facets are planned
        self._templates: dict[tuple, Any] = {}  # shape -> its template (None: none)

    def scan(self, trajectories: Sequence[Trajectory]) -> Scan:
        """The per-step pass: each step's distinct-call id, output and failure status."""
        # the batch's distinct calls by a 64-bit hash of (tool, orjson of the parameters): a
        # dict of int keys of this batch stays small, where one of every call ever seen, keyed
        # by the text, cost more than the rest of the step to look up
        calls: dict[int, int] = {}
        pending = self._pending
        base = self._planned + len(pending)
        ids: list[int] = []
        outs: list[str] = []
        thoughts: list[str] = []
        bad: list[int] = []
        lengths: list[int] = []
        tasks: list[TaskInfo] = []
        stopped: list[bool] = []
        success: list[bool | None] = []
        id_a, out_a, bad_a, th_a = ids.append, outs.append, bad.append, thoughts.append
        get = calls.get
        dumps = orjson.dumps
        for traj in trajectories:
            steps = traj.steps
            lengths.append(len(steps))
            tasks.append(traj.task)
            stopped.append(stopped_by_limit(traj.outcome))
            success.append(traj.outcome.success)
            for step in steps:
                th_a(step.thought)
                action = step.action
                if action is None:
                    id_a(0)
                else:
                    tool = action.tool
                    params = action.params
                    key = hash((tool, dumps(params)))
                    i = get(key)
                    if i is None:
                        i = calls[key] = base + len(calls)
                        pending.append((tool, params))
                    id_a(i)
                obs = step.observation
                if obs is None:
                    out_a("")
                else:
                    out_a(obs.output)
                    if obs.exit_code or obs.error is not None:
                        bad_a(len(outs) - 1)
        return _scan(
            ids, outs, thoughts, bad, lengths,
            [t.task_id for t in tasks], [reference_steps(t) for t in tasks],
            [t.instruction for t in tasks], stopped, success,
        )  # fmt: skip

    def scan_documents(self, documents: Sequence[dict[str, Any]]) -> Scan:
        """:meth:`scan` of trajectories given as their JSON documents (what
        :meth:`~knowlyr.trajectory.Trajectory.to_json` writes, or what
        :func:`knowlyr.store._documents.validate_document` returns: fields that are ``None``
        may be left out): the same columns, without building a model per trajectory and
        step."""
        calls: dict[int, int] = {}
        pending = self._pending
        base = self._planned + len(pending)
        ids: list[int] = []
        outs: list[str] = []
        thoughts: list[str] = []
        bad: list[int] = []
        lengths: list[int] = []
        task_ids: list[str] = []
        refs: list[float | None] = []
        instructions: list[str] = []
        stopped: list[bool] = []
        success: list[bool | None] = []
        id_a, out_a, bad_a, th_a = ids.append, outs.append, bad.append, thoughts.append
        get = calls.get
        dumps = orjson.dumps
        for doc in documents:
            steps = doc.get("steps") or ()
            lengths.append(len(steps))
            task = doc["task"]
            task_ids.append(task["task_id"])
            meta = task.get("metadata")
            ref = meta.get("reference_steps") if meta else None
            refs.append(_positive(task.get("reference_steps") if ref is None else ref))
            instructions.append(task.get("instruction", ""))
            o = doc.get("outcome") or {}
            won = o.get("success")
            stopped.append(_stopped(won, o.get("truncated", False), o.get("reason")))
            success.append(won)
            for step in steps:
                th_a(step.get("thought", ""))
                action = step.get("action")
                if action is None:
                    id_a(0)
                else:
                    tool = action["tool"]
                    params = action.get("params") or {}
                    key = hash((tool, dumps(params)))
                    i = get(key)
                    if i is None:
                        i = calls[key] = base + len(calls)
                        pending.append((tool, params))
                    id_a(i)
                obs = step.get("observation")
                if obs is None:
                    out_a("")
                else:
                    out_a(obs.get("output", ""))
                    if obs.get("exit_code") or obs.get("error") is not None:
                        bad_a(len(outs) - 1)
        return _scan(
            ids, outs, thoughts, bad, lengths, task_ids, refs, instructions, stopped, success
        )

    def facets(self) -> pl.DataFrame:
        """Facets of every distinct call scanned so far, as columns (row ``i`` = call id ``i``)."""
        self._facets = extend_facets(self._facets, self.facets_plan())
        return self._facets

    def facets_plan(self) -> pl.LazyFrame | None:
        """The facets of the calls first seen since the last call, as a lazy query that
        :func:`extend_facets` appends to the earlier ones (``None``: no new call). The Python
        part (parsing, templates) happens here; the polars part when it is collected."""
        if not self._pending:
            return None
        plan = facet_frame(
            self._pending, self._resolver, self._templates, message=not self._planned
        )
        self._planned += len(self._pending)
        self._pending = []
        return plan


def _scan(
    ids: list[int],
    outs: list[str],
    thoughts: list[str],
    bad: list[int],
    lengths: list[int],
    task_ids: list[str],
    refs: list[float | None],
    instructions: list[str],
    stopped: list[bool],
    success: list[bool | None],
) -> Scan:
    """The :class:`Scan` of the lists a scan gathered."""
    import numpy as np
    import polars as pl

    per_traj = pl.DataFrame(
        {
            "task": task_ids,
            "n_steps": lengths,
            "ref_steps": refs,
            "instruction": [t[:OBS_CAP] if n else "" for t, n in zip(instructions, lengths, strict=True)],
            "stopped": stopped,
            "success": success,
        },
        schema={"task": pl.String, "n_steps": pl.UInt32, "ref_steps": pl.Float64,
                "instruction": pl.String, "stopped": pl.Boolean, "success": pl.Boolean},
    )  # fmt: skip
    return Scan(
        pl.Series("ids", ids, dtype=pl.UInt32),
        pl.Series("obs_text", outs, dtype=pl.String),
        pl.Series("thought", thoughts, dtype=pl.String),
        np.asarray(bad, dtype=np.int64),
        per_traj,
    )


def assemble(scan: Scan, facets: pl.DataFrame) -> pl.DataFrame:
    """The step table from a :class:`Scan` and the facets of its calls."""
    return table_plan(scan, facets).collect()


def table_plan(scan: Scan, facets: pl.DataFrame) -> pl.LazyFrame:
    """The step table as a lazy query (building it computes nothing): one ``collect`` runs it
    without holding the GIL, so that it can overlap the scan of the next batch."""
    import numpy as np
    import polars as pl

    ids, obs, thoughts, bad, per_traj = scan
    n = len(ids)
    lens = per_traj.get_column("n_steps").to_numpy().astype(np.int64)
    starts = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    traj = pl.Series("traj", np.repeat(np.arange(len(lens), dtype=np.uint32), lens))
    ok = np.ones(n, dtype=bool)
    ok[bad] = False
    ok |= ids.to_numpy() == 0  # a message step has nothing to fail
    # writes whose output reports that nothing was written did not apply (checked on the
    # write rows only: the text search is the costly part)
    writes = ((facets.get_column("cat").gather(ids) == "write") & pl.Series(ok)).arg_true()
    if len(writes):
        text = obs.gather(writes)
        failed = text.str.head(400).str.contains_any(_FAILURE_TEXT)
        for prefix in _FAILURE_PREFIXES:
            failed = failed | text.str.starts_with(prefix)
        ok[writes.to_numpy()] = (~failed).to_numpy()
    # the task instruction on each trajectory's first row
    instruction = pl.Series("instruction", [], dtype=pl.String).extend_constant("", n)
    has = (per_traj.get_column("instruction") != "").to_numpy()
    if has.any():
        instruction = instruction.scatter(
            starts[has], per_traj.get_column("instruction").filter(pl.Series(has))
        )
    rows = pl.DataFrame(
        [
            traj,
            pl.Series("step", np.arange(n, dtype=np.int64) - np.repeat(starts, lens)),
            pl.Series("_ok", ok),
            obs,
            thoughts,
            instruction,
        ]
    ).lazy()
    tr = pl.col("traj")
    per_row = [pl.lit(per_traj.get_column(c)).gather(tr).alias(c) for c in ("task", "n_steps", "ref_steps", "stopped", "success")]  # fmt: skip
    lf = pl.concat(
        [rows, facets.lazy().select(pl.all().gather(pl.lit(ids)))],  # each call's facets
        how="horizontal",
    ).with_columns(
        *per_row,
        step=pl.col("step").cast(pl.UInt32),
        obs_text=pl.when(pl.col("obs_text").str.len_bytes() > OBS_CAP)
        .then(pl.col("obs_text").str.head(OBS_CAP))
        .otherwise("obs_text"),
    )
    # the open file at a row: the target of the trajectory's last earlier row that opened one
    # (rows acting on the open file leave it as it is)
    target = pl.col("_target")
    r = pl.int_range(pl.len(), dtype=pl.Int64)
    last = pl.when("_opens").then(r).shift(1).forward_fill()
    state = pl.when(last >= r - pl.col("step")).then(target.gather(last))
    lf = lf.with_columns(_target=pl.when("_on_open").then(state).otherwise(target))
    th = target.hash()
    return lf.select(
        "traj",
        "step",
        "task",
        "n_steps",
        "ref_steps",
        "cat",
        target.alias("target"),
        sig=th ^ pl.col("_pre"),
        ok="_ok",
        edit_kind="edit_kind",
        fwd=th ^ pl.col("_on"),
        rev=th ^ pl.col("_no"),
        region=th ^ pl.col("_old"),
        content="content",
        act_text="act_text",
        act_keys="_act_keys",
        obs_text="obs_text",
        instruction="instruction",
        act_kind="act_kind",
        # the action failed: an exit code or error, a write that wrote nothing, a traceback
        failed=~pl.col("_ok") | pl.col("obs_text").str.contains(TRACEBACK, literal=True),
        stopped="stopped",
        thought=pl.col("thought").str.head(THOUGHT_CAP),
        success="success",
    )
