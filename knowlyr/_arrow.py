"""Arrow arrays from Python lists and numpy arrays, built from their buffers (and numpy
views of them back).

``pyarrow.array`` on a Python list (or even a numpy array) and ``Array.to_numpy`` ask
pyarrow's pandas shim whether their input is a pandas object, and its first question imports
pandas: 0.2-0.4 s of every store add or export process that never uses pandas. polars'
row-wise ``DataFrame(rows)`` costs ~60 ms per 1,000 trajectory rows. The store and the
exports know their column types, so they lay the buffers out here: the values joined into one
data buffer, offsets and validity bitmaps through numpy (which pyarrow imports anyway). Each
builder returns the same array ``pa.array(values, type)`` gives (``tests/test_arrow.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import repeat
from operator import is_not
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "binary_array",
    "bools",
    "float64s",
    "int32s",
    "int64s",
    "number_array",
    "numpy_of",
    "strings",
    "timestamps",
]


def _validity(values: Sequence[Any], nulls: int) -> Any:
    """The validity bitmap of ``values`` holding ``nulls`` Nones (None when there are none)."""
    import numpy as np
    import pyarrow as pa

    if not nulls:
        return None
    if nulls == len(values):
        return pa.py_buffer(bytes((len(values) + 7) // 8))
    valid = np.fromiter(map(is_not, values, repeat(None)), dtype=np.bool_, count=len(values))
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def strings(values: Sequence[str | bytes | None], *, large: bool = False) -> pa.Array:
    """A ``string`` (``large_string`` with ``large``) array of ``values``: ``str`` or UTF-8
    ``bytes`` (checked), None for null. The values are joined and measured in C (``join``,
    ``map(len)``); only text that is not ASCII is encoded value by value."""
    import pyarrow as pa

    n, nulls = len(values), values.count(None)
    filled = ["" if v is None else v for v in values] if nulls else values
    try:
        text = "".join(filled)  # type: ignore[arg-type]
        data = text.encode()
        lengths: Any = map(len, filled) if len(data) == len(text) else _utf8_lengths(filled)
        check = False
    except TypeError:  # bytes (serialised JSON), or a mix
        filled = [b"" if v is None else v.encode() if isinstance(v, str) else v for v in values]
        data, lengths, check = b"".join(filled), map(len, filled), True
    kind = pa.large_string() if large else pa.string()
    buffers = [_validity(values, nulls), _offsets(lengths, n, large), pa.py_buffer(data)]
    arr = pa.Array.from_buffers(kind, n, buffers, nulls)
    if check:
        arr.validate(full=True)  # UTF-8: bytes may come from elsewhere than our serialisers
    return arr


def _offsets(lengths: Any, n: int, large: bool) -> Any:
    """The offsets buffer of ``n`` values of these byte ``lengths`` (int64 with ``large``)."""
    import numpy as np
    import pyarrow as pa

    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(lengths, dtype=np.int64, count=n), out=offsets[1:])
    if not large:
        if offsets[-1] > np.iinfo(np.int32).max:
            raise OverflowError(f"{offsets[-1]:,} bytes exceed an Arrow array's 2 GiB")
        offsets = offsets.astype(np.int32)
    return pa.py_buffer(offsets)


def _utf8_lengths(texts: Sequence[str]) -> list[int]:
    return [len(t.encode()) for t in texts]


def _numbers(values: Sequence[Any], kind: pa.DataType, dtype: Any, fill: Any) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    nulls = values.count(None)
    filled = [fill if v is None else v for v in values] if nulls else values
    data = np.array(filled, dtype=dtype)
    if kind == pa.bool_():
        data = np.packbits(data, bitorder="little")
    buffers = [_validity(values, nulls), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, len(values), buffers, nulls)


def bools(values: Sequence[bool | None]) -> pa.Array:
    import pyarrow as pa

    return _numbers(values, pa.bool_(), bool, False)


def int32s(values: Sequence[int | None]) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    return _numbers(values, pa.int32(), np.int32, 0)


def int64s(values: Sequence[int | None]) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    return _numbers(values, pa.int64(), np.int64, 0)


def float64s(values: Sequence[float | None]) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    return _numbers(values, pa.float64(), np.float64, 0.0)


def timestamps(value: datetime, n: int) -> pa.Array:
    """``n`` times ``value`` (timezone-aware) as ``timestamp[us, tz=UTC]``."""
    import numpy as np
    import pyarrow as pa

    data = np.full(n, _micros(value), dtype=np.int64)
    return pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(data)], 0)


def _micros(value: datetime) -> int:
    """Microseconds since the epoch of an aware datetime, exactly (no float rounding)."""
    from datetime import UTC

    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def number_array(values: Any, type: Any = None) -> Any:
    """The Arrow array of a 1-d numpy array of numbers (cast to ``type`` when given)."""
    import numpy as np
    import pyarrow as pa

    if type is not None:
        values = np.asarray(values, dtype=type.to_pandas_dtype())
    values = np.ascontiguousarray(values)
    arrow_type = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def binary_array(values: Sequence[bytes], type: Any = None) -> Any:
    """The ``binary`` array of ``values`` (no nulls), or with ``type`` ``string``: bytes
    our serialisers wrote (not validated; :func:`strings` checks bytes from elsewhere)."""
    import pyarrow as pa

    n = len(values)
    buffers = [None, _offsets(map(len, values), n, False), pa.py_buffer(b"".join(values))]
    return pa.Array.from_buffers(type or pa.binary(), n, buffers)


def numpy_of(array: Any) -> Any:
    """A numpy view of an Arrow array of numbers without nulls."""
    import numpy as np

    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array) + array.offset)[
        array.offset :
    ]


def table_fingerprint(table: pa.Table) -> str:
    """A hash (xxh3-128, 32 hex characters) of a table's schema and data buffers, read in
    place: the ``datasets`` fingerprint of an export made in memory.

    ``datasets`` names the cache files of ``map`` and the like after the fingerprint, so it
    must change with the data. Without one, datasets fingerprints an in-memory table by
    pickling it, a copy of the whole table at once.
    """
    import xxhash

    h = xxhash.xxh3_128(str(table.schema).encode())
    for column in table.columns:
        for chunk in column.chunks:
            h.update(b"|%d:%d" % (chunk.offset, len(chunk)))
            for buf in chunk.buffers():
                h.update(b"-" if buf is None else memoryview(buf))
    return h.hexdigest()


def file_fingerprint(path: str) -> str:
    """xxh3-128 (32 hex characters) of a file's bytes: the ``datasets`` fingerprint of an
    export written to a folder (its Arrow data file). Read in 8 MB blocks into one buffer (a
    memory map would count the whole file in the process's resident memory)."""
    import xxhash

    h = xxhash.xxh3_128()
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
