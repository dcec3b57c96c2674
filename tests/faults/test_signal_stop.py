"""SIGTERM stops the deployed job cleanly: exit code 0, as README.md promises operators.

Regression: jobs/stream.py called ``query.stop()`` from the signal handler while the main thread
sat in the py4j call ``awaitTermination()``; the nested py4j call re-entered the same socket
("reentrant call inside BufferedReader"), broke the gateway and every SIGTERM ended in
"query failed" and exit code 1 — which the kill -9 test's final clean stop caught.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.sim import Replicator
from pipeline.sim.sinks import KafkaSink
from tests.faults.helpers import Job, fault_settings, landed_count, sim_config, wait_for
from tests.integration.truth import generate

pytestmark = [pytest.mark.faults, pytest.mark.e2e]


def test_sigterm_stops_the_job_with_exit_code_0(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings, conf = fault_settings(tmp_path, "sigterm")
    deliveries, sent = generate(Replicator(sim_config(settings, 1500), 3, transactions=10), 10)
    sink = KafkaSink(settings.kafka.bootstrap_servers)
    sink.send(deliveries)
    sink.close()
    job = Job(conf, tmp_path / "job.log").start()
    try:
        wait_for(lambda: landed_count(settings) == len(sent), 420, "the first transactions",
                 job=job)
        code = job.stop()
    finally:
        job.cleanup()
    log = job.log.read_text(errors="replace")
    assert code == 0 and "query failed" not in log, f"exit code {code}\n{job.tail()}"
    assert "signal 15: stopping" in log
