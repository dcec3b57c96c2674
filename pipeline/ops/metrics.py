"""Per-batch metrics of the streaming job: a StreamingQueryListener, JSON lines and Prometheus.

Spark's progress events know rows, durations and state size but nothing about transactions,
gaps or duplicates; the job's foreachBatch sink knows those. Both feed one
:class:`MetricsListener`: the sink calls :meth:`MetricsListener.record_batch_counts` (and, if it
measured them, :meth:`MetricsListener.record_batch_latency`) during the batch, and Spark's
listener bus calls ``onQueryProgress`` after it; the listener joins them by batch id and emits
one record per batch. The sink also hands over the state calls' metrics rows
(:meth:`MetricsListener.record_batch_keys`: per key, what ``pipeline.spark.engine.key_gauges``
found), summed per (destination, subscription) into the record's ``keys``; Spark's progress
adds each source topic's offsets behind its end (``input_lag``). The record:

- appended as one JSON line to ``jsonl_path`` (``urbpipe status`` reads the newest for the
  state size; benchmarks and soak runs read the whole file);
- exported on a Prometheus endpoint when a port is given (``pipeline.ops.prometheus``: the
  catalogue of metrics, per destination, subscription and file where they apply);
- returned by :func:`format_progress` as a one-line live summary for the demo.

Latency is decomposed the way the replicator documentation explains its timestamps (seed
001): Adabas commit (URBTTTIM) → subscription processing done (URBTPTIM) → message sent to the
messaging system (URBHTIME) → landed in Delta (``landed_at``). The first two are mainframe
machine times; legs that cross machines are only as good as their clocks' agreement, so
negative values are kept, not hidden.

The two callers run on different threads (the listener bus and the foreachBatch thread), so the
listener guards its own bookkeeping with a lock; there is no module-level mutable state.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql.streaming.listener import StreamingQueryListener

from pipeline.config import Settings
from pipeline.ops.prometheus import JobView, PrometheusExporter, job_view

DEFAULT_JSONL = ".run/metrics.jsonl"
COUNT_NAMES = ("transactions", "records", "bytes", "duplicates", "open_gaps")
LEGS: dict[str, tuple[str, str]] = {
    "commit_to_processed": ("commit_time", "processed_time"),  # Adabas → replicator
    "processed_to_sent": ("processed_time", "sent_time"),  # replicator → messaging system
    "sent_to_landed": ("sent_time", "landed_at"),  # Kafka + this job → Delta
    "commit_to_landed": ("commit_time", "landed_at"),  # end to end
}
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The time stamps of a transaction the legs run between, in order of the replicator's path.
TIME_POINTS = ("commit_time", "processed_time", "sent_time", "landed_at")
_PENDING_LIMIT = 256  # counts for batches whose progress never came (a failed batch)


def _unix_us(value: Any) -> int | None:
    """A datetime as Unix microseconds (a naive one read as UTC: only differences count)."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _UNIX_EPOCH) // timedelta(microseconds=1)


def _field(row: Any, name: str) -> Any:
    return row.get(name) if isinstance(row, Mapping) else getattr(row, name, None)


def percentile(sorted_values: Sequence[float] | np.ndarray, q: float) -> float:
    """Linear-interpolated percentile (q in 0..1) of an ascending list."""
    if len(sorted_values) == 0:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency_breakdown(rows: Iterable[Any]) -> dict[str, dict[str, float]]:
    """p50/p99 (seconds) and count of each latency leg over transactions rows.

    ``rows`` are mappings or objects with ``commit_time``, ``processed_time``, ``sent_time`` and
    ``landed_at`` datetimes (as the ``transactions`` table has them); a leg whose end points are
    not both set is skipped for that row. Legs with no values are left out.
    """
    return latency_breakdown_us([[_unix_us(_field(row, name)) for name in TIME_POINTS]
                                 for row in rows])


def latency_breakdown_us(times: np.ndarray | Iterable[Sequence[int | None]]
                         ) -> dict[str, dict[str, float]]:
    """:func:`latency_breakdown` of time stamps in Unix microseconds, one row per
    transaction in ``TIME_POINTS`` order: what the sink has (``pipeline.spark.land.report.
    latency_times``: a float64 array, NaN where a time is not known), no datetimes built.
    Sequences with None for a time not known are taken too."""
    if not isinstance(times, np.ndarray):
        times = np.array([[np.nan if v is None else v for v in row] for row in times],
                         dtype=np.float64).reshape(-1, len(TIME_POINTS))
    index = {name: i for i, name in enumerate(TIME_POINTS)}
    out: dict[str, dict[str, float]] = {}
    for leg, (start, end) in LEGS.items():
        values = (times[:, index[end]] - times[:, index[start]]) / 1e6  # NaN if either is
        values = np.sort(values[~np.isnan(values)])
        if len(values):
            out[leg] = {"p50": float(percentile(values, 0.5)),
                        "p99": float(percentile(values, 0.99)), "count": float(len(values))}
    return out


