"""Utility and lifecycle events applied to the typed tables, inside foreachBatch.

Runs after the raw and typed tables of a batch are committed, only when the batch landed
status events. ``pipeline.typed.lifecycle`` reads each status (URBS AUTI + URBSU, LODS/LODE,
SAVS/SAVE, RESS/RESE, RPLS/RPLE, LOST, DEAC/REAC, REFR) into an action; here it meets Delta:

* truncate (refresh/define file): ``DELETE`` from ``current_<sub>_<fnr>`` of the rows whose
  version (commit_time) is older than the utility's commit time (URBSTTIM). Running after the
  batch's MERGE, this keeps the changes of the same batch that came after the refresh. With
  ``deletes: remove`` the older tombstones go too (the cutoff, kept in ``file_status``, now
  keeps every older change out of the current table: ``pipeline.spark.typed.stage`` point 5); with
  ``history`` the intervals open at the cutoff, or open past it, end there
  (``pipeline.typed.history.truncate_history``).
* add columns (add new fields, write FDT): the columns the file's layout reads and its tables
  lack are added (``ALTER TABLE … ADD COLUMNS``) to the change, current and history tables.
  A new field reaches the tables once a layout reads it: a conf format buffer that names it
  (the job reconciles the tables at start: ``pipeline.spark.typed.reconcile``) or a GFFT version.
* widen (changed field length/format): checked against the layout that decodes the file's
  next images (the newest GFFT version the tables take, else the format buffer). If it
  already reads the new length/format, the tables take its type — widened in place with
  Delta type widening (``ALTER COLUMN … TYPE``, ``pipeline.typed.widening``) when it is
  wider — and the file stays active; if not, the file becomes stale (kind ``layout``) until a
  layout that reads it arrives (restart with the changed format buffer, or a GFFT version).
* drop, stale, clear, rename: the file's status in ``file_status`` and in the current table's
  properties (``urbpipe.file_status``, ``…_since``, ``…_reason``).
* every event (and its result) is a row in ``schema_events``.

Exactly once: the DELETE carries txnAppId/txnVersion (one app id per table and delete in the
batch), ALTERs compare with the table's schema first, appends carry txnAppId/txnVersion, and the
previous file status is read without this batch's own rows, so a replayed batch recomputes the
same transitions and Delta skips what it already committed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings
from pipeline.spark.land.batch_writer import LandedBatch
from pipeline.spark.land.tables import table_frame, table_path
from pipeline.spark.land.writes import append_rows, delta_txn
from pipeline.spark.typed.file_status import (
    EPOCH,
    Outcome,
    config_targets,
    event_row,
    label_tables,
    previous_status,
    status_row,
    utc,
)
from pipeline.spark.typed.stream_layouts import NextLayouts, conform_tables, value_columns
from pipeline.spark.typed.tables import TypedTableSet, value_tables
from pipeline.typed.layouts import column_types
from pipeline.typed.lifecycle import (
    LIFECYCLE_STATUSES,
    Action,
    FileState,
    LifecycleEvent,
    Target,
    files_of,
    interpret,
    replay,
    targets,
    widen_decision,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipeline.payload import RecordLayout

log = logging.getLogger("urbpipe.lifecycle")
_TIMES = ("time", "commit_time", "received_at")


class LifecycleEvents:
    """Landing step: the batch's lifecycle statuses replayed on the typed tables, after them
    (only when the batch landed status events)."""

    lap = None  # counted with the requests and alerts (``t_kafka_ms``)

    def __init__(self, settings: Settings, tables: TypedTableSet,
                 layouts: NextLayouts | None = None) -> None:
        self._settings = settings
        self._tables = tables
        self._layouts = layouts or NextLayouts()

    def land(self, batch: LandedBatch) -> dict[str, int]:
        if not batch.rows.get("status_events"):
            return {}
        return apply_lifecycle(batch.session, batch.frame, batch.batch_id, self._settings,
                               batch.app_id, self._tables, self._layouts)


def apply_lifecycle(spark: SparkSession, batch: DataFrame, batch_id: int, settings: Settings,
                    app_id: str, tables: TypedTableSet | None = None,
                    next_layouts: NextLayouts | None = None) -> dict[str, int]:
    """Replay the batch's lifecycle statuses on the typed tables; rows written per table.
    ``tables``: the writer's record of the typed tables made so far (a new one checks them);
    ``next_layouts``: the layouts that decode each file's next images, if the typed step of this
    batch worked them out (else they are worked out here, when an event needs them)."""
    rows = _status_rows(batch, batch_id)
    if not rows:
        return {}
    layouts = config_targets(settings)
    events = [e for row in rows if (e := interpret(row, _big_endian(settings, row))) is not None]
    if not events:  # only statuses without a lifecycle meaning (C5 user data, SUBS …)
        return {}
    if settings.layouts:
        (tables or TypedTableSet(settings)).ensure(spark)
    applier = _Applier(spark, settings, app_id, batch_id, batch,
                       next_layouts or NextLayouts())
    previous = previous_status(spark, settings, (app_id,), batch_id)
    event_rows: list[dict[str, Any]] = []
    steps: list[tuple[LifecycleEvent, tuple[int, int], str | None]] = []
    for event in events:
        outcomes = [applier.apply(event, t) for t in targets(event, layouts)] or [
            Outcome(None, "recorded: no typed tables for this file")]
        event_rows += [event_row(event, o, len(event_rows) + i) for i, o in enumerate(outcomes)]
        stale = next((o.stale for o in outcomes if o.stale), None)
        steps += [(event, key, stale) for key in files_of(event, layouts)]
    statuses = replay(previous, steps)
    status_rows = [status_row(s, e, app_id, i) for i, (s, (e, _, _)) in enumerate(
        zip(statuses, steps, strict=True))]
    append_rows(spark, event_rows, "schema_events", settings, app_id, batch_id)
    append_rows(spark, status_rows, "file_status", settings, app_id, batch_id)
    label_tables(spark, settings, statuses, layouts)
    log.info("lifecycle batch %s: %s events, %s file transitions", batch_id, len(event_rows),
             len(status_rows))
    # each file's staleness after the batch, for the metrics (urbpipe_file_stale)
    stale = {f"file_stale:{s.dbid}/{s.fnr}": int(s.status is FileState.STALE) for s in statuses}
    return {"schema_events": len(event_rows), "file_status": len(status_rows), **stale}


# ------------------------------------------------------------------------- reading
def _status_rows(batch: DataFrame, batch_id: int) -> list[dict[str, Any]]:
    """This batch's lifecycle statuses, in the order they happened."""
    from pyspark.sql import functions as F

    frame = table_frame(batch, "status_events", batch_id).where(
        F.col("st").isin(*sorted(LIFECYCLE_STATUSES)))
    # Times as UTC microseconds: collect() would give naive datetimes in the driver's zone.
    frame = frame.select("*", *[F.unix_micros(c).alias(f"_{c}_us") for c in _TIMES])
    rows = [{**r.asDict(), **{c: utc(r[f"_{c}_us"]) for c in _TIMES}} for r in frame.collect()]
    return sorted(rows, key=lambda r: (r["time"] or r["received_at"] or EPOCH, r["topic"] or "",
                                       r["partition"] or 0, r["offset"] or 0,
                                       r["elem_index"] or 0, r["destination"] or ""))


