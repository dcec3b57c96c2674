"""Landing step, last in the list: the batch's metrics to whoever started the job.

Nothing here knows where metrics go: the callbacks come from the caller of
``pipeline.spark.engine.query.start_stream`` (``pipeline.ops.metrics.job_metrics`` for the job:
the JSON lines file and Prometheus).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pipeline.spark.land.batch_writer import LandedBatch

#: ``(batch_id, counts and phase times, seconds)`` after every batch's writes.
BatchCallback = Callable[[int, dict[str, int], float], None]
#: ``(batch_id, landed transactions' (commit, processed, sent, landed) Unix µs)``.
LatencyCallback = Callable[[int, list[tuple[int | None, ...]]], None]
#: ``(batch_id, the state calls' metrics rows)``: per key, its gauges and rows by kind.
KeysCallback = Callable[[int, list[dict[str, Any]]], None]


def latency_times(stats: list[dict[str, Any]]) -> list[tuple[int | None, ...]]:
    """The landed transactions' time stamps (Unix µs: commit, processed, sent, landed), from
    the state calls' metrics rows, for ``pipeline.ops.metrics.latency_breakdown_us``."""
    return [(c, p, s, row["landed_us"]) for row in stats for c, p, s in row.get("times_us", [])]


class BatchReport:
    """The latency legs of the batch's landed transactions, the state calls' per-key rows,
    then its counts and phase times (``counts.t_*_ms``), each to its callback if given."""

    lap = None  # it times itself: t_latency_ms, before it reports the laps

    def __init__(self, on_batch: BatchCallback | None = None,
                 on_latency: LatencyCallback | None = None,
                 on_keys: KeysCallback | None = None) -> None:
        self._on_batch = on_batch
        self._on_latency = on_latency
        self._on_keys = on_keys

    def land(self, batch: LandedBatch) -> dict[str, int]:
        if self._on_latency is not None and batch.counts.get("transactions"):
            self._on_latency(batch.batch_id, latency_times(batch.stats))
        if self._on_keys is not None and batch.stats:
            self._on_keys(batch.batch_id, batch.stats)
        batch.clock.lap("t_latency_ms")
        if self._on_batch is not None:
            self._on_batch(batch.batch_id, {**batch.counts, **batch.clock.laps},
                           time.monotonic() - batch.clock.started)
        return {}