def batch_record(progress: Any, counts: Mapping[str, int],
                 latency: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """One JSON-able record from a StreamingQueryProgress (or anything shaped like it)."""
    durations = dict(getattr(progress, "durationMs", None) or {})
    operators = list(getattr(progress, "stateOperators", None) or [])
    duration_ms = getattr(progress, "batchDuration", None) or durations.get("triggerExecution")
    record: dict[str, Any] = {
        "query": getattr(progress, "name", None),
        "batch_id": int(progress.batchId),
        "timestamp": getattr(progress, "timestamp", None),
        "messages": int(getattr(progress, "numInputRows", 0) or 0),
        "duration_ms": int(duration_ms or 0),
        "input_rows_per_s": _finite(getattr(progress, "inputRowsPerSecond", None)),
        "processed_rows_per_s": _finite(getattr(progress, "processedRowsPerSecond", None)),
        "state_rows": sum(int(getattr(op, "numRowsTotal", 0) or 0) for op in operators),
        "state_memory_bytes": sum(int(getattr(op, "memoryUsedBytes", 0) or 0)
                                  for op in operators),
        "durations_ms": {k: int(v) for k, v in durations.items()},
    }
    for name in COUNT_NAMES:
        record[name] = int(counts.get(name, 0))
    record["counts"] = {k: int(v) for k, v in counts.items() if k not in COUNT_NAMES}
    if latency:
        record["latency_s"] = {leg: dict(v) for leg, v in latency.items()}
    return record


#: A key's counts summed over the calls of one batch, and the mappings merged by sum.
_SUMMED = ("bytes", "duplicates")
_MERGED = ("alert_kinds", "gap_rows", "quarantine_sources", "request_kinds")
#: A key's gauges: its newest call's.
_GAUGES = ("gap_states", "oldest_gap_ms", "outstanding", "storm", "idle")


def key_totals(stats: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The state calls' metrics rows of one batch per (destination, subscription): landed
    transactions, bytes, duplicates and rows by kind summed, the newest commit per file, and
    the key's gauges as its last call left them; values that are 0 or empty are left out."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in stats:
        key = (row["destination"], row["subscription"])
        have = out.setdefault(key, {"destination": key[0], "subscription": key[1],
                                    "transactions": 0, **dict.fromkeys(_SUMMED, 0),
                                    **{name: {} for name in _MERGED}, "file_commits_us": {}})
        have["transactions"] += int(row.get("landed") or 0)
        for name in _SUMMED:
            have[name] += int(row.get(name) or 0)
        for name in _MERGED:
            for part, n in (row.get(name) or {}).items():
                have[name][part] = have[name].get(part, 0) + int(n)
        for name, commit in (row.get("file_commits_us") or {}).items():
            have["file_commits_us"][name] = max(have["file_commits_us"].get(name, commit), commit)
        have.update({name: row[name] for name in _GAUGES if name in row})
    # only what is not zero or empty: a line per batch in the metrics file, per busy key
    return [{k: v for k, v in out[key].items() if v or k in ("destination", "subscription")}
            for key in sorted(out)]


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    """A Kafka source's offsets as its progress gives them (JSON text or a mapping)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def input_lag(progress: Any) -> dict[str, int]:
    """Messages behind each topic's end after the batch: Spark's Kafka source reports the
    latest offsets it saw beside the batch's end offsets (per partition; summed per topic)."""
    out: dict[str, int] = {}
    for source in getattr(progress, "sources", None) or ():
        end = _offsets(getattr(source, "endOffset", None))
        for topic, parts in _offsets(getattr(source, "latestOffset", None)).items():
            if not isinstance(parts, dict):
                continue
            done = end.get(topic) or {}
            out[topic] = out.get(topic, 0) + sum(max(0, int(o) - int(done.get(p, o)))
                                                 for p, o in parts.items())
    return out


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return round(value, 3) if math.isfinite(value) else None


def format_progress(record: Mapping[str, Any]) -> str:
    """The demo's live line, e.g. ``batch 12 | 2000 msgs 3.1 s 645/s | 180 tx …``."""
    parts = [f"batch {record['batch_id']}",
             f"{record['messages']} msgs {record['duration_ms'] / 1000:.1f} s "
             f"{record.get('processed_rows_per_s') or 0:.0f}/s",
             f"{record.get('transactions', 0)} tx {record.get('records', 0)} rec "
             f"{record.get('bytes', 0) / 1e6:.1f} MB",
             f"dup {record.get('duplicates', 0)} gaps {record.get('open_gaps', 0)}",
             f"state {record.get('state_rows', 0)} rows "
             f"{record.get('state_memory_bytes', 0) / 1e6:.1f} MB"]
    leg = (record.get("latency_s") or {}).get("commit_to_landed")
    if leg:
        parts.append(f"latency p50 {leg['p50']:.1f} s p99 {leg['p99']:.1f} s")
    return " | ".join(parts)


def read_recent_records(path: str | Path, tail_bytes: int = 1 << 20) -> list[dict[str, Any]]:
    """The records in the last ``tail_bytes`` of a metrics file, oldest first (none when it
    is missing or unreadable): bounded, however long the job ran."""
    try:
        with Path(path).open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - tail_bytes))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the first line of the tail may be cut
        if isinstance(record, dict):
            out.append(record)
    return out


