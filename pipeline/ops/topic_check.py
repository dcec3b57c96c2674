"""Ordering is checked, never assumed: every topic the job reads must have one partition.

Why: the replicator numbers the messages it sends to a destination (URBHMSNR, "the sequence of
messages sent to a destination": seed 001, output message summary 1.5) and sends a
transaction's messages one after the other. Kafka keeps order only within a partition, and an
MQ source connector does not keep a destination's messages in one: the IBM MQ source connector
writes no key unless ``mq.record.builder.key.header`` is set, and then the JMS message id, a
different key per message (ibm-messaging/kafka-connect-mq-source, BaseRecordBuilder.getKey).
So on a topic with several partitions a destination's messages are spread over them and read
back in another order: on a topic of three partitions 1 of 40 transactions lands and ~160
TRAN requests go out, and nothing would say why.

The job reads each source topic's partition count from the cluster's metadata at start and
refuses to run (exit 2, one line) when one has more; a topic that does not exist yet is only
a warning (it may be created later, and is checked at the next start). ``urbpipe status``
shows the counts and reports a topic with several partitions as a problem.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from pipeline.config import Settings
from pipeline.errors import KafkaRefused
from pipeline.kafka_refusal import ClientErrors, denied

log = logging.getLogger("urbpipe.topics")
_SLICE_S = 3.0  # one metadata attempt of the start check, then its errors are looked at


class TopicCheckError(ValueError):
    """A source topic has more than one partition (the message is one line)."""


class KafkaOutOfReach(RuntimeError):
    """The cluster's metadata could not be read at start."""


def source_partitions(settings: Settings, counts: Mapping[str, int]) -> dict[str, int | None]:
    """Partition count of every topic the job reads (None: the topic does not exist yet),
    given the cluster's counts by topic. With ``topics.output_pattern`` the topics it
    matches now (Kafka's pattern subscription matches the whole name), plus the configured
    output, reply and control topics."""
    topics = list(settings.source_topics())
    pattern = settings.topics.output_pattern
    if pattern:
        regex = re.compile(pattern)
        topics = [*sorted(t for t in counts if regex.fullmatch(t)), *topics]
    return {t: counts.get(t) for t in dict.fromkeys(topics)}


def problem(partitions: Mapping[str, int | None]) -> str | None:
    """The one-line refusal naming every topic with more than one partition, or None."""
    bad = {t: n for t, n in partitions.items() if n is not None and n > 1}
    if not bad:
        return None
    named = ", ".join(f"topic {t} has {n} partitions" for t, n in bad.items())
    return (f"{named}: a destination's messages keep their order only within one partition; "
            "give each destination a topic with one partition (README: How replicator output "
            "reaches Kafka)")


def partition_counts(metadata: Any) -> dict[str, int]:
    """Topic → partition count from a confluent-kafka ``ClusterMetadata``; a topic the
    metadata reports with an error and no partitions (being deleted, not authorised) is left
    out, so it counts as not existing."""
    return {name: len(t.partitions) for name, t in metadata.topics.items()
            if t.partitions or t.error is None}


def _admin(settings: Settings, errors: ClientErrors | None = None) -> Any:
    from confluent_kafka.admin import AdminClient

    quiet = logging.getLogger("urbpipe.kafka.admin")
    quiet.setLevel(logging.CRITICAL)  # librdkafka's connect errors: the one line says it
    conf: dict[str, Any] = {**settings.kafka.confluent()}
    if errors is not None:  # a SASL or TLS failure arrives here, list_topics only times out
        conf["error_cb"] = errors
    return AdminClient(conf, logger=quiet)


