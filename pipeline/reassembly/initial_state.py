"""Initial state after a resend (INST requests for exactly the unverified ISNs), paced, and
tracking of INST requests through their INIT/CMPL/ERRO replies.

Why: a resent transaction has before images only (the resend buffer keeps no after images), so
the current-state rows of the ISNs it inserted or updated become unverified. When the
subscription has an ISN-list initial-state definition, the job asks the replicator to re-read
exactly those ISNs; the R images that come back (tsnr-0 pseudo-transactions, URBTTTIM = the
time they were read, hence a newer version) make the rows verified again.

Pacing: the replicator refuses an initial-state request while too many are active (INST/ERRO,
response 131 subcode 44: its IMAXREQ limit), so a key keeps at most
``initial_state_max_requests`` of its requests in flight (sent or started, not yet answered by
CMPL/ERRO, not overdue); the others wait in the queue, in order, and are sent as earlier ones
end. A request refused with 131/44 goes back to the queue, sent again after a backoff
(``initial_state_retry_ms``, doubling), at most ``initial_state_max_attempts`` times.

Correlation: an INST reply (URBS INST/INIT, INST/CMPL, INST/ERRO) carries the token, the
initial-state name, dbid and fnr and nothing else of the request, so it settles the oldest open
request with the same (token, name, dbid, fnr). The replicator sends INIT and CMPL to the reply
destination *and* to the output destinations, and Kafka may deliver a message twice, so a reply
is recognised by its URBSTIME and counted once. Replies to requests the job did not send
(``urbpipe request inst``) are tracked from their first reply on.

Which copy counts: INIT and CMPL go to the reply destination *and* the output destinations
(seed 000), but only the copy on the asking key's own topic is ordered with the
pseudo-transactions between them; the reply topic's copy can be read long before the data.
So INIT/CMPL settle a request only from the key's own topic (``ElementRow.home``); INST/ERRO
goes to the reply destination only and counts from there.

Completeness (``pseudo.py`` counts what arrives): every ISN of an ISN list is answered by a
URBR — with the record, or response 113 when there is none (R13) — so a job's request is
complete at its CMPL only when every ISN it asked for arrived. One that did not (a lost
pseudo-transaction message: the first, a middle or the last, or a whole one) makes the request
*incomplete*: reported, and the missing ISNs asked for again, until
``initial_state_max_attempts`` requests have asked for them; then it *failed* (critical). A
request the job did not send names no ISNs: it is incomplete when a pseudo-transaction of it
was seen lost (a continuation without its start, one cut short by the CMPL).

Everything here is pure: it changes the ``InstState`` it is given and returns events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.reassembly.config import InitialStateTarget, ReassemblyConfig
from pipeline.reassembly.events import (
    InitialStateChanged,
    InitialStateRequested,
    TransactionComplete,
)
from pipeline.reassembly.rows import ElementRow
from pipeline.urb.codes import describe_subcode

#: Record types whose values a resend cannot give (no after image): I and U. A delete (D)
#: needs no image, so its ISN is never requested.
UNVERIFIED_TYPES = frozenset({"I", "U"})
REPLY_STATUSES = frozenset({"INIT", "CMPL", "ERRO"})
MAX_TRACKED = 64      # open INST requests remembered per key (the oldest beyond is dropped)
MAX_QUEUED = 256      # requests waiting to be sent per key (the oldest beyond is dropped)
SEEN_WINDOW = 64      # reply identities remembered to count a reply copy once
DONE_WINDOW = 16      # completed requests remembered, to ask again if a lost chunk shows late
MAX_ISN = 0xFFFFFFFE  # X'FFFFFFFF' marks a range in an ISN list
#: INST/ERRO 131 subcode 44: too many initial-state requests active (IMAXREQ) — retried
REFUSED_BUSY = (131, 44)
IN_FLIGHT = frozenset({"sent", "started"})

Correlation = tuple[str, str, int, int]  # token, initial-state name, dbid, fnr
FileAsk = tuple[int, int, tuple[int, ...]]  # dbid, fnr, ISNs


@dataclass(slots=True)
class InstTrack:
    """One file of an INST request not yet answered by CMPL/ERRO. ``state``: sent, started
    or overdue. A job's request remembers the ISNs it asked for and those that arrived."""

    request_id: str
    name: str
    dbid: int
    fnr: int
    token: str
    isn_count: int
    requested_ms: int
    state: str
    deadline_ms: int | None
    init_seen: bool = False
    isns: tuple[int, ...] = ()  # the job's requests: what it asked for
    incomplete: bool = False    # a pseudo-transaction of it was seen lost
    received: list[int] = field(default_factory=list)  # ISNs of ``isns`` that arrived
    attempt: int = 1            # how many requests have asked for these ISNs
    init_time: int = 0          # URBSTIME of its INIT (replicator clock; 0: not seen)

    @property
    def correlation(self) -> Correlation:
        return (self.token, self.name, self.dbid, self.fnr)

    def missing(self) -> tuple[int, ...]:
        """ISNs asked for that have not arrived."""
        got = set(self.received)
        return tuple(i for i in self.isns if i not in got)

    def to_obj(self) -> list:
        return [self.request_id, self.name, self.dbid, self.fnr, self.token, self.isn_count,
                self.requested_ms, self.state, self.deadline_ms, self.init_seen,
                list(self.isns), self.incomplete, self.received, self.attempt, self.init_time]

    @classmethod
    def from_obj(cls, obj: list) -> InstTrack:
        track = cls(*obj[:10])
        if len(obj) > 10:
            track.isns, track.incomplete = tuple(obj[10]), bool(obj[11])
        if len(obj) > 12:
            track.received, track.attempt, track.init_time = list(obj[12]), obj[13], obj[14]
        return track


