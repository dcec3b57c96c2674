"""Landing step: the consistency watermarks, after every other commit of the batch.

Why: a batch commits table by table (raw tables, then typed ones, then lifecycle), and a
transaction lands while an earlier one may still be missing (a gap the replicator is asked to
fill). An analyst joining ``transactions``, ``records`` and two files' ``current_`` tables would
then see a state the database never had. The ``watermarks`` table says, per (destination,
subscription, dbid), the commit time up to which every transaction of that database has landed
everywhere with no hole before it, on that database's own clock (the rule and why it holds:
``pipeline.spark.land.watermark_rule``); the catalog's views read it: ``v_watermarks`` (per
subscription and database: exact), ``v_watermark_<subscription>`` and ``v_watermark`` (the
earliest over databases and subscriptions: clocks combined), and ``v_current_…`` filter by
their own database's.

It runs after the raw, typed and lifecycle commits, so a row never runs ahead of them: while a
batch's commits are in progress (or after one failed) readers see the previous watermark. The
rows are written once per batch (the direct writer's file committed by the driver, or a Spark
append with the batch's txn id), only for databases whose row changed. The step keeps the
marks in memory and reads them back once, in its first batch after a start: each database's
latest row, and the gaps the ``gaps`` table shows open before the batch (they hold whatever
the rows say: a gap opened before any transaction landed after it left no row).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pipeline.config import Settings
from pipeline.spark.land.batch_writer import LandedBatch
from pipeline.spark.land.committer import DeltaCommitter
from pipeline.spark.land.datafiles import data_files
from pipeline.spark.land.tables import table_path
from pipeline.spark.land.watermark_rule import (
    GapSeen,
    KeyMark,
    advance,
    gap_position,
    last_transitions,
)
from pipeline.spark.land.writes import append_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("urbpipe.watermark")
TABLE = "watermarks"
#: The view of every (subscription, dbid) of the conf: each database's own watermark.
DB_VIEW = "v_watermarks"
#: The view over every subscription of the conf.
ALL_VIEW = "v_watermark"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Key = tuple[str, str]  # (destination, subscription)


def subscription_view(subscription: str) -> str:
    """The catalog view of one subscription's watermark."""
    return f"v_watermark_{subscription.lower()}"


