"""tsnr sequence: next expected, wrap-around, duplicates, epochs, initial state."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reassembly.events import (
    DuplicateDropped,
    EpochStarted,
    GapOpened,
    GapUnrecoverable,
    LostContinuation,
    StatusReceived,
)
from pipeline.reassembly.sequence import (
    RING,
    DupWindow,
    Sequence,
    Verdict,
    classify,
    to_tsnr,
    unwrap,
)
from tests.unit.reassembly.builders import (
    RESTARTED,
    Feed,
    Harness,
    resend_of,
    status,
    statuses,
    txn,
)

TOP = 4294967295


def only(events: list, cls: type) -> list:
    return [e for e in events if isinstance(e, cls)]


@pytest.mark.parametrize(("tsnr", "ref", "expected"), [
    (5, 5, 5), (7, 5, 7), (3, 5, 3), (1, TOP, TOP + 1), (TOP, TOP + 2, TOP),
    (2, 2 * RING + 1, 2 * RING + 2),
])
def test_unwrap_finds_nearest_position(tsnr: int, ref: int, expected: int) -> None:
    assert unwrap(tsnr, ref) == expected
    assert to_tsnr(expected) == tsnr


def test_window_forgets_oldest_and_counts_repeats() -> None:
    w = DupWindow(3)
    for t in (1, 2, 3, 1):
        w.add(t, t * 10, 0)
    assert len(w) == 3 and w.contains(1, 10) and w.contains(2, 20) and not w.contains(1, 11)
    w.add(4, 40, 0)                   # window now (3, 1, 4)
    assert not w.contains(2, 20) and not w.contains_tsnr(2, 0)
    assert w.contains(1, 10)          # the first (1, 10) left, the repeat is still inside
    assert DupWindow.from_obj(3, w.to_obj(), w.epoch, w.current) == w


def test_window_tsnrs_belong_to_their_epoch_pairs_to_every_epoch() -> None:
    """After STRT/REST a tsnr names another transaction (seed 001, rule 16): the window
    still knows the old epoch's (tsnr, content) pairs, but not its tsnrs as this epoch's."""
    w = DupWindow(4)
    for t in (1, 2, 3):
        w.add(t, t * 10, 0)
    w.add(1, 99, 1)
    assert w.contains(2, 20) and w.contains(1, 99)
    assert not w.contains_tsnr(2, 1) and w.contains_tsnr(1, 1) and not w.contains_tsnr(1, 0)
    w.add(2, 98, 1)
    w.add(3, 97, 1)                   # evicts epoch 0's tsnr 1
    assert not w.contains(1, 10) and w.contains_tsnr(3, 1) and (w.epoch, w.current) == (1, 3)
    again = DupWindow.from_obj(4, w.to_obj(), w.epoch, w.current)
    assert again == w and again.contains_tsnr(2, 1) and not again.contains(9, 0)


@settings(max_examples=300, deadline=None)
@given(size=st.sampled_from([16, 17, 64, 100]),
       batches=st.lists(st.tuples(st.integers(0, 2), st.lists(
           st.tuples(st.integers(1, 40), st.integers(0, 3)), max_size=250)), max_size=8))
def test_window_extend_is_adding_one_by_one(size: int, batches: list) -> None:
    """``extend`` (a run's pairs stored at once, only the last ``size`` kept) keeps the window
    exactly as adding the pairs one at a time does, epochs too; and both answer as a plain
    list of the last ``size`` pairs would (the dicts' serials, rebuilt now and then, are the
    window's own business)."""
    fast, slow = DupWindow(size), DupWindow(size)
    model: list[tuple[int, int, int]] = []  # (tsnr, fp, epoch), oldest first
    epoch = 0
    for step_up, pairs in batches:
        epoch += step_up
        fast.extend(pairs, epoch)
        for tsnr, fp in pairs:
            slow.add(tsnr, fp, epoch)
        model = (model + [(t, f, epoch) for t, f in pairs])[-size:]
        newest = model[-1][2] if model else 0  # the epoch of the last pairs added
        assert fast == slow and fast.epoch == newest
        for window in (fast, slow, DupWindow.from_obj(size, fast.to_obj(), fast.epoch,
                                                      fast.current)):
            for t in range(1, 41):
                for f in range(4):
                    assert window.contains(t, f) == any(m[:2] == (t, f) for m in model)
                for e in range(epoch + 1):
                    assert window.contains_tsnr(t, e) == (
                        e == newest and any(m[0] == t and m[2] == newest for m in model))


def seq(next_u: int | None, missing: tuple = (), settled: tuple = (),
        window: DupWindow | None = None, fresh: bool = False, before: bool = False,
        epoch: int = 0) -> Sequence:
    return Sequence(next_u, window or DupWindow(8), epoch, lambda u: u in missing,
                    lambda u: u in settled, fresh=fresh, before_epoch=before)


@pytest.mark.parametrize(("tsnr", "flagged", "fresh", "next_u", "missing", "verdict"), [
    (0, False, True, 5, (), Verdict.INITIAL),
    (9, False, True, None, (), Verdict.BASELINE),
    (9, False, False, None, (), Verdict.BASELINE),
    (5, False, True, 5, (), Verdict.NEXT),
    (5, False, False, 5, (), Verdict.NEXT),               # never seen: new, whatever its time
    (8, False, True, 5, (), Verdict.AHEAD),
    (8, False, False, 5, (), Verdict.AHEAD),
    (900, False, False, 5, (), Verdict.AHEAD),
    (3, False, False, 5, (3,), Verdict.FILL),
    (3, True, True, 5, (), Verdict.STALE),
    (3, True, False, 5, (), Verdict.STALE),
    (3, False, True, 5, (), Verdict.RESTART),              # a new message going back
    (1, False, True, 5, (), Verdict.RESTART),
    (1, True, True, 5, (), Verdict.STALE),
    (1, False, True, TOP + 1, (), Verdict.NEXT),
    (1, False, True, TOP - 5, (), Verdict.AHEAD),          # the wrap, tsnrs before it lost
    (1, False, True, TOP - (1 << 21), (), Verdict.RESTART),
    # behind the sequence in a message sent before others seen: placed already, a copy
    (3, False, False, 5, (), Verdict.REDELIVERY),
    (1, False, False, 5000, (), Verdict.REDELIVERY),
    (4, False, False, 5, (), Verdict.REDELIVERY),
])
def test_classify(tsnr: int, flagged: bool, fresh: bool, next_u: int | None, missing: tuple,
                  verdict: Verdict) -> None:
    got, _ = classify(tsnr, 99, flagged, seq(next_u, missing, fresh=fresh))
    assert got is verdict


def test_classify_a_message_sent_before_the_epoch_began_belongs_to_an_earlier_one() -> None:
    for next_u, missing in ((5, ()), (5, (8,)), (None, ()), (3, (3,))):
        got, u = classify(8, 99, False, seq(next_u, missing, before=True, epoch=1))
        assert (got, u) == (Verdict.EARLIER_EPOCH, None)


def test_classify_settled_tsnr_is_a_late_fill_flagged_or_not() -> None:
    assert classify(3, 99, False, seq(5, settled=(3,))) == (Verdict.LATE_FILL, 3)
    assert classify(3, 99, True, seq(5, settled=(3,))) == (Verdict.LATE_FILL, 3)
    assert classify(4, 99, True, seq(5, settled=(3,)))[0] is Verdict.STALE


def test_classify_duplicate_needs_same_content_unless_flagged() -> None:
    w = DupWindow(8)
    w.add(4, 111, 0)
    assert classify(4, 111, False, seq(5, window=w, fresh=True))[0] is Verdict.DUPLICATE
    assert classify(4, 222, True, seq(5, window=w))[0] is Verdict.DUPLICATE
    assert classify(4, 222, False, seq(5, window=w, fresh=True))[0] is Verdict.RESTART
    assert classify(4, 222, False, seq(5, window=w))[0] is Verdict.REDELIVERY
    assert classify(4, 222, True, seq(5, window=w, epoch=1))[0] is Verdict.STALE


def test_first_tsnr_starts_sequence_without_gap() -> None:
    h = Harness()
    events = h.feed(Feed().send(txn(500), txn(501)))
    assert h.landed(events) == [500, 501] and only(events, GapOpened) == []


def test_wrap_around_continues_in_same_epoch() -> None:
    h = Harness()
    events = h.feed(Feed().send(txn(TOP - 1), txn(TOP), txn(1, later=TOP * 1000),
                                txn(2, later=TOP * 1000)))
    assert h.landed(events) == [TOP - 1, TOP, 1, 2]
    assert only(events, EpochStarted) == [] and only(events, GapOpened) == []
    assert {e.epoch for e in h.of(type(events[0]))} == {0}


def test_gap_across_wrap() -> None:
    h = Harness()
    events = h.feed(Feed().send(txn(TOP - 1), txn(2, later=TOP * 1000)))
    [gap] = only(events, GapOpened)
    assert (gap.from_tsnr, gap.to_tsnr, gap.missing) == (TOP, 1, (TOP, 1))
    assert only(events, EpochStarted) == []


def test_gap_just_before_wrap_is_not_a_restart() -> None:
    h = Harness()
    events = h.feed(Feed().send(txn(TOP - 3), txn(1, later=TOP * 1000)))
    assert only(events, EpochStarted) == []
    [gap] = only(events, GapOpened)
    assert (gap.from_tsnr, gap.to_tsnr) == (TOP - 2, TOP)


def test_resent_duplicate_of_landed_tsnr_is_dropped_and_counted() -> None:
    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(1), txn(2), txn(3)))
    events = h.feed(feed.send(txn(2, rsnd=True), resend_of(txn(3)), txn(4)))
    assert h.landed(events) == [4]
    assert [e.tsnr for e in only(events, DuplicateDropped)] == [2, 3]
    assert h.state.counters["duplicates"] == 2


