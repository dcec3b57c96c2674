"""The consistency watermark's rule, engine-free: how far each database of a subscription is whole.

What it claims. For a (destination, subscription, dbid) the watermark W says: every transaction
of that subscription from database ``dbid`` that committed at or before W has landed, in every
table, raw and typed. Commit times (URBTTTIM) are the database's own clock (seed 001, "About
Output Message Time Stamps"), so W is a time on that clock and is never compared with another
database's; the views that combine databases or subscriptions (``v_watermark_<sub>``,
``v_watermark``) take the earliest and say so.

Why it holds. The replicator numbers a subscription's transactions (tsnr, within an epoch) in
the order it receives them; within one database that is commit order, except that a cluster's
nuclei (URBTNUCI) hand their commits over up to a lag apart. Assumed, per database: *a
transaction is numbered before every transaction of its database that committed more than
``nucleus_lag`` after it* (conf ``stream.watermark.nucleus_lag_ms``; a plain nucleus numbers in
commit order, lag 0). Take the key's *prefix*: every position (epoch, tsnr) before the lowest
gap still open, all landed (or given up, below). A transaction not landed yet is numbered after
all of them, so it committed no earlier than ``newest - lag``, where ``newest`` is the newest
commit time of its database in the prefix. Hence

    W(dbid) = newest commit of dbid in the prefix - nucleus_lag - 1 µs

(1 µs below: two transactions may share a commit microsecond), never moving backwards. A
transaction landed beyond an open gap counts only once the gaps before it have ended, so W
never passes an open gap, whatever order the commit times are in.

How it is computed without keeping every transaction. The state task knows, after each call,
the key's open gaps; it reports per *bucket* — the prefix (``PREFIX``), or an open gap together
with the positions after it up to the next open gap — and per database the newest commit time
landed there (``call_newest``; the fast path lands only with no gap open, so its transactions
are always the prefix's). The driver keeps the buckets per key (``KeyMark``): when a gap ends
(filled, or given up — ``unrecoverable``: its transactions are lost and an operator was told by
a critical alert; one that still arrives lands below W as ``filled_late``) its bucket joins the
one before it, down to the prefix. Gaps of kind ``messages`` (a hole in URBHMSNR) hold nothing:
a transaction lost there is numbered after the prefix like any other not yet landed.
Initial-state pseudo-transactions (tsnr 0, outside the sequence) never move W.

Applying a batch twice gives the state of applying it once (buckets and W are maxima, gaps are
sets): a batch replayed after a crash cannot move W past a gap, whatever was written before.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pipeline.reassembly.sequence import unwrap

#: Gap states that hold the watermark (``pipeline.reassembly.tables.GAP_STATES``).
OPEN_STATES = frozenset({"open", "requested"})
#: The bucket of the transactions with no open gap before them.
PREFIX = ""
#: dbid → newest commit time (Unix µs)
Newest = Mapping[int, int]


def gap_position(gap_id: str) -> tuple[int, int]:
    """(epoch, unwrapped first position) of a tsnr gap's id (``Gap.gap_id``: "epoch:from")."""
    epoch, _, start = gap_id.partition(":")
    return int(epoch), int(start)


def _merge(into: dict[int, int], newest: Newest) -> None:
    for dbid, us in newest.items():
        if us > into.get(dbid, us - 1):
            into[dbid] = us


# -- the state task's side ---------------------------------------------------------------------

def prefix_newest(into: dict[int, int], dbids: Iterable[int], commits: Iterable[int | None],
                  initial: Iterable[bool]) -> None:
    """Add transactions that landed with no gap open (the fast path's) to ``into``."""
    for dbid, us, inst in zip(dbids, commits, initial, strict=True):
        if us is not None and not inst and us > into.get(dbid, us - 1):
            into[dbid] = us


