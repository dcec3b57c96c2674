"""The typed tables' rules on Arrow tables: one configured file's batch, column at a time.

Why a second expression of ``versioning`` and ``history``: those are the reference model, a
dict per row; the direct typed writer (``pipeline.spark.typed.file_writer``) lands a file's
batch in a Python task, tens of thousands of changes at a time, so it needs the same rules on
columns (pyarrow and numpy, no Python loop per row). The Spark MERGEs (``pipeline.spark.typed``
``merge``/``history``) say them a third time, in SQL. The engine-free tests hold all three to
the model (``tests/unit/typed/test_frames.py``).

Order keys compare as Spark compares the MERGE's ``named_struct``: field by field, a null
before any value (``_greater``). A change is a row with ``isn``, the value columns, ``action``,
``verified`` and ``META``; a current, tombstone or history row is what the tables hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

#: A change's columns besides the values (``pipeline.spark.typed.tables.META``).
META = ("subscription", "destination", "epoch", "tsnr", "rsnr", "commit_time", "record_type",
        "origin")
VERSION = ("commit_time", "epoch", "tsnr", "rsnr")
ORDER = (*VERSION, "destination", "verified")
DELETE, UPSERT, UNVERIFY = "delete", "upsert", "unverify"

Key = list[tuple[np.ndarray, np.ndarray]]  # per column: (valid, values)


def _column(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(valid mask, values) of one order column as numpy: timestamps as µs, text as object."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name)
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    if pa.types.is_timestamp(col.type):
        col = pc.cast(col, pa.int64())
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        values = pc.fill_null(col, "").to_numpy(zero_copy_only=False).astype(object)
    elif pa.types.is_boolean(col.type):
        values = pc.fill_null(col, False).to_numpy(zero_copy_only=False).astype(np.int8)
    else:
        values = pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return valid, values


def order_key(table: pa.Table, *, verified: bool | None = None) -> Key:
    """The ORDER columns of ``table``; ``verified``: a constant instead of the column (a
    tombstone compares as verified, ``merge._order(verified="true")``)."""
    key = [_column(table, c) for c in ORDER[:-1]]
    if verified is None:
        key.append(_column(table, "verified"))
    else:
        n = table.num_rows
        key.append((np.ones(n, bool), np.full(n, int(verified), np.int8)))
    return key


def greater(left: Key, right: Key) -> np.ndarray:
    """Row-wise ``left > right`` in the lexicographic order Spark gives structs (nulls first)."""
    n = len(left[0][0])
    out = np.zeros(n, bool)
    equal = np.ones(n, bool)
    for (lv, lx), (rv, rx) in zip(left, right, strict=True):
        both = lv & rv
        gt = (lv & ~rv) | (both & (lx > rx))
        same = (~lv & ~rv) | (both & (lx == rx))
        out |= equal & gt
        equal &= same
    return out


def sort_indices(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Row order by ``columns`` ascending, nulls first, stable (ties keep table order)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = table.select(list(columns)).append_column(
        "_row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    keys = [(c, "ascending", "at_start") for c in [*columns, "_row"]]
    return pc.sort_indices(rows, sort_keys=keys).to_numpy()


def group_starts(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """For rows already sorted by ``columns``: True where a new group begins (nulls equal)."""
    n = table.num_rows
    starts = np.zeros(n, bool)
    if n:
        starts[0] = True
    for name in columns:
        valid, values = _column(table, name)
        differ = np.zeros(n, bool)
        differ[1:] = (valid[1:] != valid[:-1]) | (valid[1:] & (values[1:] != values[:-1]))
        starts |= differ
    return starts


def _repeated(table: pa.Table, columns: Sequence[str]) -> np.ndarray | None:
    """Rows whose ``columns`` (nulls equal) another row shares; None when no row does (the
    common case, found with one hash aggregation instead of a sort)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = table.select(list(columns))
    counts = keys.group_by(list(columns)).aggregate([([], "count_all")])
    if counts.num_rows == table.num_rows:
        return None
    if any(keys.column(c).null_count for c in columns):  # a join never matches nulls
        return np.ones(table.num_rows, bool)
    many = counts.filter(pc.greater(counts.column("count_all"), 1)).select(list(columns))
    rows = keys.append_column("_row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    hit = rows.join(many, list(columns), join_type="left semi")
    mask = np.zeros(table.num_rows, bool)
    mask[hit.column("_row").to_numpy()] = True
    return mask


def last_per_group(table: pa.Table, group: Sequence[str], order: Sequence[str]) -> pa.Table:
    """One row per ``group``: the greatest by ``order`` (nulls first; the later row of equal
    ones), as ``row_number() over (partition by group order by order desc) = 1``. Rows come
    in no particular order."""
    import pyarrow as pa

    if not table.num_rows:
        return table
    repeated = _repeated(table, group)
    if repeated is None:
        return table
    many = table.filter(pa.array(repeated))
    ordered = many.take(sort_indices(many, [*group, *order]))
    ends = np.append(group_starts(ordered, group)[1:], True)
    return pa.concat_tables([table.filter(pa.array(~repeated)), ordered.filter(ends)])


def sorted_last(table: pa.Table, group: Sequence[str], order: Sequence[str]) -> pa.Table:
    """``last_per_group``'s rows, sorted by ``group``: one sort by the group, then only the
    rows of repeated groups sorted by ``order`` too (a history batch's versions are nearly
    all distinct: no hash aggregation to find that out)."""
    import pyarrow as pa

    ordered = table.take(sort_indices(table, group))
    starts = group_starts(ordered, group)
    if starts.all():
        return ordered
    ends = np.append(starts[1:], True)
    repeated = np.flatnonzero(~(starts & ends))  # rows of groups of two or more
    rows = ordered.take(pa.array(repeated)).select([*order]).append_column(
        "_group", pa.array(np.cumsum(starts)[repeated])).append_column(
        "_at", pa.array(repeated))
    ranked = rows.take(sort_indices(rows, ["_group", *order]))  # stable: table order last
    last = np.append(group_starts(ranked, ["_group"])[1:], True)
    keep = starts & ends
    keep[ranked.column("_at").to_numpy()[last]] = True
    return ordered.filter(pa.array(keep))


def occurrence(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """1 for the first row of its ``keys`` in table order, 2 for the next …: the n-th
    initial-state pseudo-transaction of a key (``pipeline.spark.typed.changes._occurrence``).
    Only the rows of repeated keys are sorted."""
    import pyarrow as pa

    occ = np.ones(table.num_rows, np.int64)
    repeated = _repeated(table, keys) if table.num_rows else None
    if repeated is None:
        return occ
    rows = np.flatnonzero(repeated)
    some = table.take(pa.array(rows))
    order = sort_indices(some, keys)
    starts = group_starts(some.take(order), keys)
    position = np.arange(len(rows))
    first = np.maximum.accumulate(np.where(starts, position, 0))
    within = np.empty(len(rows), np.int64)
    within[order] = position - first + 1
    occ[rows] = within
    return occ


def since_cutoff(changes: pa.Table, cutoffs_us: Sequence[int]) -> pa.Table:
    """The changes committed at or after the file's latest refresh cutoff (null: dropped)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not cutoffs_us:
        return changes
    stamp = pc.cast(changes.column("commit_time"), pa.int64())
    return changes.filter(pc.fill_null(pc.greater_equal(stamp, int(cutoffs_us[-1])), False))


def merge_source(changes: pa.Table) -> pa.Table:
    """One change per ISN, the newest by order key (``merge.merge_source``)."""
    return last_per_group(changes, ["isn"], ORDER)


def _matched(source: pa.Table, target: pa.Table, *, verified: bool | None = None
             ) -> tuple[np.ndarray, Key]:
    """For each source row: whether ``target`` has its ISN, and that row's order key (rows
    without one compare as all-null). ``target`` holds at most one row per ISN."""
    import pyarrow as pa
    import pyarrow.compute as pc

    where = pc.fill_null(pc.index_in(source.column("isn"), value_set=target.column("isn")),
                         -1).to_numpy(zero_copy_only=False).astype(np.int64)
    found = where >= 0
    # no target rows: the source's own values stand in, all marked absent
    rows = target.take(pa.array(np.where(found, where, 0))) if target.num_rows else source
    return found, [(valid & found, values)
                   for valid, values in order_key(rows, verified=verified)]


def unburied(source: pa.Table, current: pa.Table, tombstones: pa.Table) -> pa.Table:
    """``merge.unburied``: newer than the ISN's tombstone and not older than its current row
    (the same set before and after the current table's MERGE)."""
    key = order_key(source)
    has_tomb, tomb = _matched(source, tombstones, verified=True)
    has_cur, cur = _matched(source, current)
    keep = (~has_tomb | greater(key, tomb)) & (~has_cur | ~greater(cur, key))
    return source.filter(keep)


def current_ops(source: pa.Table, current: pa.Table, deletes: str) -> np.ndarray:
    """What ``merge.merge_current`` does with each source row: ``update``, ``insert``,
    ``delete`` or ``None`` (nothing: not newer, or a removed ISN's delete)."""
    action = source.column("action").to_numpy(zero_copy_only=False)
    found, cur = _matched(source, current)
    newer = greater(order_key(source), cur)
    is_delete = action == DELETE
    ops = np.full(source.num_rows, None, dtype=object)
    ops[found & newer] = "update"
    if deletes == "remove":
        ops[found & newer & is_delete] = "delete"
        ops[~found & ~is_delete] = "insert"
    else:
        ops[~found] = "insert"
    return ops


def with_flags(changes: pa.Table, batch_id: int) -> pa.Table:
    """Changes with the columns a row of the tables adds: ``deleted`` and ``batch_id``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    deleted = pc.equal(changes.column("action"), DELETE)
    return (changes.append_column("deleted", deleted)
            .append_column("batch_id", pa.array(np.full(changes.num_rows, batch_id, np.int64))))


def tombstones_after(source: pa.Table, tombstones: pa.Table,
                     horizon_us: int | None) -> tuple[pa.Table, bool]:
    """The tombstone table after ``merge.merge_tombstones`` with this source (``with_flags``'
    columns), and whether it changed; rows in ``tombstones``' schema."""
    import pyarrow as pa
    import pyarrow.compute as pc

    action = source.column("action").to_numpy(zero_copy_only=False)
    found, tomb = _matched(source, tombstones, verified=True)
    newer = greater(order_key(source), tomb)
    is_delete = action == DELETE
    drop_isns = set(source.column("isn").filter(pa.array(found & newer)).to_pylist())
    put = source.filter(pa.array((found & newer & is_delete) | (~found & is_delete)))
    keep = ~pc.is_in(tombstones.column("isn"), value_set=pa.array(
        list(drop_isns), pa.int64())).to_numpy(zero_copy_only=False)
    if horizon_us is not None:
        untouched = ~pc.is_in(tombstones.column("isn"),
                              value_set=source.column("isn")).to_numpy(zero_copy_only=False)
        stamp = pc.cast(tombstones.column("commit_time"), pa.int64())
        old = pc.fill_null(pc.less(stamp, int(horizon_us)), False).to_numpy(
            zero_copy_only=False)
        keep &= ~(untouched & old)
    kept = tombstones.filter(pa.array(keep))
    new = put.select(kept.schema.names).cast(kept.schema)
    changed = bool(put.num_rows) or kept.num_rows != tombstones.num_rows
    return pa.concat_tables([kept, new]), changed


def closed_at(commit_us: np.ndarray, valid: np.ndarray, following: np.ndarray,
              following_valid: np.ndarray, cutoffs_us: Sequence[int]
              ) -> tuple[np.ndarray, np.ndarray]:
    """``valid_to`` (µs, valid mask): the next version's commit time or the first cutoff after
    the version's own commit time, whichever is earlier (``history.closed_at``)."""
    end, has = following.copy(), following_valid.copy()
    if cutoffs_us:
        cuts = np.asarray(sorted(cutoffs_us), np.int64)
        i = np.searchsorted(cuts, commit_us, side="right")
        capped = valid & (i < len(cuts))
        cap = cuts[np.minimum(i, len(cuts) - 1)]
        take_cap = capped & (~has | (cap < end))
        end = np.where(take_cap, cap, end)
        has = has | capped
    return end, has


def history_rows(old: pa.Table, new: pa.Table, cutoffs_us: Sequence[int]) -> pa.Table:
    """``history.history_source`` and the rows ``history.merge_history`` writes: every version
    of the ISNs in ``new`` (one copy per version: the greatest destination, then verified, an
    existing row before a new one), with ``valid_from``/``valid_to``/``is_current``; only the
    rows that are new or whose winning copy or interval changed. ``old``: the ISNs' existing
    rows, or at least every row whose ``valid_to`` is open or not before the earliest commit
    time in ``new`` (a suffix of each ISN's versions: the rest cannot change)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [c for c in old.schema.names if c not in ("valid_from", "valid_to", "is_current")]
    both = pa.concat_tables([
        old.select(names).append_column("_new", pa.array(np.zeros(old.num_rows, np.int8))),
        new.select(names).cast(old.select(names).schema).append_column(
            "_new", pa.array(np.ones(new.num_rows, np.int8)))])
    both = (both.append_column("_old_to", pa.concat_arrays([
        pc.cast(old.column("valid_to"), pa.int64()).combine_chunks(),
        pa.nulls(new.num_rows, pa.int64())]))
        .append_column("_old_current", pa.concat_arrays([
            old.column("is_current").combine_chunks(), pa.nulls(new.num_rows, pa.bool_())])))
    both = both.append_column("_neg_new", pc.negate(both.column("_new")))
    # winners: per (isn, version) the greatest destination, then verified, then _new 0
    chosen = sorted_last(both, ["isn", *VERSION], ["destination", "verified", "_neg_new"])
    valid, commit = _column(chosen, "commit_time")
    isn = chosen.column("isn").to_numpy(zero_copy_only=False)
    n = chosen.num_rows
    same_next = np.zeros(n, bool)
    same_next[:-1] = isn[1:] == isn[:-1]
    following = np.zeros(n, np.int64)
    following_valid = np.zeros(n, bool)
    following[:-1] = commit[1:]
    following_valid[:-1] = valid[1:] & same_next[:-1]
    end, has_end = closed_at(commit, valid, following, following_valid, cutoffs_us)
    ts = chosen.schema.field("commit_time").type
    valid_to = pa.array(end, pa.int64(), mask=~has_end).cast(ts)
    old_valid, old_end = _column(chosen, "_old_to")
    _, old_current = _column(chosen, "_old_current")
    changed = ((chosen.column("_new").to_numpy(zero_copy_only=False) == 1)
               | (old_valid != has_end) | (has_end & (old_end != end))
               | (old_current.astype(bool) == has_end))
    out = (chosen.append_column("valid_from", chosen.column("commit_time"))
           .append_column("valid_to", valid_to)
           .append_column("is_current", pa.array(~has_end)))
    return out.filter(pa.array(changed)).select([*names, "valid_from", "valid_to",
                                                 "is_current"])
