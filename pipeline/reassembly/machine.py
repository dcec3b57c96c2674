"""``step``: the pure state machine of one (destination, subscription) key.

``step(state, rows, now_ms, config, key)`` → new state, events, next timer. Like h11, it does
no I/O, reads no clock and no randomness: the glue feeds rows and the batch's processing time,
then writes the events out. The same inputs always give the same outputs, so a replayed batch
reproduces exactly what Delta already holds.

Order of work in one step: rows in Kafka order, message by message (pseudo rows of the decode
stage — destination ticks, message-number runs, operator commands — at their place); then
timers (retries, verdicts, hold timeouts, the partial transaction's timeouts, STAT for an idle
key, overdue INST requests) at ``now_ms``; then the INST requests for the ISNs the step's landed
resends left unverified (see initial_state.py).

What a real transport (replicator, MQ, connector, Kafka) may do, and where it is handled:
- re-produce old messages (connector at-least-once): transactions are judged by their tsnr
  within the epoch and by when the replicator sent them (sequence.classify) — never by their
  commit time, which is a database's clock — status-only messages by their identity
  (numbering.Copies), a message below the open transaction's message numbers is skipped
  whole;
- carry destination-wide STRT/REST without a subscription name: the decode stage fans them out
  to every subscription of the destination; a restart counts only if sent after everything
  seen on the destination (a copy of an old STRT does not);
- stall: the partial transaction's timeout counts the destination's later messages, processing
  time only as a last resort, and a late continuation still completes it;
- lose status-only messages or a last transaction: URBHMSNR runs (destination key) and STAT.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from pipeline.reassembly import assembler, gaps, initial_state, pseudo
from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import (
    UNPLACED,
    BufferLimitExceeded,
    DuplicateDropped,
    EpochStarted,
    Event,
    GapEvent,
    GapFilledLate,
    GapRequested,
    GapUnrecoverable,
    Inconsistent,
    LostContinuation,
    MessagesMissing,
    MessagesUnseen,
    RequestRejected,
    StatRequested,
    StatusReceived,
    StormResumed,
    StormTripped,
    TransactionComplete,
    TsnrNotice,
)
from pipeline.reassembly.gfft import gfft_event
from pipeline.reassembly.rows import (
    CONTROL_EYE,
    HEADERS_EYE,
    TICK_EYE,
    ElementRow,
    messages,
)
from pipeline.reassembly.sequence import (
    WRAP_ZONE,
    Sequence,
    Verdict,
    classify,
    to_tsnr,
    unwrap,
)
from pipeline.reassembly.state import EPOCH_STARTS, KeyState
from pipeline.urb.codes import tran_reply_action

DATA_EYES = frozenset({"URBT", "URBR", "URBD", "URBE", "URBC"})
RESTART_STATUS = frozenset({"STRT", "REST"})
DROPPED = frozenset({Verdict.DUPLICATE, Verdict.STALE, Verdict.REDELIVERY,
                     Verdict.EARLIER_EPOCH})


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one call produces. ``state`` None means: nothing to keep, drop the key's state."""

    state: KeyState | None
    events: list[Event]
    next_timeout_ms: int | None


def step(state: KeyState | None, rows: Iterable[ElementRow], now_ms: int,
         config: ReassemblyConfig, key: tuple[str, str]) -> StepResult:
    """Advance one key by a batch of rows (possibly none, when a timer fired)."""
    run = MachineRun(state, now_ms, config, key)
    run.feed(rows)
    return run.finish()


class MachineRun:
    """``step`` taken apart, for a caller that lands some of a call's messages itself (the
    fast path, ``pipeline.reassembly.fast``, between the machine's messages): begin from a
    state, ``feed`` rows, hand the state over to be changed outside between feeds, and
    ``finish`` once — timers and INST requests run exactly once per call, at the end, as in
    ``step``.

    ``state`` is the run's own copy (never the object given): whoever changes it between
    feeds must change it exactly as ``step`` would have, for the messages it took."""

    def __init__(self, state: KeyState | None, now_ms: int, config: ReassemblyConfig,
                 key: tuple[str, str]) -> None:
        st = state.clone() if state is not None else KeyState()
        st.window.resize(config.duplicate_window)
        self._run = _Run(st, config, key, now_ms)
        self._finished = False

    @property
    def state(self) -> KeyState:
        """The state as the messages fed so far left it."""
        return self._run.st

    def feed(self, rows: Iterable[ElementRow]) -> None:
        """Rows of whole messages (any order: sorted into Kafka order here), all after those
        fed before."""
        assert not self._finished, "fed after finish"
        for message in messages(rows):
            self._run.message(message)

    def replace_state(self, state: KeyState) -> None:
        """Continue from ``state``: what the messages taken outside the run left."""
        self._run.st = state

    def finish(self) -> StepResult:
        """Timers at ``now``, then the INST requests; the call's result."""
        assert not self._finished, "finished twice"
        self._finished = True
        run, st = self._run, self._run.st
        run.timers()
        run.request_initial_states()  # after timers: they may land held resends too
        return StepResult(None if st.is_empty() else st, run.events, run.next_timeout())


