"""Lifecycle statuses that change a file's status, not its rows, on hand-made batches (no Kafka):
ADASAV RESTORE (SAVS … SAVE), DEAC, LOST → ``stale`` with their kinds, AUTI delete file
(URBSU X'44') → ``dropped``. Each is a row in ``schema_events``, a transition in
``file_status`` and the current table's properties (README "Utility and lifecycle events");
the rows of the current table stay, and a replayed batch records nothing twice."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipeline.config import Settings
from pipeline.spark.land.tables import ensure_tables, table_path
from pipeline.spark.typed.lifecycle import apply_lifecycle
from pipeline.urb import make_element
from tests.e2e.test_lifecycle import _status
from tests.spark.typed.test_typed_merge import T0, Batch, _read, _settings, land_typed
from tests.unit.typed.test_lifecycle import status_row

APP = "lifecycle-events-test"
PROPS = ("urbpipe.file_status", "urbpipe.file_status_reason", "urbpipe.file_status_since")


def _at(sec: int):
    return (T0 + timedelta(seconds=sec)).replace(tzinfo=None)


def _batches(settings: Settings) -> list[Batch]:
    statuses = [
        [_status("SAVS", 10)],
        [_status("SAVE", 20)],
        # DEAC naming no file: every configured file of the subscription (COLOR/4 only)
        [status_row("DEAC", fnr=0, commit=T0 + timedelta(seconds=25))],
        [_status("LOST", 30)],
        [_status("AUTI", 40, detail=make_element("URBSU", urbsutyp=0x44))],
    ]
    batches = [Batch(settings) for _ in statuses]
    batches[0].tx(1, 5, [(1, "I", None, ("RED", 1)), (2, "I", None, ("BLUE", 2))])
    for batch, rows in zip(batches, statuses, strict=True):
        batch.tables["status_events"] = rows
    return batches


def _properties(spark, settings: Settings, table: str) -> dict[str, str]:
    path = table_path(settings, table)
    rows = spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
    return {r.key: r.value for r in rows if r.key in PROPS}


@pytest.fixture(scope="module")
def landed(spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    settings = _settings(test_settings, tmp_path_factory.mktemp("events") / "lake")
    ensure_tables(spark, settings)
    batches = _batches(settings)
    counts, props = [], []
    for batch_id, batch in enumerate(batches):
        frame = batch.frame(spark)
        land_typed(spark, batch.tables, batch_id, settings, APP, frame=frame)
        counts.append(apply_lifecycle(spark, frame, batch_id, settings, APP))
        props.append(_properties(spark, settings, "current_color_4"))
    last = len(batches) - 1  # a replay of the last batch (crash after its commits)
    replay = apply_lifecycle(spark, _batches(settings)[last].frame(spark), last, settings, APP)
    return settings, counts, props, replay


def test_file_status_goes_stale_with_each_kind_then_dropped(spark, landed) -> None:
    settings = landed[0]
    rows = sorted(_read(spark, settings, "file_status"), key=lambda r: r.version)
    assert [(r.dbid, r.fnr) for r in rows] == [(10006, 4)] * 5
    assert [(r.version, r.st, r.action, r.status, r.stale_kinds) for r in rows] == [
        (1, "SAVS", "mark_stale", "stale", "restore"),
        (2, "SAVE", "mark_stale", "stale", "restore"),
        (3, "DEAC", "mark_stale", "stale", "deactivated,restore"),
        (4, "LOST", "mark_stale", "stale", "deactivated,lost,restore"),
        (5, "AUTI", "mark_dropped", "dropped", "deactivated,lost,restore")]
    assert [r.since for r in rows] == [_at(10)] * 4 + [_at(40)], "moves with the status word"
    assert "ADASAV RESTORE" in rows[1].reason and "DEAC" in rows[2].reason
    assert "LOST" in rows[3].reason and rows[4].reason.startswith("delete file")
    assert all(r.truncated_before is None for r in rows)


def test_every_event_is_in_schema_events(spark, landed) -> None:
    settings, counts = landed[0], landed[1]
    stale, dropped = ({"schema_events": 1, "file_status": 1, "file_stale:10006/4": n}
                      for n in (1, 0))  # each file's staleness for the metrics
    assert counts == [stale] * 4 + [dropped]
    events = sorted(_read(spark, settings, "schema_events"), key=lambda e: e.at)
    assert [(e.st, e.dbid, e.fnr, e.utility, e.action, e.target_table, e.result, e.at)
            for e in events] == [
        ("SAVS", 10006, 4, "", "mark_stale", "current_color_4", "mark_stale: file status",
         _at(10)),
        ("SAVE", 10006, 4, "", "mark_stale", "current_color_4", "mark_stale: file status",
         _at(20)),
        ("DEAC", 10006, None, "", "mark_stale", "current_color_4", "mark_stale: file status",
         _at(25)),
        ("LOST", 10006, 4, "", "mark_stale", "current_color_4", "mark_stale: file status",
         _at(30)),
        ("AUTI", 10006, 4, "delete file", "mark_dropped", "current_color_4",
         "mark_dropped: file status", _at(40))]


def test_current_table_properties_follow_the_status(landed) -> None:
    props = landed[2]
    assert [p["urbpipe.file_status"] for p in props] == ["stale"] * 4 + ["dropped"]
    assert [p["urbpipe.file_status_since"] for p in props] == [
        _at(10).isoformat() + "+00:00"] * 4 + [_at(40).isoformat() + "+00:00"]
    assert "ADASAV RESTORE" in props[0]["urbpipe.file_status_reason"]
    assert props[4]["urbpipe.file_status_reason"].startswith("delete file")


def test_rows_stay_and_a_replay_records_nothing_twice(spark, landed) -> None:
    settings, _, _, replay = landed
    assert replay == {"schema_events": 1, "file_status": 1, "file_stale:10006/4": 0}, \
        "recomputed, skipped by Delta"
    assert len(_read(spark, settings, "schema_events")) == 5
    assert len(_read(spark, settings, "file_status")) == 5
    current = {r.isn: r.color for r in _read(spark, settings, "current_color_4")}
    assert current == {1: "RED", 2: "BLUE"}, "a dropped file keeps its rows"
    assert _properties(spark, settings, "current_employee_11") == {}, "another subscription"
