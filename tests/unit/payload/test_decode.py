"""Typed decoding from known bytes in both forms, the seed images, empties and bad payloads."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from pipeline.payload import (
    PayloadError,
    decode_payload,
    encode_payload,
    float_to_ibm,
    ibm_to_float,
    parse_format_buffer,
    payload_form,
)
from pipeline.urb import decode_message

SEEDS = Path(__file__).parents[1] / "urb" / "fixtures"
EBCDIC = {"ebcdic": True, "arc": 0, "acode": 37}
ASCII = {"ebcdic": False, "arc": 9, "acode": 819}
LAYOUT = parse_format_buffer(
    "AA,8,A,AC,4,P,2,AD,4,B,AE,5,U,AF,4,G,AG,8,G,AH,2,F", {"AA": "name", "AC": "salary"}
)


def _images() -> list[tuple[dict, bytes]]:
    """The same record in both forms, written out by hand."""
    ebcdic = (
        "c2d6c24040404040"  # AA 'BOB' in cp037
        "0012345d"  # AC packed -123.45
        "00000102"  # AD 258 big-endian
        "f0f0f0f4d2"  # AE zoned -42: last zone D
        "c276a000"  # AF IBM short -118.625
        "4110000000000000"  # AG IBM long 1.0
        "fffe"  # AH -2
    )
    ascii_ = (
        "424f422020202020"  # AA in Latin-1
        "0012345d"  # packed is the same in every form
        "02010000"  # AD 258 little-endian
        "3030303472"  # AE zoned -42: last zone 7
        "0040edc2"  # AF IEEE single -118.625, low-order first
        "000000000000f03f"  # AG IEEE double 1.0, low-order first
        "feff"  # AH -2
    )
    return [(EBCDIC, bytes.fromhex(ebcdic)), (ASCII, bytes.fromhex(ascii_))]


EXPECTED = {
    "name": "BOB",
    "salary": Decimal("-123.45"),
    "ad": 258,
    "ae": Decimal(-42),
    "af": -118.625,
    "ag": 1.0,
    "ah": -2,
}


@pytest.mark.parametrize(("form", "image"), _images(), ids=["ebcdic", "ascii"])
def test_known_image_both_forms(form: dict, image: bytes) -> None:
    assert decode_payload(image, LAYOUT, **form) == EXPECTED
    assert encode_payload(EXPECTED, LAYOUT, **form) == image


@pytest.mark.parametrize(
    ("hexed", "value"),
    [("41100000", 1.0), ("c276a000", -118.625), ("40280000", 0.15625), ("00000000", 0.0)],
)
def test_ibm_float_vectors(hexed: str, value: float) -> None:
    assert ibm_to_float(bytes.fromhex(hexed)) == value
    assert float_to_ibm(value, 4).hex() == hexed
    assert ibm_to_float(float_to_ibm(value, 8)) == value


def test_ibm_float_limits() -> None:
    assert float_to_ibm(1e-90, 8) == bytes(8)  # underflow to zero
    for bad in (1e80, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            float_to_ibm(bad, 8)
    # rounding that carries into a new hex digit renormalises
    assert float_to_ibm(0.99999999999, 4).hex() == "41100000"


def test_architecture_from_arc() -> None:
    mainframe = payload_form(ebcdic=True, arc=2)
    intel = payload_form(ebcdic=False, arc=9, acode=819)
    unset_ascii = payload_form(ebcdic=False, arc=0)
    assert (mainframe.big_endian, mainframe.floats, mainframe.zone) == (True, "ibm", 0xF0)
    assert (intel.big_endian, intel.floats, intel.zone, intel.text) == (
        False,
        "ieee",
        0x30,
        "iso8859-1",
    )
    assert (unset_ascii.big_endian, unset_ascii.floats) == (False, "ieee")
    assert payload_form(ebcdic=False, arc=0, big_endian=True).big_endian is True
    assert payload_form(ebcdic=False, arc=8).big_endian is True  # ASCII, high-order first, IEEE
    with pytest.raises(PayloadError, match="vax"):
        payload_form(arc=4)


def test_code_pages_from_acode() -> None:
    lay = parse_format_buffer("AA,6,A")
    assert decode_payload("Grün".encode("cp1047").ljust(6, b"\x40"), lay, codepage="cp1047") == {
        "aa": "Grün"
    }
    assert decode_payload("Grün".encode("cp500") + b"\x40\x40", lay, acode=500) == {"aa": "Grün"}
    utf8 = "Grün".encode() + b" "
    assert decode_payload(utf8, lay, ebcdic=False, acode=1208) == {"aa": "Grün"}
    with pytest.raises(PayloadError, match="unknown ACODE 9999"):
        decode_payload(utf8, lay, acode=9999)
    with pytest.raises(PayloadError, match="AA at offset 0"):
        decode_payload(b"Gr\xc3\xc3 ", lay, ebcdic=False, acode=1208)


def test_wide_fields_per_wcode() -> None:
    lay = parse_format_buffer("AW,8,W")
    assert decode_payload(
        "日本".encode("utf-16-be") + " ".encode("utf-16-be") * 2, lay, wcode=4091
    ) == {"aw": "日本"}
    assert decode_payload("ab".encode("utf-16-le") + b" \x00 \x00", lay, wcode=1202) == {"aw": "ab"}
    assert encode_payload({"aw": "é"}, lay, wcode=1208) == "é".encode() + b"      "
    with pytest.raises(PayloadError, match="WCODE 77"):
        decode_payload(bytes(8), lay, wcode=77)
    with pytest.raises(PayloadError, match="AW"):
        decode_payload(b"\xd8\x00" + bytes(6), lay, wcode=4091)  # lone surrogate


def test_packed_signs_and_scale() -> None:
    lay = parse_format_buffer("AC,3,P,2")
    for sign, negative in [
        ("c", False),
        ("f", False),
        ("a", False),
        ("e", False),
        ("d", True),
        ("b", True),
    ]:
        value = decode_payload(bytes.fromhex("12345" + sign), lay)["ac"]
        assert value == (Decimal("-123.45") if negative else Decimal("123.45"))
    assert decode_payload(bytes(3), lay)["ac"] == 0  # binary zeros: empty packed


def test_zoned_signs() -> None:
    lay = parse_format_buffer("AU,3,U,1")
    assert decode_payload(bytes.fromhex("f1f2c3"), lay)["au"] == Decimal("12.3")
    assert decode_payload(bytes.fromhex("f1f2b3"), lay)["au"] == Decimal("-12.3")
    assert decode_payload(b"12s", lay, ebcdic=False, arc=9)["au"] == Decimal("-12.3")
    assert encode_payload({"au": Decimal("-0.5")}, lay, ebcdic=False) == b"00u"


def test_binary_is_unsigned_fixed_is_signed_and_long_binary_is_bytes() -> None:
    lay = parse_format_buffer("AB,2,B,AF,2,F,AX,10,B")
    image = bytes.fromhex("ffffffff00112233445566778899")
    assert decode_payload(image, lay) == {
        "ab": 65535,
        "af": -1,
        "ax": bytes.fromhex("00112233445566778899"),
    }


def test_mu_and_pe() -> None:
    lay = parse_format_buffer(
        "AA,2,A,ABC,1,B,AB1-N,3,A,AC1-2,2,P,GAC,1,B,GA1-N,GB1-2",
        groups={"GA": "AR,3,A,AS,3,P,2", "GB": "AT,1,B"},
    )
    values = {
        "aa": "X",
        "ab": ["RED", "BLU"],
        "ac": [Decimal(5), Decimal(-7)],
        "ga": [{"ar": "EUR", "as": Decimal("12.50")}, {"ar": "USD", "as": Decimal("-1.00")}],
        "gb": [{"at": 1}, {"at": 2}],
    }
    for form in (EBCDIC, ASCII):
        image = encode_payload(values, lay, **form)
        assert len(image) == 2 + 1 + 6 + 4 + 1 + 12 + 2
        decoded = decode_payload(image, lay, **form)
        assert decoded == {**values, "ab_count": 2, "ga_count": 2}
    # fewer values than fixed occurrences are padded with empty ones
    short = encode_payload({"aa": "", "ab": [], "ac": [1], "ga": [], "gb": []}, lay)
    assert decode_payload(short, lay, empty="null") == {
        "aa": None,
        "ab_count": None,
        "ab": [],
        "ac": [Decimal(1), None],
        "ga_count": None,
        "ga": [],
        "gb": [{"at": None}, {"at": None}],
    }


MU_PE = parse_format_buffer(
    "AA,2,A,ABC,1,B,AB1-N,3,A,AC1-2,2,P,GAC,1,B,GA1-N",
    groups={"GA": "AR,3,A,AS,3,P,2,AT,2,B,AU,2,U"},
)


def _mu_pe_images() -> list[tuple[dict, bytes]]:
    """An MU field with its count, a fixed MU and a PE group with its count, written out by
    hand (not by the encoder) in both forms. Counts are one binary byte (``ABC,1,B``: the
    same in both byte orders); PE occurrences come occurrence by occurrence (AR1,AS1,AT1,AU1,
    AR2,…)."""
    ebcdic = (
        "e740"  # AA 'X' + blank, cp037
        "02"  # ABC: AB has 2 occurrences
        "d9c5c4"  # AB(1) 'RED'
        "c2d340"  # AB(2) 'BL' + blank
        "005c"  # AC(1) packed +5: digits 005, sign C
        "007d"  # AC(2) packed -7: digits 007, sign D
        "02"  # GAC: GA has 2 occurrences
        "c5e4d9"  # GA(1).AR 'EUR'
        "01250c"  # GA(1).AS packed 12.50 (digits 01250, scale 2), sign C
        "0102"  # GA(1).AT binary 258, high-order byte first
        "f0d3"  # GA(1).AU zoned -3: F0, then zone D (negative) digit 3
        "e4e2c4"  # GA(2).AR 'USD'
        "00100d"  # GA(2).AS packed -1.00, sign D
        "0001"  # GA(2).AT binary 1
        "f1f2"  # GA(2).AU zoned +12: zone F on the last byte
    )
    ascii_ = (
        "5820"  # AA 'X' + blank, Latin-1
        "02"  # ABC
        "524544"  # AB(1) 'RED'
        "424c20"  # AB(2) 'BL' + blank
        "005c"  # AC(1) +5: packed bytes do not depend on the form
        "007d"  # AC(2) -7
        "02"  # GAC
        "455552"  # GA(1).AR 'EUR'
        "01250c"  # GA(1).AS 12.50
        "0201"  # GA(1).AT 258, low-order byte first (ARC 9)
        "3073"  # GA(1).AU zoned -3: '0', then zone 7 (negative) digit 3
        "555344"  # GA(2).AR 'USD'
        "00100d"  # GA(2).AS -1.00
        "0100"  # GA(2).AT 1, low-order byte first
        "3132"  # GA(2).AU zoned +12: '1' '2', zone 3 on the last byte
    )
    return [(EBCDIC, bytes.fromhex(ebcdic)), (ASCII, bytes.fromhex(ascii_))]


MU_PE_EXPECTED = {
    "aa": "X",
    "ab_count": 2,
    "ab": ["RED", "BL"],
    "ac": [Decimal(5), Decimal(-7)],
    "ga_count": 2,
    "ga": [
        {"ar": "EUR", "as": Decimal("12.50"), "at": 258, "au": Decimal(-3)},
        {"ar": "USD", "as": Decimal("-1.00"), "at": 1, "au": Decimal(12)},
    ],
}


@pytest.mark.parametrize(("form", "image"), _mu_pe_images(), ids=["ebcdic", "ascii"])
def test_mu_and_pe_from_known_bytes(form: dict, image: bytes) -> None:
    decoded = decode_payload(image, MU_PE, **form)
    assert decoded == MU_PE_EXPECTED
    assert [type(v) for v in decoded["ga"][0].values()] == [str, Decimal, int, Decimal]
    # the counts size the lists: counts 1, AB(2) and GA(2) left out, the image ends earlier
    # (bytes: AA 0-1, ABC 2, AB 3-8, AC 9-12, GAC 13, GA(1) 14-23, GA(2) 24-33)
    shorter = image[:2] + b"\x01" + image[3:6] + image[9:13] + b"\x01" + image[14:24]
    assert decode_payload(shorter, MU_PE, **form) == {
        **MU_PE_EXPECTED, "ab_count": 1, "ab": ["RED"], "ga_count": 1,
        "ga": MU_PE_EXPECTED["ga"][:1]}


def test_empty_values_kept_or_null() -> None:
    image = encode_payload({}, LAYOUT)
    kept = decode_payload(image, LAYOUT)
    assert kept == {"name": "", "salary": 0, "ad": 0, "ae": 0, "af": 0.0, "ag": 0.0, "ah": 0}
    assert decode_payload(image, LAYOUT, empty="null") == dict.fromkeys(kept)
    with pytest.raises(ValueError, match="empty"):
        decode_payload(image, LAYOUT, empty="drop")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("hexed", "field", "offset", "reason"),
    [
        ("c2d6c240404040400012345d00000102", "AE", 16, "needs 5 bytes"),
        (
            "c2d6c24040404040001a345d00000102f0f0f0f4d2c276a000" + "00" * 8 + "0000",
            "AC",
            9,
            "packed digit nibble X'A'",
        ),
        ("c2d6c240404040400012345e00000102f0f0f0f4d2", "AF", 21, "has 0 left"),
        (
            "c2d6c240404040400012345100000102f0f0f0f4d2c276a000" + "00" * 8 + "0000",
            "AC",
            11,
            "sign nibble X'1'",
        ),
        (
            "c2d6c240404040400012345d00000102f0f0c0f4d2c276a000" + "00" * 8 + "0000",
            "AE",
            18,
            "zone C, not F",
        ),
        (
            "c2d6c240404040400012345d00000102f0f0f0f432c276a000" + "00" * 8 + "0000",
            "AE",
            20,
            "sign zone 3",
        ),
        (
            "c2d6c240404040400012345d00000102f0f0f0fad2c276a000" + "00" * 8 + "0000",
            "AE",
            19,
            "zoned digit X'FA'",
        ),
        (
            "c2d6c240404040400012345d00000102f0f0f0f4d2c276a000" + "00" * 8 + "000000",
            "",
            35,
            "1 bytes after the last field",
        ),
    ],
)
def test_bad_payloads(hexed: str, field: str, offset: int, reason: str) -> None:
    with pytest.raises(PayloadError) as info:
        decode_payload(bytes.fromhex(hexed), LAYOUT)
    err = info.value
    assert (err.field, err.offset) == (field, offset)
    assert reason in err.reason
    assert str(err).startswith(f"{field or 'payload'} at offset {offset}")


def test_bad_counts() -> None:
    lay = parse_format_buffer("ABC,1,B,AB1-N,3,A")
    with pytest.raises(PayloadError, match="ABC=5 needs 15 bytes, 3 left"):
        decode_payload(b"\x05" + b"\x40" * 3, lay)
    neg = parse_format_buffer("ABC,1,F,AB1-N,3,A")
    with pytest.raises(PayloadError, match="not a count"):
        decode_payload(b"\xff", neg)


def test_payload_error_pickles() -> None:
    import pickle

    err = pickle.loads(pickle.dumps(PayloadError("AB[2]", 7, "why")))
    assert (err.field, err.offset, err.reason) == ("AB[2]", 7, "why")


def _urbds(name: str) -> tuple[object, list[bytes]]:
    msg = decode_message((SEEDS / f"{name}.bin").read_bytes())
    head = next(e for e in msg.elements if e.eye == "URBT")
    return head, [e.payload for e in msg.elements if e.eye == "URBD"]


def test_seed_employee_images_ascii_arc9() -> None:
    """The seed's EMPLTEL images: GFB 'AA,AC,AD,AE,AH,8,U,AN,AM,AO,AP.' with EMPLOYEES lengths."""
    head, images = _urbds("10_employee_data_ascii")
    assert (head.urbtarc, head.urbtacod, head.urbtwcod) == (9, 819, 4091)
    lay = parse_format_buffer(
        "AA,8,A,AC,20,A,AD,20,A,AE,20,A,AH,8,U,AN,6,A,AM,15,A,AO,6,A,AP,25,A.",
        {"AA": "personnel_id", "AC": "first_name", "AE": "name", "AH": "birth"},
    )
    form = {"ebcdic": False, "acode": head.urbtacod, "wcode": head.urbtwcod, "arc": head.urbtarc}
    first = decode_payload(images[0], lay, **form)
    assert first["personnel_id"] == "20011000"
    assert (first["first_name"], first["ad"], first["name"]) == ("BOB", "HENRY", "ADKINSON")
    assert first["birth"] == Decimal(340505)
    assert (first["am"], first["ao"], first["ap"]) == ("(316)389-9325", "SALE20", "SALES PERSON")
    assert decode_payload(images[1], lay, **form)["name"] == "MELKANOFF"


