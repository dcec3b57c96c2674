"""Initial state after a resend: INST requests for the unverified ISNs, and INST tracking."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reassembly.config import InitialStateTarget, ReassemblyConfig
from pipeline.reassembly.events import (
    DuplicateDropped,
    InitialStateChanged,
    InitialStateRequested,
    StatusReceived,
)
from pipeline.reassembly.initial_state import MAX_QUEUED, MAX_TRACKED
from pipeline.reassembly.state import KeyState
from pipeline.reassembly.tables import events_to_rows
from tests.unit.reassembly.builders import (
    DEST,
    Elem,
    Feed,
    Harness,
    elements,
    redeliver,
    resend_of,
    stck,
    txn,
)

TARGET = InitialStateTarget("COLOR", "ICOLOR", ((10006, 4),), (DEST,))
JOB_TOKEN = "URBPIPE1"  # the job's token and the asking destination's place (token_for)
CFG = ReassemblyConfig(retry_initial_ms=1_000, max_retries=2, request_token="URBPIPE",
                       reply_destination="REPLY", initial_states=(TARGET,),
                       initial_state_timeout_ms=60_000)


def with_gap(config: ReassemblyConfig = CFG) -> tuple[Harness, Feed]:
    """tsnr 1, 2 and 5 landed: 3 and 4 are missing and requested."""
    h, feed = Harness(config, now_ms=10_000), Feed()
    h.feed(feed.send(txn(1), txn(2), txn(5)))
    return h, feed


def typed(spec_elems: list[Elem], types: dict[int, str] | None = None,
          isns: dict[int, int] | None = None, fnrs: dict[int, int] | None = None) -> list[Elem]:
    """Elements with some records' URBRTYP, URBRISN or URBRFNR changed (by rsnr)."""
    out = []
    for e in spec_elems:
        if e.eye == "URBR":
            r, f = e.fields["urbrrsnr"], dict(e.fields)
            f["urbrtyp"] = (types or {}).get(r, f["urbrtyp"])
            f["urbrisn"] = (isns or {}).get(r, f["urbrisn"])
            f["urbrfnr"] = (fnrs or {}).get(r, f["urbrfnr"])
            e = Elem(e.eye, f, e.payload, e.data)
        out.append(e)
    return out


def inst_reply(st_: str, at: int, rsp: int = 0, subc: int = 0, token: str = JOB_TOKEN,
               name: str = "ICOLOR", fnr: int = 4) -> Elem:
    """An INST/INIT|CMPL|ERRO status; ``at`` makes its URBSTIME (copies share it)."""
    return Elem("URBS", {
        "urbsrtok": token, "urbsrt": "INST", "urbsst": st_, "urbstime": stck(at),
        "urbsrsp": rsp, "urbssubc": subc, "urbserri": "", "urbsinam": name, "urbssnam": "",
        "urbsdnam": "", "urbsptim": 0, "urbsttim": 0, "urbstsnr": 0, "urbsdbid": 10006,
        "urbsfnr": fnr})


def replies(h: Harness, feed: Feed, *elems: Elem, now: int | None = None) -> list:
    return h.feed([row for e in elems for row in feed.message([e])], now)


def answer(isns: tuple[int, ...], token: str = JOB_TOKEN, fnr: int = 4) -> list[Elem]:
    """A pseudo-transaction (tsnr 0) with the R image of each ISN, as the replicator sends
    initial-state data between INIT and CMPL (one message when fed with ``replies``)."""
    spec = txn(0, len(isns), images=("A",), inst=True, token=token)
    rsnrs = range(1, len(isns) + 1)
    return typed(elements(spec), types=dict.fromkeys(rsnrs, "R"), isns=dict(enumerate(isns, 1)),
                 fnrs=dict.fromkeys(rsnrs, fnr))


def data(h: Harness, feed: Feed, isns: tuple[int, ...], **kw: object) -> list:
    return h.feed(feed.message(answer(isns, **kw)))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- requests
