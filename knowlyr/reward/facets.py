"""Facets of distinct calls, as polars columns: what :mod:`knowlyr.reward.steps` gathers onto
the rows of the step table.

:func:`facet_frame` works out each distinct call once. Calls whose parameter values are all
strings follow a *template* of their shape (tool, parameter names, ``command``): the facets
of a probe call whose values are markers show which parameter becomes the target, the
replaced text and so on, and polars fills that in for every call of the shape (a second probe
checks that the values are only passed through). Plain shell calls share one template per
tool and parameter names, unless the first word of their command line is one that
:func:`~knowlyr.reward.actions.action_facets` interprets (``open``, ``edit``, ``cat``...).
Every other call goes through :func:`~knowlyr.reward.actions.action_facets`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from knowlyr.core.profile import ToolCategory
from knowlyr.reward.actions import (
    CMD_KEYS,
    COMMAND_WORDS,
    NO_EDIT,
    PARSED_TOOLS,
    REGION,
    REPLACE,
    SHELL_TOOLS,
    UNDO,
    ToolResolver,
    action_facets,
)
from knowlyr.reward.commands import (
    ACT_EDIT,
    ACT_INVALID,
    ACT_RUN,
    ACT_TEST,
    EDIT_PATTERN,
    RUN_PATTERN,
    TEST_PATTERN,
)
from knowlyr.trajectory import INVALID_ACTION_TOOL

if TYPE_CHECKING:
    import polars as pl

__all__ = ["TOKEN_PATTERN", "extend_facets", "facet_frame"]

#: Salient tokens: what names one thing (a file, a record, a person) rather than prose. Ids are
#: matched whole, so that a wrong one shares no token with the right one: e-mail addresses,
#: file names / dotted names, snake_case identifiers, ids with digits, upper-case ids (capitals
#: and digits, 4+ of them when they start with a capital: order ids such as ``KPUAU`` or
#: ``2KOZ1``, with or without digits), numbers of 3+ digits. Plain words are not salient: a search query legitimately uses words
#: nothing revealed ("deprecation policy"), and hyphenated words are as often prose
#: ("sign-on", ``--no-merges``) as names.
TOKEN_PATTERN = (
    r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    r"|[A-Za-z0-9_][\w\-]*(?:\.[A-Za-z_][\w\-]*)+"
    r"|[A-Za-z_]\w*_\w+"
    r"|[A-Za-z]+\d\w*"
    r"|\b[0-9]*[A-Z][A-Z0-9]{3,}\b|\b[0-9]+[A-Z][A-Z0-9]+\b"
    r"|\d{3,}"
)
_MASK = (1 << 64) - 1
# Two stand-ins for "the file the session has open": a call whose target comes out as the
# first with one and as the second with the other acts on the open file.
_OPEN_A = "\x00open-file-a\x00"
_OPEN_B = "\x00open-file-b\x00"


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


def facet_frame(
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
    # the rows are the calls in order (the message step's too): their tool names alongside
    tools = pl.LazyFrame({"_tool": [c[0] for c in calls]}, schema={"_tool": pl.String})
    d = pl.concat([d, tools], how="horizontal")
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
        act_kind=_act_kind(),
    )


def _act_kind() -> pl.Expr:
    """What a call does (:mod:`knowlyr.reward.commands` bits): runs code, runs tests, edits
    a file (a write tool, or a shell command that writes), is an invalid action."""
    import polars as pl

    execute = pl.col("cat") == "execute"
    text = pl.col("act_text")
    run = execute & text.str.contains(RUN_PATTERN)
    test = run & text.str.contains(TEST_PATTERN)
    edit = ((pl.col("cat") == "write") & (pl.col("edit_kind") != UNDO)) | (
        execute & text.str.contains(EDIT_PATTERN)
    )
    invalid = pl.col("_tool") == INVALID_ACTION_TOOL
    bits = [(run, ACT_RUN), (test, ACT_TEST), (edit, ACT_EDIT), (invalid, ACT_INVALID)]
    return pl.sum_horizontal(
        [pl.when(c).then(pl.lit(b, pl.UInt8)).otherwise(pl.lit(0, pl.UInt8)) for c, b in bits]
    ).cast(pl.UInt8)


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
