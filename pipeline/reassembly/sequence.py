"""The tsnr sequence of one key: wrap-around, the duplicate window and the verdict on a tsnr.

Positions are kept *unwrapped* (a 64-bit count that keeps growing across the wrap from
4294967295 back to 1), so gaps, held transactions and ordering never have to reason about the
wrap; only ``unwrap`` and ``to_tsnr`` translate between the wire and that count.
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from collections.abc import Callable
from enum import StrEnum

RING = 0xFFFFFFFF  # number of valid tsnrs: 1 .. 4294967295 (0 is initial state)
HALF = RING // 2
# tsnr 1 while this close below the wrap is the wrap (with lost tsnrs), not a restart
WRAP_ZONE = 1 << 20


def to_tsnr(u: int) -> int:
    """The wire tsnr of an unwrapped position."""
    return (u - 1) % RING + 1


def unwrap(tsnr: int, ref_u: int) -> int:
    """The unwrapped position of ``tsnr`` nearest to ``ref_u`` (within half the ring)."""
    d = (tsnr - to_tsnr(ref_u)) % RING
    if d > HALF:
        d -= RING
    return ref_u + d


def fingerprint(commit_time: int, record_count: int, dbid: int) -> int:
    """A 32-bit identity of a transaction's content, the same in a resend as in the original.

    URBTTTIM is the ET time set by Adabas and does not change when the replicator resends, so
    (tsnr, fingerprint) tells a true duplicate from a new transaction that reuses a tsnr after
    a restart the consumer did not see.
    """
    packed = struct.pack(">QII", commit_time & 0xFFFFFFFFFFFFFFFF, record_count & 0xFFFFFFFF,
                         dbid & 0xFFFFFFFF)
    return zlib.crc32(packed)


class DupWindow:
    """The last N landed (tsnr, fingerprint) pairs: enough to drop duplicates, never history."""

    __slots__ = ("_entries", "_pairs", "_tsnrs", "size")

    def __init__(self, size: int, entries: list[tuple[int, int]] | None = None) -> None:
        self.size = size
        self._entries: deque[tuple[int, int]] = deque()
        self._pairs: dict[tuple[int, int], int] = {}
        self._tsnrs: dict[int, int] = {}
        for tsnr, fp in entries or ():
            self.add(tsnr, fp)

    def __len__(self) -> int:
        return len(self._entries)

    def contains(self, tsnr: int, fp: int | None) -> bool:
        return fp is not None and (tsnr, fp) in self._pairs

    def contains_tsnr(self, tsnr: int) -> bool:
        return tsnr in self._tsnrs

    def add(self, tsnr: int, fp: int) -> None:
        self._entries.append((tsnr, fp))
        _bump(self._pairs, (tsnr, fp), 1)
        _bump(self._tsnrs, tsnr, 1)
        self.resize(self.size)

    def resize(self, size: int) -> None:
        """Apply a (possibly changed) configured size, forgetting the oldest entries."""
        self.size = size
        while len(self._entries) > self.size:
            old = self._entries.popleft()
            _bump(self._pairs, old, -1)
            _bump(self._tsnrs, old[0], -1)

    def to_obj(self) -> bytes:
        """Packed big-endian (tsnr, fingerprint) pairs: 8 bytes per entry."""
        return b"".join(struct.pack(">II", t, f) for t, f in self._entries)

    @classmethod
    def from_obj(cls, size: int, packed: bytes) -> DupWindow:
        pairs = [struct.unpack_from(">II", packed, i) for i in range(0, len(packed), 8)]
        return cls(size, pairs[-size:])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DupWindow) and list(self._entries) == list(other._entries)

    def __deepcopy__(self, memo: dict) -> DupWindow:
        return DupWindow(self.size, list(self._entries))


def _bump(counts: dict, key: object, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)


class Verdict(StrEnum):
    """Where a transaction's tsnr stands relative to the sequence."""

    INITIAL = "initial"      # tsnr 0: initial-state data, outside the sequence
    DUPLICATE = "duplicate"  # in the window (same content), or flagged resend of a landed tsnr
    STALE = "stale"          # flagged resend behind the sequence, neither missing nor recent
    BASELINE = "baseline"    # first tsnr ever seen for the key: starts the sequence
    NEXT = "next"            # exactly the next expected tsnr
    AHEAD = "ahead"          # later than expected: the tsnrs between are missing
    FILL = "fill"            # a tsnr that an open gap is waiting for
    RESTART = "restart"      # back to 1, or backwards and not a duplicate: a new epoch


def classify(
    tsnr: int,
    fp: int | None,
    flagged: bool,
    next_u: int | None,
    window: DupWindow,
    is_missing: Callable[[int], bool],
) -> tuple[Verdict, int | None]:
    """Decide what a tsnr means; returns the verdict and the unwrapped position if any.

    ``flagged`` is URBTRSND or URBTPTRN: the replicator says this may be a repeat, so it never
    starts a new epoch.
    """
    if tsnr == 0:
        return Verdict.INITIAL, None
    if window.contains(tsnr, fp):
        return Verdict.DUPLICATE, None
    if next_u is None:
        if flagged and window.contains_tsnr(tsnr):
            return Verdict.DUPLICATE, None
        return Verdict.BASELINE, tsnr
    u = unwrap(tsnr, next_u)
    # A tsnr an open gap waits for is filled even when an older epoch landed the same tsnr:
    # the window is not epoch-aware, the gap is.
    if is_missing(u):
        return Verdict.FILL, u
    if flagged and window.contains_tsnr(tsnr):
        return Verdict.DUPLICATE, None
    if u == next_u:
        return Verdict.NEXT, u
    if flagged:
        return (Verdict.STALE if u < next_u else Verdict.AHEAD), u
    if u < next_u or (tsnr == 1 and u - next_u > WRAP_ZONE):
        return Verdict.RESTART, None
    return Verdict.AHEAD, u
