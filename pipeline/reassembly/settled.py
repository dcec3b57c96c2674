"""Tsnrs given up on: remembered (bounded) so that a late arrival lands as a late fill.

A gap's tsnr is *settled* when the job stops waiting for it: a TRSP error for it, the verdict
after the last request round, the open-gap cap, the part of a gap too wide to ask for, a new
epoch. The transaction may still come — a resend answered late, a message a stalled or
redelivering connector produces after all — and it never landed, so it must land then (a
*late fill*), not be dropped as a duplicate. Every position below the key's next expected
tsnr is landed, missing (an open gap) or settled; this module keeps the settled ones, as
ranges with the gap they belonged to, so the machine can tell them from landed ones.

Bounded: at most ``MAX_RANGES`` ranges (the oldest are forgotten first; a forgotten tsnr that
arrives later is then taken for a redelivery of a landed one). Ranges compress: a gap settled
whole is one range however wide.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.reassembly.sequence import to_tsnr, unwrap

MAX_RANGES = 4096


@dataclass(slots=True)
class GivenUp:
    """Settled positions as ``[epoch, from_u, to_u, gap_id]`` ranges, oldest first."""

    ranges: list[list] = field(default_factory=list)

    def add(self, epoch: int, from_u: int, to_u: int, gap_id: str) -> None:
        """Remember ``from_u``..``to_u`` of ``epoch`` as settled (merging with a neighbour)."""
        last = self.ranges[-1] if self.ranges else None
        if last is not None and last[0] == epoch and last[3] == gap_id and last[2] + 1 == from_u:
            last[2] = to_u
        else:
            self.ranges.append([epoch, from_u, to_u, gap_id])
        del self.ranges[:max(0, len(self.ranges) - MAX_RANGES)]

    def find(self, epoch: int, u: int) -> str | None:
        """The gap id of settled position ``u`` of ``epoch``, or None."""
        for e, lo, hi, gap_id in self.ranges:
            if e == epoch and lo <= u <= hi:
                return gap_id
        return None

    def lowest(self, epoch: int, lo: int, hi: int) -> int | None:
        """The lowest settled position of ``epoch`` in ``lo..hi``, or None (``find`` over a
        run of positions at once: the fast path checks thousands)."""
        found = [max(a, lo) for e, a, b, _gap_id in self.ranges
                 if e == epoch and a <= hi and b >= lo]
        return min(found) if found else None

    def find_tsnr(self, tsnr: int, epoch: int) -> tuple[int, str] | None:
        """(position, gap id) of wire ``tsnr`` settled in ``epoch``, or None."""
        for e, lo, hi, gap_id in reversed(self.ranges):
            if e == epoch:
                u = unwrap(tsnr, lo)
                if lo <= u <= hi and to_tsnr(u) == tsnr:
                    return u, gap_id
        return None

    def remove(self, epoch: int, u: int) -> None:
        """Forget position ``u`` (it landed after all), splitting its range."""
        for i, (e, lo, hi, gap_id) in enumerate(self.ranges):
            if e == epoch and lo <= u <= hi:
                parts = [[e, a, b, gap_id] for a, b in ((lo, u - 1), (u + 1, hi)) if a <= b]
                self.ranges[i:i + 1] = parts
                return

    def remaining(self, epoch: int, gap_id: str, limit: int = 1000) -> list[int]:
        """Wire tsnrs of a gap still settled (for a late fill's report), the first ``limit``."""
        out: list[int] = []
        for e, lo, hi, g in self.ranges:
            if e == epoch and g == gap_id:
                out += [to_tsnr(u) for u in range(lo, min(hi, lo + limit - len(out) - 1) + 1)]
            if len(out) >= limit:
                break
        return out

    def to_obj(self) -> list[list]:
        return [list(r) for r in self.ranges]

    @classmethod
    def from_obj(cls, obj: list[list] | None) -> GivenUp:
        return cls([list(r) for r in obj or []])
