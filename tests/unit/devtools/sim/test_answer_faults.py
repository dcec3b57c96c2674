"""Request answers on a bad day (devtools/sim/answer_faults.py): a confirmed resend that
arrives late, a lost initial-state message, INST refused with 131/44 (IMAXREQ)."""

from __future__ import annotations

import time

import pytest

from devtools.sim import Delivery, Replicator, default_config
from devtools.sim.sinks import Counts, KafkaSink
from pipeline.urb import requests
from tests.support.streams import Received, decode_all, rebuild


def replicator(**update: object) -> Replicator:
    config = default_config().model_copy(update={"max_message_size": 900, "c5_rate": 0.0,
                                                 **update})
    rep = Replicator(config, seed=3)
    rep.run(40)
    return rep


def inst(isns: list[int | tuple[int, int]] | None = None) -> bytes:
    return requests.inst_file("IEMPL", 10006, 9, rnam="REPLY", rtok="T1",
                              isns=isns or [(1, 400)])


def data_on(out: list[Delivery], topic: str = "urb.out1") -> list[Received]:
    return [r for r in decode_all(out) if r.topic == topic and r.first.eye != "URBS"]


# -- a successful TRAN: TRSP 0 at once, the resend later ------------------------------------


def test_a_confirmed_resend_lags_its_status_does_not() -> None:
    rep = replicator(resend_delay_ms=15_000)
    tsnr = rep.states["COLOR"].tsnr - 1
    out = rep.answer(requests.tran("COLOR", "OUT1", tsnr, rnam="REPLY"))
    (trsp,) = [d for d in out if d.topic == "urb.replies"]
    status = decode_all([trsp])[0].first
    assert (status.urbsst, status.urbsrsp, status.urbstsnr, trsp.lag_ms) == ("TRSP", 0, tsnr, 0)
    resend = [d for d in out if d.topic == "urb.out1"]
    assert resend and {d.lag_ms for d in resend} == {15_000}
    assert [t.tsnr for t in rebuild(decode_all(resend))["COLOR"]] == [tsnr]
    assert all(d.lag_ms == 0 for d in rep.redeliver("OUT1", 5)), "a redelivery is on time"


class _Producer:
    """Stands in for librdkafka's producer: records what is produced, and when."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, bytes, float]] = []

    def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.produced.append((topic, value, time.monotonic()))

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        return 0


def test_the_kafka_sink_holds_a_lagging_topic_and_only_that_one() -> None:
    sink = KafkaSink.__new__(KafkaSink)  # its __init__ makes a real producer: set its state
    producer = _Producer()
    sink._producer, sink._held, sink.counts = producer, {}, Counts()  # type: ignore[attr-defined]
    started = time.monotonic()
    sink.send([Delivery("out", None, b"resend", lag_ms=300), Delivery("replies", None, b"trsp"),
               Delivery("out", None, b"after")])
    assert [v for _, v, _ in producer.produced] == [b"trsp"]
    sink.pump()
    assert len(producer.produced) == 1, "not due yet"
    sink.close()
    assert [v for _, v, _ in producer.produced] == [b"trsp", b"resend", b"after"]
    assert producer.produced[1][2] - started >= 0.3


# -- a lost initial-state message --------------------------------------------------------------


@pytest.mark.parametrize("which", ["first", "middle", "last", "single"])
def test_an_inst_answer_loses_one_message_and_the_next_answer_is_whole(which: str) -> None:
    rep = replicator(inst_lost_message=which, initial_state_chunk=10)
    whole = replicator(initial_state_chunk=10)
    first, clean = rep.answer(inst()), whole.answer(inst())
    got, full = data_on(first), data_on(clean)
    assert len(got) == len(full) - 1
    (lost,) = rep.answer_faults.lost
    lost_msnr = decode_all([lost])[0].message.header.urbhmsnr
    assert lost_msnr not in {r.message.header.urbhmsnr for r in got}, "its msnr is used up"
    position = [r.message.header.urbhmsnr for r in full].index(lost_msnr)
    count = len(full)
    assert position == {"first": 0, "middle": count // 2, "last": count - 1}.get(which, position)
    statuses = [r.status for r in decode_all(first) if r.topic == "urb.out1" and r.status]
    assert statuses == ["INIT", "CMPL"], "the answer looks complete"
    if which == "single":
        eyes = [e.eye for e in decode_all([lost])[0].message.elements]
        assert eyes[0] == "URBT" and eyes[-1] == "URBE", "a whole pseudo-transaction"
    again = data_on(rep.answer(inst()))
    assert len(again) == len(full), "the re-asked request is answered in full"
    assert lost.value not in {d.value for d in rep.redeliver("OUT1", 2000)}, "never produced"


def test_first_loses_the_start_of_a_two_message_pseudo_transaction() -> None:
    """With small messages a pseudo-transaction spans two: losing the first message leaves a
    continuation without its start."""
    rep = replicator(inst_lost_message="first", initial_state_chunk=10, max_message_size=600)
    got = data_on(rep.answer(inst()))
    assert got[0].first.eye == "URBC"


# -- INST refused with 131/44 --------------------------------------------------------------------


def test_inst_beyond_imaxreq_is_refused_with_131_44_until_one_ends() -> None:
    rep = replicator(inst_max_requests=2, inst_busy_ms=5_000)
    answers = [decode_all(rep.answer(inst([i]))) for i in (1, 2, 3)]
    assert [r.status for r in answers[0] if r.topic == "urb.replies"] == ["INIT", "CMPL"]
    assert [r.status for r in answers[1] if r.topic == "urb.replies"] == ["INIT", "CMPL"]
    (refused,) = answers[2]
    s = refused.first
    assert (refused.topic, s.urbsst, s.urbsrsp, s.urbssubc, s.urbsrtok) == (
        "urb.replies", "ERRO", 131, 44, "T1")
    assert rep.answer_faults.refused == 1
    rep.clock.advance(5_000_001)
    later = decode_all(rep.answer(inst([3])))
    assert [r.status for r in later if r.topic == "urb.replies"] == ["INIT", "CMPL"]
