"""The direct writer's task side without Spark: files, statistics, mirrors, which writer."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import Settings
from pipeline.reassembly.events import ImageOut, RecordOut, StatusReceived, TransactionComplete
from pipeline.reassembly.tables import (
    IMAGE_COLUMNS,
    RECORD_COLUMNS,
    TRANSACTION_COLUMNS,
    TRANSACTION_TABLES,
    events_to_rows,
    events_to_tables,
)
from pipeline.spark.land.datafiles import FILES_TABLE, DataFiles, delta_stats, writer_mode
from pipeline.spark.land.tables import DIRECT_TABLES, SCHEMAS, arrow_schema

NOW_MS = 1_750_000_000_000
STCK = 0xDD5D_0000_0000_0000  # some 2020s TOD clock value


def txn(sub: str, tsnr: int, records: int = 2) -> TransactionComplete:
    recs = tuple(RecordOut(r, 4, 100 + r, "U", False, 0, 0, STCK + r, 2) for r in
                 range(1, records + 1))
    imgs = tuple(ImageOut(r, d, "BA"[d - 1], bytes([r, d]) * 3) for r in range(1, records + 1)
                 for d in (1, 2))
    return TransactionComplete(
        subscription=sub, destination="OUT1", epoch=1, tsnr=tsnr, dbid=10, record_count=records,
        commit_time=STCK, processed_time=STCK + 4096, sent_time=0, initial_state=False,
        resent=False, possibly_resent=False, origin="live", token="", topic="t", first_partition=0,
        first_offset=tsnr, last_partition=0, last_offset=tsnr, acode=37, wcode=0, arc=0,
        records=recs, images=imgs, at_ms=NOW_MS)


def status(st: str) -> StatusReceived:
    return StatusReceived(subscription="COLOR", destination="OUT1", epoch=1,
                          fields={"urbsst": st, "urbsrt": ""}, data=b"\x01", topic="t",
                          partition=0, offset=9, elem_index=0, urbhtime=0, at_ms=NOW_MS)


def writer(tmp_path: Path, mirror_subscriptions: frozenset[str] = frozenset()) -> DataFiles:
    paths = {t: str(tmp_path / t) for t in DIRECT_TABLES}
    for p in paths.values():
        Path(p).mkdir()
    return DataFiles(paths=paths, stats_columns=8, mirror_subscriptions=mirror_subscriptions,
                     mirror_statuses=frozenset({"LODS"}))


def test_one_definition_of_the_transaction_tables() -> None:
    """The columns the machine builds are the tables' columns, in order (batch_id aside)."""
    for table, names in zip(TRANSACTION_TABLES, (TRANSACTION_COLUMNS, RECORD_COLUMNS,
                                                 IMAGE_COLUMNS), strict=True):
        assert arrow_schema(table).names[:-1] == list(names)
    assert (*TRANSACTION_TABLES, "status_events") == DIRECT_TABLES
    assert set(SCHEMAS) >= set(DIRECT_TABLES)


def test_files_hold_exactly_the_rows_with_the_batch_id(tmp_path: Path) -> None:
    events = [txn("COLOR", 5), txn("EMPL", 6, records=1), status("C5DA"), status("LODS")]
    rows, cols = events_to_tables(events, NOW_MS)
    out = writer(tmp_path).split(rows, cols, 42)
    files = {f["table"]: f for f in out[FILES_TABLE]}
    assert set(files) == set(DIRECT_TABLES)
    want = events_to_rows(events, NOW_MS)
    for table, file in files.items():
        data = pq.read_table(tmp_path / table / file["path"])
        assert data.schema == arrow_schema(table)
        assert file["rows"] == data.num_rows == len(want[table])
        assert file["size"] == (tmp_path / table / file["path"]).stat().st_size
        assert data.column("batch_id").to_pylist() == [42] * data.num_rows
        got = data.drop_columns(["batch_id"]).to_pylist()
        expect = [{k: r.get(k) for k in got[0]} for r in want[table]]
        assert got == expect, table
    assert file["path"].startswith("part-0000000042-")
    # the bulk tables leave the output; the lifecycle status stays for the lifecycle step
    assert "transactions" not in out and "images" not in out
    assert [r["st"] for r in out["status_events"]] == ["LODS"]
    assert out["gaps"] == []


