"""Messages and their elements: how a message continues the open transaction (URBC,
R5), copies skipped whole, the elements of a transaction (URBT, URBR, URBD, URBE) and the
decode stage's pseudo rows (ticks, message-number runs, operator commands)."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.reassembly import assembler, initial_state, transitions
from pipeline.reassembly.events import (
    MessagesMissing,
    MessagesUnseen,
    StormResumed,
)
from pipeline.reassembly.gfft import gfft_event
from pipeline.reassembly.machine.context import Context, tsnr_of
from pipeline.reassembly.rows import CONTROL_EYE, HEADERS_EYE, TICK_EYE, ElementRow

#: Elements of a transaction's data; a message starting with one of them is a data message.
DATA_EYES = frozenset({"URBT", "URBR", "URBD", "URBE", "URBC"})


class Messages(Context):
    """The rules of messages and elements (the module's docstring says which)."""

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
        transitions.data_seen(self.st, self.now)
        if self._repeated(first):
            self._duplicate(tsnr_of(first), f"message {first.urbhmsnr} delivered again", first)
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
        tsnr = tsnr_of(first)
        behind = 0 < first.urbhmsnr < max(p.msnrs) and first.topic == p.topic
        if first.eye == "URBC":
            return tsnr != p.tsnr and (behind or self._landed_here(tsnr))
        if behind:
            return True
        if first.eye == "URBT":
            return tsnr != 0 and self.st.window.contains(tsnr, assembler.urbt_fingerprint(first))
        return False

    def _end_of_message(self) -> None:
        """R4: without URBE, the counts alone may end a transaction not marked to continue."""
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
            self.emit(MessagesUnseen, first=first, last=last, low=low or 0, topic=row.topic,
                      partition=row.partition, offset=row.offset)
        hole = self.st.numbering.on_run(first, last, htime)
        self._seen_sent(row.num("htime"))
        if hole is None:
            return
        self.st.count("messages_missing", hole[1] - hole[0] + 1)
        self.emit(MessagesMissing, gap_id=f"msnr:{self.st.numbering.restarts}:{hole[0]}",
                  from_tsnr=hole[0], to_tsnr=hole[1], missing=(), requests_sent=0,
                  opened_at_ms=self.now, kind="messages",
                  reason=f"URBHMSNR {hole[0]}..{hole[1]} of destination {self.destination} "
                         f"never arrived on {row.topic} (before offset {row.offset})")

    def _control(self, row: ElementRow) -> None:
        """An operator command (``urbpipe gaps resume``) from the control topic."""
        command = row.char("command")
        if command != "resume":
            self._inconsistent(row, None, f"unknown control command {command!r}")
            return
        was = self.st.storm.tripped
        self.st.storm.resume()
        self.emit(StormResumed, by=row.char("by"), note=row.char("note"),
                  open_gaps=len(self.st.gaps))
        if was:
            for gap in self.st.gaps:
                if gap.missing:
                    self._request(gap)

    def _element(self, row: ElementRow) -> None:
        """One element, by its eye-catcher (``ELEMENTS``); others (URBU, URBI …) carry no
        transaction data."""
        handle = ELEMENTS.get(row.eye)
        if handle is not None:
            handle(self, row)

    def _misplaced_urbc(self, row: ElementRow) -> None:
        self._inconsistent(row, None, "URBC not at the start of a message")

    def _gfft(self, row: ElementRow) -> None:
        """A layout version: reported, never part of a transaction."""
        self.events.append(gfft_event(row, self.key, self.st.epoch, self.now))

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


#: What each element does, by eye-catcher.
ELEMENTS: dict[str, Callable[[Messages, ElementRow], None]] = {
    "URBT": Messages._urbt, "URBR": Messages._data, "URBD": Messages._data,
    "URBE": Messages._data, "URBS": lambda run, row: run._status(row),
    "URBC": Messages._misplaced_urbc, "URBF": Messages._gfft,
}
