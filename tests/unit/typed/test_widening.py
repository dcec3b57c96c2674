"""Type widening of the typed tables, engine-free: what a table needs to take a layout's
columns (added, widened in place, refused), the ALTER targets of nested changes, the GFFT
column plan that now widens instead of refusing, and the start's conflict line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.config import TYPED_KEY_COLUMNS, ConfigError
from pipeline.payload import LayoutKey, RecordLayout, parse_format_buffer
from pipeline.typed.layouts import FileLayouts, column_types, plan_columns
from pipeline.typed.widening import (
    LayoutConflict,
    _inner,
    _members,
    alter_target,
    change_text,
    conflict_line,
    fits,
    table_plan,
    widen_steps,
    widening,
)

T0 = 0xDD00000000000000  # a STCK in 2023
US = 1 << 12
COLUMNS = {"AA": "name", "AB": "amount", "AC": "count", "AD": "codes"}


def version(fb: str, created: int, gfid: str = "GFB") -> RecordLayout:
    lay = parse_format_buffer(fb, COLUMNS)
    return RecordLayout(lay.items, LayoutKey(10006, 4, gfid, created), "gfft")


def test_packed_and_binary_lengths_map_to_widenings_delta_does_in_place() -> None:
    """P4 → P6 and B2 → B4 (a packed and a binary field made longer) as the layouts type them."""
    p4 = column_types(parse_format_buffer("AB,4,P.", COLUMNS))["amount"]
    p6 = column_types(parse_format_buffer("AB,6,P.", COLUMNS))["amount"]
    b2 = column_types(parse_format_buffer("AC,2,B.", COLUMNS))["count"]
    b4 = column_types(parse_format_buffer("AC,4,B.", COLUMNS))["count"]
    b8 = column_types(parse_format_buffer("AC,8,B.", COLUMNS))["count"]
    assert (p4, p6, b2, b4, b8) == ("decimal(7,0)", "decimal(11,0)", "int", "bigint",
                                   "decimal(20,0)")
    assert widen_steps(p4, p6) == [((), "decimal(11,0)")]
    assert widening(b2, b4) == widening(b4, b8) == "widen"
    assert widening(p6, p4) == "incompatible", "never narrowed"


def test_table_plan_adds_widens_keeps_narrower_and_refuses_the_rest() -> None:
    have = {"isn": "bigint", "name": "string", "amount": "decimal(7,2)",
            "count": "bigint", "codes": "array<int>"}
    wanted = {"name": "string", "amount": "decimal(11,2)", "count": "int",
              "codes": "array<bigint>", "city": "string"}
    plan = table_plan(have, wanted)
    assert plan.added == {"city": "string"}
    assert plan.widened == {"amount": ("decimal(7,2)", "decimal(11,2)"),
                            "codes": ("array<int>", "array<bigint>")}
    assert plan.conflicts == {} and plan.changes
    assert plan.describe() == ["city added", "amount decimal(7,2) -> decimal(11,2)",
                               "codes array<int> -> array<bigint>"]
    assert plan.text() == ("columns added: city; widened: amount decimal(7,2) -> "
                           "decimal(11,2), codes array<int> -> array<bigint>")
    refused = table_plan(have, {"amount": "string", "count": "decimal(9,0)"})
    assert refused.conflicts == {"amount": ("decimal(7,2)", "string"),
                                 "count": ("bigint", "decimal(9,0)")}
    assert not refused.changes
    assert not table_plan(have, {"name": "string", "count": "int"}).changes


def test_alter_targets_of_nested_changes() -> None:
    steps = widen_steps("array<struct<ar:string,as:decimal(7,0),at:int>>",
                        "array<struct<ar:string,as:decimal(11,0),at:bigint>>")
    assert steps == [(("element", "as"), "decimal(11,0)"), (("element", "at"), "bigint")]
    assert [alter_target("ga", path) for path, _ in steps] == [
        "`ga`.element.`as`", "`ga`.element.`at`"]
    assert alter_target("amount", ()) == "`amount`"


def test_change_text() -> None:
    assert change_text([], []) == ""
    assert change_text(["a", "b"], []) == "columns added: a, b"
    assert change_text([], ["c int -> bigint"]) == "widened: c int -> bigint"


SCALARS = st.sampled_from(["tinyint", "smallint", "int", "bigint", "double", "float", "string",
                           "decimal(5,0)", "decimal(7,2)", "decimal(9,3)", "decimal(11,2)",
                           "decimal(20,0)", "decimal(22,2)"])
TYPES = st.recursive(SCALARS, lambda inner: st.one_of(
    inner.map(lambda t: f"array<{t}>"),
    st.tuples(inner, inner).map(lambda p: f"struct<x:{p[0]},y:{p[1]}>")), max_leaves=4)


@given(TYPES, TYPES, TYPES)
def test_widening_is_an_order(a, b, c) -> None:
    """Antisymmetric and transitive: a chain of widenings is one widening, so versions
    widening a column twice (P4 → P5 → P6) end where one step would."""
    assert (widening(a, b) == "same") == (a == b)
    assert not (widening(a, b) == "widen" and widening(b, a) == "widen")
    if widening(a, b) == "widen" and widening(b, c) == "widen":
        assert widening(a, c) == "widen"
    assert fits(a, b) == fits(b, a)


@given(TYPES, TYPES)
def test_steps_rebuild_the_new_type(a, b) -> None:
    """Setting each step's leaf to its type turns ``a`` into ``b``, and each step widens."""
    steps = widen_steps(a, b)
    if steps is None:
        return
    typ = a
    for path, new in steps:
        assert widening(_leaf(typ, path), new) == "widen"
        typ = _set(typ, path, new)
    assert typ == b


