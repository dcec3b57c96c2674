"""The catalog in one Spark session (the suite's, whose catalog is Spark's in-memory one; the
Hive metastore shared by processes, every table of a job's lake and beeline are
tests/e2e/test_cluster.py's; sync and a restart, each a process of its own, are
tests/e2e/test_catalog_restart.py's): comments on the tables the views read, also on one made before
comments existed, and on a history table; the views return exactly the trustworthy rows of a
scenario with deletes, unverified rows, a stale file and rows newer than the watermark;
registration is idempotent, follows a moved lake and a layout added at a restart, and refuses
a name that is not the job's;
``urbpipe catalog sync`` registers a lake made without the catalog. (kafka_sent's comments,
made by its first append: tests/e2e/test_requests_replay.py.)

One small lake: the tables the views read and the conf's typed tables (their creation is most
of what these tests cost)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from pipeline.config import Settings
from pipeline.ops import cli
from pipeline.spark.land.catalog import CatalogError
from pipeline.spark.land.dictionary import COLUMNS, column_doc
from pipeline.spark.land.tables import SCHEMAS, ensure_table, table_path
from pipeline.spark.land.writes import append_rows
from pipeline.spark.typed.catalog import publish
from pipeline.spark.typed.tables import TypedTableSet, job_tables

ROOT = Path(__file__).resolve().parents[3]
TEST_CONF = ROOT / "conf" / "test.yaml"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _settings(base: Settings, lake: Path) -> Settings:
    layouts = [lay.model_copy(update={"history": lay.fnr == 11}) for lay in base.layouts]
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
    """The views' tables and the typed ones (EMPLOYEE with history), ``watermarks`` first
    made by a version without comments (its start must give them)."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import StructType

    settings = _settings(test_settings, tmp_path_factory.mktemp("catalog") / "lake")
    DeltaTable.createIfNotExists(spark).location(table_path(settings, "watermarks")).addColumns(
        StructType.fromDDL(f"{SCHEMAS['watermarks']}, batch_id bigint")).execute()
    for table in ("watermarks", "file_status"):
        ensure_table(spark, settings, table)
    TypedTableSet(settings).ensure(spark)
    return settings


def test_the_tables_carry_their_columns_comments(spark, lake: Settings) -> None:
    made = [t for t in job_tables(lake) if Path(table_path(lake, t), "_delta_log").is_dir()]
    assert {"watermarks", "current_color_4", "history_employee_11"} <= set(made)
    for name in made:
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
    lines = publish(spark, settings)  # the schema's first: every table the lake has named
    assert {"watermarks: registered", "current_employee_11: registered",
            "v_current_employee_11: view", "v_watermark: view"} <= set(lines), lines
    schema = settings.catalog.schema_name

    def read() -> dict[str, set]:
        """Every view's rows, in one query: (view, key, time) per row."""
        rows = spark.sql(" UNION ALL ".join([
            *(f"SELECT '{v}' AS v, string(isn) AS k, NULL AS t FROM {schema}.{v}"
              for v in ("v_current_employee_11", "v_current_color_4")),
            f"SELECT 'v_watermarks', concat(subscription, '/', dbid), watermark "
            f"FROM {schema}.v_watermarks",
            *(f"SELECT '{v}', NULL, watermark FROM {schema}.{v}"
              for v in ("v_watermark_employee", "v_watermark"))])).collect()
        out: dict[str, set] = {}
        for r in rows:
            when = r.t.replace(tzinfo=UTC) if r.t is not None else None
            out.setdefault(r.v, set()).add(r.k if r.v.startswith("v_current") else (r.k, when))
        return out

    views = read()
    assert views["v_current_employee_11"] == {"1", "5"}, "by database 10006's watermark"
    assert views["v_watermarks"] == {("EMPLOYEE/10006", _at(5)), ("EMPLOYEE/7", _at(0)),
                                     ("COLOR/10006", _at(2))}
    assert "v_current_color_4" not in views, "file 4 is stale: none of its rows"
    assert views["v_watermark_employee"] == {(None, _at(5))}, "the latest row counts"
    assert views["v_watermark"] == {(None, _at(2))}, "the earliest subscription's"
    append_rows(spark, [_status(4, "active", 2)], "file_status", settings, "t", 1)
    assert read()["v_current_color_4"] == {"7"}, "active again: its rows at or before 2"
    append_rows(spark, [_mark("COLOR", None, 2)], "watermarks", settings, "t", 2)
    views = read()
    assert "v_current_color_4" not in views, "no watermark: nothing is trustworthy yet"
    assert views["v_watermark"] == {(None, None)}


