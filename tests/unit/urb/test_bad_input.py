"""Every kind of malformed message raises UrbFormatError with an offset and a reason."""

from __future__ import annotations

import struct

import pytest

from pipeline.urb import UrbFormatError, decode_message, encode_message, make_element

from .conftest import load

COLOR = load("05_color_data_ebcdic")  # EBCDIC, big endian: URBT at 0x40 (112 bytes)
EMPL = load("10_employee_data_ascii")  # ASCII, little endian


def put(raw: bytes, offset: int, fmt: str, value: int) -> bytes:
    buf = bytearray(raw)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf)


def fail(raw: bytes, offset: int | None, words: str) -> UrbFormatError:
    with pytest.raises(UrbFormatError) as info:
        decode_message(raw)
    err = info.value
    assert words in err.reason
    if offset is not None:
        assert err.offset == offset
    assert str(offset if offset is not None else err.offset) in str(err)
    assert err.reason in str(err)
    return err


def test_error_carries_offset_and_reason() -> None:
    err = UrbFormatError(64, "something wrong")
    assert (err.offset, err.reason) == (64, "something wrong")
    assert str(err) == "at offset 64 (X'0040'): something wrong"
    assert isinstance(err, Exception)


@pytest.mark.parametrize("cut", [0, 1, 4, 15])
def test_too_short_for_a_header(cut: int) -> None:
    fail(COLOR[:cut], cut, "truncated")


@pytest.mark.parametrize("cut", [16, 63, 64, 100, 591])
def test_truncated_message(cut: int) -> None:
    fail(COLOR[:cut], 12, "truncated")


def test_trailing_bytes_after_urbhlent() -> None:
    fail(COLOR + b"\x00" * 8, 12, "URBHLENT=592")


def test_urbhlent_not_the_length_little_endian() -> None:
    fail(put(EMPL, 12, "<I", 600), 12, "URBHLENT=600")


def test_bad_header_eye_catcher() -> None:
    fail(b"XRBH" + COLOR[4:], 0, "eye-catcher")


def test_element_eye_catcher_is_not_a_header() -> None:
    fail(COLOR[0x40 : 0x40 + 112] + COLOR[112:], 0, "eye-catcher")


def test_bad_byte_order() -> None:
    fail(put(COLOR, 10, ">H", 2), 10, "URBHBORD")
    fail(put(COLOR, 10, ">H", 0x0101), 10, "URBHBORD")


def test_bad_version() -> None:
    raw = bytearray(COLOR)
    raw[8:10] = "02".encode("cp037")
    fail(bytes(raw), 8, "URBHVERS")
    fail(EMPL[:8] + b"01"[::-1] + EMPL[10:], 8, "URBHVERS")


@pytest.mark.parametrize("hlen", [0, 8, -1, 10_000])
def test_bad_header_length(hlen: int) -> None:
    fail(put(COLOR, 4, ">i", hlen), 4, "URBHLEN")


@pytest.mark.parametrize("length", [0, -1, -112, 4, 7])
def test_element_length_zero_negative_or_tiny(length: int) -> None:
    fail(put(COLOR, 0x44, ">i", length), 0x44, "element length")


def test_element_length_zero_little_endian() -> None:
    fail(put(EMPL, 0x44, "<i", 0), 0x44, "element length")


def test_element_length_past_the_end() -> None:
    fail(put(COLOR, 0x234, ">i", 64), 0x234, "runs past the end")
    fail(put(COLOR, 0x44, ">i", 0x7FFFFFFF), 0x44, "runs past the end")


def test_truncated_element_header() -> None:
    # 4 stray bytes after the last element, with URBHLENT covering them
    raw = put(COLOR + b"\x00" * 4, 12, ">I", len(COLOR) + 4)
    fail(raw, len(COLOR), "truncated element")


def test_urbd_data_past_element() -> None:
    fail(put(COLOR, 0xF0 + 12, ">i", 33), 0xF0, "runs past")  # urbdlend
    fail(put(COLOR, 0xF0 + 12, ">i", -1), 0xF0, "negative")
    fail(put(COLOR, 0xF0 + 8, ">i", 65), 0xF0, "header length")  # urbdlenh


def test_urbs_data_past_element() -> None:
    raw = load("04_inst_init_reply_ebcdic")
    fail(put(raw, 0x40 + 100, ">i", 1), 0x40, "runs past")


def test_urbf_groups_past_element() -> None:
    urbf = make_element("URBF", groups=[{"urbgidx": 1, "urbgfid": "AA"}])
    raw = bytearray(encode_message(None, [urbf]))
    struct.pack_into(">H", raw, 64 + 80, 5)  # urbfcntg
    fail(bytes(raw), 64, "URBGs")


def test_unknown_eye_catcher_is_a_warning() -> None:
    raw = bytearray(COLOR)
    raw[0xB0:0xB4] = "URBX".encode("cp037")
    msg = decode_message(bytes(raw))
    assert [e.eye for e in msg.elements] == ["URBT", "URBD", "URBR", "URBD", "URBR", "URBD", "URBE"]
    assert len(msg.warnings) == 1 and "unknown eye-catcher" in msg.warnings[0]
    assert "176" in msg.warnings[0]


def test_non_bytes_input_is_accepted() -> None:
    assert decode_message(bytearray(COLOR)).header.urbhlent == 592
    assert decode_message(memoryview(COLOR)).header.urbhlent == 592


def test_unknown_code_page_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="code page"):
        decode_message(COLOR, codepage="cp99999")


@pytest.mark.parametrize(("ebcdic", "fmt"), [(True, ">I"), (False, "<I")])
def test_a_urbs_longer_than_its_parts_keeps_its_bytes_with_a_warning(ebcdic: bool,
                                                                      fmt: str) -> None:
    """C5 user data (seed 003) after a URBS's 128-byte fixed part with URBSLENH and URBSLEND
    both zero: the bytes are its data, and a warning says why (issue 35, point 7)."""
    el = make_element("URBS", urbsst="C5DA", data=b"USER-DATA-FROM-C5")
    raw = encode_message(None, [el], ebcdic=ebcdic, big_endian=ebcdic)
    raw = put(put(raw, 64 + 96, fmt, 0), 64 + 100, fmt, 0)
    msg = decode_message(raw)
    [urbs] = msg.elements
    assert urbs.data.startswith(b"USER-DATA-FROM-C5")
    [warning] = msg.warnings
    assert "URBSLENH and URBSLEND are 0" in warning and "kept as its data" in warning


def test_a_plain_128_byte_urbs_has_no_data_and_no_warning() -> None:
    raw = encode_message(None, [make_element("URBS", urbsst="TERM")], ebcdic=True,
                         big_endian=True)
    msg = decode_message(raw)
    assert msg.elements[0].data == b"" and msg.warnings == []
