"""The typed tables' version guard over two databases whose clocks disagree (issue 35).

The guard orders an ISN's changes by commit time first. That is sound because an ISN lives in
one database, whose commit times share one clock, and each (subscription, dbid, fnr) has tables
of its own (``typed_table_suffix``): database B running 50 ms behind A, with the same file
number and the same ISNs, must give each database's current_ and history_ tables exactly its
own changes in its own order — B's changes, older by A's clock, are never held against A's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from pipeline.config import Layout, Settings, Subscription
from pipeline.payload import encode_payload, layout_from_conf
from pipeline.spark.engine.state_stage import OUTPUT_DDL, to_output
from pipeline.spark.land.tables import SCHEMAS, table_path
from pipeline.spark.typed.stage import write_typed_tables

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
A, B = 10006, 10007
SKEW = timedelta(milliseconds=-50)  # B's clock behind A's
FB = "AA,16,A,AB,16,U."


def _settings(base: Settings, lake: Path) -> Settings:
    sub = Subscription(name="COLOR", files=[{"dbid": A, "fnr": 4}, {"dbid": B, "fnr": 4}])
    # lean: the format buffer only (no GFFT reads), deletes marked (no tombstone tables)
    layouts = [Layout(subscription="COLOR", dbid=d, fnr=4, format_buffer=FB, history=True,
                      gfft="ignore", deletes="mark", columns={"AA": "color", "AB": "code"})
               for d in (A, B)]
    return base.model_copy(update={
        "subscriptions": [sub], "layouts": layouts,
        "stream": base.stream.model_copy(update={"lake_dir": str(lake)})})


# (tsnr in arrival order, database, ms after T0 on the replicator's clock, isn, type, after),
# one batch (lean: the tables are per file, so a second batch would only repeat the MERGE
# path test_typed_merge covers). B's stamps are SKEW earlier: B's changes are stamped before
# A's changes that preceded them (tsnr 2 before 1, 6 before 5 …), and B's update of ISN 1 at
# tsnr 6 is stamped before A's update of ISN 1 at tsnr 5.
BATCHES = [
    [(1, A, 10, 1, "I", "A-RED"), (2, B, 30, 1, "I", "B-RED"), (3, A, 40, 2, "I", "A-BLUE"),
     (4, B, 60, 2, "I", "B-BLUE"), (5, A, 70, 1, "U", "A-PINK"), (6, B, 80, 1, "U", "B-PINK"),
     (7, A, 90, 2, "U", "A-GOLD"), (8, B, 100, 1, "U", "B-GREY"), (9, A, 110, 2, "D", None)],
]


def _file_status_table(spark, settings: Settings) -> None:
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(f"{SCHEMAS['file_status']}, batch_id bigint")
    spark.createDataFrame([], schema).write.format("delta").save(
        table_path(settings, "file_status"))


def _commit(dbid: int, ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms) + (SKEW if dbid == B else timedelta())


def _frame(spark, settings: Settings, batch: list[tuple]):
    layout = layout_from_conf(settings.layouts[0].layout_conf())
    tables: dict[str, list[dict]] = {"transactions": [], "records": [], "images": []}
    for tsnr, dbid, ms, isn, typ, color in batch:
        names = {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr}
        tables["transactions"].append({**names, "dbid": dbid, "record_count": 1,
                                       "commit_time": _commit(dbid, ms), "origin": "live",
                                       "initial_state": False, "landed_at": T0})
        tables["records"].append({**names, "rsnr": 1, "fnr": 4, "isn": isn, "type": typ})
        images = [("B", f"OLD{tsnr}")] if typ != "I" else []
        images += [("A", color)] if color else []
        for dsnr, (kind, value) in enumerate(images, start=1):
            payload = encode_payload({"color": value, "code": Decimal(tsnr)}, layout,
                                     ebcdic=True)
            tables["images"].append({**names, "rsnr": 1, "dsnr": dsnr, "image_type": kind,
                                     "payload": payload, "acode": 0, "wcode": 0, "arc": 0})
    return spark.createDataFrame(to_output(tables), OUTPUT_DDL)


def _expected(dbid: int) -> tuple[dict[int, str], dict[int, list[tuple]]]:
    """Each ISN's current color and its history (color, valid_from, valid_to) from the
    database's own changes in its own commit order."""
    changes = sorted((c for batch in BATCHES for c in batch if c[1] == dbid),
                     key=lambda c: _commit(dbid, c[2]))
    current: dict[int, str] = {}
    history: dict[int, list[tuple]] = {}
    for _, _, ms, isn, typ, color in changes:
        at = _commit(dbid, ms).replace(tzinfo=None)
        if history.get(isn):
            history[isn][-1] = (*history[isn][-1][:2], at)
        history.setdefault(isn, []).append((color, at, None))
        if typ == "D":
            current.pop(isn, None)
        else:
            current[isn] = color
    return current, history


def test_each_database_keeps_its_own_isn_versions_under_skewed_clocks(spark, test_settings,
                                                                      tmp_path) -> None:
    settings = _settings(test_settings, tmp_path / "lake")
    assert [lay.table_suffix() for lay in settings.layouts] == ["color_4", "color_10007_4"]
    _file_status_table(spark, settings)  # the one raw table the typed step reads
    for batch_id, batch in enumerate(BATCHES):
        write_typed_tables(spark, _frame(spark, settings, batch), batch_id, settings, "skew")

    def read(name: str) -> list:
        return spark.read.format("delta").load(table_path(settings, name)).collect()

    for dbid, suffix in ((A, "color_4"), (B, "color_10007_4")):
        current, history = _expected(dbid)
        got = {r.isn: r.color.strip() for r in read(f"current_{suffix}") if not r.deleted}
        assert got == current, f"current_{suffix}"
        rows = sorted(read(f"history_{suffix}"), key=lambda r: (r.isn, r.valid_from))
        got_history: dict[int, list[tuple]] = {}
        for r in rows:
            got_history.setdefault(r.isn, []).append(
                (None if r.deleted else r.color.strip(), r.valid_from, r.valid_to))
        assert got_history == history, f"history_{suffix}"
    assert {r.color.strip() for r in read("current_color_10007_4")} == {"B-GREY", "B-BLUE"}
