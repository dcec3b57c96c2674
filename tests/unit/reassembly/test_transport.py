"""The transport a real replicator and connector make, case by case on ``step``.

Each test names the transport behaviour it covers; each fails on the machine that
trusted Kafka keys, immediate and flagged duplicates, named statuses and UTC time.
"""

from __future__ import annotations

from itertools import groupby

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import (
    DuplicateDropped,
    EpochStarted,
    GapOpened,
    GapRequested,
    GapUnrecoverable,
    LostContinuation,
    MessagesMissing,
    MessagesUnseen,
    StatRequested,
    StatusReceived,
    StormResumed,
    StormTripped,
    TransactionComplete,
)
from pipeline.reassembly.machine import step
from pipeline.reassembly.rows import CONTROL_EYE, HEADERS_EYE, PSEUDO_INDEX, ElementRow
from pipeline.reassembly.tables import events_to_rows
from tests.unit.reassembly.builders import (
    DEST,
    RESTARTED,
    Elem,
    Feed,
    Harness,
    redeliver,
    status,
    statuses,
    stck,
    trsp,
    txn,
)

CFG = ReassemblyConfig(request_token="TOK1", reply_destination="REPLY")


def only(events: list, cls: type) -> list:
    return [e for e in events if isinstance(e, cls)]


def echo(rows: list[ElementRow]) -> list[ElementRow]:
    """The decode stage's fan-out copy of a destination-wide status."""
    return [r._replace(echo=True) for r in rows]


# -- 2. redelivery ---------------------------------------------------------------------------

def test_a_redelivered_batch_from_before_a_restart_is_no_epoch_and_no_gap() -> None:
    """The connector re-produces a batch that includes the STRT and the old epoch's last
    transactions: the copy of STRT is older than what the destination sent since."""
    h = Harness(CFG)
    feed = Feed()
    old = feed.send(txn(40), txn(41))
    start = statuses(feed, status("STRT", snam=""))
    new = feed.send(txn(1, later=RESTARTED), txn(2, later=RESTARTED))
    h.feed(old + echo(start) + new)
    copies = [r for m in (old, start, new) for r in redeliver_all(feed, m)]
    events = h.feed(copies + feed.send(txn(3, later=RESTARTED)))
    assert h.landed(events) == [3]
    assert only(events, EpochStarted) == [] and only(events, GapOpened) == []
    assert len(only(events, DuplicateDropped)) == 5  # 40, 41, STRT, 1, 2
    assert h.state.epoch == 1


def test_a_restart_in_the_same_batch_withdraws_the_old_epoch_s_requests() -> None:
    """Tsnr 42 lost, then REST, all read in one batch: a TRAN for 42 would reach the
    restarted replicator, whose 42 is another transaction. No request; the gap is settled
    by the restart with no request counted."""
    h = Harness(CFG)
    feed = Feed()
    h.feed(feed.send(txn(40)))
    rows = feed.send(txn(41), txn(43))
    rest = statuses(feed, status("REST", snam=""))
    events = h.feed(rows + echo(rest) + feed.send(txn(1, later=RESTARTED)))
    assert only(events, GapRequested) == []
    [settled] = only(events, GapUnrecoverable)
    assert (settled.from_tsnr, settled.settled, settled.requests_sent) == (42, (42,), 0)
    assert "restarted" in settled.reason
    assert events_to_rows(events, 0)["requests"] == []
    assert h.landed(events) == [41, 43, 1] and h.state.epoch == 1  # 0 before any STRT