def read_last_record(path: str | Path) -> dict[str, Any] | None:
    """The newest record of a metrics file, or None (missing, empty, unreadable)."""
    records = read_recent_records(path, 65536)
    return records[-1] if records else None


class MetricsListener(StreamingQueryListener):
    """Joins the sink's per-batch counts with Spark's progress; writes JSON lines/Prometheus."""

    def __init__(self, jsonl_path: str | Path = DEFAULT_JSONL, *,
                 prometheus_port: int | None = None, query_name: str | None = None,
                 keep_last: int = 100, prometheus_address: str = "127.0.0.1",
                 view: JobView | None = None) -> None:
        super().__init__()
        self.jsonl_path = Path(jsonl_path)
        self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
        self.query_name = query_name
        self.query_id: str | None = None  # set once the query started
        self._lock = threading.Lock()
        self._counts: OrderedDict[int, dict[str, int]] = OrderedDict()
        self._open_gaps = 0
        self._latency: dict[int, dict[str, dict[str, float]]] = {}
        self._keys: dict[int, list[dict[str, Any]]] = {}
        self._records: list[dict[str, Any]] = []
        self._keep_last = keep_last
        self.prometheus = PrometheusExporter(prometheus_port, prometheus_address, view) \
            if prometheus_port is not None else None

    # -- called by the job's foreachBatch sink -----------------------------------------------

    def record_batch_counts(self, batch_id: int, counts: Mapping[str, int],
                            sink_seconds: float | None = None) -> None:
        """Counts the sink measured for ``batch_id`` (transactions, records, bytes, …).

        Matches the sink's ``on_batch(batch_id, counts, seconds)`` callback, so it can be
        passed as is; ``sink_seconds`` (time spent writing) lands as ``sink_ms``. Safe to call
        more than once per batch (a replayed batch): the later counts win.
        """
        with self._lock:
            self._counts[int(batch_id)] = {k: int(v) for k, v in counts.items()}
            if sink_seconds is not None:
                self._counts[int(batch_id)]["sink_ms"] = int(sink_seconds * 1000)
            self._counts.move_to_end(int(batch_id))
            while len(self._counts) > _PENDING_LIMIT:
                dropped, _ = self._counts.popitem(last=False)
                self._latency.pop(dropped, None)
                self._keys.pop(dropped, None)

    def record_batch_latency(self, batch_id: int,
                             breakdown: Mapping[str, Mapping[str, float]]) -> None:
        """A :func:`latency_breakdown` of the transactions the sink landed in ``batch_id``."""
        with self._lock:
            self._latency[int(batch_id)] = {k: dict(v) for k, v in breakdown.items()}

    def record_batch_keys(self, batch_id: int, stats: list[dict[str, Any]]) -> None:
        """The state calls' metrics rows of ``batch_id`` (``key_totals`` of them)."""
        with self._lock:
            self._keys[int(batch_id)] = key_totals(stats)

    # -- Spark listener bus ------------------------------------------------------------------

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's name
        progress = event.progress
        if self.query_name and getattr(progress, "name", None) != self.query_name:
            return
        if self.query_id and str(getattr(progress, "id", "")) != self.query_id:
            return  # another run of the same query name in this session
        self.observe(progress)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's name
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's name
        pass

    # -- bookkeeping -------------------------------------------------------------------------

    def observe(self, progress: Any) -> dict[str, Any]:
        """Turn one progress into a record, emit it, and return it."""
        batch_id = int(progress.batchId)
        with self._lock:
            counts = self._counts.pop(batch_id, {})
            latency = self._latency.pop(batch_id, None)
            keys = self._keys.pop(batch_id, [])
            # Open gaps are a level, not a per-batch count: a batch the sink did not run (no
            # data, no timer) keeps the last known value.
            if "open_gaps" in counts:
                self._open_gaps = int(counts["open_gaps"])
            else:
                counts = {**counts, "open_gaps": self._open_gaps}
        record = batch_record(progress, counts, latency)
        record["recorded_at"] = time.time()
        record["input_lag"] = input_lag(progress)
        record["keys"] = keys
        line = json.dumps(record, sort_keys=True, default=str)
        with self._lock:
            with self.jsonl_path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
            self._records.append(record)
            del self._records[:-self._keep_last]
        if self.prometheus is not None:
            self.prometheus.observe(record)
        return record

    @property
    def records(self) -> list[dict[str, Any]]:
        """The newest records (at most ``keep_last``), oldest first."""
        with self._lock:
            return list(self._records)

    def last_progress_line(self) -> str | None:
        """:func:`format_progress` of the newest batch, or None before the first."""
        records = self.records
        return format_progress(records[-1]) if records else None

    def close(self) -> None:
        if self.prometheus is not None:
            self.prometheus.close()
            self.prometheus = None


