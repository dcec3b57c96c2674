"""The job's own tables: created with the conf's Delta properties, kept current on restart."""

from __future__ import annotations

from pathlib import Path


def test_tables_get_the_conf_properties_and_keep_them_current(spark, test_settings,
                                                              tmp_path: Path) -> None:
    """stream.delta_* (checkpoint interval, statistics, retentions, auto compaction off for
    the direct writer's tables) land on new tables, and a
    changed conf updates existing ones (one ALTER, nothing when they already match)."""
    from pipeline.spark.land.tables import DIRECT_TABLES, SCHEMAS, ensure_tables, table_path

    def props(settings, table: str) -> dict:
        from delta.tables import DeltaTable

        detail = DeltaTable.forPath(spark, table_path(settings, table)).detail().collect()[0]
        return {k: v for k, v in detail["properties"].items() if k.startswith("delta.")}

    stream = test_settings.stream.model_copy(update={"lake_dir": str(tmp_path / "lake")})
    first = test_settings.model_copy(update={"stream": stream})
    ensure_tables(spark, first)
    assert all(props(first, t) == {"delta.checkpointInterval": "50",
                                   "delta.dataSkippingNumIndexedCols": "8",
                                   "delta.logRetentionDuration": "interval 30 days",
                                   "delta.deletedFileRetentionDuration": "interval 7 days",
                                   "delta.autoOptimize.autoCompact":
                                       "false" if t in DIRECT_TABLES else "true"}
               for t in SCHEMAS)
    changed = first.model_copy(update={"stream": stream.model_copy(
        update={"delta_checkpoint_interval": 20})})
    ensure_tables(spark, changed)
    ensure_tables(spark, changed)  # nothing left to change: no commit
    assert props(changed, "transactions")["delta.checkpointInterval"] == "20"
    log = Path(table_path(changed, "transactions")) / "_delta_log"
    assert len(list(log.glob("*.json"))) == 2  # the create, one ALTER


def test_delta_rs_reads_every_table_as_spark_does(spark, tmp_path: Path) -> None:
    """A start decides what to change from what delta-rs reads (``log_peek``): for every
    table the job makes, raw and typed, the same columns, types, comments and properties as
    Spark reads; a table that is not there is None to both."""
    from pipeline.spark.land.log_peek import by_delta_rs, by_spark
    from pipeline.spark.land.tables import SENT_TABLE, ensure_tables, table_path
    from pipeline.spark.typed.tables import TypedTableSet, job_tables
    from tests.e2e.scenario import scenario_settings

    settings, _ = scenario_settings(tmp_path, "peek", layouts=True, make_topics=lambda s: None)
    ensure_tables(spark, settings)
    TypedTableSet(settings).ensure(spark)
    tables = [t for t in job_tables(settings) if t != SENT_TABLE]  # made by the first send
    assert any(t.startswith("current_") for t in tables), tables
    for table in tables:
        path = table_path(settings, table)
        known, fast = by_delta_rs(settings, path)
        slow = by_spark(spark, path)
        assert known and fast is not None and slow is not None, table
        assert fast.schema == slow.schema, table
        assert all(c.metadata.get("comment") for c in fast.schema.fields), table
        assert dict(fast.properties) == {k: v for k, v in slow.properties.items()
                                         if k in fast.properties}, table
        assert {k: v for k, v in slow.properties.items()
                if not k.startswith(("delta.minReader", "delta.minWriter", "delta.feature."))
                } == dict(fast.properties), table
    missing = table_path(settings, "no_such_table")
    assert by_delta_rs(settings, missing) == (True, None) and by_spark(spark, missing) is None


def test_delta_rs_counts_a_tables_files_as_spark_does(spark, test_settings,
                                                      tmp_path: Path) -> None:
    """``urbpipe maintain``'s and the file watch's counts (``file_count``, delta-rs) are
    DESCRIBE DETAIL's, also after a compaction removed files from the newest version."""
    from delta.tables import DeltaTable

    from pipeline.spark.land.log_peek import file_count

    path = str(tmp_path / "counted")
    for n in (3, 5, 7):
        spark.range(n).repartition(2).write.format("delta").mode("append").save(path)

    def spark_count() -> tuple[int, int]:
        d = DeltaTable.forPath(spark, path).detail().first()
        return int(d["numFiles"]), int(d["sizeInBytes"])

    before = file_count(test_settings, path)
    assert before == spark_count() and before[0] >= 4, before
    DeltaTable.forPath(spark, path).optimize().executeCompaction()
    assert file_count(test_settings, path) == spark_count() == (1, spark_count()[1])
    assert file_count(test_settings, str(tmp_path / "none")) is None