def test_a_landed_resend_requests_exactly_its_updated_isns_once_per_file() -> None:
    h, feed = with_gap()
    events = h.feed(feed.send(resend_of(txn(3, n_records=2)), resend_of(txn(4, n_records=1))))
    [req] = h.of(InitialStateRequested, events)
    assert (req.name, req.files, req.tsnrs) == ("ICOLOR", ((10006, 4, (101, 102)),), (3, 4))
    assert (req.request_id, req.token, req.reply_destination) == ("job:1", JOB_TOKEN, "REPLY")
    rows = events_to_rows(events, h.now)
    [row] = rows["requests"]
    assert row["kind"] == "INST" and row["isns"] == [101, 102] and row["tsnr"] is None
    assert row["fnr"] == 4
    assert row["idempotency_key"] == "OUT1|COLOR|INST|job:1"
    alert = next(a for a in rows["alerts"] if a["kind"] == "initial_state_requested")
    assert alert["severity"] == "info" and alert["details"]["isn_count"] == 2


def test_tran_request_rows_say_their_kind() -> None:
    h, _ = with_gap()
    rows = events_to_rows(h.events, h.now)["requests"]
    assert {r["kind"] for r in rows} == {"TRAN"} and all(r["isns"] is None for r in rows)


def test_deletes_other_files_and_other_databases_are_not_requested() -> None:
    h, feed = with_gap()
    spec = resend_of(txn(3, n_records=4))
    elems = typed(elements(spec), types={1: "D"}, fnrs={3: 9}, isns={4: 101})
    events = h.feed(feed.message(elems))
    [req] = h.of(InitialStateRequested, events)
    assert req.files == ((10006, 4, (101, 102)),), \
        "D (101 as rsnr 1) skipped, fnr 9 skipped, 101 once"
    other_db = replace(resend_of(txn(4)), dbid=12)
    assert not h.of(InitialStateRequested, h.feed(feed.send(other_db)))


def test_without_a_definition_or_for_live_transactions_nothing_is_requested() -> None:
    h, feed = with_gap(replace(CFG, initial_states=()))
    assert not h.of(InitialStateRequested, h.feed(feed.send(resend_of(txn(3)))))
    h2, feed2 = with_gap()
    assert not h2.of(InitialStateRequested), "live transactions have after images"
    h2.feed(feed2.send(txn(6, rsnd=True)))  # possibly resent, but no prior-transaction resend
    assert not h2.of(InitialStateRequested)


def test_the_isn_cap_splits_one_file_into_several_requests_sent_two_at_a_time() -> None:
    """Pacing: the replicator refuses requests beyond its IMAXREQ (131/44), so at most
    ``initial_state_max_requests`` (2) are in flight; the third goes when one ends."""
    h, feed = with_gap(replace(CFG, max_isns_per_request=2))
    events = h.feed(feed.send(resend_of(txn(3, n_records=5))))
    reqs = h.of(InitialStateRequested, events)
    assert [r.files for r in reqs] == [((10006, 4, (101, 102)),), ((10006, 4, (103, 104)),)]
    assert [r.request_id for r in reqs] == ["job:1", "job:2"]
    assert [q.request_id for q in h.state.inst.queue] == ["job:3"]
    replies(h, feed, inst_reply("INIT", 1))
    data(h, feed, (101, 102))
    events = replies(h, feed, inst_reply("CMPL", 2))
    assert changes(events) == [("job:1", "completed")]
    [third] = h.of(InitialStateRequested, events)
    assert (third.request_id, third.files) == ("job:3", ((10006, 4, (105,)),))
    assert h.state.inst.queue == []


def test_a_replayed_batch_asks_with_the_same_ids() -> None:
    h, feed = with_gap()
    before, rows = h.state_bytes, feed.send(resend_of(txn(3)))
    first = h.feed(rows)
    h.state_bytes = before
    again = h.feed(rows)
    assert h.of(InitialStateRequested, first) == h.of(InitialStateRequested, again)


# --------------------------------------------------------------------------- tracking
def requested() -> tuple[Harness, Feed]:
    h, feed = with_gap()
    h.feed(feed.send(resend_of(txn(3)), resend_of(txn(4))))
    return h, feed


def changes(events: list) -> list[tuple[str, str]]:
    return [(e.request_id, e.state) for e in events if isinstance(e, InitialStateChanged)]