def test_a_reply_read_before_a_rest_it_was_sent_after_does_not_hide_the_rest() -> None:
    """The reply topic's offsets are not ordered with the destination topic's: in one call a
    reply sent after a REST can sort before it. Its send time is no evidence about the
    destination's own messages; counted as the destination's clock, it made the REST look
    like a redelivered copy, so the new epoch's tsnr 1 filled the old epoch's gap and its
    tsnr 2 was dropped as a copy of the old one's. Found by the batch-boundary property
    test (tests/unit/integration/test_sim_to_reassembly.py)."""
    h = Harness(CFG)
    feed = Feed()
    h.feed(echo(statuses(feed, status("STRT", snam=""))) + feed.send(txn(2)))  # 1 missing
    assert len(only(h.events, GapOpened)) == 1
    epoch = h.state.epoch
    feed.offset = 50  # the destination's topic is further on than the reply topic
    rest = echo(statuses(feed, status("REST", snam="")))
    replies = Feed(topic="replicator.replies", offset=3, time=feed.time + (5000 << 12))
    reply = [r._replace(home=False) for r in statuses(replies, trsp(1, 0, rsp=0, rtok="TOK1"))]
    events = h.feed(reply + rest + feed.send(txn(1, later=RESTARTED), txn(2, later=RESTARTED)))
    assert reply[0].sort_key < rest[0].sort_key  # read first, sent after
    assert len(only(events, EpochStarted)) == 1 and h.state.epoch == epoch + 1
    assert h.landed(events) == [1, 2] and only(events, DuplicateDropped) == []
    [settled] = only(events, GapUnrecoverable)
    assert settled.from_tsnr == 1 and "restarted" in settled.reason


def redeliver_all(feed: Feed, rows: list[ElementRow]) -> list[ElementRow]:
    by_offset: dict[int, list[ElementRow]] = {}
    for r in rows:
        by_offset.setdefault(r.offset, []).append(r)
    return [r for o in sorted(by_offset) for r in redeliver(feed, by_offset[o])]


def test_a_redelivered_open_transaction_is_not_lost() -> None:
    """A redelivery that starts before the open transaction's first message is skipped
    whole; the open transaction goes on with its real continuation."""
    h = Harness(CFG)
    feed = Feed()
    rows = feed.send(txn(1), txn(2), txn(3, 2), cuts=[10, 14])  # 3 spans two messages
    msgs = {o: [r for r in rows if r.offset == o] for o in sorted({r.offset for r in rows})}
    first, second, third = msgs.values()
    h.feed(first + second)  # 1, 2 landed; 3 open
    again = redeliver(feed, first) + redeliver(feed, second)
    events = h.feed(again + [r._replace(offset=feed.offset) for r in third])
    assert h.landed(events) == [3]
    assert only(events, LostContinuation) == [] and only(events, GapOpened) == []


# -- 3. destination-wide STRT ----------------------------------------------------------------

def test_transactions_lost_right_after_start_are_a_gap() -> None:
    """STRT names no subscription; its echo reaches the key, so tsnrs 1-2 lost
    after it are a gap and requested."""
    h = Harness(CFG)
    feed = Feed()
    events = h.feed(echo(statuses(feed, status("STRT", snam=""))) + feed.send(txn(3)))
    [gap] = only(events, GapOpened)
    assert (gap.from_tsnr, gap.to_tsnr) == (1, 2)
    assert only(events, GapRequested)[0].tsnrs == (1, 2)
    assert only(events, StatusReceived) == [], "the echo lands nothing: its own key does"


# -- 6. initial state ------------------------------------------------------------------------

def test_a_redelivered_pseudo_transaction_lands_once() -> None:
    h = Harness(CFG)
    feed = Feed()
    rows = feed.send(txn(0, 2, images=("A",), inst=True, token="TOKEN1", ttim=stck(9)))
    h.feed(rows)
    events = h.feed(redeliver(feed, rows) + feed.send(txn(0, 2, images=("A",), inst=True,
                                                          token="TOKEN1", ttim=stck(10))))
    assert h.landed(events) == [0], "the copy is dropped, the next chunk lands"
    [dup] = only(events, DuplicateDropped)
    assert "initial-state" in dup.reason


# -- 10. message numbers and STAT ------------------------------------------------------------

def run_row(feed: Feed, first: int, last: int, htime: int = 0) -> ElementRow:
    return ElementRow(feed.topic, 0, feed.offset, PSEUDO_INDEX, 0, 0, HEADERS_EYE,
                      {"first": first, "last": last, "htime": htime})


