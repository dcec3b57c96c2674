"""The catalog in one Spark session (the suite's, whose catalog is Spark's in-memory one; the
Hive metastore shared by processes is tests/e2e/test_catalog.py): every column of every table
carries its comment, also on tables made before comments existed; registration is idempotent,
follows a moved lake and refuses a name that is not the job's; the views return exactly the
trustworthy rows of a scenario with deletes, unverified rows, a stale file and rows newer than
the watermark."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.spark.land.catalog import CatalogError
from pipeline.spark.land.dictionary import COLUMNS, column_doc
from pipeline.spark.land.kafka_out import sent_schema
from pipeline.spark.land.tables import SCHEMAS, SENT_TABLE, ensure_tables, table_path
from pipeline.spark.land.writes import append_rows
from pipeline.spark.typed.catalog import publish
from pipeline.spark.typed.tables import TypedTableSet, job_tables

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _settings(base: Settings, lake: Path, *, history: bool = False) -> Settings:
    layouts = [lay.model_copy(update={"history": history}) for lay in base.layouts]
    catalog = base.catalog.model_copy(update={"enabled": True,
                                              "schema_name": f"t_{uuid.uuid4().hex[:8]}"})
    stream = base.stream.model_copy(update={"lake_dir": str(lake)})
    return base.model_copy(update={"layouts": layouts, "catalog": catalog, "stream": stream})


def _described(spark, path: str) -> dict[str, str]:
    """Column → comment as DESCRIBE TABLE shows them (up to its first section)."""
    out: dict[str, str] = {}
    for row in spark.sql(f"DESCRIBE TABLE delta.`{path}`").collect():
        if not row["col_name"] or row["col_name"].startswith("#"):
            break
        out[row["col_name"]] = row["comment"] or ""
    return out


@pytest.fixture(scope="module")
def lake(spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One lake for the module: every table of the conf (history on), ``records`` made first
    by a version without comments (the start must give them)."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import StructType

    settings = _settings(test_settings, tmp_path_factory.mktemp("catalog") / "lake",
                         history=True)
    DeltaTable.createIfNotExists(spark).location(table_path(settings, "records")).addColumns(
        StructType.fromDDL(f"{SCHEMAS['records']}, batch_id bigint")).execute()
    ensure_tables(spark, settings)
    TypedTableSet(settings).ensure(spark)
    # kafka_sent is made by the first send: as its first (empty) append would
    spark.createDataFrame([], sent_schema()).write.format("delta").save(
        table_path(settings, SENT_TABLE))
    return settings


def test_every_column_of_every_table_carries_its_comment(spark, lake: Settings) -> None:
    for name in job_tables(lake):
        shown = _described(spark, table_path(lake, name))
        assert shown and all(shown.values()), (name, [c for c, t in shown.items() if not t])
        if name in COLUMNS:
            assert shown == {c: column_doc(name, c).comment() for c in shown}, name
    employee = _described(spark, table_path(lake, "history_employee_11"))
    assert employee["salary"].startswith("Adabas field AS: format P, length 5, scale 2.")
    assert "Layout: conf format buffer." in employee["salary"]
    assert employee["valid_to"].endswith("Null while the version is current.")


def _current_rows(spark, settings: Settings, table: str, rows: list[dict]) -> None:
    path = table_path(settings, table)
    schema = spark.read.format("delta").load(path).schema
    spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows],
                          schema).write.format("delta").mode("append").save(path)


def _row(isn: int, minute: int, *, deleted: bool = False, verified: bool = True,
         sub: str = "EMPLOYEE", **values: object) -> dict:
    return {"isn": isn, "deleted": deleted, "verified": verified, "subscription": sub,
            "destination": "OUT1", "epoch": 1, "tsnr": isn, "rsnr": 1,
            "commit_time": _at(minute), "record_type": "D" if deleted else "U",
            "origin": "live", "batch_id": 0, **values}


def _mark(sub: str, minute: int | None, batch: int = 0, dbid: int = 10006) -> dict:
    when = None if minute is None else _at(minute)
    return {"subscription": sub, "destination": "OUT1", "dbid": dbid, "watermark": when,
            "newest_commit": when, "nucleus_lag_ms": 0, "held_by": None, "open_gaps": 0,
            "gap_ids": [], "gap_newest": [], "computed_at": _at(100 + batch)}


def _status(fnr: int, status: str, version: int) -> dict:
    return {"dbid": 10006, "fnr": fnr, "status": status, "stale_kinds": None, "reason": "test",
            "since": _at(0), "file_name": None, "version": version, "truncated_before": None,
            "event_id": f"e{version}", "st": "LODS", "action": "mark_stale", "run_id": "t",
            "updated_at": _at(0), "seq": 0}


def test_views_return_exactly_the_trustworthy_rows(spark, lake: Settings) -> None:
    settings = lake
    # EMPLOYEE (deletes: mark): ok, deleted, unverified, newer than the watermark, at it
    _current_rows(spark, settings, "current_employee_11", [
        _row(1, 1, name="ok"), _row(2, 1, deleted=True, name="gone"),
        _row(3, 1, verified=False, name="resent"), _row(4, 9, name="too new"),
        _row(5, 5, name="at the watermark")])
    _current_rows(spark, settings, "current_color_4", [_row(7, 1, sub="COLOR", color="RED")])
    # another database of EMPLOYEE, on its own clock far behind: not file 11's watermark
    append_rows(spark, [_mark("EMPLOYEE", 3), _mark("COLOR", 2), _mark("EMPLOYEE", 0, dbid=7)],
                "watermarks", settings, "t", 0)
    append_rows(spark, [_mark("EMPLOYEE", 5, 1)], "watermarks", settings, "t", 1)
    append_rows(spark, [_status(4, "stale", 1)], "file_status", settings, "t", 0)
    lines = publish(spark, settings)
    assert "v_current_employee_11: view" in lines and "v_watermark: view" in lines
    schema = settings.catalog.schema_name

    def isns(view: str) -> set[int]:
        return {r.isn for r in spark.sql(f"SELECT isn FROM {schema}.{view}").collect()}

    assert isns("v_current_employee_11") == {1, 5}, "by database 10006's watermark"
    per_db = {(r.subscription, r.dbid): r.watermark.replace(tzinfo=UTC) for r in spark.sql(
        f"SELECT subscription, dbid, watermark FROM {schema}.v_watermarks").collect()}
    assert per_db == {("EMPLOYEE", 10006): _at(5), ("EMPLOYEE", 7): _at(0),
                      ("COLOR", 10006): _at(2)}
    assert isns("v_current_color_4") == set(), "file 4 is stale: none of its rows"
    watermark = spark.sql(f"SELECT watermark FROM {schema}.v_watermark_employee").first()
    assert watermark["watermark"].replace(tzinfo=UTC) == _at(5), "the latest row counts"
    overall = spark.sql(f"SELECT watermark FROM {schema}.v_watermark").first()["watermark"]
    assert overall.replace(tzinfo=UTC) == _at(2), "the earliest subscription's"
    append_rows(spark, [_status(4, "active", 2)], "file_status", settings, "t", 1)
    assert isns("v_current_color_4") == {7}, "active again: its rows at or before 2"
    append_rows(spark, [_mark("COLOR", None, 2)], "watermarks", settings, "t", 2)
    assert isns("v_current_color_4") == set(), "no watermark: nothing is trustworthy yet"
    assert spark.sql(f"SELECT watermark FROM {schema}.v_watermark").first()[0] is None


def test_registration_is_idempotent_follows_the_lake_and_keeps_off_others(
        spark, lake: Settings, tmp_path: Path) -> None:
    schema = lake.catalog.schema_name
    spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # as a fresh metastore sees it
    first = publish(spark, lake)
    assert "transactions: registered" in first and "current_color_4: registered" in first
    names = {r.tableName for r in spark.sql(f"SHOW TABLES IN {schema}").collect()}
    assert set(job_tables(lake)) <= names and "v_current_color_4" in names
    # the name somewhere else (a lake that moved since): pointed back at the lake's table
    elsewhere = str(tmp_path / "old-gaps")
    spark.range(1).write.format("delta").save(elsewhere)
    spark.sql(f"DROP TABLE {schema}.gaps")
    spark.sql(f"CREATE TABLE {schema}.gaps USING DELTA LOCATION '{elsewhere}'")
    again = publish(spark, lake)
    assert "transactions: kept" in again
    assert any(line.startswith("gaps: moved from") and line.endswith(elsewhere)
               for line in again), again
    detail = {r.col_name: r.data_type for r in
              spark.sql(f"DESCRIBE TABLE EXTENDED {schema}.gaps").collect()}
    assert detail["Location"].endswith("lake/gaps")
    spark.sql(f"DROP TABLE {schema}.duplicates")
    spark.sql(f"CREATE TABLE {schema}.duplicates (a int) USING parquet")  # not the job's
    with pytest.raises(CatalogError, match=r"duplicates is a managed parquet table"):
        publish(spark, lake)
    spark.sql(f"DROP TABLE {schema}.duplicates")
    assert "duplicates: registered" in publish(spark, lake)
