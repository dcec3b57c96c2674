"""STCK conversion, status/subcode words, request validation and element building."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.urb import (
    Element,
    datetime_to_stck,
    decode_message,
    encode_message,
    make_element,
    stck_to_datetime,
)
from pipeline.urb import requests as rq
from pipeline.urb.codes import describe_status, describe_subcode

# --- STCK -----------------------------------------------------------------------------------


def test_stck_epoch_and_microsecond_bit() -> None:
    assert stck_to_datetime(0) == datetime(1900, 1, 1, tzinfo=UTC)
    assert stck_to_datetime(1 << 12) == datetime(1900, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    assert stck_to_datetime((1 << 12) - 1) == datetime(1900, 1, 1, tzinfo=UTC)  # sub-µs dropped


def test_stck_leap_seconds() -> None:
    value = 0xBB57F5D2AEE40D22
    assert stck_to_datetime(value, leap_seconds=22) == stck_to_datetime(value) - timedelta(
        seconds=22
    )
    dt = stck_to_datetime(value, leap_seconds=22)
    assert datetime_to_stck(dt, leap_seconds=22) >> 12 == value >> 12


def test_stck_range_errors() -> None:
    with pytest.raises(ValueError):
        stck_to_datetime(-1)
    with pytest.raises(ValueError):
        datetime_to_stck(datetime(1899, 12, 31, tzinfo=UTC))
    assert stck_to_datetime((1 << 64) - 1).year == 2042


def test_naive_datetime_is_utc() -> None:
    assert datetime_to_stck(datetime(2004, 6, 9, 15, 22, 52, 385856)) >> 12 == (
        0xBB57F5D2AEE40D22 >> 12
    )


@given(st.integers(0, (1 << 52) - 1))
def test_stck_round_trip(micros: int) -> None:
    value = micros << 12
    assert datetime_to_stck(stck_to_datetime(value)) == value


# --- codes ----------------------------------------------------------------------------------


def test_other_codes() -> None:
    assert describe_subcode(0, 0) == ""
    assert "unknown subcode 999" in describe_subcode(131, 999)
    assert "ISN not found" in describe_subcode(113, 0)
    assert describe_subcode(17, 4) == "Adabas response 17, subcode 4"
    assert describe_status("CLSD", "CLOS").startswith("Destination closed")
    assert describe_status("INST", "INIT") == "Initial-state processing started"
    assert describe_status("", "REST").startswith("Replicator restarted")
    assert "unknown status" in describe_status("", "ZZZZ")


# --- requests -------------------------------------------------------------------------------


@pytest.mark.parametrize(("ebcdic", "big"), [(True, True), (False, False)])
def test_every_request_round_trips(ebcdic: bool, big: bool) -> None:
    form = {"ebcdic": ebcdic, "big_endian": big}
    cases = [
        (
            rq.tran("SUB1", "DEST1", 77, rnam="REPLY", rtok="T1", **form),
            {
                "urbirt": "TRAN",
                "urbisnam": "SUB1",
                "urbidnam": "DEST1",
                "urbitsnr": 77,
                "urbirnam": "REPLY",
                "urbirtok": "T1",
            },
        ),
        (rq.stat(dnam="DEST1", **form), {"urbirt": "STAT", "urbidnam": "DEST1"}),
        (rq.open_destination("D2", rtok="X", **form), {"urbirt": "OPND", "urbidnam": "D2"}),
        (rq.close_destination("D2", **form), {"urbirt": "CLSD", "urbidnam": "D2"}),
        (
            rq.inst_file("INIT1", 12, 34, isns=[5, (10, 20), 7, (30, 30)], **form),
            {
                "urbirt": "INST",
                "urbiinam": "INIT1",
                "urbidbid": 12,
                "urbifnr": 34,
                "urbilend": 32,
                "urbilen": 128,
            },
        ),
    ]
    for raw, want in cases:
        msg = decode_message(raw)
        assert (msg.ebcdic, msg.big_endian) == (ebcdic, big)
        (urbi,) = msg.elements
        for name, value in want.items():
            assert getattr(urbi, name) == value
    assert decode_message(cases[-1][0]).elements[0].isns == [5, (10, 20), 7, (30, 30)]


def test_isn_list_wire_format() -> None:
    raw = rq.inst_file("I", 1, 2, isns=[3, (4, 9)])
    assert raw[64 + 96 :] == struct.pack(">4I", 3, 0xFFFFFFFF, 4, 9)


@pytest.mark.parametrize(
    ("isns", "rule"),
    [
        ([5, 5], "more than once"),
        ([(1, 10), 5], "within an ISN range"),
        ([(1, 10), (10, 20)], "must not overlap"),
        ([(9, 3)], "starting ISN <= ending ISN"),
        ([0], "valid ISN"),
        ([0xFFFFFFFF], "valid ISN"),
        ([(1, 2, 3)], "(start, end)"),
    ],
)
def test_isn_list_rules(isns: list, rule: str) -> None:
    with pytest.raises(ValueError, match=r"rule|range must") as info:
        rq.inst_file("I", 1, 2, isns=isns)
    assert rule in str(info.value)


def test_isn_range_may_start_and_end_on_one_isn() -> None:
    rq.inst_file("I", 1, 2, isns=[(4, 4), 5])


@pytest.mark.parametrize(
    "call",
    [
        lambda: rq.tran("", "D", 1),
        lambda: rq.tran("S", "D", 0),
        lambda: rq.stat(),
        lambda: rq.open_destination(""),
        lambda: rq.inst_file("", 1, 1),
        lambda: rq.inst_file("I", 0, 1),
        lambda: rq.inst_file("I", 1, 1, isns=[1], selection=b"x"),
        lambda: rq.inst_file("I", 1, 1, acod=819),
        lambda: rq.inst_file("I", 1, 1, isns=[]),
        lambda: rq.tran("TOOLONGNAME", "D", 1),
    ],
)
def test_invalid_requests(call) -> None:
    with pytest.raises(ValueError):
        call()


def test_selection_is_padded_to_a_fullword() -> None:
    raw = rq.inst_file("I", 1, 2, selection="AA,S,AA.", acod=819)
    urbi = decode_message(raw).elements[0]
    assert (urbi.urbilend, urbi.urbilen) == (8, 104)
    raw = rq.inst_file("I", 1, 2, selection=b"12345")
    urbi = decode_message(raw).elements[0]
    assert (urbi.urbilend, urbi.urbilen, urbi.data) == (5, 104, b"12345")


# --- building elements ----------------------------------------------------------------------


def test_make_element_defaults_and_lengths() -> None:
    d = make_element("URBD", urbdtyp="B", payload=b"abc")
    assert (d.urbdeye, d.urbdlen, d.urbdlenh, d.urbdlend, d.urbddsnr) == ("URBD", 36, 32, 3, 0)
    t = make_element("URBT", urbtsnam="S")
    assert t.urbtlen == 128 and t.urbtrsnd == "" and t.urbttsnr == 0
    short = make_element("URBT", urbtlen=112)
    assert "urbtsuid" in short.fields and short.urbtlen == 112
    shorter = make_element("URBT", urbtlen=100)
    assert "urbtsuid" not in shorter.fields and shorter.urbtsuid is None
    with pytest.raises(ValueError, match="cannot hold"):
        make_element("URBT", urbtlen=100, urbtsuid="X")
    with pytest.raises(TypeError):
        make_element("URBR", nosuchfield=1)
    with pytest.raises(ValueError):
        make_element("URBZ")


def test_short_element_round_trip() -> None:
    raw = encode_message(None, [make_element("URBT", urbtlen=112, urbtsnam="S", urbttsnr=9)])
    (t,) = decode_message(raw).elements
    assert t.urbtlen == 112 and t.urbttsnr == 9 and t.urbtsuid == ""
    raw = encode_message(None, [make_element("URBT", urbtlen=40, urbttsnr=9)])
    (t,) = decode_message(raw).elements
    assert t.urbttsnr == 9 and t.urbtdbid is None and "urbtdbid" not in t.fields


def test_element_attribute_errors() -> None:
    el = Element("URBR", 0, {"urbrisn": 1})
    assert el.urbrisn == 1 and el.urbrfnr is None
    with pytest.raises(AttributeError):
        _ = el.payload
    with pytest.raises(AttributeError):
        _ = el.nonsense


def test_encode_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="urbrfnr"):
        encode_message(None, [make_element("URBR", urbrfnr=70000)])
    with pytest.raises(ValueError, match="longer than"):
        encode_message(None, [make_element("URBE", urbesnam="NINECHARS")])
    with pytest.raises(ValueError):
        encode_message(None, [make_element("URBH")])


def test_cp1047_and_other_code_pages() -> None:
    el = make_element("URBE", urbesnam="A[B]")
    for cp in ("cp037", "cp500", "cp273", "cp1140", "cp1047"):
        raw = encode_message(None, [el], codepage=cp)
        assert decode_message(raw, codepage=cp).elements[0].urbesnam == "A[B]"
    # the same bytes read in another page: brackets differ between cp037 and cp1047
    raw = encode_message(None, [el], codepage="cp1047")
    assert decode_message(raw).elements[0].urbesnam != "A[B]"
