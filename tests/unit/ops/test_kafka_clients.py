"""The urbpipe commands' Kafka failures: refused (exit 5) or unreachable (exit 3), in one line."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline import errors
from pipeline.config import Kafka, Settings
from pipeline.errors import BrokerUnreachable, KafkaRefused
from pipeline.kafka_refusal import ClientErrors
from pipeline.ops import kafka_clients

SECRET = "pw-that-must-not-show"


@dataclass
class FakeError:
    code_name: str
    text: str

    def name(self) -> str:
        return self.code_name

    def str(self) -> str:
        return self.text


@dataclass
class FakeClient:
    """Polling serves the callback, as librdkafka does: errors queued until then."""

    errors: ClientErrors
    queued: list[FakeError] = field(default_factory=list)
    polls: int = 0

    def poll(self, _timeout: float) -> None:
        self.polls += 1
        for error in self.queued:
            self.errors(error)
        self.queued.clear()


def _settings() -> Settings:
    return Settings(kafka=Kafka(bootstrap_servers="kafka:9094", security_protocol="SASL_SSL",
                                sasl_mechanism="SCRAM-SHA-512", sasl_username="job",
                                sasl_password=SECRET))


def test_an_authentication_error_served_by_the_poll_is_a_refusal_not_unreachable() -> None:
    seen = ClientErrors()
    error = FakeError("_AUTHENTICATION", "sasl_ssl://kafka:9094/bootstrap: SASL "
                      f"authentication error: invalid credentials {SECRET}")
    client = FakeClient(seen, [error])
    failure = kafka_clients.failure(_settings(), client, seen, "broker kafka:9094 unreachable")
    assert client.polls == 1
    assert isinstance(failure, KafkaRefused) and failure.exit_code == errors.REFUSED == 5
    text = str(failure)
    assert text.startswith("authentication failed: SASL SCRAM-SHA-512 as 'job'"), text
    assert SECRET not in text and "\n" not in text


def test_a_delivery_report_denied_by_an_acl_names_the_topic() -> None:
    seen = ClientErrors()
    denied = FakeError("TOPIC_AUTHORIZATION_FAILED",
                       "Broker: Topic authorization failed: Not authorized to access topics: "
                       "[urb.requests]")
    failure = kafka_clients.failure(_settings(), FakeClient(seen), seen, "not delivered", denied)
    assert isinstance(failure, KafkaRefused)
    assert "authorization denied" in str(failure) and "urb.requests" in str(failure)


def test_no_refusal_seen_means_unreachable_with_the_callers_line() -> None:
    seen = ClientErrors()
    client = FakeClient(seen, [FakeError("_TRANSPORT", "Connection refused")])
    failure = kafka_clients.failure(_settings(), client, seen, "broker kafka:9094 unreachable")
    assert isinstance(failure, BrokerUnreachable) and failure.exit_code == errors.UNREACHABLE
    assert str(failure) == "broker kafka:9094 unreachable"


def test_the_clients_carry_the_conf_security_and_the_callback() -> None:
    seen = ClientErrors()
    producer = kafka_clients.producer(_settings(), seen, **{"message.timeout.ms": "1000"})
    consumer = kafka_clients.consumer(_settings(), seen, **{"group.id": "urbpipe-test"})
    try:
        assert producer.flush(0) == 0  # made: librdkafka took every option
    finally:
        consumer.close()


def test_an_idempotent_producer_allowed_to_write_nowhere_is_a_cluster_refusal() -> None:
    """What the secured broker's ``nowrite`` user got from ``urbpipe gaps resume``: a fatal
    error raised by flush, not a delivery report."""
    seen = ClientErrors()
    fatal = FakeError("CLUSTER_AUTHORIZATION_FAILED", "Failed to acquire idempotence PID from "
                      "broker sasl_ssl://kafka:9094/1: Broker: Cluster authorization failed")
    failure = kafka_clients.failure(_settings(), FakeClient(seen), seen, "not delivered", fatal)
    assert isinstance(failure, KafkaRefused)
    assert str(failure).startswith("authorization denied: the job's principal may not "
                                   "IDEMPOTENT_WRITE the cluster ("), str(failure)


class RaisingProducer:
    """flush raising as confluent-kafka 2.16 does on a fatal error with a callback pending."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def flush(self, _timeout: float) -> int:
        raise self.error

    def __len__(self) -> int:
        return 1


def test_flush_returns_the_fatal_error_even_when_wrapped_in_a_system_error() -> None:
    from confluent_kafka import KafkaError, KafkaException

    fatal = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied",
                                      fatal=True))
    wrapped = SystemError("<method 'append' of 'list' objects> returned a result with an "
                          "exception set")
    wrapped.__cause__ = fatal
    for raised in (fatal, wrapped):
        left, errors = kafka_clients.flush(RaisingProducer(raised), 1.0)
        assert left == 1 and [e.code() for e in errors] == [KafkaError.CLUSTER_AUTHORIZATION_FAILED]
