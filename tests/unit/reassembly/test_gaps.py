"""Gaps: requests, fills by resends, retries, TRSP replies, caps, hold policy, byte cap."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import (
    BufferLimitExceeded,
    GapFilled,
    GapOpened,
    GapRequested,
    GapUnrecoverable,
    LostContinuation,
    StatusReceived,
    StormTripped,
    TransactionComplete,
)
from tests.unit.reassembly.builders import Feed, Harness, resend_of, statuses, trsp, txn

CFG = ReassemblyConfig(retry_initial_ms=1_000, retry_multiplier=2.0, retry_max_ms=3_000,
                       max_retries=3, request_token="TOK1", reply_destination="OUT3")


def only(events: list, cls: type) -> list:
    return [e for e in events if isinstance(e, cls)]


def with_gap(config: ReassemblyConfig = CFG, now: int = 10_000) -> tuple[Harness, Feed]:
    """State with tsnr 1, 2, 6 landed: gap 3..5 open and requested."""
    h = Harness(config, now_ms=now)
    feed = Feed()
    h.feed(feed.send(txn(1), txn(2), txn(6)))
    return h, feed


def test_gap_opens_and_requests_missing_tsnrs_with_token_and_reply() -> None:
    h, _ = with_gap()
    [opened] = h.of(GapOpened)
    [req] = h.of(GapRequested)
    assert (opened.from_tsnr, opened.to_tsnr, opened.gap_id) == (3, 5, "0:3")
    assert (req.tsnrs, req.attempt, req.requests_sent) == ((3, 4, 5), 1, 3)
    assert (req.token, req.reply_destination) == ("TOK1", "OUT3")
    assert h.landed() == [1, 2, 6]  # immediate policy: 6 did not wait
    assert h.timeout == 11_000


def test_resend_without_after_images_fills_gap() -> None:
    h, feed = with_gap()
    events = h.feed(feed.send(*(resend_of(txn(t, 2)) for t in (3, 4, 5))))
    landed = only(events, TransactionComplete)
    assert [t.tsnr for t in landed] == [3, 4, 5]
    assert all(t.origin == "resend" and t.resent for t in landed)
    assert {i.image_type for t in landed for i in t.images} == {"B"}
    assert all(r.resend for t in landed for r in t.records)
    [filled] = only(events, GapFilled)
    assert (filled.from_tsnr, filled.to_tsnr, filled.requests_sent) == (3, 5, 3)
    assert h.state.gaps == [] and h.timeout is None


def test_partial_fill_requests_only_the_rest() -> None:
    h, feed = with_gap()
    h.feed(feed.send(resend_of(txn(4))))
    events = h.fire()
    [req] = only(events, GapRequested)
    assert (req.tsnrs, req.attempt, req.requests_sent) == ((3, 5), 2, 5)


def test_late_live_arrival_also_fills() -> None:
    h, feed = with_gap()
    events = h.feed(feed.send(txn(3), txn(4), txn(5), txn(7)))
    assert h.landed(events) == [3, 4, 5, 7]
    assert [t.origin for t in only(events, TransactionComplete)] == ["live"] * 4
    assert len(only(events, GapFilled)) == 1


def test_retries_back_off_then_gap_is_unrecoverable() -> None:
    h, _ = with_gap()
    times, attempts = [], []
    while h.timeout is not None:
        times.append(h.timeout)
        events = h.fire()
        attempts += [e.attempt for e in only(events, GapRequested)]
    assert times == [11_000, 13_000, 16_000, 19_000]  # 1 s, 2 s, capped at 3 s, 3 s
    assert attempts == [2, 3, 4]
    [gone] = h.of(GapUnrecoverable)
    assert "retries exhausted" in gone.reason and gone.requests_sent == 12
    assert h.state.gaps == []


def test_resend_after_gap_was_settled_lands_as_a_late_fill() -> None:
    """A resend that arrives after its gap was given up never landed: it lands
    (gap state filled_late, the tsnrs still lost named), and a second copy is a duplicate."""
    from pipeline.reassembly.events import DuplicateDropped, EpochStarted, GapFilledLate

    h, feed = with_gap(ReassemblyConfig(max_retries=0, retry_initial_ms=10,
                                        verdict_wait_ms=0))
    h.fire()
    [gone] = h.of(GapUnrecoverable)
    assert gone.settled == (3, 4, 5) and h.state.gaps == []
    events = h.feed(feed.send(resend_of(txn(4))))
    assert h.landed(events) == [4]
    [late] = only(events, GapFilledLate)
    assert (late.gap_id, late.tsnr, late.settled) == ("0:3", 4, (3, 5))
    assert only(events, EpochStarted) == [] and only(events, DuplicateDropped) == []
    events = h.feed(feed.send(resend_of(txn(4))))
    assert h.landed(events) == [] and len(only(events, DuplicateDropped)) == 1


@pytest.mark.parametrize("subc", [34, 35, 37])
def test_trsp_error_settles_only_its_own_tsnr(subc: int) -> None:
    """The resend buffer is circular; a TRSP error for the oldest tsnr of a gap
    says nothing about the newer ones, whose resends do arrive and land."""
    h, feed = with_gap()
    events = h.feed(statuses(feed, trsp(3, subc, rtok="TOK1")))
    assert only(events, GapUnrecoverable) == [] and len(only(events, StatusReceived)) == 1
    [gap] = h.state.gaps
    assert (gap.missing, gap.settled) == ([4, 5], [3])
    events = h.feed(feed.send(resend_of(txn(4)), resend_of(txn(5))))
    assert h.landed(events) == [4, 5]
    [gone] = only(events, GapUnrecoverable)
    assert (gone.filled, gone.settled) == ((4, 5), (3,))
    assert f"subcode {subc}" in gone.reason and "lost: 3" in gone.reason
    assert h.state.gaps == [] and h.timeout is None


def test_trsp_errors_for_every_tsnr_end_the_gap_unrecoverable() -> None:
    h, feed = with_gap()
    events = h.feed(statuses(feed, *(trsp(t, 35, rtok="TOK1") for t in (3, 4, 5))))
    [gone] = only(events, GapUnrecoverable)
    assert (gone.filled, gone.settled) == ((), (3, 4, 5))
    assert h.state.gaps == []


@pytest.mark.parametrize("subc", [31, 32, 33, 38, 39, 43])
def test_trsp_error_a_retry_cannot_fix_is_settled_at_once_with_a_critical_alert(
        subc: int) -> None:
    from pipeline.reassembly.events import RequestRejected
    from pipeline.reassembly.tables import events_to_rows

    h, feed = with_gap()
    events = h.feed(statuses(feed, trsp(3, subc, rtok="TOK1"), trsp(4, subc, rtok="TOK1")))
    [rejected] = only(events, RequestRejected)  # once per gap and cause
    assert rejected.tsnr == 3 and f"subcode {subc}" in rejected.reason
    assert h.state.gaps[0].settled == [3, 4]
    [alert] = [a for a in events_to_rows(events, 0)["alerts"]
               if a["kind"] == "request_rejected"]
    assert alert["severity"] == "critical"


def test_trsp_36_parks_the_tsnr_until_the_subscription_is_active_again() -> None:
    """TRSP subcode 36, 'subscription not active', is not final: the tsnr is not asked for while
    parked, and asked again when a REAC (or a SUBS with response 0) shows it active."""
    from tests.unit.reassembly.builders import status

    h, feed = with_gap()
    events = h.feed(statuses(feed, trsp(4, 36, rtok="TOK1")))
    assert only(events, GapUnrecoverable) == []
    [gap] = h.state.gaps
    assert (gap.missing, gap.parked) == ([3, 5], [4])
    [req] = only(h.fire(), GapRequested)
    assert req.tsnrs == (3, 5)
    [req] = only(h.feed(statuses(feed, status("REAC"))), GapRequested)
    assert req.tsnrs == (3, 4, 5)


def test_stale_trsp_from_before_a_restart_settles_nothing() -> None:
    from tests.unit.reassembly.builders import RESTARTED, status

    h = Harness(CFG)
    feed = Feed()
    old_reply = statuses(feed, trsp(2, 35, rtok="TOK1"))  # sent before the restart ...
    h.feed(statuses(feed, status("STRT")) + feed.send(txn(1, later=RESTARTED),
                                                      txn(4, later=RESTARTED)))
    h.feed([r._replace(offset=feed.offset) for r in old_reply])  # ... read after it
    assert h.state.gaps[0].missing == [2, 3]


@pytest.mark.parametrize(("tsnr", "subc", "rsp", "rtok"), [
    (4, 35, 0, "TOK1"),      # success reply
    (4, 12, 131, "TOK1"),    # another subcode: keep retrying
    (4, 35, 131, "OTHER"),   # someone else's request
    (9, 35, 131, "TOK1"),    # a tsnr no gap waits for
])
def test_other_trsp_replies_leave_gap_open(tsnr: int, subc: int, rsp: int, rtok: str) -> None:
    h, feed = with_gap()
    events = h.feed(statuses(feed, trsp(tsnr, subc, rsp=rsp, rtok=rtok)))
    assert only(events, GapUnrecoverable) == []
    assert len(h.state.gaps) == 1 and len(only(events, StatusReceived)) == 1


def test_wide_gap_requests_only_newest_up_to_cap() -> None:
    h = Harness(ReassemblyConfig(max_requests_per_gap=100))
    events = h.feed(Feed().send(txn(1), txn(1002)))
    opened = only(events, GapOpened)
    assert [(g.from_tsnr, g.to_tsnr) for g in opened] == [(2, 901), (902, 1001)]
    [gone] = only(events, GapUnrecoverable)
    assert (gone.from_tsnr, gone.to_tsnr) == (2, 901) and "max_requests_per_gap" in gone.reason
    [req] = only(events, GapRequested)
    assert req.tsnrs == tuple(range(902, 1002))
    assert len(h.state.gaps[0].missing) == 100


def test_open_gap_count_is_capped() -> None:
    h = Harness(ReassemblyConfig(max_open_gaps=2))
    events = h.feed(Feed().send(txn(1), txn(3), txn(5), txn(7)))
    assert len(h.state.gaps) == 2
    [gone] = only(events, GapUnrecoverable)
    assert (gone.from_tsnr, "max_open_gaps") == (2, "max_open_gaps") and "too many" in gone.reason


def test_lost_resend_keeps_gap_waiting() -> None:
    h, feed = with_gap()
    part = [r for r in feed.send(resend_of(txn(4, 2)), cuts=[2]) if r.offset == feed.offset - 2]
    events = h.feed(part + feed.send(txn(7)))
    assert [e.tsnr for e in only(events, LostContinuation)] == [4]
    assert only(events, GapOpened) == [] and h.state.gaps[0].missing == [3, 4, 5]


HOLD = ReassemblyConfig(landing_policy="hold", hold_timeout_ms=60_000, retry_initial_ms=1_000,
                        max_retries=100)


def test_hold_policy_lands_in_tsnr_order_when_gap_fills() -> None:
    h, feed = with_gap(HOLD)
    assert h.landed() == [1, 2]
    h.feed(feed.send(txn(7), resend_of(txn(4))))
    assert h.landed() == [1, 2]
    events = h.feed(feed.send(resend_of(txn(5)), resend_of(txn(3))))
    assert h.landed(events) == [3, 4, 5, 6, 7]
    assert h.state.held == []


def test_hold_policy_releases_on_timeout() -> None:
    h, feed = with_gap(HOLD, now=0)
    h.feed(feed.send(txn(7)))
    events = h.tick(59_999)
    assert h.landed(events) == []
    events = h.tick(60_000)
    assert h.landed(events) == [6, 7]
    events = h.feed(feed.send(txn(8), resend_of(txn(3))))
    assert h.landed(events) == [8, 3]  # once timed out, the gap no longer holds anything


def test_hold_policy_releases_when_gap_unrecoverable() -> None:
    h, feed = with_gap(HOLD)
    assert h.landed(h.feed(statuses(feed, trsp(3, 35)))) == []   # 4 and 5 still awaited
    events = h.feed(statuses(feed, trsp(4, 35), trsp(5, 35)))
    assert h.landed(events) == [6]


def test_hold_policy_with_two_gaps() -> None:
    h = Harness(HOLD)
    feed = Feed()
    h.feed(feed.send(txn(1), txn(3), txn(5), txn(6)))
    assert h.landed() == [1]
    assert h.landed(h.feed(feed.send(resend_of(txn(4))))) == []
    assert h.landed(h.feed(feed.send(resend_of(txn(2))))) == [2, 3, 4, 5, 6]


def test_timeout_is_earliest_deadline() -> None:
    h, _ = with_gap(HOLD, now=0)
    assert h.timeout == 1_000  # retry before the 60 s hold timeout


def test_buffer_limit_abandons_open_transaction_as_gap() -> None:
    h = Harness(ReassemblyConfig(max_buffered_bytes=1_000))
    feed = Feed()
    h.feed(feed.send(txn(1)))
    events = h.feed(feed.send(txn(2, 4, images=("A",), size=400), txn(3), cuts=[3, 5]))
    [over] = only(events, BufferLimitExceeded)
    assert over.tsnr == 2 and over.limit == 1_000 and "abandoned" in over.action
    assert h.landed(events) == [3]
    assert only(events, LostContinuation) == []
    [opened] = only(events, GapOpened)
    assert (opened.from_tsnr, opened.to_tsnr) == (2, 2)
    assert h.state.buffered_bytes() == 0


def test_buffer_limit_releases_held_transactions_first() -> None:
    cfg = ReassemblyConfig(landing_policy="hold", max_buffered_bytes=1_000)
    h = Harness(cfg)
    feed = Feed()
    events = h.feed(feed.send(txn(1), txn(3, 2, images=("A",), size=300),
                              txn(4, 2, images=("A",), size=300)))
    # 3 was held; 4 pushed the bytes over: 3 lands early, and the gap holds nothing more
    assert h.landed(events) == [1, 3, 4]
    assert only(events, BufferLimitExceeded)[0].action == "released held transactions early"
    assert only(events, BufferLimitExceeded)[0].tsnr == 4
    assert h.landed(h.feed(feed.send(txn(5)))) == [5]
    assert h.state.held == []


# --------------------------------------------------------------------------- confirmed resends
def test_a_confirmed_resend_is_not_asked_again_until_its_wait_ends() -> None:
    """Seed 000: a successful prior-transaction request is answered by a status (TRSP
    response 0) to the reply destination. Its resend may come long after (a lagging data
    topic): the tsnr is asked again only ``confirmed_wait_ms`` later, so a resend 15 s after
    the TRAN takes exactly one request."""
    h, feed = with_gap(replace(CFG, confirmed_wait_ms=60_000))
    h.feed(statuses(feed, *(trsp(t, 0, rsp=0, rtok="TOK1") for t in (3, 4, 5))))
    assert h.state.gaps[0].confirmed.keys() == {3, 4, 5}
    events = h.tick(h.now + 15_000)  # every retry deadline passed meanwhile
    assert only(events, GapRequested) == [] and only(events, GapUnrecoverable) == []
    assert h.timeout == 10_000 + 60_000, "the next deadline: the confirmation's wait"
    events = h.feed(feed.send(*(resend_of(txn(t)) for t in (3, 4, 5))))
    assert h.landed(events) == [3, 4, 5] and only(events, GapFilled)
    assert [e.tsnrs for e in h.of(GapRequested)] == [(3, 4, 5)], "one TRAN per tsnr"


def test_a_confirmed_resend_that_never_comes_is_asked_again_then_given_up() -> None:
    h, feed = with_gap(replace(CFG, confirmed_wait_ms=5_000))    # rounds at 10, 11, 13, 16 s
    h.feed(statuses(feed, trsp(4, 0, rsp=0, rtok="TOK1")))      # 4 waits until 15 s
    while h.timeout is not None:
        h.fire()
    assert [(e.tsnrs, e.attempt, e.at_ms) for e in h.of(GapRequested)] == [
        ((3, 4, 5), 1, 10_000), ((3, 5), 2, 11_000), ((3, 5), 3, 13_000),
        ((3, 4, 5), 4, 16_000)]
    [gone] = h.of(GapUnrecoverable)
    assert set(gone.settled) == {3, 4, 5}


def test_no_verdict_settles_a_confirmed_tsnr_before_its_wait_ends() -> None:
    """Messages sent after the last request arriving without the tsnr are evidence it was
    lost — unless the replicator confirmed it is resending it."""
    h, feed = with_gap(replace(CFG, max_retries=0, confirmed_wait_ms=60_000,
                               verdict_wait_ms=1_000))
    h.feed(statuses(feed, trsp(4, 0, rsp=0, rtok="TOK1")))
    h.tick(h.now + 5_000)
    h.feed(feed.send(txn(7)), now_ms=h.now + 1_000)  # sent after the request, no 3, 4, 5
    [gap] = h.state.gaps
    assert gap.missing == [4] and sorted(gap.settled) == [3, 5]
    events = h.feed(feed.send(resend_of(txn(4))), now_ms=h.now + 20_000)
    assert h.landed(events) == [4]


def test_retry_rounds_count_for_the_storm_breaker() -> None:
    """A key that keeps asking for the same tsnrs round after round floods the replicator
    as surely as one opening gaps: its rounds count toward ``storm_max_tsnrs``."""
    cfg = replace(CFG, max_retries=10, retry_max_ms=1_000, storm_max_tsnrs=10,
                  storm_window_ms=600_000)
    h, _ = with_gap(cfg)                                     # 3 tsnrs asked
    for _ in range(3):
        h.fire()                                             # 3 more each round
    [tripped] = h.of(StormTripped)
    assert tripped.tsnrs == 12 and tripped.gaps == 1
    asked = len(h.of(GapRequested))
    h.tick(h.now + 100_000)
    assert len(h.of(GapRequested)) == asked, "no requests while the breaker is open"
