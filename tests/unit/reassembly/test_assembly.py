"""Transactions across messages: URBT → URBR/URBD … → URBE, URBC continuations, counts."""

from __future__ import annotations

import random

import pytest

from pipeline.reassembly.events import (
    GapOpened,
    GapRequested,
    Inconsistent,
    LostContinuation,
    TransactionComplete,
)
from pipeline.reassembly.rows import ElementRow
from tests.unit.reassembly.builders import Elem, Feed, Harness, elements, resend_of, tick, txn

# element layout of txn(1, 2): T R D D R D D E  (indexes 0..7)
SPLIT_R_D = [2]        # between URBR 1 and its first URBD
SPLIT_D_D = [3]        # between the two URBDs of record 1
SPLIT_REC = [4]        # between record 1's last URBD and URBR 2
SPLIT_E = [7]          # right before URBE


def only(events: list, cls: type) -> list:
    return [e for e in events if isinstance(e, cls)]


def test_single_message_lands_whole_transaction() -> None:
    h = Harness()
    events = h.feed(Feed().send(txn(1, 2)))
    [t] = only(events, TransactionComplete)
    assert (t.tsnr, t.record_count, t.origin, t.epoch) == (1, 2, "live", 0)
    assert [(r.rsnr, r.isn, r.dcnt) for r in t.records] == [(1, 101, 2), (2, 102, 2)]
    assert [(i.rsnr, i.dsnr, i.image_type) for i in t.images] == [
        (1, 1, "B"), (1, 2, "A"), (2, 1, "B"), (2, 2, "A")]
    assert t.images[0].payload == b"1:1:1:xx"
    assert (t.first_offset, t.last_offset) == (0, 0)
    assert len(events) == 1


@pytest.mark.parametrize("convention", ["next", "stop"])
@pytest.mark.parametrize("cuts", [SPLIT_R_D, SPLIT_D_D, SPLIT_REC, SPLIT_E, [1],
                                  [1, 2, 3, 4, 5, 6, 7]])
def test_continuation_at_any_point(cuts: list[int], convention: str) -> None:
    h = Harness()
    rows = Feed(convention=convention).send(txn(1, 2), cuts=cuts)
    assert sum(r.eye == "URBC" for r in rows) == len(cuts)
    events = h.feed(rows)
    [t] = only(events, TransactionComplete)
    assert len(t.images) == 4 and len(t.records) == 2
    assert (t.first_offset, t.last_offset) == (0, len(cuts))
    assert len(events) == 1


def test_continuation_across_batches_keeps_partial_in_state() -> None:
    h = Harness()
    rows = Feed().send(txn(1, 2), cuts=[2, 4, 6])
    by_msg = [[r for r in rows if r.offset == o] for o in range(4)]
    for msg in by_msg[:-1]:
        assert h.feed(msg) == []
        assert h.state is not None and h.state.partial is not None
    [t] = h.feed(by_msg[-1])
    assert isinstance(t, TransactionComplete) and len(t.images) == 4
    assert h.state.partial is None


def test_lost_middle_message_never_lands_half() -> None:
    h = Harness()
    rows = Feed().send(txn(1, 2), txn(2), cuts=[3, 5])
    events = h.feed([r for r in rows if r.offset != 1])  # message 1 (a URBD) is lost
    [lost] = only(events, LostContinuation)
    assert lost.tsnr == 1
    [gap] = only(events, GapOpened)
    assert (gap.from_tsnr, gap.to_tsnr) == (1, 1)
    [req] = only(events, GapRequested)
    assert req.tsnrs == (1,)
    assert h.landed(events) == [2]


def test_urbc_at_wrong_position_is_lost_continuation() -> None:
    rows = Feed().send(txn(1, 2), cuts=[3])
    bad = [r if r.eye != "URBC" else ElementRow(**{**_as_dict(r), "fields": {
        **r.fields, "urbcdsnr": 2, "urbcrsnr": 2}}) for r in rows]
    h = Harness()
    events = h.feed(bad)
    assert h.landed(events) == []
    assert [e.tsnr for e in only(events, LostContinuation)] == [1]
    assert "URBC continues" in only(events, LostContinuation)[0].reason


