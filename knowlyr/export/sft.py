"""SFT export: multi-turn tool-calling conversations in the format TRL's SFTTrainer takes.

Each row holds ``messages`` (system, user task, then per step an assistant turn with the thought
and one tool call, and the tool's answer) and ``tools`` (OpenAI function schemas, one schema
for the whole dataset), plus ``step_weights`` for the step-weighted loss and bookkeeping
columns (``trajectory_id``, ``task_id``, ``reward``, ``success``, ``n_steps``, ``chunk``).
Nothing is truncated: long trajectories are split at step boundaries when asked
(``max_steps_per_row``), never cut inside a message.

How it is fast: one loop reads each step's fields (plain dict reads of the validated models)
into flat lists; every 2,048 rows the batch is handed to a worker thread that builds the
Arrow columns at once (:mod:`knowlyr.export.sft_columns`: one ``orjson`` call for all the
texts, one for all the tool arguments, the messages joined from the format module's JSON
templates; step weights with numpy) while the next batch is gathered. The result is byte for
byte the per-row construction from :func:`knowlyr.agents.action_format.trajectory_to_messages`
(``tests/export/test_sft_columns.py``).

Example:
    >>> result = export_sft(trajectories, min_reward=0.5)  # doctest: +SKIP
    >>> result.dataset[0]["messages"][2]["tool_calls"][0]["function"]["name"]  # doctest: +SKIP
    'query_stats'
    >>> result.save("out/sft")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import orjson

from knowlyr._arrow import binary_array, bools, number_array, strings, table_fingerprint
from knowlyr._gc import paused
from knowlyr._switching import fine_gil_switching
from knowlyr.errors import ExportError
from knowlyr.export.common import (
    DEFAULT_SYSTEM_PROMPT,
    CallShapes,
    DatasetCard,
    ExportResult,
    normalized_step_weights,
    reward_of,
    reward_stats,
    schemas_of_shapes,
    step_rewards_of,
    trajectory_fields,
)
from knowlyr.export.sft_columns import (
    STEP_TEXT,
    STEP_TOOL,
    STEP_TOOL_NO_OBSERVATION,
    message_column,
)
from knowlyr.trajectory import Trajectory

__all__ = ["chunk_steps", "export_sft", "json_list_array"]


def chunk_steps(n_steps: int, max_steps: int, overlap: int) -> list[tuple[int, int, int]]:
    """Split ``range(n_steps)`` into chunks of at most ``max_steps`` trained steps.

    Returns ``(context_start, start, end)`` per chunk: steps ``[context_start, start)`` are
    repeated from the previous chunk as context (weight 0, not trained again) and steps
    ``[start, end)`` are trained. Every step is trained exactly once.
    """
    if max_steps < 1:
        raise ExportError(f"max_steps_per_row must be at least 1, got {max_steps}")
    if overlap < 0:
        raise ExportError(f"chunk_overlap must be >= 0, got {overlap}")
    out = []
    for start in range(0, max(n_steps, 1), max_steps):
        out.append((max(0, start - overlap), start, min(start + max_steps, n_steps)))
    return out


def json_list_array(rows: list[list[bytes]]) -> Any:
    """A pyarrow ``list<json>`` array from per-row lists of JSON-encoded items."""
    import numpy as np
    import pyarrow as pa

    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = [item for r in rows for item in r]
    values = pa.ExtensionArray.from_storage(pa.json_(), binary_array(flat).cast(pa.string()))
    return pa.ListArray.from_arrays(number_array(offsets), values)


def export_sft(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    *,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    tools: list[dict[str, Any]] | None = None,
    only_success: bool = True,
    min_reward: float | None = None,
    rewards: Mapping[str, float] | None = None,
    max_steps_per_row: int | None = None,
    chunk_overlap: int = 1,
    step_weight_mix: float = 0.5,
    validated: bool = False,
) -> ExportResult:
    """Export trajectories as an SFT ``datasets.Dataset`` of conversations with a tools column.

    Args:
        trajectories: Trajectory objects or their JSON documents (any iterable: it is read
            once, so a generator streams), which are validated as the model validates them
            (:func:`knowlyr.store._documents.validate_document`) without building models.
        system_prompt: system message of every conversation (``None``: none).
        tools: OpenAI function schemas for the ``tools`` column; inferred from the calls
            (:func:`~knowlyr.export.common.infer_tool_schemas`) when ``None``.
        only_success: keep only trajectories whose ``outcome.success`` is true.
        min_reward: keep only trajectories whose reward (see
            :func:`~knowlyr.export.common.trajectory_reward`) is at least this.
        rewards: trajectory id -> reward, overriding the rewards stored on the trajectories.
        max_steps_per_row: split longer trajectories into rows of at most this many trained
            steps, at step boundaries (``None``: one row per trajectory).
        chunk_overlap: steps of the previous chunk repeated as context (weight 0).
        step_weight_mix: how much the ``step_weights`` column follows the step rewards
            (see :func:`~knowlyr.export.common.normalized_step_weights`).
        validated: the documents are validated already (the store's, or
            :func:`~knowlyr.store._documents.validate_document`'s): not checked again.

    Returns:
        An :class:`ExportResult`; rejected trajectories are listed with the reason.
    """
    with paused():  # the gather loop allocates ~100 objects per row: GC passes would dominate
        return _export_sft(
            trajectories,
            system_prompt=system_prompt,
            tools=tools,
            only_success=only_success,
            min_reward=min_reward,
            rewards=rewards,
            max_steps_per_row=max_steps_per_row,
            chunk_overlap=chunk_overlap,
            step_weight_mix=step_weight_mix,
            validated=validated,
        )


def _export_sft(trajectories: Iterable[Trajectory | Mapping[str, Any]], **kw: Any) -> ExportResult:
    from datasets import Dataset

    g = _gather(trajectories, **kw)
    try:
        table = g.rows.table(g.tools_json)
    finally:
        g.rows.close()
    ds = Dataset(table, fingerprint=table_fingerprint(table))
    return ExportResult(dataset=ds, card=g.card, rejected=g.rejected)


@dataclass
class _Gathered:
    """The rows of an export (gathered, batches in the worker or spilled), its card and
    rejections."""

    rows: _Rows
    tools_json: list[bytes]
    card: DatasetCard
    rejected: list[tuple[str, str]]


@dataclass
class _Part:
    """What gathering one run of trajectories gave, rows aside (those are in its
    :class:`_Rows`, or in the spill file of the worker process that sent this back)."""

    n_in: int
    n_rows: int
    shapes: CallShapes
    kept_rewards: list[float]
    kept_tasks: set[str]
    rejected: list[tuple[str, str]]
    split: bool  # a batch of its rows was split for size (over 2 GiB of messages)


def _gather(
    trajectories: Iterable[Trajectory | Mapping[str, Any]],
    *,
    spill: str | None = None,
    threaded: bool = True,
    **kw: Any,
) -> _Gathered:
    """Read every trajectory once, filter, gather its rows; the caller closes ``rows``.

    ``kw`` are :func:`export_sft`'s keyword arguments, all of them."""
    rows = _new_rows(kw, spill, threaded)
    try:
        part = _gather_part(trajectories, rows, kw)
    except BaseException:
        rows.close()
        raise
    card, tools_json = _card([part], kw)
    return _Gathered(rows, tools_json, card, part.rejected)


def _new_rows(kw: Mapping[str, Any], spill: str | None, threaded: bool) -> _Rows:
    """The :class:`_Rows` of an export with :func:`export_sft`'s keyword arguments ``kw``
    (checked here)."""
    mix, max_steps, overlap = kw["step_weight_mix"], kw["max_steps_per_row"], kw["chunk_overlap"]
    if not 0.0 <= mix <= 1.0:
        raise ExportError(f"step weight mix must be in [0, 1], got {mix}")
    if max_steps is not None:
        chunk_steps(1, max_steps, overlap)  # validates both
    infer = kw["tools"] is None
    return _Rows(kw["system_prompt"], max_steps, overlap, mix, infer, spill, threaded)


def _gather_part(
    trajectories: Iterable[Trajectory | Mapping[str, Any]], rows: _Rows, kw: Mapping[str, Any]
) -> _Part:
    """Gather the kept trajectories' rows into ``rows`` (flushed at the end)."""
    only_success, min_reward, rewards = kw["only_success"], kw["min_reward"], kw["rewards"]
    kept_rewards: list[float] = []
    kept_tasks: set[str] = set()
    rejected: list[tuple[str, str]] = []
    n_in = 0
    for td, task, outcome in trajectory_fields(trajectories, kw["validated"]):
        n_in += 1
        tid = td["id"]
        given = float(rewards[tid]) if rewards is not None and tid in rewards else None
        steps = td.get("steps")
        if not steps:
            rejected.append((tid, "no steps"))
            continue
        if only_success and not outcome.get("success"):
            rejected.append((tid, "not successful"))
            continue
        if min_reward is not None:
            reward = reward_of(step_rewards_of(steps), outcome) if given is None else given
            if reward < min_reward:
                rejected.append((tid, f"reward {reward:.4g} < min_reward {min_reward}"))
                continue
        kept_rewards.append(rows.add(tid, task, outcome, steps, given))
        kept_tasks.add(task["task_id"])
    rows.flush()
    return _Part(
        n_in, rows.n_rows, rows.shapes, kept_rewards, kept_tasks, rejected,
        rows.split,
    )  # fmt: skip


def _card(parts: list[_Part], kw: Mapping[str, Any]) -> tuple[DatasetCard, list[bytes]]:
    """The card and the tool schemas' JSON of an export gathered in ``parts`` (in order)."""
    tools = kw["tools"]
    if tools is None:
        shapes: CallShapes = {}
        for part in parts:  # in order of first appearance over all the parts
            for shape, params in part.shapes.items():
                shapes.setdefault(shape, params)
        tools = schemas_of_shapes(shapes)
    kept_rewards = [r for part in parts for r in part.kept_rewards]
    reasons: dict[str, int] = {}
    for part in parts:
        for _, why in part.rejected:
            key = why.split(" ")[0] if why.startswith("reward") else why
            reasons[key] = reasons.get(key, 0) + 1
    card = DatasetCard(
        kind="sft",
        rows=sum(part.n_rows for part in parts),
        trajectories=len(kept_rewards),
        tasks=len(set().union(*(part.kept_tasks for part in parts))),
        rejected=reasons,
        reward=reward_stats(kept_rewards),
        params={
            "input_trajectories": sum(part.n_in for part in parts),
            "only_success": kw["only_success"],
            "min_reward": kw["min_reward"],
            "max_steps_per_row": kw["max_steps_per_row"],
            "chunk_overlap": kw["chunk_overlap"],
            "step_weight_mix": kw["step_weight_mix"],
            "tools": [t.get("function", t).get("name") for t in tools],
            "system_prompt": kw["system_prompt"],
        },
    )
    return card, [orjson.dumps(t) for t in tools]


#: Rows per column batch. A finished batch is assembled in a worker thread (numpy and Arrow
#: release the GIL) while the next one is gathered.
_BATCH_ROWS = 2048
#: Rows per batch when the batches are spilled and written out (``folder.save_sft``): what is in
#: memory at once (a batch of 2,048 20-step rows is ~35 MB of messages, several times that
#: while it is built and written), at no cost in speed here.
_SPILL_BATCH_ROWS = 256

_WEIGHTS_FORMULA, _WEIGHTS_UNIFORM, _WEIGHTS_GIVEN = 0, 1, 2


class _Rows:
    """The rows of an SFT export: gathered trajectory by trajectory in plain lists (one hot loop
    over the steps), assembled into Arrow columns batch by batch."""

    def __init__(
        self,
        system_prompt: str | None,
        max_steps: int | None,
        overlap: int,
        mix: float,
        infer_tools: bool,
        spill: str | None = None,
        threaded: bool = True,
    ) -> None:
        self.system_prompt = system_prompt or None
        self.max_steps, self.overlap, self.mix = max_steps, overlap, mix
        self.infer_tools = infer_tools  # keep each call shape's first parameters
        self.shapes: CallShapes = {}
        self.n_rows = 0  # handed to the worker
        self.batches: list[Any] = []  # futures of _assemble_batch (its record batches)
        self.spill = spill  # an Arrow stream file the worker writes the batches to
        self.threaded = threaded  # batches assembled in a worker thread (else at once)
        self.split = False  # a batch's messages were split for size (over 2 GiB)
        self._spill_writer: Any = None
        self._pool: Any = None
        self._switching: Any = None  # fine_gil_switching while the worker runs
        self._reset()

    def _reset(self) -> None:
        self.texts: list[str] = []
        self.odd_steps: list[tuple[int, int]] = []  # (step, STEP_*) of steps not STEP_TOOL
        self.tool_names: list[str] = []
        self.params: list[dict[str, Any]] = []
        self.step_rewards: list[Any] = []
        self.traj_weights: list[tuple[int, int, float]] = []  # (steps, _WEIGHTS_*, mean)
        # per row: steps [begin, end), trained from, and whether the last tool answer stays
        self.row_steps: list[tuple[int, int, int, bool]] = []
        self.keys: list[tuple[str, ...]] = []  # per call: its parameter names (infer_tools)
        self.meta: list[tuple[Any, ...]] = []  # per row: trajectory_id, then _META_COLUMNS

    def add(
        self,
        tid: str,
        task: Mapping[str, Any],
        outcome: Mapping[str, Any],
        steps: list[Any],
        given_reward: float | None,
    ) -> float:
        """Gather one kept trajectory (its steps: models or step documents); returns its
        reward."""
        n = len(steps)
        rewards = self.step_rewards
        g0 = len(rewards)
        texts = self.texts
        chunked = self.max_steps is not None and n > self.max_steps
        if chunked:  # texts per step, emitted per row below
            contents: list[str] = []
            outputs: list[str | None] = []
            text, out = contents.append, outputs.append
        else:  # one row: the texts go straight into the batch, in message order
            if self.system_prompt is not None:
                texts.append(self.system_prompt)
            texts.append(task["instruction"])
            text = out = texts.append
        tool, param, reward = self.tool_names.append, self.params.append, rewards.append
        infer, keys = self.infer_tools, self.keys.append
        for s in steps:  # the hot loop: plain dict reads (of a model's __dict__ or a document)
            d = s if type(s) is dict else s.__dict__
            a, o, m = d.get("action"), d.get("observation"), d.get("message")
            reward(d.get("reward"))
            content = d["thought"]
            if m is not None and (m or a is None):
                content = f"{content}\n{m}" if content else m
            text(content)
            if a is None:
                self.odd_steps.append((len(rewards) - 1, STEP_TEXT))
                if chunked:
                    out(None)
                continue
            ad = a if type(a) is dict else a.__dict__
            tool(ad["tool"])
            p = ad["params"]
            param(p)
            if infer:  # while the dict is in cache
                keys(tuple(p))
            if o is None:
                self.odd_steps.append((len(rewards) - 1, STEP_TOOL_NO_OBSERVATION))
                if chunked:
                    out(None)
            else:
                out((o if type(o) is dict else o.__dict__)["output"])
        traj_reward = self._weights(outcome, rewards[g0:], given_reward)
        task_id, success = task["task_id"], outcome.get("success")
        if not chunked:
            last = steps[-1] if type(steps[-1]) is dict else steps[-1].__dict__
            if last.get("action") is not None and last.get("observation") is not None:
                texts.pop()  # the last tool answer: nothing is learned from it
            self.row_steps.append((g0, g0, g0 + n, False))
            self.meta.append((tid, task_id, traj_reward, success, n, 0))
        else:
            instruction = task["instruction"]
            for c, (ctx, start, end) in enumerate(chunk_steps(n, self.max_steps, self.overlap)):
                if self.system_prompt is not None:
                    texts.append(self.system_prompt)
                texts.append(instruction)
                for i in range(ctx, end):
                    texts.append(contents[i])
                    output = outputs[i]
                    if output is not None and (i < end - 1 or end < n):
                        texts.append(output)
                self.row_steps.append((g0 + ctx, g0 + start, g0 + end, end < n))
                self.meta.append((tid, task_id, traj_reward, success, end - start, c))
        if len(self.row_steps) >= (_BATCH_ROWS if self.spill is None else _SPILL_BATCH_ROWS):
            self.flush()
        return traj_reward

    def _weights(self, outcome: Mapping[str, Any], rs: list[Any], given: float | None) -> float:
        """Record how the trajectory's step weights are computed; returns its reward.

        Equal to :func:`normalized_step_weights` and :func:`trajectory_reward`: when every step
        has a reward >= 0 the weights are ``(1 - mix) + mix * r / mean``, computed for the whole
        batch at once; otherwise they are computed here.
        """
        n = len(rs)
        if None in rs or not min(rs) >= 0.0:
            self.step_rewards[-n:] = normalized_step_weights(rs, mix=self.mix)
            self.traj_weights.append((n, _WEIGHTS_GIVEN, 1.0))
            return reward_of(rs, outcome) if given is None else given
        total = sum(rs)  # the same float as trajectory_reward's sum
        if total <= 0:
            self.traj_weights.append((n, _WEIGHTS_UNIFORM, 1.0))
        else:
            self.traj_weights.append((n, _WEIGHTS_FORMULA, total / n))
        return float(total) if given is None else given

    def flush(self) -> None:
        """Hand the gathered rows to the worker thread and start a new batch."""
        from concurrent.futures import ThreadPoolExecutor

        if not self.row_steps:
            return
        job = (
            self.texts,
            self.odd_steps,
            self.tool_names,
            self.params,
            self.step_rewards,
            self.traj_weights,
            self.row_steps,
            self.meta,
            self.system_prompt is not None,
            self.mix,
        )
        self.n_rows += len(self.row_steps)
        if self.infer_tools:  # each new shape's first parameters (dict work in C, per call)
            shapes = list(zip(self.tool_names, self.keys, strict=True))
            first = dict(zip(reversed(shapes), reversed(self.params), strict=True))
            known = self.shapes
            for shape in dict.fromkeys(shapes):  # in order of first appearance
                if shape not in known:
                    known[shape] = first[shape]
        self._reset()
        if not self.threaded:
            from concurrent.futures import Future

            done: Future = Future()
            done.set_result(self._assemble(job))
            self.batches.append(done)
            return
        if self._pool is None:
            self._switching = fine_gil_switching(1e-4)
            self._switching.__enter__()
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="knowlyr-export-sft")
        if len(self.batches) >= 2:  # at most two batches waiting: memory stays bounded
            self.batches[-2].result()
        self.batches.append(self._pool.submit(self._assemble, job))

    def _assemble(self, job: tuple) -> list[Any]:
        """The record batches of a job (worker thread); written to the spill file if any."""
        import pyarrow as pa

        batches = _assemble_batch(*job)
        self.split = self.split or len(batches) > 1
        if self.spill is None:
            return batches
        if self._spill_writer is None:
            self._spill_writer = pa.ipc.new_stream(self.spill, _schema(tools=False))
        for b in batches:
            self._spill_writer.write_batch(b)
        return []

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The schemas inferred from every call gathered (after the last :meth:`flush`)."""
        return schemas_of_shapes(self.shapes)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._switching.__exit__(None, None, None)
        if self._spill_writer is not None:
            self._spill_writer.close()
            self._spill_writer = None

    def record_batches(self, tools_json: list[bytes]) -> Iterator[Any]:
        """The export's record batches, with the ``tools`` column (after the last
        :meth:`flush`; waits for the worker, then reads the spill file back one at a time)."""
        import pyarrow as pa

        for b in self.batches:
            b.result()  # raises the worker's error, if any
        if self._spill_writer is not None:
            self._spill_writer.close()
            self._spill_writer = None
        if self.spill is not None:
            with pa.OSFile(self.spill) as f:  # read, not mapped: one batch in memory at a time
                reader = pa.ipc.open_stream(f) if f.size() else None
                batches = reader or ()
                yield from (_with_tools(b, tools_json) for b in batches)
            return
        for b in self.batches:
            for batch in b.result():
                yield _with_tools(batch, tools_json)

    def table(self, tools_json: list[bytes]) -> Any:
        """The export's Arrow table (after the last :meth:`flush`; waits for the batches)."""
        import pyarrow as pa

        return pa.Table.from_batches(list(self.record_batches(tools_json)), schema=_schema())


