"""How one image's bytes are to be read: code pages and machine architecture.

The replicator converts images to what the subscription asks for (SACODE, SWCODE, SARC) and
records that in URBTACOD, URBTWCOD and URBTARC.  :func:`payload_form` turns those three numbers
(plus the message's own form) into a :class:`Form` once per transaction; the decoders only read
the Form.

ARC is the Adabas architecture key, a sum of three parts:

=====  =============================================================================
1      byte order: 0 = high-order byte first (big-endian), 1 = low-order byte first
2      encoding family: 0 = ASCII, 2 = EBCDIC (this codec takes text from ACODE instead)
4, 8   floating point: 0 = IBM/370 hexadecimal, 4 = VAX (not supported), 8 = IEEE 754
=====  =============================================================================

The seed's EMPLOYEE subscription (SACODE=819, SWCODE=4091, SARC=9) goes to an Intel x86
client and its images are ASCII: 9 = 1 (low-order first) + 8 (IEEE); mainframe images carry
0 or 2 (high-order first, IBM float).  ARC 0 is also what a subscription without SARC sends,
so 0 means "not set": the image then has the message's own form (big-endian and IBM float for
EBCDIC messages, the caller's ``big_endian`` and IEEE for ASCII messages).
"""

from __future__ import annotations

import codecs
import contextlib
from dataclasses import dataclass

from .errors import PayloadError

with contextlib.suppress(ImportError):  # registers cp1047 and the other EBCDIC pages
    import ebcdic  # noqa: F401

ARC_LOW_ORDER_FIRST = 0x01
ARC_EBCDIC = 0x02
ARC_FLOAT_MASK = 0x0C
ARC_FLOAT: dict[int, str] = {0x00: "ibm", 0x04: "vax", 0x08: "ieee"}

#: ACODE (Adabas ECS encoding key) -> Python codec, where it is not ``cp<key>`` (cp037, cp1047…).
#: 0 = not set: the conf's EBCDIC code page for EBCDIC messages, Latin-1 for ASCII ones.
ACODES: dict[int, str] = {
    367: "ascii",
    819: "latin-1",  # ISO 8859-1, the seed's EMPLOYEE subscription
    912: "iso8859-2",
    913: "iso8859-3",
    923: "iso8859-15",
    1208: "utf-8",
}

#: WCODE -> codec for W fields.  The seed names only 4091 (EMPLOYEE) and has no W field, so
#: 4091 = UTF-16 high-order first is an ASSUMPTION (Adabas' default Unicode W encoding); the
#: others are the IBM CCSIDs of the Unicode forms.  0 = not set: UTF-16BE.
WCODES: dict[int, str] = {
    0: "utf-16-be",
    1200: "utf-16-be",
    1201: "utf-16-be",
    1202: "utf-16-le",
    1208: "utf-8",
    1232: "utf-32-be",
    1233: "utf-32-be",
    1234: "utf-32-le",
    4091: "utf-16-be",
}

_PLUS_ZONES = {0xF0: (0xF0, 0xD0), 0x30: (0x30, 0x70)}


@dataclass(frozen=True)
class Form:
    """Everything the field decoders need to know about one image's representation."""

    text: str  # codec for A fields
    wide: str  # codec for W fields
    big_endian: bool  # B, F and G byte order
    floats: str  # "ibm" or "ieee"
    zone: int  # zone nibble of an unsigned zoned digit: 0xF0 (EBCDIC) or 0x30 (ASCII)
    minus_zone: int  # zone of a negative zoned number's last byte: 0xD0 or 0x70
    blank: bytes  # one blank in the A code page (Adabas' empty alpha value)


def _lookup(name: str, what: str) -> str:
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise PayloadError("", 0, f"unknown {what} code page {name!r}") from None


def text_codec(acode: int, ebcdic: bool, codepage: str) -> str:
    """Codec for A fields: ACODE when set, else the conf page (EBCDIC) or Latin-1 (ASCII)."""
    if acode == 0:
        return _lookup(codepage if ebcdic else "latin-1", "ACODE 0")
    return _lookup(ACODES.get(acode, f"cp{acode:03d}"), f"ACODE {acode}")


def wide_codec(wcode: int) -> str:
    if wcode not in WCODES:
        raise PayloadError("", 0, f"unsupported WCODE {wcode} (known: {sorted(WCODES)})")
    return WCODES[wcode]


def payload_form(
    *,
    codepage: str = "cp037",
    ebcdic: bool = True,
    acode: int = 0,
    wcode: int = 0,
    arc: int = 0,
    big_endian: bool | None = None,
) -> Form:
    """The Form of an image from URBTACOD/URBTWCOD/URBTARC and the message's form."""
    text = text_codec(acode, ebcdic, codepage)
    if arc == 0:
        big = ebcdic if big_endian is None else big_endian
        floats = "ibm" if ebcdic else "ieee"
    else:
        big = not arc & ARC_LOW_ORDER_FIRST
        floats = ARC_FLOAT.get(arc & ARC_FLOAT_MASK, "?")
    if floats not in ("ibm", "ieee"):
        raise PayloadError("", 0, f"ARC {arc}: floating-point format {floats} not supported")
    zero = "0".encode(text)[0] & 0xF0
    if zero not in _PLUS_ZONES:
        raise PayloadError("", 0, f"code page {text} has no EBCDIC or ASCII digits")
    zone, minus = _PLUS_ZONES[zero]
    return Form(text, wide_codec(wcode), big, floats, zone, minus, " ".encode(text))
