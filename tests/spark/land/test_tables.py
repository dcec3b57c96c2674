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
