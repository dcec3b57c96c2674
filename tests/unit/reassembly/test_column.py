"""The landed columns' two kinds (``pipeline.reassembly.column``): lists from the machine's
events, numpy arrays from the fast path. Joined in any order, they must give the values a
list concatenation gives, and pyarrow must write the same column from either kind: a
mask lost or a dtype narrowed would change a landed row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reassembly.column import concat, pylist

INT64 = st.integers(-(2**63), 2**63 - 1)
TIMES = st.lists(st.one_of(st.none(), INT64), max_size=6)
TEXTS = st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=6)


def as_array(values: list, kind: str) -> np.ndarray:
    """``values`` as the fast path would hold them: int64 (masked where None) or object."""
    if kind == "O":
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    data = np.array([0 if v is None else v for v in values], dtype=np.int64)
    mask = np.array([v is None for v in values], dtype=bool)
    return np.ma.MaskedArray(data, mask=mask) if mask.any() else data


@settings(deadline=None)  # the first call loads pyarrow's time zone data
@given(st.lists(st.tuples(TIMES, st.booleans()), max_size=6))
def test_numeric_parts_join_as_their_lists_do(parts: list[tuple[list, bool]]) -> None:
    columns = [as_array(values, "i") if array else values for values, array in parts]
    joined = concat(columns)
    expected = [v for values, _ in parts for v in values]
    assert pylist(joined) == expected
    assert pa.array(joined, pa.timestamp("us", tz="UTC")).equals(
        pa.array(expected, pa.timestamp("us", tz="UTC")))


@given(st.lists(st.tuples(TEXTS, st.booleans()), max_size=6))
def test_text_parts_join_as_their_lists_do(parts: list[tuple[list, bool]]) -> None:
    columns = [as_array(values, "O") if array else values for values, array in parts]
    joined = concat(columns)
    expected = [v for values, _ in parts for v in values]
    assert pylist(joined) == expected
    assert pa.array(joined, pa.string()).equals(pa.array(expected, pa.string()))


def test_a_list_joined_to_bools_stays_bool() -> None:
    joined = concat([np.array([True, False]), [False, True]])
    assert joined.dtype == np.bool_
    assert pylist(joined) == [True, False, False, True]


def test_lists_alone_stay_a_list() -> None:
    assert concat([[1, None], [], [3]]) == [1, None, 3]
    assert concat([]) == []
