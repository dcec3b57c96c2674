"""Gaps as the machine keeps them: opened (and counted for the storm breaker), requested,
filled, settled; their transitions reported, ended ones remembered for late fills."""

from __future__ import annotations

from pipeline.reassembly import gaps
from pipeline.reassembly.events import (
    GapEvent,
    GapRequested,
    GapUnrecoverable,
    StormTripped,
)
from pipeline.reassembly.machine.context import Context


class GapWork(Context):
    """The rules of gaps (the module's docstring says which)."""

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
        self.emit(StormTripped, gaps=self.st.storm.gaps, tsnrs=self.st.storm.tsnrs,
                  window_ms=self.config.storm_window_ms)

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