def _schema(*, tools: bool = True) -> Any:
    """The Arrow schema of an SFT export (without ``tools``: the worker's batches)."""
    import pyarrow as pa

    fields = [("messages", pa.list_(pa.json_()))]
    if tools:
        fields.append(("tools", pa.list_(pa.json_())))
    fields += [("trajectory_id", pa.string())]
    fields += [(name, pa.type_for_alias(typ)) for name, typ in _META_COLUMNS.items()]
    fields += [("step_weights", pa.list_(pa.float64()))]
    return pa.schema(fields)


def _with_tools(batch: Any, tools_json: list[bytes]) -> Any:
    """``batch`` with the ``tools`` column (the same schemas on every row) as its second."""
    import numpy as np
    import pyarrow as pa

    n, k = batch.num_rows, len(tools_json)
    tool_values = json_list_array([tools_json]).values
    tools = pa.ListArray.from_arrays(
        number_array(np.arange(n + 1, dtype=np.int32) * k),
        tool_values.take(number_array(np.tile(np.arange(k), n))),
    )
    return batch.add_column(1, pa.field("tools", pa.list_(pa.json_())), tools)


_META_COLUMNS = {
    "task_id": "string",
    "reward": "float64",
    "success": "bool",
    "n_steps": "int64",
    "chunk": "int64",
}


