"""Typed tables from a GFFT only, end to end: COLOR is configured without a format buffer,
the simulator sends its GFFT after STRT (``--gfft 4``), and the current-state table equals
the simulator's records, its columns named by the conf's ``columns``."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.e2e.scenario import Scenario

COLOR_EBCDIC = {"name": "COLOR", "destinations": ["OUT1"], "files": [4], "ebcdic": True}
EMPLOYEE_ASCII = {"name": "EMPLOYEE", "destinations": ["OUT1"], "files": [11], "ebcdic": False}


@pytest.fixture(scope="module")
def from_gfft(spark, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    scenario = Scenario.build(tmp_path_factory.mktemp("gfft"), "gfft", transactions=30,
                              seed=29, max_message_size=900,
                              subscriptions=[COLOR_EBCDIC, EMPLOYEE_ASCII],
                              layouts=True, gfft=(4,))
    color = next(lay for lay in scenario.settings.layouts if lay.subscription == "COLOR")
    stream_only = color.model_copy(update={"format_buffer": None, "gfft": "require"})
    scenario.settings = scenario.settings.model_copy(update={"layouts": [stream_only]})
    scenario.run(spark)
    return scenario


def test_current_state_from_the_gfft_equals_the_simulator(spark, from_gfft: Scenario) -> None:
    assert from_gfft.sim is not None
    final = dict(from_gfft.sim.replicator.generator.file("COLOR", 4).values)
    touched = {r.isn for r in from_gfft.table(spark, "records")
               .where("subscription = 'COLOR'").collect()}
    rows = from_gfft.table(spark, "current_color_4").collect()
    assert rows and all(r.verified and not r.deleted for r in rows)
    got = {r.isn: (r.color, r.code) for r in rows}
    assert got == {isn: (v["AA"], Decimal(v["AB"])) for isn, v in final.items()
                   if isn in touched}


def test_the_gfft_landed_and_was_recorded(spark, from_gfft: Scenario) -> None:
    layouts = from_gfft.table(spark, "layouts").collect()
    assert {(r.dbid, r.fnr, r.gfid) for r in layouts} == {(10006, 4, "SIMGFB")}
    assert layouts[0].ddl == "`aa` string, `ab` decimal(16,0)"  # the GFFT's own names
    events = from_gfft.table(spark, "schema_events").where("st = 'GFFT'").collect()
    assert [(e.action, e.result) for e in events] == [
        ("layout_version", "columns added: color, code")]
    bad = from_gfft.table(spark, "quarantine").collect()
    assert not bad, [r.reason for r in bad]
