"""Decode one replicator message into its header and elements.

The loop is written for speed because the Spark decode stage runs it on every Kafka message:
the whole message is decoded to text once (single-byte code pages keep byte and character
offsets equal), each element costs one dispatch lookup and one generated builder call (one
``unpack_from`` for the binary fields, one slice and strip per character field, one dict
display; see ``layouts._builder``).  Everything else
(URBD payload, URBS data, URBF groups, URBI ISN lists) is done only for the kinds that have it.

Every malformed input raises :class:`UrbFormatError`; nothing is read outside an element's own
length, and the walk always advances by a positive length, so it always terminates.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from .codepages import ASCII_CODEC, LATIN1_TABLES, check_codepage, decode_text
from .element import Element, Message
from .errors import UrbFormatError
from .layouts import (
    BIG,
    DETAIL_BIG,
    DETAIL_LITTLE,
    ELEMENT_TABLES,
    LITTLE,
    URBSU_BIG,
    URBSU_LITTLE,
    Layout,
)

EBCDIC_URBH = b"\xe4\xd9\xc2\xc8"
ASCII_URBH = b"URBH"
_VERS = {True: b"\xf0\xf1", False: b"01"}
_BORD_BIG = b"\x00\x01"
_BORD_LITTLE = b"\x01\x00"
_MIN_HEADER = 16  # URBHLENT must be inside the header
_ELEMENT_MIN = 8  # eye-catcher + length
_RANGE = 0xFFFFFFFF

_new = object.__new__


def _fields(layout: Layout, data: bytes, text: str, off: int, length: int) -> dict[str, Any]:
    return layout.variant(length).build(data, text, off)


def _make(eye: str, off: int, fields: dict[str, Any]) -> Element:
    el = _new(Element)
    el.eye = eye
    el.offset = off
    el.__dict__ = fields
    return el


def _variable(
    fields: dict[str, Any], hname: str, dname: str, hsize: int, off: int, ln: int, eye: str
) -> tuple[int, int]:
    """Start and end (relative to the element) of its variable data, validated."""
    lenh = fields.get(hname)
    lend = fields.get(dname)
    if lenh is None or lend is None:
        return ln, ln
    if lend < 0:
        raise UrbFormatError(off, f"{eye} data length {dname.upper()}={lend} is negative")
    if lenh == 0:  # older replicators leave URBSLENH zero: the data follows the fixed part
        lenh = min(hsize, ln)
    if lenh < _ELEMENT_MIN or lenh > ln:
        raise UrbFormatError(off, f"{eye} header length {hname.upper()}={lenh} outside 8..{ln}")
    if lenh + lend > ln:
        raise UrbFormatError(
            off,
            f"{eye} data ({hname.upper()}={lenh} + {dname.upper()}={lend}) runs past "
            f"the element length {ln}",
        )
    return lenh, lenh + lend


def parse_isn_list(data: bytes, big_endian: bool) -> list[int | tuple[int, int]] | None:
    """Parse URBI ISN-list data: fullword ISNs, or X'FFFFFFFF' start end for a range.

    Returns None when the data is not a well-formed ISN list (it may be selection data:
    the message itself does not say which, the initial-state definition does).
    """
    if not data or len(data) % 4:
        return None
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    out: list[int | tuple[int, int]] = []
    i, n = 0, len(words)
    while i < n:
        w = words[i]
        if w == _RANGE:
            if i + 2 >= n:
                return None
            out.append((words[i + 1], words[i + 2]))
            i += 3
        else:
            out.append(w)
            i += 1
    return out


class _Ctx:
    """Per-message decoding context handed to the per-kind post-processors."""

    __slots__ = ("big", "data", "text", "warnings")

    def __init__(self, data: bytes, text: str, big: bool, warnings: list[str]):
        self.data = data
        self.text = text
        self.big = big
        self.warnings = warnings


def _post_urbd(el: Element, f: dict[str, Any], ctx: _Ctx, off: int, ln: int) -> None:
    a, b = _variable(f, "urbdlenh", "urbdlend", 32, off, ln, "URBD")
    el.payload = ctx.data[off + a : off + b]


def _post_urbs(el: Element, f: dict[str, Any], ctx: _Ctx, off: int, ln: int) -> None:
    a, b = _variable(f, "urbslenh", "urbslend", 128, off, ln, "URBS")
    data = ctx.data[off + a : off + b]
    el.data = data
    el.detail = None
    el.files = None
    st = f.get("urbsst")
    if st == "AUTI" and data:
        el.detail = _urbsu(ctx, off + a, len(data))
    elif st in ("RPLS", "RPLE"):
        if len(data) % 2:
            ctx.warnings.append(f"URBS {st} at offset {off}: odd file-list length {len(data)}")
        count = len(data) // 2
        fmt = f"{'>' if ctx.big else '<'}{count}H"
        el.files = list(struct.unpack_from(fmt, data, 0))


def _urbsu(ctx: _Ctx, start: int, length: int) -> Element:
    head = URBSU_BIG if ctx.big else URBSU_LITTLE
    fields = _fields(head, ctx.data, ctx.text, start, length)
    typ = fields.get("urbsutyp")
    detail = (DETAIL_BIG if ctx.big else DETAIL_LITTLE).get(typ) if typ is not None else None
    if detail is not None and length > head.size:
        fields.update(_fields(detail, ctx.data, ctx.text, start + head.size, length - head.size))
    return _make("URBSU", start, fields)


def _post_urbi(el: Element, f: dict[str, Any], ctx: _Ctx, off: int, ln: int) -> None:
    a, b = _variable(f, "urbilenh", "urbilend", 96, off, ln, "URBI")
    data = ctx.data[off + a : off + b]
    el.data = data
    el.isns = parse_isn_list(data, ctx.big)
    el.selection = ctx.text[off + a : off + b]


def _post_urbf(el: Element, f: dict[str, Any], ctx: _Ctx, off: int, ln: int) -> None:
    a, _b = _variable(f, "urbflenh", "urbflend", 112, off, ln, "URBF")
    count = f.get("urbfcntg") or 0
    size = f.get("urbfleng") or 0
    groups: list[Element] = []
    if count:
        if size <= 0:
            raise UrbFormatError(off, f"URBF has {count} URBGs of length {size}")
        if a + count * size > ln:
            raise UrbFormatError(
                off, f"URBF: {count} URBGs of {size} bytes run past the element length {ln}"
            )
        layout = (BIG if ctx.big else LITTLE)["URBG"]
        pos = off + a
        for _ in range(count):
            groups.append(_make("URBG", pos, _fields(layout, ctx.data, ctx.text, pos, size)))
            pos += size
    el.groups = groups


_Post = Callable[[Element, dict[str, Any], _Ctx, int, int], None]
_POST: Mapping[str, _Post] = MappingProxyType(
    {"URBD": _post_urbd, "URBS": _post_urbs, "URBI": _post_urbi, "URBF": _post_urbf}
)


class _Form(NamedTuple):
    """Everything that depends on the message form, chosen once per message from its header."""

    ebcdic: bool
    big: bool
    header: Layout
    # eye-catcher bytes -> (layout, post-processor or None).  Eye-catchers are upper-case
    # letters, which every supported EBCDIC code page encodes alike.
    dispatch: Mapping[bytes, tuple[Layout, _Post | None]]
    lengths: Callable[[bytes, int], tuple[int, int]]  # (URBHLEN, URBHLENT) from offset 4
    eyelen: Callable[[bytes, int], tuple[bytes, int]]  # (eye-catcher, length) of an element


def _form(ebcdic: bool, big: bool) -> _Form:
    layouts = BIG if big else LITTLE
    codec = "cp037" if ebcdic else "ascii"
    order = ">" if big else "<"
    return _Form(
        ebcdic=ebcdic,
        big=big,
        header=layouts["URBH"],
        dispatch=MappingProxyType(
            {eye.encode(codec): (layouts[eye], _POST.get(eye)) for eye in ELEMENT_TABLES}
        ),
        lengths=struct.Struct(f"{order}i4xI").unpack_from,
        eyelen=struct.Struct(f"{order}4si").unpack_from,
    )


# URBHEYE + URBHVERS + URBHBORD (8 bytes) -> form.  Any other combination is an error.
_FORMS: Mapping[bytes, _Form] = MappingProxyType(
    {
        (EBCDIC_URBH if e else ASCII_URBH) + _VERS[e] + (_BORD_BIG if b else _BORD_LITTLE): _form(
            e, b
        )
        for e in (True, False)
        for b in (True, False)
    }
)


def _header_error(data: bytes) -> UrbFormatError:
    """The precise error for a header whose eye-catcher, version or byte order is wrong."""
    head = data[:4]
    if head not in (EBCDIC_URBH, ASCII_URBH):
        return UrbFormatError(0, f"bad header eye-catcher X'{head.hex().upper()}' (not URBH)")
    if data[8:10] != _VERS[head == EBCDIC_URBH]:
        return UrbFormatError(8, f"unsupported URBHVERS X'{data[8:10].hex().upper()}' (not '01')")
    bord = data[10:12].hex().upper()
    return UrbFormatError(10, f"bad URBHBORD X'{bord}' (not X'0001'/X'0100')")


def decode_message(data: bytes, *, codepage: str = "cp037") -> Message:
    """Decode one message (URBH + elements).

    ``codepage`` applies to EBCDIC messages only; ASCII messages are read as Latin-1.
    Raises :class:`UrbFormatError` for any malformed input.
    """
    if type(data) is not bytes:
        data = bytes(data)
    n = len(data)
    if n < _MIN_HEADER:
        raise UrbFormatError(n, f"truncated: {n} bytes, a URBH needs at least {_MIN_HEADER}")
    form = _FORMS.get(data[:4] + data[8:12])
    if form is None:
        raise _header_error(data)
    hlen, lent = form.lengths(data, 4)
    if lent != n:
        what = "truncated" if lent > n else "trailing bytes"
        raise UrbFormatError(12, f"{what}: URBHLENT={lent} but the message has {n} bytes")
    if hlen < _MIN_HEADER or hlen > n:
        raise UrbFormatError(4, f"URBHLEN={hlen} outside {_MIN_HEADER}..{n}")

    big = form.big
    if not form.ebcdic:
        text = data.decode(ASCII_CODEC)
    elif (table := LATIN1_TABLES.get(codepage)) is not None:
        text = data.translate(table).decode(ASCII_CODEC)
    else:
        try:
            text = decode_text(data, check_codepage(codepage))
        except UnicodeDecodeError as exc:  # only possible with a partial custom code page
            raise UrbFormatError(exc.start, f"undecodable character for {codepage}") from None
    hv = form.header.full if hlen >= form.header.size else form.header.by_len[hlen]
    header = _new(Element)
    header.eye = "URBH"
    header.offset = 0
    header.__dict__ = hv.build(data, text, 0)

    dispatch = form.dispatch
    eyelen = form.eyelen
    warnings: list[str] = []
    elements: list[Element] = []
    append = elements.append
    ctx: _Ctx | None = None
    off = hlen
    while off < n:
        if n - off < _ELEMENT_MIN:
            raise UrbFormatError(off, f"truncated element: {n - off} bytes left, need 8")
        eyeb, ln = eyelen(data, off)
        if ln < _ELEMENT_MIN:
            raise UrbFormatError(off + 4, f"element length {ln} is below 8")
        if off + ln > n:
            raise UrbFormatError(
                off + 4, f"element length {ln} runs past the end of the message ({n} bytes)"
            )
        kind = dispatch.get(eyeb)
        if kind is None:
            warnings.append(
                f"unknown eye-catcher X'{eyeb.hex().upper()}' at offset {off}, {ln} bytes skipped"
            )
            off += ln
            continue
        layout, extra = kind
        v = layout.full if ln >= layout.size else layout.by_len[ln]
        fields = v.build(data, text, off)
        el = _new(Element)
        el.eye = layout.eye
        el.offset = off
        el.__dict__ = fields
        if extra is not None:
            if ctx is None:
                ctx = _Ctx(data, text, big, warnings)
            extra(el, fields, ctx, off, ln)
        append(el)
        off += ln
    return Message(header, elements, warnings, form.ebcdic, big)
