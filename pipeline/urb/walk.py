"""Walk a message's frame: the URBH header, then the chain of elements, each checked once.

Both readers of a message use this walk: the full decoder (``decode``) builds each element it
yields, the routing scan (``scan``) reads a few name fields of each.  So they accept and refuse
the same framing with the same words, and the rules live in one place:

- the header: at least 16 bytes; URBHEYE, URBHVERS and URBHBORD select one of four forms
  (EBCDIC or ASCII text, big- or little-endian binary); URBHLENT is the message's length and
  URBHLEN lies between 16 and it (:func:`frame`);
- the message's text, for the character fields: EBCDIC in the caller's code page, ASCII as
  Latin-1; only a partial custom code page can fail (:func:`message_text`);
- the chain: each element starts with its eye-catcher and its length, at least 8 and inside
  the message; the next element follows it (:func:`elements`). The walk always advances by a
  positive length, so it always terminates;
- the variable part of URBD, URBS, URBI and URBF (header length + data length inside the
  element) and URBF's groups (:func:`variable_span`, :func:`check_groups`).

The decoder meets these checks in message order: header, text, then element by element the
chain and the element's variable part. :func:`first_error` runs them in that order without
building elements, so a reader that looks at less than the decoder (the scan) can word a
refusal exactly as the decoder would.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from .codepages import ASCII_CODEC, LATIN1_TABLES, check_codepage, decode_text
from .errors import UrbFormatError
from .layouts import BIG, ELEMENT_TABLES, LITTLE, VARIABLE

EBCDIC_URBH = b"\xe4\xd9\xc2\xc8"
ASCII_URBH = b"URBH"
MIN_HEADER = 16  # URBHLENT must be inside the header
ELEMENT_MIN = 8  # eye-catcher + length
_VERS = {True: b"\xf0\xf1", False: b"01"}
_BORD_BIG = b"\x00\x01"
_BORD_LITTLE = b"\x01\x00"


class Form:
    """What depends on the message form, chosen once per message from its header.

    ``eyes`` maps an element's eye-catcher bytes to its kind (``"URBT"`` …); eye-catchers are
    upper-case letters, which every supported EBCDIC code page encodes alike.
    """

    __slots__ = ("big", "ebcdic", "eyelen", "eyes", "lengths")

    def __init__(self, ebcdic: bool, big: bool) -> None:
        order = ">" if big else "<"
        codec = "cp037" if ebcdic else "ascii"
        self.ebcdic = ebcdic
        self.big = big
        self.eyes: Mapping[bytes, str] = MappingProxyType(
            {eye.encode(codec): eye for eye in ELEMENT_TABLES})
        #: (URBHLEN, URBHLENT) from offset 4
        self.lengths: Callable[[bytes, int], tuple[int, int]] = struct.Struct(
            f"{order}i4xI").unpack_from
        #: (eye-catcher, length) of the element at an offset
        self.eyelen: Callable[[bytes, int], tuple[bytes, int]] = struct.Struct(
            f"{order}4si").unpack_from

    def __repr__(self) -> str:
        return f"<Form {'EBCDIC' if self.ebcdic else 'ASCII'}/{'BE' if self.big else 'LE'}>"


# Read on every message: plain dicts, private, never changed (FORMS is the public view).
_FORMS: dict[bytes, Form] = {
    (EBCDIC_URBH if e else ASCII_URBH) + _VERS[e] + (_BORD_BIG if b else _BORD_LITTLE): Form(e, b)
    for e in (True, False)
    for b in (True, False)
}
_LATIN1: dict[str, bytes] = dict(LATIN1_TABLES)

#: URBHEYE + URBHVERS + URBHBORD (8 bytes) -> form. Any other combination is an error.
FORMS: Mapping[bytes, Form] = MappingProxyType(_FORMS)


#: The form bytes (URBHEYE, URBHVERS, URBHBORD) at these offsets of a message, and each form's
#: eight bytes as one native uint64 (:func:`form_heads`).
_HEAD_AT = np.array([0, 1, 2, 3, 8, 9, 10, 11], dtype=np.int64)
HEAD_KEYS: Mapping[bytes, int] = MappingProxyType(
    {head: int(np.frombuffer(head, dtype=np.uint64)[0]) for head in _FORMS})


def form_heads(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, min_len: int = MIN_HEADER
               ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`form_of` for many messages at once (message ``i`` is ``buf[starts[i]:ends[i]]``):
    the index of each message at least ``min_len`` (>= 16) bytes long, and its form bytes as
    one uint64, to compare with :data:`HEAD_KEYS`."""
    index = np.nonzero((ends - starts) >= max(min_len, MIN_HEADER))[0]
    if not len(index):
        return index, np.empty(0, dtype=np.uint64)
    heads = np.ascontiguousarray(buf[starts[index, None] + _HEAD_AT])
    return index, heads.view(np.uint64).ravel()


