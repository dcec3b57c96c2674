"""What goes wrong: a lost continuation, inconsistent input (quarantine), the byte cap,
and copies dropped — each reported, and a transaction that will not land made a gap."""

from __future__ import annotations

from pipeline.reassembly import assembler, initial_state
from pipeline.reassembly.events import (
    UNPLACED,
    BufferLimitExceeded,
    DuplicateDropped,
    Inconsistent,
    LostContinuation,
    TsnrNotice,
)
from pipeline.reassembly.machine.context import Context, coordinates
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.sequence import (
    Verdict,
    to_tsnr,
)

#: Why a copy is dropped, by verdict (``Failures._drop_reason``).
DROP_REASON = {
    Verdict.DUPLICATE: "duplicate: already landed",
    Verdict.STALE: "stale: a resend of a tsnr behind the sequence that no gap waits for",
    Verdict.REDELIVERY: "redelivered: behind the sequence, placed already in this epoch",
    Verdict.EARLIER_EPOCH: "redelivered: sent before the replicator restarted (an earlier "
                           "epoch's transaction)",
}


class Failures(Context):
    """The rules of what goes wrong (the module's docstring says which)."""

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
        topic, part, off = coordinates(row, p)
        self.emit(cls, tsnr=tsnr, reason=reason, topic=topic, partition=part, offset=off)

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
        self.emit(BufferLimitExceeded, tsnr=tsnr, buffered_bytes=self.st.buffered_bytes(),
                  limit=self.config.max_buffered_bytes, action=action)

    def _inconsistent(self, row: ElementRow, tsnr: int | None, reason: str) -> None:
        self.emit(Inconsistent, tsnr=tsnr, reason=reason, topic=row.topic,
                  partition=row.partition, offset=row.offset, elem_index=row.elem_index,
                  eye=row.eye, details=dict(row.fields))
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
        return DROP_REASON[verdict]

    def _duplicate(self, tsnr: int, reason: str, row: ElementRow | None,
                   p: assembler.Partial | None = None) -> None:
        self._notice(DuplicateDropped, tsnr, reason, row, p)
        self.st.count("duplicates")