@dataclass(slots=True)
class Pending:
    """A request message waiting to be sent (pacing, or a 131/44 refusal's backoff)."""

    request_id: str
    name: str
    token: str
    files: tuple[FileAsk, ...]
    tsnrs: tuple[int, ...]
    reason: str
    attempt: int
    not_before_ms: int

    def to_obj(self) -> list:
        files = [[dbid, fnr, list(isns)] for dbid, fnr, isns in self.files]
        return [self.request_id, self.name, self.token, files, list(self.tsnrs), self.reason,
                self.attempt, self.not_before_ms]

    @classmethod
    def from_obj(cls, obj: list) -> Pending:
        files = tuple((d, f, tuple(i)) for d, f, i in obj[3])
        return cls(obj[0], obj[1], obj[2], files, tuple(obj[4]), *obj[5:])


@dataclass(slots=True)
class InstState:
    """The INST part of a key's state: a request counter, requests waiting to be sent, open
    requests, recent replies.

    ``settled_early`` holds correlations of requests settled by CMPL/ERRO before their INIT
    was seen (Kafka order across topics is not reply order): that INIT is then no new request.
    """

    next_seq: int = 1
    tracks: list[InstTrack] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    settled_early: list[list] = field(default_factory=list)
    done: list[InstTrack] = field(default_factory=list)  # recently completed job requests
    queue: list[Pending] = field(default_factory=list)

    def to_obj(self) -> dict:
        return {"seq": self.next_seq, "tracks": [t.to_obj() for t in self.tracks],
                "seen": self.seen, "early": self.settled_early,
                "done": [t.to_obj() for t in self.done],
                "queue": [p.to_obj() for p in self.queue]}

    @classmethod
    def from_obj(cls, obj: dict | None) -> InstState:
        if not obj:
            return cls()
        return cls(obj["seq"], [InstTrack.from_obj(t) for t in obj["tracks"]],
                   list(obj["seen"]), [list(c) for c in obj["early"]],
                   [InstTrack.from_obj(t) for t in obj.get("done", [])],
                   [Pending.from_obj(p) for p in obj.get("queue", [])])

    def deadlines(self) -> list[int]:
        due = [t.deadline_ms for t in self.tracks if t.deadline_ms is not None]
        return due + [p.not_before_ms for p in self.queue]

    def in_flight(self) -> int:
        """Request messages sent or started and not yet answered (overdue ones not counted:
        a replicator that never answers must not stop the queue)."""
        return len({t.request_id for t in self.tracks if t.state in IN_FLIGHT})


@dataclass(frozen=True, slots=True)
class Where:
    """The key and time the events are about (every event names them)."""

    subscription: str
    destination: str
    epoch: int
    now_ms: int


Events = list[InitialStateRequested | InitialStateChanged]


