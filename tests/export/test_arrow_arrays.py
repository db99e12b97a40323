"""The export's pandas-free array builders give the arrays pa.array gives, byte for byte in an
Arrow stream, and numpy_of reads them back (sliced too)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from knowlyr.export._arrow import binary_array, bool_array, number_array, numpy_of, string_array


def _stream(array) -> bytes:
    batch = pa.RecordBatch.from_arrays([array], ["x"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(
    ("ours", "want"),
    [
        (bool_array([True, None, False, True] * 5), pa.array([True, None, False, True] * 5)),
        (bool_array([False, True]), pa.array([False, True])),
        (bool_array([]), pa.array([], pa.bool_())),
        (string_array(["é✓𝄞", "", "a\x00b"]), pa.array(["é✓𝄞", "", "a\x00b"])),
        (binary_array([b"{}", b"", b"x"]), pa.array([b"{}", b"", b"x"], pa.binary())),
        (number_array(np.arange(7, dtype=np.int32)), pa.array(np.arange(7, dtype=np.int32))),
        (number_array([1.5, float("nan")], pa.float64()), pa.array([1.5, float("nan")])),
        (number_array([3, 4], pa.int64()), pa.array([3, 4], pa.int64())),
    ],
)
def test_builders_equal_pa_array(ours, want):
    assert ours.type == want.type and ours.null_count == want.null_count
    assert _stream(ours) == _stream(want)


def test_numpy_of_reads_numbers_and_slices():
    a = pa.array(np.arange(10, dtype=np.int64))
    assert numpy_of(a).tolist() == list(range(10))
    assert numpy_of(a.slice(3, 4)).tolist() == [3, 4, 5, 6]
