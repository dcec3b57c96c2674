"""The direct writer's commits into a current table (``file_writer._write_current``) on a
delta-rs table, without Spark: many inserts beside updates go by an append of their own, a few
stay in the MERGE, inserts alone are an append; either way the table and its change feed hold
the batch's ops, and the batch's ``txn`` is on the last commit only."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import pipeline.spark.typed.file_writer as file_writer

APP = "app-current"
SCHEMA = pa.schema([("isn", pa.int64()), ("color", pa.string())])


def _table(path: str) -> DeltaTable:
    rows = pa.table({"isn": [1, 2, 3], "color": ["RED", "BLUE", "GOLD"]}, schema=SCHEMA)
    write_deltalake(path, rows, configuration={"delta.enableChangeDataFeed": "true"})
    return DeltaTable(path)


def _batch() -> tuple[pa.Table, np.ndarray]:
    """Delete ISN 1, update ISN 2, leave ISN 3 (an older version: no op), insert 5 and 6."""
    source = pa.table({"isn": [1, 2, 3, 5, 6], "color": ["RED", "PINK", "OLD", "LIME", "TEAL"]},
                      schema=SCHEMA)
    return source, np.array(["delete", "update", None, "insert", "insert"], dtype=object)


def _feed(table: DeltaTable, start: int) -> list[tuple]:
    rows = pa.table(table.load_cdf(starting_version=start).read_all()).to_pylist()
    return sorted((r["_commit_version"], r["isn"], r["_change_type"], r["color"]) for r in rows)


@pytest.mark.parametrize(("split_inserts", "commits"), [(2, 2), (3, 1)])
def test_the_ops_land_with_the_txn_on_the_last_commit(
        tmp_path, monkeypatch: pytest.MonkeyPatch, split_inserts: int, commits: int) -> None:
    monkeypatch.setattr(file_writer, "SPLIT_INSERTS", split_inserts)
    table = _table(str(tmp_path))
    source, ops = _batch()
    copied = file_writer._write_current(table, source, ops, APP, 7)
    table.update_incremental()

    assert table.version() == commits, "two inserts split off, or one MERGE"
    assert copied == 1, "the MERGE rewrote the one file: ISN 3 copied unchanged"
    assert dict(zip(*table.to_pyarrow_table().sort_by("isn").to_pydict().values(),
                    strict=True)) == {2: "PINK", 3: "GOLD", 5: "LIME", 6: "TEAL"}
    for version in range(1, commits + 1):
        at = DeltaTable(str(tmp_path), version=version)
        assert at.transaction_version(APP) == (7 if version == commits else None)
    changes = [row[1:] for row in _feed(table, 1)]
    assert sorted(changes) == [(1, "delete", "RED"), (2, "update_postimage", "PINK"),
                               (2, "update_preimage", "BLUE"), (5, "insert", "LIME"),
                               (6, "insert", "TEAL")]


def test_inserts_alone_are_one_append(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_writer, "SPLIT_INSERTS", 1_000)
    table = _table(str(tmp_path))
    source, ops = _batch()
    ops = np.array([None, None, None, "insert", "insert"], dtype=object)
    assert file_writer._write_current(table, source, ops, APP, 3) == 0, "nothing copied"
    table.update_incremental()

    assert table.version() == 1 and table.transaction_version(APP) == 3
    assert table.history(1)[0]["operation"] == "WRITE", "an append, not a MERGE"
    assert [row[1:] for row in _feed(table, 1)] == [(5, "insert", "LIME"), (6, "insert", "TEAL")]


def test_a_batch_without_ops_commits_nothing(tmp_path) -> None:
    table = _table(str(tmp_path))
    source, _ = _batch()
    file_writer._write_current(table, source, np.full(5, None, dtype=object), APP, 4)
    table.update_incremental()
    assert table.version() == 0
