"""Hypothesis round trips: encode -> decode gives the values back, for every format and form."""

from __future__ import annotations

import math
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.payload import (
    PayloadError,
    decode_payload,
    encode_payload,
    float_to_ibm,
    ibm_to_float,
    parse_format_buffer,
    payload_form,
)

FORMS = st.sampled_from(
    [
        {"ebcdic": True, "arc": 0, "codepage": "cp037"},
        {"ebcdic": True, "arc": 2, "codepage": "cp1047"},
        {"ebcdic": True, "acode": 273},
        {"ebcdic": False, "arc": 9, "acode": 819},
        {"ebcdic": False, "arc": 8, "acode": 1208},  # ASCII big-endian IEEE, UTF-8 text
        {"ebcdic": False, "arc": 0, "big_endian": False},
    ]
)
WCODES = st.sampled_from([4091, 1202, 1208, 1232])


def _text(length: int) -> st.SearchStrategy[str]:
    """Text every tested code page can hold (cp273 lacks some Latin-1 characters)."""
    letters = st.characters(codec="ascii", min_codepoint=32) | st.sampled_from("ÄÖÜäöüßé")
    return st.text(letters, max_size=length // 2).map(lambda s: s.rstrip(" "))


@st.composite
def decimals(draw: st.DrawFn, digits: int, scale: int) -> Decimal:
    unscaled = draw(st.integers(-(10**digits) + 1, 10**digits - 1))
    digits_ = tuple(int(d) for d in str(abs(unscaled)))
    return Decimal((int(unscaled < 0), digits_, -scale))  # exact: 29 digits exceed the context


@settings(max_examples=300)
@given(form=FORMS, length=st.integers(1, 15), data=st.data())
def test_packed_and_zoned(form: dict, length: int, data: st.DataObject) -> None:
    p_scale = data.draw(st.integers(0, 2 * length - 1))
    u_scale = data.draw(st.integers(0, length))
    lay = parse_format_buffer(f"AP,{length},P,{p_scale},AU,{length},U,{u_scale}")
    values = {
        "ap": data.draw(decimals(2 * length - 1, p_scale)),
        "au": data.draw(decimals(length, u_scale)),
    }
    image = encode_payload(values, lay, **form)
    assert decode_payload(image, lay, **form) == values


@settings(max_examples=300)
@given(form=FORMS, data=st.data())
def test_binary_fixed_alpha(form: dict, data: st.DataObject) -> None:
    b_len = data.draw(st.sampled_from([1, 2, 3, 4, 8]))
    f_len = data.draw(st.sampled_from([1, 2, 4, 8]))
    a_len = data.draw(st.integers(1, 40))
    lay = parse_format_buffer(f"AB,{b_len},B,AF,{f_len},F,AA,{a_len},A,AX,12,B")
    half = 1 << (8 * f_len - 1)
    values = {
        "ab": data.draw(st.integers(0, (1 << (8 * b_len)) - 1)),
        "af": data.draw(st.integers(-half, half - 1)),
        "aa": data.draw(_text(a_len)),
        "ax": data.draw(st.binary(min_size=12, max_size=12)),
    }
    image = encode_payload(values, lay, **form)
    assert decode_payload(image, lay, **form) == values


@settings(max_examples=200)
@given(wcode=WCODES, text=st.text(st.characters(exclude_categories=("Cs",)), max_size=5))
def test_wide(wcode: int, text: str) -> None:
    lay = parse_format_buffer("AW,40,W")
    text = text.rstrip(" ")
    assert decode_payload(encode_payload({"aw": text}, lay, wcode=wcode), lay, wcode=wcode) == {
        "aw": text
    }


@settings(max_examples=300)
@given(form=FORMS, value=st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_float_short(form: dict, value: float) -> None:
    lay = parse_format_buffer("AG,4,G")
    try:
        image = encode_payload({"ag": value}, lay, **form)
    except PayloadError:
        assert form.get("arc") in (0, 2) and abs(value) > 7e75  # beyond IBM's range
        return
    decoded = decode_payload(image, lay, **form)["ag"]
    assert math.isclose(decoded, value, rel_tol=2**-20, abs_tol=1e-78)  # IBM short: 21+ bits


@settings(max_examples=300)
@given(form=FORMS, value=st.floats(-1e75, 1e75, allow_nan=False))
def test_float_long_is_exact(form: dict, value: float) -> None:
    lay = parse_format_buffer("AG,8,G")
    decoded = decode_payload(encode_payload({"ag": value}, lay, **form), lay, **form)["ag"]
    assert decoded == value or abs(value) < 1e-77  # IBM long underflows below 16**-65


@settings(max_examples=500)
@given(word=st.integers(0, 2**32 - 1))
def test_ibm_short_bytes_round_trip_when_normalised(word: int) -> None:
    data = word.to_bytes(4, "big")
    if word & 0x00F00000 == 0:  # unnormalised or zero: many byte forms per value
        return
    assert float_to_ibm(ibm_to_float(data), 4) == data
    assert float_to_ibm(ibm_to_float(data), 8)[:4] == data  # short is a prefix of long


@settings(max_examples=150)
@given(form=FORMS, data=st.data())
def test_mu_and_pe_lists(form: dict, data: st.DataObject) -> None:
    lay = parse_format_buffer(
        "ABC,1,B,AB1-N,3,P,1,AC1-3,2,U,GAC,2,F,GA1-N", groups={"GA": "AR,4,A,AS,2,B"}
    )
    values = {
        "ab": data.draw(st.lists(decimals(5, 1), max_size=6)),
        "ac": data.draw(st.lists(decimals(2, 0), min_size=3, max_size=3)),
        "ga": data.draw(
            st.lists(
                st.fixed_dictionaries({"ar": _text(4), "as": st.integers(0, 65535)}), max_size=4
            )
        ),
    }
    decoded = decode_payload(encode_payload(values, lay, **form), lay, **form)
    assert decoded == {**values, "ab_count": len(values["ab"]), "ga_count": len(values["ga"])}


@settings(max_examples=300)
@given(form=FORMS, wcode=WCODES, prefix=st.sampled_from(["", "LA", "LB"]), data=st.data())
def test_variable_length_values(form: dict, wcode: int, prefix: str, data: st.DataObject) -> None:
    """Variable-length values (``AA,0,A``) of every format that has them, with 1-, 2- and
    4-byte length prefixes, in MU and PE occurrences too: they come back, and each prefix
    counts itself."""
    p_scale, u_scale = data.draw(st.integers(0, 29)), data.draw(st.integers(0, 29))
    fdt = {"AA": f"0,A,{prefix}"} if prefix else {}
    lay = parse_format_buffer(
        f"AA,0,A,AW,0,W,AB,0,B,AP,0,P,{p_scale},AU,0,U,{u_scale},AMC,1,B,AM1-N,0,A,GA1-2",
        fdt=fdt,
        groups={"GA": "AR,0,P,AS,1,B"},
    )
    wide = st.text(st.characters(exclude_categories=("Cs",)), max_size=5).map(
        lambda s: s.rstrip(" ")  # text comes back without trailing blanks, as fixed fields
    )
    values = {
        "aa": data.draw(_text(60)),
        "aw": data.draw(wide),
        "ab": data.draw(st.binary(max_size=20)),
        "ap": data.draw(decimals(29, p_scale)),
        "au": data.draw(decimals(29, u_scale)),
        "am": data.draw(st.lists(_text(10), max_size=4)),
        "ga": data.draw(
            st.lists(
                st.fixed_dictionaries({"ar": decimals(5, 0), "as": st.integers(0, 255)}),
                min_size=2,
                max_size=2,
            )
        ),
    }
    image = encode_payload(values, lay, wcode=wcode, **form)
    decoded = decode_payload(image, lay, wcode=wcode, **form)
    assert decoded == {**values, "am_count": len(values["am"])}
    width = {"": 1, "LA": 2, "LB": 4}[prefix]
    order = "big" if payload_form(**form).big_endian else "little"
    assert int.from_bytes(image[:width], order) == width + len(
        values["aa"].encode(payload_form(**form).text)
    )


FUZZ_LAYOUTS = [
    parse_format_buffer("AA,0,A,AB,0,P,2,AMC,1,B,AM1-N,0,U,AX,0,B,AZ,0,W", fdt={"AZ": "LA"}),
    parse_format_buffer("AA,8,A,AC,4,P,2,AD,4,B,AE,5,U,AF,4,G,AW,4,W,GAC,1,B,GA1-N",
                        groups={"GA": "AR,0,A,AS,2,F"}),
]


@settings(max_examples=1000)
@given(layout=st.sampled_from(FUZZ_LAYOUTS), form=FORMS, wcode=WCODES,
       image=st.binary(max_size=80))
def test_any_bytes_decode_or_raise_payload_error(layout, form: dict, wcode: int,
                                                 image: bytes) -> None:
    """Fuzz: arbitrary bytes against a layout give values or a PayloadError naming a field
    inside the image, never another exception (the job quarantines on PayloadError only)."""
    try:
        decode_payload(image, layout, wcode=wcode, **form)
    except PayloadError as err:
        assert 0 <= err.offset <= len(image) and err.reason
