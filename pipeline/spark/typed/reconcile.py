"""The typed tables follow their layouts: at start, and when a GFFT version arrives.

At start (``reconcile_tables``, called by ``pipeline.spark.engine.query.start_stream`` right
after the job's own tables exist), every layout with a format buffer in conf is compared with its
change, current and history tables (tombstones carry no values):

* a field the format buffer names and the tables lack becomes a column (``ADD COLUMNS``):
  after AUTI add new fields / write FDT the operator adds the field to the format buffer and
  restarts the job;
* a column the format buffer now reads wider is widened in place (Delta type widening,
  ``pipeline.typed.widening``: P4 → P6 decimal(7,0) → decimal(11,0), B2 → B4 int → bigint);
  one it reads narrower stays (the typed stage decodes into the table's type);
* a column it reads with a type the table cannot take in place (P → A …) stops the start
  before anything is altered: ``LayoutConflict``, a ``ConfigError`` (one line naming the
  table, column, both types and what to do; ``jobs/stream.py`` exits with code 2).

Each table changed is one ``schema_events`` row (st ``CONF``, action ``layout_conf``).

A file that AUTI made stale because a field grew beyond what its layout reads (stale kind
``layout``) becomes active again once every layout of the file reads what AUTI said each field
became (``pipeline.typed.lifecycle.pending_changes``, from the ``widen`` rows of
``schema_events`` since the file's latest refresh/define): checked here at start (the format
buffer, or the newest stored GFFT version) and by the typed stage when a batch brings a new
GFFT version (``versions_arrived``). The transition is a ``file_status`` row (action
``clear_stale``, the reason naming the fields) and a ``schema_events`` row per layout.

Exactly once: ALTERs compare with the schema first; the start's rows carry txnAppId
``urbpipe-reconcile-…`` with the changed table's Delta version before the change (or the file's
new status version) as txnVersion, so a start that dies half-way and starts again writes each
row once; the typed stage's rows carry the batch's txnAppId/txnVersion and read the previous
status without the batch's own rows, like ``pipeline.spark.typed.lifecycle``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pipeline.config import Layout, Settings
from pipeline.payload import FieldSpec, GroupSpec, RecordLayout
from pipeline.spark.land.log_peek import look
from pipeline.spark.land.tables import apply_plan, small_table, table_path
from pipeline.spark.land.writes import append_rows
from pipeline.spark.typed import comments
from pipeline.spark.typed.file_status import (
    EPOCH,
    Outcome,
    config_targets,
    event_row,
    label_tables,
    previous_status,
    status_row,
)
from pipeline.spark.typed.stream_layouts import current_layouts, next_layout
from pipeline.spark.typed.tables import TypedTableSet, value_tables
from pipeline.typed.decoding import DecodeSpec, VersionedSpec
from pipeline.typed.layouts import column_types
from pipeline.typed.lifecycle import (
    FieldChange,
    FileStatus,
    LifecycleEvent,
    Target,
    field_change,
    layout_covered,
    pending_changes,
    transition,
    uncovered,
)
from pipeline.typed.widening import LayoutConflict, TablePlan, conflict_line, table_plan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("urbpipe.reconcile")
#: ``file_status.run_id`` (and txnAppId prefix) of the rows the start writes.
START_RUN = "urbpipe-reconcile"
File = tuple[int, int]


def reconcile_tables(spark: SparkSession, settings: Settings) -> list[str]:
    """Bring every configured layout's typed tables in line with its format buffer and clear
    the ``layout`` stale kind of files whose layouts now read their changed fields. What
    changed, as ``table.column …`` strings. Raises LayoutConflict before altering anything
    when a format buffer reads a column with a type its table cannot take in place."""
    if not settings.layouts:
        return []
    plans: list[tuple[Layout, str, TablePlan]] = []
    for lay in settings.layouts:
        layout = lay.conf_layout()
        if layout is None:
            continue  # GFFT only: the typed stage follows the versions
        wanted = column_types(layout)
        # the current table last: a start that dies half-way still sees it behind
        for table in sorted(value_tables(lay), key=lambda t: t.startswith("current_")):
            seen = look(spark, settings, table_path(settings, table))
            if seen is None:
                continue  # made below as the layout reads it: nothing to plan
            plan = table_plan(seen.types(), wanted)
            if plan.conflicts:
                column, (old, new) = next(iter(plan.conflicts.items()))
                raise LayoutConflict(conflict_line(
                    f"{lay.subscription}/{lay.dbid}/{lay.fnr}", _field_of(layout, column),
                    column, table, old, new))
            if plan.changes:
                plans.append((lay, table, plan))
    # after the checks: a refused start leaves the tables as they were (no comment commits)
    TypedTableSet(settings).ensure(spark)
    now = datetime.now(UTC)
    changed: list[str] = []
    for lay, table, plan in plans:
        changed += _apply(spark, settings, lay, table, plan, now)
    changed += _clear_at_start(spark, settings, now)
    for line in changed:
        log.info("reconcile: %s", line)
    return changed


def _field_of(layout: RecordLayout, column: str) -> str:
    """The short name of the field (or PE group) a column holds."""
    return next((i.name for i in layout.items
                 if isinstance(i, FieldSpec | GroupSpec) and i.column == column), column)


def _apply(spark: SparkSession, settings: Settings, lay: Layout, table: str, plan: TablePlan,
           now: datetime) -> list[str]:
    """Record then alter one table: the row's txnVersion is the table's version before the
    ALTERs, so a start that dies between the two records it once and alters it next time."""
    path = table_path(settings, table)
    version = int(spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["version"])
    row = {
        "event_id": f"CONF|{lay.table_suffix()}|{table}|{version}",
        "subscription": lay.subscription, "destination": None, "st": "CONF",
        "dbid": lay.dbid, "fnr": lay.fnr, "utility_type": None, "utility": None,
        "detail_json": json.dumps({"format_buffer": lay.format_buffer, "added": plan.added,
                                   "widened": plan.widened}, sort_keys=True),
        "action": "layout_conf", "target_table": table, "result": plan.text(),
        "reason": f"format buffer of layout {lay.subscription}/{lay.dbid}/{lay.fnr} at start",
        "at": now, "received_at": now, "seq": 0,
    }
    append_rows(spark, [row], "schema_events", settings, f"{START_RUN}-{table}", None,
                txn_version=version)
    apply_plan(spark, path, plan)  # the plan reconcile_tables made: no second read
    comments.conf_columns_changed(spark, settings, lay, table)
    return [f"{table}.{c}" for c in plan.describe()]


# ------------------------------------------------------------------------- layout stale kind
def _clear_at_start(spark: SparkSession, settings: Settings, now: datetime) -> list[str]:
    kinds = small_table(spark, settings, "file_status", ["stale_kinds"]).column(0)
    if not any("layout" in (k or "") for k in kinds.to_pylist()):
        return []  # no file was ever stale for its layout (a Spark query less at each start)
    previous = previous_status(spark, settings)
    if not any("layout" in s.stale_kinds for s in previous.values()):
        return []
    layouts = {s: lay for s, (lay, _) in current_layouts(spark, settings).items()}
    cleared = covered_files(spark, settings, layouts, previous, None, st="CONF", at=now)
    targets = config_targets(settings)
    for status, event in cleared:
        owner = f"{START_RUN}-{status.dbid}-{status.fnr}"
        append_rows(spark, [status_row(status, event, START_RUN, 0)], "file_status",
                    settings, owner, None, txn_version=status.version)
        append_rows(spark, _event_rows(event, targets, 0), "schema_events", settings, owner,
                    None, txn_version=status.version)
    label_tables(spark, settings, [s for s, _ in cleared], targets)
    return [f"file {s.dbid}/{s.fnr} {s.status}: {e.reason}" for s, e in cleared]


def versions_arrived(spark: SparkSession, settings: Settings,
                     specs: Mapping[str, DecodeSpec | VersionedSpec],
                     files: Mapping[File, datetime], app_id: str, batch_id: int,
                     seq: int) -> list[dict[str, Any]]:
    """The typed stage's check when a batch brings new GFFT versions of ``files`` (file →
    the newest one's creation time): a file stale for its layout whose layouts (``specs``: the
    batch's decode specs) now read every changed field becomes active. Writes the
    ``file_status`` rows; returns the ``schema_events`` rows (numbered from ``seq``) for the
    stage's own append."""
    run_id = f"{app_id}-gfft"
    previous = previous_status(spark, settings, (app_id, run_id), batch_id)
    layouts = {suffix: next_layout(spec) for suffix, spec in specs.items()}
    cleared = covered_files(spark, settings, layouts, previous, files, st="GFFT")
    if not cleared:
        return []
    targets = config_targets(settings)
    append_rows(spark, [status_row(s, e, run_id, i) for i, (s, e) in enumerate(cleared)],
                "file_status", settings, run_id, batch_id)
    label_tables(spark, settings, [s for s, _ in cleared], targets)
    rows: list[dict[str, Any]] = []
    for _, event in cleared:
        rows += _event_rows(event, targets, seq + len(rows))
    return rows


