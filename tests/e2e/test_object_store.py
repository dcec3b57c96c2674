"""A lake and a checkpoint on an object store: the deployed job (``jobs/stream.py``) with
``stream.lake_dir`` and ``stream.checkpoint_dir`` on ``s3a://`` against an S3 server on
127.0.0.1 (moto), killed with -9 under load and restarted, with both raw writers.

The run switches writers across the kills, as README allows ("a restart may switch between
them"): Spark appends the bulk tables first (S3A in the JVM), then the Python workers write
them with pyarrow's S3 file system (``stream.raw_writer: direct``), and a kill -9 lands in
each phase, inside a batch if the machine lets the test catch one. Credentials reach both
clients through the environment only (the conf file names the endpoint, never a key).
In the end every generated transaction is in the lake exactly once, read back without Spark
through ``deltalake`` and the same ``object_store`` settings.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from pathlib import Path

import pytest
import yaml

from pipeline.config import Settings, load_settings
from pipeline.objectstore import access
from tests.conftest import S3Server
from tests.faults.helpers import (
    Job,
    PacedLoad,
    assert_exactly_once,
    delta_table,
    expected_transactions,
    fault_settings,
    landed_count,
    last_batch,
    wait_for,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(1200)]

START_S = 420.0  # JVM + Spark + first batch: minutes when the 2-core machine is shared
#: Spark's file names (part-00000-<uuid>-c000…) and the direct writer's (part-<batch>-<hex>…)
SPARK_FILE = re.compile(r"^part-\d{5}-[0-9a-f-]{36}-c\d{3}")
DIRECT_FILE = re.compile(r"^part-\d{10}-[0-9a-f]{32}\.snappy\.parquet$")


def _on_s3(conf: Path, s3: S3Server, root: str, writer: str) -> Settings:
    """The fault test's conf with lake and checkpoint moved to ``root`` on the S3 server and
    ``stream.raw_writer`` set: endpoint and addressing in the file, no credentials."""
    raw = yaml.safe_load(conf.read_text())
    raw["stream"].update(lake_dir=f"{root}/lake", checkpoint_dir=f"{root}/checkpoint",
                         raw_writer=writer)
    raw["object_store"] = {"endpoint": s3.endpoint, "path_style_access": True}
    conf.write_text(yaml.safe_dump(raw))
    return load_settings(conf, env={})


def test_s3a_lake_and_checkpoint_exactly_once_across_kill9_with_both_writers(
        kafka_bootstrap: str, s3_server: S3Server, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in s3_server.env.items():  # the job, its JVM and its workers inherit them
        monkeypatch.setenv(key, value)
    settings, conf = fault_settings(tmp_path, "s3", stream={"max_offsets_per_trigger": 150})
    root = f"s3a://{s3_server.bucket}/e2e-{uuid.uuid4().hex[:8]}"
    settings = _on_s3(conf, s3_server, root, "spark")
    assert "secret" not in conf.read_text().lower()
    ck, store = f"{root}/checkpoint", access(settings)
    load = PacedLoad(settings, seed=41, rate=2.0)
    job = Job(conf, tmp_path / "job.log")

    def commits() -> int:
        return last_batch(ck, "commits", store)

    def kill_inside_a_batch(after: int) -> None:
        """kill -9 once batch ``after`` is committed, inside the next one if caught (the
        wait for a planned but uncommitted batch is short: a kill between batches is a
        valid kill too, only a weaker one)."""
        wait_for(lambda: commits() >= after, START_S, f"checkpoint commit {after}", job=job)
        with contextlib.suppress(AssertionError):
            wait_for(lambda: last_batch(ck, "offsets", store) > commits(), 20,
                     "a planned, uncommitted batch", job=job, poll_s=0.1)
        job.kill9()

    started = time.monotonic()
    try:
        load.start()
        job.start()
        kill_inside_a_batch(1)                            # Spark appends (S3A)
        spark_landed = landed_count(settings)
        assert spark_landed > 0, job.tail()
        _on_s3(conf, s3_server, root, "direct")
        job.start()                                       # pyarrow's S3 file system writes
        kill_inside_a_batch(commits() + 2)
        load.finish()                                     # the last start drains the rest
        job.start()
        expected = len(expected_transactions(load.sent))
        wait_for(lambda: landed_count(settings) >= expected, START_S,
                 f"all {expected} transactions landed", job=job)
        time.sleep(3)                                     # a duplicate would land later
        assert job.stop() == 0, job.tail()
    finally:
        load.stop()
        job.cleanup()
    print(f"s3a run: {expected} transactions, {job.starts} starts, "
          f"{time.monotonic() - started:.0f}s", flush=True)

    assert_exactly_once(settings, load.sent)
    files = [Path(f).name for f in delta_table(settings, "transactions").file_uris()]
    assert any(SPARK_FILE.match(f) for f in files), files     # landed by Spark (first phase)
    assert any(DIRECT_FILE.match(f) for f in files), files    # and by the workers' pyarrow
