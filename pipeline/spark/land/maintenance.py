"""Delta maintenance of one table with delta-spark: compaction, vacuum, a log checkpoint.

The steps are delta-spark's own (``DeltaTable.optimize().executeCompaction()``,
``DeltaTable.vacuum``, ``DeltaLog.checkpoint``), so they commit like any writer and a
concurrent commit of the job is resolved by Delta's conflict check: the job's appends never
conflict with a compaction; a MERGE, DELETE or schema change that touches the files being
compacted makes the compaction fail (``ConcurrentModificationException``), and the caller
skips the table until the next run (:func:`is_conflict`). Compaction rewrites data files only
(``dataChange=false``): every row stays, and streaming readers of the table skip it.

Which retention VACUUM runs with is decided elsewhere (``pipeline.ops.maintain_plan``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.spark.land.tables import AUTO_COMPACT, properties_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Delta's OPTIMIZE knobs: files smaller than the minimum are compacted into bins of about
#: the maximum.
_MIN_FILE = "spark.databricks.delta.optimize.minFileSize"
_MAX_FILE = "spark.databricks.delta.optimize.maxFileSize"


def is_table(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def auto_compacted(spark: SparkSession, path: str) -> bool:
    """Whether Delta compacts the table itself after the job's writes
    (``delta.autoOptimize.autoCompact``). A second compactor on such a table could lose the
    race to the first; when the job's auto compaction loses, its post-commit hook throws and
    fails the job's batch (delta-spark 4.4 ``AutoCompactBase.compactIfNecessary`` rethrows)."""
    return properties_of(spark, path).get(AUTO_COMPACT) == "true"


def table_files(spark: SparkSession, path: str) -> tuple[int, int]:
    """(data files, bytes) of the table's newest version (its Delta log, no data read)."""
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().select("numFiles", "sizeInBytes").first()
    assert detail is not None
    return int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0)


def compact(spark: SparkSession, path: str, target_bytes: int) -> None:
    """Bin-pack the files smaller than ``target_bytes`` into files of about that size (the
    session's OPTIMIZE settings are set for the call and put back)."""
    from delta.tables import DeltaTable

    saved = {key: spark.conf.get(key, None) for key in (_MIN_FILE, _MAX_FILE)}
    spark.conf.set(_MIN_FILE, str(target_bytes))
    spark.conf.set(_MAX_FILE, str(target_bytes))
    try:
        DeltaTable.forPath(spark, path).optimize().executeCompaction()
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def vacuum(spark: SparkSession, path: str, retention_hours: int) -> None:
    """Delete the files no version within ``retention_hours`` references and older than it.
    The caller guarantees the retention is at least Delta's (its check stays on)."""
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, path).vacuum(float(retention_hours))


def checkpoint(spark: SparkSession, path: str) -> None:
    """Write a checkpoint of the table's newest version, so a reader (and the job's next
    start) replays no JSON commits (compaction and vacuum added some), and delete the log
    entries older than ``delta.logRetentionDuration`` as Delta's own checkpoints do."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    none = jvm.scala.Option.empty()
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    log.checkpointAndCleanUpDeltaLog(log.update(False, none, none), none)


def is_conflict(exc: BaseException) -> bool:
    """A concurrent commit won (Delta's ``ConcurrentModificationException`` family, as
    delta-spark's Python exceptions or the JVM's): skip the table until the next run."""
    text = f"{type(exc).__name__}: {exc}"
    return "Concurrent" in text or "DELTA_CONCURRENT" in text
