"""Deadlines at the step's time: request retries and verdicts, hold timeouts, the partial
transaction's timeouts, STAT for an idle key (R12), overdue INST requests; the next one."""

from __future__ import annotations

from pipeline.reassembly import gaps, initial_state
from pipeline.reassembly.events import (
    StatRequested,
)
from pipeline.reassembly.machine.context import Context
from pipeline.reassembly.sequence import (
    to_tsnr,
)


class Timers(Context):
    """The rules of deadlines (the module's docstring says which)."""

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
        self.emit(StatRequested, seq=seq, token=self.config.request_token,
                  reply_destination=self.config.reply_destination, last_tsnr=last)

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
