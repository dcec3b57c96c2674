"""The storm breaker: a key whose sequence is scrambled stops asking the replicator.

A lossy transport loses a message now and then; each loss is one gap and a few TRAN
requests (a request round, retried a few times: every round's tsnrs count). A scrambled
one — a destination's topic with several partitions and no key, a producer that reorders,
two replicators on one topic — makes nearly every transaction look out of place: measured
with three partitions, 40 transactions gave ~160 requests and every gap ended
unrecoverable. Asking the replicator for all of that floods its input queue and proves
nothing. So when one key opens more gaps, or asks for more tsnrs, within
``storm_window_ms`` than ``storm_max_gaps``/``storm_max_tsnrs``, the breaker trips: one
critical alert, no more requests for the key (its gaps stay open and keep being filled by
what arrives; complete transactions keep landing) until an operator resumes it (``urbpipe
gaps resume``: a command on the control topic). Gap openings count at replicator time
(URBHTIME: a backlog read in one batch is judged by when it was sent, not when it was
read), retry rounds at processing time (they are the job's own).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.reassembly.config import ReassemblyConfig


@dataclass(slots=True)
class Storm:
    """Recent gap openings and request retries ``[at_ms, tsnrs, gaps]`` within the window
    (``gaps`` 1 for an opening, 0 for a retry round), and whether it tripped."""

    tripped: bool = False
    recent: list[list[int]] = field(default_factory=list)

    def note(self, at_ms: int, tsnrs: int, config: ReassemblyConfig, gap: bool = True
             ) -> bool:
        """Count a gap of ``tsnrs`` opened (or, ``gap`` False, a retry round asking for
        ``tsnrs``) at ``at_ms``; True when the breaker trips now."""
        if self.tripped:
            return False
        self.recent = [r for r in self.recent if r[0] > at_ms - config.storm_window_ms]
        self.recent.append([at_ms, tsnrs, int(gap)])
        if self.gaps > config.storm_max_gaps or self.tsnrs > config.storm_max_tsnrs:
            self.tripped = True
            return True
        return False

    @property
    def tsnrs(self) -> int:
        return sum(r[1] for r in self.recent)

    @property
    def gaps(self) -> int:
        return sum(r[2] if len(r) > 2 else 1 for r in self.recent)

    def resume(self) -> None:
        self.tripped = False
        self.recent = []

    def to_obj(self) -> list:
        return [self.tripped, self.recent]

    @classmethod
    def from_obj(cls, obj: list | None) -> Storm:
        return cls(bool(obj[0]), [list(r) for r in obj[1]]) if obj else cls()
