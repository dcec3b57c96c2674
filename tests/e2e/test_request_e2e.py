"""``urbpipe request`` against the real local broker, answered in-test by the simulator."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from devtools.sim import Replicator
from devtools.sim.config import from_settings
from pipeline.config import Settings, load_settings
from pipeline.ops.cli import main
from tests.conftest import TEST_CONF


@pytest.fixture
def fresh_topics(kafka_bootstrap: str, test_settings: Settings,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The test conf with its own output/request/reply topics (env overrides, as operators)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    tag = uuid.uuid4().hex[:8]
    names = {"out": f"ops.{tag}.out1", "req": f"ops.{tag}.req", "rep": f"ops.{tag}.rep"}
    admin = AdminClient(test_settings.kafka.confluent())
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names.values()]).values():
        future.result(30)
    env = {"URBPIPE__TOPICS__OUTPUTS": f"{{{names['out']}: OUT1}}",
           "URBPIPE__TOPICS__REQUESTS": names["req"], "URBPIPE__TOPICS__REPLIES": names["rep"]}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield load_settings(TEST_CONF)
    admin.delete_topics(list(names.values()))


def answer_requests(settings: Settings, stop: threading.Event, ready: threading.Event,
                    sent: dict[str, int]) -> None:
    """The replicator's side: read the input queue, produce the simulator's answers."""
    from confluent_kafka import Consumer, Producer

    rep = Replicator(from_settings(settings), seed=5)
    producer = Producer(settings.kafka.confluent())
    for d in rep.start() + rep.transactions(10):
        producer.produce(d.topic, key=d.key, value=d.value)
    sent["COLOR"] = rep.states["COLOR"].tsnr  # in the resend buffer
    ready.set()
    consumer = Consumer({**settings.kafka.confluent(), "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([settings.topics.requests])
    while not stop.is_set():
        for msg in consumer.consume(10, timeout=0.2):
            if msg.error() is None:
                for d in rep.answer(msg.value()):
                    producer.produce(d.topic, key=d.key, value=d.value)
                producer.flush(10)
    consumer.close()


def test_tran_request_waits_for_and_explains_the_reply(
        fresh_topics: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    stop, ready = threading.Event(), threading.Event()
    sent: dict[str, int] = {}
    replicator = threading.Thread(target=answer_requests,
                                  args=(fresh_topics, stop, ready, sent))
    replicator.start()
    try:
        assert ready.wait(30) and sent["COLOR"] > 0
        conf = ["--conf-file", str(TEST_CONF), "--timeout", "30", "--token", "E2E"]
        assert main(["request", "tran", "COLOR", str(sent["COLOR"]), *conf]) == 0
        out = capsys.readouterr().out
        assert "TRAN/TRSP: Response to a prior-transaction request" in out
        assert main(["request", "tran", "COLOR", "999", *conf]) == 1
        out = capsys.readouterr().out
        assert "response 131 subcode 35: Requested transaction not found in the resend buffer" \
            in out
    finally:
        stop.set()
        replicator.join(30)
