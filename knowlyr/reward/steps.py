"""The step table: one row per step of every trajectory of a batch, what the rules run on.

Extraction is the one part of the rule layer that has to touch Python objects, so it does as
little per step as it can: one pass reads each step's tool, parameters, output and status and
keys the call by ``(tool, orjson of the parameters)``; the Python facet parser
(:func:`~knowlyr.reward.actions.action_facets`) then runs once per *distinct* call, and
everything per row (gathering the facets, the SWE-agent open-file state, failure checks on
write outputs, hashes) is done by polars.

The SWE-agent open file is the one sequential dependency: a call like ``edit 4:4`` or
``scroll_down`` acts on the file the session has open. Such calls are recognised once per
distinct call (their facets come out with the open file as their target), and their target
is filled in afterwards, vectorised, from the last earlier read (or ``write_file``) of the
same trajectory that named a file.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from knowlyr.core.profile import DomainProfile, get_profile
from knowlyr.reward.actions import NO_EDIT, REGION, REPLACE, ToolResolver, action_facets
from knowlyr.trajectory import TaskInfo, Trajectory

if TYPE_CHECKING:
    import polars as pl

__all__ = ["STEP_COLUMNS", "reference_steps", "step_table"]

STEP_COLUMNS = (
    "traj", "step", "task", "n_steps", "ref_steps", "cat", "target", "sig", "ok", "edit_kind",
    "fwd", "rev", "region", "content", "act_text", "obs_text", "instruction",
)  # fmt: skip

#: Characters of an observation (and of the task instruction) scanned for tokens.
OBS_CAP = 20_000
_MASK = (1 << 64) - 1
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
# Two stand-ins for "the file the session has open": a call whose target comes out as the
# first with one and as the second with the other acts on the open file.
_OPEN_A = "\x00open-file-a\x00"
_OPEN_B = "\x00open-file-b\x00"


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
    """The parameters' values as one text (what info-utilization tokenises)."""
    try:
        text = "\n".join(params.values())  # all strings: the common case
    except TypeError:
        parts = []
        for v in params.values():
            if isinstance(v, str):
                parts.append(v)
            elif v is not None and not isinstance(v, bool):
                parts.append(orjson.dumps(v).decode() if isinstance(v, dict | list) else str(v))
        text = "\n".join(parts)
    return text.replace("end_of_edit", "") if "end_of_edit" in text else text


def step_table(trajectories: Sequence[Trajectory], profile: DomainProfile | str) -> pl.DataFrame:
    """One row per step of every trajectory: the flat table the rules run on.

    Columns (:data:`STEP_COLUMNS`): ``traj`` (position in ``trajectories``), ``step``
    (position in the trajectory), ``task``, ``n_steps``, ``ref_steps``, ``cat`` (category,
    ``""`` for a message step), ``target``, ``sig`` (hash of canonical tool, tool, parameters
    and target; null for a message step), ``ok`` (the observation reports no failure),
    ``edit_kind``, ``fwd``/``rev`` (hashes of a replacement and its inverse),
    ``region``/``content`` (hashes of a region edit), ``act_text``, ``obs_text``,
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
    resolver = ToolResolver(get_profile(profile))
    # The pass allocates a few objects per step; with a large heap of trajectories the cyclic
    # GC would re-traverse all of them again and again. Nothing here forms cycles.
    enabled = gc.isenabled()
    gc.disable()
    try:
        scan = _scan(trajectories)
        distinct = _distinct_facets(scan[0], resolver)
    finally:
        if enabled:
            gc.enable()
    return _assemble(scan, distinct)


def _scan(trajectories: Sequence[Trajectory]) -> tuple:
    """The per-step Python pass: each step's distinct-call id and output, failed statuses."""
    calls: dict[tuple[str, str], int] = {}
    distinct: list[tuple[str, dict[str, Any]]] = [("", {})]  # id 0: a message step
    ids: list[int] = []
    outs: list[str] = []
    bad: list[int] = []  # rows whose exit code or error reports a failure
    lengths: list[int] = []
    tasks: list[TaskInfo] = []
    id_a, out_a, bad_a = ids.append, outs.append, bad.append
    get = calls.get
    dumps = orjson.dumps
    for traj in trajectories:
        steps = traj.steps
        lengths.append(len(steps))
        tasks.append(traj.task)
        for step in steps:
            action = step.action
            if action is None:
                id_a(0)
            else:
                tool = action.tool
                params = action.params
                # as a str: orjson's own bytes objects are costly to keep alive by the million
                key = (tool, dumps(params).decode())
                i = get(key)
                if i is None:
                    i = calls[key] = len(distinct)
                    distinct.append((tool, params))
                id_a(i)
            obs = step.observation
            if obs is None:
                out_a("")
            else:
                out_a(obs.output)
                if obs.exit_code or obs.error is not None:
                    bad_a(len(outs) - 1)
    return distinct, ids, outs, bad, lengths, tasks


