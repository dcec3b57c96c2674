"""``step``: the pure state machine of one (destination, subscription) key.

``step(state, rows, now_ms, config, key)`` → new state, events, next timer. Like h11, it does
no I/O, reads no clock and no randomness: the glue feeds rows and the batch's processing time,
then writes the events out. The same inputs always give the same outputs, so a replayed batch
reproduces exactly what Delta already holds.

Order of work in one step: rows in Kafka order, message by message; then timers (retries,
hold timeouts, partial-transaction timeout, overdue INST requests) at ``now_ms``; then the INST
requests for the ISNs the step's landed resends left unverified (one per file, see
initial_state.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from pipeline.reassembly import assembler, gaps, initial_state
from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import (
    BufferLimitExceeded,
    DuplicateDropped,
    EpochStarted,
    Event,
    GapUnrecoverable,
    Inconsistent,
    LostContinuation,
    StatusReceived,
    TransactionComplete,
    TsnrNotice,
)
from pipeline.reassembly.gfft import gfft_event
from pipeline.reassembly.rows import ElementRow, messages
from pipeline.reassembly.sequence import Verdict, classify, to_tsnr, unwrap
from pipeline.reassembly.state import KeyState

DATA_EYES = frozenset({"URBT", "URBR", "URBD", "URBE", "URBC"})
RESTART_STATUS = frozenset({"STRT", "REST"})


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one call produces. ``state`` None means: nothing to keep, drop the key's state."""

    state: KeyState | None
    events: list[Event]
    next_timeout_ms: int | None


