"""A conf layout changed between two starts (Spark + Delta, no Kafka).

COLOR/4 lands a batch with format buffer v1; AUTI then says AB grew to 6 bytes (the file is
stale: the layout reads 4) and that fields were added (nothing to add yet: the layout does
not name them). The operator changes the format buffer — AB P4 → P6, the MU field AD B2 → B4,
the PE member AS P4 → P6, a new field AC — and "restarts": ``reconcile_tables`` adds and widens
the columns of changes_, current_ and history_ in place, records it, and makes the file active
again; a second start changes nothing; the next batch lands the new values; a late AUTI the
layout already reads keeps the file active. A format buffer that retypes a column (P → A)
stops the start with one line and alters nothing.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from pipeline.config import Layout, Settings
from pipeline.payload import layout_from_conf
from pipeline.spark.land.tables import ensure_tables, table_path
from pipeline.spark.typed.lifecycle import apply_lifecycle
from pipeline.spark.typed.reconcile import reconcile_tables
from pipeline.typed.widening import LayoutConflict
from pipeline.urb import make_element
from tests.e2e.test_lifecycle import _status
from tests.spark.typed.test_typed_gfft import T0, Batch
from tests.spark.typed.test_typed_merge import land_typed

APP = "reconcile-test"
COLUMNS = {"AA": "color", "AB": "amount", "AC": "city", "AD": "codes"}
V1 = "AA,8,A,AB,4,P,AD1-2,2,B,GA1-2."
V2 = "AA,8,A,AB,6,P,AD1-2,4,B,GA1-2,AC,10,A."
TABLES = ("changes_color_4", "current_color_4", "history_color_4")
BEFORE = {"color": "string", "amount": "decimal(7,0)", "codes": "array<int>",
          "ga": "array<struct<ar:string,as:decimal(7,0)>>"}
AFTER = {"color": "string", "amount": "decimal(11,0)", "codes": "array<bigint>",
         "ga": "array<struct<ar:string,as:decimal(11,0)>>", "city": "string"}


def _settings(base: Settings, lake: Path, fb: str, member: str) -> Settings:
    layout = Layout(subscription="COLOR", dbid=10006, fnr=4, format_buffer=fb, gfft="ignore",
                    columns=COLUMNS, groups={"GA": member}, history=True)
    return base.model_copy(update={"layouts": [layout], "stream": base.stream.model_copy(
        update={"lake_dir": str(lake)})})


def _layout(settings: Settings):
    return layout_from_conf(settings.layouts[0].layout_conf())


def _auti(sec: int, typ: int, **detail: object) -> dict:
    return _status("AUTI", sec, detail=make_element("URBSU", urbsutyp=typ, **detail))


def _run(spark, settings: Settings, batch: Batch, batch_id: int) -> None:
    """What the sink does per batch: the typed tables, then the lifecycle (with statuses)."""
    frame = batch.frame(spark)
    land_typed(spark, batch.tables, batch_id, settings, APP, frame=frame)
    if batch.tables.get("status_events"):
        apply_lifecycle(spark, frame, batch_id, settings, APP)


def _read(spark, settings: Settings, name: str) -> list:
    return spark.read.format("delta").load(table_path(settings, name)).collect()


def _types(spark, settings: Settings, table: str) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(
        table_path(settings, table)).schema.fields if f.name in AFTER}


def _status_rows(spark, settings: Settings) -> list:
    return sorted(_read(spark, settings, "file_status"), key=lambda r: r.version)


def _props(spark, settings: Settings, table: str) -> dict[str, str]:
    path = table_path(settings, table)
    return {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}


@pytest.fixture(scope="module")
def restarted(spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    lake = tmp_path_factory.mktemp("reconcile") / "lake"
    v1 = _settings(test_settings, lake, V1, "AR,3,A,AS,4,P")
    v2 = _settings(test_settings, lake, V2, "AR,3,A,AS,6,P")
    seen: dict = {}
    ensure_tables(spark, v1)
    seen["first_start"] = reconcile_tables(spark, v1)
    red = {"color": "RED", "amount": Decimal(1234567), "codes": [1, 65535],
           "ga": [{"ar": "X", "as": Decimal(-7)}, {"ar": "Y", "as": Decimal(8)}]}
    _run(spark, v1, Batch().tx(1, T0 + timedelta(seconds=10), 1, _layout(v1), red)
         .tx(2, T0 + timedelta(seconds=11), 2, _layout(v1), {**red, "color": "BLUE"}), 0)
    # AB grew (the layout reads 4 bytes: stale), fields were added (none named yet)
    stale = Batch()
    stale.tables["status_events"] = [_auti(20, 0x41, fieldname="AB", newlength=6),
                                     _auti(21, 0x59)]
    _run(spark, v1, stale, 1)
    seen["stale"] = _status_rows(spark, v1)[-1]
    seen["events_v1"] = sorted((r.utility, r.result) for r in _read(spark, v1,
                                                                    "schema_events"))
    seen["types_v1"] = {t: _types(spark, v1, t) for t in TABLES}
    # the operator changes the format buffer and restarts; then starts once more
    seen["restart"] = reconcile_tables(spark, v2)
    seen["again"] = reconcile_tables(spark, v2)
    big = {"color": "GOLD", "amount": Decimal(12345678901), "codes": [100000, 70000],
           "ga": [{"ar": "Z", "as": Decimal(-98765432109)}, {"ar": "W", "as": Decimal(0)}],
           "city": "BONN"}
    after = Batch().tx(3, T0 + timedelta(seconds=40), 1, _layout(v2), big) \
        .tx(4, T0 + timedelta(seconds=41), 3, _layout(v2), {**big, "color": "NEW"})
    # a late AUTI the changed layout already reads: no change, the file stays active
    after.tables["status_events"] = [_auti(42, 0x41, fieldname="AB", newlength=5)]
    _run(spark, v2, after, 2)
    return v1, v2, seen


def test_the_first_start_and_the_stale_file_before_the_change(restarted) -> None:
    _, _, seen = restarted
    assert seen["first_start"] == []
    assert seen["types_v1"] == dict.fromkeys(TABLES, BEFORE)
    assert (seen["stale"].status, seen["stale"].stale_kinds, seen["stale"].st) == (
        "stale", "layout", "AUTI")
    assert seen["events_v1"] == [
        ("add new fields", "no field the layout reads lacks a column: add them to the format "
         "buffer and restart the job (the tables take them at start)"),
        ("change field length", "layout review: AB is now 6 P, the layout reads 4 P; change "
         "the format buffer and restart the job (the tables widen amount to decimal(11,0) "
         "with it)")]


def test_restart_adds_and_widens_the_columns_of_every_value_table(spark, restarted) -> None:
    _, v2, seen = restarted
    for table in TABLES:
        assert _types(spark, v2, table) == AFTER, table
        assert _props(spark, v2, table)["delta.enableTypeWidening"] == "true"
    assert sorted(seen["restart"][:-1]) == sorted(
        f"{t}.{c}" for t in TABLES for c in (
            "city added", "amount decimal(7,0) -> decimal(11,0)",
            "codes array<int> -> array<bigint>",
            "ga array<struct<ar:string,as:decimal(7,0)>> -> "
            "array<struct<ar:string,as:decimal(11,0)>>"))
    assert seen["restart"][-1] == "file 10006/4 active: the layout now reads AB as 6"
    assert seen["again"] == [], "a second start changes nothing"
    assert "delta.enableTypeWidening" not in _props(spark, v2, "tombstones_color_4"), (
        "tombstones have no value columns: never widened")


def test_restart_is_recorded_and_the_file_is_active_again(spark, restarted) -> None:
    _, v2, _ = restarted
    status = _status_rows(spark, v2)
    assert [(s.version, s.st, s.action, s.status, s.run_id) for s in status] == [
        (1, "AUTI", "widen", "stale", APP), (2, "AUTI", "add_columns", "stale", APP),
        (3, "CONF", "clear_stale", "active", "urbpipe-reconcile"),
        (4, "AUTI", "widen", "active", APP)]
    assert status[2].reason == "the layout now reads AB as 6"
    props = _props(spark, v2, "current_color_4")
    assert props["urbpipe.file_status"] == "active"
    conf = sorted((r.target_table, r.action, r.result) for r in _read(spark, v2, "schema_events")
                  if r.st == "CONF")
    widened = ("columns added: city; widened: amount decimal(7,0) -> decimal(11,0), codes "
               "array<int> -> array<bigint>, ga array<struct<ar:string,as:decimal(7,0)>> -> "
               "array<struct<ar:string,as:decimal(11,0)>>")
    assert conf == [("changes_color_4", "layout_conf", widened),
                    ("current_color_4", "clear_stale", "the layout now reads AB as 6"),
                    ("current_color_4", "layout_conf", widened),
                    ("history_color_4", "layout_conf", widened)]
    late = [r for r in _read(spark, v2, "schema_events") if r.batch_id == 2]
    assert [r.result for r in late] == [
        "no change: the layout already reads AB as 6 P (amount stays decimal(11,0))"]


def test_the_next_batch_lands_the_new_values(spark, restarted) -> None:
    _, v2, _ = restarted
    current = {r.isn: (r.color, r.amount, r.codes, [(g.ar, g["as"]) for g in r.ga], r.city)
               for r in _read(spark, v2, "current_color_4")}
    gold = (Decimal(12345678901), [100000, 70000], [("Z", Decimal(-98765432109)),
                                                    ("W", Decimal(0))], "BONN")
    assert current == {1: ("GOLD", *gold), 2: ("BLUE", Decimal(1234567), [1, 65535],
                                                [("X", Decimal(-7)), ("Y", Decimal(8))], None),
                       3: ("NEW", *gold)}
    changes = sorted((r.tsnr, r.amount, r.city) for r in _read(spark, v2, "changes_color_4"))
    assert changes == [(1, Decimal(1234567), None), (2, Decimal(1234567), None),
                       (3, Decimal(12345678901), "BONN"), (4, Decimal(12345678901), "BONN")]
    history = sorted((r.isn, r.tsnr, r.amount, r.is_current) for r in _read(
        spark, v2, "history_color_4"))
    assert history == [(1, 1, Decimal(1234567), False), (1, 3, Decimal(12345678901), True),
                       (2, 2, Decimal(1234567), True), (3, 4, Decimal(12345678901), True)]
    quarantined = [r for r in _read(spark, v2, "quarantine") if r.source == "payload"]
    assert quarantined == []


def test_a_conf_change_delta_cannot_apply_stops_the_start(spark, test_settings,
                                                          restarted) -> None:
    _, v2, _ = restarted
    lake = Path(v2.stream.lake_dir)
    alpha = _settings(test_settings, lake, "AA,8,A,AB,6,A,AD1-2,4,B,GA1-2,AC,10,A,AE,2,A.",
                      "AR,3,A,AS,6,P")
    versions = {t: len(spark.sql(f"DESCRIBE HISTORY delta.`{table_path(v2, t)}`").collect())
                for t in TABLES}
    with pytest.raises(LayoutConflict) as refused:
        reconcile_tables(spark, alpha)
    assert str(refused.value) == (
        "layouts COLOR/10006/4: the format buffer now reads AB as string, but column amount "
        "of changes_color_4 is decimal(11,0), and Delta only widens a column in place (int -> "
        "bigint, decimal(7,0) -> decimal(11,0) ...): map AB to a new column "
        "(layouts[].columns, e.g. AB: amount_new), or restore its old length and format, or "
        "move the file's typed tables aside so the job creates them anew")
    for table in TABLES:
        assert _types(spark, v2, table) == AFTER
        assert "ae" not in spark.read.format("delta").load(table_path(v2, table)).columns
        history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path(v2, table)}`").collect()
        assert len(history) == versions[table], f"{table} altered by a refused start"
