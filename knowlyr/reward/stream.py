"""Score agent logs or trajectory files with the rule layer in batches: memory stays a few
batches whatever the number of trajectories (what ``knowlyr reward score`` runs without a
judge).

Two passes. The first converts the inputs (the recorder's :func:`~knowlyr.recorder.iter_encoded`:
JSON documents, no models), spools each trajectory's JSON to a temporary file and keeps only
its task, length and outcome (efficiency's batch medians are taken over every trajectory, so
the numbers are those of one batch) and the rejected records. The second reads the spool
:data:`SCORE_BATCH` documents at a time, scores each batch with
:meth:`~knowlyr.reward.engine.RewardEngine.score_documents` (in this process, or in worker
processes, two batches in flight per worker) and writes their rewards in input order
(:class:`RewardsWriter`: the bytes of :func:`~knowlyr.reward.engine.dump_rewards`), and
appends them to a store :data:`SAVE_ROWS` at a time when one is given.

Example:
    >>> with open("rewards.json", "wb") as f:                          # doctest: +SKIP
    ...     res = score_files(["runs.jsonl"], RewardEngine("coding"), f)
    >>> res.scored, len(res.rejected)                                  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from knowlyr._gc import paused
from knowlyr.errors import ConfigError, RewardError

if TYPE_CHECKING:
    import polars as pl

    from knowlyr.reward.engine import RewardEngine
    from knowlyr.store import Manifest, Store

__all__ = [
    "SAVE_ROWS",
    "SCORE_BATCH",
    "FileScore",
    "RewardsWriter",
    "reward_dicts",
    "rewards_json",
    "score_files",
]

#: Trajectories decoded and scored at once. A process's memory grows with it (20-step
#: trajectories, 2 workers, all processes: 1,000 ~700 MB, 2,000 ~940 MB) and its time does
#: not (the same 5.3 s for 20,000).
SCORE_BATCH = 1_000
#: Rewards appended to a store in one transaction (several batches' rows).
SAVE_ROWS = 4_000

_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
_TAIL = b'"rewards": []\n}'


@dataclass
class FileScore:
    """What :func:`score_files` did.

    Attributes:
        scored: trajectories scored (and written).
        steps: their steps.
        rejected: the records that could not be read (``path``, ``line``, ``reason``).
        manifest: the ``rewards`` version the last batch wrote to the store (None: no store,
            or nothing scored).
    """

    scored: int = 0
    steps: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    manifest: Manifest | None = None


class RewardsWriter:
    """Writes the document :func:`~knowlyr.reward.engine.dump_rewards` makes, byte for byte,
    a batch of rewards at a time: ``extra``'s fields first, then the ``rewards`` list.

    Example:
        >>> import io
        >>> buf = io.BytesIO()
        >>> w = RewardsWriter(buf, config_hash="c1")
        >>> w.add([{"total": 0.5}])
        >>> w.close()
        >>> buf.getvalue().decode().splitlines()[:4]
        ['{', '  "config_hash": "c1",', '  "rewards": [', '    {']
    """

    def __init__(self, out: IO[bytes], **extra: Any):
        if "rewards" in extra:
            raise ConfigError(f"extra fields must not include 'rewards', got {sorted(extra)}")
        head = orjson.dumps({**extra, "rewards": []}, option=_OPTS)
        self._out = out
        self._empty = True
        out.write(head[: -len(_TAIL)] + b'"rewards": [')

    def add(self, rewards: Sequence[dict[str, Any]]) -> None:
        """Append rewards (:meth:`~knowlyr.reward.engine.TrajectoryReward.to_dict` dicts)."""
        self.add_json(rewards_json(rewards))

    def add_json(self, body: bytes) -> None:
        """Append rewards already written by :func:`rewards_json`."""
        if not body:
            return
        self._out.write(body if self._empty else b"," + body)
        self._empty = False

    def close(self) -> None:
        """End the document (no newline after its closing brace, as ``dump_rewards``)."""
        self._out.write(b"]\n}" if self._empty else b"\n  ]\n}")


def rewards_json(rewards: Sequence[dict[str, Any]]) -> bytes:
    """``rewards`` as :class:`RewardsWriter` writes them inside the ``rewards`` list: each
    dict as ``dump_rewards`` indents it there, comma-separated (empty: nothing)."""
    if not rewards:
        return b""
    # the list at the top level, two spaces in: re-indented by two more, as it sits at depth 2
    # of the document (JSON strings hold no raw newline)
    return orjson.dumps(rewards, option=_OPTS)[1:-2].replace(b"\n", b"\n  ")


def reward_dicts(rows: pl.DataFrame) -> list[dict[str, Any]]:
    """``[TrajectoryReward.from_row(r).to_dict() for r in rows]`` of rows of the ``rewards``
    table (:meth:`~knowlyr.reward.engine.RewardEngine.score_documents`), without the
    objects: the same dicts, with the same values."""
    import polars as pl

    loads = orjson.loads
    per_step = rows.get_column("per_step").list.eval(pl.element().fill_nan(None)).to_list()
    col = rows.get_column
    return [
        {
            "trajectory_id": tid,
            "task_id": task,
            "agent": agent,
            "model": model,
            "total": total,
            "total_raw": raw,
            "step_rewards": steps,
            "rubric_scores": loads(rubric),
            "step_rubrics": loads(step_rubrics),
            "config_hash": config,
            "success": success,
            "rationales": loads(rationale),
            "judge_errors": loads(errors),
            "judge_model": judge,
            "missing_layers": loads(missing),
            "process": process,
        }
        for (tid, task, agent, model, total, raw, steps, rubric, step_rubrics, config, success,
             rationale, errors, judge, missing, process) in zip(
            col("trajectory_id").to_list(), col("task_id").to_list(), col("agent").to_list(),
            col("model").to_list(), col("total").to_list(), col("total_raw").to_list(),
            per_step, col("per_rubric").to_list(), col("step_rubrics").to_list(),
            col("config_hash").to_list(), col("success").to_list(), col("rationale").to_list(),
            col("judge_errors").to_list(), col("judge").to_list(),
            col("missing_layers").to_list(), col("process").to_list(), strict=True,
        )
    ]  # fmt: skip


def score_files(
    paths: Iterable[str | Path],
    engine: RewardEngine,
    out: IO[bytes],
    *,
    format: str | None = None,
    store: Store | None = None,
    batch_size: int = SCORE_BATCH,
    workers: int = 1,
    on_reject: Callable[[dict[str, Any]], None] | None = None,
) -> FileScore:
    """Score every trajectory under ``paths`` with ``engine``'s rule layer, writing the
    rewards document of :func:`~knowlyr.reward.engine.dump_rewards` (``config``,
    ``config_hash``, ``judge_usage``, ``rejected``, ``rewards``) to ``out`` as it goes.

    Args:
        paths: agent logs in any recorder format, or trajectory JSONL.
        engine: a rules-only engine (a human calibration map is fine).
        out: a binary stream the document is written to.
        format: force a recorder format (None: detected per file).
        store: also append the rewards to this store's ``rewards`` table as they come (one
            transaction per :data:`SAVE_ROWS` rewards; a re-run adds only what is missing).
            A trajectory the store holds is scored with the store's outcome (evaluation
            labels included: :func:`~knowlyr.reward.store_io.stored_outcomes`), not its log's,
            so its total is the one the ``reward`` flow gives under the same config.
        batch_size: trajectories scored at once.
        workers: processes scoring batches at once (``0``: one per CPU; ``knowlyr reward
            score``'s default); one batch, or one worker, scores in this process. Each worker
            scores one batch at a time, at most two per worker are in flight, and the rewards
            are written in input order. The workers are spawned (a forked copy of polars'
            threads can deadlock), so a script that asks for more than one must start from
            an ``if __name__ == "__main__":`` block, as :mod:`multiprocessing` requires.
        on_reject: called with each rejected record (``path``, ``line``, ``reason``) as the
            first pass meets it.

    Raises:
        ConfigError: the engine has the judge layer or an outcome calibration (they read the
            models: use :meth:`~knowlyr.reward.engine.RewardEngine.score`), or a bad
            ``batch_size`` / ``workers``; in a worker process importing a script that
            calls this outside its main block.
        RewardError: a worker process died (the script's call is not under ``if __name__ ==
            "__main__":``, or the worker was killed).
    """
    import polars as pl

    from knowlyr.recorder import Encoded, iter_encoded
    from knowlyr.store.tables import TRAJECTORY_ROW

    cal = engine.calibration
    if engine.judge is not None or (cal is not None and cal.level == "outcome"):
        raise ConfigError(
            "score_files scores the rule layer from JSON documents; an engine with the judge "
            "layer or an outcome calibration reads models: use RewardEngine.score"
        )
    if batch_size < 1:
        raise ConfigError(f"batch_size must be positive, got {batch_size}")
    if workers < 0:
        raise ConfigError(f"workers must be >= 0, got {workers}")
    task_at, steps_at, won_at = (TRAJECTORY_ROW.index(c) for c in ("task_id", "n_steps", "success"))
    res = FileScore()
    ids: list[str] = []
    tasks: list[str] = []
    lengths: list[int] = []
    success: list[bool | None] = []
    cuts = [0]  # byte offsets of the spool's batches
    with tempfile.TemporaryDirectory(prefix="knowlyr-reward-") as tmp:
        spool = str(Path(tmp) / "documents.jsonl")
        with open(spool, "wb") as f:
            at = 0
            for r in iter_encoded(list(paths), format=format):
                if isinstance(r, Encoded):
                    row = r.row
                    at += f.write(r.json + b"\n")
                    ids.append(row[0])
                    tasks.append(row[task_at])
                    lengths.append(row[steps_at])
                    success.append(row[won_at])
                    if len(tasks) % batch_size == 0:
                        cuts.append(at)
                else:
                    rejected = {"path": r.path, "line": r.line, "reason": r.reason}
                    res.rejected.append(rejected)
                    if on_reject is not None:
                        on_reject(rejected)
        if cuts[-1] != at:
            cuts.append(at)
        outcomes: dict[str, dict[str, Any]] = {}
        if store is not None:
            from knowlyr.reward.store_io import stored_outcomes

            outcomes = stored_outcomes(store, ids)
            success = [
                outcomes[i].get("success") if i in outcomes else won
                for i, won in zip(ids, success, strict=True)
            ]
        del ids
        population = pl.DataFrame(
            {"task": tasks, "n_steps": lengths, "success": success},
            schema={"task": pl.String, "n_steps": pl.UInt32, "success": pl.Boolean},
        )
        res.steps = sum(lengths)
        del tasks, lengths, success
        writer = RewardsWriter(out, config=engine.config, config_hash=engine.config_hash,
                               judge_usage=None, rejected=res.rejected)  # fmt: skip
        ranges = list(itertools.pairwise(cuts))
        job = _Batch(spool, engine, population, rows=store is not None, outcomes=outcomes)
        unsaved: list[pl.DataFrame] = []
        for n, body, rows in _scored(job, ranges, workers or os.cpu_count() or 1):
            writer.add_json(body)
            if rows is not None:
                unsaved.append(rows)
                if sum(r.height for r in unsaved) >= SAVE_ROWS:
                    res.manifest = engine.save(store, pl.concat(unsaved))
                    unsaved = []
            res.scored += n
        if unsaved:
            res.manifest = engine.save(store, pl.concat(unsaved))
        writer.close()
    return res


class _Batch:
    """Scores one byte range of the spool: its rewards as :func:`rewards_json` (and the
    ``rewards`` rows for a store). ``outcomes``: the outcome documents that replace those of
    the trajectories they name (a store's labels)."""

    def __init__(
        self,
        spool: str,
        engine: RewardEngine,
        population: pl.DataFrame,
        rows: bool,
        outcomes: dict[str, dict[str, Any]] | None = None,
    ):
        self.spool, self.engine, self.population, self.rows = spool, engine, population, rows
        self.outcomes = outcomes or {}

    def __call__(self, start: int, end: int) -> tuple[int, bytes, pl.DataFrame | None]:
        with open(self.spool, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
        with paused():
            docs = [orjson.loads(line) for line in data.splitlines()]
            del data
            if self.outcomes:
                for d in docs:
                    if d["id"] in self.outcomes:
                        d["outcome"] = self.outcomes[d["id"]]
            rows = self.engine.score_documents(docs, population=self.population)
            del docs
            body = rewards_json(reward_dicts(rows))
        return rows.height, body, rows if self.rows else None


_JOB: _Batch | None = None  # a worker's job (set once per worker process)


def _start_worker(path: str) -> None:
    global _JOB
    import pickle

    with open(path, "rb") as f:
        _JOB = pickle.load(f)


def _run(start: int, end: int) -> tuple[int, bytes, pl.DataFrame | None]:
    return _JOB(start, end)


def _scored(
    job: _Batch, ranges: list[tuple[int, int]], workers: int
) -> Iterator[tuple[int, bytes, pl.DataFrame | None]]:
    """``job`` of each range, in order: here, or by ``workers`` fresh processes (spawned: a
    forked copy of a process whose polars threads run can deadlock), two ranges in flight
    per worker."""
    workers = min(workers, len(ranges))
    if workers <= 1:
        for start, end in ranges:
            yield job(start, end)
        return
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # a spawned worker importing a script that calls this outside its main block: without
        # this error the worker's own pool would wait for its workers forever
        raise ConfigError(
            "score_files(workers=...) was called while a worker process imported the script's "
            'main module: call it from an `if __name__ == "__main__":` block (or use workers=1)'
        )
    import pickle

    # the job reaches the workers as a file: what the parent writes down a new worker's pipe
    # stays a few hundred bytes, since a larger write blocks for good when that worker dies
    # before reading it (the parent holds the pipe's read end open while it writes)
    path = f"{job.spool}.job"
    with open(path, "wb") as f:
        pickle.dump(job, f, protocol=pickle.HIGHEST_PROTOCOL)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_worker,
                             initargs=(path,)) as pool:  # fmt: skip
        todo = iter(ranges)
        pending = deque(pool.submit(_run, *r) for r in itertools.islice(todo, 2 * workers))
        while pending:
            try:
                done = pending.popleft().result()
            except BrokenProcessPool as e:
                raise RewardError(
                    "a scoring worker process died (its own error, if any, is above): a script "
                    "that calls score_files with workers must call it from an `if __name__ == "
                    '"__main__":` block, and a worker killed for memory needs a smaller '
                    "batch_size"
                ) from e
            nxt = next(todo, None)
            if nxt is not None:
                pending.append(pool.submit(_run, *nxt))
            yield done
