"""One column of the landed transactions' tables: a Python list or a numpy array.

Why two kinds: the machine's transactions come as events, one at a time, and their columns
are built as lists (``tables.transaction_columns``); the fast path reads whole runs of plain
messages column-wise (``columnar``) and keeps their numeric columns as the numpy arrays it
read them into (``fast._columns``). A busy key's call lands ~20 rows per message; turning
those arrays into lists and back into Arrow arrays for the Parquet file would be a fifth of
the call (decision 0010). The direct writer hands
either kind to ``pyarrow.array`` as it is.

A numeric column that may hold None (a STCK time not set) is a masked array
(``numpy.ma``): its mask marks the None values, which pyarrow writes as nulls and
``tolist`` gives back as None. Text and binary columns (names, tokens, payloads) are lists
from events and object arrays from the fast path (pyarrow reads an object array of str
several times faster than a list of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

Column = list[Any] | np.ndarray


def pylist(column: Column) -> list[Any]:
    """The column's values as Python objects (ints, bools, None for a masked value)."""
    return column.tolist() if isinstance(column, np.ndarray) else column


def concat(parts: Sequence[Column]) -> Column:
    """The parts one after the other: a list when every part is one; else an array of the
    first array part's dtype (masked where any part has a None or a masked value)."""
    parts = [p for p in parts if len(p)]
    arrays = [p for p in parts if isinstance(p, np.ndarray)]
    if not arrays:
        return [v for p in parts for v in p]
    dtype = arrays[0].dtype
    converted = [p if isinstance(p, np.ndarray) else _array(p, dtype) for p in parts]
    if len(converted) == 1:
        return converted[0]
    if any(isinstance(p, np.ma.MaskedArray) for p in converted):
        return np.ma.concatenate(converted)
    return np.concatenate(converted)


def _array(values: list[Any], dtype: np.dtype) -> np.ndarray:
    """A list part as an array of ``dtype``: masked where it holds None (an object array
    holds None as it is)."""
    if dtype.kind == "O":
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    if any(v is None for v in values):
        mask = np.array([v is None for v in values], dtype=bool)
        data = np.array([0 if v is None else v for v in values], dtype=dtype)
        return np.ma.MaskedArray(data, mask=mask)
    return np.array(values, dtype=dtype)
