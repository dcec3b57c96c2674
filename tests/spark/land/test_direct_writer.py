"""The direct writer with real Spark and Delta: files the tasks wrote, committed by the driver.

What must hold: the committed rows read back exactly (Spark SQL and the ``deltalake`` package),
the statistics equal the ones delta-spark writes for the same rows (no wrong data skipping),
a replayed batch lands once (from the ledger, or from the table's own SetTransaction when the
log cannot tell) and its new files are deleted, and a restart may switch between the direct
writer and Spark appends without losing or doubling a batch.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.reassembly.events import ImageOut, RecordOut, TransactionComplete
from pipeline.reassembly.tables import events_to_rows, events_to_tables
from pipeline.spark.land.committer import DeltaCommitter
from pipeline.spark.land.datafiles import FILES_TABLE, DataFiles
from pipeline.spark.land.ledger import CommitLedger
from pipeline.spark.land.tables import DIRECT_TABLES, SCHEMAS
from pipeline.spark.land.writes import write_once

NOW_MS = 1_750_000_000_000
STCK = 0xDD5D_1234_5678_9000


def txn(tsnr: int, sub: str = "COLOR") -> TransactionComplete:
    recs = tuple(RecordOut(r, 4, 1000 + tsnr * 10 + r, "U", False, 0, 0, STCK + (r << 12), 2)
                 for r in (1, 2))
    imgs = tuple(ImageOut(r, d, "BA"[d - 1], f"{tsnr}/{r}/{d}".encode()) for r in (1, 2)
                 for d in (1, 2))
    return TransactionComplete(
        subscription=sub, destination="OUT1", epoch=1, tsnr=tsnr, dbid=10, record_count=2,
        commit_time=STCK + (tsnr << 12), processed_time=STCK, sent_time=0, initial_state=False,
        resent=False, possibly_resent=False, origin="live", token="TOK", topic="t",
        first_partition=0, first_offset=tsnr, last_partition=0, last_offset=tsnr, acode=37,
        wcode=0, arc=0, records=recs, images=imgs, at_ms=NOW_MS)


def create_tables(spark, lake: Path) -> dict[str, str]:
    from pyspark.sql.types import StructType

    paths = {t: str(lake / t) for t in DIRECT_TABLES}
    for table, path in paths.items():
        (spark.createDataFrame([], StructType.fromDDL(f"{SCHEMAS[table]}, batch_id bigint"))
         .write.format("delta").option("delta.dataSkippingNumIndexedCols", "8").save(path))
    return paths


def write_batch(paths: dict[str, str], events: list, batch_id: int) -> dict[str, list[dict]]:
    """What the state tasks do for one batch: the files per table."""
    files = DataFiles(paths=paths, stats_columns=8, mirror_subscriptions=frozenset(),
                      mirror_statuses=frozenset())
    rows, cols = events_to_tables(events, NOW_MS)
    by_table: dict[str, list[dict]] = {}
    for f in files.split(rows, cols, batch_id)[FILES_TABLE]:
        by_table.setdefault(f["table"], []).append(f)
    return by_table


def commit_batch(spark, paths, files, app_id: str, batch_id: int, ledger) -> list[bool]:
    committer = DeltaCommitter(spark)
    return [committer.commit(paths[t], found, f"{app_id}-{t}", batch_id, ledger)
            for t, found in files.items()]


def rows_of(spark, path: str) -> list[dict]:
    df = spark.read.format("delta").load(path).drop("batch_id")
    return sorted((r.asDict() for r in df.collect()), key=lambda r: json.dumps(r, default=str))


def test_committed_files_read_back_in_spark_and_deltalake(spark, tmp_path: Path) -> None:
    import deltalake

    paths = create_tables(spark, tmp_path)
    events = [txn(1), txn(2, "EMPL")]
    ledger = CommitLedger(spark, "app")
    assert commit_batch(spark, paths, write_batch(paths, events, 0), "app", 0, ledger) == [
        True, True, True]
    want = events_to_rows(events, NOW_MS)
    for table in ("transactions", "records", "images"):
        got = spark.read.format("delta").load(paths[table])
        assert got.schema.simpleString() == (
            "struct<" + ",".join(f"{c.strip().split(' ')[0]}:{c.strip().split(' ')[1]}"
                                 for c in f"{SCHEMAS[table]}, batch_id bigint".split(",")) + ">")
        assert got.count() == len(want[table])
        assert deltalake.DeltaTable(paths[table]).to_pyarrow_table().num_rows == len(want[table])
    spark_rows = rows_of(spark, paths["records"])
    expected = sorted(({**r, "record_time": r["record_time"].replace(tzinfo=None)}
                       for r in want["records"]), key=lambda r: json.dumps(r, default=str))
    assert [{**r, "record_time": r["record_time"]} for r in spark_rows] == expected
    history = spark.sql(f"DESCRIBE HISTORY delta.`{paths['images']}`").collect()
    assert history[0]["operation"] == "STREAMING UPDATE"
    assert history[0]["userMetadata"] == ledger.tag(0)


def test_statistics_equal_delta_s_own(spark, tmp_path: Path) -> None:
    """The same rows through delta-spark: every min/max/nullCount we write is Delta's."""
    from pyspark.sql.types import StructType

    paths = create_tables(spark, tmp_path / "direct")
    events = [txn(t, sub) for t, sub in ((3, "COLOR"), (9, "EMPL"), (4, "COLOR"))]
    commit_batch(spark, paths, write_batch(paths, events, 0), "app", 0,
                 CommitLedger(spark, "app"))
    want = events_to_rows(events, NOW_MS)
    for table in ("transactions", "records", "images"):
        theirs_path = str(tmp_path / "spark" / table)
        (spark.createDataFrame([{**r, "batch_id": 0} for r in want[table]],
                               StructType.fromDDL(f"{SCHEMAS[table]}, batch_id bigint"))
         .coalesce(1).write.format("delta").option("delta.dataSkippingNumIndexedCols", "8")
         .save(theirs_path))
        ours, theirs = _stats(paths[table]), _stats(theirs_path)
        assert ours["numRecords"] == theirs["numRecords"] == len(want[table])
        assert ours["nullCount"] == theirs["nullCount"]
        for bound in ("minValues", "maxValues"):
            assert ours[bound], (table, bound)  # ints and short strings are there
            assert {k: theirs[bound][k] for k in ours[bound]} == ours[bound], (table, bound)


