"""Which column type changes the typed tables take in place (Delta type widening), and how.

A layout change (a conf format buffer edited before a restart, a newer GFFT version, an AUTI
change field length/format the layout already reads) may give a column a wider type: P4 →
P6 is ``decimal(7,0)`` → ``decimal(11,0)``, B2 → B4 ``int`` → ``bigint``. Delta changes such a
column in place (``ALTER TABLE … ALTER COLUMN … TYPE``, a metadata-only commit: old files keep
their type and are read as the new one) once the table has ``delta.enableTypeWidening``.
Anything else — a narrower type, text ↔ number, a new member inside a PE group — would need
the table rewritten: the change is refused (conf: the job does not start; GFFT: the version's
images are quarantined; AUTI: the file is stale until the layout is changed).

What delta-spark 4.4.0 (Spark 4.2) does in place, found by trying each change with
``ALTER COLUMN … TYPE`` on a table with ``delta.enableTypeWidening = true``:

* accepted: tinyint → smallint → int → bigint; tinyint/smallint/int → decimal(p,s) with
  p − s ≥ 10 and bigint → decimal(p,s) with p − s ≥ 20 (smallint → decimal(6,0) is refused:
  Delta asks for the digits of an int whatever the integer's size); decimal(p1,s1) →
  decimal(p2,s2) with s2 ≥ s1 and p2 − s2 ≥ p1 − s1 (decimal(7,2) → decimal(9,3) yes,
  decimal(9,2) → decimal(9,3) or decimal(10,4) no); tinyint/smallint/int → double; float →
  double; the same inside arrays and structs (``ALTER COLUMN c.element TYPE …``,
  ``c.element.y``);
* refused: any narrowing, bigint → double, decimal → double, int → float, string ↔ anything;
* without ``delta.enableTypeWidening`` even int → bigint is refused;
* an append whose column is narrower than the table's (decimal(7,0) data into a decimal(11,0)
  column) is refused ("Failed to merge fields"), a MERGE casts it: writers must produce the
  table's type;
* enabling the property adds the ``typeWidening`` table feature (reader version 3): Spark with
  delta-spark reads the table, the ``deltalake`` package (1.6.6) refuses to (its reader does
  not support the feature yet).

Plain Python on type strings as Spark's ``simpleString`` writes them (``decimal(7,2)``,
``array<struct<x:int,y:decimal(7,2)>>``), so the rules are unit-tested without Spark.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pipeline.config import ConfigError

#: A path inside a column: "element" for an array's element, else a struct member's name.
Step = tuple[tuple[str, ...], str]  # (path inside the column, new type of that leaf)

_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_INTEGERS = ("tinyint", "smallint", "int", "bigint")
#: Integer digits a decimal needs to take an integer type in place (Delta's rule, above).
_DECIMAL_DIGITS = {"tinyint": 10, "smallint": 10, "int": 10, "bigint": 20}
_TO_DOUBLE = frozenset({"tinyint", "smallint", "int", "float"})
ARRAY_ELEMENT = "element"


def normal_type(spark_type: str) -> str:
    """A Spark type string as ``simpleString`` writes it: no backticks, no spaces, lower case."""
    return spark_type.replace("`", "").replace(" ", "").lower()


def widen_steps(old: str, new: str) -> list[Step] | None:
    """The in-place changes that turn a column of type ``old`` into ``new``: ``[]`` when they
    are the same, None when Delta cannot do it in place (see the module doc)."""
    return _steps(normal_type(old), normal_type(new), ())


def widening(old: str, new: str) -> str:
    """``same``, ``widen`` (Delta type widening changes the column in place) or
    ``incompatible`` (the column cannot hold the new values: the layout must change)."""
    steps = widen_steps(old, new)
    return "incompatible" if steps is None else "widen" if steps else "same"


def fits(layout_type: str, table_type: str) -> bool:
    """Whether a column of ``table_type`` holds every value of ``layout_type`` as it is or
    after widening: the same type, a narrower one (a MERGE casts it up), or a wider one."""
    return (widen_steps(layout_type, table_type) is not None
            or widen_steps(table_type, layout_type) is not None)


def _steps(old: str, new: str, path: tuple[str, ...]) -> list[Step] | None:
    if old == new:
        return []
    a, b = _inner(old, "array"), _inner(new, "array")
    if a is not None or b is not None:
        return None if a is None or b is None else _steps(a, b, (*path, ARRAY_ELEMENT))
    sa, sb = _inner(old, "struct"), _inner(new, "struct")
    if sa is not None or sb is not None:
        if sa is None or sb is None:
            return None
        ma, mb = _members(sa), _members(sb)
        if [n for n, _ in ma] != [n for n, _ in mb]:
            return None  # members added, removed or reordered: not in place
        out: list[Step] = []
        for (name, ta), (_, tb) in zip(ma, mb, strict=True):
            inner = _steps(ta, tb, (*path, name))
            if inner is None:
                return None
            out += inner
        return out
    return [(path, new)] if _atom_widens(old, new) else None


def _atom_widens(old: str, new: str) -> bool:
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) > _INTEGERS.index(old)
    if new == "double":
        return old in _TO_DOUBLE
    b = _DECIMAL.match(new)
    if b is None:
        return False
    p2, s2 = int(b[1]), int(b[2])
    if old in _INTEGERS:
        return p2 - s2 >= _DECIMAL_DIGITS[old]
    a = _DECIMAL.match(old)
    if a is None:
        return False
    p1, s1 = int(a[1]), int(a[2])
    return s2 >= s1 and p2 - s2 >= p1 - s1


def _inner(typ: str, kind: str) -> str | None:
    """``array<T>`` → ``T`` (``struct<…>`` → its member list) when ``typ`` is that kind."""
    if typ.startswith(f"{kind}<") and typ.endswith(">"):
        return typ[len(kind) + 1:-1]
    return None


def _members(body: str) -> list[tuple[str, str]]:
    """``x:int,y:decimal(7,2)`` → [(x, int), (y, decimal(7,2))]."""
    return [(p.partition(":")[0], p.partition(":")[2]) for p in split_top(body)]


def split_top(text: str) -> list[str]:
    """Split a type list or DDL at the commas outside <> and ()."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += 1 if ch in "<(" else -1 if ch in ">)" else 0
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def alter_target(column: str, path: tuple[str, ...]) -> str:
    """The ALTER COLUMN target of a step: ```c```, ```c`.element``, ```g`.element.`y```."""
    return ".".join([_quote(column), *(s if s == ARRAY_ELEMENT else _quote(s) for s in path)])


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# ------------------------------------------------------------------------- one table
@dataclass(frozen=True)
class TablePlan:
    """What one table needs to take a layout's columns: ``added`` (column → type),
    ``widened`` (column → (table type, new type)), ``conflicts`` (column → (table type,
    layout type): neither the same, nor narrower, nor a widening Delta does in place)."""

    added: dict[str, str] = field(default_factory=dict)
    widened: dict[str, tuple[str, str]] = field(default_factory=dict)
    conflicts: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def changes(self) -> bool:
        return bool(self.added or self.widened)

    def describe(self) -> list[str]:
        """``color added``, ``code decimal(7,0) -> decimal(11,0)`` …"""
        return ([f"{c} added" for c in self.added]
                + [f"{c} {old} -> {new}" for c, (old, new) in self.widened.items()])

    def text(self) -> str:
        return change_text(self.added, [f"{c} {old} -> {new}"
                                        for c, (old, new) in self.widened.items()])