def test_registration_is_idempotent_follows_the_lake_and_layouts_and_keeps_off_others(
        spark, lake: Settings, tmp_path: Path) -> None:
    settings = lake.model_copy(update={"catalog": lake.catalog.model_copy(
        update={"schema_name": f"{lake.catalog.schema_name}_r"})})
    schema = settings.catalog.schema_name
    color = settings.model_copy(update={"layouts": settings.layouts[:1]})
    first = publish(spark, color)  # a run before EMPLOYEE's layout was added
    assert "changes_color_4: registered" in first and not any("employee_11" in line
                                                              for line in first), first
    # a name somewhere else (a lake that moved since): pointed back at the lake's table
    elsewhere = str(tmp_path / "old-changes")
    spark.range(1).write.format("delta").save(elsewhere)
    spark.sql(f"DROP TABLE {schema}.changes_color_4")
    spark.sql(f"CREATE TABLE {schema}.changes_color_4 USING DELTA LOCATION '{elsewhere}'")
    again = publish(spark, settings)  # the restart with EMPLOYEE's layout added
    assert {"watermarks: kept", "current_color_4: kept", "current_employee_11: registered",
            "history_employee_11: registered", "v_current_employee_11: view"} <= set(again), again
    assert any(line.startswith("changes_color_4: moved from") and line.endswith(elsewhere)
               for line in again), again
    assert "transactions: not in the lake" in " ".join(again), "only what the lake has"
    detail = {r.col_name: r.data_type for r in
              spark.sql(f"DESCRIBE TABLE EXTENDED {schema}.changes_color_4").collect()}
    assert detail["Location"].endswith("lake/changes_color_4")
    spark.sql(f"DROP TABLE {schema}.changes_employee_11")
    spark.sql(f"CREATE TABLE {schema}.changes_employee_11 (a int) USING parquet")  # not ours
    with pytest.raises(CatalogError, match=r"changes_employee_11 is a managed parquet table"):
        publish(spark, settings)
    spark.sql(f"DROP TABLE {schema}.changes_employee_11")
    assert "changes_employee_11: registered" in publish(spark, settings)


def test_catalog_sync_registers_a_lake_made_without_the_catalog(
        spark, lake: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``urbpipe catalog sync`` as an operator runs it, on this lake (made by the job's table
    code, named nowhere in the new schema): in the suite's session, which the command's
    ``build_session`` returns (metastore ``spark``: nothing to start; the Hive metastore in a
    process of its own is tests/e2e/test_cluster.py's)."""
    raw = yaml.safe_load(TEST_CONF.read_text())
    raw["stream"]["lake_dir"] = lake.stream.lake_dir
    raw["spark"]["jars_dir"] = str(ROOT / ".jars" / "spark")
    for layout in raw["layouts"]:
        layout["history"] = layout["fnr"] == 11
    raw["catalog"] = {"enabled": True, "schema": "synced_lake", "metastore": "spark"}
    conf = tmp_path / "sync.yaml"
    conf.write_text(yaml.safe_dump(raw))
    assert cli.main(["catalog", "sync", "--conf-file", str(conf)]) == 0
    said = capsys.readouterr().out.splitlines()
    assert {"synced_lake.watermarks: registered", "synced_lake.history_employee_11: registered",
            "synced_lake.v_current_color_4: view"} <= set(said), said
    assert "synced_lake.transactions: not in the lake" in " ".join(said)
    names = {r.tableName for r in spark.sql("SHOW TABLES IN synced_lake").collect()}
    assert {"current_employee_11", "v_watermark"} <= names
    assert spark.sql("SELECT count(*) FROM synced_lake.file_status").first()[0] >= 0
