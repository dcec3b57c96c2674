"""Regressions found by the simulator-driven integration tests (tests/unit/integration).

Each test replays, with hand-made rows, the smallest stream that showed the bug there.
"""

from __future__ import annotations

from pipeline.reassembly.events import (
    DuplicateDropped,
    Inconsistent,
    LostContinuation,
    TransactionComplete,
)
from tests.unit.reassembly.builders import Feed, Harness, txn


def _messages(rows: list) -> list[list]:
    offsets = sorted({r.offset for r in rows})
    return [[r for r in rows if r.offset == o] for o in offsets]


def test_new_transaction_reusing_a_message_number_after_a_restart_is_not_a_redelivery() -> None:
    """After a replicator restart URBHMSNR starts at 1 again, and the REST only reaches the
    destination-wide key. A new transaction in a message whose number the open (broken)
    transaction already used was skipped as a redelivery; the old transaction's continuation
    then took the new one's elements and landed a mixture of both."""
    old = Feed(msnr=2)
    first = _messages(old.send(txn(1, 3), cuts=[5]))[0]  # the continuation is lost
    new = Feed(msnr=2, offset=old.offset, time=old.time + (5_000 << 12))
    spec = txn(1, 3, ttim=old.time + (9_000 << 12))
    again = new.send(spec, cuts=[5])
    h = Harness()
    events = h.feed(first + again)
    assert not h.of(DuplicateDropped, events)
    landed = h.of(TransactionComplete, events)
    assert [(t.tsnr, t.commit_time) for t in landed] == [(1, spec.commit_time)]
    assert len(h.of(LostContinuation, events)) == 1


def test_message_lost_between_two_continuations_is_a_lost_continuation() -> None:
    """Three messages, the middle one holding a single URBD, lost: the third one's URBC
    (rsnr 1, dsnr 2) matches the 'where this message continues' reading, so only the next
    element shows the loss. It was quarantined as inconsistent input (a good message!)
    instead of being reported as a lost continuation."""
    feed = Feed(convention="previous")  # the simulator's: where the last message stopped
    rows = feed.send(txn(1, 2, images=("B", "A", "A")), cuts=[3, 4])
    first, _lost, third = _messages(rows)
    h = Harness()
    events = h.feed(first + third)
    assert h.of(Inconsistent, events) == []
    (lost,) = h.of(LostContinuation, events)
    assert lost.tsnr == 1 and "lost" in lost.reason
    assert h.landed(events) == []


def test_lost_message_noticed_a_few_elements_after_the_urbc_is_a_lost_continuation() -> None:
    """[URBT R1] [URBC R1's URBD, R2] (lost) [URBC(2,0) R2's URBD, R3 ...]: the URBC passes as
    'next record', R2's URBD fits record 1, and only R3 shows the loss (the simulator's stream
    of seed 19). Quarantined as inconsistent before; a lost continuation now."""
    feed = Feed(convention="previous")
    rows = feed.send(txn(1, 3, images=("A",)), cuts=[2, 4, 6])
    first, _lost, third, fourth = _messages(rows)
    h = Harness()
    events = h.feed(first + third + fourth)
    assert h.of(Inconsistent, events) == []
    assert [e.tsnr for e in h.of(LostContinuation, events)] == [1]
    assert h.landed(events) == []
