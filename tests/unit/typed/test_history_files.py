"""The direct writer's history files (``pipeline.spark.typed.history_files``) on a delta-rs
table, without Spark: batch after batch the table holds what the history model says, open
rows sit in their own files, and a batch rewrites only the files that hold what it changes."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction
from hypothesis import given, settings

from pipeline.spark.typed.history_files import Landed, land_history, stats
from pipeline.typed import apply_history_batch
from pipeline.typed.frames import with_flags
from tests.unit.typed.test_frames import HISTORY, SHOWN, _changes, _naive, _schema
from tests.unit.typed.test_versioning import T0, VALUES, arrivals, change

HISTORY_SHOWN = (*SHOWN, "valid_from", "valid_to", "is_current")


def _table(path: str) -> DeltaTable:
    schema = pa.schema([_schema().field(c) for c in HISTORY])
    write_deltalake(path, schema.empty_table())
    return DeltaTable(path)


def _land(table: DeltaTable, batch: list[dict], batch_id: int) -> Landed:
    commit = CommitProperties(app_transactions=[Transaction("app-history", batch_id)])
    written = land_history(table, with_flags(_changes(batch), batch_id), (), "app-history",
                           batch_id, commit)
    table.update_incremental()
    return written


def _rows(table: DeltaTable) -> dict:
    rows = table.to_pyarrow_table().to_pylist()
    return {(r["isn"], (_naive(r["commit_time"]), r["epoch"], r["tsnr"], r["rsnr"])):
            tuple(_naive(r[c]) for c in HISTORY_SHOWN) for r in rows}


def _model(history: dict) -> dict:
    return {k: tuple(r[c] for c in HISTORY_SHOWN) for k, r in history.items()}


@settings(deadline=None, max_examples=40)
@given(arrivals())
def test_batches_land_what_the_history_model_says(tmp_path_factory, case) -> None:
    _, batches = case
    table = _table(str(tmp_path_factory.mktemp("history")))
    model: dict = {}
    for batch_id, batch in enumerate(batches):
        _land(table, batch, batch_id)
        model = apply_history_batch(model, batch, VALUES)
        assert _rows(table) == _model(model)


def test_a_batch_rewrites_only_the_files_it_changes(tmp_path) -> None:
    table = _table(str(tmp_path))
    # ISNs 1-3 then 101-103, in two batches: their open rows land in two files by range
    _land(table, [change(i, "upsert", 1, tsnr=i, color="A") for i in (1, 2, 3)], 0)
    _land(table, [change(i, "upsert", 2, tsnr=i, color="B") for i in (101, 102, 103)], 1)
    before = set(table.file_uris())
    # a batch touching ISN 2 only: the file holding 101-103 stays as it is
    landed = _land(table, [change(2, "upsert", 3, tsnr=9, color="C")], 2)
    after = set(table.file_uris())
    # ISN 2's old version closed and its new one written; ISNs 1 and 3 copied unchanged
    assert landed == Landed(written=2, copied=2)
    kept = before & after
    assert kept, "the file of ISNs 101-103 is not rewritten"
    rows_kept = pa.concat_tables([pq.read_table(f) for f in kept])
    assert set(rows_kept.column("isn").to_pylist()) == {101, 102, 103}
    opened = [stats(pq.read_table(f)) for f in after - before]
    assert sum(s["numRecords"] for s in opened) == 4, "ISNs 1-3 rewritten, with the new version"
    # a replay of the batch (same txn) is the caller's to skip: the table says it landed
    assert table.transaction_version("app-history") == 2


def test_a_closed_file_the_batch_cannot_change_stays(tmp_path) -> None:
    """Commit times closer than a millisecond (a busy database): the previous batch's closed
    file is a candidate by its statistics (kept to the millisecond), but no row of it ends
    after the batch's earliest change, so it is neither removed nor written again."""
    table = _table(str(tmp_path))
    _land(table, [change(1, "upsert", 0.0001, tsnr=1, color="A"),
                  change(1, "upsert", 0.0002, tsnr=2, color="B"),
                  change(2, "upsert", 0.0002, tsnr=2, color="X")], 0)
    closed = {f for f in table.file_uris()
              if pq.read_table(f).column("valid_to").null_count == 0}
    assert len(closed) == 1, "batch 0 closed one version, in a file of its own"
    _land(table, [change(1, "upsert", 0.0004, tsnr=3, color="C")], 1)
    after = set(table.file_uris())
    assert closed <= after, "the closed file of batch 0 is not rewritten"
    assert len(after) == 3, "batch 1 closed B in a file of its own; ISNs 1-2 open"
    rows = sorted((r["isn"], r["color"], r["is_current"])
                  for r in table.to_pyarrow_table().to_pylist())
    assert rows == [(1, "A", False), (1, "B", False), (1, "C", True), (2, "X", True)]


def test_statistics_bound_the_rows(tmp_path) -> None:
    data = with_flags(_changes([change(1, "upsert", 1, color="A" * 40),
                                change(7, "delete", 5, color=None)]), 3)
    got = stats(data)
    assert got["numRecords"] == 2 and got["minValues"]["isn"] == 1
    assert got["maxValues"]["isn"] == 7 and "color" not in got["minValues"]
    assert got["nullCount"]["color"] == 1
    lo, hi = got["minValues"]["commit_time"], got["maxValues"]["commit_time"]
    assert lo == (T0 + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert hi == (T0 + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def test_files_from_before_a_column_was_added_read_it_as_null(tmp_path) -> None:
    """A GFFT version adds a value column: the older files lack it, their rows read null."""
    table = _table(str(tmp_path))
    _land(table, [change(1, "upsert", 1, color="A")], 0)
    table.alter.add_columns(__import__("deltalake").Field("city", "string", nullable=True))
    table.update_incremental()
    changes = with_flags(_changes([change(1, "upsert", 2, tsnr=2, color="B")]), 1)
    changes = changes.append_column("city", pa.array(["BONN"]))
    commit = CommitProperties(app_transactions=[Transaction("app-history", 1)])
    land_history(table, changes, (), "app-history", 1, commit)
    table.update_incremental()
    rows = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["tsnr"])
    assert [(r["color"], r["city"], r["is_current"]) for r in rows] == [
        ("A", None, False), ("B", "BONN", True)]
