"""Stateful stage: applyInPandasWithState around the engine-free ``pipeline.reassembly.step``.

Keyed by (destination, subscription). The input is the decode stage's message rows (one per
Kafka record and key); ``split_rows`` decodes each record again and keeps the elements of the
key (see decode_stage.py for why). The state is one binary value (``KeyState.to_bytes``);
the output is a narrow, generic row ``(table, json, blob)``: the table it lands in, its columns
as JSON, and its one binary column (image payload, status data, quarantined bytes) kept out of
the JSON. The batch writer (``pipeline.spark.land``) parses each table's rows with its declared
schema.

With ``stream.fast_path`` (on by default) a key's runs of plain messages skip the element
decode and the machine: ``key_step`` hands the call to ``pipeline.reassembly.call``, where
the fast path lands them column-wise between the messages the machine takes.

Determinism matters for exactly-once: ``now`` is the batch's processing time from Spark (stored
in the offset log, so a replayed batch sees the same value), never the wall clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any

import numpy as np
import orjson
import pandas as pd

from pipeline.reassembly import KeyState, ReassemblyConfig, step
from pipeline.reassembly.call import ROW_COLUMNS, CallResult, run_call
from pipeline.reassembly.column import pylist
from pipeline.reassembly.events import TransactionComplete
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.tables import (
    Columns,
    events_to_rows,
    events_to_tables,
    ms_to_datetime,
    stck_to_unix_us,
)
from pipeline.spark.engine import key_gauges
from pipeline.spark.engine.decode_stage import ERROR_EYE, WARNING_EYE, RecordDecoder
from pipeline.spark.engine.gcpause import gc_paused
from pipeline.spark.land.datafiles import DataFiles, task_batch_id
from pipeline.spark.land.report import pack_times
from pipeline.spark.land.tables import BLOB_COLUMN, OUTPUT_DDL, STATS_TABLE
from pipeline.spark.land.watermark_rule import call_newest, prefix_newest
from pipeline.urb import UrbFormatError

__all__ = ["OUTPUT_DDL", "STATE_DDL", "STATS_TABLE", "EarlyFiles",
           "batch_output", "key_output", "key_stats", "key_step", "landed_newest",
           "landed_times", "split_frames", "split_records", "split_rows", "state_function",
           "to_output"]
STATE_DDL = "state binary"



def _quarantine_row(rec: dict[str, Any], source: str, eye: str, reason: str) -> dict[str, Any]:
    return {"source": source, "destination": rec["destination"],
            "subscription": rec["subscription"], "epoch": None, "tsnr": None, "reason": reason,
            "topic": rec["topic"], "partition": int(rec["partition"]),
            "offset": int(rec["offset"]), "elem_index": -1, "eye": eye,
            "raw": bytes(rec["value"]) if rec["value"] is not None else None,
            "fields_json": None}


def split_rows(pdf: pd.DataFrame, decoder: RecordDecoder
               ) -> tuple[list[ElementRow], list[dict[str, Any]]]:
    """Element rows of this key for the machine, and quarantine rows for what the codec
    rejected (whole records) or skipped (unknown elements, reported once per record).

    A record the decode stage's scan routed can still fail the full decode here (a bad URBD
    or URBS length, say): it is quarantined once, with its first key (``part`` 0)."""
    return split_records(pdf.to_dict("records"), decoder)


def split_records(records: Iterable[dict[str, Any]], decoder: RecordDecoder
                  ) -> tuple[list[ElementRow], list[dict[str, Any]]]:
    """``split_rows`` over the decode stage's rows as dicts."""
    elements: list[ElementRow] = []
    rejected: list[dict[str, Any]] = []
    for rec in records:
        if rec["error"] is not None:
            rejected.append(_quarantine_row(rec, "decode", ERROR_EYE, rec["error"]))
            continue
        try:
            rows, warnings = decoder.element_rows(
                rec["topic"], int(rec["partition"]), int(rec["offset"]), rec["key"],
                bytes(rec["value"]), (rec["destination"], rec["subscription"]),
                int(rec["part"]))
        except UrbFormatError as exc:
            if int(rec["part"]) == 0:
                rejected.append(_quarantine_row(rec, "decode", ERROR_EYE, str(exc)))
            continue
        elements.extend(rows)
        rejected.extend(_quarantine_row(rec, "decode_warning", WARNING_EYE, w)
                        for w in warnings)
    return elements, rejected


