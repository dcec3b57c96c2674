"""``urbpipe maintain`` on a small lake, in-process with the session's Spark: every row stays,
the small files are compacted, the log is checkpointed, and VACUUM deletes an old unreferenced
file but not a young one (a direct-writer file whose batch has not committed yet)."""

from __future__ import annotations

import contextlib
import io
import os
import time
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.ops.cli import main
from pipeline.spark.land.tables import ensure_tables, table_path

TABLES = ("transactions", "records", "gaps")  # gaps: Delta auto-compacts it
APPENDS = 6
DAY = 24 * 3600
RETENTION_H = 240  # the run's: longer than the tables' delta.deletedFileRetentionDuration


def _append(spark, path: str, start: int) -> None:
    (spark.range(start, start + 5).coalesce(1)
     .selectExpr("'COLOR' AS subscription", "'OUT1' AS destination", "CAST(1 AS INT) AS epoch",
                 "id AS batch_id")
     .write.format("delta").mode("append").save(path))


def _contents(spark, path: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())


def _stray(folder: Path, name: str, age_s: float) -> Path:
    """A Parquet file in no Delta log, as a task's file of a batch not committed (yet)."""
    file = folder / name
    file.write_bytes(b"PAR1 not committed PAR1")
    then = time.time() - age_s
    os.utime(file, (then, then))
    return file


@pytest.fixture(scope="module")
def maintained(spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    lake = tmp_path_factory.mktemp("maintain") / "lake"
    settings = test_settings.model_copy(update={"stream": test_settings.stream.model_copy(
        update={"lake_dir": str(lake)})})
    ensure_tables(spark, settings)
    for table in TABLES:
        for n in range(APPENDS):
            _append(spark, table_path(settings, table), n * 5)
    before = {t: _contents(spark, table_path(settings, t)) for t in TABLES}
    folder = Path(table_path(settings, "transactions"))
    young = _stray(folder, "part-young-c000.snappy.parquet", 3600)
    # older than the tables' deleted-file retention (7 days), younger than the run's (10)
    kept = _stray(folder, "part-nine-days-c000.snappy.parquet", 9 * DAY)
    old = _stray(folder, "part-old-c000.snappy.parquet", 11 * DAY)
    mp = pytest.MonkeyPatch()
    mp.setenv("URBPIPE__STREAM__LAKE_DIR", str(lake))
    mp.setenv("URBPIPE__MAINTENANCE__VACUUM_RETENTION_HOURS", str(RETENTION_H))
    out = io.StringIO()
    spark.sparkContext.setJobGroup("maintain", "urbpipe maintain")
    try:
        with contextlib.redirect_stdout(out):
            code = main(["maintain", "--conf-file", "conf/test.yaml",
                         "--tables", ",".join(TABLES)])
    finally:
        mp.undo()
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
    return settings, before, code, out.getvalue().splitlines(), young, old, kept


def test_vacuum_lists_with_a_few_tasks_per_core_not_ten_thousand(spark, maintained) -> None:
    """Spark's default listing parallelism (10,000 tasks per stage) made a small table's
    VACUUM take a minute on 2 cores; the setting is the call's only."""
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(stage) for job in tracker.getJobIdsForGroup("maintain")
              for stage in tracker.getJobInfo(job).stageIds]
    assert stages, "the maintain run's Spark jobs are in its job group"
    assert max(s.numTasks for s in stages if s) <= 4 * spark.sparkContext.defaultParallelism
    assert spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.parallelism") == "10000"


def test_every_row_stays(spark, maintained) -> None:
    settings, before, code, *_ = maintained
    assert code == 0
    assert all(len(rows) == APPENDS * 5 for rows in before.values())
    assert {t: _contents(spark, table_path(settings, t)) for t in TABLES} == before


def test_small_files_are_compacted_and_the_log_checkpointed(spark, maintained) -> None:
    from delta.tables import DeltaTable

    settings = maintained[0]
    for table in TABLES:
        path = table_path(settings, table)
        files = DeltaTable.forPath(spark, path).detail().first()["numFiles"]
        # gaps: Delta's auto compaction is its compactor (not yet due at 6 files), never two
        assert files == (APPENDS if table == "gaps" else 1), table
        last = DeltaTable.forPath(spark, path).history(1).first()["version"]
        assert (Path(path) / "_delta_log" / f"{last:020d}.checkpoint.parquet").exists()


def test_vacuum_spares_a_young_unreferenced_file_and_deletes_an_old_one(maintained) -> None:
    young, old, kept = maintained[4:]
    assert young.exists(), "a file younger than the retention may still be committed"
    assert not old.exists()
    # delta-spark 4.4 ignores VACUUM's retention argument unless told not to, and deleted by
    # the table's 7 days
    assert kept.exists(), "VACUUM used the table's retention, not the run's"


