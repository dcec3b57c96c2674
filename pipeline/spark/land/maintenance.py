"""Delta maintenance of one table with delta-spark: compaction, vacuum, a log checkpoint.

The steps are delta-spark's own (``DeltaTable.optimize().executeCompaction()``,
``DeltaTable.vacuum``, ``DeltaLog.checkpoint``), so they commit like any writer and a
concurrent commit of the job is resolved by Delta's conflict check: the job's appends never
conflict with a compaction; a MERGE, DELETE or schema change that touches the files being
compacted makes the compaction fail (``ConcurrentModificationException``), and the caller
skips the table until the next run (:func:`is_conflict`). Compaction rewrites data files only
(``dataChange=false``): every row stays, and streaming readers of the table skip it.

Which retention VACUUM runs with is decided elsewhere (``pipeline.ops.maintain_plan``).
The running job compacts too when ``maintenance.every_minutes`` is set (``InJobMaintenance``,
a landing step): between batches, within a time budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pipeline.config import Settings
from pipeline.spark.land.batch_writer import LandedBatch
from pipeline.spark.land.log_peek import file_count
from pipeline.spark.land.tables import AUTO_COMPACT, properties_of, table_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("urbpipe.maintenance")

#: Delta's OPTIMIZE knobs: files smaller than the minimum are compacted into bins of about
#: the maximum.
_MIN_FILE = "spark.databricks.delta.optimize.minFileSize"
_MAX_FILE = "spark.databricks.delta.optimize.maxFileSize"
#: how many Spark tasks list a table's directories (VACUUM)
_LISTING = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
#: off: VACUUM honours the retention it is given (see ``vacuum``)
_HONOUR_RETENTION = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"


def is_table(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def auto_compacted(spark: SparkSession, path: str) -> bool:
    """Whether Delta compacts the table itself after the job's writes
    (``delta.autoOptimize.autoCompact``). A second compactor on such a table could lose the
    race to the first; when the job's auto compaction loses, its post-commit hook throws and
    fails the job's batch (delta-spark 4.4 ``AutoCompactBase.compactIfNecessary`` rethrows)."""
    return properties_of(spark, path).get(AUTO_COMPACT) == "true"


def table_files(spark: SparkSession, settings: Settings, path: str) -> tuple[int, int]:
    """(data files, bytes) of the table's newest version (its Delta log, no data read):
    delta-rs's reading (milliseconds), else Spark's (DESCRIBE DETAIL: ~0.5-1 s a table)."""
    from delta.tables import DeltaTable

    counted = file_count(settings, path)
    if counted is not None:
        return counted
    detail = DeltaTable.forPath(spark, path).detail().select("numFiles", "sizeInBytes").first()
    assert detail is not None
    return int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0)


