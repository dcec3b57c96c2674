"""benchmarks/decode_stage_cost.py: the parts that run without Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from benchmarks.decode_stage_cost import heads_only, main


def test_the_python_branch_of_two_scans_answers_one_row_per_arrow_batch() -> None:
    batches = [pa.RecordBatch.from_arrays([pa.array([1, 2, 3])], names=["offset"]),
               pa.RecordBatch.from_arrays([pa.array([4], pa.int64())], names=["offset"])]
    out = list(heads_only(iter(batches)))
    assert [b.column("rows").to_pylist() for b in out] == [[3], [1]]


def test_a_run_is_required() -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