class _Run:
    """One step's working context: the state being changed and the events produced."""

    def __init__(self, st: KeyState, config: ReassemblyConfig, key: tuple[str, str],
                 now_ms: int) -> None:
        self.st, self.config, self.key, self.now = st, config, key, now_ms
        self.destination, self.subscription = key
        self.events: list[Event] = []
        # The message at hand started with a URBC that continued the open transaction.
        self.resumed = False
        # (dbid, fnr) -> (ISNs, tsnrs) that resends landed in this step left unverified.
        self.unverified: dict[tuple[int, int], tuple[set[int], set[int]]] = {}
        # When the message at hand was sent (Unix ms): the storm breaker's clock.
        self.sent_ms: int | None = None

    # ----------------------------------------------------------------- messages
    def message(self, msg: tuple[ElementRow, ...]) -> None:
        """One Kafka message (or one pseudo row): how it continues the open transaction,
        then its elements; the destination's clock moves on after it."""
        if msg[0].eye.startswith("!"):
            for row in msg:
                self._pseudo(row)
            return
        lead = 0
        while lead < len(msg) - 1 and msg[lead].eye == "URBF":
            self._element(msg[lead])
            lead += 1
        msg = msg[lead:]
        first = msg[0]
        self.sent_ms = self.config.stck_ms(first.urbhtime)
        sent = first.urbhtime
        if all(r.eye == "URBS" for r in msg) and self._status_copy(first):
            return
        if first.eye in DATA_EYES:
            self._data_message(msg)
        else:
            for row in msg:
                self._element(row)
        if first.home:
            # Only the destination's own topic orders messages against the key's data: a
            # reply on the reply destination's topic sorts by its own offsets, so a reply
            # sent after a REST can come first in a call, and its time would make that REST
            # look like a redelivered copy (``_restart``) — the whole new epoch then lands
            # as the old one's.
            self._seen_sent(sent)

    def _data_message(self, msg: tuple[ElementRow, ...]) -> None:
        first = msg[0]
        self.st.stat.data_seen(self.now)
        if self._repeated(first):
            self._duplicate(_tsnr_of(first), f"message {first.urbhmsnr} delivered again", first)
            return
        continued = False
        if first.eye == "URBC":
            continued = self._continuation(first)
        else:
            self.st.discard = None
            if self.st.partial is not None:
                self._lose("the next message does not start with URBC", first)
        self.resumed = continued
        for row in msg[1:] if first.eye == "URBC" else msg:
            self._element(row)
        self.resumed = False
        self._end_of_message()

    def _seen_sent(self, stck: int) -> None:
        """The destination's clock: the newest URBHTIME seen on it (evidence for verdicts,
        the partial transaction's timeout and restarts)."""
        if stck > self.st.newest_sent:
            self.st.newest_sent = stck
            self.st.newest_sent_ms = self.config.stck_ms(stck)

    def _status_copy(self, first: ElementRow) -> bool:
        """A status-only message delivered again (numbering.Copies): dropped, counted."""
        copies = self.st.copies
        if copies.is_copy(first.topic, first.urbhtime, first.urbhmsnr):
            self._duplicate(0, f"status message {first.urbhmsnr} delivered again", first)
            return True
        copies.add(first.topic, first.urbhtime, first.urbhmsnr)
        return False

    def _repeated(self, first: ElementRow) -> bool:
        """A message delivered again while a transaction is open: skipped whole, so it cannot
        break the open transaction.

        It is one the open transaction already came in, one numbered below the open
        transaction's messages (a connector re-producing a batch from before it: every
        message of the open transaction comes again after it), or one starting with (a
        continuation of) a transaction that has already landed.
        """
        p = self.st.partial
        if p is None:
            return False
        if assembler.repeats(p, first):
            return True
        tsnr = _tsnr_of(first)
        behind = 0 < first.urbhmsnr < max(p.msnrs) and first.topic == p.topic
        if first.eye == "URBC":
            return tsnr != p.tsnr and (behind or self._landed_here(tsnr))
        if behind:
            return True
        if first.eye == "URBT":
            return tsnr != 0 and self.st.window.contains(tsnr, assembler.urbt_fingerprint(first))
        return False

    def _end_of_message(self) -> None:
        """Rule 5: without URBE, the counts alone may end a transaction not marked to continue."""
        p = self.st.partial
        if p is None:
            return
        p.touched_ms = self.now
        if not p.cont and assembler.counts_error(p) is None:
            self._complete()

    def _continuation(self, row: ElementRow) -> bool:
        """A message starting with URBC must continue the open transaction exactly.

        Returns True when it did (the open transaction goes on in this message).
        """
        tsnr, p = row.num("urbctsnr"), self.st.partial
        if p is not None and p.tsnr == tsnr:
            error = assembler.continue_with(p, row, self.now)
            if error:
                self._lose(error, row)
                self.st.discard = tsnr
            return not error
        if p is not None:
            self._lose(f"the next message continues transaction {tsnr} instead", row)
        if self.st.discard == tsnr:
            return False
        self.st.discard = tsnr
        if tsnr and self._landed_here(tsnr):
            self._duplicate(tsnr, "continuation of a transaction already landed", row)
        elif self._placed_before(tsnr):
            self._duplicate(tsnr, "continuation of a transaction placed before (redelivered)",
                            row)
        elif self._sent_before_epoch(row.urbhtime):
            self._duplicate(tsnr, "continuation sent before the replicator restarted "
                            "(redelivered)", row)
        elif tsnr == 0 and not self._fresh(row):
            self._duplicate(0, "initial-state continuation delivered again", row)
        else:
            self._lost_event(tsnr, "continuation whose start was never received", row)
            self._orphan_lost(tsnr, row)
        return False

    def _orphan_lost(self, tsnr: int, row: ElementRow) -> None:
        """A continuation whose first message was lost: its transaction never lands — a gap
        on its tsnr, or for a pseudo-transaction its INST request is incomplete."""
        if tsnr == 0:
            self.events.extend(initial_state.mark_incomplete(
                self.st.inst, None, None, None, self.config, self._where()))
            return
        # treated as flagged: an orphan continuation is no evidence of a restart
        self._mark_missing(tsnr, None, True, before=False, fresh=False)

    def _fresh(self, row: ElementRow) -> bool:
        """``row``'s message was sent after every message seen on the destination so far
        (replicator time, the key's own topic): no copy of an earlier one."""
        return row.home and row.urbhtime > self.st.newest_sent

    def _landed_here(self, tsnr: int) -> bool:
        """A transaction numbered ``tsnr`` landed in this epoch (the window's)."""
        return self.st.window.contains_tsnr(tsnr, self.st.epoch)

    def _sent_before_epoch(self, sent: int) -> bool:
        """The message was sent before the STRT/REST that began this epoch: a connector's
        redelivery from an earlier epoch, whose tsnr names another transaction.

        Why the header time decides: a continuation carries no commit time (URBTTTIM is in
        the URBT of the message that was lost or came before), but every message carries
        URBHTIME, the replicator's send time, which a redelivery keeps byte for byte; the
        replicator sends a restart after everything it sent before (URBH DSECT, seed
        documents). Without this, such an orphan opened a false gap in the new epoch and
        the next STRT began an epoch too many.
        """
        return bool(self.st.epoch_time) and 0 < sent < self.st.epoch_time

    def _placed_before(self, tsnr: int) -> bool:
        """``tsnr`` lies behind the sequence and no gap waits for it: it was placed."""
        st = self.st
        if st.next_u is None or tsnr == 0:
            return False
        u = unwrap(tsnr, st.next_u)
        return u < st.next_u and not self._is_missing(u) and not self._is_settled(u)

    # ----------------------------------------------------------------- pseudo rows
    def _pseudo(self, row: ElementRow) -> None:
        """A row the decode stage adds (rows.HEADERS_EYE, TICK_EYE, CONTROL_EYE)."""
        if row.eye == TICK_EYE:
            self._seen_sent(row.num("htime"))
        elif row.eye == HEADERS_EYE:
            self._message_numbers(row)
        elif row.eye == CONTROL_EYE:
            self._control(row)

    def _message_numbers(self, row: ElementRow) -> None:
        """A run of consecutive URBHMSNR on the destination (destination-wide key)."""
        first, last, htime = row.num("first"), row.num("last"), row.num("htime")
        low = self.st.numbering.low
        if self.st.numbering.unseen_before(first, last, htime):
            self.st.count("messages_unseen", last - first + 1)
            self.events.append(MessagesUnseen(
                subscription=self.subscription, destination=self.destination,
                epoch=self.st.epoch, first=first, last=last, low=low or 0, topic=row.topic,
                partition=row.partition, offset=row.offset, at_ms=self.now))
        hole = self.st.numbering.on_run(first, last, htime)
        self._seen_sent(row.num("htime"))
        if hole is None:
            return
        self.st.count("messages_missing", hole[1] - hole[0] + 1)
        self.events.append(MessagesMissing(
            subscription=self.subscription, destination=self.destination, epoch=self.st.epoch,
            gap_id=f"msnr:{self.st.numbering.restarts}:{hole[0]}", from_tsnr=hole[0],
            to_tsnr=hole[1], missing=(), requests_sent=0, opened_at_ms=self.now,
            reason=f"URBHMSNR {hole[0]}..{hole[1]} of destination {self.destination} never "
                   f"arrived on {row.topic} (before offset {row.offset})",
            at_ms=self.now, kind="messages"))

    def _control(self, row: ElementRow) -> None:
        """An operator command (``urbpipe gaps resume``) from the control topic."""
        command = row.char("command")
        if command != "resume":
            self._inconsistent(row, None, f"unknown control command {command!r}")
            return
        was = self.st.storm.tripped
        self.st.storm.resume()
        self.events.append(StormResumed(
            subscription=self.subscription, destination=self.destination, epoch=self.st.epoch,
            by=row.char("by"), note=row.char("note"), open_gaps=len(self.st.gaps),
            at_ms=self.now))
        if was:
            for gap in self.st.gaps:
                if gap.missing:
                    self._request(gap)

    # ----------------------------------------------------------------- elements
    def _element(self, row: ElementRow) -> None:
        eye = row.eye
        if eye == "URBT":
            self._urbt(row)
        elif eye in ("URBR", "URBD", "URBE"):
            self._data(row)
        elif eye == "URBS":
            self._status(row)
        elif eye == "URBC":
            self._inconsistent(row, None, "URBC not at the start of a message")
        elif eye == "URBF":  # a layout version: reported, never part of a transaction
            self.events.append(gfft_event(row, self.key, self.st.epoch, self.now))
        # other elements (URBU, URBI …) carry no transaction data: ignored here

    def _urbt(self, row: ElementRow) -> None:
        p = self.st.partial
        if p is not None:
            if not p.cont and assembler.counts_error(p) is None:
                self._complete()
            else:
                self._lose("a URBT came before its URBE", row)
        self.st.discard = None
        tsnr, fp = row.num("urbttsnr"), assembler.urbt_fingerprint(row)
        flagged = row.flag("urbtrsnd") or row.flag("urbtptrn")
        if tsnr != 0 and (self.st.window.contains(tsnr, fp)
                          or (flagged and self._flagged_repeat(tsnr))):
            self._duplicate(tsnr, "transaction already landed", row)
            self.st.discard = tsnr
            return
        self.st.partial = assembler.start(row, self.now, self.st.newest_sent)

    def _data(self, row: ElementRow) -> None:
        """URBR/URBD/URBE: add to the open transaction, or skip while discarding one."""
        if self.st.discard is not None:
            if row.eye == "URBE" and row.num("urbetsnr") == self.st.discard:
                self.st.discard = None
            return
        p = self.st.partial
        if p is None:
            self._inconsistent(row, None, f"{row.eye} outside a transaction")
            return
        if row.eye == "URBR":
            error = assembler.add_record(p, row)
        elif row.eye == "URBD":
            error = assembler.add_image(p, row)
        else:
            error = assembler.end_error(p, row)
        if error and self.resumed:
            self._resume_failed(row, error)
        elif error:
            self._abandon(row, error)
        elif row.eye == "URBE":
            self._complete()
        elif row.eye == "URBD":
            self._check_buffer()

    # ----------------------------------------------------------------- status
    def _status(self, row: ElementRow) -> None:
        """Every URBS is reported (unless an echo); STRT/REST may begin an epoch, TRSP settle
        a tsnr, SUBS reveal a lost last transaction, REAC or SUBS reactivate parked tsnrs."""
        st = row.char("urbsst")
        if st in RESTART_STATUS:
            self._restart(row, st)
        elif st == "TRSP":
            self._trsp(row)
        elif st == "SUBS" and row.char("urbsrt") == "STAT":
            self._subs(row)
        elif st == "REAC":
            self._reactivated()
        if row.echo:
            return
        self.events.append(StatusReceived(
            subscription=self.subscription, destination=self.destination, epoch=self.st.epoch,
            fields=dict(row.fields), data=row.data, topic=row.topic, partition=row.partition,
            offset=row.offset, elem_index=row.elem_index, urbhtime=row.urbhtime,
            at_ms=self.now, big_endian=row.big_endian))
        if row.char("urbsrt") == "INST":
            self._pseudo_cut_short(row, st)
            self.events.extend(initial_state.on_reply(self.st.inst, row, self.config,
                                                      self._where()))

    def _pseudo_cut_short(self, row: ElementRow, st: str) -> None:
        """INST/CMPL on the key's own topic follows every pseudo-transaction of its request:
        one still open with the request's token lost its continuation."""
        p = self.st.partial
        if (p is not None and p.tsnr == 0 and st == "CMPL" and row.home
                and p.token == row.char("urbsrtok")):
            self._lose("INST/CMPL came before the pseudo-transaction ended", row)

    def _restart(self, row: ElementRow, st: str) -> None:
        """STRT/REST: numbering restarts at 1 (seed 001, rule 16) — if it is a new one.

        A copy of an old STRT (a redelivered batch) is no restart: a real one is sent after
        everything the replicator sent before, so its time must be newer than the newest
        message seen on the destination.
        """
        sent = max(row.urbhtime, row.num("urbstime"))
        if sent and sent <= self.st.newest_sent:  # STCK values are unique: a copy
            return
        if not self.subscription:  # the destination-wide key: message numbers restart
            self.st.numbering.restart(sent)
            return
        if self.st.partial is not None:
            # no TRAN request: after the restart its tsnr names another transaction
            self._lose(f"replicator {st} before the transaction ended", row, request=False)
        if not (self.st.epoch_fresh and self.st.next_u == 1):
            self._new_epoch(st)
        self.st.epoch_time = max(row.urbhtime, row.num("urbstime"))

    def _trsp(self, row: ElementRow) -> None:
        """A reply to a TRAN request: response 0 confirms its tsnr's resend (asked again
        only after ``confirmed_wait_ms``); an error settles (or parks) its own tsnr only —
        the resend buffer is circular, the other tsnrs of the gap may still come."""
        token = self.config.request_token
        if token and row.char("urbsrtok") != token:
            return
        rsp, subc, tsnr = row.num("urbsrsp"), row.num("urbssubc"), row.num("urbstsnr")
        action = tran_reply_action(rsp, subc)
        if action == "retry" or self.st.next_u is None or tsnr == 0:
            return
        if self.st.epoch_time and max(row.urbhtime, row.num("urbstime")) < self.st.epoch_time:
            return  # a reply from before the restart: its tsnr named another transaction
        u = unwrap(tsnr, self.st.next_u)
        gap = gaps.find(self.st.gaps, u)
        if gap is None:
            return
        if action == "ok":
            gaps.confirm(gap, u, self.now)
            return
        if action == "park":
            gaps.park(gap, u)
            return
        why = gaps.trsp_reason(tsnr, rsp, subc)
        if action == "fatal" and why.split(":", 1)[1] not in " ".join(gap.why):
            self._notice(RequestRejected, tsnr, f"a retry cannot fix it: {why}", row, None)
        self._settle(gap, u, why)

    def _subs(self, row: ElementRow) -> None:
        """A STAT reply. On the key's own topic it follows every transaction sent before it:
        a tsnr it names that did not arrive is lost (a gap). Any SUBS with response 0 shows
        the subscription active: parked tsnrs are asked again."""
        if row.num("urbsrsp") == 0:
            self._reactivated()
        if not row.home or row.num("urbsrsp") != 0 or not self.subscription:
            return
        self.st.stat.answered = True
        sent = row.num("urbstsnr")
        if sent == 0 or self.st.next_u is None:
            return
        u = unwrap(sent, self.st.next_u)
        if not self.st.next_u <= u < self.st.next_u + WRAP_ZONE:
            return
        u = self._sent_beside_open(u, sent, row)
        if u >= self.st.next_u:
            last = to_tsnr(self.st.next_u - 1) if self.st.next_u > 1 else 0
            self._open_gap(self.st.next_u, u, f"STAT: the replicator sent up to tsnr {sent}, "
                           f"the last one received is {last}")
            self.st.next_u = u + 1

    def _sent_beside_open(self, u: int, sent: int, row: ElementRow) -> int:
        """The last position a SUBS shows lost, given the transaction in progress.

        A status may come between two messages of one transaction: a SUBS naming that
        transaction's tsnr is sent while its continuation is still to come (it is not lost
        and must not be requested). A SUBS naming a later tsnr shows that its continuation
        will never come — all of a transaction is sent before any of another (seed 001,
        rule 12)."""
        p = self.st.partial
        if p is None or p.tsnr == 0 or p.stalled:
            return u
        pu = unwrap(p.tsnr, self.st.next_u)
        if pu == u:
            return u - 1
        if self.st.next_u <= pu < u:
            self._lose(f"STAT: the replicator sent tsnr {sent} after it", row)
        return u

    def _reactivated(self) -> None:
        """The subscription is active again: tsnrs parked by TRSP 36 are asked for again."""
        for gap in self.st.gaps:
            if gaps.unpark(gap) and not self.st.storm.tripped:
                self._request(gap)

    # ----------------------------------------------------------------- sequence
    def _complete(self) -> None:
        """The open transaction is whole: place it in the sequence and land (or hold) it."""
        p = self.st.partial
        assert p is not None
        self.st.partial = None
        if p.tsnr == 0:
            self._initial_state(p)
            return
        verdict, u = self._place(p.tsnr, p.fp, p.flagged, self._before_epoch(p), p.fresh)
        if verdict is Verdict.EARLIER_EPOCH and self._late_fill_earlier_epoch(p):
            return
        if verdict in DROPPED:
            self._duplicate(p.tsnr, self._drop_reason(verdict, u, p.tsnr), None, p)
            return
        assert u is not None
        if verdict is Verdict.LATE_FILL:
            self._late_fill(u, p, self.st.epoch)
            return
        self._advance(verdict, u, "transaction(s) never received")
        origin = "resend" if p.resend else "live"
        txn = assembler.finish(p, self.key, self.st.epoch, origin, self.now)
        self.st.window.add(p.tsnr, p.fp, self.st.epoch)
        barrier = gaps.hold_barrier(self.st.gaps)
        if barrier is not None and u > barrier:
            self._hold(u, txn)
        else:
            self._land(txn)
        self._release_held()

    def _initial_state(self, p: assembler.Partial) -> None:
        """A pseudo-transaction (tsnr 0): outside the sequence, landed once (``pseudo``)."""
        if pseudo.is_copy(self.st.inst, p):
            self._duplicate(0, "initial-state pseudo-transaction delivered again", None, p)
            return
        pseudo.note_received(self.st.inst, p)
        self._land(assembler.finish(p, self.key, self.st.epoch, "initial_state", self.now))

    def _place(self, tsnr: int, fp: int | None, flagged: bool, before: bool, fresh: bool
               ) -> tuple[Verdict, int | None]:
        """Classify a tsnr; a restart begins the new epoch and classifies again within it.

        ``before``: sent before this epoch began; ``fresh``: its message is newer than every
        message seen on the destination (``sequence.Sequence``)."""
        verdict, u = classify(tsnr, fp, flagged, self._sequence(before, fresh))
        if verdict is Verdict.RESTART:
            self._new_epoch(("tsnr back to 1" if tsnr == 1 else f"tsnr went back to {tsnr}")
                            + " in a message sent after every one seen (no STRT/REST seen)")
            # the restart came after everything seen, before this message
            self.st.epoch_time = self.st.newest_sent + 1
            verdict, u = classify(tsnr, fp, flagged, self._sequence(False, fresh))
        return verdict, u

    def _sequence(self, before: bool, fresh: bool) -> Sequence:
        st = self.st
        return Sequence(st.next_u, st.window, st.epoch, self._is_missing, self._is_settled,
                        fresh=fresh, before_epoch=before)

    def _before_epoch(self, p: assembler.Partial) -> bool:
        """The transaction was sent before the restart that began this epoch — or, for a
        resend, processed before it (URBTPTIM: a resend keeps the original's URBT): an
        earlier epoch's, whose tsnr names another transaction here. Both are the
        replicator's clock, the STRT/REST's too."""
        if self._sent_before_epoch(p.sent_time):
            return True
        return p.resend and self._sent_before_epoch(p.head["urbtptim"])

    def _flagged_repeat(self, tsnr: int) -> bool:
        """A resend of a tsnr landed in this epoch, unless an open gap waits for it."""
        st = self.st
        if not self._landed_here(tsnr):
            return False
        return st.next_u is None or not (self._is_missing(unwrap(tsnr, st.next_u))
                                         or self._is_settled(unwrap(tsnr, st.next_u)))

    def _is_missing(self, u: int) -> bool:
        return gaps.find(self.st.gaps, u) is not None

    def _is_settled(self, u: int) -> bool:
        """Given up as lost: in an ended gap (settled.GivenUp) or settled in an open one."""
        return (self.st.given_up.find(self.st.epoch, u) is not None
                or any(u in g.settled for g in self.st.gaps))

    def _advance(self, verdict: Verdict, u: int, reason: str, through: bool = False,
                 request: bool = True) -> None:
        """Move the sequence past ``u``: open a gap for what was skipped, or fill one.

        ``through`` also counts ``u`` itself as missing (a transaction that never landed).
        """
        st = self.st
        st.epoch_fresh = False
        if verdict is Verdict.FILL:
            if not through:
                self._fill(u)
            return
        start = u if verdict is Verdict.BASELINE else st.next_u
        assert start is not None
        if verdict is Verdict.BASELINE:
            st.base_u = u
        end = u if through else u - 1
        if end >= start:
            self._open_gap(start, end, reason, request)
        st.next_u = max(st.next_u or 0, u + 1)

    def _mark_missing(self, tsnr: int, fp: int | None, flagged: bool, before: bool,
                      fresh: bool, request: bool = True) -> None:
        """A transaction that will not land (lost, inconsistent, too big): a gap on its tsnr."""
        verdict, u = self._place(tsnr, fp, flagged, before, fresh)
        if u is None or verdict in DROPPED or verdict in (Verdict.INITIAL, Verdict.LATE_FILL):
            return
        self._advance(verdict, u, f"transaction {tsnr} could not be landed", through=True,
                      request=request)

    def _new_epoch(self, reason: str) -> None:
        """Numbering restarted: old gaps cannot be asked for any more, held ones land now."""
        st = self.st
        previous, previous_next = st.epoch, st.next_u
        self._release_held(force=True)
        self._withdraw_requests(previous)
        for gap in list(st.gaps):
            self._settle_all(gap, f"replicator restarted ({reason})")
        st.epoch_starts = [*st.epoch_starts, [st.epoch, st.epoch_time]][-EPOCH_STARTS:]
        st.epoch += 1
        st.next_u, st.epoch_fresh = 1, True
        st.base_u = 1
        self.events.append(EpochStarted(
            subscription=self.subscription, destination=self.destination, epoch=st.epoch,
            reason=reason, previous_epoch=previous,
            previous_next_tsnr=None if previous_next is None else to_tsnr(previous_next),
            at_ms=self.now))

    def _withdraw_requests(self, epoch: int) -> None:
        """A restart read in the same step as request rounds of the epoch it ends: those TRAN
        requests are not sent. They would reach the restarted replicator, whose numbering
        began again at 1 (seed 001, rule 16), and name other transactions; the gaps are
        settled by the restart instead, counting only requests really sent."""
        withdrawn = [e for e in self.events if isinstance(e, GapRequested) and e.epoch == epoch]
        if not withdrawn:
            return
        self.events = [e for e in self.events if not any(e is w for w in withdrawn)]
        for event in withdrawn:
            for gap in self.st.gaps:
                if gap.gap_id == event.gap_id:
                    gap.requests_sent -= len(event.tsnrs)
                    gap.rounds -= 1

    # ----------------------------------------------------------------- gaps
    def _open_gap(self, start: int, end: int, reason: str, request: bool = True) -> None:
        """Open a gap, count it for the storm breaker, request it unless the breaker is open."""
        tripped = self.st.storm.note(self.sent_ms or self.now, end - start + 1, self.config)
        storm = self.st.storm.tripped
        opening = gaps.open_gap(start, end, self.st.epoch, reason, self.now, self.config,
                                self.key, request and not storm)
        if opening.settled is not None:
            self.st.given_up.add(self.st.epoch, *opening.settled)
        if opening.gap is not None:
            self.st.gaps.append(opening.gap)
        self.events.extend(opening.events)
        self.st.count("gaps_opened")
        if tripped:
            self._storm_tripped()
        while len(self.st.gaps) > self.config.max_open_gaps:
            self._settle_all(self.st.gaps[0], "too many open gaps (max_open_gaps)")

    def _request(self, gap: gaps.Gap) -> None:
        self._gap_event(gap, gaps.request_round(gap, self.now, self.config, self.key))

    def _storm_note(self, tsnrs: int, gap: bool) -> None:
        """Count requested tsnrs for the storm breaker (a retry round: at processing time)."""
        if self.st.storm.note(self.now, tsnrs, self.config, gap):
            self._storm_tripped()

    def _storm_tripped(self) -> None:
        self.events.append(StormTripped(
            subscription=self.subscription, destination=self.destination,
            epoch=self.st.epoch, gaps=self.st.storm.gaps, tsnrs=self.st.storm.tsnrs,
            window_ms=self.config.storm_window_ms, at_ms=self.now))

    def _fill(self, u: int) -> None:
        gap = gaps.find(self.st.gaps, u)
        assert gap is not None
        self._gap_event(gap, gaps.fill(gap, u, self.now, self.key))

    def _settle(self, gap: gaps.Gap, u: int, why: str) -> None:
        self._gap_event(gap, gaps.settle(gap, u, why, self.now, self.key))
        self._release_held()

    def _settle_all(self, gap: gaps.Gap, why: str) -> None:
        self._gap_event(gap, gaps.settle_all(gap, why, self.now, self.key))
        self._release_held()

    def _gap_event(self, gap: gaps.Gap, event: GapEvent | None) -> None:
        """Report a gap's transition; an ended gap leaves the open ones, its settled
        positions are remembered for a late fill."""
        if event is None:
            return
        self.events.append(event)
        if isinstance(event, GapRequested):
            if event.attempt > 1:  # a retry round: its tsnrs count for the storm breaker
                self._storm_note(len(event.tsnrs), gap=False)
            return
        if gap not in self.st.gaps:
            return
        if gap.done:
            self.st.gaps.remove(gap)
            for u in sorted(gap.settled):
                self.st.given_up.add(gap.epoch, u, u, gap.gap_id)
            if isinstance(event, GapUnrecoverable):
                self.st.count("gaps_unrecoverable")

    def _late_fill(self, u: int, p: assembler.Partial, epoch: int) -> None:
        """A settled tsnr arrived after all: it never landed, so it lands now."""
        gap = next((g for g in self.st.gaps if u in g.settled), None)
        origin = "resend" if p.resend else "live"
        txn = assembler.finish(p, self.key, epoch, origin, self.now)
        if epoch == self.st.epoch:
            self.st.window.add(p.tsnr, p.fp, epoch)
        self._land(txn)
        self.st.count("late_fills")
        if gap is not None:  # an open gap: the position counts as filled after all
            gap.settled.remove(u)
            gap.filled.append(u)
            return
        gap_id = self.st.given_up.find(epoch, u) or ""
        self.st.given_up.remove(epoch, u)
        remaining = self.st.given_up.remaining(epoch, gap_id)
        self.events.append(GapFilledLate(
            subscription=self.subscription, destination=self.destination, epoch=epoch,
            gap_id=gap_id, from_tsnr=p.tsnr, to_tsnr=p.tsnr, missing=(), requests_sent=0,
            opened_at_ms=self.now, reason=f"transaction {p.tsnr} arrived after its gap was "
            f"settled: landed", at_ms=self.now, settled=tuple(remaining), tsnr=p.tsnr))

    def _late_fill_earlier_epoch(self, p: assembler.Partial) -> bool:
        """A transaction of an earlier epoch (sent before this one began) whose tsnr was
        settled there: it never landed, so it lands there now."""
        sent = [t for t in (p.sent_time, p.head["urbtptim"] if p.resend else 0)
                if 0 < t < self.st.epoch_time]
        epoch = self._epoch_at(min(sent)) if sent else None
        found = None if epoch is None else self.st.given_up.find_tsnr(p.tsnr, epoch)
        if epoch is None or found is None:
            return False
        self._late_fill(found[0], p, epoch)
        return True

    def _epoch_at(self, stck: int) -> int | None:
        """The earlier epoch that was current when the replicator sent at ``stck`` (None:
        older than the epochs remembered)."""
        for epoch, began in reversed(self.st.epoch_starts):
            if began <= stck:
                return epoch
        return None

    # ----------------------------------------------------------------- landing
    def _land(self, txn: TransactionComplete) -> None:
        # A held transaction lands later than it completed: it carries the landing time.
        self.events.append(txn if txn.at_ms == self.now else replace(txn, at_ms=self.now))
        self.st.count("landed")
        if txn.resent:
            self._note_unverified(txn)

    # ----------------------------------------------------------------- initial state
    def _note_unverified(self, txn: TransactionComplete) -> None:
        """A resend landed without after images: remember its ISNs for an INST request."""
        target = self.config.initial_state_for(self.subscription)
        if target is None:
            return
        for file, isns in initial_state.unverified_isns(txn, target).items():
            wanted, tsnrs = self.unverified.setdefault(file, (set(), set()))
            wanted |= isns
            tsnrs.add(txn.tsnr)

    def request_initial_states(self) -> None:
        """INST request messages (every file of the definition) for this step's resends,
        and those waiting in the queue that pacing lets go now."""
        target = self.config.initial_state_for(self.subscription)
        if target is None or not self.unverified:
            self.events.extend(initial_state.dispatch(self.st.inst, self.config, self._where()))
            return
        isns = {file: wanted for file, (wanted, _) in self.unverified.items()}
        tsnrs = {t for _, ts in self.unverified.values() for t in ts}
        self.events.extend(initial_state.request(self.st.inst, target, isns, tsnrs,
                                                 self.config, self._where()))
        self.unverified.clear()

    def _where(self) -> initial_state.Where:
        return initial_state.Where(self.subscription, self.destination, self.st.epoch, self.now)

    def _hold(self, u: int, txn: TransactionComplete) -> None:
        self.st.held.append((u, txn))
        self.st.held.sort(key=lambda item: item[0])
        if self.st.buffered_bytes() > self.config.max_buffered_bytes:
            self._buffer_event(txn.tsnr, "released held transactions early")
            self._release_held(force=True)

    def _release_held(self, force: bool = False) -> None:
        """Land held transactions that no hold-policy gap waits for any more, in tsnr order."""
        if force:
            for gap in self.st.gaps:
                gap.hold_until_ms = None
        barrier = gaps.hold_barrier(self.st.gaps)
        while self.st.held and (barrier is None or self.st.held[0][0] < barrier):
            self._land(self.st.held.pop(0)[1])

    # ----------------------------------------------------------------- failures
    def _lose(self, reason: str, row: ElementRow | None = None, request: bool = True) -> None:
        """The open transaction's continuation was lost: report it and make it a gap. One
        reported lost already (a stall) is just dropped."""
        p = self.st.partial
        assert p is not None
        self.st.partial = None
        if p.stalled:
            return
        self._lost_event(p.tsnr, reason, row, p)
        self._unlanded(p, request)

    def _unlanded(self, p: assembler.Partial, request: bool = True) -> None:
        """A transaction that will not land: a gap on its tsnr, or for a pseudo-transaction
        its INST request is incomplete (asked again)."""
        if p.tsnr == 0:
            fnr = p.records[0].fnr if p.records else None
            self.events.extend(initial_state.mark_incomplete(
                self.st.inst, p.token, p.head["urbtdbid"], fnr, self.config, self._where()))
        else:
            self._mark_missing(p.tsnr, p.fp, p.flagged, self._before_epoch(p), p.fresh,
                               request)

    def _lost_event(self, tsnr: int, reason: str, row: ElementRow | None,
                    p: assembler.Partial | None = None) -> None:
        self._notice(LostContinuation, tsnr, reason, row, p)
        self.st.count("lost")

    def _notice(self, cls: type[TsnrNotice], tsnr: int, reason: str, row: ElementRow | None,
                p: assembler.Partial | None) -> None:
        topic, part, off = _where(row, p)
        self.events.append(cls(
            subscription=self.subscription, destination=self.destination, epoch=self.st.epoch,
            tsnr=tsnr, reason=reason, topic=topic, partition=part, offset=off, at_ms=self.now))

    def _abandon(self, row: ElementRow, reason: str) -> None:
        """An element broke the transaction's counts: quarantine, gap, skip the rest of it."""
        p = self.st.partial
        assert p is not None
        self.st.partial = None
        self._inconsistent(row, p.tsnr, reason)
        if not p.stalled:
            self._unlanded(p)
        self.st.discard = None if row.eye == "URBE" else p.tsnr

    def _resume_failed(self, row: ElementRow, error: str) -> None:
        """An element of a message resumed by an accepted URBC does not fit: most likely a
        whole message was lost before this one.

        The URBC position is accepted in two conventions, so after a lost message the URBC
        can still pass and the next URBD may even fit the previous record; the element or
        count checks catch the loss a few elements later. That is a lost continuation (alert,
        gap, TRAN), not inconsistent input to quarantine.
        """
        p = self.st.partial
        assert p is not None
        self._lose(f"a continuation message was lost before this one ({error})", row)
        self.st.discard = None if row.eye == "URBE" else p.tsnr

    def _check_buffer(self) -> None:
        """Past the byte cap: land held ones early; if the open one alone is too big, drop it."""
        limit = self.config.max_buffered_bytes
        if self.st.buffered_bytes() <= limit:
            return
        p = self.st.partial
        assert p is not None
        if self.st.held:
            self._buffer_event(p.tsnr, "released held transactions early")
            self._release_held(force=True)
        if self.st.buffered_bytes() > limit:
            self._buffer_event(p.tsnr, "abandoned the open transaction as a gap")
            self.st.partial = None
            if not p.stalled:
                self._unlanded(p)
            self.st.discard = p.tsnr

    def _buffer_event(self, tsnr: int, action: str) -> None:
        self.events.append(BufferLimitExceeded(
            subscription=self.subscription, destination=self.destination, epoch=self.st.epoch,
            tsnr=tsnr, buffered_bytes=self.st.buffered_bytes(),
            limit=self.config.max_buffered_bytes, action=action, at_ms=self.now))

    def _inconsistent(self, row: ElementRow, tsnr: int | None, reason: str) -> None:
        self.events.append(Inconsistent(
            subscription=self.subscription, destination=self.destination, epoch=self.st.epoch,
            tsnr=tsnr, reason=reason, topic=row.topic, partition=row.partition,
            offset=row.offset, elem_index=row.elem_index, at_ms=self.now, eye=row.eye,
            details=dict(row.fields)))
        self.st.count("inconsistent")

    def _drop_reason(self, verdict: Verdict, u: int | None, tsnr: int) -> str:
        """Why a transaction is dropped. A "redelivery" below the epoch's first placed
        position was never landed here: the topic is out of order or the connector delivered
        again what came before the job's first message. So was one whose number a *different*
        transaction of this epoch carries (same tsnr, other content). Neither can be told
        from a copy by its position, so neither lands, but :data:`UNPLACED` makes the
        duplicates row an alert."""
        base = self.st.base_u
        if verdict is Verdict.REDELIVERY and u is not None and base is not None and u < base:
            return f"{UNPLACED}: below tsnr {to_tsnr(base)}, the first placed in this epoch"
        if verdict is Verdict.REDELIVERY and self._landed_here(tsnr):
            return (f"{UNPLACED}: another transaction numbered {tsnr} landed in this epoch "
                    "(other commit time, record count or database)")
        return _DROP_REASON[verdict]

    def _duplicate(self, tsnr: int, reason: str, row: ElementRow | None,
                   p: assembler.Partial | None = None) -> None:
        self._notice(DuplicateDropped, tsnr, reason, row, p)
        self.st.count("duplicates")

    # ----------------------------------------------------------------- timers
    def timers(self) -> None:
        """Deadlines at ``now``: retry rounds and verdicts (not while the storm breaker is
        open), hold timeouts, the partial transaction, STAT, overdue INST requests."""
        for gap in list(self.st.gaps):
            if gap.hold_until_ms is not None and self.now >= gap.hold_until_ms:
                gap.hold_until_ms = None
            if self.st.storm.tripped:
                continue
            self._gap_event(gap, gaps.retry_due(gap, self.now, self.config, self.key,
                                                self.st.newest_sent_ms))
        self._release_held()
        self._partial_timeouts()
        self._stat()
        self.events.extend(initial_state.overdue(self.st.inst, self.config, self._where()))

    def _partial_timeouts(self) -> None:
        """Lost by evidence: the destination sent messages ``partial_timeout_ms`` after the
        partial's last one. Lost by processing time (``partial_stall_ms``, a stalled
        connector): reported and requested, but kept for a late continuation."""
        p, config = self.st.partial, self.config
        if p is None or p.stalled:
            return
        last, newest = config.stck_ms(p.last_sent), self.st.newest_sent_ms
        timeout = config.partial_timeout_ms
        if timeout is not None and last is not None and newest is not None \
                and newest > last + timeout:
            self._lose(f"the destination sent messages {(newest - last) // 1000} s after the "
                       f"transaction's last message without its continuation")
        elif config.partial_stall_ms is not None and self.now >= p.touched_ms \
                + config.partial_stall_ms:
            self._lost_event(p.tsnr, f"no continuation within {config.partial_stall_ms} ms "
                             "(processing time); kept for a late continuation", None, p)
            self._unlanded(p)
            p.stalled = True

    def _stat(self) -> None:
        """An idle key asks for its status (STAT): a lost last transaction shows in SUBS."""
        due = self.st.stat.due_ms(self.config)
        if due is None or self.now < due or not self.subscription:
            return
        seq = self.st.stat.ask(self.now)
        last = to_tsnr(self.st.next_u - 1) if self.st.next_u and self.st.next_u > 1 else None
        self.events.append(StatRequested(
            subscription=self.subscription, destination=self.destination, epoch=self.st.epoch,
            seq=seq, token=self.config.request_token,
            reply_destination=self.config.reply_destination, last_tsnr=last, at_ms=self.now))

    def next_timeout(self) -> int | None:
        """The earliest pending deadline, strictly after now (Spark rejects anything else)."""
        deadlines = [d for g in self.st.gaps
                     for d in (g.next_retry_ms, g.hold_until_ms, g.verdict_due_ms)
                     if d is not None and not (self.st.storm.tripped and d != g.hold_until_ms)]
        deadlines += self.st.inst.deadlines()
        p, stall = self.st.partial, self.config.partial_stall_ms
        if p is not None and not p.stalled and stall is not None:
            deadlines.append(p.touched_ms + stall)
        stat = self.st.stat.due_ms(self.config) if self.subscription else None
        if stat is not None:
            deadlines.append(stat)
        return max(min(deadlines), self.now + 1) if deadlines else None


_DROP_REASON = {
    Verdict.DUPLICATE: "duplicate: already landed",
    Verdict.STALE: "stale: a resend of a tsnr behind the sequence that no gap waits for",
    Verdict.REDELIVERY: "redelivered: behind the sequence, placed already in this epoch",
    Verdict.EARLIER_EPOCH: "redelivered: sent before the replicator restarted (an earlier "
                           "epoch's transaction)",
}


def _tsnr_of(row: ElementRow) -> int:
    return row.num("urbctsnr") if row.eye == "URBC" else row.num("urbttsnr")


def _where(row: ElementRow | None, p: assembler.Partial | None) -> tuple[str, int, int]:
    """Kafka coordinates to report: the row at hand, else where the transaction began."""
    if row is not None:
        return row.topic, row.partition, row.offset
    if p is not None:
        return p.topic, p.first[0], p.first[1]
    return "", -1, -1
