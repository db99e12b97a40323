"""Arrow columns of the SFT export, built for a whole batch of rows at once (the hot path).

A training message is one of the JSON templates of :mod:`knowlyr.export.messages` with its
fields filled in. Every message of a batch has exactly one free-text field (system prompt,
instruction, assistant content or tool output), so the batch is assembled as

    message = P[kind] + json(call id) + Q[kind] + arguments + R[kind] + json(text) + S[kind]

where ``kind`` says which template (and which tool) the message uses, ``P``/``Q``/``R``/``S``
are the template's fixed fragments, ``json(text)`` comes from *one* ``orjson.dumps`` of all the
texts of the batch (split at the element boundaries, see :func:`json_strings`), the call id
(assistant turns with a tool call and the tool's answer) likewise from one of all the ids, and
``arguments`` is the tool call's JSON object (assistant turns with a tool call only); a field
a message does not have is empty. The concatenation is one ``binary_join_element_wise`` in
Arrow. The bytes are exactly ``orjson.dumps`` of the message dicts of
:func:`knowlyr.export.messages.trajectory_messages` (the tests compare them).
"""

from __future__ import annotations

from typing import Any

import orjson

from knowlyr._arrow import binary_array, number_array, numpy_of
from knowlyr.errors import ExportError
from knowlyr.export.messages import (
    ASSISTANT_CALL_JSON,
    ASSISTANT_TEXT_JSON,
    SYSTEM_JSON,
    TOOL_JSON,
    USER_JSON,
)

__all__ = [
    "STEP_TEXT",
    "STEP_TOOL",
    "STEP_TOOL_NO_OBSERVATION",
    "json_objects",
    "json_strings",
    "message_column",
]

#: Step kinds: a tool call answered by the tool (assistant + tool message), a tool call without
#: an observation (assistant message only) and a text-only turn (assistant message only).
STEP_TOOL, STEP_TOOL_NO_OBSERVATION, STEP_TEXT = 0, 1, 2

_SYS, _USER, _ASST_TEXT, _FIRST_TOOL_KIND = 0, 1, 2, 3
_MAX_BYTES = 2**31 - 1  # int32 offsets of the ``string`` storage


def _unescaped_quotes(b: Any) -> Any:
    """Positions of the ``"`` bytes of JSON text ``b`` that open or close a string.

    A ``"`` inside a string is escaped: an odd run of backslashes precedes it.
    """
    import numpy as np

    quotes = np.flatnonzero(b == 34)
    if not len(quotes):
        return quotes
    prev = b[np.maximum(quotes - 1, 0)] == 92
    if not prev.any():
        return quotes
    slashes = np.flatnonzero(b == 92)
    run = np.ones(len(slashes), dtype=bool)
    run[1:] = np.diff(slashes) != 1
    run_start = np.maximum.accumulate(np.where(run, slashes, 0))
    cand = quotes[prev]
    i = np.searchsorted(slashes, cand - 1)  # the backslash right before: slashes[i] == cand - 1
    escaped = (cand - run_start[i]) % 2 == 1
    keep = np.ones(len(quotes), dtype=bool)
    keep[np.flatnonzero(prev)[escaped]] = False
    return quotes[keep]