def test_seed_color_images_ebcdic() -> None:
    """The seed's COLOR images (SFBAI='AA,AB.'): AA 16 alpha, AB 16 unpacked digits."""
    head, images = _urbds("05_color_data_ebcdic")
    lay = parse_format_buffer("AA,AB.", {"AA": "color"}, fdt={"AA": "16,A", "AB": "16,U"})
    rows = [decode_payload(i, lay, arc=head.urbtarc, acode=head.urbtacod) for i in images]
    assert [r["color"] for r in rows] == ["GREEN", "BLUE", "YELLOW"]
    assert rows[0]["ab"] == Decimal(2004052518354610)


# ------------------------------------------------------------------ variable-length values
VARIABLE = parse_format_buffer(
    "AA,0,A,AB,0,P,2,AC,0,B,AD,2,B,AZ,0,A,AE,0,U", fdt={"AZ": "0,A,LA"}
)


def _variable_images() -> list[tuple[dict, bytes]]:
    """One record with variable-length values (length counts itself), written by hand."""
    ebcdic = (
        "04c2d6c2"  # AA 'BOB': length 4 = 1 + 3
        "0412345d"  # AB packed -123.45 in 3 bytes
        "03abcd"  # AC two bytes, kept as bytes
        "0102"  # AD fixed 2-byte binary 258
        "0005c1c2c3"  # AZ (LA) 'ABC': a 2-byte length 5 = 2 + 3
        "03f4d2"  # AE zoned -42
    )
    ascii_ = (
        "04424f42"  # AA in Latin-1
        "0412345d"  # packed is the same in every form
        "03abcd"  # bytes have no byte order
        "0201"  # AD 258 little-endian
        "0500414243"  # AZ: the 2-byte length little-endian too
        "033472"  # AE zoned -42, ASCII zones
    )
    return [(EBCDIC, bytes.fromhex(ebcdic)), (ASCII, bytes.fromhex(ascii_))]


