"""The Kafka broker goes away mid-stream for ~10 s and comes back.

The broker on 19092 is shared by every other test, so this test starts its OWN broker (ports
39092/39093, data under tmp_path) with ``pipeline.ops.broker``, points the simulator and the
job (``jobs/stream.py`` as a process) at it, stops it with ``broker.stop`` (SIGTERM: a clean
broker shutdown) while the replicator is loading, and starts it again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipeline.ops import broker
from tests.faults.helpers import (
    Job,
    PacedLoad,
    assert_exactly_once,
    expected_transactions,
    fault_settings,
    landed_count,
    last_batch,
    read_table,
    wait_for,
)

pytestmark = [pytest.mark.faults, pytest.mark.e2e, pytest.mark.slow,
              pytest.mark.timeout(1500)]  # up to three JVM starts plus a broker restart

PORTS = (39092, 39093)
OUTAGE_S = 10.0
START_S = 420.0  # JVM + Spark + first batch: minutes when the 2-core machine is shared


def test_broker_stopped_and_restarted_mid_stream_then_exact_rows(tmp_path: Path) -> None:
    """What happened here (2026-11-22, shared 2-core machine): the job did NOT exit. Spark's
    Kafka consumer and producer retried through the ~10 s outage and the query carried on by
    itself once the broker was back; no operator restart was needed. Should a later version
    fail instead, the test restarts it the way an operator would (at most twice) and requires
    the failure to be reported as exit code 1 ("query failed"). Either way the rows must be
    exact: nothing lost, nothing twice (the simulator's producer may repeat messages across
    the outage; the job must drop those as duplicates)."""
    settings, conf = fault_settings(tmp_path, "broker", broker_ports=PORTS,
                                    stream={"max_offsets_per_trigger": 300},
                                    create_topics=False)
    ck = Path(settings.stream.checkpoint_dir)
    job = Job(conf, tmp_path / "job.log")
    load: PacedLoad | None = None
    operator_restarts: list[int | None] = []
    try:
        broker.start(settings)  # also creates this test's topics on it
        load = PacedLoad(settings, seed=41, rate=2.0).start()
        job.start()
        wait_for(lambda: last_batch(ck, "commits") >= 1 and landed_count(settings) > 0,
                 START_S, "rows landing before the outage", job=job)
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
        wait_for(lambda: landed_count(settings) >= expected, START_S, f"all {expected} "
                 "transactions landed", job=job, poll_s=1.0)
        settled = last_batch(ck, "commits")
        wait_for(lambda: last_batch(ck, "commits") >= settled + 3, 120,
                 "three more batches (a duplicate would land in one of them)", job=job)
        assert job.stop() == 0, f"SIGTERM must stop the job cleanly\n{job.tail()}"
    finally:
        job.cleanup()
        if load is not None:
            load.stop()
        broker.stop(settings)

    print(f"broker outage: operator restarts {operator_restarts}")
    assert all(code == 1 for code in operator_restarts), (
        f"a job that fails must say so with exit code 1 (query failed): {operator_restarts}")
    assert load.sim.error is None, load.sim.error
    assert_exactly_once(settings, load.sent)
    for empty in ("quarantine", "gaps", "requests"):
        rows = read_table(settings, empty)
        assert rows == [], f"{empty} must stay empty: {rows[:3]}"
