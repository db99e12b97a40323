"""SFT export of JSONL files or of a store into an export folder, on every core.

:func:`jsonl_documents` reads trajectory JSON lines in large blocks and validates each line
on its bytes (:func:`knowlyr.store._documents.validate_line`: the model's validation, no
model built); a line that is not a trajectory is a :class:`~knowlyr.errors.RecordError`
naming ``file:line`` and the field.

:func:`save_sft_files` and :func:`save_sft_store` are :func:`~knowlyr.export.folder.save_sft`
of those documents and of a store's. Parsing (and validating) is most of an export's work and
holds the GIL, so on a machine with more than one core the input is cut into runs (byte
ranges of the files at line boundaries; row ranges of the store's table) and each run is
gathered by its own process (forked: nothing to import again) into its own spill file of
Arrow batches; this process gathers the first run. The runs' call shapes, kept rewards and
rejections are merged in input order and the rows are written out in the batches the
one-process export writes, ``data.parquet`` by another forked process, so the folder is the
same, byte for byte (``tests/export/test_sft_parallel.py``).

Example:
    >>> saved = save_sft_files(["a.jsonl"], "out/sft", only_success=False)  # doctest: +SKIP
    >>> saved.card.rows  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from knowlyr._gc import paused
from knowlyr.errors import ExportError, RecordError, first_error
from knowlyr.export.folder import SavedExport, _defaults, write_folder, write_parquet

__all__ = [
    "jsonl_documents",
    "save_sft_files",
    "save_sft_store",
    "store_documents",
]

_BLOCK = 4 << 20  # bytes read at once
#: Input bytes per process at least: below, forking and merging cost more than they save.
PARALLEL_MIN_BYTES = 16 << 20

#: A byte range of a file: (path, start, end); ``start`` is 0 or just after a newline.
Range = tuple[str, int, int]
#: A run of the input: its documents and a tag that every run must agree on (the store
#: version read), called in the process that gathers it.
Source = Callable[[], tuple[Iterable[dict[str, Any]], Any]]


def jsonl_documents(
    paths: Iterable[str | os.PathLike[str]], *, ranges: Sequence[Range] | None = None
) -> Iterator[dict[str, Any]]:
    """The trajectory documents of JSONL files (blank lines skipped), validated as the model
    validates them, one at a time.

    Args:
        paths: JSONL files, read whole, in order.
        ranges: instead of ``paths``, byte ranges of files (see :data:`Range`).

    Raises:
        RecordError: a line that is not a trajectory (its ``path``, ``line`` and why).
    """
    from knowlyr.store._documents import validate_line

    todo = ranges if ranges is not None else [(os.fspath(p), 0, -1) for p in paths]
    for path, start, end in todo:
        for at, line in _lines(path, start, end):
            if line.strip():
                try:
                    yield validate_line(line)
                except Exception as e:
                    raise RecordError(
                        f"not a trajectory ({first_error(e)})",
                        path=path,
                        line=_line_number(path, at),
                    ) from e


def _lines(path: str, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of the lines in ``path[start:end]`` (``end`` -1: to the end of the
    file), without their newline."""
    with open(path, "rb") as f:
        f.seek(start)
        at, rest = start, b""
        left = end - start if end >= 0 else -1
        while left:
            block = f.read(_BLOCK if left < 0 else min(_BLOCK, left))
            if not block:
                break
            left = left - len(block) if left > 0 else left
            lines = (rest + block if rest else block).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield at, line
                at += len(line) + 1
        if rest:
            yield at, rest


def _line_number(path: str, offset: int) -> int:
    """The 1-based number of the line starting at byte ``offset`` of ``path`` (error path)."""
    n = 1
    with open(path, "rb") as f:
        while offset > 0:
            block = f.read(min(_BLOCK, offset))
            if not block:
                break
            n += block.count(b"\n")
            offset -= len(block)
    return n