def test_next_message_with_urbt_while_continuation_expected() -> None:
    feed = Feed()
    first = [r for r in feed.send(txn(1, 2), cuts=[3]) if r.offset == 0]
    h = Harness()
    assert h.feed(first) == []
    events = h.feed(feed.send(txn(2)))
    assert [e.tsnr for e in only(events, LostContinuation)] == [1]
    assert h.landed(events) == [2]
    [gap] = only(events, GapOpened)
    assert (gap.from_tsnr, gap.to_tsnr) == (1, 1)


def test_orphan_continuation_is_lost_and_rest_skipped() -> None:
    rows = Feed().send(txn(1, 2), txn(2), cuts=[3])
    h = Harness()
    events = h.feed([r for r in rows if r.offset != 0])  # the URBT message is lost
    assert [e.tsnr for e in only(events, LostContinuation)] == [1]
    assert only(events, Inconsistent) == []
    assert h.landed(events) == [2]
    [gap] = only(events, GapOpened)
    assert (gap.from_tsnr, gap.to_tsnr) == (1, 1)


def test_several_transactions_in_one_message() -> None:
    h = Harness()
    events = h.feed(Feed().send(txn(1), txn(2, 3), txn(3)))
    assert h.landed(events) == [1, 2, 3]


def test_record_count_mismatch_goes_to_quarantine_and_gap() -> None:
    h = Harness()
    events = h.feed(Feed().send(txn(1), txn(2, 2, rcnt=3), txn(3)))
    [bad] = only(events, Inconsistent)
    assert bad.tsnr == 2 and "URBTRCNT" in bad.reason
    assert h.landed(events) == [1, 3]
    assert [(g.from_tsnr, g.to_tsnr) for g in only(events, GapOpened)] == [(2, 2)]


def test_image_count_mismatch_goes_to_quarantine() -> None:
    h = Harness()
    events = h.feed(Feed().send(txn(1, 2, dcnts=(2, 3)), txn(2)))
    [bad] = only(events, Inconsistent)
    assert bad.tsnr == 1 and "URBRDCNT" in bad.reason
    assert h.landed(events) == [2]


def test_too_many_images_for_record() -> None:
    h = Harness()
    events = h.feed(Feed().send(txn(1, 1, dcnts=(1,)), txn(2)))
    assert "URBD dsnr 2" in only(events, Inconsistent)[0].reason
    assert h.landed(events) == [2]


def test_record_out_of_order_is_inconsistent() -> None:
    elems = elements(txn(1, 2))
    elems[4] = Elem("URBR", {**elems[4].fields, "urbrrsnr": 3})
    h = Harness()
    events = h.feed(Feed().message(elems))
    assert "rsnr 3" in only(events, Inconsistent)[0].reason
    assert h.landed(events) == []


def test_orphan_elements_are_quarantined() -> None:
    elems = elements(txn(1))[1:]  # no URBT
    h = Harness()
    events = h.feed(Feed().message(elems))
    assert {e.eye for e in only(events, Inconsistent)} == {"URBR", "URBD", "URBE"}
    assert h.landed(events) == []


def test_counts_end_transaction_without_urbe() -> None:
    """Rule 5: the URBE may be missing; complete counts in a message not marked to continue."""
    elems = elements(txn(1, 2))[:-1] + elements(txn(2))
    h = Harness()
    events = h.feed(Feed().message(elems))
    assert h.landed(events) == [1, 2]


def test_urbe_with_wrong_tsnr() -> None:
    elems = elements(txn(1))
    elems[-1] = Elem("URBE", {"urbetsnr": 9})
    h = Harness()
    events = h.feed(Feed().message(elems))
    assert "URBE tsnr 9" in only(events, Inconsistent)[0].reason


def test_urbc_in_the_middle_of_a_message_is_inconsistent() -> None:
    elems = elements(txn(1))
    elems.insert(2, Elem("URBC", {"urbctsnr": 1, "urbcrsnr": 1, "urbcdsnr": 0}))
    h = Harness()
    events = h.feed(Feed().message(elems))
    assert "URBC not at the start" in only(events, Inconsistent)[0].reason


def test_status_message_between_continuations_does_not_break_them() -> None:
    from tests.unit.reassembly.builders import status

    feed = Feed()
    rows = feed.send(txn(1, 2), cuts=[3])
    status_rows = Feed(topic="replies", offset=1).message([status("TERM")])
    h = Harness()
    events = h.feed([r for r in rows if r.offset == 0] + status_rows
                    + [r for r in rows if r.offset == 1])
    assert h.landed(events) == [1]