def test_a_hole_in_the_destination_s_message_numbers_is_a_messages_gap() -> None:
    """A lost status-only message has no tsnr; the destination key sees the
    URBHMSNR runs and reports the hole (warning, a gaps row of kind messages)."""
    h = Harness(CFG)
    feed = Feed()
    h.feed([run_row(feed, 1, 10)])
    events = h.feed([run_row(feed, 13, 20)])
    [hole] = only(events, MessagesMissing)
    assert (hole.from_tsnr, hole.to_tsnr, hole.kind) == (11, 12, "messages")
    rows = events_to_rows(events, 0)
    [gap] = rows["gaps"]
    assert (gap["kind"], gap["state"]) == ("messages", "lost")
    [alert] = rows["alerts"]
    assert (alert["kind"], alert["severity"]) == ("messages_missing", "warning")
    assert only(h.feed([run_row(feed, 15, 18)]), MessagesMissing) == [], "a redelivery"
    events = h.feed([*statuses(feed, status("STRT", snam="")), run_row(feed, 1, 3)])
    assert only(events, MessagesMissing) == [], "numbering restarts at STRT"


def test_messages_below_all_the_job_read_are_told_to_the_operator_once() -> None:
    """A producer without idempotence can write a retried batch after later ones; the job,
    which read 6..42 first, then meets 1..5: below every number it had read, so it never
    landed them (the commit-time rule keeps their transactions in duplicates). A critical
    alert names them; the same run again is not told twice, a redelivery of numbers the job
    read is no alert, and after a STRT (numbering from 1) nothing is below."""
    h = Harness(CFG, key=(DEST, ""))  # the destination-wide key reads the message numbers
    feed = Feed()
    assert only(h.feed([run_row(feed, 6, 42)]), MessagesUnseen) == []
    events = h.feed([run_row(feed, 1, 5)])
    [late] = only(events, MessagesUnseen)
    assert (late.first, late.last, late.low) == (1, 5, 6)
    assert only(events, MessagesMissing) == [], "no hole either"
    [alert] = events_to_rows(events, 0)["alerts"]
    assert (alert["kind"], alert["severity"]) == ("messages_unseen", "critical")
    assert "URBHMSNR 1..5" in alert["message"] and "duplicates" in alert["message"]
    assert only(h.feed([run_row(feed, 1, 5)]), MessagesUnseen) == [], "told once"
    assert only(h.feed([run_row(feed, 10, 30)]), MessagesUnseen) == [], "read before"
    fresh = Harness(CFG, key=(DEST, ""))
    assert only(fresh.feed([*statuses(feed, status("STRT", snam="")),
                            run_row(feed, 4, 9), run_row(feed, 1, 3)]), MessagesUnseen) == []


def test_a_redelivery_from_before_a_restart_is_no_hole_in_the_new_numbering() -> None:
    """After REST the numbers start again at 1; a connector that re-produces a batch sent
    before the restart delivers higher, older numbers (the demo saw 103.. after 1..53). Their
    URBHTIME is older than the REST: no hole, and the new numbering is still checked."""
    h = Harness(CFG, key=(DEST, ""))
    feed = Feed()
    before = feed.time - (10_000 << 12)  # 10 ms before the REST
    h.feed([run_row(feed, 1, 120, htime=before)])
    rest = statuses(feed, status("REST", snam=""))
    after = feed.time
    assert only(h.feed([*rest, run_row(feed, 1, 53, htime=after)]), MessagesMissing) == []
    events = h.feed([run_row(feed, 103, 120, htime=before)])
    assert only(events, MessagesMissing) == [], "old numbers, redelivered"
    [hole] = only(h.feed([run_row(feed, 56, 60, htime=after + 1)]), MessagesMissing)
    assert (hole.from_tsnr, hole.to_tsnr) == (54, 55)


def test_an_idle_key_asks_stat_and_a_subs_reveals_the_lost_last_transaction() -> None:
    """The last transaction before an idle period was lost; after
    ``stat_interval_ms`` the key asks STAT; the SUBS on its own topic names tsnr 3."""
    h = Harness(ReassemblyConfig(request_token="TOK1", stat_interval_ms=60_000), now_ms=0)
    feed = Feed()
    h.feed(feed.send(txn(1), txn(2)))
    assert h.timeout == 60_000
    [ask] = only(h.fire(), StatRequested)
    assert (ask.seq, ask.last_tsnr, ask.token) == (1, 2, "TOK1")
    [row] = events_to_rows([ask], 0)["requests"]
    assert (row["kind"], row["request_id"]) == ("STAT", "stat:1")
    copy = statuses(feed, Elem("URBS", {**status("SUBS", rt="STAT", tsnr=3).fields}))
    assert only(h.feed([r._replace(home=False) for r in copy]), GapOpened) == [], \
        "the reply topic's copy is not ordered with the data"
    events = h.feed(statuses(feed, status("SUBS", rt="STAT", tsnr=3)))
    [gap] = only(events, GapOpened)
    assert (gap.from_tsnr, gap.to_tsnr) == (3, 3) and "STAT" in gap.reason
    assert h.state.stat.answered and h.timeout != h.now + 60_000


