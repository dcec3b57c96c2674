"""SCD type 2 history of a file: one row per distinct version of each ISN, with its interval.

Why recompute instead of append-and-close: a late change (gap fill, initial state racing live
updates) lands *between* two existing versions and must split that interval; a duplicate must
change nothing. So a batch recomputes the whole history of every ISN it touches — the ISN's
existing history rows plus the batch's changes, one row per version (the same order key as the
current table picks the copy that wins), sorted by version — and the table takes the result:
new versions are inserted, rows whose interval or winning copy changed are updated.

The history table is its own source: each row holds the values of its change's own image and
its flags (``versioning.row_of``), so a row turns back into the change that wrote it
(``versioning.action_of_row``). ``changes_*`` would not do: a record whose images did not
decode, or that had none, is in no ``changes_*`` row but still writes a version.

A row: the decoded values, ``valid_from`` (its commit time), ``valid_to`` (the next version's
commit time; null while current), ``is_current``, ``deleted``, ``verified`` and the version
columns. Intervals are half-open, ``[valid_from, valid_to)``; two versions committed in one
transaction give the first an empty interval. Deletes are history rows with ``deleted=True``
whatever the file's ``deletes`` mode, so "as of" queries filter ``NOT deleted``.

A refresh/define file empties the file at its cutoff: the versions older than a cutoff end at
it at the latest (``valid_to = least(next version, first cutoff after valid_from)``), so the
row open at a refresh is closed there (``truncate_history``) and a late change from before a
refresh lands as a closed interval, never as a current one. A version is current when its
interval is open (``valid_to`` null). The cutoffs are the file's ``truncated_before`` values.

``history_of``/``apply_history_batch``/``truncate_history`` are the reference model of the
history MERGE in ``pipeline.spark.typed.history`` and of the refresh in
``pipeline.spark.typed.lifecycle``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .versioning import Row, Version, action_of_row, order_key, row_of, version_of

HistoryKey = tuple[int, Version]


def as_change(row: Row) -> Row:
    """A change, or a history row turned back into the change that wrote it."""
    return row if "action" in row else {**row, "action": action_of_row(row)}


def winners(changes: Iterable[Row]) -> dict[HistoryKey, Row]:
    """One change per (ISN, version): the copy with the greatest order key."""
    best: dict[HistoryKey, Row] = {}
    for change in map(as_change, changes):
        key = (int(change["isn"]), version_of(change))
        if key not in best or order_key(change) > order_key(best[key]):
            best[key] = change
    return best


def closed_at(start: datetime | None, following: datetime | None,
              cutoffs: Sequence[datetime] = ()) -> datetime | None:
    """``valid_to`` of a version committed at ``start``: the next version's commit time or
    the first refresh cutoff after ``start``, whichever is earlier (None: still current)."""
    ends = sorted(cutoffs)
    i = bisect_right(ends, start) if start is not None else 0
    cut = ends[i] if i < len(ends) else None
    candidates = [t for t in (following, cut) if t is not None]
    return min(candidates) if candidates else None


def history_of(changes: Iterable[Row], values: Iterable[str],
               cutoffs: Sequence[datetime] = ()) -> dict[HistoryKey, dict[str, Any]]:
    """The history rows of every ISN in ``changes``, from scratch."""
    cols = list(values)
    chosen = winners(changes)
    by_isn: dict[int, list[HistoryKey]] = {}
    for key in chosen:
        by_isn.setdefault(key[0], []).append(key)
    out: dict[HistoryKey, dict[str, Any]] = {}
    for keys in by_isn.values():
        keys.sort(key=lambda k: k[1])
        for i, key in enumerate(keys):
            nxt = keys[i + 1] if i + 1 < len(keys) else None
            row = row_of(chosen[key], cols)
            end = closed_at(row["commit_time"], chosen[nxt]["commit_time"] if nxt else None,
                            cutoffs)
            out[key] = {**row, "valid_from": row["commit_time"], "valid_to": end,
                        "is_current": end is None}
    return out


def apply_history_batch(table: Mapping[HistoryKey, Row], changes: Iterable[Row],
                        values: Iterable[str], cutoffs: Sequence[datetime] = (),
                        ) -> dict[HistoryKey, dict[str, Any]]:
    """The history table after one batch: the touched ISNs recomputed from their rows + changes
    (``cutoffs``: the file's refresh cutoffs known before the batch)."""
    batch = list(changes)
    touched = {int(c["isn"]) for c in batch}
    kept = {k: dict(r) for k, r in table.items() if k[0] not in touched}
    mine = [r for k, r in table.items() if k[0] in touched]
    return {**kept, **history_of([*mine, *batch], values, cutoffs)}


def truncate_history(table: Mapping[HistoryKey, Row], cutoff: datetime,
                     ) -> dict[HistoryKey, dict[str, Any]]:
    """The history after a refresh/define at ``cutoff``: versions older than it that were
    still open, or open past it, end at the cutoff. Nothing is deleted: it is history."""
    out: dict[HistoryKey, dict[str, Any]] = {}
    for key, row in table.items():
        start, end = row["valid_from"], row["valid_to"]
        if start is not None and start < cutoff and (end is None or end > cutoff):
            out[key] = {**row, "valid_to": cutoff, "is_current": False}
        else:
            out[key] = dict(row)
    return out