def change_text(added: Iterable[str], widened: Iterable[str]) -> str:
    """``columns added: a, b; widened: c decimal(7,0) -> decimal(11,0)`` ("" for none)."""
    added, widened = list(added), list(widened)
    return "; ".join([*([f"columns added: {', '.join(added)}"] if added else []),
                      *([f"widened: {', '.join(widened)}"] if widened else [])])


def table_plan(have: Mapping[str, str], wanted: Mapping[str, str]) -> TablePlan:
    """Compare a table's columns (``have``: column → type) with the ones a layout decodes.

    A column the layout reads narrower than the table is left as it is (its values fit; the
    typed stage decodes them into the table's type), a wider one is widened."""
    have = {c: normal_type(t) for c, t in have.items()}
    plan = TablePlan()
    for column, typ in wanted.items():
        typ = normal_type(typ)
        if column not in have:
            plan.added[column] = typ
        elif widen_steps(have[column], typ):
            plan.widened[column] = (have[column], typ)
        elif not fits(typ, have[column]):
            plan.conflicts[column] = (have[column], typ)
    return plan


class LayoutConflict(ConfigError):
    """A configured layout reads a column with a type its existing table cannot take in place
    (the job's start refuses it: exit code 2, like any other conf error)."""


def conflict_line(layout: str, field_name: str, column: str, table: str, old: str,
                  new: str) -> str:
    """The one line an operator gets for a conf layout its tables cannot take."""
    return (f"layouts {layout}: the format buffer now reads {field_name} as {new}, but column "
            f"{column} of {table} is {old}, and Delta only widens a column in place (int -> "
            f"bigint, decimal(7,0) -> decimal(11,0) ...): map {field_name} to a new column "
            f"(layouts[].columns, e.g. {field_name}: {column}_new), or restore its old length "
            f"and format, or move the file's typed tables aside so the job creates them anew")
