"""Initial state after a resend (INST requests for exactly the unverified ISNs) and tracking of
INST requests through their INIT/CMPL/ERRO replies.

Why: a resent transaction has before images only (the resend buffer keeps no after images), so
the current-state rows of the ISNs it inserted or updated become unverified. When the
subscription has an ISN-list initial-state definition, the job asks the replicator to re-read
exactly those ISNs; the R images that come back (tsnr-0 pseudo-transactions, URBTTTIM = the
time they were read, hence a newer version) make the rows verified again.

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

Completeness: a pseudo-transaction whose continuation is lost never lands; the request it
belongs to (found by its token, database and file) is marked incomplete, and when its CMPL
comes (or at once, if it came already) the job reports it and asks again for the same ISNs.

Duplicates: pseudo-transactions have tsnr 0, outside the sequence, so a copy the transport
delivers again is recognised by its identity (``assembler.initial_state_fingerprint``).

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
SEEN_WINDOW = 64      # reply identities remembered to count a reply copy once
DONE_WINDOW = 16      # completed requests remembered, to ask again if a lost chunk shows late
FP_WINDOW = 4096      # identities of landed pseudo-transactions (duplicates are dropped)
MAX_ISN = 0xFFFFFFFE  # X'FFFFFFFF' marks a range in an ISN list

Correlation = tuple[str, str, int, int]  # token, initial-state name, dbid, fnr


@dataclass(slots=True)
class InstTrack:
    """One INST request not yet answered by CMPL/ERRO. ``state``: sent, started or overdue."""

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
    isns: tuple[int, ...] = ()  # the job's requests: what to ask again if incomplete
    incomplete: bool = False    # a pseudo-transaction of it was lost

    @property
    def correlation(self) -> Correlation:
        return (self.token, self.name, self.dbid, self.fnr)

    def to_obj(self) -> list:
        return [self.request_id, self.name, self.dbid, self.fnr, self.token, self.isn_count,
                self.requested_ms, self.state, self.deadline_ms, self.init_seen,
                list(self.isns), self.incomplete]

    @classmethod
    def from_obj(cls, obj: list) -> InstTrack:
        track = cls(*obj[:10])
        if len(obj) > 10:
            track.isns, track.incomplete = tuple(obj[10]), bool(obj[11])
        return track


@dataclass(slots=True)
class InstState:
    """The INST part of a key's state: a request counter, open requests, recent replies.

    ``settled_early`` holds correlations of requests settled by CMPL/ERRO before their INIT
    was seen (Kafka order across topics is not reply order): that INIT is then no new request.
    """

    next_seq: int = 1
    tracks: list[InstTrack] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    settled_early: list[list] = field(default_factory=list)
    done: list[InstTrack] = field(default_factory=list)  # recently completed job requests
    fps: list[int] = field(default_factory=list)  # landed pseudo-transactions' identities

    def to_obj(self) -> dict:
        return {"seq": self.next_seq, "tracks": [t.to_obj() for t in self.tracks],
                "seen": self.seen, "early": self.settled_early,
                "done": [t.to_obj() for t in self.done], "fps": self.fps}

    @classmethod
    def from_obj(cls, obj: dict | None) -> InstState:
        if not obj:
            return cls()
        return cls(obj["seq"], [InstTrack.from_obj(t) for t in obj["tracks"]],
                   list(obj["seen"]), [list(c) for c in obj["early"]],
                   [InstTrack.from_obj(t) for t in obj.get("done", [])],
                   list(obj.get("fps", [])))

    def landed_before(self, fp: int) -> bool:
        """A pseudo-transaction with this identity landed already (a transport copy);
        otherwise it is remembered as landed now."""
        if fp in self.fps:
            return True
        self.fps = [*self.fps, fp][-FP_WINDOW:]
        return False

    def deadlines(self) -> list[int]:
        return [t.deadline_ms for t in self.tracks if t.deadline_ms is not None]


@dataclass(frozen=True, slots=True)
class Where:
    """The key and time the events are about (every event names them)."""

    subscription: str
    destination: str
    epoch: int
    now_ms: int


# --------------------------------------------------------------------------- requests
def unverified_isns(txn: TransactionComplete, target: InitialStateTarget) -> dict[int, set[int]]:
    """ISNs per file that a landed resend leaves unverified and the definition covers.

    Those are the I/U records without an after image (exactly the MERGE's "unverify" rows).
    """
    after = {i.rsnr for i in txn.images if i.image_type == "A"}
    out: dict[int, set[int]] = {}
    for r in txn.records:
        if (r.type in UNVERIFIED_TYPES and r.rsnr not in after and 0 < r.isn <= MAX_ISN
                and target.covers(txn.dbid, r.fnr)):
            out.setdefault(r.fnr, set()).add(r.isn)
    return out


def request(inst: InstState, target: InitialStateTarget, isns: dict[int, Iterable[int]],
            tsnrs: Iterable[int], config: ReassemblyConfig, where: Where, reason: str = "",
            ) -> list[InitialStateRequested | InitialStateChanged]:
    """INST request messages for ISNs per file: one message names every file of the
    definition (seed 000: a multi-file definition needs a URBI per file), each file's ISNs
    sorted and split at ``max_isns_per_request`` over as many messages as the longest needs.
    Each file of each message is tracked on its own (the replies name dbid and fnr)."""
    cap = config.max_isns_per_request
    ordered = {fnr: sorted(set(isns.get(fnr, ()))) for fnr in target.files}
    rounds = max((len(v) + cap - 1) // cap for v in ordered.values())
    token = target.token_for(where.destination, config.request_token)
    events: list[InitialStateRequested | InitialStateChanged] = []
    for n in range(rounds):
        files = tuple((fnr, tuple(v[n * cap:(n + 1) * cap])) for fnr, v in ordered.items())
        request_id = f"job:{inst.next_seq}"
        inst.next_seq += 1
        for fnr, chunk in files:
            events += _track(inst, InstTrack(
                request_id, target.name, target.dbid, fnr, token, len(chunk), where.now_ms,
                "sent", where.now_ms + config.initial_state_timeout_ms, isns=chunk), where)
        events.append(InitialStateRequested(
            subscription=where.subscription, destination=where.destination, epoch=where.epoch,
            request_id=request_id, name=target.name, dbid=target.dbid, files=files,
            tsnrs=tuple(sorted(set(tsnrs))), token=token,
            reply_destination=config.reply_destination, at_ms=where.now_ms, reason=reason))
    return events


def mark_incomplete(inst: InstState, token: str | None, dbid: int | None, fnr: int | None,
                    config: ReassemblyConfig, where: Where
                    ) -> list[InitialStateRequested | InitialStateChanged]:
    """A pseudo-transaction of (token, dbid, fnr) was lost: its request is incomplete.

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
    return _incomplete(inst, done, config, where)


def _incomplete(inst: InstState, track: InstTrack, config: ReassemblyConfig, where: Where
                ) -> list[InitialStateRequested | InitialStateChanged]:
    """Report an incomplete request; the job's own are asked again for the same ISNs."""
    target = config.initial_state_for(where.subscription)
    again = bool(track.isns) and target is not None and target.name == track.name
    reason = ("a pseudo-transaction of this request was lost: "
              + ("asked again for its ISNs" if again else "run the request again"))
    events: list[InitialStateRequested | InitialStateChanged] = [
        _changed(track, "incomplete", where, reason=reason)]
    if again and target is not None:
        events += request(inst, target, {track.fnr: track.isns}, (), config, where,
                          reason=f"{track.request_id} incomplete")
    return events


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
             where: Where) -> list[InitialStateChanged]:
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
    rsp, subc = row.num("urbsrsp"), row.num("urbssubc")
    if st == "INIT":
        return _init(inst, corr, row.num("urbstime"), config, where)
    track = _oldest(inst, corr, ("started", "sent", "overdue") if st == "CMPL"
                    else ("sent", "overdue", "started"))
    if track is None:
        track = _external(corr, row.num("urbstime"), where)
    else:
        inst.tracks.remove(track)
        if st == "CMPL" and not track.init_seen:  # its INIT is still to come: not a new one
            inst.settled_early = [*inst.settled_early, list(corr)][-MAX_TRACKED:]
    if st == "CMPL" and rsp == 0:
        if track.incomplete:
            return _incomplete(inst, track, config, where)
        if track.isns:
            inst.done = [*inst.done, track][-DONE_WINDOW:]
        return [_changed(track, "completed", where, reason="CMPL: initial-state processing "
                                                           "completed")]
    return [_changed(track, "failed", where, rsp, subc, _failure(st, rsp, subc))]


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
    track.state, track.init_seen = "started", True
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
        isn_count=track.isn_count, requested_at_ms=track.requested_ms, at_ms=where.now_ms)