def split_frames(frames: Iterable[pd.DataFrame], decoder: RecordDecoder
                 ) -> tuple[list[ElementRow], list[dict[str, Any]]]:
    """``split_rows`` over every frame of one call (Spark hands a key's rows in frames)."""
    elements: list[ElementRow] = []
    rejected: list[dict[str, Any]] = []
    for pdf in frames:
        e, r = split_rows(pdf, decoder)
        elements.extend(e)
        rejected.extend(r)
    return elements, rejected


def key_step(current: KeyState | None, frames: Iterable[pd.DataFrame], now_ms: int,
             config: ReassemblyConfig, key: tuple[str, str], decoder: RecordDecoder,
             fast: bool = True, flush: Callable[[Columns], None] | None = None) -> CallResult:
    """A key's frames through ``pipeline.reassembly.call.run_call`` (with ``fast``: the fast
    path and the machine turn about), or all through ``step`` after a full decode. Here the
    frames only become the call's plain rows and the decode of the rows the machine takes."""
    frames = list(frames)
    if not fast:
        elements, rejected = split_frames(frames, decoder)
        return CallResult(step(current, elements, now_ms, config, key), None, rejected)
    names = [name for pdf in frames[:1] for name in pdf.columns]
    # columns, not row dicts: only the rows left to the machine become dicts
    cols = {name: [v for pdf in frames for v in pdf[name].tolist()] for name in names}
    rows = list(zip(*(cols[name] for name in ROW_COLUMNS), strict=True)) if names else []

    def decode(positions: Sequence[int]) -> tuple[list[ElementRow], list[dict[str, Any]]]:
        return split_records(({name: cols[name][i] for name in names} for i in positions),
                             decoder)

    return run_call(current, rows, decode, now_ms, config, key, decoder.codepage, flush)


def _jsonable(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict | list):
        return value
    return str(value)


