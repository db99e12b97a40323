"""SFT export: multi-turn tool-calling conversations in the format TRL's SFTTrainer takes.

Each row holds ``messages`` (system, user task, then per step an assistant turn with the thought
and one tool call with its id, and the tool's answer naming that id; see
:mod:`knowlyr.export.messages`) and ``tools`` (OpenAI function schemas of the tools the row's
agent had), plus ``step_weights`` for the step-weighted loss and bookkeeping columns
(``trajectory_id``, ``task_id``, ``reward``, ``success``, ``n_steps``, ``chunk``). The system
message is the agent's own when its log kept it. Invalid actions (replies the harness could
not parse) are cut from the rows with the harness's answers and counted in the card. Nothing
else is left out: long trajectories are split at step boundaries when asked
(``max_steps_per_row``), never cut inside a message.

How it is fast: one loop reads each step's fields (plain dict reads of the validated models)
into flat lists; every 2,048 rows the batch is handed to a worker thread that builds the
Arrow columns at once (:mod:`knowlyr.export.sft_columns`: one ``orjson`` call for all the
texts, one for all the tool arguments, the messages joined from the format module's JSON
templates; step weights with numpy) while the next batch is gathered. The result is byte for
byte the per-row construction from :func:`knowlyr.export.messages.trajectory_messages`
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
    DatasetCard,
    ExportResult,
    ToolSets,
    normalized_step_weights,
    reward_of,
    reward_stats,
    step_rewards_of,
    trajectory_fields,
)
from knowlyr.export.messages import system_prompt_of
from knowlyr.export.rewards import reward_source_of
from knowlyr.export.sft_columns import (
    STEP_TEXT,
    STEP_TOOL,
    STEP_TOOL_NO_OBSERVATION,
    message_column,
)
from knowlyr.trajectory import INVALID_ACTION_TOOL, Trajectory

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
    keep_agent_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    only_success: bool = True,
    min_reward: float | None = None,
    rewards: Mapping[str, float] | None = None,
    reward_source: Mapping[str, Any] | None = None,
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
        system_prompt: system message of the conversations whose agent's own is not kept
            (``None``: none).
        keep_agent_prompt: a trajectory whose log kept its agent's system prompt
            (``metadata["system_prompt"]``) has that one; ``False``: every row has
            ``system_prompt``.
        tools: OpenAI function schemas every row declares; ``None``: each row declares its
            agent's tools (see :class:`~knowlyr.export.common.ToolSets`).
        only_success: keep only trajectories whose ``outcome.success`` is true.
        min_reward: keep only trajectories whose reward (see
            :func:`~knowlyr.export.common.trajectory_reward`) is at least this.
        rewards: trajectory id -> reward, overriding the rewards stored on the trajectories.
        reward_source: where ``rewards`` and the step rewards come from (see
            :class:`~knowlyr.export.rewards.RewardSource`), the card's ``params.rewards``
            (default: ``{"source": "given"}`` with ``rewards``, else ``"trajectories"``: the
            step rewards and outcomes the trajectories carry).
        max_steps_per_row: split longer trajectories into rows of at most this many trained
            steps, at step boundaries (``None``: one row per trajectory).
        chunk_overlap: steps of the previous chunk repeated as context (weight 0).
        step_weight_mix: how much the ``step_weights`` column follows the step rewards
            (see :func:`~knowlyr.export.common.normalized_step_weights`).
        validated: the documents are validated already (the store's, or
            :func:`~knowlyr.store._documents.validate_document`'s): not checked again.

    Returns:
        An :class:`ExportResult`; rejected trajectories are listed with the reason (one with
        only invalid actions: "no valid steps").
    """
    with paused():  # the gather loop allocates ~100 objects per row: GC passes would dominate
        return _export_sft(
            trajectories,
            system_prompt=system_prompt,
            keep_agent_prompt=keep_agent_prompt,
            tools=tools,
            only_success=only_success,
            min_reward=min_reward,
            rewards=rewards,
            reward_source=reward_source,
            max_steps_per_row=max_steps_per_row,
            chunk_overlap=chunk_overlap,
            step_weight_mix=step_weight_mix,
            validated=validated,
        )