def test_progress_then_the_summary_with_files_before_and_after(maintained) -> None:
    lines = maintained[3]
    assert lines[0] == (f"maintaining 3 tables, target file size 128.0 MB, vacuum retention "
                        f"{RETENTION_H} h")
    assert lines[1] == "[1/3] transactions: …"
    assert lines[2].startswith(f"[1/3] transactions: {APPENDS} → 1 files, ")
    assert lines[-4].startswith(f"transactions: {APPENDS} → 1 files, ")
    assert lines[-3].startswith(f"records: {APPENDS} → 1 files, ")
    assert lines[-2].startswith(f"gaps: {APPENDS} → {APPENDS} files, ")
    assert lines[-2].endswith("; compaction left to Delta's auto compaction")
    assert lines[-1].startswith("maintained 3 of 3 tables in ")
    assert lines[-1].endswith(f": {3 * APPENDS} → {APPENDS + 2} files")


def test_the_running_jobs_step_compacts_between_batches(spark, test_settings: Settings,
                                                        tmp_path: Path) -> None:
    """InJobMaintenance (maintenance.every_minutes) as the batch writer runs it: the direct
    writer's tables compacted, every row kept, the auto-compacted ones left to Delta."""
    from types import SimpleNamespace

    from pipeline.spark.land.maintenance import InJobMaintenance

    settings = test_settings.model_copy(update={
        "stream": test_settings.stream.model_copy(update={"lake_dir": str(tmp_path / "lake")}),
        "maintenance": test_settings.maintenance.model_copy(update={"every_minutes": 1e-6})})
    ensure_tables(spark, settings)
    for table in ("transactions", "gaps"):
        for n in range(3):
            _append(spark, table_path(settings, table), n * 5)
    before = _contents(spark, table_path(settings, "transactions"))
    step = InJobMaintenance(settings, ["transactions", "gaps"])
    time.sleep(0.01)  # the first round is due one interval after the start
    counts = step.land(SimpleNamespace(session=spark))  # type: ignore[arg-type]
    assert counts["files:transactions"] == 1 and "files:gaps" not in counts
    assert counts["maint_compacted"] == 1 and counts["maint_skipped"] == 0
    assert counts["maint_round_ms"] >= 0
    assert _contents(spark, table_path(settings, "transactions")) == before


def test_the_file_watch_alerts_on_a_table_whose_files_pile_up(
        spark, test_settings: Settings, tmp_path: Path) -> None:
    """FileWatch (maintenance.watch_minutes/alert_files) as the batch writer runs it: counts
    from the Delta log, one warning alert for the table over the limit, in the alerts table
    and sent; not again the same day."""
    import json
    from types import SimpleNamespace

    from pipeline.spark.land.file_watch import FileWatch

    settings = test_settings.model_copy(update={
        "stream": test_settings.stream.model_copy(update={"lake_dir": str(tmp_path / "lake")}),
        "maintenance": test_settings.maintenance.model_copy(
            update={"watch_minutes": 1e-6, "alert_files": 2})})
    ensure_tables(spark, settings)
    for n in range(3):
        _append(spark, table_path(settings, "transactions"), n * 5)
    _append(spark, table_path(settings, "records"), 0)
    sent: list[dict] = []
    step = FileWatch(settings, ["transactions", "records", "images"], send=sent.extend)
    batch = SimpleNamespace(session=spark, app_id="watch-test", batch_id=7)
    time.sleep(0.01)  # the first count is due one interval after the start
    counts = step.land(batch)  # type: ignore[arg-type]
    logs = {k: counts.pop(k) for k in list(counts) if k.startswith("log:")}
    assert counts == {"files:transactions": 3, "files:records": 1, "files:images": 0,
                      "file_alerts": 1}
    made = logs["log:images"]  # the commits that made the table, then one per append
    assert made >= 1 and logs == {"log:transactions": made + 3, "log:records": made + 1,
                                  "log:images": made}
    assert [(a["kind"], a["severity"], a["details"]) for a in sent] == [
        ("table_files_high", "warning", {"table": "transactions", "files": 3, "limit": 2})]
    landed = spark.read.format("delta").load(table_path(settings, "alerts")).collect()
    assert [(r.idempotency_key, r.batch_id) for r in landed] == [
        (sent[0]["idempotency_key"], 7)]
    assert json.loads(landed[0].details)["files"] == 3
    time.sleep(0.01)
    assert step.land(batch)["file_alerts"] == 0  # type: ignore[arg-type]
    assert len(sent) == 1, "once per table and day"