def _slices(buf: bytes, starts: Any, n: int, *, tail: int = 1) -> Any:
    """Elements ``buf[starts[i]:starts[i + 1] - tail]`` (``tail`` separator bytes each)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = np.asarray(starts, dtype=np.int32 if len(buf) <= _MAX_BYTES else np.int64)
    raw = pa.Array.from_buffers(
        pa.binary() if offsets.dtype == np.int32 else pa.large_binary(),
        n,
        [None, pa.py_buffer(offsets), pa.py_buffer(buf)],
    )
    return pc.binary_slice(raw, 0, -tail)  # drop the separator after each element


def json_strings(values: list[str]) -> Any:
    """``pa.binary()`` array of ``orjson.dumps(v)`` for each string in ``values``, from one call.

    The list is dumped with ``OPT_INDENT_2``: a JSON string never holds a raw newline, so the
    newlines are exactly the element separators and every element is a slice of the one
    buffer (the strings themselves are encoded as without the option). ``values`` gets a
    sentinel appended during the call (and removed again). Over 2 GiB: ``large_binary``.
    """
    import numpy as np

    n = len(values)
    values.append("")  # every real element is then followed by ",\n  "
    try:
        buf = orjson.dumps(values, option=orjson.OPT_INDENT_2)
    finally:
        values.pop()
    newlines = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)
    if len(newlines) != n + 2:  # cannot happen for a list of str; a cheap guard
        raise ExportError(f"JSON string split found {len(newlines)} separators for {n} strings")
    return _slices(buf, newlines[: n + 1] + 3, n, tail=4)


def json_objects(values: list[dict[str, Any]]) -> Any:
    """``pa.binary()`` array of ``orjson.dumps(v)`` for each dict in ``values``, from one call,
    and an empty last element.

    The elements of the one JSON array are separated by ``},{``. When ``},{`` occurs exactly
    once per boundary (no string or nested list holds one) those are the boundaries; otherwise
    they are found by :func:`_depth_one_commas`.
    """
    import numpy as np

    n = len(values)
    values.append({})  # every real element is then followed by ",{"
    try:
        buf = orjson.dumps(values)
    finally:
        values.pop()
    b = np.frombuffer(buf, dtype=np.uint8)
    commas = np.flatnonzero(b == 44)  # never the first or last byte
    commas = commas[(b[commas - 1] == 125) & (b[commas + 1] == 123)]
    if len(commas) != n:
        commas = _depth_one_commas(b)
    if len(commas) != n:  # cannot happen for a list of dicts; a cheap guard
        raise ExportError(f"JSON element split found {len(commas)} boundaries for {n} values")
    starts = np.empty(n + 2, dtype=np.int64)
    starts[0] = 1
    starts[1 : n + 1] = commas + 1
    starts[n + 1] = starts[n] + 1  # "{" of the sentinel: an empty last element after the slice
    return _slices(buf, starts, n + 1)


def _depth_one_commas(b: Any) -> Any:
    """Positions of the commas that separate the elements of the JSON array ``b``: outside
    strings and at nesting depth 1."""
    import numpy as np

    quotes = _unescaped_quotes(b)
    structural = np.flatnonzero(
        (b == 44) | (b == 91) | (b == 93) | (b == 123) | (b == 125)
    )  # , [ ] { }
    structural = structural[np.searchsorted(quotes, structural) % 2 == 0]  # outside strings
    ch = b[structural]
    delta = (ch == 91).astype(np.int64) + (ch == 123) - (ch == 93) - (ch == 125)
    depth = np.cumsum(delta) - delta  # before the byte
    return structural[(ch == 44) & (depth == 1)]


def _fragments(tools: list[str]) -> tuple[Any, Any, Any, Any]:
    """The P / Q / R / S fragment tables, indexed by message kind (see the module docstring)."""

    sys_r, sys_s = SYSTEM_JSON.split(b"%b")
    user_r, user_s = USER_JSON.split(b"%b")
    text_r, text_s = ASSISTANT_TEXT_JSON.split(b"%b")
    call_p, call_name, call_args, call_r, call_s = ASSISTANT_CALL_JSON.split(b"%b")
    tool_p, tool_name, tool_r, tool_s = TOOL_JSON.split(b"%b")
    names = [orjson.dumps(t) for t in tools]
    k = len(tools)
    p = [b"", b"", b""] + [call_p] * k + [tool_p] * k
    q = [b"", b"", b""] + [call_name + j + call_args for j in names]
    q += [tool_name + j + tool_r for j in names]
    r = [sys_r, user_r, text_r] + [call_r] * k + [b""] * k
    s = [sys_s, user_s, text_s] + [call_s] * k + [tool_s] * k
    return binary_array(p), binary_array(q), binary_array(r), binary_array(s)


def message_column(
    *,
    texts: list[str],
    step_kinds: list[int],
    tool_names: list[str],
    arguments: list[dict[str, Any]],
    call_ids: list[str],
    row_steps: Any,
    row_final: Any,
    row_system: Any,
) -> list[Any]:
    """The ``messages`` column (``list<json>`` chunks) of a batch of rows.

    Args:
        texts: every message's text in row order: per row the system prompt (when
            ``row_system``), the instruction, then per step the assistant content and, for a
            ``STEP_TOOL`` step that is not the row's last (or the row is ``final``), the tool
            output.
        step_kinds: ``STEP_*`` of every gathered step (the batch's steps, each once).
        tool_names: the tool of every step with a tool call, in step order.
        arguments: the params of every step with a tool call, in step order.
        call_ids: the call id of every step with a tool call, in step order.
        row_steps: ``(n_rows, 2)`` int array: each row's steps ``[begin, end)`` (indices into
            ``step_kinds``; rows of a chunked trajectory overlap).
        row_final: bool array per row: the row keeps the tool answer after its last step.
        row_system: bool array per row: the row starts with a system message.

    Returns:
        One ``ListArray`` per chunk of rows (one, unless the batch holds more than 2 GiB).
    """
    import numpy as np

    kinds = np.asarray(step_kinds, dtype=np.int8)
    has_call = kinds != STEP_TEXT
    distinct = list(dict.fromkeys(tool_names))  # in order of first appearance
    code = {tool: i for i, tool in enumerate(distinct)}
    tool_of_step = np.full(len(kinds), -1, dtype=np.int64)
    tool_of_step[has_call] = np.fromiter(
        map(code.__getitem__, tool_names), np.int64, len(tool_names)
    )
    call_ordinal = np.cumsum(has_call) - 1  # index into `arguments` of a step with a call
    n_tools = len(distinct)

    begin, end = row_steps[:, 0], row_steps[:, 1]
    lengths = end - begin
    n_rows, n_entries = len(lengths), int(lengths.sum())
    row_of = np.repeat(np.arange(n_rows), lengths)
    first_entry = np.zeros(n_rows, dtype=np.int64)
    np.cumsum(lengths[:-1], out=first_entry[1:])
    step = np.arange(n_entries) - np.repeat(first_entry - begin, lengths)  # a row's steps
    last = np.zeros(n_entries, dtype=bool)
    last[first_entry + lengths - 1] = True
    tool_msg = (kinds[step] == STEP_TOOL) & ~(last & ~row_final[row_of])
    system = np.asarray(row_system, dtype=bool)
    head = 1 + system.astype(np.int64)  # each row's system and user messages
    head_end = np.cumsum(head)  # messages before a row's steps, and the rows' before it
    per_entry = 1 + tool_msg.astype(np.int64)
    pos = np.cumsum(per_entry) - per_entry + head_end[row_of]  # the assistant message
    n_msgs = n_entries + int(tool_msg.sum()) + int(head.sum())
    if n_msgs != len(texts):
        raise ExportError(f"SFT batch has {len(texts)} message texts for {n_msgs} messages")
    row_msgs = np.bincount(row_of, weights=per_entry, minlength=n_rows).astype(np.int64) + head
    row_offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(row_msgs, out=row_offsets[1:])

    kind = np.empty(n_msgs, dtype=np.int64)
    kind[row_offsets[:-1][system]] = _SYS
    kind[row_offsets[:-1] + head - 1] = _USER
    tools = tool_of_step[step]
    kind[pos] = np.where(tools < 0, _ASST_TEXT, _FIRST_TOOL_KIND + tools)
    kind[pos[tool_msg] + 1] = _FIRST_TOOL_KIND + n_tools + tools[tool_msg]
    arg_index = np.full(n_msgs, len(arguments), dtype=np.int64)  # -> the empty element
    with_call = tools >= 0
    arg_index[pos[with_call]] = call_ordinal[step[with_call]]
    id_index = arg_index.copy()  # the call's id, on its tool answer too
    id_index[pos[tool_msg] + 1] = call_ordinal[step[tool_msg]]

    frags = _fragments(distinct)
    args = json_objects(arguments)  # and an empty last element
    ids = json_id_strings(call_ids)  # and an empty last element
    return _assemble(texts, kind, arg_index, id_index, row_offsets, frags, args, ids)


def json_id_strings(values: list[str]) -> Any:
    """:func:`json_strings` of ``values`` and an empty last element."""
    import pyarrow as pa

    return pa.concat_arrays([json_strings(values).cast(pa.binary()), binary_array([b""])])


def _assemble(
    texts: list[str],
    kind: Any,
    arg_index: Any,
    id_index: Any,
    row_offsets: Any,
    frags: Any,
    args: Any,
    ids: Any,
) -> list[Any]:
    """Join the messages of the rows ``row_offsets`` delimits; split in halves when too big."""
    import pyarrow as pa
    import pyarrow.compute as pc

    p, q, r, s = frags
    encoded = json_strings(texts)
    frag_len = numpy_of(pc.binary_length(p)) + numpy_of(pc.binary_length(q))
    frag_len += numpy_of(pc.binary_length(r)) + numpy_of(pc.binary_length(s))
    size = encoded.nbytes + int(frag_len[kind].sum())
    size += int(numpy_of(pc.binary_length(args))[arg_index].sum())
    size += int(numpy_of(pc.binary_length(ids))[id_index].sum())
    if size > _MAX_BYTES:
        n_rows = len(row_offsets) - 1
        if n_rows < 2:
            raise ExportError(
                f"one SFT row holds {size:,} bytes of messages, more than an Arrow string array "
                "takes; split long trajectories with max_steps_per_row"
            )
        mid = n_rows // 2
        m = row_offsets[mid] - row_offsets[0]
        first = (texts[:m], kind[:m], arg_index[:m], id_index[:m], row_offsets[: mid + 1])
        rest = (texts[m:], kind[m:], arg_index[m:], id_index[m:], row_offsets[mid:])
        return _assemble(*first, frags, args, ids) + _assemble(*rest, frags, args, ids)
    kind_arr = number_array(kind)
    joined = pc.binary_join_element_wise(
        p.take(kind_arr),
        ids.take(number_array(id_index)),
        q.take(kind_arr),
        args.take(number_array(arg_index)),
        r.take(kind_arr),
        encoded,
        s.take(kind_arr),
        binary_array([b""])[0],  # the separator: a scalar (b"" would go through pa.array)
    )
    values = pa.ExtensionArray.from_storage(pa.json_(), joined.view(pa.string()))
    offsets = number_array(row_offsets - row_offsets[0], pa.int32())
    return [pa.ListArray.from_arrays(offsets, values)]
