"""Exactly once across crashes: kill -9 the spark-submit'ed job mid-stream, restart it from its
checkpoint, and find exactly the expected rows — none lost, none twice — in every table.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from chispa import assert_df_equality

from tests.e2e.scenario import BOTH_FORMS, Scenario, commits, landed, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _start_job(conf: Path, log: Path) -> subprocess.Popen:
    """jobs/stream.py in its own process group (python + its Spark JVM), like spark-submit."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "jobs" / "stream.py"), "--conf-file", str(conf),
         "--trigger", "1 second"],
        cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def _kill9(job: subprocess.Popen) -> None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)


def test_kill_dash_nine_twice_mid_stream_then_exact_rows(spark, kafka_bootstrap: str,
                                                          tmp_path: Path) -> None:
    scenario = Scenario.build(tmp_path, "crash", transactions=120, seed=21,
                              max_message_size=1200, subscriptions=BOTH_FORMS,
                              stream={"max_offsets_per_trigger": 15})
    conf = scenario.conf_path
    assert scenario.settings.stream.max_offsets_per_trigger == 15  # many small batches
    lake, checkpoint = Path(scenario.settings.stream.lake_dir), tmp_path / "ck"
    log = tmp_path / "job.log"
    assert scenario.sim is not None
    scenario.sim.start()
    expected = len(scenario.truth())
    try:
        job = _start_job(conf, log)
        wait_until(lambda: commits(checkpoint) >= 2, 600, "two committed batches", log)
        _kill9(job)                                   # between or inside batches
        assert 0 < landed(lake) < expected
        job = _start_job(conf, log)
        first = commits(checkpoint)
        wait_until(lambda: commits(checkpoint) >= first + 1, 600, "a batch after restart", log)
        time.sleep(1.3)                               # somewhere inside the next batch
        _kill9(job)
        job = _start_job(conf, log)
        wait_until(lambda: landed(lake) >= expected, 900, "all transactions landed", log)
        time.sleep(3)                                 # a duplicate would land in a later batch
        job.send_signal(signal.SIGTERM)
        assert job.wait(60) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        scenario.sim.stop()
        if job.poll() is None:
            _kill9(job)

    txs = scenario.table(spark, "transactions").select(
        "subscription", "destination", "tsnr", "record_count")
    truth = spark.createDataFrame(sorted(scenario.truth()), "subscription string, "
                                  "destination string, tsnr bigint, record_count int")
    assert_df_equality(txs, truth, ignore_row_order=True, ignore_nullable=True)
    images = scenario.table(spark, "images")
    assert images.count() == sum(len(s.images()) for s in scenario.sent)
    assert images.count() == images.dropDuplicates(
        ["subscription", "destination", "tsnr", "rsnr", "dsnr"]).count()
    records = scenario.table(spark, "records")
    assert records.count() == sum(len(s.tx.records) for s in scenario.sent)
    status = scenario.table(spark, "status_events")
    assert status.count() == status.dropDuplicates(["topic", "partition", "offset",
                                                    "elem_index"]).count()
