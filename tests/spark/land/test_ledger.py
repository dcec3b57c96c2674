"""The sinks' exactly-once appends: a replayed batch lands nothing twice, with or without the
Delta log's help (pipeline.spark.land.ledger), and a new app id (lost checkpoint) writes again."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.spark.land.ledger import CommitLedger, commit_user_metadata, tag, tagged_batch
from pipeline.spark.land.writes import copied_by, write_once


def _frame(spark, n: int, batch_id: int):
    return spark.range(n).selectExpr("id", f"cast({batch_id} as bigint) as batch_id")


def _count(spark, path: Path) -> int:
    return spark.read.format("delta").load(str(path)).count()


def test_tag_round_trip() -> None:
    assert tagged_batch(tag("app-1", 42), "app-1") == 42
    assert tagged_batch(tag("app-1", 42), "app-2") is None
    assert tagged_batch("urbpipe:app-1:x", "app-1") is None
    assert tagged_batch(None, "app-1") is None
    assert commit_user_metadata('{"add":{}}\n{"commitInfo":{"userMetadata":"u"}}') == "u"


def test_a_merges_copied_rows_are_read_from_its_own_commit_only() -> None:
    commit = "\n".join(json.dumps(a) for a in (
        {"commitInfo": {"operation": "MERGE",
                        "operationMetrics": {"numTargetRowsCopied": "990"}}},
        {"txn": {"appId": "app-1-current", "version": 7, "lastUpdated": 1}},
        {"add": {"path": "part-0.parquet", "stats": '{"txn": 1}'}}))
    assert copied_by(commit, "app-1-current", 7) == 990
    assert copied_by(commit, "app-1-current", 8) == 0    # an earlier batch's commit
    assert copied_by(commit, "app-2-current", 7) == 0    # another writer's
    assert copied_by(commit.split("\n", 1)[1], "app-1-current", 7) == 0  # no metrics
    assert copied_by("", "app-1-current", 7) == 0


def test_replayed_batches_land_once(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    ledger = CommitLedger(spark, "app-a")
    assert ledger.landed(str(path), 0) is False  # no table yet
    for batch_id in (0, 1, 1, 0, 2, 2):  # replays of the newest and of an older batch
        write_once(_frame(spark, 5, batch_id), str(path), "app-a-t", batch_id, ledger)
    assert _count(spark, path) == 15
    # a fresh ledger (a restarted driver) reads the same answer from the log
    fresh = CommitLedger(spark, "app-a")
    assert fresh.landed(str(path), 2) is True
    assert fresh.landed(str(path), 3) is False
    write_once(_frame(spark, 5, 2), str(path), "app-a-t", 2, fresh)
    assert _count(spark, path) == 15
    # a lost checkpoint gives a new app id: its batch 0 is new data
    write_once(_frame(spark, 5, 0), str(path), "app-b-t", 0, CommitLedger(spark, "app-b"))
    assert _count(spark, path) == 20


def test_untagged_commits_on_top_fall_back_to_txn(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    ledger = CommitLedger(spark, "app-c", max_scan=2)
    write_once(_frame(spark, 3, 0), path, "app-c-t", 0, ledger)
    for _ in range(3):  # e.g. maintenance commits by someone else, untagged
        _frame(spark, 1, 99).write.format("delta").mode("append").save(path)
    assert ledger.landed(path, 0) is None  # the log cannot tell within max_scan
    write_once(_frame(spark, 3, 1), path, "app-c-t", 1, ledger)  # txnAppId path
    write_once(_frame(spark, 3, 1), path, "app-c-t", 1, ledger)  # replay: skipped by Delta
    assert _count(spark, path) == 3 + 3 + 3
    txns = [json.loads(line)["txn"] for f in (Path(path) / "_delta_log").glob("*.json")
            for line in f.read_text().splitlines() if line.startswith('{"txn"')]
    assert [(t["appId"], t["version"]) for t in txns] == [("app-c-t", 1)]
