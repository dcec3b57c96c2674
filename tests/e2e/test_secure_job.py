"""The job on a secured Kafka, as banks and insurers run it: TLS, SCRAM or client certificates,
and a least-privilege principal (the secured local broker of ``secured_broker``).

- SASL_SSL with SCRAM-SHA-512: the job (in-process, Spark's Java Kafka client and the Python
  producer both) lands exactly what the simulator sent, asks for the lost transactions with
  TRAN requests on the request topic and lands the resends.
- Mutual TLS: ``jobs/stream.py`` as its own process with a client certificate whose PKCS#8 key
  is encrypted (the Java client gets it inline, ``pipeline/kafka_security.py``) lands exactly.
- A wrong password, an untrusted CA and a principal without WRITE on the request topic each
  end the job at start, before any Spark session, with one line and exit code 5.
- The secrets (SCRAM password, key password) are searched for in everything the runs wrote:
  the job's output, its log records, the lake, the checkpoint and the metrics.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality

from devtools import broker
from devtools import broker_security as sec
from pipeline.config import Settings
from tests.e2e.scenario import BOTH_FORMS, Scenario, commits, landed, wait_until

pytestmark = [pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
REFUSED = 5  # pipeline/errors.py: Kafka refused us (authentication, TLS, authorization)


def _make_topics(secured: Settings) -> Any:
    """The broker makes a scenario's fresh topics, and their ACLs, as admin (the job's
    principal may not create topics)."""

    def make(settings: Settings) -> None:
        broker.start(secured.model_copy(update={"topics": settings.topics}))

    return make


def _secret(path: str) -> bytes:
    return Path(path).read_bytes().strip()


def _written(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in root.rglob("*"):
        if path.is_file():
            yield path, path.read_bytes()


def _holding(secret: bytes, *roots: Path, texts: tuple[str, ...] = ()) -> list[str]:
    """Where ``secret`` was found: files under ``roots`` and the given texts."""
    found = [str(p) for root in roots for p, data in _written(root) if secret in data]
    return found + [f"text #{i}" for i, t in enumerate(texts) if secret.decode() in t]


class _Records(logging.Handler):
    """Every log record of the run, formatted (the job's own log lines)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


# -- SASL_SSL with SCRAM, in-process ---------------------------------------------------------

@pytest.fixture(scope="module")
def scram(spark, secured_broker: Settings, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Scenario, list[str]]:
    job = broker.secure_client(secured_broker, "job", "scram")
    replicator = broker.secure_client(secured_broker, "replicator", "scram")
    scenario = Scenario.build(
        tmp_path_factory.mktemp("scram"), "scram", transactions=40, seed=71,
        max_message_size=1500, subscriptions=BOTH_FORMS, faults={"drop_transaction": 2},
        gaps={"retry_initial_ms": 3000, "max_retries": 3}, kafka=job,
        make_topics=_make_topics(secured_broker), sim_kafka=replicator)
    records = _Records()
    logging.getLogger().addHandler(records)
    try:
        scenario.run(spark)
    finally:
        logging.getLogger().removeHandler(records)
    return scenario, records.lines


def test_sasl_ssl_with_scram_lands_exactly_and_asks_for_lost_transactions(
        spark, scram: tuple[Scenario, list[str]]) -> None:
    scenario, _ = scram
    assert scenario.settings.kafka.security_protocol == "SASL_SSL"
    txs = scenario.table(spark, "transactions").select(
        "subscription", "destination", "tsnr", "record_count")
    truth = spark.createDataFrame(sorted(scenario.truth()), "subscription string, "
                                  "destination string, tsnr bigint, record_count int")
    assert_df_equality(txs, truth, ignore_row_order=True, ignore_nullable=True,
                       ignore_metadata=True)  # the lake's columns carry comments
    gaps = scenario.latest_gaps(spark, kind="tsnr")
    assert gaps and {g["state"] for g in gaps} == {"filled"}, gaps
    assert scenario.table(spark, "requests").count() >= len(gaps)  # written over SASL_SSL
    assert scenario.sim is not None and scenario.sim.answered >= 1


def test_the_scram_password_is_in_nothing_the_run_wrote(scram: tuple[Scenario, list[str]]
                                                       ) -> None:
    scenario, lines = scram
    password = _secret(scenario.settings.kafka.sasl_password_file or "")
    assert len(password) >= 16 and lines
    stream = scenario.settings.stream
    roots = (Path(stream.lake_dir), Path(stream.checkpoint_dir),
             Path(stream.metrics_file or "").parent)
    assert _holding(password, *roots, texts=tuple(lines)) == []
    assert password.decode() not in repr(scenario.settings)


# -- mutual TLS, jobs/stream.py as its own process ---------------------------------------------

def _conf(tmp_path: Path, secured: Settings, name: str, kafka: dict[str, Any],
          **scenario: Any) -> Scenario:
    return Scenario.build(tmp_path, name, subscriptions=BOTH_FORMS, kafka=kafka,
                          make_topics=_make_topics(secured),
                          sim_kafka=broker.secure_client(secured, "replicator", "scram"),
                          **scenario)


def _job(conf: Path, *, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "jobs" / "stream.py"), "--conf-file",
                           str(conf)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s, check=False)


