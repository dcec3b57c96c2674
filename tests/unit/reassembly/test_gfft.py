"""GFFTs (URBF + URBGs) in the stream: a ``layouts`` row each, quarantine for a bad one, and
no effect on transaction assembly, the sequence or the state."""

from __future__ import annotations

import json
from dataclasses import replace

from pipeline.payload import LayoutKey, layout_from_gfft, parse_format_buffer
from pipeline.payload.gfft import gfft_from_layout, gfft_view
from pipeline.reassembly.events import LayoutReceived, LayoutRejected, TransactionComplete
from pipeline.reassembly.routing import Covered
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.tables import events_to_rows, stck_to_datetime
from pipeline.spark.engine.decode_stage import RecordDecoder
from pipeline.urb import encode_message, make_element
from tests.unit.reassembly.builders import STCK_2004, Elem, Feed, Harness, elements, txn

NOW = 1_700_000_000_000
LAYOUT = parse_format_buffer("AA,8,A,AB,4,P,2,AC,2,B.", {"AA": "name", "AB": "amount"})


def urbf(created: int = STCK_2004, urbgs: list[dict] | None = None, fnr: int = 4) -> Elem:
    """A URBF element row's fields as the decode stage hands them over (``gfft_fields``)."""
    groups = gfft_from_layout(LAYOUT) if urbgs is None else urbgs
    return Elem("URBF", {"urbfdbid": 10006, "urbffnr": fnr, "urbfgfid": "GFB1",
                         "urbftim1": created, "urbffnam": "COLOR-FILE", "urbfcntg": len(groups),
                         "groups": groups}, data=b"URBF-bytes")


def with_element(rows: list[ElementRow], offset: int, index: int, elem: Elem) -> list[ElementRow]:
    """``rows`` with ``elem`` inserted at ``index`` of the message at Kafka ``offset``."""
    msg = [r for r in rows if r.offset == offset]
    head = msg[0]
    new = ElementRow(topic=head.topic, partition=head.partition, offset=offset,
                     elem_index=index, urbhmsnr=head.urbhmsnr, urbhtime=head.urbhtime,
                     eye=elem.eye, fields=elem.fields, data=elem.data)
    shifted = [r._replace(elem_index=r.elem_index + 1) if r.offset == offset
               and r.elem_index >= index else r for r in rows]
    return [*shifted, new]


def test_gfft_message_is_a_layouts_row_and_no_state() -> None:
    h = Harness(now_ms=NOW)
    events = h.feed(Feed().message([urbf()]))
    assert [type(e) for e in events] == [LayoutReceived]
    assert h.state is None  # nothing kept: a GFFT never grows the key's state
    lay = events[0].layout
    assert lay.key == LayoutKey(10006, 4, "GFB1", STCK_2004)
    assert [i.column for i in lay.items] == ["name", "amount", "ac"]  # long names, snake case
    row = events_to_rows(events, NOW)["layouts"][0]
    assert (row["dbid"], row["fnr"], row["gfid"], row["created_stck"]) == (
        10006, 4, "GFB1", str(STCK_2004))
    assert row["created"] == stck_to_datetime(STCK_2004)
    assert row["field_count"] == 3 and row["file_name"] == "COLOR-FILE"
    assert row["raw"] == b"URBF-bytes"
    assert row["ddl"] == "`name` string, `amount` decimal(7,2), `ac` int"
    assert json.loads(row["layout_json"]) == lay.to_dict()
    # the typed stage rebuilds the layout from gfft_json with the conf's columns
    again = layout_from_gfft(gfft_view(json.loads(row["gfft_json"])), {"AC": "code"})
    assert [i.column for i in again.items] == ["name", "amount", "code"]


def _run(rows: list[ElementRow]) -> tuple[list, bytes | None]:
    h = Harness(now_ms=NOW)
    h.feed(rows)
    return h.events, h.state_bytes


