"""The decode stage's routing (a scan) and the state stage's full decode agree on the keys.

Every element of a message must reach exactly one (destination, subscription) key: the decode
stage emits one row per key it finds by scanning, the state function decodes the message in
full and keeps the elements of its key. An element whose key the two worked out differently
would be lost without a trace, so: for any mix of data and status elements, the rows' keys
take every element exactly once, and none takes nothing.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.spark.decode_stage import RecordDecoder
from pipeline.urb import decode_message, encode_message, make_element

DECODER = RecordDecoder({"t.out1": "OUT1", "t.replies": "REPLY"}, "OUT1", "cp037",
                        home_destinations={"COLOR": "OUT1", "EMPL": "OUT2"},
                        initial_states={"ICOLOR": "COLOR"})

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
    taken: list[int] = []
    for row in rows:
        elements, _warnings = DECODER.element_rows(
            topic, 0, 7, b"KAFKAKEY", raw, (row["destination"], row["subscription"]),
            row["part"])
        assert elements, f"key {row['destination']}/{row['subscription']} takes nothing"
        taken += [e.elem_index for e in elements]
    assert sorted(taken) == list(range(len(decode_message(raw).elements)))


def test_route_batch_gives_the_rows_of_each_record_in_order() -> None:
    """The Arrow path (take per key) lands exactly ``rows()`` of every record: a data
    message, a reply naming another key (two rows), a poison record, an empty batch."""
    import pyarrow as pa

    from pipeline.spark.decode_stage import ARROW_SCHEMA, route_batch

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
    out = route_batch(DECODER, batch)
    assert out.schema == ARROW_SCHEMA
    want = [row for r in records for row in DECODER.rows(*r)]
    assert out.to_pylist() == [{n: row[n] for n in ARROW_SCHEMA.names} for row in want]
    assert [r["subscription"] for r in want] == ["COLOR", "COLOR", "EMPL", "COLOR"]
    assert want[-1]["error"] and want[-1]["part"] == 0
    assert route_batch(DECODER, batch.slice(0, 0)).num_rows == 0


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