def _event_rows(event: LifecycleEvent, targets: list[Target], seq: int) -> list[dict[str, Any]]:
    mine = [t for t in targets if (t.dbid, t.fnr) == (event.dbid, event.files[0])]
    return [{**event_row(event, Outcome(f"current_{t.suffix}", event.reason), seq + i),
             "subscription": t.subscription} for i, t in enumerate(mine)]


def covered_files(spark: SparkSession, settings: Settings,
                  layouts: Mapping[str, RecordLayout | None],
                  previous: Mapping[File, FileStatus], files: Mapping[File, datetime] | None,
                  *, st: str, at: datetime | None = None) -> list[tuple[FileStatus,
                                                                        LifecycleEvent]]:
    """The files (all, or those in ``files`` with the time to date the change at) that are
    stale for their layout and whose every configured layout (``layouts`` by table suffix)
    reads what AUTI said each of their fields became: their new status and its event."""
    stale = {key: s for key, s in previous.items() if "layout" in s.stale_kinds
             and (files is None or key in files)}
    if not stale:
        return []
    pending = _pending(spark, settings, stale)
    out: list[tuple[FileStatus, LifecycleEvent]] = []
    for key, status in sorted(stale.items()):
        mine = [lay for lay in settings.layouts if (lay.dbid, lay.fnr) == key]
        chosen = [layouts.get(lay.table_suffix()) for lay in mine]
        changes = pending.get(key, {})
        if not mine or any(lay is None or uncovered(lay, changes) for lay in chosen):
            continue
        when = at if files is None else files[key]
        event = layout_covered(*key, [changes[f] for f in sorted(changes)], st=st,
                               event_id=f"{st}|layout|{key[0]}|{key[1]}|{status.version + 1}",
                               at=when, received_at=at or when)
        out.append((transition(status, event), event))
    return out


