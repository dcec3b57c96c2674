"""Scan a message for what routes it: its elements' kinds and their name fields, nothing else.

The Spark decode stage must know each Kafka record's (destination, subscription) keys before
the stateful step, which is keyed by them; the state stage then decodes the record in full.
A full decode there would be the decode stage's whole cost, on the tasks that read Kafka: a
scan checks what the full decoder checks about the message's structure
(header eye-catcher, version, byte order, URBHLEN/URBHLENT, every element's length) and reads
only the name fields routing needs, a fraction of the work (decision 0001).

The scan walks the message with the decoder's own walk (``walk``: header, element chain), so
a structurally bad message raises exactly the full decoder's :class:`UrbFormatError`. Where
the decoder would have refused the message earlier, for something the scan does not look at
(an earlier element's variable part, a character a custom code page cannot decode),
``walk.first_error`` finds that error and words it as the decoder does, without decoding.
What a scan does not look at in a message it accepts (URBD/URBS/URBI/URBF variable parts,
characters a custom code page cannot decode outside the name fields) the full decode in the
state stage still finds; tests check that scan and decode agree on every message both accept
and refuse a message in the same words.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from .codepages import ASCII_CODEC, LATIN1_TABLES, check_codepage
from .errors import UrbFormatError
from .layouts import ELEMENT_TABLES, STRIP
from .walk import FORMS, HEAD_KEYS, Form, elements, first_error, form_heads, form_of, frame

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


_Specs = tuple[tuple[str, int, int], ...]


#: What the scan reads of one kind of element: (eye, text routing fields, binary routing
#: fields, bare), ``bare`` being its one scanned element when it has no routing fields
#: (shared: it is immutable). A plain tuple: CPython unpacks an exact tuple fastest.
_Plan = tuple[str, "_Specs | None", "_Specs | None", "ScannedElement | None"]


def _plans(form: Form) -> dict[bytes, _Plan]:
    """Eye-catcher bytes -> plan, for the form's known kinds."""
    out: dict[bytes, _Plan] = {}
    for eyeb, eye in form.eyes.items():
        text, binary = _SPECS.get(eye), _BINARY_SPECS.get(eye)
        bare = ScannedElement(eye, _NO_FIELDS) if not text and not binary else None
        out[eyeb] = (eye, text, binary, bare)
    return out


# Plain dicts, read on every element: private, never changed.
_PLANS: dict[Form, dict[bytes, _Plan]] = {form: _plans(form) for form in FORMS.values()}


def scan_header(data: bytes) -> tuple[int, int]:
    """(URBHMSNR, URBHTIME) of a message ``scan_message`` accepted; (0, 0) for another."""
    form = form_of(data) if len(data) >= _MSNR_AT + 12 else None
    if form is None:
        return 0, 0
    msnr, htime = _HEADER[form.big].unpack_from(data, _MSNR_AT)
    return msnr, htime


def scan_headers(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`scan_header` of every message ``buf[starts[i]:ends[i]]`` at once: (URBHMSNR,
    URBHTIME) as uint64 arrays, 0 where ``scan_header`` says (0, 0)."""
    msnr, htime = np.zeros(len(starts), np.uint64), np.zeros(len(starts), np.uint64)
    index, keys = form_heads(buf, starts, ends, _MSNR_AT + 12)
    if not len(index):
        return msnr, htime
    fields = np.ascontiguousarray(buf[starts[index, None] + np.arange(_MSNR_AT, _MSNR_AT + 12)])
    for head, key in HEAD_KEYS.items():
        chosen = keys == key
        if chosen.any():
            order = ">" if FORMS[head].big else "<"
            f = fields[chosen]
            msnr[index[chosen]] = np.ascontiguousarray(f[:, :4]).view(f"{order}u4").ravel()
            htime[index[chosen]] = np.ascontiguousarray(f[:, 4:]).view(f"{order}u8").ravel()
    return msnr, htime


def scan_message(data: bytes, *, codepage: str = "cp037") -> list[ScannedElement]:
    """The message's known elements in order, with their routing fields.

    Raises :class:`UrbFormatError` (the full decoder's) for a structurally bad message.
    """
    if type(data) is not bytes:
        data = bytes(data)
    form, start = frame(data)
    table = LATIN1_TABLES.get(codepage) if form.ebcdic else None
    if form.ebcdic and table is None:
        check_codepage(codepage)  # an unknown code page: the decoder's ValueError
    plans = _PLANS[form]
    out: list[ScannedElement] = []
    append = out.append
    try:
        for off, eyeb, ln in elements(data, form, start):
            plan = plans.get(eyeb)
            if plan is None:  # unknown: skipped, as the full decoder skips it (with a warning)
                continue
            bare = plan[3]
            append(bare if bare is not None
                   else _scanned(data, off, ln, plan, form, table, codepage))
    except UrbFormatError as exc:
        # The decoder may have refused the message before this point, for what the scan
        # does not look at: say what it would have said.
        raise (first_error(data, codepage=codepage) or exc) from None
    return out


def scan_element(data: bytes, off: int, ln: int, *, codepage: str = "cp037"
                 ) -> ScannedElement:
    """The known element at ``off`` (``ln`` bytes) of a message whose chain a walk already
    checked (the compiled scan, ``native``), scanned as :func:`scan_message` scans it.
    Only for EBCDIC code pages with a Latin-1 table (those the compiled scan takes)."""
    form = form_of(data)
    assert form is not None, "scan_element needs a framed message"
    plan = _PLANS[form][data[off:off + 4]]
    table = LATIN1_TABLES[codepage] if form.ebcdic else None
    return plan[3] or _scanned(data, off, ln, plan, form, table, codepage)


def _scanned(data: bytes, off: int, ln: int, plan: _Plan, form: Form, table: bytes | None,
             codepage: str) -> ScannedElement:
    """An element with routing fields: those that fit into its ``ln`` bytes."""
    eye, specs, binary, _bare = plan
    fields = _fields(data, off, ln, specs, form.ebcdic, table,
                     codepage) if specs else _NO_FIELDS
    if binary:
        fields = {**fields, **_numbers(data, off, ln, binary, form.big)}
    return ScannedElement(eye, fields)


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
            except UnicodeDecodeError:  # the decoder refuses the message's text
                raise UrbFormatError(off + start, "undecodable character") from None
        out[name] = text.rstrip(STRIP)
    return out


def _numbers(data: bytes, off: int, ln: int, specs: tuple[tuple[str, int, int], ...],
             big: bool) -> dict[str, int]:
    """The binary routing fields that fit into the element, in the message's byte order."""
    order = "big" if big else "little"
    return {name: int.from_bytes(data[off + start:off + start + length], order)
            for name, start, length in specs if start + length <= ln}
