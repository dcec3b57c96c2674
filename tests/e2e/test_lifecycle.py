"""Utility and lifecycle events end to end: the simulator sends a refresh-file AUTI
for COLOR (EBCDIC) and an ADALOD LOAD (LODS … LODE) for EMPLOYEE (ASCII) in the middle of the
stream; the job truncates COLOR's current state at the refresh, marks EMPLOYEE stale for the
load and clears it at its clean end, and records every event in ``schema_events`` and
``file_status``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from devtools.sim import Replicator, SimConfig
from devtools.sim.config import from_settings
from devtools.sim.live import LiveReplicator
from devtools.sim.utility import parse_spec
from pipeline.payload import encode_payload, layout_from_conf
from pipeline.reassembly.events import StatusReceived
from pipeline.reassembly.tables import events_to_rows
from pipeline.spark.engine.state_stage import OUTPUT_DDL, to_output
from pipeline.spark.land.tables import ensure_tables, table_path
from pipeline.spark.typed.lifecycle import apply_lifecycle
from pipeline.spark.typed.stage import write_typed_tables
from pipeline.urb import datetime_to_stck, decode_message, encode_message, make_element
from tests.e2e.scenario import Scenario, scenario_settings
from tests.support.truth import generate

COLOR_EBCDIC = {"name": "COLOR", "destinations": ["OUT1"], "files": [4], "ebcdic": True}
EMPLOYEE_ASCII = {"name": "EMPLOYEE", "destinations": ["OUT1"], "files": [11], "ebcdic": False}
TRANSACTIONS = 40
EVENTS = ("20:AUTI:COLOR:4:refresh_file", "8:LODS:EMPLOYEE:11", "28:LODE:EMPLOYEE:11")


@pytest.fixture(scope="module")
def lifecycle(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    tmp = tmp_path_factory.mktemp("lifecycle")
    settings, path = scenario_settings(tmp, "lifecycle", layouts=True,
                                       subscriptions=[COLOR_EBCDIC, EMPLOYEE_ASCII])
    config = SimConfig.model_validate({
        **from_settings(settings).model_dump(), "max_message_size": 900, "c5_rate": 0.0,
        "utility_events": [parse_spec(e) for e in EVENTS]})
    rep = Replicator(config, 23, transactions=TRANSACTIONS)
    deliveries, sent = generate(rep, TRANSACTIONS)
    scenario = Scenario(settings, path, sent, LiveReplicator(settings, replicator=rep,
                                                             deliveries=deliveries))
    scenario.run(spark)
    return scenario


def _rows(spark, scenario: Scenario, table: str, where: str) -> list:
    return scenario.table(spark, table).where(where).collect()


def _property(spark, scenario: Scenario, table: str) -> dict[str, str]:
    path = table_path(scenario.settings, table)
    return {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}


def test_refresh_file_truncates_the_current_state_and_is_recorded(spark, lifecycle) -> None:
    events = _rows(spark, lifecycle, "schema_events", "st = 'AUTI'")
    assert len(events) == 1
    event = events[0]
    assert (event.utility, event.action, event.target_table, event.dbid, event.fnr) == (
        "refresh file", "truncate", "current_color_4", 10006, 4)
    deleted = int(event.result.split()[1])
    assert event.result.startswith("deleted ") and deleted > 0, event.result

    # The simulator emptied its file at the refresh: what it holds now was all written after.
    assert lifecycle.sim is not None
    final = dict(lifecycle.sim.replicator.generator.file("COLOR", 4).values)
    rows = lifecycle.table(spark, "current_color_4").collect()
    assert {r.isn: (r.color, r.code) for r in rows} == {
        isn: (v["AA"], Decimal(v["AB"])) for isn, v in final.items()}
    assert all(r.commit_time >= event.at for r in rows), "nothing from before the refresh"
    before = lifecycle.table(spark, "changes_color_4").where(f"commit_time < '{event.at}'")
    assert before.count() > 0, "the change table keeps the history from before the refresh"

    status = _rows(spark, lifecycle, "file_status", "dbid = 10006 AND fnr = 4")
    assert [(s.status, s.action) for s in sorted(status, key=lambda s: s.version)] == [
        ("active", "truncate")]
    assert status[0].truncated_before == event.at
    assert _property(spark, lifecycle, "current_color_4")["urbpipe.file_status"] == "active"


def test_load_marks_the_file_stale_then_its_end_clears_it(spark, lifecycle) -> None:
    status = sorted(_rows(spark, lifecycle, "file_status", "dbid = 10006 AND fnr = 11"),
                    key=lambda s: s.version)
    assert [(s.st, s.status, s.stale_kinds, s.version) for s in status] == [
        ("LODS", "stale", "load", 1), ("LODE", "active", "", 2)]
    assert status[0].since < status[1].since
    events = _rows(spark, lifecycle, "schema_events", "st IN ('LODS', 'LODE')")
    assert sorted((e.st, e.action, e.target_table) for e in events) == [
        ("LODE", "clear_stale", "current_employee_11"),
        ("LODS", "mark_stale", "current_employee_11")]
    props = _property(spark, lifecycle, "current_employee_11")
    assert props["urbpipe.file_status"] == "active"
    assert "ended cleanly" in props["urbpipe.file_status_reason"]


# ------------------------------------------------------------------ replay (Spark, no broker)
T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
COLOR_LAYOUT = "AA,16,A,AB,16,U."


def _status(st_: str, sec: float, **urbs: object) -> dict:
    """A status_events row as the state machine emits it, from encoded (EBCDIC) bytes."""
    el = decode_message(encode_message(None, [make_element(
        "URBS", urbsst=st_, urbssnam="COLOR", urbsdbid=10006, urbsfnr=4,
        urbstime=datetime_to_stck(T0 + timedelta(seconds=sec)),
        urbsttim=datetime_to_stck(T0 + timedelta(seconds=sec)), **urbs)])).elements[0]
    event = StatusReceived(subscription="COLOR", destination="OUT1", epoch=1, fields=el.fields,
                           data=el.data or None, topic="t", partition=0, offset=int(sec),
                           elem_index=0, urbhtime=0, at_ms=1_735_732_800_000)
    return events_to_rows([event], 0)["status_events"][0]


def _batch(spark, inserts: list[tuple[int, int, str]], statuses: list[dict]):
    """(table, json, blob) frame: COLOR/4 inserts (tsnr, second, color) and statuses."""
    layout = layout_from_conf({"format_buffer": COLOR_LAYOUT,
                               "columns": {"AA": "color", "AB": "code"}})
    tables: dict[str, list[dict]] = {"transactions": [], "records": [], "images": [],
                                     "status_events": statuses}
    for tsnr, sec, color in inserts:
        names = {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr}
        tables["transactions"].append({**names, "dbid": 10006, "record_count": 1,
                                       "commit_time": T0 + timedelta(seconds=sec),
                                       "origin": "live", "initial_state": False,
                                       "landed_at": T0})
        tables["records"].append({**names, "rsnr": 1, "fnr": 4, "isn": tsnr, "type": "I"})
        payload = encode_payload({"color": color, "code": Decimal(tsnr)}, layout, ebcdic=True)
        tables["images"].append({**names, "rsnr": 1, "dsnr": 1, "image_type": "A",
                                 "payload": payload, "acode": 0, "wcode": 0, "arc": 0})
    return spark.createDataFrame(to_output(tables), OUTPUT_DDL)


def test_a_replayed_batch_applies_nothing_twice(spark, test_settings, tmp_path, monkeypatch):
    """Crash after schema_events, before file_status; then the batch runs twice more."""
    from pipeline.spark.typed import lifecycle as spark_lifecycle

    settings = test_settings.model_copy(update={"stream": test_settings.stream.model_copy(
        update={"lake_dir": str(tmp_path / "lake")})})
    ensure_tables(spark, settings)
    first = _batch(spark, [(1, 1, "RED"), (2, 2, "BLUE")], [])
    write_typed_tables(spark, first, 0, settings, "app")
    refresh = _batch(spark, [(3, 6, "GREEN")], [
        _status("AUTI", 5, detail=make_element("URBSU", urbsutyp=0x48))])
    write_typed_tables(spark, refresh, 1, settings, "app")

    real_append = spark_lifecycle.append_rows

    def crash(spark_, rows, table, *args):
        if table == "file_status":
            raise RuntimeError("killed")
        real_append(spark_, rows, table, *args)

    monkeypatch.setattr(spark_lifecycle, "append_rows", crash)
    with pytest.raises(RuntimeError, match="killed"):
        apply_lifecycle(spark, refresh, 1, settings, "app")
    monkeypatch.setattr(spark_lifecycle, "append_rows", real_append)
    for _ in range(2):  # the replay after the crash, and one more
        write_typed_tables(spark, refresh, 1, settings, "app")
        assert apply_lifecycle(spark, refresh, 1, settings, "app") == {
            "schema_events": 1, "file_status": 1, "file_stale:10006/4": 0}
    for batch_id, st_ in ((2, "LODS"), (3, "LODE"), (3, "LODE")):
        apply_lifecycle(spark, _batch(spark, [], [_status(st_, 10 + batch_id)]), batch_id,
                        settings, "app")

    def read(name: str) -> list:
        return spark.read.format("delta").load(table_path(settings, name)).collect()

    assert sorted(r.isn for r in read("current_color_4")) == [3]
    events = read("schema_events")
    assert [(e.st, e.result.split(" older")[0]) for e in sorted(events, key=lambda e: e.at)] == [
        ("AUTI", "deleted 2 rows"), ("LODS", "mark_stale: file status"),
        ("LODE", "clear_stale: file status")]
    status = sorted(read("file_status"), key=lambda s: s.version)
    assert [(s.version, s.st, s.status) for s in status] == [
        (1, "AUTI", "active"), (2, "LODS", "stale"), (3, "LODE", "active")]
    cuts = spark.read.format("delta").load(table_path(settings, "file_status")).selectExpr(
        "unix_micros(truncated_before) AS us").distinct().collect()
    refreshed = (T0 + timedelta(seconds=5) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
        microseconds=1)
    assert [r.us for r in cuts] == [refreshed], "carried from status to status"
