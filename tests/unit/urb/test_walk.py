"""The message walk (pipeline.urb.walk) that decode and scan share: its first error is the
decoder's, word for word, and the scan words a refusal as the decoder would without decoding."""

from __future__ import annotations

import codecs
import random

import pytest

from pipeline.urb import UrbFormatError, decode_message, encode_message, make_element
from pipeline.urb.scan import scan_message
from pipeline.urb.walk import elements, first_error, frame

from .conftest import SEED_FILES, load
from .test_fuzz import _extra_seeds, _mutate


def decoder_error(raw: bytes, codepage: str = "cp037") -> str | None:
    try:
        decode_message(raw, codepage=codepage)
    except UrbFormatError as exc:
        return str(exc)
    return None


def test_first_error_is_the_decoders_on_mutated_messages() -> None:
    """20,000 mutated seeds: first_error finds the decoder's error (or none) without decoding."""
    rng = random.Random(1453)
    seeds = [load(name) for name in SEED_FILES] + _extra_seeds()
    refused = 0
    for _ in range(20_000):
        raw = _mutate(rng, rng.choice(seeds))
        expected = decoder_error(raw)
        found = first_error(raw)
        assert (str(found) if found else None) == expected, raw.hex()
        refused += expected is not None
    assert 2_000 < refused < 18_000


def test_the_walk_yields_every_element_known_or_not() -> None:
    raw = encode_message(None, [make_element("URBT", urbtsnam="COLOR"),
                                make_element("URBE", urbesnam="COLOR")])
    buf = bytearray(raw)
    form, start = frame(bytes(buf))
    first = next(elements(bytes(buf), form, start))
    buf[first[0]:first[0] + 4] = b"\xc1\xc1\xc1\xc1"  # 'AAAA': unknown, skipped with a warning
    walked = list(elements(bytes(buf), form, start))
    decoded = decode_message(raw).elements
    assert [(off, ln) for off, _eye, ln in walked] == [
        (decoded[0].offset, decoded[0].urbtlen), (decoded[1].offset, decoded[1].urbelen)]
    assert [eye for _off, eye, _ln in walked] == [b"\xc1\xc1\xc1\xc1", b"\xe4\xd9\xc2\xc5"]
    assert len(decode_message(bytes(buf)).warnings) == 1


@pytest.mark.parametrize("ebcdic", [True, False])
def test_scan_words_an_earlier_variable_part_error_as_the_decoder(ebcdic: bool) -> None:
    """A URBD whose data runs past its (shortened) length, then a broken chain: the scan, which
    does not read URBD data, stops at the chain; the decoder stops at the URBD first. The scan
    says what the decoder says."""
    body = [make_element("URBT", urbtsnam="COLOR", urbtrcnt=1),
            make_element("URBR", urbrfnr=4, urbrisn=1, urbrdcnt=1),
            make_element("URBD", urbdtyp="A", payload=bytes(64)),
            make_element("URBE", urbesnam="COLOR")]
    raw = bytearray(encode_message(None, body, ebcdic=ebcdic, big_endian=ebcdic))
    order = "big" if ebcdic else "little"
    urbd = decode_message(bytes(raw)).elements[2]
    raw[urbd.offset + 4:urbd.offset + 8] = (urbd.urbdlen - 16).to_bytes(4, order)
    expected = decoder_error(bytes(raw))
    assert expected is not None and "URBD data" in expected
    with pytest.raises(UrbFormatError) as scanned:
        scan_message(bytes(raw))
    assert str(scanned.value) == expected


def _partial_cp037(name: str) -> codecs.CodecInfo | None:
    """cp037 without X'5A' ('!'): a custom code page a name field can fail in."""
    if name != "cp037_partial":
        return None
    table = bytes(range(256)).decode("cp037").replace("!", "\ufffe")  # U+FFFE: undefined
    encoding = codecs.charmap_build(table)

    def decode(data: bytes, errors: str = "strict") -> tuple[str, int]:
        return codecs.charmap_decode(data, errors, table)

    def encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
        return codecs.charmap_encode(text, errors, encoding)

    return codecs.CodecInfo(encode, decode, name="cp037_partial")


codecs.register(_partial_cp037)


@pytest.mark.parametrize("where", ["name", "payload"])
def test_partial_code_page_error_is_the_decoders(where: str) -> None:
    """A byte the caller's code page cannot decode: the decoder refuses the message's text at
    the first such byte. The scan refuses only when it reads it (a name field), then with the
    decoder's words; in data it does not read, the state stage's full decode finds it."""
    body = [make_element("URBT", urbtsnam="COLOR", urbtrcnt=1),
            make_element("URBR", urbrfnr=4, urbrisn=1, urbrdcnt=1),
            make_element("URBD", urbdtyp="A", payload=b"\x5a" * 8 if where == "payload" else b""),
            make_element("URBE", urbesnam="COLOR")]
    raw = bytearray(encode_message(None, body))
    if where == "name":
        urbe = decode_message(bytes(raw)).elements[3]
        raw[urbe.offset + 8] = 0x5A  # URBESNAM's first character
    expected = decoder_error(bytes(raw), "cp037_partial")
    assert expected is not None and "undecodable character for cp037_partial" in expected
    if where == "name":
        assert expected.startswith(f"at offset {urbe.offset + 8} ")
    assert str(first_error(bytes(raw), codepage="cp037_partial")) == expected
    if where == "payload":
        assert [s.eye for s in scan_message(bytes(raw), codepage="cp037_partial")] == [
            "URBT", "URBR", "URBD", "URBE"]
        return
    with pytest.raises(UrbFormatError) as scanned:
        scan_message(bytes(raw), codepage="cp037_partial")
    assert str(scanned.value) == expected
