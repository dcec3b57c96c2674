"""The consistency watermark's rule, engine-free: how far a (destination, subscription) is whole.

The watermark of a key is a commit time W such that every transaction of the key committed at
or before W has landed, in every table, with no open gap before it. After each batch (its raw,
typed and lifecycle commits all done) the job advances it from what the batch brought:

* the commit times of the transactions it landed raise ``landed_max``, the newest commit time
  landed;
* a gap of transactions (``gaps`` kind ``tsnr``) that is open or requested holds the watermark
  at its *floor*: ``landed_max`` as it was before the batch that opened the gap, a commit time
  every transaction numbered before the gap had reached (the replicator numbers a
  subscription's transactions in the order it receives their commits). Transactions of that
  batch numbered before the gap are left out of the floor: the watermark is a little late
  then, never early;
* a gap that ends — filled, or given up (``unrecoverable``: its transactions are lost and an
  operator was told by a critical alert) — releases its hold.

So W is ``landed_max`` with no open gap, else the lowest floor of the open gaps; a gap whose
floor is unknown (open before the job kept watermarks) leaves W unknown (None) until it ends.

Applying a batch twice gives the state of applying it once (a gap already held keeps its
floor, ``landed_max`` is a maximum): a batch replayed after a crash cannot move the watermark
past a gap, whatever was written before the crash.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: Gap states that hold the watermark (``pipeline.reassembly.tables.GAP_STATES``).
OPEN_STATES = frozenset({"open", "requested"})


@dataclass(frozen=True)
class KeyMark:
    """What one key's watermark rests on. Times are Unix microseconds (UTC)."""

    landed_max: int | None = None
    #: open gap id → its floor (None: unknown)
    gaps: Mapping[str, int | None] = field(default_factory=dict)

    @property
    def watermark(self) -> int | None:
        """Every transaction committed at or before this time has landed (None: unknown)."""
        if not self.gaps:
            return self.landed_max
        floors = list(self.gaps.values())
        if any(f is None for f in floors):
            return None
        return min(f for f in floors if f is not None)

    @property
    def held_by(self) -> str | None:
        """The open gap that holds the watermark (the unknown floor, else the lowest)."""
        if not self.gaps:
            return None
        return min(self.gaps, key=lambda g: (self.gaps[g] is not None, self.gaps[g] or 0, g))


@dataclass(frozen=True)
class GapSeen:
    """A gap's last transition in a batch (its row with the greatest ``seq``)."""

    gap_id: str
    state: str
    kind: str = "tsnr"


def advance(mark: KeyMark, commits: Iterable[int | None], gaps: Iterable[GapSeen]) -> KeyMark:
    """The key's mark after a batch that landed transactions committed at ``commits`` and
    moved ``gaps`` to their states."""
    held = dict(mark.gaps)
    for gap in gaps:
        if gap.kind != "tsnr":
            continue  # a hole in message numbers: its transactions' own gaps hold it
        if gap.state in OPEN_STATES:
            held.setdefault(gap.gap_id, mark.landed_max)
        else:
            held.pop(gap.gap_id, None)
    times = [t for t in commits if t is not None]
    if mark.landed_max is not None:
        times.append(mark.landed_max)
    return KeyMark(max(times) if times else None, held)


def last_transitions(rows: Iterable[Mapping[str, object]]
                     ) -> dict[tuple[str, str], list[GapSeen]]:
    """Per (destination, subscription), each gap's last transition among a batch's ``gaps``
    rows (the greatest ``seq``, as the gaps table's readers take it)."""
    last: dict[tuple[str, str, str], tuple[int, GapSeen]] = {}
    for row in rows:
        key = (str(row["destination"]), str(row["subscription"]), str(row["gap_id"]))
        seq = int(row.get("seq") or 0)  # type: ignore[call-overload]
        if key not in last or seq >= last[key][0]:
            last[key] = (seq, GapSeen(key[2], str(row["state"]), str(row.get("kind") or "tsnr")))
    out: dict[tuple[str, str], list[GapSeen]] = {}
    for (dest, sub, _), (_, seen) in sorted(last.items()):
        out.setdefault((dest, sub), []).append(seen)
    return out