def _pending(spark: SparkSession, settings: Settings,
             files: Mapping[File, FileStatus]) -> dict[File, dict[str, FieldChange]]:
    """Per file, what AUTI said its fields became since its latest refresh/define: the
    ``widen`` rows of ``schema_events`` (one per event, whatever the tables it concerned)."""
    from pyspark.sql import functions as F

    mine = F.lit(False)
    for dbid, fnr in files:
        mine = mine | ((F.col("dbid") == dbid) & (F.col("fnr") == fnr))
    rows = (spark.read.format("delta").load(table_path(settings, "schema_events"))
            .where((F.col("st") == "AUTI") & (F.col("action") == "widen") & mine)
            .select("event_id", "dbid", "fnr", "detail_json", F.unix_micros("at").alias("us"))
            .distinct().collect())
    seen: dict[File, dict[str, tuple[int | None, FieldChange]]] = {}
    for r in rows:
        cut = files[(r.dbid, r.fnr)].truncated_before
        cut_us = None if cut is None else (cut - EPOCH) // timedelta(microseconds=1)
        if cut_us is not None and r.us is not None and r.us < cut_us:
            continue  # before the file was refreshed/defined again: its stale kinds cleared
        seen.setdefault((r.dbid, r.fnr), {})[r.event_id] = (
            r.us, field_change(json.loads(r.detail_json or "{}")))
    return {key: pending_changes(events.values()) for key, events in seen.items()}