def to_time(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


def to_us(value: datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is None:  # Spark's collect gives naive datetimes in the session zone (UTC)
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(microseconds=1)


def mark_rows(key: Key, mark: KeyMark, lag_ms: int) -> dict[int, dict[str, Any]]:
    """The ``watermarks`` row of each database of one key (without ``computed_at`` and
    ``batch_id``), by dbid."""
    ids = sorted(mark.gaps, key=gap_position)
    return {dbid: {"subscription": key[1], "destination": key[0], "dbid": dbid,
                   "watermark": to_time(mark.marks.get(dbid)),
                   "newest_commit": to_time(mark.prefix.get(dbid)), "nucleus_lag_ms": lag_ms,
                   "held_by": mark.held_by, "open_gaps": len(ids), "gap_ids": ids,
                   "gap_newest": [to_time(mark.gaps[g].get(dbid)) for g in ids]}
            for dbid in mark.dbids()}


def batch_newest(stats: Iterable[dict[str, Any]]) -> dict[Key, list[list[Any]]]:
    """Per key, the state calls' reports of the newest commits per bucket and database
    (``watermark_rule.call_newest``; no Spark job: the state function reports them)."""
    out: dict[Key, list[list[Any]]] = {}
    for row in stats:
        key = (str(row["destination"]), str(row["subscription"]))
        out.setdefault(key, []).extend(row.get("newest") or [])
    return out


class Watermarks:
    """Advances and records each key's watermarks after the batch's other commits."""

    lap = "t_watermark_ms"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lag_ms = settings.stream.watermark.nucleus_lag_ms
        self._marks: dict[Key, KeyMark] | None = None  # read back in the first batch
        self._path = table_path(settings, TABLE)
        self._files = data_files(settings, (TABLE,))

    def land(self, batch: LandedBatch) -> dict[str, int]:
        if self._marks is None:
            self._marks = restore(batch.session, self._settings, batch.batch_id)
        newest = batch_newest(batch.stats)
        gaps = last_transitions(batch.collect("gaps")) if batch.rows.get("gaps") else {}
        now = datetime.now(UTC)
        rows = []
        for key in sorted(set(newest) | set(gaps)):
            if not key[1]:
                continue  # the destination-wide key lands no transaction
            before = self._marks.get(key, KeyMark())
            after = advance(before, newest.get(key, ()), gaps.get(key, ()),
                            self._lag_ms * 1000)
            if after == before:
                continue
            self._marks[key] = after
            old = mark_rows(key, before, self._lag_ms)
            rows += [{**row, "computed_at": now}
                     for dbid, row in mark_rows(key, after, self._lag_ms).items()
                     if old.get(dbid) != row]
        self._write(batch, rows)
        return {TABLE: len(rows)}

    def _write(self, batch: LandedBatch, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        owner = f"{batch.app_id}-{TABLE}"
        if self._files is None:  # Spark appends every table of this lake
            append_rows(batch.session, rows, TABLE, self._settings, batch.app_id,
                        batch.batch_id)
            return
        file = self._files.write_rows(TABLE, rows, batch.batch_id)
        DeltaCommitter(batch.session).commit(self._path, [file], owner, batch.batch_id,
                                             batch.ledger)


def restore(spark: SparkSession, settings: Settings, batch_id: int) -> dict[Key, KeyMark]:
    """The marks as the table left them (each database's latest row), with the gaps the
    ``gaps`` table shows open before ``batch_id``: those hold the watermarks whatever the rows
    say (a gap opened before the job kept watermarks, or before anything landed after it)."""
    found: dict[Key, tuple[dict[int, int], dict[str, dict[int, int]], dict[int, int]]] = {}
    path = table_path(settings, TABLE)
    if has_rows(spark, path):
        latest = spark.sql(
            "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY destination, subscription,"
            f" dbid ORDER BY computed_at DESC, batch_id DESC) AS rn FROM delta.`{path}`) "
            "WHERE rn = 1")
        for row in latest.collect():
            prefix, buckets, marks = found.setdefault(
                (row["destination"], row["subscription"]), ({}, {}, {}))
            dbid = int(row["dbid"])
            for name, into in (("newest_commit", prefix), ("watermark", marks)):
                if row[name] is not None:
                    into[dbid] = to_us(row[name])
            for gap_id, newest in zip(row["gap_ids"] or [], row["gap_newest"] or [],
                                      strict=True):
                bucket = buckets.setdefault(gap_id, {})
                if newest is not None:
                    bucket[dbid] = to_us(newest)
    held = open_gaps(spark, settings, batch_id)
    marks: dict[Key, KeyMark] = {}
    for key in set(found) | set(held):
        prefix, buckets, done = found.get(key, ({}, {}, {}))
        ids = held.get(key, set())
        seen = [GapSeen(g, "open") for g in sorted(ids)]
        seen += [GapSeen(g, "filled") for g in sorted(set(buckets) - ids)]
        marks[key] = advance(KeyMark(prefix, buckets, done), (), seen,
                             settings.stream.watermark.nucleus_lag_ms * 1000)
    unheld = sum(1 for key, ids in held.items() if key not in found for _ in ids)
    if unheld:
        log.warning("watermarks: %d gap(s) open before the job kept watermarks hold them "
                    "until they end", unheld)
    return marks


def open_gaps(spark: SparkSession, settings: Settings, batch_id: int) -> dict[Key, set[str]]:
    """The tsnr gaps open or requested before ``batch_id``, per key (a fresh lake: none, no
    query)."""
    gaps = table_path(settings, "gaps")
    if not has_rows(spark, gaps):
        return {}
    rows = spark.sql(
        "SELECT destination, subscription, gap_id FROM (SELECT *, row_number() "
        "OVER (PARTITION BY destination, subscription, gap_id ORDER BY batch_id DESC, seq DESC)"
        f" AS rn FROM delta.`{gaps}` WHERE batch_id < {int(batch_id)}) WHERE rn = 1 "
        "AND kind = 'tsnr' AND state IN ('open', 'requested')").collect()
    out: dict[Key, set[str]] = {}
    for row in rows:
        out.setdefault((row["destination"], row["subscription"]), set()).add(row["gap_id"])
    return out


def has_rows(spark: SparkSession, path: str) -> bool:
    """Might the Delta table at ``path`` hold rows? False only when its log has nothing after
    the commit that created it (a fresh lake): two file probes, no Spark job."""
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    log_dir = jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}/_delta_log")
    fs = log_dir.getFileSystem(conf)
    later = [jvm.org.apache.hadoop.fs.Path(log_dir, f"{1:020d}.json"),
             jvm.org.apache.hadoop.fs.Path(log_dir, "_last_checkpoint")]
    return any(fs.exists(p) for p in later)


def view_queries(settings: Settings) -> dict[str, tuple[str, str]]:
    """View name → (comment, query) of the watermark views, over ``schema.watermarks``, in
    the order they must be made (each reads the one before)."""
    schema = settings.catalog.schema_name
    latest = ("SELECT *, row_number() OVER (PARTITION BY destination, subscription, dbid "
              f"ORDER BY computed_at DESC, batch_id DESC) AS rn FROM `{schema}`.`{TABLE}`")
    def listed(names: Iterable[str]) -> str:
        return ", ".join(f"'{name}'" for name in names)

    per_db = " UNION ALL ".join(
        f"SELECT subscription, dbid, CASE WHEN count(watermark) = {len(sub.destinations)} "
        "THEN min(watermark) END AS watermark, max(newest_commit) AS newest_commit, "
        "max(nucleus_lag_ms) AS nucleus_lag_ms, concat_ws(',', collect_set(held_by)) AS "
        f"held_by, max(computed_at) AS computed_at FROM ({latest}) WHERE rn = 1 AND "
        f"subscription = '{sub.name}' AND destination IN "
        f"({listed(sub.destinations)}) GROUP BY subscription, dbid"
        for sub in settings.subscriptions)
    out = {DB_VIEW: (
        "Consistency watermark of each (subscription, dbid): every transaction of that "
        "database committed at or before it has landed in every table, from each of the "
        "subscription's destinations, with no open gap before it; a time on that database's "
        "own clock (URBTTTIM), null until each destination has one.", per_db)}
    for sub in settings.subscriptions:
        dbs = sub.databases()
        clocks = ("one database, one clock: exact" if len(dbs) == 1 else
                  f"the earliest of its {len(dbs)} databases' ({', '.join(map(str, dbs))}), "
                  "each on its own clock: this combines different clocks and is exact only "
                  "when they agree; per database see v_watermarks")
        out[subscription_view(sub.name)] = (
            f"Consistency watermark of subscription {sub.name} ({clocks}); null until each "
            "database has one.",
            f"SELECT '{sub.name}' AS subscription, CASE WHEN count(watermark) = {len(dbs)} "
            "THEN min(watermark) END AS watermark, max(computed_at) AS computed_at "
            f"FROM `{schema}`.`{DB_VIEW}` WHERE subscription = '{sub.name}' "
            f"AND dbid IN ({', '.join(map(str, dbs))})")
    parts = " UNION ALL ".join(f"SELECT * FROM `{schema}`.`{subscription_view(sub.name)}`"
                               for sub in settings.subscriptions)
    out[ALL_VIEW] = (
        "Consistency watermark across every subscription of the conf: the earliest of theirs "
        "(each database's commit times are its own clock: this combines clocks, exact only "
        "when they agree); null until each has one.",
        f"SELECT CASE WHEN count(watermark) = {len(settings.subscriptions)} THEN "
        "min(watermark) END AS watermark, max(computed_at) AS computed_at "
        f"FROM ({parts})")
    return out
