"""The decode stage's routing (a scan) and the state stage's full decode agree on the keys.

Every element of a message must reach exactly one (destination, subscription) key that
lands it: the decode stage emits one row per key it finds by scanning, the state function
decodes the message in full and keeps the elements of its key. An element whose key the two
worked out differently would be lost without a trace, so: for any mix of data and status
elements, the rows' keys take every element exactly once (echoes of a destination-wide
STRT/REST aside), and none takes nothing. The Kafka key routes nothing (a real connector
writes none).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reassembly.routing import Covered
from pipeline.spark.engine.decode_stage import RecordDecoder
from pipeline.urb import decode_message, encode_message, make_element

COVERED = {"OUT1": [Covered("COLOR", frozenset({(10006, 4)})),
                    Covered("EMPL", frozenset({(10006, 11), (10006, 12)}))],
           "OUT2": [Covered("EMPL", frozenset({(10006, 11), (10006, 12)}))]}
DECODER = RecordDecoder({"t.out1": "OUT1", "t.replies": "REPLY"}, "OUT1", "cp037",
                        home_destinations={"COLOR": "OUT1", "EMPL": "OUT2"},
                        initial_states={"ICOLOR": "COLOR"}, covered=COVERED,
                        control_topic="t.control")

NAMES = st.sampled_from(["", "COLOR", "EMPL", "OTHER"])


def status() -> st.SearchStrategy:
    return st.builds(
        lambda rt, st_, snam, dnam, inam: make_element(
            "URBS", urbsrt=rt, urbsst=st_, urbssnam=snam, urbsdnam=dnam, urbsinam=inam),
        st.sampled_from(["", "TRAN", "INST", "STAT"]), st.sampled_from(["TRSP", "INIT", "STRT"]),
        NAMES, st.sampled_from(["", "OUT1", "OUT2"]), st.sampled_from(["", "ICOLOR", "IX"]))


def data(snam: str) -> st.SearchStrategy:
    return st.sampled_from([
        make_element("URBT", urbtsnam=snam, urbttsnr=5, urbtrcnt=1),
        make_element("URBR", urbrrsnr=1, urbrdcnt=1),
        make_element("URBD", urbddsnr=1, payload=b"xy"),
        make_element("URBE", urbesnam=snam, urbetsnr=5),
        make_element("URBC", urbcsnam=snam, urbctsnr=5)])


@settings(max_examples=300, deadline=None)
@given(snam=NAMES, parts=st.data(), topic=st.sampled_from(["t.out1", "t.replies", "t.other"]),
       ebcdic=st.booleans())
def test_every_element_reaches_exactly_one_key(snam: str, parts: st.DataObject, topic: str,
                                                ebcdic: bool) -> None:
    body = parts.draw(st.lists(st.one_of(status(), data(snam)), min_size=1, max_size=8))
    raw = encode_message(None, body, ebcdic=ebcdic, big_endian=ebcdic)
    rows = DECODER.rows(topic, 0, 7, b"KAFKAKEY", raw)
    assert all(r["error"] is None for r in rows)
    assert DECODER.routes(topic, b"KAFKAKEY", raw) == DECODER.routes(topic, None, raw), \
        "the Kafka key routes nothing"
    taken: list[int] = []
    for row in rows:
        elements, _warnings = DECODER.element_rows(
            topic, 0, 7, b"KAFKAKEY", raw, (row["destination"], row["subscription"]),
            row["part"])
        assert elements, f"key {row['destination']}/{row['subscription']} takes nothing"
        taken += [e.elem_index for e in elements if not e.echo]
        for e in elements:
            if e.echo:  # only a destination-wide restart, to a subscription of its destination
                assert e.char("urbsst") in ("STRT", "REST") and not e.char("urbssnam")
                assert row["subscription"] in {c.subscription for c in
                                               COVERED[row["destination"]]}
    assert sorted(taken) == list(range(len(decode_message(raw).elements)))


@pytest.mark.parametrize("st_", ["STRT", "REST", "TERM"])
def test_a_destination_wide_status_lands_once_and_restarts_every_subscription(st_: str) -> None:
    raw = encode_message(None, [make_element("URBS", urbsst=st_)])
    rows = DECODER.rows("t.out1", 0, 5, None, raw)
    keys = [(r["destination"], r["subscription"]) for r in rows]
    echoes = [("OUT1", "COLOR"), ("OUT1", "EMPL")] if st_ != "TERM" else []
    assert keys == [("OUT1", ""), *echoes]
    got = {k: DECODER.element_rows("t.out1", 0, 5, None, raw, k, r["part"])[0]
           for k, r in zip(keys, rows, strict=True)}
    assert [e.echo for e in got[("OUT1", "")]] == [False]
    assert all([e.echo for e in got[k]] == [True] for k in echoes)


def test_a_gfft_of_its_own_goes_to_every_subscription_covering_its_file() -> None:
    """A GFFT message names no subscription; with a null Kafka key it used to
    land under subscription "" and never apply."""
    def gfft(fnr: int) -> bytes:
        return encode_message(None, [make_element("URBF", urbfdbid=10006, urbffnr=fnr,
                                                  urbfgfid="G1", groups=[])])

    def keys(topic: str, raw: bytes) -> list[tuple[str, str]]:
        return [(r["destination"], r["subscription"]) for r in DECODER.rows(topic, 0, 1, None,
                                                                            raw)]

    assert keys("t.out1", gfft(4)) == [("OUT1", "COLOR")]
    assert keys("t.out1", gfft(11)) == [("OUT1", "EMPL")]
    assert keys("t.out1", gfft(99)) == [("OUT1", "")]
    both = RecordDecoder({"t": "OUT1"}, "OUT1", "cp037", covered={"OUT1": [
        Covered("A", frozenset({(10006, 4)})), Covered("B", frozenset({(10006, 4), (10006, 5)}))]})
    rows = both.rows("t", 0, 1, None, gfft(4))
    assert [(r["subscription"], r["part"]) for r in rows] == [("A", 0), ("B", 1)]
    for r in rows:  # each lands it (a layouts row per subscription), none as an echo
        [el] = both.element_rows("t", 0, 1, None, gfft(4), ("OUT1", r["subscription"]),
                                 r["part"])[0]
        assert el.eye == "URBF" and not el.echo


def test_each_batch_adds_message_number_runs_and_destination_ticks() -> None:
    from pipeline.reassembly.rows import HEADERS_EYE, TICK_EYE
    from pipeline.urb import make_element as el

    def msg(msnr: int, htime: int) -> bytes:
        return encode_message(el("URBH", urbhmsnr=msnr, urbhtime=htime),
                              [el("URBS", urbsst="C5DA", urbssnam="COLOR")])

    records = [("t.out1", 0, o, msg(m, 1000 + o)) for o, m in
               [(10, 5), (11, 6), (12, 7), (13, 9), (14, 3), (15, 10)]]
    extra = DECODER.batch_rows(records)
    runs = [r for r in extra if r["part"] == -1]
    assert {(r["destination"], r["subscription"]) for r in runs} == {("OUT1", "")}
    got = [DECODER.element_rows(r["topic"], 0, r["offset"], None, r["value"],
                                ("OUT1", ""), r["part"])[0][0] for r in runs]
    assert {g.eye for g in got} == {HEADERS_EYE}
    assert [(g.offset, g.num("first"), g.num("last")) for g in got] == [
        (10, 5, 7), (13, 9, 9), (14, 3, 3), (15, 10, 10)]
    ticks = [r for r in extra if r["part"] == -2]
    assert sorted(r["subscription"] for r in ticks) == ["COLOR", "EMPL"]
    [tick] = DECODER.element_rows("t.out1", 0, 15, None, ticks[0]["value"],
                                  ("OUT1", "COLOR"), -2)[0]
    assert (tick.eye, tick.num("htime"), tick.offset) == (TICK_EYE, 1015, 15)


def test_a_control_command_goes_to_the_key_it_names_and_junk_is_quarantined() -> None:
    import json

    from pipeline.reassembly.rows import CONTROL_EYE

    cmd = json.dumps({"command": "resume", "destination": "OUT1", "subscription": "COLOR",
                      "by": "alice"}).encode()
    [row] = DECODER.rows("t.control", 0, 0, None, cmd)
    assert (row["destination"], row["subscription"], row["error"]) == ("OUT1", "COLOR", None)
    [el] = DECODER.element_rows("t.control", 0, 0, None, cmd, ("OUT1", "COLOR"), row["part"])[0]
    assert (el.eye, el.char("command"), el.char("by")) == (CONTROL_EYE, "resume", "alice")
    [bad] = DECODER.rows("t.control", 0, 1, None, b"{not json")
    assert bad["error"] and "not a command" in bad["error"]


def test_route_batch_gives_the_rows_of_each_record_in_order() -> None:
    """The Arrow path (take per key) lands exactly ``rows()`` of every record: a data
    message, a reply naming another key (two rows), a poison record, an empty batch."""
    import pyarrow as pa

    from pipeline.spark.engine.decode_stage import ARROW_SCHEMA, route_batch

    data = encode_message(None, [make_element("URBT", urbtsnam="COLOR", urbttsnr=1),
                                 make_element("URBE", urbesnam="COLOR", urbetsnr=1)])
    mixed = encode_message(None, [make_element("URBT", urbtsnam="COLOR", urbttsnr=2),
                                  make_element("URBS", urbsst="TRSP", urbsrt="TRAN",
                                               urbssnam="EMPL")])
    records = [("t.out1", 0, 10, b"COLOR", data), ("t.replies", 1, 11, b"EMPL", mixed),
               ("t.out1", 0, 12, b"COLOR", b"not a message at all")]
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(("topic", "partition", "offset", "key", "value"), r, strict=True))
         for r in records],
        schema=pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                          ("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary())]))
    [out] = route_batch(DECODER, batch)  # headers without URBHMSNR/URBHTIME: no run rows
    assert out.schema == ARROW_SCHEMA
    want = [row for r in records for row in DECODER.rows(*r)]
    assert out.to_pylist() == [{n: row[n] for n in ARROW_SCHEMA.names} for row in want]
    assert [r["subscription"] for r in want] == ["COLOR", "COLOR", "EMPL", ""]
    assert want[-1]["error"] and want[-1]["part"] == 0
    assert route_batch(DECODER, batch.slice(0, 0))[0].num_rows == 0


@pytest.mark.parametrize(("ebcdic", "big"), [(True, True), (False, False), (False, True)])
def test_a_status_lands_with_its_message_s_byte_order(ebcdic: bool, big: bool) -> None:
    """URBSDATA (RPLS file lists, URBSU details) is in its message's byte order: the status
    row carries URBHBORD so the lifecycle step never has to guess it."""
    from pipeline.reassembly import ReassemblyConfig, events_to_rows, step

    raw = encode_message(None, [make_element("URBS", urbsst="RPLS", urbssnam="COLOR",
                                             files=[256, 4])], ebcdic=ebcdic, big_endian=big)
    (row,) = DECODER.rows("t.out1", 0, 3, b"COLOR", raw)
    elements, _ = DECODER.element_rows("t.out1", 0, 3, b"COLOR", raw,
                                       (row["destination"], row["subscription"]), row["part"])
    assert [e.big_endian for e in elements] == [big]
    result = step(None, elements, 1_750_000_000_000, ReassemblyConfig(), ("OUT1", "COLOR"))
    (status,) = events_to_rows(result.events, 1_750_000_000_000)["status_events"]
    assert status["big_endian"] is big


def test_a_subs_without_a_destination_name_is_about_the_topic_it_came_on() -> None:
    """Seed 000's SUBS leaves URBSDNAM blank. The copy on an output destination's topic is
    ordered with that destination's data and is about its sequence: it must reach that
    destination's key, not the subscription's first destination (issue 35, point 6)."""
    subs = make_element("URBS", urbsrt="STAT", urbsst="SUBS", urbssnam="EMPL", urbsdnam="",
                        urbstsnr=42)
    raw = encode_message(None, [subs], ebcdic=True, big_endian=True)
    assert {(r["destination"], r["subscription"]) for r in DECODER.rows("t.out1", 0, 1, None,
                                                                        raw)} == {("OUT1", "EMPL")}
    on_replies = DECODER.rows("t.replies", 0, 1, None, raw)
    assert {(r["destination"], r["subscription"]) for r in on_replies} == {("OUT2", "EMPL")}
