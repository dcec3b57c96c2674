"""Landing and holding: a transaction lands (an event) or waits behind a hold-policy gap;
a landed resend's unverified ISNs become INST requests (R10, R14)."""

from __future__ import annotations

from dataclasses import replace

from pipeline.reassembly import gaps, initial_state
from pipeline.reassembly.events import (
    TransactionComplete,
)
from pipeline.reassembly.machine.context import Context


class Landing(Context):
    """The rules of landing and holding (the module's docstring says which)."""

    def _land(self, txn: TransactionComplete) -> None:
        # A held transaction lands later than it completed: it carries the landing time.
        self.events.append(txn if txn.at_ms == self.now else replace(txn, at_ms=self.now))
        self.st.count("landed")
        if txn.resent:
            self._note_unverified(txn)

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
