"""knowlyr._arrow's builders give the arrays ``pa.array`` gives (byte for byte in an Arrow
stream), and numpy_of reads numbers back (sliced too)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from knowlyr import _arrow as col


def _stream(array) -> bytes:
    batch = pa.RecordBatch.from_arrays([array], ["x"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(
    ("build", "values", "kind"),
    [
        (col.strings, ["a", None, "tâsk-é", "", None], pa.string()),
        (col.strings, [b"x", b'{"k": "\\u00e9"}', None], pa.string()),
        (lambda v: col.strings(v, large=True), ["z", None, "ü" * 300], pa.large_string()),
        (col.strings, [], pa.string()),
        (col.bools, [True, None, False, True, True, False, None, True, False], pa.bool_()),
        (col.int32s, [0, -3, None, 2**31 - 1], pa.int32()),
        (col.int64s, [2**40, None], pa.int64()),
        (col.float64s, [0.25, None, -1e300], pa.float64()),
    ],
)
def test_builders_equal_pyarrow(build, values, kind):
    expected = pa.array([v.decode() if isinstance(v, bytes) else v for v in values], kind)
    got = build(values)
    got.validate(full=True)
    assert got.type == kind
    assert got.equals(expected) and _stream(got) == _stream(expected)
    assert got.null_count == expected.null_count


def test_strings_reject_bytes_that_are_not_utf8():
    with pytest.raises(pa.ArrowInvalid):
        col.strings([b"ok", b"\xff\xfe"])


def test_timestamps_are_exact_microseconds():
    now = datetime(2026, 11, 24, 17, 0, 0, 123457, tzinfo=UTC)
    got = col.timestamps(now, 3)
    assert got.equals(pa.array([now] * 3, pa.timestamp("us", tz="UTC")))


def test_strings_take_tuples_and_text_that_is_not_ascii():
    values = ("é", None, "a", "日本語", "")
    assert col.strings(values).equals(pa.array(list(values), pa.string()))
    assert col.strings((None, None)).equals(pa.array([None, None], pa.string()))


@pytest.mark.parametrize(
    ("ours", "want"),
    [
        (col.bools([True, None, False, True] * 5), pa.array([True, None, False, True] * 5)),
        (col.bools([False, True]), pa.array([False, True])),
        (col.bools([]), pa.array([], pa.bool_())),
        (col.strings(["é✓𝄞", "", "a\x00b"]), pa.array(["é✓𝄞", "", "a\x00b"])),
        (col.binary_array([b"{}", b"", b"x"]), pa.array([b"{}", b"", b"x"], pa.binary())),
        (col.number_array(np.arange(7, dtype=np.int32)), pa.array(np.arange(7, dtype=np.int32))),
        (col.number_array([1.5, float("nan")], pa.float64()), pa.array([1.5, float("nan")])),
        (col.number_array([3, 4], pa.int64()), pa.array([3, 4], pa.int64())),
    ],
)
def test_builders_equal_pa_array(ours, want):
    assert ours.type == want.type and ours.null_count == want.null_count
    assert _stream(ours) == _stream(want)


def test_numpy_of_reads_numbers_and_slices():
    a = pa.array(np.arange(10, dtype=np.int64))
    assert col.numpy_of(a).tolist() == list(range(10))
    assert col.numpy_of(a.slice(3, 4)).tolist() == [3, 4, 5, 6]


def test_table_fingerprint_follows_the_data_not_the_object():
    t = pa.table({"a": [1, 2, None], "m": [["x"], [], ["y", "z"]], "s": ["p", "q", "r"]})
    same = pa.table({"a": [1, 2, None], "m": [["x"], [], ["y", "z"]], "s": ["p", "q", "r"]})
    assert col.table_fingerprint(t) == col.table_fingerprint(same)
    others = [
        pa.table({"a": [1, 2, 3], "m": [["x"], [], ["y", "z"]], "s": ["p", "q", "r"]}),  # a null
        pa.table({"a": [1, 2, None], "m": [["x"], ["y"], ["z"]], "s": ["p", "q", "r"]}),  # lists
        pa.table({"a": [1, 2, None], "m": [["x"], [], ["y", "z"]], "s": ["p", "q", "R"]}),
        pa.table({"b": [1, 2, None], "m": [["x"], [], ["y", "z"]], "s": ["p", "q", "r"]}),  # name
        t.slice(1),
    ]
    prints = {col.table_fingerprint(x) for x in others}
    assert len(prints) == len(others) and col.table_fingerprint(t) not in prints
