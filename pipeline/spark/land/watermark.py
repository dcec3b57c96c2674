"""Landing step: the consistency watermark, after every other commit of the batch.

Why: a batch commits table by table (raw tables, then typed ones, then lifecycle), and a
transaction lands while an earlier one may still be missing (a gap the replicator is asked to
fill). An analyst joining ``transactions``, ``records`` and two files' ``current_`` tables would
then see a state the database never had. The ``watermarks`` table says, per (destination,
subscription), the commit time up to which everything has landed everywhere with no hole
before it (the rule: ``pipeline.spark.land.watermark_rule``); the catalog's views
``v_watermark_<subscription>`` (over the subscription's destinations) and ``v_watermark``
(over every subscription of the conf) read it, and ``v_current_…`` filter by it.

It runs after the raw, typed and lifecycle commits, so a row never runs ahead of them: while a
batch's commits are in progress (or after one failed) readers see the previous watermark. The
row is written once per batch (the direct writer's file committed by the driver, or a Spark
append with the batch's txn id), only for keys whose watermark or holds changed. The step keeps
the marks in memory and reads them back from the table once, in its first batch after a start
(a fresh lake has nothing to read: no query then).
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
from pipeline.spark.land.watermark_rule import KeyMark, advance, last_transitions
from pipeline.spark.land.writes import append_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("urbpipe.watermark")
TABLE = "watermarks"
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


def mark_row(key: Key, mark: KeyMark, now: datetime) -> dict[str, Any]:
    """The ``watermarks`` row of one key (without ``batch_id``)."""
    ids = sorted(mark.gaps)
    return {"subscription": key[1], "destination": key[0],
            "watermark": to_time(mark.watermark), "landed_max": to_time(mark.landed_max),
            "held_by": mark.held_by, "open_gaps": len(ids), "gap_ids": ids,
            "gap_floors": [to_time(mark.gaps[g]) for g in ids], "computed_at": now}


def mark_of(row: Any) -> KeyMark:
    """A key's mark from its latest ``watermarks`` row."""
    floors = [to_us(f) for f in (row["gap_floors"] or [])]
    return KeyMark(to_us(row["landed_max"]), dict(zip(row["gap_ids"] or [], floors,
                                                      strict=True)))


def batch_commits(stats: Iterable[dict[str, Any]]) -> dict[Key, list[int | None]]:
    """Commit times (Unix µs) of the batch's landed transactions per key, from the state
    calls' metrics rows (no Spark job: the state function reports them)."""
    out: dict[Key, list[int | None]] = {}
    for row in stats:
        key = (str(row["destination"]), str(row["subscription"]))
        out.setdefault(key, []).extend(t[0] for t in row.get("times_us") or [])
    return out


class Watermarks:
    """Advances and records each key's watermark after the batch's other commits."""

    lap = "t_watermark_ms"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._marks: dict[Key, KeyMark] | None = None  # read back in the first batch
        self._path = table_path(settings, TABLE)
        self._files = data_files(settings, (TABLE,))

    def land(self, batch: LandedBatch) -> dict[str, int]:
        if self._marks is None:
            self._marks = restore(batch.session, self._settings, batch.batch_id)
        commits = batch_commits(batch.stats)
        gaps = last_transitions(batch.collect("gaps")) if batch.rows.get("gaps") else {}
        now = datetime.now(UTC)
        rows = []
        for key in sorted(set(commits) | set(gaps)):
            if not key[1]:
                continue  # the destination-wide key lands no transaction
            before = self._marks.get(key, KeyMark())
            after = advance(before, commits.get(key, ()), gaps.get(key, ()))
            if after != before:
                self._marks[key] = after
                rows.append(mark_row(key, after, now))
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
    """The marks as the table left them (each key's latest row), plus, on a lake whose
    watermarks were never written, the gaps open before this batch with an unknown floor:
    they hold the watermark until they end."""
    marks: dict[Key, KeyMark] = {}
    path = table_path(settings, TABLE)
    if has_rows(spark, path):
        latest = spark.sql(
            "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY destination, subscription "
            f"ORDER BY computed_at DESC, batch_id DESC) AS rn FROM delta.`{path}`) WHERE rn = 1")
        for row in latest.collect():
            marks[(row["destination"], row["subscription"])] = mark_of(row)
        return marks
    gaps = table_path(settings, "gaps")
    if not has_rows(spark, gaps):
        return marks
    rows = spark.sql(
        "SELECT destination, subscription, gap_id, state, kind FROM (SELECT *, row_number() "
        "OVER (PARTITION BY destination, subscription, gap_id ORDER BY batch_id DESC, seq DESC)"
        f" AS rn FROM delta.`{gaps}` WHERE batch_id < {int(batch_id)}) WHERE rn = 1 "
        "AND kind = 'tsnr' AND state IN ('open', 'requested')").collect()
    for row in rows:
        key = (row["destination"], row["subscription"])
        held = dict(marks.get(key, KeyMark()).gaps)
        held[row["gap_id"]] = None
        marks[key] = KeyMark(None, held)
    if marks:
        log.warning("watermarks: %d gap(s) open before the job kept watermarks hold them "
                    "unknown until they end", sum(len(m.gaps) for m in marks.values()))
    return marks


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
    """View name → (comment, query) of the watermark views, over ``schema.watermarks``."""
    schema = settings.catalog.schema_name
    latest = ("SELECT *, row_number() OVER (PARTITION BY destination, subscription ORDER BY "
              f"computed_at DESC, batch_id DESC) AS rn FROM `{schema}`.`{TABLE}`")
    out: dict[str, tuple[str, str]] = {}
    for sub in settings.subscriptions:
        dests = ", ".join(f"'{d}'" for d in sub.destinations)
        out[subscription_view(sub.name)] = (
            f"Consistency watermark of subscription {sub.name}: every transaction committed "
            f"at or before it has landed in every table from each of its destinations "
            f"({', '.join(sub.destinations)}), with no open gap before it; null until each "
            "destination has one.",
            f"SELECT '{sub.name}' AS subscription, CASE WHEN count(watermark) = "
            f"{len(sub.destinations)} THEN min(watermark) END AS watermark, "
            "max(landed_max) AS landed_max, concat_ws(',', collect_list(held_by)) AS held_by, "
            "max(computed_at) AS computed_at "
            f"FROM ({latest}) WHERE rn = 1 AND subscription = '{sub.name}' "
            f"AND destination IN ({dests})")
    parts = " UNION ALL ".join(f"SELECT * FROM `{schema}`.`{name}`" for name in out)
    out[ALL_VIEW] = (
        "Consistency watermark across every subscription of the conf: the earliest of theirs; "
        "null until each has one.",
        f"SELECT CASE WHEN count(watermark) = {len(settings.subscriptions)} THEN "
        "min(watermark) END AS watermark, max(computed_at) AS computed_at "
        f"FROM ({parts})")
    return out