def test_init_then_cmpl_complete_the_request_and_copies_count_once() -> None:
    h, feed = requested()
    init, cmpl = inst_reply("INIT", 1), inst_reply("CMPL", 2)
    events = replies(h, feed, init, init) + data(h, feed, (101,)) + replies(
        h, feed, cmpl, init, cmpl)
    assert changes(events) == [("job:1", "started"), ("job:1", "completed")]
    assert len(h.of(StatusReceived, events)) == 5, "every copy still lands in status_events"
    alerts = events_to_rows(events, h.now)["alerts"]
    assert [(a["kind"], a["severity"]) for a in alerts] == [
        ("initial_state_started", "info"), ("initial_state_completed", "info")]
    assert h.state.inst.tracks == []


def test_erro_fails_the_request_with_a_critical_alert_naming_the_subcode() -> None:
    h, feed = requested()
    events = replies(h, feed, inst_reply("ERRO", 1, rsp=131, subc=12))
    [change] = h.of(InitialStateChanged, events)
    assert (change.request_id, change.state, change.rsp, change.subcode) == (
        "job:1", "failed", 131, 12)
    assert "definition has no file with the DBID/FNR" in change.reason
    [alert] = events_to_rows(events, h.now)["alerts"]
    assert (alert["kind"], alert["severity"]) == ("initial_state_failed", "critical")


def test_cmpl_with_a_nucleus_error_is_a_failure() -> None:
    h, feed = requested()
    events = replies(h, feed, inst_reply("INIT", 1), inst_reply("CMPL", 2, rsp=148))
    assert changes(events)[-1] == ("job:1", "failed")


def test_no_reply_within_the_timeout_is_overdue_once_and_a_late_reply_still_settles() -> None:
    h, feed = requested()
    assert h.timeout is not None and h.timeout <= h.now + CFG.initial_state_timeout_ms
    events = h.tick(h.now + CFG.initial_state_timeout_ms + 1)
    assert changes(events) == [("job:1", "overdue")]
    [alert] = [a for a in events_to_rows(events, h.now)["alerts"]
               if a["kind"].startswith("initial_state")]
    assert alert["severity"] == "warning"
    assert changes(h.tick(h.now + 10 * CFG.initial_state_timeout_ms)) == []
    late = replies(h, feed, inst_reply("INIT", 1)) + data(h, feed, (101,)) + replies(
        h, feed, inst_reply("CMPL", 2))
    assert changes(late) == [("job:1", "started"), ("job:1", "completed")]


def test_cmpl_before_its_init_settles_the_request_and_the_init_opens_nothing() -> None:
    h, feed = requested()
    data(h, feed, (101,))
    events = replies(h, feed, inst_reply("CMPL", 2), inst_reply("INIT", 1))
    assert changes(events) == [("job:1", "completed")]
    assert h.state.inst.tracks == [] and h.state.inst.settled_early == []
    assert not h.of(InitialStateChanged, h.tick(h.now + 10 * CFG.initial_state_timeout_ms))


def test_replies_to_a_request_the_job_did_not_send_are_tracked_as_external() -> None:
    h, feed = requested()
    events = replies(h, feed, inst_reply("INIT", 5, token="MANUAL"),
                     inst_reply("CMPL", 6, token="MANUAL"),
                     inst_reply("ERRO", 7, rsp=131, subc=9, token="OTHER", name="INOPE"))
    ext = f"ext:MANUAL:{stck(5)}"
    assert changes(events) == [(ext, "started"), (ext, "completed"),
                               (f"ext:OTHER:{stck(7)}", "failed")]
    assert [t.request_id for t in h.state.inst.tracks] == ["job:1"], "ours still open"


def test_tracking_survives_the_state_round_trip() -> None:
    h, feed = requested()
    replies(h, feed, inst_reply("INIT", 1))
    again = KeyState.from_bytes(h.state_bytes)
    assert again.inst == h.state.inst and again.inst.tracks[0].state == "started"


