"""Status elements (URBS): every one reported, and those that move the sequence acted on
through a dispatch table by URBSST: STRT/REST (R8), TRSP (R11), SUBS (R12), REAC."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.reassembly import gaps, initial_state
from pipeline.reassembly.events import (
    RequestRejected,
    StatusReceived,
)
from pipeline.reassembly.machine.context import Context
from pipeline.reassembly.routing import RESTART_STATUS
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.sequence import (
    WRAP_ZONE,
    to_tsnr,
    unwrap,
)
from pipeline.urb.codes import tran_reply_action


class Statuses(Context):
    """The rules of status elements (the module's docstring says which)."""

    def _status(self, row: ElementRow) -> None:
        """Every URBS is reported (unless an echo); those in ``ACTIONS`` act first: STRT/REST
        may begin an epoch, TRSP confirm or settle a tsnr, SUBS reveal a lost last
        transaction, REAC or SUBS reactivate parked tsnrs."""
        st = row.char("urbsst")
        action = ACTIONS.get((st, row.char("urbsrt"))) or ACTIONS.get((st, None))
        if action is not None:
            action(self, row)
        if row.echo:
            return
        self.emit(StatusReceived, fields=dict(row.fields), data=row.data, topic=row.topic,
                  partition=row.partition, offset=row.offset, elem_index=row.elem_index,
                  urbhtime=row.urbhtime, big_endian=row.big_endian)
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

    def _restart(self, row: ElementRow) -> None:
        """STRT/REST: numbering restarts at 1 (R8) — if it is a new one.

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
        st = row.char("urbsst")
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
        will never come — all of a transaction is sent before any of another (R6)."""
        p = self.st.partial
        if p is None or p.tsnr == 0 or p.stalled:
            return u
        pu = unwrap(p.tsnr, self.st.next_u)
        if pu == u:
            return u - 1
        if self.st.next_u <= pu < u:
            self._lose(f"STAT: the replicator sent tsnr {sent} after it", row)
        return u

    def _reactivated(self, row: ElementRow | None = None) -> None:
        """The subscription is active again: tsnrs parked by TRSP 36 are asked for again."""
        for gap in self.st.gaps:
            if gaps.unpark(gap) and not self.st.storm.tripped:
                self._request(gap)


#: The status elements that change the sequence, by (URBSST, URBSRT); None: any URBSRT.
ACTIONS: dict[tuple[str, str | None], Callable[[Statuses, ElementRow], None]] = {
    **{(st, None): Statuses._restart for st in RESTART_STATUS},
    ("TRSP", None): Statuses._trsp,
    ("SUBS", "STAT"): Statuses._subs,
    ("REAC", None): Statuses._reactivated,
}