def test_dictionaries_only_where_values_repeat(tmp_path: Path) -> None:
    """Names and codes get a Parquet dictionary; payloads, sequence numbers and times do not
    (a dictionary of distinct values only costs the tasks time)."""
    events = [txn("COLOR", tsnr) for tsnr in range(1, 40)]
    rows, cols = events_to_tables(events, NOW_MS)
    out = writer(tmp_path).split(rows, cols, 7)
    file = next(f for f in out[FILES_TABLE] if f["table"] == "images")
    meta = pq.ParquetFile(tmp_path / "images" / file["path"]).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings
                 for i in range(meta.num_columns)}
    for name in ("subscription", "image_type", "epoch"):
        assert any("DICTIONARY" in e for e in encodings[name]), name
    for name in ("payload", "tsnr", "rsnr", "batch_id"):
        assert not any("DICTIONARY" in e for e in encodings[name]), name


def test_typed_subscriptions_keep_their_rows_in_the_batch(tmp_path: Path) -> None:
    events = [txn("COLOR", 5), txn("EMPL", 6)]
    rows, cols = events_to_tables(events, NOW_MS)
    out = writer(tmp_path, frozenset({"EMPL"})).split(rows, cols, 1)
    want = events_to_rows(events, NOW_MS)
    for table in TRANSACTION_TABLES:
        assert out[table] == [r for r in want[table] if r["subscription"] == "EMPL"]
        assert out[table]
    assert {f["table"]: f["rows"] for f in out[FILES_TABLE]} == {
        t: len(want[t]) for t in TRANSACTION_TABLES}


def test_no_rows_no_files(tmp_path: Path) -> None:
    rows, cols = events_to_tables([], NOW_MS)
    assert writer(tmp_path).split(rows, cols, 3)[FILES_TABLE] == []
    assert not any(any((tmp_path / t).iterdir()) for t in DIRECT_TABLES)


def test_statistics_are_delta_s_and_only_exact_ones() -> None:
    data = pa.table({
        "sub": pa.array(["B", "A", None]), "long": pa.array(["x" * 33, "y", "z"]),
        "n": pa.array([3, None, -7], pa.int64()), "i": pa.array([1, 2, 3], pa.int32()),
        "t": pa.array([1, 2, None], pa.timestamp("us", tz="UTC")),
        "b": pa.array([True, False, True]), "bin": pa.array([b"a", b"b", None]),
        "none": pa.array([None, None, None], pa.int64()), "late": pa.array([9, 9, 9])})
    stats = delta_stats(data, 8)
    assert stats == {
        "numRecords": 3,
        "minValues": {"sub": "A", "n": -7, "i": 1},
        "maxValues": {"sub": "B", "n": 3, "i": 3},
        "nullCount": {"sub": 1, "long": 0, "n": 1, "i": 0, "t": 1, "b": 0, "bin": 1,
                      "none": 3}}
    assert delta_stats(data, -1)["nullCount"]["late"] == 0
    assert delta_stats(data, -1)["maxValues"]["late"] == 9
    json.dumps(stats)  # the file description carries them as JSON


@pytest.mark.parametrize(("lake", "mode", "want"), [
    (".lake", "auto", "direct"), ("/data/lake", "auto", "direct"),
    ("file:///data/lake", "auto", "direct"), ("s3a://bucket/lake", "auto", "spark"),
    ("abfss://c@a.dfs.core.windows.net/lake", "auto", "spark"),
    (".lake", "spark", "spark"), ("s3a://bucket/lake", "direct", "direct")])
def test_which_writer(test_settings: Settings, lake: str, mode: str, want: str) -> None:
    stream = test_settings.stream.model_copy(update={"lake_dir": lake, "raw_writer": mode})
    assert writer_mode(test_settings.model_copy(update={"stream": stream})) == want
