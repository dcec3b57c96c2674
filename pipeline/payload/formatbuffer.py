"""Record layouts from conf written the way replicator format buffers (GFB) are.

Supported elements, comma separated, an optional final ``.``; empty elements are ignored so GFB
pieces can be joined as the replicator's parameters split them (``'AA,AC,' + 'AH,8,U.'``):

``AA,8,A``       field, length, format (A W B F P U G)
``AC,4,P,2``     … with a decimal scale (P and U only): 4 packed bytes = 7 digits, 2 decimals
``AA,0,A``       variable length (A W B P U): each value after a binary length that counts
                 itself, 1 byte, or 2/4 for a field the ``fdt`` marks LA/LB (``{AZ: "0,A,LA"}``)
``AA,8`` ``AA,A`` ``AA``   length and/or format taken from the conf's ``fdt`` (``{AA: "8,A"}``)
``AA-AF``        field range: every field from AA to AF in the ``fdt``'s order (the conf lists the
                 FDT in its order), each with the FDT's length and format
``AB3,10,A``     one MU occurrence: a single value (column ``<AB's column>_3``)
``AB1-3,10,A``   MU/PE field occurrences 1 to 3: a list of 3
``ABC,1,B``      count of AB's occurrences (default 1,B; column ``<AB's column>_count``)
``AB1-N,10,A``   as many occurrences as the earlier ``ABC`` says: a list
``GA1-3`` ``GA1-N``   PE group named in the conf's ``groups`` (``{GA: "AR,3,A,AS,4,P"}``):
                 occurrence by occurrence (AR1,AS1,AR2,AS2,…) → list of dicts
``5X``           five bytes to skip

Not supported (raise :class:`~.errors.LayoutError`): literals, a length or format after a
range (``AA-AF,4,A``), PE groups inside a range, MU inside PE (``AR1(1-3)``), length
indicators (``AAL``), descriptor and edit-mask forms.
Columns come from the conf's ``columns`` mapping; a field without one gets its short name in
lower case.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import LayoutError
from .layout import FORMATS, FieldSpec, Filler, GroupSpec, Item, LayoutKey, RecordLayout

_NAME = re.compile(r"^([A-Z][A-Z0-9])(?:(C)|(\d+)(?:-(\d+|N))?)?$")
_FILLER = re.compile(r"^(\d+)X$")
_RANGE = re.compile(r"^([A-Z][A-Z0-9])-([A-Z][A-Z0-9])$")
FdtEntry = str | Sequence[Any]


@dataclass(frozen=True)
class _Element:
    """One parsed element before columns and defaults are applied."""

    name: str
    count: bool
    first: int | None
    last: int | str | None
    length: int | None
    format: str | None
    scale: int | None


@dataclass(frozen=True)
class _Range:
    """``AA-AF``: the FDT's fields from ``first`` to ``last``, expanded once the fdt is known."""

    first: str
    last: str


def tokenize(fb: str) -> list[str]:
    """Elements of a format buffer, upper-cased, without blanks, the final '.' or empties."""
    text = fb.strip()
    text = text[:-1] if text.endswith(".") else text
    return [t.strip().upper() for t in text.split(",") if t.strip()]


def _elements(tokens: list[str]) -> list[_Element | Filler | _Range]:
    out: list[_Element | Filler | _Range] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if filler := _FILLER.match(tok):
            out.append(Filler(int(filler.group(1))))
            continue
        if rng := _RANGE.match(tok):
            if i < len(tokens) and (tokens[i].isdigit() or tokens[i] in FORMATS):
                raise LayoutError(f"field range {tok}: lengths and formats come from the fdt, "
                                  "not the format buffer")
            out.append(_Range(rng.group(1), rng.group(2)))
            continue
        m = _NAME.match(tok)
        if m is None:
            raise LayoutError(f"format buffer element {i} {tok!r} is not a supported field")
        length = fmt = scale = None
        if i < len(tokens) and tokens[i].isdigit():
            length, i = int(tokens[i]), i + 1
        if i < len(tokens) and tokens[i] in FORMATS:
            fmt, i = tokens[i], i + 1
            if i < len(tokens) and tokens[i].isdigit():
                scale, i = int(tokens[i]), i + 1
        first = int(m.group(3)) if m.group(3) else None
        last = m.group(4) if m.group(4) in (None, "N") else int(m.group(4))
        out.append(_Element(m.group(1), bool(m.group(2)), first, last, length, fmt, scale))
    return out


#: FDT options that widen a variable-length value's length prefix.
_PREFIX_OPTIONS = {"LA": 2, "LB": 4}


@dataclass(frozen=True)
class _FdtField:
    """What the conf's FDT says of one field: ``8,A``, ``4,P,2``, ``0,A,LA``."""

    length: int | None = None
    format: str | None = None
    scale: int | None = None
    prefix: int = 1


def _fdt(fdt: Mapping[str, FdtEntry], name: str) -> _FdtField:
    entry = fdt.get(name)
    if entry is None:
        return _FdtField()
    parts = tokenize(entry) if isinstance(entry, str) else [str(p).upper() for p in entry]
    options = [p for p in parts if p in _PREFIX_OPTIONS]
    parts = [p for p in parts if p not in _PREFIX_OPTIONS]
    length = int(parts[0]) if parts and parts[0].isdigit() else None
    rest = parts[1:] if length is not None else parts
    fmt = rest[0] if rest else None
    scale = int(rest[1]) if len(rest) > 1 else None
    return _FdtField(length, fmt, scale, max((_PREFIX_OPTIONS[o] for o in options), default=1))


