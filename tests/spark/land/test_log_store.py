"""The project's Delta log stores (jvm/logstore).

For local lakes (decision 0017): what its listing returns is what Delta's own returns, from
every start Delta asks for, on a real table's log (commits, Delta's checksums, checkpoints)
before and after the oldest versions are cleaned up; and the suite's session runs with it,
Delta's log clean-up included.

For S3 lakes (decision 0019), on the S3 emulator in a driver of its own: the same listings as
Delta's ``S3SingleDriverLogStore`` from every start, in one LIST request whatever the log
holds, and writes that check one key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.spark.engine.session import LOG_STORE_CLASS, S3_LOG_STORE_CLASS

INTERVAL = 10  # a checkpoint every 10 commits: three of them in 35 commits
COMMITS = 35
_DAY_S = 86_400


def _listing(spark: Any, store: Any, log: Path, start: str) -> list[str]:
    """The names ``store.listFrom(log/start)`` returns, as Delta takes them."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    found = store.listFrom(jvm.org.apache.hadoop.fs.Path(f"file://{log}/{start}"), conf)
    names = []
    while found.hasNext():
        names.append(found.next().getPath().getName())
    return names


def _stores(spark: Any) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return (jvm.urbpipe.delta.ProbingLocalLogStore(conf), jvm.io.delta.storage.LocalLogStore(conf))


def _delta_files(names: list[str]) -> list[str]:
    """What Delta reads of a listing: commits, its checksums and (classic) checkpoints."""
    return [n for n in names if n[:20].isdigit()
            and n[20:] in (".json", ".crc", ".checkpoint.parquet")]


@pytest.fixture(scope="module")
def log(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("logstore") / "t"
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta "
              f"TBLPROPERTIES ('delta.checkpointInterval' = '{INTERVAL}')")
    for i in range(COMMITS):
        spark.range(i, i + 1).write.format("delta").mode("append").save(str(path))
    return path / "_delta_log"


def _starts(newest: int) -> list[str]:
    return [*(f"{v:020d}." for v in (0, 1, 9, 10, 11, 20, 30, newest, newest + 1, newest + 5)),
            f"{10:020d}.crc", f"{10:020d}.json", f"{30:020d}.checkpoint.parquet"]


def test_the_session_runs_with_the_probing_store(spark) -> None:
    assert spark.conf.get("spark.delta.logStore.file.impl") == LOG_STORE_CLASS


def test_its_listing_is_deltas_from_every_start(spark, log: Path) -> None:
    probing, hadoop = _stores(spark)
    assert (log / f"{30:020d}.checkpoint.parquet").exists()
    for start in _starts(COMMITS):
        want = _delta_files(_listing(spark, hadoop, log, start))
        assert _listing(spark, probing, log, start) == want, start
    # a start that is not a version: the Hadoop way, whatever the folder holds
    assert _listing(spark, probing, log, "_last_checkpoint") == _listing(
        spark, hadoop, log, "_last_checkpoint")


def test_after_the_oldest_versions_are_cleaned_up_too(spark, log: Path, tmp_path: Path) -> None:
    """Delta's clean-up deletes from the oldest version up: a start below the oldest kept
    commit (the clean-up's own, from 0) finds it by its binary search."""
    probing, hadoop = _stores(spark)
    cleaned = tmp_path / "_delta_log"
    cleaned.mkdir()
    for f in log.iterdir():
        if f.is_file() and not (f.name.lstrip(".")[:20].isdigit()
                                and int(f.name.lstrip(".")[:20]) < 13):
            os.link(f, cleaned / f.name)
    for start in _starts(COMMITS):
        want = _delta_files(_listing(spark, hadoop, cleaned, start))
        assert _listing(spark, probing, cleaned, start) == want, start
    assert _listing(spark, probing, cleaned, f"{0:020d}.")[:2] == [f"{13:020d}.crc",
                                                                   f"{13:020d}.json"]


