"""A refresh/define file (truncate at a cutoff) in the current-state and history models.

Whatever batch the refresh lands in, and whatever arrives around it (late, twice, in any
order), the current state ends as the changes since the cutoff applied in version order, and
the history as the history of every change with intervals ending at the cutoff at the latest.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from pipeline.typed import (
    apply_batch,
    apply_history_batch,
    history_of,
    since_cutoff,
    tombstones,
    truncate,
    truncate_history,
    visible,
)
from pipeline.typed.history import closed_at
from tests.unit.typed.test_versioning import T0, VALUES, arrivals, change, in_version_order


def _at(sec: float):
    return T0 + timedelta(seconds=sec)


@st.composite
def refreshed(draw: st.DrawFn) -> tuple[list[dict], list[list[dict]], int, object]:
    """Changes, their batches, the batch after which the refresh lands, and its cutoff."""
    changes, batches = draw(arrivals())
    where = draw(st.integers(0, len(batches)))
    return changes, batches, where, _at(draw(st.sampled_from([0.5, 1, 1.5, 2, 2.5, 3.5])))


def test_since_cutoff_keeps_the_cutoff_itself_like_the_truncate() -> None:
    assert since_cutoff(change(1, "upsert", 2), _at(2))
    assert not since_cutoff(change(1, "upsert", 1), _at(2))
    assert since_cutoff(change(1, "upsert", 1), None)
    assert not since_cutoff({**change(1, "upsert", 1), "commit_time": None}, _at(0))


def test_a_late_change_from_before_the_refresh_does_not_come_back() -> None:
    state = apply_batch({}, [change(1, "upsert", 1, color="OLD"),
                             change(2, "delete", 1, tsnr=2)], VALUES, "remove")
    state = truncate(state, _at(5))
    assert state == {}, "rows and tombstones older than the cutoff go"
    late = [change(1, "upsert", 2, tsnr=3, color="LATE"), change(3, "upsert", 6, tsnr=9,
                                                                 color="NEW")]
    after = apply_batch(state, late, VALUES, "remove", cutoff=_at(5))
    assert {i: r["color"] for i, r in visible(after, "remove").items()} == {3: "NEW"}
    # without the cutoff the late change would resurrect ISN 1: the guard is what keeps it out
    assert 1 in apply_batch(state, late, VALUES, "remove")


@given(refreshed(), st.sampled_from(["remove", "mark"]))
def test_current_state_ends_as_the_changes_since_the_cutoff(case, deletes) -> None:
    changes, batches, where, cutoff = case
    state: dict[int, dict] = {}
    for i, batch in enumerate(batches):
        if i == where:
            state = truncate(state, cutoff)
        state = apply_batch(state, batch, VALUES, deletes,
                            cutoff=cutoff if i >= where else None)
    if where == len(batches):
        state = truncate(state, cutoff)
    expect = in_version_order([c for c in changes if c["commit_time"] >= cutoff], deletes)
    assert visible(state, deletes) == visible(expect, deletes)
    assert tombstones(state, deletes) == tombstones(expect, deletes)


@given(refreshed())
def test_history_ends_as_the_history_of_the_set_closed_at_the_cutoff(case) -> None:
    changes, batches, where, cutoff = case
    table: dict = {}
    for i, batch in enumerate(batches):
        if i == where:
            table = truncate_history(table, cutoff)
        table = apply_history_batch(table, batch, VALUES, (cutoff,) if i >= where else ())
    if where == len(batches):
        table = truncate_history(table, cutoff)
    assert table == history_of(changes, VALUES, (cutoff,))
    for row in table.values():
        if row["valid_from"] < cutoff:
            assert not row["is_current"] and row["valid_to"] <= cutoff
        assert row["is_current"] == (row["valid_to"] is None)


def test_the_open_row_is_closed_at_the_refresh_and_a_late_one_lands_closed() -> None:
    table = apply_history_batch({}, [change(1, "upsert", 1, color="A")], VALUES)
    table = truncate_history(table, _at(5))
    (row,) = table.values()
    assert (row["valid_to"], row["is_current"]) == (_at(5), False)
    table = apply_history_batch(table, [change(1, "upsert", 3, tsnr=2, color="LATE"),
                                        change(1, "upsert", 7, tsnr=3, color="NEW")],
                                VALUES, (_at(5),))
    rows = sorted(table.values(), key=lambda r: r["valid_from"])
    assert [(r["color"], r["valid_to"], r["is_current"]) for r in rows] == [
        ("A", _at(3), False), ("LATE", _at(5), False), ("NEW", None, True)]


def test_closed_at_takes_the_first_cutoff_after_the_start() -> None:
    cuts = (_at(5), _at(10))
    assert closed_at(_at(1), _at(7), cuts) == _at(5)
    assert closed_at(_at(6), None, cuts) == _at(10)
    assert closed_at(_at(6), _at(8), cuts) == _at(8)
    assert closed_at(_at(5), None, cuts) == _at(10), "a version at the cutoff survives it"
    assert closed_at(_at(11), None, cuts) is None