@dataclass(frozen=True)
class _Conf:
    columns: Mapping[str, str]
    fdt: Mapping[str, FdtEntry]
    groups: Mapping[str, str]
    scales: Mapping[str, int]

    def column(self, name: str) -> str:
        return self.columns.get(name) or name.lower()

    def spec(self, el: _Element, name: str, column: str, **occ: Any) -> FieldSpec:
        fdt = _fdt(self.fdt, name)
        length = el.length if el.length is not None else fdt.length
        if length is None and el.count:
            length = 1
        fmt = el.format or fdt.format or ("B" if el.count else None)
        if length is None or fmt is None:
            raise LayoutError(f"{name}: no length/format in the format buffer nor the fdt conf")
        scale = el.scale if el.scale is not None else self.scales.get(name, fdt.scale or 0)
        prefix = fdt.prefix if length == 0 else 1
        return FieldSpec(name, column, fmt, length, scale, prefix=prefix, **occ)


def _occurrences(el: _Element) -> dict[str, Any]:
    if el.last == "N":
        if el.first != 1:
            raise LayoutError(f"{el.name}{el.first}-N: variable ranges must start at 1")
        return {"count_field": f"{el.name}C"}
    assert isinstance(el.last, int) and el.first is not None
    if el.last < el.first:
        raise LayoutError(f"{el.name}{el.first}-{el.last}: empty range")
    return {"occurrences": el.last - el.first + 1}


def _item(el: _Element | Filler, conf: _Conf) -> Item:
    if isinstance(el, Filler):
        return el
    if el.count:
        name = f"{el.name}C"
        column = conf.columns.get(name) or f"{conf.column(el.name)}_count"
        return conf.spec(el, name, column)
    if el.name in conf.groups:
        return _group(el, conf)
    if el.first is not None and el.last is None:  # one occurrence: a single value
        name = f"{el.name}{el.first}"
        column = conf.columns.get(name) or f"{conf.column(el.name)}_{el.first}"
        return conf.spec(el, el.name, column)
    occ = _occurrences(el) if el.first is not None else {}
    return conf.spec(el, el.name, conf.column(el.name), **occ)


def _group(el: _Element, conf: _Conf) -> GroupSpec:
    if el.first is None or el.last is None or el.length is not None or el.format:
        raise LayoutError(f"PE group {el.name}: write it as {el.name}1-n or {el.name}1-N")
    members = []
    for m in _elements(tokenize(conf.groups[el.name])):
        if isinstance(m, Filler | _Range) or m.count or m.first is not None:
            raise LayoutError(f"PE group {el.name}: members must be plain fields")
        members.append(conf.spec(m, m.name, conf.column(m.name)))
    return GroupSpec(el.name, conf.column(el.name), tuple(members), **_occurrences(el))


def _expand(elements: list[_Element | Filler | _Range], conf: _Conf) -> list[_Element | Filler]:
    """Field ranges replaced by the fields the fdt lists from their first to their last."""
    order = list(conf.fdt)
    out: list[_Element | Filler] = []
    for el in elements:
        if not isinstance(el, _Range):
            out.append(el)
            continue
        name = f"{el.first}-{el.last}"
        missing = [f for f in (el.first, el.last) if f not in conf.fdt]
        if missing:
            raise LayoutError(f"field range {name}: {', '.join(missing)} not in the fdt conf "
                              "(a range takes its fields from the fdt, in the FDT's order)")
        start, end = order.index(el.first), order.index(el.last)
        if end < start:
            raise LayoutError(f"field range {name}: {el.last} comes before {el.first} in the fdt")
        for field_name in order[start : end + 1]:
            if field_name in conf.groups:
                raise LayoutError(f"field range {name}: PE group {field_name} inside a range")
            out.append(_Element(field_name, False, None, None, None, None, None))
    return out


def parse_format_buffer(
    fb: str,
    columns: Mapping[str, str] | None = None,
    *,
    fdt: Mapping[str, FdtEntry] | None = None,
    groups: Mapping[str, str] | None = None,
    scales: Mapping[str, int] | None = None,
    key: LayoutKey | None = None,
) -> RecordLayout:
    """A RecordLayout from a format buffer and the conf's column names (see module doc)."""
    conf = _Conf(
        {k.upper(): v for k, v in (columns or {}).items()},
        {k.upper(): v for k, v in (fdt or {}).items()},
        {k.upper(): v for k, v in (groups or {}).items()},
        {k.upper(): v for k, v in (scales or {}).items()},
    )
    elements = _expand(_elements(tokenize(fb)), conf)
    if not elements:
        raise LayoutError("empty format buffer")
    return RecordLayout(tuple(_item(e, conf) for e in elements), key, "conf")


def layout_from_conf(conf: Mapping[str, Any]) -> RecordLayout:
    """A layout from one conf entry: ``format_buffer`` plus optional ``columns``, ``fdt``,
    ``groups``, ``scales``, and ``dbid``/``fnr`` for the registry key."""
    if "format_buffer" not in conf:
        raise LayoutError("layout conf needs format_buffer")
    key = LayoutKey(int(conf["dbid"]), int(conf["fnr"])) if "dbid" in conf else None
    return parse_format_buffer(
        conf["format_buffer"],
        conf.get("columns"),
        fdt=conf.get("fdt"),
        groups=conf.get("groups"),
        scales=conf.get("scales"),
        key=key,
    )
