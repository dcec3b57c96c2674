"""Reading the lake without Spark, and the Spark checkpoint's offsets files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.errors import LakeUnreachable
from pipeline.ops.checkpoint import parse_offsets_file, processed_offsets
from pipeline.ops.lake import Lake
from pipeline.spark.land.tables import SCHEMAS, arrow_schema, ddl_arrow_schema
from tests.unit.ops.conftest import WriteTable, transaction

# What Spark 4 writes to <checkpoint>/offsets/<batchId> for one Kafka source.
OFFSETS_V1 = "\n".join([
    "v1",
    json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1740830400000,
                "conf": {"spark.sql.shuffle.partitions": "2"}}),
    json.dumps({"urb.out1": {"1": 282, "0": 3}, "urb.replies": {"0": 3, "1": 0}}),
])


def write_checkpoint(root: Path, batches: dict[int, dict], committed: set[int]) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(parents=True, exist_ok=True)
    for batch, offsets in batches.items():
        meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1000 + batch, "conf": {}})
        (root / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{json.dumps(offsets)}")
        (root / "offsets" / f".{batch}.crc").write_text("crc")
        if batch in committed:
            (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_every_job_schema_converts_to_arrow() -> None:
    for table in SCHEMAS:
        schema = arrow_schema(table)
        assert schema.names[-1] == "batch_id"
        assert len(schema) == len(SCHEMAS[table].split(",")) + 1


def test_unknown_column_type_is_refused() -> None:
    with pytest.raises(KeyError):
        ddl_arrow_schema("a decimal, b int")


def test_missing_table_reads_empty_and_empty_lake_is_unreachable(
        ops_settings: Settings) -> None:
    lake = Lake(ops_settings)
    assert lake.read("gaps", ["gap_id", "state"]).num_rows == 0
    with pytest.raises(LakeUnreachable, match="no Delta tables"):
        lake.require()


def test_read_projects_columns(ops_settings: Settings, write_table: WriteTable) -> None:
    write_table("transactions", [transaction("COLOR", 1), transaction("COLOR", 2)])
    lake = Lake(ops_settings)
    lake.require()
    data = lake.read("transactions", ["tsnr"])
    assert data.column_names == ["tsnr"]
    assert sorted(data["tsnr"].to_pylist()) == [1, 2]


def test_parse_offsets_file_as_spark_writes_it() -> None:
    stamp, offsets = parse_offsets_file(OFFSETS_V1)
    assert stamp == 1740830400000
    assert offsets == {"urb.out1": {0: 3, 1: 282}, "urb.replies": {0: 3, 1: 0}}


def test_parse_offsets_skips_sources_without_offsets() -> None:
    _, offsets = parse_offsets_file("v1\n{}\n-\n" + json.dumps({"t": {"0": 5}}))
    assert offsets == {"t": {0: 5}}
    with pytest.raises(ValueError):
        parse_offsets_file("v9\n{}\n")


def test_processed_offsets_is_the_newest_committed_batch(tmp_path: Path) -> None:
    root = tmp_path / "cp"
    write_checkpoint(root, {3: {"t": {"0": 10}}, 4: {"t": {"0": 20}}, 5: {"t": {"0": 30}}},
                     committed={3, 4})
    done = processed_offsets(str(root))
    assert done is not None
    assert (done.batch_id, done.offsets, done.batch_timestamp_ms) == (4, {"t": {0: 20}}, 1004)


def test_processed_offsets_none_without_checkpoint_or_remote(tmp_path: Path) -> None:
    assert processed_offsets(str(tmp_path / "nothing")) is None
    assert processed_offsets("s3a://bucket/checkpoints") is None