# --------------------------------------------------------------------------- requests
def unverified_isns(txn: TransactionComplete, target: InitialStateTarget
                    ) -> dict[tuple[int, int], set[int]]:
    """ISNs per (dbid, fnr) that a landed resend leaves unverified and the definition covers.

    Those are the I/U records without an after image (exactly the MERGE's "unverify" rows).
    """
    after = {i.rsnr for i in txn.images if i.image_type == "A"}
    out: dict[tuple[int, int], set[int]] = {}
    for r in txn.records:
        if (r.type in UNVERIFIED_TYPES and r.rsnr not in after and 0 < r.isn <= MAX_ISN
                and target.covers(txn.dbid, r.fnr)):
            out.setdefault((txn.dbid, r.fnr), set()).add(r.isn)
    return out


def request(inst: InstState, target: InitialStateTarget,
            isns: dict[tuple[int, int], Iterable[int]], tsnrs: Iterable[int],
            config: ReassemblyConfig, where: Where, reason: str = "", attempt: int = 1,
            ) -> Events:
    """Queue INST request messages for ISNs per (dbid, fnr), then send what pacing allows.

    One message names every file of the definition (R14: a multi-file definition needs
    a URBI per file, each with its database), each file's ISNs sorted and split at
    ``max_isns_per_request`` over as many messages as the longest needs."""
    cap = config.max_isns_per_request
    ordered = {f: sorted(set(isns.get(f, ()))) for f in target.files}
    rounds = max((len(v) + cap - 1) // cap for v in ordered.values())
    token = target.token_for(where.destination, config.request_token)
    for n in range(rounds):
        files = tuple((dbid, fnr, tuple(v[n * cap:(n + 1) * cap]))
                      for (dbid, fnr), v in ordered.items())
        inst.queue.append(Pending(f"job:{inst.next_seq}", target.name, token, files,
                                  tuple(sorted(set(tsnrs))), reason, attempt, where.now_ms))
        inst.next_seq += 1
    events = dispatch(inst, config, where)
    return events + _trim_queue(inst, where)


def dispatch(inst: InstState, config: ReassemblyConfig, where: Where) -> Events:
    """Send queued requests whose time has come while fewer than the maximum are in flight."""
    events: Events = []
    while inst.queue and inst.in_flight() < config.initial_state_max_requests:
        ready = next((p for p in inst.queue if p.not_before_ms <= where.now_ms), None)
        if ready is None:
            break
        inst.queue.remove(ready)
        events += _send(inst, ready, config, where)
    return events


def _send(inst: InstState, p: Pending, config: ReassemblyConfig, where: Where) -> Events:
    events: Events = []
    for dbid, fnr, chunk in p.files:
        events += _track(inst, InstTrack(
            p.request_id, p.name, dbid, fnr, p.token, len(chunk), where.now_ms, "sent",
            where.now_ms + config.initial_state_timeout_ms, isns=chunk, attempt=p.attempt),
            where)
    events.append(InitialStateRequested(
        subscription=where.subscription, destination=where.destination, epoch=where.epoch,
        request_id=p.request_id, name=p.name, files=p.files, tsnrs=p.tsnrs, token=p.token,
        reply_destination=config.reply_destination, at_ms=where.now_ms, reason=p.reason,
        attempt=p.attempt))
    return events


def _trim_queue(inst: InstState, where: Where) -> Events:
    """Past MAX_QUEUED waiting requests the oldest is dropped, and said (failed)."""
    events: Events = []
    while len(inst.queue) > MAX_QUEUED:
        old = inst.queue.pop(0)
        for dbid, fnr, chunk in old.files:
            track = InstTrack(old.request_id, old.name, dbid, fnr, old.token, len(chunk),
                              where.now_ms, "queued", None, isns=chunk)
            events.append(_changed(track, "failed", where, reason=(
                f"never sent: more than {MAX_QUEUED} INST requests waiting")))
    return events


def mark_incomplete(inst: InstState, token: str | None, dbid: int | None, fnr: int | None,
                    config: ReassemblyConfig, where: Where) -> Events:
    """A pseudo-transaction of (token, dbid, fnr) was seen lost: its request is incomplete.

    None matches any (a continuation whose first message was lost names no token). The
    oldest open request it can belong to is marked (reported and asked again at its CMPL);
    if none is open, a request of the job's completed already (its CMPL on the reply topic,
    read before the data) is reported and asked again now.
    """
    def matches(t: InstTrack) -> bool:
        return ((token is None or t.token == token) and (dbid is None or t.dbid == dbid)
                and (fnr is None or t.fnr == fnr))

    track = next((t for t in inst.tracks if matches(t)), None)
    if track is not None:
        track.incomplete = True
        return []
    done = next((t for t in reversed(inst.done) if matches(t)), None)
    if done is None:
        return []
    inst.done.remove(done)
    return _incomplete(inst, done, done.isns, config, where)


def _incomplete(inst: InstState, track: InstTrack, missing: tuple[int, ...],
                config: ReassemblyConfig, where: Where) -> Events:
    """Report an incomplete request; the job's own ask again for the ISNs that did not come,
    until ``initial_state_max_attempts`` requests have asked for them (then: failed)."""
    target = config.initial_state_for(where.subscription)
    ours = bool(track.isns) and target is not None and target.name == track.name
    if not ours or target is None:
        return [_changed(track, "incomplete", where, reason=(
            "a pseudo-transaction of this request was lost: run the request again"))]
    if track.attempt >= config.initial_state_max_attempts:
        return [_changed(track, "failed", where, reason=(
            f"incomplete after {track.attempt} request(s): ISN(s) {_short(missing)} of "
            f"{track.dbid}/{track.fnr} never arrived"))]
    events: Events = [_changed(track, "incomplete", where, reason=(
        f"ISN(s) {_short(missing)} did not arrive: asked again"))]
    return events + request(inst, target, {(track.dbid, track.fnr): missing}, (), config,
                            where, reason=f"{track.request_id} incomplete",
                            attempt=track.attempt + 1)


def _track(inst: InstState, track: InstTrack, where: Where) -> list[InitialStateChanged]:
    """Remember a request; past MAX_TRACKED the oldest is dropped (reported unless overdue)."""
    inst.tracks.append(track)
    events = []
    while len(inst.tracks) > MAX_TRACKED:
        old = inst.tracks.pop(0)
        if old.state != "overdue":
            events.append(_changed(old, "overdue", where, reason=(
                f"no longer tracked: more than {MAX_TRACKED} INST requests open")))
    return events


# --------------------------------------------------------------------------- replies
def on_reply(inst: InstState, row: ElementRow, config: ReassemblyConfig,
             where: Where) -> Events:
    """An INST/INIT, CMPL or ERRO reply: settle or start the request it answers."""
    st = row.char("urbsst")
    if row.char("urbsrt") != "INST" or st not in REPLY_STATUSES:
        return []
    if st != "ERRO" and not row.home:
        return []  # the reply topic's copy: not ordered with the data (module docstring)
    corr: Correlation = (row.char("urbsrtok"), row.char("urbsinam"), row.num("urbsdbid"),
                         row.num("urbsfnr"))
    identity = "|".join(map(str, (st, *corr, row.num("urbstime"))))
    if identity in inst.seen:
        return []
    inst.seen = [*inst.seen, identity][-SEEN_WINDOW:]
    if st == "INIT":
        return _init(inst, corr, row.num("urbstime"), config, where)
    return _end(inst, corr, st, row, config, where)


def _end(inst: InstState, corr: Correlation, st: str, row: ElementRow,
         config: ReassemblyConfig, where: Where) -> Events:
    """CMPL or ERRO: the request's end — completed, incomplete, refused (asked again later)
    or failed."""
    rsp, subc = row.num("urbsrsp"), row.num("urbssubc")
    track = _oldest(inst, corr, ("started", "sent", "overdue") if st == "CMPL"
                    else ("sent", "overdue", "started"))
    if track is None:
        track = _external(corr, row.num("urbstime"), where)
    else:
        inst.tracks.remove(track)
        if st == "CMPL" and not track.init_seen:  # its INIT is still to come: not a new one
            inst.settled_early = [*inst.settled_early, list(corr)][-MAX_TRACKED:]
    if st == "CMPL" and rsp == 0:
        missing = track.missing()
        if missing or track.incomplete:
            return _incomplete(inst, track, missing or track.isns, config, where)
        if track.isns:
            inst.done = [*inst.done, track][-DONE_WINDOW:]
        return [_changed(track, "completed", where, reason="CMPL: initial-state processing "
                                                           "completed")]
    if st == "ERRO" and (rsp, subc) == REFUSED_BUSY and track.isns:
        return _refused(inst, track, config, where)
    return [_changed(track, "failed", where, rsp, subc, _failure(st, rsp, subc))]


def _refused(inst: InstState, track: InstTrack, config: ReassemblyConfig, where: Where
             ) -> Events:
    """INST/ERRO 131/44 (too many requests active): the request goes back to the queue and is
    sent again after a backoff — every file of it, as the whole message was refused."""
    siblings = [t for t in inst.tracks if t.request_id == track.request_id]
    for t in siblings:
        inst.tracks.remove(t)
    files = [track, *siblings]
    if track.attempt >= config.initial_state_max_attempts:
        return [_changed(track, "failed", where, *REFUSED_BUSY, reason=(
            f"refused {track.attempt} time(s): {_failure('ERRO', *REFUSED_BUSY)}"))]
    wait = config.initial_state_retry_ms * 2 ** (track.attempt - 1)
    inst.queue.insert(0, Pending(
        f"job:{inst.next_seq}", track.name, track.token,
        tuple((t.dbid, t.fnr, t.isns) for t in sorted(files, key=lambda t: (t.dbid, t.fnr))),
        (), f"{track.request_id} refused (131/44)", track.attempt + 1, where.now_ms + wait))
    inst.next_seq += 1
    return [_changed(track, "refused", where, *REFUSED_BUSY, reason=(
        f"{_failure('ERRO', *REFUSED_BUSY)}: asked again in {wait // 1000} s"))]


def _init(inst: InstState, corr: Correlation, urbstime: int, config: ReassemblyConfig,
          where: Where) -> list[InitialStateChanged]:
    """INIT: the oldest sent request started; the deadline counts from this sign of life.

    The replicator answers requests of one definition in order, so an INIT while a request
    of that correlation was settled before its INIT is that request's INIT.
    """
    if list(corr) in inst.settled_early:
        inst.settled_early.remove(list(corr))
        return []
    track = _oldest(inst, corr, ("sent", "overdue"), init_seen=False)
    events: list[InitialStateChanged] = []
    if track is None:
        track = _external(corr, urbstime, where)
        events += _track(inst, track, where)
    track.state, track.init_seen, track.init_time = "started", True, urbstime
    track.deadline_ms = where.now_ms + config.initial_state_timeout_ms
    return [*events, _changed(track, "started", where,
                              reason="INIT: initial-state processing started")]


def _oldest(inst: InstState, corr: Correlation, states: tuple[str, ...],
            init_seen: bool | None = None) -> InstTrack | None:
    """The oldest open request with this correlation, preferring states in the given order."""
    for state in states:
        for t in inst.tracks:
            if (t.correlation == corr and t.state == state
                    and (init_seen is None or t.init_seen == init_seen)):
                return t
    return None


def _external(corr: Correlation, urbstime: int, where: Where) -> InstTrack:
    """A request the job did not send, known from its first reply on."""
    token, name, dbid, fnr = corr
    return InstTrack(f"ext:{token}:{urbstime}", name, dbid, fnr, token, 0, where.now_ms,
                     "sent", None)


def _failure(st: str, rsp: int, subc: int) -> str:
    meaning = describe_subcode(rsp, subc) or "error"
    return f"{st}: response {rsp} subcode {subc} ({meaning})"


def _short(values: tuple[int, ...], shown: int = 8) -> str:
    text = ", ".join(map(str, values[:shown]))
    return text + (f" … ({len(values)} in all)" if len(values) > shown else "")


# --------------------------------------------------------------------------- timers
def overdue(inst: InstState, config: ReassemblyConfig, where: Where) -> list[InitialStateChanged]:
    """Requests past their deadline: a warning once; they stay tracked for a late reply."""
    events = []
    for t in inst.tracks:
        if t.deadline_ms is not None and where.now_ms >= t.deadline_ms:
            t.state, t.deadline_ms = "overdue", None
            events.append(_changed(t, "overdue", where, reason=(
                f"no INST/CMPL or INST/ERRO within {config.initial_state_timeout_ms} ms")))
    return events


def _changed(track: InstTrack, state: str, where: Where, rsp: int = 0, subcode: int = 0,
             reason: str = "") -> InitialStateChanged:
    return InitialStateChanged(
        subscription=where.subscription, destination=where.destination, epoch=where.epoch,
        request_id=track.request_id, state=state, name=track.name, dbid=track.dbid,
        fnr=track.fnr, token=track.token, rsp=rsp, subcode=subcode, reason=reason,
        isn_count=track.isn_count, requested_at_ms=track.requested_ms, at_ms=where.now_ms,
        attempt=track.attempt)
