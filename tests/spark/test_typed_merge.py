"""Typed tables on hand-made batches (no Kafka): the version-guarded MERGE against the
engine-free reference model (pipeline.typed.apply_batch), quarantine and idempotent replays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.payload import encode_payload, layout_from_conf
from pipeline.spark.state_stage import OUTPUT_DDL, to_output
from pipeline.spark.tables import ensure_tables, table_path
from pipeline.spark.typed import write_typed_tables
from pipeline.typed import action_of, apply_batch

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
APP = "typed-test"


def _settings(base: Settings, lake: Path) -> Settings:
    return base.model_copy(update={"stream": base.stream.model_copy(
        update={"lake_dir": str(lake)})})


class Batch:
    """Rows of the (table, json, blob) batch the state function emits, built by hand."""

    def __init__(self, settings: Settings) -> None:
        lay = next(x for x in settings.layouts if x.subscription == "COLOR")
        self.layout = layout_from_conf(lay.layout_conf())
        self.tables: dict[str, list[dict]] = {"transactions": [], "records": [], "images": []}
        self.changes: list[dict] = []  # what the reference model sees

    def tx(self, tsnr: int, sec: int, records: list[tuple], *, origin: str = "live",
           epoch: int = 1, destination: str = "OUT1") -> Batch:
        """records: (isn, type, before (color, code) | None, after | None | b'raw')."""
        names = {"subscription": "COLOR", "destination": destination, "epoch": epoch,
                 "tsnr": tsnr}
        commit = T0 + timedelta(seconds=sec)
        self.tables["transactions"].append({**names, "dbid": 10006, "record_count": len(
            records), "commit_time": commit, "origin": origin, "initial_state": tsnr == 0,
            "landed_at": T0})
        for rsnr, (isn, typ, before, after) in enumerate(records, start=1):
            self.tables["records"].append({**names, "rsnr": rsnr, "fnr": 4, "isn": isn,
                                           "type": typ})
            images = [(t, v) for t, v in (("B", before), ("A", after)) if v is not None]
            for dsnr, (t, v) in enumerate(images, start=1):
                payload = v if isinstance(v, bytes) else encode_payload(
                    {"color": v[0], "code": Decimal(v[1])}, self.layout, ebcdic=True)
                self.tables["images"].append({**names, "rsnr": rsnr, "dsnr": dsnr,
                                              "image_type": t, "payload": payload, "acode": 0,
                                              "wcode": 0, "arc": 0})
            good = isinstance(after, tuple)
            self.changes.append({
                "isn": isn, "action": action_of(typ, good), "commit_time": commit.replace(
                    tzinfo=None), "epoch": epoch, "tsnr": tsnr, "rsnr": rsnr,
                "destination": destination, "color": after[0] if good else None,
                "code": Decimal(after[1]) if good else None})
        return self

    def frame(self, spark):
        return spark.createDataFrame(to_output({k: [dict(r) for r in v]
                                                for k, v in self.tables.items()}), OUTPUT_DDL)


def _current(spark, settings: Settings) -> dict[int, tuple]:
    rows = spark.read.format("delta").load(table_path(settings, "current_color_4")).collect()
    return {r.isn: (r.color, r.code, r.deleted, r.verified, r.tsnr) for r in rows}


def _model(state: dict[int, dict]) -> dict[int, tuple]:
    return {isn: (r["color"], r["code"], r["deleted"], r["verified"], r["tsnr"])
            for isn, r in state.items()}


@pytest.fixture(scope="module")
def landed(spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    settings = _settings(test_settings, tmp_path_factory.mktemp("typed") / "lake")
    ensure_tables(spark, settings)
    first = (Batch(settings)
             .tx(1, 10, [(1, "I", None, ("RED", 1)), (2, "I", None, ("BLUE", -2)),
                         (3, "I", None, ("GREEN", 3))])
             .tx(2, 20, [(1, "U", ("RED", 1), ("PINK", 11))])
             # two changes of ISN 1 in one batch, and a delete
             .tx(3, 30, [(1, "U", ("PINK", 11), ("BLACK", -111)), (3, "D", ("GREEN", 3), None)])
             # initial state racing the live updates: two tsnr-0 pseudo-transactions
             .tx(0, 25, [(1, "R", None, ("INIT1", 0)), (2, "R", None, ("INIT2", 22))],
                 origin="initial_state")
             .tx(0, 26, [(4, "R", None, ("INIT4", -4))], origin="initial_state")
             # an after image that does not match the layout
             .tx(6, 31, [(5, "I", None, b"\x00" * 5)]))
    second = (Batch(settings)
              .tx(4, 15, [(2, "U", ("BLUE", -2), ("LATE", 99))])          # late
              .tx(1, 10, [(1, "I", None, ("RED", 1))], destination="OUT1")  # duplicate
              .tx(5, 40, [(4, "U", ("INIT4", -4), None)], origin="resend"))  # before only
    counts = [write_typed_tables(spark, first.frame(spark), 0, settings, APP),
              write_typed_tables(spark, second.frame(spark), 1, settings, APP)]
    after_two = _current(spark, settings)
    # replay batch 1 (crash after commit), and batch 0 with other content: both skipped
    write_typed_tables(spark, second.frame(spark), 1, settings, APP)
    write_typed_tables(spark, second.frame(spark), 0, settings, APP)
    return settings, first, second, counts, after_two


def test_current_state_equals_the_reference_model(spark, landed) -> None:
    _, first, second, _, after_two = landed
    state = apply_batch({}, first.changes, ["color", "code"], "remove")
    expect_first = _model(state)
    state = apply_batch(state, second.changes, ["color", "code"], "remove")
    assert after_two == _model(state)
    assert expect_first[1][0] == "BLACK" and 3 not in expect_first  # sanity of the model
    assert after_two[1] == ("BLACK", Decimal(-111), False, True, 3)   # newest of two in a batch
    assert after_two[2] == ("INIT2", Decimal(22), False, True, 0)    # initial state > older live
    assert 3 not in after_two                                        # delete removes
    assert after_two[4] == ("INIT4", Decimal(-4), False, False, 5)   # resend: unverified
    assert after_two[5] == (None, None, False, False, 6)            # bad image: unverified


def test_replays_are_idempotent(spark, landed) -> None:
    settings, first, second, counts, after_two = landed
    assert _current(spark, settings) == after_two
    changes = spark.read.format("delta").load(table_path(settings, "changes_color_4"))
    good = [i for b in (first, second) for i in b.tables["images"]
            if i["payload"] != b"\x00" * 5]
    assert changes.count() == len(good)
    assert counts[0]["changes_color_4"] + counts[1]["changes_color_4"] == len(good)


def test_bad_image_is_quarantined_and_initial_state_rows_keep_their_isn(spark, landed) -> None:
    settings = landed[0]
    q = spark.read.format("delta").load(table_path(settings, "quarantine")).collect()
    assert [(r.source, r.tsnr, bytes(r.raw)) for r in q] == [("payload", 6, b"\x00" * 5)]
    assert "layout COLOR/10006/4" in q[0].reason
    changes = spark.read.format("delta").load(table_path(settings, "changes_color_4"))
    init = {(r.isn, r.color) for r in changes.where("tsnr = 0").collect()}
    assert init == {(1, "INIT1"), (2, "INIT2"), (4, "INIT4")}