VARIABLE_VALUES = {
    "aa": "BOB",
    "ab": Decimal("-123.45"),
    "ac": b"\xab\xcd",
    "ad": 258,
    "az": "ABC",
    "ae": Decimal(-42),
}


@pytest.mark.parametrize(("form", "image"), _variable_images(), ids=["ebcdic", "ascii"])
def test_variable_length_values_both_forms(form: dict, image: bytes) -> None:
    assert VARIABLE.fixed_size is None
    assert decode_payload(image, VARIABLE, **form) == VARIABLE_VALUES
    assert encode_payload(VARIABLE_VALUES, VARIABLE, **form) == image


def test_variable_length_empty_values_kept_or_null() -> None:
    empty = bytes.fromhex("01" "01" "01" "0000" "0002" "01")  # every prefix counts only itself
    assert decode_payload(empty, VARIABLE) == {
        "aa": "", "ab": Decimal("0.00"), "ac": b"", "ad": 0, "az": "", "ae": Decimal(0)}
    assert set(decode_payload(empty, VARIABLE, empty="null").values()) == {None}


def test_variable_length_mu_and_pe() -> None:
    lay = parse_format_buffer("ABC,1,B,AB1-N,0,A,GA1-2", groups={"GA": "AR,0,A,AS,2,B"})
    image = bytes.fromhex("02" "03c1c2" "01" "02c3" "0001" "04c4c5c6" "0002")
    assert decode_payload(image, lay) == {
        "ab_count": 2, "ab": ["AB", ""],
        "ga": [{"ar": "C", "as": 1}, {"ar": "DEF", "as": 2}],
    }
    assert encode_payload(decode_payload(image, lay), lay) == image
    with pytest.raises(PayloadError, match="ABC=9 needs 9 bytes, 6 left"):
        decode_payload(bytes.fromhex("09" "03c1c2" "01" "02c3"), lay)