def _stats(path: str) -> dict:
    adds = [json.loads(line)["add"] for f in sorted((Path(path) / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines() if line.startswith('{"add"')]
    assert len(adds) == 1
    return json.loads(adds[0]["stats"])


def test_a_replayed_batch_lands_once_and_its_files_go_when_the_caller_says(spark,
                                                                          tmp_path: Path) -> None:
    """The replay's files stay until the batch is done: the direct typed writer reads the
    batch's rows from them when the raw commits were skipped (a kill between the raw and the
    typed commits); the batch writer then deletes them (``LandedBatch.on_done``)."""
    paths = create_tables(spark, tmp_path)
    ledger = CommitLedger(spark, "app")
    first = write_batch(paths, [txn(1)], 0)
    assert all(commit_batch(spark, paths, first, "app", 0, ledger))
    replay = write_batch(paths, [txn(1)], 0)  # after a crash: the same rows, new files
    assert not any(commit_batch(spark, paths, replay, "app", 0, CommitLedger(spark, "app")))
    for table, found in replay.items():
        assert all((Path(paths[table]) / f["path"]).exists() for f in found)
        DeltaCommitter(spark).delete(paths[table], (f["path"] for f in found))
        assert not any((Path(paths[table]) / f["path"]).exists() for f in found)
        assert all((Path(paths[table]) / f["path"]).exists() for f in first[table])
    assert spark.read.format("delta").load(paths["images"]).count() == 4


def test_when_the_log_cannot_tell_the_table_s_own_txn_decides(spark, tmp_path: Path) -> None:
    class Blind(CommitLedger):
        def landed(self, table_path: str, batch_id: int) -> bool | None:
            return None

    paths = create_tables(spark, tmp_path)
    blind = Blind(spark, "app")
    assert all(commit_batch(spark, paths, write_batch(paths, [txn(1)], 0), "app", 0, blind))
    assert not any(commit_batch(spark, paths, write_batch(paths, [txn(1)], 0), "app", 0,
                                blind))
    assert all(commit_batch(spark, paths, write_batch(paths, [txn(2)], 1), "app", 1, blind))
    assert spark.read.format("delta").load(paths["transactions"]).count() == 2


def test_a_restart_may_switch_writers(spark, tmp_path: Path) -> None:
    """Batch 0 by Spark appends, replayed by the direct writer; batch 1 the other way."""
    paths = create_tables(spark, tmp_path)
    ledger = CommitLedger(spark, "app")

    def spark_append(events: list, batch_id: int) -> None:
        for table, rows in events_to_rows(events, NOW_MS).items():
            if table in ("transactions", "records", "images"):
                frame = spark.createDataFrame([{**r, "batch_id": batch_id} for r in rows],
                                              f"{SCHEMAS[table]}, batch_id bigint")
                write_once(frame, paths[table], f"app-{table}", batch_id, ledger)

    spark_append([txn(1)], 0)
    assert not any(commit_batch(spark, paths, write_batch(paths, [txn(1)], 0), "app", 0,
                                ledger))
    assert all(commit_batch(spark, paths, write_batch(paths, [txn(2)], 1), "app", 1, ledger))
    spark_append([txn(2)], 1)
    assert sorted(r["tsnr"] for r in spark.read.format("delta").load(paths["transactions"])
                  .collect()) == [1, 2]