def _distinct_facets(distinct: list[tuple[str, dict[str, Any]]], resolver: ToolResolver) -> dict:
    """Facets of each distinct call, as columns (row ``i`` = call id ``i``)."""
    n = len(distinct)
    cat = [""] * n
    target: list[str | None] = [None] * n
    on_open = [False] * n  # acts on the file the session has open
    opens = [False] * n  # a read (or file creation) naming a file: it becomes the open file
    kind = [NO_EDIT] * n
    pre: list[int | None] = [None] * n  # hash of (canonical tool, tool, sorted parameters)
    on: list[int | None] = [None] * n  # hashes of (old, new), (new, old), old, new
    no: list[int | None] = [None] * n
    old_h: list[int | None] = [None] * n
    new_h: list[int | None] = [None] * n
    text = [""] * n
    dumps, sort = orjson.dumps, orjson.OPT_SORT_KEYS
    for i in range(1, n):
        tool, params = distinct[i]
        f = action_facets(resolver, tool, params, _OPEN_A)
        t = f.target
        if t == _OPEN_A and action_facets(resolver, tool, params, _OPEN_B).target == _OPEN_B:
            on_open[i] = True
            t = None
        target[i] = t
        c = cat[i] = f.category
        opens[i] = t is not None and (c == "read" or f.tool == "write_file")
        pre[i] = hash((f.tool, tool, dumps(params, option=sort))) & _MASK
        text[i] = _text_of(params)
        if c == "write" and f.edit_kind:
            k = kind[i] = f.edit_kind
            if k == REPLACE:
                on[i] = hash((f.old, f.new)) & _MASK
                no[i] = hash((f.new, f.old)) & _MASK
            elif k == REGION:
                old_h[i] = hash(f.old) & _MASK
                new_h[i] = hash(f.new) & _MASK
    return {
        "cat": cat, "_target": target, "_on_open": on_open, "_opens": opens, "edit_kind": kind,
        "_pre": pre, "_on": on, "_no": no, "_old": old_h, "content": new_h, "act_text": text,
    }  # fmt: skip


def _assemble(scan: tuple, distinct: dict) -> pl.DataFrame:
    import numpy as np
    import polars as pl

    _, ids, outs, bad, lengths, tasks = scan
    n_traj = len(lengths)
    lens = np.asarray(lengths, dtype=np.int64)
    starts = np.zeros(n_traj, dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    traj = np.repeat(np.arange(n_traj, dtype=np.uint32), lens)
    step = np.arange(len(traj), dtype=np.int64) - np.repeat(starts, lens)
    d = pl.DataFrame(
        distinct,
        schema={"cat": pl.String, "_target": pl.String, "_on_open": pl.Boolean,
                "_opens": pl.Boolean, "edit_kind": pl.UInt8, "_pre": pl.UInt64,
                "_on": pl.UInt64, "_no": pl.UInt64, "_old": pl.UInt64, "content": pl.UInt64,
                "act_text": pl.String},
    )  # fmt: skip
    idx = pl.Series(ids, dtype=pl.UInt32)
    rows = d[idx]  # gather every distinct call's facets onto its rows
    obs = pl.Series("obs_text", outs, dtype=pl.String)
    if (obs.str.len_bytes() > OBS_CAP).any():
        obs = obs.str.head(OBS_CAP)
    ok = np.ones(len(ids), dtype=bool)
    ok[np.asarray(bad, dtype=np.int64)] = False
    ok |= idx.to_numpy() == 0  # a message step has nothing to fail
    per_traj = pl.DataFrame(
        {
            "task": [t.task_id for t in tasks],
            "n_steps": lengths,
            "ref_steps": [reference_steps(t) for t in tasks],
        },
        schema={"task": pl.String, "n_steps": pl.UInt32, "ref_steps": pl.Float64},
    )  # fmt: skip
    # the task instruction on each trajectory's first row
    first = [i for i, n in enumerate(lengths) if n and tasks[i].instruction]
    instruction = pl.Series("instruction", [""] * len(ids), dtype=pl.String)
    if first:
        instruction = instruction.scatter(
            starts[first], [tasks[i].instruction[:OBS_CAP] for i in first]
        )
    tr = pl.Series("traj", traj)
    df = rows.with_columns(
        tr,
        pl.Series("step", step, dtype=pl.UInt32),
        pl.Series("ok", ok),
        obs,
        per_traj.get_column("task").gather(tr),
        per_traj.get_column("n_steps").gather(tr),
        per_traj.get_column("ref_steps").gather(tr),
    )
    target = pl.col("_target")
    if rows.get_column("_on_open").any():
        # the open file at a row: the target of the trajectory's last earlier row that opened
        # one (rows acting on the open file leave it as it is)
        r = pl.int_range(pl.len(), dtype=pl.Int64)
        last = pl.when("_opens").then(r).shift(1).forward_fill()
        state = pl.when(last >= r - pl.col("step")).then(target.gather(last))
        df = df.with_columns(_target=pl.when("_on_open").then(state).otherwise(target))
    # writes whose output reports that nothing was written did not apply
    write = (df.get_column("cat") == "write") & df.get_column("ok")
    if write.any():
        w = write.arg_true()
        text = df.get_column("obs_text").gather(w)
        failed = text.str.head(400).str.contains_any(_FAILURE_TEXT)
        for prefix in _FAILURE_PREFIXES:
            failed = failed | text.str.starts_with(prefix)
        df = df.with_columns(df.get_column("ok").scatter(w, ~failed))
    th = target.hash()
    return df.select(
        "traj",
        "step",
        "task",
        "n_steps",
        "ref_steps",
        "cat",
        target.alias("target"),
        sig=th ^ pl.col("_pre"),
        ok="ok",
        edit_kind="edit_kind",
        fwd=th ^ pl.col("_on"),
        rev=th ^ pl.col("_no"),
        region=th ^ pl.col("_old"),
        content="content",
        act_text="act_text",
        obs_text="obs_text",
        instruction=instruction,
    )