# -- storm breaker ---------------------------------------------------------------------------

def test_a_scrambled_sequence_trips_the_breaker_once_and_an_operator_resumes() -> None:
    """Messages of one destination over three partitions (read partition by partition):
    every transaction looks out of place. Requests stop after ``storm_max_gaps`` gaps with
    one critical alert; complete transactions keep landing; `gaps resume` asks again."""
    config = ReassemblyConfig(request_token="TOK1", storm_max_gaps=3, storm_window_ms=60_000)
    h = Harness(config)
    feed = Feed()
    rows = feed.send(*(txn(t) for t in range(1, 31)), cuts=list(range(5, 150, 5)))
    scrambled = [r._replace(partition=r.offset % 3) for r in rows]
    events = h.feed(scrambled)
    assert len(only(events, StormTripped)) == 1
    asked = [e for e in events if isinstance(e, GapRequested)]
    assert len(asked) <= 3, "no requests once tripped"
    assert len(h.landed(events)) == 30
    alert = [a for a in events_to_rows(events, 0)["alerts"] if a["kind"] == "storm_tripped"]
    assert alert[0]["severity"] == "critical" and "sequence scrambled" in alert[0]["message"]
    resume = ElementRow("urb.control", 0, 0, PSEUDO_INDEX, 0, 0, CONTROL_EYE,
                        {"command": "resume", "by": "alice", "note": "fixed partitions"})
    events = h.feed([resume])
    [resumed] = only(events, StormResumed)
    assert resumed.by == "alice" and not h.state.storm.tripped
    assert len(only(events, GapRequested)) == len([g for g in h.state.gaps if g.missing])


def test_a_healthy_lossy_stream_never_trips_the_breaker() -> None:
    h = Harness(ReassemblyConfig(request_token="TOK1"))
    feed = Feed()
    specs = [txn(t) for t in range(1, 400) if t % 25]  # one loss every 25 transactions
    events = h.feed(feed.send(*specs))
    assert only(events, StormTripped) == [] and len(only(events, GapRequested)) == 15


def test_replaying_a_batch_with_new_evidence_is_deterministic() -> None:
    rows = Feed().send(txn(1), txn(5), txn(6))
    a = step(None, rows, 1_000, CFG, ("OUT1", "COLOR"))
    b = step(None, rows, 1_000, CFG, ("OUT1", "COLOR"))
    assert a.events == b.events and a.state.to_bytes() == b.state.to_bytes()
    assert [t.tsnr for t in only(a.events, TransactionComplete)] == [1, 5, 6]


def test_a_subs_between_two_messages_of_a_transaction_opens_no_gap_for_it() -> None:
    """A STAT answered while tsnr 3 is half sent: the SUBS names 3, its continuation follows
    (issue 35, point 6). Nothing is lost, nothing is requested."""
    h = Harness(ReassemblyConfig(request_token="TOK1", stat_interval_ms=60_000), now_ms=0)
    feed = Feed()
    h.feed(feed.send(txn(1), txn(2)))
    first, second = (list(g) for _, g in groupby(feed.send(txn(3, 2), cuts=[3]),
                                                  key=lambda r: r.offset))
    h.feed(first + statuses(feed, status("SUBS", rt="STAT", tsnr=3)))
    h.feed(second)
    assert h.landed() == [1, 2, 3]
    assert not h.of(GapOpened) and not h.of(GapRequested)


def test_a_subs_naming_a_later_tsnr_shows_the_open_transaction_lost() -> None:
    h = Harness(ReassemblyConfig(request_token="TOK1"), now_ms=0)
    feed = Feed()
    h.feed(feed.send(txn(1)))
    first = [r for r in feed.send(txn(2, 2), cuts=[3]) if r.offset == feed.offset - 2]
    events = h.feed(first + statuses(feed, status("SUBS", rt="STAT", tsnr=3)))
    assert [(g.from_tsnr, g.to_tsnr) for g in only(events, GapOpened)] == [(2, 2), (3, 3)]
