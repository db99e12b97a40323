"""The step table: one row per step of every trajectory of a batch, what the rules run on.

Extraction is the one part of the rule layer that has to touch Python objects, so it does as
little per step as it can (:meth:`StepExtractor.scan`): one pass reads each step's tool,
parameters, output and status and keys the call by ``(tool, orjson of the parameters)``.
Facets (canonical tool, category, target, edit payload) are then worked out once per
*distinct* call (:meth:`StepExtractor.facets`): calls whose values are all strings and need no
command-line parsing follow a template parsed once per *shape* (tool, parameter names,
``command``) and filled in by polars; the others go through
:func:`~knowlyr.reward.actions.action_facets`. Everything per row (gathering the facets, the
SWE-agent open-file state, failure checks on write outputs, hashes) is one lazy polars query
(:func:`table_plan`), which can run on another thread while Python scans the next batch.

The SWE-agent open file is the one sequential dependency: a call like ``edit 4:4`` or
``scroll_down`` acts on the file the session has open. Such calls are recognised once per
distinct call (their facets come out with the open file as their target), and their target
is filled in afterwards, vectorised, from the last earlier read (or ``write_file``) of the
same trajectory that named a file.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from knowlyr.core.profile import DomainProfile, ToolCategory, get_profile
from knowlyr.reward.actions import (
    CMD_KEYS,
    COMMAND_WORDS,
    NO_EDIT,
    PARSED_TOOLS,
    REGION,
    REPLACE,
    SHELL_TOOLS,
    ToolResolver,
    action_facets,
)
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
    "extend_facets",
    "reference_steps",
    "step_table",
    "table_plan",
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
    """The parameters' values as one text (what info-utilization tokenises, once the SWE-agent
    ``end_of_edit`` markers are removed)."""
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
    return text


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
        self._planned = 0  # calls (and the message step) whose facets are planned
        self._templates: dict[tuple, _Template | None] = {}

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
        self._facets = extend_facets(self._facets, self.facets_plan())
        return self._facets

    def facets_plan(self) -> pl.LazyFrame | None:
        """The facets of the calls first seen since the last call, as a lazy query that
        :func:`extend_facets` appends to the earlier ones (``None``: no new call). The Python
        part (parsing, templates) happens here; the polars part when it is collected."""
        if not self._pending:
            return None
        plan = _facet_frame(
            self._pending, self._resolver, self._templates, message=not self._planned
        )
        self._planned += len(self._pending)
        self._pending = []
        return plan


def extend_facets(
    facets: pl.DataFrame | None, plan: pl.LazyFrame | None, *, engine: str = "auto"
) -> pl.DataFrame:
    """``facets`` with the rows of :meth:`StepExtractor.facets_plan` appended."""
    import polars as pl

    if plan is None:
        if facets is None:
            raise ValueError("extend_facets: no facets yet; scan a batch first")
        return facets
    new = plan.collect(engine=engine)
    return new if facets is None else pl.concat([facets, new])


def _facet_frame(
    calls: list[tuple[str, dict[str, Any]]],
    resolver: ToolResolver,
    templates: dict[tuple, _Template | None],
    *,
    message: bool,
) -> pl.LazyFrame:
    """Facets of ``calls`` (row ``i`` = ``calls[i]``) as a lazy query; with ``message`` the
    first one stands for the message step.

    Calls whose values are all strings and whose tool needs no command parsing follow the
    :class:`_Template` of their shape (tool, parameter names, ``command``), worked out once
    per shape and filled in by polars for all its calls; every other call goes through
    :func:`action_facets`.
    """
    import polars as pl

    general: list[int] = []
    shapes: dict[tuple, list[int]] = {}
    texts: list[str] = [""] * len(calls)
    shell: dict[str, bool] = {}  # tool -> a shell whose command line only its first word parses
    command_key: dict[tuple, str | None] = {}  # shape -> the parameter holding the command line
    words = COMMAND_WORDS
    for i in range(1 if message else 0, len(calls)):
        tool, params = calls[i]
        is_shell = shell.get(tool)
        if is_shell is None:
            is_shell = shell[tool] = _plain_shell(resolver, tool)
        if tool in PARSED_TOOLS and not is_shell:
            general.append(i)
            continue
        try:
            texts[i] = "\n".join(params.values())  # only strings (the common case)
        except TypeError:
            general.append(i)
            continue
        if is_shell:  # the command line matters only when its first word is interpreted
            shape = (tool, tuple(params), None)
            key = command_key.get(shape, _UNSEEN)
            if key is _UNSEEN:
                key = command_key[shape] = next((k for k in CMD_KEYS if k in params), None)
            if key is not None:
                first = params[key].split(None, 1)
                if first and first[0] in words:
                    general.append(i)
                    continue
        else:
            shape = (tool, tuple(params), params.get("command"))
        rows = shapes.get(shape)
        if rows is None:
            rows = shapes[shape] = []
        rows.append(i)
    frames = []
    for shape, rows in shapes.items():
        tpl = templates.get(shape, _UNSEEN)
        if tpl is _UNSEEN:
            tool, params = calls[rows[0]]
            tpl = templates[shape] = _template(resolver, tool, params)
        if tpl is None:
            general.extend(rows)
        else:
            frames.append(_filled(tpl, shape[0], rows, [calls[i][1] for i in rows], texts))
    if general or message:
        frames.append(_parsed(calls, sorted(general), resolver, message=message).lazy())
    d = pl.concat(frames, how="vertical_relaxed").sort("_pos")
    kind, old, new = pl.col("edit_kind"), pl.col("_old_s"), pl.col("_new_s")
    replace, region = kind == REPLACE, kind == REGION
    text = pl.col("act_text").str.replace_all("end_of_edit", "", literal=True)
    return d.with_columns(act_text=text).select(
        "cat",
        "_target",
        "_on_open",
        "_opens",
        "edit_kind",
        "_pre",
        # hashes of (old, new), (new, old), the region and its new content
        _on=pl.when(replace).then(pl.struct(old, new).hash()),
        _no=pl.when(replace).then(pl.struct(new, old).hash()),
        _old=pl.when(region).then(old.hash()),
        content=pl.when(region).then(new.hash()),
        act_text="act_text",
        # each distinct call's tokens, hashed like observation tokens
        _act_keys=pl.col("act_text").str.extract_all(TOKEN_PATTERN).list.eval(pl.element().hash()),
    )


def _filled(
    tpl: _Template, tool: str, rows: list[int], params: list[dict[str, Any]], texts: list[str]
) -> pl.LazyFrame:
    """The facets of the calls ``params`` (all of one shape) from its template."""
    import polars as pl

    # one column per parameter, named by position (parameter names can be anything)
    name = {k: f"_k{j}" for j, k in enumerate(tpl.keys)}
    cols = [pl.Series(name[k], list(map(itemgetter(k), params)), dtype=pl.String) for k in tpl.keys]

    def field(f: _Field) -> pl.Expr:
        if f is None:
            return pl.lit(None, pl.String)
        if f.__class__ is str:
            return pl.col(name[f])
        return pl.concat_str([pl.lit(p) if p.__class__ is str else pl.col(name[p[0]]) for p in f])

    target = field(tpl.target)
    shape = orjson.dumps([tpl.name, tool, tpl.keys]).decode()
    inputs = [
        *cols,
        pl.Series("_pos", rows, dtype=pl.Int64),
        pl.Series("act_text", [texts[i] for i in rows], dtype=pl.String),
    ]
    return (
        pl.DataFrame(inputs)
        .lazy()
        .select(
            "_pos",
            cat=pl.lit(tpl.cat, pl.String),
            _target=target,
            _on_open=pl.lit(False),
            _opens=pl.lit(tpl.opens) & target.is_not_null(),
            edit_kind=pl.lit(tpl.kind, pl.UInt8),
            # identical calls: same tool, names and values (the names' order does not matter)
            _pre=pl.struct(pl.lit(shape), *(pl.col(name[k]) for k in tpl.keys)).hash(),
            _old_s=field(tpl.old),
            _new_s=field(tpl.new),
            act_text="act_text",
        )
    )


def _parsed(
    calls: list[tuple[str, dict[str, Any]]],
    rows: list[int],
    resolver: ToolResolver,
    *,
    message: bool,
) -> pl.DataFrame:
    """The facets of ``calls[i]`` for ``i`` in ``rows`` (and the message step first, with
    ``message``) through :func:`action_facets`."""
    import polars as pl

    if message:
        rows = [0, *rows]
    n = len(rows)
    cat = [""] * n
    target: list[str | None] = [None] * n
    on_open = [False] * n  # acts on the file the session has open
    opens = [False] * n  # a read (or file creation) naming a file: it becomes the open file
    kind = [NO_EDIT] * n
    pre: list[int | None] = [None] * n  # hash of (canonical tool, tool, sorted parameters)
    old: list[str | None] = [None] * n
    new: list[str | None] = [None] * n
    text = [""] * n
    dumps, sort = orjson.dumps, orjson.OPT_SORT_KEYS
    for j in range(1 if message else 0, n):
        tool, params = calls[rows[j]]
        f = action_facets(resolver, tool, params, _OPEN_A)
        t = f.target
        if t == _OPEN_A and action_facets(resolver, tool, params, _OPEN_B).target == _OPEN_B:
            on_open[j] = True
            t = None
        target[j] = t
        c = cat[j] = f.category
        opens[j] = t is not None and (c == "read" or f.tool == "write_file")
        pre[j] = hash((f.tool, tool, dumps(params, option=sort))) & _MASK
        text[j] = _text_of(params)
        if c == "write" and f.edit_kind:
            kind[j] = f.edit_kind
            old[j], new[j] = f.old, f.new
    return pl.DataFrame(
        {
            "_pos": rows, "cat": cat, "_target": target, "_on_open": on_open, "_opens": opens,
            "edit_kind": kind, "_pre": pre, "_old_s": old, "_new_s": new, "act_text": text,
        },
        schema={
            "_pos": pl.Int64, "cat": pl.String, "_target": pl.String, "_on_open": pl.Boolean,
            "_opens": pl.Boolean, "edit_kind": pl.UInt8, "_pre": pl.UInt64, "_old_s": pl.String,
            "_new_s": pl.String, "act_text": pl.String,
        },
    )  # fmt: skip


_UNSEEN = object()
# A facet field of a template: None, a parameter name (the field is that value), or a tuple
# of pieces (a literal string, or a 1-tuple holding a parameter name) joined in order.
_Field = str | tuple | None
_MARK = re.compile("\x00([0-9]+)\x00")


class _Template(NamedTuple):
    """The facets of every call of one shape (tool, parameter names, ``command`` value) whose
    values are all strings, as functions of those values."""

    name: str
    cat: str
    opens: bool  # a target it names becomes the open file
    kind: int
    target: _Field
    old: _Field
    new: _Field
    keys: tuple[str, ...]  # parameter names, sorted
    values: Callable[[dict[str, Any]], Any] | None  # their values in that order


def _fill(field: _Field, params: dict[str, Any]) -> str | None:
    if field is None:
        return None
    if field.__class__ is str:
        return params[field]
    return "".join(p if p.__class__ is str else params[p[0]] for p in field)


def _plain_shell(resolver: ToolResolver, tool: str) -> bool:
    """A shell tool of the execute category whose name and category do not depend on the
    command: of its command line only the first word can change its facets."""
    return (
        tool in SHELL_TOOLS
        and not resolver.command_aliased(tool)
        and resolver.resolve(tool, {})[1] == ToolCategory.EXECUTE
    )


def _template(resolver: ToolResolver, tool: str, params: dict[str, Any]) -> _Template | None:
    """The template of the shape of ``tool(params)`` (all values strings), or ``None`` when
    its facets depend on the values in other ways than passing them through: command-line
    parsing (but for a plain shell command, whose first word the caller checked), the open
    file, a long ``command`` (the resolver does not key on it)."""
    category = resolver.resolve(tool, params)[1]
    cmd = params.get("command")
    shell = _plain_shell(resolver, tool)
    if not shell and (tool in PARSED_TOOLS or category == ToolCategory.EXECUTE):
        return None
    if cmd is not None and ((len(cmd) >= 40 and not shell) or "\x00" in cmd or "\x01" in cmd):
        return None
    names = list(params)

    def probe(mark: str) -> dict[str, Any]:
        return {k: (v if k == "command" else f"{mark}{j}{mark}") for j, (k, v) in enumerate(params.items())}  # fmt: skip

    def field(value: str | None) -> _Field:
        if value is None:
            return None
        parts = _MARK.split(value)  # literal, index, literal, index, ..., literal
        if len(parts) == 3 and parts[0] == parts[2] == "":
            return names[int(parts[1])]
        return tuple(p if j % 2 == 0 else (names[int(p)],) for j, p in enumerate(parts) if p)

    f = action_facets(resolver, tool, probe("\x00"))
    tpl_fields = (field(f.target), field(f.old), field(f.new))
    check_params = probe("\x01")
    g = action_facets(resolver, tool, check_params)
    if (g.tool, g.category, g.edit_kind) != (f.tool, f.category, f.edit_kind) or [
        _fill(x, check_params) for x in tpl_fields
    ] != [g.target, g.old, g.new]:
        return None  # not a pass-through of the values: parse each call
    keys = tuple(sorted(names))
    return _Template(
        name=f.tool,
        cat=f.category,
        opens=f.category == "read" or f.tool == "write_file",
        kind=f.edit_kind if f.category == "write" else NO_EDIT,
        target=tpl_fields[0],
        old=tpl_fields[1],
        new=tpl_fields[2],
        keys=keys,
        values=itemgetter(*keys) if keys else None,
    )


def assemble(scan: Scan, facets: pl.DataFrame) -> pl.DataFrame:
    """The step table from a :class:`Scan` and the facets of its calls."""
    return table_plan(scan, facets).collect()


def table_plan(scan: Scan, facets: pl.DataFrame) -> pl.LazyFrame:
    """The step table as a lazy query (building it computes nothing): one ``collect`` runs it
    without holding the GIL, so that it can overlap the scan of the next batch."""
    import numpy as np
    import polars as pl

    ids, obs, bad, per_traj = scan
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
            instruction,
        ]
    ).lazy()
    tr = pl.col("traj")
    per_row = [pl.lit(per_traj.get_column(c)).gather(tr).alias(c) for c in ("task", "n_steps", "ref_steps")]  # fmt: skip
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
    )