def form_of(data: bytes) -> Form | None:
    """The form the header names, or None (no check of the lengths)."""
    return _FORMS.get(data[:4] + data[8:12]) if len(data) >= MIN_HEADER else None


def frame(data: bytes) -> tuple[Form, int]:
    """The message's form and URBHLEN (where the first element starts), header checked."""
    n = len(data)
    if n < MIN_HEADER:
        raise UrbFormatError(n, f"truncated: {n} bytes, a URBH needs at least {MIN_HEADER}")
    form = _FORMS.get(data[:4] + data[8:12])
    if form is None:
        raise _header_error(data)
    hlen, lent = form.lengths(data, 4)
    if lent != n:
        what = "truncated" if lent > n else "trailing bytes"
        raise UrbFormatError(12, f"{what}: URBHLENT={lent} but the message has {n} bytes")
    if hlen < MIN_HEADER or hlen > n:
        raise UrbFormatError(4, f"URBHLEN={hlen} outside {MIN_HEADER}..{n}")
    return form, hlen


def _header_error(data: bytes) -> UrbFormatError:
    """The precise error for a header whose eye-catcher, version or byte order is wrong."""
    head = data[:4]
    if head not in (EBCDIC_URBH, ASCII_URBH):
        return UrbFormatError(0, f"bad header eye-catcher X'{head.hex().upper()}' (not URBH)")
    if data[8:10] != _VERS[head == EBCDIC_URBH]:
        return UrbFormatError(8, f"unsupported URBHVERS X'{data[8:10].hex().upper()}' (not '01')")
    bord = data[10:12].hex().upper()
    return UrbFormatError(10, f"bad URBHBORD X'{bord}' (not X'0001'/X'0100')")


def message_text(data: bytes, ebcdic: bool, codepage: str) -> str:
    """The whole message as text, one character per byte (character fields are slices of it).

    ``codepage`` applies to EBCDIC messages only; ASCII messages are read as Latin-1. Raises
    ``ValueError`` for an unknown code page and :class:`UrbFormatError` for a byte a partial
    custom code page cannot decode.
    """
    if not ebcdic:
        return data.decode(ASCII_CODEC)
    table = _LATIN1.get(codepage)
    if table is not None:
        return data.translate(table).decode(ASCII_CODEC)
    try:
        return decode_text(data, check_codepage(codepage))
    except UnicodeDecodeError as exc:  # only possible with a partial custom code page
        raise UrbFormatError(exc.start, f"undecodable character for {codepage}") from None


