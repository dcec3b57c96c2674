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
    """The last N landed (tsnr, fingerprint) pairs: enough to drop duplicates, never history.

    A pair is a transaction's identity in any epoch (its fingerprint holds the commit time).
    A tsnr alone names a transaction only within an epoch — after STRT/REST numbering starts
    at 1 again (R8) — so ``contains_tsnr`` asks about the window's newest
    epoch only: ``epoch`` is the epoch of the last ``current`` entries (entries are added in
    epoch order: only the key's current epoch lands into the window).

    How it is kept: every entry has a serial number (``_n`` so far); the dicts map a pair, and
    a tsnr of the current epoch, to the serial of its newest entry, and an entry counts while
    its serial is among the window's last ``len`` (``current`` for tsnrs). Adding a pair is
    then a dict store done in C for a whole run (``extend``), and an entry leaving the window
    changes no dict: counting each pair in and out was four Python dict updates per landed
    transaction, ~10 % of a busy key's call. The dicts are rebuilt from the entries when they
    hold twice the window (old serials): at most twice the entries of counting in and out
    (a window may be 1,000,000), rebuilt once per window of new pairs."""

    __slots__ = ("_entries", "_n", "_pairs", "_tsnrs", "current", "epoch", "size")

    def __init__(self, size: int, entries: list[tuple[int, int]] | None = None,
                 epoch: int = 0, current: int | None = None) -> None:
        self.size = size
        self._entries: deque[tuple[int, int]] = deque(maxlen=size)
        self._n = 0
        self._pairs: dict[tuple[int, int], int] = {}
        self._tsnrs: dict[int, int] = {}
        self.epoch = epoch
        self.current = 0
        self.extend(list(entries or ()), epoch)
        if current is not None:
            self._recount_current(min(current, len(self._entries)))

    def __len__(self) -> int:
        return len(self._entries)

    def contains(self, tsnr: int, fp: int | None) -> bool:
        """The very transaction (tsnr and content) landed, in any epoch."""
        return fp is not None and self._pairs.get((tsnr, fp), -1) >= self._n - len(self._entries)

    def contains_tsnr(self, tsnr: int, epoch: int) -> bool:
        """A transaction numbered ``tsnr`` landed in ``epoch`` (among the window's)."""
        return epoch == self.epoch and self._tsnrs.get(tsnr, -1) >= self._n - self.current

    def add(self, tsnr: int, fp: int, epoch: int) -> None:
        self.extend([(tsnr, fp)], epoch)

    def extend(self, pairs: list[tuple[int, int]], epoch: int) -> None:
        """``add`` each pair in turn, trimming once (the fast path lands thousands a call):
        only the last ``size`` can still be in the window afterwards."""
        if not pairs:
            return
        self._enter(epoch)
        kept = pairs[-self.size:]
        first = self._n + len(pairs) - len(kept)
        self._n += len(pairs)
        self.current += len(pairs)
        self._entries.extend(kept)
        serials = range(first, self._n)
        self._pairs.update(zip(kept, serials, strict=True))
        self._tsnrs.update(zip(map(itemgetter(0), kept), serials, strict=True))
        self.resize(self.size)

    def _enter(self, epoch: int) -> None:
        """Entries of a newer epoch follow: the tsnrs landed so far name other transactions."""
        if epoch != self.epoch:
            self.epoch, self.current, self._tsnrs = epoch, 0, {}

    def _recount_current(self, current: int) -> None:
        self.current = current
        newest = list(self._entries)[len(self._entries) - current:]
        self._tsnrs = {t: i for i, (t, _) in enumerate(newest, start=self._n - current)}

    def resize(self, size: int) -> None:
        """Apply a (possibly changed) configured size, forgetting the oldest entries."""
        self.size = size
        if self._entries.maxlen != size:  # the deque drops its oldest beyond its maxlen
            self._entries = deque(self._entries, maxlen=size)
        entries = self._entries
        self.current = min(self.current, len(entries))
        if len(self._pairs) > 2 * max(size, 16):
            first = self._n - len(entries)
            self._pairs = {p: i for i, p in enumerate(entries, start=first)}
            self._recount_current(self.current)

    def to_obj(self) -> bytes:
        """Packed big-endian (tsnr, fingerprint) pairs: 8 bytes per entry."""
        return b"".join(struct.pack(">II", t, f) for t, f in self._entries)

    @classmethod
    def from_obj(cls, size: int, packed: bytes, epoch: int = 0,
                 current: int | None = None) -> DupWindow:
        """From ``to_obj`` and the window's epoch; ``current`` None (a state written before
        epochs were kept): every entry counts as the epoch's."""
        pairs = [struct.unpack_from(">II", packed, i) for i in range(0, len(packed), 8)]
        return cls(size, pairs[-size:], epoch, current)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, DupWindow) and list(self._entries) == list(other._entries)
                and (self.epoch, self.current) == (other.epoch, other.current))

    def __deepcopy__(self, memo: dict) -> DupWindow:
        return DupWindow(self.size, list(self._entries), self.epoch, self.current)