def split_ranges(paths: Sequence[str | os.PathLike[str]], n: int) -> list[list[Range]]:
    """``n`` runs of byte ranges of the files, about equal in bytes, cut at line boundaries;
    read one after another they are the files' lines in order."""
    sizes = [(os.fspath(p), os.path.getsize(p)) for p in paths]
    total = sum(s for _, s in sizes)
    cuts = [_next_line(sizes, total * i // n) for i in range(1, n)]  # (file index, offset)
    bounds = [(0, 0), *cuts, (len(sizes), 0)]
    out = []
    for (f0, o0), (f1, o1) in itertools.pairwise(bounds):
        run: list[Range] = []
        for i in range(f0, min(f1 + 1, len(sizes))):
            start = o0 if i == f0 else 0
            end = o1 if i == f1 else sizes[i][1]
            if end > start:
                run.append((sizes[i][0], start, end))
        out.append(run)
    return out


def _next_line(sizes: list[tuple[str, int]], at: int) -> tuple[int, int]:
    """(file index, offset) of the first line that starts at or after overall byte ``at``."""
    for i, (path, size) in enumerate(sizes):
        if at >= size:
            at -= size
            continue
        if at == 0:
            return i, 0
        with open(path, "rb") as f:
            f.seek(at - 1)
            pos = at - 1
            while True:
                block = f.read(1 << 16)
                if not block:
                    return i + 1, 0
                k = block.find(b"\n")
                if k >= 0:
                    return (i, pos + k + 1) if pos + k + 1 < size else (i + 1, 0)
                pos += len(block)
    return len(sizes), 0


def _workers(workers: int | None, most: int | None = None) -> int:
    """How many processes gather: ``workers``, else one per core (at most ``most``: what the
    input is worth) when processes can be forked."""
    import multiprocessing

    if workers is not None:
        if workers < 1:
            raise ExportError(f"workers must be at least 1, got {workers}")
        return workers
    if (
        not sys.platform.startswith("linux")
        or "fork" not in multiprocessing.get_all_start_methods()
    ):
        return 1  # macOS's system libraries are not safe to fork
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return max(1, min(cores, cores if most is None else most))


def save_sft_files(
    paths: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    workers: int | None = None,
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    **kw: Any,
) -> SavedExport:
    """:func:`~knowlyr.export.folder.save_sft` of the trajectories in JSONL files.

    Args:
        paths: JSONL files of trajectories (blank lines skipped).
        output: the export folder.
        workers: processes that parse and validate (``None``: one per core, each with at
            least :data:`PARALLEL_MIN_BYTES` of the files); the folder is the same for any
            number.
        transform: applied to each validated document before it is exported (e.g.
            :meth:`~knowlyr.export.rewards.RewardSource.apply`: the chosen step rewards).
        **kw: :func:`~knowlyr.export.export_sft`'s keyword arguments (``validated`` is
            ignored: every line is validated).

    Raises:
        RecordError: the first line, in file order, that is not a trajectory; nothing is
            written then.
    """
    from knowlyr.export.folder import save_sft

    for p in paths:
        if not os.path.isfile(p):
            why = "is not a file" if os.path.exists(p) else "does not exist"
            raise ExportError(f"{os.fspath(p)} {why}; pass JSONL files of trajectories")
    kw = {**_defaults(kw), "validated": True}
    n = _workers(workers, sum(map(os.path.getsize, paths)) // PARALLEL_MIN_BYTES)
    if n > 1:
        runs = [r for r in split_ranges(paths, n) if r]
        if len(runs) > 1:
            sources = [functools.partial(_file_run, run, transform) for run in runs]
            saved = _save_parallel(sources, Path(output), kw)
            if saved is not None:
                return saved
    return save_sft(_mapped(transform, jsonl_documents(paths)), output, **kw)


def _mapped(
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None, docs: Iterable[dict[str, Any]]
) -> Iterable[dict[str, Any]]:
    return docs if transform is None else map(transform, docs)


def _file_run(
    run: list[Range], transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> tuple[Iterable[dict[str, Any]], None]:
    return _mapped(transform, jsonl_documents((), ranges=run)), None


def save_sft_store(
    url: str,
    output: str | os.PathLike[str],
    *,
    workers: int | None = None,
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    **kw: Any,
) -> SavedExport:
    """:func:`~knowlyr.export.folder.save_sft` of the trajectories of the store at ``url``
    (its latest ``trajectories`` version, in table order; the documents were validated when
    they were stored).

    Args:
        url: the store (:meth:`knowlyr.store.Store.open`).
        output: the export folder.
        workers: processes that read and parse (``None``: one per core). Only a process
            that has not imported polars or deltalake forks (their threads do not survive a
            fork): one that has reads alone. The folder is the same for any number.
        transform: applied to each document before it is exported (see
            :func:`save_sft_files`).
        **kw: :func:`~knowlyr.export.export_sft`'s keyword arguments.
    """
    from knowlyr.export.folder import save_sft

    kw = {**_defaults(kw), "validated": True}
    fresh = not {"polars", "deltalake"} & set(sys.modules)
    n = _workers(workers) if fresh else 1
    if n > 1:
        sources = [functools.partial(_store_run, url, i, n, transform) for i in range(n)]
        saved = _save_parallel(sources, Path(output), kw)
        if saved is not None:
            return saved
    return save_sft(_mapped(transform, store_documents(url)), output, **kw)


def store_documents(url: str) -> Iterable[dict[str, Any]]:
    """The trajectory documents of the store at ``url`` (its latest ``trajectories`` version,
    in table order), one at a time."""
    return _store_run(url, 0, 1)[0]


def _store_run(
    url: str, i: int, n: int, transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> tuple[Iterable[dict[str, Any]], int | None]:
    """The documents of run ``i`` of ``n`` (rows ``[i * N // n, (i + 1) * N // n)``) of the
    store's ``trajectories`` table (``transform`` applied), and the version read."""
    from knowlyr.store import Store

    store = Store.open(url)
    version = store.version("trajectories")
    total = store.count("trajectories", version=version)
    lo, hi = total * i // n, total * (i + 1) // n
    return _mapped(transform, _stored_documents(store, version, lo, hi)), version


def _stored_documents(store: Any, version: int, lo: int, hi: int) -> Iterator[dict[str, Any]]:
    """The documents of rows ``[lo, hi)`` of the store's table at ``version``, in order."""
    import orjson

    for datas in store.iter_data(version=version, rows=(lo, hi)):
        yield from map(orjson.loads, datas)


def _save_parallel(sources: list[Source], path: Path, kw: dict[str, Any]) -> SavedExport | None:
    """Gather each run in its own process (this one: the first), write the folder; ``None``
    when a batch had to be split for size or the runs read different store versions (the
    one-process export then does it)."""
    import multiprocessing
    import tempfile

    from knowlyr.export.sft import _card, _schema

    where = path.parent if path.parent.is_dir() else None
    ctx = multiprocessing.get_context("fork")
    with paused(), tempfile.TemporaryDirectory(prefix=".knowlyr-sft-", dir=where) as tmp:
        spills = [os.path.join(tmp, f"rows-{i}.arrow") for i in range(len(sources))]
        children: list[tuple[Any, Any]] = []
        try:
            for i in range(1, len(sources)):
                children.append(_start(ctx, _gather_run, sources[i], spills[i], kw))
            parts = [_gather_run(sources[0], spills[0], kw)]
            parts += [_received(child) for child in children]
            if any(part.split for part, _ in parts) or len({tag for _, tag in parts}) > 1:
                return None
            parts = [part for part, _ in parts]
            card, row_tools = _card(parts, kw)
            rejected = [r for part in parts for r in part.rejected]
            if not card.rows:
                return SavedExport(None, card, rejected)
            # data.parquet (the most work) in a child, while this one writes the rest
            children.append(
                _start(ctx, write_parquet, path, _schema(), _rebatched(spills, row_tools))
            )
            batches = _rebatched(spills, row_tools)
            write_folder(path, _schema(), batches, card, parquet=False)
            _received(children[-1])
        finally:
            for p, _ in children:
                if p.is_alive():
                    p.terminate()  # a child of ours, stopped when this one failed
                p.join()
    return SavedExport(path, card, rejected)


def _gather_run(source: Source, spill: str, kw: dict[str, Any]) -> tuple[Any, Any]:
    """Gather the trajectories of one run into ``spill``; returns its ``_Part`` and tag."""
    from knowlyr.export.sft import _gather_part, _new_rows

    rows = _new_rows(kw, spill, threaded=False)  # the other cores are busy: no thread
    try:
        docs, tag = source()
        return _gather_part(docs, rows, kw), tag
    finally:
        rows.close()


def _start(ctx: Any, fn: Any, *args: Any) -> tuple[Any, Any]:
    """Run ``fn(*args)`` in a forked process; returns it and the end its answer comes from."""
    ours, theirs = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(theirs, fn, args), daemon=True)
    p.start()
    theirs.close()
    return p, ours


def _child(conn: Any, fn: Any, args: tuple[Any, ...]) -> None:
    """A forked process's work: send back what ``fn(*args)`` returns, or why it failed."""
    try:
        conn.send(("ok", fn(*args)))
    except RecordError as e:
        conn.send(("record", (e.reason, e.path, e.line)))
    except BaseException as e:  # sent to the parent, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def _received(child: tuple[Any, Any]) -> Any:
    """What a child sent back (it has ended then); its error raised here."""
    p, conn = child
    try:
        kind, value = conn.recv()
    except EOFError:
        p.join()
        raise ExportError(f"an export worker process died (exit code {p.exitcode})") from None
    finally:
        conn.close()
    p.join()
    if kind == "record":
        reason, path, line = value
        raise RecordError(reason, path=path, line=line)
    if kind == "error":
        raise ExportError(f"an export worker process failed: {value}")
    return value


def _rebatched(spills: list[str], row_tools: list[list[bytes]]) -> Iterator[Any]:
    """The rows of the spill files, in order, with the ``tools`` column (``row_tools``: each
    row's), in the batches of the
    one-process export: a batch ends with the first trajectory that brings it to
    ``_SPILL_BATCH_ROWS`` rows (a trajectory's rows start at ``chunk`` 0)."""
    import numpy as np
    import pyarrow as pa

    from knowlyr._arrow import numpy_of
    from knowlyr.export.sft import _SPILL_BATCH_ROWS, _with_tools

    held: list[Any] = []  # row slices not written yet: less than a batch
    n_held = done = 0
    for spill in spills:
        if not os.path.exists(spill):  # a run that kept no rows
            continue
        with pa.OSFile(spill) as f:  # read, not mapped: one batch in memory at a time
            for batch in pa.ipc.open_stream(f) if f.size() else ():
                starts = np.flatnonzero(numpy_of(batch.column("chunk")) == 0)
                at = 0
                while at < batch.num_rows:
                    need = at + max(_SPILL_BATCH_ROWS - n_held, 0)
                    i = np.searchsorted(starts, need)  # the first trajectory start from there
                    if i == len(starts):  # no cut in this batch
                        held.append(batch if at == 0 else batch.slice(at))
                        n_held += batch.num_rows - at
                        break
                    cut = int(starts[i])
                    if cut > at:
                        held.append(batch.slice(at, cut - at))
                    batch_rows = _joined(held)
                    yield _with_tools(batch_rows, row_tools[done : done + batch_rows.num_rows])
                    done += batch_rows.num_rows
                    held, n_held, at = [], 0, cut
    if held:
        batch_rows = _joined(held)
        yield _with_tools(batch_rows, row_tools[done : done + batch_rows.num_rows])


def _joined(pieces: list[Any]) -> Any:
    """One record batch of consecutive row slices (the batch itself when there is one)."""
    import pyarrow as pa

    return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)