def test_open_and_waiting_requests_are_bounded() -> None:
    h, feed = with_gap(replace(CFG, max_isns_per_request=1, initial_state_max_requests=64))
    events = h.feed(feed.send(resend_of(txn(3, n_records=MAX_TRACKED + MAX_QUEUED + 3))))
    assert len(h.state.inst.tracks) == MAX_TRACKED == h.state.inst.in_flight()
    assert len(h.state.inst.queue) == MAX_QUEUED
    assert [s for _, s in changes(events)] == ["failed"] * 3, "the oldest waiting, said"
    events = replies(h, feed, *(inst_reply("ERRO", i, rsp=131, subc=12) for i in range(5)))
    assert len(h.of(InitialStateRequested, events)) == 5, "as many sent as ended"


# --------------------------------------------------------------------------- properties
@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 4), data=st.data())
def test_any_merge_of_reply_copies_settles_each_request_exactly_once(n: int, data) -> None:
    """The replicator answers n requests in order (INIT_i, CMPL_i) to the reply destination and
    copies some of them to the output destination; the job sees the two topics merged in any
    order (each topic in order). Every request completes exactly once, nothing is external."""
    h, feed = with_gap(replace(CFG, max_isns_per_request=1, initial_state_max_requests=4))
    h.feed(feed.send(resend_of(txn(3, n_records=n))))
    answers = [[[inst_reply("INIT", 10 * i)], answer((100 + i,)),
                [inst_reply("CMPL", 10 * i + 1)]] for i in range(1, n + 1)]
    output_topic = [m for a in answers for m in a]
    reply_topic = [m for a in answers for m in (a[0], a[-1]) if data.draw(st.booleans())]
    picks = data.draw(st.permutations([0] * len(reply_topic) + [1] * len(output_topic)))
    streams = [iter(reply_topic), iter(output_topic)]
    merged = [(next(streams[p]), p) for p in picks]
    events = h.feed([r._replace(home=bool(p)) for m, p in merged for r in feed.message(m)])
    done = [rid for rid, s in changes(events) if s == "completed"]
    assert sorted(done) == sorted(f"job:{i}" for i in range(1, n + 1))
    assert not any(rid.startswith("ext:") for rid, _ in changes(events))
    assert h.state.inst.tracks == []
    assert not h.of(InitialStateChanged, h.tick(h.now + 10 * CFG.initial_state_timeout_ms))


@settings(max_examples=60, deadline=None)
@given(records=st.lists(st.tuples(st.sampled_from("IUD"), st.integers(1, 30),
                                  st.sampled_from((4, 9))), min_size=1, max_size=12),
       cap=st.integers(1, 5))
def test_requests_cover_exactly_the_unverified_isns_within_the_cap(records, cap) -> None:
    h, feed = with_gap(replace(CFG, max_isns_per_request=cap, initial_state_max_requests=64))
    spec = resend_of(txn(3, n_records=len(records)))
    elems = typed(elements(spec), types={i + 1: t for i, (t, _, _) in enumerate(records)},
                  isns={i + 1: isn for i, (_, isn, _) in enumerate(records)},
                  fnrs={i + 1: f for i, (_, _, f) in enumerate(records)})
    reqs = h.of(InitialStateRequested, h.feed(feed.message(elems)))
    want = {isn for t, isn, f in records if t in "IU" and f == 4}
    got = [isn for r in reqs for _, _, isns in r.files for isn in isns]
    assert sorted(got) == sorted(want) and len(got) == len(set(got))
    assert all(1 <= r.isn_count <= cap and [list(i) == sorted(i) for _, _, i in r.files]
               for r in reqs)
    assert [r.request_id for r in reqs] == [f"job:{i}" for i in range(1, len(reqs) + 1)]


def test_a_state_saved_before_inst_tracking_existed_still_loads() -> None:
    import json
    import struct
    import zlib

    h, _ = with_gap()
    body = zlib.decompress(h.state_bytes[3:])
    (n,) = struct.unpack_from(">I", body)
    doc = json.loads(body[4:4 + n])
    del doc["inst"]
    text = json.dumps(doc).encode()
    old = h.state_bytes[:3] + zlib.compress(struct.pack(">I", len(text)) + text + body[4 + n:])
    loaded = KeyState.from_bytes(old)
    assert loaded.inst.tracks == [] and loaded.inst.next_seq == 1
    assert loaded.gaps == h.state.gaps


