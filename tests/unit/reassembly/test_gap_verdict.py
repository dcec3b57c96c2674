"""A gap is unrecoverable only with evidence: retries run on processing time, but the verdict
waits for a processed message the replicator sent (URBHTIME) after the last request — or for
``verdict_wait_ms`` — so a job lagging behind its topic still lands the resend queued there."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import GapFilled, GapRequested, GapUnrecoverable
from pipeline.reassembly.gaps import Gap, stck_to_unix_ms
from tests.unit.reassembly.builders import Feed, Harness, resend_of, stck, txn

CFG = ReassemblyConfig(retry_initial_ms=1_000, retry_multiplier=1.0, max_retries=2,
                       verdict_wait_ms=60_000, clock_skew_ms=2_000)
T0 = stck_to_unix_ms(stck(0))  # Unix ms of the builders' replicator clock origin
assert T0 is not None


def lagging() -> tuple[Harness, Feed]:
    """Messages sent at T0+1s, +2s, +3s; processed much later (T0+100s): gap 2 requested."""
    h, feed = Harness(CFG, now_ms=T0 + 100_000), Feed()
    h.feed(feed.send(txn(1)) + feed.send(txn(3)))
    return h, feed


def exhaust(h: Harness) -> list:
    """Run the retry rounds out (processing time only)."""
    events = []
    while len(h.of(GapRequested)) < 1 + CFG.max_retries:
        events += h.fire()
    events += h.fire()  # the deadline after the last round
    return events


def test_running_out_of_retries_is_no_verdict_without_evidence() -> None:
    h, _ = lagging()
    events = exhaust(h)
    assert not h.of(GapUnrecoverable, events)
    assert h.timeout is not None and h.timeout <= h.now + CFG.verdict_wait_ms


def test_the_resend_queued_behind_the_lag_still_fills_the_gap() -> None:
    h, feed = lagging()
    exhaust(h)
    feed.time = stck(4_000_000)  # an old message, sent long before our requests
    h.feed(feed.send(txn(4)))
    assert not h.of(GapUnrecoverable)
    h.feed(feed.send(resend_of(txn(2))))
    assert h.of(GapFilled) and not h.of(GapUnrecoverable)


def test_a_message_sent_after_the_last_request_is_the_evidence() -> None:
    h, feed = lagging()
    exhaust(h)
    last_request = h.of(GapRequested)[-1].at_ms
    feed.time = stck((last_request - T0 + CFG.clock_skew_ms + 1) * 1000)
    events = h.feed(feed.send(txn(4)))
    [gone] = h.of(GapUnrecoverable, events)
    assert "retries exhausted after 3 request rounds" in gone.reason
    assert "sent after the last request arrived without" in gone.reason


def test_within_the_clock_skew_a_message_is_no_evidence() -> None:
    h, feed = lagging()
    exhaust(h)
    last_request = h.of(GapRequested)[-1].at_ms
    feed.time = stck((last_request - T0 + CFG.clock_skew_ms) * 1000)
    assert not h.of(GapUnrecoverable, h.feed(feed.send(txn(4))))


def test_an_idle_subscription_gets_its_verdict_at_the_cap() -> None:
    h, _ = lagging()
    exhaust(h)
    out_of_retries = h.now
    [gone] = h.of(GapUnrecoverable, h.fire())
    assert h.now == out_of_retries + CFG.verdict_wait_ms
    assert f"no message sent after the last request arrived in {CFG.verdict_wait_ms}" \
        in gone.reason


def test_no_wait_gives_the_verdict_when_retries_run_out() -> None:
    h, feed = Harness(replace(CFG, verdict_wait_ms=0), now_ms=T0 + 100_000), Feed()
    h.feed(feed.send(txn(1)) + feed.send(txn(3)))
    assert h.of(GapUnrecoverable, exhaust(h))


def test_gaps_saved_before_the_verdict_fields_still_load() -> None:
    old = [0, 3, 5, [3, 4, 5], "lost", 10, "requested", 3, 1, 2_000, None]
    gap = Gap.from_obj(old)
    assert (gap.last_request_ms, gap.verdict_due_ms, gap.next_retry_ms) == (None, None, 2_000)
    assert Gap.from_obj(gap.to_obj()) == gap


@settings(max_examples=60, deadline=None)
@given(ticks=st.lists(st.integers(1, 20_000), max_size=8),
       old_messages=st.integers(0, 3), lag_s=st.integers(10, 10_000))
def test_a_resend_ahead_of_any_newer_message_is_never_given_up(ticks, old_messages,
                                                                lag_s) -> None:
    """Whatever processing time does (empty batches at any pace, within the cap), and however
    many older messages come first, the resend — sent before anything newer — fills the gap."""
    h, feed = Harness(CFG, now_ms=T0 + lag_s * 1000), Feed()
    h.feed(feed.send(txn(1)) + feed.send(txn(3)))
    exhaust(h)
    start = h.now
    for t in ticks:
        h.tick(min(h.now + t, start + CFG.verdict_wait_ms - 1))
    for n in range(old_messages):
        h.feed(feed.send(txn(4 + n)))  # sent at T0 + a few seconds: long before our requests
    h.feed(feed.send(resend_of(txn(2))))
    assert h.of(GapFilled) and not h.of(GapUnrecoverable)


LOCAL_TOD = (27 + 3600) * 1_000_000  # a TOD clock with 27 leap seconds, set to UTC+1


def test_a_tod_clock_on_local_time_is_no_evidence_once_its_offset_is_configured() -> None:
    """URBHTIME is machine time; a TOD clock an hour ahead makes every message
    look sent an hour after our requests (processing time, UTC). With the offset configured
    the lagging job still waits; without, the verdict comes at once (the measured fault)."""
    for offset, verdict in ((LOCAL_TOD, False), (0, True)):
        h = Harness(replace(CFG, tod_offset_us=offset), now_ms=T0 + 100_000)
        feed = Feed()
        feed.time = stck(LOCAL_TOD + 1_000_000)  # sent at T0 + 1 s UTC, read 99 s later
        h.feed(feed.send(txn(1)) + feed.send(txn(3)))
        events = exhaust(h)
        feed.time = stck(LOCAL_TOD + 4_000_000)  # another message sent before the requests
        events += h.feed(feed.send(txn(4)))
        assert bool(h.of(GapUnrecoverable, events)) is verdict, offset


def test_every_time_column_takes_the_tod_clock_offset() -> None:
    from datetime import timedelta

    from pipeline.reassembly.tables import events_to_rows, stck_to_datetime
    from tests.unit.reassembly.builders import status, statuses

    h = Harness(CFG)
    feed = Feed()
    events = h.feed(feed.send(txn(1)) + statuses(feed, status("C5DA")))
    utc, local = events_to_rows(events, 0), events_to_rows(events, 0, LOCAL_TOD)
    shift = timedelta(microseconds=LOCAL_TOD)
    for table, cols in (("transactions", ("commit_time", "processed_time", "sent_time")),
                        ("records", ("record_time",)),
                        ("status_events", ("time", "sent_time"))):
        for col in cols:
            assert utc[table][0][col] - local[table][0][col] == shift, (table, col)
    assert utc["transactions"][0]["landed_at"] == local["transactions"][0]["landed_at"]
    assert stck_to_datetime(stck(0), LOCAL_TOD) == stck_to_datetime(stck(0)) - shift