def step(state: KeyState | None, rows: Iterable[ElementRow], now_ms: int,
         config: ReassemblyConfig, key: tuple[str, str]) -> StepResult:
    """Advance one key by a batch of rows (possibly none, when a timer fired)."""
    st = state.clone() if state is not None else KeyState()
    st.window.resize(config.duplicate_window)
    run = _Run(st, config, key, now_ms)
    for message in messages(rows):
        run.message(message)
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
        # fnr -> (ISNs, tsnrs) that resends landed in this step left unverified.
        self.unverified: dict[int, tuple[set[int], set[int]]] = {}

    # ----------------------------------------------------------------- messages
    def message(self, msg: tuple[ElementRow, ...]) -> None:
        """One Kafka message: check how it continues the open transaction, then its elements.

        GFFTs (URBF) ahead of the data are reported first and then set aside, so that a
        message's continuity checks (URBC, redelivery) look at its first data element.
        """
        lead = 0
        while lead < len(msg) - 1 and msg[lead].eye == "URBF":
            self._element(msg[lead])
            lead += 1
        msg = msg[lead:]
        first = msg[0]
        if first.eye in DATA_EYES:  # evidence for gap verdicts: what the replicator sent since
            sent = gaps.stck_to_unix_ms(first.urbhtime)
            if sent is not None and (self.st.newest_sent_ms or 0) < sent:
                self.st.newest_sent_ms = sent
        if self._repeated(first):
            self._duplicate(_tsnr_of(first), f"message {first.urbhmsnr} delivered again", first)
            return
        continued = False
        if first.eye == "URBC":
            continued = self._continuation(first)
        elif first.eye in DATA_EYES:
            self.st.discard = None
            if self.st.partial is not None:
                self._lose("the next message does not start with URBC")
        self.resumed = continued
        for row in msg[1:] if first.eye == "URBC" else msg:
            self._element(row)
        self.resumed = False
        self._end_of_message()

    def _repeated(self, first: ElementRow) -> bool:
        """A message delivered again (producer retry) while a transaction is open.

        Skipped whole so that it cannot break the open transaction: it is one the open
        transaction already came in, or it starts with (a continuation of) a transaction that
        has already landed.
        """
        p = self.st.partial
        if p is None or first.eye not in DATA_EYES:
            return False
        if assembler.repeats(p, first):
            return True
        tsnr = _tsnr_of(first)
        if first.eye == "URBC":
            return tsnr != p.tsnr and self.st.window.contains_tsnr(tsnr)
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
        if self.st.window.contains_tsnr(tsnr):
            self._duplicate(tsnr, "continuation of a transaction already landed", row)
            return False
        self._lost_event(tsnr, "continuation whose start was never received", row)
        # treated as flagged: an orphan continuation is no evidence of a restart
        self._mark_missing(tsnr, None, True)
        return False

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
        self.st.partial = assembler.start(row, self.now)

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
        """Every URBS is reported; STRT/REST begin an epoch, TRSP may settle a gap."""
        st = row.char("urbsst")
        if st in RESTART_STATUS:
            if self.st.partial is not None:
                # no TRAN request: after the restart its tsnr names another transaction
                self._lose(f"replicator {st} before the transaction ended", row, request=False)
            if not (self.st.epoch_fresh and self.st.next_u == 1):
                self._new_epoch(st)
        elif st == "TRSP":
            self._trsp(row)
        self.events.append(StatusReceived(
            subscription=self.subscription, destination=self.destination, epoch=self.st.epoch,
            fields=dict(row.fields), data=row.data, topic=row.topic, partition=row.partition,
            offset=row.offset, elem_index=row.elem_index, urbhtime=row.urbhtime,
            at_ms=self.now, big_endian=row.big_endian))
        if row.char("urbsrt") == "INST":
            self.events.extend(initial_state.on_reply(self.st.inst, row, self.config,
                                                      self._where()))

    def _trsp(self, row: ElementRow) -> None:
        """A reply to our TRAN request: rsp 131 with a final subcode ends the gap."""
        token = self.config.request_token
        if token and row.char("urbsrtok") != token:
            return
        rsp, subc, tsnr = row.num("urbsrsp"), row.num("urbssubc"), row.num("urbstsnr")
        if rsp != 131 or subc not in self.config.unrecoverable_subcodes:
            return
        if self.st.next_u is None or tsnr == 0:
            return
        gap = gaps.find(self.st.gaps, unwrap(tsnr, self.st.next_u))
        if gap is not None:
            self._close_unrecoverable(gap, gaps.trsp_reason(tsnr, rsp, subc))
            self._release_held()

    # ----------------------------------------------------------------- sequence
    def _complete(self) -> None:
        """The open transaction is whole: place it in the sequence and land (or hold) it."""
        p = self.st.partial
        assert p is not None
        self.st.partial = None
        verdict, u = self._place(p.tsnr, p.fp, p.flagged)
        if verdict in (Verdict.DUPLICATE, Verdict.STALE):
            self._duplicate(p.tsnr, f"{verdict}: already landed or not expected", None, p)
            return
        if verdict is Verdict.INITIAL:
            self._land(assembler.finish(p, self.key, self.st.epoch, "initial_state", self.now))
            return
        assert u is not None
        self._advance(verdict, u, "transaction(s) never received")
        origin = "resend" if p.resend else "live"
        txn = assembler.finish(p, self.key, self.st.epoch, origin, self.now)
        self.st.window.add(p.tsnr, p.fp)
        barrier = gaps.hold_barrier(self.st.gaps)
        if barrier is not None and u > barrier:
            self._hold(u, txn)
        else:
            self._land(txn)
        self._release_held()

    def _place(self, tsnr: int, fp: int | None, flagged: bool) -> tuple[Verdict, int | None]:
        """Classify a tsnr; a restart begins the new epoch and classifies again within it."""
        st = self.st
        verdict, u = classify(tsnr, fp, flagged, st.next_u, st.window, self._is_missing)
        if verdict is Verdict.RESTART:
            self._new_epoch("tsnr back to 1" if tsnr == 1 else f"tsnr went back to {tsnr}")
            verdict, u = classify(tsnr, fp, flagged, st.next_u, st.window, self._is_missing)
        return verdict, u

    def _flagged_repeat(self, tsnr: int) -> bool:
        """A resend of a tsnr the window has landed, unless an open gap waits for that tsnr
        (the window is not epoch-aware: after a restart it still holds the old epoch's)."""
        st = self.st
        if not st.window.contains_tsnr(tsnr):
            return False
        return st.next_u is None or not self._is_missing(unwrap(tsnr, st.next_u))

    def _is_missing(self, u: int) -> bool:
        return gaps.find(self.st.gaps, u) is not None

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
        end = u if through else u - 1
        if end >= start:
            self._open_gap(start, end, reason, request)
        st.next_u = max(st.next_u or 0, u + 1)

    def _mark_missing(self, tsnr: int, fp: int | None, flagged: bool,
                      request: bool = True) -> None:
        """A transaction that will not land (lost, inconsistent, too big): a gap on its tsnr."""
        verdict, u = self._place(tsnr, fp, flagged)
        if u is None or verdict in (Verdict.DUPLICATE, Verdict.STALE, Verdict.INITIAL):
            return
        self._advance(verdict, u, f"transaction {tsnr} could not be landed", through=True,
                      request=request)

    def _new_epoch(self, reason: str) -> None:
        """Numbering restarted: old gaps cannot be asked for any more, held ones land now."""
        st = self.st
        previous, previous_next = st.epoch, st.next_u
        self._release_held(force=True)
        for gap in list(st.gaps):
            self._close_unrecoverable(gap, f"replicator restarted ({reason})")
        st.epoch += 1
        st.next_u, st.epoch_fresh = 1, True
        self.events.append(EpochStarted(
            subscription=self.subscription, destination=self.destination, epoch=st.epoch,
            reason=reason, previous_epoch=previous,
            previous_next_tsnr=None if previous_next is None else to_tsnr(previous_next),
            at_ms=self.now))

    # ----------------------------------------------------------------- gaps
    def _open_gap(self, start: int, end: int, reason: str, request: bool = True) -> None:
        new, events = gaps.open_gap(start, end, self.st.epoch, reason, self.now, self.config,
                                    self.key, request)
        self.st.gaps.extend(new)
        self.events.extend(events)
        self.st.count("gaps_opened")
        while len(self.st.gaps) > self.config.max_open_gaps:
            self._close_unrecoverable(self.st.gaps[0], "too many open gaps (max_open_gaps)")

    def _fill(self, u: int) -> None:
        gap = gaps.find(self.st.gaps, u)
        assert gap is not None
        event = gaps.fill(gap, u, self.now, self.key)
        if event is not None:
            self.st.gaps.remove(gap)
            self.events.append(event)

    def _close_unrecoverable(self, gap: gaps.Gap, reason: str) -> None:
        self.st.gaps.remove(gap)
        self.events.append(gaps.gap_event(GapUnrecoverable, gap, self.key, self.now, reason))
        self.st.count("gaps_unrecoverable")

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
        for fnr, isns in initial_state.unverified_isns(txn, target).items():
            wanted, tsnrs = self.unverified.setdefault(fnr, (set(), set()))
            wanted |= isns
            tsnrs.add(txn.tsnr)

    def request_initial_states(self) -> None:
        """One INST request per file (split at the ISN cap) for this step's resends."""
        target = self.config.initial_state_for(self.subscription)
        if target is None:
            return
        for fnr in sorted(self.unverified):
            isns, tsnrs = self.unverified[fnr]
            self.events.extend(initial_state.request(self.st.inst, target, fnr, isns, tsnrs,
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
        """The open transaction's continuation was lost: report it and make it a gap."""
        p = self.st.partial
        assert p is not None
        self.st.partial = None
        self._lost_event(p.tsnr, reason, row, p)
        if p.tsnr != 0:
            self._mark_missing(p.tsnr, p.fp, p.flagged, request)

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
        if p.tsnr != 0:
            self._mark_missing(p.tsnr, p.fp, p.flagged)
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
            if p.tsnr != 0:
                self._mark_missing(p.tsnr, p.fp, p.flagged)
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

    def _duplicate(self, tsnr: int, reason: str, row: ElementRow | None,
                   p: assembler.Partial | None = None) -> None:
        self._notice(DuplicateDropped, tsnr, reason, row, p)
        self.st.count("duplicates")

    # ----------------------------------------------------------------- timers
    def timers(self) -> None:
        """Deadlines at ``now``: retry rounds, hold timeouts, a stalled partial transaction."""
        for gap in list(self.st.gaps):
            if gap.hold_until_ms is not None and self.now >= gap.hold_until_ms:
                gap.hold_until_ms = None
            event = gaps.retry_due(gap, self.now, self.config, self.key, self.st.newest_sent_ms)
            if event is not None:
                self.events.append(event)
                if isinstance(event, GapUnrecoverable):
                    self.st.gaps.remove(gap)
                    self.st.count("gaps_unrecoverable")
        self._release_held()
        p, timeout = self.st.partial, self.config.partial_timeout_ms
        if p is not None and timeout is not None and self.now >= p.touched_ms + timeout:
            self._lose(f"no continuation within {timeout} ms")
        self.events.extend(initial_state.overdue(self.st.inst, self.config, self._where()))

    def next_timeout(self) -> int | None:
        """The earliest pending deadline, strictly after now (Spark rejects anything else)."""
        deadlines = [d for g in self.st.gaps
                     for d in (g.next_retry_ms, g.hold_until_ms, g.verdict_due_ms)
                     if d is not None]
        deadlines += self.st.inst.deadlines()
        p, timeout = self.st.partial, self.config.partial_timeout_ms
        if p is not None and timeout is not None:
            deadlines.append(p.touched_ms + timeout)
        return max(min(deadlines), self.now + 1) if deadlines else None


def _tsnr_of(row: ElementRow) -> int:
    return row.num("urbctsnr") if row.eye == "URBC" else row.num("urbttsnr")


def _where(row: ElementRow | None, p: assembler.Partial | None) -> tuple[str, int, int]:
    """Kafka coordinates to report: the row at hand, else where the transaction began."""
    if row is not None:
        return row.topic, row.partition, row.offset
    if p is not None:
        return p.topic, p.first[0], p.first[1]
    return "", -1, -1
