"""Which layout decodes an image of a configured file, and which columns its tables carry.

A configured file (conf ``layouts[]``) may have a format-buffer layout (conf) and GFFT layout
versions the stream sent for its subscription (the ``layouts`` table). Rules, engine-free so
the Spark stage and the tests share them:

* **Which version**: the newest GFFT version created (URBFTIM1) at or before the transaction's
  commit time (URBTTTIM); before the first version the conf layout; a file with no conf layout
  (``gfft: require``, or ``prefer`` without a format buffer) uses its oldest version there (the
  replicator sends a GFFT ahead of the data it describes; an earlier commit time is clock skew
  or data that predates the GFFT and was laid out the same way). No layout at all: the image
  is quarantined.
* **Columns**: the conf's ``columns`` by short name, else the GFFT long name in snake case
  (``pipeline.payload.gfft``). The tables carry the union: their own columns first, then new
  ones in the order conf, versions by creation time. A newer version's new fields add columns
  (additive schema evolution); an image decoded with an older version has null there.
* **Type changes**: a column's type is the one the tables have (else the first layout that
  names it). A version that reads a column wider, in a way Delta widens in place
  (``pipeline.typed.widening``: P4 → P6 is decimal(7,0) → decimal(11,0), B2 → B4 int →
  bigint), widens it (``widened``); one that reads it narrower decodes into the tables' type.
  A version that gives an existing column a type neither fits (alpha ↔ numeric, a scale the
  column cannot take …), or names a reserved column, is *refused*: its images are
  quarantined with the reason (the bytes stay, and decoding them with another version would
  misread every field after the changed one), and the conflict is recorded once in
  ``schema_events``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from pipeline.payload import Filler, RecordLayout, spark_ddl
from pipeline.payload.layout import LayoutKey
from pipeline.reassembly.tables import stck_to_datetime
from pipeline.typed.widening import fits, normal_type, split_top, widen_steps
from pipeline.urb.stck import stck_to_unix_us

_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")


def column_types(layout: RecordLayout) -> dict[str, str]:
    """Column → Spark type (normalised like :func:`normal_type`) of a layout, in order."""
    ddl = spark_ddl(RecordLayout(tuple(i for i in layout.items if not isinstance(i, Filler))))
    out: dict[str, str] = {}
    for part in split_top(ddl):
        name, _, typ = part.strip().partition(" ")
        out[name.strip("`").replace("``", "`")] = normal_type(typ)
    return out


def version_label(key: LayoutKey | None) -> str:
    """How a version is named in reasons: ``GFB1@2025-01-01T12:00:00.000001+00:00``."""
    if key is None:
        return "conf"
    created = stck_to_datetime(key.created)
    return f"{key.gfid or '?'}@{created.isoformat() if created else 0}"


@dataclass(frozen=True)
class FileLayouts:
    """One file's layouts: ``conf`` (None without a format buffer) and GFFT ``versions``."""

    conf: RecordLayout | None
    versions: tuple[RecordLayout, ...] = ()

    def __post_init__(self) -> None:
        ordered = tuple(sorted({v.key: v for v in self.versions}.values(),
                               key=lambda v: (v.key.created, v.key.gfid)))  # type: ignore[union-attr]
        object.__setattr__(self, "versions", ordered)

    def pick(self, commit_us: int | None) -> RecordLayout | None:
        """The layout of an image committed at ``commit_us`` (µs since 1970; None: unknown)."""
        if commit_us is not None:
            for v in reversed(self.versions):
                if stck_to_unix_us(v.key.created) <= commit_us:  # type: ignore[union-attr]
                    return v
        if self.conf is not None:
            return self.conf
        return self.versions[0] if self.versions else None

    def newest(self, refused: Collection[LayoutKey] = ()) -> RecordLayout | None:
        """The layout the file's next images are decoded with: the newest version the tables
        take (not ``refused``), else the conf layout (None: no layout yet)."""
        taken = [v for v in self.versions if v.key not in refused]
        return taken[-1] if taken else self.conf


@dataclass(frozen=True)
class ColumnPlan:
    """The tables' value columns and the versions they cannot take."""

    columns: dict[str, str]                      # column -> type, the tables' order
    added: dict[str, str] = field(default_factory=dict)  # new columns the tables lack
    widened: dict[str, str] = field(default_factory=dict)  # column -> its new, wider type
    refused: dict[LayoutKey, str] = field(default_factory=dict)  # version -> reason


def plan_columns(layouts: FileLayouts, have: Mapping[str, str] | None,
                 reserved: frozenset[str] = frozenset()) -> ColumnPlan:
    """Columns for the tables given what they ``have`` (value columns → type; None: the tables
    do not exist yet), the conf layout and the versions in creation order."""
    columns = {c: normal_type(t) for c, t in (have or {}).items()}
    added: dict[str, str] = {}
    widened: dict[str, str] = {}
    refused: dict[LayoutKey, str] = {}
    for lay in _in_order(layouts):
        types = column_types(lay)
        problem = _problem(lay, types, columns, reserved)
        if problem and lay.key is not None:
            refused[lay.key] = f"layout {version_label(lay.key)} refused: {problem}"
            continue
        for c, t in types.items():
            if c not in columns:
                columns[c] = added[c] = t
            elif widen_steps(columns[c], t):
                columns[c] = t
                if c in added:
                    added[c] = t
                else:
                    widened[c] = t
    if have is None:
        return ColumnPlan(columns, refused=refused)
    return ColumnPlan(columns, added, widened, refused)


def _in_order(layouts: FileLayouts) -> Sequence[RecordLayout]:
    return [*([layouts.conf] if layouts.conf is not None else []), *layouts.versions]


def _problem(lay: RecordLayout, types: Mapping[str, str], columns: Mapping[str, str],
             reserved: frozenset[str]) -> str | None:
    names = [i.column for i in lay.items if not isinstance(i, Filler)]
    if len(set(names)) != len(names):
        return "two fields map to the same column"
    for c, t in types.items():
        if c in reserved or not _IDENTIFIER.match(c):
            return f"column {c!r} is reserved or not a lower-case identifier (map it in columns)"
        if c in columns and not fits(t, columns[c]):
            return (f"column {c} is {columns[c]} in the tables, {t} in this layout (not a "
                    "widening Delta does in place)")
    return None