def test_deltas_log_clean_up_deletes_the_expired_versions_through_it(
        spark, tmp_path: Path) -> None:
    """Commits made two days ago (their modification time moved back: versions 0-9, up to the
    checkpoint at 10, which Delta keeps as the boundary) are deleted by the clean-up at the
    next checkpoint, which lists from version 0 through the store, as Delta's own store
    deletes them (measured: the same 20 files); the table reads the same after."""
    path = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta TBLPROPERTIES "
              f"('delta.checkpointInterval' = '{INTERVAL}', "
              "'delta.logRetentionDuration' = 'interval 1 days', "
              "'delta.deletedFileRetentionDuration' = 'interval 1 days')")
    for i in range(15):
        spark.range(i, i + 1).write.format("delta").mode("append").save(str(path))
    log = path / "_delta_log"
    old = time.time() - 2 * _DAY_S
    for f in log.iterdir():
        if f.name.lstrip(".")[:20].isdigit() and int(f.name.lstrip(".")[:20]) <= 9:
            os.utime(f, (old, old))
    for i in range(15, 20):  # version 20: a checkpoint, then the clean-up
        spark.range(i, i + 1).write.format("delta").mode("append").save(str(path))
    kept = sorted(int(f.name[:20]) for f in log.glob("*.json"))
    assert kept[0] == 10 and kept[-1] == 20, kept
    assert not (log / f"{0:020d}.json").exists()
    assert spark.read.format("delta").load(str(path)).count() == 20


def test_a_multi_part_checkpoint_is_listed_the_hadoop_way(spark, log: Path,
                                                          tmp_path: Path) -> None:
    """Its parts' names cannot be guessed: with ``_last_checkpoint`` naming one, every start
    is Delta's own listing (here, a part the probe would not have named)."""
    probing, hadoop = _stores(spark)
    parts = tmp_path / "_delta_log"
    parts.mkdir()
    for f in log.iterdir():
        if f.is_file() and f.name != "_last_checkpoint":
            os.link(f, parts / f.name)
    (parts / f"{30:020d}.checkpoint.0000000001.0000000001.parquet").write_bytes(b"")
    (parts / "_last_checkpoint").write_text('{"version":30,"size":4,"parts":1}')
    for start in _starts(COMMITS):
        assert _listing(spark, probing, parts, start) == _listing(spark, hadoop, parts, start)
    assert f"{30:020d}.checkpoint.0000000001.0000000001.parquet" in _listing(
        spark, probing, parts, f"{30:020d}.")


@pytest.fixture(scope="module")
def on_s3() -> dict[str, Any]:
    """tests/spark/land/s3_log_store_run.py's report: a table on the S3 emulator, in a driver
    of its own (the suite's session has no hadoop-aws)."""
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("s3_log_store_run.py"))],
                          capture_output=True, text=True, timeout=600)
    reports = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and reports, done.stderr[-3000:]
    return json.loads(reports[-1])


def test_an_s3_lake_gets_the_start_after_store(on_s3: dict[str, Any]) -> None:
    assert on_s3["impl"] == S3_LOG_STORE_CLASS


def test_on_s3_its_listing_is_deltas_from_every_start(on_s3: dict[str, Any]) -> None:
    for start, (ours, deltas) in on_s3["listings"].items():
        assert ours == deltas, start
    assert on_s3["listings"][f"{30:020d}."][0][:3] == [
        f"{30:020d}.checkpoint.parquet", f"{30:020d}.crc", f"{30:020d}.json"]


def test_on_s3_a_listing_costs_one_request_whatever_the_log_holds(
        on_s3: dict[str, Any]) -> None:
    """From the newest version: one LIST page with the project's store, fresh or aged by
    20,000 versions (40,000 keys); Delta's lists the whole folder, 40 pages of S3's 1,000."""
    assert on_s3["aged_keys"] > 40_000
    assert on_s3["fresh"]["ours"] == {"LIST": 1}
    assert on_s3["aged"]["ours"] == {"LIST": 1}
    assert on_s3["aged"]["deltas"]["LIST"] >= 40


def test_on_s3_a_write_checks_its_one_key_and_refuses_an_existing_one(
        on_s3: dict[str, Any]) -> None:
    assert on_s3["write"] == {"HEAD": 1, "PUT": 1}, "no LIST, no probe of the folder"
    assert on_s3["again"] == "java.nio.file.FileAlreadyExistsException"
    assert _delta_files(on_s3["overwritten"]) == [f"{10 ** 9:020d}.json"]
    assert on_s3["missing"] == "java.io.FileNotFoundException"


def test_on_s3_the_aged_table_takes_appends_and_reads_whole(on_s3: dict[str, Any]) -> None:
    assert on_s3["rows"] == COMMITS + 3
