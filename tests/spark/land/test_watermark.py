"""The consistency watermark through the real batch writer and Delta tables: held while a
batch's commits are in progress (a later step of the batch fails after the raw tables
committed: readers still see the previous watermark; the retried batch moves it), stopped
before an open gap and moved past it when the gap fills, across a restart of the step (the
marks read back from the table), in both writers: the driver's direct commit before the
restart, Spark's append after it. The rule itself, with its property tests, is engine-free
(tests/unit/test_watermark_rule.py, tests/unit/integration/test_watermark_machine.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.spark.land.batch_writer import LandedBatch, batch_writer
from pipeline.spark.land.raw import RawTables
from pipeline.spark.land.report import pack_times
from pipeline.spark.land.tables import OUTPUT_DDL, STATS_TABLE, ensure_table, table_path
from pipeline.spark.land.watermark import Watermarks
from pipeline.spark.land.watermark_rule import OPEN_STATES, call_newest

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
US = 1_000_000
DBID = 10006


def _us(tsnr: int) -> int:
    """Commit time of tsnr: T0 + tsnr minutes (Unix µs)."""
    return int((T0 + timedelta(minutes=tsnr)).timestamp()) * US


def _frame(spark, tsnrs: list[int], gaps: list[tuple[str, int, str]] = ()):
    """A batch as the state stage emits it: the transactions' rows, gap transitions
    (gap id, tsnr, state) and the state call's metrics row with the commit times and the
    watermark's report (``call_newest``: the gaps open after the call are those given open)."""
    rows = []
    for t in tsnrs:
        when = (T0 + timedelta(minutes=t)).isoformat()
        rows.append(("transactions", json.dumps({
            "subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": t,
            "dbid": DBID, "commit_time": when, "landed_at": when, "origin": "live"}), None))
    for seq, (gap_id, t, state) in enumerate(gaps):
        rows.append(("gaps", json.dumps({
            "subscription": "COLOR", "destination": "OUT1", "epoch": 1, "gap_id": gap_id,
            "from_tsnr": t, "to_tsnr": t, "state": state, "kind": "tsnr", "seq": seq}), None))
    stats = {"destination": "OUT1", "subscription": "COLOR", "bytes": 0, "open_gaps": 0,
             "landed": len(tsnrs), "times": pack_times([[_us(t), None, None] for t in tsnrs]),
             "landed_us": 0,
             "newest": call_newest({}, [(1, t, DBID, _us(t)) for t in tsnrs],
                                   [(1, t, g) for g, t, state in gaps if state in OPEN_STATES])}
    rows.append((STATS_TABLE, json.dumps(stats), None))
    return spark.createDataFrame(rows, OUTPUT_DDL)


class Boom:
    """A later step of the batch that fails (a typed MERGE, a Kafka send …)."""

    lap = None

    def land(self, batch: LandedBatch) -> dict[str, int]:
        raise RuntimeError("failed after the raw tables committed")


def _rows(settings: Settings, table: str) -> list[dict]:
    """The table's rows as its Delta log has them (read without Spark: these reads are the
    test's checks, not what it tests)."""
    from deltalake import DeltaTable

    return DeltaTable(table_path(settings, table)).to_pyarrow_table().to_pylist()


def _watermark(spark, settings: Settings) -> datetime | None:
    rows = sorted(_rows(settings, "watermarks"), key=lambda r: r["computed_at"])
    assert all(r["dbid"] == DBID for r in rows), "a watermark per database"
    return rows[-1]["watermark"] if rows and rows[-1]["watermark"] else None


def _at(settings: Settings, minute: int) -> datetime:
    """The watermark once tsnr ``minute``'s commit is the newest before any open gap: less
    the nucleus lag and 1 µs."""
    lag = timedelta(milliseconds=settings.stream.watermark.nucleus_lag_ms)
    return T0 + timedelta(minutes=minute) - lag - timedelta(microseconds=1)


def _count(spark, settings: Settings, table: str) -> int:
    return len(_rows(settings, table))


def test_held_while_commits_are_in_progress_and_never_past_an_open_gap(
        spark, test_settings: Settings, tmp_path: Path) -> None:
    stream = test_settings.stream.model_copy(update={
        "lake_dir": str(tmp_path / "lake"), "raw_writer": "spark"})
    settings = test_settings.model_copy(update={"stream": stream, "layouts": []})

    def marks(writer: str) -> Watermarks:  # who writes the watermark rows
        return Watermarks(settings.model_copy(update={"stream": stream.model_copy(
            update={"raw_writer": writer})}))

    for table in ("transactions", "gaps", "watermarks"):  # the tables the batches touch
        ensure_table(spark, settings, table)
    run = batch_writer(settings, "app", [RawTables(settings), marks("direct")])
    run(_frame(spark, [1, 2]), 0)
    assert _watermark(spark, settings) == _at(settings, 2)

    failing = batch_writer(settings, "app", [RawTables(settings), Boom(), marks("direct")])
    with pytest.raises(RuntimeError, match="failed after the raw tables"):
        failing(_frame(spark, [4, 5], [("1:3", 3, "open")]), 1)
    assert _count(spark, settings, "transactions") == 4, "the raw commits are done …"
    assert _watermark(spark, settings) == _at(settings, 2), "… the watermark waits"

    run(_frame(spark, [4, 5], [("1:3", 3, "open")]), 1)  # the batch again, whole
    assert _count(spark, settings, "transactions") == 4
    assert _watermark(spark, settings) == _at(settings, 2), "tsnr 3 is missing"
    run(_frame(spark, [6], [("1:3", 3, "requested")]), 2)
    assert _watermark(spark, settings) == _at(settings, 2)

    restarted = batch_writer(settings, "app", [RawTables(settings), marks("spark")])
    restarted(_frame(spark, [3], [("1:3", 3, "filled")]), 3)  # marks read back first
    assert _watermark(spark, settings) == _at(settings, 6), "filled: past the gap"
    assert _count(spark, settings, "watermarks") == 4, "one row per batch that moved it"