def log_commits(spark: SparkSession, path: str) -> int:
    """Commit files (``*.json``) in the table's ``_delta_log``: what Delta lists at every
    commit (``pipeline.spark.land.log_growth``). One listing of the folder, no file read."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pattern = jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}/_delta_log/*.json")
    found = pattern.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).globStatus(
        pattern)
    return 0 if found is None else len(found)


def compact(spark: SparkSession, path: str, target_bytes: int) -> None:
    """Bin-pack the files smaller than ``target_bytes`` into files of about that size (the
    session's OPTIMIZE settings are set for the call and put back)."""
    from delta.tables import DeltaTable

    with _session_conf(spark, {_MIN_FILE: str(target_bytes), _MAX_FILE: str(target_bytes)}):
        DeltaTable.forPath(spark, path).optimize().executeCompaction()


def vacuum(spark: SparkSession, path: str, retention_hours: int) -> None:
    """Delete the files no version within ``retention_hours`` references and older than it.
    The caller guarantees the retention is at least Delta's (its check stays on).

    Why the listing parallelism is set: VACUUM lists the table's directories in Spark tasks,
    as many as ``spark.sql.sources.parallelPartitionDiscovery.parallelism`` (default 10,000,
    delta-spark ``VacuumCommand``). Each of its listing stages then runs 10,000 tasks however
    small the table: on a 2-core driver a 36-file table takes 60-70 s to vacuum that way, 10 s
    with the cores' count. A few tasks per core keeps a big lake's listing parallel.

    Why the retention switch: delta-spark 4.4 ignores VACUUM's retention argument (anything
    but 0 hours) and deletes by the table's ``delta.deletedFileRetentionDuration`` instead
    (``spark.databricks.delta.vacuum.retentionWindowIgnore.enabled``, on by default; it only
    logs a warning). Our retention is never shorter than that property but may be longer
    (``maintenance.vacuum_retention_hours``, ``commit_wait_hours``): ignored, a direct-writer
    file still waiting for its commit could be deleted."""
    from delta.tables import DeltaTable

    tasks = max(2, 4 * spark.sparkContext.defaultParallelism)
    with _session_conf(spark, {_LISTING: str(min(tasks, 10_000)), _HONOUR_RETENTION: "false"}):
        DeltaTable.forPath(spark, path).vacuum(float(retention_hours))


@contextmanager
def _session_conf(spark: SparkSession, values: dict[str, str]) -> Iterator[None]:
    """The session's settings ``values`` for the block, the former ones put back after."""
    saved = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


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


class Rounds:
    """Which table the running job compacts next: every ``every_s`` a round over all
    ``tables`` in order, spread over as many batches as it takes. Engine-free (the clock is
    the caller's), one per job."""

    def __init__(self, tables: Sequence[str], every_s: float, now: float) -> None:
        self._tables = tuple(tables)
        self._every_s = every_s
        self._due = now + every_s  # not at start: the job's first batches catch up
        self._pending: list[str] = []
        self.round_started: float | None = None

    def next_table(self, now: float) -> str | None:
        """The next table of the running round; a new round when one is due."""
        if not self._pending and now >= self._due:
            self._pending = list(self._tables)
            self._due = now + self._every_s
            self.round_started = now
        return self._pending.pop(0) if self._pending else None

    def finish(self, now: float) -> float | None:
        """Seconds the round took, once, when its last table is done; else None."""
        if self.round_started is None or self._pending:
            return None
        seconds, self.round_started = now - self.round_started, None
        return seconds


class InJobMaintenance:
    """Landing step, before the batch's report: compacts the job's tables between batches
    (``maintenance.every_minutes``), never longer than ``max_pause_seconds`` per batch plus
    the table it is on when the budget runs out. Runs on the job's own driver, after the
    batch's commits: no write of the job runs beside it; a commit from outside (``urbpipe
    maintain``, an analyst's DELETE) that wins the race skips that table until the next round
    (logged, ``maint_skipped``), and no error of it fails the query. Tables Delta compacts
    itself are left out (``auto_compacted``). Reports per batch, in the batch's counts (the
    metrics JSON lines and Prometheus): ``files:<table>`` after compacting it,
    ``maint_compacted``, ``maint_skipped``, and at a round's end ``maint_round_ms`` and
    ``maint_last_round_at`` (Unix seconds)."""

    lap = "t_maintain_ms"

    def __init__(self, settings: Settings, tables: Sequence[str],
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        conf = settings.maintenance
        assert conf.every_minutes is not None, "in-job maintenance is off"
        self._settings = settings
        self._clock, self._wall = clock, wall
        self._rounds = Rounds(tables, conf.every_minutes * 60, clock())
        self._budget_s = conf.max_pause_seconds
        self._target = conf.target_file_bytes

    def land(self, batch: LandedBatch) -> dict[str, int]:
        spark = batch.session
        started = self._clock()
        counts = {"maint_compacted": 0, "maint_skipped": 0}
        while self._clock() - started < self._budget_s:
            table = self._rounds.next_table(self._clock())
            if table is None:
                break
            self._compact(spark, table, counts)
            seconds = self._rounds.finish(self._clock())
            if seconds is not None:  # at most one round per batch, however short the interval
                counts["maint_round_ms"] = int(seconds * 1000)
                counts["maint_last_round_at"] = int(self._wall())
                log.info("maintenance round done in %.1f s", seconds)
                break
        return counts

    def _compact(self, spark: SparkSession, table: str, counts: dict[str, int]) -> None:
        path = table_path(self._settings, table)
        try:
            if not is_table(spark, path) or auto_compacted(spark, path):
                return
            compact(spark, path, self._target)
            counts[f"files:{table}"] = table_files(spark, self._settings, path)[0]
            counts["maint_compacted"] += 1
        except Exception as exc:  # never fail the query over maintenance
            counts["maint_skipped"] += 1
            kind = "a concurrent commit won" if is_conflict(exc) else "an error"
            log.warning("maintenance of %s skipped until the next round (%s): %s",
                        table, kind, str(exc).splitlines()[0] if str(exc) else type(exc))