def test_exact_replay_of_a_message_is_dropped() -> None:
    """A producer retry: the same transaction again without any flag, same content."""
    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(1), txn(2)))
    events = h.feed(feed.send(txn(2), txn(3)))
    assert h.landed(events) == [3]
    assert [e.tsnr for e in only(events, DuplicateDropped)] == [2]
    assert only(events, EpochStarted) == []


def test_duplicate_of_continued_transaction_skips_all_its_messages() -> None:
    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(1, 3), cuts=[3, 6]))
    events = h.feed(feed.send(txn(1, 3), txn(2), cuts=[3, 6]))
    assert h.landed(events) == [2]
    assert only(events, LostContinuation) == []
    assert len(only(events, DuplicateDropped)) == 1


def test_duplicate_older_than_window_with_flag_is_redelivered_not_restart() -> None:
    from pipeline.reassembly.config import ReassemblyConfig

    h = Harness(ReassemblyConfig(duplicate_window=2))
    feed = Feed()
    h.feed(feed.send(*(txn(i) for i in range(1, 6))))
    events = h.feed(feed.send(txn(2, rsnd=True), txn(6)))
    assert h.landed(events) == [6]
    assert only(events, EpochStarted) == []
    assert only(events, DuplicateDropped)[0].reason.startswith("stale")


