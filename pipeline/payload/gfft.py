"""Record layouts from a GFFT (URBF + URBGs), and a registry of layout versions.

The replicator may send a global format field table (URBF with one URBG per field) at any time.
Its codes, as declared below, follow the URBF/URBG DSECT descriptions (the ones adapya-era's
``era.urb`` module also documents); the seeds contain no GFFT, so how ranges and PE groups are
laid out is an ASSUMPTION stated where it is made:

* fields are in the image in URBG order; URBGs flagged "do not output" and PE group headers
  (format 0) take no bytes;
* a counter URBG (type bit 4) for field XY is the count field ``XYC``;
* an MU/PE URBG holds occurrences URBGFRFM (first, 0 = 1) to URBGFRNO (last); flagged
  "optimized", or with URBGFRNO 0 after a counter for it, it holds 1-N as the counter says;
* PE members without the "range" flag are read occurrence by occurrence as one group
  (PA1,PB1,PA2,PB2,…) named by URBGFGRP; with the flag each member is its own list;
* URBGFPRC is the number of decimal places of a P/U field;
* URBGFLEN 0 is a variable-length field, each value after a 1-byte length that counts itself
  (a GFFT does not say whether a field is LA/LB, whose values have 2/4-byte lengths: map such
  fields with a conf format buffer and ``fdt``);
* second-level occurrences (URBGFONO/URBGFOFM: MU inside PE) are not supported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import LayoutError
from .layout import VARIABLE_DIGITS, FieldSpec, GroupSpec, Item, LayoutKey, RecordLayout

#: URBGFFMT low nibble -> Adabas format (0 = no format: a group header).
GFFT_FORMATS: dict[int, str] = {0x01: "A", 0x02: "B", 0x03: "P", 0x04: "U", 0x05: "G", 0x06: "G"}
FMT_DATE, FMT_TIME, FMT_WIDE, FMT_SIGNED = 0x10, 0x20, 0x40, 0x80
TYPE_PE, TYPE_MU, TYPE_COUNT = 0x01, 0x02, 0x04
FLAG_NOT_OUTPUT, FLAG_RANGE, FLAG_OPTIMIZED = 0x01, 0x02, 0x10


def gfft_key(urbf: Any) -> LayoutKey:
    """(dbid, fnr, global format id, URBFTIM1) of a URBF element."""
    return LayoutKey(
        int(urbf.urbfdbid or 0),
        int(urbf.urbffnr or 0),
        str(urbf.urbfgfid or "").strip(),
        int(urbf.urbftim1 or 0),
    )


def gfft_format(code: int) -> str:
    """Adabas format of a URBGFFMT byte: wide alpha is W, signed binary is F."""
    base = GFFT_FORMATS.get(code & 0x0F)
    if base is None:
        raise LayoutError(f"URBGFFMT X'{code:02X}' is not a known format")
    if base == "A" and code & FMT_WIDE:
        return "W"
    if base == "B" and code & FMT_SIGNED:
        return "F"
    return base


def snake(name: str) -> str:
    """A column name from an Adabas long name: PERSONNEL-ID -> personnel_id."""
    return re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_")


def _occurrences(g: Any, name: str, counted: set[str]) -> dict[str, Any]:
    if not g.urbgtype & (TYPE_PE | TYPE_MU):
        return {}
    last, first = int(g.urbgfrno or 0), int(g.urbgfrfm or 0) or 1
    if g.urbgflag & FLAG_OPTIMIZED or (last == 0 and name in counted):
        return {"count_field": f"{name}C"}
    if last == 0:
        return {}
    if last < first:
        raise LayoutError(f"URBG {name}: occurrences {first}-{last}")
    return {"occurrences": last - first + 1}


@dataclass
class _Builder:
    """Collects items; consecutive per-occurrence PE members become one GroupSpec."""

    columns: Mapping[str, str]
    long_names: Mapping[str, str]
    items: list[Item] = field(default_factory=list)
    counted: set[str] = field(default_factory=set)
    group: tuple[str, tuple[tuple[str, Any], ...]] | None = None
    members: list[FieldSpec] = field(default_factory=list)

    def flush(self) -> None:
        if self.group is not None:
            name, occ = self.group
            column = self.columns.get(name) or name.lower()
            self.items.append(GroupSpec(name, column, tuple(self.members), **dict(occ)))
        self.group, self.members = None, []

    def add(self, g: Any) -> None:
        name = str(g.urbgfid).strip()
        if g.urbgfono or g.urbgfofm:
            raise LayoutError(f"URBG {name}: MU inside PE (second-level occurrences)")
        fmt = gfft_format(int(g.urbgffmt))
        length, prc = int(g.urbgflen), int(g.urbgfprc or 0)
        column = self.columns.get(name) or snake(self.long_names.get(name, "")) or name.lower()
        if g.urbgtype & TYPE_COUNT:
            self.flush()
            self.counted.add(name)
            count_column = self.columns.get(f"{name}C") or f"{column}_count"
            self.items.append(FieldSpec(f"{name}C", count_column, fmt, length))
            return
        digits = VARIABLE_DIGITS if length == 0 else 2 * length - 1 if fmt == "P" else length
        scale = prc if fmt in "PU" and prc <= digits else 0
        occ = _occurrences(g, name, self.counted)
        grp = str(g.urbgfgrp or "").strip()
        if g.urbgtype & TYPE_PE and grp and occ and not g.urbgflag & FLAG_RANGE:
            if "count_field" in occ:
                occ = {"count_field": f"{grp}C"}
            key = (grp, tuple(occ.items()))
            if self.group != key:
                self.flush()
                self.group = key
            self.members.append(FieldSpec(name, column, fmt, length, scale,
                                          long_name=self.long_names.get(name, "")))
            return
        self.flush()
        self.items.append(FieldSpec(name, column, fmt, length, scale, **occ,
                                    long_name=self.long_names.get(name, "")))


def layout_from_gfft(urbf: Any, columns: Mapping[str, str] | None = None) -> RecordLayout:
    """The RecordLayout a URBF element (with ``groups``) describes, keyed by :func:`gfft_key`.

    Columns: the conf's ``columns`` by short name, else the URBG long name in snake case (a
    counter URBG borrows its field's), else the short name in lower case.
    """
    if getattr(urbf, "eye", "URBF") != "URBF":
        raise LayoutError(f"expected a URBF element, got {urbf.eye}")
    urbgs = getattr(urbf, "groups", None) or []
    long_names = {str(g.urbgfid).strip(): str(g.urbgfnam) for g in urbgs if g.urbgfnam}
    builder = _Builder({k.upper(): v for k, v in (columns or {}).items()}, long_names)
    for g in urbgs:
        if g.urbgflag & FLAG_NOT_OUTPUT or not g.urbgffmt & 0x0F:
            continue
        builder.add(g)
    builder.flush()
    if not builder.items:
        raise LayoutError("GFFT describes no fields")
    return RecordLayout(tuple(builder.items), gfft_key(urbf), "gfft")


def gfft_fields(urbf: Any) -> dict[str, Any]:
    """A decoded URBF element as plain JSON-able data: its DSECT fields and ``groups`` (one
    dict of URBG fields each).

    Why: the element crosses Spark (the state function's rows, the ``layouts`` table's
    ``gfft_json``) as data, and :func:`gfft_view` turns it back into what
    :func:`layout_from_gfft` reads, so a conf's ``columns`` can be applied later.
    """
    fields = {k: v for k, v in urbf.fields.items() if v is not None and not isinstance(v, bytes)}
    groups = [{k: v for k, v in g.fields.items() if v is not None and not isinstance(v, bytes)}
              for g in (getattr(urbf, "groups", None) or [])]
    return {**fields, "groups": groups}


#: Character fields of URBF/URBG; every other field is a number.
_CHAR_FIELDS = frozenset({"urbfeye", "urbfvers", "urbffnre", "urbfgfid", "urbffnam", "urbgfid",
                          "urbgfnam", "urbgfgrp", "urbgfmtx", "urbgfrpn", "urbgffon"})


class _View:
    """Attribute access over a mapping of DSECT fields. A field it lacks reads as "" or 0 (a
    hand-made GFFT, or JSON that left zeros out, need not spell every field)."""

    def __init__(self, eye: str, fields: Mapping[str, Any]) -> None:
        self.eye = eye
        self._fields = fields
        self.groups = [_View("URBG", g) for g in fields.get("groups", ())] if eye == "URBF" else []

    def __getattr__(self, name: str) -> Any:
        value = self.__dict__["_fields"].get(name)
        if value is None:
            return "" if name in _CHAR_FIELDS else 0
        return value


def gfft_view(fields: Mapping[str, Any]) -> Any:
    """The URBF element :func:`gfft_fields` describes, for :func:`layout_from_gfft`/``gfft_key``."""
    return _View("URBF", fields)


_FORMAT_CODES: dict[str, int] = {"A": 0x01, "W": 0x01 | FMT_WIDE, "B": 0x02,
                                 "F": 0x02 | FMT_SIGNED, "P": 0x03, "U": 0x04, "G": 0x06}


def long_name(column: str) -> str:
    """The URBGFNAM a column reads back from: personnel_id -> PERSONNEL-ID (see :func:`snake`)."""
    return column.upper().replace("_", "-")


def _urbg(spec: FieldSpec, **extra: Any) -> dict[str, Any]:
    if spec.prefix != 1:
        raise LayoutError(f"{spec.name}: a {spec.prefix}-byte length prefix has no GFFT form")
    occ: dict[str, Any] = {}
    if spec.occurrences is not None:
        occ = {"urbgtype": TYPE_MU, "urbgfrfm": 1, "urbgfrno": spec.occurrences}
    elif spec.count_field is not None:
        occ = {"urbgtype": TYPE_MU, "urbgflag": FLAG_OPTIMIZED}
    return {"urbgfid": spec.name, "urbgffmt": _FORMAT_CODES[spec.format],
            "urbgflen": spec.length, "urbgfprc": spec.scale, "urbgfnam": long_name(spec.column),
            **occ, **extra}


def _group_urbgs(group: GroupSpec) -> list[dict[str, Any]]:
    occ = ({"urbgfrfm": 1, "urbgfrno": group.occurrences} if group.occurrences is not None
           else {"urbgflag": FLAG_OPTIMIZED})
    head = {"urbgfid": group.name, "urbgffmt": 0, "urbgtype": TYPE_PE, "urbgflen": 0}
    return [head, *(_urbg(m, urbgtype=TYPE_PE, urbgfgrp=group.name, **occ)
                    for m in group.members)]


def gfft_from_layout(layout: RecordLayout) -> list[dict[str, Any]]:
    """The URBGs (as field dicts, numbered from 1) of a GFFT describing ``layout``: the inverse
    of :func:`layout_from_gfft` given the layout's own columns (the simulator sends these).

    Long names are the columns upper-cased (``personnel_id`` → ``PERSONNEL-ID``); a count field
    ``XYC`` is a counter URBG ``XY`` before its field. Fillers have no GFFT form (LayoutError).
    """
    out: list[dict[str, Any]] = []
    for item in layout.items:
        if isinstance(item, GroupSpec):
            out += _group_urbgs(item)
        elif isinstance(item, FieldSpec) and item.name.endswith("C") and len(item.name) == 3:
            out.append({**_urbg(item), "urbgfid": item.name[:2], "urbgtype": TYPE_COUNT})
        elif isinstance(item, FieldSpec):
            out.append(_urbg(item))
        else:
            raise LayoutError(f"{item!r} has no GFFT form")
    return [{"urbgidx": i, **g} for i, g in enumerate(out, start=1)]


def layout_columns(layout: RecordLayout) -> dict[str, str]:
    """Short name → column of every field and group of ``layout`` (members included): the
    ``columns`` that make :func:`layout_from_gfft` name a GFFT's fields as ``layout`` does."""
    out: dict[str, str] = {}
    for item in layout.items:
        if isinstance(item, FieldSpec | GroupSpec):
            out[item.name] = item.column
        if isinstance(item, GroupSpec):
            out.update({m.name: m.column for m in item.members})
    return out
