"""The SCD type 2 history model: intervals by version, whatever the arrival order."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given

from pipeline.typed import apply_batch, apply_history_batch, history_of
from pipeline.typed.versioning import version_of
from tests.unit.typed.test_versioning import T0, VALUES, arrivals, change


def _replay(batches: list[list[dict]]) -> dict:
    table: dict = {}
    for batch in batches:
        table = apply_history_batch(table, batch, VALUES)
    return table


@given(arrivals())
def test_any_arrival_order_and_duplication_gives_the_history_of_the_set(case) -> None:
    changes, batches = case
    assert _replay(batches) == history_of(changes, VALUES)


@given(arrivals())
def test_intervals_tile_each_isn_and_the_current_row_is_the_current_state(case) -> None:
    changes, _ = case
    table = history_of(changes, VALUES)
    current = apply_batch({}, changes, VALUES, "mark")
    for isn in {k[0] for k in table}:
        rows = sorted((r for k, r in table.items() if k[0] == isn), key=version_of)
        assert [r["valid_from"] for r in rows[1:]] == [r["valid_to"] for r in rows[:-1]]
        assert [r["is_current"] for r in rows] == [False] * (len(rows) - 1) + [True]
        assert rows[-1]["valid_to"] is None
        last = {k: v for k, v in rows[-1].items()
                if k not in ("valid_from", "valid_to", "is_current")}
        assert last == current[isn]


def test_a_late_change_splits_an_interval_and_a_duplicate_changes_nothing() -> None:
    first = [change(1, "upsert", 10, tsnr=1, color="A"), change(1, "upsert", 30, tsnr=3,
                                                                 color="C")]
    table = apply_history_batch({}, first, VALUES)
    late = change(1, "upsert", 20, tsnr=2, color="B")
    table = apply_history_batch(table, [late], VALUES)
    at = [(r["color"], r["valid_from"], r["valid_to"], r["is_current"])
          for r in sorted(table.values(), key=version_of)]
    sec = [T0 + timedelta(seconds=s) for s in (10, 20, 30)]
    assert at == [("A", sec[0], sec[1], False), ("B", sec[1], sec[2], False),
                  ("C", sec[2], None, True)]
    assert apply_history_batch(table, [late, *first], VALUES) == table


def test_deletes_and_resends_are_history_rows() -> None:
    table = apply_history_batch({}, [change(1, "upsert", 1, color="A"),
                                      change(1, "unverify", 2, tsnr=2, color="A"),
                                      change(1, "delete", 3, tsnr=3, color="A")], VALUES)
    flags = [(r["verified"], r["deleted"]) for r in sorted(table.values(), key=version_of)]
    assert flags == [(True, False), (False, False), (True, True)]


def test_the_original_replaces_its_resend_at_the_same_version() -> None:
    resend = change(1, "unverify", 5, color="OLD")
    table = apply_history_batch({}, [resend], VALUES)
    table = apply_history_batch(table, [change(1, "upsert", 5, color="NEW")], VALUES)
    (row,) = table.values()
    assert row["verified"] and row["color"] == "NEW"
