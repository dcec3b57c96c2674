"""GFFTs in the stream drive the typed tables (Spark + Delta, no Kafka): a file configured
without a format buffer gets its columns from the first GFFT, a second version adds a column,
a version that changes a column's type is refused (its images quarantined, the conflict in
schema_events), versions survive a restart (read back from the ``layouts`` table) and a
replayed batch writes nothing twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from pipeline.config import Layout, Settings
from pipeline.payload import RecordLayout, encode_payload, parse_format_buffer
from pipeline.payload.gfft import gfft_from_layout
from pipeline.reassembly.gfft import gfft_event
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.tables import events_to_rows
from pipeline.spark.engine.state_stage import OUTPUT_DDL, to_output
from pipeline.spark.land.tables import ensure_tables, table_frame, table_path
from pipeline.urb.stck import TOD_UNIX_US
from tests.spark.typed.test_typed_merge import land_typed

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
APP = "gfft-test"
COLUMNS = {"AA": "color", "AB": "amount", "AC": "city"}
V1 = parse_format_buffer("AA,8,A,AB,4,P,2.", COLUMNS)
V2 = parse_format_buffer("AA,8,A,AB,4,P,2,AC,10,A.", COLUMNS)
V3 = parse_format_buffer("AA,8,A,AB,6,A.", COLUMNS)  # amount becomes alphanumeric


def stck(at: datetime) -> int:
    return ((at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
            + TOD_UNIX_US) << 12


class Batch:
    """A (table, json, blob) batch: GFFT rows from the machine's own event, hand-made
    transactions of COLOR/4 with one after image each."""

    def __init__(self) -> None:
        self.tables: dict[str, list[dict]] = {"transactions": [], "records": [], "images": [],
                                              "layouts": [], "quarantine": []}

    def gfft(self, layout: RecordLayout, created: datetime, gfid: str) -> Batch:
        # long names are the columns upper-cased; the conf maps AA..AC the same way anyway
        fields = {"urbfdbid": 10006, "urbffnr": 4, "urbfgfid": gfid, "urbftim1": stck(created),
                  "groups": gfft_from_layout(layout)}
        row = ElementRow("t", 0, 0, 0, 1, 0, "URBF", fields, data=b"URBF")
        rows = events_to_rows([gfft_event(row, ("OUT1", "COLOR"), 1, 0)], 0)
        self.tables["layouts"] += rows["layouts"]
        self.tables["quarantine"] += rows["quarantine"]
        return self

    def tx(self, tsnr: int, commit: datetime, isn: int, layout: RecordLayout,
           values: dict) -> Batch:
        names = {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr}
        self.tables["transactions"].append({**names, "dbid": 10006, "record_count": 1,
                                            "commit_time": commit, "origin": "live",
                                            "initial_state": False, "landed_at": T0})
        self.tables["records"].append({**names, "rsnr": 1, "fnr": 4, "isn": isn, "type": "U"})
        self.tables["images"].append({**names, "rsnr": 1, "dsnr": 1, "image_type": "A",
                                      "payload": encode_payload(values, layout, ebcdic=True),
                                      "acode": 0, "wcode": 0, "arc": 0})
        return self

    def frame(self, spark):
        return spark.createDataFrame(to_output({k: [dict(r) for r in v]
                                                for k, v in self.tables.items()}), OUTPUT_DDL)


def _settings(base: Settings, lake: Path) -> Settings:
    """The hand-made rows here stamp GFFT and commit times on a TOD clock set to UTC."""
    layout = Layout(subscription="COLOR", dbid=10006, fnr=4, columns=COLUMNS, history=True)
    utc = base.replicator.model_copy(update={"tod_leap_seconds": 0, "tod_utc_offset": "+00:00"})
    return base.model_copy(update={"layouts": [layout], "replicator": utc,
                                   "stream": base.stream.model_copy(
                                       update={"lake_dir": str(lake)})})


def _land(spark, settings: Settings, batch: Batch, batch_id: int) -> dict[str, int]:
    """What the sink does: the raw layouts table first, then the typed tables."""
    frame = batch.frame(spark)
    (table_frame(frame, "layouts", batch_id).write.format("delta").mode("append")
     .option("txnAppId", f"{APP}-layouts").option("txnVersion", batch_id)
     .save(table_path(settings, "layouts")))
    return land_typed(spark, batch.tables, batch_id, settings, APP, frame=frame)


def _batches() -> list[Batch]:
    t1, t2, t3 = T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    red = {"color": "RED", "amount": Decimal("1.50")}
    return [
        # the GFFT and the data it describes in one batch; an image committed before the
        # first version (clock skew) takes the oldest version: there is no format buffer
        Batch().gfft(V1, t1, "GFB1").tx(1, t1 + timedelta(seconds=10), 1, V1, red)
        .tx(2, t1 - timedelta(seconds=5), 2, V1, {"color": "BLUE", "amount": Decimal(-2)}),
        # a second version adds AC (city); a late transaction still committed under V1
        Batch().gfft(V2, t2, "GFB2")
        .tx(3, t2 + timedelta(seconds=1), 1, V2, {**red, "color": "PINK", "city": "BONN"})
        .tx(4, t1 + timedelta(minutes=30), 2, V1, {"color": "LATE", "amount": Decimal(7)})
        .gfft(V1, t1, "GFB1"),  # the first version sent again: the same key
        # a third version changes a column's type: refused, its image quarantined
        Batch().gfft(V3, t3, "GFB3").tx(5, t3 + timedelta(seconds=1), 3, V3,
                                         {"color": "GREY", "amount": "ABC"}),
        # after a "restart" (nothing kept in memory anyway): versions read back from Delta
        Batch().tx(6, t2 + timedelta(minutes=5), 4, V2,
                   {"color": "GOLD", "amount": Decimal(4), "city": "KOELN"}),
    ]


@pytest.fixture(scope="module")
def landed(spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    settings = _settings(test_settings, tmp_path_factory.mktemp("gfft") / "lake")
    ensure_tables(spark, settings)
    counts = [_land(spark, settings, b, i) for i, b in enumerate(_batches())]
    replay = land_typed(spark, _batches()[1].tables, 1, settings, APP)
    return settings, counts, replay


def _read(spark, settings: Settings, name: str) -> list:
    return spark.read.format("delta").load(table_path(settings, name)).collect()


def test_first_gfft_creates_the_columns_and_a_second_adds_one(spark, landed) -> None:
    settings = landed[0]
    for table in ("changes_color_4", "current_color_4", "history_color_4"):
        schema = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(
            table_path(settings, table)).schema.fields}
        assert (schema["color"], schema["amount"], schema["city"]) == (
            "string", "decimal(7,2)", "string"), table
    current = {r.isn: (r.color, r.amount, r.city) for r in _read(spark, settings,
                                                                 "current_color_4")}
    assert current == {1: ("PINK", Decimal("1.50"), "BONN"),
                       2: ("LATE", Decimal(7), None),   # decoded with V1: no city
                       3: (None, None, None),           # refused version: unverified
                       4: ("GOLD", Decimal(4), "KOELN")}  # V2 read back from the table
    changes = sorted((r.tsnr, r.color, r.city) for r in _read(spark, settings,
                                                              "changes_color_4"))
    assert changes == [(1, "RED", None), (2, "BLUE", None), (3, "PINK", "BONN"),
                       (4, "LATE", None), (6, "GOLD", "KOELN")]


def test_type_change_is_refused_and_recorded(spark, landed) -> None:
    settings = landed[0]
    stored = {(r.gfid, int(r.created_stck), r.created) for r in _read(spark, settings,
                                                                     "layouts")}
    assert (("GFB3", stck(T0 + timedelta(hours=2)), T0 + timedelta(hours=2))
            in {(g, s, c.replace(tzinfo=UTC) if c.tzinfo is None else c) for g, s, c in stored})
    bad = [r for r in _read(spark, settings, "quarantine") if r.source == "payload"]
    assert [r.tsnr for r in bad] == [5]
    assert "layout GFB3@2025-01-01T14:00:00+00:00 refused: column amount is decimal(7,2) " \
           "in the tables, string in this layout" in bad[0].reason
    events = sorted((r.batch_id, r.action, r.result) for r in _read(spark, settings,
                                                                    "schema_events"))
    assert events == [(0, "layout_version", "columns added: color, amount"),
                      (1, "layout_version", "columns added: city"),
                      (2, "layout_refused", bad[0].reason.split(": ", 1)[1])]


def test_replayed_batch_writes_nothing_twice(spark, landed) -> None:
    settings, counts, replay = landed
    assert counts[1]["changes_color_4"] == 2 and replay["changes_color_4"] == 2
    assert len(_read(spark, settings, "changes_color_4")) == 5
    assert len(_read(spark, settings, "schema_events")) == 3
    history = sorted((r.isn, r.color, r.is_current) for r in _read(spark, settings,
                                                                   "history_color_4"))
    assert history == [(1, "PINK", True), (1, "RED", False), (2, "BLUE", False),
                       (2, "LATE", True), (3, None, True), (4, "GOLD", True)]


# ------------------------------------------------------------------ a version widens a column
V4 = parse_format_buffer("AA,8,A,AB,6,P,2.", COLUMNS)  # amount P4 → P6: decimal(11,2)


@pytest.fixture(scope="module")
def widened(spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    """V1, then AUTI says AB grew to 6 bytes (stale: V1 reads 4), then V4 reads 6 bytes: the
    tables widen in place, nothing is quarantined, the file is active again; replayed."""
    from pipeline.spark.typed.lifecycle import apply_lifecycle
    from pipeline.urb import make_element
    from tests.e2e.test_lifecycle import _status

    settings = _settings(test_settings, tmp_path_factory.mktemp("gfft-widen") / "lake")
    ensure_tables(spark, settings)
    t1, t2 = T0, T0 + timedelta(hours=2)
    auti = Batch()
    auti.tables["status_events"] = [_status("AUTI", 3600, detail=make_element(
        "URBSU", urbsutyp=0x41, fieldname="AB", newlength=6))]
    wide = (Batch().gfft(V4, t2, "GFB4")
            .tx(3, t2 + timedelta(seconds=1), 2, V4,
                {"color": "WIDE", "amount": Decimal("123456789.12")})
            # late, committed under V1: decoded with V1 into the widened column
            .tx(4, t1 + timedelta(minutes=30), 3, V1, {"color": "OLD", "amount": Decimal(3)}))
    _land(spark, settings, Batch().gfft(V1, t1, "GFB1").tx(
        1, t1 + timedelta(seconds=1), 1, V1, {"color": "RED", "amount": Decimal("1.50")}), 0)
    _land(spark, settings, auti, 1)
    apply_lifecycle(spark, auti.frame(spark), 1, settings, APP)
    stale = sorted(_read(spark, settings, "file_status"), key=lambda r: r.version)
    counts = _land(spark, settings, wide, 2)
    replay = land_typed(spark, wide.tables, 2, settings, APP)
    return settings, stale, counts, replay


def test_a_wider_version_is_accepted_and_widens_the_tables(spark, widened) -> None:
    settings, _, counts, replay = widened
    for table in ("changes_color_4", "current_color_4", "history_color_4"):
        schema = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(
            table_path(settings, table)).schema.fields}
        assert (schema["color"], schema["amount"]) == ("string", "decimal(11,2)"), table
    assert counts["quarantine_changes_color_4"] == 0 == replay["quarantine_changes_color_4"]
    assert [r for r in _read(spark, settings, "quarantine") if r.source == "payload"] == []
    current = {r.isn: (r.color, r.amount) for r in _read(spark, settings, "current_color_4")}
    assert current == {1: ("RED", Decimal("1.50")), 2: ("WIDE", Decimal("123456789.12")),
                       3: ("OLD", Decimal(3))}
    assert len(_read(spark, settings, "changes_color_4")) == 3, "the replay wrote nothing"


def test_deltalake_refuses_a_table_widened_in_place(widened) -> None:
    """README's reader table: a widened column gives the table Delta's ``typeWidening``
    feature, which ``deltalake`` (and the readers built on it) refuses; Spark reads it (the
    test above). Should a later deltalake read it, the README's table must say so."""
    from deltalake import DeltaTable

    settings = widened[0]
    with pytest.raises(Exception, match="typeWidening"):
        DeltaTable(table_path(settings, "current_color_4")).to_pyarrow_table()