def _export_sft(trajectories: Iterable[Trajectory | Mapping[str, Any]], **kw: Any) -> ExportResult:
    from datasets import Dataset

    g = _gather(trajectories, **kw)
    try:
        table = g.rows.table(g.row_tools)
    finally:
        g.rows.close()
    ds = Dataset(table, fingerprint=table_fingerprint(table))
    return ExportResult(dataset=ds, card=g.card, rejected=g.rejected)


@dataclass
class _Gathered:
    """The rows of an export (gathered, batches in the worker or spilled), its card and
    rejections."""

    rows: _Rows
    row_tools: list[list[bytes]]  # each row's tools (JSON of each schema)
    card: DatasetCard
    rejected: list[tuple[str, str]]


@dataclass
class _Part:
    """What gathering one run of trajectories gave, rows aside (those are in its
    :class:`_Rows`, or in the spill file of the worker process that sent this back)."""

    n_in: int
    n_rows: int
    tool_sets: ToolSets
    row_sets: list[str]  # per row: the key of its tool set
    kept_rewards: list[float]
    kept_tasks: set[str]
    rejected: list[tuple[str, str]]
    split: bool  # a batch of its rows was split for size (over 2 GiB of messages)
    invalid_steps: int = 0  # invalid actions cut from the kept trajectories
    invalid_trajectories: int = 0  # kept trajectories with one at least


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
    card, row_tools = _card([part], kw)
    return _Gathered(rows, row_tools, card, part.rejected)


def _new_rows(kw: Mapping[str, Any], spill: str | None, threaded: bool) -> _Rows:
    """The :class:`_Rows` of an export with :func:`export_sft`'s keyword arguments ``kw``
    (checked here)."""
    mix, max_steps, overlap = kw["step_weight_mix"], kw["max_steps_per_row"], kw["chunk_overlap"]
    if not 0.0 <= mix <= 1.0:
        raise ExportError(f"step weight mix must be in [0, 1], got {mix}")
    if max_steps is not None:
        chunk_steps(1, max_steps, overlap)  # validates both
    prompt = (kw["system_prompt"], kw["keep_agent_prompt"])
    return _Rows(prompt, max_steps, overlap, mix, ToolSets(kw["tools"]), spill, threaded)


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
        reward = rows.add(td, task, outcome, steps, given)
        if reward is None:
            rejected.append((tid, "no valid steps"))
            continue
        kept_rewards.append(reward)
        kept_tasks.add(task["task_id"])
    rows.flush()
    return _Part(
        n_in, rows.n_rows, rows.tool_sets, rows.row_sets, kept_rewards, kept_tasks, rejected,
        rows.split, rows.invalid_steps, rows.invalid_trajectories,
    )  # fmt: skip


def _card(parts: list[_Part], kw: Mapping[str, Any]) -> tuple[DatasetCard, list[list[bytes]]]:
    """The card and each row's tools (the JSON of each schema) of an export gathered in
    ``parts`` (in order)."""
    sets = ToolSets(kw["tools"])
    for part in parts:  # in order of first appearance over all the parts
        sets.merge(part.tool_sets)
    schemas = sets.schemas()
    used = dict.fromkeys(k for part in parts for k in part.row_sets)
    as_json = {k: [orjson.dumps(t) for t in schemas[k]] for k in used}
    row_tools = [as_json[k] for part in parts for k in part.row_sets]
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
            "tools": ToolSets.names(schemas[k] for k in used),
            "tool_sets": len(used),
            "system_prompt": kw["system_prompt"],
            "keep_agent_prompt": kw["keep_agent_prompt"],
            "rewards": reward_source_of(kw["reward_source"], kw["rewards"]),
        },
        invalid_actions=_invalid_counts(parts),
    )
    return card, row_tools