def cluster_partitions(settings: Settings, timeout_s: float = 30.0,
                       admin: Any = None, errors: ClientErrors | None = None) -> dict[str, int]:
    """Partition count of every topic in the cluster (``AdminClient.list_topics``). Raises
    KafkaRefused when the client's errors say Kafka refused us (authentication, TLS),
    KafkaOutOfReach otherwise."""
    from confluent_kafka import KafkaException

    errors = errors if errors is not None else ClientErrors()
    admin = admin or _admin(settings, errors)
    deadline = time.monotonic() + timeout_s
    while True:  # in slices: a refusal is known after the first handshake, not after 30 s
        try:
            return partition_counts(admin.list_topics(
                timeout=max(0.1, min(_SLICE_S, deadline - time.monotonic()))))
        except KafkaException as exc:
            # librdkafka queues the SASL/TLS errors for error_cb, which only a poll serves
            with contextlib.suppress(AttributeError):
                admin.poll(0.5)
            refusal = errors.refusal(settings.kafka, *exc.args)
            if refusal is not None:
                raise KafkaRefused(refusal.message) from None
            if time.monotonic() >= deadline:
                raise KafkaOutOfReach(
                    f"cannot reach Kafka at {settings.kafka.bootstrap_servers} within "
                    f"{timeout_s:g} s: {exc.args[0] if exc.args else exc}") from None


def check_source_topics(settings: Settings, timeout_s: float = 30.0,
                        admin: Any = None,
                        errors: ClientErrors | None = None) -> dict[str, int | None]:
    """At start: raise TopicCheckError when a source topic has several partitions; a topic
    that does not exist yet is only a warning. Returns the counts (None: missing)."""
    partitions = source_partitions(settings,
                                   cluster_partitions(settings, timeout_s, admin, errors))
    for topic in (t for t, n in partitions.items() if n is None):
        log.warning("source topic %s does not exist yet: its partitions are not checked",
                    topic)
    text = problem(partitions)
    if text is not None:
        raise TopicCheckError(text)
    return partitions


def required_operations(settings: Settings,
                        sources: Mapping[str, int | None]) -> dict[str, tuple[str, ...]]:
    """Topic → the operations the job's principal needs on it: READ and DESCRIBE on what it
    reads (outputs, replies, control), WRITE and DESCRIBE on requests and alerts."""
    needed: dict[str, tuple[str, ...]] = dict.fromkeys(sources, ("READ", "DESCRIBE"))
    for topic in (settings.topics.requests, settings.topics.alerts):
        needed[topic] = (*needed.get(topic, ()), "WRITE", "DESCRIBE")
    return {t: tuple(dict.fromkeys(ops)) for t, ops in needed.items()}


def check_permissions(settings: Settings, sources: Mapping[str, int | None],
                      admin: Any, timeout_s: float = 30.0) -> None:
    """At start: raise KafkaRefused (one line naming topic and operation) when the job's
    principal lacks an operation it needs on a topic (``AdminClient.describe_topics`` with
    the topic's authorized operations): a gap request that cannot be written is data never
    re-sent, so the job must not start without WRITE on the request topic. A topic that does
    not exist yet is a warning, as in the partition check; a broker that does not say what is
    authorised is a warning too (nothing to check against)."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    needed = required_operations(settings, sources)
    futures = admin.describe_topics(TopicCollection(list(needed)), request_timeout=timeout_s,
                                    include_authorized_operations=True)
    for topic, ops in needed.items():
        try:
            description = futures[topic].result()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                log.warning("topic %s does not exist yet: its permissions are not checked",
                            topic)
                continue
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise KafkaRefused(denied("topic", topic, ops[0]).message) from None
            raise
        allowed = description.authorized_operations
        if allowed is None:
            log.warning("the broker did not say what the job may do on topic %s: its "
                        "permissions are not checked", topic)
            continue
        names = {getattr(op, "name", str(op)) for op in allowed}
        if "ALL" in names:
            continue
        missing = [op for op in ops if op not in names]
        if missing:
            raise KafkaRefused(denied("topic", topic, missing[0]).message)


def check_start(settings: Settings, timeout_s: float = 30.0, admin: Any = None,
                errors: ClientErrors | None = None) -> dict[str, int | None]:
    """Everything the job checks on Kafka before any Spark session, with one admin client:
    reachability and refusals (KafkaOutOfReach, KafkaRefused), one partition per source topic
    (TopicCheckError), and the principal's permissions (KafkaRefused)."""
    errors = errors if errors is not None else ClientErrors()
    admin = admin or _admin(settings, errors)
    sources = check_source_topics(settings, timeout_s, admin, errors)
    check_permissions(settings, sources, admin, timeout_s)
    return sources
