"""Arrow columns from Python lists, built from their buffers.

``pyarrow.array`` on a Python list (or even a numpy array) imports pandas on first use
(0.2-0.4 s here, paid by every process's first store add), and polars' row-wise
``DataFrame(rows)`` costs ~60 ms per 1,000 trajectory rows. A store add knows its column
types, so it lays the buffers out itself: the values joined into one data buffer, offsets
and validity bitmaps through numpy (which pyarrow imports anyway). Each builder returns the
same array ``pa.array(values, type)`` gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import repeat
from operator import is_not
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["bools", "float64s", "int32s", "int64s", "strings", "timestamps"]


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
    import numpy as np
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
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(lengths, dtype=np.int64, count=n), out=offsets[1:])
    if not large:
        if offsets[-1] > np.iinfo(np.int32).max:
            raise OverflowError(f"{offsets[-1]} bytes of text exceed a string column's 2 GiB")
        offsets = offsets.astype(np.int32)
    kind = pa.large_string() if large else pa.string()
    buffers = [_validity(values, nulls), pa.py_buffer(offsets), pa.py_buffer(data)]
    arr = pa.Array.from_buffers(kind, n, buffers, nulls)
    if check:
        arr.validate(full=True)  # UTF-8: bytes may come from elsewhere than our serialisers
    return arr


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
