"""The simulator's defaults are what a real replicator behind an MQ source connector delivers:
no Kafka key, statuses naming neither subscription nor destination, a TOD clock
that is not UTC, a resend buffer that overwrites; and the connector's faults: re-produced
batches and stalls. Each convenience of the old simulator stays an option."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from devtools.sim import Delivery, FaultPlan, Replicator, SimConfig
from devtools.sim.config import default_config
from pipeline.urb import decode_message, encode_message, requests, stck_to_datetime


def test_records_have_no_key_unless_asked() -> None:
    out = Replicator(default_config(), seed=1).run(20)
    assert {d.key for d in out} == {None}
    keyed = default_config().model_copy(update={"kafka_key": "subscription"})
    assert {d.key for d in Replicator(keyed, seed=1).run(20)} >= {b"COLOR", b"OUT1"}
    by_id = Replicator(default_config().model_copy(update={"kafka_key": "msgid"}), 1).run(20)
    ids = [d.key for d in by_id]
    assert all(k is not None and len(k) == 48 and bytes.fromhex(k.decode()).startswith(b"AMQ ")
               for k in ids), "MQMD.MsgId as the connector's 48 hex characters"
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
    # 14, not 12: file 21 of the definition is not specified in the request (responder.py)
    assert (topic, e.urbsst, e.urbsrsp, e.urbssubc) == ("urb.replies", "ERRO", 131, 14)
    answer = _inst(rep, [requests.FileSelection(12, 20), requests.FileSelection(12, 21)])
    statuses = [(m.elements[0].urbsst, m.elements[0].urbsfnr) for t, m in answer
                if t == "urb.replies"]
    assert statuses == [("INIT", 20), ("INIT", 21), ("CMPL", 20), ("CMPL", 21)]
    files = {r.urbrfnr for _, m in answer for r in m.elements if r.eye == "URBR"}
    assert files == {20, 21}


def _orders_by_isn() -> Replicator:
    """IORDERS selecting by ISN list: files 20 and 21, both replicated by ORDERS."""
    config = default_config()
    iorders = config.initial_state("IORDERS").model_copy(update={"selection": "isnlist"})
    rep = Replicator(config.model_copy(update={"initial_states": (iorders,)}), seed=4)
    rep.run(10)
    return rep


def _urbr_files(rep: Replicator, file21: list) -> tuple[list[int], list[tuple[str, int]]]:
    """The URBRs' files, and the (status, file) of the reply destination's statuses."""
    out = rep.answer(requests.inst("IORDERS", [
        requests.FileSelection(12, 20, isns=[1, 2]),
        requests.FileSelection(12, 21, isns=file21)], rnam="REPLY", rtok="T"))
    messages = [(d.topic, decode_message(d.value)) for d in out]
    files = [e.urbrfnr for _, m in messages for e in m.elements if e.eye == "URBR"]
    replies = [(m.elements[0].urbsst, m.elements[0].urbsfnr) for t, m in messages
               if t == "urb.replies"]
    return files, replies


@pytest.mark.parametrize("file21", [list(requests.EMPTY_ISN_SELECTION), [(10**6, 2 * 10**6)]])
def test_a_range_selecting_no_existing_isn_gives_its_file_nothing(file21: list) -> None:
    """Seed 000: "Only existent ISNs will be returned for the ISN range" — so a file of a
    multi-file request can be asked for nothing; it is still INIT and CMPL."""
    files, replies = _urbr_files(_orders_by_isn(), file21)
    assert files == [20, 20]
    assert replies == [("INIT", 20), ("INIT", 21), ("CMPL", 20), ("CMPL", 21)]


def test_a_range_over_existing_isns_gives_its_file_those_records() -> None:
    """The control for the test above: the same request with a range that selects."""
    rep = _orders_by_isn()
    existing = [i for i in rep.generator.file("ORDERS", 21).sorted_isns() if i <= 5]
    files, _ = _urbr_files(rep, [(1, 5)])
    assert existing and files == [20, 20] + [21] * len(existing)


# -- keys, lifecycle and GFFTs ---------------------------------------------------------------


def test_msgid_keys_are_unique_and_a_redelivered_copy_keeps_its_own() -> None:
    config = default_config().model_copy(update={"kafka_key": "msgid"})
    rep = Replicator(config, seed=6)
    sent = rep.start() + rep.transactions(60)
    msgids = [bytes.fromhex(d.key.decode("ascii")) for d in sent if d.key is not None]
    assert len(msgids) == len(sent)
    assert all(m[:16] == b"AMQ QMREPTOR    " and len(m) == 24 for m in msgids)
    assert len({d.key for d in sent}) == len(sent)
    again = rep.redeliver("OUT2", 7)
    assert [d.key for d in again] == [d.key for d in sent if d.topic == "urb.out2"][-7:]
    after = rep.transactions(1) + rep.terminate()
    assert not {d.key for d in after} & {d.key for d in sent}, "new messages, new ids"


def test_restart_and_term_name_no_destination_either() -> None:
    rep = Replicator(default_config(), seed=1)
    out = rep.start() + rep.transactions(5) + rep.restart() + rep.terminate()
    lifecycle = [e for d in out for e in decode_message(d.value).elements
                 if e.eye == "URBS" and e.urbsst in ("STRT", "REST", "TERM")]
    assert {e.urbsst for e in lifecycle} == {"STRT", "REST", "TERM"}
    assert {(e.urbssnam, e.urbsdnam) for e in lifecycle} == {("", "")}


def test_gfft_messages_name_no_subscription() -> None:
    """A GFFT travels in a message of its own; without a key nothing in it (key,
    URBH, URBF, URBGs) names the subscription whose layout it describes."""
    config = default_config().model_copy(update={"gfft_files": (4, 9, 20)})
    out = Replicator(config, seed=2).start()
    gffts = [d for d in out if decode_message(d.value).elements[0].eye == "URBF"]
    assert len(gffts) == 4  # COLOR on OUT1, EMPLOYEE on OUT1 and OUT2, ORDERS on OUT2
    for d in gffts:
        assert d.key is None
        message = decode_message(d.value)
        assert [e.eye for e in message.elements] == ["URBF"]
        for sub in config.subscriptions:
            for form in ("cp037", "latin-1"):
                assert sub.name.encode(form) not in d.value, f"{sub.name} in a GFFT"
        texts = [v for e in (message.header, *message.elements) for v in e.fields.values()
                 if isinstance(v, str)]
        assert not any(s.name in t for t in texts for s in config.subscriptions)


# -- the circular resend buffer --------------------------------------------------------------


def test_an_overwritten_tsnr_is_answered_once_when_the_reply_goes_to_that_destination(
) -> None:
    rep = Replicator(default_config(), seed=3)
    rep.run(300)
    out = rep.answer(requests.tran("EMPLOYEE", "OUT2", 1, rnam="OUT2", rtok="T"))
    [(topic, s)] = [(d.topic, decode_message(d.value).elements[0]) for d in out]
    assert (topic, s.urbsst, s.urbsrsp, s.urbssubc, s.urbstsnr) == (
        "urb.out2", "TRSP", 131, 35, 1)


def test_a_few_hundred_transactions_overwrite_the_default_buffer() -> None:
    rep = Replicator(default_config(), seed=0)
    rep.run(300)
    buffer = rep.buffers["RESEND1"]
    oldest = {name: buffer.tsnrs(name)[0] for name in ("COLOR", "EMPLOYEE")}
    assert all(t > 1 for t in oldest.values()), oldest
    assert buffer.used <= buffer.size


# -- connector redelivery ----------------------------------------------------------------------


def _copy_runs(out: list) -> list[tuple[str, list[int], int]]:
    """Each run of copies: topic, positions in ``out``, and how many originals of that topic
    came before it. Keys are message ids, so a repeated key is a copy."""
    originals: dict[str, list[bytes]] = {}
    runs: list[tuple[str, list[int], int]] = []
    expect: tuple[str, int] | None = None  # the topic and index the current run continues at
    for at, d in enumerate(out):
        seen = originals.setdefault(d.topic, [])
        if d.key not in seen:
            seen.append(d.key)
            expect = None
            continue
        index = seen.index(d.key)
        if expect != (d.topic, index):
            runs.append((d.topic, [], len(seen)))
        runs[-1][1].append(at)
        expect = (d.topic, index + 1)
    return runs


def test_a_redelivery_repeats_the_tail_of_one_destination_right_after_it() -> None:
    config = default_config().model_copy(update={"kafka_key": "msgid",
                                                 "redelivery_max_messages": 40})
    plan = FaultPlan(counts={"redeliver": 4})
    out = Replicator(config, seed=9, faults=plan, transactions=120).run(120)
    runs = _copy_runs(out)
    assert len(runs) == 4
    for topic, positions, before in runs:
        assert positions == list(range(positions[0], positions[-1] + 1)), "one block"
        assert 1 <= len(positions) <= 40
        block = [out[p] for p in positions]
        assert {d.topic for d in block} == {topic}, "one destination per redelivery"
        originals = list(dict.fromkeys(d.key for d in out[:positions[0]] if d.topic == topic))
        assert len(originals) == before
        assert [d.key for d in block] == originals[-len(block):], "the last k, in order"
        first = {d.key: d for d in out[:positions[0]]}
        assert all(d == first[d.key] for d in block), "byte for byte, URBHMSNR and URBHTIME"
        assert not any(e.eye in ("URBT", "URBR") and (e.fields.get("urbtrsnd") == "Y"
                                                      or e.fields.get("urbrrsnd") == "Y")
                       for d in block for e in decode_message(d.value).elements), "unflagged"
    assert len({len(p) for _, p, _ in runs}) > 1, "k is drawn, not fixed"


def test_redeliveries_by_rate_are_deterministic_and_leave_the_stream_as_it_was() -> None:
    plan = FaultPlan(rates={"redeliver": 0.05})
    config = default_config().model_copy(update={"redelivery_max_messages": 30})
    first = Replicator(config, seed=4, faults=plan).run(150)
    assert first == Replicator(config, seed=4, faults=plan).run(150)
    clean = Replicator(config, seed=4).run(150)
    assert len(first) > len(clean)
    assert list(dict.fromkeys(d.value for d in first)) == [d.value for d in clean]


def test_the_default_redelivery_reaches_thousands_of_messages_back() -> None:
    config = default_config()
    assert config.redelivery_max_messages == 2000
    rep = Replicator(config.model_copy(update={"max_message_size": 600}), seed=1)
    sent = rep.start() + rep.transactions(2500)
    out1 = [d for d in sent if d.topic == "urb.out1"]
    assert len(out1) > 2000
    assert rep.redeliver("OUT1", 2000) == out1[-2000:]
    assert len(rep.outbox.history["OUT1"]) == 2000, "the history is bounded"


# -- connector stall -------------------------------------------------------------------------


def test_the_kafka_sink_holds_a_stalled_delivery_for_its_delay(monkeypatch) -> None:
    import confluent_kafka

    from devtools.sim import sinks

    events: list[tuple[str, object]] = []

    class Producer:
        def __init__(self, conf: dict) -> None:
            pass

        def produce(self, topic: str, key: bytes | None, value: bytes) -> None:
            events.append(("produce", key))

        def flush(self, timeout: float) -> int:
            events.append(("flush", timeout))
            return 0

        def poll(self, timeout: float) -> int:
            return 0

    monkeypatch.setattr(confluent_kafka, "Producer", Producer)
    monkeypatch.setattr(sinks.time, "sleep", lambda s: events.append(("sleep", s)))
    sink = sinks.KafkaSink("nowhere:9092")
    sink.send([Delivery("t", None, b"a"), Delivery("t", None, b"b", delay_ms=90_000),
               Delivery("t", None, b"c")])
    assert events == [("produce", None), ("flush", 30), ("sleep", 90.0), ("produce", None),
                      ("produce", None)]


def test_the_kafka_sink_keeps_the_order_it_sends_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink's producer is idempotent: librdkafka then never writes a retried batch
    after a later one. Without it bench run 20261126-034430's topic held the STRT and the
    first four data messages (URBHMSNR 1-5) at offsets 37-41, after 6-42, and the job lost
    their 34 transactions as redeliveries (tests/unit/integration/test_fast_path.py,
    ``test_a_topic_whose_first_messages_were_written_late_loses_them_on_both_paths_and_tells``)."""
    import confluent_kafka

    from devtools.sim import sinks

    confs: list[dict] = []

    class Producer:
        def __init__(self, conf: dict) -> None:
            confs.append(conf)

    monkeypatch.setattr(confluent_kafka, "Producer", Producer)
    sinks.KafkaSink("nowhere:9092")
    sinks.KafkaSink("nowhere:9092", **{"security.protocol": "SSL"})
    assert [c["enable.idempotence"] for c in confs] == [True, True]
    assert confs[1]["security.protocol"] == "SSL"


