"""The version rules of the current-state tables, without Spark (reference model of the MERGE)."""

from __future__ import annotations

from datetime import datetime, timedelta

from pipeline.typed import action_of, apply_batch, apply_change, latest_per_isn, newer

T0 = datetime(2025, 1, 1, 12, 0, 0)
VALUES = ["color"]


def change(isn: int, action: str, sec: int, *, tsnr: int = 1, rsnr: int = 1, epoch: int = 1,
           color: str | None = None, destination: str = "OUT1") -> dict:
    return {"isn": isn, "action": action, "commit_time": T0 + timedelta(seconds=sec),
            "epoch": epoch, "tsnr": tsnr, "rsnr": rsnr, "color": color,
            "destination": destination}


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


def test_latest_per_isn_keeps_the_newest_change_whatever_the_order() -> None:
    rows = [change(1, "upsert", 5, color="B"), change(1, "upsert", 2, color="A"),
            change(2, "delete", 1), change(1, "upsert", 5, rsnr=2, color="C")]
    best = latest_per_isn(rows)
    assert best[1]["color"] == "C" and best[2]["action"] == "delete"
    assert latest_per_isn(reversed(rows)) == best


def test_latest_per_isn_breaks_ties_by_destination() -> None:
    a, b = change(1, "upsert", 5, destination="OUT1"), change(1, "upsert", 5, destination="OUT2")
    assert latest_per_isn([a, b])[1] is b and latest_per_isn([b, a])[1] is b


def test_late_transaction_does_not_overwrite_newer_state() -> None:
    state = apply_batch({}, [change(1, "upsert", 10, tsnr=5, color="NEW")], VALUES, "remove")
    state = apply_batch(state, [change(1, "upsert", 3, tsnr=2, color="OLD")], VALUES, "remove")
    assert state[1]["color"] == "NEW" and state[1]["tsnr"] == 5


def test_duplicate_is_harmless() -> None:
    batch = [change(1, "upsert", 1, color="X")]
    once = apply_batch({}, batch, VALUES, "remove")
    assert apply_batch(once, batch, VALUES, "remove") == once


def test_delete_remove_and_mark() -> None:
    state = apply_batch({}, [change(1, "upsert", 1, color="X")], VALUES, "remove")
    assert apply_batch(state, [change(1, "delete", 2)], VALUES, "remove") == {}
    marked = apply_batch(state, [change(1, "delete", 2)], VALUES, "mark")
    assert marked[1]["deleted"] is True and marked[1]["color"] == "X"
    # marked rows keep the delete's version: a late older update cannot resurrect them
    late = apply_batch(marked, [change(1, "upsert", 1, rsnr=0, color="Y")], VALUES, "mark")
    assert late == marked


def test_resend_unverifies_and_the_next_after_image_verifies() -> None:
    state = apply_batch({}, [change(1, "upsert", 1, color="X")], VALUES, "remove")
    state = apply_batch(state, [change(1, "unverify", 2, tsnr=2)], VALUES, "remove")
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