def attach_metrics(spark: Any, *, jsonl_path: str | Path = DEFAULT_JSONL,
                   prometheus_port: int | None = None, query_name: str | None = None,
                   prometheus_address: str = "127.0.0.1",
                   view: JobView | None = None) -> MetricsListener:
    """Create a listener and register it on ``spark.streams`` (before ``start_stream``)."""
    listener = MetricsListener(jsonl_path, prometheus_port=prometheus_port,
                               query_name=query_name, prometheus_address=prometheus_address,
                               view=view)
    spark.streams.addListener(listener)
    return listener


class JobMetrics:
    """The job's metrics as the engine reports them (``pipeline.spark.engine.query``'s
    ``QueryObserver``): the batch writer's counts and latency legs to the listener."""

    def __init__(self, listener: MetricsListener) -> None:
        self.listener = listener

    def batch_done(self, batch_id: int, counts: dict[str, int], seconds: float) -> None:
        self.listener.record_batch_counts(batch_id, counts, seconds)

    def batch_latency(self, batch_id: int, times: np.ndarray) -> None:
        self.listener.record_batch_latency(batch_id, latency_breakdown_us(times))

    def batch_keys(self, batch_id: int, stats: list[dict[str, Any]]) -> None:
        self.listener.record_batch_keys(batch_id, stats)

    def reconciled(self, figures: dict[str, Any]) -> None:
        """An in-job reconciliation round's figures (``reconcile_schedule.summary``): on
        Prometheus when the job serves it (the round logs them in any case)."""
        if self.listener.prometheus is not None:
            self.listener.prometheus.reconciled(figures)

    def started(self, query: Any) -> None:
        """Only this query's progress counts from now on."""
        self.listener.query_name = query.name
        self.listener.query_id = str(query.id)


def job_metrics(spark: Any, settings: Settings) -> JobMetrics:
    """The listener the job runs with (JSON lines in ``stream.metrics_file``, Prometheus on
    ``stream.prometheus_address``:``stream.prometheus_port``): pass it to
    ``start_stream(..., observe=job_metrics)``. With Prometheus, each file's staleness is
    read from ``file_status`` once (a restart must not show a stale file as fresh)."""
    port = settings.stream.prometheus_port
    view = job_view(settings, stale=stale_files(spark, settings)) if port is not None else None
    return JobMetrics(attach_metrics(
        spark, jsonl_path=settings.location(settings.stream.metrics_file), prometheus_port=port,
        prometheus_address=settings.stream.prometheus_address, view=view))


def stale_files(spark: Any, settings: Settings) -> dict[tuple[int, int], bool]:
    """Each file's staleness by its latest ``file_status`` row (the table exists: the job
    made its tables before)."""
    from pipeline.spark.typed.file_status import previous_status
    from pipeline.typed.lifecycle import FileState

    return {key: status.status is FileState.STALE
            for key, status in previous_status(spark, settings).items()}
