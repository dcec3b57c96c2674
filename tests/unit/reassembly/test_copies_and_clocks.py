"""Copies are told from new transactions by tsnr identity within an epoch, never by commit
time (issue 35, points 1 and 5; DESIGN.md "Commit times are not a sequence").

A subscription may list files of several databases (seed 000: ``SFILE=4,SFDBID=10006``), whose
machines' clocks need not agree (seed 001, "About Output Message Time Stamps": URBTTTIM is
Adabas's, URBHTIME the replicator's), and cluster nuclei commit concurrently; the replicator
numbers transactions in the order it receives them. So a transaction committed "before" one
already placed may be new.
"""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import (
    DuplicateDropped,
    EpochStarted,
    GapOpened,
    GapRequested,
    StormTripped,
    TransactionComplete,
)
from tests.unit.reassembly.builders import (
    Feed,
    Harness,
    TxnSpec,
    redeliver,
    status,
    stck,
    txn,
)

SKEW_US = 50_000  # database 10007's clock runs 50 ms behind 10006's


def two_databases(n: int, skew_us: int = SKEW_US, first: int = 1) -> list[TxnSpec]:
    """Transactions alternating databases 10006 and 10007, 1 ms apart in true time; the
    second database's clock is ``skew_us`` behind, so its commit times go back."""
    out = []
    for i, tsnr in enumerate(range(first, first + n)):
        db = 10006 if i % 2 == 0 else 10007
        true_us = tsnr * 1_000
        out.append(txn(tsnr, dbid=db, ttim=stck(true_us - (skew_us if db == 10007 else 0))))
    return out


def test_two_databases_with_a_50ms_skew_land_every_transaction_once_and_ask_nothing() -> None:
    h, feed = Harness(), Feed()
    specs = two_databases(200)
    for spec in specs:
        h.feed(feed.send(spec))
    assert h.landed() == list(range(1, 201))
    assert not h.of(DuplicateDropped) and not h.of(GapOpened) and not h.of(GapRequested)
    assert not h.of(StormTripped)


def test_one_database_2ms_behind_lands_its_transaction_with_its_after_image() -> None:
    h, feed = Harness(), Feed()
    behind = txn(2, dbid=10007, ttim=stck(2_000 - 2_000 - 1))
    h.feed(feed.send(txn(1, ttim=stck(1_000)), behind, txn(3, ttim=stck(3_000))))
    assert h.landed() == [1, 2, 3]
    [landed] = [e for e in h.of(TransactionComplete) if e.tsnr == 2]
    assert {i.image_type for i in landed.images} == {"B", "A"}, "the live copy, not a resend"
    assert not h.of(GapRequested)


def test_a_redelivered_old_stretch_of_two_databases_lands_nothing_twice() -> None:
    h, feed = Harness(), Feed()
    sent = [feed.send(spec) for spec in two_databases(60)]
    for msg in sent:
        h.feed(msg)
    h.feed([row for msg in sent[10:40] for row in redeliver(feed, msg)])
    assert h.landed() == list(range(1, 61))
    assert len(h.of(DuplicateDropped)) == 30 and not h.of(GapRequested)


def test_a_copy_from_before_a_restart_is_no_transaction_of_the_new_epoch() -> None:
    """Epoch 0 reached tsnr 30; the replicator restarted (STRT) and numbered from 1; then the
    connector re-produced messages of epoch 0 whose tsnrs lie *ahead* of the new epoch's.
    Their commit times may be anything (another database's clock): their send time
    (URBHTIME, the replicator's one clock) is before the STRT."""
    h, feed = Harness(), Feed()
    old = [feed.send(spec) for spec in two_databases(30)]
    for msg in old:
        h.feed(msg)
    h.feed(feed.message([status("STRT", snam="")]))
    h.feed(feed.send(*[txn(t, ttim=stck(t)) for t in (1, 2, 3)]))  # commit times far *older*
    h.feed([row for msg in old[20:30] for row in redeliver(feed, msg)])
    h.feed(feed.send(txn(4, ttim=stck(4))))
    new_epoch = [e.tsnr for e in h.of(TransactionComplete) if e.epoch == 1]
    assert new_epoch == [1, 2, 3, 4]
    assert not h.of(GapOpened) and len(h.of(EpochStarted)) == 1


def test_a_restart_without_its_strt_is_told_by_a_new_message_going_back() -> None:
    """STRT lost: a new message (sent after all seen) numbering from 1 again is a restart,
    whatever its commit time (here, 1 s older than the newest placed)."""
    h, feed = Harness(), Feed()
    h.feed(feed.send(*two_databases(10)))
    h.feed(feed.send(txn(1, ttim=stck(10_000 - 1_000_000)), txn(2, ttim=stck(10_001))))
    [epoch] = h.of(EpochStarted)
    assert epoch.epoch == 1
    assert [(e.epoch, e.tsnr) for e in h.of(TransactionComplete)][-2:] == [(1, 1), (1, 2)]


