"""``EarlyFiles`` writes a busy call's early Parquet files on a thread beside the call: the
frames must come back in flush order, every write finished, and a write that fails must
fail the call as an inline write did (never a file description without its file)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.reassembly.tables import transaction_columns
from pipeline.spark.engine import state_stage
from pipeline.spark.engine.state_stage import EarlyFiles
from pipeline.spark.land.datafiles import FILES_TABLE, DataFiles
from pipeline.spark.land.tables import DIRECT_TABLES
from tests.unit.integration.test_datafiles import txn


def _files(root: Path) -> DataFiles:
    return DataFiles(paths={t: str(root / t) for t in DIRECT_TABLES}, stats_columns=32,
                     mirror_subscriptions=frozenset(), mirror_statuses=frozenset())


def _columns(first_tsnr: int, count: int) -> dict:
    return transaction_columns([txn("COLOR", first_tsnr + i) for i in range(count)],
                               1_750_000_000_000)


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("urbpipe-early-files")}


def test_frames_come_back_in_flush_order_with_their_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_stage, "task_batch_id", lambda: 4)
    files = _files(tmp_path)
    for table in DIRECT_TABLES:
        (tmp_path / table).mkdir()
    early = EarlyFiles(files, 1_750_000_000_000, 0)
    for n in range(5):
        early(_columns(100 * n + 1, n + 1))
    frames = early.frames
    assert not _threads()
    described = [row for f in frames for row in f.to_dict("records")
                 if row["table"] == FILES_TABLE]
    written = []
    for row in described:
        doc = state_stage.orjson.loads(row["json"])
        if doc["table"] == "transactions":
            written.append(pq.read_table(tmp_path / "transactions" / doc["path"])
                           .column("tsnr").to_pylist())
    assert written == [[100 * n + 1 + i for i in range(n + 1)] for n in range(5)]
    assert sum(len(t) for t in early.times) == 15


def test_a_write_that_fails_fails_the_call(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_stage, "task_batch_id", lambda: 4)
    (tmp_path / "transactions").write_text("a file where the table's folder should be")
    early = EarlyFiles(_files(tmp_path), 1_750_000_000_000, 0)
    early(_columns(1, 3))
    with pytest.raises(OSError):
        early(_columns(4, 3))  # waits for the first write, which failed
        _ = early.frames
    early.close()
    assert not _threads()
