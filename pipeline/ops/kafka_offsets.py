"""End offsets of topics from the broker (confluent-kafka), for lag in messages.

A consumer without a group reads the high watermarks; it never joins a group, so running
``urbpipe status`` leaves no trace on the cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from pipeline.config import Settings
from pipeline.kafka_refusal import ClientErrors
from pipeline.ops import kafka_clients


def end_offsets(settings: Settings, topics: Iterable[str],
                timeout: float = 5.0) -> dict[str, dict[int, int]]:
    """topic → partition → high watermark (next offset to be written)."""
    from confluent_kafka import KafkaException, TopicPartition

    seen = ClientErrors()
    consumer = kafka_clients.consumer(settings, seen, **{
        "group.id": f"urbpipe-ops-{uuid.uuid4()}", "enable.auto.commit": "false",
        "socket.timeout.ms": str(int(timeout * 1000))})
    try:
        out: dict[str, dict[int, int]] = {}
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                out[topic] = {}
                continue
            out[topic] = {p: consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                            timeout=timeout)[1]
                          for p in sorted(meta.partitions)}
        return out
    except KafkaException as exc:
        raise kafka_clients.failure(
            settings, consumer, seen,
            f"broker {settings.kafka.bootstrap_servers} unreachable: {exc.args[0].str()}",
            *exc.args) from None
    finally:
        consumer.close()