def test_mutual_tls_lands_exactly_and_its_key_password_is_in_nothing_it_wrote(
        spark, secured_broker: Settings, tmp_path: Path) -> None:
    client = broker.secure_client(secured_broker, "job", "mtls")
    assert client["security_protocol"] == "SSL" and "sasl_username" not in client
    scenario = _conf(tmp_path, secured_broker, "mtls", client, transactions=30, seed=72,
                     max_message_size=1500)
    lake, checkpoint = Path(scenario.settings.stream.lake_dir), tmp_path / "ck"
    log = tmp_path / "job.log"
    assert scenario.sim is not None
    scenario.sim.start()
    expected = len(scenario.truth())
    job = subprocess.Popen([sys.executable, str(ROOT / "jobs" / "stream.py"), "--conf-file",
                            str(scenario.conf_path), "--trigger", "1 second"], cwd=ROOT,
                           stdout=log.open("ab"), stderr=subprocess.STDOUT)
    try:
        def all_landed() -> bool:
            assert job.poll() is None, f"the job ended: {log.read_text(errors='replace')[-3000:]}"
            return landed(lake) >= expected

        wait_until(all_landed, 600, "all transactions landed", log)
        seen = commits(checkpoint)
        wait_until(lambda: commits(checkpoint) >= seen + 2, 120, "two more batches", log)
    finally:
        scenario.sim.stop()
        job.terminate()
        code = job.wait(90)
    assert code == 0, log.read_text(errors="replace")[-3000:]
    txs = scenario.table(spark, "transactions").select(
        "subscription", "destination", "tsnr", "record_count")
    truth = spark.createDataFrame(sorted(scenario.truth()), "subscription string, "
                                  "destination string, tsnr bigint, record_count int")
    assert_df_equality(txs, truth, ignore_row_order=True, ignore_nullable=True,
                       ignore_metadata=True)  # the lake's columns carry comments
    key_password = _secret(client["ssl_key_password_file"])
    assert _holding(key_password, tmp_path) == [
        str(p) for p in [Path(client["ssl_key_password_file"])] if p.is_relative_to(tmp_path)]


# -- refused at start: one line, exit 5, no Spark ----------------------------------------------

def _refused(tmp_path: Path, secured: Settings, kafka: dict[str, Any]) -> tuple[str, Settings]:
    """Run the job with ``kafka``; it must end at start with exit 5 and one error line."""
    scenario = _conf(tmp_path, secured, "refused", kafka, transactions=1, seed=1)
    done = _job(scenario.conf_path)
    assert done.returncode == REFUSED, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert not (tmp_path / "ck").exists(), "refused before any Spark session or checkpoint"
    return errors[0], scenario.settings


def test_a_wrong_password_ends_the_job_at_start_naming_authentication(
        secured_broker: Settings, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password-" + uuid.uuid4().hex)
    client = {**broker.secure_client(secured_broker, "job", "scram"),
              "sasl_password_file": str(wrong)}
    line, _ = _refused(tmp_path, secured_broker, client)
    assert "authentication failed" in line and "SCRAM-SHA-512" in line and "job" in line, line
    assert "cannot reach" not in line and wrong.read_text() not in line, line


def test_an_untrusted_ca_ends_the_job_at_start_naming_the_ca_file(
        secured_broker: Settings, tmp_path: Path) -> None:
    other = tmp_path / "other-ca"
    other.mkdir()
    sec.make_certificates(other, [], days=1, store_password="unused")
    client = {**broker.secure_client(secured_broker, "job", "scram"),
              "ssl_ca_location": str(other / "ca.pem")}
    line, _ = _refused(tmp_path, secured_broker, client)
    assert "TLS" in line and str(other / "ca.pem") in line, line


def test_no_write_acl_on_the_request_topic_ends_the_job_at_start(
        secured_broker: Settings, tmp_path: Path) -> None:
    client = broker.secure_client(secured_broker, "nowrite", "scram")
    line, settings = _refused(tmp_path, secured_broker, client)
    assert "WRITE" in line and settings.topics.requests in line, line


def test_the_jobs_producer_names_a_wrong_password_too(secured_broker: Settings,
                                                      tmp_path: Path) -> None:
    """The producer of requests and alerts (``KafkaOut``) connects after the start check; a
    refusal it meets (the password rotated in between) is named, not "cannot reach"."""
    from pipeline.config import Kafka
    from pipeline.errors import KafkaRefused
    from pipeline.spark.land.kafka_out import KafkaOut

    wrong = tmp_path / "wrong.password"
    wrong.write_text("rotated-" + uuid.uuid4().hex)
    kafka = Kafka.model_validate({**broker.secure_client(secured_broker, "job", "scram"),
                                  "sasl_password_file": str(wrong)})
    with pytest.raises(KafkaRefused, match=r"^authentication failed: SASL SCRAM-SHA-512 as "
                       r"'job'") as refused:
        KafkaOut(secured_broker.model_copy(update={"kafka": kafka})).connect(timeout_s=10)
    assert wrong.read_text() not in str(refused.value)
