"""A file's status and the rows that record it, shared by the lifecycle step and the
reconcile: ``file_status`` (per file transitions, read back as ``FileStatus``),
``schema_events`` (one row per event and table) and the status on the current tables'
properties for analysts (``urbpipe.file_status``, ``…_since``, ``…_reason``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings
from pipeline.spark.land.tables import table_path
from pipeline.typed.lifecycle import FileState, FileStatus, LifecycleEvent, Target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What applying one event to one table did; ``stale`` marks the file stale for it."""

    table: str | None
    result: str
    stale: str | None = None


def config_targets(settings: Settings) -> list[Target]:
    """The configured layouts as lifecycle targets."""
    return [Target(lay.subscription, lay.dbid, lay.fnr, lay.primary_dbid)
            for lay in settings.layouts]


def previous_status(spark: SparkSession, settings: Settings, run_ids: Sequence[str] = (),
                    batch_id: int = 0) -> dict[tuple[int, int], FileStatus]:
    """Each file's latest status, leaving out the rows the runs ``run_ids`` wrote in this very
    batch or later (a replay after a crash recomputes them)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    frame = spark.read.format("delta").load(table_path(settings, "file_status"))
    if run_ids:
        frame = frame.where(~(F.col("run_id").isin(*run_ids) & (F.col("batch_id") >= batch_id)))
    latest = Window.partitionBy("dbid", "fnr").orderBy(F.col("version").desc())
    rows = (frame.withColumn("_n", F.row_number().over(latest)).where("_n = 1")
            .withColumn("since_us", F.unix_micros("since"))
            .withColumn("cut_us", F.unix_micros("truncated_before")).collect())
    return {(r.dbid, r.fnr): FileStatus(
        r.dbid, r.fnr, FileState(r.status),
        tuple(k for k in (r.stale_kinds or "").split(",") if k), r.reason or "",
        utc(r.since_us), r.file_name or "", r.version, utc(r.cut_us)) for r in rows}


def utc(micros: int | None) -> datetime | None:
    return None if micros is None else EPOCH + timedelta(microseconds=micros)


def label_tables(spark: SparkSession, settings: Settings, statuses: Sequence[FileStatus],
                 layouts: Sequence[Target]) -> None:
    """The last status of each file, on its current tables' properties for analysts."""
    last = {(s.dbid, s.fnr): s for s in statuses}
    for t in layouts:
        s = last.get((t.dbid, t.fnr))
        if s is None:
            continue
        props = {"urbpipe.file_status": s.status, "urbpipe.file_status_reason": s.reason,
                 "urbpipe.file_status_since": s.since.isoformat() if s.since else ""}
        text = ", ".join(f"'{k}' = {_sql_string(v)}" for k, v in props.items())
        spark.sql(f"ALTER TABLE delta.`{table_path(settings, f'current_{t.suffix}')}` "
                  f"SET TBLPROPERTIES ({text})")


def event_row(event: LifecycleEvent, outcome: Outcome, seq: int) -> dict[str, Any]:
    return {
        "event_id": event.event_id, "subscription": event.subscription,
        "destination": event.destination, "st": event.st, "dbid": event.dbid,
        "fnr": event.files[0] if len(event.files) == 1 else None,
        "utility_type": event.utility_type, "utility": event.utility,
        "detail_json": json.dumps({**event.detail, "files": list(event.files)}, sort_keys=True),
        "action": str(event.action), "target_table": outcome.table, "result": outcome.result,
        "reason": event.reason, "at": event.at, "received_at": event.received_at, "seq": seq,
    }


def status_row(s: FileStatus, event: LifecycleEvent, app_id: str, seq: int) -> dict[str, Any]:
    return {
        "dbid": s.dbid, "fnr": s.fnr, "status": str(s.status),
        "stale_kinds": ",".join(s.stale_kinds), "reason": s.reason, "since": s.since,
        "file_name": s.file_name, "version": s.version,
        "truncated_before": s.truncated_before, "event_id": event.event_id,
        "st": event.st, "action": str(event.action), "run_id": app_id,
        "updated_at": event.received_at, "seq": seq,
    }


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