def _invalid_counts(parts: list[_Part]) -> dict[str, int]:
    steps = sum(part.invalid_steps for part in parts)
    if not steps:
        return {}
    return {"steps": steps, "trajectories": sum(part.invalid_trajectories for part in parts)}


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
        system_prompt: tuple[str | None, bool],
        max_steps: int | None,
        overlap: int,
        mix: float,
        tool_sets: ToolSets,
        spill: str | None = None,
        threaded: bool = True,
    ) -> None:
        # the system prompt of rows whose agent's own is not kept, and whether it is kept
        self.system_prompt, self.keep_agent_prompt = system_prompt[0] or None, system_prompt[1]
        self.max_steps, self.overlap, self.mix = max_steps, overlap, mix
        self.tool_sets = tool_sets  # each row's tool set; the call shapes of inferred sets
        self.row_sets: list[str] = []  # per row (all batches): its tool set's key
        self.invalid_steps = self.invalid_trajectories = 0
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
        self.call_ids: list[str] = []
        self.step_rewards: list[Any] = []
        self.traj_weights: list[tuple[int, int, float]] = []  # (steps, _WEIGHTS_*, mean)
        # per row: steps [begin, end), trained from, whether the last tool answer stays and
        # whether it has a system message
        self.row_steps: list[tuple[int, int, int, bool, bool]] = []
        # per call of a trajectory whose tools are inferred: (set key, tool, parameter names)
        self.shape_keys: list[tuple[str, str, tuple[str, ...]]] = []
        self.shape_params: list[dict[str, Any]] = []
        self.meta: list[tuple[Any, ...]] = []  # per row: trajectory_id, then _META_COLUMNS

    def add(
        self,
        td: Mapping[str, Any],
        task: Mapping[str, Any],
        outcome: Mapping[str, Any],
        steps: list[Any],
        given_reward: float | None,
    ) -> float | None:
        """Gather one kept trajectory (``td``: its fields; ``steps``: models or step
        documents); returns its reward, or ``None`` when it has no valid step (then nothing
        is gathered)."""
        rewards = self.step_rewards
        g0 = len(rewards)
        texts = self.texts
        t0, n_shapes = len(texts), len(self.shape_keys)
        prompt = system_prompt_of(td, self.system_prompt) if self.keep_agent_prompt else (
            self.system_prompt
        )  # fmt: skip
        set_key, infer = self.tool_sets.key(td)
        chunked = self.max_steps is not None and len(steps) > self.max_steps
        if chunked:  # texts per step, emitted per row below
            contents: list[str] = []
            outputs: list[str | None] = []
            text, out = contents.append, outputs.append
        else:  # one row: the texts go straight into the batch, in message order
            if prompt is not None:
                texts.append(prompt)
            texts.append(task["instruction"])
            text = out = texts.append
        tool, param, reward = self.tool_names.append, self.params.append, rewards.append
        call_id, odd = self.call_ids.append, self.odd_steps.append
        shape, shape_params = self.shape_keys.append, self.shape_params.append
        invalid = 0
        last_out = False  # the last step gathered put its tool answer in `texts`
        for s in steps:  # the hot loop: plain dict reads (of a model's __dict__ or a document)
            d = s if type(s) is dict else s.__dict__
            a = d.get("action")
            if a is not None:
                ad = a if type(a) is dict else a.__dict__
                name = ad["tool"]
                if name == INVALID_ACTION_TOOL:  # data, not a demonstration: cut
                    invalid += 1
                    continue
            o, m = d.get("observation"), d.get("message")
            reward(d.get("reward"))
            content = d["thought"]
            if m is not None and (m or a is None):
                content = f"{content}\n{m}" if content else m
            text(content)
            if a is None:
                odd((len(rewards) - 1, STEP_TEXT))
                if chunked:
                    out(None)
                last_out = False
                continue
            tool(name)
            p = ad["params"]
            param(p)
            cid = ad.get("call_id")
            call_id(cid if cid else f"call_{d['index']}")
            if infer:  # while the dict is in cache
                shape((set_key, name, tuple(p)))
                shape_params(p)
            if o is None:
                odd((len(rewards) - 1, STEP_TOOL_NO_OBSERVATION))
                if chunked:
                    out(None)
                last_out = False
            else:
                out((o if type(o) is dict else o.__dict__)["output"])
                last_out = True
        n = len(rewards) - g0
        if not n:  # only invalid actions: nothing to learn from it
            del texts[t0:], self.shape_keys[n_shapes:], self.shape_params[n_shapes:]
            return None
        if invalid:
            self.invalid_steps += invalid
            self.invalid_trajectories += 1
            if given_reward is None:  # the trajectory's reward counts every step
                given_reward = reward_of(step_rewards_of(steps), outcome)
        traj_reward = self._weights(outcome, rewards[g0:], given_reward)
        tid, task_id, success = td["id"], task["task_id"], outcome.get("success")
        system = prompt is not None
        if not chunked:
            if last_out:
                texts.pop()  # the last tool answer: nothing is learned from it
            self.row_steps.append((g0, g0, g0 + n, False, system))
            self.meta.append((tid, task_id, traj_reward, success, n, 0))
            self.row_sets.append(set_key)
        else:
            instruction = task["instruction"]
            for c, (ctx, start, end) in enumerate(chunk_steps(n, self.max_steps, self.overlap)):
                if system:
                    texts.append(prompt)
                texts.append(instruction)
                for i in range(ctx, end):
                    texts.append(contents[i])
                    output = outputs[i]
                    if output is not None and (i < end - 1 or end < n):
                        texts.append(output)
                self.row_steps.append((g0 + ctx, g0 + start, g0 + end, end < n, system))
                self.meta.append((tid, task_id, traj_reward, success, end - start, c))
                self.row_sets.append(set_key)
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
            self.call_ids,
            self.step_rewards,
            self.traj_weights,
            self.row_steps,
            self.meta,
            self.mix,
        )
        self.n_rows += len(self.row_steps)
        if self.shape_keys:  # each new shape's first parameters (dict work in C, per call)
            shapes = self.shape_keys
            first = dict(zip(reversed(shapes), reversed(self.shape_params), strict=True))
            known = self.tool_sets.shapes
            for shape in dict.fromkeys(shapes):  # in order of first appearance
                set_key, name, keys = shape
                known.setdefault(set_key, {}).setdefault((name, keys), first[shape])
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

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._switching.__exit__(None, None, None)
        if self._spill_writer is not None:
            self._spill_writer.close()
            self._spill_writer = None

    def record_batches(self, row_tools: list[list[bytes]]) -> Iterator[Any]:
        """The export's record batches, with the ``tools`` column (``row_tools``: each row's;
        after the last :meth:`flush`; waits for the worker, then reads the spill file back one
        at a time)."""
        import pyarrow as pa

        for b in self.batches:
            b.result()  # raises the worker's error, if any
        if self._spill_writer is not None:
            self._spill_writer.close()
            self._spill_writer = None
        at = 0
        if self.spill is not None:
            with pa.OSFile(self.spill) as f:  # read, not mapped: one batch in memory at a time
                reader = pa.ipc.open_stream(f) if f.size() else None
                for batch in reader or ():
                    yield _with_tools(batch, row_tools[at : at + batch.num_rows])
                    at += batch.num_rows
            return
        for b in self.batches:
            for batch in b.result():
                yield _with_tools(batch, row_tools[at : at + batch.num_rows])
                at += batch.num_rows

    def table(self, row_tools: list[list[bytes]]) -> Any:
        """The export's Arrow table (after the last :meth:`flush`; waits for the batches)."""
        import pyarrow as pa

        return pa.Table.from_batches(list(self.record_batches(row_tools)), schema=_schema())


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


def _with_tools(batch: Any, row_tools: list[list[bytes]]) -> Any:
    """``batch`` with the ``tools`` column (``row_tools``: each of its rows' schemas, as
    JSON) as its second."""
    import pyarrow as pa

    if len(row_tools) != batch.num_rows:  # cannot happen: a cheap guard
        raise ExportError(f"SFT batch of {batch.num_rows} rows has tools for {len(row_tools)}")
    tools = json_list_array(row_tools)
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
    call_ids: list[str],
    step_rewards: list[Any],
    traj_weights: list[tuple[int, int, float]],
    row_steps: list[tuple[int, int, int, bool, bool]],
    meta: list[tuple[Any, ...]],
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
        call_ids=call_ids,
        row_steps=rs[:, [0, 2]],
        row_final=rs[:, 3].astype(bool),
        row_system=rs[:, 4].astype(bool),
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
