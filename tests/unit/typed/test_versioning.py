"""The version rules of the current-state tables, without Spark (reference model of the MERGE)."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from pipeline.typed import (
    action_of,
    apply_batch,
    apply_change,
    latest_per_isn,
    newer,
    tombstones,
    visible,
)
from pipeline.typed.versioning import order_key

T0 = datetime(2025, 1, 1, 12, 0, 0)
VALUES = ["color"]


def change(isn: int, action: str, sec: int, *, tsnr: int = 1, rsnr: int = 1, epoch: int = 1,
           color: str | None = None, destination: str = "OUT1") -> dict:
    return {"isn": isn, "action": action, "commit_time": T0 + timedelta(seconds=sec),
            "epoch": epoch, "tsnr": tsnr, "rsnr": rsnr, "color": color,
            "destination": destination}


# A set of changes as the replicator could send them: one record per (ISN, order key).
changes_st = st.lists(
    st.builds(change, isn=st.integers(1, 3), action=st.sampled_from(["upsert", "delete",
                                                                     "unverify"]),
              sec=st.integers(0, 3), tsnr=st.integers(0, 2), rsnr=st.integers(1, 2),
              color=st.sampled_from(["RED", "BLUE", None]),
              destination=st.sampled_from(["OUT1", "OUT2"])),
    max_size=12).map(lambda xs: list({(x["isn"], order_key(x)): x for x in xs}.values()))


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[list[dict], list[list[dict]]]:
    """A set of changes, and the batches they arrive in: any order, some twice."""
    changes = draw(changes_st)
    twice = draw(st.lists(st.sampled_from(changes), max_size=4)) if changes else []
    stream = draw(st.permutations(changes + twice))
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    bounds = [0, *cuts, len(stream)]
    return changes, [stream[a:b] for a, b in pairwise(bounds)]


def in_version_order(changes: list[dict], deletes: str) -> dict[int, dict]:
    state: dict[int, dict] = {}
    for c in sorted(changes, key=order_key):
        state = apply_batch(state, [c], VALUES, deletes)
    return state


@given(arrivals(), st.sampled_from(["remove", "mark"]))
def test_any_arrival_order_and_duplication_ends_as_version_order(case, deletes) -> None:
    changes, batches = case
    state: dict[int, dict] = {}
    for batch in batches:
        state = apply_batch(state, batch, VALUES, deletes)
    expect = in_version_order(changes, deletes)
    assert visible(state, deletes) == visible(expect, deletes)
    assert tombstones(state, deletes) == tombstones(expect, deletes)


@given(arrivals())
def test_remove_mode_never_shows_an_isn_whose_newest_change_is_a_delete(case) -> None:
    changes, batches = case
    state: dict[int, dict] = {}
    for batch in batches:
        state = apply_batch(state, batch, VALUES, "remove")
    newest = latest_per_isn(changes)
    shown = visible(state, "remove")
    assert set(shown) == {i for i, c in newest.items() if c["action"] != "delete"}
    assert all(not row["deleted"] for row in shown.values())
    assert set(tombstones(state, "remove")) == {i for i, c in newest.items()
                                                if c["action"] == "delete"}


def test_action_of_record_types() -> None:
    assert action_of("D", False) == "delete"
    assert action_of("D", True) == "delete"
    assert action_of("I", True) == "upsert"
    assert action_of("R", True) == "upsert"
    assert action_of("U", False) == "unverify"  # a resend: before images only


def test_version_orders_commit_time_before_epoch_tsnr_rsnr() -> None:
    old = change(1, "upsert", 0, tsnr=9, epoch=3)
    assert newer(change(1, "upsert", 1, tsnr=1, epoch=1), old)
    assert newer(change(1, "upsert", 0, tsnr=9, epoch=3, rsnr=2), old)
    assert not newer(dict(old), old), "the same change again is a no-op"
    assert newer(old, None)


def test_ties_go_to_the_later_destination_and_to_the_original_over_its_resend() -> None:
    a, b = change(1, "upsert", 5, destination="OUT1"), change(1, "upsert", 5, destination="OUT2")
    assert latest_per_isn([a, b])[1] is b and latest_per_isn([b, a])[1] is b
    resend = change(1, "unverify", 5, destination="OUT2")
    assert newer(b, resend) and not newer(resend, b)


def test_latest_per_isn_keeps_the_newest_change_whatever_the_order() -> None:
    rows = [change(1, "upsert", 5, color="B"), change(1, "upsert", 2, color="A"),
            change(2, "delete", 1), change(1, "upsert", 5, rsnr=2, color="C")]
    best = latest_per_isn(rows)
    assert best[1]["color"] == "C" and best[2]["action"] == "delete"
    assert latest_per_isn(reversed(rows)) == best


def test_late_transaction_does_not_overwrite_newer_state() -> None:
    state = apply_batch({}, [change(1, "upsert", 10, tsnr=5, color="NEW")], VALUES, "remove")
    state = apply_batch(state, [change(1, "upsert", 3, tsnr=2, color="OLD")], VALUES, "remove")
    assert state[1]["color"] == "NEW" and state[1]["tsnr"] == 5


def test_duplicate_is_harmless() -> None:
    batch = [change(1, "upsert", 1, color="X")]
    once = apply_batch({}, batch, VALUES, "remove")
    assert apply_batch(once, batch, VALUES, "remove") == once


def test_delete_remove_keeps_a_tombstone_a_late_older_change_cannot_pass() -> None:
    state = apply_batch({}, [change(1, "upsert", 1, color="X")], VALUES, "remove")
    state = apply_batch(state, [change(1, "delete", 3, color="X")], VALUES, "remove")
    assert visible(state, "remove") == {}
    assert tombstones(state, "remove") == {1: (T0 + timedelta(seconds=3), 1, 1, 1)}
    late = apply_batch(state, [change(1, "upsert", 2, color="Y"),
                               change(1, "unverify", 2, rsnr=2)], VALUES, "remove")
    assert late == state, "a late older change must not resurrect a removed row"
    back = apply_batch(state, [change(1, "upsert", 4, color="Z")], VALUES, "remove")
    assert visible(back, "remove")[1]["color"] == "Z" and tombstones(back, "remove") == {}


def test_delete_mark_shows_the_before_image_and_keeps_the_version() -> None:
    state = apply_batch({}, [change(1, "upsert", 1, color="X")], VALUES, "mark")
    marked = apply_batch(state, [change(1, "delete", 2, color="X")], VALUES, "mark")
    assert marked[1]["deleted"] is True and marked[1]["color"] == "X"
    late = apply_batch(marked, [change(1, "upsert", 1, rsnr=0, color="Y")], VALUES, "mark")
    assert late == marked
    assert tombstones(marked, "mark") == {}


def test_tombstones_are_purged_after_their_retention() -> None:
    keep = timedelta(seconds=100)
    state = apply_batch({}, [change(1, "delete", 10)], VALUES, "remove", keep)
    late = change(1, "upsert", 5, color="LATE")
    # within retention (newest commit 60 s after the delete): still buried
    state = apply_batch(state, [change(2, "upsert", 70, color="A")], VALUES, "remove", keep)
    assert apply_batch(state, [late], VALUES, "remove", keep) == state
    # a tombstone the batch writes is kept, even past its retention; one the batch does not
    # change is purged after the batch's own (older) changes were refused
    kept = apply_batch(state, [change(2, "upsert", 500), change(1, "delete", 20)], VALUES,
                       "remove", keep)
    assert tombstones(kept, "remove") == {1: (T0 + timedelta(seconds=20), 1, 1, 1)}
    gone = apply_batch(state, [change(2, "upsert", 500), late], VALUES, "remove", keep)
    assert tombstones(gone, "remove") == {} and 1 not in gone
    # a batch committed more than 100 s after the delete purges it: from then on the late
    # older change brings the row back (the documented limit of the retention)
    state = apply_batch(state, [change(2, "upsert", 111, color="B")], VALUES, "remove", keep)
    assert tombstones(state, "remove") == {}
    assert visible(apply_batch(state, [late], VALUES, "remove", keep), "remove")[1]["color"] \
        == "LATE"


def test_resend_unverifies_with_its_before_image_and_the_next_after_image_verifies() -> None:
    state = apply_batch({}, [change(1, "upsert", 1, color="X")], VALUES, "remove")
    state = apply_batch(state, [change(1, "unverify", 2, tsnr=2, color="X")], VALUES, "remove")
    assert state[1] == {**state[1], "color": "X", "verified": False, "tsnr": 2}
    state = apply_batch(state, [change(1, "upsert", 3, tsnr=0, color="Z")], VALUES, "remove")
    assert state[1]["verified"] is True and state[1]["color"] == "Z"


def test_resend_of_unknown_isn_inserts_an_unverified_row() -> None:
    row = apply_change(None, change(7, "unverify", 1), VALUES, "remove")
    assert row is not None and row["verified"] is False and row["color"] is None


def test_initial_state_racing_live_updates() -> None:
    live = [change(1, "upsert", 10, tsnr=4, color="LIVE")]
    initial = [change(1, "upsert", 5, tsnr=0, color="INIT"),
               change(2, "upsert", 5, tsnr=0, rsnr=2, color="INIT2")]
    a = apply_batch(apply_batch({}, live, VALUES, "remove"), initial, VALUES, "remove")
    b = apply_batch(apply_batch({}, initial, VALUES, "remove"), live, VALUES, "remove")
    assert a == b
    assert a[1]["color"] == "LIVE" and a[2]["color"] == "INIT2"


def test_an_initial_state_record_is_as_new_as_its_read() -> None:
    """URBRTIME for R records (their pseudo-transaction is stamped after the chunk's last
    read), URBTTTIM for every live change, and for an R record without a read time."""
    from datetime import datetime

    from pipeline.typed.versioning import change_time

    read, commit = datetime(2004, 6, 9, 15, 22, 52, 384870), datetime(2004, 6, 9, 15, 22, 53)
    assert change_time("R", read, commit) == read
    assert change_time("R", None, commit) == commit
    for live in ("I", "U", "D"):
        assert change_time(live, read, commit) == commit