def _big_endian(settings: Settings, row: Mapping[str, Any]) -> bool | None:
    """For rows landed before ``status_events.big_endian`` existed (``interpret`` prefers the
    row's own): EBCDIC subscriptions come from a mainframe (big endian); ASCII is inferred."""
    sub = next((s for s in settings.subscriptions if s.name == row.get("subscription")), None)
    return True if sub is not None and sub.ebcdic else None


# ------------------------------------------------------------------------- applying
class _Applier:
    """Applies one event to one target's tables; counts DML per table in the batch (txn ids)."""

    def __init__(self, spark: SparkSession, settings: Settings, app_id: str, batch_id: int,
                 batch: DataFrame, layouts: NextLayouts) -> None:
        self._spark = spark
        self._settings = settings
        self._app_id = app_id
        self._batch_id = batch_id
        self._batch = batch
        self._deletes: dict[str, int] = {}
        self._layouts = layouts

    def apply(self, event: LifecycleEvent, target: Target) -> Outcome:
        current = f"current_{target.suffix}"
        if event.action is Action.TRUNCATE:
            return Outcome(current, self._refresh(target, event.at))
        if event.action is Action.ADD_COLUMNS:
            return self._add_columns(target)
        if event.action is Action.WIDEN:
            return self._widen(event, target)
        return Outcome(current, f"{event.action}: file status" if event.action is not
                       Action.RECORD else "recorded")

    def _path(self, table: str) -> str:
        return table_path(self._settings, table)

    def _refresh(self, target: Target, cutoff: datetime | None) -> str:
        """Truncate the current table; clear the tombstones and close the history with it."""
        if cutoff is None:
            return "not applied: the status carries no time to cut at"
        micros = (cutoff - EPOCH) // timedelta(microseconds=1)
        older = f"commit_time < timestamp_micros({micros})"
        deleted = self._dml(f"current_{target.suffix}", "DELETE FROM {table} WHERE " + older)
        result = f"deleted {deleted} rows older than {cutoff.isoformat()}"
        lay = next((x for x in self._settings.layouts if x.table_suffix() == target.suffix
                    and x.dbid == target.dbid), None)
        if lay is not None and lay.deletes == "remove":
            gone = self._dml(f"tombstones_{target.suffix}", "DELETE FROM {table} WHERE " + older)
            result += f"; {gone} older tombstones cleared"
        if lay is not None and lay.history:
            closed = self._dml(f"history_{target.suffix}", (
                f"UPDATE {{table}} SET valid_to = timestamp_micros({micros}), is_current = false "
                f"WHERE {older} AND (valid_to IS NULL OR valid_to > timestamp_micros({micros}))"))
            result += f"; {closed} history intervals closed"
        return result

    def _dml(self, table: str, sql: str) -> int:
        """Run a DELETE/UPDATE on ``table`` once per batch (its own txn id); rows affected."""
        n = self._deletes.get(table, 0)
        self._deletes[table] = n + 1
        with delta_txn(self._spark, f"{self._app_id}-lifecycle-{table}-{n}", self._batch_id):
            result = self._spark.sql(sql.format(table=f"delta.`{self._path(table)}`")).collect()
        return int(result[0][0]) if result and result[0][0] is not None else 0

    def _layout(self, target: Target) -> tuple[RecordLayout | None, str]:
        """The layout that decodes the target's next images and its source (conf/gfft): once
        per batch (``NextLayouts``), with the batch's own GFFT versions."""
        layouts = self._layouts.of(self._spark, self._settings, self._batch, self._batch_id)
        return layouts.get(target.suffix, (None, "conf"))

    def _tables(self, target: Target) -> list[str]:
        lay = next(x for x in self._settings.layouts if x.table_suffix() == target.suffix)
        return value_tables(lay)

    def _add_columns(self, target: Target) -> Outcome:
        current = f"current_{target.suffix}"
        layout, source = self._layout(target)
        if layout is None:
            return Outcome(current, "recorded: no layout for this file yet; the tables take "
                           "the fields of its first GFFT version")
        changed = conform_tables(self._spark, self._settings, self._tables(target),
                                 column_types(layout))
        if changed:
            return Outcome(current, f"tables follow the layout: {'; '.join(changed)}")
        how = ("add them to the format buffer and restart the job (the tables take them at "
               "start)" if source == "conf" else
               "the tables take them with the GFFT version that names them")
        return Outcome(current, f"no field the layout reads lacks a column: {how}")

    def _widen(self, event: LifecycleEvent, target: Target) -> Outcome:
        current = f"current_{target.suffix}"
        layout, source = self._layout(target)
        have = value_columns(self._spark, self._path(current))
        decision = widen_decision(event, layout, have, source=source)
        if decision.widen:
            conform_tables(self._spark, self._settings, self._tables(target),
                           dict(decision.widen))
        return Outcome(current, decision.result, decision.stale)
