"""An Arrow column of byte strings as one numpy buffer and each value's span in it.

The decode stage hands the compiled routing walk a whole batch of Kafka values this way, and
the typed layouts slice fixed-width images out of it: both read Arrow's own buffers, without
a Python ``bytes`` object per value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: (buffer, starts, ends): value ``i`` is ``buffer[starts[i]:ends[i]]``.
Spans = tuple[np.ndarray, np.ndarray, np.ndarray]


def binary_spans(values: Any) -> Spans:
    """``values`` (a pyarrow binary or large_binary array; anything else is cast to
    large_binary first) as (buffer, starts, ends), the bytes not copied; a null value's span
    is empty."""
    import pyarrow as pa

    if not (pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        values = values.cast(pa.large_binary())
    _, offsets, data = values.buffers()
    width = np.dtype(np.int64 if pa.types.is_large_binary(values.type) else np.int32)
    bounds = np.frombuffer(offsets, dtype=width, count=len(values) + 1,
                           offset=values.offset * width.itemsize).astype(np.int64)
    buf = (np.frombuffer(data, dtype=np.uint8) if data is not None
           else np.empty(0, dtype=np.uint8))
    starts, ends = bounds[:-1], bounds[1:]
    if values.null_count:
        ends = np.where(values.is_null().to_numpy(zero_copy_only=False), starts, ends)
    return buf, starts, ends