def to_output(tables: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """Flatten table rows into the (table, json, blob) output frame."""
    out_table, out_json, out_blob = [], [], []
    for table, rows in tables.items():
        blob_col = BLOB_COLUMN.get(table)
        for row in rows:
            blob = row.pop(blob_col, None) if blob_col else None
            if table == "alerts":  # nested details land as one JSON string column
                row = {**row, "details": json.dumps(row["details"], sort_keys=True)}
            elif table == "gaps":  # transitions of one batch keep their order
                row = {**row, "seq": len(out_table)}
            out_table.append(table)
            # orjson writes what json.dumps(default=_jsonable) wrote (datetimes as ISO 8601
            # with offset), several times faster: this is the per-row cost of the hand-over.
            out_json.append(orjson.dumps(row, default=_jsonable).decode())
            out_blob.append(blob)
    # object dtype even when empty: an empty list makes a float64 column, which pyarrow turns
    # into a ChunkedArray for string/binary and transformWithStateInPandas then fails.
    return pd.DataFrame({"table": pd.Series(out_table, dtype=object),
                         "json": pd.Series(out_json, dtype=object),
                         "blob": pd.Series(out_blob, dtype=object)})


def landed_times(landed: Columns | None) -> np.ndarray:
    """The fast path's landed transactions' commit/processed/sent times (Unix µs), an
    ``(n, 3)`` float64 array with NaN for a time not known (``report.pack_times``)."""
    if landed is None:
        return np.empty((0, 3))
    fast = landed["transactions"]
    return np.column_stack([key_gauges.floats(fast[name]) for name in
                            ("commit_time", "processed_time", "sent_time")]).reshape(-1, 3)


def landed_newest(landed: Columns | None, into: dict[int, int]) -> None:
    """The fast path's landed transactions' newest commit time per database, added to
    ``into``: the fast path lands only with no gap open, so they are all the prefix's
    (``watermark_rule``)."""
    if landed is not None:
        fast = landed["transactions"]
        prefix_newest(into, pylist(fast["dbid"]), pylist(fast["commit_time"]),
                      pylist(fast["initial_state"]))


def key_stats(key: tuple[str, str], frames: list[pd.DataFrame], state: KeyState | None,
              events: list[Any] = (), tod_offset_us: int = 0,
              landed: Columns | None = None,
              early: Sequence[np.ndarray] = (),
              early_files: Mapping[str, int] | None = None,
              early_newest: dict[int, int] | None = None) -> dict[str, Any]:
    """The metrics row of one call: input bytes (each record once), the key's open gaps,
    how many transactions it landed (``landed``) and each one's commit/processed/sent times
    (Unix µs, ``times``: ``report.pack_times``) for the latency legs, so the sink needs no
    extra Spark job to read them back (``early``: those of the
    transactions flushed early, ``EarlyFiles.times``; ``landed``: the rest of the fast
    path's, then the events'); what ``key_gauges`` tells of the key's state and of the
    newest commit it landed per file (``early_files``: those of the early flushes); and
    ``newest``: the newest commit time per watermark bucket and database
    (``watermark_rule.call_newest``; ``early_newest``: the flushed transactions',
    ``EarlyFiles.newest``)."""
    early_files = early_files or {}
    nbytes = sum(int(f.loc[f["part"] == 0, "value"].map(len).sum()) for f in frames if len(f))
    done = [e for e in events if isinstance(e, TransactionComplete)]
    event_times = [(stck_to_unix_us(e.commit_time, tod_offset_us),
                    stck_to_unix_us(e.processed_time, tod_offset_us),
                    stck_to_unix_us(e.sent_time, tod_offset_us)) for e in done]
    times = np.vstack([*early, landed_times(landed),
                       np.array(event_times, dtype=np.float64).reshape(-1, 3)])
    files = key_gauges.newest(early_files, key_gauges.file_commits(landed),
                              key_gauges.event_commits(events, tod_offset_us))
    prefix = dict(early_newest or {})
    landed_newest(landed, prefix)
    gaps = [(g.epoch, g.from_u, g.gap_id) for g in state.gaps] if state is not None else []
    newest = call_newest(prefix, [(e.epoch, e.tsnr, e.dbid, time[0]) for e, time
                                  in zip(done, event_times, strict=True)
                                  if not e.initial_state], gaps)
    return {"destination": key[-2], "subscription": key[-1], "bytes": nbytes,
            "open_gaps": len(state.gaps) if state is not None else 0,
            "landed": len(times), "times": pack_times(times),
            "file_commits_us": files, **key_gauges.state_gauges(state), "newest": newest}


def batch_output(events: list[Any], rejected: list[dict[str, Any]], now_ms: int,
                 stats: dict[str, Any] | None = None, files: DataFiles | None = None,
                 tod_offset_us: int = 0, landed: Columns | None = None,
                 batch_id: int | None = None) -> pd.DataFrame:
    """One call's output frame: the events' table rows plus the decoder's rejected records,
    quarantined at the batch's processing time, plus the call's ``stats`` row (table
    ``STATS_TABLE``: read by the sink for the metrics, never landed). With ``files`` (the
    direct writer) the bulk tables' rows are written as Parquet here and the frame carries
    their file descriptions instead (``pipeline.spark.land.datafiles``). Shared by both state
    APIs. ``landed``: the transactions the fast path landed, ahead of the events'.
    ``batch_id``: the files' batch (default: the task's, ``task_batch_id``)."""
    if files is None:
        tables, columns = events_to_rows(events, now_ms, tod_offset_us, landed), {}
    else:  # the landed transactions' tables as columns, for Arrow
        tables, columns = events_to_tables(events, now_ms, tod_offset_us, landed)
    for row in rejected:
        row["quarantined_at"] = ms_to_datetime(now_ms)
    tables.setdefault("quarantine", []).extend(rejected)
    if stats is not None:
        tables[STATS_TABLE] = [{**stats, **key_gauges.row_counts(tables),
                                "landed_us": now_ms * 1000}]
    if files is not None:
        tables = files.split(tables, columns,
                             task_batch_id() if batch_id is None else batch_id)
    return to_output(tables)


class EarlyFiles:
    """``key_step``'s ``flush`` with the direct writer: the fast path's landed transactions
    written as Parquet files as they gather, so a busy key's call holds at most
    ``call.FLUSH_TRANSACTIONS`` of them (twice that while a write runs). Their output frames (the
    files' descriptions, committed by the sink with the batch's other files, exactly as the
    call's last ones) and their times (for the metrics row) are kept for the call's output.

    Each set of files is written on a thread of its own while the call goes on: a key's
    call is one task on one core, and pyarrow releases the GIL while it encodes Parquet,
    so the writes (a sizeable part of a busy key's call, decision 0010) run beside it, on a
    core the key's task left idle. One write at a time: the next waits for the one before. A
    write that fails raises in the call, at the next flush or at ``frames``."""

    def __init__(self, files: DataFiles, now_ms: int, tod_offset_us: int) -> None:
        self._files, self._now, self._tod = files, now_ms, tod_offset_us
        self._done: list[pd.DataFrame] = []
        self._writing: Future[pd.DataFrame] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.times: list[np.ndarray] = []  # landed_times of each set
        self.files: dict[str, int] = {}  # newest commit per file (key_gauges.file_commits)
        self.newest: dict[int, int] = {}  # newest commit per database (the watermark's)

    def __call__(self, columns: Columns) -> None:
        self.times.append(landed_times(columns))
        self.files = key_gauges.newest(self.files, key_gauges.file_commits(columns))
        landed_newest(columns, self.newest)
        batch_id = task_batch_id()  # the task's property, read on the task's own thread
        self._wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="urbpipe-early-files")
        self._writing = self._pool.submit(batch_output, [], [], self._now, None, self._files,
                                          self._tod, columns, batch_id)

    @property
    def frames(self) -> list[pd.DataFrame]:
        """The output frames of every file set, all written (the thread ended)."""
        try:
            self._wait()
        finally:
            self.close()
        return self._done

    def close(self) -> None:
        """End the thread (after the write under way, if any) without raising: for a call
        that failed before its output (``frames`` raises a write's error)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def _wait(self) -> None:
        if self._writing is not None:
            writing, self._writing = self._writing, None
            self._done.append(writing.result())


def key_output(key: tuple[str, str], frames: list[pd.DataFrame], done: CallResult,
               events: list[Any], now_ms: int, config: ReassemblyConfig,
               files: DataFiles | None, early: EarlyFiles | None) -> pd.DataFrame:
    """One call's whole output frame (shared by both state APIs): what ``early`` wrote,
    then the events' and the rest of the fast path's rows, the rejected records and the
    metrics row."""
    result = done.result
    stats = key_stats(key, frames, result.state, result.events, config.tod_offset_us,
                      done.landed, early.times if early is not None else (),
                      early.files if early is not None else None,
                      early.newest if early is not None else None)
    out = batch_output(events, done.rejected, now_ms, stats, files, config.tod_offset_us,
                       done.landed)
    if early is None or not early.frames:
        return out
    return pd.concat([*early.frames, out], ignore_index=True)


def state_function(config: ReassemblyConfig, decoder: RecordDecoder,
                   files: DataFiles | None = None, fast: bool = True):
    """The function passed to applyInPandasWithState (``files``: the direct writer, if on;
    ``fast``: the fast path, ``stream.fast_path``)."""

    def reassemble(key: tuple[str, str], frames: Iterator[pd.DataFrame],
                   state: Any) -> Iterator[pd.DataFrame]:
        now_ms = int(state.getCurrentProcessingTimeMs())
        pdfs = [] if state.hasTimedOut else list(frames)
        with gc_paused():  # pipeline/spark/engine/gcpause.py: a batch's garbage has no cycles
            current = KeyState.from_bytes(state.get[0]) if state.exists else None
            early = EarlyFiles(files, now_ms, config.tod_offset_us) if files else None
            try:
                done = key_step(current, pdfs, now_ms, config, (key[-2], key[-1]), decoder,
                                fast, early)
                result = done.result
                if result.state is None:
                    state.remove()
                else:
                    state.update((result.state.to_bytes(),))
                # PySpark keeps an old timeout armed unless every call sets or clears it.
                if result.next_timeout_ms is not None and result.next_timeout_ms > now_ms:
                    state.setTimeoutDuration(result.next_timeout_ms - now_ms)
                out = key_output((key[-2], key[-1]), pdfs, done, result.events, now_ms,
                                 config, files, early)
            finally:
                if early is not None:
                    early.close()
        yield out

    return reassemble
