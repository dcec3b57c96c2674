"""Simulator bytes → decode stage → state machine, through the in-memory Kafka/Spark harness.

Every test compares what landed with what the simulator generated (tests/support/truth.py),
never with a second decode of the same stream.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from devtools.sim import FaultPlan
from pipeline.spark.engine.decode_stage import ERROR_EYE
from pipeline.urb import decode_message
from tests.support.harness import REQUEST_TOKEN, Harness, process_batch
from tests.support.scenarios import (
    SMALLEST_MESSAGE,
    assert_matches_truth,
    gap_states,
    joined_late,
    live_tsnrs,
    run_harness,
    sim_config,
    simulate,
    truth_keys,
)
from tests.support.truth import undecodable, urbt_flags

ENCODINGS = ("ebcdic", "ascii")
FORM = {"ebcdic": (0, 37), "ascii": (9, 819)}  # URBTARC, URBTACOD


def _no_trouble(h: Harness) -> None:
    """A clean run: nothing quarantined, no gap, no duplicate, no lost continuation."""
    assert h.tables["quarantine"] == []
    assert h.tables["gaps"] == []
    assert h.tables["duplicates"] == []
    assert not [a for a in h.tables["alerts"] if a["kind"] == "lost_continuation"]


# -- clean streams -----------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", [*ENCODINGS, "mixed"])
def test_clean_stream_lands_every_transaction_once(encoding: str) -> None:
    rep, out, sent = simulate(sim_config(encoding), 60, seed=11)
    h = run_harness(rep, out, cuts=[5, 17, 1, 30])
    got = assert_matches_truth(h, sent)
    assert set(got) == set(truth_keys(sent))
    _no_trouble(h)
    assert len({(t["destination"], t["subscription"], t["epoch"])
                for t in h.tables["transactions"]}) == len({k[:2] for k in got})
    for one in got.values():
        sub = rep.config.subscription(one.row["subscription"])
        assert sub is not None
        arc, acode = FORM[sub.encoding]
        assert {(i["arc"], i["acode"]) for i in h.rows("images", tsnr=one.row["tsnr"],
                                                         subscription=sub.name)} <= {(arc, acode)}
        assert one.row["origin"] == "live" and not one.row["resent"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_transactions_continue_across_many_small_messages(encoding: str) -> None:
    config = sim_config(encoding, max_message_size=SMALLEST_MESSAGE, c5_rate=0.0)
    rep, out, sent = simulate(config, 40, seed=5)
    splits = _continuation_splits(out)
    assert splits["after URBR"] and splits["between URBDs"] and splits["between records"]
    h = run_harness(rep, out, cuts=[3, 1, 1, 9, 2], frame_rows=7)
    assert set(assert_matches_truth(h, sent)) == set(truth_keys(sent))
    _no_trouble(h)
    spans = [t for t in h.tables["transactions"]
             if (t["first_partition"], t["first_offset"]) != (t["last_partition"],
                                                              t["last_offset"])]
    assert len(spans) > len(sent) // 2


def _continuation_splits(deliveries: list) -> Counter[str]:
    """Where continuation messages pick up: between records, after a URBR, between URBDs."""
    where: Counter[str] = Counter()
    for d in deliveries:
        elements = decode_message(d.value).elements
        if elements and elements[0].eye == "URBC" and len(elements) > 1:
            nxt = elements[1]
            if nxt.eye == "URBD":
                where["after URBR" if nxt.urbddsnr == 1 else "between URBDs"] += 1
            elif nxt.eye == "URBR":
                where["between records"] += 1
    return where


# -- gaps and the TRAN loop --------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ENCODINGS)
def test_dropped_transactions_are_requested_resent_and_fill_the_gap(encoding: str) -> None:
    config = sim_config(encoding, subscriptions=("COLOR", "EMPLOYEE"))
    rep, out, sent = simulate(config, 40, seed=2, faults=FaultPlan(counts={"drop_transaction": 3}))
    h = run_harness(rep, out, cuts=[4, 4, 4])
    got = assert_matches_truth(h, sent)
    resent = {k for k, v in got.items() if v.row["resent"]}
    assert resent, "the seed must drop a transaction that is followed by another"
    live = live_tsnrs(out)
    for key in resent:
        one = got[key]
        assert (rep.topic(key[0]), key[1], key[2]) not in live, "only dropped ones are resent"
        assert one.row["origin"] == "resend" and one.row["possibly_resent"]
        assert {i[2] for i in one.images} <= {"B"}, "a resend has before images only"
        assert all(r["resend"] for r in h.rows("records", tsnr=key[2], subscription=key[1],
                                                destination=key[0]))
    states = gap_states(h)
    assert len(states) == len(resent)
    assert all(s == ["open", "requested", "filled"] for s in states.values())
    asked = {(r["destination"], r["subscription"], r["tsnr"]) for r in h.tables["requests"]}
    assert asked == {k[:3] for k in resent}
    for request in h.requests_sent:
        urbi = decode_message(request).elements[0]
        assert (urbi.urbirt, urbi.urbirnam, urbi.urbirtok) == ("TRAN", "REPLY", REQUEST_TOKEN)
    kinds = Counter(a["kind"] for a in h.tables["alerts"])
    assert kinds["gap_open"] == kinds["gap_requested"] == kinds["gap_filled"] == len(resent)
    missing = set(truth_keys(sent)) - set(got)
    assert all(_is_last_of_key(k, sent) for k in missing), "only an unfollowed drop may hide"


def _is_last_of_key(key: tuple, sent: list) -> bool:
    """A dropped transaction nothing follows cannot be noticed from the stream."""
    later = [s for s in sent if s.subscription == key[1] and key[0] in s.destinations
             and s.tsnr > key[2]]
    return not later


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_no_resend_buffer_makes_the_gap_unrecoverable_with_an_alert(encoding: str) -> None:
    config = sim_config(encoding, subscriptions=("ORDERS",))
    rep, out, sent = simulate(config, 20, seed=4, faults=FaultPlan(counts={"drop_transaction": 1}))
    h = run_harness(rep, out)
    got = assert_matches_truth(h, sent)
    assert len(got) == len(sent) - 1
    (states,) = gap_states(h).values()
    assert states == ["open", "requested", "unrecoverable"]
    (gap,) = h.rows("gaps", state="unrecoverable")
    assert "subcode 34" in gap["reason"] and gap["requests_sent"] == 1
    trsp = h.rows("status_events", st="TRSP", rsp=131, subc=34)
    assert trsp and {t["tsnr"] for t in trsp} == {gap["from_tsnr"]}
    alerts = [a for a in h.tables["alerts"] if a["kind"] == "gap_unrecoverable"]
    assert len(alerts) == 1 and alerts[0]["severity"] == "critical"
    assert not h.checkpoint.timeouts, "no retry left armed after the gap closed"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_transaction_gone_from_the_resend_buffer_is_unrecoverable(encoding: str) -> None:
    config = sim_config(encoding, subscriptions=("COLOR",),
                        resend_buffers=[{"name": "RESEND1", "size": "1K"}])
    rep, out, sent = simulate(config, 30, seed=8, faults=FaultPlan(counts={"drop_transaction": 1}))
    h = run_harness(rep, out)
    assert len(assert_matches_truth(h, sent)) == len(sent) - 1
    (gap,) = h.rows("gaps", state="unrecoverable")
    assert "subcode 35" in gap["reason"]
    assert h.rows("status_events", st="TRSP", rsp=131, subc=35)
    assert [a["kind"] for a in h.tables["alerts"] if a["kind"].startswith("gap_")] == [
        "gap_open", "gap_requested", "gap_unrecoverable"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_lost_continuation_never_lands_half_a_transaction(encoding: str) -> None:
    config = sim_config(encoding, subscriptions=("COLOR", "EMPLOYEE"),
                        max_message_size=SMALLEST_MESSAGE)
    rep, out, sent = simulate(config, 30, seed=3,
                              faults=FaultPlan(counts={"drop_continuation": 2}))
    h = run_harness(rep, out, cuts=[2, 2, 2, 2])
    got = assert_matches_truth(h, sent)  # whole or not at all: every image and record checked
    lost = [a for a in h.tables["alerts"] if a["kind"] == "lost_continuation"]
    assert len(lost) == 2
    assert h.tables["quarantine"] == [], "the messages after a lost one are not bad input"
    for alert in lost:
        tsnr, key = alert["details"]["tsnr"], (alert["destination"], alert["subscription"])
        (states,) = [s for k, s in gap_states(h).items() if k[:2] == key
                     and any(g["from_tsnr"] <= tsnr <= g["to_tsnr"] for g in h.rows(
                         "gaps", gap_id=k[2], destination=key[0], subscription=key[1]))]
        assert states == ["open", "requested", "filled"]
        (one,) = [v for k, v in got.items() if k[:3] == (*key, tsnr)]
        assert one.row["resent"], "the lost transaction comes back only as a resend"
    assert set(got) == set(truth_keys(sent))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_duplicates_are_dropped_and_counted(encoding: str) -> None:
    rep, out, sent = simulate(sim_config(encoding), 40, seed=6,
                              faults=FaultPlan(counts={"duplicate": 4}))
    flagged = urbt_flags(out)[("Y", "")]
    assert flagged >= 4
    h = run_harness(rep, out, cuts=[10, 10])
    assert set(assert_matches_truth(h, sent)) == set(truth_keys(sent))
    assert len(h.tables["duplicates"]) == flagged
    assert h.tables["gaps"] == [] and h.tables["quarantine"] == []


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_restart_starts_a_new_epoch_without_a_false_gap(encoding: str) -> None:
    rep, out, sent = simulate(sim_config(encoding), 50, seed=9,
                              faults=FaultPlan(counts={"restart": 1}))
    h = run_harness(rep, out, cuts=[7, 7])
    got = assert_matches_truth(h, sent)
    assert set(got) == set(truth_keys(sent))
    _no_trouble(h)
    reused = [k for k in got if sum(1 for j in got if j[:3] == k[:3]) > 1]
    assert reused, "the seed must reuse a tsnr after the restart"
    for key in reused:
        epochs = sorted(got[k].row["epoch"] for k in got if k[:3] == key[:3])
        assert len(set(epochs)) == len(epochs)
    restarts = [a for a in h.tables["alerts"] if a["kind"] == "replicator_restart"]
    assert {(a["destination"], a["subscription"]) for a in restarts} >= {k[:2] for k in reused}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_wrap_around_continues_the_sequence(encoding: str) -> None:
    rep, out, sent = simulate(sim_config(encoding), 40, seed=1, faults=FaultPlan(wrap=True))
    assert {0xFFFFFFFF, 1} <= {s.tsnr for s in sent}
    h = run_harness(rep, joined_late(out), cuts=[3, 3, 3])
    got = assert_matches_truth(h, sent)
    assert set(got) == set(truth_keys(sent))
    _no_trouble(h)
    assert len({(k[0], k[1], v.row["epoch"]) for k, v in got.items()}) == len(
        {k[:2] for k in got}), "one epoch per key: the wrap is no restart"


def test_gap_across_the_wrap_is_filled_by_a_resend() -> None:
    config = sim_config("ebcdic", subscriptions=("COLOR",))
    rep, out, sent = simulate(config, 8, seed=0,
                              faults=FaultPlan(counts={"drop_transaction": 1}, wrap=True))
    dropped = {s.tsnr for s in sent} - {t for _, _, t in live_tsnrs(out)}
    h = run_harness(rep, joined_late(out))
    got = assert_matches_truth(h, sent)
    assert set(got) == set(truth_keys(sent)) or dropped == {sent[-1].tsnr}
    assert all(s == ["open", "requested", "filled"] for s in gap_states(h).values())


def test_unanswered_requests_are_retried_with_backoff_then_unrecoverable() -> None:
    config = sim_config("ascii", subscriptions=("COLOR",))
    rep, out, sent = simulate(config, 20, seed=4, faults=FaultPlan(counts={"drop_transaction": 1}))
    h = Harness(rep, answer_requests=False)
    h.feed(out)
    h.run()
    (states,) = gap_states(h).values()
    retries = h.config.max_retries
    assert states == ["open"] + ["requested"] * (1 + retries) + ["unrecoverable"]
    asked = [r["requested_at"] for r in h.tables["requests"]]
    waits = [(b - a).total_seconds() * 1000 for a, b in pairwise(asked)]
    assert len(waits) == retries
    for n, wait in enumerate(waits, start=1):  # a timer fires at the first batch after it
        assert h.config.backoff_ms(n) < wait <= h.config.backoff_ms(n) + h.interval_ms
    assert len(h.requests_sent) == 1 + retries
    assert not h.checkpoint.timeouts
    assert len(assert_matches_truth(h, sent)) == len(sent) - 1


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ENCODINGS)
def test_corrupt_messages_are_quarantined_and_the_rest_lands(encoding: str) -> None:
    config = sim_config(encoding, subscriptions=("COLOR", "EMPLOYEE"))
    faults = FaultPlan(counts={"corrupt": 6})
    rep, out, sent = simulate(config, 40, seed=12, faults=faults)
    _, clean, _ = simulate(config, 40, seed=12)
    assert len(out) == len(clean)
    damaged = [i for i, (a, b) in enumerate(zip(out, clean, strict=True)) if a != b]
    assert 1 <= len(damaged) <= 6  # two hits before one message damage it once
    h = run_harness(rep, out, cuts=[5, 5])
    records = h.kafka.records
    bad = undecodable(out)
    assert bad, "the seed must produce a message the codec rejects"
    for d in bad:
        (rec,) = [r for r in records if r.value == d.value]
        (row,) = [q for q in h.tables["quarantine"] if q["eye"] == ERROR_EYE
                  and (q["topic"], q["partition"], q["offset"]) == (rec.topic, rec.partition,
                                                                   rec.offset)]
        assert row["raw"] == d.value and row["reason"] and row["source"] == "decode"
    touched = {t for i in damaged for t in _tsnrs_in(clean[i].value)}
    got = _landed_or_resent(h, sent)
    untouched = {k for k in truth_keys(sent) if (k[1], k[2]) not in touched}
    assert untouched <= got


def _tsnrs_in(value: bytes) -> set[tuple[str, int]]:
    """(subscription, tsnr) of every transaction a message carries a piece of."""
    out = set()
    for e in decode_message(value).elements:
        if e.eye == "URBT":
            out.add((e.urbtsnam, e.urbttsnr))
        elif e.eye == "URBC":
            out.add((e.urbcsnam, e.urbctsnr))
    return out


def _landed_or_resent(h: Harness, sent: list) -> set:
    """Keys of transactions landed intact (damaged payloads may land, so no exact check)."""
    truth = truth_keys(sent)
    keys = {(t["destination"], t["subscription"], t["tsnr"], t["commit_time"])
            for t in h.tables["transactions"]}
    return keys & set(truth)


# -- batch boundaries and replays --------------------------------------------------------------

def _landed_set(h: Harness) -> set[tuple]:
    return {(t["destination"], t["subscription"], t["tsnr"], t["commit_time"], t["resent"],
             t["record_count"], t["image_count"]) for t in h.tables["transactions"]}


def _duplicates_explained(h: Harness, other: Harness) -> bool:
    """The duplicate rows ``h`` has beyond ``other``'s are all of tsnrs that ``h`` asked for
    in TRAN rounds ``other`` did not send (a round's answer dropped again, message by
    message)."""
    def rows(x: Harness, table: str, fields: tuple[str, ...]) -> Counter:
        return Counter(tuple(r[f] for f in fields) for r in x.tables[table])

    rounds = ("subscription", "epoch", "tsnr", "attempt")
    asked = {(s, t) for s, _e, t, _a in rows(h, "requests", rounds) - rows(other, "requests",
                                                                           rounds)}
    extra = rows(h, "duplicates", ("subscription", "tsnr")) - rows(
        other, "duplicates", ("subscription", "tsnr"))
    return set(extra) <= asked


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(1, 12), max_size=12),
       shuffle=st.integers(0, 100),
       encoding=st.sampled_from([*ENCODINGS, "mixed"]),
       size=st.sampled_from([SMALLEST_MESSAGE, 600, 32768]),
       restarts=st.integers(0, 2))
# A reply read before a REST it was sent after hid the REST (machine._Run.message):
@example(seed=8662, cuts=[9, 11, 8, 11, 11], shuffle=93, encoding="ebcdic",
         size=SMALLEST_MESSAGE, restarts=1)
@example(seed=4288, cuts=[4, 11, 5, 7], shuffle=5, encoding="ebcdic", size=SMALLEST_MESSAGE,
         restarts=2)
# An extra round's answer, one transaction over five messages, dropped message by message:
@example(seed=96, cuts=[1, 1, 2, 12, 12, 12], shuffle=0, encoding="ebcdic", size=SMALLEST_MESSAGE,
         restarts=1)
def test_batch_boundaries_do_not_change_what_lands(seed: int, cuts: list[int], shuffle: int,
                                                    encoding: str, size: int,
                                                    restarts: int) -> None:
    config = sim_config(encoding, max_message_size=size)
    faults = FaultPlan(counts={"drop_transaction": 1, "duplicate": 2, "drop_continuation": 2,
                               "restart": restarts})
    rep, out, sent = simulate(config, 25, seed=seed, faults=faults)
    whole = run_harness(rep, out)
    rep2, out2, _ = simulate(config, 25, seed=seed, faults=faults)
    assert out2 == out
    cut = run_harness(rep2, out2, cuts=cuts, shuffle_seed=shuffle)
    assert _landed_set(cut) == _landed_set(whole)
    assert_matches_truth(cut, sent)
    # Finer batches can fire a gap's retry timer before its resend arrives; each extra TRAN
    # round is answered again, and that second resend is (rightly) dropped as a duplicate —
    # one row per message of the answer (a transaction continued over five 280-byte messages
    # gives five: seed 96 below). So every duplicate row one run has and the other has not is
    # of a tsnr that only that run asked for again, and without extra rounds there are none.
    assert _duplicates_explained(cut, whole) and _duplicates_explained(whole, cut)
    assert cut.tables["quarantine"] == [] and whole.tables["quarantine"] == []


def test_replaying_any_batch_from_its_checkpoint_gives_identical_output() -> None:
    config = sim_config("mixed", max_message_size=SMALLEST_MESSAGE)
    faults = FaultPlan(counts={"drop_transaction": 2, "duplicate": 2, "corrupt": 2,
                               "drop_continuation": 1})
    rep, out, _ = simulate(config, 30, seed=21, faults=faults)
    h = Harness(rep)
    h.feed(out)
    before, inputs = [], []
    for size in [3, 5, 1, 8, 2, 13] + [50] * 10:
        unread, checkpoint = list(h.unread), h.checkpoint
        batch = h.batch(size)
        before.append(checkpoint)
        left = {id(r) for r in h.unread}
        inputs.append([r for r in unread if id(r) not in left])
        if not h.pending and not h.checkpoint.timeouts:
            break
    assert sum(len(b.tables["transactions"]) for b in h.batches) > 0
    for batch, checkpoint, records in zip(h.batches, before, inputs, strict=True):
        again = process_batch(checkpoint, records, batch.now_ms, batch.batch_id, h.config,
                              h.decoder)
        assert again.tables == batch.tables
        assert again.checkpoint == batch.checkpoint
        assert again.events == batch.events


@pytest.mark.parametrize(("seed", "encoding", "size", "count", "faults"), [
    # a broken transaction open across a restart; the next one reused its URBHMSNR
    (102, "ebcdic", 600, 22, {"duplicate": 2, "drop_continuation": 2, "restart": 2}),
    # a lost continuation noticed only a few elements after the next URBC
    (19, "mixed", SMALLEST_MESSAGE, 26, {"drop_transaction": 2, "drop_continuation": 2}),
    (40, "ascii", SMALLEST_MESSAGE, 14, {"duplicate": 1, "drop_continuation": 2, "restart": 2}),
])
def test_fault_mixes_that_found_bugs(seed: int, encoding: str, size: int, count: int,
                                     faults: dict[str, int]) -> None:
    rep, out, sent = simulate(sim_config(encoding, max_message_size=size), count, seed=seed,
                              faults=FaultPlan(counts=faults))
    h = run_harness(rep, out, cuts=[3, 3, 3])
    assert_matches_truth(h, sent)
    assert h.tables["quarantine"] == []
    assert len([a for a in h.tables["alerts"] if a["kind"] == "lost_continuation"]) >= 1
