"""The job's producer connects at start: an unreachable broker is one clear error, at once."""

from __future__ import annotations

import time

import pytest

from pipeline.config import Settings
from pipeline.spark.land.kafka_out import KafkaOut, KafkaUnreachable


def test_an_unreachable_broker_is_one_clear_error(test_settings: Settings) -> None:
    kafka = test_settings.kafka.model_copy(update={"bootstrap_servers": "127.0.0.1:1"})
    out = KafkaOut(test_settings.model_copy(update={"kafka": kafka}))
    started = time.monotonic()
    with pytest.raises(KafkaUnreachable, match=r"cannot reach Kafka at 127\.0\.0\.1:1 within 2 s"):
        out.connect(timeout_s=2)
    assert time.monotonic() - started < 10


def test_a_replayed_batch_sends_only_what_kafka_sent_does_not_show(
        test_settings: Settings, fresh_topic: str) -> None:
    """Issue 35, point 9: nothing in seed 000 lets the replicator drop a repeated TRAN, so a
    batch replayed after a crash between the send and the checkpoint must not send what the
    ``kafka_sent`` table shows sent. Here the TRAN for tsnr 2 was recorded as sent: the one
    for tsnr 3 and the alerts go out, once each, and each is returned for ``kafka_sent``."""
    from confluent_kafka import Consumer

    from pipeline.reassembly.tables import events_to_rows
    from pipeline.spark.land.kafka_out import send_requests_and_alerts
    from tests.unit.reassembly.builders import Feed, Harness, txn

    h = Harness(now_ms=10_000)
    rows = events_to_rows(h.feed(Feed().send(txn(1), txn(4))), h.now)
    requests, alerts = rows["requests"], rows["alerts"]
    assert sorted(r["tsnr"] for r in requests) == [2, 3] and alerts
    topics = test_settings.topics.model_copy(update={"requests": fresh_topic,
                                                     "alerts": fresh_topic})
    settings = test_settings.model_copy(update={"topics": topics})
    recorded = next(r["idempotency_key"] for r in requests if r["tsnr"] == 2)
    done = send_requests_and_alerts(settings, KafkaOut(settings), requests, alerts,
                                    sent=frozenset({recorded}))
    expected = sorted([r["idempotency_key"] for r in requests if r["tsnr"] == 3]
                      + [a["idempotency_key"] for a in alerts])
    assert sorted(d["idempotency_key"] for d in done) == expected
    consumer = Consumer({**settings.kafka.confluent(), "group.id": f"g-{fresh_topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([fresh_topic])
    got: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(got) <= len(expected):
        msg = consumer.poll(1.0 if len(got) < len(expected) else 3.0)
        if msg is None and len(got) >= len(expected):
            break
        if msg is not None and msg.error() is None:
            got.append(dict(msg.headers())["idempotency_key"].decode())
    consumer.close()
    assert sorted(got) == expected, "each message once, the recorded one not again"