@pytest.mark.parametrize("st", ["STRT", "REST"])
def test_restart_status_begins_new_epoch_without_false_gap(st: str) -> None:
    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(41), txn(42)))
    events = h.feed(statuses(feed, status(st)) + feed.send(txn(1, later=RESTARTED),
                                                           txn(2, later=RESTARTED)))
    [ep] = only(events, EpochStarted)
    assert (ep.epoch, ep.previous_epoch, ep.reason, ep.previous_next_tsnr) == (1, 0, st, 43)
    assert h.landed(events) == [1, 2]
    assert only(events, GapOpened) == []
    assert {e.epoch for e in h.of(type(h.events[0]))} == {0, 1}
    assert only(events, StatusReceived)[0].epoch == 1


def test_restart_status_then_missing_first_tsnrs_is_a_gap() -> None:
    h = Harness()
    feed = Feed()
    events = h.feed(statuses(feed, status("STRT")) + feed.send(txn(3)))
    [gap] = only(events, GapOpened)
    assert (gap.from_tsnr, gap.to_tsnr, gap.epoch) == (1, 2, 1)


def test_repeated_start_status_is_one_epoch() -> None:
    h = Harness()
    feed = Feed()
    events = h.feed(statuses(feed, status("STRT"), status("STRT")) + feed.send(txn(1)))
    assert len(only(events, EpochStarted)) == 1


def test_tsnr_back_to_one_begins_new_epoch() -> None:
    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(7), txn(8)))
    events = h.feed(feed.send(txn(1, later=RESTARTED), txn(2, later=RESTARTED)))
    [ep] = only(events, EpochStarted)
    assert ep.reason.startswith("tsnr back to 1")
    assert h.landed(events) == [1, 2] and only(events, GapOpened) == []


