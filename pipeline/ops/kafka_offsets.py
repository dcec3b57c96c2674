"""End offsets of topics from the broker (confluent-kafka), for lag in messages.

A consumer without a group reads the high watermarks; it never joins a group, so running
``urbpipe status`` leaves no trace on the cluster.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from pipeline.config import Settings
from pipeline.kafka_refusal import ClientErrors
from pipeline.ops import kafka_clients


@contextmanager
def _consumer(settings: Settings, timeout: float, **options: str) -> Iterator[Any]:
    """A consumer outside any group; Kafka out of reach or refusing becomes one line."""
    from confluent_kafka import KafkaException

    seen = ClientErrors()
    consumer = kafka_clients.consumer(settings, seen, **{
        "group.id": f"urbpipe-ops-{uuid.uuid4()}", "enable.auto.commit": "false",
        "socket.timeout.ms": str(int(timeout * 1000)), **options})
    try:
        yield consumer
    except KafkaException as exc:
        raise kafka_clients.failure(
            settings, consumer, seen,
            f"broker {settings.kafka.bootstrap_servers} unreachable: {exc.args[0].str()}",
            *exc.args) from None
    finally:
        consumer.close()


def end_offsets(settings: Settings, topics: Iterable[str],
                timeout: float = 5.0) -> dict[str, dict[int, int]]:
    """topic → partition → high watermark (next offset to be written)."""
    from confluent_kafka import TopicPartition

    with _consumer(settings, timeout) as consumer:
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


def message_times(settings: Settings, positions: dict[tuple[str, int], int],
                  timeout: float = 5.0) -> dict[tuple[str, int], int]:
    """(topic, partition) → the Kafka time stamp (ms) of the message at that offset: one
    message read per partition, without joining a group (how long the oldest message the
    job has not processed has waited). A partition whose message did not come in time is
    left out."""
    from confluent_kafka import TopicPartition

    if not positions:
        return {}
    out: dict[tuple[str, int], int] = {}
    with _consumer(settings, timeout, **{"enable.partition.eof": "false"}) as consumer:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        deadline = time.monotonic() + timeout
        while len(out) < len(positions) and time.monotonic() < deadline:
            for msg in consumer.consume(len(positions), timeout=0.5):
                where = (msg.topic(), msg.partition())
                if msg.error() is None and where not in out and msg.offset() >= positions[where]:
                    out[where] = msg.timestamp()[1]
    return out
