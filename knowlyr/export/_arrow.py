"""Arrow arrays from numpy arrays and Python lists, and back, without ``pa.array``.

``pa.array`` and ``Array.to_numpy`` ask pyarrow's pandas shim whether their input is a pandas
object, and the shim's first question imports pandas: ~0.2 s of every export process that
never uses pandas. These build the same arrays from buffers (no nulls unless said), so an
export's Arrow and parquet bytes are those ``pa.array`` gives (``tests/export``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["binary_array", "bool_array", "number_array", "numpy_of", "string_array"]


def number_array(values: Any, type: Any = None) -> Any:
    """The Arrow array of a 1-d numpy array of numbers (cast to ``type`` when given)."""
    import numpy as np
    import pyarrow as pa

    if type is not None:
        values = np.asarray(values, dtype=type.to_pandas_dtype())
    values = np.ascontiguousarray(values)
    arrow_type = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def binary_array(values: list[bytes], type: Any = None) -> Any:
    """The ``binary`` (or ``type``: ``string``) array of ``values``."""
    import numpy as np
    import pyarrow as pa

    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError(f"{offsets[-1]:,} bytes do not fit in one Arrow binary array")
    data = pa.py_buffer(b"".join(values))
    offsets_buffer = pa.py_buffer(offsets.astype(np.int32))
    return pa.Array.from_buffers(type or pa.binary(), len(values), [None, offsets_buffer, data])


def string_array(values: list[str]) -> Any:
    """The ``string`` array of ``values``."""
    import pyarrow as pa

    return binary_array([v.encode() for v in values], pa.string())


def bool_array(values: list[bool | None]) -> Any:
    """The ``bool`` array of ``values``; ``None`` is null."""
    import numpy as np
    import pyarrow as pa

    n = len(values)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    bits = np.fromiter((bool(v) for v in values), dtype=bool, count=n)
    data = pa.py_buffer(np.packbits(bits, bitorder="little"))
    nulls = n - int(valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.bool_(), n, [validity, data], null_count=nulls)


def numpy_of(array: Any) -> Any:
    """A numpy view of an Arrow array of numbers without nulls."""
    import numpy as np

    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array) + array.offset)[
        array.offset :
    ]
