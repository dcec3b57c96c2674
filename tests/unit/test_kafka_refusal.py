"""Kafka's refusals named in one line (pipeline/kafka_refusal.py), the start-time permission
check against a fake admin client, and secrets that appear nowhere but in the mapping."""

from __future__ import annotations

import importlib.util
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclOperation

from pipeline.config import ConfigError, Kafka, Settings, Topics, load_settings
from pipeline.errors import REFUSED, KafkaRefused
from pipeline.kafka_refusal import ClientErrors, classify
from pipeline.ops.topic_check import (
    KafkaOutOfReach,
    check_permissions,
    check_start,
    cluster_partitions,
    required_operations,
)
from tests.unit.ops.test_topic_check import FakeMetadata, FakeTopic

SENTINEL = "Sentinel-Pa55-9c41"
ROOT = Path(__file__).resolve().parents[2]
SCRAM = Kafka(bootstrap_servers="b1:9093", security_protocol="SASL_SSL",
              sasl_mechanism="SCRAM-SHA-256", sasl_username="alice", sasl_password=SENTINEL,
              ssl_ca_location="/etc/pki/ca.pem")

# -- the classifier: librdkafka and Java texts ------------------------------------------------

RDKAFKA_AUTH = ("sasl_ssl://b2:9093/bootstrap: SASL authentication error: Authentication failed "
                "during authentication due to invalid credentials with SASL mechanism "
                "SCRAM-SHA-256 (after 305ms in state AUTH_REQ)")
RDKAFKA_TLS = ("ssl://b1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
               "certificate verify failed: broker certificate could not be verified, verify "
               "that ssl.ca.location is correctly configured (self-signed certificate in "
               "certificate chain) (after 5ms in state SSL_HANDSHAKE)")


def test_a_wrong_password_is_authentication_failed_naming_mechanism_user_and_broker() -> None:
    refusal = classify(RDKAFKA_AUTH, SCRAM, "_AUTHENTICATION")
    assert refusal is not None and refusal.kind == "authentication"
    assert refusal.message.startswith(
        "authentication failed: SASL SCRAM-SHA-256 as 'alice' at b2:9093 (")
    java = ("org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed "
            "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256")
    refusal = classify(java, SCRAM)
    assert refusal is not None and refusal.kind == "authentication"
    assert "at b1:9093" in refusal.message  # the text names no broker: the bootstrap list


@pytest.mark.parametrize(("text", "reason"), [
    (RDKAFKA_TLS, "unknown CA: no CA in /etc/pki/ca.pem signed the broker's certificate"),
    ("javax.net.ssl.SSLHandshakeException: PKIX path building failed: unable to find valid "
     "certification path to requested target", "unknown CA: no CA in /etc/pki/ca.pem"),
    ("javax.net.ssl.SSLHandshakeException: No subject alternative DNS name matching b1 found.",
     "hostname mismatch"),
    ("ssl://b1:9093/bootstrap: SSL handshake failed: certificate verify failed: Hostname "
     "mismatch", "hostname mismatch"),
    ("SSLHandshakeException: java.security.cert.CertificateExpiredException: NotAfter: Sun Jan 01",
     "certificate expired"),
    ("ssl://b1:9093/1: SSL handshake failed: error:0A000418:SSL routines::tlsv1 alert unknown ca",
     "the broker refused the client certificate"),
    ("SSL handshake failed: certificate verify failed", "certificate verify failed against "
                                                        "/etc/pki/ca.pem"),
])
def test_tls_failures_name_the_file_and_the_reason(text: str, reason: str) -> None:
    refusal = classify(text, SCRAM, None)
    assert refusal is not None and refusal.kind == "tls"
    assert refusal.message.startswith("TLS handshake with b1:9093 failed: " + reason)
    assert "\n" not in refusal.message


def test_the_system_store_is_named_when_no_ca_is_given() -> None:
    refusal = classify(RDKAFKA_TLS, Kafka(security_protocol="SSL"), "_SSL")
    assert refusal is not None and "no CA in the system CA store" in refusal.message


@pytest.mark.parametrize(("text", "code", "expected"), [
    ("org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access "
     "topics: [urb.requests]", None, "may not use topic urb.requests"),
    ("GroupAuthorizationException: Not authorized to access group: spark-kafka-source-1a2b",
     None, "may not use group spark-kafka-source-1a2b"),
    ("Broker: Topic authorization failed", "TOPIC_AUTHORIZATION_FAILED", "may not use topic"),
])
def test_authorization_failures_name_the_resource(text: str, code: str | None,
                                                  expected: str) -> None:
    refusal = classify(text, SCRAM, code)
    assert refusal is not None and refusal.kind == "authorization"
    assert refusal.message.startswith("authorization denied: the job's principal " + expected)


