"""Layouts from GFFTs built with the URB codec, and the layout registry."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from pipeline.payload import (
    FieldSpec,
    GroupSpec,
    LayoutError,
    LayoutKey,
    LayoutRegistry,
    decode_payload,
    encode_payload,
    layout_from_gfft,
    parse_format_buffer,
)
from pipeline.urb import Element, decode_message, encode_message, make_element

URBGS = [
    {"urbgidx": 1, "urbgfid": "AA", "urbgffmt": 0x01, "urbgflen": 8, "urbgfnam": "PERSONNEL-ID"},
    {"urbgidx": 2, "urbgfid": "AH", "urbgffmt": 0x13, "urbgflen": 4, "urbgfprc": 2},
    {"urbgidx": 3, "urbgfid": "AI", "urbgffmt": 0x82, "urbgflen": 2, "urbgfnam": "DELTA"},
    {"urbgidx": 4, "urbgfid": "AW", "urbgffmt": 0x41, "urbgflen": 6},
    {"urbgidx": 5, "urbgfid": "AG", "urbgffmt": 0x06, "urbgflen": 8},
    {"urbgidx": 6, "urbgfid": "XX", "urbgffmt": 0x01, "urbgflen": 9, "urbgflag": 0x01},
    {"urbgidx": 7, "urbgfid": "AZ", "urbgffmt": 0x02, "urbgtype": 0x04, "urbgflen": 1},
    {
        "urbgidx": 8,
        "urbgfid": "AZ",
        "urbgffmt": 0x01,
        "urbgtype": 0x02,
        "urbgflen": 3,
        "urbgflag": 0x10,
        "urbgfnam": "LANG",
    },
    {
        "urbgidx": 9,
        "urbgfid": "AY",
        "urbgffmt": 0x04,
        "urbgtype": 0x02,
        "urbgflen": 2,
        "urbgfrfm": 1,
        "urbgfrno": 2,
    },
    {"urbgidx": 10, "urbgfid": "AQ", "urbgffmt": 0x00, "urbgtype": 0x01},
    {
        "urbgidx": 11,
        "urbgfid": "AR",
        "urbgffmt": 0x01,
        "urbgtype": 0x01,
        "urbgflen": 3,
        "urbgfrfm": 1,
        "urbgfrno": 2,
        "urbgfgrp": "AQ",
        "urbgfnam": "CURR-CODE",
    },
    {
        "urbgidx": 12,
        "urbgfid": "AS",
        "urbgffmt": 0x03,
        "urbgtype": 0x01,
        "urbgflen": 5,
        "urbgfprc": 2,
        "urbgfrfm": 1,
        "urbgfrno": 2,
        "urbgfgrp": "AQ",
        "urbgfnam": "SALARY",
    },
    {
        "urbgidx": 13,
        "urbgfid": "AT",
        "urbgffmt": 0x02,
        "urbgtype": 0x01,
        "urbgflen": 1,
        "urbgfrfm": 1,
        "urbgfrno": 2,
        "urbgfgrp": "AQ",
        "urbgflag": 0x02,
    },
]


def _urbf(ebcdic: bool, created: int = 1000, gfid: str = "EMPLTEL", urbgs=URBGS) -> Element:
    """A URBF element as the URB decoder returns it from a real message."""
    urbf = make_element(
        "URBF", urbfdbid=10006, urbffnr=9, urbfgfid=gfid, urbftim1=created, groups=urbgs
    )
    data = encode_message(make_element("URBH"), [urbf], ebcdic=ebcdic, big_endian=ebcdic)
    return decode_message(data).elements[0]


@pytest.mark.parametrize("ebcdic", [True, False], ids=["ebcdic", "ascii"])
def test_layout_from_gfft(ebcdic: bool) -> None:
    lay = layout_from_gfft(_urbf(ebcdic), {"AH": "birth"})
    assert lay.key == LayoutKey(10006, 9, "EMPLTEL", 1000)
    assert lay.source == "gfft"
    assert lay.items == (
        FieldSpec("AA", "personnel_id", "A", 8),
        FieldSpec("AH", "birth", "P", 4, 2),  # packed date: P with URBGFPRC decimals
        FieldSpec("AI", "delta", "F", 2),  # signed binary
        FieldSpec("AW", "aw", "W", 6),
        FieldSpec("AG", "ag", "G", 8),
        FieldSpec("AZC", "lang_count", "B", 1),
        FieldSpec("AZ", "lang", "A", 3, count_field="AZC"),
        FieldSpec("AY", "ay", "U", 2, occurrences=2),
        GroupSpec(
            "AQ",
            "aq",
            (FieldSpec("AR", "curr_code", "A", 3), FieldSpec("AS", "salary", "P", 5, 2)),
            occurrences=2,
        ),
        FieldSpec("AT", "at", "B", 1, occurrences=2),  # range flag: its own list
    )


def test_gfft_layout_decodes_an_image() -> None:
    lay = layout_from_gfft(_urbf(True))
    values = {
        "personnel_id": "50005800",
        "ah": Decimal("19.70"),
        "delta": -3,
        "aw": "ÄÖÜ",
        "ag": 2.5,
        "lang": ["ENG", "GER"],
        "ay": [Decimal(1), Decimal(-2)],
        "aq": [
            {"curr_code": "EUR", "salary": Decimal("100.25")},
            {"curr_code": "USD", "salary": Decimal("-0.01")},
        ],
        "at": [7, 8],
    }
    image = encode_payload(values, lay, wcode=4091)
    assert decode_payload(image, lay, wcode=4091) == {**values, "lang_count": 2}


@pytest.mark.parametrize(
    ("urbg", "match"),
    [
        ({"urbgfid": "AA", "urbgffmt": 0x07, "urbgflen": 1}, "not a known format"),
        ({"urbgfid": "AA", "urbgffmt": 0x01, "urbgflen": 1, "urbgfono": 2}, "MU inside PE"),
        (
            {
                "urbgfid": "AA",
                "urbgffmt": 0x01,
                "urbgtype": 2,
                "urbgflen": 1,
                "urbgfrfm": 3,
                "urbgfrno": 2,
            },
            "occurrences 3-2",
        ),
    ],
)
def test_bad_gffts(urbg: dict, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        layout_from_gfft(_urbf(True, urbgs=[urbg]))
    with pytest.raises(LayoutError, match="no fields"):
        layout_from_gfft(_urbf(True, urbgs=[]))
    with pytest.raises(LayoutError, match="URBF"):
        layout_from_gfft(make_element("URBE"))


def test_registry_versions_and_fallback() -> None:
    conf = parse_format_buffer("AA,8,A")
    reg = LayoutRegistry().with_conf(10006, 9, conf)
    assert reg.resolve(10006, 9) is conf
    assert reg.resolve(10006, 10) is None
    old, new = _urbf(True, 1000), _urbf(True, 2000, gfid="EMPLNEW")
    reg2 = reg.with_gfft(new).with_gfft(old)  # accepted in any order
    assert reg.resolve(10006, 9) is conf  # the old value is unchanged
    assert reg2.resolve(10006, 9).key.created == 2000  # type: ignore[union-attr]
    assert reg2.resolve(10006, 9, at=1500).key.created == 1000  # type: ignore[union-attr]
    assert reg2.resolve(10006, 9, gfid="EMPLTEL").key.gfid == "EMPLTEL"  # type: ignore[union-attr]
    assert reg2.resolve(10006, 9, at=10) is conf  # no GFFT yet at that time
    assert len(reg2.with_gfft(old).versions[(10006, 9)]) == 2  # same key replaces
    again = LayoutRegistry.from_dict(json.loads(json.dumps(reg2.to_dict())))
    assert again.to_dict() == reg2.to_dict()
    assert again.resolve(10006, 9) == reg2.resolve(10006, 9)
    with pytest.raises(ValueError, match="needs a key"):
        reg.with_layout(conf)
