"""Decode one replicator message into its header and elements.

The message is walked with ``walk`` (header, text, element chain: the framing rules the scan
shares); this module builds what the walk finds. The loop is written for speed because the
Spark state stage runs it on every Kafka message: the whole message is decoded to text once
(single-byte code pages keep byte and character offsets equal), each element costs one
dispatch lookup and one generated builder call (one ``unpack_from`` for the binary fields,
one slice and strip per character field, one dict display; see ``layouts._builder``).
Everything else (URBD payload, URBS data, URBF groups, URBI ISN lists) is done only for the
kinds that have it, with the walk's checks of their variable parts.

Every malformed input raises :class:`UrbFormatError`; nothing is read outside an element's own
length, and the walk always advances by a positive length, so it always terminates.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from .element import Element, Message
from .layouts import (
    BIG,
    DETAIL_BIG,
    DETAIL_LITTLE,
    LITTLE,
    URBSU_BIG,
    URBSU_LITTLE,
    Layout,
    Variant,
)
from .walk import (
    FIXED_SIZE,
    FORMS,
    Form,
    check_groups,
    elements,
    frame,
    message_text,
    variable_span,
)

_RANGE = 0xFFFFFFFF
_URBD_FIXED, _URBS_FIXED, _URBI_FIXED, _URBF_FIXED = (
    FIXED_SIZE[eye] for eye in ("URBD", "URBS", "URBI", "URBF"))

_new = object.__new__


def _fields(layout: Layout, data: bytes, text: str, off: int, length: int) -> dict[str, Any]:
    return layout.variant(length).build(data, text, off)


def _make(eye: str, off: int, fields: dict[str, Any]) -> Element:
    el = _new(Element)
    el.eye = eye
    el.offset = off
    el.__dict__ = fields
    return el


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
    a, b = variable_span(f, "urbdlenh", "urbdlend", _URBD_FIXED, off, ln, "URBD")
    el.payload = ctx.data[off + a : off + b]


def _post_urbs(el: Element, f: dict[str, Any], ctx: _Ctx, off: int, ln: int) -> None:
    a, b = variable_span(f, "urbslenh", "urbslend", _URBS_FIXED, off, ln, "URBS")
    if f.get("urbslenh") == 0 and f.get("urbslend") == 0 and ln > _URBS_FIXED:
        # A URBS longer than its fixed part whose lengths say nothing (older replicators
        # leave URBSLENH zero; C5 user data must not vanish): the bytes after the fixed part
        # are its data, and the caller is told.
        a, b = _URBS_FIXED, ln
        ctx.warnings.append(
            f"URBS {f.get('urbsst', '')} at offset {off}: URBSLENH and URBSLEND are 0 but "
            f"{ln - _URBS_FIXED} bytes follow its {_URBS_FIXED}-byte fixed part: kept as its "
            "data")
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
    a, b = variable_span(f, "urbilenh", "urbilend", _URBI_FIXED, off, ln, "URBI")
    data = ctx.data[off + a : off + b]
    el.data = data
    el.isns = parse_isn_list(data, ctx.big)
    el.selection = ctx.text[off + a : off + b]


def _post_urbf(el: Element, f: dict[str, Any], ctx: _Ctx, off: int, ln: int) -> None:
    a, _b = variable_span(f, "urbflenh", "urbflend", _URBF_FIXED, off, ln, "URBF")
    count = f.get("urbfcntg") or 0
    size = f.get("urbfleng") or 0
    groups: list[Element] = []
    check_groups(count, size, a, off, ln)
    if count:
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


#: How the decoder builds one kind of element in one form: the full DSECT's builder, its size,
#: the variants of shorter elements by length, the eye-catcher and the post-processor (None
#: for kinds without variable parts). A plain tuple: the loop unpacks it once per element,
#: and CPython unpacks an exact tuple fastest.
_Kind = tuple[
    Callable[[bytes, str, int], dict[str, Any]], int, tuple[Variant, ...], str, "_Post | None"
]


class _Kinds(NamedTuple):
    """What the decoder builds for one message form: the header's layout and each element
    kind, by eye-catcher bytes (a plain dict, read on every element: private, never changed)."""

    header: Layout
    dispatch: dict[bytes, _Kind]


def _kinds(form: Form) -> _Kinds:
    layouts = BIG if form.big else LITTLE
    dispatch: dict[bytes, _Kind] = {}
    for eyeb, eye in form.eyes.items():
        layout = layouts[eye]
        dispatch[eyeb] = (layout.full.build, layout.size, layout.by_len, eye, _POST.get(eye))
    return _Kinds(header=layouts["URBH"], dispatch=dispatch)


_KINDS: dict[Form, _Kinds] = {form: _kinds(form) for form in FORMS.values()}  # never changed


def decode_message(data: bytes, *, codepage: str = "cp037") -> Message:
    """Decode one message (URBH + elements).

    ``codepage`` applies to EBCDIC messages only; ASCII messages are read as Latin-1.
    Raises :class:`UrbFormatError` for any malformed input.
    """
    if type(data) is not bytes:
        data = bytes(data)
    form, hlen = frame(data)
    big = form.big
    text = message_text(data, form.ebcdic, codepage)
    kinds = _KINDS[form]
    hl = kinds.header
    hv = hl.full if hlen >= hl.size else hl.by_len[hlen]
    header = _new(Element)
    header.eye = "URBH"
    header.offset = 0
    header.__dict__ = hv.build(data, text, 0)

    dispatch = kinds.dispatch
    warnings: list[str] = []
    out: list[Element] = []
    append = out.append
    ctx: _Ctx | None = None
    for off, eyeb, ln in elements(data, form, hlen):
        kind = dispatch.get(eyeb)
        if kind is None:
            warnings.append(
                f"unknown eye-catcher X'{eyeb.hex().upper()}' at offset {off}, {ln} bytes skipped"
            )
            continue
        build, size, by_len, eye, extra = kind
        fields = (build if ln >= size else by_len[ln].build)(data, text, off)
        el = _new(Element)
        el.eye = eye
        el.offset = off
        el.__dict__ = fields
        if extra is not None:
            if ctx is None:
                ctx = _Ctx(data, text, big, warnings)
            extra(el, fields, ctx, off, ln)
        append(el)
    return Message(header, out, warnings, form.ebcdic, big)