def test_gfft_inside_transactions_changes_nothing_else() -> None:
    """The same stream with GFFTs inside a transaction, in a continuation message, and ahead
    of a URBC: the same transactions, the same state, plus one layout event per GFFT."""
    feed = Feed()
    plain = feed.send(txn(1, 2), txn(2, 2), cuts=[3, 9])  # 3 messages, two continuations
    gfft_rows = with_element(plain, 0, 2, urbf())  # between URBR and its URBD
    gfft_rows = with_element(gfft_rows, 1, 0, urbf(STCK_2004 + 1))  # before the URBC
    gfft_rows = with_element(gfft_rows, 2, 3, urbf(STCK_2004 + 2))  # inside a continuation
    base_events, base_state = _run(plain)
    events, state = _run(gfft_rows)
    assert [e for e in events if not isinstance(e, LayoutReceived)] == base_events
    assert [e.tsnr for e in events if isinstance(e, TransactionComplete)] == [1, 2]
    assert state == base_state
    assert [e.layout.key.created - STCK_2004 for e in events
            if isinstance(e, LayoutReceived)] == [0, 1, 2]


def test_redelivered_gfft_is_the_same_key_again() -> None:
    h = Harness(now_ms=NOW)
    feed = Feed()
    msg = [urbf(), *elements(txn(1))]
    first = feed.message(msg)
    again = [r._replace(offset=r.offset + 1) for r in first]  # the producer sent it twice
    h.feed(first + again)
    keys = {e.layout.key for e in h.of(LayoutReceived)}
    assert len(h.of(LayoutReceived)) == 2 and len(keys) == 1
    assert h.landed() == [1]  # the transaction once; its repeat is a duplicate


def test_bad_gfft_is_quarantined_and_the_stream_goes_on() -> None:
    h = Harness(now_ms=NOW)
    feed = Feed()
    bad = urbf(urbgs=[{"urbgidx": 1, "urbgfid": "AA", "urbgffmt": 0x07, "urbgflen": 1}])
    short = urbf(urbgs=[{"urbgidx": 1, "urbgfid": "AB"}])  # a URBG cut short: no format
    h.feed(feed.message([bad, *elements(txn(1))]) + feed.message([short])
           + feed.message([urbf(urbgs=[])]) + feed.send(txn(2)))
    assert h.landed() == [1, 2] and not h.of(LayoutReceived)
    rejected = h.of(LayoutRejected)
    assert len(rejected) == 3
    rows = events_to_rows(h.events, NOW)["quarantine"]
    assert [r["source"] for r in rows] == ["gfft"] * 3
    assert "GFFT 10006/4 GFB1 rejected: URBGFFMT X'07' is not a known format" in rows[0]["reason"]
    assert "describes no fields" in rows[2]["reason"]
    assert rows[0]["eye"] == "URBF" and rows[0]["raw"] == b"URBF-bytes"
    assert json.loads(rows[0]["fields_json"])["urbfgfid"] == "GFB1"


def test_decode_stage_hands_over_the_urbgs_and_the_bytes() -> None:
    """A real message (URBH + URBF + URBGs, EBCDIC) through the decode stage's element rows."""
    el = make_element("URBF", urbfdbid=10006, urbffnr=4, urbfgfid="GFB1", urbftim1=STCK_2004,
                      groups=gfft_from_layout(LAYOUT))
    value = encode_message(make_element("URBH"), [el], ebcdic=True, big_endian=True)
    decoder = RecordDecoder({"t": "OUT1"}, "OUT1", "cp037",
                            covered={"OUT1": [Covered("COLOR", frozenset({(10006, 4)}))]})
    [rec] = decoder.rows("t", 0, 7, None, value)  # routed by its file, not a Kafka key
    rows, warnings = decoder.element_rows("t", 0, 7, None, value, ("OUT1", "COLOR"), 0)
    assert rec["subscription"] == "COLOR" and not warnings
    h = Harness(now_ms=NOW)
    [event] = h.feed(rows)
    assert isinstance(event, LayoutReceived)
    assert event.layout.items == (*LAYOUT.items[:2], replace(LAYOUT.items[2], column="ac"))
    # the URBF's own bytes (the message's last element), URBGs included
    assert event.data is not None and event.data.startswith("URBF".encode("cp037"))
    assert event.data == value[-len(event.data):] and len(event.data) == 112 + 3 * 64
