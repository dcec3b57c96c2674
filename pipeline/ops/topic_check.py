"""Ordering is checked, never assumed: every topic the job reads must have one partition.

Why: the replicator numbers the messages it sends to a destination (URBHMSNR, "the sequence of
messages sent to a destination": seed 001, output message summary 1.5) and sends a
transaction's messages one after the other. Kafka keeps order only within a partition, and an
MQ source connector does not keep a destination's messages in one: the IBM MQ source connector
writes no key unless ``mq.record.builder.key.header`` is set, and then the JMS message id, a
different key per message (ibm-messaging/kafka-connect-mq-source, BaseRecordBuilder.getKey).
So on a topic with several partitions a destination's messages are spread over them and read
back in another order. Measured before this check: with three partitions 1 of 40 transactions
landed and ~160 TRAN requests went out, and nothing said why.

The job reads each source topic's partition count from the cluster's metadata at start and
refuses to run (exit 2, one line) when one has more; a topic that does not exist yet is only
a warning (it may be created later, and is checked at the next start). ``urbpipe status``
shows the counts and reports a topic with several partitions as a problem.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from pipeline.config import Settings

log = logging.getLogger("urbpipe.topics")


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


def _admin(settings: Settings) -> Any:
    from confluent_kafka.admin import AdminClient

    quiet = logging.getLogger("urbpipe.kafka.admin")
    quiet.setLevel(logging.CRITICAL)  # librdkafka's connect errors: the one line says it
    return AdminClient(settings.kafka.confluent(), logger=quiet)


def cluster_partitions(settings: Settings, timeout_s: float = 30.0,
                       admin: Any = None) -> dict[str, int]:
    """Partition count of every topic in the cluster (``AdminClient.list_topics``)."""
    from confluent_kafka import KafkaException

    try:
        metadata = (admin or _admin(settings)).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaOutOfReach(
            f"cannot reach Kafka at {settings.kafka.bootstrap_servers} within {timeout_s:g} s: "
            f"{exc.args[0] if exc.args else exc}") from None
    return partition_counts(metadata)


def check_source_topics(settings: Settings, timeout_s: float = 30.0,
                        admin: Any = None) -> dict[str, int | None]:
    """At start: raise TopicCheckError when a source topic has several partitions; a topic
    that does not exist yet is only a warning. Returns the counts (None: missing)."""
    partitions = source_partitions(settings, cluster_partitions(settings, timeout_s, admin))
    for topic in (t for t, n in partitions.items() if n is None):
        log.warning("source topic %s does not exist yet: its partitions are not checked",
                    topic)
    text = problem(partitions)
    if text is not None:
        raise TopicCheckError(text)
    return partitions
