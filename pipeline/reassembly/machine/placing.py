"""The sequence and its epochs: a complete transaction placed by ``sequence.classify``
(R3, R8, R9), the sequence advanced or a gap filled, epochs begun, late fills, and the
evidence the replicator's own clock gives (R2)."""

from __future__ import annotations

from pipeline.reassembly import assembler, gaps, pseudo, transitions
from pipeline.reassembly.events import (
    EpochStarted,
    GapFilledLate,
    GapRequested,
)
from pipeline.reassembly.machine.context import Context
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.sequence import (
    Sequence,
    Verdict,
    classify,
    to_tsnr,
    unwrap,
)
from pipeline.reassembly.state import EPOCH_STARTS

#: Verdicts that drop the transaction as a copy (a ``duplicates`` row).
DROPPED = frozenset({Verdict.DUPLICATE, Verdict.STALE, Verdict.REDELIVERY,
                     Verdict.EARLIER_EPOCH})


class Placing(Context):
    """The rules of the sequence and its epochs (the module's docstring says which)."""

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
        transitions.remember_landed(self.st, [(p.tsnr, p.fp)])
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
        self._land(assembler.finish(p, self.key, self.st.epoch, pseudo.origin(p), self.now))

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
        if verdict is Verdict.FILL:
            st.epoch_fresh = False
            if not through:
                self._fill(u)
            return
        start = u if verdict is Verdict.BASELINE else st.next_u
        assert start is not None
        end = u if through else u - 1
        if end >= start:
            self._open_gap(start, end, reason, request)
        transitions.advance_to(st, u, baseline=verdict is Verdict.BASELINE)

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
        self.emit(EpochStarted, reason=reason, previous_epoch=previous,
                  previous_next_tsnr=None if previous_next is None else to_tsnr(previous_next))

    def _withdraw_requests(self, epoch: int) -> None:
        """A restart read in the same step as request rounds of the epoch it ends: those TRAN
        requests are not sent. They would reach the restarted replicator, whose numbering
        began again at 1 (R8), and name other transactions; the gaps are
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

    def _late_fill(self, u: int, p: assembler.Partial, epoch: int) -> None:
        """A settled tsnr arrived after all: it never landed, so it lands now."""
        gap = next((g for g in self.st.gaps if u in g.settled), None)
        origin = "resend" if p.resend else "live"
        txn = assembler.finish(p, self.key, epoch, origin, self.now)
        if epoch == self.st.epoch:
            transitions.remember_landed(self.st, [(p.tsnr, p.fp)])
        self._land(txn)
        self.st.count("late_fills")
        if gap is not None:  # an open gap: the position counts as filled after all
            gap.settled.remove(u)
            gap.filled.append(u)
            return
        gap_id = self.st.given_up.find(epoch, u) or ""
        self.st.given_up.remove(epoch, u)
        remaining = self.st.given_up.remaining(epoch, gap_id)
        self.emit(GapFilledLate, epoch=epoch, gap_id=gap_id, from_tsnr=p.tsnr, to_tsnr=p.tsnr,
                  missing=(), requests_sent=0, opened_at_ms=self.now,
                  reason=f"transaction {p.tsnr} arrived after its gap was settled: landed",
                  settled=tuple(remaining), tsnr=p.tsnr)

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

    def _seen_sent(self, stck: int) -> None:
        """The destination's clock: the newest URBHTIME seen on it (evidence for verdicts,
        the partial transaction's timeout and restarts)."""
        transitions.seen_sent(self.st, stck, self.config)
