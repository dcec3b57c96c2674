"""What one record does to its ISN's current-state row, and which change wins.

Why a version and not arrival order: transactions reach the job late (gap fills), twice
(duplicates on two destinations, replays) or as resends with before images only, and initial-
state pseudo-transactions race live updates. A current row therefore carries the version of the
change that wrote it — (commit_time, epoch, tsnr, rsnr), URBTTTIM first — and a change is applied
only if it orders strictly after the row. The order key is the version, then the destination
(one transaction sent to two destinations has one version) and then ``verified`` (the original
of a resent record wins over its before-images-only resend): equal keys are the same change seen
again, a no-op.

Why a row is a function of its newest change alone: the values of every row come from that
change's own image — the after image of an upsert, the before image of a delete or an unverify
(null when the replicator sent none or it did not decode). Carrying values over from the
previous row would make the result depend on arrival order (a late older upsert could not fix a
newer delete's values); taking them from the change makes any arrival order, duplicates
included, end in the state that applying the changes in version order gives.

``apply_change``/``apply_batch`` are the reference model of the Delta MERGE in
``pipeline.spark.typed.merge`` (the Spark test checks the tables against them). The model's state
holds every ISN the file has seen, deleted ones included:

* ``upsert``   (I/U/R with an after image): the after image, verified. An initial-state R
  record's version starts with the time it was read (``change_time``), not its
  pseudo-transaction's commit stamp, so it never overwrites a live change committed after the
  read.
* ``delete``   (D, or an initial-state R record with response 113: the ISN no longer exists,
  e.g. asked for after a resend but deleted since): ``deleted=True``. With
  ``deletes="mark"`` the row stays in the current table; with ``"remove"`` it is a
  *tombstone*: ``visible`` hides it (analysts see no deleted rows) and ``tombstones`` keeps
  its version in ``tombstones_<sub>_<fnr>``, so a late older change never resurrects the ISN.
  Tombstones whose commit time is more than ``retention`` older than the newest commit time
  of a batch that does not touch them are purged; after that a late change older than the
  delete can bring the row back.
* refresh/define file (``truncate``): the file was emptied at a cutoff, so every row older than
  it goes (tombstones too: the cutoff itself now buries every older change, a file-wide
  tombstone), and a change older than the cutoff that arrives afterwards (late, resent) is
  dropped (``apply_batch(..., cutoff=)``): it belongs to the file as it was before the refresh.
  Which comes first in a batch does not matter: the refresh removes what a pre-cutoff change
  of its own batch wrote, and later batches never apply one.
* ``unverify`` (I/U/R without a usable after image: a resend, before-images-only output, or an
  after image that did not decode): ``verified=False``; the next newer after image (live or
  initial state) makes the row verified again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

Action = Literal["upsert", "delete", "unverify"]
UPSERT: Action = "upsert"
DELETE: Action = "delete"
UNVERIFY: Action = "unverify"
RSP_ISN_NOT_FOUND = 113  # URBRRSP of an initial-state record whose ISN does not exist
DeleteMode = Literal["remove", "mark"]
Version = tuple[datetime, int, int, int]
OrderKey = tuple[Version, str, bool]
Row = Mapping[str, Any]

#: Columns a current row carries besides the decoded values.
VERSION_COLUMNS = ("commit_time", "epoch", "tsnr", "rsnr")
#: The version plus the columns that break ties between copies of one change.
ORDER_COLUMNS = (*VERSION_COLUMNS, "destination", "verified")
_EPOCH = datetime.min


def change_time(record_type: str, record_time: datetime | None,
                commit_time: datetime | None) -> datetime | None:
    """The time a record's change is versioned by (the ``commit_time`` of its rows).

    A live change happened when its transaction committed (URBTTTIM). An initial-state
    record (type R) was read at URBRTIME, while its pseudo-transaction's URBTTTIM is stamped
    after the last read of the chunk (seed 000: reads at .384870, .385851, .385855, URBTTTIM
    .385856): a live commit between a record's read and that stamp is newer than what was
    read, so the read time orders the R record against live changes.
    """
    if record_type == "R" and record_time is not None:
        return record_time
    return commit_time


def version_of(row: Row) -> Version:
    """(commit_time, epoch, tsnr, rsnr) of a change or a current row."""
    return (row["commit_time"] or _EPOCH, int(row["epoch"] or 0), int(row["tsnr"] or 0),
            int(row["rsnr"] or 0))


def is_verified(row: Row) -> bool:
    """A change is verified unless it is an unverify; a row says so in its column."""
    if "action" in row:
        return row["action"] != UNVERIFY
    return bool(row["verified"])


def order_key(row: Row) -> OrderKey:
    """Version, destination, verified: the total order in which changes win."""
    return version_of(row), str(row.get("destination") or ""), is_verified(row)


def newer(change: Row, current: Row | None) -> bool:
    """Whether ``change`` may overwrite ``current`` (strictly later order key, or no row)."""
    return current is None or order_key(change) > order_key(current)


def action_of(record_type: str, has_after: bool, rsp: int = 0) -> Action:
    """The effect of one URBR on the current row (see module doc). An initial-state record
    (R) with response 113 reports that the ISN no longer exists: a delete."""
    if record_type == "D" or (record_type == "R" and rsp == RSP_ISN_NOT_FOUND):
        return DELETE
    return UPSERT if has_after else UNVERIFY


def action_of_row(row: Row) -> Action:
    """The action that wrote a row (current, tombstone or history): inverse of ``row_of``."""
    if row["deleted"]:
        return DELETE
    return UPSERT if row["verified"] else UNVERIFY


def latest_per_isn(rows: Iterable[Row]) -> dict[int, Row]:
    """The newest change per ISN: MERGE needs at most one source row per target row."""
    best: dict[int, Row] = {}
    for row in rows:
        isn = int(row["isn"])
        if isn not in best or order_key(row) > order_key(best[isn]):
            best[isn] = row
    return best


def row_of(change: Row, values: Iterable[str], deletes: DeleteMode = "mark") -> dict[str, Any]:
    """The row one change writes: its own image's values, its version, its flags."""
    action = change["action"]
    tombstone = action == DELETE and deletes == "remove"
    return {"isn": int(change["isn"]),
            **{c: None if tombstone else change.get(c) for c in values},
            **{c: change[c] for c in VERSION_COLUMNS},
            "destination": change.get("destination"),
            "deleted": action == DELETE, "verified": action != UNVERIFY}