def test_an_unreachable_broker_is_no_refusal() -> None:
    assert classify("b1:9093/bootstrap: Connect to ipv4#10.0.0.1:9093 failed: Connection "
                    "refused (after 0ms in state CONNECT)", SCRAM, "_TRANSPORT") is None
    assert classify("Failed to get metadata: Local: Broker transport failure", SCRAM,
                    "_TRANSPORT") is None


# -- first contact: the admin client's error callback decides -------------------------------

class TimingOutAdmin:
    """``list_topics`` after librdkafka reported ``errors`` through its error callback."""

    def __init__(self, sink: ClientErrors, *errors: KafkaError) -> None:
        self._sink, self._errors = sink, errors

    def list_topics(self, timeout: float) -> Any:
        for error in self._errors:
            self._sink(error)
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))


def test_a_wrong_password_is_refused_not_unreachable() -> None:
    settings = Settings(kafka=SCRAM)
    errors = ClientErrors()
    admin = TimingOutAdmin(errors, KafkaError(KafkaError._AUTHENTICATION, RDKAFKA_AUTH))
    with pytest.raises(KafkaRefused, match=r"^authentication failed: SASL SCRAM-SHA-256") as e:
        cluster_partitions(settings, 1, admin, errors)
    assert e.value.exit_code == REFUSED == 5
    with pytest.raises(KafkaOutOfReach, match=r"^cannot reach Kafka at b1:9093"):
        cluster_partitions(settings, 1, TimingOutAdmin(ClientErrors()), ClientErrors())


# -- permissions at start, against a fake admin ----------------------------------------------

@dataclass
class FakeDescription:
    authorized_operations: list[AclOperation] | None


class FakeAdmin:
    """``list_topics`` and ``describe_topics`` with the principal's operations per topic
    (None: the broker does not say; a KafkaError code: the describe fails)."""

    def __init__(self, ops: dict[str, list[AclOperation] | int | None]) -> None:
        self.ops = ops
        self.asked: dict[str, Any] = {}

    def list_topics(self, timeout: float) -> FakeMetadata:
        return FakeMetadata({t: FakeTopic({0: object()}) for t, o in self.ops.items()
                             if o != KafkaError.UNKNOWN_TOPIC_OR_PART})

    def describe_topics(self, topics: Any, **kw: Any) -> dict[str, Future[Any]]:
        self.asked = {"topics": list(topics.topic_names), **kw}
        futures: dict[str, Future[Any]] = {}
        for name in topics.topic_names:
            future: Future[Any] = Future()
            ops = self.ops.get(name, KafkaError.UNKNOWN_TOPIC_OR_PART)
            if isinstance(ops, int):
                future.set_exception(KafkaException(KafkaError(ops)))
            else:
                future.set_result(FakeDescription(ops))
            futures[name] = future
        return futures


READ = [AclOperation.READ, AclOperation.DESCRIBE]
WRITE = [AclOperation.WRITE, AclOperation.DESCRIBE]
GRANTED: dict[str, list[AclOperation] | int | None] = {
    "urb.out1": READ, "urb.replies": READ, "urb.control": READ, "urb.requests": WRITE,
    "urb.alerts": WRITE}


def test_what_the_job_needs_on_which_topic() -> None:
    sources = {"urb.out1": 1, "urb.replies": 1, "urb.control": None}
    assert required_operations(Settings(), sources) == {
        "urb.out1": ("READ", "DESCRIBE"), "urb.replies": ("READ", "DESCRIBE"),
        "urb.control": ("READ", "DESCRIBE"), "urb.requests": ("WRITE", "DESCRIBE"),
        "urb.alerts": ("WRITE", "DESCRIBE")}


def test_all_granted_starts_and_asks_for_the_authorized_operations() -> None:
    admin = FakeAdmin(GRANTED)
    assert check_start(Settings(), 1, admin)["urb.out1"] == 1
    assert admin.asked["include_authorized_operations"] is True
    assert set(admin.asked["topics"]) == set(GRANTED)


