"""Round trip through the real local broker: produce with keys, answer a request from the topic."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from devtools.sim import KafkaSink, LoadOptions, Replicator, default_config, drive
from devtools.sim.load import KafkaRequests
from devtools.sim.model import SimConfig
from pipeline.urb import decode_message, requests


@pytest.fixture
def sim_config(kafka_bootstrap: str) -> Iterator[SimConfig]:
    """The default set on fresh topics of its own."""
    from confluent_kafka.admin import AdminClient, NewTopic

    tag = uuid.uuid4().hex[:8]
    base = default_config()
    dests = tuple(
        d.model_copy(update={"topic": f"sim.{tag}.{d.name.lower()}"}) for d in base.destinations
    )
    cfg = base.model_copy(update={"destinations": dests, "request_topic": f"sim.{tag}.req"})
    names = [d.topic for d in dests] + [cfg.request_topic]
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(30)
    yield cfg
    admin.delete_topics(names)


def consume(bootstrap: str, topics: list[str], expected: int) -> list[tuple[str, str, bytes]]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(topics)
    out: list[tuple[str, str, bytes]] = []
    for _ in range(60):
        for m in consumer.consume(500, timeout=1.0):
            if m.error() is None:
                out.append((m.topic(), (m.key() or b"").decode(), m.value()))
        if len(out) >= expected:
            break
    consumer.close()
    return out


def test_stream_and_request_round_trip(kafka_bootstrap: str, sim_config: SimConfig) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(sim_config.request_topic, requests.stat("COLOR", rnam="REPLY", rtok="K1"))
    producer.flush(30)

    rep = Replicator(sim_config, seed=1)
    sink = KafkaSink(kafka_bootstrap)
    source = KafkaRequests(kafka_bootstrap, sim_config.request_topic, uuid.uuid4().hex)
    try:
        summary = drive(rep, sink, LoadOptions(transactions=50, rate=25.0, linger=5.0), source)
    finally:
        sink.close()
        source.close()
    assert summary.requests == 1

    topics = [d.topic for d in sim_config.destinations]
    received = consume(kafka_bootstrap, topics, summary.messages)
    assert len(received) == summary.messages
    replies = [(k, decode_message(v)) for t, k, v in received if t.endswith(".reply")]
    assert any(
        m.elements[0].urbsst == "SUBS" and m.elements[0].urbsrtok == "K1" for _, m in replies
    )
    assert {key for _topic, key, _value in received} == {""}, "no Kafka key, as MQ writes"