# -- multi-file initial state ----------------------------------------------------------------


def _two_urbis(first: bytes, second: bytes) -> bytes:
    """One request message with the URBIs of two single-file requests (other engineers'
    ``requests.inst`` cannot make the URBIs differ, as seed 000's errors need)."""
    a, b = decode_message(first), decode_message(second)
    return encode_message(a.header, a.elements + b.elements, ebcdic=True, big_endian=True)


@pytest.mark.parametrize(("second", "subc"), [
    (requests.inst_file("ICOLOR", 12, 21, rnam="REPLY", rtok="T"), 11),
    (requests.inst_file("IORDERS", 12, 21, rnam="REPLY", rtok="U"), 18),
    (requests.inst_file("IORDERS", 12, 21, rnam="OUT2", rtok="T"), 10),
    (requests.inst_file("IORDERS", 12, 22, rnam="REPLY", rtok="T"), 12),
    (requests.inst_file("IORDERS", 10006, 21, rnam="REPLY", rtok="T"), 12),
])
def test_urbis_of_one_request_must_agree_and_ask_for_files_of_the_definition(
        second: bytes, subc: int) -> None:
    rep = Replicator(default_config(), seed=4)
    rep.run(5)
    request = _two_urbis(requests.inst_file("IORDERS", 12, 20, rnam="REPLY", rtok="T"), second)
    out = [(d.topic, decode_message(d.value).elements[0]) for d in rep.answer(request)]
    assert [(t, e.urbsst, e.urbsrsp, e.urbssubc) for t, e in out] == [
        ("urb.replies", "ERRO", 131, subc)]