def test_a_multi_file_definition_asks_in_one_request_naming_every_file() -> None:
    """Seed 000 wants a URBI per file of the definition in one message; a file
    without unverified ISNs is named too (it selects nothing)."""
    two = InitialStateTarget("COLOR", "ICOLOR", ((10006, 4), (10006, 9)), (DEST,))
    h, feed = with_gap(replace(CFG, initial_states=(two,)))
    events = h.feed(feed.send(resend_of(txn(3, n_records=2))))
    [req] = h.of(InitialStateRequested, events)
    assert req.files == ((10006, 4, (101, 102)), (10006, 9, ()))
    rows = events_to_rows(events, h.now)["requests"]
    assert [(r["fnr"], r["isns"], r["request_id"]) for r in rows] == [
        (4, [101, 102], "job:1"), (9, [], "job:1")]
    assert len({r["idempotency_key"] for r in rows}) == 1, "one message"
    assert {(t.request_id, t.fnr) for t in h.state.inst.tracks} == {("job:1", 4), ("job:1", 9)}


def test_a_lost_pseudo_transaction_makes_its_request_incomplete_and_asks_again() -> None:
    """The continuation of an initial-state pseudo-transaction is lost; at CMPL the request is
    reported incomplete (warning) and the job asks again for the same ISNs."""
    h, feed = with_gap()
    h.feed(feed.send(resend_of(txn(3, n_records=2))))
    replies(h, feed, inst_reply("INIT", 1))
    chunk = feed.send(txn(0, 2, images=("A",), inst=True, token=JOB_TOKEN), cuts=[3])
    h.feed([r for r in chunk if r.offset == chunk[0].offset])  # the continuation is lost
    events = replies(h, feed, inst_reply("CMPL", 2))
    changes = [(e.request_id, e.state) for e in h.of(InitialStateChanged, events)]
    assert changes == [("job:1", "incomplete")]
    [again] = h.of(InitialStateRequested, events)
    assert (again.request_id, again.files, again.reason, again.attempt) == (
        "job:2", ((10006, 4, (101, 102)),), "job:1 incomplete", 2)
    alert = next(a for a in events_to_rows(events, h.now)["alerts"]
                 if a["kind"] == "initial_state_incomplete")
    assert alert["severity"] == "warning"


def test_a_cmpl_read_from_the_reply_topic_first_settles_nothing() -> None:
    """INIT/CMPL copies on the reply topic are not ordered with the data: only the copy on
    the key's own topic settles a request (``ElementRow.home``)."""
    h, feed = with_gap()
    h.feed(feed.send(resend_of(txn(3))))
    early = [r._replace(home=False) for e in (inst_reply("INIT", 1), inst_reply("CMPL", 2))
             for r in feed.message([e])]
    assert h.of(InitialStateChanged, h.feed(early)) == []
    events = replies(h, feed, inst_reply("INIT", 1)) + data(h, feed, (101,)) + replies(
        h, feed, inst_reply("CMPL", 2))
    assert [e.state for e in h.of(InitialStateChanged, events)] == ["started", "completed"]


# --------------------------------------------------------------------------- completeness
def test_a_lost_single_message_pseudo_transaction_leaves_its_request_incomplete() -> None:
    """Every ISN of an ISN list is answered by a URBR (seed 000: response 113 when there is
    no record), so a job's request is complete only when all of them came. A whole
    pseudo-transaction message lost: its ISN is asked for again, never 'completed'."""
    h, feed = with_gap()
    h.feed(feed.send(resend_of(txn(3, n_records=3))))
    replies(h, feed, inst_reply("INIT", 1))
    data(h, feed, (101,))
    feed.message(answer((102,)))                     # lost in transport
    data(h, feed, (103,))
    events = replies(h, feed, inst_reply("CMPL", 2))
    assert changes(events) == [("job:1", "incomplete")]
    [again] = h.of(InitialStateRequested, events)
    assert (again.files, again.attempt) == (((10006, 4, (102,)),), 2)
    replies(h, feed, inst_reply("INIT", 3))
    data(h, feed, (102,))
    events = replies(h, feed, inst_reply("CMPL", 4))
    assert changes(events) == [("job:2", "completed")]
    assert h.state.inst.tracks == [] and h.state.inst.queue == []