def test_partial_is_lost_once_the_destination_moved_on() -> None:
    """Rule 12 of seed 001: a transaction's messages go out one after the other, so a
    message of the destination sent ``partial_timeout_ms`` after the partial's last one (here
    through the destination tick the decode stage adds) proves the continuation lost."""
    from pipeline.reassembly.config import ReassemblyConfig

    h = Harness(ReassemblyConfig(partial_timeout_ms=5_000, partial_stall_ms=None))
    feed = Feed()
    first = [r for r in feed.send(txn(1, 2), cuts=[3]) if r.offset == 0]
    h.feed(first, now_ms=10_000)
    assert h.timeout is None  # no processing-time timer without a stall bound
    sent = first[0].urbhtime
    assert only(h.feed([tick(feed, sent + (4_000_000 << 12))]), LostContinuation) == []
    events = h.feed([tick(feed, sent + (5_001_000 << 12))])
    [lost] = only(events, LostContinuation)
    assert lost.tsnr == 1 and "5 s after" in lost.reason
    assert only(events, GapRequested)[0].tsnrs == (1,)


def test_a_stalled_connector_reports_the_partial_lost_but_the_late_continuation_lands() -> None:
    """The connector stalls in the middle of a transaction and sends nothing.
    After ``partial_stall_ms`` of processing time the partial is reported lost and asked
    for, but kept: its real continuation, when it comes, completes it (the resend that
    follows is then a duplicate)."""
    from pipeline.reassembly.config import ReassemblyConfig
    from pipeline.reassembly.events import DuplicateDropped, GapFilled

    h = Harness(ReassemblyConfig(partial_stall_ms=60_000))
    feed = Feed()
    rows = feed.send(txn(1), txn(2, 2), cuts=[7])
    h.feed([r for r in rows if r.offset == 0], now_ms=10_000)
    assert h.timeout == 70_000
    events = h.fire()
    assert [e.tsnr for e in only(events, LostContinuation)] == [2]
    assert only(events, GapRequested)[0].tsnrs == (2,)
    assert h.state.partial is not None and h.state.partial.stalled
    events = h.feed([r for r in rows if r.offset == 1], now_ms=700_000)  # 11 min later
    assert h.landed(events) == [2] and only(events, GapFilled)
    assert [t.origin for t in h.of(TransactionComplete, events)] == ["live"]
    events = h.feed(feed.send(resend_of(txn(2, 2))))
    assert h.landed(events) == [] and only(events, DuplicateDropped)


def test_a_stalled_partial_is_dropped_quietly_when_a_new_transaction_starts() -> None:
    from pipeline.reassembly.config import ReassemblyConfig

    h = Harness(ReassemblyConfig(partial_stall_ms=60_000))
    feed = Feed()
    rows = feed.send(txn(1), txn(2, 2), cuts=[7])
    h.feed([r for r in rows if r.offset == 0], now_ms=10_000)
    h.fire()
    events = h.feed(feed.send(txn(3)))
    assert h.landed(events) == [3] and only(events, LostContinuation) == []
    assert h.state.partial is None


def test_row_order_inside_batch_does_not_matter() -> None:
    rows = Feed().send(txn(1, 2), txn(2, 3), cuts=[2, 5, 9])
    expected = Harness().feed(rows)
    for seed in range(5):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        assert Harness().feed(shuffled) == expected


def _as_dict(r: ElementRow) -> dict:
    return r._asdict()


def test_redelivered_continuation_message_is_dropped() -> None:
    from pipeline.reassembly.events import DuplicateDropped
    from tests.unit.reassembly.builders import redeliver

    feed = Feed()
    rows = feed.send(txn(1, 2), cuts=[3, 5])
    msgs = [[r for r in rows if r.offset == o] for o in range(3)]
    h = Harness()
    events = h.feed(msgs[0] + msgs[1] + redeliver(feed, msgs[1]) + redeliver(feed, msgs[0])
                    + msgs[2])
    assert h.landed(events) == [1]
    assert len(only(events, DuplicateDropped)) == 2
    assert only(events, LostContinuation) == []
