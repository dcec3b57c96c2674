"""The ``urbpipe`` commands' Kafka clients, whose failures say why in one line.

A producer or consumer that cannot do its work fails either because Kafka is out of reach
(exit 3, ``BrokerUnreachable``) or because Kafka answered and said no: a wrong password, a
certificate one side does not trust, a missing ACL (exit 5, ``KafkaRefused``). librdkafka
reports the second kind only through its error callback (the call itself just times out with
"Broker transport failure"), and serves that callback only when the client is polled; so each
client is made with a ``ClientErrors`` callback, and ``failure`` polls it before deciding.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from pipeline.config import Settings
from pipeline.errors import BrokerUnreachable, KafkaRefused, OpsError
from pipeline.kafka_refusal import ClientErrors


def _quiet() -> logging.Logger:
    """librdkafka's own log lines (one per failed connection attempt) would bury the one line
    the command prints; its errors reach ``ClientErrors`` instead."""
    quiet = logging.getLogger("urbpipe.kafka.client")
    quiet.setLevel(logging.CRITICAL)
    return quiet


def producer(settings: Settings, errors: ClientErrors, **options: str) -> Any:
    """A confluent-kafka Producer with the conf's connection and security, reporting into
    ``errors``."""
    from confluent_kafka import Producer

    return Producer({**settings.kafka.confluent(), **options, "error_cb": errors},
                    logger=_quiet())


def consumer(settings: Settings, errors: ClientErrors, **options: str) -> Any:
    """A confluent-kafka Consumer, like ``producer``."""
    from confluent_kafka import Consumer

    return Consumer({**settings.kafka.confluent(), **options, "error_cb": errors},
                    logger=_quiet())


def flush(client: Any, timeout_s: float) -> tuple[int, list[Any]]:
    """``client.flush``: (messages still queued, the fatal errors it raised).

    A fatal error (e.g. an idempotent producer whose principal may write nowhere: "Cluster
    authorization failed") makes flush raise KafkaException; a delivery callback that runs
    while it is pending turns it into a SystemError whose cause is that KafkaException
    (confluent-kafka 2.16). Either way the fatal KafkaError is returned for ``failure``.
    """
    from confluent_kafka import KafkaException

    try:
        return client.flush(timeout_s), []
    except (KafkaException, SystemError) as exc:
        cause = exc if isinstance(exc, KafkaException) else exc.__cause__ or exc.__context__
        if not isinstance(cause, KafkaException):
            raise
        return max(1, len(client)), list(cause.args)


def failure(settings: Settings, client: Any, errors: ClientErrors, unreachable: str,
            *also: Any) -> OpsError:
    """The error to raise for a client that failed: KafkaRefused naming the refusal, when the
    client's errors (or ``also``, e.g. a KafkaException's error) show one, else
    BrokerUnreachable(``unreachable``). Polls ``client`` first to collect its errors (a
    consumer here must not be assigned yet: the poll would take a message)."""
    with contextlib.suppress(AttributeError, RuntimeError):
        client.poll(0.5)
    refusal = errors.refusal(settings.kafka, *also)
    if refusal is not None:
        return KafkaRefused(refusal.message)
    return BrokerUnreachable(unreachable)