def _assemble_batch(
    texts: list[str],
    odd_steps: list[tuple[int, int]],
    tool_names: list[str],
    params: list[dict[str, Any]],
    step_rewards: list[Any],
    traj_weights: list[tuple[int, int, float]],
    row_steps: list[tuple[int, int, int, bool]],
    meta: list[tuple[Any, ...]],
    system_prompt: bool,
    mix: float,
) -> list[Any]:
    """The record batches of one batch of rows, all columns but ``tools`` (worker thread):
    one, or more when the messages were split for size."""
    import numpy as np
    import pyarrow as pa

    rs = np.asarray(row_steps, dtype=np.int64)
    kinds = np.full(len(step_rewards), STEP_TOOL, dtype=np.int8)
    if odd_steps:
        at, kind = np.asarray(odd_steps, dtype=np.int64).T
        kinds[at] = kind
    messages = message_column(
        texts=texts,
        step_kinds=kinds,
        tool_names=tool_names,
        arguments=params,
        row_steps=rs[:, [0, 2]],
        row_final=rs[:, 3].astype(bool),
        system_prompt=system_prompt,
    )
    tw = np.asarray(traj_weights, dtype=np.float64).reshape(-1, 3)
    n = tw[:, 0].astype(np.int64)
    mode = np.repeat(tw[:, 1], n)
    values = np.asarray(step_rewards, dtype=np.float64)
    w = np.where(
        mode == _WEIGHTS_FORMULA,
        (1.0 - mix) + mix * values / np.repeat(tw[:, 2], n),
        np.where(mode == _WEIGHTS_UNIFORM, 1.0, values),
    )
    weights = _row_values(w, rs)
    schema = _schema(tools=False)
    columns = [_meta_column(list(map(itemgetter(i), meta)), schema.field(i + 1).type)
               for i in range(len(_META_COLUMNS) + 1)]  # fmt: skip
    out, at = [], 0
    for chunk in messages:
        k = len(chunk)
        cols = [chunk, *(c.slice(at, k) for c in columns), weights.slice(at, k)]
        out.append(pa.RecordBatch.from_arrays(cols, schema=schema))
        at += k
    return out


def _row_values(w: Any, rs: Any) -> Any:
    """``list<double>`` of each row's step weights (0 on chunk context steps)."""
    import numpy as np
    import pyarrow as pa

    begin, trained, end = rs[:, 0], rs[:, 1], rs[:, 2]
    lengths = end - begin
    offsets = np.zeros(len(rs) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    idx = np.arange(offsets[-1]) - np.repeat(offsets[:-1] - begin, lengths)
    vals = np.where(idx >= np.repeat(trained, lengths), w[idx], 0.0)
    return pa.ListArray.from_arrays(number_array(offsets), number_array(vals))


def _meta_column(values: list[Any], type: Any) -> Any:
    """A bookkeeping column: ``string``, ``bool`` (``None``: null), ``int64`` or ``float64``."""
    import pyarrow as pa

    if type == pa.string():
        return strings(values)
    if type == pa.bool_():
        return bools(values)
    return number_array(values, type)