def test_a_flagged_new_tsnr_after_a_restart_lands_though_the_old_epoch_had_it() -> None:
    """Point 5: URBTRSND ('may have been sent before') after STRT/REST; the window still
    holds the previous epoch's tsnr 1 — another transaction."""
    h, feed = Harness(), Feed()
    h.feed(feed.send(txn(1), txn(2)))
    h.feed(feed.message([status("STRT", snam="")]))
    h.feed(feed.send(txn(1, rsnd=True, later=10**9)))
    assert [(e.epoch, e.tsnr) for e in h.of(TransactionComplete)] == [(0, 1), (0, 2), (1, 1)]
    assert not h.of(DuplicateDropped)


def test_a_flagged_copy_of_a_landed_tsnr_of_this_epoch_is_still_a_duplicate() -> None:
    h, feed = Harness(), Feed()
    h.feed(feed.send(txn(1), txn(2)))
    h.feed(feed.send(replace(txn(2), rsnd=True)))
    assert h.landed() == [1, 2] and len(h.of(DuplicateDropped)) == 1


def test_commit_times_equal_across_databases_are_no_evidence_either() -> None:
    """Two databases committing at the same STCK instant (clocks of two machines)."""
    h, feed = Harness(), Feed()
    h.feed(feed.send(txn(1, ttim=stck(5)), txn(2, dbid=10007, ttim=stck(5)),
                     txn(3, ttim=stck(6))))
    assert h.landed() == [1, 2, 3] and not h.of(GapRequested)


def test_config_default_window_is_no_limit_on_how_far_back_a_copy_is_known() -> None:
    """A copy 5,000 transactions back (beyond the 1,024-entry window) is still a copy: its
    tsnr lies behind the sequence, no gap waits for it, and it was sent before."""
    h, feed = Harness(ReassemblyConfig(duplicate_window=16)), Feed()
    sent = [feed.send(spec) for spec in two_databases(200)]
    for msg in sent:
        h.feed(msg)
    h.feed(redeliver(feed, sent[3]))
    assert h.landed() == list(range(1, 201)) and len(h.of(DuplicateDropped)) == 1
    assert not h.of(EpochStarted)


@st.composite
def skewed_streams(draw: st.DrawFn) -> tuple[list[list], int]:
    """Messages of a subscription over two databases: any interleaving of the databases, a
    skew of up to ±1 s between their clocks plus nucleus jitter (cluster nuclei commit
    concurrently), several transactions per message or one split over two (URBC), the
    connector re-producing its last k messages at random points, restarts with STRT.
    Returns (Kafka messages in order, how many epochs)."""
    skew = draw(st.integers(-1_000_000, 1_000_000))
    feed, out, sent, tsnr, epochs, clock = Feed(), [], [], 0, 0, 0
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["commit"] * 6 + ["redeliver", "restart"]))
        if kind == "restart" and tsnr:
            msg = feed.message([status("STRT", snam="")])
            out.append(msg)
            sent.append(msg)
            tsnr, epochs, clock = 0, epochs + 1, clock + 10**9
        elif kind == "redeliver" and sent:
            k = draw(st.integers(1, len(sent)))
            out.extend(redeliver(feed, msg) for msg in sent[-k:])
        else:
            specs, first = [], tsnr + 1
            for tsnr in range(first, first + draw(st.integers(1, 6))):
                clock += draw(st.integers(1, 2_000))
                db = draw(st.sampled_from([10006, 10007]))
                jitter = draw(st.integers(-500, 500))
                at = clock + jitter + (skew if db == 10007 else 0)
                specs.append(txn(tsnr, n_records=draw(st.integers(1, 3)), dbid=db,
                                 ttim=stck(max(at, 1) + 10**7)))
            cut = [len(specs) * 4 - 2] if draw(st.booleans()) else []
            msgs = _by_offset(feed.send(*specs, cuts=cut))
            out.extend(msgs)
            sent.extend(msgs)
    return out, epochs


def _by_offset(rows: list) -> list[list]:
    out: dict[int, list] = {}
    for r in rows:
        out.setdefault(r.offset, []).append(r)
    return [out[k] for k in sorted(out)]


@settings(max_examples=int(os.environ.get("SKEW_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(skewed_streams(), st.integers(1, 8))
def test_any_skew_and_redelivery_lands_every_transaction_once_and_asks_nothing(
        stream: tuple[list[list], int], batch: int) -> None:
    messages, restarts = stream
    h = Harness()
    for i in range(0, len(messages), batch):
        h.feed([row for msg in messages[i:i + batch] for row in msg], now_ms=h.now + 500)
    committed = {(e, t) for e, t in _committed(messages)}
    landed = [(t.epoch, t.tsnr) for t in h.of(TransactionComplete)]
    assert len(landed) == len(set(landed)), "a transaction landed twice"
    assert set(landed) == committed
    assert not h.of(GapOpened) and not h.of(GapRequested) and not h.of(StormTripped)
    assert len(h.of(EpochStarted)) == restarts


def _committed(messages: list[list]) -> set[tuple[int, int]]:
    """(epoch, tsnr) of every distinct transaction in the stream (copies once)."""
    out, epoch, seen = set(), 0, set()
    for msg in messages:
        if msg[0].urbhtime in seen:
            continue  # a copy: the same send time
        seen.add(msg[0].urbhtime)
        for row in msg:
            if row.eye == "URBS" and row.fields.get("urbsst") == "STRT":
                epoch += 1
            elif row.eye == "URBT":
                out.add((epoch, row.fields["urbttsnr"]))
    return out
