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

The last run also rides out a broker outage (in this test, to share its JVM starts: an outage
test of its own would add 74-97 s to the suite). The test runs its OWN broker (ports
39092/39093, data under tmp_path; a test that stops a broker must never stop the one the
others share), stops it (SIGTERM: a clean broker shutdown) for ~10 s while the replicator is
loading, and starts it again. The job does not exit: Spark's Kafka consumer and producer retry
through the outage and the query carries on by itself once the broker is back; no operator
restart is needed. Should a later version fail instead, the test restarts it the way an
operator would (at most twice) and requires the failure to be reported as exit code 1
("query failed"). Either way the rows must be exact: nothing lost, nothing twice (the
simulator's producer may repeat messages across the outage; the job must drop those as
duplicates), no gap, no request, no quarantined message, and SIGTERM ends the last run with
exit code 0.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from pathlib import Path

import pytest
import yaml

from devtools import broker
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
    read_table,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
PORTS = (39092, 39093)  # this test's own broker (port, controller port)
OUTAGE_S = 10.0
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


def test_s3a_lake_and_checkpoint_exactly_once_across_kill9_with_both_writers_and_an_outage(
        s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in s3_server.env.items():  # the job, its JVM and its workers inherit them
        monkeypatch.setenv(key, value)
    settings, conf = fault_settings(tmp_path, "s3", stream={"max_offsets_per_trigger": 150},
                                    broker_ports=PORTS, create_topics=False)
    root = f"s3a://{s3_server.bucket}/e2e-{uuid.uuid4().hex[:8]}"
    settings = _on_s3(conf, s3_server, root, "spark")
    assert "secret" not in conf.read_text().lower()
    ck, store = f"{root}/checkpoint", access(settings)
    job = Job(conf, tmp_path / "job.log")
    load: PacedLoad | None = None
    operator_restarts: list[int | None] = []

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
        broker.start(settings)  # also creates this test's topics on it
        load = PacedLoad(settings, seed=41, rate=2.0).start()
        job.start()
        kill_inside_a_batch(1)                            # Spark appends (S3A)
        spark_landed = landed_count(settings)
        assert spark_landed > 0, job.tail()
        _on_s3(conf, s3_server, root, "direct")
        job.start()                                       # pyarrow's S3 file system writes
        kill_inside_a_batch(commits() + 2)

        # the last run (direct writer again): rows land, the broker goes away and comes back
        job.start()
        restarted = commits()
        wait_for(lambda: commits() > restarted, START_S, "a commit after the last restart",
                 job=job)
        before = landed_count(settings)
        broker.stop(settings)
        time.sleep(OUTAGE_S)
        assert load.loading, "the replicator must still be loading when the broker is back"
        broker.start(settings)

        def progressing() -> bool:
            if not job.alive:  # the operator's move: look at the exit code, start it again
                operator_restarts.append(job.exit_code)
                assert len(operator_restarts) <= 2, (
                    f"job keeps failing after the broker came back\n{job.tail()}")
                job.start()
            return landed_count(settings) > before + 20

        wait_for(progressing, START_S, "rows landing again after the broker came back",
                 job=job, fail_on_exit=False, poll_s=1.0)
        load.finish()
        expected = len(expected_transactions(load.sent))
        wait_for(lambda: landed_count(settings) >= expected, START_S,
                 f"all {expected} transactions landed", job=job, poll_s=1.0)
        settled = commits()
        wait_for(lambda: commits() >= settled + 3, 120,
                 "three more batches (a duplicate would land in one of them)", job=job)
        assert job.stop() == 0, f"SIGTERM must stop the job cleanly\n{job.tail()}"
    finally:
        job.cleanup()
        if load is not None:
            load.stop()
        broker.stop(settings)
    print(f"s3a run: {expected} transactions, {job.starts} starts, operator restarts "
          f"{operator_restarts}, {time.monotonic() - started:.0f}s", flush=True)

    assert all(code == 1 for code in operator_restarts), (
        f"a job that fails must say so with exit code 1 (query failed): {operator_restarts}")
    assert load.sim.error is None, load.sim.error
    assert_exactly_once(settings, load.sent)
    for empty in ("quarantine", "gaps", "requests"):
        rows = read_table(settings, empty)
        assert rows == [], f"{empty} must stay empty: {rows[:3]}"
    files = [Path(f).name for f in delta_table(settings, "transactions").file_uris()]
    assert any(SPARK_FILE.match(f) for f in files), files     # landed by Spark (first phase)
    assert any(DIRECT_FILE.match(f) for f in files), files    # and by the workers' pyarrow