@pytest.mark.parametrize(("topic", "ops", "expected"), [
    ("urb.requests", [AclOperation.DESCRIBE, AclOperation.READ], "WRITE topic urb.requests"),
    ("urb.alerts", KafkaError.TOPIC_AUTHORIZATION_FAILED, "WRITE topic urb.alerts"),
    ("urb.out1", [AclOperation.DESCRIBE], "READ topic urb.out1"),
    ("urb.replies", [AclOperation.WRITE, AclOperation.DESCRIBE], "READ topic urb.replies"),
])
def test_a_missing_operation_refuses_the_start(topic: str, ops: Any, expected: str) -> None:
    admin = FakeAdmin({**GRANTED, topic: ops})
    with pytest.raises(KafkaRefused, match="^authorization denied: the job's principal may "
                                           f"not {expected}; grant it"):
        check_start(Settings(), 1, admin)


def test_all_or_an_unknown_answer_or_a_missing_topic_are_no_refusal(
        caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin({**GRANTED, "urb.out1": [AclOperation.ALL], "urb.replies": None,
                       "urb.alerts": KafkaError.UNKNOWN_TOPIC_OR_PART})
    check_start(Settings(), 1, admin)
    assert "did not say what the job may do on topic urb.replies" in caplog.text
    assert "topic urb.alerts does not exist yet" in caplog.text


def test_the_pattern_topics_are_checked_too() -> None:
    settings = Settings(topics=Topics(outputs={}, output_pattern=r"urb\.out\d",
                                      pattern_destination="OUT1"))
    admin = FakeAdmin({**GRANTED, "urb.out7": [AclOperation.DESCRIBE]})
    with pytest.raises(KafkaRefused, match=r"may not READ topic urb\.out7"):
        check_permissions(settings, {"urb.out1": 1, "urb.out7": 1, "urb.replies": 1,
                                     "urb.control": 1}, admin)


def _job() -> Any:
    spec = importlib.util.spec_from_file_location("stream_job", ROOT / "jobs" / "stream.py")
    assert spec and spec.loader
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    return job


def test_the_job_exits_5_when_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    def refused(_settings: Settings) -> None:
        raise KafkaRefused("authorization denied: the job's principal may not WRITE topic x")

    monkeypatch.setattr("pipeline.ops.topic_check.check_start", refused)
    conf = tmp_path / "c.yaml"
    conf.write_text("kafka:\n  bootstrap_servers: b1:9093\n")
    assert _job().main(["--conf-file", str(conf)]) == 5
    assert capsys.readouterr().err.endswith("may not WRITE topic x\n")


# -- secrets appear nowhere but in the mapping's output ---------------------------------------

def test_the_sentinel_password_leaks_nowhere(tmp_path: Path) -> None:
    from pipeline.spark.engine.session import session_conf

    conf = tmp_path / "c.yaml"
    conf.write_text("kafka:\n  bootstrap_servers: b1:9093\n  security_protocol: SASL_SSL\n"
                    "  sasl_mechanism: SCRAM-SHA-512\n  sasl_username: alice\n"
                    "  ssl_ca_location: /ca.pem\n")
    env = {"URBPIPE__KAFKA__SASL_PASSWORD": SENTINEL}
    settings = load_settings(conf, env=env)
    assert SENTINEL not in repr(settings) and SENTINEL not in str(settings)
    assert SENTINEL not in repr(settings.kafka) and SENTINEL not in str(settings.model_dump())
    texts = []
    for bad in ("  sasl_password_file: /nope\n", "  sasl_mechanism: NOPE\n",
                "  ssl_key_location: /k.pem\n", "  sasl_username: alice\n"):
        (tmp_path / "bad.yaml").write_text(conf.read_text() + bad)
        with pytest.raises(ConfigError) as failed:
            load_settings(tmp_path / "bad.yaml", env=env)
        texts.append(str(failed.value))
    texts += [r.message for r in (
        classify(f"SaslAuthenticationException: bad password {SENTINEL}", settings.kafka),
        classify(f"SSL handshake failed for {SENTINEL}", settings.kafka),
        classify(f"Not authorized to access topics: [t] {SENTINEL}", settings.kafka)) if r]
    assert len(texts) == 7 and all(SENTINEL not in t for t in texts), texts
    session = session_conf(settings, jars=False)
    assert session["spark.redaction.regex"]
    assert all(SENTINEL not in v for v in session.values())
    mapped = {**settings.kafka.confluent(), **settings.kafka.spark()}
    holding = {k for k, v in mapped.items() if SENTINEL in v}
    assert holding == {"sasl.password", "kafka.sasl.jaas.config"}