def test_the_version_that_reads_the_changed_field_clears_the_layout_kind(spark,
                                                                         widened) -> None:
    settings, stale, _, _ = widened
    assert [(s.st, s.status, s.stale_kinds) for s in stale] == [("AUTI", "stale", "layout")]
    status = sorted(_read(spark, settings, "file_status"), key=lambda r: r.version)
    assert [(s.version, s.st, s.action, s.status, s.reason, s.batch_id) for s in status] == [
        (1, "AUTI", "widen", "stale", "the layout no longer matches the file", 1),
        (2, "GFFT", "clear_stale", "active", "the layout now reads AB as 6", 2)]
    assert status[1].since == (T0 + timedelta(hours=2)).replace(tzinfo=None)
    events = sorted((r.batch_id, r.st, r.action, r.result) for r in _read(
        spark, settings, "schema_events"))
    assert events == [
        (0, "GFFT", "layout_version", "columns added: color, amount"),
        (1, "AUTI", "widen", "layout review: AB is now 6 P, the layout reads 4 P; a GFFT "
         "version that reads it clears this (the tables widen amount to decimal(11,2) with "
         "it)"),
        (2, "GFFT", "clear_stale", "the layout now reads AB as 6"),
        (2, "GFFT", "layout_version", "widened: amount decimal(7,2) -> decimal(11,2)")]
