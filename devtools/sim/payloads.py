"""Record images (URBD payloads) built from a simple record layout.

The payload follows the subscription's layout field by field, so typed decoding downstream can
be tested against known values: A fields in the message's code page (cp037 for EBCDIC, latin-1
for ASCII), P packed decimal (sign nibble C/D), B unsigned binary in the message's byte order,
U unpacked decimal (zone F in EBCDIC, 3 in ASCII; a negative value has zone D in EBCDIC, 7 in
ASCII on its last byte, as Adabas writes them).
"""

from __future__ import annotations

import random
import string
from collections.abc import Mapping, Sequence

from devtools.sim.model import Encoding, LayoutField

Value = str | int
CODEPAGES: dict[Encoding, str] = {"ebcdic": "cp037", "ascii": "latin-1"}
_WORD_TEXT = (
    "RED GREEN BLUE YELLOW BLACK WHITE SMITH JONES MILLER ADKINSON SALES MGMT HAMBURG "
    "DARMSTADT RESTON BOSTON PAYROLL LEDGER ORDER INVOICE"
)
_WORDS = tuple(_WORD_TEXT.split(" "))


def layout_size(layout: Sequence[LayoutField]) -> int:
    """Bytes in one image of the layout."""
    return sum(f.length for f in layout)


def encode_record(
    layout: Sequence[LayoutField], values: Mapping[str, Value], encoding: Encoding
) -> bytes:
    """One record image: the fields of the layout, back to back."""
    return b"".join(_encode_field(f, values[f.name], encoding) for f in layout)


def decode_record(
    layout: Sequence[LayoutField], data: bytes, encoding: Encoding
) -> dict[str, Value]:
    """The inverse of encode_record; tests use it to check payloads against the layout."""
    values: dict[str, Value] = {}
    offset = 0
    for f in layout:
        values[f.name] = _decode_field(f, data[offset : offset + f.length], encoding)
        offset += f.length
    return values


def random_value(f: LayoutField, rng: random.Random) -> Value:
    """A plausible value that fits the field."""
    if f.format == "A":
        text = " ".join(rng.choice(_WORDS) for _ in range(3))
        if rng.random() < 0.3:
            text = "".join(rng.choice(string.digits) for _ in range(f.length))
        return text[: f.length].rstrip(" ")
    if f.format == "B":
        return rng.randrange(1 << (8 * f.length))
    digits = 2 * f.length - 1 if f.format == "P" else f.length
    limit = 10 ** min(digits, 18)
    value = rng.randrange(limit)
    return -value if rng.random() < 0.1 else value


def random_record(layout: Sequence[LayoutField], rng: random.Random) -> dict[str, Value]:
    return {f.name: random_value(f, rng) for f in layout}


def _encode_field(f: LayoutField, value: Value, encoding: Encoding) -> bytes:
    if f.format == "A":
        text = str(value)[: f.length].ljust(f.length)
        return text.encode(CODEPAGES[encoding])
    if f.format == "B":
        order = "big" if encoding == "ebcdic" else "little"
        return int(value).to_bytes(f.length, order)
    if f.format == "P":
        return _packed(int(value), f.length)
    return _zoned(int(value), f.length, encoding)


def _decode_field(f: LayoutField, raw: bytes, encoding: Encoding) -> Value:
    if f.format == "A":
        return raw.decode(CODEPAGES[encoding]).rstrip(" ")
    if f.format == "B":
        return int.from_bytes(raw, "big" if encoding == "ebcdic" else "little")
    if f.format == "P":
        return _unpacked(raw)
    return _unzoned(raw, encoding)


def _packed(value: int, length: int) -> bytes:
    digits = str(abs(value)).rjust(2 * length - 1, "0")
    if len(digits) > 2 * length - 1:
        raise ValueError(f"{value} does not fit {length} packed bytes")
    nibbles = [int(d) for d in digits] + [0xD if value < 0 else 0xC]
    return bytes(nibbles[i] << 4 | nibbles[i + 1] for i in range(0, len(nibbles), 2))


def _unpacked(raw: bytes) -> int:
    nibbles = [n for b in raw for n in (b >> 4, b & 0xF)]
    magnitude = int("".join(str(n) for n in nibbles[:-1]) or "0")
    return -magnitude if nibbles[-1] in (0xB, 0xD) else magnitude


_ZONES = {"ebcdic": (0xF0, 0xD0), "ascii": (0x30, 0x70)}


def _zoned(value: int, length: int, encoding: Encoding) -> bytes:
    digits = str(abs(value)).rjust(length, "0")
    if len(digits) > length:
        raise ValueError(f"{value} does not fit {length} unpacked bytes")
    plus, minus = _ZONES[encoding]
    out = bytearray(plus | int(d) for d in digits)
    if value < 0:
        out[-1] = minus | (out[-1] & 0x0F)
    return bytes(out)


def _unzoned(raw: bytes, encoding: Encoding) -> int:
    _, minus = _ZONES[encoding]
    magnitude = int("".join(str(b & 0x0F) for b in raw) or "0")
    return -magnitude if raw and raw[-1] & 0xF0 == minus else magnitude