def test_tsnr_backwards_not_duplicate_begins_new_epoch() -> None:
    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(70), txn(71)))
    events = h.feed(feed.send(txn(4, later=RESTARTED)))
    [ep] = only(events, EpochStarted)
    assert "went back to 4" in ep.reason
    assert h.landed(events) == [4]
    assert [(g.from_tsnr, g.to_tsnr) for g in only(events, GapOpened)] == [(1, 3)]


def test_restart_closes_old_gaps_and_loses_open_transaction_without_request() -> None:
    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(1), txn(5)))                      # gap 2..4 requested
    first = [r for r in feed.send(txn(6, 2), cuts=[3]) if r.offset == feed.offset - 2]
    h.feed(first)
    before = len(h.of(type(h.events[0])))
    events = h.feed(statuses(feed, status("REST")))
    assert [e.tsnr for e in only(events, LostContinuation)] == [6]
    closed = only(events, GapUnrecoverable)
    assert {(g.from_tsnr, g.to_tsnr) for g in closed} == {(2, 4), (6, 6)}
    assert all("restarted" in g.reason for g in closed)
    from pipeline.reassembly.events import GapRequested
    assert only(events, GapRequested) == []
    assert h.state.gaps == [] and h.state.epoch == 1
    assert len(h.of(type(h.events[0]))) == before


def test_initial_state_is_outside_the_sequence() -> None:
    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(10)))
    events = h.feed(feed.send(txn(0, 3, images=("A",), inst=True, token="TOKEN1"),
                              txn(0, 1, inst=True, ttim=77), txn(11)))
    assert h.landed(events) == [0, 0, 11]
    initial = [e for e in h.of(type(h.events[0]), events) if e.tsnr == 0]
    assert all(e.origin == "initial_state" and e.initial_state for e in initial)
    assert initial[0].token == "TOKEN1"
    assert only(events, GapOpened) == [] and only(events, EpochStarted) == []


def test_initial_state_before_any_live_transaction_does_not_set_baseline() -> None:
    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(0, inst=True)))
    assert h.state.next_u is None
    events = h.feed(feed.send(txn(300)))
    assert only(events, GapOpened) == []


def test_flagged_resend_fills_gap_even_if_an_older_epoch_landed_that_tsnr() -> None:
    """Regression (demo run): after a restart, the resend of the new epoch's missing tsnr 1
    was dropped as 'already landed' because epoch 0's tsnr 1 was still in the window."""
    from pipeline.reassembly.sequence import DupWindow, Verdict, classify

    window = DupWindow(16, [(1, 111), (2, 222), (38, 380)])  # epoch 0's landed tsnrs
    missing = (1, 38)
    verdict, u = classify(1, 999, True, seq(40, missing, window=window, epoch=1))
    assert (verdict, u) == (Verdict.FILL, 1)
    # the exact same content (tsnr and fingerprint) is still a duplicate
    assert classify(1, 111, True, seq(40, missing, window=window, epoch=1))[0] is \
        Verdict.DUPLICATE
    # a flagged repeat of a landed tsnr that no gap waits for stays a duplicate
    assert classify(2, 999, True, seq(40, window=window))[0] is Verdict.DUPLICATE


def test_resend_after_restart_fills_new_epoch_gap_for_a_tsnr_the_old_epoch_landed() -> None:
    """Regression (demo run): epoch 0 landed tsnrs 1..3; after REST the new epoch's tsnr 1 was
    lost, and its resend (URBTPTRN='Y', another commit time) was dropped as already landed."""
    from pipeline.reassembly.events import GapFilled

    h = Harness()
    feed = Feed()
    h.feed(feed.send(txn(1), txn(2), txn(3)))
    h.feed(statuses(feed, status("REST")) + feed.send(txn(2, later=RESTARTED)))  # 1 lost
    assert [(g.from_u, g.to_u, g.epoch) for g in h.state.gaps] == [(1, 1, 1)]
    events = h.feed(feed.send(resend_of(txn(1, later=RESTARTED))))
    assert h.landed(events) == [1]
    assert only(events, GapFilled) and h.state.gaps == []
    # a true repeat of the new epoch's tsnr 1 is still a duplicate
    events = h.feed(feed.send(resend_of(txn(1, later=RESTARTED))))
    assert h.landed(events) == [] and only(events, DuplicateDropped)
