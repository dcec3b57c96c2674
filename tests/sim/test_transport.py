"""The simulator's defaults are what a real replicator behind an MQ source connector delivers
(issue 14): no Kafka key, statuses naming neither subscription nor destination, a TOD clock
that is not UTC, a resend buffer that overwrites; and the connector's faults: re-produced
batches and stalls. Each convenience of the old simulator stays an option."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline.sim import FaultPlan, Replicator, SimConfig
from pipeline.sim.config import default_config
from pipeline.urb import decode_message, requests, stck_to_datetime


def test_records_have_no_key_unless_asked() -> None:
    out = Replicator(default_config(), seed=1).run(20)
    assert {d.key for d in out} == {None}
    keyed = default_config().model_copy(update={"kafka_key": "subscription"})
    assert {d.key for d in Replicator(keyed, seed=1).run(20)} >= {b"COLOR", b"OUT1"}
    by_id = Replicator(default_config().model_copy(update={"kafka_key": "msgid"}), 1).run(20)
    ids = [d.key for d in by_id]
    assert all(k is not None and len(k) == 24 and k.startswith(b"AMQ ") for k in ids)
    assert len(set(ids)) == len(ids), "a message id is unique per message"


def test_lifecycle_statuses_name_no_destination_unless_asked() -> None:
    def strt(config: SimConfig) -> list:
        return [decode_message(d.value).elements[0] for d in Replicator(config, 1).start()
                if decode_message(d.value).elements[0].eye == "URBS"]

    assert {(e.urbssnam, e.urbsdnam) for e in strt(default_config())} == {("", "")}
    named = default_config().model_copy(update={"lifecycle_names_destination": True})
    assert {e.urbsdnam for e in strt(named)} == {"OUT1", "OUT2", "REPLY"}


def test_stck_times_are_machine_time_ahead_of_utc() -> None:
    """Seed 001: the stamps are machine time; by default 27 leap seconds and UTC+01:00."""
    rep = Replicator(default_config(), seed=1)
    first = decode_message(rep.start()[0].value).header.urbhtime
    start = datetime.fromisoformat(default_config().start_time)
    assert (stck_to_datetime(first) - start).total_seconds() == pytest.approx(3627, abs=1)
    utc = default_config().model_copy(update={"tod_utc_offset": "+00:00",
                                              "tod_leap_seconds": 0})
    first = decode_message(Replicator(utc, seed=1).start()[0].value).header.urbhtime
    assert abs((stck_to_datetime(first) - start).total_seconds()) < 1
    assert start.tzinfo is UTC


def test_a_redelivery_repeats_the_last_messages_of_a_destination_byte_for_byte() -> None:
    config = default_config().model_copy(update={"redelivery_max_messages": 50})
    rep = Replicator(config, seed=5)
    sent = rep.start() + rep.transactions(80)
    again = rep.redeliver("OUT1", 30)
    out1 = [d for d in sent if d.topic == "urb.out1"]
    assert again == out1[-30:], "same bytes, same URBHMSNR/URBHTIME, same key"
    assert len(rep.redeliver("OUT1")) <= 50
    plan = FaultPlan(counts={"redeliver": 2})
    faulty = Replicator(config, seed=5, faults=plan, transactions=60).run(60)
    clean = Replicator(config, seed=5, transactions=60).run(60)
    assert len(faulty) > len(clean)
    values = [d.value for d in faulty]
    assert len(set(values)) == len({d.value for d in clean}), "only copies were added"


def test_a_stall_holds_a_continuation_without_changing_its_time() -> None:
    config = default_config().model_copy(update={"max_message_size": 600, "stall_ms": 90_000})
    plan = FaultPlan(counts={"stall": 1})
    out = Replicator(config, seed=2, faults=plan, transactions=30).run(30)
    held = [d for d in out if d.delay_ms]
    assert len(held) == 1 and held[0].delay_ms == 90_000
    assert decode_message(held[0].value).elements[0].eye == "URBC"
    clean = Replicator(config, seed=2, transactions=30).run(30)
    assert [d.value for d in out] == [d.value for d in clean]


def test_tran_for_an_overwritten_tsnr_is_trsp_35_on_the_reply_and_the_named_destination(
) -> None:
    rep = Replicator(default_config(), seed=3)
    rep.run(400)  # the 64K buffer keeps about the last hundred transactions
    buffer = rep.resend_buffer(rep.config.subscription("COLOR"))
    assert buffer is not None and 1 not in buffer.tsnrs("COLOR")
    out = rep.answer(requests.tran("COLOR", "OUT1", 1, rnam="REPLY", rtok="T"))
    trsp = [(d.topic, decode_message(d.value).elements[0]) for d in out]
    assert {t for t, _ in trsp} == {"urb.replies", "urb.out1"}
    assert all((e.urbsst, e.urbsrsp, e.urbssubc) == ("TRSP", 131, 35) for _, e in trsp)


def _inst(rep: Replicator, files: list[requests.FileSelection]) -> list:
    out = rep.answer(requests.inst("IORDERS", files, rnam="REPLY", rtok="T"))
    return [(d.topic, decode_message(d.value)) for d in out]


def test_a_multi_file_definition_answers_one_urbi_with_erro_and_all_its_files_with_data(
) -> None:
    """IORDERS covers files 20 and 21 (seed 000: a URBI for each file, in one message)."""
    rep = Replicator(default_config(), seed=4)
    rep.run(10)
    [(topic, erro)] = _inst(rep, [requests.FileSelection(12, 20)])
    e = erro.elements[0]
    assert (topic, e.urbsst, e.urbsrsp, e.urbssubc) == ("urb.replies", "ERRO", 131, 12)
    answer = _inst(rep, [requests.FileSelection(12, 20), requests.FileSelection(12, 21)])
    statuses = [(m.elements[0].urbsst, m.elements[0].urbsfnr) for t, m in answer
                if t == "urb.replies"]
    assert statuses == [("INIT", 20), ("INIT", 21), ("CMPL", 20), ("CMPL", 21)]
    files = {r.urbrfnr for _, m in answer for r in m.elements if r.eye == "URBR"}
    assert files == {20, 21}


def test_an_empty_isn_range_selects_nothing_for_its_file() -> None:
    config = default_config().model_copy(update={"initial_states": (
        default_config().initial_states[1].model_copy(update={"files": (9, 10)}),)})
    rep = Replicator(config, seed=4)
    rep.run(10)
    out = rep.answer(requests.inst("IEMPL", [
        requests.FileSelection(10006, 9, isns=[1, 2]),
        requests.FileSelection(10006, 10, isns=requests.EMPTY_ISN_SELECTION)],
        rnam="REPLY", rtok="T"))
    records = [r for d in out for r in decode_message(d.value).elements if r.eye == "URBR"]
    assert records and {r.urbrfnr for r in records} == {9}
