"""Arrow columns from Python lists, built from their buffers.

``pyarrow.array`` on a Python list (or even a numpy array) imports pandas on first use
(0.2-0.4 s here, paid by every process's first store add), and polars' row-wise
``DataFrame(rows)`` costs ~60 ms per 1,000 trajectory rows. A store add knows its column
types, so it lays the buffers out itself: the values joined into one data buffer, offsets
and validity bitmaps through numpy (which pyarrow imports anyway). Each builder returns the
same array ``pa.array(values, type)`` gives.
"""

from __future__ import annotations

from datetime import datetime
from itertools import compress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["bools", "float64s", "int32s", "int64s", "strings", "timestamps"]


def _validity(values: list[Any]) -> tuple[Any, int]:
    """(validity buffer or None, null count) of ``values`` (None is null)."""
    import numpy as np
    import pyarrow as pa

    nulls = values.count(None)
    if not nulls:
        return None, 0
    valid = np.fromiter((v is not None for v in values), dtype=np.bool_, count=len(values))
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def strings(values: list[str | bytes | None], *, large: bool = False) -> pa.Array:
    """A ``string`` (``large_string`` with ``large``) array of ``values``: ``str`` or UTF-8
    ``bytes`` (checked), None for null."""
    import numpy as np
    import pyarrow as pa

    encoded = [v.encode() if isinstance(v, str) else v for v in values]
    validity, nulls = _validity(encoded)
    present = list(compress(encoded, (v is not None for v in encoded))) if nulls else encoded
    lengths = np.fromiter(
        (0 if v is None else len(v) for v in encoded), dtype=np.int64, count=len(encoded)
    )
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if not large:
        if offsets[-1] > np.iinfo(np.int32).max:
            raise OverflowError(f"{offsets[-1]} bytes of text exceed a string column's 2 GiB")
        offsets = offsets.astype(np.int32)
    kind = pa.large_string() if large else pa.string()
    data = pa.py_buffer(b"".join(present))
    arr = pa.Array.from_buffers(kind, len(encoded), [validity, pa.py_buffer(offsets), data], nulls)
    arr.validate(full=True)  # UTF-8: bytes from elsewhere than our serialisers
    return arr


def _numbers(values: list[Any], kind: pa.DataType, dtype: Any, fill: Any) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    validity, nulls = _validity(values)
    filled = [fill if v is None else v for v in values] if nulls else values
    data = np.array(filled, dtype=dtype)
    if kind == pa.bool_():
        data = np.packbits(data, bitorder="little")
    return pa.Array.from_buffers(kind, len(values), [validity, pa.py_buffer(data)], nulls)


def bools(values: list[bool | None]) -> pa.Array:
    import pyarrow as pa

    return _numbers(values, pa.bool_(), bool, False)


def int32s(values: list[int | None]) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    return _numbers(values, pa.int32(), np.int32, 0)


def int64s(values: list[int | None]) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    return _numbers(values, pa.int64(), np.int64, 0)


def float64s(values: list[float | None]) -> pa.Array:
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