def test_a_urbi_without_a_file_number_is_erro_14() -> None:
    """adapya-era's text of 14: "DBID/FNR must be specified in Initial-state request and
    definition" — a URBI of FNR 0, like a file of the definition without a URBI."""
    from pipeline.urb import make_element

    rep = Replicator(default_config(), seed=4)
    rep.run(5)
    message = decode_message(requests.inst_file("ICOLOR", 10006, 4, rnam="REPLY", rtok="T"))
    urbi = make_element("URBI", **{**message.elements[0].fields, "urbifnr": 0})
    request = encode_message(message.header, [urbi], ebcdic=True, big_endian=True)
    out = [(d.topic, decode_message(d.value).elements[0]) for d in rep.answer(request)]
    assert [(t, e.urbsst, e.urbsrsp, e.urbssubc) for t, e in out] == [
        ("urb.replies", "ERRO", 131, 14)]


def test_any_destination_s_connector_can_redeliver_the_reply_one_too() -> None:
    """One connector per destination queue: the redelivering one is drawn among them all."""
    config = default_config().model_copy(update={"kafka_key": "msgid",
                                                 "redelivery_max_messages": 5})
    plan = FaultPlan(counts={"redeliver": 12})
    out = Replicator(config, seed=9, faults=plan, transactions=100).run(100)
    topics = [topic for topic, _, _ in _copy_runs(out)]
    assert set(topics) == {"urb.out1", "urb.out2", "urb.replies"}
    again = Replicator(config, seed=9, faults=plan, transactions=100).run(100)
    assert [t for t, _, _ in _copy_runs(again)] == topics
