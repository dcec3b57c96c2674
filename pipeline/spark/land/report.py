"""Landing step, last in the list: the batch's metrics to whoever started the job.

Nothing here knows where metrics go: the callbacks come from the caller of
``pipeline.spark.engine.query.start_stream`` (``pipeline.ops.metrics.job_metrics`` for the job:
the JSON lines file and Prometheus).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pipeline.spark.land.batch_writer import LandedBatch

#: ``(batch_id, counts and phase times, seconds)`` after every batch's writes.
BatchCallback = Callable[[int, dict[str, int], float], None]
#: ``(batch_id, landed transactions' (commit, processed, sent, landed) Unix µs)``: an
#: ``(n, 4)`` float64 array, NaN where a time is not known (:func:`latency_times`).
LatencyCallback = Callable[[int, np.ndarray], None]
#: ``(batch_id, the state calls' metrics rows)``: per key, its gauges and rows by kind.
KeysCallback = Callable[[int, list[dict[str, Any]]], None]


def pack_times(times: np.ndarray | Sequence[Sequence[int | None]]) -> str:
    """A call's landed transactions' (commit, processed, sent) Unix µs as the metrics row
    carries them: float64 (exact below 2**53; NaN for a time not known), little-endian,
    base64. Why not a JSON list: a batch of 20,000 messages lands ~85,000 transactions, and
    their times as JSON numbers cost the driver ~0.2 s per batch to parse and walk."""
    array = np.asarray(times, dtype="<f8").reshape(-1, 3)
    return base64.b64encode(array.tobytes()).decode("ascii")


def unpack_times(packed: str | None) -> np.ndarray:
    """:func:`pack_times` back: an ``(n, 3)`` float64 array."""
    raw = base64.b64decode(packed) if packed else b""
    return np.frombuffer(raw, dtype="<f8").reshape(-1, 3)


def latency_times(stats: list[dict[str, Any]]) -> np.ndarray:
    """The landed transactions' time stamps (Unix µs: commit, processed, sent, landed), from
    the state calls' metrics rows, for ``pipeline.ops.metrics.latency_breakdown_us``: an
    ``(n, 4)`` float64 array, NaN where a time is not known."""
    parts = []
    for row in stats:
        times = unpack_times(row.get("times"))
        landed = np.full((len(times), 1), float(row["landed_us"]))
        parts.append(np.hstack([times, landed]))
    return np.vstack(parts) if parts else np.empty((0, 4))


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
