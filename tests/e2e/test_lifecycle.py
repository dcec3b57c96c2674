"""Utility and lifecycle events end to end (issue 6.6): the simulator sends a refresh-file AUTI
for COLOR (EBCDIC) and an ADALOD LOAD (LODS … LODE) for EMPLOYEE (ASCII) in the middle of the
stream; the job truncates COLOR's current state at the refresh, marks EMPLOYEE stale for the
load and clears it at its clean end, and records every event in ``schema_events`` and
``file_status``."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pipeline.sim import Replicator, SimConfig
from pipeline.sim.config import from_settings
from pipeline.sim.live import LiveReplicator
from pipeline.sim.utility import parse_spec
from pipeline.spark.tables import table_path
from tests.e2e.scenario import Scenario, scenario_settings
from tests.integration.truth import generate

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
