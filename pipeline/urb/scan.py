"""Scan a message for what routes it: its elements' kinds and their name fields, nothing else.

The Spark decode stage must know each Kafka record's (destination, subscription) keys before
the stateful step, which is keyed by them; the state stage then decodes the record in full.
Decoding it in full twice was the decode stage's whole cost, on the one task that reads a
Kafka partition: a scan checks what the full decoder checks about the message's structure
(header eye-catcher, version, byte order, URBHLEN/URBHLENT, every element's length) and reads
only the name fields routing needs, about a fifth of the work (BENCHMARKS.md).

A structurally bad message raises exactly the full decoder's :class:`UrbFormatError` (the
scan runs the decoder to word it). What a scan does not look at (URBD/URBS/URBF variable
parts, characters a custom code page cannot decode outside the name fields) the full decode
in the state stage still finds; tests check that scan and decode agree on every message both
accept.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple, NoReturn

from .codepages import ASCII_CODEC, LATIN1_TABLES, check_codepage
from .decode import _ELEMENT_MIN, _FORMS, _MIN_HEADER, decode_message
from .errors import UrbFormatError
from .layouts import _STRIP, ELEMENT_TABLES

#: The fields that tell an element's key (see pipeline/spark/engine/decode_stage.py).
ROUTING_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType({
    "URBT": frozenset({"urbtsnam"}), "URBC": frozenset({"urbcsnam"}),
    "URBE": frozenset({"urbesnam"}),
    "URBS": frozenset({"urbsrt", "urbsst", "urbsrtok", "urbsinam", "urbssnam", "urbsdnam"}),
})
_SPECS: Mapping[str, tuple[tuple[str, int, int], ...]] = MappingProxyType({
    eye: tuple((name, off, length) for off, name, _typ, length in ELEMENT_TABLES[eye]
               if name in names)
    for eye, names in ROUTING_FIELDS.items()})
_NO_FIELDS: Mapping[str, str] = MappingProxyType({})
# eye-catcher bytes -> name, per text form (EBCDIC or ASCII); unknown ones are skipped, as
# the full decoder skips them (with a warning the state stage reports).
_EYES: Mapping[bool, Mapping[bytes, str]] = MappingProxyType({
    ebcdic: MappingProxyType({eye.encode("cp037" if ebcdic else "ascii"): eye
                              for eye in ELEMENT_TABLES})
    for ebcdic in (True, False)})


#: Binary fields that route an element: a GFFT (URBF) that no data element of its message
#: names a subscription for goes to the subscriptions covering its database and file.
BINARY_ROUTING_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType({
    "URBF": frozenset({"urbfdbid", "urbffnr"})})
_BINARY_SPECS: Mapping[str, tuple[tuple[str, int, int], ...]] = MappingProxyType({
    eye: tuple((name, off, length) for off, name, _typ, length in ELEMENT_TABLES[eye]
               if name in names)
    for eye, names in BINARY_ROUTING_FIELDS.items()})
_HEADER = {True: struct.Struct(">IQ"), False: struct.Struct("<IQ")}
_MSNR_AT = 16  # URBHMSNR, then URBHTIME (URBH DSECT)


class ScannedElement(NamedTuple):
    """One known element: its kind and the routing fields it has (stripped text; the
    binary ones as ints)."""

    eye: str
    fields: Mapping[str, str | int]


def scan_header(data: bytes) -> tuple[int, int]:
    """(URBHMSNR, URBHTIME) of a message ``scan_message`` accepted; (0, 0) for another."""
    form = _FORMS.get(data[:4] + data[8:12]) if len(data) >= _MSNR_AT + 12 else None
    if form is None:
        return 0, 0
    msnr, htime = _HEADER[form.big].unpack_from(data, _MSNR_AT)
    return msnr, htime


def scan_message(data: bytes, *, codepage: str = "cp037") -> list[ScannedElement]:
    """The message's known elements in order, with their routing fields.

    Raises :class:`UrbFormatError` (the full decoder's) for a structurally bad message.
    """
    if type(data) is not bytes:
        data = bytes(data)
    n = len(data)
    form = _FORMS.get(data[:4] + data[8:12]) if n >= _MIN_HEADER else None
    if form is None:
        _fail(data, codepage)
    hlen, lent = form.lengths(data, 4)
    if lent != n or hlen < _MIN_HEADER or hlen > n:
        _fail(data, codepage)
    table = LATIN1_TABLES.get(codepage) if form.ebcdic else None
    if form.ebcdic and table is None:
        check_codepage(codepage)  # an unknown code page: the decoder's ValueError
    eyes = _EYES[form.ebcdic]
    eyelen = form.eyelen
    out: list[ScannedElement] = []
    off = hlen
    while off < n:
        if n - off < _ELEMENT_MIN:
            _fail(data, codepage)
        eyeb, ln = eyelen(data, off)
        if ln < _ELEMENT_MIN or off + ln > n:
            _fail(data, codepage)
        eye = eyes.get(eyeb)
        if eye is not None:
            specs = _SPECS.get(eye)
            fields = _fields(data, off, ln, specs, form.ebcdic, table,
                             codepage) if specs else _NO_FIELDS
            binary = _BINARY_SPECS.get(eye)
            if binary:
                fields = {**fields, **_numbers(data, off, ln, binary, form.big)}
            out.append(ScannedElement(eye, fields))
        off += ln
    return out


def _fields(data: bytes, off: int, ln: int, specs: tuple[tuple[str, int, int], ...],
            ebcdic: bool, table: bytes | None, codepage: str) -> dict[str, str]:
    """The routing fields that fit into the element, decoded like the full decoder does."""
    out = {}
    for name, start, length in specs:
        if start + length > ln:
            continue
        raw = data[off + start:off + start + length]
        if not ebcdic:
            text = raw.decode(ASCII_CODEC)
        elif table is not None:
            text = raw.translate(table).decode(ASCII_CODEC)
        else:
            try:
                text = raw.decode(check_codepage(codepage))
            except UnicodeDecodeError:
                _fail(data, codepage)
        out[name] = text.rstrip(_STRIP)
    return out


def _numbers(data: bytes, off: int, ln: int, specs: tuple[tuple[str, int, int], ...],
             big: bool) -> dict[str, int]:
    """The binary routing fields that fit into the element, in the message's byte order."""
    order = "big" if big else "little"
    return {name: int.from_bytes(data[off + start:off + start + length], order)
            for name, start, length in specs if start + length <= ln}


def _fail(data: bytes, codepage: str) -> NoReturn:
    """Raise the full decoder's error for a message the scan found malformed."""
    decode_message(data, codepage=codepage)
    raise UrbFormatError(0, "malformed message")  # the decoder accepted it: never expected
