"""The tsnr sequence of one key: wrap-around, the duplicate window and the verdict on a tsnr.

Positions are kept *unwrapped* (a 64-bit count that keeps growing across the wrap from
4294967295 back to 1), so gaps, held transactions and ordering never have to reason about the
wrap; only ``unwrap`` and ``to_tsnr`` translate between the wire and that count.
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from operator import itemgetter

RING = 0xFFFFFFFF  # number of valid tsnrs: 1 .. 4294967295 (0 is initial state)
HALF = RING // 2
# tsnr 1 while this close below the wrap is the wrap (with lost tsnrs), not a restart
WRAP_ZONE = 1 << 20


def to_tsnr(u: int) -> int:
    """The wire tsnr of an unwrapped position."""
    return (u - 1) % RING + 1


def unwrap(tsnr: int, ref_u: int) -> int:
    """The unwrapped position of ``tsnr`` nearest to ``ref_u`` (within half the ring);
    positions start at 1, so near the start of an epoch a large tsnr lies ahead."""
    d = (tsnr - to_tsnr(ref_u)) % RING
    if d > HALF and ref_u + d - RING >= 1:
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

    def extend(self, pairs: list[tuple[int, int]]) -> None:
        """``add`` each pair in turn, trimming once (the fast path lands thousands a call).

        Why two ways: counting a pair in and, later, out is four dict updates in Python per
        landed transaction (~10 % of a busy key's call); recounting the whole window is done
        in C (``Counter``). So a batch of at least a sixteenth of the window recounts it."""
        entries = self._entries
        entries.extend(pairs[-self.size:])
        if len(pairs) * 16 < self.size:
            for pair in pairs:
                _bump(self._pairs, pair, 1)
                _bump(self._tsnrs, pair[0], 1)
            self.resize(self.size)
            return
        for _ in range(len(entries) - self.size):
            entries.popleft()
        self._pairs = dict(Counter(entries))
        self._tsnrs = dict(Counter(map(itemgetter(0), entries)))

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

    INITIAL = "initial"          # tsnr 0: initial-state data, outside the sequence
    DUPLICATE = "duplicate"      # in the window (same content), or flagged resend of a landed tsnr
    REDELIVERY = "redelivery"    # committed no later than what landed: a copy from the transport
    STALE = "stale"              # flagged resend behind the sequence, neither missing nor recent
    BASELINE = "baseline"        # first tsnr ever seen for the key: starts the sequence
    NEXT = "next"                # exactly the next expected tsnr
    AHEAD = "ahead"              # later than expected: the tsnrs between are missing
    FILL = "fill"                # a tsnr that an open gap is waiting for
    LATE_FILL = "late_fill"      # a tsnr of an ended gap, settled as lost: it lands after all
    RESTART = "restart"          # going back with a newer commit time: a new epoch


@dataclass(frozen=True, slots=True)
class Sequence:
    """What a tsnr is judged against: the key's sequence as it stands."""

    next_u: int | None
    window: DupWindow
    newest_commit: int | None        # newest URBTTTIM placed (any epoch); None: none yet
    is_missing: Callable[[int], bool]
    is_settled: Callable[[int], bool]
    floor: int | None = None         # newest URBTTTIM placed before this epoch began


def classify(tsnr: int, fp: int | None, commit: int, flagged: bool,
             seq: Sequence) -> tuple[Verdict, int | None]:
    """Decide what a tsnr means; returns the verdict and the unwrapped position if any.

    Evidence, in this order (a transaction already accounted for is never taken for new):
    the duplicate window; an open gap waiting for the position (FILL) or a settled one
    (LATE_FILL) — unless committed before this epoch began (``floor``): an earlier epoch's
    transaction with the same number is not this one; then the commit time (URBTTTIM).
    The replicator sends a subscription's transactions in commit order (seed 001: tsnrs
    count them), so a transaction committed no later than the newest one placed was placed
    already: a copy a connector re-produced after a failure (at-least-once), however far
    back, is a REDELIVERY — never a restart and never a gap. Only a tsnr going back with a
    *newer* commit time is a restart.

    The rule also assumes the transport keeps the order the replicator sent in, within a
    partition: an MQ queue is FIFO, and Kafka keeps a producer's order when retries cannot
    overtake (``enable.idempotence`` or ``max.in.flight.requests.per.connection=1``). Kafka
    Connect's producers run without idempotence unless told (KAFKA-13759), librdkafka's too:
    a retried batch can be written after later ones, and its transactions then arrive
    "committed before the newest placed" and are kept in ``duplicates``, not landed. Mid-
    stream such a late tsnr fills the gap its successor opened; below the first tsnr placed
    in the epoch it cannot be told from a copy, so the machine marks it ``never landed`` and
    alerts (``transaction_unplaced``; the destination's message numbers give
    ``messages_unseen``) — tests/integration/test_fast_path.py
    ``test_a_topic_whose_first_messages_were_written_late_loses_them_on_both_paths_and_tells``
    shows it; README "How replicator output reaches Kafka" asks for the producer settings.

    Mistakes of this rule are on the safe side: a new transaction taken for a redelivery
    (two commits at the same STCK instant) leaves its tsnr missing, the next one opens a gap
    and the resend fills it. ``flagged`` (URBTRSND/URBTPTRN) never starts an epoch. A commit
    time of 0 (not set) is no evidence either way.
    """
    if tsnr == 0:
        return Verdict.INITIAL, None
    if seq.window.contains(tsnr, fp):
        return Verdict.DUPLICATE, None
    older = bool(commit) and seq.newest_commit is not None and commit <= seq.newest_commit
    if seq.next_u is None:
        if flagged and seq.window.contains_tsnr(tsnr):
            return Verdict.DUPLICATE, None
        return (Verdict.REDELIVERY, None) if older else (Verdict.BASELINE, tsnr)
    u = unwrap(tsnr, seq.next_u)
    # A tsnr an open gap waits for is filled even when an older epoch landed the same tsnr:
    # the window is not epoch-aware, the gap is (and the floor tells the epochs apart).
    earlier = bool(commit) and seq.floor is not None and commit <= seq.floor
    if seq.is_missing(u) and not earlier:
        return Verdict.FILL, u
    if seq.is_settled(u) and not earlier:
        return Verdict.LATE_FILL, u
    if flagged and seq.window.contains_tsnr(tsnr):
        return Verdict.DUPLICATE, None
    if older:
        return Verdict.REDELIVERY, u
    return _position(tsnr, u, seq.next_u, flagged)


def _position(tsnr: int, u: int, next_u: int, flagged: bool) -> tuple[Verdict, int | None]:
    """A transaction newer than everything placed: next, ahead, or (going back) a restart."""
    if u == next_u:
        return Verdict.NEXT, u
    back = u < next_u or (tsnr == 1 and u - next_u > WRAP_ZONE)
    if not back:
        return Verdict.AHEAD, u
    return (Verdict.STALE, u) if flagged else (Verdict.RESTART, None)
