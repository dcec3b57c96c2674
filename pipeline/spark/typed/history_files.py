"""Direct typed writer, the history table's files: which files a batch rewrites, and how.

Why not a delta-rs MERGE: a MERGE writes the rows it copies, updates and inserts into one new
file and removes every file it matched. A batch matches the open version of every ISN it
touches, and after the first MERGE every row lives in that one file: each batch rewrote the
whole history (measured: one 20 MB file of 663,000 rows rewritten every batch at 20,000
messages per batch, the typed step growing ~1 s a batch).

So the writer keeps the table in two kinds of files and rewrites only what a batch changes:

* open rows (``valid_to`` null: each ISN's newest version) in files of at most
  ``OPEN_ROWS`` rows, sorted by ISN, so a file covers an ISN range and a batch rewrites only
  the open files whose range holds an ISN it touches;
* closed rows in files that a later batch rewrites only when a late change lands before one
  of their versions (a file whose newest ``valid_to`` is at or after the batch's earliest
  change, and whose ISN range holds a touched ISN).

A batch reads those files (Delta statistics, ``get_add_actions``, pick them), recomputes the
touched ISNs' versions (``pipeline.typed.frames.history_rows``), and commits one Delta
transaction: a ``remove`` of each file read, an ``add`` of each new file (with the rows it
did not change copied), and the batch's ``txn``. Statistics are written for the columns that
prune files (integers, short strings, timestamps: min rounded down and max up to the
millisecond, as Delta keeps them) and null counts; a reader skips nothing it should not.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.spark.land.datafiles import dictionary_columns
from pipeline.typed.frames import VERSION, history_rows

if TYPE_CHECKING:
    import pyarrow as pa

#: Open rows per file at most (an ISN range per file: a batch rewrites the ranges it touches).
OPEN_ROWS = 50_000
#: Delta's ``dataSkippingStringPrefixLength``: longer strings get no min/max here.
STRING_PREFIX = 32
_MS = 1000


@dataclass(frozen=True)
class Landed:
    """What a batch's history commit wrote: its new or changed versions, and the rows of
    the files it replaced that it copied unchanged into the new ones."""

    written: int
    copied: int


def land_history(table: Any, new: pa.Table, cutoffs_us: tuple[int, ...], app_id: str,
                 batch_id: int, commit: Any) -> Landed:
    """The batch's versions (``frames.with_flags`` columns) into the history ``table``
    (delta-rs); nothing changed: no commit."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = pa.schema(table.schema().to_arrow())  # the table's: GFFT versions add columns
    isns = np.unique(new.column("isn").to_numpy(zero_copy_only=False))
    stamps = pc.cast(new.column("commit_time"), pa.int64())
    earliest = None if stamps.null_count else pc.min(stamps).as_py()
    root = table.table_uri.removeprefix("file://").rstrip("/")
    files, held, mine = _held(root, _candidates(table, isns, earliest), schema, isns, earliest)
    written = history_rows(held.take(pa.array(mine)), new, cutoffs_us).select(schema.names)
    if not written.num_rows:
        return Landed(0, 0)
    replaced = mine[_in_keys(held.take(pa.array(mine)), written)]
    keep = np.ones(held.num_rows, bool)
    keep[replaced] = False
    rows = pa.concat_tables([held.filter(pa.array(keep)), written.cast(schema)])
    from deltalake.transaction import RemoveAction

    now = int(time.time() * 1000)
    sizes = _sizes(table)
    actions: list[Any] = [RemoveAction(path, True, now, sizes.get(path)) for path in files]
    actions += _write(root, rows)
    table.create_write_transaction(actions, "append", schema, commit_properties=commit)
    return Landed(written.num_rows, int(np.count_nonzero(keep)))