def apply_change(current: Row | None, change: Row, values: Iterable[str],
                 deletes: DeleteMode) -> dict[str, Any] | None:
    """The ISN's state after one change (None: never seen; deleted rows are tombstones)."""
    if not newer(change, current):
        return None if current is None else dict(current)
    return row_of(change, values, deletes)


def apply_batch(state: Mapping[int, Row], changes: Iterable[Row], values: Iterable[str],
                deletes: DeleteMode, retention: timedelta | None = None,
                cutoff: datetime | None = None) -> dict[int, dict[str, Any]]:
    """The file's state after one batch: newest change per ISN, applied, then tombstones purged.

    The state includes tombstones (``deleted`` rows in ``remove`` mode); ``visible`` is what
    the current table shows. ``retention`` None keeps tombstones for ever. ``cutoff``: the
    file's latest refresh/define cutoff known before the batch; older changes are dropped.
    """
    cols = list(values)
    batch = [c for c in changes if since_cutoff(c, cutoff)]
    out = {isn: dict(row) for isn, row in state.items()}
    applied: set[int] = set()
    for isn, change in latest_per_isn(batch).items():
        if newer(change, out.get(isn)):
            applied.add(isn)
            out[isn] = row_of(change, cols, deletes)
    if deletes == "remove" and retention is not None:
        horizon = purge_horizon(batch, retention)
        for isn in [i for i, r in out.items() if r["deleted"] and i not in applied]:
            stamp = out[isn]["commit_time"]
            if horizon is not None and stamp is not None and stamp < horizon:
                del out[isn]
    return out


def since_cutoff(change: Row, cutoff: datetime | None) -> bool:
    """Whether a change may still land after a refresh at ``cutoff`` (None: no refresh yet).

    Committed at or after the cutoff, as the truncate keeps rows ``commit_time >= cutoff``; a
    change without a commit time orders before any (``version_of``), so it is dropped.
    """
    if cutoff is None:
        return True
    stamp = change["commit_time"]
    return stamp is not None and stamp >= cutoff


def truncate(state: Mapping[int, Row], cutoff: datetime) -> dict[int, dict[str, Any]]:
    """The file's state after a refresh/define at ``cutoff``: rows (tombstones too) older go."""
    return {isn: dict(row) for isn, row in state.items() if since_cutoff(row, cutoff)}


def purge_horizon(changes: Iterable[Row], retention: timedelta) -> datetime | None:
    """Tombstones committed before this are purged: the batch's newest commit time - retention."""
    times = [c["commit_time"] for c in changes if c["commit_time"] is not None]
    return max(times) - retention if times else None


def visible(state: Mapping[int, Row], deletes: DeleteMode) -> dict[int, dict[str, Any]]:
    """The current table analysts see: without tombstones in ``remove`` mode."""
    return {isn: dict(row) for isn, row in state.items()
            if deletes == "mark" or not row["deleted"]}


def tombstones(state: Mapping[int, Row], deletes: DeleteMode) -> dict[int, Version]:
    """ISN → version of the delete that removed it (``remove`` mode only)."""
    if deletes == "mark":
        return {}
    return {isn: version_of(row) for isn, row in state.items() if row["deleted"]}
