"""Build elements and encode whole messages in either form the replicator uses.

Encoding is the exact inverse of decoding: every field lands at its table offset, an element is
as long as its own length field says, and fields beyond a short element's length are not
written.  Length fields that the caller does not set are derived from the layout and the
variable data, so a simulator or test can build a valid stream from values alone.

Character fields are padded with blanks; decoding strips blanks *and* zeros, so a decoded
message re-encodes to the same field values (not always the same filler bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .codepages import ASCII_CODEC, check_codepage
from .element import Element
from .layouts import (
    ALIGN,
    ALL_TABLES,
    BIG,
    DETAIL_BIG,
    DETAIL_LITTLE,
    LENGTH_FIELD,
    LITTLE,
    URBSU_BIG,
    URBSU_LITTLE,
    VARIABLE,
    Layout,
)

_EXTRAS: Mapping[str, frozenset[str]] = {
    "URBD": frozenset({"payload"}),
    "URBS": frozenset({"data", "detail", "files"}),
    "URBI": frozenset({"data"}),
    "URBF": frozenset({"groups"}),
}
_MAX_LENGTH = 0x7FFFFFFF  # length fields are signed fullwords
_DEFAULTS = {"C": "", "U": 0, "I": 0, "T": 0, "X": b""}


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _fits(layout: Layout, length: int) -> frozenset[str]:
    return frozenset(r[1] for r in layout.variant(length).fields)


def _make_urbsu(fields: dict[str, Any]) -> Element:
    """A URBSU utility detail (for ``make_element("URBS", urbsst="AUTI", detail=...)``)."""
    typ = int(fields.get("urbsutyp", 0))
    rows = URBSU_BIG.full.fields + (DETAIL_BIG[typ].full.fields if typ in DETAIL_BIG else ())
    names = {r[1] for r in rows}
    unknown = set(fields) - names
    if unknown:
        raise TypeError(f"URBSU type X'{typ:02X}' has no field(s) {', '.join(sorted(unknown))}")
    values = {name: fields.get(name, _DEFAULTS[typ_]) for _o, name, typ_, _l in rows}
    values["urbsueye"] = "URBSU"
    return Element("URBSU", 0, values)


def make_element(eye: str, **fields: Any) -> Element:
    """Build an element for :func:`encode_message`.

    Unspecified fields are zero or blank; the eye-catcher and length fields are filled in from
    the layout and the variable data.  URBD takes ``payload=bytes``; URBS ``data=bytes`` (or
    ``detail=`` a URBSU element for AUTI, or ``files=`` file numbers for RPLS/RPLE); URBI
    ``data=bytes``; URBF ``groups=`` URBG elements (or dicts of URBG fields).  Setting a length
    field explicitly (e.g. ``urbtlen=112``, the seeds' URBT) builds a shorter element.
    """
    eye = eye.upper()
    if eye == "URBSU":
        return _make_urbsu(fields)
    if eye not in ALL_TABLES:
        raise ValueError(f"unknown element type {eye!r}")
    layout = BIG[eye]
    extras = {k: fields.pop(k) for k in list(fields) if k in _EXTRAS.get(eye, ())}
    unknown = set(fields) - layout.names
    if unknown:
        raise TypeError(f"{eye} has no field(s) {', '.join(sorted(unknown))}")
    if eye == "URBS" and len({"data", "detail", "files"} & extras.keys()) > 1:
        raise TypeError("URBS takes only one of data=, detail=, files=")

    values: dict[str, Any] = {}
    for _off, name, typ, _ln in layout.full.fields:
        values[name] = fields.get(name, _DEFAULTS[typ])
    if eye != "URBG":
        values[f"{eye.lower()}eye"] = eye
    if eye == "URBH":
        values["urbhlen"] = fields.get("urbhlen", layout.size)
        values["urbhvers"] = fields.get("urbhvers", "01")
        values["urbhbord"] = 1

    el = Element(eye)
    if eye == "URBF":
        groups = [
            g if isinstance(g, Element) else make_element("URBG", **g)
            for g in extras.get("groups", [])
        ]
        values["urbfcntg"] = fields.get("urbfcntg", len(groups))
        values["urbfleng"] = fields.get("urbfleng", BIG["URBG"].size if groups else 0)
        values["urbflend"] = fields.get("urbflend", values["urbfcntg"] * values["urbfleng"])
        el.groups = groups
    if eye in VARIABLE:
        hname, dname = VARIABLE[eye]
        if eye == "URBD":
            data = bytes(extras.get("payload", b""))
            el.payload = data
        elif eye == "URBS":
            data = bytes(extras.get("data", b""))
            el.data = data
            el.detail = extras.get("detail")
            el.files = list(extras["files"]) if "files" in extras else None
        elif eye == "URBI":
            data = bytes(extras.get("data", b""))
            el.data = data
        else:
            data = b""
        dlen = values[dname] if eye == "URBF" else fields.get(dname, len(data))
        if eye == "URBS" and el.detail is not None:
            typ = int(el.detail.fields.get("urbsutyp") or 0)
            sub = DETAIL_BIG.get(typ)
            dlen = fields.get(dname, URBSU_BIG.size + (sub.size if sub else 0))
        elif eye == "URBS" and el.files is not None:
            dlen = fields.get(dname, 2 * len(el.files))
        values[hname] = fields.get(hname, layout.size)
        values[dname] = dlen
        total = values[hname] + max(dlen, 0)
        values[LENGTH_FIELD[eye]] = fields.get(LENGTH_FIELD[eye], _align(total))
    elif eye in LENGTH_FIELD and eye != "URBH":
        values[LENGTH_FIELD[eye]] = fields.get(LENGTH_FIELD[eye], layout.size)

    # A shorter element carries only the fields that fit.
    lname = LENGTH_FIELD.get(eye)
    fixed = layout.size
    if eye in VARIABLE:
        fixed = values[VARIABLE[eye][0]] or layout.size
    elif lname is not None:
        fixed = values[lname]
    if fixed < layout.size:
        keep = _fits(layout, fixed)
        lost = {k for k in fields if k not in keep}
        if lost:
            raise ValueError(f"{eye} of length {fixed} cannot hold {', '.join(sorted(lost))}")
        values = {k: v for k, v in values.items() if k in keep}
    el.__dict__.update(values)
    return el


class _Encoder:
    """Per-call encoding context: byte order, codec, blank."""

    __slots__ = ("big", "blank", "codec", "details", "layouts", "su")

    def __init__(self, ebcdic: bool, big_endian: bool, codepage: str) -> None:
        self.codec = check_codepage(codepage) if ebcdic else ASCII_CODEC
        self.blank = " ".encode(self.codec)
        self.big = big_endian
        self.layouts = BIG if big_endian else LITTLE
        self.su = URBSU_BIG if big_endian else URBSU_LITTLE
        self.details = DETAIL_BIG if big_endian else DETAIL_LITTLE

    def text(self, eye: str, name: str, value: Any, length: int) -> bytes:
        if value is None:
            value = ""
        raw = value if isinstance(value, bytes) else str(value).encode(self.codec)
        if len(raw) > length:
            raise ValueError(f"{eye}.{name}: {value!r} longer than {length} bytes")
        return raw + self.blank * (length - len(raw))

    def fixed(
        self,
        layout: Layout,
        fields: Mapping[str, Any],
        length: int,
        eye: str,
        buf: bytearray,
        at: int,
    ) -> None:
        """Pack the fields that fit into ``length`` bytes of ``layout`` at ``buf[at:]``."""
        v = layout.variant(length)
        args: list[Any] = []
        for _off, name, typ, ln in v.fields:
            value = fields.get(name)
            if typ == "C":
                args.append(self.text(eye, name, value, ln))
            elif typ == "X":
                raw = bytes(value or b"")
                if len(raw) > ln:
                    raise ValueError(f"{eye}.{name}: {len(raw)} bytes, field holds {ln}")
                args.append(raw)
            else:
                args.append(0 if value is None else int(value))
        try:
            v.pack_into(buf, at, *args)
        except struct.error as exc:
            for (_o, name, typ, ln), value in zip(v.fields, args, strict=True):
                if typ in "UIT":
                    lo, hi = (
                        (-(1 << (8 * ln - 1)), (1 << (8 * ln - 1)) - 1)
                        if typ == "I"
                        else (0, (1 << (8 * ln)) - 1)
                    )
                    if not lo <= value <= hi:
                        raise ValueError(f"{eye}.{name}={value} outside {lo}..{hi}") from None
            raise ValueError(f"{eye}: {exc}") from None

    def status_data(self, el: Element) -> bytes:
        extras = el.extras()
        if extras.get("detail") is not None:
            d: Element = extras["detail"]
            f = d.fields
            typ = int(f.get("urbsutyp") or 0)
            sub = self.details.get(typ)
            size = self.su.size + (sub.size if sub else 0)
            buf = bytearray(size)
            self.fixed(
                self.su,
                {**f, "urbsueye": f.get("urbsueye") or "URBSU"},
                self.su.size,
                "URBSU",
                buf,
                0,
            )
            if sub:
                self.fixed(sub, f, sub.size, "URBSU", buf, self.su.size)
            return bytes(buf)
        if extras.get("files") is not None:
            files = extras["files"]
            return struct.pack(f"{'>' if self.big else '<'}{len(files)}H", *files)
        return bytes(extras.get("data", b""))

    def element(self, el: Element) -> bytes:
        eye = el.eye
        layout = self.layouts.get(eye)
        if layout is None or eye in ("URBG", "URBH"):
            raise ValueError(f"cannot encode element type {eye!r}")
        f = dict(el.fields)
        f[f"{eye.lower()}eye"] = eye
        lname = LENGTH_FIELD[eye]
        if eye in VARIABLE:
            hname, dname = VARIABLE[eye]
            if eye == "URBD":
                data = bytes(getattr(el, "payload", None) or b"")
            elif eye in ("URBS",):
                data = self.status_data(el)
            elif eye == "URBI":
                data = bytes(getattr(el, "data", None) or b"")
            else:
                data = b""
            if f.get(hname) is None:
                f[hname] = layout.size
            if eye != "URBF" and (f.get(dname) is None or f[dname] < 0):
                f[dname] = len(data)
            lenh = f[hname] or min(layout.size, f.get(lname) or layout.size)
            if f.get(lname) is None or f[lname] < 0:
                f[lname] = _align(lenh + max(f[dname] or 0, 0))
            length = f[lname]
            if eye == "URBF":
                groups = getattr(el, "groups", None) or []
                if len(groups) != (f.get("urbfcntg") or 0):
                    raise ValueError(f"URBF: URBFCNTG={f.get('urbfcntg')} but {len(groups)} groups")
            if not 0 <= length <= _MAX_LENGTH:
                raise ValueError(f"{eye}: {lname.upper()}={length} outside 0..{_MAX_LENGTH}")
            if eye != "URBF" and len(data) != f[dname]:
                raise ValueError(f"{eye}: {dname.upper()}={f[dname]} but data is {len(data)} bytes")
            if lenh + len(data) > length:
                raise ValueError(f"{eye}: data does not fit into {lname.upper()}={length}")
            buf = bytearray(length)
            self.fixed(layout, f, min(lenh, length), eye, buf, 0)
            buf[lenh : lenh + len(data)] = data
            if eye == "URBF":
                self._groups(el, f, buf, lenh)
            return bytes(buf)
        if f.get(lname) is None:
            f[lname] = layout.size
        length = f[lname]
        if not 8 <= length <= _MAX_LENGTH:
            raise ValueError(f"{eye}: {lname.upper()}={length} outside 8..{_MAX_LENGTH}")
        buf = bytearray(length)
        self.fixed(layout, f, length, eye, buf, 0)
        return bytes(buf)

    def _groups(self, el: Element, f: dict[str, Any], buf: bytearray, start: int) -> None:
        groups: Sequence[Element] = getattr(el, "groups", None) or []
        size = f.get("urbfleng") or self.layouts["URBG"].size
        if start + len(groups) * size > len(buf):
            raise ValueError("URBF: groups do not fit into URBFLEN")
        for i, g in enumerate(groups):
            self.fixed(self.layouts["URBG"], g.fields, size, "URBG", buf, start + i * size)


def encode_message(
    header: Element | None,
    elements: Sequence[Element] | Iterable[Element],
    *,
    ebcdic: bool = True,
    big_endian: bool = True,
    codepage: str = "cp037",
) -> bytes:
    """Encode URBH + elements; URBHLENT, URBHBORD and the eye-catchers are always set here.

    ``header`` may be None (URBH, version '01', blank sender name, zero time).  ``ebcdic`` and
    ``big_endian`` choose the form; ``codepage`` applies to EBCDIC only.
    """
    enc = _Encoder(ebcdic, big_endian, codepage)
    body = [enc.element(el) for el in elements]
    h = dict(header.fields) if header is not None else make_element("URBH").fields
    h["urbheye"] = "URBH"
    h["urbhbord"] = 1
    if not h.get("urbhvers"):
        h["urbhvers"] = "01"
    hlen = h.get("urbhlen") or enc.layouts["URBH"].size
    if hlen < 16:
        raise ValueError(f"URBHLEN={hlen} is below 16")
    h["urbhlen"] = hlen
    h["urbhlent"] = hlen + sum(len(b) for b in body)
    buf = bytearray(hlen)
    enc.fixed(enc.layouts["URBH"], h, hlen, "URBH", buf, 0)
    return b"".join([bytes(buf), *body])