def test_a_lost_first_message_of_a_two_message_pseudo_transaction_is_noticed() -> None:
    h, feed = with_gap()
    h.feed(feed.send(resend_of(txn(3, n_records=2))))
    replies(h, feed, inst_reply("INIT", 1))
    spec = txn(0, 2, images=("A",), inst=True, token=JOB_TOKEN)
    msgs = feed.send(spec, cuts=[3])                  # two messages, URBC in the second
    second = [r for r in msgs if r.offset == msgs[-1].offset]
    events = h.feed(second)                           # the first is lost
    assert not h.landed(events)
    events = replies(h, feed, inst_reply("CMPL", 2))
    assert changes(events) == [("job:1", "incomplete")]
    assert h.of(InitialStateRequested, events)[0].files == ((10006, 4, (101, 102)),)


def test_an_answer_that_never_completes_fails_after_the_last_attempt() -> None:
    h, feed = with_gap(replace(CFG, initial_state_max_attempts=2))
    h.feed(feed.send(resend_of(txn(3))))
    for n, expected in ((1, "incomplete"), (2, "failed")):
        events = replies(h, feed, inst_reply("INIT", 10 * n), inst_reply("CMPL", 10 * n + 1))
        assert changes(events) == [(f"job:{n}", "started"), (f"job:{n}", expected)]
    [alert] = [a for a in events_to_rows(events, h.now)["alerts"]
               if a["kind"] == "initial_state_failed"]
    assert alert["severity"] == "critical" and "101" in alert["message"]
    assert h.state.inst.tracks == [] and h.state.inst.queue == []


def test_a_request_refused_as_one_too_many_is_sent_again_after_a_backoff() -> None:
    """INST/ERRO 131/44 (IMAXREQ): not failed; the same ISNs in a new request, later."""
    h, feed = with_gap(replace(CFG, initial_state_retry_ms=5_000))
    h.feed(feed.send(resend_of(txn(3))))
    events = replies(h, feed, inst_reply("ERRO", 1, rsp=131, subc=44))
    assert changes(events) == [("job:1", "refused")]
    assert not h.of(InitialStateRequested, events)
    assert h.timeout is not None and h.timeout <= h.now + 5_000
    events = h.tick(h.now + 5_000)
    [again] = h.of(InitialStateRequested, events)
    assert (again.request_id, again.files, again.attempt) == (
        "job:2", ((10006, 4, (101,)),), 2)
    [row] = [r for r in events_to_rows(events, h.now)["requests"] if r["kind"] == "INST"]
    assert row["attempt"] == 2


def test_pseudo_transaction_copies_far_back_never_land_twice() -> None:
    """Beyond any fixed window: an external request's 100,000 pseudo-transactions (a whole
    file), then the connector re-produces the first 2,000 and the last 2,000. The key's
    state stays as small as it began (nothing is kept per pseudo-transaction)."""
    h, feed = Harness(CFG, now_ms=10_000), Feed()
    replies(h, feed, inst_reply("INIT", 1, token="MANUAL"))
    size = len(h.state_bytes or b"")
    sent = [feed.message(answer((isn,), token="MANUAL")) for isn in range(1, 100_001)]
    for i in range(0, len(sent), 5_000):
        h.feed([r for m in sent[i:i + 5_000] for r in m])
    events = h.feed([r for m in sent[:2_000] + sent[-2_000:] for r in redeliver(feed, m)])
    assert h.landed(events) == [] and len(h.of(DuplicateDropped, events)) == 4_000
    assert len(h.landed()) == 100_000
    assert len(h.state_bytes or b"") < size + 200


def test_a_pseudo_transaction_written_out_of_order_still_lands() -> None:
    """A message the transport wrote late (older than one already read) that brings an ISN
    the job's open request still waits for is new, not a copy."""
    h, feed = with_gap()
    h.feed(feed.send(resend_of(txn(3, n_records=2))))
    replies(h, feed, inst_reply("INIT", 1))
    late = feed.message(answer((101,)))
    data(h, feed, (102,))
    events = h.feed(late)
    assert h.landed(events) == [0]
    assert changes(replies(h, feed, inst_reply("CMPL", 2))) == [("job:1", "completed")]