@pytest.mark.parametrize(
    ("hexed", "field", "offset", "reason"),
    [
        ("", "AA length", 0, "needs 1 bytes, payload has 0 left"),
        ("00", "AA", 0, "variable length 0 is shorter than its 1-byte length prefix"),
        ("09c1c2", "AA", 0, "needs 9 bytes, payload has 3 left"),
        ("01" "04123451", "AB", 4, "packed sign nibble X'1'"),
        ("01" "01" "01" "0000" "0001", "AZ", 5, "1 is shorter than its 2-byte length prefix"),
        ("01" "01" "01" "0000" "01", "AZ length", 5, "needs 2 bytes, payload has 1 left"),
    ],
)
def test_bad_variable_length_values(hexed: str, field: str, offset: int, reason: str) -> None:
    with pytest.raises(PayloadError) as info:
        decode_payload(bytes.fromhex(hexed), VARIABLE)
    assert (info.value.field, info.value.offset) == (field, offset)
    assert reason in info.value.reason


def test_variable_length_values_that_do_not_fit() -> None:
    with pytest.raises(PayloadError, match="do not fit a 1-byte length prefix"):
        encode_payload({"aa": "x" * 255}, parse_format_buffer("AA,0,A"))
    assert len(encode_payload({"aa": "x" * 254}, parse_format_buffer("AA,0,A"))) == 255
    with pytest.raises(PayloadError, match="more than 29 digits"):
        encode_payload({"ab": Decimal(10**29)}, parse_format_buffer("AB,0,P"))