def _leaf(typ: str, path: tuple[str, ...]) -> str:
    for seg in path:
        typ = (_inner(typ, "array") if seg == "element"
               else dict(_members(_inner(typ, "struct") or ""))[seg]) or ""
    return typ


def _set(typ: str, path: tuple[str, ...], new: str) -> str:
    if not path:
        return new
    if path[0] == "element":
        return f"array<{_set(_inner(typ, 'array') or '', path[1:], new)}>"
    members = _members(_inner(typ, "struct") or "")
    return "struct<" + ",".join(f"{n}:{_set(t, path[1:], new) if n == path[0] else t}"
                                for n, t in members) + ">"


# ------------------------------------------------------------------ GFFT versions
V1 = version("AA,8,A,AB,4,P,2,AC,2,B.", T0, "GFB1")
V2 = version("AA,8,A,AB,6,P,2,AC,4,B.", T0 + 1000 * US, "GFB2")      # wider P and B
V3 = version("AA,8,A,AB,5,P,2,AC,4,B.", T0 + 2000 * US, "GFB3")      # narrower again
V4 = version("AA,8,A,AB,6,P,3,AC,4,B.", T0 + 3000 * US, "GFB4")      # scale up, digits down


def test_a_wider_version_widens_a_narrower_one_decodes_into_the_tables_type() -> None:
    have = {"name": "string", "amount": "decimal(7,2)", "count": "int"}
    plan = plan_columns(FileLayouts(None, (V1, V2, V3)), have, TYPED_KEY_COLUMNS)
    assert plan.refused == {}
    assert plan.widened == {"amount": "decimal(11,2)", "count": "bigint"}
    assert plan.columns == {"name": "string", "amount": "decimal(11,2)", "count": "bigint"}
    assert plan.added == {}
    again = plan_columns(FileLayouts(None, (V1, V2, V3)), plan.columns, TYPED_KEY_COLUMNS)
    assert (again.widened, again.added, again.refused) == ({}, {}, {}), "a replay: nothing"


def test_a_version_delta_cannot_widen_to_is_refused_with_the_reason() -> None:
    have = {"name": "string", "amount": "decimal(11,2)", "count": "bigint"}
    plan = plan_columns(FileLayouts(None, (V1, V2, V4)), have, TYPED_KEY_COLUMNS)
    assert list(plan.refused) == [V4.key]
    assert ("column amount is decimal(11,2) in the tables, decimal(11,3) in this layout "
            "(not a widening Delta does in place)") in plan.refused[V4.key]
    assert plan.columns["amount"] == "decimal(11,2)"
    assert FileLayouts(None, (V1, V2, V4)).newest(plan.refused) is V2
    assert FileLayouts(None, (V1, V2, V4)).newest() is V4


def test_columns_new_in_the_batch_take_their_widest_type_as_added() -> None:
    plan = plan_columns(FileLayouts(None, (V1, V2)), {"name": "string"}, TYPED_KEY_COLUMNS)
    assert plan.added == {"amount": "decimal(11,2)", "count": "bigint"}
    assert plan.widened == {}


def test_the_start_refuses_a_conf_layout_with_one_line() -> None:
    line = conflict_line("COLOR/10006/4", "AB", "code", "current_color_4", "decimal(16,0)",
                         "string")
    assert "\n" not in line
    assert line.startswith("layouts COLOR/10006/4: the format buffer now reads AB as string, "
                           "but column code of current_color_4 is decimal(16,0)")
    assert "map AB to a new column (layouts[].columns, e.g. AB: code_new)" in line
    with pytest.raises(ConfigError, match="column code of current_color_4"):
        raise LayoutConflict(line)
