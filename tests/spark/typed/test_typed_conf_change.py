"""A field added to a conf format buffer after the typed tables exist (Spark + Delta, no Kafka).

Images carrying a field the layout lacks are quarantined (source ``payload``); the operator adds
the field to the format buffer, mapped to a new column, and restarts: the start's reconcile
(``pipeline.spark.typed.reconcile``, what ``start_stream`` runs) adds the column and the new images
land. What was quarantined stays there (the current row
of its ISN unverified): ``urbpipe quarantine replay`` does not re-land payload rows
(conf/README.md, "layouts").
"""

from __future__ import annotations

from decimal import Decimal

from pipeline.config import Settings
from pipeline.spark.land.tables import ensure_tables, table_path
from pipeline.spark.typed.reconcile import reconcile_tables
from tests.spark.typed.test_typed_merge import land_typed
from tests.spark.typed.test_typed_types import Batch, _color

APP = "conf-change-test"
EBCDIC = (0, 0, 0)


def _with_rank(settings: Settings) -> Settings:
    layouts = [lay.model_copy(update={"format_buffer": "AA,16,A,AB,16,U,AC,4,P.",
                                      "columns": {**lay.columns, "AC": "rank"}})
               if lay.subscription == "COLOR" else lay for lay in settings.layouts]
    return settings.model_copy(update={"layouts": layouts})


def test_a_field_added_to_the_format_buffer_becomes_a_column_at_restart(
        spark, test_settings: Settings, tmp_path) -> None:
    settings = test_settings.model_copy(update={"stream": test_settings.stream.model_copy(
        update={"lake_dir": str(tmp_path / "lake")})})
    ensure_tables(spark, settings)
    rank_7 = bytes.fromhex("0000007c")  # AC packed +7
    before = (Batch().tx(1, 10, 4, [(1, "I", [("A", _color("RED", 1), EBCDIC)])])
              .tx(2, 11, 4, [(2, "I", [("A", _color("BLUE", 2) + rank_7, EBCDIC)])]))
    counts = land_typed(spark, before.tables, 0, settings, APP)
    assert counts["quarantine_changes_color_4"] == 1, "4 bytes after the last field"

    # a restart with the new conf: every call without a TypedTableSet checks the tables anew
    assert "changes_color_4.rank" in " ".join(reconcile_tables(spark, _with_rank(settings)))
    after = Batch().tx(3, 20, 4, [(3, "I", [("A", _color("GOLD", 3) + rank_7, EBCDIC)])])
    land_typed(spark, after.tables, 1, _with_rank(settings), APP)

    def read(table: str) -> list:
        return spark.read.format("delta").load(table_path(settings, table)).collect()

    assert {r.isn: (r.color, r.rank, r.verified) for r in read("current_color_4")} == {
        1: ("RED", None, True), 2: (None, None, False), 3: ("GOLD", Decimal(7), True)}
    assert sorted((r.tsnr, r.rank) for r in read("changes_color_4")) == [
        (1, None), (3, Decimal(7))]
    assert [(r.source, r.tsnr) for r in read("quarantine")] == [("payload", 2)]
