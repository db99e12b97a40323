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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from knowlyr.core.profile import DomainProfile, get_profile
from knowlyr.reward.actions import NO_EDIT, REGION, REPLACE, ToolResolver, action_facets
from knowlyr.trajectory import TaskInfo, Trajectory

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
]

STEP_COLUMNS = (
    "traj", "step", "task", "n_steps", "ref_steps", "cat", "target", "sig", "ok", "edit_kind",
    "fwd", "rev", "region", "content", "act_text", "act_keys", "obs_text", "instruction",
)  # fmt: skip

#: Salient tokens: file names / dotted names, snake_case identifiers, ids with digits, numbers.
TOKEN_PATTERN = r"[A-Za-z0-9_][\w\-]*(?:\.[A-Za-z_][\w\-]*)+|[A-Za-z_]\w*_\w+|[A-Za-z]+\d\w*|\d{3,}"
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
    with no_gc():
        scan = extractor.scan(trajectories)
        facets = extractor.facets()
    return assemble(scan, facets)


@contextmanager
def no_gc() -> Iterator[None]:
    """No cyclic GC inside: extraction allocates a few objects per step, and with a large heap
    of trajectories the collector would re-traverse all of them again and again (nothing
    here forms cycles)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Scan(NamedTuple):
    """What the Python pass over a batch read, as columns (see :meth:`StepExtractor.scan`)."""

    ids: pl.Series  # UInt32 distinct-call id per step (0: a message step)
    outs: pl.Series  # String observation output per step ("" without one)
    bad: np.ndarray  # rows whose exit code or error reports a failure
    per_traj: pl.DataFrame  # task, n_steps, ref_steps, instruction per trajectory


class StepExtractor:
    """The Python side of :func:`step_table`, reusable across batches.

    :meth:`scan` reads each step once and keys its call by ``(tool, orjson of the
    parameters)``; :meth:`facets` parses each distinct call once (calls seen in an earlier
    batch keep their facets); :func:`assemble` (pure polars) builds the table from both.
    """

    def __init__(self, profile: DomainProfile | str):
        self._resolver = ToolResolver(get_profile(profile))
        self._calls: dict[tuple[str, str], int] = {}
        self._pending: list[tuple[str, dict[str, Any]]] = [("", {})]  # id 0: a message step
        self._facets: pl.DataFrame | None = None

    def scan(self, trajectories: Sequence[Trajectory]) -> Scan:
        """The per-step pass: each step's distinct-call id, output and failure status."""
        import numpy as np
        import polars as pl

        calls, pending = self._calls, self._pending
        ids: list[int] = []
        outs: list[str] = []
        bad: list[int] = []
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
                    # a str key: orjson's own bytes objects are costly to keep by the million
                    key = (tool, dumps(params).decode())
                    i = get(key)
                    if i is None:
                        i = calls[key] = len(calls) + 1
                        pending.append((tool, params))
                    id_a(i)
                obs = step.observation
                if obs is None:
                    out_a("")
                else:
                    out_a(obs.output)
                    if obs.exit_code or obs.error is not None:
                        bad_a(len(outs) - 1)
        per_traj = pl.DataFrame(
            {
                "task": [t.task_id for t in tasks],
                "n_steps": lengths,
                "ref_steps": [reference_steps(t) for t in tasks],
                "instruction": [t.instruction[:OBS_CAP] if n else "" for t, n in zip(tasks, lengths, strict=True)],
            },
            schema={"task": pl.String, "n_steps": pl.UInt32, "ref_steps": pl.Float64,
                    "instruction": pl.String},
        )  # fmt: skip
        return Scan(
            pl.Series("ids", ids, dtype=pl.UInt32),
            pl.Series("obs_text", outs, dtype=pl.String),
            np.asarray(bad, dtype=np.int64),
            per_traj,
        )

    def facets(self) -> pl.DataFrame:
        """Facets of every distinct call scanned so far, as columns (row ``i`` = call id ``i``)."""
        import polars as pl

        if len(self._pending) > 1 or self._facets is None:
            start = 0 if self._facets is None else self._facets.height
            new = pl.DataFrame(
                _facet_columns(self._pending, self._resolver, message=start == 0),
                schema={k: getattr(pl, v) for k, v in _FACET_SCHEMA.items()},
            ).with_columns(  # each distinct call's tokens, hashed like observation tokens
                _act_keys=pl.col("act_text")
                .str.extract_all(TOKEN_PATTERN)
                .list.eval(pl.element().hash())
            )
            self._facets = new if self._facets is None else pl.concat([self._facets, new])
            self._pending = []
        return self._facets


_FACET_SCHEMA = {
    "cat": "String", "_target": "String", "_on_open": "Boolean", "_opens": "Boolean",
    "edit_kind": "UInt8", "_pre": "UInt64", "_on": "UInt64", "_no": "UInt64", "_old": "UInt64",
    "content": "UInt64", "act_text": "String",
}  # fmt: skip


def _facet_columns(
    calls: list[tuple[str, dict[str, Any]]], resolver: ToolResolver, *, message: bool
) -> dict[str, list]:
    """Facets of ``calls`` as columns; with ``message`` the first one is the message step."""
    n = len(calls)
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
    for i in range(1 if message else 0, n):
        tool, params = calls[i]
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


def assemble(scan: Scan, facets: pl.DataFrame) -> pl.DataFrame:
    """The step table from a :class:`Scan` and the facets of its calls (polars only: safe to
    run in another thread while the next batch is scanned)."""
    import numpy as np
    import polars as pl

    ids, obs, bad, per_traj = scan
    n = len(ids)
    lens = per_traj.get_column("n_steps").to_numpy().astype(np.int64)
    starts = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    traj = np.repeat(np.arange(len(lens), dtype=np.uint32), lens)
    step = np.arange(n, dtype=np.int64) - np.repeat(starts, lens)
    rows = facets[ids]  # every distinct call's facets onto its rows
    if (obs.str.len_bytes() > OBS_CAP).any():
        obs = obs.str.head(OBS_CAP)
    ok = np.ones(n, dtype=bool)
    ok[bad] = False
    ok |= ids.to_numpy() == 0  # a message step has nothing to fail
    tr = pl.Series("traj", traj)
    # the task instruction on each trajectory's first row
    instruction = pl.Series("instruction", [], dtype=pl.String).extend_constant("", n)
    has = (per_traj.get_column("instruction") != "").to_numpy()
    if has.any():
        instruction = instruction.scatter(
            starts[has], per_traj.get_column("instruction").filter(pl.Series(has))
        )
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
        act_keys="_act_keys",
        obs_text="obs_text",
        instruction=instruction,
    )