def _held(root: str, candidates: list[str], schema: pa.Schema, isns: np.ndarray,
          earliest: int | None) -> tuple[list[str], pa.Table, np.ndarray]:
    """The candidate files that hold a row the batch may change (their ISN is touched, and
    they are open or end at or after ``earliest``), their rows, and those rows' indexes.
    A candidate without one stays as it is: statistics are bounds, and with commit times
    closer than the 1 ms slack of ``_candidates`` the previous batch's closed file is always
    a candidate, though in commit order no row of it moves."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    cut = (None if earliest is None
           else pa.scalar(earliest, pa.int64()).cast(schema.field("valid_to").type))
    value_set = pa.array(isns)
    files, parts, hits = [], [schema.empty_table()], [np.zeros(0, np.int64)]
    start = 0
    key_schema = pa.schema([schema.field("isn"), schema.field("valid_to")])
    for path in candidates:  # a file Spark wrote may keep its times in other units
        keys = _conform(pq.read_table(f"{root}/{path}", columns=key_schema.names), key_schema)
        touched = pc.is_in(keys.column("isn"), value_set=value_set)
        if cut is not None:
            touched = pc.and_(touched, pc.or_(pc.is_null(keys.column("valid_to")),
                                              pc.fill_null(pc.greater_equal(
                                                  keys.column("valid_to"), cut), False)))
        hit = np.flatnonzero(touched.to_numpy(zero_copy_only=False))
        if not len(hit):  # its two key columns read, not the file
            continue
        rows = _conform(pq.read_table(f"{root}/{path}"), schema)
        files.append(path)
        parts.append(rows)
        hits.append(hit + start)
        start += rows.num_rows
    return files, pa.concat_tables(parts), np.concatenate(hits)


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """A file's rows in the table's schema: columns added after it was written are null."""
    import pyarrow as pa

    return pa.table([data.column(f.name).cast(f.type) if f.name in data.column_names
                     else pa.nulls(data.num_rows, f.type) for f in schema], schema=schema)


def _sizes(table: Any) -> dict[str, int]:
    import pyarrow as pa

    adds = pa.table(table.get_add_actions(flatten=True))
    return dict(zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(),
                    strict=True))


def _candidates(table: Any, isns: np.ndarray, earliest: int | None) -> list[str]:
    """The files that may hold a row the batch changes: an ISN of ``isns`` in their range,
    and an open row or a ``valid_to`` at or after ``earliest`` (statistics missing: yes)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    adds = pa.table(table.get_add_actions(flatten=True))
    if not adds.num_rows:
        return []
    names = adds.column_names

    def stat(name: str, kind: pa.DataType) -> tuple[np.ndarray, np.ndarray]:
        if name not in names:
            n = adds.num_rows
            return np.zeros(n, bool), np.zeros(n, np.int64)
        col = pc.cast(adds.column(name), kind)
        return (pc.is_valid(col).to_numpy(zero_copy_only=False),
                pc.fill_null(col, 0).to_numpy(zero_copy_only=False))

    has_lo, lo = stat("min.isn", pa.int64())
    has_hi, hi = stat("max.isn", pa.int64())
    start = np.searchsorted(isns, lo, side="left")
    end = np.searchsorted(isns, hi, side="right")
    overlaps = ~(has_lo & has_hi) | (end > start)
    has_open, open_rows = stat("null_count.valid_to", pa.int64())
    has_to, max_to = stat("max.valid_to", pa.int64())
    if earliest is None:  # a change without a commit time: any version may move
        recent = np.ones(adds.num_rows, bool)
    else:  # a max kept to the millisecond may be up to 1 ms short of the row's
        recent = ~has_open | (open_rows > 0) | ~has_to | (max_to + _MS >= earliest)
    return adds.column("path").filter(pa.array(overlaps & recent)).to_pylist()


def _key(table: pa.Table) -> pa.Table:
    """(isn, version) as five int64 columns, a null as INT64_MIN (nulls equal, as the
    MERGE's ``IS NOT DISTINCT FROM``; no real value is INT64_MIN)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    low = np.iinfo(np.int64).min
    return pa.table({c: pc.fill_null(pc.cast(table.column(c), pa.int64()), low)
                     for c in ("isn", *VERSION)})


def _in_keys(rows: pa.Table, keys_of: pa.Table) -> np.ndarray:
    """Which of ``rows`` have the (isn, version) of a row of ``keys_of``."""
    import pyarrow as pa

    left = _key(rows).append_column("_row", pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    hit = left.join(_key(keys_of), ["isn", *VERSION], join_type="left semi")
    out = np.zeros(rows.num_rows, bool)
    out[hit.column("_row").to_numpy()] = True
    return out


def _write(root: str, rows: pa.Table) -> list[Any]:
    """The rows as new files: open ones sorted by ISN in files of ``OPEN_ROWS``, closed ones
    in one file; their ``add`` actions."""
    import pyarrow.compute as pc

    is_open = pc.is_null(rows.column("valid_to"))
    closed = rows.filter(pc.invert(is_open))
    open_rows = rows.filter(is_open)
    open_rows = open_rows.take(pc.sort_indices(open_rows, sort_keys=[("isn", "ascending")]))
    parts = [closed] if closed.num_rows else []
    parts += [open_rows.slice(i, OPEN_ROWS) for i in range(0, open_rows.num_rows, OPEN_ROWS)]
    return [_add(root, part) for part in parts]


def _add(root: str, part: pa.Table) -> Any:
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    name = f"part-{uuid.uuid4()}-c000.snappy.parquet"
    path = f"{root}/{name}"
    pq.write_table(part, path, compression="snappy", use_dictionary=dictionary_columns(part.schema))
    info = Path(path).stat()
    return AddAction(name, info.st_size, {}, int(info.st_mtime * 1000), True,
                     json.dumps(stats(part), separators=(",", ":")))


def stats(data: pa.Table) -> dict[str, Any]:
    """Delta statistics of one file's rows: the record count, null counts of the top-level
    scalar columns, and min/max where they prune exactly (integers, strings of at most
    ``STRING_PREFIX`` characters, timestamps to the millisecond: min down, max up)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in data.column_names:
        column = data.column(name)
        kind = column.type
        if pa.types.is_nested(kind):
            continue
        nulls[name] = column.null_count
        if column.null_count == len(column):
            continue
        if pa.types.is_integer(kind):
            bounds = pc.min_max(column)
            low[name], high[name] = bounds["min"].as_py(), bounds["max"].as_py()
        elif pa.types.is_string(kind):
            bounds = pc.min_max(column)
            lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
            if len(lo) <= STRING_PREFIX and len(hi) <= STRING_PREFIX:
                low[name], high[name] = lo, hi
        elif pa.types.is_timestamp(kind):
            bounds = pc.min_max(pc.cast(column, pa.int64()))
            lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
            low[name] = _iso_ms(lo // _MS)
            high[name] = _iso_ms(-(-hi // _MS))
    return {"numRecords": data.num_rows, "minValues": low, "maxValues": high,
            "nullCount": nulls}


def _iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as Delta writes a timestamp statistic."""
    from datetime import UTC, datetime, timedelta

    stamp = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"
