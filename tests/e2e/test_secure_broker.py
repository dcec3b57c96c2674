"""The secured local broker (``devtools.local_broker.security``): TLS, SCRAM, client certificates
and ACLs, seen from confluent-kafka clients.

One broker for the session (``secured_broker`` in tests/conftest.py: ports 19392-19395, data
in a tmp dir, never the shared test broker of ``kafka_bootstrap``), stopped by its PID at the
end; tests/e2e/test_secure_job.py runs the job on it. Client options are mapped
by hand from the client settings the broker wrote, as an engineer would.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from devtools import broker
from devtools import broker_security as sec
from devtools.config import rig
from pipeline.config import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def secured(secured_broker: Settings) -> Settings:
    """The session's secured broker (tests/conftest.py)."""
    return secured_broker


def by_hand(client: dict[str, str]) -> dict[str, str]:
    """librdkafka options from the ``kafka`` conf keys of a written client file."""
    opts = {"bootstrap.servers": client["bootstrap_servers"],
            "security.protocol": client["security_protocol"],
            "ssl.ca.location": client["ssl_ca_location"]}
    if "sasl_mechanism" in client:
        opts |= {"sasl.mechanism": client["sasl_mechanism"],
                 "sasl.username": client["sasl_username"],
                 "sasl.password": Path(client["sasl_password_file"]).read_text().strip()}
    if "ssl_certificate_location" in client:
        opts |= {"ssl.certificate.location": client["ssl_certificate_location"],
                 "ssl.key.location": client["ssl_key_location"],
                 "ssl.key.password": Path(client["ssl_key_password_file"]).read_text().strip()}
    return opts


def client_file(settings: Settings, mode: str) -> dict[str, str]:
    return yaml.safe_load((broker.secure_dir(settings) / f"client-{mode}.yaml").read_text())[
        "kafka"]


def produce(opts: dict[str, str], topic: str, value: bytes) -> KafkaError | None:
    """Produce one record; the delivery error, or None."""
    outcome: list[KafkaError | None] = []
    producer = Producer({**opts, "message.timeout.ms": "15000"})
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert outcome, "no delivery report within 20 s"
    return outcome[0]


def consume(opts: dict[str, str], topic: str, value: bytes, timeout_s: float = 30.0) -> bool:
    """Read ``topic`` from the start in a new ``urbpipe-`` group until ``value`` shows."""
    consumer = Consumer({**opts, "group.id": f"urbpipe-test-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": "false"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            if msg.value() == value:
                return True
    finally:
        consumer.close()
    return False


def connection_errors(opts: dict[str, str], seconds: float = 5.0) -> list[KafkaError]:
    """The errors a client reports while it tries to read metadata (which must fail)."""
    errors: list[KafkaError] = []
    producer = Producer({**opts, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=seconds)
    producer.poll(0.5)
    return errors


def test_status_shows_the_listeners_and_a_second_start_is_harmless(secured: Settings) -> None:
    assert broker.status(secured).startswith(
        "broker running on SASL_SSL://127.0.0.1:19394 (SCRAM), SSL://127.0.0.1:19395 (client "
        "certificate) (pid ")
    assert broker.start(secured).startswith("broker already running on SASL_SSL://")


def test_the_written_client_files_name_the_conf_keys(secured: Settings) -> None:
    secure = broker.secure_dir(secured)
    assert client_file(secured, "scram") == {
        "bootstrap_servers": "127.0.0.1:19394", "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "job",
        "sasl_password_file": str(secure / "job.password"),
        "ssl_ca_location": str(secure / "ca.pem")}
    assert client_file(secured, "mtls") == broker.secure_client(secured, "job", "mtls")
    modes = {p.name: p.stat().st_mode & 0o777 for p in secure.iterdir()}
    assert all(modes[f"{u}.password"] == 0o600 for u in ("admin", "job", "nowrite"))
    assert modes["job.key.password"] == modes["job.key"] == modes["ca.key"] == 0o600
    assert (secure / "job.key").read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")


def test_scram_over_sasl_ssl_produces_and_consumes(secured: Settings) -> None:
    value = f"scram-{uuid.uuid4()}".encode()
    assert produce(by_hand(client_file(secured, "scram")), "urb.requests", value) is None
    assert consume(by_hand(broker.secure_client(secured, "replicator")), "urb.requests", value)


def test_scram_sha_256_is_enabled_too(secured: Settings) -> None:
    opts = by_hand(client_file(secured, "scram")) | {"sasl.mechanism": "SCRAM-SHA-256"}
    assert produce(opts, "urb.alerts", b"{}") is None


def test_mutual_tls_produces_and_consumes(secured: Settings) -> None:
    value = f"mtls-{uuid.uuid4()}".encode()
    assert produce(by_hand(broker.secure_client(secured, "replicator", "mtls")), "urb.out1",
                   value) is None
    assert consume(by_hand(client_file(secured, "mtls")), "urb.out1", value)


def test_a_wrong_password_fails_authentication(secured: Settings) -> None:
    opts = by_hand(client_file(secured, "scram")) | {"sasl.password": "not-the-password"}
    codes = {e.code() for e in connection_errors(opts)}
    assert KafkaError._AUTHENTICATION in codes


def test_a_client_trusting_another_ca_fails_the_handshake(secured: Settings,
                                                           tmp_path: Path) -> None:
    sec.make_certificates(tmp_path, [], days=1, store_password="unused")
    opts = by_hand(client_file(secured, "scram")) | {"ssl.ca.location": str(tmp_path / "ca.pem")}
    errors = connection_errors(opts)
    assert any(e.code() == KafkaError._SSL and "certificate verify failed" in e.str()
               for e in errors), errors


def test_a_client_without_a_certificate_is_refused_on_the_mtls_port(secured: Settings) -> None:
    client = {k: v for k, v in client_file(secured, "mtls").items()
              if not k.startswith("ssl_key") and k != "ssl_certificate_location"}
    errors = connection_errors(by_hand(client))
    assert errors and {e.code() for e in errors} <= {
        KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}, errors


def test_a_user_without_write_acl_cannot_write_requests_but_reads_outputs(
        secured: Settings) -> None:
    nowrite = by_hand(broker.secure_client(secured, "nowrite"))
    err = produce(nowrite, "urb.requests", b"not allowed")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    value = f"for-nowrite-{uuid.uuid4()}".encode()
    assert produce(by_hand(broker.secure_client(secured, "replicator")), "urb.out1",
                   value) is None
    assert consume(nowrite, "urb.out1", value)


def test_the_admin_password_is_only_in_its_own_file(secured: Settings) -> None:
    home = Path(secured.location(rig(secured).local_broker.data_dir))
    password = (home / "secure" / "admin.password").read_bytes().strip()
    holding = sorted(str(p.relative_to(home)) for p in home.rglob("*")
                     if p.is_file() and password in p.read_bytes())
    assert holding == ["secure/admin.password"]
    assert (home / "logs" / "broker.log").stat().st_size > 0