class Verdict(StrEnum):
    """Where a transaction's tsnr stands relative to the sequence."""

    INITIAL = "initial"          # tsnr 0: initial-state data, outside the sequence
    DUPLICATE = "duplicate"      # in the window (same content), or flagged resend of a landed tsnr
    REDELIVERY = "redelivery"    # behind the sequence, placed already: a copy from the transport
    EARLIER_EPOCH = "earlier_epoch"  # sent before the restart that began this epoch
    STALE = "stale"              # flagged resend behind the sequence, neither missing nor recent
    BASELINE = "baseline"        # first tsnr ever seen for the key: starts the sequence
    NEXT = "next"                # exactly the next expected tsnr
    AHEAD = "ahead"              # later than expected: the tsnrs between are missing
    FILL = "fill"                # a tsnr that an open gap is waiting for
    LATE_FILL = "late_fill"      # a tsnr of an ended gap, settled as lost: it lands after all
    RESTART = "restart"          # a new message going back: numbering restarted (no STRT seen)


@dataclass(frozen=True, slots=True)
class Sequence:
    """What a tsnr is judged against: the key's sequence as it stands, and what the
    transaction's message says of itself (both from the replicator's one clock)."""

    next_u: int | None
    window: DupWindow
    epoch: int
    is_missing: Callable[[int], bool]
    is_settled: Callable[[int], bool]
    #: its message was sent (URBHTIME) after every message seen on the destination: not a
    #: copy the transport delivered again
    fresh: bool = False
    #: it was sent (or, for a resend, processed) before the STRT/REST that began this epoch
    before_epoch: bool = False


def classify(tsnr: int, fp: int | None, flagged: bool, seq: Sequence
             ) -> tuple[Verdict, int | None]:
    """Decide what a tsnr means; returns the verdict and the unwrapped position if any.

    Within an epoch a tsnr names one transaction (the replicator numbers a subscription's
    transactions in the order it receives them; R3), so identity decides, never the
    commit time: URBTTTIM comes from the database's clock, a subscription may cover
    databases on machines whose clocks are not comparable (R9; seed 000's ``SFILE``/
    ``SFDBID``), and cluster nuclei commit concurrently.

    Evidence, in this order (a transaction already accounted for is never taken for new):
    the duplicate window (tsnr and content, any epoch); a message sent before the epoch's
    STRT/REST belongs to an earlier epoch; an open gap waiting for the position (FILL) or a
    settled one (LATE_FILL); a flagged resend of a tsnr landed in this epoch. Then the
    position: the next one or ahead is new, whatever its commit time. Behind the sequence,
    every position was placed, is missing or was settled, so one that is neither missing
    nor settled was placed: a copy (REDELIVERY) — unless its message is new (sent after
    everything seen on the destination, by the replicator's clock): a copy keeps the
    original's URBHTIME, so numbering restarted without a STRT/REST the job saw (RESTART).
    ``flagged`` (URBTRSND/URBTPTRN: "may have been sent before") never starts an epoch.
    """
    if tsnr == 0:
        return Verdict.INITIAL, None
    if seq.window.contains(tsnr, fp):
        return Verdict.DUPLICATE, None
    if seq.before_epoch:
        return Verdict.EARLIER_EPOCH, None
    if seq.next_u is None:
        return Verdict.BASELINE, tsnr
    u = unwrap(tsnr, seq.next_u)
    if seq.is_missing(u):
        return Verdict.FILL, u
    if seq.is_settled(u):
        return Verdict.LATE_FILL, u
    if flagged and seq.window.contains_tsnr(tsnr, seq.epoch):
        return Verdict.DUPLICATE, None
    back = u < seq.next_u or (tsnr == 1 and u - seq.next_u > WRAP_ZONE)
    if not back:
        return (Verdict.NEXT if u == seq.next_u else Verdict.AHEAD), u
    if flagged:
        return Verdict.STALE, u
    return (Verdict.RESTART, None) if seq.fresh else (Verdict.REDELIVERY, u)
