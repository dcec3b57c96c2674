"""The pipeline benchmark's batch figures (benchmarks/bench_pipeline.py): pure helpers."""

from __future__ import annotations

from benchmarks.bench_pipeline import batch_series, steady_ms


def _progress(rows: int, ms: int) -> dict:
    return {"numInputRows": rows, "durationMs": {"triggerExecution": ms}}


def test_batch_series_keeps_data_batches_in_batch_order() -> None:
    batches = {2: _progress(5, 30), 0: _progress(5, 10), 1: _progress(0, 99), 3: _progress(5, 40)}
    assert batch_series(batches) == [10, 30, 40]


def test_steady_is_the_median_after_the_warm_up_batches() -> None:
    assert steady_ms([9000, 5000, 1400, 1200, 1600]) == 1400.0
    assert steady_ms([9000, 5000, 1400, 1200]) == 1400.0  # upper median of an even count
    assert steady_ms([9000, 5000]) is None