def call_newest(prefix: Newest, landed: Iterable[tuple[int, int, int, int | None]],
                gaps: Sequence[tuple[int, int, str]]) -> list[list[int | str]]:
    """One state call's report: ``[bucket, dbid, newest commit µs]`` rows.

    ``prefix``: newest commits of the transactions the call landed with no gap open;
    ``landed``: (epoch, tsnr, dbid, commit µs) of the others (the machine's, initial state
    left out); ``gaps``: (epoch, from position, gap id) of the key's open gaps after the call.
    A transaction goes to the last open gap at or before its position, else to the prefix."""
    starts = sorted(gaps)
    buckets: dict[str, dict[int, int]] = {PREFIX: dict(prefix)} if prefix else {}
    for epoch, tsnr, dbid, us in landed:
        if us is None:
            continue
        ref = next((u for e, u, _ in starts if e == epoch), None)
        at = (epoch, unwrap(tsnr, ref) if ref is not None else tsnr, "\uffff")
        i = bisect.bisect_right(starts, at)
        _merge(buckets.setdefault(starts[i - 1][2] if i else PREFIX, {}), {dbid: us})
    return [[bucket, dbid, us] for bucket, newest in sorted(buckets.items())
            for dbid, us in sorted(newest.items())]


# -- the driver's side -------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyMark:
    """What one (destination, subscription)'s watermarks rest on. Times are Unix µs (UTC).

    ``prefix``: per dbid, the newest commit of the prefix; ``gaps``: each open tsnr gap's
    bucket (per dbid, the newest commit landed from the gap up to the next open gap);
    ``marks``: per dbid, the watermark."""

    prefix: Newest = field(default_factory=dict)
    gaps: Mapping[str, Newest] = field(default_factory=dict)
    marks: Newest = field(default_factory=dict)

    @property
    def held_by(self) -> str | None:
        """The lowest open gap: what keeps later transactions out of the prefix."""
        return min(self.gaps, key=gap_position) if self.gaps else None

    def dbids(self) -> list[int]:
        """Every database the key has landed a transaction of."""
        seen = set(self.prefix) | {d for bucket in self.gaps.values() for d in bucket}
        return sorted(seen)


@dataclass(frozen=True)
class GapSeen:
    """A gap's last transition in a batch (its row with the greatest ``seq``)."""

    gap_id: str
    state: str
    kind: str = "tsnr"


def _target(gap_id: str, open_ids: Sequence[str]) -> str:
    """Where a bucket belongs: itself while its gap is open, else the last open gap before
    it, else the prefix (``open_ids`` sorted by position)."""
    if gap_id == PREFIX or gap_id in open_ids:
        return gap_id
    at = gap_position(gap_id)
    before = [g for g in open_ids if gap_position(g) < at]
    return before[-1] if before else PREFIX


def advance(mark: KeyMark, newest: Iterable[Sequence[int | str]], gaps: Iterable[GapSeen],
            lag_us: int) -> KeyMark:
    """The key's mark after a batch whose state calls reported ``newest`` (``call_newest``
    rows) and that moved ``gaps`` to their states; ``lag_us``: the nucleus lag."""
    still = dict(mark.gaps)
    for gap in gaps:
        if gap.kind != "tsnr":
            continue  # a hole in message numbers: its transactions are after the prefix
        if gap.state in OPEN_STATES:
            still.setdefault(gap.gap_id, {})
        else:
            still.pop(gap.gap_id, None)
    open_ids = sorted(still, key=gap_position)
    buckets: dict[str, dict[int, int]] = {g: dict(still[g]) for g in open_ids}
    buckets[PREFIX] = dict(mark.prefix)
    for gap_id, bucket in mark.gaps.items():  # an ended gap's bucket joins the one before
        if gap_id not in still:
            _merge(buckets[_target(gap_id, open_ids)], bucket)
    for gap_id, dbid, us in newest:
        _merge(buckets[_target(str(gap_id), open_ids)], {int(dbid): int(us)})
    prefix = buckets.pop(PREFIX)
    marks = dict(mark.marks)
    _merge(marks, {dbid: us - lag_us - 1 for dbid, us in prefix.items()})
    return KeyMark(prefix, buckets, marks)


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