def elements(data: bytes, form: Form, start: int) -> Iterator[tuple[int, bytes, int]]:
    """(offset, eye-catcher bytes, length) of each element from ``start`` to the end, in order.

    Raises :class:`UrbFormatError` where the chain breaks: fewer than 8 bytes left, a length
    below 8 or past the end of the message. Known or not, every element is yielded.
    """
    n = len(data)
    eyelen = form.eyelen
    off = start
    while off < n:
        if n - off < ELEMENT_MIN:
            raise UrbFormatError(off, f"truncated element: {n - off} bytes left, need 8")
        eyeb, ln = eyelen(data, off)
        if ln < ELEMENT_MIN:
            raise UrbFormatError(off + 4, f"element length {ln} is below 8")
        if off + ln > n:
            raise UrbFormatError(
                off + 4, f"element length {ln} runs past the end of the message ({n} bytes)"
            )
        yield off, eyeb, ln
        off += ln


def variable_span(
    fields: Mapping[str, Any], hname: str, dname: str, hsize: int, off: int, ln: int, eye: str
) -> tuple[int, int]:
    """Start and end (relative to the element) of its variable data, validated.

    ``fields`` holds the element's header-length and data-length fields (``hname``,
    ``dname``) when they fit into its ``ln`` bytes; ``hsize`` is its DSECT's fixed part.
    """
    lenh = fields.get(hname)
    lend = fields.get(dname)
    if lenh is None or lend is None:
        return ln, ln
    if lend < 0:
        raise UrbFormatError(off, f"{eye} data length {dname.upper()}={lend} is negative")
    if lenh == 0:  # older replicators leave URBSLENH zero: the data follows the fixed part
        lenh = min(hsize, ln)
    if lenh < ELEMENT_MIN or lenh > ln:
        raise UrbFormatError(off, f"{eye} header length {hname.upper()}={lenh} outside 8..{ln}")
    if lenh + lend > ln:
        raise UrbFormatError(
            off,
            f"{eye} data ({hname.upper()}={lenh} + {dname.upper()}={lend}) runs past "
            f"the element length {ln}",
        )
    return lenh, lenh + lend


def check_groups(count: int, size: int, start: int, off: int, ln: int) -> None:
    """URBF: ``count`` URBGs of ``size`` bytes from ``start`` must fit into its ``ln`` bytes."""
    if count:
        if size <= 0:
            raise UrbFormatError(off, f"URBF has {count} URBGs of length {size}")
        if start + count * size > ln:
            raise UrbFormatError(
                off, f"URBF: {count} URBGs of {size} bytes run past the element length {ln}"
            )


# -- the decoder's first error, without decoding -------------------------------------------

#: The fixed part of each element with variable data (the decoder's header size for a zero
#: header length).
FIXED_SIZE: Mapping[str, int] = MappingProxyType({eye: BIG[eye].size for eye in VARIABLE})


def _check_element(data: bytes, text: str, form: Form, eye: str, off: int, ln: int) -> None:
    """The decoder's checks of one element's variable part and groups, on the fields its own
    builder reads (nothing to check for kinds without a variable part)."""
    names = VARIABLE.get(eye)
    if names is None:
        return
    fields = (BIG if form.big else LITTLE)[eye].variant(ln).build(data, text, off)
    start, _end = variable_span(fields, *names, FIXED_SIZE[eye], off, ln, eye)
    if eye == "URBF":
        check_groups(fields.get("urbfcntg") or 0, fields.get("urbfleng") or 0, start, off, ln)


def first_error(data: bytes, *, codepage: str = "cp037") -> UrbFormatError | None:
    """The error the full decoder raises for ``data`` (None if it raises none), found in the
    decoder's order without building elements: header, text, then per element its place in
    the chain and, for the kinds with one, its variable part.

    For a reader that looks at less than the decoder (the scan) to word a refusal exactly as
    the decoder would; only called when something is wrong, so not written for speed.
    """
    try:
        form, start = frame(data)
        text = message_text(data, form.ebcdic, codepage)
        eyes = form.eyes
        for off, eyeb, ln in elements(data, form, start):
            eye = eyes.get(eyeb)
            if eye is not None:
                _check_element(data, text, form, eye, off, ln)
    except UrbFormatError as exc:
        return exc
    return None
