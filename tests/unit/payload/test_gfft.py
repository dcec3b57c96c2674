"""Layouts from GFFTs built with the URB codec, and the layout registry."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.payload import (
    FieldSpec,
    GroupSpec,
    LayoutError,
    LayoutKey,
    LayoutRegistry,
    RecordLayout,
    decode_payload,
    encode_payload,
    layout_from_gfft,
    parse_format_buffer,
)
from pipeline.payload.gfft import gfft_fields, gfft_from_layout, gfft_view, layout_columns
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


# ------------------------------------------------------------------ GFFT from a layout
_SHORT = st.sampled_from([a + b for a in "ABDEFHIJKLMNO" for b in "ABDEFGHIJKLMNO"])
_FIELD_FORMATS = st.sampled_from([("A", 8), ("A", 1), ("W", 6), ("B", 2), ("B", 9), ("F", 4),
                                  ("P", 4), ("P", 15), ("U", 5), ("G", 8),
                                  ("A", 0), ("W", 0), ("B", 0), ("P", 0), ("U", 0)])


@st.composite
def gfft_layouts(draw: st.DrawFn) -> RecordLayout:
    """Layouts a GFFT can express: fields, MU fields (fixed or counted), PE groups."""
    names = draw(st.lists(_SHORT, min_size=1, max_size=6, unique=True))
    items: list = []
    for n, name in enumerate(names):
        fmt, length = draw(_FIELD_FORMATS)
        scale = draw(st.integers(0, 2)) if fmt in "PU" else 0
        kind = draw(st.sampled_from(["one", "mu", "counted", "pe"]))
        column = name.lower() + "_col"
        if kind == "one":
            items.append(FieldSpec(name, column, fmt, length, scale))
        elif kind == "mu":
            items.append(FieldSpec(name, column, fmt, length, scale,
                                   occurrences=draw(st.integers(1, 4))))
        elif kind == "counted":
            items += [FieldSpec(f"{name}C", f"{column}_count", "B", 1),
                      FieldSpec(name, column, fmt, length, scale, count_field=f"{name}C")]
        else:
            member = FieldSpec(name, "member", fmt, length, scale)  # short names: letters
            items.append(GroupSpec(f"Q{n}", f"g_{n}", (member,),
                                   occurrences=draw(st.integers(1, 3))))
    return RecordLayout(tuple(items))


@given(layout=gfft_layouts(), ebcdic=st.booleans())
@settings(max_examples=150, deadline=None)
def test_gfft_round_trip(layout: RecordLayout, ebcdic: bool) -> None:
    """layout → URBGs → wire bytes → decoded URBF → layout: the same items, keyed by the URBF."""
    groups = gfft_from_layout(layout)
    urbf = make_element("URBF", urbfdbid=10006, urbffnr=9, urbfgfid="GFB", urbftim1=77,
                        groups=groups)
    data = encode_message(make_element("URBH"), [urbf], ebcdic=ebcdic, big_endian=ebcdic)
    decoded = decode_message(data).elements[0]
    again = layout_from_gfft(decoded, layout_columns(layout))
    assert again.items == layout.items
    assert again.key == LayoutKey(10006, 9, "GFB", 77)
    # what crosses Spark (gfft_fields as JSON) builds the same layout
    view = gfft_view(json.loads(json.dumps(gfft_fields(decoded))))
    assert layout_from_gfft(view, layout_columns(layout)) == again


def test_gfft_variable_length_field_and_la_refused() -> None:
    """URBGFLEN 0 is a variable-length field with a 1-byte length; an LA field's 2-byte
    length has no GFFT form, so the simulator cannot send one it would misread."""
    urbg = {"urbgfid": "AZ", "urbgffmt": 0x03, "urbgflen": 0, "urbgfprc": 2}
    lay = layout_from_gfft(_urbf(True, urbgs=[urbg]))
    assert lay.items == (FieldSpec("AZ", "az", "P", 0, 2),)
    assert decode_payload(bytes.fromhex("0412345d"), lay) == {"az": Decimal("-123.45")}
    with pytest.raises(LayoutError, match="2-byte length prefix has no GFFT form"):
        gfft_from_layout(parse_format_buffer("AZ,0,A", fdt={"AZ": "LA"}))


def test_gfft_from_layout_names_and_refuses_fillers() -> None:
    lay = parse_format_buffer("AA,8,A,AZC,1,B,AZ1-N,3,A.", {"AA": "personnel_id", "AZ": "lang"})
    urbgs = gfft_from_layout(lay)
    assert [(g["urbgfid"], g["urbgfnam"], g.get("urbgtype", 0)) for g in urbgs] == [
        ("AA", "PERSONNEL-ID", 0), ("AZ", "LANG-COUNT", 4), ("AZ", "LANG", 2)]
    # without conf columns the long names give the same columns back
    urbf = make_element("URBF", urbfdbid=1, urbffnr=2, urbftim1=3, groups=urbgs)
    assert layout_from_gfft(urbf).items == lay.items
    with pytest.raises(LayoutError, match="no GFFT form"):
        gfft_from_layout(parse_format_buffer("AA,8,A,5X."))


def test_registry_resolves_by_commit_time() -> None:
    """The version that applies to a transaction is the newest created at or before its
    commit time; before the first version the conf layout applies."""
    conf = parse_format_buffer("AA,8,A")
    reg = LayoutRegistry().with_conf(10006, 9, conf)
    for created, gfid in ((3000, "V3"), (1000, "V1"), (2000, "V2")):
        reg = reg.with_gfft(_urbf(True, created, gfid=gfid))
    at = {t: reg.resolve(10006, 9, at=t) for t in (999, 1000, 1999, 2000, 2500, 9999)}
    assert at[999] is conf
    assert [at[t].key.gfid for t in (1000, 1999, 2000, 2500, 9999)] == [  # type: ignore[union-attr]
        "V1", "V1", "V2", "V2", "V3"]
